"""Starting the reference engine: in-process (``EmbeddedEngine``) or as a server.

``async with EmbeddedEngine(config) as engine:`` binds ``127.0.0.1`` on a free
port (``port=0``), trains the model (once per process), starts the step loop
and serves until the block ends. For notebooks, ``await engine.start()`` and
``await engine.aclose()`` do the same in separate cells (the engine then runs
on its own event loop in a background thread, outside any caller's task).
``serve`` does the same until cancelled, for ``python -m deepseekbench serve``.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from contextlib import AbstractContextManager, AsyncExitStack

import anyio
from anyio.abc import SocketAttribute, TaskGroup, TaskStatus
from anyio.from_thread import BlockingPortal, start_blocking_portal

from deepseekbench._engine._config import SERVED_DIALECTS, EngineConfig
from deepseekbench._engine._costs import CostModel
from deepseekbench._engine._faults import FaultConfig, FaultKind
from deepseekbench._engine._http import serve_connection
from deepseekbench._engine._metrics import EngineCounters
from deepseekbench._engine._model import reference_lm
from deepseekbench._engine._server import ChunkSend, EngineState
from deepseekbench._engine._speculative import DEFAULT_DEPTH
from deepseekbench._types._axes import Dialect, Speculative


class EmbeddedEngine:
    """The loopback reference engine as an async context manager.

    ``host`` defaults to ``127.0.0.1``; ``port=0`` picks a free port. Inside the
    block: ``base_url`` (``http://HOST:PORT/v1``), ``counters`` (engine totals),
    ``send_times`` (per completion id, when ``record_send_times``). Works under
    asyncio and trio. Raises ``OSError`` when the address cannot be bound and
    ``RuntimeError`` when used outside its block.

    Without a block (notebook cells): ``await engine.start()`` starts it on its
    own event loop in a background thread, so it belongs to no caller's task
    or cancel scope, and ``await engine.aclose()`` (from any later cell, task
    or event loop) stops it.
    """

    def __init__(
        self, config: EngineConfig | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.config = config if config is not None else EngineConfig()
        self._host = host
        self._port = port
        self._state: EngineState | None = None
        self._bound_port: int | None = None
        self._stack: AsyncExitStack | None = None
        self._portal: BlockingPortal | None = None
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._held: tuple[Future[None], anyio.Event] | None = None

    async def start(self) -> EmbeddedEngine:
        """Start serving in a background thread with its own event loop; returns ``self``.

        Unlike ``async with``, the engine is tied to no task, cancel scope or
        event loop of the caller: :meth:`aclose` may be awaited from another
        notebook cell, task or ``anyio.run``.

        Raises:
            RuntimeError: the engine is already running.
            OSError: the address cannot be bound.
        """
        if self._stack is not None or self._portal is not None:
            raise RuntimeError("the engine is already running")
        await anyio.to_thread.run_sync(self._start_in_thread)
        return self

    async def aclose(self) -> None:
        """Stop an engine started with :meth:`start` (a no-op when it is not running).

        Raises:
            RuntimeError: the engine runs inside an ``async with`` block (leave the
                block instead).
        """
        if self._portal is None:
            if self._stack is not None:
                raise RuntimeError("the engine runs inside `async with`; leave the block")
            return
        await anyio.to_thread.run_sync(self._stop_in_thread)

    def _start_in_thread(self) -> None:
        cm = start_blocking_portal()
        portal = cm.__enter__()
        try:
            # one task holds the engine from start to stop (a task group must be
            # left by the task that entered it)
            future, stop = portal.start_task(self._serve_until_stopped)
        except BaseException:
            cm.__exit__(None, None, None)
            raise
        self._portal, self._portal_cm = portal, cm
        self._held = (future, stop)

    def _stop_in_thread(self) -> None:
        portal, cm, held = self._portal, self._portal_cm, self._held
        self._portal = self._portal_cm = self._held = None
        assert portal is not None and cm is not None and held is not None
        future, stop = held
        try:
            portal.call(stop.set)
            future.result()
        finally:
            cm.__exit__(None, None, None)

    async def _serve_until_stopped(
        self, *, task_status: TaskStatus[anyio.Event] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        stop = anyio.Event()
        async with self:
            task_status.started(stop)
            await stop.wait()

    async def __aenter__(self) -> EmbeddedEngine:
        lm = await anyio.to_thread.run_sync(reference_lm)
        self._state = EngineState(self.config, lm)
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            listener = await anyio.create_tcp_listener(local_host=self._host, local_port=self._port)
            await stack.enter_async_context(listener)
            self._bound_port = int(listener.extra(SocketAttribute.local_port))
            tg: TaskGroup = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            tg.start_soon(self._state.scheduler.run)
            tg.start_soon(listener.serve, lambda s: serve_connection(s, self._handle), tg)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info: object) -> None:  # the exception propagates
        stack, self._stack = self._stack, None
        if stack is not None:
            # The body's own exception is not handed to the task group: it would come
            # back wrapped in an ExceptionGroup, and `except ValueError` around the
            # block would miss it. The server tasks are cancelled (the stack's first
            # callback), the group exits cleanly, and the body's exception propagates
            # unchanged; only a crash of the engine's own tasks surfaces as a group.
            await stack.__aexit__(None, None, None)

    async def _handle(self, request: object, responder: object) -> None:
        assert self._state is not None
        await self._state.handle(request, responder)  # type: ignore[arg-type]

    def _require(self) -> EngineState:
        if self._state is None or self._bound_port is None:
            raise RuntimeError("the engine is not running; use `async with EmbeddedEngine(...)`")
        return self._state

    @property
    def port(self) -> int:
        """The bound TCP port.

        Raises:
            RuntimeError: the engine is not running (outside ``async with``).
        """
        self._require()
        assert self._bound_port is not None
        return self._bound_port

    @property
    def base_url(self) -> str:
        """OpenAI-style base URL, ``http://HOST:PORT/v1``."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}/v1"

    @property
    def counters(self) -> EngineCounters:
        """Engine-wide totals since start-up (a snapshot).

        Raises:
            RuntimeError: the engine is not running (outside ``async with``).
        """
        return self._require().metrics.snapshot()

    @property
    def send_times(self) -> Mapping[str, list[ChunkSend]]:
        """Server-side send time of every write, per completion id (empty unless recorded).

        Raises:
            RuntimeError: the engine is not running (outside ``async with``).
        """
        return self._require().send_times

    def metrics_text(self) -> str:
        """The ``/metrics`` exposition (Prometheus text format), read in-process.

        Raises:
            RuntimeError: the engine is not running (outside ``async with``).
        """
        return self._require().metrics.exposition().decode()


def _banner(config: EngineConfig, base_url: str) -> str:
    """The one-line start-up banner; names every fault switched on."""
    line = (
        f"deepseekbench reference engine at {base_url} "
        f"(speculative={config.speculative.value}, k={config.effective_draft_depth}, "
        f"dialect={config.dialect.value})"
    )
    if config.mistuned_draft:
        line += " MISTUNED DRAFT (lossy verify: outputs are not exact)"
    if config.numerics:
        line += " NUMERICS (verify flips near-ties)"
    lossy = [
        name
        for name, on in (
            (f"relaxed acceptance (top-{config.relaxed_topk}, {config.relaxed_delta} nats)",
             config.relaxed_acceptance),
            ("argmax acceptance at T > 0", config.argmax_acceptance),
            ("draft ignores temperature", config.draft_ignores_temperature),
        )
        if on
    ]  # fmt: skip
    if lossy:
        line += f" LOSSY SAMPLER: {', '.join(lossy)}"
    if config.cost.verify_delay_ms > 0:
        line += f" VERIFY DELAY {config.cost.verify_delay_ms:g} ms per verify step"
    faults = sorted(k.value for k in config.faults.enabled())
    if faults:
        line += f" FAULTS: {', '.join(faults)}"
    return line


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` or a loopback address (``127.0.0.0/8``, ``::1``);
    any other name is not resolved and counts as non-loopback."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def serve(
    config: EngineConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    on_ready: Callable[[str], None] | None = None,
    allow_non_loopback: bool = False,
) -> None:
    """Serve ``config`` on ``host:port`` until cancelled.

    ``on_ready(base_url)`` is called once listening (default: one line on stderr).
    The engine has no authentication and serves ``/v1/timelines`` and its fault
    hooks to anyone who reaches it, so a ``host`` that is not loopback
    (:func:`is_loopback_host`: ``0.0.0.0``, a LAN address, a host name) is refused
    unless ``allow_non_loopback`` (CLI: ``serve --allow-non-loopback``).

    Raises:
        ValueError: a non-loopback ``host`` without ``allow_non_loopback``.
        OSError: the address cannot be bound.
    """
    if not allow_non_loopback and not is_loopback_host(host):
        raise ValueError(
            f"serve --host {host!r} is not a loopback address: the embedded engine has no "
            "authentication; pass --allow-non-loopback to serve it beyond this machine"
        )
    async with EmbeddedEngine(config, host=host, port=port) as engine:
        if on_ready is None:
            print(_banner(config, engine.base_url), file=sys.stderr, flush=True)
        else:
            on_ready(engine.base_url)
        await anyio.sleep_forever()


_FAULT_FLAGS = {
    FaultKind.keepalive: "keepalive_comments",
    FaultKind.split_writes: "split_writes",
    FaultKind.split_utf8: "split_utf8",
    FaultKind.error_event: "error_mid_stream",
    FaultKind.drop: "drop_connection",
    FaultKind.no_usage: "missing_usage",
    FaultKind.stall: "stall",
}


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``serve`` options (host, port, decoding, dialect, costs, faults) to ``parser``.

    Every option's help states its unit, its allowed values and its default
    (``%(default)s``); defaults come from :class:`EngineConfig`,
    :class:`CostModel` and :class:`FaultConfig`, so the CLI and the library agree.
    """
    config = EngineConfig()
    _add_network_arguments(parser)
    _add_decoding_arguments(parser, config)
    _add_identity_arguments(parser, config)
    _add_cost_arguments(parser, CostModel())
    _add_fault_arguments(parser, FaultConfig())


def _add_network_arguments(parser: argparse.ArgumentParser) -> None:
    """``serve``'s address: host, the non-loopback opt-in, port."""
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="bind address; a non-loopback one needs --allow-non-loopback (default: %(default)s)",
    )
    parser.add_argument(
        "--allow-non-loopback",
        action="store_true",
        help="allow a --host beyond loopback (the engine has no authentication; default: off)",
    )
    parser.add_argument(
        "--port", type=int, default=8000, help="TCP port; 0 = any free port (default: %(default)s)"
    )


def _add_decoding_arguments(parser: argparse.ArgumentParser, config: EngineConfig) -> None:
    """``serve``'s decoding: the speculative method and depth, the dialect, the lossy-verify
    fault, EOS counting, numerics mode."""
    depths = ", ".join(f"{s.value} {k}" for s, k in DEFAULT_DEPTH.items() if k)
    parser.add_argument(
        "--speculative",
        choices=[s.value for s in Speculative],
        default=config.speculative.value,
        help="speculative decoding method the engine simulates (default: %(default)s)",
    )
    parser.add_argument(
        "--draft-depth",
        type=int,
        default=None,
        help="draft tokens per verify step (tokens, 1-16; not with --speculative off). "
        f"Default: the method's ({depths})",
    )
    parser.add_argument(
        "--dialect",
        default=config.dialect.value,
        choices=sorted(d.value for d in SERVED_DIALECTS),
        help="how per-request acceptance is reported in the stream, mimicking that engine "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--mistuned-draft",
        action="store_true",
        help="turn on the lossy-verify fault: plausible draft tokens are accepted even when "
        "not the target's choice, so some outputs differ from --speculative off (default: off)",
    )
    parser.add_argument(
        "--eos-counted",
        action="store_true",
        help="count the end-of-sequence token as an output token, as vLLM does (usage, "
        "max_tokens and min_tokens include it; it is never streamed as text) (default: off)",
    )
    parser.add_argument(  # the margin follow-up
        "--numerics",
        action="store_true",
        help="numerics mode: hashed near-ties (margin <= 0.03 nats) that multi-token verify "
        "flips, as a GPU verify pass that rounds differently would (default: off)",
    )


def _add_identity_arguments(parser: argparse.ArgumentParser, config: EngineConfig) -> None:
    """``serve``'s seed, served model name, context window and send-time recording."""
    parser.add_argument(
        "--seed",
        type=int,
        default=config.seed,
        help="engine seed: fault draws, and sampling of requests that send no 'seed' "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--model-name",
        default=config.model_name,
        help="the model id served at /v1/models; requests must send it as 'model' "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--max-context-tokens",
        type=int,
        default=config.max_context_tokens,
        help="context window: prompt + output limit (tokens, >= 16; default: %(default)s)",
    )
    parser.add_argument(
        "--record-send-times",
        action="store_true",
        help="keep the server-side send time of every chunk, for clock checks (default: off)",
    )


def _add_cost_arguments(parser: argparse.ArgumentParser, cost: CostModel) -> None:
    """One ``serve`` option per :class:`CostModel` field (ms)."""
    for name, field in CostModel.model_fields.items():
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=float,
            default=getattr(cost, name),
            help=f"{field.description} (default: %(default)s)",
        )


def _add_fault_arguments(parser: argparse.ArgumentParser, faults: FaultConfig) -> None:
    """``serve``'s faults: the kinds enabled, their probability, stall length, onset."""
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        choices=[k.value for k in FaultKind],
        metavar="KIND",
        help="enable fault KIND for every request; repeatable. KIND: %(choices)s (default: none)",
    )
    parser.add_argument(
        "--fault-probability",
        type=float,
        default=faults.probability,
        help="chance each enabled --fault applies to a request (0..1; default: %(default)s)",
    )
    parser.add_argument(
        "--stall-ms",
        type=float,
        default=faults.stall_ms,
        help="length of the 'stall' fault's pause (ms, >= 0; default: %(default)s)",
    )
    parser.add_argument(
        "--fault-after-chunks",
        type=int,
        default=faults.after_chunks,
        help="content chunks sent before a mid-stream fault (error_event, drop, stall) "
        "fires (chunks, >= 0; default: %(default)s)",
    )


def config_from_args(ns: argparse.Namespace) -> EngineConfig:
    """Build the :class:`EngineConfig` from parsed ``serve`` options.

    Raises ``pydantic.ValidationError`` for invalid combinations.
    """
    kinds = {FaultKind(v) for v in ns.fault}
    fault_kwargs: dict[str, object] = {flag: kind in kinds for kind, flag in _FAULT_FLAGS.items()}
    status = 429 if FaultKind.http_429 in kinds else 503 if FaultKind.http_503 in kinds else None
    faults = FaultConfig.model_validate(
        {
            **fault_kwargs,
            "http_status": status,
            "probability": ns.fault_probability,
            "stall_ms": ns.stall_ms,
            "after_chunks": ns.fault_after_chunks,
        }
    )
    cost = CostModel.model_validate({n: getattr(ns, n) for n in CostModel.model_fields})
    return EngineConfig(
        speculative=Speculative(ns.speculative),
        draft_depth=ns.draft_depth,
        dialect=Dialect(ns.dialect),
        mistuned_draft=ns.mistuned_draft,
        numerics=ns.numerics,
        eos_counted=ns.eos_counted,
        cost=cost,
        faults=faults,
        seed=ns.seed,
        model_name=ns.model_name,
        max_context_tokens=ns.max_context_tokens,
        record_send_times=ns.record_send_times,
    )
