"""``[search]``: capacity under SLO, the plan's keys and the pure bracketing rule.

Capacity of a route: the highest load (concurrency for a closed loop, request
rate for an open loop) at which ``slo_attainment`` — the fraction of measured
requests meeting every ``[slo]`` limit (``deepseekbench._analysis._rowstats``,
after vLLM's ``bench serve --goodput``) — is at least ``target``.

The search brackets, then bisects: from ``start`` it multiplies the
load by ``growth`` until a level fails (the bracket), then halves the bracket
until it is at most ``resolution`` wide. Sources of the idea, not of the code:
vLLM's ``vllm/benchmarks/sweep/serve_sla.py`` (``vllm bench sweep serve_sla``,
``--sla-variable request_rate|max_concurrency``) probes the extremes of the range
first, then root-finds an interpolation of the SLA margin until the highest
passing and lowest failing values are one apart; GuideLLM's ``sweep`` profile
measures a synchronous and a throughput run and then rates spaced between them;
AIPerf's parameter sweep runs a listed set of concurrencies. Bracketing from
below never sends the overload a probe at the top of the range would, and its
bracket is the capacity's stated uncertainty.

A level also fails when the route is *saturated*: its request throughput grew
less than ``min_throughput_gain`` of the load's relative growth since the level
``growth`` times lower (throughput no longer grows), or, open loop, its schedule
lag exceeded ``arrival.max_lag_ms`` (the queue grows without bound).

Everything here is pure: the next level is a function of the probes measured
so far, so a resumed run makes the same decisions from the same records.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "Bracket",
    "Probe",
    "SearchPlan",
    "SearchStop",
    "bracket_of",
    "next_joint_level",
    "next_level",
    "passed",
    "saturation_reason",
]


class SearchPlan(BaseModel):
    """The ``[search]`` table of a plan: find each route's capacity under ``[slo]``.

    Levels are concurrency (requests in flight, closed loop) or request rate
    (requests/s, ``arrival.mode = "rate"``); a closed loop's levels are whole numbers.

    Attributes:
        target: the ``slo_attainment`` a level must reach to pass (fraction, 0 < t <= 1;
            default 0.99: 99 % of requests within every limit).
        start: the first level probed (concurrency, or requests/s).
        growth: the bracketing factor (> 1): the next level is ``level × growth``.
        resolution: bisection stops when the bracket is at most this wide (same unit;
            a closed loop never goes below 1).
        max_level: the highest level ever probed (same unit).
        max_probes: the most levels one search measures (1..64).
        min_throughput_gain: saturation threshold (fraction, >= 0): a level whose request
            throughput grew less than this fraction of the load's relative growth since
            the nearest lower level counts as saturated (a failing level).

    Raises:
        pydantic.ValidationError: a value out of range, ``start > max_level``, or an
            unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    target: float = Field(default=0.99, gt=0, le=1, description="slo_attainment to reach")
    start: float = Field(default=1.0, gt=0, description="first level (concurrency or req/s)")
    growth: float = Field(default=2.0, gt=1, le=16, description="bracketing factor")
    resolution: float = Field(default=1.0, gt=0, description="final bracket width (level unit)")
    max_level: float = Field(default=256.0, gt=0, description="highest level probed")
    max_probes: int = Field(default=12, ge=1, le=64, description="levels measured at most")
    min_throughput_gain: float = Field(
        default=0.1, ge=0, le=1, description="saturation: least throughput gain per load gain"
    )

    @model_validator(mode="after")
    def _order(self) -> SearchPlan:
        if self.start > self.max_level:
            raise ValueError(f"start {self.start:g} is above max_level {self.max_level:g}")
        return self


class SearchStop(StrEnum):
    """Why a route's search ended (``None`` while it goes on)."""

    resolved = "resolved"  # the bracket is at most ``resolution`` wide
    max_level = "max_level"  # every level up to ``max_level`` passed
    below_start = "below_start"  # even the lowest level probed failed
    max_probes = "max_probes"  # the probe budget ran out first


@dataclass(frozen=True, slots=True)
class Probe:
    """One route measured at one level.

    Attributes:
        level: concurrency (requests) or request rate (requests/s).
        attainment: ``slo_attainment`` (fraction of measured requests meeting every limit).
        n: measured requests. good: those meeting every limit.
        throughput: request throughput over the measurement window (requests/s).
        lagged: open loop: the row's schedule lag passed ``arrival.max_lag_ms``.
    """

    level: float
    attainment: float
    n: int
    good: int
    throughput: float | None = None
    lagged: bool = False


@dataclass(frozen=True, slots=True)
class Bracket:
    """Where a route's capacity lies: ``low`` passed, ``high`` failed (``None``: not found).

    ``saturated``: the levels found saturated (a failing level, even when their
    attainment met the target). ``stop``: why the search ended, ``None`` while it goes on.
    """

    low: Probe | None
    high: Probe | None
    saturated: tuple[float, ...]
    stop: SearchStop | None


def _saturated(probe: Probe, probes: Sequence[Probe], search: SearchPlan) -> bool:
    """Throughput no longer grows, or the queue does."""
    return saturation_reason(probe, probes, search) is not None


def saturation_reason(probe: Probe, probes: Sequence[Probe], search: SearchPlan) -> str | None:
    """Why ``probe``'s level counts as saturated, in words, or ``None`` when it does not.

    Throughput is compared with the highest level at or below ``level / growth``
    (a bracketing step down): between close levels a small round's throughput is
    set by how many waves of requests it takes, not by the server. E.g. "request
    throughput +14% over 1 for +200% load (needs +20%)" or "schedule lagged"."""
    if probe.lagged:
        return "schedule lagged (the queue grew)"
    below = [p for p in probes if p.level <= probe.level / search.growth * (1 + 1e-9)]
    base = max(below, key=lambda p: p.level) if below else None
    if base is None or probe.throughput is None or not base.throughput:
        return None
    load_gain = probe.level / base.level - 1
    gain = probe.throughput / base.throughput - 1
    need = search.min_throughput_gain * load_gain
    if gain >= need:
        return None
    return (
        f"request throughput {gain:+.0%} over {base.level:g} for {load_gain:+.0%} load "
        f"(needs {need:+.0%})"
    )


def passed(probe: Probe, probes: Sequence[Probe], search: SearchPlan) -> bool:
    """A level passes when its attainment reaches ``target`` and it is not saturated
    (``probes``: the route's other probes, for the throughput check)."""
    return probe.attainment >= search.target and not _saturated(probe, probes, search)


def bracket_of(search: SearchPlan, probes: Sequence[Probe], *, closed: bool) -> Bracket:
    """The bracket of one route's probes (any order; one per level).

    ``high`` is the lowest failing level, ``low`` the highest passing level below
    it (a noisy pass above a failure does not move the bracket up).
    """
    ordered = sorted(probes, key=lambda p: p.level)
    verdicts = [(p, passed(p, ordered, search)) for p in ordered]
    saturated = tuple(p.level for p in ordered if _saturated(p, ordered, search))
    high = next((p for p, ok in verdicts if not ok), None)
    low = next(
        (p for p, ok in reversed(verdicts) if ok and (high is None or p.level < high.level)), None
    )
    return Bracket(low, high, saturated, _stop(search, low, high, len(ordered), closed))


def _stop(
    search: SearchPlan, low: Probe | None, high: Probe | None, n: int, closed: bool
) -> SearchStop | None:
    if low is not None and high is not None and high.level - low.level <= _width(search, closed):
        return SearchStop.resolved
    if high is None and low is not None and low.level >= search.max_level:
        return SearchStop.max_level
    if low is None and high is not None and high.level <= _floor(search, closed):
        return SearchStop.below_start
    if n >= search.max_probes:
        return SearchStop.max_probes
    return None


def _width(search: SearchPlan, closed: bool) -> float:
    return max(1.0, search.resolution) if closed else search.resolution


def _floor(search: SearchPlan, closed: bool) -> float:
    """The lowest level a downward bracket may reach: 1 stream, or ``resolution`` req/s."""
    return 1.0 if closed else min(search.resolution, search.start)


def _level(x: float, closed: bool) -> float:
    return float(max(1, round(x))) if closed else x


def next_level(search: SearchPlan, probes: Sequence[Probe], *, closed: bool) -> float | None:
    """The next level to measure for one route, or ``None`` when its search ended.

    No probe yet: ``start``. No failure yet: the highest pass × ``growth`` (capped
    at ``max_level``). No pass yet: the lowest failure ÷ ``growth`` (down to 1
    stream or ``resolution`` req/s). Both: the bracket's midpoint (a whole number
    for a closed loop).
    """
    if not probes:
        return _level(search.start, closed)
    b = bracket_of(search, probes, closed=closed)
    if b.stop is not None:
        return None
    if b.high is None:
        assert b.low is not None
        up = _level(min(search.max_level, b.low.level * search.growth), closed)
        return up if up > b.low.level else _level(b.low.level + 1, closed)
    if b.low is None:
        return max(_floor(search, closed), _level(b.high.level / search.growth, closed))
    mid = (b.low.level + b.high.level) / 2
    return float(math.floor(mid)) if closed else mid


def next_joint_level(
    search: SearchPlan, probes: Mapping[str, Sequence[Probe]], *, closed: bool
) -> float | None:
    """The next level for a search over several routes measured together: the lowest
    of the routes' next levels not measured yet (``None`` when every search ended, or
    ``max_probes`` distinct levels were measured).

    Every route is measured at every level, so each speculative route has its
    ``off`` baseline at the same load (parity and speedups need it).
    """
    measured = {p.level for ps in probes.values() for p in ps}
    if len(measured) >= search.max_probes:
        return None
    wanted = [
        lv
        for ps in probes.values()
        if (lv := next_level(search, ps, closed=closed)) is not None and lv not in measured
    ]
    return min(wanted) if wanted else None
