"""Preparing a plan's workload before any measured request, and running conversations.

* :func:`base_items`: the plan's workload items from its source (files read
  now, so a bad file fails before anything is sent); ``None`` for ``synthetic``.
* :func:`make_counter`: the plan's tokenizer as a
  :class:`~deepseekbench._types._tokens.TokenCounter` (``"endpoint"``: the ``off``
  route's ``/tokenize``, through the gate; else a ``tokenizer.json``).
* :func:`prepare_workload`: per cell, the items to measure — synthetic prompts
  generated to length, or the source's items — with every first turn counted
  and checked against the cell's bucket (:func:`~deepseekbench.check_bucket`),
  or, without a tokenizer, the byte bound
  (:func:`~deepseekbench._plan._workload.check_bucket_bytes`).
* :func:`converse`: one conversation on one route — each later turn is sent
  with this route's own earlier answers in the history (content only: reasoning
  is not sent back, as DeepSeek's multi-turn convention asks).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from deepseekbench._measure._tokens import EndpointTokenCounter, HFTokenizerCounter, TokenCounter
from deepseekbench._net._gate import LiveGate
from deepseekbench._net._route import EngineRoute
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._prefix import shared_prefix_items
from deepseekbench._plan._routes import CellPlan
from deepseekbench._plan._trace import load_mooncake, trace_items
from deepseekbench._plan._workload import (
    InputLength,
    WorkloadItem,
    check_bucket,
    check_bucket_bytes,
    synthetic_items,
)
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._types._request import ChatRequest

__all__ = [
    "PreparedWorkload",
    "base_items",
    "converse",
    "default_input_length",
    "make_counter",
    "prepare_workload",
]

_DEFAULT_SYNTHETIC_PROMPTS = 8


@dataclass(frozen=True, slots=True)
class PreparedWorkload:
    """What a run measures, per cell.

    Attributes:
        cells: cell id → the items measured there (cycled over the cell's
            requests), each with ``prompt_tokens`` when a tokenizer counted it.
        tokenizer: the tokenizer's name, or ``None`` when none was configured.
        counter: the tokenizer itself (used again to count outputs that came
            without usage), or ``None``.
    """

    cells: Mapping[str, tuple[WorkloadItem, ...]]
    tokenizer: str | None
    counter: TokenCounter | None

    def item(self, cell: str, index: int) -> WorkloadItem:
        """The item measured by request ``index`` of ``cell`` (items cycle)."""
        items = self.cells[cell]
        return items[index % len(items)]


def base_items(plan: BenchmarkPlan) -> tuple[WorkloadItem, ...] | None:
    """The plan's workload items (:meth:`~deepseekbench.BenchmarkPlan.workload_items`).

    Raises:
        PlanError, WorkloadFormatError: as ``BenchmarkPlan.workload_items``.
    """
    return plan.workload_items()


def make_counter(
    plan: BenchmarkPlan, *, off_route: EngineRoute, gate: LiveGate, client: httpx.AsyncClient
) -> TokenCounter | None:
    """The plan's tokenizer, or ``None`` when ``workload.tokenizer`` is unset.

    Raises:
        TokenizeError: a ``tokenizer.json`` that cannot be read (file named).
    """
    spec = plan.workload.tokenizer
    if spec is None:
        return None
    if spec == "endpoint":
        return EndpointTokenCounter(off_route, gate=gate, client=client, deadline_s=plan.timeout_s)
    return HFTokenizerCounter(plan.resolve(spec))


def default_input_length(cell: CellPlan) -> InputLength:
    """Synthetic length when the plan gives none: fixed at ¾ of the cell's bucket
    bound (768, 6,144, 24,576, 98,304 or 786,432 tokens)."""
    return InputLength(tokens=cell.context_bucket.max_prompt_tokens * 3 // 4)


async def _counted(
    items: Sequence[WorkloadItem], counter: TokenCounter, cache: dict[str, int]
) -> tuple[WorkloadItem, ...]:
    todo = [i for i in items if i.prompt_tokens is None and i.id not in cache]
    if todo:
        for item, n in zip(todo, await counter.count([i.turns[0] for i in todo]), strict=True):
            cache[item.id] = n
    return tuple(
        i if i.prompt_tokens is not None else i.model_copy(update={"prompt_tokens": cache[i.id]})
        for i in items
    )


async def prepare_workload(
    plan: BenchmarkPlan,
    *,
    counter: TokenCounter | None,
    items: Sequence[WorkloadItem] | None = None,
) -> PreparedWorkload:
    """Per cell, the items to measure, counted and checked against the bucket.

    Args:
        plan: the plan (its ``workload`` and ``cells``).
        counter: the tokenizer (:func:`make_counter`), or ``None``.
        items: the source's items when already read (:func:`base_items`).

    Raises:
        WorkloadLengthError: a cell's prompts fall outside its bucket's token
            range (with a tokenizer), or are certainly below it (without); every
            such prompt is named. Nothing has been measured yet.
        TokenizeError, LiveGateError: counting failed or was refused.
        PlanError, WorkloadFormatError: as :func:`base_items`.
    """
    w = plan.workload
    base = tuple(items) if items is not None else base_items(plan)
    cache: dict[str, int] = {}
    cells: dict[str, tuple[WorkloadItem, ...]] = {}
    for cell in plan.cells:
        if base is None and w.shared_prefix is not None:
            assert counter is not None  # the plan validator requires a tokenizer
            chosen = await shared_prefix_items(counter, w.shared_prefix)
        elif base is None and w.trace is not None:
            assert counter is not None
            records = load_mooncake(plan.resolve(w.trace.path))
            chosen = await trace_items(counter, records, w.trace)
        elif base is None:
            assert counter is not None  # the plan validator requires a tokenizer
            length = w.input_length or default_input_length(cell)
            n = w.n_prompts or _DEFAULT_SYNTHETIC_PROMPTS
            chosen = await synthetic_items(counter, length, n)
        else:
            chosen = base
        if counter is not None:
            chosen = await _counted(chosen, counter, cache)
            check_bucket(
                cell.cell_id,
                cell.context_bucket,
                [(i.id, i.prompt_tokens or 0) for i in chosen],
            )
        else:
            check_bucket_bytes(cell.cell_id, cell.context_bucket, chosen)
        cells[cell.cell_id] = chosen
    return PreparedWorkload(
        cells=cells, tokenizer=counter.name if counter else None, counter=counter
    )


async def converse(
    item: WorkloadItem,
    request_for: Callable[[tuple[dict[str, Any], ...]], ChatRequest],
    send: Callable[[ChatRequest], Awaitable[StreamMeasurement]],
    *,
    done: Sequence[StreamMeasurement] = (),
) -> list[StreamMeasurement]:
    """Run ``item``'s turns in order on one route; returns one measurement per turn sent.

    Turn ``k`` is sent with the user turns before it and this route's own
    answers to them (``assistant`` messages of the answer text). ``done`` holds
    turns already measured (a resumed run): they are not sent again, their
    answers are used. A turn that ends in an error ends the conversation (its
    later turns are not sent: their history would be wrong).

    Args:
        item: the conversation.
        request_for: builds the request from the messages so far.
        send: measures one request on the route.
        done: measurements of the first turns from an earlier run.
    """
    history: list[dict[str, Any]] = []
    out: list[StreamMeasurement] = []
    for k, turn in enumerate(item.turns):
        history.append({"role": "user", "content": turn})
        m = done[k] if k < len(done) else await send(request_for(tuple(history)))
        if k >= len(done):
            out.append(m)
        if m.error is not None:
            break
        history.append({"role": "assistant", "content": m.text})
    return out
