"""The cross-node phase protocol: the runner's monitor publishes its phase and clock in the run
directory, and the monitors on a multi-node job's other nodes follow them."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from evalpipe.monitor.readings import LogOnce


def publish(path: Path, state: dict[str, Any], once: LogOnce) -> None:
    """Replace the phase file atomically: a follower never reads half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(state), encoding="utf-8")
        tmp.replace(path)
    except OSError as err:
        once(
            logging.WARNING,
            ("publish", type(err).__name__),
            "Cannot write %s (%s); other nodes' monitors will not see the phase.",
            path,
            err,
        )


def read(path: Path, once: LogOnce) -> dict[str, Any] | None:
    """The published phase, clock and whether that run stopped; None while there is none."""
    try:
        # Reopened each time: NFS revalidates on open, so a new phase shows at once.
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {"phase": str(raw["phase"]), "t0": float(raw["t0"]), "stopped": raw["stopped"]}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        once(
            logging.WARNING,
            ("follow", type(err).__name__),
            "Cannot read %s (%s); not recording until it is readable.",
            path,
            err,
        )
        return None
