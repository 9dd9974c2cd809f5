"""The scorecard's output-length note: rows measured past EOS.

A row whose ``tokens_past_eos`` is above 0 decoded text after the ``off``
route's natural end of the same prompt (``workload.output_length = "forced"``):
its acceptance is measured on a continuation the model would not have written,
and does not predict acceptance on real answers (AIPerf's SPEED-Bench guide;
ai-dynamo/dynamo #12918).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["past_eos_notes"]


def past_eos_notes(lines: Iterable[tuple[str, float | None]]) -> list[str]:
    """One note per ``(where, tokens_past_eos)`` with a share above 0, e.g.
    ``! mtp @ 1k/256/non_think: acceptance measured on text past EOS (62% of output
    tokens past off's natural end)``."""
    return [
        f"! {where}: acceptance measured on text past EOS ({share:.0%} of output tokens "
        "past off's natural end; workload.output_length = 'pinned' measures real answers)"
        for where, share in lines
        if share is not None and share > 0
    ]
