"""``BenchmarkPlan``: what a run measures, loadable from TOML or JSON.

A plan names the model, one route per speculative endpoint (speculative
decoding is configured per server on vLLM and SGLang, so each value is its own
endpoint; two routes may share a value when their labels differ, e.g. a correct
and a mis-tuned ``mtp`` server), exactly one ``off`` route (the baseline), the
axis cells, requests and warm-up requests per cell, the load (a fixed
concurrency, or a request rate with Poisson or gamma arrivals), and the parity
prompt and task sets. The format is documented in ``docs/plan.md``.

Holds :class:`BenchmarkPlan`: its fields, the checks across them, and what a run
asks of it. Its sections live beside it (``_routes``, ``_arrival``, ``_sections``),
as do its file readers (``_sources``), hash (``_hash``) and loaders (``_loading``).
Every plan model is ``extra="forbid"``; a bad plan fails before any request
with ``pydantic.ValidationError`` (direct construction) or :class:`PlanError`
(:meth:`BenchmarkPlan.load` and friends, the message naming the file).
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from deepseekbench._dialects import can_ignore_eos
from deepseekbench._errors import PlanError
from deepseekbench._plan._arrival import ArrivalPlan, SloPlan
from deepseekbench._plan._capability import ModelCapability
from deepseekbench._plan._coverage import (
    WorkloadCoverage,
    WorkloadCoverageWarning,
    workload_coverage,
)
from deepseekbench._plan._hash import plan_hash
from deepseekbench._plan._loading import (
    load_plan,
    plan_from_json,
    plan_from_mapping,
    plan_from_toml,
)
from deepseekbench._plan._model_config import PLAN_CONFIG, Seed
from deepseekbench._plan._ray_address import check_ray_address_setting
from deepseekbench._plan._routes import CellPlan, RoutePlan, expand_grid, same_server
from deepseekbench._plan._search import SearchPlan
from deepseekbench._plan._sections import ParityPlan, WorkloadPlan
from deepseekbench._plan._sources import (
    PlanSources,
    check_capability,
    generated_item_count,
    model_capability,
    plan_tasks,
    workload_items,
    workload_prompts,
)
from deepseekbench._plan._stopping import (
    FewRoundsWarning,
    StoppingPlan,
    caller_stacklevel,
    few_rounds_message,
)
from deepseekbench._plan._tasks import Task
from deepseekbench._plan._workload import WorkloadItem
from deepseekbench._types._axes import Arrival, Hosting, Speculative
from deepseekbench._types._clock import Clock
from deepseekbench._types._load import LoadPoint
from deepseekbench._types._selfcheck import DEFAULT_LAG_THRESHOLD_MS


def auto_workers() -> int:
    """``workers = "auto"``: one client worker per CPU core this process may run on (its
    affinity mask, else ``os.cpu_count()``), 1..256 (the ``workers`` bounds)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(256, cores))


__all__ = ["BenchmarkPlan", "auto_workers"]


class BenchmarkPlan(BaseModel):
    """A full benchmark: routes × cells, with the parity set, and where results go.

    Attributes:
        model: the model id (rows' ``model_id``; routes' default ``model`` field).
        provider_route, engine_route, hosting: the rows' other key axes.
        routes: at least two; exactly one ``off``; unique labels.
        cells: at least one; unique.
        requests_per_cell: measured requests per route, cell and load point (>= 1),
            split over the rounds.
        warmup_per_cell: unmeasured requests before a route's first round at each
            cell and load point (>= 0).
        repeats: measurement rounds per cell and load point (1..100, default 3):
            each round runs every route's block of the same prompts, the route
            order alternating between rounds (see ``docs/measurement.md``); 1 is
            the old sequential design.
        temperature, seed: sampling for measured requests (default greedy, seed 0).
        arrival: :class:`ArrivalPlan` (the load, or a sweep of loads).
        workload: :class:`WorkloadPlan`. parity: :class:`ParityPlan`.
        slo: :class:`SloPlan` (limits for goodput; none by default).
        search: :class:`~deepseekbench._plan._search.SearchPlan` (``[search]``: each
            route's capacity under ``slo``; needs an ``slo`` limit), or ``None``.
        stopping: :class:`~deepseekbench._plan._stopping.StoppingPlan` (``[stopping]``:
            ``fixed`` rounds, or ``sequential``: a route stops once its anytime-valid
            verdict is decided), or ``None`` (fixed).
        results: JSONL results path (relative to the plan file when loaded), or ``None``.
        timeout_s: total deadline per request (s).
        client_lag_threshold_ms: the client's own event-loop lag (ms, default 10)
            above which a row is flagged ``client_saturated`` (docs/measurement.md).
        workers: client workers that send each block (1..256, default 1: this
            process); more split the load deterministically (``docs/workers.md``).
            ``"auto"``: kept as is; the pool starts one worker per CPU core this
            process may run on (:attr:`pool_workers`), and each load point sends on
            as many as its warm-ups' client CPU share asks for (docs/plan.md).
        executor: ``"process"`` (worker processes on this host) or ``"ray"`` (Ray
            actors; needs the ``ray`` extra).
        ray_address: an existing Ray cluster's address (``None``: a local
            instance on 127.0.0.1): ``host:port`` or ``ray://host:port`` with an IP
            literal or ``localhost`` as host, or ``"auto"``/``"local"``
            (``deepseekbench._plan._ray_address``; anything else is refused at
            validation); a non-loopback host passes the gate.
        model_source: optional path to the model's GGUF file or Hugging Face
            ``config.json`` (or checkpoint folder), relative to the plan file. When
            set, :meth:`validate_sources` probes its MTP (NextN) depth and refuses
            an ``mtp`` route on a model whose depth is 0; the run records it.
        clock: ``"client"`` (default) or ``"server"``: the clock speedups are judged on
            (the server clock is the engine's own per-request timings, which
            exclude network and client; docs/measurement.md). Not part of the plan hash.
        probe_routes: ask every route once (``GET {base_url}/models``) before
            measuring and stop with :class:`~deepseekbench.RouteUnreachableError`
            when one is dead or does not serve its model (default ``True``;
            ``deepseekbench._net._probe``). Not part of the plan hash.

    Raises:
        pydantic.ValidationError: any invalid field (direct construction).
    """

    model_config = PLAN_CONFIG

    model: str = Field(min_length=1)
    provider_route: str = Field(default="local", min_length=1)
    engine_route: str = Field(default="embedded", min_length=1)
    hosting: Hosting = Hosting.embedded
    # The counts are checked by _counts, not by ``min_length``: pydantic checks a
    # tuple's length on the items that validated, so one bad route of two would
    # also report a misleading "at least 2 items" error.
    routes: tuple[RoutePlan, ...] = Field(json_schema_extra={"minItems": 2})
    cells: tuple[CellPlan, ...] = Field(default=(CellPlan(),), json_schema_extra={"minItems": 1})
    requests_per_cell: int = Field(default=8, ge=1, le=100_000)
    warmup_per_cell: int = Field(default=1, ge=0, le=10_000)
    repeats: int = Field(default=3, ge=1, le=100)
    temperature: float = Field(default=0.0, ge=0, le=2)
    seed: Seed = 0
    arrival: ArrivalPlan = ArrivalPlan()
    workload: WorkloadPlan = WorkloadPlan()
    parity: ParityPlan = ParityPlan()
    slo: SloPlan = SloPlan()
    results: str | None = None
    # capacity under SLO (left out of the plan's content and hash when unset)
    search: SearchPlan | None = Field(
        default=None, description="[search]: find each route's capacity under [slo]"
    )
    # sequential stopping (left out of the plan's content and hash when unset)
    stopping: StoppingPlan | None = Field(
        default=None, description="[stopping]: fixed rounds, or stop each comparison once decided"
    )
    timeout_s: float = Field(default=600.0, gt=0)
    client_lag_threshold_ms: float = Field(
        default=DEFAULT_LAG_THRESHOLD_MS,
        gt=0,
        description="client event-loop lag (ms) above which a row is flagged client_saturated",
    )
    workers: Annotated[int, Field(ge=1, le=256)] | Literal["auto"] = Field(
        default=1, description="client workers (processes/actors), or 'auto'"
    )
    executor: Literal["process", "ray"] = "process"
    ray_address: str | None = Field(
        default=None,
        description="Ray cluster address: host:port or ray://host:port (host an IP literal "
        "or localhost), 'auto' or 'local'; None=local",
    )
    model_source: str | None = Field(
        default=None,
        description="GGUF file or HF config.json/checkpoint folder to probe for MTP depth",
    )
    probe_routes: bool = Field(
        default=True,
        description="probe every route once (GET /models) before measuring; false skips it",
    )
    base_dir: str | None = Field(
        default=None, description="directory relative paths resolve against (set by load)"
    )
    # the clock speed is judged on
    clock: Clock = Field(
        default=Clock.client,
        description="clock speedups are judged on: client (arrival times, the default) or "
        "server (the engine's own per-request timings; excludes network and client)",
    )

    @field_validator("routes", "cells")
    @classmethod
    def _counts(cls, v: tuple[Any, ...], info: ValidationInfo) -> tuple[Any, ...]:
        # Runs only when every item validated (an after-validator is skipped
        # when the field already failed).
        if info.field_name == "routes" and len(v) < 2:
            raise ValueError(
                f"a plan needs at least 2 routes (the 'off' baseline and one to compare), "
                f"got {len(v)}"
            )
        if not v:
            raise ValueError("a plan needs at least 1 cell, got 0")
        return v

    @property
    def pool_workers(self) -> int:
        """The client workers the pool starts (1..256): ``workers``, or for
        ``"auto"`` one per core this process may run on (:func:`auto_workers`)."""
        return auto_workers() if self.workers == "auto" else self.workers

    @field_validator("ray_address")
    @classmethod
    def _ray_address(cls, v: str | None) -> str | None:
        # the grammar the gate judges: a host Ray reads the same way (_plan._ray_address)
        return check_ray_address_setting(v)

    @field_validator("routes")
    @classmethod
    def _expand_grids(cls, v: tuple[RoutePlan, ...]) -> tuple[RoutePlan, ...]:
        # a launched route with a list of depths, draft models or methods
        # becomes one route per configuration (docs/plan.md, "The depth grid").
        return tuple(itertools.chain.from_iterable(expand_grid(r) for r in v))

    @model_validator(mode="after")
    def _check_routes(self) -> BenchmarkPlan:
        labels = [r.label for r in self.routes]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ValueError(f"route labels must be unique; repeated: {dup}")
        offs = [r.label for r in self.routes if r.speculative is Speculative.off]
        if len(offs) != 1:
            raise ValueError(f"a plan needs exactly one speculative='off' route, got {offs}")
        for route in self.speculative_routes:
            same = same_server(self.off_route, route, self.model)
            if same is not None:
                raise ValueError(same)
        if self.search is not None and not self.slo.limits:
            raise ValueError("[search] needs at least one [slo] limit (ttft_ms, tpot_ms, e2e_ms)")
        stop = self.stopping
        if stop is not None and stop.sequential and self.rounds < stop.min_rounds:
            raise ValueError(
                f"[stopping] sequential needs at least min_rounds = {stop.min_rounds} rounds; "
                f"the plan runs {self.rounds} (raise repeats or [stopping] cap, and "
                "requests_per_cell to at least as many)"
            )
        cells = [c.cell_id for c in self.cells]
        dup_cells = sorted({x for x in cells if cells.count(x) > 1})
        if dup_cells:
            raise ValueError(f"cells must be unique; repeated: {dup_cells}")
        return self

    # ---------------------------------------------------------------- access
    def search_load(self, level: float) -> LoadPoint:
        """The load point of a ``[search]`` level: closed loop of
        ``level`` streams, or the arrival's open loop at ``level`` requests/s."""
        if self.arrival.mode == "rate":
            cap = self.arrival.concurrency
            cap = cap if isinstance(cap, int) else cap[0]
            return LoadPoint(Arrival(self.arrival.distribution), cap, float(level))
        return LoadPoint(Arrival.closed, int(level))

    @property
    def effective_search(self) -> SearchPlan | None:
        """``search`` as the run applies it: a closed loop's levels are capped
        at the requests of one round (``requests_per_cell // rounds``; more streams than
        requests cannot fill), ``start`` and ``max_level`` both; ``None`` without it."""
        s = self.search
        if s is None or self.arrival.mode == "rate":
            return s
        cap = float(max(1, self.requests_per_cell // self.rounds))
        if s.max_level <= cap:
            return s
        return s.model_copy(update={"max_level": cap, "start": min(s.start, cap)})

    def admits_load(self, key: str) -> bool:
        """Whether a record's load key belongs to this plan: one of its load points,
        or, with ``[search]``, a load of the arrival's kind."""
        if any(lp.key == key for lp in self.load_points):
            return True
        if self.search is None:
            return False
        return key.startswith(self.load_points[0].arrival.value + ":")

    @property
    def off_route(self) -> RoutePlan:
        """The baseline route (``speculative == off``)."""
        return next(r for r in self.routes if r.speculative is Speculative.off)

    @property
    def load_points(self) -> tuple[LoadPoint, ...]:
        """The load points every route is measured at (:meth:`ArrivalPlan.load_points`)."""
        return self.arrival.load_points()

    @property
    def rounds(self) -> int:
        """Rounds scheduled per cell and load point: ``min(repeats, requests_per_cell)``,
        or in ``[stopping]`` sequential mode ``min(cap, requests_per_cell)`` (``cap``
        defaults to ``repeats``; a decided route skips its later rounds)."""
        stop = self.stopping
        if stop is not None and stop.sequential and stop.cap is not None:
            return min(stop.cap, self.requests_per_cell)
        return min(self.repeats, self.requests_per_cell)

    @property
    def sequential(self) -> bool:
        """True when ``[stopping] mode = "sequential"``."""
        return self.stopping is not None and self.stopping.sequential

    @property
    def reach_max_tokens(self) -> bool:
        """Whether measured requests ask the engines to generate their whole
        ``max_tokens`` (ignore EOS, per dialect): ``output_length`` is ``pinned``
        (``max_tokens`` is then the natural length) or ``forced``, and every
        route's dialect can (a route that cannot — ``openai``, ``deepseek`` — would
        decode different work than the others, so then no route is asked and short
        outputs are flagged instead)."""
        return self.workload.output_length != "natural" and all(
            can_ignore_eos(r.dialect) for r in self.routes
        )

    @property
    def speculative_routes(self) -> tuple[RoutePlan, ...]:
        """Every route other than the baseline, in plan order."""
        return tuple(r for r in self.routes if r.speculative is not Speculative.off)

    def resolve(self, path: str) -> Path:
        """``path`` made absolute against ``base_dir`` (or the working directory)."""
        p = Path(path).expanduser()
        if p.is_absolute() or self.base_dir is None:
            return p
        return Path(self.base_dir) / p

    def results_path(self) -> Path | None:
        """Where results go (``results`` resolved), or ``None``."""
        return self.resolve(self.results) if self.results else None

    def tasks(self) -> tuple[Task, ...]:
        """The parity task set (``()`` for ``"none"``).

        Raises:
            PlanError: the task file cannot be read or is invalid.
        """
        return plan_tasks(self)

    def workload_prompts(self) -> tuple[str, ...]:
        """The speed-workload prompts (inline, from file, or the smoke tasks' prompts).

        Raises:
            PlanError: the prompts file is unreadable, not UTF-8, or malformed.
        """
        return workload_prompts(self)

    def workload_items(self) -> tuple[WorkloadItem, ...] | None:
        """The workload's conversations (``None`` for ``source="synthetic"``).

        ``default`` source: inline prompts (ids ``prompt-<n>``), the prompts
        file, or the smoke tasks (their ids and categories). Dataset sources: the
        file read by its loader (``path="sample"``: the shipped sample), kept to
        ``categories`` when given.

        Raises:
            PlanError: the prompts file is unreadable or malformed.
            WorkloadFormatError: a dataset file is malformed (file and line
                named), or no item has the requested categories.
        """
        return workload_items(self)

    def plan_hash(self) -> str:
        """A 16-hex-digit digest of the plan's content (``base_dir``, ``results`` and
        ``client_lag_threshold_ms``, which changes no request, and how the load is
        sent — ``workers``, ``executor``, ``ray_address`` — excluded): a results
        file resumes only records with the same hash."""
        return plan_hash(self)

    def validate_sources(self) -> PlanSources:
        """Read the task set and prompts now so a bad file fails before any request.

        Returns:
            :class:`PlanSources`: what was read (tasks, workload prompts, the probed
            model capability), so callers need not read the files again.

        Raises:
            PlanError: a referenced file is missing or invalid, an ``mtp`` route is
                planned on a model whose MTP depth is 0 (see :meth:`check_capability`),
                every cell's parity set would be empty, or workload items would go
                unsent under ``workload.require_all_items`` (:meth:`coverage`).

        Warns:
            WorkloadCoverageWarning: workload items would go unsent (:meth:`coverage`).
            FewRoundsWarning: fewer than 3 rounds per cell and load point (the paired
                interval has at most one degree of freedom).
        """
        few = few_rounds_message(self.rounds)
        if few is not None:
            warnings.warn(few, FewRoundsWarning, stacklevel=caller_stacklevel())
        tasks = self.tasks()
        prompts = self.workload_prompts()
        items = self.workload_items()
        capability = self.check_capability()
        if not tasks and not self.parity.prompts:
            raise PlanError(
                "the plan has no parity prompts and no tasks: parity could never be verified"
            )
        coverage = self.coverage(items)
        return PlanSources(
            tasks=tasks, prompts=prompts, capability=capability, items=items, coverage=coverage
        )

    # nothing dropped silently
    def coverage(self, items: Sequence[WorkloadItem] | None) -> WorkloadCoverage:
        """How many workload items each cell sends (``items``: the source's, ``None``
        for synthetic: see :meth:`generated_item_count`); warns when some are never sent.

        Raises:
            PlanError: items would go unsent and ``workload.require_all_items`` is set.
            WorkloadFormatError: the trace file is malformed or out of bounds.

        Warns:
            WorkloadCoverageWarning: items would go unsent (the counts and the
                ``requests_per_cell`` that sends them all).
        """
        n = len(items) if items is not None else self.generated_item_count()
        cov = workload_coverage(n, requests_per_cell=self.requests_per_cell, rounds=self.rounds)
        if not cov.complete:
            if self.workload.require_all_items:
                raise PlanError(f"workload.require_all_items: {cov.message()}")
            warnings.warn(cov.message(), WorkloadCoverageWarning, stacklevel=caller_stacklevel())
        return cov

    def generated_item_count(self) -> int:
        """Items a synthetic workload generates per cell: a trace's lines, a
        shared-prefix spec's ``groups · suffixes``, else ``n_prompts`` (default 8).

        Reads the trace file, so its bounds (``MAX_TRACE_SPAN_MS``,
        ``MAX_CONTEXT_TOKENS``) are checked at validation and in the dry run.

        Raises:
            WorkloadFormatError: the trace file is unreadable, malformed or out of bounds.
        """
        return generated_item_count(self)

    def model_capability(self) -> ModelCapability | None:
        """The probed capability of ``model_source`` (``None`` when it is unset).

        Raises:
            PlanError: the model source cannot be read (wraps ModelCapabilityError).
        """
        return model_capability(self)

    def check_capability(self) -> ModelCapability | None:
        """Refuse ``speculative=mtp`` routes on a model with no MTP (NextN) layers.

        Returns the probed capability (``None`` without ``model_source``).

        Raises:
            PlanError: an ``mtp`` route is planned and the model's MTP depth is 0,
                or the model source cannot be read.
        """
        return check_capability(self)

    # ---------------------------------------------------------------- loading
    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], *, base_dir: str | Path | None = None
    ) -> BenchmarkPlan:
        """Validate a plan from a mapping.

        Raises:
            PlanError: the mapping is not a valid plan (wraps the validation error),
                or its values nest deeper than ``MAX_PLAN_DEPTH`` (64) levels.
        """
        return plan_from_mapping(cls, data, base_dir=base_dir)

    @classmethod
    def from_toml(cls, text: str, *, base_dir: str | Path | None = None) -> BenchmarkPlan:
        """Parse a TOML plan.

        Raises:
            PlanError: not TOML, or not a valid plan.
        """
        return plan_from_toml(cls, text, base_dir=base_dir)

    @classmethod
    def from_json(cls, text: str | bytes, *, base_dir: str | Path | None = None) -> BenchmarkPlan:
        """Parse a JSON plan.

        Raises:
            PlanError: not a JSON object, or not a valid plan.
        """
        return plan_from_json(cls, text, base_dir=base_dir)

    @classmethod
    def load(cls, path: str | Path) -> BenchmarkPlan:
        """Load ``*.toml`` or ``*.json``; relative paths inside resolve against its folder.

        Raises:
            PlanError: unreadable or non-UTF-8 file, unknown suffix, or an invalid
                plan (the message names the file).
        """
        return load_plan(cls, path)
