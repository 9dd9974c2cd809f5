"""Issue 22: which clock a speed verdict is judged on.

``client``: the times the measuring client stamped on arrival (TTFT, TPOT as the
standard definitions say; they include network and client delay). ``server``: the
engine's own per-request timings (vLLM ``metrics``: ``time_to_first_token_ms``,
``mean_itl_ms``; llama.cpp ``timings``: ``prompt_ms``, ``predicted_per_token_ms``),
which exclude the network and the client.
"""

from __future__ import annotations

from deepseekbench._types._axes import _ClosedEnum

__all__ = ["CLOCK_TOLERANCE", "Clock"]

CLOCK_TOLERANCE = 0.25
"""How far (as a ratio, 0.25 = 25 %) a client-clock speedup may differ from the
server-clock speedup of the same rows before the client's verdict is withheld
(refusal ``clock_disagreement``)."""


class Clock(_ClosedEnum):
    """The clock a speedup is judged on: ``client`` (default) or ``server``."""

    client = "client"
    server = "server"
