"""The client's own health bound: when the measuring client is too busy to be believed.

Holds :data:`DEFAULT_LAG_THRESHOLD_MS`, the plan's default and the self-check's flag
line; the self-check that measures the lag lives with the measurement code.
"""

from __future__ import annotations

__all__ = ["DEFAULT_LAG_THRESHOLD_MS"]

DEFAULT_LAG_THRESHOLD_MS = 10.0
"""Event-loop lag above which a row is flagged ``client_saturated`` (ms)."""
