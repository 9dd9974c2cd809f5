"""Capacity under SLO: each route's capacity and the ratio to ``off`` (pure).

Read from a :class:`~deepseekbench.RunResult`'s rows alone (so ``report``
rebuilds it from the results file): every load the run measured — the plan's
load points and the ``[search]`` levels — gives each route a
:class:`~deepseekbench._plan._search.Probe` (its ``slo_attainment``, request
throughput and schedule lag, pooled over the plan's cells), and
:func:`~deepseekbench._plan._search.bracket_of` places the capacity: the
highest passing level below the lowest failing one.

**Uncertainty.** The capacity lies in ``[low, high)`` (the bracket; ``high``
``None`` when no level failed); the attainment at ``low`` carries a 95 % Wilson
score interval (Wilson 1927, via ``scipy.stats.binomtest(...).proportion_ci``).

**Credit.** A capacity ratio ``route/off`` is credited only when
:func:`~deepseekbench.compare_speedup` credits the route against ``off`` at every
load and cell both were measured at: the same gate as every other speedup
(parity verified on both rows, same load, complete rows, enough requests), not
a path of its own. Otherwise the ratio is refused with the first refusal's
load and reasons. It must also be significant: the two brackets may not overlap
(the route passed a level ``off`` failed, or failed one ``off`` passed), since
overlapping brackets allow a ratio on either side of 1; otherwise it is refused
with "no significant difference" and the range the brackets allow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deepseekbench._analysis._analysis import RunResult
from deepseekbench._analysis._speedup import RefusalReason, SpeedupMetric, compare_speedup
from deepseekbench._plan._search import (
    Bracket,
    Probe,
    SearchPlan,
    SearchStop,
    bracket_of,
    saturation_reason,
)
from deepseekbench._types._axes import Arrival, QualityParity, Speculative
from deepseekbench._types._row import Row

__all__ = [
    "CapacityRatio",
    "CapacityReport",
    "RouteCapacity",
    "capacity_ratio",
    "capacity_report",
    "overlap_refusal",
    "route_probes",
    "wilson_interval",
]


def wilson_interval(good: int, n: int) -> tuple[float, float] | None:
    """95 % Wilson score interval of ``good / n`` (fractions); ``None`` when ``n`` is 0."""
    if n <= 0:
        return None
    from scipy.stats import binomtest

    ci = binomtest(good, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def _level(row: Row) -> float | None:
    if row.arrival is Arrival.closed:
        return float(row.concurrency) if row.concurrency is not None else None
    return row.request_rate_per_s


def route_probes(rows: Sequence[Row]) -> dict[str, list[Probe]]:
    """One :class:`Probe` per route and measured load, pooled over cells (requests and
    requests meeting the SLO summed; throughput the cells' mean; lagged if any cell
    was). Rows without an SLO attainment (no ``[slo]``) or a load give none."""
    pooled: dict[tuple[str, float], list[Row]] = {}
    for r in rows:
        level = _level(r)
        if level is not None and r.slo_attainment is not None and r.n_requests:
            pooled.setdefault((r.route_label or r.speculative.value, level), []).append(r)
    out: dict[str, list[Probe]] = {}
    for (route, level), rs in sorted(pooled.items(), key=lambda kv: kv[0][1]):
        n = sum(r.n_requests for r in rs)
        good = sum(round((r.slo_attainment or 0.0) * r.n_requests) for r in rs)
        tps = [r.request_throughput_per_s for r in rs if r.request_throughput_per_s is not None]
        out.setdefault(route, []).append(
            Probe(
                level=level,
                attainment=good / n,
                n=n,
                good=good,
                throughput=sum(tps) / len(tps) if tps else None,
                lagged=any(r.schedule_lagged for r in rs),
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class RouteCapacity:
    """One route's capacity under the plan's ``[slo]``.

    Attributes:
        route, speculative: the route.
        capacity: the highest passing level (concurrency, or requests/s); ``None``
            when no level passed.
        low, high: the bracket ``[low, high)`` (``high`` ``None``: no level failed).
        attainment, ci_low, ci_high: ``slo_attainment`` at ``capacity`` and its 95 %
            Wilson interval (fractions).
        n: measured requests at ``capacity``.
        stop: why the search ended (``None``: the budget of the run ended it first).
        saturated: levels where throughput stopped growing or the queue grew.
        probes: every level measured, ascending.
        unverified: the loads (ascending) where the route's row does not have
            quality parity ``verified``; a route with any is marked "parity not
            verified" on its line (its capacity is measured, never credited).
        saturation: per saturated level, why (``saturation_reason``: the request
            throughput's growth against the rule's, or a lagged schedule).
    """

    route: str
    speculative: Speculative
    capacity: float | None
    low: float | None
    high: float | None
    attainment: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    stop: SearchStop | None
    saturated: tuple[float, ...]
    probes: tuple[Probe, ...]
    unverified: tuple[float, ...] = ()
    saturation: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        route: str,
        speculative: Speculative,
        bracket: Bracket,
        probes: Sequence[Probe],
        unverified: Sequence[float] = (),
        search: SearchPlan | None = None,
    ) -> RouteCapacity:
        """From a route's bracket, probes and unverified loads (``search``: the plan's
        ``[search]``, to say why each saturated level was)."""
        lo = bracket.low
        ci = wilson_interval(lo.good, lo.n) if lo is not None else None
        why: list[str] = []
        if search is not None:
            for level in bracket.saturated:
                probe = next((p for p in probes if p.level == level), None)
                reason = saturation_reason(probe, probes, search) if probe else None
                if reason is not None:
                    why.append(reason)
        return cls(
            route=route,
            speculative=speculative,
            capacity=lo.level if lo is not None else None,
            low=lo.level if lo is not None else None,
            high=bracket.high.level if bracket.high is not None else None,
            attainment=lo.attainment if lo is not None else None,
            ci_low=ci[0] if ci else None,
            ci_high=ci[1] if ci else None,
            n=lo.n if lo is not None else 0,
            stop=bracket.stop,
            saturated=bracket.saturated,
            probes=tuple(sorted(probes, key=lambda p: p.level)),
            unverified=tuple(sorted(unverified)),
            saturation=tuple(why) if len(why) == len(bracket.saturated) else (),
        )

    @property
    def text(self) -> str:
        """One scorecard line, e.g. ``off: capacity 4 [4, 6) at 100% (95% CI 72–100%), n=10``."""
        if self.capacity is None:
            below = f" (below {self.high:g})" if self.high is not None else ""
            return f"{self.route}{self._mark}: no level met the SLO{below}; {self._tail}"
        high = f"{self.high:g}" if self.high is not None else "∞"
        ci = ""
        if self.ci_low is not None and self.ci_high is not None:
            ci = f" (95% CI {self.ci_low:.0%}–{self.ci_high:.0%})"
        att = f"{self.attainment:.0%}" if self.attainment is not None else "?"
        return (
            f"{self.route}{self._mark}: capacity {self.capacity:g} [{self.capacity:g}, {high}) "
            f"at {att}{ci}, n={self.n}; {self._tail}"
        )

    @property
    def _mark(self) -> str:
        if not self.unverified:
            return ""
        return f" (parity not verified at {', '.join(f'{x:g}' for x in self.unverified)})"

    @property
    def _tail(self) -> str:
        sat = ""
        if self.saturated and len(self.saturation) == len(self.saturated):
            sat = ", saturated at " + ", ".join(
                f"{x:g} ({why})" for x, why in zip(self.saturated, self.saturation, strict=True)
            )
        elif self.saturated:
            sat = f", saturated at {', '.join(f'{x:g}' for x in self.saturated)}"
        levels = ", ".join(f"{p.level:g}" for p in self.probes)
        return f"stop: {self.stop.value if self.stop else 'not ended'}{sat}; levels {levels}"


@dataclass(frozen=True, slots=True)
class CapacityRatio:
    """A speculative route's capacity over ``off``'s (dimensionless, "times more load").

    Each capacity lies in its half-open bracket, so the claim is what the two brackets
    allow: a figure when both are closed, a lower bound ``≥ low`` when the route's
    bracket is open (it met the SLO at every level), an upper bound ``≤ high`` when
    ``off``'s is. :attr:`figure` is that claim's printable form, the one every rendering
    (text, Markdown, HTML, JSON, the plot's title) shows, so none can carry a figure
    the text does not print.

    ``ratio`` is the credited figure, ``None`` unless credited *and* both brackets
    are closed (a one-sided claim has no figure, only its bound, and no rendering
    shows a ratio given for one); ``low``/``high``:
    the range the two brackets allow (``None`` where a bracket is open); ``refusal``:
    why not credited (a gate refusal at some load, a missing capacity, or brackets
    that overlap), ``None`` when credited.
    """

    route: str
    ratio: float | None
    low: float | None
    high: float | None
    refusal: str | None

    @property
    def credited(self) -> bool:
        """True when a claim (a figure or a one-sided bound) is printed."""
        return self.refusal is None

    @property
    def bound(self) -> str | None:
        """``"lower"`` (``≥ low``) or ``"upper"`` (``≤ high``) for a credited one-sided
        claim; ``None`` for a figure or a refusal."""
        if not self.credited or (self.low is None) == (self.high is None):
            return None
        return "lower" if self.high is None else "upper"

    @property
    def figure(self) -> str:
        """The printable claim: ``1.50×``, ``≥ 1.67×``, ``≤ 0.75×`` or ``refused``."""
        if self.bound == "lower" and self.low is not None:
            return f"≥ {self.low:.2f}×"
        if self.bound == "upper" and self.high is not None:
            return f"≤ {self.high:.2f}×"
        if self.credited and self.ratio is not None:
            return f"{self.ratio:.2f}×"
        return "refused"

    @property
    def text(self) -> str:
        """One scorecard line, e.g. ``mtp/off capacity 1.50× (bracket 1.20–2.00×)``; a
        route that never failed a level has an open bracket, so only its lower end is a
        claim: ``mtp/off capacity ≥ 1.67× (...)``; likewise ``≤ H×`` when ``off``
        never failed one."""
        if not self.credited:
            return f"{self.route}/off capacity: refused ({self.refusal})"
        if self.bound == "lower":
            return (
                f"{self.route}/off capacity {self.figure} ({self.route} met the SLO at "
                "every level measured, so its capacity has no upper end: raise [search] "
                "max_level to bound it)"
            )
        if self.bound == "upper":
            return (
                f"{self.route}/off capacity {self.figure} (off met the SLO at every level "
                "measured, so its capacity has no upper end: raise [search] max_level to "
                "bound it)"
            )
        hi = f"{self.high:.2f}" if self.high is not None else "∞"
        lo = f"{self.low:.2f}" if self.low is not None else "?"
        return f"{self.route}/off capacity {self.figure} (bracket {lo}–{hi}×)"


@dataclass(frozen=True, slots=True)
class CapacityReport:
    """Every route's capacity and each speculative route's ratio to ``off``.

    ``target``: the ``slo_attainment`` a level had to reach (fraction); ``unit``:
    ``streams`` (closed loop) or ``req/s`` (open loop); ``slo``: the plan's ``[slo]``
    limits a request had to meet, by metric (``ttft_ms``, ``tpot_ms``, ``e2e_ms``; ms)."""

    target: float
    unit: str
    routes: tuple[RouteCapacity, ...]
    ratios: tuple[CapacityRatio, ...]
    slo: tuple[tuple[str, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``target``, ``unit``, per route its capacity, bracket, attainment
        with its interval, stop and levels; per speculative route its ratio (``null``
        unless credited with both brackets closed), ``bound`` (``lower``/``upper`` for a
        one-sided claim), its range, refusal and ``text`` (:attr:`CapacityRatio.figure`,
        the claim as the scorecard prints it)."""
        return {
            "target": self.target,
            "unit": self.unit,
            "slo": dict(self.slo),
            "routes": [
                {
                    "route": c.route,
                    "speculative": c.speculative.value,
                    "capacity": c.capacity,
                    "low": c.low,
                    "high": c.high,
                    "slo_attainment": c.attainment,
                    "ci_low": c.ci_low,
                    "ci_high": c.ci_high,
                    "n_requests": c.n,
                    "stop": c.stop.value if c.stop is not None else None,
                    "saturated": list(c.saturated),
                    "saturation": list(c.saturation),
                    "levels": [p.level for p in c.probes],
                    "unverified": list(c.unverified),
                }
                for c in self.routes
            ],
            "ratios": [
                {"route": r.route, "ratio": None if r.bound else r.ratio, "bound": r.bound,
                 "low": r.low, "high": r.high, "refusal": r.refusal, "text": r.figure}
                for r in self.ratios
            ],
        }  # fmt: skip

    def lines(self) -> list[str]:
        """The scorecard's capacity section, one line per route and per ratio."""
        limits = "".join(f"{k} <= {v:g}; " for k, v in self.slo)
        out = [
            f"Capacity under SLO ({limits}slo_attainment >= {self.target:g}; load in {self.unit})"
        ]
        out += [f"  {c.text}" for c in self.routes]
        out += [f"  {r.text}" for r in self.ratios]
        return out


def _refusal(result: RunResult, off: str, route: str, metric: SpeedupMetric) -> str | None:
    """The first load where ``compare_speedup`` refuses ``route`` against ``off``; every
    load of a result read from an edited results file (``results_tampered``)."""
    if result.results_tampered:
        return f"{RefusalReason.results_tampered.value} (the results file was edited)"
    by_key = {
        (r.route_label, r.context_bucket, r.output_target, r.reasoning_mode, _level(r)): r
        for r in result.rows
    }
    pairs = 0
    for r in result.rows:
        if r.route_label != route:
            continue
        base = by_key.get((off, r.context_bucket, r.output_target, r.reasoning_mode, _level(r)))
        if base is None:
            continue
        pairs += 1
        verdict = compare_speedup(base, r, metric=metric)
        if not verdict.printed:
            load = f"{_level(r):g}"
            return f"at load {load}: {', '.join(x.value for x in verdict.reasons)}"
    return None if pairs else "no load measured on both routes"


def _ratio(
    result: RunResult, off: RouteCapacity, cap: RouteCapacity, metric: SpeedupMetric
) -> CapacityRatio:
    return capacity_ratio(off, cap, _refusal(result, off.route, cap.route, metric))


def capacity_ratio(off: RouteCapacity, cap: RouteCapacity, refusal: str | None) -> CapacityRatio:
    """``cap``'s :class:`CapacityRatio` to ``off`` (pure): refused with ``refusal`` (the
    gate's, e.g. ``at load 2: candidate_parity_not_verified``) when given, or when a
    route has no capacity, or when the brackets overlap (:func:`overlap_refusal`);
    else the claim the two brackets allow (a figure, or a one-sided bound)."""
    if refusal is None and (off.capacity is None or cap.capacity is None):
        refusal = "no capacity for " + (off.route if off.capacity is None else cap.route)
    if refusal is not None or off.capacity is None or cap.capacity is None:
        return CapacityRatio(cap.route, None, None, None, refusal)
    low = cap.capacity / off.high if off.high is not None else None
    high = cap.high / off.capacity if cap.high is not None else None
    overlap = overlap_refusal(off, cap)
    if overlap is not None:
        return CapacityRatio(cap.route, None, low, high, overlap)
    if low is None or high is None:  # an open bracket: only its bound is a claim
        return CapacityRatio(cap.route, None, low, high, None)
    return CapacityRatio(cap.route, cap.capacity / off.capacity, low, high, None)


def overlap_refusal(off: RouteCapacity, cap: RouteCapacity) -> str | None:
    """Why ``cap``'s capacity cannot be said to differ from ``off``'s, or ``None``.

    Each capacity lies in its half-open bracket ``[low, high)``, so the ratio is surely
    above 1 only when the route passed a level ``off`` failed (``cap.low >= off.high``)
    and surely below 1 only when it failed a level ``off`` passed
    (``cap.high <= off.low``). Overlapping brackets allow a ratio on either side of 1:
    refused, as an interval that includes 1 credits nothing. A route with no
    capacity (no level passed) is for the caller to refuse."""
    if cap.low is None or off.low is None:
        return None
    if off.high is not None and cap.low >= off.high:
        return None
    if cap.high is not None and cap.high <= off.low:
        return None
    lo = f"{cap.low / off.high:.2f}" if off.high is not None else "?"
    hi = f"{cap.high / off.low:.2f}" if cap.high is not None else "∞"
    return f"no significant difference: the brackets overlap (ratio {lo}–{hi}×)"


def capacity_report(
    result: RunResult, *, metric: SpeedupMetric | str = SpeedupMetric.tpot_ms
) -> CapacityReport | None:
    """The capacity report of a run whose plan has ``[search]`` (``None`` otherwise).

    ``metric``: the speedup metric :func:`~deepseekbench.compare_speedup` is asked
    with at each load (its gate decides the ratio's credit; default TPOT).

    Raises:
        ValueError: ``metric`` is not a :class:`~deepseekbench.SpeedupMetric` value.
    """
    m = SpeedupMetric(metric)
    plan = result.plan
    search = plan.effective_search
    if search is None:
        return None
    closed = plan.arrival.mode != "rate"
    probes = route_probes(result.rows)
    unverified: dict[str | None, set[float]] = {}
    for row in result.rows:
        level = _level(row)
        if level is not None and row.quality_parity is not QualityParity.verified:
            unverified.setdefault(row.route_label, set()).add(level)
    caps = {
        r.label: RouteCapacity.of(
            r.label,
            r.speculative,
            bracket_of(search, probes.get(r.label, []), closed=closed),
            probes.get(r.label, []),
            tuple(unverified.get(r.label, ())),
            search,
        )
        for r in plan.routes
    }
    off = caps[plan.off_route.label]
    ratios = tuple(_ratio(result, off, caps[r.label], m) for r in plan.speculative_routes)
    return CapacityReport(
        target=search.target,
        unit="streams" if closed else "req/s",
        routes=tuple(caps.values()),
        ratios=ratios,
        slo=tuple(plan.slo.limits.items()),
    )
