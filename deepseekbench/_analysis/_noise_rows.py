"""A row's divergences explained, and its verdict under ``parity.exact`` (pure).

Reads the ``divergence_margin`` records of the forensics step
(:mod:`deepseekbench._execute._forensics`) for one row: the route's parity-set
divergences and its measured-traffic divergences at the row's cell and load point,
each reclassified against the row's τ (:func:`~deepseekbench._analysis._divergence.
calibrate_tau`); a divergence never followed up is ``unexplained``. The noise floor is
``off``'s determinism control plus ``off``'s rounds at the row's load point
(:class:`~deepseekbench._analysis._divergence.NoiseFloor`).

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
    calibrate_tau,
    count_divergences,
    within_noise_verdict,
)
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._store._results import MarginKey, ResultsState
from deepseekbench._types._axes import QualityParity
from deepseekbench._types._margin import (
    DivergenceKind,
    DivergenceMargin,
    TauSource,
    no_margin,
)
from deepseekbench._types._parity import DeterminismControl, ParityResult

__all__ = ["RowDivergences", "judge_off", "judge_speculative", "noise_floor"]


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
    """``off`` against itself: its parity-set control and its rounds at the row's load;
    flip margins from the parity control's self-flips whose runner-up was the other
    path (rank <= 2: the near-tie that flipped)."""
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
    out = []
    for key in keys:
        m = state.margins.get(key)
        if m is None:
            m = no_margin(key[5], candidate=where.route, tau_nats=tau, note="not followed up")
        out.append(m.reclassified(tau))
    return out


def _fields(
    margins: list[DivergenceMargin], floor: NoiseFloor, tau: tuple[float, TauSource], basis: str
) -> dict[str, Any]:
    c = count_divergences(margins)
    return {
        "parity_basis": basis,
        "divergences_near_tie": c.near_tie,
        "divergences_decisive": c.decisive,
        "divergences_unexplained": c.unexplained,
        "noise_floor": floor.rate,
        "tau_nats": tau[0],
        "tau_source": tau[1].value,
        "first_divergence_margin_nats": margins[0].margin_nats if margins else None,
    }


def _bit_exact_note(
    margins: list[DivergenceMargin], floor: NoiseFloor, tau: tuple[float, TauSource]
) -> str | None:
    if not margins:
        return None
    c = count_divergences(margins)
    if c.decisive:
        first = next(m for m in margins if m.kind is DivergenceKind.decisive)
        return f"decisive divergence at {first.describe()}"
    if c.unexplained:
        return f"{c.unexplained} of {len(margins)} divergences without a margin (no logprobs)"
    largest = max(m.margin_nats or 0.0 for m in margins)
    return (
        f"{len(margins)} divergences, all near-ties (largest margin {largest:.3g} nats "
        f"≤ τ {tau[0]:.3g} from {tau[1].value}); {floor.describe()}: parity.exact = "
        f"'within_noise', or the engine's deterministic mode, would make it verifiable"
    )


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
    tau = calibrate_tau(floor, plan.parity.tau_nats)
    margins = _margins(state, where, exact, traffic, tau[0])
    if plan.parity.exact == "bit_exact" and not margins:
        return parity[0], parity[1], {}  # nothing to explain: the row's fields stay unset
    fields = _fields(margins, floor, tau, plan.parity.exact)
    if plan.parity.exact == "bit_exact":
        fields["divergence_note"] = _bit_exact_note(margins, floor, tau)
        return parity[0], parity[1], fields
    compared = sum(r.n_matched + r.n_diverged for r in (exact, traffic) if r is not None)
    missing = exact.n_missing if exact is not None else 0
    v = within_noise_verdict(
        margins,
        compared,
        floor,
        alpha=plan.parity.alpha,
        tasks_parity=tasks,
        tau=tau,
        n_missing=missing,
    )
    fields["divergence_note"] = v.reason
    return v.parity, f"within noise: {v.reason}; bit-exact: {parity[1]}", fields


def judge_off(
    plan: BenchmarkPlan,
    state: ResultsState,
    mode: str,
    parity: tuple[QualityParity, str],
    control: DeterminismControl | None,
    floor: NoiseFloor,
) -> tuple[QualityParity, str, dict[str, Any]]:
    """The ``off`` row's ``(parity, reason, fields)``: under ``within_noise`` a control
    that differed only at near-ties (of the parity set, with margins) is verified."""
    tau = calibrate_tau(floor, plan.parity.tau_nats)
    off = plan.off_route.label
    flips = [
        (
            state.margins.get((off, "parity", mode, None, None, d.prompt_id))
            or no_margin(d.prompt_id, candidate=off, tau_nats=tau[0], note="not followed up")
        ).reclassified(tau[0])
        for d in (control.divergences if control is not None else ())
    ]
    if plan.parity.exact == "bit_exact" and not flips:
        return parity[0], parity[1], {}  # nothing to explain: the row's fields stay unset
    fields = _fields(flips, floor, tau, plan.parity.exact)
    fields["divergence_note"] = floor.describe() if floor.n_compared else None
    if plan.parity.exact == "bit_exact" or control is None or control.deterministic is None:
        return parity[0], parity[1], fields
    c = count_divergences(flips)
    if c.decisive or c.unexplained:
        return (
            QualityParity.unknown,
            f"within noise: off's self-flips not all near-ties; {parity[1]}",
            fields,
        )
    return (
        QualityParity.verified,
        f"within noise: {floor.describe()}, every parity self-flip a near-tie",
        fields,
    )
