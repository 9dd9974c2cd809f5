"""The embedded reference engine: a loopback OpenAI-compatible server whose
speculative decoding is a real draft/verify loop over a small generated-corpus LM.

See ``docs/engine.md``. Public names are re-exported from ``deepseekbench``.
"""

from deepseekbench._engine._config import EngineConfig
from deepseekbench._engine._costs import FAST_COSTS, CostModel
from deepseekbench._engine._embedded import (
    EmbeddedEngine,
    add_serve_arguments,
    config_from_args,
    serve,
)
from deepseekbench._engine._faults import FAULT_HEADER, FaultConfig, FaultKind
from deepseekbench._engine._metrics import EngineCounters
from deepseekbench._engine._server import ChunkSend
from deepseekbench._engine._tasks import EngineTask, all_reference_tasks, reference_tasks

__all__ = [
    "FAST_COSTS",
    "FAULT_HEADER",
    "ChunkSend",
    "CostModel",
    "EmbeddedEngine",
    "EngineConfig",
    "EngineCounters",
    "EngineTask",
    "FaultConfig",
    "FaultKind",
    "add_serve_arguments",
    "all_reference_tasks",
    "config_from_args",
    "reference_tasks",
    "serve",
]
