"""`evalpipe status [RUN_DIR]`: where a submitted run (or sweep) stands, and where its logs are."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        type=Path,
        nargs="?",
        metavar="RUN_DIR",
        help="a run or sweep directory (default: the newest submitted one under results/)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _newest(results: Path) -> Path:
    from evalpipe.core.errors import RunDirError
    from evalpipe.rundir.layout import SUBMISSION
    from evalpipe.rundir.sweep import SWEEP_MANIFEST

    found = [p.parent for p in results.glob(f"*/{SUBMISSION}") if p.is_file()]
    found += [p.parent for p in results.glob(f"*/{SWEEP_MANIFEST}") if _submitted_sweep(p.parent)]
    if not found:
        raise RunDirError(
            f"No submitted runs under {results}/. Name a run directory, or submit one with "
            "`evalpipe submit`."
        )
    return max(found, key=lambda p: p.stat().st_mtime)


def _submitted_sweep(folder: Path) -> bool:
    """A sweep folder written by `evalpipe submit` (a local sweep has no jobs to show)."""
    from evalpipe.core.errors import RunDirError
    from evalpipe.rundir.sweep import read_sweep

    try:
        sweep = read_sweep(folder)
    except RunDirError:
        return False
    return sweep is not None and any(r.job_id for r in sweep.runs)


def _run_dirs(root: Path) -> list[Path]:
    from evalpipe.rundir.sweep import read_sweep

    sweep = read_sweep(root)
    return [root] if sweep is None else [root / r.run_dir for r in sweep.runs]


def run(args: argparse.Namespace) -> int:
    from evalpipe.core.textable import format_table
    from evalpipe.jobs.jobstatus import Job
    from evalpipe.rundir.layout import RunDir
    from evalpipe.slurm.client import Slurm

    root = args.run_dir or _newest(Path("results"))
    client = Slurm()
    report = []
    for run_dir in _run_dirs(root):
        job = Job.load(run_dir, slurm=client)
        status = job.state()
        report.append(
            {
                "run_dir": str(run_dir),
                "job_id": job.job_id,
                "merge_job_id": job.merge_job_id,
                "tasks": [
                    {"job_id": t.job_id, "state": t.state, "reason": t.reason, "nodes": t.nodes}
                    for t in status.all
                ],
                "done": status.done,
                "ok": status.ok,
                "samples_done": status.samples_done,
                "logs": [str(p) for p in job.log_paths()],
            }
        )
    if args.json:
        print(json.dumps(report if len(report) > 1 else report[0], indent=2))
        return 0
    for entry in report:
        print(f"{entry['run_dir']}: {entry['samples_done']} samples done")
        rows = [(t["job_id"], t["state"], t["nodes"], t["reason"]) for t in entry["tasks"]]
        print(format_table(("job", "state", "nodes", "reason"), rows))
        logs = entry["logs"] or [f"{RunDir(Path(entry['run_dir'])).logs}/ (empty so far)"]
        print("logs:\n" + "\n".join(f"  {p}" for p in logs) + "\n")
    return 0
