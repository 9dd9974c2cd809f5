"""vLLM servers shared by the real-vLLM tests: each configuration started once a session.

A vLLM server takes 52-264 s to start on the CI's 2-core CPU machine (docs/engines.md,
"What the step measured"), against 7-30 s for the plan a test runs on it, so the
step's time is mostly start-ups. A :class:`ServerPool` keeps every server it started
and hands the same process to every test that asks for the same configuration: the
:class:`~deepseekbench._launch._vllm.VllmServerSpec` without its route ``name`` (model,
served name, speculative config, dtype, flags, threads, KV cache). Each configuration
then costs one start-up a session, as long as the tests that share it run one after
the other (pytest runs files in name order, tests in file order).

At most ``limit`` servers run at once (two by default: each holds ~3 GB, and the CI
machine has two cores). Asking for a configuration that is not running stops the
longest-running servers the request does not name until the new one fits. Every
start-up is counted (:attr:`ServerPool.starts`), with its seconds, and
:meth:`ServerPool.summary` says how many there were, how many configurations they
served and how many were restarts (a configuration started again after it was
stopped: the tests that share it did not run together).

:func:`session_pool` runs a pool for a block, with SIGTERM turned into
``KeyboardInterrupt`` (main thread only) so that CI's cancellation runs the stop path;
every server is stopped on every exit, and a SIGKILL of the process still stops them
through the parent-death signal the launcher sets.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal

from deepseekbench import RunningVllmServer, VllmServerSpec, vllm_servers

DEFAULT_LIMIT = 2


def config_key(spec: VllmServerSpec, env: Mapping[str, str] | None = None) -> str:
    """What a server runs: ``spec`` as JSON without its route name (names only a log),
    followed by the environment variables ``env`` sets (sorted; none: nothing added)."""
    key = spec.model_dump_json(exclude={"name"})
    return key + (f" env={sorted(env.items())}" if env else "")


@dataclass(frozen=True)
class StartUp:
    """One server start-up: the route name it was started for, its configuration key,
    the seconds from the start to ready (or to the failure), and whether it became ready."""

    name: str
    key: str
    seconds: float
    ready: bool


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt inside the block (main thread only)."""
    old = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class ServerPool:
    """Running vLLM servers by configuration (see the module docstring).

    ``launch`` is passed to :func:`~deepseekbench._launch._vllm.vllm_servers` as it is
    (``python``, ``env``, ``startup_timeout_s``, ...); each start-up logs to
    ``log_dir/<NN>-<name>/<name>.log``, ``NN`` its number in the session.
    """

    def __init__(
        self, portal: BlockingPortal, log_dir: Path, *, limit: int = DEFAULT_LIMIT, **launch: Any
    ) -> None:
        self._portal = portal
        self._log_dir = log_dir
        self._limit = limit
        self._launch = launch
        # configuration key -> (server, the stack that stops it); in start order
        self._held: dict[str, tuple[RunningVllmServer, contextlib.ExitStack]] = {}
        self.starts: list[StartUp] = []

    @property
    def running(self) -> list[RunningVllmServer]:
        """The servers running now, in the order they were started."""
        return [server for server, _ in self._held.values()]

    def serve(
        self,
        specs: Sequence[VllmServerSpec],
        *,
        env: Mapping[str, Mapping[str, str]] | None = None,
    ) -> dict[str, RunningVllmServer]:
        """The running servers for ``specs``, by each spec's route name (``env``: by
        route name, environment variables set for that server, over the pool's
        ``env``; part of its configuration, so a spec served with and without them is
        two configurations); a configuration already running is handed out as it is
        (its ``spec.name`` is the route name it was first started for), the others are
        started one after another, after stopping what must go to keep at most
        ``limit`` running.

        Raises:
            ValueError: ``specs`` name more than ``limit`` configurations.
            VllmServerError: a server could not be started (see
                :func:`~deepseekbench._launch._vllm.vllm_servers`); the servers
                already running stay up.
        """
        extra = {s.name: (env or {}).get(s.name) for s in specs}
        keys = [config_key(s, extra[s.name]) for s in specs]
        wanted = dict(zip(keys, specs, strict=True))  # one spec per configuration
        if len(wanted) > self._limit:
            raise ValueError(f"{len(wanted)} configurations asked for, at most {self._limit}")
        missing = {k: s for k, s in wanted.items() if k not in self._held}
        for key in [k for k in self._held if k not in wanted]:
            if len(self._held) + len(missing) <= self._limit:
                break
            self._stop(key)
        for key, spec in missing.items():
            self._start(key, spec, extra[spec.name])
        return {s.name: self._held[k][0] for k, s in zip(keys, specs, strict=True)}

    def _start(self, key: str, spec: VllmServerSpec, env: Mapping[str, str] | None) -> None:
        number = len(self.starts) + 1
        log_dir = self._log_dir / f"{number:02d}-{spec.name}"
        stack = contextlib.ExitStack()
        t0 = time.monotonic()
        try:
            running = stack.enter_context(
                self._portal.wrap_async_context_manager(
                    vllm_servers([spec], log_dir=log_dir, **self._with_env(env))
                )
            )
        except BaseException:
            self.starts.append(StartUp(spec.name, key, time.monotonic() - t0, ready=False))
            raise
        seconds = time.monotonic() - t0
        self.starts.append(StartUp(spec.name, key, seconds, ready=True))
        self._held[key] = (running[spec.name], stack)
        print(f"\n[vllm] {spec.name} ready in {seconds:.0f} s (start-up {number})", flush=True)

    def _with_env(self, env: Mapping[str, str] | None) -> dict[str, Any]:
        launch = dict(self._launch)
        if env:
            launch["env"] = {**(launch.get("env") or {}), **env}
        return launch

    def _stop(self, key: str) -> None:
        _, stack = self._held.pop(key)
        stack.close()

    def stop_all(self) -> None:
        """Stop every running server, the last started first."""
        for key in reversed(list(self._held)):
            self._stop(key)

    @property
    def restarts(self) -> int:
        """Start-ups of a configuration that had been ready before in this session."""
        ready = [s.key for s in self.starts if s.ready]
        return len(ready) - len(set(ready))

    def summary(self) -> str:
        """One line: start-ups (ready / failed), configurations, restarts, seconds."""
        failed = sum(not s.ready for s in self.starts)
        keys = {s.key for s in self.starts}
        seconds = sum(s.seconds for s in self.starts)
        return (
            f"vLLM server start-ups: {len(self.starts)} ({len(self.starts) - failed} ready, "
            f"{failed} failed) for {len(keys)} configurations, {self.restarts} restarts, "
            f"{seconds:.0f} s in all"
        )


@contextlib.contextmanager
def session_pool(log_dir: Path, **kw: Any) -> Iterator[ServerPool]:
    """A :class:`ServerPool` for the block (``kw`` as its constructor's); every server
    is stopped on exit, whatever the outcome; SIGTERM raises ``KeyboardInterrupt``."""
    with sigterm_interrupts(), start_blocking_portal() as portal:
        pool = ServerPool(portal, log_dir, **kw)
        try:
            yield pool
        finally:
            pool.stop_all()
