"""The reachability probe: every route is asked once, before anything is measured.

A plan with a dead route (nothing listening, a wrong port, a model the server does
not serve) would otherwise be found only when that route's turn comes, after the
other routes spent minutes measuring. The probe sends one ``GET {base_url}/models``
per route (the OpenAI model list, which vLLM, SGLang, llama.cpp, OpenAI and the
DeepSeek API all serve; it generates nothing) through the
:class:`~deepseekbench.LiveGate` like every request (loopback rules unchanged,
counted against ``max_requests``), and judges the answer:

* no connection, or no whole answer within the deadline (total, however the body is
  paced: :func:`~deepseekbench._net._bounded.read_bounded`): ``connect`` / ``timeout``;
* an HTTP error status other than 404 (e.g. 401 for a wrong key, 5xx):
  ``http_status``; a 404 (a server without a model list) passes;
* a model list that does not hold the route's ``model``: ``model_not_served`` —
  except on llama.cpp (``dialect = "llamacpp"``, or entries ``owned_by``
  ``llamacpp``), whose server answers any ``model`` name with its one model;
* anything else (a list that holds the model, a body that is not a model list or
  is over the 64 MiB cap) passes.

Every route is probed; the failures are raised together as one
:class:`~deepseekbench.RouteUnreachableError`. A plan opts out with
``probe_routes = false`` (CLI ``--no-probe``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from deepseekbench._errors import RouteUnreachableError
from deepseekbench._net._bounded import BoundedReadError, read_bounded
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute

__all__ = ["PROBE_TIMEOUT_S", "probe_route", "probe_routes"]

PROBE_TIMEOUT_S = 30.0
"""Deadline of one probe request (s), unless the plan's ``timeout_s`` is shorter."""

_SHOWN_MODELS = 5


def _served_ids(body: Any) -> list[str] | None:
    """The model ids of an OpenAI model list, or ``None`` when ``body`` is not one."""
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list):
        return None
    ids = [e["id"] for e in data if isinstance(e, Mapping) and isinstance(e.get("id"), str)]
    return ids if len(ids) == len(data) else None


def _any_model(route: EngineRoute, body: Any) -> bool:
    """Whether the server answers any ``model`` name (the dialect's model-name rule:
    llama.cpp, or a model list owned by ``llamacpp``)."""
    return route.adapter.answers_any_model(body)


async def probe_route(
    route: EngineRoute,
    *,
    gate: LiveGate,
    client: httpx.AsyncClient,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> tuple[str, str] | None:
    """Probe one route (module docstring): ``None`` when it passes, else
    ``(reason, detail)`` with ``reason`` one of ``connect``, ``timeout``,
    ``http_status``, ``model_not_served`` and ``detail`` a short text.

    Raises:
        LiveGateError: the gate refuses the URL, or ``client`` has a transport the
            gate does not wrap (nothing is sent).
    """
    gate.check_client(client)
    url = f"{route.base_url}/models"
    refusal = gate.refusal(url, has_auth_header=route.has_api_key)
    if refusal is not None:
        raise refusal
    headers = {"accept": "application/json", **route.headers}
    headers.update({k: v for k, v in route.request_headers().items() if k == "authorization"})
    response = await read_bounded(client, "GET", url, deadline_s=timeout_s, headers=headers)
    if isinstance(response, BoundedReadError):
        if response.reason == "timeout":
            return "timeout", f"no whole answer within {timeout_s:g} s"
        if response.reason == "too_large":
            return None  # a body that is not a model list passes
        return "connect", response.cause or str(response)
    if response.status_code == 404:
        return None
    if not response.is_success:
        hint = " (check the route's API key)" if response.status_code in (401, 403) else ""
        return "http_status", f"HTTP {response.status_code} {response.reason_phrase}{hint}"
    try:
        body = response.json()
    except ValueError:
        return None
    ids = _served_ids(body)
    if ids is None or route.model in ids or _any_model(route, body):
        return None
    shown = ", ".join(repr(i) for i in ids[:_SHOWN_MODELS])
    more = f" and {len(ids) - _SHOWN_MODELS} more" if len(ids) > _SHOWN_MODELS else ""
    served = f"it serves {shown}{more}" if ids else "it lists no model"
    return "model_not_served", f"model {route.model!r} is not served ({served})"


async def probe_routes(
    routes: Mapping[str, EngineRoute] | Sequence[tuple[str, EngineRoute]],
    *,
    gate: LiveGate,
    client: httpx.AsyncClient,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> None:
    """Probe every route once (:func:`probe_route`), in order.

    Args:
        routes: the :class:`~deepseekbench.EngineRoute` per route label.
        timeout_s: deadline of each probe request (s).

    Raises:
        RouteUnreachableError: one or more routes failed; the message has one line
            per failed route (label, URL, reason and detail).
        LiveGateError: the gate refuses a probe URL (nothing is sent).
    """
    items = list(routes.items()) if isinstance(routes, Mapping) else list(routes)
    failures: dict[str, str] = {}
    lines: list[str] = []
    for label, route in items:
        failed = await probe_route(route, gate=gate, client=client, timeout_s=timeout_s)
        if failed is not None:
            reason, detail = failed
            failures[label] = reason
            lines.append(f"route {label!r} ({route.base_url}): {reason}: {detail}")
    if failures:
        n = len(failures)
        raise RouteUnreachableError(
            f"{n} route{'s' if n != 1 else ''} failed the reachability probe before any "
            "measurement:\n  " + "\n  ".join(lines) + "\n(fix the route, or skip the probe "
            "with probe_routes = false / --no-probe)",
            failures=failures,
        )
