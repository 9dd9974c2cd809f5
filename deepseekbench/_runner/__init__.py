"""The runner: the stages wired into one run, one module per job.

Holds :mod:`~deepseekbench._runner._run` (the run's sequence: :func:`run_plan`),
:mod:`~deepseekbench._runner._preflight` (what is read and checked before anything is
opened or sent, and the launched routes), :mod:`~deepseekbench._runner._resume`
(what an earlier run of the plan recorded, and what is left to send),
:mod:`~deepseekbench._runner._search` (the capacity search's driver),
:mod:`~deepseekbench._runner._progress` (progress events) and
:mod:`~deepseekbench._runner._dry_run` (the plan checked without any connection).
Import each name from its defining module.
"""
