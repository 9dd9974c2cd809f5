"""``WorkerPool``: one load point sent from several client processes on one host.

When one Python process cannot keep up with the streams it measures (its event
loop lags, every arrival is stamped late), the load is spread over N worker
processes (``multiprocessing``, *spawn* context), each with its own event loop,
its own :class:`~deepseekbench.LiveGate` (the parent gate's rules) and its own
client (:mod:`deepseekbench._execute._worker`). The work is split deterministically
(:func:`~deepseekbench._execute._workshare.split_work`).

* **One writer.** Workers send each finished request back over their pipe as it
  finishes; the parent hands it to ``on_result`` (the one writer of the results
  file). A worker's records already sent are never lost.
* **Clocks.** Durations are measured on each worker's own monotonic clock. The
  load point starts at one shared ``time.monotonic_ns()`` instant (CLOCK_MONOTONIC,
  the same clock in every process of a host), a short lead after the parent
  hands out the shares; the window ends at the last finish on that clock.
* **Budgets.** When the parent's gate has a budget, every worker asks the
  parent's :class:`BudgetLedger` (the parent's gate itself) before each request,
  so ``max_requests`` and ``max_output_tokens`` hold for the run as a whole.
  Without a budget nothing is asked (no round trip).
* **Secrets.** The API key reaches a worker pickled over its pipe inside a
  ``SecretStr`` — never in argv, the environment, a process title or a record:
  a worker is started without ``DEEPSEEKBENCH_API_KEY`` or any variable holding
  a key (a route's ``api_key_env``).
* **Orphans.** A worker dies with its parent (``PR_SET_PDEATHSIG`` on Linux, and
  a parent-pid watchdog): a SIGKILLed or SIGTERMed run leaves no worker sending
  unrecorded requests.
* **Faults.** A worker that dies is reported (:class:`WorkerDeath`: worker,
  pid, exit code); its unfinished requests are handed to ``on_result`` as
  measurements with error kind ``worker_died``; it is replaced at the next load
  point. A worker whose gate refuses raises :class:`~deepseekbench.LiveGateError`
  in the parent once the others finished (a budget refusal first lets the worker's
  requests in flight finish, and hands the refused ones on as ``budget_refused``
  measurements: nothing admitted is dropped); any other worker exception raises
  :class:`WorkerError` (requests it had not finished are not recorded: a resume
  sends them).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Self

import anyio
import httpx

from deepseekbench._errors import LiveGateError, WorkerError
from deepseekbench._execute._budget import client_fault_measurement
from deepseekbench._execute._worker import Finished, GateRules, WorkerCore, WorkerSetup
from deepseekbench._execute._workshare import LoadWork, PoolItem, WorkerShare, split_work
from deepseekbench._measure._measure import Timeouts
from deepseekbench._net._gate import ENV_API_KEY, LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._records._figures import counted_output_tokens
from deepseekbench._records._measurement import ErrorKind, StreamMeasurement
from deepseekbench._types._secrets import contains_secret, secret_values

__all__ = [
    "BudgetLedger",
    "PhaseBook",
    "PoolReport",
    "PoolResult",
    "ResultFn",
    "WorkerDeath",
    "WorkerError",
    "WorkerPool",
    "charged_tokens",
    "died_measurement",
    "exception_leaves",
    "worker_main",
]


@dataclass(frozen=True, slots=True)
class PoolResult:
    """One finished request, as the parent sees it.

    Attributes:
        item: the item, or ``None`` for a warm-up request.
        measurement: what was measured (error kind ``worker_died`` when its
            worker died first).
        queue_ms: open loop: actual send − scheduled send (ms); ``None`` otherwise.
        worker: the worker that sent it.
        sent_ns, end_ns: send and finish times on the parent host's
            CLOCK_MONOTONIC (ns; ``time.monotonic_ns()``); ``None`` when its
            worker died first.
    """

    item: PoolItem | None
    measurement: StreamMeasurement
    queue_ms: float | None
    worker: int
    sent_ns: int | None = None
    end_ns: int | None = None


ResultFn = Callable[[PoolResult], None]
"""Called in the parent's event loop for every finished request; must not block."""


@dataclass(frozen=True, slots=True)
class WorkerDeath:
    """A worker that died during a load point: its number, pid, exit code (negative:
    killed by that signal) and how many of its requests were unfinished."""

    worker: int
    pid: int | None
    exitcode: int | None
    unfinished: int

    def __str__(self) -> str:
        return (
            f"client worker {self.worker} (pid {self.pid}) died with exit code "
            f"{self.exitcode}; {self.unfinished} of its requests recorded as worker_died"
        )


@dataclass(frozen=True, slots=True)
class PoolReport:
    """What a load point's run looked like from the parent.

    Attributes:
        workers: workers that took part.
        start_ns: the shared start (CLOCK_MONOTONIC ns; Ray: the driver's).
        end_ns: the last finish (same clock; ``start_ns`` when nothing finished).
        deaths: workers that died.
        clock_offsets_ns: per worker, its wall clock minus the parent's (ns,
            estimated; Ray only, ``()`` for local processes).
        basis: ``workers = "auto"``: why this many workers took part, in words
            (e.g. ``"auto: 2 of 2 cores, warm-up client CPU share 0.93 (...)"``);
            ``None`` otherwise.
    """

    workers: int
    start_ns: int
    end_ns: int
    deaths: tuple[WorkerDeath, ...] = ()
    clock_offsets_ns: tuple[int, ...] = ()
    basis: str | None = None

    @property
    def window_s(self) -> float:
        """The load point's window, shared start to last finish (s)."""
        return max(0, self.end_ns - self.start_ns) / 1e9


def died_measurement(route: EngineRoute | None, death: str) -> StreamMeasurement:
    """The record of a request whose worker died before it finished (error kind
    ``worker_died``; nothing else known)."""
    return client_fault_measurement(route, ErrorKind.worker_died, death)


charged_tokens = counted_output_tokens
"""The output tokens a measurement is charged (tokens): :func:`counted_output_tokens`."""


class BudgetLedger:
    """The parent side of the run's budgets: the parent's own :class:`LiveGate`.

    Workers ask :meth:`ask` before each request (the gate admits and counts it,
    or says why not); every finished request is charged with :meth:`charge`.
    """

    def __init__(self, gate: LiveGate) -> None:
        self.gate = gate

    def ask(self, url: str, has_auth: bool) -> tuple[str, str, tuple[str, ...]] | None:
        """Admit one request to ``url``: ``None``, or the refusal's (message, host, missing)."""
        headers = {"authorization": "route key"} if has_auth else None
        try:
            self.gate.admit(httpx.Request("POST", url, headers=headers))
        except LiveGateError as exc:
            return (str(exc), exc.host, exc.missing)
        return None

    def charge(self, m: StreamMeasurement) -> None:
        """Charge ``m``'s output tokens (usage count, else the estimate) to the gate."""
        self.gate.charge_output_tokens(charged_tokens(m))


# ------------------------------------------------------------- worker side --


class _PipeLink:
    """A worker's end of its pipe: one sender thread (records and asks, in order)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._out: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._ask_lock = threading.Lock()
        self._sender = threading.Thread(target=self._send_loop, daemon=True)
        self._sender.start()

    def _send_loop(self) -> None:
        while (msg := self._out.get()) is not None:
            self.conn.send(msg)

    def send(self, msg: object) -> None:
        self._out.put(msg)

    def post(self, finished: Finished) -> None:
        self._out.put(("sent", finished))

    def close(self) -> None:
        self._out.put(None)
        self._sender.join()

    def _ask_blocking(self, url: str, has_auth: bool) -> Any:
        with self._ask_lock:
            self._out.put(("ask", url, has_auth))
            return self.conn.recv()

    async def ask(self, route: EngineRoute) -> None:
        reply = await anyio.to_thread.run_sync(
            self._ask_blocking, route.chat_url, route.has_api_key
        )
        if reply is not None:
            message, host, missing = reply
            raise LiveGateError(message, host=host, missing=tuple(missing))


def exception_leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or ``[exc]``."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in exception_leaves(sub)]
    return [exc]


async def _command(core: WorkerCore, link: _PipeLink, cmd: tuple[Any, ...]) -> None:
    kind, share, start_ns = cmd
    try:
        if kind == "warm":
            await core.warm(share)
        else:
            await core.run(share, start_ns)
    except Exception as exc:
        leaves = exception_leaves(exc)
        refusal = next((e for e in leaves if isinstance(e, LiveGateError)), None)
        if refusal is not None:
            link.send(("refused", str(refusal), refusal.host, refusal.missing))
        else:
            link.send(("failed", "; ".join(f"{type(e).__name__}: {e}" for e in leaves)))
        return
    link.send(("done", kind))


async def _serve(link: _PipeLink, setup: WorkerSetup) -> None:
    async with WorkerCore(setup, link.post, link.ask) as core:
        link.send(("ready", os.getpid()))
        while True:
            cmd = await anyio.to_thread.run_sync(link.conn.recv)
            if cmd[0] == "stop":
                return
            await _command(core, link, cmd)


_WATCHDOG_S = 0.2
"""How often a worker checks that its parent still lives (s)."""


def die_with_parent(parent_pid: int) -> None:
    """Make this process end when ``parent_pid`` (its parent) dies, however it dies.

    Linux: ``PR_SET_PDEATHSIG`` = SIGKILL (``prctl(2)`` via ``ctypes``, as
    :mod:`deepseekbench._launch._servers` does for servers): the kernel kills
    this process when the parent thread that started it ends (SIGKILL, SIGTERM,
    a crash). Everywhere, a watchdog thread as fallback: once the parent pid is
    no longer this process's parent (re-parented to init or a subreaper), the
    process exits at once (``os._exit``) within :data:`_WATCHDOG_S` seconds, so
    an orphan never keeps sending unrecorded requests.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the call
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_WATCHDOG_S)
        os._exit(1)

    threading.Thread(target=watch, name="deepseekbench-parent-watchdog", daemon=True).start()


def worker_main(conn: Connection, parent_pid: int | None = None) -> None:
    """A worker process's entry point: read the :class:`WorkerSetup` from ``conn``,
    then run commands until told to stop. SIGINT is ignored (the parent decides);
    the worker dies with ``parent_pid`` (:func:`die_with_parent`)."""
    if parent_pid is not None:
        die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    setup = conn.recv()
    link = _PipeLink(conn)
    try:
        anyio.run(_serve, link, setup)
    finally:
        link.close()


# ------------------------------------------------------------- parent side --


def key_variables(secrets: Sequence[str]) -> list[str]:
    """Names of the variables in ``os.environ`` that a child process must not inherit:
    ``DEEPSEEKBENCH_API_KEY`` and every variable whose value holds one of ``secrets``
    (a route's ``api_key_env``). Used for worker processes and a local Ray instance."""
    return [
        k
        for k, v in os.environ.items()
        if k == ENV_API_KEY or (secrets and contains_secret(v, secrets))
    ]


@contextlib.contextmanager
def _without_secrets_in_environ(secrets: Sequence[str]) -> Iterator[None]:
    """``os.environ`` without the key variables while a worker is started (a spawned
    worker inherits the environment at exec, and ``/proc/PID/environ`` shows it):
    ``DEEPSEEKBENCH_API_KEY`` and every variable whose value holds a key
    (a route's ``api_key_env``); restored once the worker runs. Called on the event
    loop's thread, so no other task of the run sees the environment without them."""
    drop = key_variables(secrets)
    saved = {k: os.environ[k] for k in drop}
    for k in drop:
        del os.environ[k]
    try:
        yield
    finally:
        os.environ.update(saved)


@dataclass(slots=True)
class _Proc:
    worker: int
    process: BaseProcess
    conn: Connection
    pid: int | None = None
    dead: bool = False


@dataclass(slots=True)
class PhaseBook:
    """The parent's bookkeeping of one phase (warm-up or measured) of a load point:
    which workers are still busy, which of their items are unfinished, and what
    went wrong (shared by the process pool and the Ray executor)."""

    on_result: ResultFn
    ledger: BudgetLedger
    routes: Mapping[str, EngineRoute]
    waiting: set[int]
    pending: dict[int, dict[int, PoolItem]]
    deaths: list[WorkerDeath] = field(default_factory=list)
    refusal: LiveGateError | None = None
    failure: WorkerError | None = None
    end_ns: int = 0

    def finished(self, worker: int, f: Finished) -> None:
        item = self.pending.get(worker, {}).pop(f.key, None) if f.key >= 0 else None
        self.ledger.charge(f.measurement)
        self.end_ns = max(self.end_ns, f.end_ns)
        self.on_result(PoolResult(item, f.measurement, f.queue_ms, worker, f.sent_ns, f.end_ns))

    def died(self, worker: int, pid: int | None, exitcode: int | None) -> None:
        self.waiting.discard(worker)
        left = self.pending.pop(worker, {})
        death = WorkerDeath(worker, pid, exitcode, len(left))
        self.deaths.append(death)
        for item in left.values():
            m = died_measurement(self.routes.get(item.route), str(death))
            self.on_result(PoolResult(item, m, None, worker))

    def raise_failure(self) -> None:
        if self.refusal is not None:
            raise self.refusal
        if self.failure is not None:
            raise self.failure


def _drain(proc: _Proc, out: list[tuple[_Proc, Any]]) -> bool:
    """Move every message waiting on ``proc``'s pipe to ``out``; False at end of file."""
    try:
        while proc.conn.poll():
            out.append((proc, proc.conn.recv()))
    except (EOFError, OSError):
        return False
    return True


def _poll(procs: Sequence[_Proc], timeout_s: float) -> list[tuple[_Proc, Any]]:
    """Wait up to ``timeout_s`` for messages or deaths (runs in a thread)."""
    by_handle: dict[Any, _Proc] = {}
    for p in procs:
        by_handle[p.conn] = p
        by_handle[p.process.sentinel] = p
    out: list[tuple[_Proc, Any]] = []
    gone: set[int] = set()
    for handle in wait(list(by_handle), timeout_s):
        proc = by_handle[handle]
        if proc.worker in gone:
            continue
        if _drain(proc, out) and handle is not proc.process.sentinel:
            continue
        proc.process.join(5.0)
        if not proc.process.is_alive():
            _drain(proc, out)
            out.append((proc, ("died",)))
            gone.add(proc.worker)
    return out


class ClientPool:
    """What every pool of client workers shares (:class:`WorkerPool`, and
    :class:`~deepseekbench._execute._ray_executor.RayPool`): its workers' setup (routes, the
    gate's rules, timeouts), the run's budget ledger, the lead of the shared start
    (s), and use as an async context manager (:meth:`start` on entry, :meth:`aclose`
    on exit).

    Raises:
        ValueError: ``workers`` below 1.
    """

    def __init__(
        self,
        workers: int,
        *,
        routes: Mapping[str, EngineRoute],
        gate: LiveGate,
        timeouts: Timeouts | None,
        start_lead_s: float,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1 (got {workers})")
        self.workers = workers
        self.routes = dict(routes)
        self.ledger = BudgetLedger(gate)
        self.rules = GateRules.of(gate)
        self.timeouts = timeouts or Timeouts()
        self.start_lead_s = start_lead_s

    def taking_part(self, workers: int | None) -> int:
        """The workers a load point is split over: ``workers`` (``workers = "auto"``'s
        choice) bounded to 1..the pool's size, or the whole pool when ``None``."""
        return self.workers if workers is None else max(1, min(workers, self.workers))

    async def start(self) -> None:
        """Start the workers (a subclass's work)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Stop the workers (a subclass's work)."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:  # the exception propagates
        await self.aclose()


class WorkerPool(ClientPool):
    """N client worker processes on this host that send a load point's requests.

    Use as an async context manager; :meth:`run` one load point at a time.

    Args:
        workers: worker processes (>= 1).
        routes: the engine route of every route label used by the work.
        gate: the parent's :class:`~deepseekbench.LiveGate`: workers use its
            rules, and its budgets are the run's (:class:`BudgetLedger`).
        timeouts: per-request deadlines (default :class:`~deepseekbench.Timeouts`).
        start_lead_s: how far after handing out the shares the shared start is (s).
        start_timeout_s: how long a worker may take to start (s).

    Raises:
        ValueError: ``workers`` below 1 or ``start_lead_s`` negative.
    """

    def __init__(
        self,
        workers: int,
        *,
        routes: Mapping[str, EngineRoute],
        gate: LiveGate,
        timeouts: Timeouts | None = None,
        start_lead_s: float = 0.2,
        start_timeout_s: float = 120.0,
    ) -> None:
        super().__init__(
            workers, routes=routes, gate=gate, timeouts=timeouts, start_lead_s=start_lead_s
        )
        if start_lead_s < 0:
            raise ValueError("start_lead_s must be >= 0")
        self.start_timeout_s = start_timeout_s
        self._procs: dict[int, _Proc] = {}
        self._ctx = mp.get_context("spawn")

    def __repr__(self) -> str:
        return f"WorkerPool(workers={self.workers}, pids={self.pids})"

    @property
    def pids(self) -> dict[int, int | None]:
        """The pid of each live worker, by worker number."""
        return {w: p.pid for w, p in self._procs.items() if not p.dead}

    async def start(self) -> None:
        """Start every worker process (each imports the package: about a second).

        Raises:
            WorkerError: a worker did not report ready within ``start_timeout_s``.
        """
        async with anyio.create_task_group() as tg:
            for w in range(self.workers):
                tg.start_soon(self._ensure, w)

    def _spawn(self, worker: int) -> _Proc:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=worker_main,
            args=(child, os.getpid()),
            name=f"deepseekbench-worker-{worker}",
            daemon=True,
        )
        with _without_secrets_in_environ(self._secrets()):
            process.start()
        child.close()
        setup = WorkerSetup(worker, self.routes, self.rules, self.timeouts)
        parent.send(setup)
        return _Proc(worker, process, parent)

    async def _ensure(self, worker: int) -> _Proc:
        proc = self._procs.get(worker)
        if proc is not None and not proc.dead and proc.process.is_alive():
            return proc
        # started on the event loop's thread, not a pool thread: PR_SET_PDEATHSIG
        # fires when the *thread* that started the worker ends (fork + exec: ms)
        proc = self._spawn(worker)
        self._procs[worker] = proc
        ready = await anyio.to_thread.run_sync(proc.conn.poll, self.start_timeout_s)
        if not ready:
            self._kill(proc)
            raise WorkerError(f"client worker {worker} did not start", worker=worker)
        try:
            msg = proc.conn.recv()
        except (EOFError, OSError) as exc:
            self._kill(proc)
            msg = f"client worker {worker} exited while starting"
            raise WorkerError(msg, worker=worker) from exc
        proc.pid = msg[1]
        return proc

    def _secrets(self) -> tuple[str, ...]:
        keys = (self.rules.api_key, *(r.api_key for r in self.routes.values()))
        return secret_values(*keys)

    def _kill(self, proc: _Proc) -> None:
        proc.dead = True
        if proc.process.is_alive():
            proc.process.kill()
        proc.process.join(5.0)
        proc.conn.close()

    async def run(
        self, work: LoadWork, on_result: ResultFn, workers: int | None = None
    ) -> PoolReport:
        """Send ``work``'s warm-ups, then its items from a shared start.

        Args:
            work: the load point (:class:`~deepseekbench._execute._workshare.LoadWork`).
            on_result: called with every finished request (warm-ups: ``item`` None).
            workers: split it over this many of the pool's workers (bounded to
                1..pool size, :meth:`taking_part`); ``None``: all of them.

        Returns:
            :class:`PoolReport`: workers, window edges (CLOCK_MONOTONIC ns) and deaths.

        Raises:
            LiveGateError: a worker's gate or the run's budget refused a request
                (after every other worker finished its share).
            WorkerError: a worker raised, or a replacement did not start.
        """
        shares = split_work(work, self.taking_part(workers))
        deaths: list[WorkerDeath] = []
        if any(s.warmup for s in shares):
            warm = await self._phase("warm", shares, 0, on_result, items=False)
            deaths += warm.deaths
            warm.raise_failure()
        start_ns = time.monotonic_ns() + round(self.start_lead_s * 1e9)
        phase = await self._phase("run", shares, start_ns, on_result, items=True)
        phase.raise_failure()
        deaths += phase.deaths
        return PoolReport(len(shares), start_ns, max(start_ns, phase.end_ns), tuple(deaths))

    async def _phase(
        self,
        kind: str,
        shares: Sequence[WorkerShare],
        start_ns: int,
        on_result: ResultFn,
        *,
        items: bool,
    ) -> PhaseBook:
        procs = [await self._ensure(s.worker) for s in shares]
        pending = {s.worker: {it.key: it for it in s.items} for s in shares} if items else {}
        phase = PhaseBook(on_result, self.ledger, self.routes, {p.worker for p in procs}, pending)
        if kind == "run":
            phase.end_ns = start_ns
        for share, proc in zip(shares, procs, strict=True):
            try:
                proc.conn.send((kind, share, start_ns))
            except OSError:  # it died since _ensure: its share is unfinished
                self._handle(phase, proc, ("died",))
        while phase.waiting:
            live = [p for p in procs if p.worker in phase.waiting]
            for proc, msg in await anyio.to_thread.run_sync(_poll, live, 0.5):
                self._handle(phase, proc, msg)
        return phase

    def _handle(self, phase: PhaseBook, proc: _Proc, msg: Any) -> None:
        kind = msg[0]
        if kind == "sent":
            phase.finished(proc.worker, msg[1])
        elif kind == "ask":
            proc.conn.send(self.ledger.ask(msg[1], msg[2]))
        elif kind == "done":
            phase.waiting.discard(proc.worker)
        elif kind == "refused":
            phase.waiting.discard(proc.worker)
            phase.refusal = LiveGateError(msg[1], host=msg[2], missing=tuple(msg[3]))
        elif kind == "failed":
            phase.waiting.discard(proc.worker)
            phase.failure = WorkerError(
                f"client worker {proc.worker} failed: {msg[1]}", worker=proc.worker
            )
        elif kind == "died" and not proc.dead:
            proc.dead = True
            phase.died(proc.worker, proc.pid, proc.process.exitcode)

    async def aclose(self) -> None:
        """Stop every worker (asked first, killed after 5 s); idempotent."""
        procs = [p for p in self._procs.values() if not p.dead]
        self._procs.clear()
        with anyio.CancelScope(shield=True):
            for p in procs:
                with contextlib.suppress(OSError):
                    p.conn.send(("stop", None, 0))
            for p in procs:
                await anyio.to_thread.run_sync(p.process.join, 5.0)
                self._kill(p)
