"""One row per route, cell and load point, built from a run's records (pure).

Holds :func:`build_row` (a row's figures, client health, acceptance, parity against
``off`` joined with the measured traffic's, noise, output length, prefix cache and
trace fields), :func:`with_identity` (the route identity and launch fields of one
load point's rows), :func:`row_identity` (a row's key axes) and :class:`RowInput`
(what every row of a result is built from).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from deepseekbench._analysis._breakdown import slice_stats, workload_fields
from deepseekbench._analysis._clock_witness import server_clock_fields
from deepseekbench._analysis._determinism_rows import determinism_fields
from deepseekbench._analysis._noise_rows import (
    RowDivergences,
    judge_off,
    judge_speculative,
    noise_floor,
)
from deepseekbench._analysis._output_length import short_of_natural, tokens_past_eos
from deepseekbench._analysis._route_identity import judge_route_identity, route_evidence
from deepseekbench._analysis._route_parity import RouteParity
from deepseekbench._analysis._rowstats import (
    RowRequests,
    acceptance,
    combine_windows,
)
from deepseekbench._analysis._spec_fields import cell_spec_fields
from deepseekbench._analysis._stats import percentiles
from deepseekbench._analysis._traffic import Indexed, traffic_control, traffic_parity
from deepseekbench._analysis._witness_rows import RouteWitness, apply_witness
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._routes import CellPlan, RoutePlan
from deepseekbench._records._client_clock import client_clock_fields
from deepseekbench._records._client_health import client_saturated, max_pool_wait_ms
from deepseekbench._records._measurement import StreamMeasurement, is_unsent
from deepseekbench._store._results import ResultsState
from deepseekbench._types._acceptance import AcceptanceRecord
from deepseekbench._types._axes import Arrival, QualityParity, ReasoningMode, Speculative
from deepseekbench._types._cache import combine_cache_windows
from deepseekbench._types._identity import LaunchRecord
from deepseekbench._types._load import LoadPoint
from deepseekbench._types._parity import ParityResult
from deepseekbench._types._row import PER_REQUEST_FIGURES, Dispersion, Percentiles, Row

__all__ = ["RowInput", "build_row", "row_identity", "with_identity"]


def row_identity(
    plan: BenchmarkPlan, cell: CellPlan, route: RoutePlan, load: LoadPoint
) -> dict[str, Any]:
    """The key axes (and route label) of the row for ``route`` in ``cell`` at ``load``."""
    return {
        "model_id": plan.model,
        "provider_route": plan.provider_route,
        "engine_route": plan.engine_route,
        "hosting": plan.hosting,
        "context_bucket": cell.context_bucket,
        "output_target": cell.output_target,
        "reasoning_mode": cell.reasoning_mode,
        "stream": True,
        "speculative": route.speculative,
        "route_label": route.label,
        "concurrency": load.concurrency,
        "request_rate_per_s": load.rate_per_s,
        "arrival": load.arrival,
    }


def _row_records(
    plan: BenchmarkPlan, state: ResultsState, route: str, cell: str, load: LoadPoint
) -> Indexed:
    """The row's measured requests by (index, turn) (``None`` load keys match a
    one-point plan); a request the run's budget refused was never sent
    (:func:`~deepseekbench._records._measurement.is_unsent`): no row counts it."""
    keys = {load.key} | ({None} if len(plan.load_points) == 1 else set())
    return {
        (i, t): (m, state.info[(label, cid, lk, i, t)])
        for (label, cid, lk, i, t), m in state.measurements.items()
        if label == route
        and cid == cell
        and lk in keys
        and i < plan.requests_per_cell
        and not is_unsent(m)
    }


def _join_parity(
    plan: BenchmarkPlan, rp: RouteParity | None, traffic: ParityResult | None
) -> tuple[QualityParity, str]:
    """A row's parity: the parity set's, overruled by a divergence of the measured traffic."""
    parity = rp.parity if rp is not None else QualityParity.unknown
    reason = rp.reason if rp is not None else "parity not run"
    if traffic is None:
        return parity, (
            f"{reason}; measured traffic sampled at temperature {plan.temperature:g}: "
            "the row relies on task parity"
        )
    note = "measured traffic: " + traffic.reason.replace("prompts", "requests")
    if traffic.parity is QualityParity.differs:
        return QualityParity.differs, f"{note}; parity set: {reason}"
    if traffic.control is not None and traffic.control.deterministic is False:
        return QualityParity.unknown, f"{note}; parity set: {reason}"
    return parity, f"{reason}; {note}"


def _off_parity(
    plan: BenchmarkPlan, rp: RouteParity | None, off: Indexed
) -> tuple[QualityParity, str]:
    """The ``off`` row's parity: the parity set's, unless ``off`` differed from itself
    between rounds at this load (then ``unknown``)."""
    parity = rp.parity if rp is not None else QualityParity.unknown
    reason = rp.reason if rp is not None else "parity not run"
    if plan.temperature > 0:
        return parity, reason
    control = traffic_control(plan, off)
    if control.deterministic is False:
        d = control.divergences[0].describe("round 1", "a later round")
        return QualityParity.unknown, (
            f"baseline nondeterministic under load: off differed from itself between "
            f"rounds on {len(control.divergences)} of {control.n_prompts} prompts ({d}); "
            f"parity set: {reason}"
        )
    if control.deterministic:
        reason += f"; measured traffic: deterministic across rounds on {control.n_prompts}"
    return parity, reason


def dispersion(ok: Sequence[StreamMeasurement]) -> Dispersion:
    """p50/p90/p99 of every :data:`~deepseekbench._types._row.PER_REQUEST_FIGURES` entry
    over the successful requests ``ok`` (a per-chunk figure pooled over all their chunks),
    each in its figure's unit; ``None`` percentiles where no request gave a value."""
    pct: dict[str, Percentiles | None] = {}
    for fig in PER_REQUEST_FIGURES:
        values = (getattr(m, fig.name) for m in ok)
        pct[fig.name] = (
            percentiles(x for v in values for x in v) if fig.per_chunk else percentiles(values)
        )
    return Dispersion(**pct)


def _figures(rows: RowRequests, max_lag_ms: float) -> dict[str, Any]:
    ok = rows.ok
    lag = rows.queue_p90_ms()
    return {
        "ttft_ms": rows.value("ttft_ms"),
        "tpot_ms": rows.value("tpot_ms"),
        "e2e_ms": rows.value("e2e_ms"),
        "output_toks_per_s": rows.value("output_toks_per_s"),
        "tokens_estimated": any(m.tokens_estimated for m in ok),
        "n_requests": len(rows.requests),
        "n_errors": len(rows.requests) - len(ok),
        "dispersion": dispersion(ok),
        "output_throughput_toks_per_s": rows.output_throughput(),
        "request_throughput_per_s": rows.request_throughput(),
        "goodput_req_per_s": rows.goodput(),
        "slo_attainment": rows.slo_attainment(),
        "rounds": len(rows.rounds()) or None,
        "schedule_lagged": lag is not None and lag > max_lag_ms,
    }


def _client_fields(rows: RowRequests, threshold_ms: float) -> dict[str, Any]:
    """The row's client health (docs/measurement.md, "Fidelity"): ``client_saturated``
    when any measured request saw the client's event loop lag past ``threshold_ms`` (ms),
    and the longest pool wait of its measured requests (ms)."""
    measured = [m for m, _ in rows.requests]
    return {
        "client_saturated": client_saturated(measured, threshold_ms),
        "client_pool_wait_ms": max_pool_wait_ms(measured),
        **client_clock_fields(measured, threshold_ms),
        **server_clock_fields(measured),  # the engine's own clock, beside it
    }


def _server_window(
    state: ResultsState, route: str, cell: str, load: LoadPoint
) -> AcceptanceRecord | None:
    """The row's ``/metrics`` windows (one per round) as one record."""
    windows = [
        rec
        for (label, cid, lk, _), rec in sorted(state.server.items(), key=lambda kv: kv[0][3])
        if label == route and cid == cell and lk in (load.key, None)
    ]
    return combine_windows(windows)


def _workers_fields(state: ResultsState, route: str, cell: str, load: LoadPoint) -> dict[str, Any]:
    """The row's client workers (the most over its rounds' ``workers`` records; None
    when no pool sent it) and, with ``workers = "auto"``, why that many."""
    got = [
        w
        for (label, cid, lk, _), w in sorted(state.workers.items(), key=lambda kv: kv[0][3])
        if label == route and cid == cell and lk in (load.key, None)
    ]
    if not got:
        return {}
    bases = [b for _, b in got if b is not None]
    return {
        "client_workers": max(n for n, _ in got),
        "client_workers_basis": bases[0] if bases else None,
    }


def _cache_fields(state: ResultsState, route: str, cell: str, load: LoadPoint) -> dict[str, Any]:
    """The row's prefix-cache hit rate and KV/queue peaks over its windows, and its
    engine steps (only from windows of this load: none of a window spanning loads)."""
    windows = [
        rec
        for (label, cid, lk, _), rec in sorted(state.cache.items(), key=lambda kv: kv[0][3])
        if label == route and cid == cell and lk in (load.key, None)
    ]
    window = combine_cache_windows(windows)
    if window is None:
        return {}
    # a window of no one load (lk None) spans several: its steps would count in each
    shared = any(
        lk is None for (label, cid, lk, _) in state.cache if label == route and cid == cell
    )
    steps = (
        {}
        if shared
        else {
            "engine_steps": window.engine_steps,
            "engine_batch_mean": window.engine_batch_mean,
            "engine_steps_source": window.steps_source,
        }
    )
    return {
        "prefix_cache_hit_rate": window.prefix_cache_hit_rate,
        "kv_cache_usage_peak": window.kv_cache_usage_peak,
        "queue_depth_peak": window.queue_depth_peak,
        **steps,
    }


def _trace_fields(plan: BenchmarkPlan) -> dict[str, Any]:
    """Which trace was replayed, at which speed-up."""
    trace = plan.workload.trace
    if trace is None:
        return {}
    return {"trace": trace.path, "trace_speedup": trace.speedup}


def _ramp_ms(plan: BenchmarkPlan, load: LoadPoint) -> float | None:
    """A closed loop's ramp (ms; 0 = all at once), ``None`` for an open loop (a rate, or a
    trace's own send times)."""
    if load.arrival is not Arrival.closed or plan.workload.trace is not None:
        return None
    return plan.arrival.ramp_ms


def _acceptance_fields(
    route: RoutePlan, server: AcceptanceRecord | None, ok: list[StreamMeasurement]
) -> dict[str, Any]:
    if route.speculative is Speculative.off:
        return {}
    ratio, length, scope, drafted, accepted = acceptance(ok, server)
    return {
        "accepted_token_ratio": ratio,
        "acceptance_length": length,
        "acceptance_scope": scope,
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
    }


@dataclass(frozen=True, slots=True)
class RowInput:
    plan: BenchmarkPlan
    state: ResultsState
    parity: dict[tuple[str, ReasoningMode], RouteParity]
    launched: Mapping[str, LaunchRecord] = field(default_factory=dict)
    witnesses: Mapping[tuple[str, str], RouteWitness] = field(default_factory=dict)


def build_row(
    inp: RowInput, route: RoutePlan, cell: CellPlan, load: LoadPoint
) -> tuple[Row, ParityResult | None]:
    plan = inp.plan
    mine = _row_records(plan, inp.state, route.label, cell.cell_id, load)
    off = _row_records(plan, inp.state, plan.off_route.label, cell.cell_id, load)
    rows = RowRequests(tuple(mine[k] for k in sorted(mine)), plan.slo.limits)
    rp = inp.parity.get((route.label, cell.reasoning_mode))
    traffic: ParityResult | None = None
    if route.speculative is Speculative.off:
        parity, reason = _off_parity(plan, rp, off)
    else:
        traffic = traffic_parity(plan, off, mine) if plan.temperature == 0 else None
        parity, reason = _join_parity(plan, rp, traffic)
    parity, reason, noise = _within_noise(inp, route, cell, load, (parity, reason), traffic, off)
    noise = determinism_fields(inp.state.determinism, route.label, plan.off_route.label, noise)
    mode = cell.reasoning_mode.value
    parity, reason, seen = apply_witness(plan, inp.witnesses, route.label, mode, (parity, reason))
    noise = noise | seen
    server = _server_window(inp.state, route.label, cell.cell_id, load)
    row = Row(
        **row_identity(plan, cell, route, load),
        **_figures(rows, plan.arrival.max_lag_ms),
        **_client_fields(rows, plan.client_lag_threshold_ms),
        **_acceptance_fields(route, server, rows.ok),
        quality_parity=parity,
        parity_detail=reason,
        **cell_spec_fields(
            [m for m, _ in rows.requests],
            server,
            speculative=route.speculative is not Speculative.off,
            declared_spec_tokens=route.spec_tokens,
        ),
        **_output_length_fields(  # natural-length decode
            plan, inp.state, cell.cell_id, mine, _workload_breakdown(mine, cell.request_max_tokens)
        ),
        **_cache_fields(inp.state, route.label, cell.cell_id, load),
        **_workers_fields(inp.state, route.label, cell.cell_id, load),
        **_trace_fields(plan),
        ramp_ms=_ramp_ms(plan, load),
        **noise,
    )
    return row, traffic


def _within_noise(
    inp: RowInput,
    route: RoutePlan,
    cell: CellPlan,
    load: LoadPoint,
    parity: tuple[QualityParity, str],
    traffic: ParityResult | None,
    off: Indexed,
) -> tuple[QualityParity, str, dict[str, Any]]:
    """The row's divergences explained by ``off``'s margins, against ``off``'s
    noise floor at this load; the verdict under ``parity.exact``
    (:mod:`deepseekbench._analysis._noise_rows`)."""
    plan, mode = inp.plan, cell.reasoning_mode
    off_rp = inp.parity.get((plan.off_route.label, mode))
    control = off_rp.control if off_rp is not None else None
    rounds = traffic_control(plan, off) if plan.temperature == 0 else None
    floor = noise_floor(plan, inp.state, mode.value, control, rounds)
    if route.speculative is Speculative.off:
        return judge_off(plan, inp.state, mode.value, parity, control, floor)
    rp = inp.parity.get((route.label, mode))
    where = RowDivergences(route.label, mode.value, cell.cell_id, load.key)
    tasks = rp.tasks.parity if rp is not None and rp.tasks is not None else None
    exact = rp.exact if rp is not None else None
    return judge_speculative(plan, inp.state, where, parity, exact, traffic, tasks, floor)


def _output_length_fields(
    plan: BenchmarkPlan, state: ResultsState, cell: str, mine: Indexed, fields: dict[str, Any]
) -> dict[str, Any]:
    """``fields`` (:func:`_workload_breakdown`) with the run's
    ``output_length`` and the row's ``tokens_past_eos``; a pinned row judges
    "short" against each prompt's pinned (natural) length, not the cell's cap."""
    natural = {(item, t): m for (c, item, t), m in state.calibration.items() if c == cell}
    measured = [(info.item, turn, m) for (_, turn), (m, info) in sorted(mine.items())]
    out = dict(fields)
    out["output_length"] = plan.workload.output_length
    out["tokens_past_eos"] = tokens_past_eos(measured, natural)
    if plan.workload.output_length != "pinned" or not natural:
        return out
    n_short = short_of_natural(measured, natural)
    out |= {"output_short": n_short > 0, "n_output_short": n_short}
    category = [info.category for _, (_, info) in sorted(mine.items())]

    def slice_short(name: str) -> bool:
        picked = [
            x
            for x, cat in zip(measured, category, strict=True)
            if cat == name or f"turn {x[1] + 1}" == name
        ]
        return short_of_natural(picked, natural) > 0

    for key in ("categories", "turns"):
        out[key] = tuple(
            s.model_copy(update={"output_short": slice_short(s.name)}) for s in out.get(key, ())
        )
    return out


def _workload_breakdown(mine: Indexed, max_tokens: int) -> dict[str, Any]:
    """Short-output flag, length percentiles and per-category / per-turn slices."""
    keys = sorted(mine)
    measured = [mine[k][0] for k in keys]
    out = workload_fields([m for m in measured if m.error is None], max_tokens)
    by_cat: dict[str, list[StreamMeasurement]] = {}
    by_turn: dict[int, list[StreamMeasurement]] = {}
    for (_, turn), (m, info) in ((k, mine[k]) for k in keys):
        if info.category is not None:
            by_cat.setdefault(info.category, []).append(m)
        by_turn.setdefault(turn, []).append(m)
    out["categories"] = tuple(
        slice_stats(name, ms, max_tokens=max_tokens) for name, ms in sorted(by_cat.items())
    )
    if len(by_turn) > 1:
        out["turns"] = tuple(
            slice_stats(f"turn {t + 1}", ms, max_tokens=max_tokens)
            for t, ms in sorted(by_turn.items())
        )
    return out


def with_identity(inp: RowInput, cell: CellPlan, load: LoadPoint, rows: Sequence[Row]) -> list[Row]:
    """``rows`` (one per plan route, in plan order) with their route identity set
    (:mod:`deepseekbench._analysis._route_identity`)."""
    plan = inp.plan
    evidence = [
        route_evidence(
            r.label,
            r.speculative,
            r.dialect,
            [m for m, _ in _row_records(plan, inp.state, r.label, cell.cell_id, load).values()],
            _server_window(inp.state, r.label, cell.cell_id, load),
            r.spec_tokens,
        )
        for r in plan.routes
    ]
    verdicts = judge_route_identity(evidence)
    return [
        row.model_copy(
            update={
                "route_identity": verdicts[route.label].status,
                "route_identity_detail": verdicts[route.label].detail,
                **_launch_fields(inp.launched.get(route.label)),
            }
        )
        for route, row in zip(plan.routes, rows, strict=True)
    ]


def _launch_fields(record: LaunchRecord | None) -> dict[str, Any]:
    """The row fields of a launched route (none for a route the user started)."""
    if record is None:
        return {}
    return {
        "engine_command": record.command,
        "engine_version": record.version,
        "spec_config": orjson.dumps(record.spec_config, option=orjson.OPT_SORT_KEYS).decode(),
    }
