"""The DeepSeek API (``dialect = "deepseek"``).

* Request: ``thinking: {"type": "enabled"|"disabled"}`` plus top-level
  ``reasoning_effort: "high"|"max"`` when enabled (DeepSeek API docs,
  thinking mode). No EOS override.
* Response: no acceptance figures, no server times, no ``/metrics``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from deepseekbench._dialects._base import EngineDialect, effort, thinking
from deepseekbench._types._axes import ReasoningMode

__all__ = ["DIALECT", "DeepseekDialect"]


class DeepseekDialect(EngineDialect):
    """The DeepSeek API's controls (module docstring)."""

    name: ClassVar[str] = "deepseek"
    teacher_forcing_refusal: ClassVar[str] = "the DeepSeek API serves no prompt logprobs"

    def reasoning_controls(self, mode: ReasoningMode) -> dict[str, Any]:
        """``thinking.type`` enabled/disabled, plus ``reasoning_effort`` when set."""
        body: dict[str, Any] = {"thinking": {"type": "enabled" if thinking(mode) else "disabled"}}
        level = effort(mode)
        if level is not None:
            body["reasoning_effort"] = level
        return body


DIALECT = DeepseekDialect()
