"""When a run may stop and resume: the configuration fingerprint and the stop-on-signal flag.

A run directory belongs to one configuration. Its fingerprint (config_hash) covers everything
that changes which samples are run or what they yield; the engine layout (TP/PP, executor, OOM
fallback) is recorded but left out, because a requeued job may land on a different layout and
greedy outputs do not depend on it.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from evalpipe.core.errors import ResumeMismatchError
from evalpipe.rundir.manifest import Manifest

# Recorded under this key of the config, excluded from the fingerprint (see above).
UNHASHED = "engine"


def config_hash(config: Mapping[str, Any]) -> str:
    hashed = {k: v for k, v in config.items() if k != UNHASHED}
    canonical = json.dumps(hashed, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = value
    return out


def config_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """'key: old → new' for every fingerprinted value that differs, in key order."""
    a = _flatten({k: v for k, v in old.items() if k != UNHASHED}, "", {})
    b = _flatten({k: v for k, v in new.items() if k != UNHASHED}, "", {})
    missing = "(absent)"
    return [
        f"{key}: {json.dumps(a.get(key, missing))} → {json.dumps(b.get(key, missing))}"
        for key in sorted(a.keys() | b.keys())
        if a.get(key, missing) != b.get(key, missing)
    ]


def check_resume(manifest: Manifest, config: Mapping[str, Any], run_dir: Path) -> None:
    """Refuse to continue a run directory with a configuration other than the one it began with."""
    old_hash = manifest.config_hash
    new_hash = config_hash(config)
    if old_hash == new_hash:
        return
    diff = config_diff(manifest.config, config) or ["(fingerprint format changed)"]
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
