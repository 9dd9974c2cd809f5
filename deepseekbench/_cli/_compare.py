"""The ``compare`` command: what changed between two results files, and its exit code.

Holds :func:`add_compare_arguments` (the sub-command's flags), :func:`regression_threshold`
(``--fail-on-regression``'s value) and :func:`compare_command`. The analysis and
the renderers are imported inside the handler, so the parser stays light.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import TextIO

from deepseekbench._cli._exits import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE

__all__ = ["add_compare_arguments", "compare_command", "regression_threshold"]

_FORMATS = ("text", "markdown", "json", "html")  # deepseekbench._report._compare's


def regression_threshold(text: str) -> float:
    """``5%`` or ``0.05`` → 0.05 (a fraction >= 0, read by the library's one parser,
    ``deepseekbench._types._fraction.parse_fraction``); argparse exits 2 otherwise."""
    from deepseekbench._errors import FractionFormatError
    from deepseekbench._types._fraction import parse_fraction

    try:
        return parse_fraction(text, name="the threshold", upper=float("inf"))
    except FractionFormatError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _alpha(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text!r}")
    return value


def _margin(text: str) -> float:
    """``--margin``: a fraction in [0, 1), as ``5%`` or ``0.05``."""
    from deepseekbench._errors import FractionFormatError
    from deepseekbench._types._fraction import parse_fraction

    try:
        return parse_fraction(text, name="the margin")
    except FractionFormatError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_compare_arguments(cmp: argparse.ArgumentParser) -> None:
    """The ``compare`` sub-command's flags."""
    from deepseekbench._analysis._compare_runs import DEFAULT_MARGIN

    cmp.add_argument("a", type=Path, help="results JSONL of the earlier run (A)")
    cmp.add_argument("b", type=Path, help="results JSONL of the later run (B)")
    cmp.add_argument("--run-a", metavar="HASH", default=None, help="A's plan hash (prefix)")
    cmp.add_argument("--run-b", metavar="HASH", default=None, help="B's plan hash (prefix)")
    cmp.add_argument(
        "--format", choices=_FORMATS, default="text", help="output format (default: %(default)s)"
    )
    cmp.add_argument(
        "--margin",
        metavar="PCT",
        type=_margin,
        default=DEFAULT_MARGIN,
        help="a change counts only when its interval lies wholly beyond PCT of A "
        "(default: 5%%, the drift between back-to-back runs of identical engines; 0 for "
        "the plain test of no change)",
    )
    cmp.add_argument(
        "--alpha",
        type=_alpha,
        default=0.05,
        help="family-wise false-change rate over every figure judged (default: %(default)s)",
    )
    cmp.add_argument(
        "--fail-on-regression",
        metavar="PCT",
        type=regression_threshold,
        default=0.0,
        help="exit 4 when a figure changed significantly for the worse by more than PCT "
        "(e.g. 5%%), or parity lost 'verified' (default: 0%%, any significant regression)",
    )
    cmp.add_argument(
        "--plot",
        metavar="PATH",
        type=Path,
        default=None,
        help="also draw the changed figures with their intervals to PATH (.png, .svg, .pdf; "
        "needs: pip install 'deepseekbench[plot]')",
    )
    cmp.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")


def compare_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``compare A B``: the comparison printed; exit 4 (:data:`EXIT_REGRESSION`) when
    something regressed beyond ``--fail-on-regression``, else 0.

    Raises:
        ResultsFormatError: a results file is unreadable (exit 2 in ``main``).
    """
    from deepseekbench._analysis._analysis import load_results
    from deepseekbench._analysis._compare_runs import compare_runs
    from deepseekbench._errors import MissingExtraError
    from deepseekbench._report._compare import plot_comparison, render_comparison
    from deepseekbench._report._plot import require_matplotlib
    from deepseekbench._store._chain import ResultsIntegrityWarning

    if args.plot is not None:
        try:
            require_matplotlib()
        except MissingExtraError as exc:
            err.write(f"deepseekbench: --plot: {exc}\n")
            return EXIT_USAGE
    with warnings.catch_warnings():  # an edited file is named per figure (results_tampered)
        warnings.simplefilter("ignore", ResultsIntegrityWarning)
        a = load_results(args.a, plan_hash=args.run_a)
        b = load_results(args.b, plan_hash=args.run_b)
    cmp = compare_runs(a, b, alpha=args.alpha, seed=args.seed, margin=args.margin)
    threshold: float = args.fail_on_regression
    out.write(render_comparison(cmp, args.format, threshold=threshold))
    if args.plot is not None:
        if cmp.changed():
            plot_comparison(cmp, args.plot)
            err.write(f"plot: {args.plot}\n")
        else:
            err.write("plot: nothing changed significantly; no plot written\n")
    regressions = cmp.regressions(threshold)
    if regressions:
        err.write(
            f"{len(regressions)} regression(s) beyond {threshold:.0%}: exit {EXIT_REGRESSION}\n"
        )
        return EXIT_REGRESSION
    return EXIT_OK
