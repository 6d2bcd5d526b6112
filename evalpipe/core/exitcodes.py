"""Process exit statuses shared by the CLI, the runner and the sbatch templates."""

OK = 0
ERROR = 1  # a user-fixable error (EvalpipeError); the message is on stderr
USAGE = 2  # bad command-line usage (argparse's own convention)
# The run stopped early on SIGUSR1/SIGTERM after checkpointing; rerunning it resumes.
# 75 is EX_TEMPFAIL from sysexits.h: "try again later". The sbatch script requeues on it.
RESUMABLE = 75
# The job's first lines found the node's environment unfit (evalpipe version differs from the
# submitter's, vLLM does not import): nothing was loaded, and requeueing would fail the same way.
PREFLIGHT = 78  # EX_CONFIG from sysexits.h
# Writing the run directory failed (disk full, quota, read-only, I/O error): the samples written
# so far are safe; free space or fix the file system, then rerun to resume. 74 is EX_IOERR from
# sysexits.h. The sbatch script does not requeue on it: the next attempt would fail the same way.
STORAGE = 74
# The watchdog saw no progress (no engine step, no sample written, no load finished) for the
# stall timeout: it wrote RUN_DIR/stall-<job>.<restart>.txt (stacks, `ray status`, device
# readings, last log lines), checkpointed, and ended the run. 124 is what GNU `timeout` exits
# with when the command ran out of time. The sbatch script requeues a stall once per job.
STALL = 124
