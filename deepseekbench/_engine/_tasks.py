"""Reference tasks: generated prompts with the answers greedy decoding must give."""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict

from deepseekbench._engine._model import CATEGORIES, Category, corpus


class EngineTask(BaseModel):
    """One generated task: ``prompt`` (the user message), ``answer`` (the exact
    greedy completion, text), ``category`` (arithmetic, counting, reversal, code).

    Raises:
        pydantic.ValidationError: an unknown category or field, or a missing field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str
    answer: str
    category: Category


def all_reference_tasks() -> list[EngineTask]:
    """Every generated task (≈1,900), in corpus order."""
    return [
        EngineTask(prompt=ln.question, answer=ln.answer, category=ln.category) for ln in corpus()
    ]


def reference_tasks(n: int, seed: int = 0) -> list[EngineTask]:
    """``n`` distinct tasks drawn with ``seed``, categories taken in turn.

    The draw is deterministic for a given ``(n, seed)``.

    Raises:
        ValueError: ``n`` is negative or larger than the task set.
    """
    tasks = all_reference_tasks()
    if not 0 <= n <= len(tasks):
        raise ValueError(f"n must be in 0..{len(tasks)}, got {n}")
    rng = random.Random(seed)
    pools: dict[Category, list[EngineTask]] = {c: [] for c in CATEGORIES}
    for t in tasks:
        pools[t.category].append(t)
    for pool in pools.values():
        rng.shuffle(pool)
    out: list[EngineTask] = []
    while len(out) < n:
        for cat in CATEGORIES:
            if pools[cat] and len(out) < n:
                out.append(pools[cat].pop())
    return out
