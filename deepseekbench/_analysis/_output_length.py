"""Output-length figures of a row: how much was decoded past EOS.

The calibration pass (``deepseekbench._execute._calibrate``) records the
``off`` route's natural output length of every (cell, item, turn). A measured
request of that item decoded ``n`` tokens; the tokens past the natural end are
``max(0, n − natural)``. A row's :func:`tokens_past_eos` is their sum over the
sum of its measured output tokens: 0 when every route decoded its natural
length (``pinned``), large when decoding was forced past EOS (``forced``),
where acceptance is measured on text the model would not have written. A count
alone can hide one token past the end: an engine that counts the EOS token
(vLLM) and is asked for ``min_tokens`` = the natural length masks that EOS and
decodes another token in its place, same count, more text; a request whose text
runs on past the natural answer counts at least that one token.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from deepseekbench._records._figures import output_tokens
from deepseekbench._records._measurement import StreamMeasurement

__all__ = ["short_of_natural", "tokens_past_eos"]


def tokens_past_eos(
    measured: Iterable[tuple[str | None, int, StreamMeasurement]],
    natural: Mapping[tuple[str, int], StreamMeasurement],
) -> float | None:
    """Share of output tokens past the natural end (ratio in [0, 1]).

    Args:
        measured: ``(item id, turn, measurement)`` of a row's requests; errored
            ones and those with an unknown item or count are skipped.
        natural: the calibration outputs of the row's cell by ``(item id, turn)``.

    Returns:
        ``sum(max(0, n − natural)) / sum(n)`` over the requests with a
        calibration, a request whose answer runs on past the natural answer's
        end (the calibration stopped at EOS) counting at least 1 token past it
        even where the counts are equal; ``None`` when none has one (or none
        decoded a token).
    """
    past = total = 0
    for item, turn, m in measured:
        cal = natural.get((item, turn)) if item is not None else None
        n = output_tokens(m) if m.error is None else None
        base = output_tokens(cal) if cal is not None and cal.error is None else None
        if n is None or base is None:
            continue
        assert cal is not None
        past += max(n - base, 1 if _runs_past_its_end(m, cal) else 0)
        total += n
    return past / total if total else None


def _runs_past_its_end(m: StreamMeasurement, cal: StreamMeasurement) -> bool:
    """Whether ``m``'s answer is the calibration's whole natural answer (ended at its
    own EOS, ``finish_reason`` ``stop``) with more text after it: at least one token
    was decoded past that end, whatever the counts say (a masked EOS replaced by
    another token leaves the count unchanged where the engine counts EOS)."""
    if cal.finish_reason != "stop" or (m.reasoning_text or None) != (cal.reasoning_text or None):
        return False
    return len(m.text) > len(cal.text) and m.text.startswith(cal.text)


def short_of_natural(
    measured: Iterable[tuple[str | None, int, StreamMeasurement]],
    natural: Mapping[tuple[str, int], StreamMeasurement],
) -> int:
    """Successful requests that decoded fewer tokens than their pinned (natural)
    length, or an unknown count: a pinned route that stopped early (requests).

    A request without a calibration (unknown item) is judged short when its count
    is unknown only.
    """
    short = 0
    for item, turn, m in measured:
        if m.error is not None:
            continue
        n = output_tokens(m)
        cal = natural.get((item, turn)) if item is not None else None
        base = output_tokens(cal) if cal is not None else None
        if n is None or (base is not None and n < max(1, base)):
            short += 1
    return short
