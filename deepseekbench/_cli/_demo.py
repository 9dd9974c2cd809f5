"""The ``demo`` command's scenarios: their plans and their runs on embedded engines.

Holds the demo's constants (``DEMO_*``), :func:`demo_plan` (three embedded engines:
off, mtp, mis-tuned mtp), :func:`demo_capacity_plan` (the launched depth grid and the
capacity search) and the three scenario runs (main, ``--numerics``, ``--capacity``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import os
import random
import shutil
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from deepseekbench._cli._commands import results_path
from deepseekbench._cli._exits import EXIT_USAGE
from deepseekbench._cli._output import exit_for, write_error_summary
from deepseekbench._cli._progress import StderrProgress

if TYPE_CHECKING:
    from deepseekbench._plan._plan import BenchmarkPlan

__all__ = [
    "DEMO_CAPACITY_CONCURRENCY",
    "DEMO_CAPACITY_COSTS",
    "DEMO_CAPACITY_DEPTHS",
    "DEMO_CAPACITY_REQUESTS",
    "DEMO_CAPACITY_SLO_TPOT_MS",
    "DEMO_COMPUTE_MS_PER_TOKEN",
    "DEMO_CONCURRENCY",
    "DEMO_DRAFT_DEPTH",
    "DEMO_LATEST",
    "DEMO_MAX_TOKENS",
    "DEMO_NUMERICS_REQUESTS",
    "DEMO_PROMPT_IDS",
    "DEMO_REQUESTS",
    "demo_capacity_plan",
    "demo_command",
    "demo_plan",
    "run_demo",
    "run_demo_capacity",
    "run_demo_numerics",
    "run_demo_sampling",
]

DEMO_CONCURRENCY: tuple[int, ...] = (1, 2, 8)
"""The demo's load sweep: closed-loop streams per load point (the engine's mtp, k = 3,
pays while its verify pass is memory-bound and costs past the knee; docs/engine.md)."""
DEMO_REQUESTS = 24
"""Measured requests per route and load point: 8 a round, one per stream at the top load."""
DEMO_PROMPT_IDS: tuple[str, ...] = (
    "arith-add-17-25",
    "arith-mul-12-12",
    "count-5-12",
    "count-41-48",
    "reverse-zizur",
    "code-square",
    "code-is-even",
    "code-increment",
)
"""The smoke tasks whose prompts the demo measures: 8, so each is sent once a round
(nothing dropped silently: no workload item left unsent; all 16 would double the demo's time)."""
DEMO_COMPUTE_MS_PER_TOKEN = 3.0
"""The demo engines' compute cost per scored position (ms/token; the default is 1.5): the
knee comes at a few sequences, so the crossover shows at loads one process drives easily."""
DEMO_DRAFT_DEPTH = 3
"""Draft tokens per verify step of the demo's mtp engines (tokens)."""
DEMO_MAX_TOKENS = 64
"""The demo cell's output cap (tokens): every correct answer fits; a mis-tuned ramble stops."""
DEMO_LATEST = "deepseekbench-demo.jsonl"
"""A demo run without ``--results`` writes ``deepseekbench-demo-<YYYYmmdd-HHMMSS>.jsonl`` and,
when it finishes, copies it to this stable name in the working folder (replacing an earlier
copy), so that ``dsb.load_results("deepseekbench-demo.jsonl")`` reads the latest demo."""


def demo_plan(
    base_urls: Sequence[str],
    *,
    requests: int = DEMO_REQUESTS,
    results: str | None = None,
    deterministic: bool | None = None,
) -> BenchmarkPlan:
    """The demo's plan for three engines at ``base_urls`` (off, mtp, mis-tuned mtp).

    One cell (1k prompts, 256 output tokens capped at ``DEMO_MAX_TOKENS``,
    non-think) swept over closed-loop concurrency ``DEMO_CONCURRENCY``;
    ``requests`` measured requests per route and load point after one warm-up,
    in the plan's default rounds; the built-in smoke tasks as the parity set
    (8 parity requests in flight, the same output cap). The engines behind the
    URLs are the caller's; ``python -m deepseekbench demo`` starts ``off`` and
    mtp with ``DEMO_DRAFT_DEPTH`` draft tokens (plain and mis-tuned) on a cost
    model with ``DEMO_COMPUTE_MS_PER_TOKEN``. ``deterministic``: the engines'
    deterministic mode, declared on every route (``[[routes]] deterministic``: the
    embedded engine's :attr:`~deepseekbench._engine._config.EngineConfig.deterministic_mode`,
    as docs/engines.md asks of an engine that does not report it; ``None``: undeclared).
    The speed workload is the prompts of the smoke tasks in ``DEMO_PROMPT_IDS`` (8,
    each sent once a round), answered at their natural length
    (``workload.output_length = "pinned"``, the default: a calibration pass on
    ``off`` finds each answer's length and every route decodes exactly that), so
    the demo measures the reference model's real answers and no token past EOS.

    Raises:
        ValueError: not exactly three base URLs.
    """
    from deepseekbench._plan._plan import BenchmarkPlan
    from deepseekbench._plan._sections import ParityPlan
    from deepseekbench._plan._tasks import smoke_tasks

    if len(base_urls) != 3:
        raise ValueError("demo_plan needs three base URLs (off, mtp, mis-tuned mtp)")
    off, mtp, bad = base_urls
    declared = {"deterministic": deterministic} if deterministic is not None else {}
    return BenchmarkPlan.model_validate(
        {
            "model": "deepseekbench-ref",
            "provider_route": "local",
            "engine_route": "embedded",
            "hosting": "embedded",
            "routes": [
                {"label": "off", "speculative": "off", "base_url": off, "dialect": "vllm"}
                | declared,
                {"label": "mtp", "speculative": "mtp", "base_url": mtp, "dialect": "vllm"}
                | declared,
                {
                    "label": "mtp-mistuned",
                    "speculative": "mtp",
                    "base_url": bad,
                    "dialect": "vllm",
                }
                | declared,
            ],
            "workload": {"prompts": [t.prompt for t in smoke_tasks() if t.id in DEMO_PROMPT_IDS]},
            "requests_per_cell": requests,
            "warmup_per_cell": 1,
            "cells": [{"max_tokens": DEMO_MAX_TOKENS}],
            "arrival": {"mode": "concurrency", "concurrency": list(DEMO_CONCURRENCY)},
            "parity": ParityPlan(concurrency=8, max_tokens=DEMO_MAX_TOKENS).model_dump(),
            "results": results,
        }
    )


@contextlib.contextmanager
def _coverage_hint_names_requests(plan: BenchmarkPlan) -> Iterator[None]:
    """The plan's workload-coverage warning, told in the demo's own terms: the flag to
    raise is ``--requests`` (the plan's ``requests_per_cell`` is not the reader's to set)."""
    from deepseekbench._plan._coverage import WorkloadCoverageWarning, workload_coverage

    cov = workload_coverage(
        len(DEMO_PROMPT_IDS), requests_per_cell=plan.requests_per_cell, rounds=plan.rounds
    )
    if not cov.complete:
        warnings.warn(cov.message("--requests"), WorkloadCoverageWarning, stacklevel=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WorkloadCoverageWarning)
        yield


async def run_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from deepseekbench._engine import CostModel, EmbeddedEngine, EngineConfig
    from deepseekbench._net._gate import LiveGate
    from deepseekbench._report._scorecard import Scorecard
    from deepseekbench._runner._run import run_plan
    from deepseekbench._types._axes import Speculative

    t0 = time.perf_counter()
    path: Path = args.results
    # the engines count their end-of-sequence token as vLLM does, so pinned lengths end there
    off_config = EngineConfig(
        cost=CostModel(compute_ms_per_token=DEMO_COMPUTE_MS_PER_TOKEN), eos_counted=True
    )
    mtp_config = off_config.model_copy(
        update={"speculative": Speculative.mtp, "draft_depth": DEMO_DRAFT_DEPTH}
    )
    configs = (off_config, mtp_config, mtp_config.model_copy(update={"mistuned_draft": True}))
    prog = StderrProgress(err)
    async with (
        EmbeddedEngine(configs[0]) as e_off,
        EmbeddedEngine(configs[1]) as e_mtp,
        EmbeddedEngine(configs[2]) as e_bad,
    ):
        urls = [e_off.base_url, e_mtp.base_url, e_bad.base_url]
        declared = all(c.deterministic_mode for c in configs)  # the engines' own word
        plan = demo_plan(urls, requests=args.requests, deterministic=declared)
        try:
            with _coverage_hint_names_requests(plan):
                result = await run_plan(plan, gate=LiveGate(), results_path=path, progress=prog)
        finally:
            prog.close()
    card = Scorecard.from_run(result)
    out.write(card.render(args.format))
    out.flush()
    err.write("\n")
    write_error_summary(result, err, [])
    err.write(f"results: {path}\n")
    latest: Path | None = args.latest
    if latest is not None and latest != path:
        partial = latest.with_name(latest.name + ".partial")
        shutil.copyfile(path, partial)
        os.replace(partial, latest)  # a reader never sees half a copy
        err.write(f"latest demo results (a copy): {latest}\n")
    err.write(f"re-render: python -m deepseekbench report {path}\n")
    err.write(f"demo wall time: {time.perf_counter() - t0:.1f} s\n")
    return exit_for(result)


DEMO_NUMERICS_REQUESTS = 48
"""The numerics scenario: measured requests per route (one load point,
``DEMO_NUMERICS_CONCURRENCY`` streams), with the 16 smoke parity prompts 64 comparisons
per route: past the 23 the within-noise verdict's power needs (``parity.lossy_rate``), and
the sample at which the replaced rate test refused the correct route."""
DEMO_NUMERICS_CONCURRENCY = 2
"""Streams of the numerics scenario: below the cost model's knee, so mtp's verify pass pays."""
DEMO_NUMERICS_MAX_TOKENS = 64
"""Forced output length of the numerics scenario (tokens): short, since its prompts already
hold the 128 characters of context past which the numerics mode's near-ties live."""
DEMO_NUMERICS_PROFILES = 16
"""``parity.profile_outputs`` of the numerics scenario: ``off``'s outputs profiled per group
(those a route diverged from first), one follow-up each, to keep the demo near a minute."""
DEMO_NUMERICS_RELAXED_DELTA = 1.0
"""The lossy route of the numerics scenario: mtp with relaxed acceptance (TensorRT-LLM's
MTP ``relaxed_topk``/``relaxed_delta`` rule as the embedded engine's fault, docs/engine.md),
a draft token within this many nats of the target's top-1 accepted outright: far above τ."""
DEMO_NUMERICS_PREAMBLE = (
    "Answer the exercise below. This preamble is long on purpose: the reference model's "
    "numerics mode only places near-ties past 128 characters of context. Exercise: (part E) "
)
"""Prepended to each of the 16 smoke tasks' prompts in the numerics scenario's measured
traffic (16 prompts, each sent once a round, 3 rounds). The numerics mode's near-ties are
hashed from the context; with this wording 4 of the 16 outputs (64 forced tokens) meet one
that mtp's verify pass flips, so the scenario shows near-tie divergences."""


def _numerics_plan(
    urls: Sequence[str], exact: str, deterministic: bool | None = None
) -> BenchmarkPlan:
    """The numerics scenario's plan for ``off``, ``mtp`` and the lossy ``mtp-relaxed`` at
    ``urls``, the engines' ``deterministic`` mode declared on each route (off in the
    numerics mode: its verify passes round differently from decode; ``None``:
    undeclared)."""
    from deepseekbench._plan._plan import BenchmarkPlan
    from deepseekbench._plan._tasks import smoke_tasks

    plan = demo_plan(urls, requests=DEMO_NUMERICS_REQUESTS, deterministic=deterministic)
    data = plan.model_dump(mode="json")
    data["arrival"]["concurrency"] = [DEMO_NUMERICS_CONCURRENCY]
    data["workload"]["output_length"] = "forced"  # every route decodes the same positions
    data["workload"]["prompts"] = [DEMO_NUMERICS_PREAMBLE + t.prompt for t in smoke_tasks()]
    data["cells"][0]["max_tokens"] = DEMO_NUMERICS_MAX_TOKENS
    data["parity"]["exact"] = exact
    data["parity"]["profile_outputs"] = DEMO_NUMERICS_PROFILES
    data["routes"][2]["label"] = "mtp-relaxed"
    return BenchmarkPlan.model_validate(data)


_PAST_EOS = "acceptance measured on text past EOS"


def _forced_explained(text: str) -> str:
    """The numerics scenario's scorecard with its past-EOS notes (expected: the scenario
    forces its output length) replaced by one line saying why; other formats unchanged."""
    lines = text.splitlines(keepends=True)
    kept = [ln for ln in lines if not (_PAST_EOS in ln and ln.lstrip("-* ").startswith("!"))]
    if len(kept) == len(lines):
        return text
    why = (
        f"(expected here: every route decodes {DEMO_NUMERICS_MAX_TOKENS} forced tokens a "
        "prompt, past EOS, so that parity compares the same positions; the speculative "
        "rows' acceptance is measured partly past EOS and does not predict real answers)\n"
    )
    return "".join(kept) + why


async def run_demo_numerics(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The numerics demo scenario: ``off`` and ``mtp`` in the embedded engine's numerics mode
    (verify passes flip near-ties, docs/engine.md) and a lossy mtp (relaxed acceptance,
    ``DEMO_NUMERICS_RELAXED_DELTA``),
    ``DEMO_NUMERICS_REQUESTS`` measured requests each, then judged under
    ``parity.exact = "bit_exact"`` and ``"within_noise"`` (analysis keys: the second run
    resumes the same results file, sends nothing new to the measured routes, and adds
    ``off``'s profiles: its margins over its compared outputs and their one-pass scores)."""
    from deepseekbench._engine import CostModel, EmbeddedEngine, EngineConfig
    from deepseekbench._net._gate import LiveGate
    from deepseekbench._report._scorecard import Scorecard
    from deepseekbench._runner._run import run_plan
    from deepseekbench._types._axes import Speculative

    t0 = time.perf_counter()
    cost = CostModel(compute_ms_per_token=DEMO_COMPUTE_MS_PER_TOKEN)
    off = EngineConfig(cost=cost, numerics=True)
    mtp = off.model_copy(update={"speculative": Speculative.mtp, "draft_depth": DEMO_DRAFT_DEPTH})
    bad = mtp.model_copy(
        update={"relaxed_acceptance": True, "relaxed_delta": DEMO_NUMERICS_RELAXED_DELTA}
    )
    async with EmbeddedEngine(off) as e0, EmbeddedEngine(mtp) as e1, EmbeddedEngine(bad) as e2:
        urls = [e0.base_url, e1.base_url, e2.base_url]
        for exact in ("bit_exact", "within_noise"):
            if exact == "within_noise":  # the first pass's records, judged again
                err.write(
                    "judging the same measured requests under parity.exact = "
                    "'within_noise' (an analysis key: nothing re-sent; off's profiles added)\n"
                )
            prog = StderrProgress(err, resume_line=exact == "bit_exact")
            try:
                result = await run_plan(
                    _numerics_plan(urls, exact, off.deterministic_mode),
                    gate=LiveGate(),
                    results_path=args.results,
                    progress=prog,
                )
            finally:
                prog.close()
            out.write(f"\n== parity.exact = {exact!r} ==\n")
            out.write(_forced_explained(Scorecard.from_run(result).render(args.format)))
    out.flush()
    err.write(f"\nresults: {args.results}\ndemo wall time: {time.perf_counter() - t0:.1f} s\n")
    return exit_for(result)


# `demo --sampling`: the distribution witness at temperature > 0
DEMO_SAMPLING_TEMPERATURE = 0.7
"""The sampling scenario's temperature."""
DEMO_SAMPLING_PROMPTS = 120
"""The sampling scenario's prompts (each sent once, its own seed): 3-digit sums and
8-letter reversals the reference model has not seen, where its answers are uncertain;
about 3700 sampled tokens per route, of which about 1300 informative (the witness's
selection leaves out the near-certain positions), past its default 1000."""
DEMO_SAMPLING_FAULTS: dict[str, dict[str, object]] = {
    "mtp-argmax": {"argmax_acceptance": True},
    "mtp-colddraft": {"draft_ignores_temperature": True},
    "mtp-relaxedwide": {"relaxed_acceptance": True, "relaxed_topk": 20, "relaxed_delta": 5.0},
    "mtp-relaxed": {"relaxed_acceptance": True},
}
"""The sampling scenario's faulty mtp routes (``EngineConfig`` fields): argmax acceptance,
a draft that ignores the temperature, relaxed acceptance wide (top-20 within 5 nats) and
at the engine's default (top-3 within 1 nat). The witness refuses the first three; the
last moves too little mass on this model for any test at this sample, and its row
differs by the temperature-0 parity set (docs/rows-and-gate.md)."""


SAMPLING_NOTES = (
    "one round (each prompt sent once, for the witness): speedups get an interval over "
    "the prompts, paired on the prompt, with no repeats within them\n"
)
"""What the sampling scenario says before it runs: its one round."""

SAMPLING_TTFT_NOTE = (
    "TTFT on the mtp routes is about 4× off's: at 8 streams requests arrive while a batch "
    "step runs; each waits for it to end (the server queue column) and gets its first "
    "token at the end of the step that admits it, and a verify step of the running batch "
    "costs about 4× off's decode step (the step-cost ratio under 'Where the speedup comes "
    "from'): the embedded engine's continuous batching, as vLLM's chunked prefill; no "
    "fault of these routes"
)
"""The sampling scenario's scorecard note on where the speculative routes' TTFT comes
from (``deepseekbench._engine._scheduler``): printed with the scorecard's notes."""


def _sampling_prompts() -> list[str]:
    rng = random.Random(5)
    out: list[str] = []
    for i in range(DEMO_SAMPLING_PROMPTS):
        if i % 2:
            out.append(f"What is {rng.randint(100, 999)} + {rng.randint(100, 999)}?")
        else:
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8))
            out.append(f"Reverse the word {word}.")
    return out


async def run_demo_sampling(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The sampling demo scenario: at temperature 0.7, ``off``, an exact mtp and mtp with
    each of the embedded engine's sampler faults (:data:`DEMO_SAMPLING_FAULTS`), judged
    by the distribution witness
    (``off`` scores every sampled output in one pass; docs/rows-and-gate.md)."""
    from deepseekbench._engine import CostModel, EmbeddedEngine, EngineConfig
    from deepseekbench._net._gate import LiveGate
    from deepseekbench._plan._plan import BenchmarkPlan
    from deepseekbench._plan._stopping import FewRoundsWarning
    from deepseekbench._report._scorecard import Scorecard
    from deepseekbench._runner._run import run_plan
    from deepseekbench._store._writer import record_run_notes
    from deepseekbench._types._axes import Speculative

    t0 = time.perf_counter()
    off = EngineConfig(cost=CostModel(compute_ms_per_token=DEMO_COMPUTE_MS_PER_TOKEN))
    mtp = off.model_copy(update={"speculative": Speculative.mtp, "draft_depth": DEMO_DRAFT_DEPTH})
    faults = DEMO_SAMPLING_FAULTS
    configs = [off, mtp, *(mtp.model_copy(update=f) for f in faults.values())]
    async with contextlib.AsyncExitStack() as stack:
        engines = [await stack.enter_async_context(EmbeddedEngine(c)) for c in configs]
        declared = all(c.deterministic_mode for c in configs)  # the engines' own word
        urls = [e.base_url for e in engines[:3]]
        data = demo_plan(urls, deterministic=declared).model_dump(mode="json")
        labels = ["off", "mtp", *faults]
        base = data["routes"][1]
        data["routes"] = [data["routes"][0]] + [
            {**base, "label": label, "base_url": e.base_url}
            for label, e in zip(labels[1:], engines[1:], strict=True)
        ]
        data |= {"temperature": DEMO_SAMPLING_TEMPERATURE, "repeats": 1, "warmup_per_cell": 0}
        data |= {"requests_per_cell": DEMO_SAMPLING_PROMPTS}
        data["arrival"]["concurrency"] = [8]
        data["workload"] = {"prompts": _sampling_prompts(), "output_length": "natural"}
        # one round on purpose: rounds repeat the same items, and the witness needs each
        # of the 120 prompts once; the plan's FewRoundsWarning is said in one line instead
        err.write(SAMPLING_NOTES)
        prog = StderrProgress(err)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FewRoundsWarning)
                plan = BenchmarkPlan.model_validate(data)
                result = await run_plan(
                    plan, gate=LiveGate(), results_path=args.results, progress=prog
                )
        finally:
            prog.close()
    # the note is kept in the results file, so `report` on it prints it as this run does
    notes = record_run_notes(args.results, plan, (SAMPLING_TTFT_NOTE,))
    card = Scorecard.from_run(dataclasses.replace(result, run_notes=notes))
    out.write(card.render(args.format))
    out.flush()
    err.write(f"\nresults: {args.results}\ndemo wall time: {time.perf_counter() - t0:.1f} s\n")
    return exit_for(result)


# `demo --capacity`, engines launched from the plan, the depth grid, [search]
DEMO_CAPACITY_DEPTHS: tuple[int, ...] = (1, 2, 4)
"""The capacity scenario's mtp depth grid (draft tokens per verify step): one launched
route per depth, ``mtp-k1``, ``mtp-k2``, ``mtp-k4``."""
DEMO_CAPACITY_CONCURRENCY: tuple[int, ...] = (1, 5)
"""The capacity scenario's sweep (closed-loop streams); the ``[search]`` adds the level
between them (3): with ``resolution = 2`` every route's bracket is then resolved."""
DEMO_CAPACITY_REQUESTS = 15
"""Measured requests per route and load: 3 rounds of 5, the fewest a speedup is credited
on (5 per row), which also caps the search's levels at 5 streams (one round)."""
DEMO_CAPACITY_SLO_TPOT_MS = 20.0
"""The capacity scenario's SLO (ms/token, TPOT): ``off`` (about 14 ms alone, 23 at 3
streams) meets it at 1 stream only, the mtp depths (10 to 12 ms at 3 streams) at 3."""
DEMO_CAPACITY_COSTS: dict[str, float] = {
    "target_step_ms": 12.0,
    "compute_ms_per_token": 2.7,
    "draft_step_ms": 0.3,
    "verify_token_ms": 0.0,
    "batch_exponent": 0.5,
}
"""The capacity scenario's engine costs (``CostModel`` fields, ms; docs/engine.md), the
same for every route: a 12 ms pass (the client's own per-token cost is a small share of
it), a cheap draft head, so depth 4 (5 positions scored a step: 13.5 ms of compute)
pays most alone, and a compute cost under which the deeper a depth, the sooner its
verify pass turns compute-bound as streams are added, where the shallower depths win;
a steep batch cost (exponent 0.5) puts ``off``'s TPOT at 1 and 3 streams well apart."""
_DEMO_CAPACITY_PROMPT_IDS: tuple[str, ...] = (
    "arith-add-17-25",
    "arith-mul-12-12",
    "count-5-12",
    "count-41-48",
    "reverse-zizur",
)
"""Five smoke prompts with short answers (12 to 18 tokens), one a request of each round:
no workload item left unsent."""


def demo_capacity_plan(*, results: str | None = None, sequential: bool = False) -> BenchmarkPlan:
    """The capacity scenario's plan (``python -m deepseekbench demo --capacity``).

    Routes launched from the plan on the embedded engine (``[routes.launch]``, each
    with ``DEMO_CAPACITY_COSTS``): ``off``; ``mtp`` with ``spec_tokens =
    DEMO_CAPACITY_DEPTHS`` (the depth grid: routes ``mtp-k1``, ``mtp-k2``,
    ``mtp-k4``); ``mtp-mistuned`` (depth 2, ``mistuned_draft``: fast and wrong).
    One cell (output capped at ``DEMO_MAX_TOKENS`` tokens, answers at their natural
    length) swept over closed-loop concurrency ``DEMO_CAPACITY_CONCURRENCY``,
    ``DEMO_CAPACITY_REQUESTS`` measured requests per route and load in 3 rounds, no
    warm-up (the parity pass runs first); ``[slo] tpot_ms =
    DEMO_CAPACITY_SLO_TPOT_MS`` (ms/token) and ``[search]`` (``target`` 0.9,
    ``resolution`` 2 streams, ``max_level`` 5 streams); the smoke tasks as the
    parity set (16 in flight). The scorecard then names the best depth per load,
    each route's capacity with its bracket, and the ratio of each depth's
    capacity to ``off``'s (docs/plan.md). ``sequential``: ``[stopping] mode =
    "sequential"`` (``demo --capacity --sequential``): the same verdicts from fewer
    measured requests, the savings in the scorecard's notes.

    Raises:
        PlanError: the plan fails validation (never with the built-in values).
    """
    from deepseekbench._engine._config import EngineConfig
    from deepseekbench._plan._embedded_plan import embedded_plan, embedded_route
    from deepseekbench._plan._tasks import smoke_tasks

    prompts = {t.id: t.prompt for t in smoke_tasks()}
    costs = {**DEMO_CAPACITY_COSTS, "eos_counted": True}
    extra: dict[str, Any] = {"stopping": {"mode": "sequential"}} if sequential else {}
    # the launched engines run without the numerics mode: their own word, declared
    declared = {"deterministic": EngineConfig().deterministic_mode}
    return embedded_plan(
        [
            embedded_route("off", "off", costs) | declared,
            embedded_route("mtp", "mtp", costs, depth=list(DEMO_CAPACITY_DEPTHS)) | declared,
            embedded_route("mtp-mistuned", "mtp", costs, depth=2, mistuned_draft=True) | declared,
        ],
        prompts=[prompts[i] for i in _DEMO_CAPACITY_PROMPT_IDS],
        max_tokens=DEMO_MAX_TOKENS,
        concurrency=list(DEMO_CAPACITY_CONCURRENCY),
        requests=DEMO_CAPACITY_REQUESTS,
        repeats=3,
        slo={"tpot_ms": DEMO_CAPACITY_SLO_TPOT_MS},
        search={"target": 0.9, "resolution": 2, "max_level": 5},
        results=results,
        **extra,
    )


async def run_demo_capacity(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The capacity demo scenario: :func:`demo_capacity_plan` run through ``run_plan``
    (which launches and stops the engines), its scorecard printed."""
    from deepseekbench._net._gate import LiveGate
    from deepseekbench._report._scorecard import Scorecard
    from deepseekbench._runner._run import run_plan

    t0 = time.perf_counter()
    path: Path = args.results
    prog = StderrProgress(err)
    try:
        result = await run_plan(
            demo_capacity_plan(sequential=getattr(args, "sequential", False)),
            gate=LiveGate(),
            results_path=path,
            progress=prog,
        )
    finally:
        prog.close()
    out.write(Scorecard.from_run(result).render(args.format))
    out.flush()
    err.write("\n")
    write_error_summary(result, err, [])
    err.write(
        f"results: {path}\n"
        f"re-render: python -m deepseekbench report {path} --best-config best.json "
        "--plot capacity.png\n"
        f"demo wall time: {time.perf_counter() - t0:.1f} s\n"
    )
    return exit_for(result)


def demo_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``demo``: the scenario the flags name, its results file chosen (a stamped name in
    the working folder without ``--results``; the main scenario's copied to
    ``DEMO_LATEST`` when it finishes)."""
    import anyio

    from deepseekbench._store._writer import recording_command

    if args.requests < 1:
        err.write("deepseekbench: --requests must be >= 1\n")
        return EXIT_USAGE
    if args.numerics and args.capacity:
        err.write("deepseekbench: demo: --numerics and --capacity are two scenarios\n")
        return EXIT_USAGE
    if getattr(args, "sequential", False) and not args.capacity:
        err.write("deepseekbench: demo: --sequential applies to --capacity only\n")
        return EXIT_USAGE
    args.latest = None
    if args.results is None:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        # each other scenario has its own file; the latest-demo copy is the main one's
        scenario = next(
            (n for n in ("capacity", "sampling", "numerics") if getattr(args, n, False)), ""
        )
        if scenario:
            stamp = f"{scenario}-{stamp}"
        args.results = Path.cwd() / f"deepseekbench-demo-{stamp}.jsonl"
        args.latest = None if scenario else results_path(Path.cwd() / DEMO_LATEST)
    args.results = results_path(args.results)
    with recording_command("demo"):  # its run_start records say a demo wrote them
        if args.numerics:
            return anyio.run(run_demo_numerics, args, out, err)
        if getattr(args, "sampling", False):
            return anyio.run(run_demo_sampling, args, out, err)
        if args.capacity:
            return anyio.run(run_demo_capacity, args, out, err)
        return anyio.run(run_demo, args, out, err)
