"""The run's sequence: :func:`run_plan` measures a plan, speed and parity in one run.

The run is a pipeline whose data flows one way::

    plan ─▶ schedule ─▶ executor ─▶ results store ─▶ analysis ─▶ scorecard
            (_schedule)  (_executor)  (_results)       (_analysis)  (_scorecard)

This module holds the sequence (:func:`run_plan`); the steps themselves are
:class:`~deepseekbench._runner._steps.Steps`. The runner only wires the stages: it
prepares the workload (:mod:`deepseekbench._execute._prepare`: each cell's items,
counted with the plan's tokenizer and checked against the cell's bucket before any
measured request), builds the schedule
(:func:`~deepseekbench._plan._schedule.build_schedule`: parity set per route, then per
cell and load point ``rounds`` rounds of every route's block with the route
order alternating, then the determinism control), drops what an earlier run of
the same plan already recorded, hands each block to the executor, appends every
finished request to the results file as it arrives, and builds the rows from
the records at the end.

**Steps.** :func:`run_plan` runs six named steps (and the margin follow-up's ``.forensics``
between execute and finish: ``off``'s logprobs at every divergence; then ``.witness``:
above temperature 0, ``off``'s one-pass scoring of every sampled output), each one short
function:
:func:`~deepseekbench._runner._preflight.preflight` (read the plan's files, build the
routes, ask the gate), :func:`~deepseekbench._runner._resume.open_store` (lock the
results file, index what it holds), then
``Steps.prepare`` (probe, served depth, the engine's deterministic mode, count
the workload), ``.outputs`` and
``.calibrate`` (output-length draws and the calibration pass on
``off``, recorded and resumable; :mod:`deepseekbench._execute._calibrate`),
``.schedule``,
``.execute`` (every finished request recorded as it arrives) and ``.finish``
(the :class:`RunResult`, built once and frozen, then its records). Every
record is made by the store's writer (:class:`~deepseekbench._store._writer.Recorder`)
and goes through :class:`~deepseekbench._store._results.ResultsStore`, which writes
it and indexes it in one call.

**Results file.** Records are appended and flushed as they arrive
(:mod:`deepseekbench._store._results`); a crash or Ctrl-C loses nothing already
written. A rerun with the same plan and file skips every measured request that
succeeded and every parity output that completed; errored measurements are
measured again unless ``retry_errors=False`` (CLI ``--no-retry-errors``), and
errored parity outputs are always retried (the latest record of a key wins).
Rows are a pure function of the records (:mod:`deepseekbench._analysis._analysis`), so
:func:`~deepseekbench.load_results` rebuilds exactly what the run returned.

**Capacity search.** With ``[search]``, step 5 goes on after the
schedule: :class:`~deepseekbench._execute._search.SearchLoop` (driven by
:class:`~deepseekbench._runner._search.SearchDriver`) measures every
route at one level after another, each level announced by ``search_probe``
records before it is measured and judged by them after; the levels are a pure
function of the records, so a resumed run completes an announced level and
carries on. The rows then include every level measured.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx

from deepseekbench._analysis._analysis import RunResult
from deepseekbench._launch._plan_launch import launched_routes
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._transport import pool_limits
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._runner._preflight import Checked, launch_targets, preflight, with_launched
from deepseekbench._runner._progress import Progress, ProgressFn
from deepseekbench._runner._resume import open_store, to_send
from deepseekbench._runner._steps import Steps
from deepseekbench._store._results import ResultsWriteError

__all__ = ["run_plan"]


def _in_flight(plan: BenchmarkPlan) -> int:
    """The most requests the run keeps in flight: the largest concurrency of the load
    sweep (an open loop's in-flight cap) or the parity set's, whichever is larger."""
    top = max(max(lp.concurrency for lp in plan.load_points), plan.parity.concurrency)
    search = plan.effective_search
    if search is not None and plan.arrival.mode != "rate":  # search levels
        top = max(top, int(search.max_level))
    return top


async def run_plan(
    plan: BenchmarkPlan,
    *,
    gate: LiveGate,
    results_path: str | Path | None = None,
    progress: ProgressFn | None = None,
    client: httpx.AsyncClient | None = None,
    retry_errors: bool = True,
) -> RunResult:
    """Run ``plan``: parity set, then every route at every cell and load point in
    alternating rounds, then rows.

    Args:
        plan: the :class:`~deepseekbench.BenchmarkPlan`.
        gate: the :class:`~deepseekbench.LiveGate` every request passes; it is
            asked for every route before the first request, so a refused route
            stops the run before anything is sent.
        results_path: JSONL file to append to (default ``plan.results``; ``None``
            for neither keeps everything in memory only). An existing file with
            records of the same plan is resumed. The file is locked for the run:
            a second run on it is refused.
        progress: called after each finished request with a :class:`ProgressEvent`.
        client: a shared ``httpx.AsyncClient`` from ``gate.client()`` (one is made
            and closed here otherwise).
        retry_errors: on resume, measure again every request whose earlier
            measurement ended in an error (default); ``False`` keeps them
            (``RunResult.retried`` counts the ones retried).

    Returns:
        :class:`RunResult`: one row per route, cell and load point (and, with
        ``[search]``, per level the search measured) (medians in ms,
        throughput in tokens/s and requests/s), every per-request measurement,
        and parity per route.

    Raises:
        RouteUnreachableError: with ``plan.probe_routes`` (the default), a route
            did not answer its probe, answered with an HTTP error, or does not
            serve its model (``deepseekbench._net._probe``; a ``PlanError``, raised
            before any measured request, nothing recorded).
        PlanError: as :meth:`~deepseekbench.BenchmarkPlan.validate_sources` (task,
            prompt or model-source file invalid, ``mtp`` on a model without MTP
            layers, no parity set), a task id that collides with a parity prompt
            id, or an API-key variable is unset (all before any request); a
            route's declared ``spec_tokens`` differs from the depth its server
            says it serves (llama.cpp ``/props``, SGLang ``/get_server_info``;
            before any measured request).
        pydantic.ValidationError: a route's ``request_extras`` sets ``model``,
            ``messages`` or ``stream`` (from
            :meth:`~deepseekbench.RoutePlan.engine_route`, before any request).
        WorkloadLengthError: a cell's prompts fall outside its context bucket's
            token range (a ``PlanError``; counted before any measured request,
            every such prompt named).
        TokenizeError: the plan's tokenizer could not count (endpoint failure,
            unreadable ``tokenizer.json``), before any measured request.
        LiveGateError: the gate refuses a route, or ``client`` has a transport
            (default or mount) the gate does not wrap (before any request).
        ResultsFormatError: the results file exists but cannot be read back, or
            is not a regular file.
        ResultsInUseError: another run holds the results file (before any request).
        ResultsWriteError: a record could not be written (e.g. a full disk); the
            run stops, every record written before is kept.
        OSError: the results file or its folder cannot be created.
        ServerError: a launched route's engine (``[routes.launch]``) could not be
            started or did not serve its model in time (before any request); every
            engine launched is stopped however the run ends. A launch that would
            listen beyond loopback with the gate closed is a ``LiveGateError``, an
            unset ``launch.env_from`` variable a ``PlanError`` (nothing started).
    """
    checked = preflight(plan, gate, client, results_path)
    async with launched_routes(launch_targets(plan), gate=gate) as launched:
        run = with_launched(checked, launched, gate)
        return await _run(plan, gate, client, run, retry_errors, progress)


async def _run(
    plan: BenchmarkPlan,
    gate: LiveGate,
    client: httpx.AsyncClient | None,
    run: Checked,
    retry_errors: bool,
    progress: ProgressFn | None,
) -> RunResult:
    """Steps 2 to 6 of :func:`run_plan`, on the routes preflight (and any launch) gave."""
    store, previous = open_store(plan, run.path, retry_errors)
    own_client = client is None
    http = (
        client
        if client is not None
        else gate.client(
            timeout=httpx.Timeout(plan.timeout_s), limits=pool_limits(_in_flight(plan))
        )
    )
    steps = Steps(plan, gate, http, run, store, previous, Progress(progress, 0))
    try:
        counter, prepared = await steps.prepare()
        prepared, calibration = await steps.outputs(prepared, counter)
        steps.schedule(prepared, sum(to_send(b.items) for b in calibration))  # sizes progress
        steps.record_start(prepared)
        prepared = await steps.calibrate(prepared, calibration, counter)
        work = steps.schedule(prepared)  # with the pinned lengths
        await steps.execute(work, counter, prepared)
        await steps.forensics()
        await steps.witness()
        return steps.finish()
    except BaseExceptionGroup as group:
        # a failed write inside a task group: say so plainly, not as a group
        if store.error is not None and group.subgroup(ResultsWriteError) is not None:
            raise store.error from None
        raise
    finally:
        store.close()
        if own_client:
            with anyio.CancelScope(shield=True):
                await http.aclose()
