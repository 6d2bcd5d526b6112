"""Progress of a run: a redrawn bar on a terminal, plain periodic lines in a batch log."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Progress:
    """Samples done / total, generated tokens per second (samples per second when nothing is
    generated) and ETA for this attempt.

    Rates count only this attempt's work, so a resumed run's ETA is not skewed by samples it
    found already done.
    """

    BAR = 24

    def __init__(
        self,
        total: int,
        done: int,
        *,
        stream: TextIO | None = None,
        tty: bool | None = None,
        interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.done = done
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval_s = interval_s
        self.clock = clock
        self._start = clock()
        self._last_line = self._start
        self._samples = 0
        self._tokens = 0
        self._shown = -1  # `done` as of the last plain line
        if done and not self.tty:
            self._write(f"resuming: {done}/{total} samples already done")
        self._show(force=True)

    def advance(self, samples: int, tokens: int) -> None:
        self.done += samples
        self._samples += samples
        self._tokens += tokens
        self._show(force=False)

    def line(self) -> str:
        elapsed = max(self.clock() - self._start, 1e-9)
        if not self._samples:
            rate = "- tok/s"
        elif self._tokens:
            rate = f"{self._tokens / elapsed:.1f} tok/s"
        else:  # options scored by log-probability, nothing generated
            rate = f"{self._samples / elapsed:.1f} samples/s"
        remaining = self.total - self.done
        eta = _duration(remaining * elapsed / self._samples) if self._samples else "?"
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return f"{self.done}/{self.total} samples ({pct:.0f}%)  {rate}  ETA {eta}"

    def _show(self, *, force: bool) -> None:
        if self.tty:
            filled = self.BAR * self.done // self.total if self.total else self.BAR
            bar = "#" * filled + "-" * (self.BAR - filled)
            self.stream.write(f"\r[{bar}] {self.line()}\033[K")
            self.stream.flush()
            return
        now = self.clock()
        if force or now - self._last_line >= self.interval_s:
            self._last_line = now
            self._shown = self.done
            self._write(f"progress: {self.line()}")

    def _write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
        elif self._shown != self.done:
            self._write(f"progress: {self.line()}")
