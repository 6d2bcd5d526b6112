"""The tracking phase: mirror a run into W&B or MLflow while it goes, on a thread of its own.

    tracking = Tracking(BACKENDS["mlflow"], run_dir, group=..., previous=manifest.tracking)
    tracking.start(tracked_params(manifest))     # the tracker's import and start happen there
    tracking.progress(done, tokens)              # the loop's thread: an attribute write
    tracking.end(metrics, rows, status="complete")  # waits at most EXIT_WAIT_S

The tracker never costs the evaluation: its library is imported, its server reached and its
files written on the tracking thread only; every few seconds that thread logs the progress and
the device readings the monitor appended to metrics.csv since its last look. The first error
(a missing package, a bad key, a server that refuses) is one warning, after which the thread
drops what comes; `evalpipe report --export` logs the finished run later. `tracked` holds the
tracker's run once known; the runner copies it into the manifest (its one writer), so a resumed
run continues the same tracked run.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.core.errors import ConfigError
from evalpipe.monitor.csvlog import new_rows
from evalpipe.monitor.readings import READING_FIELDS
from evalpipe.run.trackers import Backend
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import RunStatus, TrackedRun
from evalpipe.rundir.tracked import SAMPLE_COLUMNS, name

log = logging.getLogger(__name__)

EXIT_WAIT_S = 5.0  # the most the tracker may delay the run's end, unless EXIT_WAIT_ENV says
EXIT_WAIT_ENV = "EVALPIPE_TRACK_EXIT_WAIT_S"
INTERVAL_S = 2.0  # how often progress and device readings are logged
# Set once `end` stops waiting for a tracker in this process: its thread, and the service
# process wandb's atexit hook waits for, must not hold the process's exit (evalpipe.cli.entry).
_LEFT_BEHIND = threading.Event()


def left_behind() -> bool:
    """Whether a tracker of this process was left behind still busy (see `Tracking.end`)."""
    return _LEFT_BEHIND.is_set()


def exit_wait_s() -> float:
    """The most the tracker may delay a run's end: $EVALPIPE_TRACK_EXIT_WAIT_S, else 5 s (a slow
    tracking server or file system may be given longer)."""
    raw = os.environ.get(EXIT_WAIT_ENV)
    if raw is None:
        return EXIT_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ConfigError(
            f"{EXIT_WAIT_ENV}={raw!r} is not a number of seconds (0 or more): set it to how long "
            f"the tracker may delay the run's end, or unset it for {EXIT_WAIT_S:g} s."
        )
    return value


@dataclass(frozen=True)
class _End:
    metrics: Mapping[str, float]
    rows: Sequence[Sequence[Any]]
    status: RunStatus


class Tracking:
    """One run's tracked counterpart, fed from the runner and logged from its own thread."""

    def __init__(
        self,
        backend: Callable[[Path], Backend],
        run_dir: Path,
        *,
        tracker: str,
        group: str,
        previous: TrackedRun | None = None,
        interval_s: float = INTERVAL_S,
        exit_wait_s: float | None = EXIT_WAIT_S,
        new_readings_only: bool = False,
    ) -> None:
        self._factory = backend
        self._exit_wait = exit_wait_s
        self._dir = run_dir
        self._tracker = tracker
        self._group = group
        # A run tracked by another tracker before starts a new tracked run here.
        self._resume = previous.run_id if previous and previous.backend == tracker else None
        self._interval = interval_s
        self._params: Mapping[str, str] = {}
        self._progress: tuple[int, int] | None = None  # (samples done, tokens): latest wins
        self._logged: tuple[int, int] | None = None
        # A later phase of a tracked run (the judge) logs only the readings made after it began.
        self._offsets: dict[Path, int] = (
            {path: path.stat().st_size for path in RunDir(run_dir).metrics_files()}
            if new_readings_only
            else {}
        )
        self._t0 = time.monotonic()
        self._end: _End | None = None
        self._ending = threading.Event()
        self._failed = False
        self._thread: threading.Thread | None = None
        self.tracked: TrackedRun | None = None

    def start(self, params: Mapping[str, str]) -> Tracking:
        self._params = params
        self._thread = threading.Thread(target=self._run, name="evalpipe-tracking", daemon=True)
        self._thread.start()
        return self

    def progress(self, done: int, tokens: int) -> None:
        """Samples written so far and their generated tokens (the loop's thread)."""
        self._progress = (done, tokens)

    def end(
        self,
        metrics: Mapping[str, float],
        rows: Sequence[Sequence[Any]],
        *,
        status: RunStatus,
    ) -> None:
        """Log the final figures and the samples table and close the tracked run, waiting at
        most `exit_wait_s` (None: until done); a tracker still busy then is left behind (a
        daemon thread) with one warning."""
        if self._thread is None:
            return
        wait_s = self._exit_wait
        self._end = _End(metrics=metrics, rows=rows, status=status)
        self._ending.set()
        self._thread.join(wait_s)
        if self._thread.is_alive() and not self._failed:
            self._failed = True  # what the abandoned thread raises from now on is not reported
            _LEFT_BEHIND.set()
            log.warning(
                "The %s tracker did not finish within %g s; the run ends without waiting for "
                "it. `evalpipe report --export %s %s` logs the finished run.",
                self._tracker,
                wait_s,
                self._tracker,
                self._dir,
            )

    @property
    def failed(self) -> bool:
        """Whether the tracker stopped on an error (and warned once)."""
        return self._failed

    # --- the tracking thread ---------------------------------------------------------------

    def _run(self) -> None:
        backend = self._call(self._open)
        if backend is None:
            return
        while not self._ending.wait(self._interval):
            if self._call(lambda: self._tick(backend)) is None:
                return
        end = self._end
        if end is None:
            return

        def close() -> bool:
            self._tick(backend)
            backend.summary(end.metrics)
            if end.rows:
                backend.table("samples", SAMPLE_COLUMNS, end.rows)
            backend.finish(end.status)
            return True

        self._call(close)

    def _open(self) -> Backend:
        backend = self._factory(self._dir)
        run_id = backend.start(
            run_name=self._dir.name, group=self._group, params=self._params, resume_id=self._resume
        )
        self.tracked = TrackedRun(backend=self._tracker, run_id=run_id)
        return backend

    def _call(self, work: Callable[[], Any]) -> Any:
        """`work()`, or None after one warning if it raised: the tracker stops, the run goes on."""
        if self._failed:
            return None
        try:
            return work()
        except Exception as exc:  # whatever the library raises, the run goes on
            if self._failed:  # left behind by `end`, which said so
                return None
            self._failed = True
            hint = (
                " Install it with: pip install 'evalpipe[track]'."
                if isinstance(exc, ImportError)
                else ""
            )
            log.warning(
                "Tracking to %s stopped (%s: %s); the run goes on untracked.%s "
                "`evalpipe report --export %s %s` logs the finished run later.",
                self._tracker,
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
                hint,
                self._tracker,
                self._dir,
            )
            return None

    def _tick(self, backend: Backend) -> bool:
        """Log what is new: the device readings appended since the last look, then progress."""
        by_time: dict[float, dict[str, float]] = {}
        for path in RunDir(self._dir).metrics_files():
            rows, self._offsets[path] = new_rows(path, self._offsets.get(path, 0))
            for row in rows:
                prefix = name("device", row.host, row.device)
                by_time.setdefault(row.time_s, {}).update(
                    (f"{prefix}/{field}", value)
                    for field in READING_FIELDS
                    if (value := getattr(row.reading, field)) is not None
                )
        for t, values in sorted(by_time.items()):
            if values:  # one call per sample time, every device's readings at once
                backend.log(values, int(t))
        progress = self._progress
        if progress is not None and progress != self._logged:
            done, tokens = progress
            elapsed = time.monotonic() - self._t0
            backend.log(
                {
                    "progress/samples": float(done),
                    "progress/tokens": float(tokens),
                    "progress/tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
                },
                done,
            )
            self._logged = progress
        return True
