"""`evalpipe monitor --follow RUN_DIR`: record this node's GPUs for a run driven from another node.

NVML only sees the local node, so a multi-node job starts this on every node but the runner's.
It waits for the runner's monitor to publish its phase and clock in RUN_DIR, writes
RUN_DIR/metrics-<host>.csv on that clock, and exits when the run's monitor stops (or on
SIGTERM/SIGINT), printing the per-device summaries as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import threading
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--follow",
        required=True,
        type=Path,
        metavar="RUN_DIR",
        help="the run directory of the runner to follow (shared with that node)",
    )
    parser.add_argument(
        "--interval", type=float, default=1.0, metavar="S", help="seconds between samples"
    )
    parser.add_argument(
        "--host", help="node name written in each row (default: $SLURMD_NODENAME, else hostname)"
    )


def run(args: argparse.Namespace) -> int:
    from evalpipe.monitor import Monitor
    from evalpipe.rundir.layout import RunDir

    host = args.host or os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    followed = RunDir(args.follow)
    monitor = Monitor(
        followed.node_metrics(host),
        interval_s=args.interval,
        host=host,
        follow_phase=followed.phase_file,
    )
    asked_to_stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: asked_to_stop.set())
    with monitor:
        while not (asked_to_stop.is_set() or monitor.leader_stopped.is_set()):
            asked_to_stop.wait(min(args.interval, 1.0))
    print(json.dumps([d.to_dict() for d in monitor.stop()], indent=2))
    return 0
