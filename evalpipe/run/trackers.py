"""The experiment trackers a run logs to: W&B and MLflow behind one small interface, each
library imported only when its tracker starts (they are optional extras: evalpipe[track]).

Addresses and keys come from the environment only (WANDB_API_KEY, WANDB_MODE, WANDB_PROJECT,
MLFLOW_TRACKING_URI, MLFLOW_TRACKING_TOKEN, MLFLOW_EXPERIMENT_NAME, …): the libraries read
them, evalpipe never writes them anywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from evalpipe.catalog.clusters import TRACKERS
from evalpipe.core.errors import ConfigError
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import RunStatus

PROJECT = "evalpipe"  # W&B project and MLflow experiment unless the environment names one
# MLflow retries a refused request 7 times with backoff (minutes); a tracker that cannot reach
# its server should give up soon and say so once, so these are the defaults unless set.
MLFLOW_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
# An interrupted run resumes later (and its tracked run with it): KILLED, not FAILED.
# A run still `running` in its manifest was killed without a word.
_MLFLOW_STATUS = {
    "complete": "FINISHED",
    "interrupted": "KILLED",
    "running": "KILLED",
    "failed": "FAILED",
}
_BATCH = 500  # metrics per MLflow request (its limit is 1000), parameters are 100


class Backend(Protocol):
    """One tracked run. Every call may raise: the tracking thread turns that into one warning."""

    def start(
        self, *, run_name: str, group: str, params: Mapping[str, str], resume_id: str | None
    ) -> str:
        """Open (or, given `resume_id`, continue) the tracked run; its id."""
        ...

    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None: ...

    def summary(self, metrics: Mapping[str, float]) -> None:
        """The run's final figures."""
        ...

    def finish(self, status: RunStatus) -> None:
        """Close the tracked run as the attempt ended: complete, interrupted or failed."""
        ...


class MlflowBackend:
    """MLflow through MlflowClient (no process-global active run): the tracking URI from
    MLFLOW_TRACKING_URI, else a file store in the run directory."""

    def __init__(self, run_dir: Path) -> None:
        uri = os.environ.get("MLFLOW_TRACKING_URI") or RunDir(run_dir).mlruns.resolve().as_uri()
        if uri.startswith("file:"):
            # MLflow 3 keeps its file store only on request; a store in a shared file system
            # is what a compute node without a server can write.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        for key, value in MLFLOW_HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient(tracking_uri=uri)
        self._run_id = ""

    def start(
        self, *, run_name: str, group: str, params: Mapping[str, str], resume_id: str | None
    ) -> str:
        from mlflow.entities import Param

        client = self._client
        if resume_id:
            client.update_run(resume_id, status="RUNNING")
            known = client.get_run(resume_id).data.params
            # A parameter cannot change in MLflow: a resumed run keeps the first attempt's.
            params = {k: v for k, v in params.items() if k not in known}
            self._run_id = resume_id
        else:
            experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", PROJECT)
            experiment = client.get_experiment_by_name(experiment_name)
            experiment_id = (
                experiment.experiment_id
                if experiment is not None
                else client.create_experiment(experiment_name)
            )
            run = client.create_run(experiment_id, run_name=run_name, tags={"group": group})
            self._run_id = run.info.run_id
        items = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(items), 100):
            client.log_batch(self._run_id, params=items[i : i + 100])
        return self._run_id

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, v, now, step) for k, v in metrics.items()]
        for i in range(0, len(items), _BATCH):
            self._client.log_batch(self._run_id, metrics=items[i : i + _BATCH])

    def table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        data = {c: [row[i] for row in rows] for i, c in enumerate(columns)}
        self._client.log_table(self._run_id, data=data, artifact_file=f"{name}.json")

    def summary(self, metrics: Mapping[str, float]) -> None:
        self.log(metrics, 0)

    def finish(self, status: RunStatus) -> None:
        self._client.set_terminated(self._run_id, _MLFLOW_STATUS.get(status, "FAILED"))


class WandbBackend:
    """W&B in offline mode unless WANDB_MODE says otherwise (compute nodes rarely reach the
    internet): the run's files go to RUN/wandb/, and `evalpipe track sync RUN` uploads them."""

    def __init__(self, run_dir: Path) -> None:
        import wandb

        self._wandb = wandb
        self._dir = run_dir
        self._run: Any = None

    def start(
        self, *, run_name: str, group: str, params: Mapping[str, str], resume_id: str | None
    ) -> str:
        wandb = self._wandb
        self._run = wandb.init(
            mode=os.environ.get("WANDB_MODE") or "offline",
            dir=str(self._dir),
            project=os.environ.get("WANDB_PROJECT") or PROJECT,
            name=run_name,
            group=group,
            id=resume_id,
            resume="allow" if resume_id else None,
            config=dict(params),
            # evalpipe's monitor records the devices; W&B's own sampler would double them.
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
        )
        self._run.config.update(dict(params), allow_val_change=True)
        return str(self._run.id)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        # W&B's history has one step counter per run that must only grow; device readings and
        # progress come with steps of their own (seconds, samples), so W&B counts for itself.
        self._run.log(dict(metrics))

    def table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self._run.log(
            {name: self._wandb.Table(columns=list(columns), data=[list(r) for r in rows])}
        )

    def summary(self, metrics: Mapping[str, float]) -> None:
        self._run.summary.update(dict(metrics))

    def finish(self, status: RunStatus) -> None:
        self._run.finish(exit_code=0 if status == "complete" else 1)


# One per name in the catalogue's TRACKERS (cluster profiles and --track check against those).
BACKENDS: dict[str, Callable[[Path], Backend]] = {
    name: {"wandb": WandbBackend, "mlflow": MlflowBackend}[name] for name in TRACKERS
}


def check_tracker(name: str) -> None:
    if name not in BACKENDS:
        raise ConfigError(f"Unknown tracker {name!r}; choose one of {', '.join(BACKENDS)}.")


def sync_argv(run_dirs: Sequence[Path], *, dry_run: bool = False) -> list[str]:
    """`wandb sync` for the W&B offline runs in `run_dirs` (and their shards): what
    `evalpipe track sync` runs on a login node. ConfigError when there are none."""
    found = []
    for path in run_dirs:
        files = RunDir(path)
        for one in (files, *files.shard_dirs()):
            found += one.wandb_offline_runs()
    if not found:
        raise ConfigError(
            f"No W&B offline runs under {', '.join(map(str, run_dirs))}: run with --track "
            "wandb first (its files go to RUN/wandb/)."
        )
    return [
        sys.executable,
        "-m",
        "wandb",
        "sync",
        *(["--dry-run"] if dry_run else []),
        *map(str, found),
    ]


def sync(run_dirs: Sequence[Path], *, dry_run: bool = False) -> int:
    """Upload the offline runs with `wandb sync` (it reads WANDB_API_KEY); its exit status."""
    return subprocess.run(sync_argv(run_dirs, dry_run=dry_run), check=False).returncode
