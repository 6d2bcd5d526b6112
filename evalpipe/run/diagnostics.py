"""What a stalled run looked like, written into its run directory: every thread's Python stack,
`ray status` when Ray is in use, the devices' last readings, and the job log's last lines."""

from __future__ import annotations

import faulthandler
import os
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import TextIO

from evalpipe.core import provenance
from evalpipe.run.watchdog import Stall
from evalpipe.rundir.layout import RunDir

LOG_LINES = 80
RAY_STATUS_TIMEOUT_S = 30.0


def write_stall_report(path: Path, stall: Stall, run_dir: RunDir, slurm: dict | None) -> None:
    """Write the report section by section, flushing each, so a section that hangs (Ray's head
    gone, a file system stuck) still leaves the ones before it on disk."""
    with open(path, "w", encoding="utf-8") as out:
        out.write(
            f"evalpipe stall report, {provenance.utc_now()}, host {provenance.host()}, "
            f"pid {os.getpid()}\n{stall.describe()}\n"
        )
        _section(out, "Python stacks of every thread (faulthandler)")
        faulthandler.dump_traceback(file=out, all_threads=True)
        address = os.environ.get("RAY_ADDRESS")
        if address:
            _section(out, f"ray status --address {address}")
            out.write(_ray_status(address))
        _section(out, "last device readings (NVML, or the CPU fallback; one row per device)")
        out.write(_last_readings(run_dir))
        log = run_dir.job_log(slurm)
        _section(out, f"last {LOG_LINES} lines of {log or 'the job log'}")
        out.write(_tail(log) if log else "(not a SLURM job of evalpipe's templates: no job log)\n")


def _section(out: TextIO, title: str) -> None:
    out.write(f"\n== {title} ==\n")
    out.flush()


def _ray_status(address: str) -> str:
    argv = [sys.executable, "-m", "ray.scripts.scripts", "status", "--address", address]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RAY_STATUS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"(no answer within {RAY_STATUS_TIMEOUT_S:g} s: the Ray head may be gone)\n"
    except OSError as err:
        return f"(could not run `ray status`: {err})\n"
    return done.stdout + done.stderr


def _last_readings(run_dir: RunDir) -> str:
    """The header and each device's last row of metrics.csv and metrics-<host>.csv: the
    monitor samples every second on its own thread, so these are the readings at the stall."""
    files = run_dir.metrics_files()
    if not files:
        return "(no metrics files)\n"
    text = []
    for path in files:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        header, last = lines[:1], {}
        for line in lines[1:]:
            fields = line.split(",")
            if len(fields) > 2:
                last[(fields[1], fields[2])] = line  # (host, device)
        text += [f"{path.name}:", *header, *last.values()]
    return "\n".join(text) + "\n"


def _tail(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(deque(f, maxlen=LOG_LINES))
    except OSError as err:
        return f"(cannot read {path}: {err})\n"
