"""Session fixtures of the real-engine tests: generated models and four llama-server routes.

Routes (one server process each, all on 127.0.0.1):

* ``off``      - speculation off (baseline);
* ``draft``    - ``--spec-type draft-simple --spec-draft-model <1-layer draft>``;
* ``ngram``    - ``--spec-type ngram-simple`` with 3-token lookups (self-speculative, no
  draft model);
* ``mistuned`` - the draft route with ``--spec-synth-len``: drafts accepted at a chosen
  rate without valid verification, so its text diverges from ``off``.

Models are generated into ``$DEEPSEEKBENCH_ENGINE_CACHE`` (default ``<repo>/.engine-cache``,
git-ignored). Server logs go to the session's temp folder. A missing llama-server is a
test *error* (these tests exist to exercise it), not a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from anyio.from_thread import start_blocking_portal

from deepseekbench import LlamaServerSpec, RunningLlamaServer, find_llama_server, llama_servers
from tests.engine.gguf_models import EngineModels, ensure_models

REPO = Path(__file__).resolve().parents[2]
DRAFT_N_MAX = 4
MISTUNED_SYNTH_LEN = 4.5  # mean accepted length incl. the target token, of at most 5
# ngram-simple defaults look up 12-token n-grams, which random-weight text never repeats.
NGRAM_ARGS = ("--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8")


def engine_cache_dir() -> Path:
    """``$DEEPSEEKBENCH_ENGINE_CACHE`` or ``<repo>/.engine-cache``."""
    env = os.environ.get("DEEPSEEKBENCH_ENGINE_CACHE")
    return Path(env) if env else REPO / ".engine-cache"


def route_specs(models: EngineModels) -> list[LlamaServerSpec]:
    """The four routes over the generated target/draft pair."""
    return [
        LlamaServerSpec.off("off", models.target),
        LlamaServerSpec.draft("draft", models.target, models.draft, draft_n_max=DRAFT_N_MAX),
        LlamaServerSpec.ngram("ngram", models.target, "ngram-simple", extra_args=NGRAM_ARGS),
        LlamaServerSpec.mistuned(
            "mistuned",
            models.target,
            models.draft,
            synth_len=MISTUNED_SYNTH_LEN,
            draft_n_max=DRAFT_N_MAX,
        ),
    ]


@pytest.fixture(scope="session")
def engine_models() -> EngineModels:
    """Generated target, draft and target-with-nextn GGUF files (cached across runs).

    Needs the ``gguf`` package; its absence is an error here, not a skip.
    """
    return ensure_models(engine_cache_dir() / "models")


@pytest.fixture(scope="session")
def engine_routes(
    engine_models: EngineModels, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, RunningLlamaServer]]:
    """The four running routes by name; every server is stopped at session end."""
    binary = find_llama_server()
    log_dir = tmp_path_factory.mktemp("llama-server-logs")
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(
            llama_servers(route_specs(engine_models), log_dir=log_dir, binary=binary)
        ) as running,
    ):
        yield running


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each ``pytest.mark.anyio`` test under asyncio and under trio."""
    return str(request.param)
