"""A run's sequential stopping: each comparison's decision and the engine time it saved.

With ``[stopping] mode = "sequential"`` each speculative route's comparison with
``off`` at a (cell, load point) is replayed round by round from the records
(:func:`~deepseekbench._analysis._sequential.line_stop`): the runner skips the
rounds of a decided route (and ``off``'s, once every route compared with it is
decided), and the scorecard says per line how many rounds it took and why it
stopped, and what the skipped rounds would have cost. Both read the same records,
so a resumed run and a re-rendered report make the same decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from deepseekbench._analysis._analysis import RunResult
from deepseekbench._analysis._lines import load_words
from deepseekbench._analysis._rowstats import RowRequests
from deepseekbench._analysis._sequential import LineStop, RoundEvidence, StopReason, line_stop
from deepseekbench._analysis._speedup import SpeedupMetric, evidence_field
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._records._measurement import StreamMeasurement, is_unsent
from deepseekbench._store._results import MeasureInfo, ResultsState
from deepseekbench._types._axes import QualityParity

__all__ = [
    "LineKey",
    "StoppingReport",
    "decide_lines",
    "round_evidence",
    "state_requests",
    "stopping_report",
]

LineKey = tuple[str, str, str]
"""``(route label, cell id, load key)`` of one line."""


def state_requests(
    state: ResultsState, cell: str, load: str, limits: Mapping[str, float]
) -> dict[str, RowRequests]:
    """Each route's measured requests at one cell and load point as the records hold
    them now (requests never sent excluded; one pass over the records), for
    :func:`round_evidence`; ``limits``: the plan's SLO limits (ms) its attainment is
    judged by."""
    reqs: dict[str, list[tuple[StreamMeasurement, MeasureInfo]]] = {}
    for key, m in state.measurements.items():
        if key[1] == cell and key[2] == load and not is_unsent(m):
            reqs.setdefault(key[0], []).append((m, state.info[key]))
    return {route: RowRequests(tuple(rs), limits) for route, rs in reqs.items()}


def round_evidence(requests: RowRequests, name: str) -> RoundEvidence:
    """``name``'s value per round (a per-request median or a window figure) and the
    successful requests per round, of one line."""
    ok: dict[int, int] = {}
    for m, info in requests.requests:
        if m.error is None:
            ok[info.round] = ok.get(info.round, 0) + 1
    return RoundEvidence(values=requests.round_values(name), ok=ok)


def decide_lines(
    plan: BenchmarkPlan,
    lines: Mapping[LineKey, RowRequests],
    parity_ready: Callable[[str], bool] = lambda route: True,
) -> dict[LineKey, LineStop]:
    """Every speculative line's :class:`LineStop` under ``plan.stopping``, judged by
    TPOT on the plan's clock against the ``off`` line of its cell and load (empty
    without ``[stopping]`` sequential). ``lines``: each line's measured requests;
    ``parity_ready(route)``: the route's and ``off``'s parity set ran.

    Raises:
        ValueError: a plan's ``[stopping]`` out of range (never after validation).
    """
    stop = plan.stopping
    if stop is None or not stop.sequential:
        return {}
    off = plan.off_route.label
    name = evidence_field(SpeedupMetric.tpot_ms, plan.clock)
    out: dict[LineKey, LineStop] = {}
    for (route, cell, load), reqs in lines.items():
        base = lines.get((off, cell, load))
        if route == off or base is None:
            continue
        out[(route, cell, load)] = line_stop(
            round_evidence(base, name),
            round_evidence(reqs, name),
            metric=SpeedupMetric.tpot_ms,
            delta=stop.delta,
            min_rounds=stop.min_rounds,
            min_requests=stop.min_requests,
            cap=plan.rounds,
            alpha=stop.alpha,
            parity_ready=parity_ready(route) and parity_ready(off),
        )
    return out


def level_failed(plan: BenchmarkPlan, requests: RowRequests) -> bool:
    """True when a ``[search]`` level's measured requests so far already fail it: with
    ``F`` of them missing an SLO limit, the attainment of all ``requests_per_cell``
    (single-turn) requests is at most ``(N − F)/N``, below ``target`` whatever the
    rest show (exact curtailment: the fixed run's verdict, known early). ``False``
    without ``[search]``."""
    search = plan.effective_search
    n = plan.requests_per_cell
    if search is None or not requests.requests:
        return False
    missed = len(requests.requests) - requests.good()
    return (n - missed) / n < search.target


def _requests_in_rounds(plan: BenchmarkPlan, rounds: set[int]) -> int:
    """Measured requests a route sends at one cell and load point in ``rounds``."""
    return sum(1 for i in range(plan.requests_per_cell) if i % plan.rounds in rounds)


@dataclass(frozen=True)
class StoppingReport:
    """A sequential run's decisions and savings against the fixed horizon.

    Attributes:
        lines: each speculative line's decision, by ``(route, cell, load key)``.
        labels: each line's ``route @ cell (load)`` as the scorecard's notes name it.
        requests_saved: measured requests the skipped rounds would have sent.
        requests_fixed: measured requests the fixed horizon sends (every route, cell,
            load point and ``[search]`` level measured, every scheduled round).
        engine_s_saved: the skipped rounds' estimated engine time (s): each line's
            mean measurement window per round it ran × the rounds it skipped.
    """

    lines: dict[LineKey, LineStop] = field(default_factory=dict)
    labels: dict[LineKey, str] = field(default_factory=dict)
    requests_saved: int = 0
    requests_fixed: int = 0
    engine_s_saved: float = 0.0
    search_notes: tuple[str, ...] = ()
    unverified: frozenset[LineKey] = frozenset()

    @property
    def decided_labels(self) -> frozenset[str]:
        """The labels of the lines a verdict of the sequence stopped."""
        return frozenset(self.labels[k] for k, s in self.lines.items() if s.decided)

    def notes(self, inconclusive: Collection[str] = ()) -> list[str]:
        """One note per speculative line, then the run's total saved.

        ``inconclusive``: the labels of lines whose scorecard verdict reads "no significant
        difference". A line the sequence stopped as credited but the scorecard does not
        credit says why the two differ: the stopping rule's confidence sequence is over
        the paired rounds' log ratios (repeat noise and drift of these prompts), while the
        scorecard's interval also covers the choice of prompts (a paired cluster bootstrap
        over them), so it can be the wider of the two."""
        out = [
            f"{self.labels.get(k, '@'.join(k))}: {s.text}"
            + ("; no credit: parity not verified" if k in self.unverified else "")
            + (
                "; the scorecard reads no significant difference: its interval also covers "
                "the choice of prompts, which this sequence over rounds does not"
                if s.reason is StopReason.credited
                and k not in self.unverified
                and self.labels.get(k) in inconclusive
                else ""
            )
            for k, s in self.lines.items()
        ]
        out += self.search_notes
        out.append(
            f"sequential stopping: {self.requests_saved} of {self.requests_fixed} measured "
            f"requests saved against the fixed horizon (about {self.engine_s_saved:.1f} s "
            "of engine time)"
        )
        return out


def _saved(plan: BenchmarkPlan, reqs: RowRequests, decided: bool) -> tuple[int, float]:
    """Requests and estimated engine time (s) a decided line saved by skipping rounds."""
    ran = {info.round for _, info in reqs.requests}
    skipped = set(range(plan.rounds)) - ran
    if not decided or not skipped or not ran:
        return 0, 0.0
    per_round = sum(reqs.in_round(r).window_s() for r in ran) / len(ran)
    return _requests_in_rounds(plan, skipped), per_round * len(skipped)


def _search_notes(
    plan: BenchmarkPlan, levels: Mapping[LineKey, RowRequests], labels: Mapping[LineKey, str]
) -> tuple[list[str], int, float]:
    """Each ``[search]`` level a route stopped early (it had already failed), and the
    requests and engine time (s) that saved. A note counts the misses out of the
    requests measured, then says how many the plan had and how many were skipped:
    e.g. "3 of the 5 requests measured missed the SLO, so at most 12 of the 15 planned
    could meet it, below the 0.9 target: its other 10 were skipped"."""
    notes: list[str] = []
    saved, seconds = 0, 0.0
    for key, reqs in levels.items():
        if not level_failed(plan, reqs):
            continue
        n, s = _saved(plan, reqs, True)
        if n == 0:
            continue
        measured, planned = len(reqs.requests), plan.requests_per_cell
        missed = measured - reqs.good()
        target = plan.effective_search.target if plan.effective_search else 1.0
        notes.append(  # out of the requests measured; the plan's count and the skipped apart
            f"{labels[key]}: rounds {len(reqs.rounds())} of {plan.rounds}, stopped: level "
            f"failed ({missed} of the {measured} requests measured missed the SLO, so at "
            f"most {planned - missed} of the {planned} planned could meet it, below the "
            f"{target:g} target: its other {n} were skipped)"
        )
        saved, seconds = saved + n, seconds + s
    return notes, saved, seconds


def stopping_report(result: RunResult) -> StoppingReport | None:
    """The :class:`StoppingReport` of a run with ``[stopping]`` sequential, else ``None``.

    A line's ``parity_ready`` is read from the run's parity results (the route's parity
    set ran). A ``[search]`` level a route stopped early (:func:`level_failed`) is a
    note of its own, its skipped requests counted in the savings.
    """
    plan = result.plan
    if not plan.sequential:
        return None
    loads = {lp.key for lp in plan.load_points}
    lines: dict[LineKey, RowRequests] = {}
    levels: dict[LineKey, RowRequests] = {}
    labels: dict[LineKey, str] = {}
    for row, (route, cell, load) in zip(result.rows, result.row_keys, strict=True):
        if load is None:
            continue
        key = (route, cell, load)
        (lines if load in loads else levels)[key] = result.row_requests(route, cell, load)
        labels[key] = f"{route} @ {cell} ({load_words(row)[0]})"
    parity_routes = {route for route, _ in result.parity}
    decisions = decide_lines(plan, lines, lambda route: route in parity_routes)
    off = plan.off_route.label
    saved, seconds = 0, 0.0
    for (route, cell, load), reqs in lines.items():
        if route == off:
            compared = [s for k, s in decisions.items() if k[1:] == (cell, load)]
            decided = bool(compared) and all(s.decided for s in compared)
        else:
            stop = decisions.get((route, cell, load))
            decided = stop is not None and stop.decided
        n, s = _saved(plan, reqs, decided)
        saved, seconds = saved + n, seconds + s
    search, n_search, s_search = _search_notes(plan, levels, labels)
    fixed = plan.requests_per_cell * (len(lines) + len(levels))
    unverified = frozenset(
        key
        for row, key in zip(result.rows, result.row_keys, strict=True)
        if row.quality_parity is not QualityParity.verified and key[2] is not None
    )
    return StoppingReport(
        decisions,
        labels,
        saved + n_search,
        fixed,
        seconds + s_search,
        tuple(search),
        frozenset(k for k in unverified if k in decisions),
    )
