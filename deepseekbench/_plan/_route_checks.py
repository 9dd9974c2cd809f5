"""The pure checks on a route's settings that a plan and a live route both apply.

Holds :func:`check_base_url` (an OpenAI base URL: http(s), a host, no user-info)
and :func:`check_request_extras` (engine-scoped body fields that leave the
route's own fields alone and hold only finite numbers). Parsing only: nothing
here opens a connection (``httpx.URL`` parses, and is imported when first used).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NoReturn

__all__ = ["ROUTE_OWNED", "check_base_url", "check_request_extras"]

ROUTE_OWNED = frozenset({"model", "messages", "stream"})
"""Body fields the route builds itself; ``request_extras`` may not set them."""


def check_base_url(url: str) -> str:
    """Return an OpenAI base URL without its trailing slash.

    A URL with user-info (``http://user:secret@host``) is refused: a secret
    there would land in the results file, in logs and in reprs; pass it as an
    API key instead. Messages about such a URL never repeat it.

    Raises:
        ValueError: httpx cannot parse it, not an ``http``/``https`` URL with a
            host, a port outside 1..65535, or user-info in the URL.
    """
    import httpx  # the URL grammar the transport uses; parsing only, no connection

    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        detail = f" ({exc})" if "@" not in url else ""
        _bad_base_url(url, f"is not a URL httpx can parse{detail}")
    if parsed.userinfo:
        raise ValueError(
            "base_url must not carry user-info (user:password@): pass the key as the "
            "route's api_key (api_key_env in a plan); the URL is not shown"
        )
    try:
        host = parsed.host  # decodes an IDNA A-label ("xn--..."): it may be invalid
    except UnicodeError as exc:  # idna.IDNAError
        _bad_base_url(url, f"has a host that is not valid IDNA ({exc})")
    if parsed.scheme not in ("http", "https") or not host:
        _bad_base_url(url, "must be an http(s) URL with a host")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        _bad_base_url(url, f"has port {parsed.port}, outside 1..65535")
    return url.rstrip("/")


def _bad_base_url(url: str, problem: str) -> NoReturn:
    shown = f", got {url!r}" if "@" not in url else " (URL not shown: it may hold a secret)"
    raise ValueError(f"base_url {problem}{shown}")


def check_request_extras(extras: dict[str, Any]) -> dict[str, Any]:
    """Return ``extras`` unchanged, or refuse body fields the route itself owns.

    Raises:
        ValueError: ``extras`` holds a non-finite number, or sets a field the
            route builds (``model``, ``messages``, ``stream``, ...).
    """
    bad = sorted(k for k in extras if k in ROUTE_OWNED)
    if bad:
        raise ValueError(f"request_extras may not set {bad}")
    if not _all_finite(extras):
        raise ValueError("request_extras holds a non-finite number (inf or nan): JSON has none")
    return extras


def _all_finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, Mapping):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_all_finite(v) for v in value)
    return True
