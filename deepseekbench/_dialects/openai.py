"""Other OpenAI-compatible hosts (``dialect = "openai"``).

* Request: top-level ``reasoning_effort`` = ``"high"``/``"max"`` when thinking,
  nothing for ``non_think`` (the host's default applies): ``reasoning_effort:
  "none"`` is answered HTTP 400 by hosts that do not accept that value or the
  field for the model (Kilo-Org/cloud PR #3807), and a dialect never sends a
  field the caller did not ask for that a host may refuse (send it with
  ``EngineRoute.request_extras`` where a host needs it). No EOS override
  (hosted APIs offer none).
* Response: no acceptance figures, no server times, no ``/metrics``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from deepseekbench._dialects._base import EngineDialect, effort
from deepseekbench._types._axes import ReasoningMode

__all__ = ["DIALECT", "OpenaiDialect"]


class OpenaiDialect(EngineDialect):
    """A plain OpenAI-compatible host (module docstring)."""

    name: ClassVar[str] = "openai"
    teacher_forcing_refusal: ClassVar[str] = "the OpenAI chat API serves no prompt logprobs"

    def reasoning_controls(self, mode: ReasoningMode) -> dict[str, Any]:
        """``{"reasoning_effort": "high"|"max"}`` when thinking with an effort, else ``{}``."""
        level = effort(mode)
        return {"reasoning_effort": level} if level is not None else {}


DIALECT = OpenaiDialect()
