"""The CPU fallback: CPU % and resident memory of this process, its children, and (in a SLURM job)
every process of the job on this node, as device 'cpu'."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from evalpipe.core import provenance
from evalpipe.monitor.readings import GIB, Reading


def job_on_this_node(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(SLURM job id, node name) when running inside a job step, else None."""
    job, node = environ.get("SLURM_JOB_ID"), environ.get("SLURMD_NODENAME")
    return (job, node) if job and node else None


class CpuSource:
    """This process and its children (engine workers, sandboxes), plus, given `job` (a SLURM job
    id and node name), every process on the node whose environment names that job and node, and
    their children: in a multi-node job vLLM's Ray workers are children of the node's raylet,
    not of the monitor, but inherit the job step's environment."""

    device = "cpu"
    uuid: str | None = None
    energy_source: str | None = None

    def __init__(self, job: tuple[str, str] | None = None) -> None:
        import psutil

        self._psutil = psutil
        self._job = job
        self._me = psutil.Process()
        self._me.cpu_percent(None)  # the first call only starts the count; it always answers 0
        self._procs = {self._me.pid: self._me}
        # (pid, start time) → whether its environment names the job: read once per process.
        self._in_job: dict[tuple[int, float], bool] = {}
        # 100 % = every CPU this process may run on is busy (a SLURM allocation's, not the node's).
        try:
            self._ncpu = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            self._ncpu = psutil.cpu_count() or 1
        self._total_gib = psutil.virtual_memory().total / GIB
        self.name = provenance.cpu_model()

    def members(self) -> set[int]:
        """The pids measured now: this process, the job's processes on this node, and all
        their descendants."""
        psutil = self._psutil
        parents: dict[int, int] = {}
        seen: dict[tuple[int, float], bool] = {}
        for proc in psutil.process_iter(["ppid", "create_time"]):
            info = proc.info
            if info["ppid"] is None or info["create_time"] is None:
                continue  # exited while listed
            parents[proc.pid] = info["ppid"]
            if self._job is not None:
                key = (proc.pid, info["create_time"])
                known = self._in_job.get(key)
                seen[key] = self._names_job(proc) if known is None else known
        self._in_job = seen  # forget processes that ended
        roots = {self._me.pid} | {pid for (pid, _), yes in seen.items() if yes}
        children: dict[int, list[int]] = {}
        for pid, parent in parents.items():
            children.setdefault(parent, []).append(pid)
        members, todo = set(), list(roots)
        while todo:
            pid = todo.pop()
            if pid not in members:
                members.add(pid)
                todo.extend(children.get(pid, ()))
        return members

    def _names_job(self, proc: Any) -> bool:
        try:
            environ = proc.environ()
        except self._psutil.Error:
            return False  # another user's process, or gone
        return job_on_this_node(environ) == self._job

    def read(self, now: float) -> Reading:
        psutil = self._psutil
        procs = {}
        for pid in self.members():
            known = self._procs.get(pid)
            try:
                # Keep the known object (it holds the CPU count since the last sample) unless
                # the pid now belongs to a new process.
                current = psutil.Process(pid)
                procs[pid] = known if known is not None and known == current else current
            except psutil.Error:
                continue  # exited since it was listed
        self._procs = procs
        cpu_pct, rss = 0.0, 0
        for proc in procs.values():
            try:
                with proc.oneshot():
                    cpu_pct += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
            except psutil.Error:
                continue  # exited between listing and reading
        return Reading(
            memory_used_gib=rss / GIB,
            memory_total_gib=self._total_gib,
            util_pct=cpu_pct / self._ncpu,
        )
