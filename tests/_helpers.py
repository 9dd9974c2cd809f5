"""Helpers shared by the end-to-end tests that run plans on the embedded engine.

``COSTS`` (cheap steps, still a costlier target than draft), :func:`read_records`
(a results file's JSONL records), :func:`off_and_mtp` (two embedded engines, the
second with MTP), :func:`plan_of` (a plan for ``deepseekbench-ref`` on given
routes) and :func:`make_row` (a verified speculation-off row of 8 requests);
:data:`CLOCK_REFUSALS`, :data:`SPEED_JUDGED`, :func:`verdict_judged` and
:func:`speed_judged` for verdicts a
busy machine may turn from credited into a clock refusal (never into a parity one);
:func:`core_wait_ms` for a bound on the event loop's delay that load cannot break.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from deepseekbench import (
    BenchmarkPlan,
    CostModel,
    Dialect,
    EmbeddedEngine,
    EngineConfig,
    Row,
    Speculative,
    SpeedupVerdict,
)
from deepseekbench._measure._selfcheck import SchedSample

COSTS = CostModel(target_step_ms=2.0, verify_token_ms=0.1, draft_step_ms=0.15)

CLOCK_REFUSALS = frozenset({"client_starved", "clock_disagreement", "no_significant_difference"})
"""Refusals a busy machine can cause by itself, whatever the engines do: a starved
client, its clock disagreeing with the engine's, or an interval widened past 1."""

SPEED_JUDGED = re.compile(
    r"\d\.\d\d× by tpot_ms|no significant difference \("
    r"|refused: (client_starved|clock_disagreement)"
)
"""A scorecard speedup cell whose parity passed: a credited figure, or one of
:data:`CLOCK_REFUSALS` (never a parity refusal)."""


def verdict_judged(verdict: SpeedupVerdict) -> bool:
    """A verdict whose speed was judged: credited, or refused only for
    :data:`CLOCK_REFUSALS`."""
    reasons = {r.value for r in verdict.reasons}
    return verdict.printed or (bool(reasons) and reasons <= CLOCK_REFUSALS)


def core_wait_ms(before: SchedSample, after: SchedSample) -> float:
    """The calling thread's wait for a core between two :func:`sched_sample` readings
    (ms, from Linux schedstat); 0 where the OS does not give it, so a bound that adds it
    stays strict there. A busy machine delays the event loop by this much: a bound on a
    loop's delay plus it is one that load cannot break."""
    if before.wait_ns is None or after.wait_ns is None:
        return 0.0
    return (after.wait_ns - before.wait_ns) / 1e6


def speed_judged(line: Mapping[str, Any]) -> bool:
    """A JSON scorecard line (``report --format json``) whose speed was judged: credited
    (``speedup`` set), or refused only for :data:`CLOCK_REFUSALS`."""
    reasons = set((line.get("verdict") or {}).get("reasons") or ())
    if line.get("speedup") is not None:
        return not reasons
    return bool(reasons) and reasons <= CLOCK_REFUSALS


Route = tuple[str, str, str] | tuple[str, str, str, Dialect]
"""(label, speculative, base_url) or (label, speculative, base_url, dialect);
the dialect is vLLM's when not given."""


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every JSONL record of a results file (blank lines skipped)."""
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@asynccontextmanager
async def off_and_mtp(**config: Any) -> AsyncIterator[tuple[EmbeddedEngine, EmbeddedEngine]]:
    """Two embedded engines with the same ``EngineConfig`` keywords: speculation off,
    and MTP."""
    async with (
        EmbeddedEngine(EngineConfig(**config)) as off,
        EmbeddedEngine(EngineConfig(speculative=Speculative.mtp, **config)) as mtp,
    ):
        yield off, mtp


@asynccontextmanager
async def off_mtp_and_mistuned(
    **config: Any,
) -> AsyncIterator[tuple[EmbeddedEngine, EmbeddedEngine, EmbeddedEngine]]:
    """:func:`off_and_mtp` plus an MTP engine whose drafter is deliberately mis-tuned."""
    mistuned = EngineConfig(speculative=Speculative.mtp, mistuned_draft=True, **config)
    async with off_and_mtp(**config) as (off, mtp), EmbeddedEngine(mistuned) as bad:
        yield off, mtp, bad


def plan_of(
    routes: Sequence[Route], defaults: Mapping[str, Any], over: Mapping[str, Any]
) -> BenchmarkPlan:
    """A plan for model ``deepseekbench-ref`` on ``routes``: ``defaults``, then ``over``.

    Raises:
        pydantic.ValidationError: the plan is invalid.
    """
    data: dict[str, Any] = {
        "model": "deepseekbench-ref",
        "routes": [
            {
                "label": r[0],
                "speculative": r[1],
                "base_url": r[2],
                "dialect": (r[3] if len(r) == 4 else Dialect.vllm).value,
            }
            for r in routes
        ],
        **defaults,
    }
    data.update(over)
    return BenchmarkPlan.model_validate(data)


def ray_plan_file(tmp_path: Path, address: str | None) -> Path:
    """``tmp_path/plan.json``: two loopback routes, 2 workers, executor ``ray`` and, when
    given, ``ray_address``."""
    plan: dict[str, object] = {
        "model": "m",
        "routes": [
            {"label": "off", "speculative": "off", "base_url": "http://127.0.0.1:9/v1"},
            {"label": "mtp", "speculative": "mtp", "base_url": "http://127.0.0.1:8/v1"},
        ],
        "workers": 2,
        "executor": "ray",
    }
    if address is not None:
        plan["ray_address"] = address
    path = tmp_path / "plan.json"
    path.write_bytes(orjson.dumps(plan))
    return path


def make_row(**kw: Any) -> Row:
    """A row of a speculation-off route ``off`` at 1k/256/non_think (TTFT 10 ms, TPOT
    10 ms, E2E 100 ms, 100 output tokens/s, 8 requests, parity verified, closed loop of 1); ``kw``
    overrides any field.

    Raises:
        pydantic.ValidationError: the fields do not make a valid row.
    """
    base: dict[str, Any] = {
        "model_id": "m",
        "provider_route": "local",
        "engine_route": "embedded",
        "hosting": "embedded",
        "context_bucket": "1k",
        "output_target": "256",
        "reasoning_mode": "non_think",
        "stream": True,
        "speculative": "off",
        "route_label": "off",
        "ttft_ms": 10.0,
        "tpot_ms": 10.0,
        "e2e_ms": 100.0,
        "output_toks_per_s": 100.0,
        "n_requests": 8,
        "quality_parity": "verified",
        "concurrency": 1,
        "arrival": "closed",
    }
    base.update(kw)
    return Row.model_validate(base)


@dataclass(frozen=True)
class DemoRun:
    """What one ``python -m deepseekbench demo`` printed and left in ``folder``."""

    folder: Path
    returncode: int
    stdout: str
    stderr: str


ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m deepseekbench ARGS`` as a subprocess in ``cwd``, importing this checkout,
    with no key and no spend consent in its environment (text output captured)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DEEPSEEKBENCH_API_KEY", None)
    env.pop("DEEPSEEKBENCH_SPEND", None)
    return subprocess.run(
        [sys.executable, "-m", "deepseekbench", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
