"""A submitted job: its ids, where it stands (SLURM, settled by its run dir), waiting on it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evalpipe.core.errors import RunDirError, SlurmError, SlurmUnreachable
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import read_manifest
from evalpipe.rundir.samplelog import read_samples
from evalpipe.rundir.submission import read_submission
from evalpipe.slurm.client import UNKNOWN, Slurm, SlurmClient, TaskState

# How long `wait` keeps asking a controller that does not answer: a busy slurmctld answers
# again within minutes; longer is an outage the user should hear of.
UNREACHABLE_GRACE_S = 600.0


@dataclass(frozen=True, kw_only=True)
class JobStatus:
    """Where a submitted run stands: its job or array tasks, and the merge job if any."""

    tasks: tuple[TaskState, ...]
    merge: TaskState | None = None
    samples_done: int = 0

    @property
    def all(self) -> tuple[TaskState, ...]:
        return self.tasks + ((self.merge,) if self.merge else ())

    @property
    def done(self) -> bool:
        return all(t.terminal for t in self.all)

    @property
    def ok(self) -> bool:
        return all(t.state == "COMPLETED" for t in self.all)

    def line(self) -> str:
        """One progress line: state counts per job, then samples written so far."""
        counts: dict[str, int] = {}
        for task in self.tasks:
            counts[task.state] = counts.get(task.state, 0) + 1
        parts = [", ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
        if self.merge:
            why = f" ({self.merge.reason})" if self.merge.reason else ""
            parts.append(f"merge {self.merge.state}{why}")
        parts.append(f"{self.samples_done} samples done")
        return " | ".join(parts)


def _manifest_status(run_dir: Path) -> str | None:
    try:
        manifest = read_manifest(RunDir(run_dir))
    except RunDirError:  # being written, damaged or unreadable: the run dir cannot say
        return None
    return None if manifest is None else manifest.status


def _settle(task: TaskState, run_dir: Path) -> TaskState:
    """A task gone from SLURM without accounting: judge it by the run directory it wrote."""
    if task.state != UNKNOWN:
        return task
    status = _manifest_status(run_dir)
    state = "COMPLETED" if status == "complete" else UNKNOWN
    return TaskState(
        job_id=task.job_id, state=state, reason=f"run dir says {status}", source="run dir"
    )


def _samples_done(run_dir: Path) -> int:
    """Whole sample records written so far (a damaged or cut-short line is no sample)."""
    files = RunDir(run_dir)
    # A merged run holds the shards' samples again: count the merged file alone once it exists.
    parts = [files] if files.samples.is_file() else files.shard_dirs()
    total = 0
    for part in parts:
        try:
            total += len(read_samples(part.samples).records)
        except RunDirError:  # unreadable for now (NFS, permissions): counted on the next poll
            continue
    return total


@dataclass(kw_only=True)
class Job:
    """A submitted run: its ids, its run directory, and how to follow it."""

    run_dir: Path
    job_id: str
    merge_job_id: str | None = None
    shards: int = 1
    slurm: SlurmClient = field(default_factory=Slurm, repr=False)

    def state(self) -> JobStatus:
        tasks = self.slurm.states(self.job_id)
        if len(tasks) == 1 and tasks[0].state == UNKNOWN:
            tasks = self._judged_by_run_dir(tasks[0])
        merge = None
        if self.merge_job_id:
            merge = _settle(self.slurm.states(self.merge_job_id)[0], self.run_dir)
        return JobStatus(tasks=tuple(tasks), merge=merge, samples_done=_samples_done(self.run_dir))

    def _judged_by_run_dir(self, gone: TaskState) -> list[TaskState]:
        if self.shards == 1:
            return [_settle(gone, self.run_dir)]
        return [
            _settle(
                TaskState(job_id=f"{self.job_id}_{i}", state=UNKNOWN, reason=gone.reason),
                RunDir(self.run_dir).shard(i).path,
            )
            for i in range(self.shards)
        ]

    def wait(
        self,
        *,
        poll_s: float = 5.0,
        timeout_s: float | None = None,
        on_progress: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        """Block until the job (and its merge job) ended; returns the final status. A controller
        that does not answer is asked again for up to UNREACHABLE_GRACE_S."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        silent_since: float | None = None
        last = "no state yet"
        while True:
            try:
                status = self.state()
            except SlurmUnreachable as e:
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since >= UNREACHABLE_GRACE_S:
                    raise SlurmUnreachable(
                        f"SLURM has not answered for {UNREACHABLE_GRACE_S:g} s ({e}). Job "
                        f"{self.job_id} may still be running; follow it with `evalpipe status "
                        f"{self.run_dir}` once `scontrol ping` answers."
                    ) from None
            else:
                silent_since = None
                last = status.line()
                if on_progress:
                    on_progress(status)
                if status.done:
                    return status
            if deadline is not None and time.monotonic() >= deadline:
                raise SlurmError(
                    f"Job {self.job_id} has not ended after {timeout_s:g} s ({last}). "
                    f"It keeps running; follow it with `evalpipe status {self.run_dir}`."
                )
            time.sleep(poll_s)

    def log_paths(self) -> list[Path]:
        return sorted(RunDir(self.run_dir).logs.glob("*.out"))

    @classmethod
    def load(cls, run_dir: Path, slurm: SlurmClient | None = None) -> Job:
        """The job recorded in RUN_DIR/submission.json."""
        record = read_submission(RunDir(run_dir))
        return cls(
            run_dir=run_dir,
            job_id=record.job_id,
            merge_job_id=record.merge_job_id,
            shards=record.shards,
            slurm=slurm or Slurm(),
        )
