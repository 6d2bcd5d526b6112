"""Talking to SLURM: the SlurmClient protocol, the real one (the only subprocess) and a fake.

The real client runs sbatch, squeue, sacct, scancel and scontrol and turns their failures into
SlurmError quoting the scheduler's own words. FakeSlurm records the argv the real one would run
and answers with scripted states; tests pass it in where a client is taken.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from evalpipe.core.errors import SlurmError, SlurmUnreachable
from evalpipe.slurm.argv import (
    sacct_argv,
    sbatch_argv,
    scancel_argv,
    scontrol_show_argv,
    squeue_argv,
)

# States after which a job (or array task) will not run again.
TERMINAL = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
UNKNOWN = "UNKNOWN"  # gone from the queue, and no accounting to ask
# squeue's words for a job id slurmctld no longer holds (SLURM 22.05+: "slurm_load_jobs error:
# Invalid job id specified"); any other failure means the controller did not answer.
GONE_FROM_QUEUE = "Invalid job id"
COMMAND_TIMEOUT_S = 60
ASK_PING = "Is slurmctld up? (`scontrol ping`)"
NO_ANSWER = "NO_ANSWER"  # FakeSlurm's scripted controller timeout


@dataclass(frozen=True, kw_only=True)
class TaskState:
    """One job or array task as the scheduler reports it."""

    job_id: str  # "123", or "123_4" for array task 4
    state: str  # SLURM's state name (RUNNING, COMPLETED, ...) or UNKNOWN
    reason: str = ""  # why it is pending or how it ended, when SLURM says
    nodes: str = ""
    source: str = "squeue"  # squeue | sacct | none

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL or self.state == UNKNOWN


class SlurmClient(Protocol):
    """What evalpipe asks of a scheduler."""

    def submit(self, script: Path, *, dependency: str | None = None) -> str:
        """Queue `script`; returns the job id (an array's id for array jobs)."""
        ...

    def test_only(self, script: Path) -> str:
        """Validate `script` without queueing it; returns the scheduler's estimate."""
        ...

    def states(self, job_id: str) -> list[TaskState]:
        """The job's tasks (one for a plain job, one per array task); UNKNOWN when gone.
        Raises SlurmUnreachable when the scheduler did not answer: a job is never judged
        gone on a timeout."""
        ...

    def cancel(self, job_id: str, *, signal: str | None = None, batch: bool = False) -> None:
        """Cancel the job, or with `signal` only deliver that signal (to the batch shell)."""
        ...

    def show(self, entity: str) -> str:
        """`scontrol show ENTITY` ("partition", "node"): the site's description, as text."""
        ...


def _parse_squeue(text: str) -> list[TaskState]:
    tasks = []
    for line in text.splitlines():
        if not line.strip():
            continue
        job_id, state, reason, nodes = [*line.split("|"), "", "", ""][:4]
        reason = "" if reason in ("None", "(null)") else reason
        tasks.append(TaskState(job_id=job_id, state=state, reason=reason, nodes=nodes))
    return tasks


def _parse_sacct(text: str) -> list[TaskState]:
    tasks = []
    for line in text.splitlines():
        if not line.strip():
            continue
        job_id, state, exit_code, nodes = [*line.split("|"), "", "", ""][:4]
        # "CANCELLED by 0" → CANCELLED; the exit code says how a failed job ended.
        name = state.split()[0] if state else UNKNOWN
        reason = f"exit code {exit_code}" if exit_code not in ("", "0:0") else ""
        tasks.append(
            TaskState(job_id=job_id, state=name, reason=reason, nodes=nodes, source="sacct")
        )
    return tasks


class Slurm:
    """The real client: SLURM's commands, run with a timeout, stderr quoted on failure."""

    def _run(self, argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess:
        try:
            result = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
            )
        except FileNotFoundError:
            raise SlurmError(
                f"{argv[0]} is not on PATH: run evalpipe on a SLURM login node, or start the "
                "local test cluster with `scripts/local-slurm.sh start`."
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmUnreachable(
                f"`{' '.join(argv)}` did not answer within {COMMAND_TIMEOUT_S} s. {ASK_PING}"
            ) from None
        if check and result.returncode != 0:
            said = (result.stderr or result.stdout).strip() or f"exit status {result.returncode}"
            raise SlurmError(f"`{' '.join(argv)}` failed: {said}")
        return result

    def submit(self, script: Path, *, dependency: str | None = None) -> str:
        out = self._run(sbatch_argv(script, dependency=dependency)).stdout.strip()
        # --parsable prints "jobid" or "jobid;cluster".
        job_id = out.split(";")[0].strip()
        if not job_id.isdigit():
            raise SlurmError(f"sbatch accepted {script} but printed no job id: {out!r}")
        return job_id

    def test_only(self, script: Path) -> str:
        # sbatch --test-only reports on stderr even when the job would run.
        result = self._run(sbatch_argv(script, test_only=True))
        return (result.stderr or result.stdout).strip()

    def states(self, job_id: str) -> list[TaskState]:
        queued = self._run(squeue_argv(job_id), check=False)
        if queued.returncode != 0 and GONE_FROM_QUEUE not in queued.stderr:
            # A busy controller times out ("Socket timed out on send/recv operation") while the
            # job runs on: that is no answer, and the caller asks again.
            said = queued.stderr.strip() or f"exit status {queued.returncode}"
            raise SlurmUnreachable(f"`{' '.join(squeue_argv(job_id))}` failed: {said}. {ASK_PING}")
        tasks = _parse_squeue(queued.stdout) if queued.returncode == 0 else []
        if tasks:
            return tasks
        # Gone from the queue (or never known to it): ask accounting, which may be disabled.
        accounted = self._run(sacct_argv(job_id), check=False)
        tasks = _parse_sacct(accounted.stdout) if accounted.returncode == 0 else []
        if tasks:
            return tasks
        why = (accounted.stderr or queued.stderr).strip()
        return [TaskState(job_id=job_id, state=UNKNOWN, reason=why, source="none")]

    def cancel(self, job_id: str, *, signal: str | None = None, batch: bool = False) -> None:
        self._run(scancel_argv(job_id, signal=signal, batch=batch))

    def show(self, entity: str) -> str:
        return self._run(scontrol_show_argv(entity)).stdout


class FakeSlurm:
    """A scheduler in memory: records argv, hands out job ids, reports scripted states.

    `states_by_id` maps a job id to the states to report, one per call (the last repeats);
    unknown ids report COMPLETED; a scripted NO_ANSWER raises SlurmUnreachable, as a controller
    that timed out does. `refuse` makes every submit and test-only fail with that text.
    `shown` maps an entity ("partition", "node") to the text `scontrol show` would print.
    """

    def __init__(
        self,
        *,
        first_id: int = 1000,
        states_by_id: Mapping[str, Iterable[str]] | None = None,
        refuse: str | None = None,
        shown: Mapping[str, str] | None = None,
    ) -> None:
        self.calls: list[list[str]] = []
        self._shown = dict(shown or {})
        self._next = first_id
        self._states = {k: list(v) for k, v in (states_by_id or {}).items()}
        self._refuse = refuse
        self.scripts: dict[str, str] = {}  # job id → the script text it was given

    def submit(self, script: Path, *, dependency: str | None = None) -> str:
        argv = sbatch_argv(script, dependency=dependency)
        self.calls.append(argv)
        if self._refuse:
            raise SlurmError(f"`{' '.join(argv)}` failed: {self._refuse}")
        job_id = str(self._next)
        self._next += 1
        self.scripts[job_id] = Path(script).read_text(encoding="utf-8")
        return job_id

    def test_only(self, script: Path) -> str:
        argv = sbatch_argv(script, test_only=True)
        self.calls.append(argv)
        if self._refuse:
            raise SlurmError(f"`{' '.join(argv)}` failed: {self._refuse}")
        return "sbatch: Job 0 to start now"

    def states(self, job_id: str) -> list[TaskState]:
        self.calls.append(squeue_argv(job_id))
        queue = self._states.get(job_id)
        if not queue:
            return [TaskState(job_id=job_id, state="COMPLETED")]
        state = queue.pop(0) if len(queue) > 1 else queue[0]
        if state == NO_ANSWER:
            raise SlurmUnreachable(f"squeue -j {job_id}: Socket timed out on send/recv operation")
        return [TaskState(job_id=job_id, state=state)]

    def cancel(self, job_id: str, *, signal: str | None = None, batch: bool = False) -> None:
        self.calls.append(scancel_argv(job_id, signal=signal, batch=batch))

    def show(self, entity: str) -> str:
        self.calls.append(scontrol_show_argv(entity))
        return self._shown.get(entity, "")
