"""One writer per run directory: `run`, a resume and `merge` hold its lock while they write.

The lock file (RUN/run.lock) names its holder: host, pid, SLURM job, start time. It is held
with an fcntl lock, which the kernel drops when the holder dies (NFSv4 too: the lease expires).
Parallel file systems are often mounted with fcntl locks that are node-local or absent (Lustre
`localflock`/`noflock`, NFS `nolock`/`local_lock`, GPFS without lock sharing); there the lock is
an exclusive-create file whose holder refreshes its time every HEARTBEAT_S seconds. A lock left
by a dead process on this host, or by another host whose SLURM job has ended, is taken over with
a note; any other holder makes the second writer stop with one message naming it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from evalpipe.core import provenance
from evalpipe.core.errors import RunDirLockedError
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import storage

log = logging.getLogger(__name__)

HEARTBEAT_S = 10.0
# A heartbeat lock untouched this long belongs to a holder that stopped refreshing it.
STALE_S = 6 * HEARTBEAT_S
# Mount options under which fcntl locks do not protect across nodes (or do not work at all).
_UNSHARED_LOCKS = ("localflock", "noflock", "nolock", "local_lock=posix", "local_lock=all")

Method = Literal["fcntl", "heartbeat"]


@dataclass(frozen=True, kw_only=True)
class Owner:
    """Who holds a run directory."""

    host: str
    pid: int
    started_at: str
    job: str | None = None  # SLURM job id, array_id_task for array tasks
    method: Method = "fcntl"

    def describe(self) -> str:
        job = f", job {self.job}" if self.job else ""
        return f"pid {self.pid} on {self.host}{job}, since {self.started_at}"

    @classmethod
    def here(cls, method: Method) -> Owner:
        ids = provenance.slurm_ids() or {}
        job = ids.get("job_id")
        if ids.get("array_job_id"):
            job = f"{ids['array_job_id']}_{ids['array_task_id']}"
        return cls(
            host=provenance.host(),
            pid=os.getpid(),
            started_at=provenance.utc_now(),
            job=job,
            method=method,
        )

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        try:
            data = json.loads(text)
            return cls(**{k: data[k] for k in ("host", "pid", "started_at", "job", "method")})
        except (ValueError, KeyError, TypeError):
            return None  # empty (a holder that died while writing it) or damaged


def fcntl_trustworthy(path: Path, mounts_file: Path = Path("/proc/self/mounts")) -> bool:
    """Whether fcntl locks on `path`'s file system exclude other nodes: False for mounts known
    to keep them node-local or to lack them."""
    try:
        mounts = mounts_file.read_text(encoding="utf-8").splitlines()
    except OSError:
        return True
    target = os.path.realpath(path)
    best: tuple[str, str] = ("", "")  # the longest mount point holding the path, its options
    for line in mounts:
        parts = line.split()
        if len(parts) < 4 or len(parts[1]) < len(best[0]):
            continue
        if target == parts[1] or target.startswith(parts[1].rstrip("/") + "/"):
            best = (parts[1], parts[3])
    options = best[1].split(",")
    return not any(option in _UNSHARED_LOCKS for option in options)


def pid_alive(pid: int) -> bool:
    """Whether process `pid` still runs on this host (a zombie, ended but not reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as another user's process
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # no /proc here, or it ended just now
        return True


class RunLock:
    """Hold a run directory for the time of a `with` block."""

    def __init__(
        self,
        run_dir: Path,
        *,
        job_finished: Callable[[str], bool] | None = None,
        trust_fcntl: Callable[[Path], bool] = fcntl_trustworthy,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`job_finished(job_id)`: whether SLURM reports that job ended (default: ask SLURM)."""
        self.path = RunDir(run_dir).lock
        self._job_finished = job_finished or _slurm_job_finished
        self._trust_fcntl = trust_fcntl
        self._clock = clock
        self._fd: int | None = None
        self._owner: Owner | None = None
        self._beat: threading.Event | None = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> Owner:
        with storage(self.path):
            if self._trust_fcntl(self.path.parent) and self._try_fcntl():
                return self._held("fcntl")
            return self._take_file()

    # -- fcntl ------------------------------------------------------------------------------

    def _try_fcntl(self) -> bool:
        """True once the fcntl lock is ours; False where this file system refuses fcntl."""
        for _ in range(3):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EACCES, errno.EAGAIN):
                    raise self._busy(self._read_owner()) from None
                log.warning("fcntl locks fail on %s (%s); using a lock file.", self.path, exc)
                return False
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # the last holder removed the file meanwhile: lock the new one
                os.close(fd)
                continue
            # Read through our own descriptor: closing any other one of this file would drop
            # the lock (POSIX locks belong to the process, not the descriptor).
            previous = Owner.parse(os.pread(fd, 65536, 0).decode(errors="replace"))
            # A heartbeat holder is on a node that cannot trust fcntl: its file is the lock.
            if (
                previous is not None
                and previous.method == "heartbeat"
                and not self._stale(previous)
            ):
                os.close(fd)
                raise self._busy(previous)
            if previous is not None:
                log.warning(
                    "Taking over the run directory from %s (it ended).", previous.describe()
                )
            self._fd = fd
            return True
        raise self._busy(self._read_owner())

    # -- exclusive-create file with a heartbeat -----------------------------------------------

    def _take_file(self) -> Owner:
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                previous = self._read_owner()
                if previous is not None and not self._stale(previous):
                    raise self._busy(previous) from None
                what = previous.describe() if previous else "an unreadable lock file"
                log.warning("Taking over the run directory from %s (it ended).", what)
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                continue
            self._fd = fd
            owner = self._held("heartbeat")
            self._beat = threading.Event()
            threading.Thread(
                target=self._heartbeat, args=(self._beat,), name="evalpipe-lock", daemon=True
            ).start()
            return owner
        raise self._busy(self._read_owner())

    def _heartbeat(self, stop: threading.Event) -> None:
        while not stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def _stale(self, owner: Owner) -> bool:
        """Whether the holder has ended: its process is gone (this host), or its job has ended
        and, for a heartbeat lock, it stopped refreshing the file."""
        if owner.host == provenance.host():
            return not pid_alive(owner.pid)
        if owner.method == "heartbeat":
            try:
                quiet = self._clock() - self.path.stat().st_mtime > STALE_S
            except FileNotFoundError:
                return True
            if not quiet:
                return False
        return owner.job is not None and self._job_finished(owner.job)

    # -- common -------------------------------------------------------------------------------

    def _held(self, method: Method) -> Owner:
        assert self._fd is not None
        self._owner = Owner.here(method)
        payload = json.dumps(asdict(self._owner)).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, payload, 0)
        os.fsync(self._fd)
        return self._owner

    def _read_owner(self) -> Owner | None:
        try:
            return Owner.parse(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def _busy(self, owner: Owner | None) -> RunDirLockedError:
        if owner is None:
            who = f"another process (its lock file {self.path} is unreadable)"
            how = f"wait for it, or remove {self.path} if no run uses the directory"
        else:
            who = owner.describe()
            how = f"`scancel {owner.job}`" if owner.job else f"`kill {owner.pid}` on {owner.host}"
            how = f"wait for it, or {how}"
        return RunDirLockedError(f"{self.path.parent} is in use by {who}; {how}.")

    def release(self) -> None:
        if self._beat is not None:
            self._beat.set()
            self._beat = None
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            if Owner.parse(os.pread(fd, 65536, 0).decode(errors="replace")) == self._owner:
                self.path.unlink()  # ours: remove it before letting go
        with contextlib.suppress(OSError):
            os.close(fd)  # drops the fcntl lock


def _slurm_job_finished(job_id: str) -> bool:
    """Whether SLURM says the job has ended (or no longer knows it)."""
    from evalpipe.core.errors import SlurmError
    from evalpipe.slurm.client import Slurm

    try:
        states = Slurm().states(job_id)
    except (SlurmError, OSError):
        return False  # cannot tell: keep refusing
    return all(s.terminal for s in states)
