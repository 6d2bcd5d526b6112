"""`evalpipe report --export wandb|mlflow`: log runs that exist already to a tracker, with the
same names a live `--track` run uses (evalpipe.rundir.tracked): for a run whose tracker failed,
or one made before it was tracked. A run tracked by the same tracker before continues its
tracked run; the run directory itself is left as it is (only its run writes the manifest).
A judged run's judge phase logs this way too, once its judgments are in."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evalpipe.core.errors import DamagedFileError, RunDirError
from evalpipe.run.trackers import BACKENDS, check_tracker
from evalpipe.run.tracking import Tracking
from evalpipe.rundir.judgments import judge_dirs, read_judge_summary
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import read_manifest
from evalpipe.rundir.results import read_samples
from evalpipe.rundir.summary import read_summary
from evalpipe.rundir.tracked import (
    judge_metrics,
    judge_params,
    sample_rows,
    tracked_metrics,
    tracked_params,
    tracking_group,
)


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
    judges = {}
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
    ).start(tracked_params(manifest) | judge_params(judges))
    metrics = tracked_metrics(summary) | judge_metrics(judges)
    tracking.end(metrics, sample_rows(records), status=manifest.status)
    return tracking


def export_runs(tracker: str, run_dirs: Sequence[Path]) -> list[Tracking]:
    return [export_run(tracker, path) for path in run_dirs]
