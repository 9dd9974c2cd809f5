"""``python -m deepseekbench``: a thin argparse wrapper over the library.

Subcommands::

    demo                 three embedded engines on loopback (off, mtp, mis-tuned mtp),
                         a concurrency sweep run through run_plan, the scorecard printed
                         [--numerics] [--capacity: launched depth grid, capacity under SLO]
    run PLAN             run a TOML/JSON plan  [--spend] [--dry-run] [--results PATH]
                         [--max-requests N] [--max-output-tokens N: the run's budgets]
    report RESULTS       re-render the scorecard of a results file  [--run HASH] [--format ...]
    serve                the embedded reference engine as a server
    --version            the installed version (package metadata)

Exit codes (also in ``docs/plan.md``):

* ``0`` — finished; refused speedups are results, not failures.
* ``1`` — finished, but some measured requests ended in an error (see ``n (err)``).
* ``2`` — usage error: bad arguments, an invalid plan, a route that failed the
  reachability probe (``--no-probe`` skips it), a launched engine that did not
  start (the end of its log is printed), an unreadable results file,
  ``report --plot`` without the ``plot`` extra.
* ``3`` — the :class:`~deepseekbench.LiveGate` refused (nothing was sent), or a
  dry run found a route the gate would refuse (a launch that would listen beyond
  loopback included).
* ``130`` — interrupted (Ctrl-C); every finished measurement is in the results
  file, and rerunning the same command resumes.

A budget (``run --max-requests N``, ``--max-output-tokens N``) spent mid-run exits 3
too, once every request it admitted finished and was recorded; the refused ones are
recorded unsent (``budget_refused``) and a rerun resumes them.

Progress (done, errors, elapsed, rate) goes to stderr only when stderr is a
terminal; the scorecard goes to stdout (byte for byte what ``report`` prints for
the same results), the results path and other notes to stderr.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import html
import io
import json
import os
import shlex
import shutil
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from deepseekbench._errors import (
    CalibrationError,
    KeyFormatError,
    LiveGateError,
    MissingExtraError,
    PlanError,
    ResultsFormatError,
    ResultsWriteError,
    RowFormatError,
    ServerError,
    TokenizeError,
)
from deepseekbench._report._formats import FORMAT_NAMES

if TYPE_CHECKING:
    from tqdm import tqdm

    from deepseekbench._net._gate import LiveGate
    from deepseekbench._plan._plan import BenchmarkPlan
    from deepseekbench._runner import DryRunResult, ProgressEvent, RunResult

__all__ = [
    "DEMO_CAPACITY_CONCURRENCY",
    "DEMO_CAPACITY_COSTS",
    "DEMO_CAPACITY_DEPTHS",
    "DEMO_CAPACITY_SLO_TPOT_MS",
    "DEMO_COMPUTE_MS_PER_TOKEN",
    "DEMO_CONCURRENCY",
    "DEMO_DRAFT_DEPTH",
    "DEMO_LATEST",
    "DEMO_MAX_TOKENS",
    "DEMO_PROMPT_IDS",
    "DEMO_REQUESTS",
    "EXIT_ERRORS",
    "EXIT_GATE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "demo_capacity_plan",
    "demo_plan",
    "main",
    "package_version",
]

EXIT_OK = 0
"""Finished (refused speedups included)."""
EXIT_ERRORS = 1
"""Finished with measured requests that errored, or stopped at a calibration pass
whose requests errored (``CalibrationError``, issue 23; a rerun resumes it)."""
EXIT_USAGE = 2
"""Bad arguments, invalid plan, a launched engine that did not start, or an unreadable
results file."""
EXIT_GATE = 3
"""The LiveGate refused (or would refuse, in a dry run)."""
EXIT_INTERRUPTED = 130
"""Interrupted; results so far kept, a rerun resumes."""

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
(issue 23: no workload item left unsent; all 16 would double the demo's time)."""
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

FORMATS = FORMAT_NAMES  # the format registry's names
_FORMAT_HELP = "scorecard format on stdout (default: %(default)s)"


class _StderrProgress:
    """A tqdm progress bar on ``stream`` (done/total, errors, elapsed, rate);
    silent unless ``stream`` is a TTY, except for one line at the start of a resumed
    run (measured requests kept from the results file and still to do)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.enabled = stream.isatty()
        self._bar: tqdm[None] | None = None

    def __call__(self, ev: ProgressEvent) -> None:
        from tqdm import tqdm

        if ev.phase == "resume":
            self.stream.write(
                f"resumed: {ev.kept} measured request(s) kept from the results file, "
                f"{ev.remaining} to do\n"
            )
            self.stream.flush()
        if not self.enabled:
            return
        if self._bar is None:
            self._bar = tqdm(
                total=ev.total, file=self.stream, unit="req", dynamic_ncols=True, leave=True
            )
        bar = self._bar
        bar.total = ev.total
        bar.set_description_str(ev.phase[:40], refresh=False)
        bar.set_postfix_str(f"{ev.errors} errors", refresh=False)
        bar.update(ev.done - bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _budget(text: str) -> int:
    """A budget flag's value: an integer >= 0 (argparse exits 2 otherwise)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def _gate(args: argparse.Namespace) -> LiveGate:
    """The gate of ``run``: key and spend from the environment and ``--spend``, budgets
    from ``--max-requests`` and ``--max-output-tokens``.

    Raises:
        KeyFormatError: ``DEEPSEEKBENCH_API_KEY`` has a character a header cannot carry.
    """
    from deepseekbench._net._gate import LiveGate

    return LiveGate.from_env(
        spend=True if args.spend else None,
        max_requests=args.max_requests,
        max_output_tokens=args.max_output_tokens,
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``deepseekbench`` argument parser (subcommands demo, run, report, serve)."""
    parser = argparse.ArgumentParser(
        prog="deepseekbench",
        description="Benchmark speculative decoding with speed and quality parity in one run.",
        epilog="exit codes: 0 ok, 1 finished with request errors, 2 usage/plan error "
        "(or a route failed the reachability probe), "
        "3 LiveGate refusal, 130 interrupted (rerun resumes)",
    )
    parser.add_argument(
        "--version",
        action="store_true",
        help="print the installed deepseekbench version (package metadata) and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="run off, mtp and mis-tuned mtp on embedded loopback engines at concurrency "
        "1, 2 and 8; print the scorecard and the crossover",
    )
    demo.add_argument(
        "--results",
        type=Path,
        default=None,
        help="results JSONL (default: ./deepseekbench-demo-<YYYYmmdd-HHMMSS>.jsonl, "
        f"copied to ./{DEMO_LATEST} when the demo finishes)",
    )
    demo.add_argument(
        "--requests",
        type=int,
        default=DEMO_REQUESTS,
        help="measured requests per route and load point, >= 1, after one warm-up "
        "(default: %(default)s)",
    )
    demo.add_argument("--format", choices=FORMATS, default="text", help=_FORMAT_HELP)
    demo.add_argument(  # issue 21
        "--numerics",
        action="store_true",
        help="the numerics scenario: off and mtp engines whose verify passes flip near-ties, "
        "and the mis-tuned mtp; one run judged under parity.exact = bit_exact, then "
        "within_noise (the same results file, nothing measured twice)",
    )
    demo.add_argument(  # issue 24
        "--capacity",
        action="store_true",
        help="the capacity scenario: off, mtp at depths 1, 2 and 4 and the mis-tuned mtp, "
        "each launched from the plan; concurrency 1 and 5 and a [search] for the capacity "
        "under a TPOT SLO; prints the best depth per load and each route's capacity "
        "(--requests applies to the main scenario only)",
    )

    run = sub.add_parser("run", help="run a benchmark plan (TOML or JSON)")
    run.add_argument("plan", type=Path, help="plan file (.toml or .json)")
    run.add_argument(
        "--spend",
        action="store_true",
        help="allow non-loopback hosts (also needs DEEPSEEKBENCH_API_KEY or a route key)",
    )
    run.add_argument(
        "--max-requests",
        type=_budget,
        default=None,
        metavar="N",
        help="the run's request budget: the gate admits at most N requests (probes, parity, "
        "scrapes included); once spent the run stops with exit 3, keeping every request it "
        "admitted and recording the refused ones as budget_refused (a rerun resumes them)",
    )
    run.add_argument(
        "--max-output-tokens",
        type=_budget,
        default=None,
        metavar="N",
        help="the run's output-token budget (tokens charged after each request); spent as "
        "--max-requests",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="validate, list the rows it would measure and what the gate would refuse; "
        "open no connection",
    )
    run.add_argument(
        "--results",
        type=Path,
        default=None,
        help="results JSONL path (default: the plan's 'results', else "
        "./deepseekbench-results-<plan hash>.jsonl)",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=None,
        help="client workers sending each block, 1-256 (default: the plan's 'workers', else 1)",
    )
    run.add_argument(
        "--executor",
        choices=["process", "ray"],
        default=None,
        help="where the workers run: processes on this host or Ray actors "
        "(default: the plan's 'executor', else process)",
    )
    run.add_argument(
        "--ray-address",
        default=None,
        help="an existing Ray cluster's address (default: the plan's, else a local "
        "instance on 127.0.0.1)",
    )
    run.add_argument("--format", choices=FORMATS, default="text", help=_FORMAT_HELP)
    run.add_argument(
        "--no-probe",
        action="store_true",
        help="skip the reachability probe (one GET /models per route before measuring; "
        "default: the plan's 'probe_routes', else on)",
    )
    run.add_argument(
        "--no-retry-errors",
        action="store_true",
        help="on resume, keep measurements that ended in an error (default: measure them again)",
    )

    report = sub.add_parser("report", help="re-render the scorecard of a results file")
    report.add_argument("results", type=Path, help="results JSONL written by run or demo")
    report.add_argument(
        "--run",
        metavar="HASH",
        default=None,
        help="the plan hash (or a prefix) of the run to show when the file holds "
        "several (default: the last)",
    )
    report.add_argument("--format", choices=FORMATS, default="text", help=_FORMAT_HELP)
    report.add_argument(
        "--plot",
        metavar="PATH",
        type=Path,
        default=None,
        help="also draw speedup vs load and TPOT vs output throughput per route to PATH "
        "(.png, .svg or .pdf; needs: pip install 'deepseekbench[plot]')",
    )
    report.add_argument(  # issue 24: the depth grid's choice per load
        "--best-config",
        metavar="PATH",
        type=Path,
        default=None,
        help="also write the best configuration per load of each depth grid to PATH (JSON)",
    )

    serve = sub.add_parser("serve", help="serve the embedded reference engine on loopback")
    from deepseekbench._engine import add_serve_arguments

    add_serve_arguments(serve)
    return parser


def demo_plan(
    base_urls: Sequence[str], *, requests: int = DEMO_REQUESTS, results: str | None = None
) -> BenchmarkPlan:
    """The demo's plan for three engines at ``base_urls`` (off, mtp, mis-tuned mtp).

    One cell (1k prompts, 256 output tokens capped at ``DEMO_MAX_TOKENS``,
    non-think) swept over closed-loop concurrency ``DEMO_CONCURRENCY``;
    ``requests`` measured requests per route and load point after one warm-up,
    in the plan's default rounds; the built-in smoke tasks as the parity set
    (8 parity requests in flight, the same output cap). The engines behind the
    URLs are the caller's; ``python -m deepseekbench demo`` starts ``off`` and
    mtp with ``DEMO_DRAFT_DEPTH`` draft tokens (plain and mis-tuned) on a cost
    model with ``DEMO_COMPUTE_MS_PER_TOKEN``.
    The speed workload is the prompts of the smoke tasks in ``DEMO_PROMPT_IDS`` (8,
    each sent once a round), answered at their natural length
    (``workload.output_length = "pinned"``, the default: a calibration pass on
    ``off`` finds each answer's length and every route decodes exactly that), so
    the demo measures the reference model's real answers and no token past EOS.

    Raises:
        ValueError: not exactly three base URLs.
    """
    from deepseekbench._plan._plan import BenchmarkPlan, ParityPlan
    from deepseekbench._plan._tasks import smoke_tasks

    if len(base_urls) != 3:
        raise ValueError("demo_plan needs three base URLs (off, mtp, mis-tuned mtp)")
    off, mtp, bad = base_urls
    return BenchmarkPlan.model_validate(
        {
            "model": "deepseekbench-ref",
            "provider_route": "local",
            "engine_route": "embedded",
            "hosting": "embedded",
            "routes": [
                {"label": "off", "speculative": "off", "base_url": off, "dialect": "vllm"},
                {"label": "mtp", "speculative": "mtp", "base_url": mtp, "dialect": "vllm"},
                {
                    "label": "mtp-mistuned",
                    "speculative": "mtp",
                    "base_url": bad,
                    "dialect": "vllm",
                },
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


def _known_secrets(plan: BenchmarkPlan) -> list[str]:
    """The keys this process knows for ``plan``: the gate's and each route's (from the env)."""
    from deepseekbench._net._gate import ENV_API_KEY

    names = [ENV_API_KEY, *(r.api_key_env for r in plan.routes if r.api_key_env)]
    return [v for n in names if (v := os.environ.get(n)) and v.strip()]


def _redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every known secret replaced by ``***`` (older results files included):
    the one redaction, :func:`deepseekbench._types._secrets.redact`."""
    from deepseekbench._types._secrets import redact

    return redact(text, secrets)


def _exit_for(result: RunResult) -> int:
    return EXIT_ERRORS if result.n_errors else EXIT_OK


async def _demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from deepseekbench._engine import CostModel, EmbeddedEngine, EngineConfig
    from deepseekbench._net._gate import LiveGate
    from deepseekbench._report._scorecard import Scorecard
    from deepseekbench._runner import run_plan
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
    prog = _StderrProgress(err)
    async with (
        EmbeddedEngine(configs[0]) as e_off,
        EmbeddedEngine(configs[1]) as e_mtp,
        EmbeddedEngine(configs[2]) as e_bad,
    ):
        plan = demo_plan([e_off.base_url, e_mtp.base_url, e_bad.base_url], requests=args.requests)
        try:
            result = await run_plan(plan, gate=LiveGate(), results_path=path, progress=prog)
        finally:
            prog.close()
    card = Scorecard.from_run(result)
    out.write(card.render(args.format))
    out.flush()
    err.write("\n")
    _write_error_summary(result, err, [])
    err.write(f"results: {path}\n")
    latest: Path | None = args.latest
    if latest is not None and latest != path:
        partial = latest.with_name(latest.name + ".partial")
        shutil.copyfile(path, partial)
        os.replace(partial, latest)  # a reader never sees half a copy
        err.write(f"latest demo results (a copy): {latest}\n")
    err.write(f"re-render: python -m deepseekbench report {path}\n")
    err.write(f"demo wall time: {time.perf_counter() - t0:.1f} s\n")
    return _exit_for(result)


DEMO_NUMERICS_REQUESTS = 8
"""Issue 21's scenario: measured requests per route at concurrency 4 (one load point)."""


async def _demo_numerics(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Issue 21's demo scenario: ``off`` and ``mtp`` in the embedded engine's numerics mode
    (verify passes flip near-ties, docs/engine.md) and the mis-tuned mtp, measured once,
    then judged under ``parity.exact = "bit_exact"`` and ``"within_noise"`` (an analysis
    key: the second run resumes the same results file and sends nothing new)."""
    from deepseekbench._engine import CostModel, EmbeddedEngine, EngineConfig
    from deepseekbench._net._gate import LiveGate
    from deepseekbench._plan._plan import BenchmarkPlan
    from deepseekbench._plan._tasks import smoke_tasks
    from deepseekbench._report._scorecard import Scorecard
    from deepseekbench._runner import run_plan
    from deepseekbench._types._axes import Speculative

    t0 = time.perf_counter()
    cost = CostModel(compute_ms_per_token=DEMO_COMPUTE_MS_PER_TOKEN)
    off = EngineConfig(cost=cost, numerics=True)
    mtp = off.model_copy(update={"speculative": Speculative.mtp, "draft_depth": DEMO_DRAFT_DEPTH})
    bad = mtp.model_copy(update={"numerics": False, "mistuned_draft": True})
    async with EmbeddedEngine(off) as e0, EmbeddedEngine(mtp) as e1, EmbeddedEngine(bad) as e2:
        urls = [e0.base_url, e1.base_url, e2.base_url]
        data = demo_plan(urls, requests=DEMO_NUMERICS_REQUESTS).model_dump(mode="json")
        data["arrival"]["concurrency"] = [4]
        data["workload"]["output_length"] = "forced"  # near-ties live in long outputs
        # the first 8 smoke prompts (the scenario as it was measured for issue 21): the
        # embedded off never flips against itself, so the rate test's verdict depends on
        # how many near-ties the sample meets (docs/engine.md, "Numerics mode")
        data["workload"]["prompts"] = [t.prompt for t in smoke_tasks()[:DEMO_NUMERICS_REQUESTS]]
        data["cells"][0]["max_tokens"] = 256
        for exact in ("bit_exact", "within_noise"):
            data["parity"]["exact"] = exact
            judged = BenchmarkPlan.model_validate(data)
            prog = _StderrProgress(err)
            try:
                result = await run_plan(
                    judged, gate=LiveGate(), results_path=args.results, progress=prog
                )
            finally:
                prog.close()
            out.write(f"\n== parity.exact = {exact!r} ==\n")
            out.write(Scorecard.from_run(result).render(args.format))
    out.flush()
    err.write(f"\nresults: {args.results}\ndemo wall time: {time.perf_counter() - t0:.1f} s\n")
    return _exit_for(result)


# issue 24: `demo --capacity`, engines launched from the plan, the depth grid, [search]
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


def demo_capacity_plan(*, results: str | None = None) -> BenchmarkPlan:
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
    capacity to ``off``'s (docs/plan.md).

    Raises:
        PlanError: the plan fails validation (never with the built-in values).
    """
    from deepseekbench._plan._plan import BenchmarkPlan
    from deepseekbench._plan._tasks import smoke_tasks

    prompts = {t.id: t.prompt for t in smoke_tasks()}

    def route(label: str, speculative: str, depth: object = None, **args: object) -> object:
        engine_args = {**DEMO_CAPACITY_COSTS, "eos_counted": True, **args}
        launch: dict[str, object] = {"engine": "embedded", "engine_args": engine_args}
        if depth is not None:
            launch["spec_tokens"] = depth
        return {"label": label, "speculative": speculative, "dialect": "vllm", "launch": launch}

    return BenchmarkPlan.from_mapping(
        {
            "model": "deepseekbench-ref",
            "provider_route": "local",
            "engine_route": "embedded",
            "hosting": "embedded",
            "routes": [
                route("off", "off"),
                route("mtp", "mtp", list(DEMO_CAPACITY_DEPTHS)),
                route("mtp-mistuned", "mtp", 2, mistuned_draft=True),
            ],
            "workload": {"prompts": [prompts[i] for i in _DEMO_CAPACITY_PROMPT_IDS]},
            "requests_per_cell": DEMO_CAPACITY_REQUESTS,
            "warmup_per_cell": 0,
            "repeats": 3,
            "cells": [{"max_tokens": DEMO_MAX_TOKENS}],
            "arrival": {"mode": "concurrency", "concurrency": list(DEMO_CAPACITY_CONCURRENCY)},
            "parity": {"concurrency": 16, "max_tokens": DEMO_MAX_TOKENS},
            "slo": {"tpot_ms": DEMO_CAPACITY_SLO_TPOT_MS},
            "search": {"target": 0.9, "resolution": 2, "max_level": 5},
            "results": results,
        }
    )


async def _demo_capacity(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Issue 24's demo scenario: :func:`demo_capacity_plan` run through ``run_plan``
    (which launches and stops the engines), its scorecard printed."""
    from deepseekbench._net._gate import LiveGate
    from deepseekbench._report._scorecard import Scorecard
    from deepseekbench._runner import run_plan

    t0 = time.perf_counter()
    path: Path = args.results
    prog = _StderrProgress(err)
    try:
        result = await run_plan(
            demo_capacity_plan(), gate=LiveGate(), results_path=path, progress=prog
        )
    finally:
        prog.close()
    out.write(Scorecard.from_run(result).render(args.format))
    out.flush()
    err.write("\n")
    _write_error_summary(result, err, [])
    err.write(
        f"results: {path}\n"
        f"re-render: python -m deepseekbench report {path} --best-config best.json "
        "--plot capacity.png\n"
        f"demo wall time: {time.perf_counter() - t0:.1f} s\n"
    )
    return _exit_for(result)


async def _run(args: argparse.Namespace, plan: BenchmarkPlan, out: TextIO, err: TextIO) -> int:
    from deepseekbench._report._scorecard import Scorecard
    from deepseekbench._runner import grid_text, run_plan

    gate = _gate(args)
    path: Path = args.results
    err.write(f"grid: {grid_text(plan)}\n")
    prog = _StderrProgress(err)
    retry = not args.no_retry_errors
    try:
        result = await run_plan(
            plan, gate=gate, results_path=path, progress=prog, retry_errors=retry
        )
    finally:
        prog.close()
    secrets = _known_secrets(plan)
    out.write(_redact(Scorecard.from_run(result).render(args.format), secrets))
    if result.retried:
        err.write(
            f"resumed: {result.retried} errored measurement(s) of the earlier run were "
            f"measured again (--no-retry-errors keeps them)\n"
        )
    elif not retry and result.resumed and result.n_errors:
        err.write("resumed: errored measurements were kept (--no-retry-errors)\n")
    _write_error_summary(result, err, secrets)
    err.write(f"results: {path}\n")
    return _exit_for(result)


def _write_error_summary(result: RunResult, err: TextIO, secrets: Sequence[str]) -> None:
    """Per route: each error kind, how many requests it ended, and its first message."""
    summary = result.error_summary()
    if not summary:
        return
    err.write("request errors by route (kind × count: first message):\n")
    for e in summary:
        from deepseekbench._types._secrets import safe_server_text

        message = safe_server_text(e.first_message, secrets)  # a server's words: no escapes
        err.write(f"  {e.route}: {e.kind} × {e.count}: {message[:200]}\n")


_DRY_COLUMNS = ("route", "speculative", "cell", "load", "gate")


def _dry_table(result: DryRunResult) -> list[dict[str, str]]:
    from deepseekbench._report._scorecard import cell_id, load_point

    out: list[dict[str, str]] = []
    for row in result.rows:
        label = row.route_label or row.speculative.value
        refusal = result.refusals.get(label)
        lp = load_point(row)
        out.append(
            {
                "route": label,
                "speculative": row.speculative.value,
                "cell": cell_id(row),
                "load": lp.label if lp is not None else "—",
                "gate": f"would refuse: {refusal}" if refusal else "admitted",
            }
        )
    return out


def _render_dry_run(result: DryRunResult, fmt: str) -> str:
    """The rows a dry run would measure, in ``fmt`` (text, markdown, json, csv or html:
    a self-contained page, as ``report --format html``)."""
    if fmt == "json":
        data = {
            "plan_hash": result.plan_hash,
            "n_requests": result.n_requests,
            "refusals": result.refusals,
            "launch_commands": result.launch_commands,
            "launch_env": result.launch_env,
            "rows": [row.model_dump(mode="json") for row in result.rows],
        }
        return json.dumps(data, indent=2) + "\n"
    table = _dry_table(result)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=_DRY_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
        return buf.getvalue()
    if fmt == "html":
        from deepseekbench._report._plot import html_page
        from deepseekbench._report._scorecard import html_table

        rows = [[r[c] for c in _DRY_COLUMNS] for r in table]
        summary = (
            f"<p>plan {html.escape(result.plan_hash)}: {len(result.rows)} rows, "
            f"{result.n_requests} requests would be sent; no connection opened</p>"
        )
        return html_page(
            summary + html_table(_DRY_COLUMNS, rows), None, title="deepseekbench dry run"
        )
    if fmt == "markdown":
        lines = ["| " + " | ".join(_DRY_COLUMNS) + " |", "|" + "---|" * len(_DRY_COLUMNS)]
        lines += ["| " + " | ".join(r[c] for c in _DRY_COLUMNS) + " |" for r in table]
        return "\n".join(lines) + "\n"
    widths = {c: max([len(c), *(len(r[c]) for r in table)]) for c in _DRY_COLUMNS}
    lines = ["  ".join(c.ljust(widths[c]) for c in _DRY_COLUMNS).rstrip()]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in _DRY_COLUMNS).rstrip() for r in table]
    return "\n".join(lines) + "\n"


def _holds_results(path: Path) -> bool:
    """True when ``path`` is a non-empty file that is not only rows of an earlier dry run
    (a device, pipe or folder counts as holding results: it is never written; so do
    measured rows, e.g. rows exported from a run)."""
    from deepseekbench._types._row import read_rows

    if path.exists() and not path.is_file():
        return True
    try:
        if path.stat().st_size == 0:
            return False
    except FileNotFoundError:
        return False
    try:
        rows = read_rows(path)
    except (RowFormatError, OSError):
        return True
    return any(r.n_requests > 0 or not (r.parity_detail or "").startswith("dry run") for r in rows)


def _dry_run(args: argparse.Namespace, plan: BenchmarkPlan, out: TextIO, err: TextIO) -> int:
    from deepseekbench._plan._coverage import WorkloadCoverageWarning
    from deepseekbench._runner import dry_run
    from deepseekbench._types._row import write_rows

    gate = _gate(args)
    with warnings.catch_warnings():  # issue 23: said once, below, with the counts
        warnings.simplefilter("ignore", WorkloadCoverageWarning)
        result = dry_run(plan, gate=gate)
    if args.results is not None:
        if _holds_results(args.results):
            err.write(
                f"deepseekbench: {args.results} holds results (not rows of a dry run): a dry "
                f"run never overwrites them; pass another --results path\n"
            )
            return EXIT_USAGE
        write_rows(args.results, result.rows, append=False)
        err.write(f"rows written to {args.results}\n")
    else:
        out.write(_render_dry_run(result, args.format))
    err.write(
        f"dry run: plan {result.plan_hash}, {len(result.rows)} rows, "
        f"{result.n_requests} requests would be sent; no connection opened\n"
        f"  grid: {result.grid}\n"
    )
    for label, refusal in result.refusals.items():
        verdict = f"gate would refuse: {refusal}" if refusal else "admitted"
        err.write(f"  route {label}: {verdict}\n")
    for label, argv in result.launch_commands.items():  # a launch runs a program
        names = ", ".join(result.launch_env.get(label, ())) or "none"
        err.write(f"  route {label} launches: {shlex.join(argv)}\n    env set: {names}\n")
    if result.ray_address is not None:
        verdict = f"gate would refuse: {result.ray_refusal}" if result.ray_refusal else "admitted"
        err.write(f"  ray cluster {result.ray_address}: {verdict}\n")
    for warning in result.warnings:  # issue 23: workload items that would go unsent
        err.write(f"  warning: {warning}\n")
    return EXIT_GATE if result.refused else EXIT_OK


def _report(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from deepseekbench._report._plot import require_matplotlib
    from deepseekbench._report._scorecard import Scorecard
    from deepseekbench._runner import load_results_and_runs
    from deepseekbench._store._chain import ResultsIntegrityWarning

    path: Path = args.results
    if args.plot is not None:
        try:  # before anything is printed: the scorecard alone is not what was asked for
            require_matplotlib()
        except MissingExtraError as exc:
            err.write(f"deepseekbench: --plot: {exc}\n")
            return EXIT_USAGE
    with warnings.catch_warnings():  # said once below, without a source line
        warnings.simplefilter("ignore", ResultsIntegrityWarning)
        result, runs = load_results_and_runs(path, plan_hash=args.run)
    if result.results_tampered and result.integrity is not None:
        err.write(f"deepseekbench: {path}: {result.integrity.describe()}\n")
    if args.run is None and len(runs) > 1:
        last = runs[-1]
        err.write(
            f"{path} holds {len(runs)} runs; showing the last (plan {last.plan_hash}, "
            f"started {last.started_at}); pass --run HASH to choose\n"
        )
        for r in runs:
            err.write(f"  plan {r.plan_hash}  started {r.started_at}\n")
    secrets = _known_secrets(result.plan)
    card = Scorecard.from_run(result)
    out.write(_redact(card.render(args.format), secrets))
    _write_error_summary(result, err, secrets)
    if not result.complete:
        err.write(
            f"{path}: this run did not finish (no run_end record): rows hold only what was "
            "measured; rerun the same `run` command to resume it\n"
        )
    if args.best_config is not None:  # issue 24
        args.best_config.write_text(card.best_config_json() + "\n", encoding="utf-8")
        err.write(f"best configuration per load: {args.best_config}\n")
    if args.plot is not None:
        try:
            card.plot(args.plot)
        except (MissingExtraError, ValueError) as exc:
            err.write(f"deepseekbench: {exc}\n")
            return EXIT_USAGE
        err.write(f"plot: {args.plot}\n")
    return EXIT_OK


def package_version() -> str:
    """The installed distribution's version (``importlib.metadata``); in a source
    checkout that is not installed, ``deepseekbench.__version__`` (the same string as
    ``pyproject.toml``'s ``version``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("deepseekbench")
    except PackageNotFoundError:  # the package (this module's parent) is loaded already
        return str(getattr(sys.modules["deepseekbench"], "__version__", "unknown"))


def _with_client_flags(plan: BenchmarkPlan, args: argparse.Namespace) -> BenchmarkPlan:
    """``plan`` with ``--workers``/``--executor``/``--ray-address``/``--no-probe`` applied
    (validated).

    Raises:
        PlanError: a flag's value is invalid (e.g. ``--workers 0``).
    """
    from deepseekbench._plan._plan import BenchmarkPlan

    given = {
        "workers": args.workers,
        "executor": args.executor,
        "ray_address": args.ray_address,
        "probe_routes": False if args.no_probe else None,
    }
    update = {k: v for k, v in given.items() if v is not None}
    if not update:
        return plan
    return BenchmarkPlan.from_mapping({**plan.model_dump(mode="json"), **update})


def _results_path(path: Path) -> Path:
    """``path`` made absolute with its symlinks resolved: the results file's path.

    Raises:
        ResultsWriteError: the path cannot be resolved, e.g. a symlink loop (Python
            3.11 raises ``RuntimeError`` for one, later versions ``OSError``).
    """
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:
        raise ResultsWriteError(f"results path {path}: cannot be resolved ({exc})") from None


def main(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run the CLI; returns the exit code (see the module docstring)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    if args.version:
        out.write(f"deepseekbench {package_version()}\n")
        return EXIT_OK
    with _warnings_as_lines(err):
        return _command(parser, args, out, err)


@contextmanager
def _warnings_as_lines(err: TextIO) -> Iterator[None]:
    """The library's own warnings (:class:`~deepseekbench.WorkloadCoverageWarning`) as one
    clean line each on ``err`` (``deepseekbench: warning: ...``), not Python's
    ``path:line: Category: message`` form; other warnings print as Python prints them.
    Library callers still get ``warnings.warn`` of the named category."""
    from deepseekbench._plan._coverage import WorkloadCoverageWarning

    python_show = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, WorkloadCoverageWarning):
            err.write(f"deepseekbench: warning: {message}\n")
        else:
            python_show(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():  # restores showwarning on the way out
        warnings.showwarning = show
        yield


def _command(
    parser: argparse.ArgumentParser, args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    """The parsed command, run; its exit code (see the module docstring)."""
    # the stages load only now, so that --help and usage errors stay fast
    import anyio
    from pydantic import ValidationError

    from deepseekbench._plan._plan import BenchmarkPlan, validation_error_lines

    try:
        if args.command == "demo":
            if args.requests < 1:
                err.write("deepseekbench: --requests must be >= 1\n")
                return EXIT_USAGE
            if args.numerics and args.capacity:  # issue 24
                err.write("deepseekbench: demo: --numerics and --capacity are two scenarios\n")
                return EXIT_USAGE
            args.latest = None
            if args.results is None:
                stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
                if args.capacity:  # issue 24: its own file; the latest-demo copy is the main one's
                    stamp = f"capacity-{stamp}"
                args.results = Path.cwd() / f"deepseekbench-demo-{stamp}.jsonl"
                args.latest = None if args.capacity else _results_path(Path.cwd() / DEMO_LATEST)
            args.results = _results_path(args.results)
            if args.numerics:  # issue 21
                return anyio.run(_demo_numerics, args, out, err)
            if args.capacity:  # issue 24
                return anyio.run(_demo_capacity, args, out, err)
            return anyio.run(_demo, args, out, err)
        if args.command == "run":
            plan = _with_client_flags(BenchmarkPlan.load(args.plan), args)
            if args.dry_run:
                return _dry_run(args, plan, out, err)
            if args.results is None:
                args.results = plan.results_path() or (
                    Path.cwd() / f"deepseekbench-results-{plan.plan_hash()}.jsonl"
                )
            args.results = _results_path(args.results)
            return anyio.run(_run, args, plan, out, err)
        if args.command == "report":
            return _report(args, out, err)
        if args.command == "serve":
            from deepseekbench._engine import config_from_args, serve
            from deepseekbench._engine._embedded import is_loopback_host

            config = config_from_args(args)
            if not args.allow_non_loopback and not is_loopback_host(args.host):
                err.write(
                    f"deepseekbench: serve --host {args.host} is not a loopback address; the "
                    "embedded engine has no authentication: pass --allow-non-loopback to "
                    "serve it beyond this machine\n"
                )
                return EXIT_USAGE
            allow = bool(args.allow_non_loopback)
            try:
                anyio.run(lambda: serve(config, args.host, args.port, allow_non_loopback=allow))
            except KeyboardInterrupt:
                return EXIT_OK
            return EXIT_OK
        parser.print_help(err)
        return EXIT_USAGE
    except KeyboardInterrupt:
        err.write(
            "\ninterrupted: finished measurements are kept in the results file; "
            "rerun the same command to resume\n"
        )
        return EXIT_INTERRUPTED
    except LiveGateError as exc:
        err.write(f"deepseekbench: {exc}\n")
        return EXIT_GATE
    except ServerError as exc:  # a launched engine did not start (secrets redacted)
        from deepseekbench._types._secrets import printable

        err.write(f"deepseekbench: {printable(str(exc), keep_newlines=True)}\n")
        return EXIT_USAGE
    except CalibrationError as exc:  # issue 23: off gave no natural length; rerun resumes
        err.write(f"deepseekbench: {exc}\n")
        return EXIT_ERRORS
    except ValidationError as exc:
        err.write(f"deepseekbench: invalid {exc.title}:\n")
        err.writelines(f"  {line}\n" for line in validation_error_lines(exc))
        return EXIT_USAGE
    except (PlanError, ResultsFormatError, TokenizeError, KeyFormatError) as exc:
        err.write(f"deepseekbench: {exc}\n")
        return EXIT_USAGE
    except OSError as exc:
        err.write(f"deepseekbench: {exc}\n")
        return EXIT_USAGE
