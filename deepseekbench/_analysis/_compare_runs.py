"""``compare_runs``: what changed between two runs, per line and figure, and what moved.

Lines are matched by (route label, cell id, load key). For every line present in
both runs each figure of :data:`~deepseekbench._analysis._compare_figures.FIGURES`
gets a verdict — changed significantly, no significant change, not comparable (a
refusal, with its reasons), or not judged (no interval could be made) — and parity
is compared as a verdict (``verified → differs``). Lines of one run only are listed.
Beside the verdicts stand the recorded differences between the runs
(:mod:`deepseekbench._analysis._compare_records`), and :attr:`RunComparison.summary`
names what moved.

**False changes.** The figures judged over all lines form one family of ``m``
comparisons; each interval is made at level ``alpha / m`` (Bonferroni), so the
chance that two runs of the same engines show any "changed significantly" is at
most ``alpha`` (family-wise error rate; Bonferroni 1936, Dunn 1961). Every "no
significant change" keeps its interval: a change outside it would have been
detected.

**The margin.** Two runs of the same engines on the same machine are not two draws of
one distribution: the machine's load, its clocks and the engine's warm-up differ
between them, and a figure drifts by a few per cent (measured on the embedded demo:
TPOT p50 of ``off`` 1–4 %, TTFT p50 at c=8 up to 10 %, between back-to-back runs). A
within-run interval cannot see that drift, so "changed significantly" means the
interval lies wholly beyond ``margin`` (default 5 % of A; :data:`DEFAULT_MARGIN`): the
test is of H0 ``|B/A − 1| ≤ margin`` (ratio figures) or ``|B − A| ≤ margin·|A|``
(fractions), which keeps the family-wise rate at ``alpha`` for any drift inside the
margin. A change whose interval excludes no change but reaches into the margin is
"changed, within the margin" (a real but small change, such as drift); one whose interval
includes no change is "no significant change"; both keep their interval. ``margin = 0``
gives the plain test of no change.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from deepseekbench._analysis._clock_witness import clock_disagrees
from deepseekbench._analysis._compare_figures import (
    FIGURES,
    Figure,
    Group,
    SideLine,
    bootstrap_change,
    common_refusals,
    figures_for,
    point_value,
    request_matrix,
    rounds_change,
)
from deepseekbench._analysis._compare_records import Factor, RunRecords, diff_records, records_of
from deepseekbench._analysis._speedup import RefusalReason, compare_speedup
from deepseekbench._types._axes import QualityParity, Speculative
from deepseekbench._types._clock import CLOCK_TOLERANCE
from deepseekbench._types._fraction import Fraction, parse_fraction
from deepseekbench._types._interval import interval_text
from deepseekbench._types._row import Row

if TYPE_CHECKING:
    from deepseekbench._analysis._analysis import RunResult

__all__ = [
    "FigureChange",
    "LineComparison",
    "ParityChange",
    "RunComparison",
    "RunSide",
    "compare_runs",
    "compare_sides",
    "side_of",
]

LineKey = tuple[str, str, str]
"""``(route label, cell id, load key)``."""

Status = Literal["changed", "no_significant_change", "not_comparable", "not_judged"]
_SUMMARY_FIGURES = ("speedup", "acceptance_rate", "acceptance_length", "tpot_p50_ms")


DEFAULT_MARGIN = 0.05
"""The change (a fraction of A) below which two runs are not called different: the
drift between back-to-back runs of identical engines (module docstring)."""


class FigureChange(BaseModel):
    """One figure of one line, run A against run B.

    Attributes:
        figure, label, unit: the figure's key, words and unit (ms, ms/token, tokens,
            0..1, ×, requests/s).
        status: ``changed`` (the interval lies wholly beyond the margin),
            ``no_significant_change`` (it reaches into the margin: :attr:`within_margin`
            tells an interval that still excludes no change), ``not_comparable``
            (refused: ``reasons``; never compared as sound) or ``not_judged`` (no
            interval could be made: ``reasons``).
        a, b: the figure in each run (``None``: not measured).
        scale: ``ratio`` (the interval is of B / A) or ``difference`` (of B − A).
        ci_low, ci_high: the interval, at per-comparison level ``level``.
        higher_is_better: the direction of "better".
        margin: the band (a fraction of A) a change had to lie wholly beyond.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    figure: str
    label: str
    unit: str
    status: Status
    a: float | None = None
    b: float | None = None
    scale: Literal["ratio", "difference"] = "ratio"
    ci_low: float | None = None
    ci_high: float | None = None
    level: float | None = None
    reasons: tuple[str, ...] = ()
    higher_is_better: bool = False
    margin: float = 0.0

    @property
    def within_margin(self) -> bool:
        """True when the interval excludes no change (B/A = 1, B − A = 0) but reaches
        into the margin: changed, yet by no more than run-to-run drift can explain."""
        if self.status != "no_significant_change" or self.margin <= 0:
            return False
        if self.ci_low is None or self.ci_high is None:
            return False
        null = 1.0 if self.scale == "ratio" else 0.0
        return self.ci_low > null or self.ci_high < null

    @property
    def verdict(self) -> str:
        """The verdict in words: ``changed significantly``, ``changed, within the 5 %
        margin``, ``no significant change``, ``not comparable: …`` or ``not judged: …``."""
        why = ", ".join(self.reasons)
        if self.status == "changed":
            return "changed significantly"
        if self.within_margin:
            return f"changed, within the {self.margin * 100:g} % margin"
        if self.status == "no_significant_change":
            return "no significant change"
        if self.status == "not_comparable":
            return f"not comparable: {why}"
        return f"not judged: {why}"

    @property
    def worse(self) -> bool:
        """True when B is worse than A in the figure's direction (changed or not)."""
        if self.a is None or self.b is None:
            return False
        return self.b < self.a if self.higher_is_better else self.b > self.a

    @property
    def relative_change(self) -> float | None:
        """``(B − A) / |A|`` (``None`` when A is 0 or either is unknown)."""
        if self.a is None or self.b is None or self.a == 0:
            return None
        return (self.b - self.a) / abs(self.a)

    def regressed(self, threshold: Fraction = 0.0) -> bool:
        """True when the figure changed significantly for the worse by more than
        ``threshold`` of A (a fraction ``0.05`` or a percent string ``"5%"``; a worse
        change from 0 always counts).

        Raises:
            FractionFormatError: ``threshold`` is in neither form, or negative.
        """
        limit = parse_fraction(threshold, name="threshold", upper=math.inf)
        if self.status != "changed" or not self.worse:
            return False
        rel = self.relative_change
        return rel is None or abs(rel) > limit

    def interval_text(self) -> str:
        """``B/A 0.94–1.07`` or ``B−A −0.02–+0.03`` (empty without an interval), its ends
        rounded outward so the printed interval holds every value it holds (a change at
        its edge, such as ``B/A`` 0.9874 over 0.98745–1, never prints outside it)."""
        if self.ci_low is None or self.ci_high is None:
            return ""
        if self.scale == "ratio":
            return f"B/A {interval_text(self.ci_low, self.ci_high, spec='.3g', outward=True)}"
        return f"B−A {interval_text(self.ci_low, self.ci_high, spec='+.3g', outward=True)}"

    def values_text(self) -> str:
        """``9.12 → 11.1 ms`` (``—`` for an unknown side)."""

        def fmt(v: float | None) -> str:
            return "—" if v is None else f"{v:.3g}"

        unit = "" if self.unit == "0..1" else self.unit if self.unit == "×" else " " + self.unit
        return f"{fmt(self.a)} → {fmt(self.b)}{unit}"

    def __str__(self) -> str:
        if self.status in ("changed", "no_significant_change"):
            return f"{self.verdict} ({self.values_text()}, {self.interval_text()})"
        if self.status == "not_comparable":
            return self.verdict
        return f"not judged ({self.values_text()}): {', '.join(self.reasons)}"


class ParityChange(BaseModel):
    """A line's quality parity in each run (``verified``, ``differs``, ...)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    a: QualityParity
    b: QualityParity

    @property
    def changed(self) -> bool:
        """True when the verdicts differ."""
        return self.a is not self.b

    @property
    def regressed(self) -> bool:
        """True when A was verified and B is not."""
        return self.a is QualityParity.verified and self.b is not QualityParity.verified

    def __str__(self) -> str:
        if not self.changed:
            return f"unchanged ({self.a.value})"
        return f"changed: {self.a.value} → {self.b.value}"


class LineComparison(BaseModel):
    """One line measured in both runs: its figures' verdicts and its parity."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    route: str
    cell: str
    load: str
    figures: tuple[FigureChange, ...]
    parity: ParityChange

    @property
    def name(self) -> str:
        """``route @ cell @ load``."""
        return f"{self.route} @ {self.cell} @ {self.load}"

    def figure(self, name: str) -> FigureChange | None:
        """The verdict of figure ``name`` (``None``: a figure compare judges, not on
        this line).

        Raises:
            UnknownKeyError: ``name`` is no figure compare judges (also a ``KeyError``;
                the message lists them: ``FIGURES``' names, ``acceptance_pos_<k>``).
        """
        from deepseekbench._errors import UnknownKeyError

        known = tuple(f.name for f in FIGURES)
        if name not in known and not re.fullmatch(r"acceptance_pos_[1-9]\d*", name):
            raise UnknownKeyError("figure", name, (*known, "acceptance_pos_<k>"))
        return next((f for f in self.figures if f.figure == name), None)


class RunComparison(BaseModel):
    """What :func:`compare_runs` found.

    Attributes:
        a, b: the runs' names (their results paths, or plan hashes).
        alpha: the family-wise false-change rate; ``judged``: the figures judged
            (``m``); each interval at level ``alpha / m``.
        margin: a change must lie wholly beyond this fraction of A to count.
        lines: the lines of both runs, in A's order.
        only_in_a, only_in_b: lines of one run only (``route @ cell @ load``).
        factors: every recorded difference between the runs.
        unchanged_records: what both runs recorded and found equal (``engine
            version``, ``launch command``, ``speculative config``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    a: str
    b: str
    alpha: float
    judged: int
    lines: tuple[LineComparison, ...]
    margin: float = 0.0
    only_in_a: tuple[str, ...] = ()
    only_in_b: tuple[str, ...] = ()
    factors: tuple[Factor, ...] = ()
    unchanged_records: tuple[str, ...] = ()

    @property
    def level(self) -> float:
        """The per-comparison level ``alpha / m`` (``alpha`` when nothing was judged)."""
        return self.alpha / max(1, self.judged)

    def changed(self) -> list[tuple[LineComparison, FigureChange]]:
        """Every figure that changed significantly, with its line."""
        return [(ln, f) for ln in self.lines for f in ln.figures if f.status == "changed"]

    def regressions(self, threshold: Fraction = 0.0) -> list[str]:
        """Every regression beyond ``threshold`` of A (a fraction ``0.05`` or a percent
        string ``"5%"``) in words: a figure changed significantly for the worse, or
        parity lost its ``verified``. The same figure (same A, B and interval) on several
        lines — a run-level figure such as the prefix-cache hit rate, repeated on each
        line of the run — is one regression naming its lines.

        Raises:
            FractionFormatError: ``threshold`` is in neither form, or negative.
        """
        limit = parse_fraction(threshold, name="threshold", upper=math.inf)
        # one figure repeated on several lines (a run-level figure such as the
        # prefix-cache hit rate: the same A, B and interval on every line) is one
        # regression, naming its lines, not one per line
        groups: dict[tuple[object, ...], list[str]] = {}
        found: dict[tuple[object, ...], FigureChange] = {}
        for ln, f in self.changed():
            if f.regressed(limit):
                key: tuple[object, ...] = (f.figure, f.a, f.b, f.ci_low, f.ci_high)
                groups.setdefault(key, []).append(ln.name)
                found[key] = f
        out = []
        for key, names in groups.items():
            f = found[key]
            where = (
                names[0]
                if len(names) == 1
                else (f"{len(names)} lines, one figure ({', '.join(names)})")
            )
            out.append(f"{where}: {f.label} {f}")
        out += [f"{ln.name}: parity {ln.parity}" for ln in self.lines if ln.parity.regressed]
        return out

    @property
    def summary(self) -> str:
        """One paragraph naming what moved: the changed figures (per figure and
        direction, the line of its largest change, then every other line it moved that
        way on), those unchanged, parity, and the recorded differences."""
        return _summary(self)


@dataclass(frozen=True, slots=True)
class RunSide:
    """One run as the comparison reads it: its lines and its records.

    Attributes:
        name: how reports name the run (its results path).
        lines: per :data:`LineKey`, the line (row, requests, per-round windows).
        records: what the run recorded about itself (for the attribution).
    """

    name: str
    lines: Mapping[LineKey, SideLine]
    records: RunRecords = field(default_factory=RunRecords)


def _cache_rounds(
    path: Path | None, plan_hash: str | None
) -> dict[tuple[str, str, str | None], dict[int, float]]:
    """Prefix-cache hit rate per round of each (route, cell, load) of the file's run of
    ``plan_hash`` (a file may hold several runs)."""
    from deepseekbench._store._results import ResultsFormatError, read_stored_run

    if path is None:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = read_stored_run(path, plan_hash=plan_hash).state
    except (ResultsFormatError, OSError):
        return {}
    out: dict[tuple[str, str, str | None], dict[int, float]] = {}
    for (route, cell, load, round_), window in state.cache.items():
        if window.prefix_cache_hit_rate is not None:
            out.setdefault((route, cell, load), {})[round_] = window.prefix_cache_hit_rate
    return out


def side_of(result: RunResult, name: str | None = None) -> RunSide:
    """``result`` (e.g. from :func:`~deepseekbench.load_results`) as a :class:`RunSide`:
    each row's successful measured requests, its goodput per round and its prefix-cache
    hit rate per round (read from ``result.results_path``), and its records."""
    from deepseekbench._records._measurement import is_unsent

    single = len(result.plan.load_points) == 1
    stored_hash = result.meta.plan_hash if result.meta is not None else result.plan_hash
    cache = _cache_rounds(result.results_path, stored_hash)
    lines: dict[LineKey, SideLine] = {}
    for (route, cell, load), row in zip(result.row_keys, result.rows, strict=True):
        kept = [
            m
            for m in result.measurements
            if m.route == route
            and m.cell == cell
            and (m.load == load or (single and m.load is None))
            and m.measurement.error is None
            and not is_unsent(m.measurement)
        ]
        requests = tuple(m.measurement for m in kept)
        rounds: dict[str, Mapping[int, float]] = {
            "prefix_cache_hit_rate": cache.get(
                (route, cell, load), cache.get((route, cell, None), {})
            )
        }
        if row.goodput_req_per_s is not None:
            rounds["goodput_req_per_s"] = result.round_values(
                route, cell, "goodput_req_per_s", load
            )
        lines[(route, cell, load)] = SideLine(
            row,
            requests,
            rounds,
            result.results_tampered,
            tuple(m.round for m in kept),
            tuple(m.item for m in kept),
        )
    meta = result.meta
    records = records_of(
        result.rows,
        plan=result.plan.model_dump(mode="json"),
        model=result.plan.model,
        library_version=meta.library_version if meta is not None else None,
    )
    label = name or (str(result.results_path) if result.results_path else result.plan_hash)
    return RunSide(label, lines, records)


def _loaded(run: RunResult | str | Path) -> RunSide:
    if isinstance(run, (str, Path)):
        from deepseekbench._analysis._analysis import load_results
        from deepseekbench._store._chain import ResultsIntegrityWarning

        with warnings.catch_warnings():  # a tampered file is refused per figure, by name
            warnings.simplefilter("ignore", ResultsIntegrityWarning)
            return side_of(load_results(run), str(run))
    return side_of(run)


def compare_runs(
    a: RunResult | str | Path,
    b: RunResult | str | Path,
    *,
    alpha: float = 0.05,
    seed: int = 0,
    margin: Fraction = DEFAULT_MARGIN,
) -> RunComparison:
    """What changed from run ``a`` to run ``b`` (results files or
    :class:`~deepseekbench.RunResult`), line by line and figure by figure.

    Lines are matched by (route label, cell id, load key); lines of one run only are
    listed in ``only_in_a`` / ``only_in_b``. Per line, every figure both rows carry —
    speedup (TPOT, against the same run's ``off`` line), acceptance rate (accepted /
    drafted tokens), acceptance length (tokens per verify step), acceptance at each
    draft position, TTFT and TPOT p50/p99 (ms, ms/token), goodput (requests/s) and
    prefix-cache hit rate (0..1) — gets a verdict with its interval, and parity a
    ``verified → differs`` verdict. A figure is never compared as sound when either
    row is refused within its run: an edited results file, parity not verified, too
    few requests (:data:`~deepseekbench.MIN_REQUESTS_FOR_SPEEDUP`), a refused route
    identity, a starved client's or estimated TPOT, the speedup's own refusals
    (:func:`~deepseekbench.compare_speedup`), or a client clock that disagrees with the
    engine's by more than 25 % across the runs; it reads "not comparable" with the
    reasons. Intervals: percentile bootstrap over the prompts both runs measured,
    paired on the prompt, then requests within each (each run's requests on their
    own where the requests name no prompt; window figures: Welch t over rounds),
    Bonferroni over the ``m`` figures judged, so the family-wise false-change rate is
    at most ``alpha``
    (``deepseekbench._analysis._compare_figures``; docs/compare.md).

    Args:
        a, b: the runs (a path reads the file's last run, as :func:`~deepseekbench.load_results`).
        alpha: the family-wise false-change rate, in (0, 1).
        seed: the bootstrap generator's seed (the same inputs give the same verdicts).
        margin: "changed significantly" needs the interval wholly beyond this share
            of A, a fraction or a percent string (``0.05`` = ``"5%"``; default
            :data:`DEFAULT_MARGIN`: the drift between back-to-back identical runs).

    Returns:
        A :class:`RunComparison`; its ``summary`` names what moved and the recorded
        differences (:class:`~deepseekbench._analysis._compare_records.Factor`).

    Raises:
        ValueError: ``alpha`` not in (0, 1).
        FractionFormatError: ``margin`` in neither form, or not in [0, 1) (a ValueError).
        ResultsFormatError: a results file is unreadable or has no run.
    """
    return compare_sides(_loaded(a), _loaded(b), alpha=alpha, seed=seed, margin=margin)


@dataclass
class _Pending:
    """A figure whose interval is made once the family's size is known."""

    fig: Figure
    a: float | None
    b: float | None
    groups: tuple[Sequence[Group], Sequence[Group]] | None = None
    rounds: tuple[Mapping[int, float], Mapping[int, float]] | None = None


def compare_sides(
    a: RunSide,
    b: RunSide,
    *,
    alpha: float = 0.05,
    seed: int = 0,
    margin: Fraction = DEFAULT_MARGIN,
) -> RunComparison:
    """:func:`compare_runs` of two runs already read (:func:`side_of`, or lines built by
    hand, e.g. synthetic rows in tests); ``margin`` as there (default
    :data:`DEFAULT_MARGIN`; ``margin=0`` gives the plain test of no change).

    Raises:
        ValueError: ``alpha`` not in (0, 1).
        FractionFormatError: ``margin`` in neither form, or not in [0, 1) (a ValueError).
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    margin = parse_fraction(margin, name="margin")
    common = [k for k in a.lines if k in b.lines]
    built: list[tuple[LineKey, list[FigureChange | _Pending]]] = []
    pending: list[_Pending] = []
    for key in common:
        entries = _line_entries(a, b, key)
        pending += [e for e in entries if isinstance(e, _Pending)]
        built.append((key, entries))
    m = len(pending)
    level = alpha / max(1, m)
    done = {id(p): _judged(p, level, seed + i, margin) for i, p in enumerate(pending)}
    lines = tuple(
        LineComparison(
            route=key[0],
            cell=key[1],
            load=key[2],
            figures=tuple(done[id(e)] if isinstance(e, _Pending) else e for e in entries),
            parity=ParityChange(
                a=a.lines[key].row.quality_parity, b=b.lines[key].row.quality_parity
            ),
        )
        for key, entries in built
    )
    return RunComparison(
        a=a.name,
        b=b.name,
        alpha=alpha,
        judged=m,
        margin=margin,
        lines=lines,
        only_in_a=tuple(" @ ".join(k) for k in a.lines if k not in b.lines),
        only_in_b=tuple(" @ ".join(k) for k in b.lines if k not in a.lines),
        factors=(factors := diff_records(a.records, b.records)),
        unchanged_records=_unchanged(a.records, b.records, factors),
    )


def _unchanged(a: RunRecords, b: RunRecords, factors: Sequence[Factor]) -> tuple[str, ...]:
    """The route records both runs hold (for some route) and hold equal (for every route
    both have): ``engine version``, ``launch command``, ``speculative config``."""
    both = [(a.routes[k], b.routes[k]) for k in a.routes if k in b.routes]
    out: list[str] = []
    for name, attr in (
        ("engine version", "engine_version"),
        ("launch command", "command"),
        ("speculative config", "spec_config"),
    ):
        values = [(getattr(ra, attr), getattr(rb, attr)) for ra, rb in both]
        recorded = any(va is not None and vb is not None for va, vb in values)
        if name == "launch command":  # equal but for its port: no launch factor
            same = not any(f.kind.startswith("launch") for f in factors)
        else:
            same = all(va == vb for va, vb in values)
        if recorded and same:
            out.append(name)
    return tuple(out)


def _off_line(side: RunSide, key: LineKey) -> SideLine | None:
    """The ``off`` line of the same cell and load in that run (the speedup's baseline)."""
    for (_, cell, load), line in side.lines.items():
        if cell == key[1] and load == key[2] and line.row.speculative is Speculative.off:
            return line
    return None


def _speedup_reasons(side: str, off: SideLine | None, own: SideLine) -> list[str]:
    if off is None:
        return [f"no_off_line_{side}"]
    verdict = compare_speedup(off.row, own.row)  # no samples: the within-run refusals only
    reasons = [r.value for r in verdict.reasons if r is not RefusalReason.no_significant_difference]
    if off.tampered or own.tampered:
        reasons.append("results_tampered")
    return [f"{r} ({side})" for r in reasons]


def _clock_reasons(fig: Figure, ra: Row, rb: Row) -> list[str]:
    """The client's change against the engine's own change of the same rows (TTFT, TPOT)."""
    metric = (
        "ttft_ms"
        if fig.name.startswith("ttft")
        else "tpot_ms"
        if fig.name.startswith("tpot")
        else None
    )
    if metric is None:
        return []
    va, vb = getattr(ra, metric), getattr(rb, metric)
    if not (va and vb and va > 0 and vb > 0):
        return []
    return (
        ["clock_disagreement"] if clock_disagrees(ra, rb, metric, va / vb, CLOCK_TOLERANCE) else []
    )


def _line_entries(a: RunSide, b: RunSide, key: LineKey) -> list[FigureChange | _Pending]:
    la, lb = a.lines[key], b.lines[key]
    out: list[FigureChange | _Pending] = []
    for fig in figures_for(la.row, lb.row):
        if not (fig.applies(la.row) or fig.applies(lb.row)):
            continue
        out.append(_entry(fig, a, b, key))
    return out


def _refused(fig: Figure, a: RunSide, b: RunSide, key: LineKey) -> list[str]:
    la, lb = a.lines[key], b.lines[key]
    reasons: list[str] = []
    for side, line in (("A", la), ("B", lb)):
        if not fig.applies(line.row):
            reasons.append(f"not_measured ({side})")
        elif fig.baseline:
            reasons += _speedup_reasons(side, _off_line(a if side == "A" else b, key), line)
        else:
            reasons += [f"{r} ({side})" for r in common_refusals(fig, line.row, line.tampered)]
    return reasons + _clock_reasons(fig, la.row, lb.row)


def _entry(fig: Figure, a: RunSide, b: RunSide, key: LineKey) -> FigureChange | _Pending:
    la, lb = a.lines[key], b.lines[key]
    reasons = tuple(_refused(fig, a, b, key))
    if fig.window is not None:
        va, vb = fig.row_value(la.row), fig.row_value(lb.row)
        if reasons:
            return _change(fig, "not_comparable", va, vb, reasons)
        ra, rb = la.rounds.get(fig.window, {}), lb.rounds.get(fig.window, {})
        if len(ra) < 2 or len(rb) < 2:
            why = "fewer than 2 measurement windows (rounds) a run: no interval"
            return _change(fig, "not_judged", va, vb, (why,))
        return _Pending(fig, va, vb, rounds=(ra, rb))
    if reasons:
        return _change(fig, "not_comparable", reasons=reasons)
    ga, gb = _groups(fig, a, key), _groups(fig, b, key)
    if any(len(g) < max(2, fig.min_requests) for g in (*ga, *gb)):
        why = f"fewer than {max(2, fig.min_requests)} requests carrying the figure in a run"
        if fig.min_requests > 2:
            why += ": a p99 of fewer is near the sample's maximum, too narrow to bootstrap"
        va, vb = fig.row_value(la.row), fig.row_value(lb.row)
        return _change(fig, "not_judged", va, vb, (why,))
    va, vb = point_value(fig, ga), point_value(fig, gb)
    if va is None or vb is None:
        why = "the figure is not finite in a run (a zero denominator)"
        return _change(fig, "not_judged", va, vb, (why,))
    return _Pending(fig, va, vb, groups=(ga, gb))


def _groups(fig: Figure, side: RunSide, key: LineKey) -> tuple[Group, ...]:
    own = request_matrix(fig, side.lines[key])
    if not fig.baseline:
        return (own,)
    off = _off_line(side, key)
    assert off is not None  # refused before (no_off_line)
    return (request_matrix(fig, off), own)


def _change(
    fig: Figure,
    status: Status,
    a: float | None = None,
    b: float | None = None,
    reasons: tuple[str, ...] = (),
    ci: tuple[float, float] | None = None,
    level: float | None = None,
) -> FigureChange:
    return FigureChange(
        figure=fig.name,
        label=fig.label,
        unit=fig.unit,
        scale=fig.scale,
        higher_is_better=fig.higher_is_better,
        status=status,
        a=a,
        b=b,
        reasons=reasons,
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        level=level,
    )


def _judged(p: _Pending, level: float, seed: int, margin: float = 0.0) -> FigureChange:
    fig = p.fig
    if p.groups is not None:
        ci = bootstrap_change(fig, p.groups[0], p.groups[1], level=level, seed=seed)
    else:
        assert p.rounds is not None
        ci = rounds_change(fig, p.rounds[0], p.rounds[1], level=level)
    if ci is None:
        why = "the interval is degenerate (a non-positive value on a ratio scale)"
        return _change(fig, "not_judged", p.a, p.b, (why,))
    if fig.scale == "ratio":
        low, high = 1.0 - margin, 1.0 + margin
    else:
        band = margin * abs(p.a) if p.a is not None else 0.0
        low, high = -band, band
    beyond = ci[0] > high or ci[1] < low
    status: Status = "changed" if beyond else "no_significant_change"
    return _change(fig, status, p.a, p.b, ci=ci, level=level).model_copy(update={"margin": margin})


def _load_words(load: str) -> str:
    return load.split(":", 1)[-1]


SUMMARY_PLACES = 4
"""Lines the summary names where one figure moved the same way on several, before it
counts the rest (every line stays in :attr:`RunComparison.lines`)."""


def _place(ln: LineComparison, with_cell: bool) -> str:
    """``mtp c=8`` (``mtp c=8 @ 1k/256/non_think`` when the runs have several cells)."""
    return f"{ln.route} {_load_words(ln.load)}" + (f" @ {ln.cell}" if with_cell else "")


def _where(lines: Sequence[LineComparison], with_cell: bool) -> str:
    """Where one figure moved one way: the line of its largest change (``mtp, c=8``),
    then, on several lines, every other line it moved on (the first
    :data:`SUMMARY_PLACES`, then their count), so a figure is never credited to one
    route for lines of others."""
    first = lines[0]
    head = f"{first.route}, {_load_words(first.load)}" + (f", {first.cell}" if with_cell else "")
    if len(lines) == 1:
        return head
    rest = [_place(ln, with_cell) for ln in lines[1:]]
    named = ", ".join(rest[:SUMMARY_PLACES])
    more = f" and {len(rest) - SUMMARY_PLACES} more" if len(rest) > SUMMARY_PLACES else ""
    return f"{head}, the largest of {len(lines)} lines; also {named}{more}"


def _moved(cmp: RunComparison) -> tuple[list[str], list[str]]:
    """The changed figures in words, one entry per figure and direction (its largest
    relative change first, then every other line it moved that way on), and the headline
    figures judged everywhere without a change."""
    by_fig: dict[tuple[str, bool], list[tuple[LineComparison, FigureChange]]] = {}
    judged: dict[str, str] = {}
    for ln in cmp.lines:
        for f in ln.figures:
            if f.status in ("changed", "no_significant_change"):
                judged[f.figure] = f.label
            if f.status == "changed":
                rose = (f.b or 0) > (f.a or 0)
                by_fig.setdefault((f.figure, rose), []).append((ln, f))
    with_cell = len({ln.cell for ln in cmp.lines}) > 1
    moved: list[str] = []
    for (_, rose), items in by_fig.items():
        items.sort(key=lambda lf: abs(lf[1].relative_change or math.inf), reverse=True)
        f = items[0][1]
        where = _where([ln for ln, _ in items], with_cell)
        moved.append(f"{f.label} {'rose' if rose else 'fell'} {f.values_text().strip()} ({where})")
    changed = {name for name, _ in by_fig}
    still = [judged[n] + " unchanged" for n in _SUMMARY_FIGURES if n in judged and n not in changed]
    return moved, still


SUMMARY_PLAN_KEYS = 3
"""Plan keys the summary names before it counts the rest (every one stays in
:attr:`RunComparison.factors`: ``compare --format json``, or the text's closing list)."""


def _factor_words(cmp: RunComparison) -> list[str]:
    """The recorded differences in words; past :data:`SUMMARY_PLAN_KEYS` plan keys, their
    count and the first few (two unrelated plans differ in most of their keys)."""
    plan_keys = [f for f in cmp.factors if f.kind == "plan key"]
    if len(plan_keys) <= SUMMARY_PLAN_KEYS:
        words = [str(f) for f in cmp.factors]
    else:
        first = ", ".join(f.name for f in plan_keys[:SUMMARY_PLAN_KEYS])
        words = [str(f) for f in cmp.factors if f.kind != "plan key"]
        words.append(
            f"{len(plan_keys)} plan keys differ ({first}, …; all in the comparison's "
            "factors: compare --format json, or the list of recorded differences)"
        )
    return words + [f"{n} unchanged" for n in cmp.unchanged_records]


def _summary(cmp: RunComparison) -> str:
    moved, still = _moved(cmp)
    flips = [f"{ln.route} {_load_words(ln.load)}" for ln in cmp.lines if ln.parity.changed]
    parity = "parity changed on " + ", ".join(flips) if flips else "parity unchanged"
    head = moved or [f"no significant change on any of the {cmp.judged} figures judged"]
    small = [f for ln in cmp.lines for f in ln.figures if f.within_margin]
    if small:  # real changes no larger than run-to-run drift: named, not counted
        head.append(f"{len(small)} changed within the {cmp.margin * 100:g} % margin")
    text = ", ".join([*head, *still, parity])
    refused = sum(f.status == "not_comparable" for ln in cmp.lines for f in ln.figures)
    if refused:
        text += f" ({refused} figures not comparable: see their reasons)"
    text += f"; family-wise α {cmp.alpha:g} over {cmp.judged} figures"
    words = _factor_words(cmp)
    text += "; recorded differences: " + ("none" if not cmp.factors else "")
    return text + ", ".join(words) if cmp.factors else text + "".join(f", {w}" for w in words)
