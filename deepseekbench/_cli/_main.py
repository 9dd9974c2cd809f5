"""``main``: the command line parsed, its command run, its exit code returned.

Holds :func:`main` (the console script ``deepseekbench`` and ``python -m
deepseekbench``), :func:`package_version` and the mapping from the library's errors
to exit codes (:mod:`deepseekbench._cli._exits`).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

from deepseekbench._cli._exits import (
    EXIT_ERRORS,
    EXIT_GATE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
)
from deepseekbench._cli._parser import build_parser
from deepseekbench._cli._subcommands import SUBCOMMANDS, RunCommand, chosen_command, load
from deepseekbench._errors import (
    CalibrationError,
    KeyFormatError,
    LiveGateError,
    PlanError,
    ResultsFormatError,
    ServerError,
    TokenizeError,
)

__all__ = ["main", "package_version"]


def package_version() -> str:
    """The installed distribution's version (``importlib.metadata``); in a source
    checkout that is not installed, ``deepseekbench.__version__`` (the same string as
    ``pyproject.toml``'s ``version``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("deepseekbench")
    except PackageNotFoundError:  # the package (this module's parent) is loaded already
        return str(getattr(sys.modules["deepseekbench"], "__version__", "unknown"))


def main(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run the CLI; returns the exit code (see :mod:`deepseekbench._cli`)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    argv = sys.argv[1:] if argv is None else list(argv)
    chosen = chosen_command(argv)
    parser = build_parser(() if chosen is None else (chosen,))  # only its modules load
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
    """The library's own warnings (:class:`~deepseekbench.WorkloadCoverageWarning`,
    :class:`~deepseekbench.UnfinishedRunWarning`) as one
    clean line each on ``err`` (``deepseekbench: warning: ...``), not Python's
    ``path:line: Category: message`` form; other warnings print as Python prints them.
    Library callers still get ``warnings.warn`` of the named category."""
    from deepseekbench._plan._coverage import WorkloadCoverageWarning
    from deepseekbench._store._reading import UnfinishedRunWarning

    python_show = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, WorkloadCoverageWarning | UnfinishedRunWarning):
            err.write(f"deepseekbench: warning: {message}\n")
        else:
            python_show(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():  # restores showwarning on the way out
        warnings.showwarning = show
        yield


def _dispatch(
    parser: argparse.ArgumentParser, args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    """The parsed command, run (help on ``err`` when none was given); its modules are
    imported now (:data:`~deepseekbench._cli._subcommands.SUBCOMMANDS`)."""
    command = SUBCOMMANDS.get(args.command) if args.command else None
    if command is None:
        parser.print_help(err)
        return EXIT_USAGE
    run: RunCommand = load(command.run)  # type: ignore[assignment]
    return run(args, out, err)


def _command(
    parser: argparse.ArgumentParser, args: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    """The parsed command, run; its exit code (see :mod:`deepseekbench._cli`)."""
    # the stages load only now, so that --help and usage errors stay fast
    from pydantic import ValidationError

    from deepseekbench._plan._messages import validation_error_lines

    try:
        return _dispatch(parser, args, out, err)
    except KeyboardInterrupt:
        resume = (
            "a demo is not resumed (its engines take new ports, so its plan differs): run it again"
            if args.command == "demo"
            else "rerun the same command to resume"
        )
        err.write(f"\ninterrupted: finished measurements are kept in the results file; {resume}\n")
        return EXIT_INTERRUPTED
    except LiveGateError as exc:
        err.write(f"deepseekbench: {exc}\n")
        return EXIT_GATE
    except ServerError as exc:  # a launched engine did not start (secrets redacted)
        from deepseekbench._types._secrets import printable

        err.write(f"deepseekbench: {printable(str(exc), keep_newlines=True)}\n")
        return EXIT_USAGE
    except CalibrationError as exc:  # off gave no natural length; rerun resumes
        err.write(f"deepseekbench: {exc}\n")
        return EXIT_ERRORS
    except ValidationError as exc:
        err.write(f"deepseekbench: invalid {exc.title}:\n")
        err.writelines(f"  {line}\n" for line in validation_error_lines(exc))
        return EXIT_USAGE
    except (PlanError, ResultsFormatError, TokenizeError, KeyFormatError) as exc:
        err.write(f"deepseekbench: {exc}\n")
        return EXIT_USAGE
