"""Submitting through submitit (`evalpipe submit --executor submitit`), for its existing users.

submitit writes its own sbatch script and runs a pickled callable in the job; that callable
runs the same `python -m evalpipe run ...` command as evalpipe's templates. On preemption or
timeout submitit calls `checkpoint()`: the runner is told to stop (SIGUSR1, it checkpoints and
exits 75) and submitit requeues the job, which resumes from the run directory. Single-node,
unsharded jobs only; multi-node Ray jobs and arrays need evalpipe's own templates.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe.catalog.slurmtime import slurm_minutes
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError, EvalpipeError, MissingDependencyError
from evalpipe.jobs.jobspec import JobSpec
from evalpipe.rundir.layout import RunDir


def runner_argv(spec: JobSpec) -> list[str]:
    """The `python -m evalpipe run ...` command the templates write, for one unsharded job."""
    argv = [*spec.python_argv, "-m", "evalpipe", "run"]
    for words in spec.runner_options:
        argv += words
    return [*argv, "--out", spec.run_dir]


class EvalRun:
    """The callable submitit pickles: runs the runner as a child process, resumably."""

    def __init__(self, argv: Sequence[str], env: dict[str, str]) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self._pid: int | None = None

    def __call__(self) -> int:
        env = {**os.environ, **self.env}
        # fork/exec + waitpid rather than Popen: checkpoint() runs in a signal handler that
        # interrupts this wait, and Popen.wait's lock would deadlock there.
        pid = os.fork()
        if pid == 0:
            try:
                # SLURM sends submitit's signal (USR2) to every process of the step; it is meant
                # for submitit, and its default action would kill the runner mid-chunk.
                signal.signal(signal.SIGUSR2, signal.SIG_IGN)
                os.execvpe(self.argv[0], self.argv, env)
            finally:
                os._exit(127)
        self._pid = pid
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != exitcodes.OK:
            raise EvalpipeError(f"`{' '.join(self.argv)}` exited with status {code}.")
        return code

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Called by submitit on preemption/timeout: stop at a checkpoint, resume when requeued."""
        import submitit

        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGUSR1)
                os.waitpid(self._pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass  # it had already ended
        return submitit.helpers.DelayedSubmission(EvalRun(self.argv, self.env))


def submit_with_submitit(spec: JobSpec, *, copy_script_to: Path) -> str:
    """Submit `spec` through submitit.SlurmExecutor; returns the SLURM job id.

    The script submitit wrote is copied to `copy_script_to`, so the run directory shows what ran.
    """
    if spec.container is not None:
        # submitit's pickled callable runs in the node's own python, outside any image.
        raise ConfigError(
            f"--executor submitit cannot run a job in cluster {spec.cluster.name}'s container "
            f"({spec.container.runtime}): submitit starts the runner from the node's python. "
            "Submit with the default sbatch executor."
        )
    try:
        import submitit
    except ImportError as exc:
        raise MissingDependencyError(
            "--executor submitit needs the submitit package: pip install submitit"
        ) from exc
    c = spec.cluster
    executor = submitit.SlurmExecutor(
        folder=str(RunDir(Path(spec.run_dir)).submitit),
        max_num_timeout=spec.options.max_restarts,
    )
    extra: dict[str, Any] = {"requeue": True}
    if c.gpu_request == "gres":
        extra["gres"] = f"gpu:{spec.gpu_count}"
    else:
        extra["gpus-per-node"] = spec.gpu_count
    for option in c.sbatch_extra:
        key, _, value = option[2:].partition("=")
        extra[key] = value or True
    executor.update_parameters(
        job_name=spec.job_name,
        partition=c.partition,
        account=c.account,
        qos=c.qos,
        nodes=1,
        ntasks_per_node=1,
        cpus_per_task=spec.cpus_per_task,
        mem=f"{spec.mem_mb}M",
        time=slurm_minutes(spec.options.time),
        signal_delay_s=spec.options.signal_seconds,
        setup=list(c.setup),
        additional_parameters=extra,
    )
    job = executor.submit(EvalRun(runner_argv(spec), dict(spec.env)))
    shutil.copyfile(job.paths.submission_file, copy_script_to)
    return str(job.job_id)
