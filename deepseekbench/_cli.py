"""``python -m deepseekbench``: a thin argparse wrapper over the library.

Subcommands::

    demo                 three embedded engines on loopback (off, mtp, mis-tuned mtp),
                         a plan run through run_plan, the scorecard printed
    run PLAN             run a TOML/JSON plan  [--spend] [--dry-run] [--results PATH]
    report RESULTS       re-render the scorecard of a results file  [--run HASH] [--format ...]
    serve                the embedded reference engine as a server

Exit codes (also in ``docs/plan.md``):

* ``0`` — finished; refused speedups are results, not failures.
* ``1`` — finished, but some measured requests ended in an error (see ``n (err)``).
* ``2`` — usage error: bad arguments, an invalid plan, an unreadable results file.
* ``3`` — the :class:`~deepseekbench.LiveGate` refused (nothing was sent), or a
  dry run found a route the gate would refuse.
* ``130`` — interrupted (Ctrl-C); every finished measurement is in the results
  file, and rerunning the same command resumes.

Progress (done, errors, elapsed, rate) goes to stderr only when stderr is a
terminal; the scorecard goes to stdout (byte for byte what ``report`` prints for
the same results), the results path and other notes to stderr.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import anyio
from pydantic import ValidationError
from tqdm import tqdm

from deepseekbench._errors import LiveGateError, PlanError
from deepseekbench._gate import LiveGate
from deepseekbench._plan import BenchmarkPlan, ParityPlan, validation_error_lines
from deepseekbench._runner import (
    ProgressEvent,
    ResultsFormatError,
    RunResult,
    dry_run,
    grid_text,
    load_results_and_runs,
    run_plan,
)
from deepseekbench._scorecard import Scorecard
from deepseekbench._tokens import TokenizeError

__all__ = [
    "EXIT_ERRORS",
    "EXIT_GATE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "demo_plan",
    "main",
]

EXIT_OK = 0
"""Finished (refused speedups included)."""
EXIT_ERRORS = 1
"""Finished with measured requests that errored."""
EXIT_USAGE = 2
"""Bad arguments, invalid plan or unreadable results file."""
EXIT_GATE = 3
"""The LiveGate refused (or would refuse, in a dry run)."""
EXIT_INTERRUPTED = 130
"""Interrupted; results so far kept, a rerun resumes."""

FORMATS = ("text", "markdown", "json", "csv")
_FORMAT_HELP = "scorecard format on stdout (default: %(default)s)"


class _StderrProgress:
    """A tqdm progress bar on ``stream`` (done/total, errors, elapsed, rate);
    silent unless ``stream`` is a TTY."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.enabled = stream.isatty()
        self._bar: tqdm[None] | None = None

    def __call__(self, ev: ProgressEvent) -> None:
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


def build_parser() -> argparse.ArgumentParser:
    """The ``deepseekbench`` argument parser (subcommands demo, run, report, serve)."""
    parser = argparse.ArgumentParser(
        prog="deepseekbench",
        description="Benchmark speculative decoding with speed and quality parity in one run.",
        epilog="exit codes: 0 ok, 1 finished with request errors, 2 usage/plan error, "
        "3 LiveGate refusal, 130 interrupted (rerun resumes)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="run off, mtp and mis-tuned mtp on embedded loopback engines; print the scorecard",
    )
    demo.add_argument(
        "--results",
        type=Path,
        default=None,
        help="results JSONL (default: ./deepseekbench-demo-<YYYYmmdd-HHMMSS>.jsonl)",
    )
    demo.add_argument(
        "--requests",
        type=int,
        default=10,
        help="measured requests per route, >= 1, after one warm-up (default: %(default)s)",
    )
    demo.add_argument("--format", choices=FORMATS, default="text", help=_FORMAT_HELP)

    run = sub.add_parser("run", help="run a benchmark plan (TOML or JSON)")
    run.add_argument("plan", type=Path, help="plan file (.toml or .json)")
    run.add_argument(
        "--spend",
        action="store_true",
        help="allow non-loopback hosts (also needs DEEPSEEKBENCH_API_KEY or a route key)",
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

    serve = sub.add_parser("serve", help="serve the embedded reference engine on loopback")
    from deepseekbench._engine import add_serve_arguments

    add_serve_arguments(serve)
    return parser


def demo_plan(
    base_urls: Sequence[str], *, requests: int = 10, results: str | None = None
) -> BenchmarkPlan:
    """The demo's plan for three engines at ``base_urls`` (off, mtp, mis-tuned mtp).

    One cell (1k prompts, 256 output tokens, non-think), ``requests`` measured
    requests per route after one warm-up, the built-in smoke tasks as the parity
    set (4 parity requests in flight). The smoke prompts are answered with
    natural EOS (``workload.reach_max_tokens = false``): the demo measures the
    reference model's real answers, so its rows carry the short-output flag.

    Raises:
        ValueError: not exactly three base URLs.
    """
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
            "workload": {"reach_max_tokens": False},
            "requests_per_cell": requests,
            "warmup_per_cell": 1,
            "parity": ParityPlan(concurrency=4, max_tokens=96).model_dump(),
            "results": results,
        }
    )


def _exit_for(result: RunResult) -> int:
    return EXIT_ERRORS if result.n_errors else EXIT_OK


async def _demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from deepseekbench._axes import Speculative
    from deepseekbench._engine import EmbeddedEngine, EngineConfig

    t0 = time.perf_counter()
    path: Path = args.results
    configs = (
        EngineConfig(speculative=Speculative.off),
        EngineConfig(speculative=Speculative.mtp),
        EngineConfig(speculative=Speculative.mtp, mistuned_draft=True),
    )
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
    err.write(f"\nresults: {path}\n")
    err.write(f"re-render: python -m deepseekbench report {path}\n")
    err.write(f"demo wall time: {time.perf_counter() - t0:.1f} s\n")
    return _exit_for(result)


async def _run(args: argparse.Namespace, plan: BenchmarkPlan, out: TextIO, err: TextIO) -> int:
    gate = LiveGate.from_env(spend=True if args.spend else None)
    path: Path = args.results
    err.write(f"grid: {grid_text(plan)}\n")
    prog = _StderrProgress(err)
    try:
        result = await run_plan(plan, gate=gate, results_path=path, progress=prog)
    finally:
        prog.close()
    out.write(Scorecard.from_run(result).render(args.format))
    err.write(f"results: {path}\n")
    return _exit_for(result)


def _dry_run(args: argparse.Namespace, plan: BenchmarkPlan, out: TextIO, err: TextIO) -> int:
    gate = LiveGate.from_env(spend=True if args.spend else None)
    result = dry_run(plan, gate=gate)
    if args.results is not None:
        from deepseekbench._row import write_rows

        write_rows(args.results, result.rows, append=False)
        err.write(f"rows written to {args.results}\n")
    else:
        for row in result.rows:
            out.write(row.to_json_line().decode())
    err.write(
        f"dry run: plan {result.plan_hash}, {len(result.rows)} rows, "
        f"{result.n_requests} requests would be sent; no connection opened\n"
        f"  grid: {result.grid}\n"
    )
    for label, refusal in result.refusals.items():
        verdict = f"gate would refuse: {refusal}" if refusal else "admitted"
        err.write(f"  route {label}: {verdict}\n")
    return EXIT_GATE if result.refused else EXIT_OK


def _report(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    path: Path = args.results
    result, runs = load_results_and_runs(path, plan_hash=args.run)
    if args.run is None and len(runs) > 1:
        last = runs[-1]
        err.write(
            f"{path} holds {len(runs)} runs; showing the last (plan {last.plan_hash}, "
            f"started {last.started_at}); pass --run HASH to choose\n"
        )
        for r in runs:
            err.write(f"  plan {r.plan_hash}  started {r.started_at}\n")
    out.write(Scorecard.from_run(result).render(args.format))
    return EXIT_OK


def _with_client_flags(plan: BenchmarkPlan, args: argparse.Namespace) -> BenchmarkPlan:
    """``plan`` with ``--workers``/``--executor``/``--ray-address`` applied (validated).

    Raises:
        PlanError: a flag's value is invalid (e.g. ``--workers 0``).
    """
    given = {"workers": args.workers, "executor": args.executor, "ray_address": args.ray_address}
    update = {k: v for k, v in given.items() if v is not None}
    if not update:
        return plan
    return BenchmarkPlan.from_mapping({**plan.model_dump(mode="json"), **update})


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
    try:
        if args.command == "demo":
            if args.requests < 1:
                err.write("deepseekbench: --requests must be >= 1\n")
                return EXIT_USAGE
            if args.results is None:
                stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
                args.results = Path.cwd() / f"deepseekbench-demo-{stamp}.jsonl"
            args.results = args.results.resolve()
            return anyio.run(_demo, args, out, err)
        if args.command == "run":
            plan = _with_client_flags(BenchmarkPlan.load(args.plan), args)
            if args.dry_run:
                return _dry_run(args, plan, out, err)
            if args.results is None:
                args.results = plan.results_path() or (
                    Path.cwd() / f"deepseekbench-results-{plan.plan_hash()}.jsonl"
                )
            args.results = args.results.resolve()
            return anyio.run(_run, args, plan, out, err)
        if args.command == "report":
            return _report(args, out, err)
        if args.command == "serve":
            from deepseekbench._engine import config_from_args, serve

            config = config_from_args(args)
            try:
                anyio.run(lambda: serve(config, args.host, args.port))
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
    except ValidationError as exc:
        err.write(f"deepseekbench: invalid {exc.title}:\n")
        err.writelines(f"  {line}\n" for line in validation_error_lines(exc))
        return EXIT_USAGE
    except (PlanError, ResultsFormatError, TokenizeError) as exc:
        err.write(f"deepseekbench: {exc}\n")
        return EXIT_USAGE
    except OSError as exc:
        err.write(f"deepseekbench: {exc}\n")
        return EXIT_USAGE
