"""The command line's exit codes (the table is in :mod:`deepseekbench._cli`).

Holds ``EXIT_OK``, ``EXIT_ERRORS``, ``EXIT_USAGE``, ``EXIT_GATE``, ``EXIT_REGRESSION`` and
``EXIT_INTERRUPTED``.
"""

from __future__ import annotations

__all__ = [
    "EXIT_ERRORS",
    "EXIT_GATE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REGRESSION",
    "EXIT_USAGE",
]

EXIT_OK = 0
"""Finished (refused speedups included)."""
EXIT_ERRORS = 1
"""Finished with measured requests that errored, or stopped at a calibration pass
whose requests errored (``CalibrationError``; a rerun resumes it)."""
EXIT_USAGE = 2
"""Bad arguments, invalid plan, a launched engine that did not start, or an unreadable
results file."""
EXIT_GATE = 3
"""The LiveGate refused (or would refuse, in a dry run)."""
EXIT_REGRESSION = 4
"""``compare``: a figure changed significantly for the worse beyond ``--fail-on-regression``
(default 0 %), or a line's parity lost ``verified``."""
EXIT_INTERRUPTED = 130
"""Interrupted; results so far kept, a rerun resumes."""
