"""Bounded reads: every answer the library reads whole has a deadline and a size cap.

A follow-up (``off``'s logprobs at a divergence), a configuration read (llama.cpp
``GET /props``, SGLang ``GET /get_server_info``), a model list, a version, a
tokenizer count and a launch-readiness poll are each read whole and parsed. A server
that answers 1 byte per second, or with hundreds of megabytes, must not hold the run
or its memory: :func:`read_bounded` streams the body (``httpx`` ``client.stream``)
under one **total** deadline (``anyio.fail_after`` around the whole exchange, so a
server dribbling bytes cannot renew a per-chunk timeout) and stops at a size cap
(:data:`DEFAULT_MAX_BYTES`, counted on the decoded body, so a compressed answer is
capped by what it expands to). Exceeding either gives a :class:`BoundedReadError`
*value* the caller records (an ``unexplained`` margin, a probe's failure); nothing is
raised for a misbehaving server. A refusal of the
:class:`~deepseekbench.LiveGate` (raised by the gated transport before any socket
opens) is not a server fault and propagates.

Definitions: deadline in seconds (wall clock, the route's ``timeout_s``); cap in
bytes of the decoded body. Source: httpx's streaming API (``AsyncClient.stream``,
``Response.aiter_bytes``) and anyio's cancel scopes (``anyio.fail_after``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal

import anyio
import httpx
import orjson

from deepseekbench._errors import DeepseekBenchError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "BoundedReadError",
    "BoundedResponse",
    "parse_json_lenient",
    "read_bounded",
]

DEFAULT_MAX_BYTES: Final[int] = 64 * 1024 * 1024
"""Default cap of one bounded read (bytes of the decoded body): 64 MiB, far above any
follow-up (a 32k-token answer with 20 alternatives each is ~10 MB of JSON) or
configuration body."""

Reason = Literal["timeout", "too_large", "transport"]


class BoundedReadError(DeepseekBenchError):
    """A bounded read that did not complete: ``reason`` ``timeout`` (the total deadline
    passed), ``too_large`` (the body exceeded the cap) or ``transport`` (a connection
    or protocol failure); ``detail`` says how, in words (the deadline in s, the cap
    and bytes read); ``cause`` the transport's own words for a ``transport`` failure
    (e.g. ``cannot connect to http://127.0.0.1:8000: Connection refused``), else ``""``.
    Returned by :func:`read_bounded` as a value to record."""

    def __init__(self, message: str, *, reason: Reason, url: str, cause: str = "") -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.url = url
        self.cause = cause


@dataclass(frozen=True, slots=True)
class BoundedResponse:
    """A whole answer read within its bounds: HTTP ``status_code``, response
    ``headers``, the decoded ``content`` (at most the cap, in bytes) and the status
    line's ``reason_phrase``."""

    status_code: int
    headers: httpx.Headers
    content: bytes
    reason_phrase: str = ""

    @property
    def is_success(self) -> bool:
        """A 2xx status."""
        return 200 <= self.status_code < 300

    def json(self) -> Any:
        """The body parsed as JSON (:func:`parse_json_lenient`).

        Raises:
            ValueError: the body is not JSON.
        """
        return parse_json_lenient(self.content)

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.content.decode("utf-8", errors="replace")


def parse_json_lenient(content: bytes) -> Any:
    """JSON, strict first (``orjson``), then Python's ``json``, which also reads the
    ``NaN``, ``Infinity`` and ``-Infinity`` literals a Python server writes by default
    (``json.dumps(allow_nan=True)``), so such values reach the caller's checks and can
    be named there instead of failing the whole parse.

    Raises:
        ValueError: neither parser reads ``content``.
    """
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None


async def read_bounded(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    deadline_s: float,
    max_bytes: int = DEFAULT_MAX_BYTES,
    retry_unanswered: bool = True,
    **kwargs: Any,
) -> BoundedResponse | BoundedReadError:
    """Send one request and read its whole answer within ``deadline_s`` seconds (total,
    from sending to the last byte) and ``max_bytes`` bytes of decoded body.

    Args:
        client: the (gated) client; ``kwargs`` go to ``client.stream`` (``headers``,
            ``content``, ``json``...). Its per-operation timeout is set to
            ``deadline_s`` as well.
        deadline_s: the total deadline (s, > 0).
        max_bytes: the cap (bytes, > 0); a ``content-length`` above it is refused
            before the body is read, a longer body is cut at the cap and dropped.
        retry_unanswered: send once more, within the same deadline, when the server
            closed the connection before any response (``httpx.RemoteProtocolError``
            before the status line: the keep-alive race, RFC 9112 section 9.3.1, where a
            server closes an idle connection as the client reuses it). Only for requests
            that are safe to repeat: every caller today (a read, a token count, a
            temperature-0 follow-up), hence the default; the measured request has its
            own retry (``stale_connection_retries`` on its measurement).

    Returns:
        The :class:`BoundedResponse`, or a :class:`BoundedReadError` naming what
        was exceeded (never raised for a server fault).

    Raises:
        ValueError: ``deadline_s`` or ``max_bytes`` not positive.
        LiveGateError: the gate refused the request (nothing was sent).
    """
    if not deadline_s > 0 or max_bytes <= 0:
        raise ValueError("deadline_s and max_bytes must be > 0")
    kwargs.setdefault("timeout", deadline_s)
    try:
        with anyio.fail_after(deadline_s):
            answered: list[bool] = []
            try:
                return await _read(client, method, url, max_bytes, kwargs, answered)
            except httpx.RemoteProtocolError:
                if not retry_unanswered or answered:
                    raise
            return await _read(client, method, url, max_bytes, kwargs, [])
    except TimeoutError:
        return BoundedReadError(
            f"{method} {url}: no whole answer within {deadline_s:g} s", reason="timeout", url=url
        )
    except httpx.TimeoutException as exc:
        return BoundedReadError(
            f"{method} {url}: {type(exc).__name__} within {deadline_s:g} s",
            reason="timeout",
            url=url,
        )
    except httpx.HTTPError as exc:
        return BoundedReadError(
            f"{method} {url}: {type(exc).__name__}: {exc}",
            reason="transport",
            url=url,
            cause=str(exc) or type(exc).__name__,
        )


async def _read(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    max_bytes: int,
    kwargs: dict[str, Any],
    answered: list[bool],
) -> BoundedResponse | BoundedReadError:
    async with client.stream(method, url, **kwargs) as r:
        answered.append(True)  # the status line came: a later failure is not the keep-alive race
        declared = r.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            return _too_large(method, url, max_bytes, f"content-length {declared}")
        chunks: list[bytes] = []
        total = 0
        async for chunk in r.aiter_bytes():
            total += len(chunk)
            if total > max_bytes:
                return _too_large(method, url, max_bytes, f"more than {max_bytes} bytes read")
            chunks.append(chunk)
        return BoundedResponse(r.status_code, r.headers, b"".join(chunks), r.reason_phrase)


def _too_large(method: str, url: str, max_bytes: int, how: str) -> BoundedReadError:
    return BoundedReadError(
        f"{method} {url}: answer over the {max_bytes}-byte cap ({how})",
        reason="too_large",
        url=url,
    )
