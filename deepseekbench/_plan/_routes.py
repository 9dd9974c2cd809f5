"""A plan's routes and cells: where requests go and which axis cells they measure.

Holds :class:`RoutePlan` (one serving endpoint, launched or given), the rule that a
speculative route must not be the baseline's own server (:func:`same_server`), a
launch grid's expansion into one route per configuration (:func:`expand_grid`),
and :class:`CellPlan` (one axis cell: prompt bucket, output target, reasoning mode).
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from deepseekbench._plan._launch_spec import LaunchSpec, check_launch
from deepseekbench._plan._model_config import PLAN_CONFIG
from deepseekbench._plan._route_checks import check_base_url, check_request_extras
from deepseekbench._types._axes import (
    ContextBucket,
    Dialect,
    OutputTarget,
    ReasoningMode,
    Speculative,
)

__all__ = ["LAUNCHED_URL", "CellPlan", "RoutePlan", "expand_grid", "same_server"]


class RoutePlan(BaseModel):
    """One serving endpoint in a plan.

    Attributes:
        label: unique name of the route in this plan (also the scorecard's name).
        speculative: the speculative method the endpoint serves (``off`` = baseline).
        base_url: OpenAI base URL, e.g. ``http://127.0.0.1:8000/v1``.
        model: the ``model`` body field; default the plan's ``model``.
        dialect: the wire extras the engine speaks (``auto`` reads every place).
        api_key_env: name of an environment variable holding the key (the key
            itself never appears in a plan, a row or a report).
        request_extras: engine-scoped body fields for every request.
        continuous_usage: ask for usage on every chunk (vLLM/SGLang).
        spec_tokens: the speculative depth (draft tokens per verify step) the
            endpoint is declared to serve; checked against what the server says
            before measuring (``deepseekbench._execute._served_config``). Left out of the
            plan's content (and hash) when not set.
        launch: start the endpoint from the plan:
            :class:`~deepseekbench.LaunchSpec` (``[routes.launch]``, docs/plan.md);
            ``base_url`` is then a fixed placeholder and ``spec_tokens`` the launch's
            depth. A list of depths, draft models or methods is a grid, expanded by
            :class:`BenchmarkPlan` into one route per configuration.
        grid_of: set on a route expanded from a grid: the grid route's label.
        deterministic: the engine's deterministic mode as declared by the
            plan (``true``/``false``; unset: unknown), for an engine that does not
            report it (vLLM ``VLLM_BATCH_INVARIANT=1``); a server that reports it
            (SGLang ``enable_deterministic_inference``) is believed instead.
            Recorded in the results and shown in the parity note; not hashed (it
            changes no request), and left out of the plan's content when unset.

    Raises:
        pydantic.ValidationError: a label that is empty, over 64 characters or not
            ``[A-Za-z0-9_.:+-]``, a ``base_url`` that is not an http(s) URL with a
            host, an ``api_key_env`` that is not a variable name, an unknown
            ``speculative``/``dialect`` value, or an unknown field.
    """

    model_config = PLAN_CONFIG

    label: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:+-]+$")
    speculative: Speculative
    base_url: str
    model: str | None = None
    dialect: Dialect = Dialect.auto
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    request_extras: dict[str, Any] = Field(default_factory=dict)
    continuous_usage: bool = False
    spec_tokens: int | None = Field(default=None, ge=1)
    # engines launched from the plan (deepseekbench._launch._plan_launch)
    launch: LaunchSpec | None = None
    grid_of: str | None = Field(
        default=None, description="the label of the grid route this one was expanded from"
    )
    # the engine's deterministic mode as declared (deepseekbench._execute._served_config reads it)
    deterministic: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _launched_url(cls, data: Any) -> Any:
        # A launched route's port is chosen at run time: its plan URL is a fixed
        # placeholder, so the plan hash does not change from run to run.
        if isinstance(data, dict) and data.get("launch") is not None:
            data = {"base_url": LAUNCHED_URL, **data}
            launch = data["launch"]
            depth = launch.get("spec_tokens") if isinstance(launch, dict) else None
            if isinstance(depth, int) and data.get("spec_tokens") is None:
                data["spec_tokens"] = depth  # the declared depth the identity check holds
        return data

    @model_validator(mode="after")
    def _launch_fits(self) -> RoutePlan:
        if self.launch is not None:
            check_launch(self.launch, self.speculative.value)
            if self.base_url != LAUNCHED_URL:
                raise ValueError("a launched route takes no base_url (its port is chosen at run)")
            depth = self.launch.depth
            if self.spec_tokens is not None and (self.launch.is_grid or depth is None):
                raise ValueError("a launched route declares its depth in launch.spec_tokens")
            if depth is not None and self.spec_tokens != depth:
                raise ValueError(
                    f"spec_tokens={self.spec_tokens} differs from launch.spec_tokens={depth}"
                )
        return self

    @model_serializer(mode="wrap")
    def _without_unset_depth(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("spec_tokens") is None:
            data.pop("spec_tokens", None)  # plans written before the field keep their hash
        if isinstance(data, dict):  # likewise for plans without launches
            for key in ("launch", "grid_of", "deterministic"):  # launches, grids, determinism
                if data.get(key) is None:
                    data.pop(key, None)
        return data

    @field_validator("base_url")
    @classmethod
    def _http(cls, v: str) -> str:
        return check_base_url(v)

    @field_validator("request_extras")
    @classmethod
    def _extras(cls, v: dict[str, Any]) -> dict[str, Any]:
        # The same rule EngineRoute applies, so a bad route fails at plan load.
        return check_request_extras(v)


_LOOPBACK_NAMES = {"localhost": "127.0.0.1", "localhost.": "127.0.0.1"}
"""Host names that are another spelling of one loopback address (the gate resolves
``localhost`` to loopback too): ``localhost:8000`` and ``127.0.0.1:8000`` are one server."""


def _server_key(route: RoutePlan, default_model: str) -> tuple[str, int | None, str]:
    """Where ``route``'s requests go and what they ask for: scheme, host (lower case),
    port (the scheme's default when unset), path and model."""
    import httpx  # parsing only: the URL grammar the transport uses

    url = httpx.URL(route.base_url)
    port = url.port if url.port is not None else {"http": 80, "https": 443}.get(url.scheme)
    name = url.host.lower()
    name = _LOOPBACK_NAMES.get(name, name)
    host = f"{url.scheme}://{name}{url.path.rstrip('/')}"
    return host, port, route.model or default_model


def same_server(off: RoutePlan, route: RoutePlan, default_model: str) -> str | None:
    """Why ``route`` cannot be measured against the baseline ``off``, or ``None``.

    Both resolve to the same server (scheme, host, port and path of ``base_url``;
    ``localhost`` is read as ``127.0.0.1``) and
    model, with the same ``request_extras``: nothing makes the server decode the
    speculative route differently from ``off``, so any "speedup" between them is
    noise (or the ports are wrong). Launched routes (``[routes.launch]``) are exempt:
    each gets its own server. Different ``request_extras`` (e.g. a per-request
    speculative setting, llama-server's ``speculative.n_max``) are allowed; whether the
    server then speculated is for the run's counters to say (refusal
    ``speculative_counters_missing``)."""
    if off.launch is not None or route.launch is not None:
        return None
    if _server_key(off, default_model) != _server_key(route, default_model):
        return None
    if off.request_extras != route.request_extras:
        return None
    model = route.model or default_model
    return (
        f"route {route.label!r} (speculative={route.speculative.value}) and the baseline "
        f"{off.label!r} resolve to the same server and model ({route.base_url}, model "
        f"{model!r}) with the same request_extras: the server decodes both the same way, so "
        f"no speedup can be measured; point {route.label!r} at a server that runs "
        f"{route.speculative.value}, or give it request_extras that turn speculation on"
    )


LAUNCHED_URL = "http://127.0.0.1:1/v1"
"""The plan URL of a launched route, a placeholder (its real port is chosen when the
run starts, so the plan hash stays the same from run to run)."""


def expand_grid(route: RoutePlan) -> tuple[RoutePlan, ...]:
    """``route`` itself, or one route per configuration of its launch grid: labels
    ``<label>-k<depth>`` / ``-d<n>`` / ``-<method>``, ``spec_tokens`` the point's
    depth, ``grid_of`` the grid's label.

    Raises:
        ValueError: an expanded label is not a valid label (e.g. over 64 characters).
    """
    if route.launch is None or not route.launch.is_grid:
        return (route,)
    out = []
    for suffix, spec in route.launch.grid():
        data = route.model_dump(mode="json")
        data.update(
            label=route.label + suffix,
            launch=spec.model_dump(mode="json"),
            spec_tokens=spec.depth,
            grid_of=route.label,
        )
        out.append(RoutePlan.model_validate(data))
    return tuple(out)


class CellPlan(BaseModel):
    """One axis cell: prompt bucket, output target and reasoning mode (streamed).

    ``max_tokens`` overrides the output target's bound (tokens) when set; it may
    not exceed it.

    Raises:
        pydantic.ValidationError: ``max_tokens`` below 1 or above the output
            target's ``max_output_tokens``, an unknown axis value, or an unknown field.
    """

    model_config = PLAN_CONFIG

    context_bucket: ContextBucket = ContextBucket.k1
    output_target: OutputTarget = OutputTarget.t256
    reasoning_mode: ReasoningMode = ReasoningMode.non_think
    max_tokens: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _bound(self) -> CellPlan:
        if self.max_tokens is not None and self.max_tokens > self.output_target.max_output_tokens:
            raise ValueError(
                f"max_tokens {self.max_tokens} exceeds output_target "
                f"{self.output_target.value} ({self.output_target.max_output_tokens} tokens)"
            )
        return self

    @property
    def cell_id(self) -> str:
        """``<context>/<output>/<reasoning>``, e.g. ``1k/256/non_think``."""
        return f"{self.context_bucket.value}/{self.output_target.value}/{self.reasoning_mode.value}"

    @property
    def request_max_tokens(self) -> int:
        """The ``max_tokens`` sent for this cell (tokens)."""
        return self.max_tokens or self.output_target.max_output_tokens
