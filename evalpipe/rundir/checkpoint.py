"""When a run may stop and resume: the configuration check (the fingerprint itself is
RunConfig's, evalpipe.rundir.runconfig) and the stop-on-signal flag."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from evalpipe.core.errors import ResumeMismatchError
from evalpipe.rundir.manifest import Manifest
from evalpipe.rundir.runconfig import RunConfig


def check_resume(manifest: Manifest, config: RunConfig, run_dir: Path) -> None:
    """Refuse to continue a run directory with a configuration other than the one it began with."""
    old_hash = manifest.config_hash
    new_hash = config.fingerprint()
    if old_hash == new_hash:
        return
    diff = manifest.config.diff(config) or ["(fingerprint format changed)"]
    raise ResumeMismatchError(
        f"{run_dir} was started with a different configuration (config_hash {old_hash} there, "
        f"{new_hash} now):\n  " + "\n  ".join(diff) + "\nRerun with the original options to "
        "resume it, or pass a new --out directory to start a separate run."
    )


class StopOnSignal:
    """Within `with`, SIGUSR1/SIGTERM only set `requested`: the runner then aborts what is in
    flight, writes what finished and exits 75. Previous handlers come back on exit."""

    SIGNALS = (signal.SIGUSR1, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested: str | None = None  # the signal's name once one arrived
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested is None:
            self.requested = signal.Signals(signum).name
            print(
                f"evalpipe run: {self.requested} received; aborting requests in flight and "
                "checkpointing",
                file=sys.stderr,
                flush=True,
            )

    def __enter__(self) -> StopOnSignal:
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
