"""Mooncake-style trace replay: real arrival times and prefix structure.

A trace is a JSONL file, one request a line (the Mooncake FAST'25 format, as
AIPerf's and GuideLLM's trace replay read it):

* ``timestamp``: the request's arrival, ms from the trace's start (non-decreasing;
  at most :data:`MAX_TRACE_SPAN_MS` after the first line's);
* ``input_length``: prompt tokens (at most :data:`MAX_CONTEXT_TOKENS`);
* ``output_length``: output tokens (the item's output cap, see below; at most
  :data:`MAX_CONTEXT_TOKENS`);
* ``hash_ids``: the prompt's blocks of ``block_tokens`` tokens (Mooncake: 512), each
  named by an integer; two requests whose lists open with the same ids share
  that many leading blocks, i.e. a prefix of that many tokens.

Replay (:class:`TracePlan`): each line becomes one single-turn item whose prompt
is the text of its blocks in order, every block id always the same generated
text of ``block_tokens`` tokens (so shared ids are shared text, and a prefix
cache sees them), the last block cut so the prompt counts at most
``input_length`` tokens with the plan's tokenizer (token-true, as synthetic
prompts are; a prompt ends at a word boundary, so it may count a few tokens
less). Each item is sent at ``(timestamp - first timestamp) / speedup`` ms after
its block's start (an open loop; the load point's concurrency caps the requests
in flight); a cell with more requests than lines replays the trace again after
its last arrival plus one mean gap. Rows name the trace file and factor
(``Row.trace``, ``Row.trace_speedup``).

``output_length`` becomes each item's output cap (``WorkloadItem.output_tokens``,
one turn): ``workload.output_length`` then decides whether a request stops at EOS
under it (``natural``), decodes all of it (``forced``) or decodes ``off``'s natural
length under it (``pinned``, the default).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._errors import WorkloadFormatError
from deepseekbench._plan._workload import (
    MAX_CONTEXT_TOKENS,
    WorkloadItem,
    _fit,
    _jsonl_objects,
    generated_text,
)
from deepseekbench._types._tokens import TokenCounter

__all__ = [
    "MAX_TRACE_SPAN_MS",
    "TRACE_CATEGORY",
    "TracePlan",
    "TraceRecord",
    "load_mooncake",
    "trace_items",
    "trace_offsets_s",
    "trace_period_ms",
]

TRACE_CATEGORY = "trace"
"""The category of every trace item."""

MAX_TRACE_SPAN_MS = 86_400_000.0
"""Longest run a trace may schedule, in ms (24 h): a line's ``timestamp`` may be at
most this far after the first line's. Replay sends each line at its timestamp, so a
timestamp of 10**18 ms would be a run that never ends; it is refused when the plan's
sources are read (validation and the dry run). Split a longer trace into runs."""


class TracePlan(BaseModel):
    """Replay of a Mooncake-style JSONL trace (module docstring).

    Attributes:
        path: the trace file (relative to the plan file; read locally, never fetched).
        speedup: arrival-time factor (> 0): 2 replays the trace twice as fast.
        block_tokens: tokens per ``hash_ids`` block (Mooncake: 512).
        seed: the seed of the blocks' generated text.

    Raises:
        pydantic.ValidationError: an empty path, ``speedup`` not above 0,
            ``block_tokens`` below 1, or an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(min_length=1, description="JSONL trace file")
    speedup: float = Field(default=1.0, gt=0, le=1_000, description="arrival-time factor")
    block_tokens: int = Field(default=512, ge=1, le=65_536, description="tokens per hash id")
    seed: int = 0


class TraceRecord(BaseModel):
    """One trace line: arrival (ms), input and output tokens, block ids."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timestamp_ms: float = Field(ge=0)
    input_length: int = Field(ge=1, le=MAX_CONTEXT_TOKENS)
    output_length: int = Field(ge=1, le=MAX_CONTEXT_TOKENS)
    hash_ids: tuple[int, ...] = ()
    line: int = Field(ge=1)


def _number(obj: dict[str, object], key: str, where: str, p: Path, n: int) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise WorkloadFormatError(
            f"{where}: {key!r} must be a non-negative number", path=p, line_number=n
        )
    return float(value)


def load_mooncake(path: str | Path) -> tuple[TraceRecord, ...]:
    """Read a Mooncake JSONL trace (module docstring).

    Returns:
        one :class:`TraceRecord` per non-blank line, in file order.

    Raises:
        WorkloadFormatError: unreadable or empty file, a line that is not a JSON
            object, a missing or negative ``timestamp``, ``input_length`` or
            ``output_length`` not an integer from 1 to :data:`MAX_CONTEXT_TOKENS`,
            ``hash_ids`` that is not a list of non-negative integers, more ids than
            input tokens, a timestamp below the line before or more than
            :data:`MAX_TRACE_SPAN_MS` after the first line's (file and line named).
    """
    p = Path(path)
    out: list[TraceRecord] = []
    for n, obj in _jsonl_objects(p):
        where = f"{p}:{n}"
        ts = _number(obj, "timestamp", where, p, n)
        if out and ts - out[0].timestamp_ms > MAX_TRACE_SPAN_MS:
            raise WorkloadFormatError(
                f"{where}: timestamp {ts:g} ms is more than MAX_TRACE_SPAN_MS "
                f"({MAX_TRACE_SPAN_MS:g} ms, 24 h) after the first line's "
                f"({out[0].timestamp_ms:g} ms): a replay that long never ends in one run",
                path=p,
                line_number=n,
            )
        lengths = []
        for key in ("input_length", "output_length"):
            v = obj.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_CONTEXT_TOKENS:
                raise WorkloadFormatError(
                    f"{where}: {key!r} must be an integer from 1 to MAX_CONTEXT_TOKENS "
                    f"({MAX_CONTEXT_TOKENS}), got {v!r:.40}",
                    path=p,
                    line_number=n,
                )
            lengths.append(v)
        ids = obj.get("hash_ids", [])
        if not isinstance(ids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids
        ):
            raise WorkloadFormatError(
                f"{where}: 'hash_ids' must be a list of non-negative integers",
                path=p,
                line_number=n,
            )
        if len(ids) > -(-lengths[0] // 1):
            raise WorkloadFormatError(
                f"{where}: {len(ids)} hash_ids for {lengths[0]} input tokens", path=p, line_number=n
            )
        if out and ts < out[-1].timestamp_ms:
            raise WorkloadFormatError(
                f"{where}: timestamp {ts:g} ms is before the line above ({out[-1].timestamp_ms:g})",
                path=p,
                line_number=n,
            )
        out.append(
            TraceRecord(
                timestamp_ms=ts,
                input_length=lengths[0],
                output_length=lengths[1],
                hash_ids=tuple(ids),
                line=n,
            )
        )
    return tuple(out)


async def _block_text(counter: TokenCounter, seed: int, tokens: int, cache: dict[int, str]) -> str:
    """The text of one block id: generated words counting at most ``tokens`` tokens."""
    if seed not in cache:
        n_words = tokens + 16
        text = generated_text(seed, n_words)
        while (await counter.count([text]))[0] < tokens:
            n_words *= 2
            text = generated_text(seed, n_words)
        cache[seed] = (await _fit(counter, text.split(" "), tokens))[0]
    return cache[seed]


async def trace_items(
    counter: TokenCounter, records: Sequence[TraceRecord], plan: TracePlan
) -> tuple[WorkloadItem, ...]:
    """One item per record: its blocks' texts in order, cut to ``input_length`` tokens.

    Item ids are ``trace-<line>``; ``arrival_ms`` the record's timestamp (ms);
    ``output_tokens`` its ``output_length``; ``prompt_tokens`` the prompt's count.
    Blocks past the record's ``hash_ids`` (none given, or fewer than
    ``input_length`` needs) are its own (shared with nobody).

    Raises:
        TokenizeError, LiveGateError: as ``counter.count``.
    """
    texts: dict[int, str] = {}
    items: list[WorkloadItem] = []
    for rec in records:
        n_blocks = -(-rec.input_length // plan.block_tokens)
        # blocks the trace does not name are the record's own (shared with nobody)
        own = [-(rec.line * 100_000) - k for k in range(n_blocks - len(rec.hash_ids))]
        ids = [*rec.hash_ids, *own]
        parts = [
            await _block_text(counter, plan.seed * 1_000_003 + h, plan.block_tokens, texts)
            for h in ids
        ]
        words = " ".join(parts).split(" ")
        prompt, tokens = await _fit(counter, words, rec.input_length)
        items.append(
            WorkloadItem(
                id=f"trace-{rec.line}",
                turns=(prompt or words[0],),
                category=TRACE_CATEGORY,
                source=f"{plan.path}:{rec.line}",
                prompt_tokens=tokens,
                arrival_ms=rec.timestamp_ms,
                output_tokens=(rec.output_length,),
            )
        )
    return tuple(items)


def trace_offsets_s(
    items: Sequence[tuple[WorkloadItem, int]], *, period_ms: float, speedup: float
) -> list[float] | None:
    """Send offsets (s, the first at 0) of ``(item, cycle)`` pairs, or ``None`` when an
    item has no ``arrival_ms``: ``(arrival + cycle · period − first) / speedup``."""
    times: list[float] = []
    for item, cycle in items:
        if item.arrival_ms is None:
            return None
        times.append(item.arrival_ms + cycle * period_ms)
    if not times:
        return []
    first = times[0]
    return [max(0.0, t - first) / 1000.0 / speedup for t in times]


def trace_period_ms(items: Sequence[WorkloadItem]) -> float:
    """How long one pass of the trace lasts (ms): last − first arrival plus one mean gap."""
    times = [i.arrival_ms for i in items if i.arrival_ms is not None]
    if len(times) < 2:
        return 0.0
    span = times[-1] - times[0]
    return span + span / (len(times) - 1)
