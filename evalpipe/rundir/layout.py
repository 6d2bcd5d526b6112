"""The run directory's layout: the one place its file names live, and who may write each.

    RUN/
      manifest.json    the run's record (schema below)            writer: the run (run, merge)
      samples.jsonl    one finished sample per line (the checkpoint)   writer: the run
      samples.damaged.jsonl  lines found damaged on resume, moved aside  writer: the run
      turns.jsonl      multi-turn samples: each answered turn but the last  writer: the run
      steps.jsonl      episodes: each resolved step (text, environment outcome)  writer: the run
      judgments/<judge>/  one judge's judgments.jsonl and judge.json (its identity and
                       settings), beside other judges' folders         writer: the judging phase
      run.lock         who holds the directory (evalpipe.rundir.lock)      writer: the run
      summary.json     metrics and throughput at the end of an attempt writer: the run
      <kind>_results.json  a task kind's own results document (lm-eval's results JSON for its
                       kind), when the run completes              writer: the run (run, merge)
      metrics.csv      the monitor's time series (this node)           writer: the run's monitor
      metrics-<host>.csv  another node's series in a multi-node job     writer: that node's monitor
      monitor-phase.json  the runner's phase and clock for those monitors  writer: the run's monitor
      stall-<job>.<restart>.txt  what a stalled attempt looked like    writer: the run's watchdog
      stall-requeues   job ids the sbatch script requeued after a stall   writer: the sbatch script
      job.sbatch, merge.sbatch, plan.json, submission.json, logs/ (submitit/ with
      --executor submitit)
                       the submission, written before the job starts   writer: `evalpipe submit`
      smoke-monitor.csv  the monitor's series of `evalpipe smoke`      writer: `evalpipe smoke`
      shards/<i>/      a complete run directory for array task i       writer: that task's run
      wandb/           W&B's offline run files (`--track wandb`)       writer: the run's tracker
      mlruns/          MLflow's file store when no MLFLOW_TRACKING_URI is set  writer: the tracker

"The run" is whichever process holds the directory's lock (run.lock): `evalpipe run` (a first
attempt or a resume) or `evalpipe merge`; nobody else writes its manifest, samples or summary.
Reports and `evalpipe status` only read.

Each file has one typed reader beside its writer: manifest.read_manifest (its `config` a
runconfig.RunConfig), results.read_samples (one rule for which lines are samples),
summary.read_summary, submission.read_plan and submission.read_submission. They raise
RunDirError for a file that cannot be read and DamagedFileError for one that is not what it
should be; readers that can go on without a file (reports, estimates, status) catch the latter.

Schema policy: manifest.json and summary.json carry `schema` (SCHEMA). Readers accept every
version up to the current one (fields added later are optional and read with defaults); a
change that old readers would misread raises SCHEMA, and a directory with a newer schema than
this evalpipe knows is refused with an upgrade message.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

SCHEMA = 1

MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl"
DAMAGED = "samples.damaged.jsonl"
TURNS = "turns.jsonl"
STEPS = "steps.jsonl"
JUDGMENTS = "judgments"
LOCK = "run.lock"
SUMMARY = "summary.json"
KIND_RESULTS = "{kind}_results.json"
METRICS = "metrics.csv"
NODE_METRICS = "metrics-{host}.csv"
PHASE = "monitor-phase.json"
STALL_REQUEUES = "stall-requeues"
JOB_SCRIPT = "job.sbatch"
MERGE_SCRIPT = "merge.sbatch"
PLAN = "plan.json"
SUBMISSION = "submission.json"
LOGS = "logs"
SUBMITIT = "submitit"
SMOKE_METRICS = "smoke-monitor.csv"
SHARDS = "shards"
WANDB = "wandb"  # wandb.init(dir=RUN) keeps its files in RUN/wandb/
WANDB_OFFLINE = "offline-run-*"
MLRUNS = "mlruns"

# Any of these marks a run directory (a run killed early may have only some of them).
RUN_FILES = (MANIFEST, SUMMARY, SAMPLES)


def new_run_dir(results: Path, name: str) -> Path:
    """results/<name>-<UTC yyyymmdd-HHMMSS>-<4 hex>: how `evalpipe run` and `submit` name runs."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return results / f"{name}-{stamp}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class RunDir:
    """Paths inside one run directory."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def manifest(self) -> Path:
        return self.path / MANIFEST

    @property
    def samples(self) -> Path:
        return self.path / SAMPLES

    @property
    def damaged(self) -> Path:
        return self.path / DAMAGED

    @property
    def turns(self) -> Path:
        return self.path / TURNS

    @property
    def steps(self) -> Path:
        return self.path / STEPS

    def judgments(self, judge: str) -> Path:
        """The folder of one judge's judgments (judge: the judge's fingerprint): a different
        judge, judge prompt or judge sampling writes a new folder beside the old."""
        return self.path / JUDGMENTS / judge

    @property
    def lock(self) -> Path:
        return self.path / LOCK

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    def kind_results(self, kind: str) -> Path:
        """The results document task kind `kind` (a task-kind name) keeps for the run."""
        return self.path / KIND_RESULTS.format(kind=kind)

    @property
    def metrics(self) -> Path:
        return self.path / METRICS

    def metrics_files(self) -> list[Path]:
        """metrics.csv, then metrics-<host>.csv: the series other nodes of a multi-node job
        record on the same clock and phases."""
        own = [self.metrics] if self.metrics.exists() else []
        return own + self.node_metrics_files()

    def node_metrics(self, host: str) -> Path:
        """Where the monitor following this run on node `host` writes its series."""
        return self.path / NODE_METRICS.format(host=host)

    def node_metrics_files(self) -> list[Path]:
        return sorted(self.path.glob(NODE_METRICS.format(host="*")))

    @property
    def phase_file(self) -> Path:
        """The runner's phase and clock, published for the other nodes' monitors."""
        return self.path / PHASE

    def stall_report(self, slurm: dict | None, attempt: int) -> Path:
        """Where the watchdog writes a stalled attempt's diagnostics: stall-<job>.<restart>.txt
        in a SLURM job (the sbatch script names that file in the log), else stall-local.<n>.txt
        for the run's n-th attempt."""
        if slurm:
            return self.path / f"stall-{slurm['job_id']}.{slurm['restart_count']}.txt"
        return self.path / f"stall-local.{attempt}.txt"

    def job_log(self, slurm: dict | None) -> Path | None:
        """This SLURM job's log (the --output of evalpipe's templates): logs/<name>-<job>.out,
        or an array task's logs/<name>-<array>_<task>.out in the run directory above shards/."""
        if not slurm:
            return None
        if slurm.get("array_job_id"):
            top = self.path.parent.parent if self.is_shard else self.path
            pattern = f"*-{slurm['array_job_id']}_{slurm['array_task_id']}.out"
        else:
            top, pattern = self.path, f"*-{slurm['job_id']}.out"
        return next(iter(sorted((top / LOGS).glob(pattern))), None)

    @property
    def job_script(self) -> Path:
        return self.path / JOB_SCRIPT

    @property
    def merge_script(self) -> Path:
        return self.path / MERGE_SCRIPT

    @property
    def plan(self) -> Path:
        return self.path / PLAN

    @property
    def submission(self) -> Path:
        return self.path / SUBMISSION

    @property
    def logs(self) -> Path:
        return self.path / LOGS

    def log_pattern(self, job: str) -> str:
        """The sbatch --output pattern of a job's log; `job` is SLURM's %j or %A_%a."""
        return f"{self.logs}/%x-{job}.out"

    @property
    def submitit(self) -> Path:
        """submitit's own folder (its pickles and logs) for --executor submitit."""
        return self.path / SUBMITIT

    @property
    def smoke_metrics(self) -> Path:
        return self.path / SMOKE_METRICS

    @property
    def mlruns(self) -> Path:
        """The MLflow file store a tracked run uses when no tracking URI is given."""
        return self.path / MLRUNS

    def wandb_offline_runs(self) -> list[Path]:
        """W&B's offline run folders (one per attempt) that `wandb sync` uploads."""
        return sorted((self.path / WANDB).glob(WANDB_OFFLINE))

    @property
    def shards(self) -> Path:
        return self.path / SHARDS

    def shard(self, index: int) -> RunDir:
        return RunDir(self.shards / str(index))

    @property
    def is_shard(self) -> bool:
        return self.path.parent.name == SHARDS

    def remove_leftovers(self) -> None:
        """Delete the temporary files of atomic replaces (.<name>.<random>.tmp) that a killed
        process left; only the directory's holder calls this."""
        for path in self.path.glob(".*.tmp"):
            path.unlink(missing_ok=True)

    def has_run_files(self) -> bool:
        return any((self.path / name).is_file() for name in RUN_FILES)

    def shard_dirs(self) -> list[RunDir]:
        """shards/<i>/ folders holding run files, ordered by shard index."""
        if not self.shards.is_dir():
            return []
        found = [
            RunDir(Path(entry.path))
            for entry in os.scandir(self.shards)
            if entry.is_dir() and entry.name.isdigit()
        ]
        return sorted((d for d in found if d.has_run_files()), key=lambda d: int(d.name))
