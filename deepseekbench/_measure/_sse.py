"""An incremental ``text/event-stream`` decoder that keeps each event's arrival time.

Why our own and not ``httpx-sse``: httpx-sse (0.4.3) decodes bytes to text before
it splits lines and hides the reads, so an event cannot carry the time its bytes
arrived; and it dispatches an empty event for a comment-only block once any
``id:`` was seen (a comment is never an event). This decoder is fed raw bytes
with the ``time.perf_counter_ns()`` stamp taken when they were read, and follows
the WHATWG "event stream interpretation" rules
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):

* lines end with CRLF, LF or CR, also when a CRLF pair is split across reads;
* a leading UTF-8 BOM is dropped; bytes are decoded as UTF-8 only per whole line
  (a multi-byte character split across reads is never broken);
* ``:`` starts a comment; ``field:value`` and ``field: value`` are the same; a line
  without a colon is a field with an empty value;
* ``data`` lines are joined with LF; ``event``, ``id`` (ignored if it contains
  NUL) and ``retry`` (ASCII digits only) are kept; other fields are ignored;
* a blank line dispatches the event, unless no ``data`` line was seen;
* at end of stream an unterminated event is discarded (:attr:`SSEDecoder.pending`
  tells the caller that this happened; :meth:`SSEDecoder.flush` shows what it held).

Beyond the spec, for a client that must not be fooled or exhausted by a server:

* every ignored non-empty line (an unknown field name such as a padded
  ``" data "``, an ``id`` holding NUL, a non-numeric ``retry``) is counted in
  :attr:`SSEDecoder.ignored_lines` and passed to ``on_ignored``: the spec drops
  it silently, so a stream whose text vanished that way would look clean;
* a line longer than ``max_line_bytes`` or an event whose data exceeds
  ``max_event_bytes`` is dropped whole (memory stays bounded) and reported to
  ``on_oversized``; reading goes on with the next event;
* work is linear in the bytes fed: a line spread over many reads is kept as
  parts and joined once, never re-copied per read;
* an event that ends the stream (``is_last``, e.g. the OpenAI ``[DONE]``
  sentinel, which the SSE spec does not know) ends decoding: every later
  non-empty line other than a comment is only counted in
  :attr:`SSEDecoder.lines_after_end` (an unterminated last one too, at
  :meth:`SSEDecoder.flush`), and no further event is dispatched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "SSEDecoder",
    "SSEEvent",
]

_BOM = b"\xef\xbb\xbf"

DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
"""Longest line the decoder keeps (bytes, line end excluded): 8 MiB."""

DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
"""Most data one event may hold (bytes, data lines plus their joining LFs): 16 MiB."""


class SSEEvent(NamedTuple):
    """One dispatched server-sent event.

    Attributes:
        event: the event type (``"message"`` unless an ``event:`` field set it).
        data: the data lines joined with ``"\\n"`` (UTF-8 decoded).
        id: the last event ID seen so far in the stream (``""`` if none).
        retry: the reconnection time in ms from a ``retry:`` field, else ``None``.
        arrival_ns: ``time.perf_counter_ns()`` of the read that completed the event.
    """

    event: str
    data: str
    id: str
    retry: int | None
    arrival_ns: int


class SSEDecoder:
    """Feed raw bytes with their arrival stamps; get complete events back.

    Args:
        max_line_bytes: the longest line kept (bytes); a longer one drops its event.
        max_event_bytes: the most data one event may hold (bytes); more drops it.
        on_ignored: called with ``(field name, value)`` (raw bytes) for every
            ignored non-empty line.
        on_oversized: called with a short message once per dropped event.
        is_last: called with each dispatched event's data; ``True`` marks the
            event that ends the stream (lines after it are only counted).

    Raises:
        ValueError: a limit below 1 byte.

    Not thread-safe; one decoder per response.
    """

    __slots__ = (
        "_broken",
        "_data",
        "_data_len",
        "_ended",
        "_event",
        "_is_last",
        "_last_id",
        "_max_event",
        "_max_line",
        "_on_ignored",
        "_on_oversized",
        "_part",
        "_part_len",
        "_pending_cr",
        "_retry",
        "_skip_line",
        "_started",
        "ignored_lines",
        "lines_after_end",
        "oversized_events",
    )

    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        on_ignored: Callable[[bytes, bytes], None] | None = None,
        on_oversized: Callable[[str], None] | None = None,
        is_last: Callable[[str], bool] | None = None,
    ) -> None:
        if max_line_bytes < 1 or max_event_bytes < 1:
            raise ValueError("max_line_bytes and max_event_bytes must be >= 1")
        self._max_line = max_line_bytes
        self._max_event = max_event_bytes
        self._on_ignored = on_ignored
        self._on_oversized = on_oversized
        self._is_last = is_last
        self._ended = False
        self._part: list[bytes] = []  # an unterminated line, as read
        self._part_len = 0
        self._skip_line = False  # inside an oversized line: drop it up to its end
        self._broken = False  # the current event was dropped: skip to its blank line
        self._data: list[bytes] = []
        self._data_len = 0
        self._event = b""
        self._last_id = ""
        self._retry: int | None = None
        self._pending_cr = False
        self._started = False
        self.ignored_lines = 0
        """Ignored non-empty lines so far (unknown fields, NUL ids, bad retry)."""
        self.oversized_events = 0
        """Events dropped for exceeding a size limit so far."""
        self.lines_after_end = 0
        """Non-empty, non-comment lines after the event that ended the stream (``is_last``)."""

    @property
    def ended(self) -> bool:
        """True once an event accepted by ``is_last`` was dispatched."""
        return self._ended

    def feed(self, chunk: bytes, arrival_ns: int) -> list[SSEEvent]:
        """Consume ``chunk`` (bytes read at ``arrival_ns``) and return the events it completed."""
        if not chunk:
            return []
        if self._pending_cr:
            # A CR ended the previous read; an LF opening this one is the same line end.
            self._pending_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
                if not chunk:
                    return []
        if not self._started:
            if self._part:
                chunk = b"".join(self._part) + chunk  # at most two bytes of a BOM
                self._part, self._part_len = [], 0
            if len(chunk) < len(_BOM) and _BOM.startswith(chunk):
                self._part, self._part_len = [chunk], len(chunk)
                return []
            self._started = True
            if chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
            if not chunk:
                return []
        # bytes.splitlines breaks only at ASCII CR, LF and CRLF (unlike str.splitlines);
        # only the new bytes are split, so a long line costs linear time.
        lines = chunk.splitlines(keepends=True)
        tail: bytes | None = None
        if lines[-1][-1:] not in (b"\n", b"\r"):
            tail = lines.pop()
        else:
            # a final CR may be the first half of a CRLF split across reads
            self._pending_cr = lines[-1][-1:] == b"\r"
        events: list[SSEEvent] = []
        for i, raw in enumerate(lines):
            if raw[-1:] == b"\n":
                line = raw[:-2] if raw[-2:-1] == b"\r" else raw[:-1]
            else:
                line = raw[:-1]
            if i == 0 and (self._part or self._skip_line):
                joined = self._complete(line)
                if joined is None:
                    continue
                line = joined
            elif len(line) > self._max_line:
                self._oversized(f"a line longer than max_line_bytes={self._max_line}")
                continue
            if self._ended:
                self._after_end(line)
                continue
            if line[:5] == b"data:":  # the hot path
                value = line[5:]
                self._add_data(value[1:] if value[:1] == b" " else value)
                continue
            # a blank line dispatches (the other fields: ``_line``)
            event = self._dispatch(arrival_ns) if not line else self._line(line, arrival_ns)
            if event is not None:
                events.append(event)
                if self._is_last is not None and self._is_last(event.data):
                    self._ended = True
        if tail is not None:
            self._keep(tail)
        return events

    def flush(self, arrival_ns: int) -> SSEEvent | None:
        """End of stream: the event an unterminated last block would have dispatched.

        The spec discards that event; this returns it (its last line too, if it
        had no line end) so the caller can judge it, e.g. accept a complete
        ``[DONE]`` sentinel that lacked only its blank line. Resets the pending
        state; returns ``None`` when no data was pending.
        """
        if self._part and not self._skip_line:
            line = b"".join(self._part)
            self._part, self._part_len = [], 0
            if self._ended:
                self._after_end(line)
            elif line[:5] == b"data:":
                value = line[5:]
                self._add_data(value[1:] if value[:1] == b" " else value)
            elif line:
                self._line(line, arrival_ns)
        self._part, self._part_len, self._skip_line = [], 0, False
        return self._dispatch(arrival_ns)

    @property
    def pending(self) -> bool:
        """True when an unterminated event holding data would be lost at end of stream."""
        if self._data:
            return True
        return bool(self._part) and not self._part[0].startswith(b":")

    # -- internals ----------------------------------------------------------------
    def _after_end(self, line: bytes) -> None:
        if line and line[:1] != b":":
            self.lines_after_end += 1

    def _complete(self, end: bytes) -> bytes | None:
        """Join the kept parts with ``end``; ``None`` when the line is dropped."""
        if self._skip_line:
            self._skip_line = False
            return None
        total = self._part_len + len(end)
        parts = self._part
        self._part, self._part_len = [], 0
        if total > self._max_line:
            self._oversized(f"a line longer than max_line_bytes={self._max_line}")
            return None
        parts.append(end)
        return b"".join(parts)

    def _keep(self, tail: bytes) -> None:
        """Keep an unterminated line's bytes, or start dropping it once too long."""
        if self._skip_line:
            return
        if self._part_len + len(tail) > self._max_line:
            self._part, self._part_len = [], 0
            self._skip_line = True
            self._oversized(f"a line longer than max_line_bytes={self._max_line}")
            return
        self._part.append(tail)
        self._part_len += len(tail)

    def _add_data(self, value: bytes) -> None:
        if self._broken:
            return
        self._data_len += len(value) + 1
        if self._data_len - 1 > self._max_event:
            self._oversized(f"an event larger than max_event_bytes={self._max_event}")
            return
        self._data.append(value)

    def _oversized(self, what: str) -> None:
        """Drop the current event (once) and report why."""
        if self._ended:
            self.lines_after_end += 1  # past the end: counted, never an error
            return
        self._data, self._data_len = [], 0
        if self._broken:
            return
        self._broken = True
        self.oversized_events += 1
        if self._on_oversized is not None:
            self._on_oversized(f"{what}: event dropped")

    def _ignored(self, name: bytes, value: bytes) -> None:
        self.ignored_lines += 1
        if self._on_ignored is not None:
            self._on_ignored(name, value)

    def _line(self, line: bytes, arrival_ns: int) -> SSEEvent | None:
        if not line:
            return self._dispatch(arrival_ns)
        if line[:1] == b":":
            return None
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            self._add_data(value)
        elif name == b"event":
            self._event = value
        elif name == b"id" and b"\0" not in value:
            self._last_id = value.decode("utf-8", errors="replace")
        elif name == b"retry" and value.isdigit() and value.isascii():
            self._retry = int(value)
        else:
            self._ignored(name, value)
        return None

    def _dispatch(self, arrival_ns: int) -> SSEEvent | None:
        if self._broken or not self._data:
            self._broken = False
            self._data, self._data_len = [], 0
            self._event = b""
            return None
        data = b"\n".join(self._data).decode("utf-8", errors="replace")
        name = self._event  # no ``event:`` line (the usual case): the default type
        event = SSEEvent(  # positional: event, data, id, retry, arrival_ns
            name.decode("utf-8", errors="replace") or "message" if name else "message",
            data,
            self._last_id,
            self._retry,
            arrival_ns,
        )
        self._data, self._data_len = [], 0
        self._event = b""
        return event
