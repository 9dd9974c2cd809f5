"""The served configuration: what each route's server says about itself, read before any
measured request (a preflight step of the run).

Two questions, asked once per route through the gate (an HTTP step above the plan,
which stays data): the speculative depth a server serves, checked against the
plan's declared ``spec_tokens`` (:func:`check_spec_config`), and the engine's
deterministic mode (:func:`engine_determinism`). Both read the dialect's
configuration endpoint (:func:`server_info`).

**The served depth.** Where each engine says it:

* llama.cpp ``GET /props``: ``default_generation_settings.params`` key
  ``speculative.n_max`` (the most draft tokens per verify step, set by
  ``--spec-draft-n-max`` / ``--draft-max``), unless ``speculative.types`` is
  ``"none"``;
* SGLang ``GET /get_server_info`` (``/server_info`` when that is 404):
  ``speculative_num_steps`` (draft tokens per verify step of a chain draft,
  ``--speculative-num-steps``);
* vLLM: no configuration endpoint; its depth is reported per request
  (``metrics.speculative_decoding.num_spec_tokens``) and lands in the rows.

A route whose plan declares ``spec_tokens`` that the server contradicts stops the
run with :class:`~deepseekbench.PlanError` before any measured request. Every
speculative route is asked, declared or not: the depth a server says is recorded on
its route (``EngineRoute.served_spec_tokens``), so each measurement, the results
file and the rows carry it (``spec_tokens``) where no per-request depth is reported. A server
that does not say (no endpoint, an error, another engine) is not an error.

**The deterministic mode** (the within-noise parity's engine record). A route whose
dialect reports it (SGLang: ``enable_deterministic_inference`` in
``GET /get_server_info``, ``/server_info`` when that is 404) is asked once;
otherwise, or when the server does not say (an error, an older release without
the field), the plan's declaration
(``[[routes]] deterministic``) is taken, else the mode is unknown. Nothing here
stops a run: a server that does not answer leaves the mode to the plan. Definitions:
:mod:`deepseekbench._types._determinism`.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import httpx

from deepseekbench._dialects import dialect_for
from deepseekbench._errors import PlanError
from deepseekbench._net._bounded import BoundedReadError, read_bounded
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._plan._routes import RoutePlan
from deepseekbench._types._axes import Dialect, Speculative
from deepseekbench._types._determinism import DeterminismSource, EngineDeterminism

__all__ = [
    "check_spec_config",
    "engine_determinism",
    "served_determinism",
    "served_spec_tokens",
    "server_info",
    "spec_tokens_from_info",
]


def spec_tokens_from_info(dialect: Dialect, info: Any) -> int | None:
    """The depth in one parsed ``/props`` (llama.cpp) or ``/get_server_info`` (SGLang) body,
    read by the dialect's adapter (``EngineDialect.spec_tokens_from_info``).

    Returns draft tokens per verify step, or ``None`` where the body does not say
    (speculation off, another shape, a dialect with no such endpoint). Never
    raises on wire data.
    """
    return dialect_for(dialect).spec_tokens_from_info(info)


def _origin(route: EngineRoute) -> str:
    base = route.base_url
    return base[: -len("/v1")] if base.endswith("/v1") else base


async def served_spec_tokens(
    route: EngineRoute, *, gate: LiveGate, client: httpx.AsyncClient, timeout_s: float = 10.0
) -> int | None:
    """GET the route's configuration endpoint through ``gate`` and read its depth.

    Only ``llamacpp`` and ``sglang`` routes ask (module docstring); others, and
    any server fault (connection, HTTP error, not JSON), give ``None``.

    Raises:
        LiveGateError: the gate refuses the URL, or ``client`` has a transport
            (default or mount) the gate does not wrap (nothing is sent).
    """
    gate.check_client(client)
    found = await server_info(route, gate, client, timeout_s)
    return None if found is None else spec_tokens_from_info(route.dialect, found[1])


async def server_info(
    route: EngineRoute, gate: LiveGate, client: httpx.AsyncClient, timeout_s: float
) -> tuple[str, Any] | None:
    """``(path, parsed JSON body)`` of the first of the dialect's configuration
        endpoints (``depth_paths``: SGLang ``/get_server_info`` then ``/server_info``,
        llama.cpp ``/props``) that answers through ``gate``; a 404 tries the next name,
        any other server fault (connection, HTTP error, not JSON, no whole answer within
    ``timeout_s`` s in total or over the 64 MiB cap of
    :func:`~deepseekbench._net._bounded.read_bounded`) gives ``None``.
        Shared by the served depth above and the deterministic mode
        (:func:`served_determinism`).

        Raises:
            LiveGateError: the gate refuses a URL (nothing is sent to it).
    """
    headers = {k: v for k, v in route.request_headers().items() if k == "authorization"}
    for path in route.adapter.depth_paths:
        url = _origin(route) + path
        refusal = gate.refusal(url, has_auth_header=route.has_api_key)
        if refusal is not None:
            raise refusal
        response = await read_bounded(client, "GET", url, deadline_s=timeout_s, headers=headers)
        if isinstance(response, BoundedReadError):
            return None
        if response.status_code == 404:
            continue  # an older or newer name for the same endpoint may follow
        if not response.is_success:
            return None
        try:
            return path, response.json()
        except ValueError:
            return None
    return None


async def check_spec_config(
    plans: Sequence[RoutePlan],
    routes: MutableMapping[str, EngineRoute],
    *,
    gate: LiveGate,
    client: httpx.AsyncClient,
    timeout_s: float = 10.0,
) -> dict[str, int]:
    """Ask each speculative route's server its depth; check it against the declared one.

    Args:
        plans: the plan's routes; every speculative one whose dialect has a
            configuration endpoint is asked (``off`` routes are not).
        timeout_s: the deadline of each configuration read (s, total: the plan's
            ``timeout_s``).
        routes: the :class:`EngineRoute` per route label; a route whose server
            said its depth is replaced by a copy with ``served_spec_tokens`` set,
            so what is measured with it carries the depth.

    Returns:
        The served depth per route label (draft tokens per verify step), for
        the routes whose server said it.

    Raises:
        PlanError: a server serves another depth than its route declares.
        LiveGateError: the gate refuses a configuration URL.
    """
    found: dict[str, int] = {}
    for rp in plans:
        route = routes[rp.label]
        if rp.speculative is Speculative.off or not route.adapter.depth_paths:
            continue
        served = await served_spec_tokens(route, gate=gate, client=client, timeout_s=timeout_s)
        if served is None:
            continue
        if rp.spec_tokens is not None and served != rp.spec_tokens:
            raise PlanError(
                f"route {rp.label!r} declares spec_tokens={rp.spec_tokens} but the server "
                f"({route.dialect.value}) serves {served} draft tokens per verify step"
            )
        found[rp.label] = served
        routes[rp.label] = route.model_copy(update={"served_spec_tokens": served})
    return found


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
    dialect = route.adapter
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
    timeout_s: float = 10.0,
) -> dict[str, EngineDeterminism]:
    """Every route's deterministic mode by label: the server's word, else the plan's
    ``deterministic`` declaration, else unknown (module docstring); each read within
    ``timeout_s`` s in total.

    Raises:
        LiveGateError: the gate refuses a configuration URL.
    """
    out: dict[str, EngineDeterminism] = {}
    for rp in plans:
        served = await served_determinism(
            routes[rp.label], gate=gate, client=client, timeout_s=timeout_s
        )
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
