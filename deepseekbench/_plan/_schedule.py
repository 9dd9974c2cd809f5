"""The schedule: a plan turned into ordered work, with no I/O (pure).

:func:`build_schedule` lists every request a run makes, grouped in
:class:`Block` s (one route's requests sent together) in the order they run:

1. **parity**: every route's parity set (parity prompts and tasks, the plan's
   parity seed, temperature 0 for prompts), once per reasoning mode, ``off``
   first;
2. **measure**: per cell and load point, ``rounds`` rounds; each round holds
   one block per route of the *same* prompts (and, in an open loop, the same
   send times), and the route order alternates between rounds (``off, A, B``
   then ``B, A, off`` …: a balanced, ABBA-style design, so a slow drift of the
   machine weighs on every route alike);
3. **control**: the ``off`` route's parity set a second time (the
   determinism control).

Measured request ``i`` of a (route, cell, load point) runs in round
``i % rounds`` and sends workload item ``i // rounds`` (cycled; a multi-turn
item sends its turns in order, see :mod:`deepseekbench._execute._executor`), so every
round repeats the same prompts: the ``off`` route's own rounds are the
determinism control of the measured traffic.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from deepseekbench._errors import PlanError
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._plan._routes import CellPlan, RoutePlan
from deepseekbench._plan._tasks import Task
from deepseekbench._plan._trace import trace_offsets_s, trace_period_ms
from deepseekbench._plan._workload import WorkloadItem
from deepseekbench._records._measurement import StreamMeasurement
from deepseekbench._types._axes import ReasoningMode
from deepseekbench._types._load import LoadPoint
from deepseekbench._types._request import ChatRequest

__all__ = [
    "Block",
    "ParityPrompt",
    "Phase",
    "WorkItem",
    "build_schedule",
    "conversation_pid",
    "measure_request",
    "measure_slot",
    "parity_conversations",
    "parity_ids",
    "parity_prompts",
    "reasoning_modes",
]


def conversation_pid(item_id: str, turn: int) -> str:
    """Parity prompt id of turn ``turn`` (0-based) of a conversation: ``conv:<id>#<n>``
    with ``n`` 1-based."""
    return f"conv:{item_id}#{turn + 1}"


def parity_conversations(plan: BenchmarkPlan) -> tuple[WorkloadItem, ...]:
    """The multi-turn workload items that join the parity set: those measured in
    the plan (the first ``requests_per_cell`` items) with more than one turn.

    Each is run on every route with natural EOS, temperature 0 and the parity
    seed, every turn carrying that route's own earlier answers; exact acceptance
    compares every turn (prompt ids from :func:`conversation_pid`).

    Raises:
        PlanError, WorkloadFormatError: as ``BenchmarkPlan.workload_items``.
    """
    items = plan.workload_items() or ()
    return tuple(i for i in items[: plan.requests_per_cell] if len(i.turns) > 1)


class Phase(StrEnum):
    """What a block is for: the ``parity`` set, a ``measure`` round, the ``control``
    pass, or the ``calibrate`` pass (``off``'s natural output lengths)."""

    parity = "parity"
    measure = "measure"
    control = "control"
    calibrate = "calibrate"  # off's natural output lengths


@dataclass(frozen=True, slots=True)
class ParityPrompt:
    """One parity prompt: its id, text, and the task it belongs to (``None`` = a bare prompt).

    ``conversation``: a multi-turn workload item whose every turn joins the parity
    set (``text`` is its first turn; turn ``k``'s prompt id is
    :func:`~deepseekbench._plan._schedule.conversation_pid`).
    """

    prompt_id: str
    text: str
    task: Task | None
    conversation: WorkloadItem | None = None


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One request to send.

    Attributes:
        request: the chat request.
        index: measured: the request's index in its (route, cell, load point);
            parity: its position in the parity set.
        prompt_id: the parity prompt or task id (parity and control phases).
        workload: the workload item behind a measured request, or the
            conversation of a parity prompt; its later turns are sent after
            ``request`` (the first turn), each with this route's earlier answers.
        done: turns of the conversation an earlier run already recorded (resume).
    """

    request: ChatRequest
    index: int
    prompt_id: str = ""
    workload: WorkloadItem | None = None
    done: tuple[StreamMeasurement, ...] = ()


@dataclass(frozen=True, slots=True)
class Block:
    """One route's requests sent together.

    Attributes:
        phase: parity, measure or control.
        route: the route label.
        items: the requests, in send order.
        concurrency: requests in flight at most.
        reasoning_mode: the reasoning mode of every request.
        parity_pass: 1 (parity), 2 (control); 0 for measure blocks.
        cell: the cell id (measure blocks), else ``""``.
        load: the load point (measure blocks), else ``None``.
        round: the round (0-based; measure blocks).
        offsets_s: open loop: each item's send time after the block start (s);
            ``None`` for a closed loop. The same for every route of a round.
        ramp_ms: closed loop: its streams' first sends spread over this time (ms;
            0 = all at once; ``arrival.ramp_ms``).
        warmup: unmeasured requests sent first (a route's first round only).
        scrape: bracket the measured items with ``/metrics`` scrapes.
    """

    phase: Phase
    route: str
    items: tuple[WorkItem, ...]
    concurrency: int
    reasoning_mode: ReasoningMode
    parity_pass: int = 0
    cell: str = ""
    load: LoadPoint | None = None
    round: int = 0
    offsets_s: tuple[float, ...] | None = None
    warmup: tuple[ChatRequest, ...] = ()
    scrape: bool = False
    ramp_ms: float = 0.0

    @property
    def title(self) -> str:
        """A progress label, e.g. ``measure mtp 1k/256/non_think c=16 round 2``."""
        if self.phase is Phase.measure and self.load is not None:
            return f"measure {self.route} {self.cell} {self.load.label} round {self.round + 1}"
        return f"{self.phase.value} {self.route} {self.reasoning_mode.value}"


def parity_prompts(plan: BenchmarkPlan, tasks: Sequence[Task]) -> list[ParityPrompt]:
    """The parity set: the plan's parity prompts (``prompt-1`` …) then the tasks.

    Raises:
        PlanError: a task id collides with a parity prompt id.
    """
    out = [
        ParityPrompt(f"prompt-{i + 1}", text, None) for i, text in enumerate(plan.parity.prompts)
    ]
    ids = {p.prompt_id for p in out}
    for t in tasks:
        if t.id in ids:
            raise PlanError(f"task id {t.id!r} collides with a parity prompt id")
        out.append(ParityPrompt(t.id, t.prompt, t))
    for item in parity_conversations(plan):
        out.append(ParityPrompt(conversation_pid(item.id, 0), item.turns[0], None, item))
    return out


def parity_ids(prompts: Sequence[ParityPrompt]) -> list[tuple[str, str, Task | None]]:
    """``(prompt id, text, task)`` of every parity output: one per prompt, one per
    turn of a conversation."""
    out: list[tuple[str, str, Task | None]] = []
    for p in prompts:
        if p.conversation is None:
            out.append((p.prompt_id, p.text, p.task))
        else:
            out += [
                (conversation_pid(p.conversation.id, k), turn, None)
                for k, turn in enumerate(p.conversation.turns)
            ]
    return out


def reasoning_modes(plan: BenchmarkPlan) -> list[ReasoningMode]:
    """The distinct reasoning modes of the plan's cells, in cell order."""
    seen: list[ReasoningMode] = []
    for c in plan.cells:
        if c.reasoning_mode not in seen:
            seen.append(c.reasoning_mode)
    return seen


def measure_slot(plan: BenchmarkPlan, index: int) -> tuple[int, int]:
    """``(round, slot)`` of measured request ``index``: round ``index % rounds``,
    workload prompt slot ``index // rounds``."""
    rounds = plan.rounds
    return index % rounds, index // rounds


def sampled_seed(seed: int, key: str, temperature: float) -> int:
    """The seed sent for the prompt ``key``: ``seed`` at temperature 0; above it, ``seed``
    offset by the CRC-32 of ``key`` (mod 2^31), so distinct prompts draw from distinct
    random streams. One seed for every prompt would couple the sampled outputs position
    by position (the same uniforms), and the distribution witness needs independent
    draws (docs/rows-and-gate.md)."""
    if temperature == 0:
        return seed
    return (seed + zlib.crc32(key.encode())) % 2**31


def _parity_request(plan: BenchmarkPlan, p: ParityPrompt, mode: ReasoningMode) -> ChatRequest:
    temperature = plan.parity.task_temperature if p.task is not None else 0.0
    max_tokens = (p.task.max_tokens if p.task is not None else None) or plan.parity.max_tokens
    return ChatRequest(
        messages=({"role": "user", "content": p.text},),
        max_tokens=max_tokens,
        temperature=temperature,
        seed=sampled_seed(plan.parity.seed, p.prompt_id, temperature),
        reasoning_mode=mode,
    )


def measure_request(plan: BenchmarkPlan, cell: CellPlan, item: WorkloadItem) -> ChatRequest:
    """The measured request for ``item``'s first turn in ``cell``: its own output target
    (tokens; drawn, or pinned by calibration) else the cell's cap, at the plan's
    temperature and seed (per prompt above temperature 0: :func:`sampled_seed`); decoded
    past EOS when the plan forces it, to exactly the natural length (its end-of-sequence
    allowed there) when the plan pins it."""
    return ChatRequest(
        messages=({"role": "user", "content": item.turns[0]},),
        max_tokens=item.output_target(0) or cell.request_max_tokens,
        temperature=plan.temperature,
        seed=sampled_seed(plan.seed, item.id, plan.temperature),
        reasoning_mode=cell.reasoning_mode,
        reach_max_tokens=plan.reach_max_tokens,
        pinned_length=plan.workload.output_length == "pinned",
    )


def _parity_blocks(
    plan: BenchmarkPlan, prompts: Sequence[ParityPrompt], route: RoutePlan, phase: Phase
) -> list[Block]:
    return [
        Block(
            phase=phase,
            route=route.label,
            items=tuple(
                WorkItem(_parity_request(plan, p, mode), i, p.prompt_id, p.conversation)
                for i, p in enumerate(prompts)
            ),
            concurrency=plan.parity.concurrency,
            reasoning_mode=mode,
            parity_pass=2 if phase is Phase.control else 1,
        )
        for mode in reasoning_modes(plan)
    ]


def _round_order(plan: BenchmarkPlan, round_: int) -> tuple[RoutePlan, ...]:
    order = (plan.off_route, *plan.speculative_routes)
    return order if round_ % 2 == 0 else order[::-1]


def _measure_blocks(
    plan: BenchmarkPlan, prompts: Sequence[WorkloadItem], cell_index: int, load_index: int
) -> list[Block]:
    cell, load = plan.cells[cell_index], plan.load_points[load_index]
    rounds, n = plan.rounds, plan.requests_per_cell
    blocks: list[Block] = []
    for r in range(rounds):
        indices = range(r, n, rounds)
        items = tuple(
            WorkItem(
                measure_request(plan, cell, (w := prompts[(i // rounds) % len(prompts)])),
                i,
                workload=w,
            )
            for i in indices
        )
        salt = (cell_index * 1000 + load_index) * 1000 + r
        offsets = plan.arrival.offsets_s(len(items), salt=salt, rate_per_s=load.rate_per_s)
        if plan.workload.trace is not None:  # the trace's own arrival times
            cycles = [((i // rounds) // len(prompts)) for i in indices]
            offsets = trace_offsets_s(
                [(it.workload, c) for it, c in zip(items, cycles, strict=True) if it.workload],
                period_ms=trace_period_ms(prompts),
                speedup=plan.workload.trace.speedup,
            )
        for route in _round_order(plan, r):
            warm = plan.warmup_per_cell if r == 0 else 0
            blocks.append(
                Block(
                    phase=Phase.measure,
                    route=route.label,
                    items=items,
                    concurrency=load.concurrency,
                    reasoning_mode=cell.reasoning_mode,
                    cell=cell.cell_id,
                    load=load,
                    round=r,
                    offsets_s=tuple(offsets) if offsets is not None else None,
                    warmup=tuple(
                        measure_request(plan, cell, prompts[i % len(prompts)]) for i in range(warm)
                    ),
                    # off is scraped too (its prefix cache, KV and queue)
                    scrape=plan.hosting.value != "managed_api",
                    ramp_ms=plan.arrival.ramp_ms if offsets is None else 0.0,
                )
            )
    return blocks


def build_schedule(
    plan: BenchmarkPlan,
    prompts: Sequence[str],
    parity_set: Sequence[ParityPrompt],
    *,
    items: Mapping[str, Sequence[WorkloadItem]] | None = None,
) -> tuple[Block, ...]:
    """Every block of a run of ``plan``, in run order (see the module docstring).

    Args:
        plan: the plan.
        prompts: the workload prompts (cycled over each block's requests; not
            empty); used when ``items`` is not given.
        parity_set: :func:`parity_prompts` of the plan.
        items: per cell id, the workload items to cycle instead (conversations,
            categories; :func:`~deepseekbench._execute._prepare.prepare_workload`).

    Raises:
        ValueError: ``prompts`` is empty (without ``items``), or a cell has no items.
    """
    if items is None:
        if not prompts:
            raise ValueError("the workload has no prompts")
        plain = tuple(
            WorkloadItem(id=f"prompt-{k + 1}", turns=(p,), source="plan")
            for k, p in enumerate(prompts)
        )
        items = {c.cell_id: plain for c in plan.cells}
    blocks: list[Block] = []
    for route in (plan.off_route, *plan.speculative_routes):
        blocks += _parity_blocks(plan, parity_set, route, Phase.parity)
    for c in range(len(plan.cells)):
        cell_items = items[plan.cells[c].cell_id]
        if not cell_items:
            raise ValueError(f"cell {plan.cells[c].cell_id} has no workload items")
        for lp in range(len(plan.load_points)):
            blocks += _measure_blocks(plan, cell_items, c, lp)
    if plan.parity.determinism_control:
        blocks += _parity_blocks(plan, parity_set, plan.off_route, Phase.control)
    return tuple(blocks)
