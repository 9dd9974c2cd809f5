"""What an engine says about its deterministic mode.

Bit-exact parity between a speculative route and ``off`` needs an engine whose
numerics do not change with batch shape; some engines have a mode for it and say
whether it is on. The run records, per route, what was learned:

- **server**: the engine reported it. SGLang's ``GET /get_server_info`` returns its
  server arguments, ``enable_deterministic_inference`` among them (a ``ServerArgs``
  field, set by ``--enable-deterministic-inference``; sglang
  ``python/sglang/srt/server_args.py``).
- **plan**: the plan declared it (``[[routes]] deterministic = true``) for an engine
  that does not report it (vLLM ``VLLM_BATCH_INVARIANT=1``, say: docs/engines.md).
- **unknown**: neither.

A route whose server answers wins over its declaration: the record is what the
engine served, not what the plan hoped.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from deepseekbench._types._axes import _ClosedEnum

__all__ = ["DeterminismSource", "EngineDeterminism"]


class DeterminismSource(_ClosedEnum):
    """Where a route's deterministic mode came from (see the module docstring)."""

    server = "server"
    plan = "plan"
    unknown = "unknown"


class EngineDeterminism(BaseModel):
    """One route's engine deterministic mode (a results-file record part).

    Attributes:
        deterministic: ``True`` on, ``False`` off, ``None`` unknown.
        source: :class:`DeterminismSource`.
        detail: where it was read, e.g. ``SGLang /get_server_info
            enable_deterministic_inference``; ``""`` when unknown.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    deterministic: bool | None = None
    source: DeterminismSource = DeterminismSource.unknown
    detail: str = ""

    @property
    def mode(self) -> str:
        """``on``, ``off`` or ``unknown``."""
        return {True: "on", False: "off", None: "unknown"}[self.deterministic]

    def describe(self) -> str:
        """``on (server: SGLang /get_server_info ...)``, ``off (plan)`` or ``unknown``."""
        if self.source is DeterminismSource.unknown:
            return self.mode
        where = f"{self.source.value}: {self.detail}" if self.detail else self.source.value
        return f"{self.mode} ({where})"
