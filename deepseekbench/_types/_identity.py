"""``RouteIdentity``: whether a route serves what its label says (issue 24).

The check itself is :mod:`deepseekbench._analysis._route_identity`; the status
lives here because rows carry it (``Row.route_identity``).
"""

from __future__ import annotations

from typing import Literal

from deepseekbench._types._axes import _ClosedEnum

__all__ = ["RouteIdentity", "RouteIdentityName"]


class RouteIdentity(_ClosedEnum):
    """The outcome of the route identity check for one row.

    ``ok``: nothing contradicts the route's label. ``flagged``: a speculative
    route whose engine reports no acceptance anywhere in the run, so whether it
    speculated is unverified (its speedup may still be credited). ``refused``: the
    route contradicts its label (an ``off`` route that drafts, a speculative route
    that drafts nothing while the same engine drafts on another route, a served
    depth other than the declared one); no speedup is credited on it.
    """

    ok = "ok"
    flagged = "flagged"
    refused = "refused"


RouteIdentityName = Literal["ok", "flagged", "refused"]
"""The string values :class:`RouteIdentity` accepts."""
