"""``RayPool``: one load point sent from Ray actors, spread over a cluster's nodes.

Optional: needs the ``ray`` extra (``pip install 'deepseekbench[ray]'``). The
same work split (:func:`~deepseekbench._execute._workshare.split_work`), the same worker
core (:mod:`deepseekbench._execute._worker`: own event loop, own gate with the parent
gate's rules, own client) and the same bookkeeping as the process pool
(:class:`~deepseekbench._execute._workers.PhaseBook`); only the transport differs.

* **Cluster.** ``address=None`` (or ``"local"``) starts a new local Ray instance
  bound to 127.0.0.1, dashboard off, usage statistics off, without proxy variables or
  ``RAY_ADDRESS`` in its processes' environment, and with a ``HOME`` of its own
  whose ``ray_bootstrap_config.yaml`` names the local provider (else Ray's usage
  module asks the cloud metadata address 169.254.169.254, whatever
  ``RAY_USAGE_STATS_ENABLED`` says). An address of an existing
  cluster (``"host:port"``, ``"ray://host:port"``, or ``"auto"``, first resolved
  as Ray would: ``RAY_ADDRESS``, else the leftover ``ray_current_cluster`` file)
  must be of the strict grammar of :mod:`deepseekbench._plan._ray_address` (an IP
  literal or ``localhost`` as host: the gate and Ray read the same host) and is
  then checked like any URL: a non-loopback host needs the gate's key and
  ``spend``; Ray is then given the resolved address. For a local instance and a
  cluster on loopback, the node IP is pinned to 127.0.0.1 (``_node_ip_address`` and
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``), else Ray works it out by connecting a UDP
  socket to a public DNS resolver (docs/workers.md). Actors are placed
  with the ``SPREAD`` strategy (one per node while nodes last).
* **Clocks.** Actors may run on other hosts, whose monotonic clocks share no
  origin with the driver's. The shared start is a *wall-clock* instant
  (``time.time_ns()``); each actor turns it into its own monotonic time, and
  turns its send/finish stamps and each measurement's ``start_perf_ns`` back
  into wall-clock time; the driver maps them onto its own CLOCK_MONOTONIC.
  This **assumes the hosts' wall clocks are synchronised** (NTP/PTP): an offset
  between two hosts shifts the window edges and the shared start by that much.
  Each actor's offset is estimated at start (its wall clock minus the midpoint
  of the driver's before/after a round trip; ± half the round trip) and kept
  in :attr:`RayPool.clock_offsets_ns` and every :class:`PoolReport`.
* **Budgets.** With a budget on the parent's gate, a ledger actor holds what is
  left of it; actors ask it before each request, the driver charges it every
  finished request's tokens, and after each load point the requests it admitted
  are counted on the parent's gate, so budgets hold for the run as a whole.
* **Secrets.** The key travels as a ``SecretStr`` inside the actors' setup (a
  pickled argument: never a task name, an actor name, argv or the environment);
  the dashboard is off for a local instance.
* **Faults.** An actor that dies (``ActorDiedError``) is reported as a
  :class:`~deepseekbench._execute._workers.WorkerDeath`; its unfinished requests become
  ``worker_died`` measurements; it is replaced at the next load point.

Runs under asyncio only (Ray's object references are asyncio awaitables).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import shutil
import site
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import anyio
import httpx

from deepseekbench._errors import LiveGateError, RayAddressError, RayUnavailableError
from deepseekbench._execute._worker import Finished, WorkerCore, WorkerSetup
from deepseekbench._execute._workers import (
    BudgetLedger,
    ClientPool,
    PhaseBook,
    PoolReport,
    ResultFn,
    WorkerError,
    charged_tokens,
    exception_leaves,
    key_variables,
)
from deepseekbench._execute._workshare import LoadWork, WorkerShare, split_work
from deepseekbench._measure._measure import Timeouts
from deepseekbench._net._gate import LiveGate, is_loopback_host
from deepseekbench._net._route import EngineRoute
from deepseekbench._plan._ray_address import RAY_ADDRESS_SETTINGS, parse_ray_address
from deepseekbench._types._secrets import secret_values

__all__ = [
    "RayPool",
    "RayUnavailableError",
    "ray_address_host",
    "ray_address_refusal",
    "resolve_ray_address",
]


# Ray's own switch: off, Ray takes the loopback address as this node's IP wherever it
# works one out (``services.get_node_ip_address``: for a local instance's node, for
# ``resolve_ip_for_localhost`` of a loopback cluster address or ``_node_ip_address``)
# instead of ``node_ip_address_from_perspective``, which connects a UDP socket to a
# public DNS resolver (8.8.8.8:53) to read the outgoing interface's address. Read when
# ray is first imported (``ray_constants.ENABLE_RAY_CLUSTER``), and inherited by the
# processes ray.init starts.
_LOOPBACK_NODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_LOOPBACK_NODE_IP = "127.0.0.1"


def _ray(loopback: bool = False) -> Any:
    """Import ray; for a node on loopback (a local instance, or joining a cluster at a
    loopback address), first ask Ray to take the loopback address as the node's IP.

    Raises:
        RayUnavailableError: ray is not installed.
    """
    if loopback and "ray" not in sys.modules:
        os.environ.setdefault(_LOOPBACK_NODE_ENV, "0")
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailableError(
            "executor 'ray' needs the ray package: pip install 'deepseekbench[ray]'"
        ) from exc
    return ray


def ray_address_host(address: str) -> str:
    """The host of a concrete Ray cluster address (``"local"`` is this host), as Ray
    reads it (IPv6 without brackets).

    Accepts ``host:port``, ``ray://host:port`` and ``[v6]:port`` with an IP literal
    or ``localhost`` as host (:func:`~deepseekbench._plan._ray_address.parse_ray_address`).
    ``"auto"`` is not concrete: resolve it first with :func:`resolve_ray_address`
    (``auto`` means whatever ``RAY_ADDRESS`` or a leftover cluster file points at).

    Raises:
        RayAddressError: any other address.
    """
    if address == "local":
        return "127.0.0.1"
    return parse_ray_address(address).host


RAY_ADDRESS_ENV = "RAY_ADDRESS"
"""The variable Ray reads a cluster address from (``ray.init(address=None|"auto")``)."""


def ray_cluster_file(environ: Mapping[str, str] | None = None) -> str:
    """The file ``ray start`` leaves with the latest cluster's address:
    ``$RAY_TMPDIR/ray/ray_current_cluster`` (else ``$TMPDIR/…``, else ``/tmp/…``),
    as Ray's ``get_ray_address_file`` (``ray/_common/utils.py``)."""
    env = os.environ if environ is None else environ
    tmp = env.get("RAY_TMPDIR") or (env.get("TMPDIR") if sys.platform == "linux" else None)
    return os.path.join(tmp or "/tmp", "ray", "ray_current_cluster")


def resolve_ray_address(
    address: str | None, environ: Mapping[str, str] | None = None
) -> str | None:
    """Where Ray would connect for ``address``, resolved the way ``ray.init`` does,
    before anything is imported or connected (so the gate judges the real host).

    * ``None`` or ``"local"``: ``None``, a local instance this pool starts (bound
      to 127.0.0.1; ``RAY_ADDRESS`` and cluster files are ignored).
    * ``"auto"``: ``RAY_ADDRESS`` when set, else the address in the leftover
      cluster file (:func:`ray_cluster_file`), as Ray's
      ``get_ray_address_from_environment``.
    * anything else: itself (an explicit address; Ray does not override it).

    Every concrete address, given or resolved, must be of the grammar the gate
    judges (:func:`~deepseekbench._plan._ray_address.parse_ray_address`):
    ``RAY_ADDRESS`` is taken as Ray takes it (not stripped), the cluster file's
    content stripped (as Ray's ``read_ray_address``).

    Raises:
        RayUnavailableError: ``"auto"`` with neither ``RAY_ADDRESS`` nor a
            cluster file (Ray would scan for any running cluster: give an
            explicit address instead).
        RayAddressError: the address, or what ``"auto"`` resolves to, is outside
            that grammar (the message names where it came from).
    """
    if address is None or address == "local":
        return None
    if address != "auto":
        parse_ray_address(address)
        return address
    env = os.environ if environ is None else environ
    found, source = env.get(RAY_ADDRESS_ENV) or "", RAY_ADDRESS_ENV
    if not found:
        source = ray_cluster_file(env)
        try:
            with open(source, encoding="utf-8") as f:
                found = f.read(4096).strip()
        except (OSError, UnicodeDecodeError):
            found = ""
    if not found or found in RAY_ADDRESS_SETTINGS:
        raise RayUnavailableError(
            "ray_address 'auto' found no cluster address (RAY_ADDRESS is unset and there "
            f"is no {ray_cluster_file(env)}): give the cluster's host:port, or leave "
            "ray_address unset for a local instance"
        )
    try:
        parse_ray_address(found)
    except RayAddressError as exc:
        raise RayAddressError(f"ray_address 'auto' resolved from {source}: {exc}") from None
    return found


def ray_address_refusal(
    address: str | None, gate: LiveGate, environ: Mapping[str, str] | None = None
) -> tuple[str | None, LiveGateError | None]:
    """``(resolved address, the gate's refusal or None)`` for a Ray cluster address.

    The address is resolved first (:func:`resolve_ray_address`), so ``"auto"``
    pointing off this host is judged like any non-loopback host (it needs the
    gate's key and ``spend``); consumes nothing and opens nothing (a dry run
    shows both).

    Raises:
        RayUnavailableError, RayAddressError: as :func:`resolve_ray_address`.
    """
    resolved = resolve_ray_address(address, environ)
    if resolved is None:
        return None, None
    host = ray_address_host(resolved)
    if is_loopback_host(host):
        return resolved, None
    err = gate.refusal(f"http://{host}/")
    if err is None:
        return resolved, None
    return resolved, LiveGateError(
        f"{err} (the Ray cluster address {resolved!r}"
        + (f", resolved from {address!r}" if address != resolved else "")
        + ")",
        host=err.host,
        missing=err.missing,
    )


# Variables a local Ray instance must not inherit: a proxy would carry its internal
# traffic off the host, and a cluster address would send ray.init elsewhere.
_RAY_SCRUBBED_ENV = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "FTP_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "ftp_proxy",
    "GRPC_PROXY",
    "grpc_proxy",
    RAY_ADDRESS_ENV,
)
# Set for a local instance: no usage reports, gRPC never through a proxy.
_RAY_LOCAL_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "NO_PROXY": "*", "no_proxy": "*"}

# Ray's dashboard head runs even with include_dashboard=False (its usage-statistics
# module, UsageStatsHead) and, before it reads RAY_USAGE_STATS_ENABLED, names the cloud
# provider for its report: from ~/ray_bootstrap_config.yaml (the autoscaler's config),
# else by asking the cloud metadata services (169.254.169.254 twice, and
# metadata.google.internal: a DNS query) — ray/_common/usage/usage_lib.py,
# get_cluster_config_to_report. No variable turns that off, so a local instance's
# processes get a HOME of their own holding that file, naming Ray's local provider.
RAY_BOOTSTRAP_CONFIG = "ray_bootstrap_config.yaml"
"""The file (in ``$HOME``) Ray's usage module reads instead of asking the metadata services."""
_LOCAL_BOOTSTRAP_CONFIG = "# deepseekbench: a local Ray instance\nprovider:\n  type: local\n"
_RAY_TOKEN = os.path.join(".ray", "auth_token")  # Ray's token file, relative to HOME


@functools.cache
def _home_folder() -> tempfile.TemporaryDirectory[str]:
    # one per process (removed at exit): Ray's driver caches its auth token, which a
    # later instance's GCS must find in the same HOME
    return tempfile.TemporaryDirectory(prefix="deepseekbench-ray-home-")


def local_ray_home() -> str:
    """The ``HOME`` of every local Ray instance this process starts (a private temporary
    folder, one per process, removed at exit), holding :data:`RAY_BOOTSTRAP_CONFIG`
    (provider ``local``) and a copy of the user's Ray token (``~/.ray/auth_token``)
    when there is one, so Ray's token authentication finds the same token.
    Call it under the user's own ``HOME``.

    Raises:
        OSError: a file cannot be written.
    """
    root = _home_folder().name
    with open(os.path.join(root, RAY_BOOTSTRAP_CONFIG), "w", encoding="utf-8") as f:
        f.write(_LOCAL_BOOTSTRAP_CONFIG)
    token, copy = os.path.join(os.path.expanduser("~"), _RAY_TOKEN), os.path.join(root, _RAY_TOKEN)
    if os.path.isfile(token) and not os.path.exists(copy):
        os.makedirs(os.path.dirname(copy), mode=0o700, exist_ok=True)
        shutil.copyfile(token, copy)
        os.chmod(copy, 0o600)
    return root


@contextlib.contextmanager
def _local_ray_env(secrets: tuple[str, ...] = (), home: str | None = None) -> Iterator[None]:
    """``os.environ`` fit for starting a local Ray instance (its processes inherit it):
    proxies, ``RAY_ADDRESS``, ``DEEPSEEKBENCH_API_KEY`` and any variable holding a
    key removed, usage statistics off, and with ``home`` (see :func:`local_ray_home`)
    ``HOME`` set to it (``PYTHONUSERBASE`` kept at this process's user base, so user
    site-packages still load); restored afterwards, except
    ``RAY_USAGE_STATS_ENABLED=0`` which stays (the driver reads it later)."""
    scrub = (*_RAY_SCRUBBED_ENV, *key_variables(secrets))
    local = dict(_RAY_LOCAL_ENV)
    if home is not None:
        local |= {"HOME": home, "PYTHONUSERBASE": site.getuserbase()}
    saved = {k: os.environ.get(k) for k in (*scrub, *local)}
    for k in scrub:
        os.environ.pop(k, None)
    os.environ.update(local)
    try:
        yield
    finally:
        for k, v in saved.items():
            if k == "RAY_USAGE_STATS_ENABLED":
                continue
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _wall_delta_ns() -> int:
    """This host's wall clock minus its monotonic clock, now (ns)."""
    return time.time_ns() - time.monotonic_ns()


# ------------------------------------------------------------ actor side --


class _Ledger:
    """The run's remaining budgets, as a Ray actor (one per pool)."""

    def __init__(self, spend: bool, max_requests: int | None, max_tokens: int | None) -> None:
        self.gate = LiveGate(spend=spend, max_requests=max_requests, max_output_tokens=max_tokens)
        self.book = BudgetLedger(self.gate)

    def ask(self, url: str) -> tuple[str, str, tuple[str, ...]] | None:
        return self.book.ask(url, True)  # the key is the worker gate's business

    def charge(self, tokens: int) -> None:
        self.gate.charge_output_tokens(tokens)

    def admitted(self) -> int:
        return self.gate.requests_admitted


def _to_wall(f: Finished, delta_ns: int) -> Finished:
    m = f.measurement
    if m.start_perf_ns is not None:  # perf_counter is CLOCK_MONOTONIC on Linux
        m = m.model_copy(update={"start_perf_ns": m.start_perf_ns + delta_ns})
    return dataclasses.replace(
        f, measurement=m, sent_ns=f.sent_ns + delta_ns, end_ns=f.end_ns + delta_ns
    )


class _Actor:
    """A client worker as a Ray actor (async: its own asyncio loop)."""

    def __init__(self, setup: WorkerSetup, ledger: Any) -> None:
        self.setup = setup
        self.ledger = ledger
        self.queue: asyncio.Queue[Finished | None] = asyncio.Queue()
        self.core = WorkerCore(setup, self.queue.put_nowait, self._ask if ledger else None)

    async def _ask(self, route: EngineRoute) -> None:
        reply = await self.ledger.ask.remote(route.chat_url)
        if reply is not None:
            raise LiveGateError(reply[0], host=reply[1], missing=tuple(reply[2]))

    async def clock(self) -> tuple[int, int]:
        """(wall clock ns, pid) of this actor."""
        return time.time_ns(), os.getpid()

    async def _stream(self, job: Any) -> AsyncIterator[Finished | tuple[Any, ...]]:
        """Each finished request as it comes, then, if the job failed, one
        ``("refused", message, host, missing)`` or ``("failed", text)`` (our
        exceptions carry keyword fields Ray cannot rebuild, so none is raised)."""
        delta = _wall_delta_ns()
        task = asyncio.ensure_future(job)
        task.add_done_callback(lambda _: self.queue.put_nowait(None))
        while (f := await self.queue.get()) is not None:
            yield _to_wall(f, delta)
        try:
            task.result()
        except Exception as exc:
            leaves = exception_leaves(exc)
            refusal = next((e for e in leaves if isinstance(e, LiveGateError)), None)
            if refusal is not None:
                yield ("refused", str(refusal), refusal.host, refusal.missing)
            else:
                yield ("failed", "; ".join(f"{type(e).__name__}: {e}" for e in leaves))

    async def warm(self, share: WorkerShare) -> AsyncIterator[Finished | tuple[Any, ...]]:
        async for f in self._stream(self.core.warm(share)):
            yield f

    async def run(
        self, share: WorkerShare, start_wall_ns: int
    ) -> AsyncIterator[Finished | tuple[Any, ...]]:
        local_start = start_wall_ns - _wall_delta_ns()
        async for f in self._stream(self.core.run(share, local_start)):
            yield f


# ----------------------------------------------------------- driver side --


class RayPool(ClientPool):
    """N client workers as Ray actors; the same interface as
    :class:`~deepseekbench._execute._workers.WorkerPool`.

    Args:
        workers: actors (>= 1).
        routes: the engine route of every route label used by the work.
        gate: the parent's :class:`~deepseekbench.LiveGate` (rules and budgets).
        timeouts: per-request deadlines.
        address: an existing cluster's address (``"auto"`` is resolved as Ray
            would, see :func:`resolve_ray_address`), or ``None``/``"local"`` for a
            new local instance on 127.0.0.1 (see the module docstring).
        start_lead_s: how far after handing out the shares the shared start is (s).
        actor_cpus: CPUs each actor reserves on its node (Ray's ``num_cpus``).

    Raises:
        ValueError: ``workers`` below 1, ``start_lead_s`` or ``actor_cpus`` negative.
    """

    def __init__(
        self,
        workers: int,
        *,
        routes: Mapping[str, EngineRoute],
        gate: LiveGate,
        timeouts: Timeouts | None = None,
        address: str | None = None,
        start_lead_s: float = 0.5,
        actor_cpus: float = 1.0,
    ) -> None:
        super().__init__(
            workers, routes=routes, gate=gate, timeouts=timeouts, start_lead_s=start_lead_s
        )
        if start_lead_s < 0 or actor_cpus < 0:
            raise ValueError("start_lead_s and actor_cpus must be >= 0")
        self.actor_cpus = actor_cpus
        self.gate = gate
        self.address = address
        self.clock_offsets_ns: dict[int, int] = {}
        self.pids: dict[int, int] = {}
        self._actors: dict[int, Any] = {}
        self._ray_ledger: Any | None = None
        self._ledger_seen = 0
        self._own_ray = False
        self.resolved_address: str | None = None

    def __repr__(self) -> str:
        return f"RayPool(workers={self.workers}, address={self.address!r}, pids={self.pids})"

    def _init_ray(self, ray: Any, resolved: str | None) -> None:
        if ray.is_initialized():
            return
        loopback = resolved is None or is_loopback_host(ray_address_host(resolved))
        if loopback:
            _check_loopback_switch(ray)
        if resolved is None:
            keys = (self.rules.api_key, *(r.api_key for r in self.routes.values()))
            home = local_ray_home()
            with _local_ray_env(secret_values(*keys), home):
                ray.init(
                    # "local": a new instance; None or "auto" would follow RAY_ADDRESS
                    # or a leftover cluster file
                    address="local",
                    num_cpus=max(self.workers, os.cpu_count() or 1),
                    include_dashboard=False,
                    _node_ip_address=_LOOPBACK_NODE_IP,
                    log_to_driver=False,
                    configure_logging=False,
                )
            self._own_ray = True
            _check_loopback(ray)
        else:
            # the resolved address: ray.init never re-reads RAY_ADDRESS for it; a
            # cluster on loopback is joined as a node on loopback (the driver finds
            # the cluster's raylet by this IP, and works out no other)
            node_ip = {"_node_ip_address": _LOOPBACK_NODE_IP} if loopback else {}
            ray.init(address=resolved, log_to_driver=False, configure_logging=False, **node_ip)
            self._own_ray = True

    async def start(self) -> None:
        """Connect to (or start) Ray, create the actors and estimate their clock offsets.

        Raises:
            RayUnavailableError: ``ray`` is not installed, or ``"auto"`` found
                no cluster address (:func:`resolve_ray_address`).
            RayAddressError: the address (or what ``"auto"`` resolves to) is
                outside the grammar the gate judges; raised before ray is imported.
            LiveGateError: a non-loopback cluster address (``"auto"`` resolved
                first) without the gate's key and ``spend``.
        """
        # resolved and checked before ray is even imported ("auto" follows
        # RAY_ADDRESS or a cluster file: the gate judges where that points)
        resolved, refusal = ray_address_refusal(self.address, self.gate)
        if refusal is not None:
            raise refusal
        self.resolved_address = resolved
        ray = _ray(loopback=resolved is None or is_loopback_host(ray_address_host(resolved)))
        try:
            await anyio.to_thread.run_sync(self._init_ray, ray, resolved)
        except LiveGateError:
            await self.aclose()
            raise
        if self.rules.budgeted and self._ray_ledger is None:
            left_r = _left(self.gate.max_requests, self.gate.requests_admitted)
            left_t = _left(self.gate.max_output_tokens, self.gate.output_tokens_charged)
            self._ray_ledger = ray.remote(num_cpus=0)(_Ledger).remote(
                self.rules.spend, left_r, left_t
            )
        for w in range(self.workers):
            await self._ensure(ray, w)

    async def _ensure(self, ray: Any, worker: int) -> Any:
        actor = self._actors.get(worker)
        if actor is not None:
            return actor
        setup = WorkerSetup(worker, self.routes, self.rules, self.timeouts)
        cls = ray.remote(num_cpus=self.actor_cpus, scheduling_strategy="SPREAD")(_Actor)
        actor = cls.remote(setup, self._ray_ledger)
        _, self.pids[worker] = await actor.clock.remote()  # the actor is up
        self.clock_offsets_ns[worker] = await _clock_offset(actor)
        self._actors[worker] = actor
        return actor

    async def run(
        self, work: LoadWork, on_result: ResultFn, workers: int | None = None
    ) -> PoolReport:
        """Send ``work``'s warm-ups, then its items from a shared wall-clock start,
        split over ``workers`` of the actors (bounded to 1..pool size; ``None``: all).

        Returns:
            :class:`~deepseekbench._execute._workers.PoolReport` (window edges on the
            driver's CLOCK_MONOTONIC, deaths, clock offsets in ns).

        Raises:
            LiveGateError: a worker's gate or the run's budget refused a request.
            WorkerError: an actor raised.
            RayUnavailableError: ``ray`` is not installed.
        """
        ray = _ray()
        shares = split_work(work, self.taking_part(workers))
        deaths = []
        if any(s.warmup for s in shares):
            warm = await self._phase(ray, shares, None, on_result)
            deaths += warm.deaths
            warm.raise_failure()
        start_wall = time.time_ns() + round(self.start_lead_s * 1e9)
        book = await self._phase(ray, shares, start_wall, on_result)
        await self._count_ledger()
        book.raise_failure()
        deaths += book.deaths
        start = start_wall - _wall_delta_ns()
        offsets = tuple(self.clock_offsets_ns[s.worker] for s in shares)
        return PoolReport(len(shares), start, max(start, book.end_ns), tuple(deaths), offsets)

    async def _count_ledger(self) -> None:
        """Count on the parent's gate the requests the ledger actor admitted."""
        if self._ray_ledger is None:
            return
        admitted = await self._ray_ledger.admitted.remote()
        for _ in range(admitted - self._ledger_seen):
            self.gate.admit(httpx.Request("POST", "http://127.0.0.1/"))
        self._ledger_seen = admitted

    async def _phase(
        self, ray: Any, shares: tuple[WorkerShare, ...], start_wall: int | None, on: ResultFn
    ) -> PhaseBook:
        items = start_wall is not None
        pending = {s.worker: {it.key: it for it in s.items} for s in shares} if items else {}
        waiting = {s.worker for s in shares}
        book = PhaseBook(on, self.ledger, self.routes, waiting, pending)
        async with anyio.create_task_group() as tg:
            for share in shares:
                actor = await self._ensure(ray, share.worker)
                tg.start_soon(self._consume, ray, actor, share, start_wall, book)
        return book

    async def _consume(
        self, ray: Any, actor: Any, share: WorkerShare, start_wall: int | None, book: PhaseBook
    ) -> None:
        w = share.worker
        delta = _wall_delta_ns()
        if start_wall is None:
            gen = actor.warm.remote(share)
        else:
            gen = actor.run.remote(share, start_wall)
        try:
            async for ref in gen:
                got = await ref
                if isinstance(got, tuple):
                    _failed(book, w, got)
                    continue
                f = _from_wall(got, delta)
                book.finished(w, f)
                if self._ray_ledger is not None:
                    self._ray_ledger.charge.remote(charged_tokens(f.measurement))
        except ray.exceptions.RayActorError:
            self._actors.pop(w, None)
            book.died(w, self.pids.get(w), None)
        book.waiting.discard(w)

    async def aclose(self) -> None:
        """Kill the actors; shut down a Ray instance this pool started."""
        ray = _ray()
        for actor in self._actors.values():
            ray.kill(actor)
        self._actors.clear()
        if self._ray_ledger is not None:
            ray.kill(self._ray_ledger)
            self._ray_ledger = None
        if self._own_ray:
            await anyio.to_thread.run_sync(ray.shutdown)
            self._own_ray = False


async def _clock_offset(actor: Any, pings: int = 5) -> int:
    """The actor's wall clock minus the driver's (ns), from the ping with the
    shortest round trip (Cristian's method: the reply is placed at the midpoint;
    the error is at most half that round trip)."""
    best: tuple[int, int] | None = None
    for _ in range(pings):
        t0 = time.time_ns()
        wall, _pid = await actor.clock.remote()
        t1 = time.time_ns()
        if best is None or t1 - t0 < best[0]:
            best = (t1 - t0, wall - (t0 + t1) // 2)
    assert best is not None
    return best[1]


def _failed(book: PhaseBook, worker: int, what: tuple[Any, ...]) -> None:
    if what[0] == "refused":
        book.refusal = LiveGateError(what[1], host=what[2], missing=tuple(what[3]))
    else:
        book.failure = WorkerError(f"Ray worker {worker} failed: {what[1]}", worker=worker)


def _check_loopback_switch(ray: Any) -> None:
    """Refuse, before anything starts or connects, to bring up a node on loopback when
    Ray would work out this node's IP by asking a public address (``ray`` was imported
    before the pool could set :data:`_LOOPBACK_NODE_ENV`): Ray's
    ``get_node_ip_address`` then connects a UDP socket to 8.8.8.8:53.

    Raises:
        LiveGateError: Ray's ``ENABLE_RAY_CLUSTER`` is on.
    """
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    if getattr(constants, "ENABLE_RAY_CLUSTER", True):
        raise LiveGateError(
            "ray was imported before deepseekbench's Ray executor could pin the node's IP "
            f"to {_LOOPBACK_NODE_IP}: Ray would work it out by connecting to a public DNS "
            f"resolver; import the executor before ray, or set {_LOOPBACK_NODE_ENV}=0",
            host="8.8.8.8",
            missing=("a node IP pinned to loopback",),
        )


def _check_loopback(ray: Any) -> None:
    """Refuse a local instance whose node is not on a loopback address.

    Raises:
        LiveGateError: a node's address is not loopback (ray was imported
            before the pool could ask for loopback nodes).
    """
    for node in ray.nodes():
        host = str(node.get("NodeManagerAddress", ""))
        if not is_loopback_host(host):
            raise LiveGateError(
                f"the local Ray instance took address {host!r}, not loopback: import "
                f"deepseekbench's Ray executor before ray, or set {_LOOPBACK_NODE_ENV}=0",
                host=host,
                missing=("a loopback-only local Ray instance",),
            )


def _left(budget: int | None, used: int) -> int | None:
    return None if budget is None else max(0, budget - used)


def _from_wall(f: Finished, delta_ns: int) -> Finished:
    """An actor's wall-clock stamps onto the driver's CLOCK_MONOTONIC."""
    return _to_wall(f, -delta_ns)
