"""The command lines of SLURM's tools, built without running them: what the client runs, what
`submit --dry-run` prints and submission.json records. Pure: a prepared job names its sbatch
command lines without importing the client's subprocess."""

from __future__ import annotations

from pathlib import Path


def sbatch_argv(
    script: Path, *, dependency: str | None = None, test_only: bool = False
) -> list[str]:
    """The exact sbatch command line for `script` (also what --dry-run prints)."""
    argv = ["sbatch", "--test-only" if test_only else "--parsable"]
    if dependency:
        argv.append(f"--dependency={dependency}")
    return [*argv, str(script)]


def squeue_argv(job_id: str) -> list[str]:
    # -r: one line per array task; -t all: finished jobs too while SLURM still holds them.
    return ["squeue", "-h", "-r", "-t", "all", "-j", job_id, "-o", "%i|%T|%r|%N"]


def sacct_argv(job_id: str) -> list[str]:
    return ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode,NodeList"]


def scancel_argv(job_id: str, *, signal: str | None = None, batch: bool = False) -> list[str]:
    argv = ["scancel"]
    if signal:
        argv.append(f"--signal={signal}")
    if batch:
        argv.append("--batch")
    return [*argv, job_id]


def scontrol_show_argv(entity: str) -> list[str]:
    # One record per line: values may hold spaces, records never span lines.
    return ["scontrol", "--oneliner", "show", entity]
