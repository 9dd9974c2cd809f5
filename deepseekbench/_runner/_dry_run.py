"""Dry run: a plan checked and its rows listed without any connection.

Holds :func:`dry_run` and its :class:`DryRunResult` (the rows a run would write, the
gate's refusals, the requests it would send, the launches it would start, what it
would not measure), :func:`grid_text` (the measurement grid in one line) and
:func:`reads_speculation` (whether a dialect reads any speculative counter).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._analysis._analysis import row_identity
from deepseekbench._dialects import dialect_for
from deepseekbench._dialects._base import EngineDialect
from deepseekbench._errors import LiveGateError, PlanError, ServerError
from deepseekbench._launch._plan_launch import (
    PORT_PLACEHOLDER,
    check_exposure,
    launch_argv,
    launch_secrets,
    shown_argv,
)
from deepseekbench._net._gate import LiveGate
from deepseekbench._plan._coverage import WorkloadCoverage, items_used
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._schedule import build_schedule, parity_prompts
from deepseekbench._plan._workload import WorkloadItem, check_bucket_bytes
from deepseekbench._runner._preflight import launch_targets
from deepseekbench._runner._resume import to_send
from deepseekbench._types._axes import QualityParity
from deepseekbench._types._row import Row
from deepseekbench._types._secrets import redact

__all__ = ["DryRunResult", "dry_run", "grid_text", "reads_speculation"]


class DryRunResult(BaseModel):
    """What :func:`dry_run` found: the rows a run would write (no measurement, parity
    ``unknown``; one per route, cell and load point), per route label the gate's
    refusal message (``None`` = admitted), the requests it would send, and the grid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    plan_hash: str
    rows: tuple[Row, ...]
    refusals: dict[str, str | None]
    n_requests: int
    grid: str = ""
    ray_address: str | None = Field(
        default=None,
        description="executor 'ray': the cluster address resolved as Ray would ('auto' "
        "follows RAY_ADDRESS or the leftover cluster file), or 'local' for a local "
        "instance on 127.0.0.1; None for the process executor",
    )
    ray_refusal: str | None = Field(
        default=None, description="why the gate (or the resolution) refuses that address"
    )
    # nothing dropped silently
    warnings: tuple[str, ...] = Field(
        default=(),
        description="what the run would not measure, e.g. '8 items, 4 will be sent: raise "
        "requests_per_cell to 24' (a WorkloadCoverageWarning at run time), and each "
        "speculative route whose dialect reads no speculative counter (its verdict would "
        "be refused: speculative_counters_missing)",
    )

    launch_commands: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="per launched route, the argv it would run (the port as '{port}', "
        "known secrets as '***'; a vLLM server's parent-watch wrapper shown as the "
        "'python -m' module it runs); a launch runs a program: a plan with one is a script",
    )
    launch_env: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="per launched route, the names of the variables its launch sets "
        "('HF_TOKEN=$MY_TOKEN' for one taken from this process's environment); never values",
    )

    @property
    def refused(self) -> bool:
        """True when the gate would refuse any route or the Ray cluster address."""
        return self.ray_refusal is not None or any(v is not None for v in self.refusals.values())


def grid_text(plan: BenchmarkPlan) -> str:
    """The measurement grid in one line, e.g. ``3 routes × 1 cell × 3 load points
    (concurrency 1, 8, 32) × 3 rounds``."""
    loads = plan.load_points
    closed = loads[0].rate_per_s is None
    levels = ", ".join(f"{lp.level:g}" for lp in loads)
    what = f"concurrency {levels}" if closed else f"{levels} req/s, {loads[0].arrival.value}"

    def n(k: int, word: str) -> str:
        return f"{k} {word}{'' if k == 1 else 's'}"

    text = (
        f"{n(len(plan.routes), 'route')} × {n(len(plan.cells), 'cell')} × "
        f"{n(len(loads), 'load point')} ({what}) × {n(plan.rounds, 'round')}"
    )
    if plan.search is not None:  # levels chosen as the run goes
        s = plan.search
        text += f", then [search] up to {n(s.max_probes, 'level')} ≤ {s.max_level:g}"
    return text


def dry_run(plan: BenchmarkPlan, *, gate: LiveGate) -> DryRunResult:
    """Validate ``plan`` and list the rows a run would write, without any connection.

    Every row (one per route, cell and load point) has no measurement
    (``n_requests`` 0) and parity ``unknown``; ``refusals`` says, per route,
    what the gate would refuse (from :meth:`LiveGate.refusal`, which consumes
    nothing and opens nothing); ``n_requests`` counts every request of the
    schedule (parity, warm-ups, measured); ``grid`` is :func:`grid_text`. Each
    launched route's argv and the names (never the values) of the variables its
    launch sets are in ``launch_commands`` / ``launch_env``; a launch that would
    listen beyond loopback with the gate closed is a refusal, one that cannot
    start (no engine program, an unset ``env_from`` variable) a warning.

    Raises:
        PlanError: as :meth:`~deepseekbench.BenchmarkPlan.validate_sources` (task,
            prompt or model-source file invalid, ``mtp`` on a model without MTP
            layers, no parity set), or a task id collides with a parity prompt id;
            :class:`~deepseekbench.RayAddressError` (a ``PlanError``): executor
            ``ray`` with ``ray_address = "auto"`` resolving to an address outside
            the grammar the gate judges.
    """
    sources = plan.validate_sources()
    items = None
    if sources.items is not None:
        for cell in plan.cells:
            check_bucket_bytes(cell.cell_id, cell.context_bucket, sources.items)
        items = {cell.cell_id: sources.items for cell in plan.cells}
    schedule = build_schedule(
        plan, sources.prompts, parity_prompts(plan, sources.tasks), items=items
    )
    refusals: dict[str, str | None] = {}
    for r in plan.routes:
        # A route with api_key_env will send its own Authorization header.
        err = gate.refusal(
            f"{r.base_url}/chat/completions", has_auth_header=r.api_key_env is not None
        )
        refusals[r.label] = str(err) if err is not None else None
    commands, launch_env, launch_warnings = _dry_launches(plan, gate, refusals)
    rows = tuple(
        Row(
            **row_identity(plan, cell, r, load),
            quality_parity=QualityParity.unknown,
            parity_detail="dry run: nothing measured"
            + (f"; gate would refuse: {refusals[r.label]}" if refusals[r.label] else ""),
        )
        for cell in plan.cells
        for load in plan.load_points
        for r in plan.routes
    )
    n = sum(to_send(b.items) + len(b.warmup) for b in schedule)
    if plan.workload.output_length != "natural":  # the calibration pass
        n += _calibration_requests(plan, items, sources.coverage)
    ray_address, ray_refusal = _dry_ray_address(plan, gate)
    cov = sources.coverage
    return DryRunResult(
        plan_hash=plan.plan_hash(),
        rows=rows,
        refusals=refusals,
        n_requests=n,
        grid=grid_text(plan),
        ray_address=ray_address,
        ray_refusal=ray_refusal,
        warnings=(
            *((cov.message(),) if cov is not None and not cov.complete else ()),
            *launch_warnings,
            *_counterless_routes(plan),
        ),
        launch_commands=commands,
        launch_env=launch_env,
    )


def reads_speculation(dialect: EngineDialect) -> bool:
    """Whether ``dialect`` reads any speculative counter: acceptance in stream chunks
    (its own ``read_acceptance``) or ``/metrics`` counter families."""
    return type(dialect).read_acceptance is not EngineDialect.read_acceptance or bool(
        dialect.counter_sets
    )


def _counterless_routes(plan: BenchmarkPlan) -> tuple[str, ...]:
    """One line per speculative route whose dialect reads no speculative counter at all
    (no acceptance in chunks, no ``/metrics`` families: ``openai``, ``deepseek``): its
    speed verdict will be refused (``speculative_counters_missing``)."""
    return tuple(
        f"route {r.label!r} (speculative={r.speculative.value}) speaks dialect "
        f"{r.dialect.value!r}, which reads no speculative counter (usage, per-request "
        "fields or /metrics): its speed verdict will be refused "
        "(speculative_counters_missing); use the engine's own dialect"
        for r in plan.speculative_routes
        if not reads_speculation(dialect_for(r.dialect))
    )


def _dry_launches(
    plan: BenchmarkPlan, gate: LiveGate, refusals: dict[str, str | None]
) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]], tuple[str, ...]]:
    """Per launched route, the argv and the names of the variables its launch would set;
    a launch that would listen beyond loopback with the gate closed goes into
    ``refusals``; one that could not start (no engine program, an unset ``env_from``
    variable) gives a warning. Nothing is started."""
    targets = launch_targets(plan)
    secrets = launch_secrets(targets, gate)
    commands: dict[str, tuple[str, ...]] = {}
    names: dict[str, tuple[str, ...]] = {}
    warned: list[str] = []
    for t in targets:
        names[t.name] = (*t.launch.env, *(f"{k}=${v}" for k, v in t.launch.env_from.items()))
        try:
            argv = launch_argv(t, PORT_PLACEHOLDER)
            commands[t.name] = tuple(redact(a, secrets) for a in shown_argv(argv))
            check_exposure(t, gate)
        except LiveGateError as exc:
            refusals[t.name] = str(exc)
        except (PlanError, ServerError) as exc:
            warned.append(f"route {t.name}: cannot launch: {redact(str(exc), secrets)}")
    return commands, names, tuple(warned)


def _calibration_requests(
    plan: BenchmarkPlan,
    items: Mapping[str, Sequence[WorkloadItem]] | None,
    coverage: WorkloadCoverage | None,
) -> int:
    """Requests of the calibration pass: per cell, every turn of each item sent
    (measured or warmed up) once."""

    def used(n: int) -> int:
        return items_used(
            n,
            requests_per_cell=plan.requests_per_cell,
            rounds=plan.rounds,
            warmup=plan.warmup_per_cell,
        )

    if items is None:  # synthetic: single-turn items, generated at run time
        return len(plan.cells) * used(coverage.n_items if coverage is not None else 1)
    return sum(
        len(i.turns)
        for c in plan.cells
        for i in list(items[c.cell_id])[: used(len(items[c.cell_id]))]
    )


def _dry_ray_address(plan: BenchmarkPlan, gate: LiveGate) -> tuple[str | None, str | None]:
    """The Ray cluster address a run would use (resolved) and the gate's refusal."""
    if plan.executor != "ray":
        return None, None
    from deepseekbench._errors import RayUnavailableError
    from deepseekbench._execute._ray_executor import ray_address_refusal

    try:
        resolved, err = ray_address_refusal(plan.ray_address, gate)
    except RayUnavailableError as exc:
        return plan.ray_address, str(exc)
    return resolved or "local", str(err) if err is not None else None
