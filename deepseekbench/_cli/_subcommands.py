"""The sub-command table: name -> help, argument adder and runner, imported on use.

A fresh ``python -m deepseekbench report FILE`` should pay for reading the file and
rendering its scorecard, not for the embedded engine that ``serve`` runs or the
runner that ``run`` drives: each sub-command's modules are named here as
``"module:function"`` strings and imported only when that sub-command is chosen (its
arguments when its parser is built, its runner when it runs). ``--help`` lists every
sub-command from the table without importing any of them.

Adding a sub-command is one entry in :data:`SUBCOMMANDS`: its one-line help, the
function that adds its arguments to its ``argparse`` parser, and the function that
runs it as ``(args, out, err) -> exit code``.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO, cast

__all__ = ["SUBCOMMANDS", "SubCommand", "chosen_command", "load"]

AddArguments = Callable[[argparse.ArgumentParser], None]
RunCommand = Callable[[argparse.Namespace, TextIO, TextIO], int]


@dataclass(frozen=True, slots=True)
class SubCommand:
    """One sub-command of ``deepseekbench``.

    ``help``: its line in ``--help``; ``arguments``: ``"module:function"`` adding its
    arguments to its parser; ``run``: ``"module:function"`` running it from the parsed
    arguments, returning the exit code (:mod:`deepseekbench._cli._exits`).
    """

    help: str
    arguments: str
    run: str


SUBCOMMANDS: dict[str, SubCommand] = {
    "demo": SubCommand(
        help="run off, mtp and mis-tuned mtp on embedded loopback engines at concurrency "
        "1, 2 and 8; print the scorecard and the crossover",
        arguments="deepseekbench._cli._parser:add_demo_arguments",
        run="deepseekbench._cli._demo:demo_command",
    ),
    "run": SubCommand(
        help="run a benchmark plan (TOML or JSON)",
        arguments="deepseekbench._cli._parser:add_run_arguments",
        run="deepseekbench._cli._commands:run_command",
    ),
    "report": SubCommand(
        help="re-render the scorecard of a results file",
        arguments="deepseekbench._cli._parser:add_report_arguments",
        run="deepseekbench._cli._commands:report_command",
    ),
    "compare": SubCommand(
        help="what changed between two results files: a verdict per line and figure, "
        "the recorded differences, exit 4 on a regression",
        arguments="deepseekbench._cli._compare:add_compare_arguments",
        run="deepseekbench._cli._compare:compare_command",
    ),
    "serve": SubCommand(
        help="serve the embedded reference engine on loopback",
        arguments="deepseekbench._engine:add_serve_arguments",
        run="deepseekbench._cli._commands:serve_command",
    ),
}
"""Every sub-command, in ``--help`` order."""


def load(ref: str) -> Callable[..., object]:
    """The function ``"module:function"`` names, its module imported now.

    Raises:
        ImportError: the module cannot be imported.
        AttributeError: it has no such function.
    """
    module, _, name = ref.partition(":")
    return cast("Callable[..., object]", getattr(importlib.import_module(module), name))


def chosen_command(argv: Sequence[str]) -> str | None:
    """The sub-command ``argv`` names: its first word that is not an option (the top
    level's only option, ``--version``, takes no value), if it is in the table."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in SUBCOMMANDS else None
    return None
