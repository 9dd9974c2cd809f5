"""Preflight: what a run reads and checks before anything is opened or sent.

Holds :func:`preflight` (step 1: the plan's files, the routes, the gate's answer for
each: :class:`Checked`), :func:`check_gate`, :func:`check_conversations` (a worker
pool sends no multi-turn conversation), :func:`launch_targets` (the routes a run
launches) and :func:`with_launched` (the launched routes' real URLs, asked of the
gate again).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from deepseekbench._errors import LiveGateError, PlanError
from deepseekbench._execute._prepare import PreparedWorkload
from deepseekbench._launch._plan_launch import Launched, LaunchTarget
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._net._route_plan import engine_route
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._sources import PlanSources
from deepseekbench._store._records import ParityEntry, parity_entries
from deepseekbench._types._identity import LaunchRecord
from deepseekbench._types._secrets import secret_values

__all__ = [
    "Checked",
    "check_conversations",
    "check_gate",
    "launch_targets",
    "preflight",
    "with_launched",
]


def check_gate(routes: Iterable[EngineRoute], gate: LiveGate) -> None:
    """Ask ``gate`` for every route's chat URL.

    Raises:
        LiveGateError: the gate refuses a route (named when it has a label).
    """
    for route in routes:
        err = gate.refusal(route.chat_url, has_auth_header=route.has_api_key)
        if err is not None:  # name the route: a plan's routes often share a host
            name = f"route {route.label!r}: " if route.label else ""
            raise LiveGateError(f"{name}{err}", host=err.host, missing=err.missing)


def check_conversations(plan: BenchmarkPlan, prepared: PreparedWorkload) -> None:
    """Refuse multi-turn items on a worker pool (its workers send single requests).

    Raises:
        PlanError: a conversation with several turns and ``workers > 1`` or a
            non-process executor.
    """
    if plan.workers == 1 and plan.executor == "process":
        return
    multi = sorted({i.id for items in prepared.cells.values() for i in items if len(i.turns) > 1})
    if multi:
        raise PlanError(
            f"multi-turn conversations ({', '.join(multi[:5])}"
            f"{', ...' if len(multi) > 5 else ''}) need workers = 1 and executor = "
            f"'process': a worker pool sends single requests"
        )


@dataclass(frozen=True, slots=True)
class Checked:
    """What preflight read and checked before anything is opened or sent."""

    sources: PlanSources
    parity_set: tuple[ParityEntry, ...]
    routes: dict[str, EngineRoute]
    path: Path | None
    plan_hash: str
    secrets: tuple[str, ...]
    """Every key a server may echo (any route's, the gate's): none lands in the file."""
    launched: dict[str, LaunchRecord] = dataclasses.field(default_factory=dict)


def preflight(
    plan: BenchmarkPlan,
    gate: LiveGate,
    client: httpx.AsyncClient | None,
    results_path: str | Path | None,
) -> Checked:
    """Step 1: read the plan's files, build the routes, ask the gate for every route.

    Raises:
        PlanError, pydantic.ValidationError, LiveGateError: see :func:`~deepseekbench.run_plan`.
    """
    sources = plan.validate_sources()
    parity_set = parity_entries(plan, sources.tasks)
    routes = {r.label: engine_route(r, plan.model) for r in plan.routes}
    check_gate(routes.values(), gate)
    if client is not None:
        gate.check_client(client)
    keys = (gate.api_key, *(r.api_key for r in routes.values()))
    return Checked(
        sources=sources,
        parity_set=parity_set,
        routes=routes,
        path=Path(results_path) if results_path is not None else plan.results_path(),
        plan_hash=plan.plan_hash(),
        secrets=secret_values(*keys),
    )


def with_launched(run: Checked, launched: Mapping[str, Launched], gate: LiveGate) -> Checked:
    """``run`` with each launched route's real URL and its launch record; the gate is
    asked again for the launched URLs (loopback only).

    Raises:
        LiveGateError: the gate refuses a launched route's URL.
    """
    if not launched:
        return run
    routes = dict(run.routes)
    for label, server in launched.items():
        routes[label] = routes[label].model_copy(update={"base_url": server.base_url})
    check_gate([routes[label] for label in launched], gate)
    records = {label: server.record for label, server in launched.items()}
    return dataclasses.replace(run, routes=routes, launched=records)


def launch_targets(plan: BenchmarkPlan) -> list[LaunchTarget]:
    """One :class:`~deepseekbench._launch._plan_launch.LaunchTarget` per route of
    ``plan`` with a ``launch`` table, in plan order."""
    return [
        LaunchTarget(r.label, r.launch, r.speculative.value, r.dialect.value, r.model or plan.model)
        for r in plan.routes
        if r.launch is not None
    ]
