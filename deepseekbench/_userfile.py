"""The one reader for files a user names: plans, prompt/workload/dataset files,
task files, a model's ``config.json`` and GGUF header.

Every such read goes through :func:`read_user_bytes` / :func:`read_user_text`
(or :func:`check_user_file` where a library opens the file itself, as ``gguf``
memory-maps a GGUF file). The guards are the same everywhere:

* the file is opened non-blocking and checked with ``fstat`` on the open
  descriptor (no race between the check and the read): a FIFO (which would block
  the reader forever), a device (``/dev/zero`` never ends), a socket or a
  directory is refused before a byte is read;
* the size is bounded (``max_bytes``; at most ``max_bytes + 1`` bytes are ever
  read, so a file that grows while read is still refused);
* a missing file, a permission problem, a symlink loop, a file over the limit or
  text that is not UTF-8 gives one line naming the file, raised as the caller's
  own typed error (``fail``), e.g. ``PlanError`` or ``TaskFormatError``.

Layer: just above ``_errors`` (no import from the package at all).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "DATA_FILE_MAX_BYTES",
    "SMALL_FILE_MAX_BYTES",
    "check_user_file",
    "read_user_bytes",
    "read_user_text",
]

DATA_FILE_MAX_BYTES = 1024**3
"""Largest dataset, workload, prompts or task file read (bytes, 1 GiB): ShareGPT's
``ShareGPT_V3_unfiltered_cleaned_split.json`` is about 0.67 GB."""

SMALL_FILE_MAX_BYTES = 16 * 1024**2
"""Largest plan or ``config.json`` read (bytes, 16 MiB)."""

Fail = Callable[[str], Exception]
"""Builds the caller's typed error from one line of text."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop (too many levels of symbolic links)"
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return exc.strerror or type(exc).__name__


def _open_checked(path: Path, what: str, max_bytes: int, fail: Fail) -> tuple[int, int]:
    """``(fd, size)`` of ``path`` opened for reading, after the guards."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise fail(f"{what} {path} is a directory, not a file") from None
        raise fail(f"cannot read {what} {path}: {_os_reason(exc)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise fail(f"{what} {path} is {_kind(info.st_mode)}, not a regular file")
        if info.st_size > max_bytes:
            raise fail(
                f"{what} {path} is {info.st_size} bytes, over the limit of {max_bytes} bytes"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def check_user_file(
    path: str | os.PathLike[str], *, what: str, fail: Fail, max_bytes: int | None = None
) -> Path:
    """Check that ``path`` is a readable regular file (at most ``max_bytes`` bytes
    when given) without reading it; for a library that opens it itself.

    Raises:
        Exception: ``fail(line)`` (the caller's typed error) for a missing,
            unreadable or non-regular file, a symlink loop or one over the limit.
    """
    p = Path(path)
    fd, _ = _open_checked(p, what, max_bytes if max_bytes is not None else 2**63, fail)
    os.close(fd)
    return p


def read_user_bytes(
    path: str | os.PathLike[str],
    *,
    what: str,
    fail: Fail,
    max_bytes: int = DATA_FILE_MAX_BYTES,
) -> bytes:
    """The bytes of the user's file ``path`` (at most ``max_bytes`` bytes).

    ``what`` names the file in the error (``"plan"``, ``"task file"``, ...).

    Raises:
        Exception: ``fail(line)`` (the caller's typed error): missing file,
            permission denied, symlink loop, a directory, FIFO, device or socket,
            a file over ``max_bytes`` (also one that grew past it while read).
    """
    p = Path(path)
    fd, _ = _open_checked(p, what, max_bytes, fail)
    chunks: list[bytes] = []
    total = 0
    try:
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise fail(f"{what} {p} grew past the limit of {max_bytes} bytes while read")
    except OSError as exc:
        raise fail(f"cannot read {what} {p}: {_os_reason(exc)}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_user_text(
    path: str | os.PathLike[str],
    *,
    what: str,
    fail: Fail,
    max_bytes: int = DATA_FILE_MAX_BYTES,
) -> str:
    """The UTF-8 text of the user's file ``path`` (a leading BOM is kept as read;
    at most ``max_bytes`` bytes).

    Raises:
        Exception: ``fail(line)`` (the caller's typed error): as
            :func:`read_user_bytes`, or the bytes are not UTF-8 (the line names the
            byte offset and line number).
    """
    raw = read_user_bytes(path, what=what, fail=fail, max_bytes=max_bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise fail(
            f"{what} {Path(path)} is not UTF-8 text: {exc.reason} at byte {exc.start} (line {line})"
        ) from None
