"""The ``run``, ``report`` and ``serve`` commands, each from parsed arguments to an exit code.

Holds :func:`run_command` (a plan run, or its dry run), :func:`report_command` (a
results file re-rendered), :func:`serve_command` (the embedded engine served) and
what they share: the gate from the flags, the client flags applied to a plan, the
results path resolved.
"""

from __future__ import annotations

import argparse
import shlex
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from deepseekbench._cli._exits import EXIT_GATE, EXIT_OK, EXIT_USAGE
from deepseekbench._cli._output import (
    exit_for,
    known_secrets,
    redact_text,
    render_dry_run,
    write_error_summary,
)
from deepseekbench._cli._progress import StderrProgress
from deepseekbench._errors import MissingExtraError, ResultsWriteError, RowFormatError

if TYPE_CHECKING:
    from deepseekbench._net._gate import LiveGate
    from deepseekbench._plan._plan import BenchmarkPlan

__all__ = ["report_command", "results_path", "run_command", "serve_command", "with_client_flags"]


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


async def _run(args: argparse.Namespace, plan: BenchmarkPlan, out: TextIO, err: TextIO) -> int:
    from deepseekbench._report._scorecard import Scorecard
    from deepseekbench._runner._dry_run import grid_text
    from deepseekbench._runner._run import run_plan

    gate = _gate(args)
    path: Path = args.results
    err.write(f"grid: {grid_text(plan)}\n")
    prog = StderrProgress(err)
    retry = not args.no_retry_errors
    try:
        result = await run_plan(
            plan, gate=gate, results_path=path, progress=prog, retry_errors=retry
        )
    finally:
        prog.close()
    secrets = known_secrets(plan)
    out.write(redact_text(Scorecard.from_run(result).render(args.format), secrets))
    if result.retried:
        err.write(
            f"resumed: {result.retried} errored measurement(s) of the earlier run were "
            f"measured again (--no-retry-errors keeps them)\n"
        )
    elif not retry and result.resumed and result.n_errors:
        err.write("resumed: errored measurements were kept (--no-retry-errors)\n")
    write_error_summary(result, err, secrets)
    err.write(f"results: {path}\n")
    return exit_for(result)


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
    from deepseekbench._runner._dry_run import dry_run
    from deepseekbench._types._row import write_rows

    gate = _gate(args)
    with warnings.catch_warnings():  # said once, below, with the counts
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
        out.write(render_dry_run(result, args.format))
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
    for warning in result.warnings:  # workload items that would go unsent
        err.write(f"  warning: {warning}\n")
    return EXIT_GATE if result.refused else EXIT_OK


def report_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``report RESULTS``: the scorecard of a results file (and ``--plot``, ``--best-config``)."""
    from deepseekbench._analysis._analysis import load_results_and_runs
    from deepseekbench._report._plot import require_matplotlib
    from deepseekbench._report._scorecard import Scorecard
    from deepseekbench._store._chain import ResultsIntegrityWarning
    from deepseekbench._store._reading import UnfinishedRunWarning

    path: Path = args.results
    if args.plot is not None:
        try:  # before anything is printed: the scorecard alone is not what was asked for
            require_matplotlib()
        except MissingExtraError as exc:
            err.write(f"deepseekbench: --plot: {exc}\n")
            return EXIT_USAGE
    with warnings.catch_warnings(record=True) as caught:  # said below, without a source line
        warnings.simplefilter("ignore", ResultsIntegrityWarning)
        warnings.simplefilter("always", UnfinishedRunWarning)
        result, runs = load_results_and_runs(path, plan_hash=args.run)
    unfinished = [str(w.message) for w in caught if w.category is UnfinishedRunWarning]
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
    secrets = known_secrets(result.plan)
    card = Scorecard.from_run(result)
    out.write(redact_text(card.render(args.format), secrets))
    write_error_summary(result, err, secrets)
    err.writelines(f"{line}\n" for line in unfinished)  # no run_end: how to resume
    if args.best_config is not None:
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


def with_client_flags(plan: BenchmarkPlan, args: argparse.Namespace) -> BenchmarkPlan:
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


def results_path(path: Path) -> Path:
    """``path`` made absolute with its symlinks resolved: the results file's path.

    Raises:
        ResultsWriteError: the path cannot be resolved, e.g. a symlink loop (Python
            3.11 raises ``RuntimeError`` for one, later versions ``OSError``).
    """
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:
        raise ResultsWriteError(f"results path {path}: cannot be resolved ({exc})") from None


def run_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``run PLAN``: the plan (with the client flags) run, or its dry run.

    Raises:
        PlanError, pydantic.ValidationError, LiveGateError, ResultsWriteError, …: as
            :func:`~deepseekbench.run_plan`; :func:`~deepseekbench._cli._main.main`
            turns each into its exit code.
    """
    import anyio

    from deepseekbench._plan._plan import BenchmarkPlan
    from deepseekbench._store._writer import recording_command

    plan = with_client_flags(BenchmarkPlan.load(args.plan), args)
    if args.dry_run:
        return _dry_run(args, plan, out, err)
    if args.results is None:
        args.results = plan.results_path() or (
            Path.cwd() / f"deepseekbench-results-{plan.plan_hash()}.jsonl"
        )
    args.results = results_path(args.results)
    with recording_command("run"):
        return anyio.run(_run, args, plan, out, err)


_MAX_PORT = 65535
"""The highest TCP port number."""


def serve_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``serve``: the embedded reference engine, on loopback unless
    ``--allow-non-loopback``; runs until interrupted (``out`` unused: notes go to ``err``)."""
    import anyio

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
    if not 0 <= args.port <= _MAX_PORT:
        err.write(f"deepseekbench: serve --port {args.port} is not a TCP port (0-{_MAX_PORT})\n")
        return EXIT_USAGE
    allow = bool(args.allow_non_loopback)
    try:
        anyio.run(lambda: serve(config, args.host, args.port, allow_non_loopback=allow))
    except KeyboardInterrupt:
        return EXIT_OK
    except OSError as exc:  # busy port, unknown host name, address not on this machine
        reason = exc.strerror or str(exc)
        err.write(f"deepseekbench: serve cannot listen on {args.host}:{args.port}: {reason}\n")
        return EXIT_USAGE
    return EXIT_OK
