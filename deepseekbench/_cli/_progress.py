"""The command line's progress bar on stderr.

Holds :class:`StderrProgress` (a :data:`~deepseekbench._runner._progress.ProgressFn`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

    from deepseekbench._runner._progress import ProgressEvent

__all__ = ["StderrProgress"]


class StderrProgress:
    """A tqdm progress bar on ``stream`` (done/total, errors, elapsed, rate);
    silent unless ``stream`` is a TTY, except for one line at the start of a resumed
    run (measured requests kept from the results file and still to do), unless
    ``resume_line`` is False (a caller that says itself why a run reuses a file)."""

    def __init__(self, stream: TextIO, *, resume_line: bool = True) -> None:
        self.stream = stream
        self.resume_line = resume_line
        self.enabled = stream.isatty()
        self._bar: tqdm[None] | None = None

    def __call__(self, ev: ProgressEvent) -> None:
        from tqdm import tqdm

        if ev.phase == "resume" and self.resume_line:
            self.stream.write(
                f"resumed: {ev.kept} measured request(s) kept from the results file, "
                f"{ev.remaining} to do\n"
            )
            self.stream.flush()
        if not self.enabled:
            return
        if self._bar is None:
            self._bar = tqdm(
                total=ev.total, file=self.stream, unit="req", dynamic_ncols=True, leave=True
            )
        bar = self._bar
        bar.total = ev.total
        bar.set_description_str(ev.phase[:40], refresh=False)
        bar.set_postfix_str(f"{ev.errors} errors", refresh=False)
        bar.update(ev.done - bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
