"""Engines launched from the plan: ``[routes.launch]`` started, checked and stopped.

A route may carry a :class:`~deepseekbench.LaunchSpec` instead of a server the user
started (the engine with its model, speculative configuration and extra args, or a raw
``command``). :func:`launched_routes` starts one server per route on a free
``127.0.0.1`` port (:func:`~deepseekbench._launch._servers.run_servers`: each in its own
process group, ``PR_SET_PDEATHSIG`` so a SIGKILLed parent takes it along, SIGTERM
unwinding like Ctrl-C), waits until ``GET /v1/models`` lists the route's model, asks
its version, and stops every process group however the block ends. Each route's exact
argv, version and speculative config come back as a
:class:`~deepseekbench._types._identity.LaunchRecord` for the results file. What
differs between engines is each one's launcher
(:mod:`deepseekbench._launch._launchers`); here are the argv and environment of a
launch (:func:`launch_argv`, :func:`launch_env`), its exposure and secrets checks and
the launch itself.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

from deepseekbench._errors import PlanError, ServerError
from deepseekbench._launch._exposure import check_bind
from deepseekbench._launch._launchers import LaunchTarget, launcher_of
from deepseekbench._launch._servers import (
    Process,
    RunningServer,
    ServerKind,
    run_servers,
    sigterm_as_interrupt,
    spawn,
)
from deepseekbench._launch._vllm import shown_argv
from deepseekbench._net._bounded import BoundedReadError, read_bounded
from deepseekbench._net._gate import LiveGate
from deepseekbench._plan._launch_spec import looks_secret
from deepseekbench._types._identity import LaunchRecord
from deepseekbench._types._secrets import redact, secret_values

__all__ = [
    "PORT_PLACEHOLDER",
    "LaunchTarget",
    "Launched",
    "check_exposure",
    "engine_version",
    "launch_argv",
    "launch_env",
    "launch_secrets",
    "launched_routes",
    "shown_argv",
]

PORT_PLACEHOLDER = "{port}"
"""What a launch's argv shows for the port before the run chooses it (dry run)."""


def launch_argv(t: LaunchTarget, port: int | str) -> list[str]:
    """The exact argv that starts ``t``'s server on ``127.0.0.1:port`` (``port``: a TCP
    port, or :data:`PORT_PLACEHOLDER` for a dry run's view).

    Raises:
        ServerError: the engine's program cannot be found (llama.cpp) or the
            launcher's spec refuses the configuration.
    """
    launcher = launcher_of(t)
    try:
        argv = launcher.argv(t, port)
    except ValueError as exc:  # pydantic.ValidationError included
        raise ServerError(f"route {t.name!r}: cannot launch: {exc}", name=t.name) from exc
    return argv + list(t.launch.extra_args)


def _env(t: LaunchTarget) -> dict[str, str]:
    base = launcher_of(t).env(t)
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
    """``GET /v1/models`` answers 200 and lists the route's model, read whole within the
    poll's deadline (:func:`~deepseekbench._net._bounded.read_bounded`)."""
    url = f"http://127.0.0.1:{port}/v1/models"
    resp = await read_bounded(client, "GET", url, deadline_s=_KIND.probe_timeout_s)
    if isinstance(resp, BoundedReadError) or resp.status_code != 200:
        return False
    with contextlib.suppress(ValueError, AttributeError):
        data = resp.json().get("data", [])
        return any(isinstance(m, dict) and m.get("id") == t.served_model for m in data)
    return False


async def engine_version(client: httpx.AsyncClient, t: LaunchTarget, origin: str) -> str | None:
    """The engine's version, from the server where it tells (vLLM ``GET /version``,
    SGLang ``GET /get_server_info`` ``version``, llama.cpp ``GET /props``
    ``build_info``), else the installed package's; ``None`` when neither says
    (:meth:`~deepseekbench._launch._launchers.Launcher.version`). Never raises on a
    server fault."""
    return await launcher_of(t).version(client, origin)


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
                            engine=launcher_of(t).label,
                            command=tuple(redact(a, secrets) for a in argvs[t.name]),
                            version=await engine_version(client, t, server.origin),
                            spec_config=t.spec_config(),
                        )
                        out[t.name] = Launched(server.base_url, server.pid, record)
                yield out
        except ServerError as exc:
            raise _redacted(exc, secrets) from None
