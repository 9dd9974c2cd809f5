"""Each route's engine deterministic mode, read before measuring (issue 21, item 6).

A route whose dialect reports it (SGLang: ``enable_deterministic_inference`` in
``GET /get_server_info``, ``/server_info`` when that is 404) is asked once, through
the gate, before any measured request; otherwise, or when the server does not say
(an error, an older release without the field), the plan's declaration
(``[[routes]] deterministic``) is taken, else the mode is unknown. Nothing here
stops a run: a server that does not answer leaves the mode to the plan. Definitions:
:mod:`deepseekbench._types._determinism`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import httpx

from deepseekbench._dialects import dialect_for
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._plan._plan import RoutePlan
from deepseekbench._plan._spec_config import server_info
from deepseekbench._types._determinism import DeterminismSource, EngineDeterminism

__all__ = ["engine_determinism", "served_determinism"]


async def served_determinism(
    route: EngineRoute, *, gate: LiveGate, client: httpx.AsyncClient, timeout_s: float = 10.0
) -> EngineDeterminism | None:
    """What the route's server says about its deterministic mode; ``None`` when its
    dialect does not report it or the server does not say (connection or HTTP
    error, not JSON, no such field).

    Raises:
        LiveGateError: the gate refuses the URL, or ``client`` has a transport
            (default or mount) the gate does not wrap (nothing is sent).
    """
    dialect = dialect_for(route.dialect)
    if not dialect.reports_determinism:
        return None
    gate.check_client(client)
    found = await server_info(route, gate, client, timeout_s)
    if found is None:
        return None
    value = dialect.deterministic_from_info(found[1])
    if value is None:
        return None
    detail = f"{route.dialect.value} {found[0]} enable_deterministic_inference"
    return EngineDeterminism(deterministic=value, source=DeterminismSource.server, detail=detail)


async def engine_determinism(
    plans: Sequence[RoutePlan],
    routes: Mapping[str, EngineRoute],
    *,
    gate: LiveGate,
    client: httpx.AsyncClient,
) -> dict[str, EngineDeterminism]:
    """Every route's deterministic mode by label: the server's word, else the plan's
    ``deterministic`` declaration, else unknown (module docstring).

    Raises:
        LiveGateError: the gate refuses a configuration URL.
    """
    out: dict[str, EngineDeterminism] = {}
    for rp in plans:
        served = await served_determinism(routes[rp.label], gate=gate, client=client)
        if served is not None:
            out[rp.label] = served
        elif rp.deterministic is not None:
            out[rp.label] = EngineDeterminism(
                deterministic=rp.deterministic,
                source=DeterminismSource.plan,
                detail="[[routes]] deterministic",
            )
        else:
            out[rp.label] = EngineDeterminism()
    return out
