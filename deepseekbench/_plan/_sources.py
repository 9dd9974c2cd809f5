"""What a plan's files hold: the parity tasks, the workload's prompts and items, the model.

Holds :class:`PlanSources` and the readers behind :class:`BenchmarkPlan`'s
``tasks``, ``workload_prompts``, ``workload_items``, ``generated_item_count``,
``model_capability`` and ``check_capability`` (the methods call these): each reads
a file the plan names, relative to the plan's folder, so a bad file fails before
any request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

import orjson

from deepseekbench._errors import PlanError
from deepseekbench._plan._capability import (
    ModelCapability,
    ModelCapabilityError,
    probe_model_capability,
)
from deepseekbench._plan._coverage import WorkloadCoverage
from deepseekbench._plan._datasets import dataset_sample_path, load_mt_bench, load_speed_bench
from deepseekbench._plan._sections import DATASET_SOURCES
from deepseekbench._plan._tasks import Task, load_tasks, smoke_tasks
from deepseekbench._plan._trace import load_mooncake
from deepseekbench._plan._workload import (
    WorkloadFormatError,
    WorkloadItem,
    load_jsonl,
    load_sharegpt,
    load_spec_bench,
    sample_path,
)
from deepseekbench._types._axes import Speculative
from deepseekbench._userfile import read_user_text

if TYPE_CHECKING:
    from deepseekbench._plan._plan import BenchmarkPlan

__all__ = [
    "PlanSources",
    "check_capability",
    "generated_item_count",
    "model_capability",
    "plan_tasks",
    "workload_items",
    "workload_prompts",
]


@dataclass(frozen=True, slots=True)
class PlanSources:
    """What :meth:`BenchmarkPlan.validate_sources` read from the plan's files.

    Attributes:
        tasks: the parity task set (``()`` for ``"none"``).
        prompts: the speed-workload prompts.
        capability: the probed model capability, ``None`` without ``model_source``.
        items: the workload's items (:meth:`BenchmarkPlan.workload_items`);
            ``None`` for a synthetic source (generated at run time).
        coverage: how many of them each cell sends (:meth:`BenchmarkPlan.coverage`).
    """

    tasks: tuple[Task, ...]
    prompts: tuple[str, ...]
    capability: ModelCapability | None
    items: tuple[WorkloadItem, ...] | None = None
    coverage: WorkloadCoverage | None = None  # items sent per cell


def plan_tasks(plan: BenchmarkPlan) -> tuple[Task, ...]:
    """Read for :meth:`BenchmarkPlan.tasks` (whose docstring says what it raises)."""
    spec = plan.parity.tasks
    if spec == "none":
        return ()
    if spec == "smoke":
        return smoke_tasks()
    return load_tasks(plan.resolve(spec))


def workload_prompts(plan: BenchmarkPlan) -> tuple[str, ...]:
    """Read for :meth:`BenchmarkPlan.workload_prompts` (whose docstring says what it raises)."""
    if plan.workload.prompts:
        return plan.workload.prompts
    if plan.workload.prompts_file:
        p = plan.resolve(plan.workload.prompts_file)
        out: list[str] = []
        text = read_user_text(p, what="prompts file", fail=PlanError)
        lines = text.split("\n")  # not splitlines (U+2028, U+0085)
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise PlanError(f"{p}: line {number} is not JSON") from exc
            if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
                raise PlanError(f"{p}: line {number} needs a string 'prompt'")
            out.append(obj["prompt"])
        if not out:
            raise PlanError(f"{p}: no prompts")
        return tuple(out)
    return tuple(t.prompt for t in smoke_tasks())


def workload_items(plan: BenchmarkPlan) -> tuple[WorkloadItem, ...] | None:
    """Read for :meth:`BenchmarkPlan.workload_items` (whose docstring says what it raises)."""
    w = plan.workload
    if w.source == "synthetic":
        return None
    if w.source == "default":
        if not w.prompts and not w.prompts_file:
            return tuple(
                WorkloadItem(id=t.id, turns=(t.prompt,), category=t.category, source="smoke")
                for t in smoke_tasks()
            )
        return tuple(
            WorkloadItem(id=f"prompt-{i + 1}", turns=(p,), source="plan")
            for i, p in enumerate(workload_prompts(plan))
        )
    return _dataset_items(plan)


def _dataset_items(plan: BenchmarkPlan) -> tuple[WorkloadItem, ...]:
    w = plan.workload
    assert w.path is not None
    if w.source in DATASET_SOURCES:  # SPEED-Bench, MT-bench
        ds = cast(Literal["speed_bench", "mt_bench"], w.source)
        sample = dataset_sample_path(ds, by=w.speed_bench_by)
        path = sample if w.path == "sample" else plan.resolve(w.path)
        items = (
            load_speed_bench(path, by=w.speed_bench_by)
            if ds == "speed_bench"
            else load_mt_bench(path)
        )
    else:
        fmt = cast(Literal["sharegpt", "spec_bench", "jsonl"], w.source)
        loader = {
            "sharegpt": load_sharegpt, "spec_bench": load_spec_bench, "jsonl": load_jsonl
        }  # fmt: skip
        path = sample_path(fmt) if w.path == "sample" else plan.resolve(w.path)
        items = loader[fmt](path)
    if w.categories:
        items = tuple(i for i in items if i.category in w.categories)
        if not items:
            raise WorkloadFormatError(
                f"{path}: no item of categories {list(w.categories)}", path=path
            )
    return items


def generated_item_count(plan: BenchmarkPlan) -> int:
    """Read for :meth:`BenchmarkPlan.generated_item_count` (whose docstring says what it raises)."""
    w = plan.workload
    if w.trace is not None:
        return len(load_mooncake(plan.resolve(w.trace.path)))
    if w.shared_prefix is not None:
        return w.shared_prefix.n_items
    return w.n_prompts or 8


def model_capability(plan: BenchmarkPlan) -> ModelCapability | None:
    """Read for :meth:`BenchmarkPlan.model_capability` (whose docstring says what it raises)."""
    if plan.model_source is None:
        return None
    try:
        return probe_model_capability(plan.resolve(plan.model_source))
    except ModelCapabilityError as exc:
        raise PlanError(f"cannot probe model_source: {exc}") from exc


def check_capability(plan: BenchmarkPlan) -> ModelCapability | None:
    """Read for :meth:`BenchmarkPlan.check_capability` (whose docstring says what it raises)."""
    cap = model_capability(plan)
    if cap is None:
        return None
    mtp_routes = [r.label for r in plan.routes if r.speculative is Speculative.mtp]
    if mtp_routes and cap.mtp_depth == 0:
        raise PlanError(
            f"routes {mtp_routes} ask for speculative=mtp, but {cap.source} has MTP "
            f"(NextN) depth 0: the model carries no MTP layers to draft with"
        )
    return cap
