"""The SGLang server command line for one route launched from the plan.

Built from SGLang's documented server flags (``python -m sglang.launch_server``;
docs "Speculative Decoding": ``--speculative-algorithm`` EAGLE / EAGLE3 / NEXTN /
STANDALONE / NGRAM, ``--speculative-draft-model-path``, ``--speculative-num-steps``,
``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``). A chain draft
(top-k 1) of depth ``k`` is ``num_steps = k`` and ``num_draft_tokens = k + 1``, so
``GET /get_server_info`` reports ``speculative_num_steps = k``, the depth
:mod:`deepseekbench._execute._served_config` reads back. Not run here (no SGLang on
this CPU); tested against a fake server. What remains for a GPU run: start it once
with a real checkpoint and check the flags and the version field.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["SGLANG_ALGORITHMS", "SGLANG_MODULE", "sglang_server_args"]

SGLANG_MODULE = "sglang.launch_server"

SGLANG_ALGORITHMS: dict[str, str] = {
    "mtp": "EAGLE",  # DeepSeek MTP (NextN) runs through SGLang's EAGLE worker
    "eagle3": "EAGLE3",
    "draft": "STANDALONE",
    "ngram": "NGRAM",
}
"""The ``--speculative-algorithm`` per speculative method (deepseekbench's names)."""


def sglang_server_args(
    *,
    python: Path,
    model: str,
    served_model_name: str,
    port: int | str,
    algorithm: str | None,
    depth: int | None,
    draft_model: str | None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The full argv of an SGLang server on ``127.0.0.1:port`` (no shell quoting).

    ``algorithm``: the ``--speculative-algorithm`` value (``None``: speculation
    off); ``depth``: draft tokens per verify step (a chain: top-k 1, ``depth + 1``
    tokens verified); ``extra``: appended verbatim.
    """
    args = [
        os.fspath(python), "-m", SGLANG_MODULE,
        "--model-path", model,
        "--served-model-name", served_model_name,
        "--host", "127.0.0.1",
        "--port", str(port),
    ]  # fmt: skip
    if algorithm is not None:
        args += ["--speculative-algorithm", algorithm]
        if draft_model is not None:
            args += ["--speculative-draft-model-path", draft_model]
        if depth is not None:
            args += [
                "--speculative-num-steps", str(depth),
                "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", str(depth + 1),
            ]  # fmt: skip
    return args + list(extra)
