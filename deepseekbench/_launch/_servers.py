"""Engine-server processes on ``127.0.0.1``: start, wait until ready, stop.

What the llama.cpp and vLLM launchers (:mod:`deepseekbench._launch._llamacpp`,
:mod:`deepseekbench._launch._vllm`) share: a free loopback port per server, a log file per
route (``<log_dir>/<name>.log``, its last lines quoted in errors), each server in its
own session (process group) so a stop reaches every process it started, and one
lifecycle (:func:`run_servers`): routes start one after another, each polled until
ready before the next starts, and every process started is stopped on exit from the
block, whatever the outcome: SIGTERM to the group, a grace period, then SIGKILL.

Also here, for servers started with :func:`spawn`: ``PR_SET_PDEATHSIG`` set between
fork and exec (Linux, ``prctl(2)`` via ``ctypes``), so a SIGKILLed parent takes its
servers along, and :func:`sigterm_as_interrupt`, which makes SIGTERM to the parent
unwind like Ctrl-C.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any, Generic, Protocol, TypeVar

import anyio
import httpx

from deepseekbench._errors import ServerError
from deepseekbench._net._gate import LiveGate

LOG_TAIL_LINES = 25
"""Lines of a server's log quoted in an error message."""


class _Route(Protocol):
    @property
    def name(self) -> str: ...


SpecT = TypeVar("SpecT", bound=_Route)


@dataclass(frozen=True)
class RunningServer(Generic[SpecT]):
    """A started, ready engine server: its spec, port, process id and log file."""

    spec: SpecT
    port: int
    pid: int
    log_path: Path

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT`` (for the server's own endpoints: ``/health``, ``/metrics``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, ``http://127.0.0.1:PORT/v1``."""
        return f"{self.origin}/v1"


RunningT = TypeVar("RunningT", bound=RunningServer[Any])


class Process(Protocol):
    """A started server process (``anyio.abc.Process`` or :class:`Child`)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def kill(self) -> None: ...

    def send_signal(self, sig: signal.Signals) -> None: ...


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free when asked (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of the log at ``path`` (``<no log>`` when unreadable)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "<no log>"
    return "\n".join(text.splitlines()[-lines:])


def bind_failed(log: Path) -> bool:
    """The log's end says the server could not bind its port (taken meanwhile)."""
    tail = log_tail(log, 60).lower()
    return "address already in use" in tail or "couldn't bind" in tail


def check_names(specs: Sequence[_Route], error: type[ServerError]) -> None:
    """Raise ``error`` when two routes share a name (they would share a log file)."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise error(f"duplicate route names in {names}", name="-")


class Child:
    """A server started by :func:`spawn`: ``subprocess.Popen``, waited on by polling so
    the event loop is never blocked (the same on asyncio and trio)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    async def wait(self) -> int:
        while True:
            code = self.popen.poll()
            if code is not None:
                return code
            await anyio.sleep(0.05)

    def kill(self) -> None:
        self.popen.kill()

    def send_signal(self, sig: signal.Signals) -> None:
        self.popen.send_signal(sig)


def _die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` setting ``PR_SET_PDEATHSIG`` = SIGKILL (Linux; ``None`` elsewhere).

    The kernel then kills the child when the thread that forked it dies, which
    is the event loop's thread here: a SIGKILLed parent takes its servers along.
    A parent already gone before the call makes the child exit at once.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork

    def preexec() -> None:
        prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


def spawn(argv: Sequence[str], log: IO[bytes], env: Mapping[str, str]) -> Child:
    """Start ``argv`` in its own session (process group), output to ``log``, stdin
    closed, killed by the kernel (SIGKILL) when the starting thread dies (Linux).

    Raises:
        OSError: the binary cannot be executed.
    """
    popen = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        env=dict(env),
        start_new_session=True,
        preexec_fn=_die_with_parent(os.getpid()),
    )
    return Child(popen)


def _signal_group(process: Process, sig: signal.Signals) -> None:
    """Send ``sig`` to the process's group (it leads its own session), else to it alone;
    a group gone or not ours is ignored."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if hasattr(os, "killpg"):
            os.killpg(process.pid, sig)
        else:  # pragma: no cover - non-POSIX
            process.send_signal(sig)


def _group_alive(pid: int) -> bool:
    """Whether process group ``pid`` has a live member. A zombie is not live: its parent
    died and this machine's init may be slow to reap it (or never, in a container whose
    PID 1 reaps nothing), and it holds no port, memory or GPU (Linux: ``/proc``)."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - not Linux: the signal's answer stands
        return True
    return any(_live_in_group(entry, pid) for entry in proc.iterdir() if entry.name.isdigit())


def _live_in_group(entry: Path, pgid: int) -> bool:
    """``/proc/<pid>/stat`` says a non-zombie member of group ``pgid`` (fields after the
    parenthesised command: state, ppid, pgrp, ...; ``proc(5)``)."""
    try:
        fields = entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False  # gone meanwhile
    return fields[2] == str(pgid) and fields[0] != "Z"


KILLED_GROUP_WAIT_S = 10.0
"""Seconds a stop waits, after the SIGKILL, for a lingering group's last processes to be
reaped: the signal cannot be ignored, so this only bounds a busy machine's delay."""


async def stop(process: Process, grace_s: float, *, linger: bool) -> None:
    """SIGTERM the server's process group, wait up to ``grace_s`` s, then SIGKILL the group.

    The wait is for the leader to exit and, with ``linger``, for every process of its
    group (an engine's workers may leave after the leader); with ``linger`` it also
    waits, up to :data:`KILLED_GROUP_WAIT_S` s, until the killed group is gone, so a
    caller that returns from the stop finds no process of the server left.
    """
    _signal_group(process, signal.SIGTERM)
    with anyio.move_on_after(grace_s):
        await process.wait()
        if linger:  # the group's other processes may leave after the leader
            await _group_gone(process.pid)
    _signal_group(process, signal.SIGKILL)
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
    if linger:  # a SIGKILL is delivered, not done: the group is gone only once it is reaped
        with anyio.move_on_after(KILLED_GROUP_WAIT_S):
            await _group_gone(process.pid)


async def _group_gone(pgid: int) -> None:
    """Return once process group ``pgid`` has no live member (polled every 0.1 s: a
    group's end sends no event); the caller bounds the wait."""
    while True:
        if not _group_alive(pgid):
            return
        await anyio.sleep(0.1)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While active, SIGTERM is raised as SIGINT (so it unwinds like Ctrl-C).

    Only in the main thread, and only when SIGTERM has the default handler and
    SIGINT a Python one (the interpreter's or the event loop's); else a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigint = signal.getsignal(signal.SIGINT)
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL or not callable(sigint):
        yield
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        signal.raise_signal(signal.SIGINT)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@dataclass(frozen=True)
class ServerKind:
    """What differs between engines' servers in the shared lifecycle.

    ``label`` names the engine in messages (``"llama-server"``); ``ready_word`` is the
    timeout message's word for ready; ``poll_s`` and ``probe_timeout_s`` (seconds) pace
    the readiness probes; ``linger``: a stop waits for the whole process group, not
    only its leader; ``attempts``: starts per route while the log says the port was
    taken; ``temp_prefix``: of the log folder made when none is given.
    """

    label: str
    error: type[ServerError]
    ready_word: str
    poll_s: float
    probe_timeout_s: float
    linger: bool
    attempts: int
    temp_prefix: str


Spawn = Callable[[SpecT, int, IO[bytes]], Awaitable[Process]]
"""Starts a route's server on a port, output to a log file (raises ``OSError``)."""

Ready = Callable[[httpx.AsyncClient, SpecT, int], Awaitable[bool]]
"""One readiness probe of a route's server on a port: True when it serves."""


async def _wait_ready(
    kind: ServerKind,
    ready: Callable[[], Awaitable[bool]],
    process: Process,
    name: str,
    log: Path,
) -> None:
    while True:
        if process.returncode is not None:
            raise kind.error(
                f"{kind.label} route {name!r} exited with code {process.returncode} "
                f"before becoming healthy; log {log} ends:\n{log_tail(log)}",
                name=name,
                log_path=log,
            )
        if await ready():
            return
        await anyio.sleep(kind.poll_s)


@dataclass
class _Launch(Generic[SpecT, RunningT]):
    """One :func:`run_servers` call: how to start and probe a route, and what was
    started so far (processes and their open log files)."""

    kind: ServerKind
    running: type[RunningT]
    exe: Path
    spawn: Spawn[SpecT]
    ready: Ready[SpecT]
    startup_timeout_s: float
    processes: list[Process] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)

    async def start(self, client: httpx.AsyncClient, spec: SpecT, log_path: Path) -> RunningT:
        """Start ``spec``'s server and wait until it is ready; again on a new port (up
        to ``kind.attempts`` starts) while the log says the port was taken.

        Raises:
            ServerError: (``kind.error``) the program cannot be started, the server
                exited before it was ready, or it was not ready in time.
        """
        kind = self.kind
        for attempt in range(kind.attempts):
            port = free_port()
            process = await self._spawn(spec, port, log_path)
            try:
                with anyio.fail_after(self.startup_timeout_s):
                    probe = partial(self.ready, client, spec, port)
                    await _wait_ready(kind, probe, process, spec.name, log_path)
            except TimeoutError:
                raise kind.error(
                    f"{kind.label} route {spec.name!r} not {kind.ready_word} after "
                    f"{self.startup_timeout_s:g} s; log {log_path} ends:\n{log_tail(log_path)}",
                    name=spec.name,
                    log_path=log_path,
                ) from None
            except ServerError:
                if attempt < kind.attempts - 1 and bind_failed(log_path):
                    continue
                raise
            return self.running(spec=spec, port=port, pid=process.pid, log_path=log_path)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _spawn(self, spec: SpecT, port: int, log_path: Path) -> Process:
        log_file = log_path.open("wb")
        self.logs.append(log_file)
        try:
            process = await self.spawn(spec, port, log_file)
        except OSError as exc:
            raise self.kind.error(
                f"cannot start {self.exe} for route {spec.name!r}: {exc}",
                name=spec.name,
                log_path=log_path,
            ) from exc
        self.processes.append(process)
        return process

    async def stop(self, grace_s: float) -> None:
        """Stop every process at once (:func:`stop`), shielded from cancellation."""
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for process in self.processes:
                    tg.start_soon(partial(stop, process, grace_s, linger=self.kind.linger))
            for f in self.logs:
                f.close()


@contextlib.asynccontextmanager
async def run_servers(
    kind: ServerKind,
    specs: Sequence[SpecT],
    running: type[RunningT],
    *,
    exe: Path,
    spawn: Spawn[SpecT],
    ready: Ready[SpecT],
    log_dir: Path | None,
    startup_timeout_s: float,
    stop_grace_s: float,
) -> AsyncIterator[dict[str, RunningT]]:
    """Start one server per spec, one after another, and yield them by route name.

    Each server is ready before the next starts; ``exe`` names the program in errors;
    logs go to ``log_dir/<name>.log`` (a fresh temp folder when ``None``). Every
    process started is stopped on exit from the block, whatever the outcome
    (:func:`stop`, ``stop_grace_s`` seconds of grace).

    Raises:
        ServerError: (``kind.error``) the program cannot be started, a server exited
            before it was ready, or it was not ready within ``startup_timeout_s`` s.
    """
    if log_dir is None:
        log_dir = Path(tempfile.mkdtemp(prefix=kind.temp_prefix))
    log_dir.mkdir(parents=True, exist_ok=True)
    launch = _Launch(kind, running, exe, spawn, ready, startup_timeout_s)
    servers: dict[str, RunningT] = {}
    try:
        async with LiveGate().client(timeout=httpx.Timeout(kind.probe_timeout_s)) as client:
            for spec in specs:
                log_path = log_dir / f"{spec.name}.log"
                servers[spec.name] = await launch.start(client, spec, log_path)
        yield servers
    finally:
        await launch.stop(stop_grace_s)
