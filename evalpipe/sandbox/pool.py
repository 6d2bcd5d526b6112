"""Run untrusted, model-written Python programs isolated, resource-limited and in parallel.

A program passes only if it runs to its end with no uncaught exception; with `tests`, only if
the tests, run in a process of their own that calls the program, do. Each program runs in a
fresh process forked by a warm server (evalpipe/sandbox/worker.py, one per parallel worker,
kept for reuse across calls); docs/sandbox.md gives the threat model and the limits.

    results = run_programs(sources, workers=2, timeout_s=10.0)
    [r.passed for r in results]
    run_program(Program(source=src, stdin="3 4\n", capture_stdout=True)).stdout
    run_program(Program(source=solution, tests=tests)).passed  # a verdict code cannot forge
    require_isolation("weak")  # before running any: accept the fallback without namespaces

Programs run only where the machine gives `full` isolation unless `require_isolation("weak")`
was called: elsewhere every run raises SandboxError saying what is missing.

`network=Network(env={...})` runs a program in a server of its own that keeps the host's
network (and sees those environment variables), all other isolation alike: for trusted
programs that gate what they run (BFCL's web search, docs/sandbox.md); every other program
has no network.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal

from evalpipe.core.errors import ConfigError, SandboxError
from evalpipe.core.isolation import ISOLATION_LEVELS, IsolationLevel
from evalpipe.sandbox.levels import isolation_level, weak_refused
from evalpipe.sandbox.program import Program

log = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("worker.py")
# The whole environment a program sees (plus HOME and TMPDIR, its working directory): nothing
# inherited, so no tokens or secrets; one thread per numeric library so workers do not fight.
PROGRAM_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
SandboxStatus = Literal["passed", "failed", "exited", "timeout", "killed", "error"]
SERVER_START_S = 30.0  # a cold interpreter on a loaded node; normally ~0.1 s
REPLY_GRACE_S = 15.0  # beyond the program's own timeout, before the server is presumed hung


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Per-program resource limits; pass `Limits(address_space_mib=4096, ...)` to change them."""

    cpu_s: int | None = None  # CPU seconds (RLIMIT_CPU); None: the wall-clock timeout + 1
    address_space_mib: int = 2048  # virtual memory of each process (RLIMIT_AS)
    file_size_mib: int = 64  # largest file it may write (RLIMIT_FSIZE)
    disk_mib: int = 64  # size of its private tmpfs working directory (with namespaces)
    # Processes and threads (RLIMIT_NPROC). Counted per uid: programs running at the same time
    # share it where they run as `nobody` (as root) or as the calling user (without namespaces).
    processes: int = 128
    open_files: int = 256  # file descriptors per process (RLIMIT_NOFILE)
    output_tail_bytes: int = 8192  # how much of the end of its stdout and stderr is kept
    # With Program.capture_stdout: how much of stdout is kept whole, from its start; a longer
    # output is cut there and flagged (SandboxResult.stdout_truncated).
    stdout_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name == "cpu_s":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(
                    f"Sandbox limit {f.name}={value!r} is not a positive whole number; "
                    f"give one such as the default ({f.default!r})."
                )


@dataclass(frozen=True, kw_only=True)
class SandboxResult:
    """How one program ended, and in `detail` why, in words."""

    passed: bool
    status: SandboxStatus
    detail: str
    returncode: int | None  # negative: killed by that signal; None: it never started
    output_tail: str  # the last Limits.output_tail_bytes of its stdout and stderr, interleaved
    output_bytes: int  # how much it wrote in all
    duration_s: float
    isolation: tuple[str, ...]  # what held on this machine: see docs/sandbox.md
    stdout: str | None = None  # with Program.capture_stdout: its whole stdout (up to the limit)
    stdout_truncated: bool = False  # stdout was longer than Limits.stdout_bytes

    @property
    def level(self) -> IsolationLevel:
        return isolation_level(self.isolation)

    def to_dict(self) -> dict:
        return {**asdict(self), "isolation": list(self.isolation)}


@dataclass(frozen=True, kw_only=True)
class Network:
    """The host's network for a program, and what its environment adds to PROGRAM_ENV (a key,
    proxy settings): never shown, so no repr, log or record carries them."""

    env: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.env.items()))


def _program(item: str | Program) -> Program:
    return item if isinstance(item, Program) else Program(source=item)


def _check_timeout(timeout_s: float) -> None:
    if not isinstance(timeout_s, int | float) or not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ConfigError(f"Sandbox timeout {timeout_s!r} is not a positive number of seconds.")


class _Server:
    """One warm sandbox server process; runs one program at a time. `shown`: the hidden
    folders its programs may read (Program.shown)."""

    def __init__(self, network: Network | None = None, shown: tuple[str, ...] = ()) -> None:
        self.shown = shown
        networked = ["--network"] if network else []
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(WORKER), *networked, *shown],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**PROGRAM_ENV, **(network.env if network else {})},
            cwd="/",
            start_new_session=True,
        )
        self._buffer = b""
        hello = self._read_line(time.monotonic() + SERVER_START_S)
        if hello is None:
            self.close()
            raise SandboxError(
                f"The sandbox server ({WORKER}) did not start within {SERVER_START_S:g} s; "
                "its error, if any, is above on stderr."
            )
        self.isolation = tuple(hello["isolation"])
        self.notes = tuple(hello["notes"])
        for note in self.notes:
            log.warning("sandbox: %s", note)

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def _read_line(self, deadline: float) -> dict | None:
        """The next JSON line from the server, or None if it died or missed the deadline."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def run(self, program: Program, timeout_s: float, limits: Limits) -> SandboxResult:
        request = {**asdict(program), "timeout_s": timeout_s, "limits": asdict(limits)}
        try:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
            reply = self._read_line(time.monotonic() + timeout_s + REPLY_GRACE_S)
        except BrokenPipeError:
            reply = None
        if reply is None:
            self.close()
            return SandboxResult(
                passed=False,
                status="error",
                detail="the sandbox server died or hung; the next program gets a new one",
                returncode=None,
                output_tail="",
                output_bytes=0,
                duration_s=0.0,
                isolation=self.isolation,
            )
        return SandboxResult(isolation=self.isolation, **reply)

    def close(self) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()
        for pipe in (self._proc.stdin, self._proc.stdout):
            with contextlib.suppress(BrokenPipeError):
                pipe.close()


class _ServerPool:
    """Idle servers kept between calls: starting one costs ~0.1 s, a program a few ms.

    An idle server only waits on its stdin; it exits by itself when this process does.
    """

    accept: IsolationLevel = "full"  # the weakest level programs may run under (every pool)

    def __init__(self, network: Network | None = None) -> None:
        self._idle: list[_Server] = []
        self._lock = threading.Lock()
        self._network = network

    def forget(self) -> None:
        """In a forked child: the inherited servers belong to the parent; start afresh."""
        self._idle, self._lock = [], threading.Lock()

    def server(self, shown: tuple[str, ...] = ()) -> _Server:
        """An idle server showing `shown`, or a new one; SandboxError where its level is below
        `accept`."""
        with self._lock:
            found = [i for i, s in enumerate(self._idle) if s.shown == shown]
            server = self._idle.pop(found[-1]) if found else None
        if server is None:
            server = _Server(self._network, shown)
        if self.accept == "full" and isolation_level(server.isolation) == "weak":
            self.give_back(server)
            raise SandboxError(weak_refused(server.notes))
        return server

    def give_back(self, server: _Server) -> None:
        if server.alive:
            with self._lock:
                self._idle.append(server)

    def run(self, program: Program, timeout_s: float, limits: Limits) -> SandboxResult:
        server = self.server(program.shown)
        result = server.run(program, timeout_s, limits)
        self.give_back(server)
        return result

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for server in idle:
            server.close()


_POOL = _ServerPool()
# Networked servers, one pool per environment they were given (Network.key).
_NETWORKED: dict[tuple[tuple[str, str], ...], _ServerPool] = {}
_NETWORKED_LOCK = threading.Lock()


def _pool(network: Network | None) -> _ServerPool:
    if network is None:
        return _POOL
    with _NETWORKED_LOCK:
        return _NETWORKED.setdefault(network.key, _ServerPool(network))


def _forget() -> None:
    global _NETWORKED_LOCK
    _POOL.forget()
    _NETWORKED.clear()
    _NETWORKED_LOCK = threading.Lock()


def shutdown() -> None:
    """Stop the idle sandbox servers now (they also stop when this process exits)."""
    for pool in (_POOL, *_NETWORKED.values()):
        pool.close()


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget)


def require_isolation(accept: IsolationLevel = "full") -> IsolationLevel:
    """Set the weakest isolation programs may run under in this process (`full` unless the
    user accepted `weak`), and return the level this machine gives. Raises SandboxError,
    saying what is missing and how to get it, where that is below `accept`: every run of a
    program in this process then raises it too."""
    if accept not in ISOLATION_LEVELS:
        raise ConfigError(
            f"Sandbox isolation {accept!r} is not one of {', '.join(ISOLATION_LEVELS)}."
        )
    _ServerPool.accept = accept
    server = _POOL.server()
    _POOL.give_back(server)
    return isolation_level(server.isolation)


def run_program(
    source: str | Program,
    *,
    timeout_s: float = 10.0,
    limits: Limits | None = None,
    network: Network | None = None,
) -> SandboxResult:
    """Run one Python program in the sandbox and say whether it ran to its end cleanly (with
    `network`, in a server that keeps the host's network)."""
    _check_timeout(timeout_s)
    return _pool(network).run(_program(source), timeout_s, limits or Limits())


def default_workers() -> int:
    """The cores this process may use (a SLURM allocation's, not the whole node's)."""
    return len(os.sched_getaffinity(0))


def run_programs(
    sources: Iterable[str | Program],
    *,
    workers: int | None = None,
    timeout_s: float = 10.0,
    limits: Limits | None = None,
) -> list[SandboxResult]:
    """Run programs in parallel, at most `workers` at a time; results in the order given."""
    groups = [[_program(source)] for source in sources]
    results = run_in_order(groups, workers=workers, timeout_s=timeout_s, limits=limits)
    return [group[0] for group in results]


def run_in_order(
    groups: Sequence[Sequence[Program]],
    *,
    go_on: Callable[[int, int, SandboxResult], bool] = lambda group, index, result: True,
    workers: int | None = None,
    timeout_s: float = 10.0,
    limits: Limits | None = None,
) -> list[list[SandboxResult]]:
    """Run each group's programs one after another, stopping a group once `go_on(group index,
    program index, result)` says no (a judge stops at a solution's first failed test); groups
    run in parallel, at most `workers` at a time. The results of each group, in order: those
    of the programs that ran."""
    _check_timeout(timeout_s)
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"Sandbox workers={workers!r} is not a positive whole number.")
    limits = limits or Limits()

    def run_group(i: int) -> list[SandboxResult]:
        results = []
        for j, program in enumerate(groups[i]):
            results.append(_POOL.run(program, timeout_s, limits))
            if not go_on(i, j, results[-1]):
                break
        return results

    n = min(workers or default_workers(), len(groups))
    if n <= 1:
        return [run_group(i) for i in range(len(groups))]
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="sandbox") as pool:
        return list(pool.map(run_group, range(len(groups))))
