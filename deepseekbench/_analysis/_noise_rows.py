"""A row's divergences explained, and its verdict under ``parity.exact`` (pure).

Reads the forensics step's records (:mod:`deepseekbench._execute._forensics`) for one
row: the ``divergence_margin`` records of the route's parity-set and measured-traffic
divergences at the row's cell and load point, each reclassified against the run's τ, and
the ``off_profile`` records (``off``'s margins over each compared output, followed up
alone; :class:`~deepseekbench._types._noise.OffProfile`). A divergence never followed up
is ``unexplained``. τ is :func:`~deepseekbench._analysis._divergence.measure_tau`'s, from
every profile of the run (the engine's jitter is the engine's, not one row's).

**Attribution.** A divergence whose margin names ``off`` as the route that emitted the
token (``off``'s alone follow-up reproduced the candidate's text: ``off``'s measured,
batched output is the one that flipped) is charged to ``off``, never to the candidate:
it leaves the candidate's count and joins ``off``'s self-flips.

Under ``parity.exact = "bit_exact"`` (default) the row keeps today's verdict (a row
with nothing to explain keeps every margin field at its default, so rows rebuilt from
an old results file are the rows it wrote); the fields and a one-line
:attr:`~deepseekbench.Row.divergence_note` say what the divergences were and, when
all are near-ties, what would make the row verifiable.
Under ``"within_noise"`` the verdict is :func:`~deepseekbench._analysis._divergence.
within_noise_verdict`'s. Definitions: docs/rows-and-gate.md ("Parity within noise").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deepseekbench._analysis._divergence import (
    NoiseFloor,
    NoiseVerdict,
    ProfileKey,
    TauEstimate,
    count_divergences,
    measure_tau,
    within_noise_verdict,
)
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._store._results import MarginKey, ResultsState
from deepseekbench._types._axes import QualityParity
from deepseekbench._types._margin import DivergenceKind, DivergenceMargin, no_margin
from deepseekbench._types._noise import OffProfile
from deepseekbench._types._parity import DeterminismControl, ParityResult

__all__ = ["RowDivergences", "judge_off", "judge_speculative", "noise_floor", "run_tau"]


@dataclass(frozen=True, slots=True)
class RowDivergences:
    """Where a row's divergences are: its route, reasoning mode, cell and load key."""

    route: str
    mode: str
    cell: str
    load: str


def noise_floor(
    plan: BenchmarkPlan,
    state: ResultsState,
    mode: str,
    control: DeterminismControl | None,
    rounds: DeterminismControl | None,
) -> NoiseFloor:
    """``off`` against itself (descriptive: the row's ``noise_floor``): its parity-set
    control and its rounds at the row's load; flip margins from the parity control's
    self-flips that have one."""
    off = plan.off_route.label
    n = k = 0
    flips: list[float] = []
    for c in (control, rounds):
        if c is not None:
            n += c.n_prompts
            k += len(c.divergences)
    for d in control.divergences if control is not None else ():
        m = state.margins.get((off, "parity", mode, None, None, d.prompt_id))
        if m is not None and m.margin_nats is not None and (m.candidate_rank or 99) <= 2:
            flips.append(m.margin_nats)
    return NoiseFloor(n_compared=n, n_diverged=k, flip_margins_nats=tuple(flips))


def run_tau(plan: BenchmarkPlan, state: ResultsState) -> TauEstimate:
    """The run's τ: the plan's, else measured from every ``off`` profile's jitter and
    ``off``'s flips among concurrent requests (traffic profiles not reproduced)."""
    profiles = list(state.profiles.values())
    concurrent = [
        p.fork_margin_nats
        for k, p in state.profiles.items()
        if k[0] == "traffic" and not p.reproduced and p.fork_margin_nats is not None
    ]
    return measure_tau(profiles, plan.parity.tau_nats, concurrent)


def _row_profiles(state: ResultsState, where: RowDivergences) -> dict[ProfileKey, OffProfile]:
    """``off``'s profiles of the row's compared outputs, by (source, prompt id)."""
    out: dict[ProfileKey, OffProfile] = {}
    for (source, mode, cell, load, pid), p in state.profiles.items():
        if (source == "parity" and mode == where.mode) or (
            source == "traffic" and cell == where.cell and load == where.load
        ):
            out[(source, pid)] = p
    return out


def _margins(
    state: ResultsState,
    where: RowDivergences,
    exact: ParityResult | None,
    traffic: ParityResult | None,
    tau: float,
) -> list[DivergenceMargin]:
    """One margin per divergence (parity set, then traffic), reclassified against τ."""
    keys: list[MarginKey] = [
        (where.route, "parity", where.mode, None, None, d.prompt_id)
        for d in (exact.divergences if exact is not None else ())
    ]
    keys += [
        (where.route, "traffic", "", where.cell, where.load, d.prompt_id)
        for d in (traffic.divergences if traffic is not None else ())
    ]
    out: dict[tuple[str, str], DivergenceMargin] = {}
    for key in keys:
        m = state.margins.get(key)
        if m is None:
            m = no_margin(key[5], candidate=where.route, tau_nats=tau, note="not followed up")
        out.setdefault((key[1], key[5]), m.reclassified(tau))  # one per output (text first)
    return list(out.values())


def _fields(
    margins: list[DivergenceMargin], floor: NoiseFloor, v: NoiseVerdict | None, basis: str
) -> dict[str, Any]:
    c = count_divergences(margins)
    fields: dict[str, Any] = {
        "parity_basis": basis,
        "divergences_near_tie": c.near_tie,
        "divergences_decisive": c.decisive,
        "divergences_unexplained": c.unexplained,
        "noise_floor": floor.rate,
        "first_divergence_margin_nats": margins[0].margin_nats if margins else None,
    }
    if v is not None:
        fields.update(
            divergences_near_tie=v.near_tie,
            divergences_decisive=v.decisive,
            divergences_unexplained=v.unexplained,
            divergences_shown_one_pass=v.shown_one_pass,
            near_tie_opportunities=v.opportunities,
            outputs_with_opportunity=v.outputs_with_opportunity,
            outputs_profiled=v.outputs_profiled,
            parity_power_bound=v.power_bound,
            parity_lossy_rate=v.lossy_rate,
            tau_nats=v.tau_nats,
            tau_source=v.tau_source.value,
            tau_quantile=v.tau_quantile,
            tau_sample=v.tau_sample,
        )
    return fields


def _bit_exact_note(margins: list[DivergenceMargin], floor: NoiseFloor, v: NoiseVerdict) -> str:
    c = count_divergences(margins)
    if c.decisive:
        first = next(m for m in margins if m.kind is DivergenceKind.decisive)
        return f"decisive divergence at {first.describe()}"
    if c.unexplained:
        return f"{c.unexplained} of {len(margins)} divergences without a margin (no logprobs)"
    largest = max(m.margin_nats or 0.0 for m in margins)
    return (
        f"{len(margins)} divergences, all near-ties (largest margin {largest:.3g} nats "
        f"≤ τ {v.tau_nats:.3g} from {v.tau_source.value}); {floor.describe()}: parity.exact = "
        f"'within_noise', or the engine's deterministic mode, would make it verifiable"
    )


def _split_charged(
    margins: list[DivergenceMargin], off: str, route: str
) -> tuple[list[DivergenceMargin], int]:
    """The route's own divergences, and how many were ``off``'s flips (charged to off)."""
    if route == off:
        return margins, 0
    own = [m for m in margins if m.candidate != off]
    return own, len(margins) - len(own)


def judge_speculative(
    plan: BenchmarkPlan,
    state: ResultsState,
    where: RowDivergences,
    parity: tuple[QualityParity, str],
    exact: ParityResult | None,
    traffic: ParityResult | None,
    tasks: QualityParity | None,
    floor: NoiseFloor,
) -> tuple[QualityParity, str, dict[str, Any]]:
    """A speculative row's ``(parity, reason, margin row fields)``: ``parity`` (the
    bit-exact verdict) kept under ``bit_exact``, replaced under ``within_noise``."""
    tau = run_tau(plan, state)
    all_margins = _margins(state, where, exact, traffic, tau.tau_nats)
    if plan.parity.exact == "bit_exact" and not all_margins:
        return parity[0], parity[1], {}  # nothing to explain: the row's fields stay unset
    margins, charged = _split_charged(all_margins, plan.off_route.label, where.route)
    compared = sum(r.n_matched + r.n_diverged for r in (exact, traffic) if r is not None)
    v = within_noise_verdict(
        margins,
        compared,
        _row_profiles(state, where),
        alpha=plan.parity.alpha,
        tasks_parity=tasks,
        tau=tau,
        n_missing=exact.n_missing if exact is not None else 0,
        lossy_rate=plan.parity.lossy_rate,
        sequential=plan.sequential,  # read after every round: the anytime-valid bound
    )
    fields = _fields(margins, floor, v, plan.parity.exact)
    fields["divergences_charged_to_off"] = charged
    tail = f"; {charged} divergences were off's own flips (charged to off)" if charged else ""
    if plan.parity.exact == "bit_exact":
        fields["divergence_note"] = (_bit_exact_note(margins, floor, v) if margins else "") + tail
        return parity[0], parity[1], fields
    fields["divergence_note"] = v.reason + tail
    return v.parity, f"within noise: {v.reason}; bit-exact: {parity[1]}", fields


def _off_flips(
    plan: BenchmarkPlan,
    state: ResultsState,
    mode: str,
    control: DeterminismControl | None,
    tau: float,
) -> list[DivergenceMargin]:
    """``off``'s self-flips: its determinism control's, then the traffic divergences
    charged to ``off`` (its batched output flipped), each reclassified against τ."""
    off = plan.off_route.label
    flips = [
        (
            state.margins.get((off, "parity", mode, None, None, d.prompt_id))
            or no_margin(d.prompt_id, candidate=off, tau_nats=tau, note="not followed up")
        ).reclassified(tau)
        for d in (control.divergences if control is not None else ())
    ]
    seen = {(m.source, m.prompt_id) for m in flips}
    for key, m in state.margins.items():
        if key[0] != off and m.candidate == off and (key[1], key[5]) not in seen:
            seen.add((key[1], key[5]))
            flips.append(m.reclassified(tau))
    return flips


def judge_off(
    plan: BenchmarkPlan,
    state: ResultsState,
    mode: str,
    parity: tuple[QualityParity, str],
    control: DeterminismControl | None,
    floor: NoiseFloor,
) -> tuple[QualityParity, str, dict[str, Any]]:
    """The ``off`` row's ``(parity, reason, fields)``: under ``within_noise`` its
    self-flips (control and charged traffic flips) are judged like a candidate's,
    against its own opportunities (:func:`within_noise_verdict`)."""
    tau = run_tau(plan, state)
    flips = _off_flips(plan, state, mode, control, tau.tau_nats)
    if plan.parity.exact == "bit_exact" and not flips:
        return parity[0], parity[1], {}  # nothing to explain: the row's fields stay unset
    profiles = {
        (s, pid): p
        for (s, md, _, _, pid), p in state.profiles.items()
        if s == "traffic" or md == mode
    }
    v = within_noise_verdict(
        flips,
        max(floor.n_compared, len(flips)),
        profiles,
        alpha=plan.parity.alpha,
        tau=tau,
        lossy_rate=plan.parity.lossy_rate,
        require_power=False,  # off is the reference: its row judges its determinism
    )
    fields = _fields(flips, floor, v, plan.parity.exact)
    fields["divergence_note"] = floor.describe() if floor.n_compared else None
    if plan.parity.exact == "bit_exact" or control is None or control.deterministic is None:
        return parity[0], parity[1], fields
    if v.parity is QualityParity.differs:  # off against itself: not a lossy route, unknown
        return QualityParity.unknown, f"within noise: off's self-flips: {v.reason}", fields
    return v.parity, f"within noise: off's self-flips: {v.reason}", fields
