"""The parts of a streamed request that do not change between requests, built once.

``httpx.AsyncClient.build_request`` parses the URL again, merges the client's headers
with the request's (re-encoding every header), merges empty cookies and query
parameters and builds a timeout, for every request. None of that changes between two
requests to the same route through the same client, so :func:`build_post` keeps it:
the parsed URL per URL string, the merged and encoded headers (``Host`` included) per
(host, client headers, route headers), and the timeout per connect deadline. Only the
body and its ``Content-Length`` are new for each request. A client
with cookies, default query parameters or a base URL takes ``build_request`` as before
(the merge then has work to do).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import httpx

__all__ = ["build_post", "parsed_url"]

_MERGED_MAX = 256
"""How many (client headers, route headers) pairs the merged-header cache holds."""

_HeadersKey = tuple[bytes, tuple[tuple[bytes, bytes], ...], tuple[tuple[str, str], ...]]
_merged: dict[_HeadersKey, httpx.Headers] = {}


@lru_cache(maxsize=256)
def parsed_url(url: str) -> httpx.URL:
    """``httpx.URL(url)``, parsed once per string (an ``httpx.URL`` is immutable)."""
    return httpx.URL(url)


@lru_cache(maxsize=64)
def _timeout(connect_s: float | None) -> httpx.Timeout:
    return httpx.Timeout(None, connect=connect_s)


def _prototype_headers(
    client: httpx.AsyncClient, url: httpx.URL, headers: dict[str, str]
) -> httpx.Headers:
    """The headers ``build_request`` gives an empty ``POST`` to ``url``'s host: the
    client's updated with ``headers``, then ``Host`` and a ``Content-Length`` (of 1), in
    httpx's order. Keyed by the host and both header sets, so a client whose headers
    change gets a fresh merge."""
    key = (url.netloc, tuple(client.headers.raw), tuple(headers.items()))
    proto = _merged.get(key)
    if proto is None:
        if len(_merged) >= _MERGED_MAX:
            _merged.clear()
        merged = httpx.Headers(client.headers)
        merged.update(headers)
        proto = httpx.Request("POST", url, headers=merged, content=b" ").headers
        _merged[key] = proto
    return proto


def build_post(
    client: httpx.AsyncClient,
    url: httpx.URL,
    headers: dict[str, str],
    body: bytes,
    connect_s: float | None,
) -> httpx.Request:
    """The ``POST`` of ``body`` to ``url`` (JSON bytes) that
    ``client.build_request("POST", url, content=body, headers=headers,
    timeout=httpx.Timeout(None, connect=connect_s))`` builds, from parts kept between
    requests (``connect_s``: s, ``None`` = no connect deadline).

    Only ``Content-Length`` is new per request: the other headers are copied as they
    were encoded once (no re-encoding, no merge), and the body is handed over as the
    request's stream (``httpx.Request(stream=...)``, which adds no header of its own).
    """
    extensions: dict[str, Any] = {"timeout": _timeout(connect_s).as_dict()}
    if client.cookies or client.params or url.is_relative_url:
        return client.build_request(
            "POST", url, content=body, headers=headers, extensions=extensions
        )
    merged = httpx.Headers(_prototype_headers(client, url, headers))
    merged["Content-Length"] = str(len(body))
    request = httpx.Request(
        "POST", url, headers=merged, stream=httpx.ByteStream(body), extensions=extensions
    )
    request._content = body  # what Request(content=...) keeps: .content, .read() need no I/O
    return request
