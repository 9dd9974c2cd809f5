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
  tells the caller that this happened).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["SSEDecoder", "SSEEvent"]

_BOM = b"\xef\xbb\xbf"


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

    Not thread-safe; one decoder per response.
    """

    __slots__ = ("_buf", "_data", "_event", "_last_id", "_pending_cr", "_retry", "_started")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self._event = b""
        self._last_id = ""
        self._retry: int | None = None
        self._pending_cr = False
        self._started = False

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
        buf = self._buf + chunk if self._buf else chunk
        if not self._started:
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                self._buf = buf
                return []
            self._started = True
            if buf.startswith(_BOM):
                buf = buf[len(_BOM) :]
        if not buf:
            self._buf = b""
            return []
        # bytes.splitlines breaks only at ASCII CR, LF and CRLF (unlike str.splitlines).
        lines = buf.splitlines(keepends=True)
        last = lines[-1]
        if last[-1:] not in (b"\n", b"\r"):
            self._buf = lines.pop()
        else:
            self._buf = b""
            # a final CR may be the first half of a CRLF split across reads
            self._pending_cr = last[-1:] == b"\r"
        events: list[SSEEvent] = []
        for line in lines:
            if line[-1:] == b"\n":
                line = line[:-2] if line[-2:-1] == b"\r" else line[:-1]
            else:
                line = line[:-1]
            if line[:5] == b"data:":  # the hot path
                value = line[5:]
                self._data.append(value[1:] if value[:1] == b" " else value)
                continue
            event = self._line(line, arrival_ns)
            if event is not None:
                events.append(event)
        return events

    @property
    def pending(self) -> bool:
        """True when an unterminated event holding data would be lost at end of stream."""
        if self._data:
            return True
        return bool(self._buf) and not self._buf.startswith(b":")

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
            self._data.append(value)
        elif name == b"event":
            self._event = value
        elif name == b"id":
            if b"\0" not in value:
                self._last_id = value.decode("utf-8", errors="replace")
        elif name == b"retry" and value.isdigit() and value.isascii():
            self._retry = int(value)
        return None

    def _dispatch(self, arrival_ns: int) -> SSEEvent | None:
        if not self._data:
            self._event = b""
            return None
        data = b"\n".join(self._data).decode("utf-8", errors="replace")
        event = SSEEvent(
            event=self._event.decode("utf-8", errors="replace") or "message",
            data=data,
            id=self._last_id,
            retry=self._retry,
            arrival_ns=arrival_ns,
        )
        self._data = []
        self._event = b""
        return event
