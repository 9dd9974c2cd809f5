"""``BenchmarkPlan``: what a run measures, loadable from TOML or JSON.

A plan names the model, one route per speculative endpoint (speculative
decoding is configured per server on vLLM and SGLang, so each value is its own
endpoint; two routes may share a value when their labels differ, e.g. a correct
and a mis-tuned ``mtp`` server), exactly one ``off`` route (the baseline), the
axis cells, requests and warm-up requests per cell, the load (a fixed
concurrency, or a request rate with Poisson or gamma arrivals), and the parity
prompt and task sets. The format is documented in ``docs/plan.md``.

Every model here is ``extra="forbid"``; a bad plan fails before any request
with ``pydantic.ValidationError`` (direct construction) or :class:`PlanError`
(:meth:`BenchmarkPlan.load` and friends, the message naming the file).
"""

from __future__ import annotations

import difflib
import enum
import hashlib
import itertools
import os
import re
import tomllib
import types
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin

import httpx
import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from deepseekbench._errors import PlanError
from deepseekbench._measure._selfcheck import DEFAULT_LAG_THRESHOLD_MS
from deepseekbench._net._ray_address import check_ray_address_setting
from deepseekbench._net._route import (
    EngineRoute,
    can_ignore_eos,
    check_base_url,
    check_request_extras,
)
from deepseekbench._plan._capability import (
    ModelCapability,
    ModelCapabilityError,
    probe_model_capability,
)
from deepseekbench._plan._coverage import (
    WorkloadCoverage,
    WorkloadCoverageWarning,
    workload_coverage,
)
from deepseekbench._plan._datasets import dataset_sample_path, load_mt_bench, load_speed_bench
from deepseekbench._plan._launch_spec import LaunchSpec, check_launch
from deepseekbench._plan._output_length import OutputLength, OutputLengthMode
from deepseekbench._plan._prefix import SharedPrefix
from deepseekbench._plan._search import SearchPlan
from deepseekbench._plan._tasks import DEFAULT_TOLERANCE, Task, load_tasks, smoke_tasks
from deepseekbench._plan._trace import TracePlan, load_mooncake
from deepseekbench._plan._workload import (
    MAX_CONTEXT_TOKENS,
    InputLength,
    WorkloadFormatError,
    WorkloadItem,
    load_jsonl,
    load_sharegpt,
    load_spec_bench,
    sample_path,
)
from deepseekbench._types._axes import (
    Arrival,
    ContextBucket,
    Dialect,
    Hosting,
    OutputTarget,
    ReasoningMode,
    Speculative,
)
from deepseekbench._types._clock import Clock
from deepseekbench._types._secrets import checked_key
from deepseekbench._userfile import SMALL_FILE_MAX_BYTES, read_user_text

__all__ = [
    "ArrivalPlan",
    "BenchmarkPlan",
    "CellPlan",
    "LoadPoint",
    "ParityPlan",
    "RoutePlan",
    "SloPlan",
    "WorkloadPlan",
    "validation_error_lines",
]

# hide_input_in_errors: str(ValidationError) never repeats a refused value, which
# may be a secret (a key pasted into api_key_env, user-info in a base_url).
# allow_inf_nan=False: TOML's inf/nan would be stored as null and never read back.
_CONFIG = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True, allow_inf_nan=False)
# Fields whose value may be a secret: an error names the field, never the value.
_SECRET_FIELDS = frozenset({"api_key", "api_key_env", "headers", "env", "env_from", "command"})
# Where results go and how the load is sent: a run resumed with more workers is
# the same plan.
_NOT_HASHED = {
    "base_dir",
    "results",
    "client_lag_threshold_ms",
    "workers",
    "executor",
    "ray_address",
    "probe_routes",
    "clock",  # issue 22: judging, not measuring
}


_ADDED_AT_DEFAULT: dict[tuple[str, ...], Any] = {
    ("search",): None,  # issue 24
    ("workload", "shared_prefix"): None,  # issue 23
    ("workload", "trace"): None,
    ("workload", "speed_bench_by"): "category",
    ("workload", "output_tokens"): None,
    ("workload", "require_all_items"): False,  # validation only, never a request
}
"""Keys added since 0.1 whose default sends the same requests as before they existed:
left out of the plan hash at that default, so older results files still resume."""


def _as_before(data: dict[str, Any]) -> None:
    """Edit a plan dump in place so a plan that measures what it measured before the
    keys of :data:`_ADDED_AT_DEFAULT` and ``workload.output_length`` existed hashes as it
    did then: keys at their default are dropped, and ``forced`` / ``natural`` output
    lengths hash as the ``reach_max_tokens`` true / false they replace (``pinned`` sends
    other requests, so its plans hash anew)."""
    for path, default in _ADDED_AT_DEFAULT.items():
        *parents, key = path
        node: Any = data
        for name in parents:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict) and key in node and node[key] == default:
            del node[key]
    workload = data.get("workload")
    if isinstance(workload, dict) and workload.get("output_length") in ("forced", "natural"):
        workload["reach_max_tokens"] = workload.pop("output_length") == "forced"


def _loc_text(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "plan"


def _type_at(model: type[BaseModel] | None, loc: Sequence[int | str]) -> Any:
    """The annotation at ``loc`` inside ``model`` (Optional stripped), or ``None``."""
    tp: Any = model
    for part in loc:
        if isinstance(part, str) and isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(part)
            tp = field.annotation if field is not None else None
        elif isinstance(part, int) and get_origin(tp) in (tuple, list):
            items = [a for a in get_args(tp) if a is not Ellipsis]
            tp = items[0] if len(items) == 1 else None
        else:
            return None
        if get_origin(tp) in (Union, types.UnionType):
            non_none = [a for a in get_args(tp) if a is not type(None)]
            tp = non_none[0] if len(non_none) == 1 else None
    return tp


def _may_be_secret(loc: Sequence[int | str], value: Any) -> bool:
    """Whether an error's input may be a secret (then only its field is named)."""
    if any(part in _SECRET_FIELDS for part in loc):
        return True
    return isinstance(value, str) and "@" in value and "base_url" in loc


def _error_message(err: Any, model: type[BaseModel] | None) -> str:
    """The readable text of one pydantic error (without its location)."""
    loc = tuple(err["loc"])
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    hidden = _may_be_secret(loc, value)
    shown = "the value (not shown: it may be a secret)" if hidden else repr(value)
    tp = _type_at(model, loc)
    if kind == "enum" and isinstance(tp, type) and issubclass(tp, enum.Enum):
        allowed = ", ".join(repr(m.value) for m in tp)
        return f"{shown} is not a valid {tp.__name__}; allowed: {allowed}"
    if kind in ("enum", "literal_error"):
        return f"{shown} is not allowed; allowed: {ctx.get('expected', '?')}"
    if kind == "extra_forbidden":
        parent = _type_at(model, loc[:-1])
        fields = (
            sorted(parent.model_fields)
            if isinstance(parent, type) and issubclass(parent, BaseModel)
            else []
        )
        near = difflib.get_close_matches(str(loc[-1]), fields, n=1) if loc else []
        return "unknown field" + (f"; did you mean {near[0]!r}?" if near else "")
    msg: str = err["msg"].removeprefix("Value error, ")
    simple = isinstance(value, (str, int, float, bool))
    if kind != "missing" and not hidden and simple and repr(value) not in msg:
        msg += f" (got {value!r})"
    return msg


def _route_labels(data: Mapping[str, Any] | None, indexes: Sequence[int]) -> str:
    """`` (routes 'a', 'b')``: the labels of the plan's routes at ``indexes``, where
    ``data`` (the raw plan) gives a string label for every one; else ``""``."""
    routes = data.get("routes") if data is not None else None
    if not isinstance(routes, Sequence) or isinstance(routes, str):
        return ""
    labels = []
    for i in indexes:
        route = routes[i] if 0 <= i < len(routes) else None
        label = route.get("label") if isinstance(route, Mapping) else None
        if not isinstance(label, str):
            return ""
        labels.append(repr(label))
    return f" (route{'s' if len(labels) != 1 else ''} {', '.join(labels)})"


def validation_error_lines(
    exc: ValidationError,
    model: type[BaseModel] | None = None,
    data: Mapping[str, Any] | None = None,
) -> list[str]:
    """One readable line per distinct problem of ``exc``: ``routes[1].speculative: ...``.

    Enum errors name the enum (found by walking ``model``'s fields along the
    error location) and list its values; unknown keys suggest the nearest field
    (``difflib``); pydantic's documentation links are left out. A value that may
    be a secret (``api_key_env``, ``api_key``, ``headers``, a ``base_url`` with
    user-info) is never shown: the line names the field only. The same problem
    in several items of a list (one bad ``dialect`` in every route) is one line
    naming every index — ``routes[0,2].dialect`` — and, given the raw plan
    ``data``, the routes' labels.
    """
    grouped: dict[tuple[tuple[int | str | None, ...], str], list[int]] = {}
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        first = next((i for i, part in enumerate(loc) if isinstance(part, int)), None)
        generic = loc if first is None else (*loc[:first], None, *loc[first + 1 :])
        index = [] if first is None else [int(loc[first])]
        grouped.setdefault((generic, _error_message(err, model)), []).extend(index)
    lines: list[str] = []
    for (generic, msg), indexes in grouped.items():
        parts = [p for p in generic if p is not None]
        if not indexes:
            lines.append(_one_line(f"{_loc_text(parts)}: {msg}"))
            continue
        cut = generic.index(None)
        head = _loc_text(parts[:cut])
        tail = _loc_text(["x", *parts[cut:]])[1:]
        where = f"{head}[{','.join(str(i) for i in indexes)}]{tail}"
        labels = _route_labels(data, indexes) if generic[:cut] == ("routes",) else ""
        lines.append(_one_line(f"{where}{labels}: {msg}"))
    return lines


_LINE_BREAKING = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


def _one_line(text: str) -> str:
    """``text`` with control and line-breaking characters escaped (``\\r``,
    ``\\n``, ``\\u2028``): a plan key holding CR/LF stays on its error's line."""
    return _LINE_BREAKING.sub(lambda m: repr(m.group())[1:-1], text)


_MAX_PLAN_DEPTH = 64
"""Deepest nesting of lists and tables a plan may hold: deeper values (in
``request_extras``, say) overflow pydantic's serializer or Python's recursion."""


def _too_deep(data: Any, limit: int) -> list[int | str] | None:
    """The path of a value nested more than ``limit`` levels deep in ``data``, or
    ``None``; iterative, so it never recurses itself."""
    stack: list[tuple[Any, list[int | str]]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        if len(path) > limit:
            return path[: limit + 1]
        if isinstance(value, Mapping):
            stack.extend((v, [*path, str(k)]) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((v, [*path, i]) for i, v in enumerate(value))
    return None


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
            before measuring (``deepseekbench._plan._spec_config``). Left out of the
            plan's content (and hash) when not set.
        launch: start the endpoint from the plan (issue 24):
            :class:`~deepseekbench.LaunchSpec` (``[routes.launch]``, docs/plan.md);
            ``base_url`` is then a fixed placeholder and ``spec_tokens`` the launch's
            depth. A list of depths, draft models or methods is a grid, expanded by
            :class:`BenchmarkPlan` into one route per configuration.
        grid_of: set on a route expanded from a grid: the grid route's label.
        deterministic: issue 21: the engine's deterministic mode as declared by the
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

    model_config = _CONFIG

    label: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:+-]+$")
    speculative: Speculative
    base_url: str
    model: str | None = None
    dialect: Dialect = Dialect.auto
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    request_extras: dict[str, Any] = Field(default_factory=dict)
    continuous_usage: bool = False
    spec_tokens: int | None = Field(default=None, ge=1)
    # issue 24: engines launched from the plan (deepseekbench._launch._plan_launch)
    launch: LaunchSpec | None = None
    grid_of: str | None = Field(
        default=None, description="the label of the grid route this one was expanded from"
    )
    # issue 21: the engine's deterministic mode, declared (deepseekbench._plan._determinism)
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
        if isinstance(data, dict):  # issue 24: likewise for plans without launches
            for key in ("launch", "grid_of", "deterministic"):  # issue 21: deterministic
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

    def engine_route(
        self, default_model: str, environ: Mapping[str, str] | None = None
    ) -> EngineRoute:
        """The :class:`~deepseekbench.EngineRoute` to measure with (key read from the env).

        Raises:
            PlanError: ``api_key_env`` names an unset variable.
            KeyFormatError: the variable's key has a character an HTTP header
                cannot carry (CR/LF, another control character, non-ASCII).
        """
        key: SecretStr | None = None
        if self.api_key_env is not None:
            env = os.environ if environ is None else environ
            value = env.get(self.api_key_env)
            # a key pasted here instead of a variable name must not be echoed
            name = self.api_key_env if self.api_key_env.isupper() else "(name not shown)"
            if not value or not value.strip():  # a blank key is no key
                raise PlanError(
                    f"route {self.label!r}: api_key_env: environment variable {name} is not set"
                )
            key = checked_key(value, f"route {self.label!r}: api_key_env {name}")
        return EngineRoute(
            base_url=self.base_url,
            model=self.model or default_model,
            api_key=key,
            dialect=self.dialect,
            speculative=self.speculative,
            label=self.label,
            request_extras=self.request_extras,
            continuous_usage=self.continuous_usage,
        )


_LOOPBACK_NAMES = {"localhost": "127.0.0.1", "localhost.": "127.0.0.1"}
"""Host names that are another spelling of one loopback address (the gate resolves
``localhost`` to loopback too): ``localhost:8000`` and ``127.0.0.1:8000`` are one server."""


def _server_key(route: RoutePlan, default_model: str) -> tuple[str, int | None, str]:
    """Where ``route``'s requests go and what they ask for: scheme, host (lower case),
    port (the scheme's default when unset), path and model."""
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

    model_config = _CONFIG

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


_Concurrency = Annotated[int, Field(ge=1, le=4096)]

_MIN_RATE_PER_S = 0.001
"""Smallest open-loop arrival rate (requests/s): one request per 1000 s on average.
Below it a cell of even a few requests would take hours (``rate_per_s = 1e-300``
schedules its second request after the universe ends), so it is refused."""

_Rate = Annotated[float, Field(gt=0)]

_Seed = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
"""A seed sent to the server: a signed 64-bit integer (vLLM's request ``seed``
field; a larger one is refused by the server on every request)."""

_ArrivalSeed = Annotated[int, Field(ge=0, le=2**63 - 1)]
"""The arrival schedule's seed: non-negative (``numpy.random.default_rng``) and
64-bit, like the other seeds."""


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One offered load of a sweep: what a row's load axes hold.

    Attributes:
        arrival: ``closed`` (a closed loop), ``poisson`` or ``gamma`` (an open loop).
        concurrency: closed-loop streams, or the open loop's in-flight cap (requests).
        rate_per_s: the open loop's offered rate (requests/s); ``None`` when closed.
    """

    arrival: Arrival
    concurrency: int
    rate_per_s: float | None = None

    @property
    def key(self) -> str:
        """A stable text key for results records, e.g. ``closed:c=16``, ``poisson:r=8:c=64``."""
        if self.rate_per_s is None:
            return f"{self.arrival.value}:c={self.concurrency}"
        return f"{self.arrival.value}:r={self.rate_per_s:g}:c={self.concurrency}"

    @property
    def label(self) -> str:
        """What a scorecard shows, e.g. ``c=16`` or ``8/s``."""
        return f"c={self.concurrency}" if self.rate_per_s is None else f"{self.rate_per_s:g}/s"

    @property
    def phrase(self) -> str:
        """In words, e.g. ``concurrency 16`` or ``8 req/s``."""
        if self.rate_per_s is None:
            return f"concurrency {self.concurrency}"
        return f"{self.rate_per_s:g} req/s"

    @property
    def level(self) -> float:
        """The sweep's ordering value: concurrency (closed) or rate (open), ascending load."""
        return float(self.concurrency if self.rate_per_s is None else self.rate_per_s)


def _unique(values: tuple[Any, ...], name: str) -> None:
    if not values:
        raise ValueError(f"{name} needs at least one value")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} values must be unique, got {list(values)}")


class ArrivalPlan(BaseModel):
    """How requests are offered within a cell, at one load point or a sweep of them.

    ``mode="concurrency"``: a closed loop of ``concurrency`` workers; a list
    (``concurrency = [1, 4, 16, 64]``) sweeps it, one load point per value.
    ``mode="rate"``: an open loop at ``rate_per_s`` requests/s (a list sweeps
    it) with ``distribution`` ``poisson`` (exponential gaps) or ``gamma`` (gaps
    of shape ``gamma_shape``, mean ``1/rate_per_s``; shape < 1 is burstier),
    drawn from ``numpy.random.default_rng(seed)``; ``concurrency`` (one value)
    then caps requests in flight. ``max_lag_ms``: an open-loop row whose p90
    schedule lag (scheduled send → actual send) exceeds it is flagged
    ``schedule_lagged`` (ms).

    Raises:
        pydantic.ValidationError: a ``concurrency`` outside 1..4096 (requests),
            a ``rate_per_s`` that is not a finite number (``"inf"`` included) or is
            below 0.001 requests/s, a ``gamma_shape`` or ``max_lag_ms`` not > 0, a
            ``seed`` outside 0..2**63-1, an empty or repeated sweep list,
            ``mode="rate"`` without ``rate_per_s``,
            ``rate_per_s`` with ``mode="concurrency"``, a ``concurrency`` list with
            ``mode="rate"``, or an unknown field.
    """

    model_config = _CONFIG

    mode: Literal["concurrency", "rate"] = "concurrency"
    concurrency: _Concurrency | tuple[_Concurrency, ...] = 1
    rate_per_s: _Rate | tuple[_Rate, ...] | None = None
    distribution: Literal["poisson", "gamma"] = "poisson"
    gamma_shape: float = Field(default=1.0, gt=0)
    seed: _ArrivalSeed = 0
    max_lag_ms: float = Field(default=100.0, gt=0)

    @field_validator("rate_per_s", mode="before")
    @classmethod
    def _rate_numbers(cls, value: Any) -> Any:
        """One plain line for a rate that is not a finite number (``"inf"`` included):
        an open loop needs a finite rate; every request at once is a closed loop."""
        for x in value if isinstance(value, (list, tuple)) else [value]:
            number = isinstance(x, (int, float)) and not isinstance(x, bool)
            if x is not None and (not number or x != x or x in (float("inf"), float("-inf"))):
                raise ValueError(
                    f"must be a finite number of requests/s > 0, or a list of them (got {x!r}); "
                    "for every request at once (vLLM's --request-rate inf) use "
                    'mode = "concurrency" with concurrency = N'
                )
        return value

    @model_validator(mode="after")
    def _rate(self) -> ArrivalPlan:
        if self.mode == "rate" and self.rate_per_s is None:
            raise ValueError("mode='rate' needs rate_per_s")
        rates = self.rate_per_s if isinstance(self.rate_per_s, tuple) else (self.rate_per_s,)
        slow = [r for r in rates if r is not None and r < _MIN_RATE_PER_S]
        if slow:
            raise ValueError(
                f"rate_per_s {slow[0]:g} is below {_MIN_RATE_PER_S} requests/s (one request "
                f"per {1 / _MIN_RATE_PER_S:g} s): a cell at that rate would not end in a sane time"
            )
        if self.mode == "concurrency" and self.rate_per_s is not None:
            raise ValueError("rate_per_s is only used with mode='rate'")
        if isinstance(self.concurrency, tuple):
            if self.mode == "rate":
                raise ValueError(
                    "with mode='rate', concurrency is one in-flight cap; sweep rate_per_s instead"
                )
            _unique(self.concurrency, "concurrency")
        if isinstance(self.rate_per_s, tuple):
            _unique(self.rate_per_s, "rate_per_s")
        return self

    def load_points(self) -> tuple[LoadPoint, ...]:
        """The sweep's load points, in plan order (one when nothing is swept)."""
        if self.mode == "rate" and self.rate_per_s is not None:
            rates = self.rate_per_s if isinstance(self.rate_per_s, tuple) else (self.rate_per_s,)
            cap = self.concurrency if isinstance(self.concurrency, int) else self.concurrency[0]
            kind = Arrival(self.distribution)
            return tuple(LoadPoint(kind, cap, float(r)) for r in rates)
        levels = self.concurrency if isinstance(self.concurrency, tuple) else (self.concurrency,)
        return tuple(LoadPoint(Arrival.closed, c) for c in levels)

    def offsets_s(
        self, n: int, *, salt: int = 0, rate_per_s: float | None = None
    ) -> list[float] | None:
        """Send times of ``n`` requests in seconds from the block start (``None`` = closed loop).

        Gaps: exponential with mean ``1/rate`` (Poisson process) or gamma(shape
        ``k``, scale ``1/(k·rate)``); the first request at 0. ``rate_per_s``
        picks the load point (default: the plan's first rate). ``salt`` varies
        the stream reproducibly.
        """
        if self.mode != "rate" or self.rate_per_s is None:
            return None
        import numpy as np

        if rate_per_s is None:
            rate_per_s = self.load_points()[0].rate_per_s
        assert rate_per_s is not None
        rng = np.random.default_rng([self.seed, salt])
        mean = 1.0 / rate_per_s
        if self.distribution == "poisson":
            gaps = rng.exponential(mean, size=n)
        else:
            gaps = rng.gamma(self.gamma_shape, mean / self.gamma_shape, size=n)
        if n:
            gaps[0] = 0.0
        return [float(x) for x in np.cumsum(gaps)]


class SloPlan(BaseModel):
    """Service-level objectives for goodput: a request is *good* when it meets every
    limit given (any subset; none set = no goodput).

    Attributes:
        ttft_ms: TTFT limit (ms). tpot_ms: TPOT limit (ms/token). e2e_ms: E2E limit (ms).

    Raises:
        pydantic.ValidationError: a limit not > 0, or an unknown field.
    """

    model_config = _CONFIG

    ttft_ms: float | None = Field(default=None, gt=0, description="TTFT limit, ms")
    tpot_ms: float | None = Field(default=None, gt=0, description="TPOT limit, ms/token")
    e2e_ms: float | None = Field(default=None, gt=0, description="E2E latency limit, ms")

    @property
    def limits(self) -> dict[str, float]:
        """The limits set, by metric name (``ttft_ms``, ``tpot_ms``, ``e2e_ms``)."""
        given = {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms}
        return {k: v for k, v in given.items() if v is not None}


_DATASET_SOURCES = ("speed_bench", "mt_bench")
"""Dataset sources read by ``deepseekbench._plan._datasets`` (issue 23)."""


class WorkloadPlan(BaseModel):
    """The prompts measured for speed, cycled over each cell's requests.

    Sources (``source``):

    * ``default``: ``prompts`` inline, or ``prompts_file`` (JSONL of
      ``{"prompt": "..."}`` lines, relative to the plan file), else the built-in
      smoke tasks' prompts;
    * ``sharegpt``, ``spec_bench``, ``jsonl``, ``speed_bench`` (SPEED-Bench rows;
      ``speed_bench_by`` groups them by ``category`` or entropy ``tier``),
      ``mt_bench`` (MT-bench ``question.jsonl``): the file at ``path`` in that
      format (``path = "sample"`` picks the small sample shipped with the
      package); ``categories`` keeps only those categories;
    * ``synthetic``: ``n_prompts`` prompts per cell generated to
      ``input_length`` tokens (default: fixed at ¾ of the cell's bucket bound),
      sized with ``tokenizer`` (required); or, with ``shared_prefix``
      (:class:`~deepseekbench.SharedPrefix`), groups of prompts opening with
      one shared prefix each, optionally multi-turn; or, with ``trace``
      (:class:`~deepseekbench.TracePlan`), a Mooncake trace replayed at its own
      arrival times and with its shared blocks.

    ``tokenizer``: ``"endpoint"`` (the ``off`` route's ``POST /tokenize``) or a
    path to a Hugging Face ``tokenizer.json`` (or its folder); with it every
    cell's prompts are counted and must fall in the bucket's token range, and
    outputs without usage are counted with it. Without it only the byte bound is
    checked (a prompt of fewer UTF-8 bytes than the bucket's lower bound is
    refused).

    ``output_length`` (issue 23): ``pinned`` (default: a calibration pass on
    ``off`` finds each prompt's natural length, every route decodes exactly
    that), ``natural`` (stop at EOS under the cap) or ``forced`` (decode to the
    cap past EOS; rows carry ``tokens_past_eos``); parity requests always stop
    at EOS. ``output_tokens``: an :class:`OutputLength` distribution of per-item
    caps (tokens). The deprecated ``reach_max_tokens`` reads as ``forced``
    (true) or ``natural`` (false). See ``deepseekbench._plan._output_length``.

    Raises:
        pydantic.ValidationError: an unknown field or source, a non-string
            prompt, a file source without ``path``, ``input_length`` or
            ``n_prompts`` on a non-synthetic source, a synthetic source without
            ``tokenizer``, ``prompts``/``prompts_file`` with another source, an
            ``output_tokens`` ``dataset`` distribution without reference answers
            or a tokenizer, or ``reach_max_tokens`` contradicting ``output_length``.
    """

    model_config = _CONFIG

    source: Literal[
        "default", "sharegpt", "spec_bench", "jsonl", "synthetic", "speed_bench", "mt_bench"
    ] = "default"  # issue 23: speed_bench, mt_bench
    prompts: tuple[str, ...] = ()
    prompts_file: str | None = None
    path: str | None = None
    categories: tuple[str, ...] = ()
    input_length: InputLength | None = None
    n_prompts: int | None = Field(default=None, ge=1, le=10_000)
    tokenizer: str | None = Field(default=None, min_length=1)
    # issue 23: shared-prefix workloads (groups x prefix x suffixes, multi-turn)
    shared_prefix: SharedPrefix | None = Field(
        default=None,
        description="synthetic only: groups x a shared prefix of prefix_tokens tokens x "
        "suffixes unique suffixes of suffix_tokens tokens (turns > 1: growing chats)",
    )

    speed_bench_by: Literal["category", "tier"] = Field(
        default="category",
        description="source='speed_bench': group items by category (domain) or entropy tier",
    )
    trace: TracePlan | None = Field(
        default=None,
        description="synthetic only: replay a Mooncake JSONL trace (timestamp ms, "
        "input_length, output_length, hash_ids) at its own arrival times / speedup",
    )

    @model_validator(mode="after")
    def _shared_prefix_fields(self) -> WorkloadPlan:
        for key in ("shared_prefix", "trace"):
            if getattr(self, key) is None:
                continue
            if self.source != "synthetic":
                raise ValueError(f"{key} is for source='synthetic'")
            if self.input_length is not None or self.n_prompts is not None:
                raise ValueError(
                    f"{key} sets the lengths and the count: drop input_length and n_prompts"
                )
        if self.shared_prefix is not None and self.trace is not None:
            raise ValueError("give one of shared_prefix or trace (a trace has its own prefixes)")
        return self

    # issue 23 (length23): output length (replaces reach_max_tokens; see _output_length)
    output_length: OutputLengthMode = Field(
        default="pinned",
        description="pinned: decode each prompt's natural length (calibrated on off) on "
        "every route; natural: stop at EOS under the cap; forced: decode to the cap past EOS",
    )
    output_tokens: OutputLength | None = Field(
        default=None, description="per-item output cap distribution (tokens); None: the cell's"
    )
    require_all_items: bool = Field(
        default=False,
        description="refuse a plan whose requests_per_cell leaves workload items unsent "
        "(default: a WorkloadCoverageWarning)",
    )

    @model_validator(mode="before")
    @classmethod
    def _old_reach_max_tokens(cls, data: Any) -> Any:
        """Plans written before issue 23: ``reach_max_tokens`` true → ``forced``,
        false → ``natural`` (deprecated; a FutureWarning says so)."""
        if not isinstance(data, dict) or "reach_max_tokens" not in data:
            return data
        data = dict(data)
        old = data.pop("reach_max_tokens")
        if not isinstance(old, bool):
            raise ValueError("reach_max_tokens (deprecated) must be true or false")
        mapped = "forced" if old else "natural"
        if data.get("output_length", mapped) != mapped:
            raise ValueError(
                f"reach_max_tokens = {str(old).lower()} contradicts output_length = "
                f"{data['output_length']!r}: give output_length only"
            )
        warnings.warn(
            f"workload.reach_max_tokens is deprecated: read as output_length = {mapped!r}",
            FutureWarning,
            stacklevel=2,
        )
        data["output_length"] = mapped
        return data

    @model_validator(mode="after")
    def _output_fields(self) -> WorkloadPlan:
        ol = self.output_tokens
        if ol is not None and ol.distribution == "dataset":
            if self.source not in ("sharegpt", "jsonl"):
                raise ValueError(
                    "output_tokens distribution 'dataset' needs reference answers: "
                    "source 'sharegpt' or 'jsonl'"
                )
            if self.tokenizer is None:
                raise ValueError("output_tokens distribution 'dataset' needs a tokenizer")
        return self

    @model_validator(mode="after")
    def _source_fields(self) -> WorkloadPlan:
        file_source = self.source in ("sharegpt", "spec_bench", "jsonl", *_DATASET_SOURCES)
        if file_source and self.path is None:
            raise ValueError(f"source={self.source!r} needs a path (or path='sample')")
        if not file_source and (self.path is not None or self.categories):
            raise ValueError(
                "path and categories are for the sharegpt, spec_bench, jsonl, speed_bench, "
                "mt_bench sources"
            )
        if self.source != "synthetic" and (
            self.input_length is not None or self.n_prompts is not None
        ):
            raise ValueError("input_length and n_prompts are for source='synthetic'")
        if self.source == "synthetic" and self.tokenizer is None:
            raise ValueError("source='synthetic' needs a tokenizer ('endpoint' or a path)")
        if self.source != "default" and (self.prompts or self.prompts_file):
            raise ValueError("prompts and prompts_file are for source='default'")
        return self


class ParityPlan(BaseModel):
    """The deterministic parity set run on every route.

    Attributes:
        prompts: extra parity prompts (exact acceptance only).
        tasks: ``"smoke"`` (built-in set), ``"none"``, or a JSONL task file path.
        task_mode: ``strict`` or ``lenient`` (see :func:`~deepseekbench.task_parity`).
        tolerance: lenient bound on the pass → fail rate (fraction of tasks).
        alpha: lenient McNemar level.
        max_tokens: output bound for parity requests (tokens).
        seed: the fixed ``seed`` sent with every parity request.
        task_temperature: 0 (default) makes task prompts deterministic and part
            of exact acceptance; above 0 they are sampled and judged by task
            parity alone.
        determinism_control: run ``off`` twice (needed for a verified ``off`` row).
        concurrency: parity requests in flight per route (requests, 1..256).
        exact: issue 21's verdict rule: ``bit_exact`` (default; every output identical
            to ``off``'s) or ``within_noise`` (every divergence a near-tie of ``off``'s
            own logprobs, at a rate not above ``off``'s own; docs/rows-and-gate.md).
        tau_nats: the near-tie bound τ (nats, >= 0); ``None`` calibrates it from
            ``off``'s self-flips, else the bfloat16 default (0.05 nats).
        forensics: after measurement, ask ``off`` for logprobs at every divergence
            (one follow-up request each; never the speculative route).

    Raises:
        pydantic.ValidationError: ``tolerance`` outside [0, 1), ``alpha`` outside
            (0, 1), ``max_tokens`` below 1 or above ``MAX_CONTEXT_TOKENS``,
            ``task_temperature`` outside [0, 2], an unknown ``task_mode``, or an
            unknown field.
    """

    model_config = _CONFIG

    prompts: tuple[str, ...] = ()
    tasks: str = "smoke"
    task_mode: Literal["strict", "lenient"] = "strict"
    tolerance: float = Field(default=DEFAULT_TOLERANCE, ge=0, lt=1)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    max_tokens: int = Field(default=128, ge=1, le=MAX_CONTEXT_TOKENS)
    seed: _Seed = 1234
    task_temperature: float = Field(default=0.0, ge=0, le=2)
    determinism_control: bool = True
    concurrency: int = Field(default=1, ge=1, le=256)
    # issue 21: parity within the engine's own numerics (analysis keys: not hashed)
    exact: Literal["bit_exact", "within_noise"] = "bit_exact"
    tau_nats: float | None = Field(
        default=None, ge=0, description="near-tie bound τ (nats); None: calibrated"
    )
    forensics: bool = True


_PARITY_NOT_HASHED = {"exact", "tau_nats", "forensics"}
"""Issue 21's parity keys change the verdict's rule, never a measured request."""


@dataclass(frozen=True, slots=True)
class PlanSources:
    """What :meth:`BenchmarkPlan.validate_sources` read from the plan's files.

    Attributes:
        tasks: the parity task set (``()`` for ``"none"``).
        prompts: the speed-workload prompts.
        capability: the probed model capability, ``None`` without ``model_source``.
        items: the workload's items (:meth:`BenchmarkPlan.workload_items`);
            ``None`` for a synthetic source (generated at run time).
        coverage: how many of them each cell sends (:meth:`BenchmarkPlan.coverage`).
    """

    tasks: tuple[Task, ...]
    prompts: tuple[str, ...]
    capability: ModelCapability | None
    items: tuple[WorkloadItem, ...] | None = None
    coverage: WorkloadCoverage | None = None  # issue 23: items sent per cell


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
        results: JSONL results path (relative to the plan file when loaded), or ``None``.
        timeout_s: total deadline per request (s).
        client_lag_threshold_ms: the client's own event-loop lag (ms, default 10)
            above which a row is flagged ``client_saturated`` (docs/measurement.md).
        workers: client workers that send each block (1..256, default 1: this
            process); more split the load deterministically (``docs/workers.md``).
        executor: ``"process"`` (worker processes on this host) or ``"ray"`` (Ray
            actors; needs the ``ray`` extra).
        ray_address: an existing Ray cluster's address (``None``: a local
            instance on 127.0.0.1): ``host:port`` or ``ray://host:port`` with an IP
            literal or ``localhost`` as host, or ``"auto"``/``"local"``
            (``deepseekbench._net._ray_address``; anything else is refused at
            validation); a non-loopback host passes the gate.
        model_source: optional path to the model's GGUF file or Hugging Face
            ``config.json`` (or checkpoint folder), relative to the plan file. When
            set, :meth:`validate_sources` probes its MTP (NextN) depth and refuses
            an ``mtp`` route on a model whose depth is 0; the run records it.
        clock: ``"client"`` (default) or ``"server"``: the clock speedups are judged on
            (issue 22; the server clock is the engine's own per-request timings, which
            exclude network and client; docs/measurement.md). Not part of the plan hash.
        probe_routes: ask every route once (``GET {base_url}/models``) before
            measuring and stop with :class:`~deepseekbench.RouteUnreachableError`
            when one is dead or does not serve its model (default ``True``;
            ``deepseekbench._net._probe``). Not part of the plan hash.

    Raises:
        pydantic.ValidationError: any invalid field (direct construction).
    """

    model_config = _CONFIG

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
    seed: _Seed = 0
    arrival: ArrivalPlan = ArrivalPlan()
    workload: WorkloadPlan = WorkloadPlan()
    parity: ParityPlan = ParityPlan()
    slo: SloPlan = SloPlan()
    results: str | None = None
    # issue 24: capacity under SLO (left out of the plan's content and hash when unset)
    search: SearchPlan | None = Field(
        default=None, description="[search]: find each route's capacity under [slo]"
    )
    timeout_s: float = Field(default=600.0, gt=0)
    client_lag_threshold_ms: float = Field(
        default=DEFAULT_LAG_THRESHOLD_MS,
        gt=0,
        description="client event-loop lag (ms) above which a row is flagged client_saturated",
    )
    workers: int = Field(default=1, ge=1, le=256, description="client workers (processes/actors)")
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
    # issue 22: the clock speed is judged on
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

    @field_validator("ray_address")
    @classmethod
    def _ray_address(cls, v: str | None) -> str | None:
        # the grammar the gate judges: a host Ray reads the same way (_net._ray_address)
        return check_ray_address_setting(v)

    @field_validator("routes")
    @classmethod
    def _expand_grids(cls, v: tuple[RoutePlan, ...]) -> tuple[RoutePlan, ...]:
        # issue 24: a launched route with a list of depths, draft models or methods
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
        if self.search is not None and not self.slo.limits:  # issue 24
            raise ValueError("[search] needs at least one [slo] limit (ttft_ms, tpot_ms, e2e_ms)")
        cells = [c.cell_id for c in self.cells]
        dup_cells = sorted({x for x in cells if cells.count(x) > 1})
        if dup_cells:
            raise ValueError(f"cells must be unique; repeated: {dup_cells}")
        return self

    # ---------------------------------------------------------------- access
    def search_load(self, level: float) -> LoadPoint:
        """The load point of a ``[search]`` level (issue 24): closed loop of
        ``level`` streams, or the arrival's open loop at ``level`` requests/s."""
        if self.arrival.mode == "rate":
            cap = self.arrival.concurrency
            cap = cap if isinstance(cap, int) else cap[0]
            return LoadPoint(Arrival(self.arrival.distribution), cap, float(level))
        return LoadPoint(Arrival.closed, int(level))

    @property
    def effective_search(self) -> SearchPlan | None:
        """``search`` as the run applies it (issue 24): a closed loop's levels are capped
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
        or, with ``[search]``, a load of the arrival's kind (issue 24)."""
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
        """Rounds actually run per cell and load point: ``min(repeats, requests_per_cell)``."""
        return min(self.repeats, self.requests_per_cell)

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
        spec = self.parity.tasks
        if spec == "none":
            return ()
        if spec == "smoke":
            return smoke_tasks()
        return load_tasks(self.resolve(spec))

    def workload_prompts(self) -> tuple[str, ...]:
        """The speed-workload prompts (inline, from file, or the smoke tasks' prompts).

        Raises:
            PlanError: the prompts file is unreadable, not UTF-8, or malformed.
        """
        if self.workload.prompts:
            return self.workload.prompts
        if self.workload.prompts_file:
            p = self.resolve(self.workload.prompts_file)
            out: list[str] = []
            text = read_user_text(p, what="prompts file", fail=PlanError)
            lines = text.split("\n")  # not splitlines (U+2028, U+0085)
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise PlanError(f"{p}: line {number} is not JSON") from exc
                if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
                    raise PlanError(f"{p}: line {number} needs a string 'prompt'")
                out.append(obj["prompt"])
            if not out:
                raise PlanError(f"{p}: no prompts")
            return tuple(out)
        return tuple(t.prompt for t in smoke_tasks())

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
        w = self.workload
        if w.source == "synthetic":
            return None
        if w.source == "default":
            if not w.prompts and not w.prompts_file:
                return tuple(
                    WorkloadItem(id=t.id, turns=(t.prompt,), category=t.category, source="smoke")
                    for t in smoke_tasks()
                )
            return tuple(
                WorkloadItem(id=f"prompt-{i + 1}", turns=(p,), source="plan")
                for i, p in enumerate(self.workload_prompts())
            )
        return self._dataset_items()

    def _dataset_items(self) -> tuple[WorkloadItem, ...]:
        w = self.workload
        assert w.path is not None
        if w.source in _DATASET_SOURCES:  # issue 23: SPEED-Bench, MT-bench
            ds = cast(Literal["speed_bench", "mt_bench"], w.source)
            sample = dataset_sample_path(ds, by=w.speed_bench_by)
            path = sample if w.path == "sample" else self.resolve(w.path)
            items = (
                load_speed_bench(path, by=w.speed_bench_by)
                if ds == "speed_bench"
                else load_mt_bench(path)
            )
        else:
            fmt = cast(Literal["sharegpt", "spec_bench", "jsonl"], w.source)
            loader = {
                "sharegpt": load_sharegpt, "spec_bench": load_spec_bench, "jsonl": load_jsonl
            }  # fmt: skip
            path = sample_path(fmt) if w.path == "sample" else self.resolve(w.path)
            items = loader[fmt](path)
        if w.categories:
            items = tuple(i for i in items if i.category in w.categories)
            if not items:
                raise WorkloadFormatError(
                    f"{path}: no item of categories {list(w.categories)}", path=path
                )
        return items

    def plan_hash(self) -> str:
        """A 16-hex-digit digest of the plan's content (``base_dir``, ``results`` and
        ``client_lag_threshold_ms``, which changes no request, and how the load is
        sent — ``workers``, ``executor``, ``ray_address`` — excluded): a results
        file resumes only records with the same hash."""
        exclude: dict[str, Any] = {k: True for k in _NOT_HASHED}
        exclude["parity"] = _PARITY_NOT_HASHED  # issue 21
        exclude["routes"] = {"__all__": {"deterministic"}}  # issue 21: changes no request
        data = self.model_dump(mode="json", exclude=exclude)
        _as_before(data)
        return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]

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
        """
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

    # issue 23 (length23): nothing dropped silently
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
            warnings.warn(cov.message(), WorkloadCoverageWarning, stacklevel=3)
        return cov

    def generated_item_count(self) -> int:
        """Items a synthetic workload generates per cell: a trace's lines, a
        shared-prefix spec's ``groups · suffixes``, else ``n_prompts`` (default 8).

        Reads the trace file, so its bounds (``MAX_TRACE_SPAN_MS``,
        ``MAX_CONTEXT_TOKENS``) are checked at validation and in the dry run.

        Raises:
            WorkloadFormatError: the trace file is unreadable, malformed or out of bounds.
        """
        w = self.workload
        if w.trace is not None:
            return len(load_mooncake(self.resolve(w.trace.path)))
        if w.shared_prefix is not None:
            return w.shared_prefix.n_items
        return w.n_prompts or 8

    def model_capability(self) -> ModelCapability | None:
        """The probed capability of ``model_source`` (``None`` when it is unset).

        Raises:
            PlanError: the model source cannot be read (wraps ModelCapabilityError).
        """
        if self.model_source is None:
            return None
        try:
            return probe_model_capability(self.resolve(self.model_source))
        except ModelCapabilityError as exc:
            raise PlanError(f"cannot probe model_source: {exc}") from exc

    def check_capability(self) -> ModelCapability | None:
        """Refuse ``speculative=mtp`` routes on a model with no MTP (NextN) layers.

        Returns the probed capability (``None`` without ``model_source``).

        Raises:
            PlanError: an ``mtp`` route is planned and the model's MTP depth is 0,
                or the model source cannot be read.
        """
        cap = self.model_capability()
        if cap is None:
            return None
        mtp_routes = [r.label for r in self.routes if r.speculative is Speculative.mtp]
        if mtp_routes and cap.mtp_depth == 0:
            raise PlanError(
                f"routes {mtp_routes} ask for speculative=mtp, but {cap.source} has MTP "
                f"(NextN) depth 0: the model carries no MTP layers to draft with"
            )
        return cap

    # ---------------------------------------------------------------- loading
    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], *, base_dir: str | Path | None = None
    ) -> BenchmarkPlan:
        """Validate a plan from a mapping.

        Raises:
            PlanError: the mapping is not a valid plan (wraps the validation error),
                or its values nest deeper than ``_MAX_PLAN_DEPTH`` (64) levels.
        """
        deep = _too_deep(data, _MAX_PLAN_DEPTH)
        if deep is not None:
            raise PlanError(
                f"invalid plan: {_one_line(_loc_text(deep[:4]))}... nests lists or tables "
                f"more than {_MAX_PLAN_DEPTH} levels deep"
            )
        payload = dict(data)
        if base_dir is not None:
            payload.setdefault("base_dir", str(Path(base_dir).resolve()))
        try:
            return cls.model_validate(payload)
        except ValidationError as exc:
            lines = validation_error_lines(exc, cls, payload)
            n = len(lines)
            raise PlanError(
                f"invalid plan ({n} error{'s' if n != 1 else ''}):\n  " + "\n  ".join(lines)
            ) from exc

    @classmethod
    def from_toml(cls, text: str, *, base_dir: str | Path | None = None) -> BenchmarkPlan:
        """Parse a TOML plan.

        Raises:
            PlanError: not TOML, or not a valid plan.
        """
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PlanError(f"plan is not valid TOML: {exc}") from exc
        except RecursionError:
            raise PlanError(
                "plan is not valid TOML: arrays or inline tables nested too deeply"
            ) from None
        return cls.from_mapping(data, base_dir=base_dir)

    @classmethod
    def from_json(cls, text: str | bytes, *, base_dir: str | Path | None = None) -> BenchmarkPlan:
        """Parse a JSON plan.

        Raises:
            PlanError: not a JSON object, or not a valid plan.
        """
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise PlanError(f"plan is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise PlanError("a JSON plan must be an object")
        return cls.from_mapping(data, base_dir=base_dir)

    @classmethod
    def load(cls, path: str | Path) -> BenchmarkPlan:
        """Load ``*.toml`` or ``*.json``; relative paths inside resolve against its folder.

        Raises:
            PlanError: unreadable or non-UTF-8 file, unknown suffix, or an invalid
                plan (the message names the file).
        """
        p = Path(path)
        text = read_user_text(p, what="plan", fail=PlanError, max_bytes=SMALL_FILE_MAX_BYTES)
        try:
            if p.suffix.lower() == ".toml":
                return cls.from_toml(text, base_dir=p.parent)
            if p.suffix.lower() == ".json":
                return cls.from_json(text, base_dir=p.parent)
        except PlanError as exc:
            raise PlanError(f"{p}: {exc}") from exc
        raise PlanError(f"{p}: a plan must be a .toml or .json file")
