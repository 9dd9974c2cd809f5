"""The steps of one run after preflight: prepare, calibrate, schedule, execute, explain, finish.

Holds :class:`Steps` (steps 3 to 6 of :func:`~deepseekbench.run_plan`, over the
results store opened in step 2), each step short and recorded through the store's
writer, never around it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import uuid

import httpx

from deepseekbench._analysis._analysis import RunMeta, RunResult, build_result
from deepseekbench._analysis._follow_ups import follow_ups, profile_follow_ups, shown_directly
from deepseekbench._analysis._witness_tasks import witness_tasks
from deepseekbench._execute._calibrate import (
    calibrated_items,
    calibration_blocks,
    draw_outputs,
    needs_calibration,
    pin,
)
from deepseekbench._execute._executor import Executor, Sent
from deepseekbench._execute._forensics import (
    explain_divergences,
    one_pass_scorer,
    profile_off_outputs,
)
from deepseekbench._execute._pool_executor import BlockExecutor, executor_for
from deepseekbench._execute._prepare import PreparedWorkload, make_counter, prepare_workload
from deepseekbench._execute._served_config import check_spec_config, engine_determinism
from deepseekbench._execute._witness_scores import score_outputs
from deepseekbench._execute._workers import PoolReport
from deepseekbench._measure._measure import Timeouts
from deepseekbench._measure._redact import redact_measurement
from deepseekbench._measure._tokens import TokenCounter
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._probe import PROBE_TIMEOUT_S, probe_routes
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._schedule import Block, Phase, WorkItem, build_schedule, parity_prompts
from deepseekbench._runner._auto_workers import AutoWorkers, warm_ups_first
from deepseekbench._runner._preflight import Checked, check_conversations
from deepseekbench._runner._progress import Progress
from deepseekbench._runner._resume import Previous, pending, to_send
from deepseekbench._runner._search import SearchDriver
from deepseekbench._runner._stopping import SequentialSkip
from deepseekbench._store._results import ResultsStore
from deepseekbench._store._writer import Recorder
from deepseekbench._types._determinism import EngineDeterminism
from deepseekbench._version import __version__

__all__ = ["Steps"]


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _library_version() -> str:
    return __version__


class Steps:
    """Steps 3 to 6 of one run (prepare, schedule, execute, finish), over the store
    opened in step 2; each step records through the store, never around it."""

    def __init__(
        self,
        plan: BenchmarkPlan,
        gate: LiveGate,
        http: httpx.AsyncClient,
        run: Checked,
        store: ResultsStore,
        previous: Previous,
        prog: Progress,
    ) -> None:
        self.plan, self.gate, self.http, self.run = plan, gate, http, run
        self.store, self.previous, self.prog = store, previous, prog
        self.started_at = previous.started_at  # the plan's first start; set when recorded
        self.blocks: list[Block] = []
        self.determinism: dict[str, EngineDeterminism] = {}  # read in prepare
        speculative = {r.label: r.speculative.value for r in plan.routes}
        self.recorder = Recorder(store, run.plan_hash, uuid.uuid4().hex[:12], speculative)

    async def prepare(self) -> tuple[TokenCounter | None, PreparedWorkload]:
        """Step 3: probe the routes, check served depths, read each engine's
        deterministic mode, count each cell's items.

        Raises:
            RouteUnreachableError, PlanError, WorkloadLengthError, TokenizeError.
        """
        plan, routes = self.plan, self.run.routes
        if plan.probe_routes:  # a dead route stops the run before anything is measured
            probe_timeout = min(plan.timeout_s, PROBE_TIMEOUT_S)
            await probe_routes(routes, gate=self.gate, client=self.http, timeout_s=probe_timeout)
        read_s = plan.timeout_s  # each configuration read's total deadline
        await check_spec_config(
            plan.routes, routes, gate=self.gate, client=self.http, timeout_s=read_s
        )
        self.determinism = await engine_determinism(  # the engine's deterministic mode
            plan.routes, routes, gate=self.gate, client=self.http, timeout_s=read_s
        )
        counter = make_counter(
            plan, off_route=routes[plan.off_route.label], gate=self.gate, client=self.http
        )
        prepared = await prepare_workload(plan, counter=counter, items=self.run.sources.items)
        check_conversations(plan, prepared)
        return counter, prepared

    async def outputs(
        self, prepared: PreparedWorkload, counter: TokenCounter | None
    ) -> tuple[PreparedWorkload, list[Block]]:
        """Step 3b: draw each item's output cap; the calibration blocks
        still to send on ``off`` (none for ``natural`` or when the file has them all)."""
        prepared = await draw_outputs(self.plan, prepared, counter)
        return prepared, calibration_blocks(self.plan, prepared, self.store.state.calibration)

    async def calibrate(
        self, prepared: PreparedWorkload, blocks: list[Block], counter: TokenCounter | None
    ) -> PreparedWorkload:
        """Step 3c: the calibration pass (each output recorded as it
        arrives, resumable); ``pinned`` items then carry their natural lengths.

        Raises:
            CalibrationError: an item got no natural length (records kept).
        """
        if not needs_calibration(self.plan):
            return prepared
        if blocks:
            self.prog.set_phase("calibrate")
            timeouts = Timeouts(total_s=self.plan.timeout_s)
            executor = Executor(self.run.routes, self.gate, self.http, timeouts, counter)
            for block in blocks:
                await executor.run_block(block, block.items, self._on_sent)
        natural = calibrated_items(self.plan, prepared, self.store.state.calibration)
        return pin(self.plan, prepared, natural)

    def schedule(
        self, prepared: PreparedWorkload, calibration: int = 0
    ) -> list[tuple[Block, tuple[WorkItem, ...]]]:
        """Step 4: the schedule, less what the file already holds; sizes the progress
        (``calibration``: requests of the calibration pass still to send)."""
        parity = parity_prompts(self.plan, self.run.sources.tasks)
        schedule = build_schedule(self.plan, self.run.sources.prompts, parity, items=prepared.cells)
        self.blocks = list(schedule)  # what each request was, for the forensics step
        work = pending(schedule, self.store.state)
        done = self.prog.done + calibration  # the calibration pass
        self.prog.total = done + sum(to_send(items) + len(b.warmup) for b, items in work)
        self.prog.remaining = sum(to_send(items) for b, items in work if b.phase is Phase.measure)
        self.prog.kept = self.previous.kept
        return work

    def record_start(self, prepared: PreparedWorkload) -> None:
        """The ``run_start`` and ``workload`` records, then the first progress event."""
        now = _now()
        self.started_at = self.started_at or now
        self.recorder.start(
            self.plan, now, self.previous.resumed, self.run.sources,
            (prepared.tokenizer, prepared.cells), self.run.parity_set, dict(self.run.launched),
        )  # fmt: skip
        self.recorder.determinism(self.determinism)
        if self.previous.resumed:
            self.prog.set_phase("resume")  # the first event says what was kept and what is left
        else:
            self.prog.emit()

    def _on_workers(self, block: Block, report: PoolReport) -> None:
        self.recorder.workers(
            block,
            workers=report.workers,
            window_ns=(report.start_ns, report.end_ns),
            deaths=tuple(dataclasses.asdict(d) for d in report.deaths),
            clock_offsets_ns=tuple(report.clock_offsets_ns),
            basis=report.basis,
        )

    def _on_sent(self, block: Block, sent: Sent) -> None:
        clean = redact_measurement(sent.measurement, self.run.secrets)
        if clean is not sent.measurement:
            sent = dataclasses.replace(sent, measurement=clean)
        self.recorder.sent(
            block, sent.item, sent.measurement, turn=sent.turn, queue_ms=sent.queue_ms
        )
        self.prog.step(sent.measurement.error is not None)

    async def execute(
        self,
        work: list[tuple[Block, tuple[WorkItem, ...]]],
        counter: TokenCounter | None,
        prepared: PreparedWorkload | None = None,
    ) -> None:
        """Step 5: send every block; each finished request is recorded as it arrives.
        With ``[stopping]`` sequential, a measure block whose comparison the records
        already decide is skipped (:class:`~deepseekbench._runner._stopping.SequentialSkip`).
        With ``workers = "auto"``, every load point's warm-ups go first and size it
        (:mod:`~deepseekbench._runner._auto_workers`).
        With ``[search]``, then the search's levels, one after another."""
        decided = SequentialSkip(self.plan, self.blocks, self.store.state)
        sizer = None
        if self.plan.workers == "auto":
            sizer = AutoWorkers(self.plan.pool_workers)
            work = warm_ups_first(work)
        async with executor_for(
            self.plan, self.run.routes, self.gate, self.http, self._on_workers,
            counter=counter, on_cache=self.recorder.cache, sizer=sizer,
        ) as executor:  # fmt: skip
            for block, items in work:
                if decided.skip(block):
                    self._skipped(block, items)
                    continue
                await self._send(executor, block, items)
            if self.plan.search is not None and prepared is not None:
                await self._search(executor, prepared).loop().run()
        self.prog.set_phase("done")

    def _skipped(self, block: Block, items: tuple[WorkItem, ...]) -> None:
        """A decided comparison's block: its requests leave the progress counts."""
        n = to_send(items)
        self.prog.total -= n + len(block.warmup)
        self.prog.remaining -= n

    def _search(self, executor: BlockExecutor, prepared: PreparedWorkload) -> SearchDriver:
        decided = SequentialSkip(self.plan, self.blocks, self.store.state)

        async def send(block: Block, items: tuple[WorkItem, ...]) -> None:
            if decided.skip(block):  # sequential: a level this route already failed
                self._skipped(block, items)
                return
            await self._send(executor, block, items)

        return SearchDriver(
            self.plan, self.run, self.store, self.recorder, self.prog, send, prepared
        )

    async def _send(
        self, executor: BlockExecutor, block: Block, items: tuple[WorkItem, ...]
    ) -> None:
        self.prog.set_phase(block.title)
        delta = await executor.run_block(block, items, self._on_sent)
        off = {r.label for r in self.plan.routes if r.speculative.value == "off"}
        if delta is not None and block.route not in off:  # off scrapes for its cache
            self.recorder.window(block, delta)

    async def forensics(self) -> None:
        """Step 5b: for every divergence, one follow-up request to ``off`` only, with
        logprobs; then ``off``'s compared outputs profiled (its margins over each whole
        output, and its one-pass scores where the engine serves them); one request at a
        time (:mod:`deepseekbench._execute._forensics`), each recorded as it arrives."""
        todo = follow_ups(self.plan, self.store.state, self.blocks)
        label = self.plan.off_route.label
        off = self.run.routes[label]
        if todo:
            self.prog.set_phase("forensics")
            explained = await explain_divergences(
                todo, off=off, gate=self.gate, client=self.http, timeout_s=self.plan.timeout_s,
                off_label=label,
            )  # fmt: skip
            for f, m in explained:
                self.recorder.margin(f, m)
        profiles = profile_follow_ups(self.plan, self.store.state, self.blocks)
        if not profiles or self.plan.parity.exact != "within_noise":
            return  # opportunities and τ serve the within-noise verdict only
        self.prog.set_phase("forensics: off's margins")
        profiled = await profile_off_outputs(
            profiles, off=off, gate=self.gate, client=self.http, timeout_s=self.plan.timeout_s,
            score=one_pass_scorer(off, self.gate, self.http, self.plan.timeout_s),
        )  # fmt: skip
        for pf, prof in profiled:
            self.recorder.profile(pf, prof)
        for key, m in shown_directly(self.store.state):
            self.recorder.margin_at(key, m)

    async def witness(self) -> None:
        """Step 5c: above temperature 0, every route's sampled outputs scored by ``off``
        in one pass, one follow-up request each to ``off`` only, within the plan's
        ``parity.witness_max_*`` bounds (:mod:`deepseekbench._execute._witness_scores`);
        each score (or the reason there is none) is recorded as it arrives, and a
        resumed run does not ask again."""
        todo = witness_tasks(self.plan, self.store.state, self.blocks)
        if not todo:
            return
        self.prog.set_phase("witness")
        off = self.run.routes[self.plan.off_route.label]
        scored = await score_outputs(
            todo,
            off=off,
            gate=self.gate,
            client=self.http,
            timeout_s=self.plan.timeout_s,
            top_k=self.plan.parity.witness_top_k,
        )
        for f, s in scored:
            self.recorder.witness_score(f, s)

    def finish(self) -> RunResult:
        """Step 6: the result, built once from the store's records, then its
        ``parity``, ``row`` and ``run_end`` records."""
        finished_at = _now()
        result = build_result(
            self.plan,
            self.store.state,
            results_path=self.run.path,
            resumed=self.previous.resumed,
            complete=True,
            parity_set=self.run.parity_set,
            meta=RunMeta.of(
                self.plan,
                self.run.plan_hash,
                started_at=self.started_at,
                finished_at=finished_at,
                library_version=_library_version(),
                integrity=self.store.integrity,
            ),
            retried=self.previous.retried,
            kept_measurements=self.prog.kept,
            remaining_measurements=self.prog.remaining,
            launched=self.run.launched,
            integrity=self.store.integrity,
        )
        self.recorder.finish(
            (p.model_dump(mode="json") for p in result.parity.values()),
            result.rows,
            finished_at=finished_at,
            n_requests=len(result.measurements),
            n_errors=result.n_errors,
        )
        return result
