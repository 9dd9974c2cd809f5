"""The distribution witness's follow-ups: ``off`` scores each sampled output in one pass.

After measurement, each output :func:`~deepseekbench._analysis._witness_tasks.witness_tasks`
chose (every route's, ``off``'s own included) is sent to the ``off`` route only, as one
teacher-forcing request, on the sampled token ids where the route's engine returned them
(:func:`~deepseekbench._execute._teacher_force_ids.score_token_ids`: the prompt's ids,
then the prompt and sampled ids scored in one pass), else on the output's text
(:func:`~deepseekbench._execute._teacher_force.score_output`: the output appended as a
final assistant message, ``prompt_logprobs``); the speculative route is never asked.
Server misbehaviour, a deadline, a size cap or a gate refusal gives the recorded
reason, never a crash.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import anyio
import httpx

from deepseekbench._execute._teacher_force import score_output
from deepseekbench._execute._teacher_force_ids import score_token_ids
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._records._follow_up import FollowUp
from deepseekbench._types._scored import ScoredOutput

__all__ = ["MAX_SCORE_BYTES", "score_outputs"]

MAX_SCORE_BYTES: Final[int] = 64 * 1024 * 1024
"""Size cap of one scoring answer (bytes): ~20 alternatives of ~60 bytes per position
leave room for outputs of tens of thousands of tokens."""


async def score_outputs(
    tasks: Sequence[FollowUp],
    *,
    off: EngineRoute,
    gate: LiveGate,
    client: httpx.AsyncClient,
    timeout_s: float,
    top_k: int,
    concurrency: int = 4,
    max_bytes: int = MAX_SCORE_BYTES,
) -> list[tuple[FollowUp, ScoredOutput | str]]:
    """Ask ``off`` once per task (``concurrency`` in flight; ``timeout_s`` seconds and
    ``max_bytes`` each request) for its RAW top-``top_k`` at every token of the task's
    output: on ``candidate_ids`` when the task has them (two requests), else on its text.

    Returns:
        ``(task, scored output or the reason it was not)`` pairs in ``tasks`` order.

    Raises:
        ValueError: ``top_k`` out of the wire's range, or a non-positive ``timeout_s``.
    """
    out: list[ScoredOutput | str] = [""] * len(tasks)
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def one(i: int, f: FollowUp) -> None:
        async with limiter:
            if f.candidate_ids is not None:
                out[i] = await score_token_ids(
                    off,
                    f.request,
                    f.candidate_ids,
                    top_k=top_k,
                    client=client,
                    gate=gate,
                    timeout_s=timeout_s,
                    max_bytes=max_bytes,
                )
                return
            out[i] = await score_output(
                off,
                f.request,
                f.candidate_text,
                top_k=top_k,
                client=client,
                gate=gate,
                timeout_s=timeout_s,
                max_bytes=max_bytes,
            )

    async with anyio.create_task_group() as tg:
        for i, f in enumerate(tasks):
            tg.start_soon(one, i, f)
    return list(zip(tasks, out, strict=True))
