"""One builder for plans that launch the embedded engine, route by route.

The capacity demo (``deepseekbench demo --capacity``), the speedup-witness benchmark
(``benchmarks/bench_speedup_witness.py``) and its end-to-end test
(``tests/engine_embedded/test_speedup_witness.py``) all run the same plan shape: every
route a ``python -m deepseekbench serve`` process on 127.0.0.1 (``launch.engine =
"embedded"``, speaking the ``vllm`` dialect), one cell, closed-loop concurrency, no
warm-up, the parity pass at 16 in flight. :func:`embedded_route` builds one route's
mapping and :func:`embedded_plan` the validated plan around them, so a change to that
shape is made once (docs/plan.md for every key).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deepseekbench._plan._plan import BenchmarkPlan

__all__ = ["embedded_plan", "embedded_route"]


def embedded_route(
    label: str,
    speculative: str,
    costs: Mapping[str, object],
    *,
    depth: int | Sequence[int] | None = None,
    **engine_args: object,
) -> dict[str, Any]:
    """One route of an embedded-engine plan, as the plan's mapping holds it.

    ``label``: the route's label; ``speculative``: its method (``off``, ``mtp``,
    ``draft``, ...); ``costs``: the engine's cost model and other ``serve`` options
    (``launch.engine_args``, e.g. ``target_step_ms`` in ms); ``depth``: draft tokens
    per verify step (``launch.spec_tokens``: one, or a list for a depth grid; ``None``
    leaves the engine's default, as ``off`` needs); ``engine_args``: further
    ``engine_args`` that override ``costs`` (e.g. ``verify_delay_ms`` in ms).

    Raises:
        Nothing: the mapping is checked when :func:`embedded_plan` validates it
            (``PlanError`` there).
    """
    launch: dict[str, Any] = {"engine": "embedded", "engine_args": {**costs, **engine_args}}
    if depth is not None:
        launch["spec_tokens"] = list(depth) if not isinstance(depth, int) else depth
    return {"label": label, "speculative": speculative, "dialect": "vllm", "launch": launch}


def embedded_plan(
    routes: Sequence[Mapping[str, Any]],
    *,
    prompts: Sequence[str],
    max_tokens: int,
    concurrency: Sequence[int],
    requests: int,
    repeats: int = 1,
    parity_max_tokens: int | None = None,
    workload: Mapping[str, Any] | None = None,
    **keys: Any,
) -> BenchmarkPlan:
    """The validated plan over ``routes`` (from :func:`embedded_route`) on the embedded
    engine: model ``deepseekbench-ref``, one cell capped at ``max_tokens`` output tokens,
    closed-loop ``concurrency`` (streams), ``requests`` measured requests per route and
    load in ``repeats`` rounds, no warm-up, ``prompts`` as the workload (with the
    further ``workload`` keys, e.g. ``output_length = "forced"``), the parity pass at 16
    in flight capped at ``parity_max_tokens`` tokens (``max_tokens`` when ``None``).
    ``keys``: further top-level plan keys (``slo``, ``search``, ``results``,
    ``stopping``; docs/plan.md), added as given.

    Raises:
        PlanError: the plan fails validation (a bad route, key or value).
    """
    return BenchmarkPlan.from_mapping(
        {
            "model": "deepseekbench-ref",
            "provider_route": "local",
            "engine_route": "embedded",
            "hosting": "embedded",
            "routes": [dict(r) for r in routes],
            "workload": {"prompts": list(prompts), **(workload or {})},
            "requests_per_cell": requests,
            "warmup_per_cell": 0,
            "repeats": repeats,
            "cells": [{"max_tokens": max_tokens}],
            "arrival": {"mode": "concurrency", "concurrency": list(concurrency)},
            "parity": {
                "concurrency": 16,
                "max_tokens": max_tokens if parity_max_tokens is None else parity_max_tokens,
            },
            **keys,
        }
    )
