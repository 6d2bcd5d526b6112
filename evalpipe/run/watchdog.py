"""The stall watchdog: a thread that notices when a run stops making progress and hands it over.

A hung job (a Ray placement never satisfied, a collective waiting on a dead peer, an engine
blocked forever) otherwise burns its whole allocation in silence. The runner reports progress
(an engine step finished, a sample scored or written, the load phase done); when none comes for
the current phase's limit, the watchdog calls `on_stall` once, on its own thread, because an
in-process engine can block the main thread for good.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from evalpipe.catalog.preset import DTYPE_BYTES, Preset
from evalpipe.core.errors import ConfigError

Phase = Literal["load", "generate"]

# Default limits. Loading is sized from the weights: a 180B bf16 model (335 GiB) read from a
# shared file system at a few hundred MB/s per node, plus Ray start-up and CUDA graph capture,
# must never look stalled. Generation reports progress after every engine step (a second or
# less even for the largest batches), so minutes without one mean something is stuck.
LOAD_BASE_S = 900.0
LOAD_S_PER_GIB = 6.0
GENERATE_S = 600.0
GIB = 2**30


@dataclass(frozen=True, kw_only=True)
class StallLimits:
    """Seconds without progress after which a run counts as stalled, per phase."""

    load_s: float
    generate_s: float

    def __post_init__(self) -> None:
        for name in ("load_s", "generate_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(
                    f"The stall limit {name}={value!r} must be a positive number of seconds; "
                    "use --stall-timeout 0 to turn the watchdog off instead."
                )

    def for_phase(self, phase: Phase) -> float:
        return self.load_s if phase == "load" else self.generate_s


def default_limits(preset: Preset) -> StallLimits:
    """LOAD_BASE_S + LOAD_S_PER_GIB per GiB of the preset's weights at its dtype; GENERATE_S."""
    weights_gib = preset.architecture.params_b * 1e9 * DTYPE_BYTES[preset.dtype] / GIB
    return StallLimits(load_s=LOAD_BASE_S + LOAD_S_PER_GIB * weights_gib, generate_s=GENERATE_S)


def check_stall_timeout(timeout_s: float | None) -> None:
    """`--stall-timeout`: None (sized from the model), 0 (off) or a positive number of seconds."""
    if timeout_s is not None and not 0 <= timeout_s < math.inf:
        raise ConfigError(
            f"--stall-timeout must be 0 (off) or a positive number of seconds, got {timeout_s!r}."
        )


def stall_limits(preset: Preset, timeout_s: float | None) -> StallLimits | None:
    """`--stall-timeout`: None sizes the limits from the preset, 0 turns the watchdog off, any
    other value is the limit for every phase."""
    check_stall_timeout(timeout_s)
    if timeout_s is None:
        return default_limits(preset)
    if timeout_s == 0:
        return None
    return StallLimits(load_s=timeout_s, generate_s=timeout_s)


@dataclass(frozen=True, kw_only=True)
class Stall:
    """What the watchdog saw when it gave up."""

    phase: Phase
    idle_s: float
    limit_s: float
    last_progress: str

    def describe(self) -> str:
        return (
            f"no progress for {self.idle_s:.0f} s during {self.phase} (limit {self.limit_s:g} s; "
            f"last progress: {self.last_progress})"
        )


class Watchdog:
    """Calls `on_stall(Stall)` once, from its own thread, when the current phase's limit passes
    without `progress()` or `phase()`. `clock` is injectable so tests need not wait."""

    def __init__(
        self,
        limits: StallLimits,
        on_stall: Callable[[Stall], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        poll_s: float | None = None,
    ) -> None:
        self.limits = limits
        # Checked a few times per limit, but at least every 5 s: a stall is reported within
        # limit + poll_s of the last progress.
        self.poll_s = poll_s or min(5.0, min(limits.load_s, limits.generate_s) / 10)
        self._on_stall = on_stall
        self._clock = clock
        self._phase: Phase = "load"
        self._last = clock()
        self._what = "the run started"
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Watchdog:
        self._thread = threading.Thread(target=self._run, name="evalpipe-watchdog", daemon=True)
        self._thread.start()
        return self

    def phase(self, name: Phase) -> None:
        """Enter a phase (its limit applies from now on); entering one is progress."""
        self._phase = name
        self.progress(f"{name} began")

    def progress(self, what: str) -> None:
        self._what = what
        self._last = self._clock()

    def check(self) -> Stall | None:
        """The stall, if the current phase has gone without progress for its limit."""
        limit = self.limits.for_phase(self._phase)
        idle = self._clock() - self._last
        if idle < limit:
            return None
        return Stall(phase=self._phase, idle_s=idle, limit_s=limit, last_progress=self._what)

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(self.poll_s):
            stall = self.check()
            if stall is not None:
                self._stopped.set()
                self._on_stall(stall)
                return


def end_process(status: int) -> None:
    """Exit at once with `status`, from any thread: the main thread may be blocked for good, so
    neither SystemExit nor atexit handlers would run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
