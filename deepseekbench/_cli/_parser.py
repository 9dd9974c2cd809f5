"""The command line's argument parser: ``deepseekbench`` and its subcommands.

Holds :func:`build_parser` (the sub-commands of
:data:`~deepseekbench._cli._subcommands.SUBCOMMANDS`, each one's arguments added only
when asked for), ``FORMATS`` (the scorecard formats
``--format`` offers), the ``demo``, ``run`` and ``report`` argument adders and the
budget flags' value check.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection
from pathlib import Path

from deepseekbench._cli._subcommands import SUBCOMMANDS, AddArguments, load
from deepseekbench._report._formats import FORMAT_NAMES

__all__ = [
    "FORMATS",
    "add_demo_arguments",
    "add_report_arguments",
    "add_run_arguments",
    "build_parser",
]

FORMATS = FORMAT_NAMES  # the format registry's names
_FORMAT_HELP = "scorecard format on stdout (default: %(default)s)"


def _budget(text: str) -> int:
    """A budget flag's value: an integer >= 0 (argparse exits 2 otherwise)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def _workers(text: str) -> int | str:
    """``--workers``: an integer (the plan checks 1..256) or ``auto``."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer or 'auto': {text!r}") from None


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The ``deepseekbench`` argument parser: every sub-command of the table, with the
    arguments of those in ``commands`` (default: all of them; ``main`` passes only the
    one it runs, so no other sub-command's modules are imported)."""
    parser = argparse.ArgumentParser(
        prog="deepseekbench",
        description="Benchmark speculative decoding with speed and quality parity in one run.",
        epilog="exit codes: 0 ok, 1 finished with request errors, 2 usage/plan error "
        "(or a route failed the reachability probe), "
        "3 LiveGate refusal, 4 compare found a regression, 130 interrupted (rerun resumes)",
    )
    parser.add_argument(
        "--version",
        action="store_true",
        help="print the installed deepseekbench version (package metadata) and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in SUBCOMMANDS.items():
        one = sub.add_parser(name, help=command.help)
        if commands is None or name in commands:
            adder: AddArguments = load(command.arguments)  # type: ignore[assignment]
            adder(one)
    return parser


def add_demo_arguments(demo: argparse.ArgumentParser) -> None:
    """The ``demo`` subcommand's flags."""
    from deepseekbench._cli._demo import DEMO_LATEST, DEMO_REQUESTS

    demo.add_argument(
        "--results",
        type=Path,
        default=None,
        help="results JSONL (default: ./deepseekbench-demo-[SCENARIO-]<YYYYmmdd-HHMMSS>.jsonl; "
        f"the main scenario's copied to ./{DEMO_LATEST} when it finishes)",
    )
    demo.add_argument(
        "--requests",
        type=int,
        default=DEMO_REQUESTS,
        help="measured requests per route and load point, >= 1, after one warm-up "
        "(default: %(default)s)",
    )
    demo.add_argument("--format", choices=FORMATS, default="text", help=_FORMAT_HELP)
    demo.add_argument(  # the embedded engine's numerics mode
        "--numerics",
        action="store_true",
        help="the numerics scenario: off and mtp engines whose verify passes flip near-ties, "
        "and mtp-relaxed (lossy: TensorRT-LLM-style relaxed acceptance takes a draft "
        "token near the target's top-1); one run judged under parity.exact = bit_exact, then "
        "within_noise (the same results file, nothing measured twice)",
    )
    demo.add_argument(  # the distribution witness at temperature > 0
        "--sampling",
        action="store_true",
        help="the sampling scenario: at temperature 0.7, off, mtp and mtp with each "
        "sampler fault, judged by the distribution witness",
    )
    demo.add_argument(  # capacity under SLO
        "--capacity",
        action="store_true",
        help="the capacity scenario: off, mtp at depths 1, 2 and 4 and the mis-tuned mtp, "
        "each launched from the plan; concurrency 1 and 5 and a [search] for the capacity "
        "under a TPOT SLO; prints the best depth per load and each route's capacity "
        "(--requests applies to the main scenario only)",
    )
    demo.add_argument(  # sequential stopping
        "--sequential",
        action="store_true",
        help="with --capacity: [stopping] mode = sequential (each comparison stops once "
        "decided, each search level once failed); the scorecard says how many measured "
        "requests that saved",
    )


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    """The ``run`` subcommand's flags."""
    _add_run(run)
    _add_run_client(run)


def _add_run(run: argparse.ArgumentParser) -> None:
    """``run``'s plan, gate, budget, dry-run and results flags."""
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


def _add_run_client(run: argparse.ArgumentParser) -> None:
    """``run``'s client flags (workers, executor, Ray address), format, probe and retry."""
    run.add_argument(
        "--workers",
        type=_workers,
        default=None,
        help="client workers sending each block, 1-256, or 'auto' (one per CPU core) "
        "(default: the plan's 'workers', else 1)",
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


def add_report_arguments(report: argparse.ArgumentParser) -> None:
    """The ``report`` subcommand's flags."""
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
    report.add_argument(  # the depth grid's choice per load
        "--best-config",
        metavar="PATH",
        type=Path,
        default=None,
        help="also write the best configuration per load of each depth grid to PATH (JSON)",
    )
