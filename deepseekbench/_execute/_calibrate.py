"""The output-length step of a run (natural-length decode): draws, then the calibration pass.

* :func:`draw_outputs`: each cell's items get their drawn output cap
  (``workload.output_tokens``, :class:`~deepseekbench._plan._output_length.OutputLength`;
  ``dataset`` counts each item's reference answer with the plan's tokenizer).
* :func:`calibration_blocks`: with ``workload.output_length`` ``pinned`` or
  ``forced``, one block per cell on the ``off`` route that sends every item the
  cell measures (and warms up with) once, stopping at EOS under its cap, at the
  plan's temperature and seed; items already calibrated in the results file are
  left out (the pass resumes like any other phase).
* :func:`pin`: ``pinned`` — each item's ``output_tokens`` become its natural
  lengths per turn (tokens, at least 1), so every route then decodes exactly
  that many tokens (``max_tokens`` plus the dialect's pinned controls,
  ``EngineDialect.pinned_controls``; :attr:`~deepseekbench.BenchmarkPlan.reach_max_tokens`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from deepseekbench._errors import CalibrationError
from deepseekbench._execute._prepare import PreparedWorkload
from deepseekbench._measure._tokens import TokenCounter
from deepseekbench._plan._coverage import items_used
from deepseekbench._plan._output_length import draw_seed, with_output_tokens
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._routes import CellPlan
from deepseekbench._plan._schedule import Block, Phase, WorkItem, measure_request
from deepseekbench._plan._workload import WorkloadItem
from deepseekbench._records._figures import output_tokens
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._types._request import ChatRequest

__all__ = ["calibrated_items", "calibration_blocks", "draw_outputs", "needs_calibration", "pin"]

CalibrationState = Mapping[tuple[str, str, int], StreamMeasurement]
"""Calibration outputs by ``(cell, item id, turn)`` (``ResultsState.calibration``)."""


def needs_calibration(plan: BenchmarkPlan) -> bool:
    """Whether the run has a calibration pass: ``output_length`` ``pinned`` or ``forced``."""
    return plan.workload.output_length != "natural"


async def draw_outputs(
    plan: BenchmarkPlan, prepared: PreparedWorkload, counter: TokenCounter | None
) -> PreparedWorkload:
    """``prepared`` with each item's drawn output cap (``workload.output_tokens``);
    unchanged when the plan gives no distribution.

    Raises:
        TokenizeError, LiveGateError: counting reference answers failed.
    """
    length = plan.workload.output_tokens
    if length is None:
        return prepared
    cells: dict[str, tuple[WorkloadItem, ...]] = {}
    for k, cell in enumerate(plan.cells):
        items = prepared.cells[cell.cell_id]
        refs: list[int | None] | None = None
        if length.distribution == "dataset" and counter is not None:
            texts = [i.references[0] for i in items if i.references]
            counts = iter(await counter.count(texts)) if texts else iter(())
            refs = [next(counts) if i.references else None for i in items]
        cells[cell.cell_id] = with_output_tokens(
            items,
            length,
            seed=draw_seed(plan.seed, length, k),
            cap=cell.request_max_tokens,
            reference_tokens=refs,
        )
    return PreparedWorkload(cells=cells, tokenizer=prepared.tokenizer, counter=prepared.counter)


def _used(plan: BenchmarkPlan, items: Sequence[WorkloadItem]) -> tuple[WorkloadItem, ...]:
    """The items a cell sends: measured (``ceil(requests / rounds)``) and warm-ups."""
    n = items_used(
        len(items),
        requests_per_cell=plan.requests_per_cell,
        rounds=plan.rounds,
        warmup=plan.warmup_per_cell,
    )
    return tuple(items[:n])


def _done(state: CalibrationState, cell: str, item: WorkloadItem) -> bool:
    ms = [state.get((cell, item.id, t)) for t in range(len(item.turns))]
    return all(m is not None and m.error is None for m in ms)


def _request(plan: BenchmarkPlan, cell: CellPlan, item: WorkloadItem) -> ChatRequest:
    """The measured request, decoded to the model's own end (EOS) under its cap."""
    return measure_request(plan, cell, item).model_copy(update={"reach_max_tokens": False})


def calibration_blocks(
    plan: BenchmarkPlan, prepared: PreparedWorkload, state: CalibrationState
) -> list[Block]:
    """One ``calibrate`` block per cell on ``off`` with the items not yet calibrated
    (none when the pass is off or complete)."""
    if not needs_calibration(plan):
        return []
    concurrency = max(lp.concurrency for lp in plan.load_points)
    blocks: list[Block] = []
    for cell in plan.cells:
        todo = [i for i in _used(plan, prepared.cells[cell.cell_id])]
        work = tuple(
            WorkItem(_request(plan, cell, item), k, item.id, item)
            for k, item in enumerate(todo)
            if not _done(state, cell.cell_id, item)
        )
        if work:
            blocks.append(
                Block(
                    phase=Phase.calibrate,
                    route=plan.off_route.label,
                    items=work,
                    concurrency=concurrency,
                    reasoning_mode=cell.reasoning_mode,
                    cell=cell.cell_id,
                )
            )
    return blocks


def calibrated_items(
    plan: BenchmarkPlan, prepared: PreparedWorkload, state: CalibrationState
) -> dict[tuple[str, str], tuple[int, ...]]:
    """Natural output lengths per ``(cell, item id)``, one per turn (tokens).

    Raises:
        CalibrationError: an item the cell sends has no complete, error-free
            calibration with a known output length (named; the records are kept,
            so a rerun retries only those).
    """
    out: dict[tuple[str, str], tuple[int, ...]] = {}
    bad: list[str] = []
    for cell in plan.cells:
        for item in _used(plan, prepared.cells[cell.cell_id]):
            ms = [state.get((cell.cell_id, item.id, t)) for t in range(len(item.turns))]
            lengths = [output_tokens(m) if m is not None and m.error is None else None for m in ms]
            if any(n is None for n in lengths):
                bad.append(f"{cell.cell_id}:{item.id}")
                continue
            out[(cell.cell_id, item.id)] = tuple(n for n in lengths if n is not None)
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise CalibrationError(
            f"the calibration pass on {plan.off_route.label!r} did not give a natural "
            f"output length for {len(bad)} item(s): {', '.join(bad[:5])}{more}; "
            "nothing was measured; rerun to retry them (the others are kept)",
            items=tuple(bad),
        )
    return out


def pin(
    plan: BenchmarkPlan,
    prepared: PreparedWorkload,
    natural: Mapping[tuple[str, str], tuple[int, ...]],
) -> PreparedWorkload:
    """``pinned``: every calibrated item's ``output_tokens`` = its natural lengths
    (each at least 1 token); other modes: ``prepared`` unchanged."""
    if plan.workload.output_length != "pinned":
        return prepared
    cells = {
        cid: tuple(
            i.model_copy(update={"output_tokens": tuple(max(1, n) for n in natural[(cid, i.id)])})
            if (cid, i.id) in natural
            else i
            for i in items
        )
        for cid, items in prepared.cells.items()
    }
    return PreparedWorkload(cells=cells, tokenizer=prepared.tokenizer, counter=prepared.counter)
