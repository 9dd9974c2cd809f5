"""Build and run a two-route ``BenchmarkPlan`` (``off`` + one candidate) on real vLLM.

Shared by the Llama and DeepSeek test modules. Each run goes through ``run_plan`` and
``LiveGate()`` with a :class:`~tests.vllm.observe.StreamRecorder` under the gate, and
reads each server's ``vllm:spec_decode_*`` counters before and after, so a test can
check the library's verdicts against observations made without it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import httpx
import orjson

from deepseekbench import (
    BenchmarkPlan,
    Dialect,
    LiveGate,
    ReasoningMode,
    RunningVllmServer,
    RunResult,
    Scorecard,
    run_plan,
)
from deepseekbench._runner._progress import ProgressFn
from tests.vllm import hf_models
from tests.vllm.observe import (
    ZERO_COUNTERS,
    StreamRecorder,
    counter_delta,
    parse_spec_counters,
    read_spec_counters,
)

SCORECARD_ENV = "DEEPSEEKBENCH_VLLM_SCORECARD"
MODE = ReasoningMode.non_think
REQUESTS_PER_CELL = 8
WARMUP_PER_CELL = 1
MAX_TOKENS = 64
PARITY_MAX_TOKENS = 48
N_PARITY = 4

# Prompts in the generated language (the models know no other words); the parity set
# is disjoint from the workload set.
_ALL_PROMPTS = hf_models.prompt_words(0, 8)
PARITY_PROMPTS = tuple(_ALL_PROMPTS[:N_PARITY])
WORKLOAD_PROMPTS = tuple(_ALL_PROMPTS[N_PARITY:])


class Served(Protocol):
    """What the checks need of a route's server: the loopback port it served on."""

    @property
    def port(self) -> int: ...


@dataclass
class PairRun:
    """One plan run over ``off`` and one candidate: what the library and observers saw."""

    result: RunResult
    card: Scorecard
    text: str
    recorder: StreamRecorder
    delta: dict[str, dict[str, Any]]  # route label -> /metrics counter delta
    servers: Mapping[str, Served]  # route label -> server
    results_path: Path
    run_s: float

    def records(self, kind: str) -> list[dict[str, Any]]:
        """Records of one kind from the results file."""
        return [
            rec
            for line in self.results_path.read_bytes().splitlines()
            if line.strip() and (rec := orjson.loads(line)).get("record") == kind
        ]


def build_plan(
    model: str,
    off: RunningVllmServer,
    candidate: RunningVllmServer,
    label: str,
    speculative: str,
    *,
    model_source: Path | None = None,
) -> BenchmarkPlan:
    """The plan: routes ``off`` and ``label``; exact parity on fixed prompts, greedy."""
    off_route = {"base_url": off.base_url, "model": off.spec.model_name}
    candidate_route = {"base_url": candidate.base_url, "model": candidate.spec.model_name}
    return pair_plan(
        model,
        {"label": "off", "speculative": "off", **off_route},
        {"label": label, "speculative": speculative, **candidate_route},
        model_source=model_source,
    )


def pair_plan(
    model: str,
    off: dict[str, Any],
    candidate: dict[str, Any],
    *,
    model_source: Path | None = None,
) -> BenchmarkPlan:
    """:func:`build_plan` from two route tables (``label``, ``speculative`` and
    either ``base_url`` or a ``launch`` table; the vLLM dialect is added)."""
    return BenchmarkPlan.model_validate(
        {
            "model": model,
            "engine_route": "vllm",
            "hosting": "self_hosted",
            "model_source": None if model_source is None else os.fspath(model_source),
            "routes": [
                {**off, "dialect": Dialect.vllm.value},
                {**candidate, "dialect": Dialect.vllm.value},
            ],
            "cells": [
                {
                    "context_bucket": "1k",
                    "output_target": "256",
                    "reasoning_mode": MODE.value,
                    "max_tokens": MAX_TOKENS,
                }
            ],
            "requests_per_cell": REQUESTS_PER_CELL,
            "warmup_per_cell": WARMUP_PER_CELL,
            "arrival": {"mode": "concurrency", "concurrency": 1},  # --max-num-seqs 1
            "timeout_s": 300.0,
            "workload": {"prompts": list(WORKLOAD_PROMPTS)},
            # Exact acceptance on fixed prompts only: the generated models solve no
            # task, so task parity would compare fail with fail. Lossless speculation
            # must return off's greedy text token for token.
            "parity": {
                "prompts": list(PARITY_PROMPTS),
                "tasks": "none",
                "max_tokens": PARITY_MAX_TOKENS,
                "seed": 1234,
                "determinism_control": True,
                "concurrency": 1,
            },
        }
    )


def run_pair(
    plan: BenchmarkPlan, servers: dict[str, RunningVllmServer], tmp_path: Path, title: str
) -> PairRun:
    """Run ``plan`` (routes labelled as in ``servers``) and collect every observation."""
    results = tmp_path / "results.jsonl"
    recorder = StreamRecorder()
    gate = LiveGate()

    async def main() -> RunResult:
        async with gate.client(transport=recorder, timeout=httpx.Timeout(300.0)) as client:
            return await run_plan(plan, gate=gate, results_path=results, client=client)

    before = {label: read_spec_counters(s.origin) for label, s in servers.items()}
    t0 = time.perf_counter()
    result = anyio.run(main)
    run_s = time.perf_counter() - t0
    after = {label: read_spec_counters(s.origin) for label, s in servers.items()}
    delta = {k: counter_delta(before[k], after[k]) for k in servers}
    return _pair_run(result, recorder, delta, servers, results, run_s, title)


@dataclass(frozen=True)
class LaunchedServer:
    """A server the plan launched (``[routes.launch]``): the port its row's
    ``engine_command`` gave it."""

    port: int


def command_port(argv: tuple[str, ...]) -> int:
    """The ``--port`` of a launched engine's argv."""
    return int(argv[argv.index("--port") + 1])


def run_launched(
    plan: BenchmarkPlan,
    tmp_path: Path,
    title: str,
    *,
    progress: ProgressFn | None = None,
) -> PairRun:
    """Run ``plan``, whose routes launch their own servers, and collect every
    observation. The servers are gone when ``run_plan`` returns, so each route's
    ``/metrics`` delta is vLLM's own last account seen on its port (the runner's
    closing window scrape, read through the recorder and parsed here) against the
    zero counters of a freshly started server; no completion that reported
    speculative decoding may follow that account."""
    results = tmp_path / "results.jsonl"
    recorder = StreamRecorder()
    gate = LiveGate()

    async def main() -> RunResult:
        async with gate.client(transport=recorder, timeout=httpx.Timeout(300.0)) as client:
            return await run_plan(
                plan, gate=gate, results_path=results, client=client, progress=progress
            )

    t0 = time.perf_counter()
    result = anyio.run(main)
    run_s = time.perf_counter() - t0
    servers: dict[str, LaunchedServer] = {}
    delta: dict[str, dict[str, Any]] = {}
    for row in result.rows:
        label = row.route_label
        assert label is not None and row.engine_command is not None, label
        server = LaunchedServer(command_port(row.engine_command))
        servers.setdefault(label, server)
        seen = recorder.metrics[server.port]
        assert seen, f"no /metrics answer seen for {label}"
        # vLLM's last account came after the port's last speculative completion (off's
        # determinism control follows its last window: no drafts, no counter moves)
        after_last = recorder.completions[server.port][seen[-1].completions_before :]
        assert all(c.spec is None for c in after_last), label
        delta[label] = counter_delta(ZERO_COUNTERS, parse_spec_counters(seen[-1].text))
    return _pair_run(result, recorder, delta, servers, results, run_s, title)


def _pair_run(
    result: RunResult,
    recorder: StreamRecorder,
    delta: dict[str, dict[str, Any]],
    servers: Mapping[str, Served],
    results: Path,
    run_s: float,
    title: str,
) -> PairRun:
    card = Scorecard.from_run(result)
    text = card.to_text()
    block = f"== {title} (run_plan {run_s:.1f} s)\n{text}"
    print(f"\n[vllm plan] {block}", flush=True)
    out = os.environ.get(SCORECARD_ENV)
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(block + "\n")
    return PairRun(
        result=result,
        card=card,
        text=text,
        recorder=recorder,
        delta=delta,
        servers=servers,
        results_path=results,
        run_s=run_s,
    )


def append_report(line: str) -> None:
    """Add a line to the scorecard file (when ``$DEEPSEEKBENCH_VLLM_SCORECARD`` is set)."""
    print(f"[vllm plan] {line}", flush=True)
    out = os.environ.get(SCORECARD_ENV)
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(line + "\n")
