"""Tracking from what a run directory holds, beside the live tracking of run/tracking.py.

`evalpipe report --export wandb|mlflow` logs runs that exist already to a tracker, with the
same names a live `--track` run uses (evalpipe.rundir.tracked): for a run whose tracker failed,
or one made before it was tracked. A run tracked by the same tracker before continues its
tracked run; the run directory itself is left as it is (only its run writes the manifest).
A judged run's judging phase adds its judge's figures to the same tracked run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from evalpipe.core.errors import DamagedFileError, RunDirError
from evalpipe.run.trackers import BACKENDS, check_tracker
from evalpipe.run.tracking import Tracking, exit_wait_s
from evalpipe.rundir.judgments import JudgeDefinition, JudgeSummary, judge_dirs, read_judge_summary
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import read_manifest
from evalpipe.rundir.samplelog import read_samples
from evalpipe.rundir.summary import read_summary
from evalpipe.rundir.tracked import (
    judge_metrics,
    judge_params,
    sample_rows,
    tracked_metrics,
    tracked_params,
    tracking_group,
)

if TYPE_CHECKING:
    from evalpipe.run.judgephase import JudgeResult


def export_run(tracker: str, run_dir: Path, *, exit_wait_s: float | None = None) -> Tracking:
    """Log one run directory (its configuration, figures, samples, device series and its
    judges' figures) and close the tracked run, waiting at most `exit_wait_s` (None: until
    logged); the Tracking (`failed` after its one warning)."""
    check_tracker(tracker)
    files = RunDir(run_dir)
    manifest = read_manifest(files)
    summary = read_summary(files)
    if manifest is None or summary is None:
        raise RunDirError(
            f"{run_dir} has no manifest.json and summary.json to export: a run writes both "
            "when an attempt ends. Resume it with `evalpipe run --out DIR` first."
        )
    records = read_samples(files.samples).records if files.samples.exists() else []
    judges: dict[str, JudgeSummary] = {}
    for folder in judge_dirs(files):
        try:
            judges[folder.fingerprint] = read_judge_summary(folder)
        except (RunDirError, DamagedFileError):
            continue  # a judge still judging: its next phase logs it
    tracking = Tracking(
        BACKENDS[tracker],
        run_dir,
        tracker=tracker,
        group=tracking_group(files),
        previous=manifest.tracking,
        exit_wait_s=exit_wait_s,
    ).start(tracked_params(manifest) | judge_params({f: s.judge for f, s in judges.items()}))
    metrics = tracked_metrics(summary) | judge_metrics(judges)
    tracking.end(metrics, sample_rows(records), status=manifest.status)
    return tracking


def track_judging(tracker: str, run_dir: Path, judge: JudgeDefinition) -> Tracking:
    """The judging phase's part of the run's tracked run, started before the judge so that the
    tracker's import and start overlap the judging: the judge's identity and settings (`judge`,
    its definition) now, its figures at `end_judging`. The generation's figures, samples and
    readings, which its own phase logged, are not logged again."""
    check_tracker(tracker)
    files = RunDir(run_dir)
    manifest = read_manifest(files)
    return Tracking(
        BACKENDS[tracker],
        run_dir,
        tracker=tracker,
        group=tracking_group(files),
        previous=None if manifest is None else manifest.tracking,
        exit_wait_s=exit_wait_s(),
        new_readings_only=True,
    ).start(judge_params({judge.fingerprint: judge}))


def end_judging(tracking: Tracking, result: JudgeResult) -> None:
    """Log a judging phase's figures (its summary, once complete) and close the tracked run."""
    if result.status == "complete":
        tracking.end(
            judge_metrics({result.folder.fingerprint: result.summary}), (), status="complete"
        )
    else:
        tracking.end({}, (), status="interrupted")
