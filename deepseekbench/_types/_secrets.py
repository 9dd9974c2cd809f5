"""The one redaction: secrets out of anything a server said, and text made safe to print.

Every place that stores or prints text a server sent (measurements, ``/metrics``
errors, reports, the CLI's stderr) goes through these functions, so a key echoed
anywhere is replaced the same way, and a server cannot put terminal control
sequences on a user's terminal.

* :func:`normalize_key`: a key that is empty or whitespace only is *no* key
  (``None``); any other key is kept without surrounding whitespace.
* :func:`checked_key`: :func:`normalize_key`, then refuse a key an HTTP header
  cannot carry unchanged (:class:`~deepseekbench.KeyFormatError`).
* :func:`secret_values`: the non-blank values of some keys, longest first.
* :func:`redact` / :func:`redact_json`: every occurrence of every secret becomes
  :data:`REDACTED`.
* :func:`printable`: control characters (C0, DEL, C1, and Unicode format
  characters such as bidi overrides) shown as ``\\xNN``/``\\uNNNN`` escapes.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable
from typing import Any

from pydantic import SecretStr

from deepseekbench._errors import KeyFormatError

REDACTED = "***"
"""What a secret is replaced with."""


def normalize_key(key: SecretStr | str | None) -> SecretStr | None:
    """``key`` without surrounding whitespace, or ``None`` when it is empty or blank.

    A whitespace-only key counts as no key: it would send ``Authorization: Bearer``
    with nothing usable, and as a "secret" it would redact every space of a text.
    """
    if key is None:
        return None
    raw = key.get_secret_value() if isinstance(key, SecretStr) else key
    value = raw.strip()
    if not value:
        return None
    if isinstance(key, SecretStr) and value == raw:
        return key
    return SecretStr(value)


def _key_flaw(value: str) -> str | None:
    """What kind of character in ``value`` an HTTP header cannot carry, or ``None``."""
    for i, ch in enumerate(value, 1):
        if "!" <= ch <= "~":  # visible ASCII: RFC 9110 field-vchar, no obs-text
            continue
        if ch in "\r\n":
            return f"a line break (CR or LF) at character {i}"
        if unicodedata.category(ch) in ("Cc", "Cf"):
            return f"a control character at character {i}"
        if ch.isspace():
            return f"whitespace at character {i}"
        return f"a non-ASCII character at character {i}"
    return None


def checked_key(key: SecretStr | str | None, source: str) -> SecretStr | None:
    """:func:`normalize_key`, then refuse a key with a character an ``Authorization``
    header cannot carry unchanged: only visible ASCII (``!``..``~``, RFC 9110's
    field-vchar without obs-text) is kept as it is.

    Args:
        source: where the key came from, for the message (``"DEEPSEEKBENCH_API_KEY"``,
            ``"route 'off': api_key_env MY_KEY"``); never the key itself.

    Raises:
        KeyFormatError: a CR/LF or other control character, inner whitespace, or a
            non-ASCII character (the message names its kind and position, not the key).
    """
    norm = normalize_key(key)
    if norm is not None and (flaw := _key_flaw(norm.get_secret_value())) is not None:
        raise KeyFormatError(
            f"{source}: the API key has {flaw}; an HTTP header carries only visible "
            "ASCII: check how the key was pasted (the key is not shown)"
        )
    return norm


def secret_values(*keys: SecretStr | str | None) -> tuple[str, ...]:
    """The distinct non-blank secret values of ``keys``, stripped, longest first
    (so a key that contains another is replaced whole)."""
    found: set[str] = set()
    for key in keys:
        norm = normalize_key(key)
        if norm is not None:
            found.add(norm.get_secret_value())
    return tuple(sorted(found, key=len, reverse=True))


def _values(secrets: Iterable[SecretStr | str | None]) -> tuple[str, ...]:
    return secret_values(*secrets)


@functools.lru_cache(maxsize=64)
def _pattern(keys: tuple[str, ...]) -> re.Pattern[str]:
    # longest first: at each position the alternation takes the longest key
    return re.compile("|".join(re.escape(k) for k in keys), re.IGNORECASE)


def redact(text: str, secrets: Iterable[SecretStr | str | None]) -> str:
    """``text`` with every occurrence of each non-blank secret replaced by ``***``.

    Matching ignores case: a server that lower-cases what it echoes (a header
    value, a coding name) still leaks the key.
    """
    keys = _values(secrets)
    return _pattern(keys).sub(REDACTED, text) if keys else text


def redact_json(value: Any, secrets: Iterable[SecretStr | str | None]) -> Any:
    """``value`` (JSON-like: str, dict, list, scalars) with every secret in every
    string, keys of mappings included, replaced by ``***``, at any depth."""
    keys = _values(secrets)
    return _scrub(value, keys) if keys else value


def _scrub(value: Any, keys: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return _pattern(keys).sub(REDACTED, value)
    if isinstance(value, dict):
        return {_scrub(k, keys): _scrub(v, keys) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, keys) for v in value]
    return value


def contains_secret(text: str, secrets: Iterable[SecretStr | str | None]) -> bool:
    """True when ``text`` contains any non-blank secret (case ignored, as :func:`redact`)."""
    keys = _values(secrets)
    return bool(keys) and _pattern(keys).search(text) is not None


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` safe to write to a terminal: every control character (C0 but tab,
    DEL, C1) and every Unicode format character (category ``Cf``: bidi overrides,
    zero-width joiners) shown as a ``\\xNN``/``\\uNNNN`` escape; newlines too unless
    ``keep_newlines``. Printable text is unchanged."""
    out: list[str] = []
    for ch in text:
        if ch == "\t" or (keep_newlines and ch == "\n"):
            out.append(ch)
        elif unicodedata.category(ch) in ("Cc", "Cf"):
            out.append(_escape(ch))
        else:
            out.append(ch)
    return "".join(out)


def safe_server_text(text: str, secrets: Iterable[SecretStr | str | None]) -> str:
    """Text a server sent, made fit for a record or stderr: secrets redacted first,
    then control characters escaped (:func:`redact`, then :func:`printable`)."""
    return printable(redact(text, secrets))
