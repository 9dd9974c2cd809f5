"""``python -m deepseekbench``: see :mod:`deepseekbench._cli` for commands and exit codes."""

from __future__ import annotations

import sys

from deepseekbench._cli._main import main

if __name__ == "__main__":
    sys.exit(main())
