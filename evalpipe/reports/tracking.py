"""`evalpipe report --export wandb|mlflow`: log runs that exist already to a tracker, with the
same names a live `--track` run uses (evalpipe.rundir.tracked): for a run whose tracker failed,
or one made before it was tracked. A run tracked by the same tracker before continues its
tracked run; the run directory itself is left as it is (only its run writes the manifest)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evalpipe.core.errors import RunDirError
from evalpipe.run.trackers import BACKENDS, check_tracker
from evalpipe.run.tracking import Tracking
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import read_manifest
from evalpipe.rundir.results import read_samples
from evalpipe.rundir.summary import read_summary
from evalpipe.rundir.tracked import sample_rows, tracked_metrics, tracked_params, tracking_group


def export_run(tracker: str, run_dir: Path) -> Tracking:
    """Log one run directory (its configuration, figures, samples and device series) and close
    the tracked run; the finished Tracking (`failed` after its one warning)."""
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
    tracking = Tracking(
        BACKENDS[tracker],
        run_dir,
        tracker=tracker,
        group=tracking_group(files),
        previous=manifest.tracking,
        exit_wait_s=None,  # nothing else to do: wait until it is logged
    ).start(tracked_params(manifest))
    tracking.end(tracked_metrics(summary), sample_rows(records), status=manifest.status)
    return tracking


def export_runs(tracker: str, run_dirs: Sequence[Path]) -> list[Tracking]:
    return [export_run(tracker, path) for path in run_dirs]
