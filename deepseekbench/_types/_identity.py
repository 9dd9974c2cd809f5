"""``RouteIdentity``: whether a route serves what its label says.

The check itself is :mod:`deepseekbench._analysis._route_identity`; the status
lives here because rows carry it (``Row.route_identity``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._types._axes import _ClosedEnum

__all__ = ["LaunchRecord", "RouteIdentity", "RouteIdentityName"]


class RouteIdentity(_ClosedEnum):
    """The outcome of the route identity check for one row.

    ``ok``: nothing contradicts the route's label. ``flagged``: a speculative
    route whose engine reports no acceptance anywhere in the run, so whether it
    speculated is unverified (where its server exported no speculative counter at all,
    its speed verdict is refused: ``speculative_counters_missing``). ``refused``: the
    route contradicts its label (an ``off`` route that drafts, a speculative route
    that drafts nothing while the same engine drafts on another route, a served
    depth other than the declared one); no speedup is credited on it.
    """

    ok = "ok"
    flagged = "flagged"
    refused = "refused"


RouteIdentityName = Literal["ok", "flagged", "refused"]
"""The string values :class:`RouteIdentity` accepts."""


class LaunchRecord(BaseModel):
    """What was launched for one route (``[routes.launch]``): recorded in the results
    file's ``run_start`` record and copied onto the route's rows.

    Attributes:
        engine: ``embedded``, ``llama.cpp``, ``vllm``, ``sglang``, or ``command``
            (a raw command line).
        command: the exact argv started (the port it was given included).
        version: the engine's version: from the server where it tells (vLLM
            ``/version``, SGLang ``/get_server_info``, llama.cpp ``/props``
            ``build_info``), else the installed package's; ``None`` when neither.
        spec_config: the speculative configuration asked for (method, depth,
            draft model, engine-specific keys); ``{}`` for speculation off.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: str
    command: tuple[str, ...] = Field(description="exact argv of the engine server")
    version: str | None = Field(default=None, description="engine version")
    spec_config: dict[str, Any] = Field(default_factory=dict)
