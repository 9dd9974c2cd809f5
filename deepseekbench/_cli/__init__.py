"""The command line: ``python -m deepseekbench``, a thin argparse wrapper over the library.

Subcommands::

    demo                 three embedded engines on loopback (off, mtp, mis-tuned mtp),
                         a concurrency sweep run through run_plan, the scorecard printed
                         [--numerics] [--capacity: launched depth grid, capacity under SLO]
    run PLAN             run a TOML/JSON plan  [--spend] [--dry-run] [--results PATH]
                         [--max-requests N] [--max-output-tokens N: the run's budgets]
    report RESULTS       re-render the scorecard of a results file  [--run HASH] [--format ...]
    compare A B          what changed between two results files: a verdict per line and
                         figure, the recorded differences  [--fail-on-regression PCT]
                         [--format text|markdown|json|html] [--plot PATH] [--alpha A]
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
* ``4`` — ``compare`` found a regression: a figure changed significantly for the
  worse by more than ``--fail-on-regression`` (default 0 %), or parity lost
  ``verified`` (docs/compare.md).
* ``130`` — interrupted (Ctrl-C); every finished measurement is in the results
  file, and rerunning the same command resumes.

A budget (``run --max-requests N``, ``--max-output-tokens N``) spent mid-run exits 3
too, once every request it admitted finished and was recorded; the refused ones are
recorded unsent (``budget_refused``) and a rerun resumes them.

Progress (done, errors, elapsed, rate) goes to stderr only when stderr is a
terminal; the scorecard goes to stdout (byte for byte what ``report`` prints for
the same results), the results path and other notes to stderr.

Modules: :mod:`~deepseekbench._cli._main` (``main``: parse, dispatch, exit code),
:mod:`~deepseekbench._cli._subcommands` (the sub-command table: each command's
modules imported only when it runs, so ``report`` never loads the embedded engine),
:mod:`~deepseekbench._cli._parser` (the argument parser),
:mod:`~deepseekbench._cli._commands` (``run``, ``report`` and ``serve``),
:mod:`~deepseekbench._cli._demo` (the ``demo`` scenarios),
:mod:`~deepseekbench._cli._compare` (``compare``),
:mod:`~deepseekbench._cli._output` (what the commands print: error summaries,
dry-run tables, redaction), :mod:`~deepseekbench._cli._progress` (the progress bar)
and :mod:`~deepseekbench._cli._exits` (the exit codes). Import each name from its
defining module.
"""
