"""The package version, at the lowest layer so any stage may record it (``run_start``)."""

__version__ = "0.1.0"
