"""Redaction of a measurement: no secret survives into a :class:`StreamMeasurement`.

Holds :func:`redact_measurement`, applied to every measurement before it leaves
the measuring step (a server may echo the key in an error body, its text or its
usage) and again before a record is written.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from deepseekbench._records._measurement import StreamError, StreamMeasurement
from deepseekbench._types._secrets import (
    contains_secret,
    redact,
    redact_json,
    safe_server_text,
    secret_values,
)

__all__ = ["redact_measurement"]

_MESSAGE_LIMIT = 500
"""Characters an error message keeps, cut only after redaction (the accumulator keeps
up to 64 KiB while measuring), so no key can straddle a cut and survive in part."""


def redact_measurement(m: StreamMeasurement, secrets: Iterable[str | None]) -> StreamMeasurement:
    """``m`` with every secret removed from its texts, usage and error messages.

    Each occurrence of a non-blank secret in ``text``, ``reasoning_text``,
    ``finish_reason``, ``content_encoding``, ``usage`` (keys and values, at any
    depth) and every error message becomes ``***``
    (:func:`deepseekbench._types._secrets.redact`, the one redaction). Error
    messages and ``content_encoding`` (a server's header) then have their control
    characters escaped (:func:`~deepseekbench._types._secrets.printable`: no
    terminal escape sequence reaches a report or stderr) and messages are cut to
    500 characters (redaction first, so no part of a key survives a cut). Returns
    ``m`` itself when there is nothing to change.
    """
    keys = secret_values(*secrets)

    def clean(e: StreamError) -> StreamError:
        msg = safe_server_text(e.message, keys)[:_MESSAGE_LIMIT]
        return e if msg == e.message else StreamError(kind=e.kind, message=msg)

    update: dict[str, Any] = {}
    if any(safe_server_text(e.message, keys)[:_MESSAGE_LIMIT] != e.message for e in m.errors):
        update["errors"] = [clean(e) for e in m.errors]
        update["error"] = clean(m.error) if m.error is not None else None
    if m.content_encoding is not None:
        coding = safe_server_text(m.content_encoding, keys)
        if coding != m.content_encoding:
            update["content_encoding"] = coding
    if keys:
        for name in ("text", "reasoning_text", "finish_reason"):
            text = getattr(m, name)
            if text is not None and contains_secret(text, keys):
                update[name] = redact(text, keys)
        if m.usage is not None and contains_secret(orjson.dumps(m.usage).decode(), keys):
            update["usage"] = redact_json(m.usage, keys)
    return m.model_copy(update=update) if update else m
