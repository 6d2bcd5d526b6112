"""Sandbox server: runs each program it is sent in a fresh, isolated, resource-limited process.

evalpipe.sandbox.pool starts this file as `python -I -S worker.py` with a minimal environment,
so it imports only the standard library (isolated mode hides site-packages and the evalpipe
package). Protocol: one JSON request per line on stdin, one JSON reply per line on stdout; the
first line out is a hello naming the isolation this machine allows.

The server enters a new mount and network namespace once, with every mount read-only, home
directories and /run hidden (save the folders its command line names, read-only), and no
network; started with `--network` it keeps the host's network namespace (BFCL's web search:
pool.Network), all else alike. Per program, two processes:
  server (this loop, long-lived, warm imports; mounts a fresh tmpfs as /tmp per program)
    └─ supervisor: own session; new PID and IPC namespaces; enforces the wall-clock timeout;
       trusted, keeps its privileges
         └─ program: PID 1 of its namespace (its death kills every process it started);
            rlimits, unprivileged uid, no capabilities; runs the code, then reports its outcome
            with a per-program nonce over a pipe the code did not create
With `tests`, the supervisor first forks a third process outside the program's PID namespace:
the test process runs the tests, calls the program's functions over two pipes with plain data
(plaindata.py), and alone reports, so no code of the program's can write the verdict
(docs/sandbox.md, "The verdict").
Nothing a program leaves survives it: it cannot mount or configure the network (no
capabilities), its processes die with its PID namespace, its IPC objects with its IPC namespace,
its files with its tmpfs. Forking from a warm server costs a few milliseconds, where a fresh
interpreter per program costs tens of them.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import fcntl
import gc
import json
import os
import pwd
import re
import resource
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
import types
from dataclasses import dataclass, field
from importlib.util import module_from_spec, spec_from_file_location


def _load_sibling(name: str) -> types.ModuleType:
    # Isolated mode (-I) keeps this file's folder off sys.path, and off the programs' path.
    spec = spec_from_file_location(name, os.path.join(os.path.dirname(__file__), f"{name}.py"))
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plaindata = _load_sibling("plaindata")

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
# Per-mount flags a read-only remount must repeat (a user namespace refuses to clear them).
MOUNT_OPTION_FLAGS = {
    b"nosuid": MS_NOSUID,
    b"nodev": MS_NODEV,
    b"noexec": MS_NOEXEC,
    b"noatime": MS_NOATIME,
    b"nodiratime": MS_NODIRATIME,
    b"relatime": MS_RELATIME,
    b"strictatime": MS_STRICTATIME,
}
# Directories hidden behind empty read-only tmpfs: home directories hold tokens and keys, /run
# the sockets of the node's daemons (munge, D-Bus, Docker), which a read-only mount leaves open.
HIDDEN_DIRS = ("/root", "/home", "/run")
# World-writable places that become views of the program's private tmpfs.
PRIVATE_TMP_ALIASES = ("/var/tmp", "/dev/shm")
# Modules test programs commonly import, loaded once here so each forked program gets them free.
WARM_MODULES = (
    "bisect",
    "collections",
    "copy",
    "dataclasses",
    "datetime",
    "decimal",
    "fractions",
    "functools",
    "hashlib",
    "heapq",
    "itertools",
    "math",
    "operator",
    "random",
    "statistics",
    "string",
    "traceback",
    "types",
    "typing",
)
SUPERVISOR_GRACE_S = 5.0
READ_CHUNK = 65536

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(
    source: str | bytes | None,
    target: str | bytes,
    fstype: bytes | None,
    flags: int,
    data: str | None = None,
) -> None:
    src = os.fsencode(source) if source is not None else None
    opts = data.encode() if data is not None else None
    ret = _libc.mount(src, os.fsencode(target), fstype, flags, opts)
    _check(ret, f"mount {target!r}")


def _umount(target: str) -> None:
    _check(_libc.umount2(os.fsencode(target), MNT_DETACH), f"umount {target!r}")


def _unescape_mountinfo(field: bytes) -> bytes:
    return re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), field)


def _remount_everything_read_only() -> None:
    """Make every mount of this (new) mount namespace private, read-only and nosuid."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    with open("/proc/self/mountinfo", "rb") as f:
        lines = f.read().splitlines()
    for line in lines:
        fields = line.split()
        options = fields[5].split(b",")
        if b"ro" in options:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID
        for option in options:
            flags |= MOUNT_OPTION_FLAGS.get(option, 0)
        _mount(None, _unescape_mountinfo(fields[4]), None, flags)


def _hide_dirs(keep: list[str]) -> None:
    """Cover HIDDEN_DIRS with empty read-only tmpfs, keeping the `keep` paths under them."""
    for hidden in HIDDEN_DIRS:
        if not os.path.isdir(hidden) or os.path.islink(hidden):
            continue
        inside = [p for p in keep if p.startswith(hidden + "/")]
        # O_PATH handles reach the real directories once the tmpfs covers their path.
        handles = [os.open(p, os.O_PATH | os.O_DIRECTORY) for p in inside]
        _mount("tmpfs", hidden, b"tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        for path, handle in zip(inside, handles, strict=True):
            os.makedirs(path, exist_ok=True)
            _mount(f"/proc/self/fd/{handle}", path, None, MS_BIND | MS_REC)
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
            os.close(handle)
        _mount(None, hidden, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _enter_user_namespace() -> None:
    """Without root: become the owner of a new user namespace, mapping only our own ids."""
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _drop_capabilities() -> None:
    class Header(ctypes.Structure):
        _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))

    class Data(ctypes.Structure):
        _fields_ = (
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        )

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


@dataclass
class Isolation:
    """What this machine allows programs, as `probe()` found it once at start."""

    namespaces: bool = True
    user_namespace: bool = False
    run_as: tuple[int, int] | None = None  # uid, gid of the programs (root runs them as nobody)
    notes: list[str] = field(default_factory=list)
    proc_dev: int = 0
    tmp_mounts: list[str] = field(default_factory=list)
    host_network: bool = False  # asked for with --network: no network namespace of its own
    shown: list[str] = field(default_factory=list)  # hidden folders programs may read (argv)

    @property
    def parts(self) -> list[str]:
        parts = ["rlimits", "session", "environment"]
        if self.run_as is not None:
            parts.append("uid")
        if self.namespaces:
            parts += ["host-network" if self.host_network else "network", "filesystem", "pid"]
            if self.user_namespace:
                parts.append("userns")
        return parts

    def isolate_server(self) -> None:
        """Enter the mount and network namespaces every program of this server shares (the
        mount namespace alone with the host's network)."""
        network = 0 if self.host_network else CLONE_NEWNET
        _check(_libc.unshare(CLONE_NEWNS | network), "unshare(mount, net)")
        _remount_everything_read_only()
        keep = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix, *self.shown)}
        if self.host_network:  # a resolv.conf linked under /run (systemd-resolved) stays readable
            keep.add(os.path.dirname(os.path.realpath("/etc/resolv.conf")))
        _hide_dirs(sorted(keep))
        self.proc_dev = os.stat("/proc").st_dev

    def mount_private_tmp(self, size_mib: int) -> None:
        uid, gid = self.run_as or (os.getuid(), os.getgid())
        data = f"size={size_mib}m,mode=0700,uid={uid},gid={gid}"
        _mount("tmpfs", "/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, data)
        for alias in self.tmp_mounts[1:]:
            _mount("/tmp", alias, None, MS_BIND)

    def unmount_program(self) -> None:
        """Remove the program's tmpfs and /proc; the next program starts from the same state."""
        while os.stat("/proc").st_dev != self.proc_dev:
            _umount("/proc")
        for path in reversed(self.tmp_mounts):
            _umount(path)


def _set_limits(limits: dict, timeout_s: float) -> None:
    mib = 1024 * 1024
    cpu = limits["cpu_s"] if limits["cpu_s"] is not None else int(timeout_s) + 1
    for which, soft, hard in (
        (resource.RLIMIT_CPU, int(cpu), int(cpu) + 1),
        (resource.RLIMIT_AS, limits["address_space_mib"] * mib, None),
        (resource.RLIMIT_FSIZE, limits["file_size_mib"] * mib, None),
        (resource.RLIMIT_NPROC, limits["processes"], None),
        (resource.RLIMIT_NOFILE, limits["open_files"], None),
        (resource.RLIMIT_CORE, 0, None),
    ):
        resource.setrlimit(which, (soft, soft if hard is None else hard))


def _program(request: dict, iso: Isolation, workdir: str, nonce: bytes, fds: dict) -> None:
    """The program process: lock itself down, run the code, report how it ended. Never returns.

    `fds`: "out" (stderr, and stdout unless captured apart), "report", optionally "stdout"
    (stdout kept whole) and "stdin" (a memfd holding its input; else /dev/null)."""
    # Bound before the code runs, which may replace them.
    write, exit_now, getpid = os.write, os._exit, os.getpid
    try:
        # Its own session: kill(0) or killpg from the program cannot reach the supervisor.
        os.setsid()
        stdin = fds["stdin"] if "stdin" in fds else os.open(os.devnull, os.O_RDWR)
        # Fd 3: the report pipe; with tests, 3 and 4: the calls in, the replies out instead.
        channel = [fds["report"]] if "report" in fds else [fds["calls"], fds["replies"]]
        _arrange([stdin, fds.get("stdout", fds["out"]), fds["out"], *channel])
        if iso.namespaces:
            _mount("proc", "/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        os.chdir(workdir)
        os.umask(0o077)
        _set_limits(request["limits"], request["timeout_s"])
        if iso.run_as is not None:
            uid, gid = iso.run_as
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)  # leaving uid 0 clears every capability
        elif iso.user_namespace:
            _drop_capabilities()
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        os.environ.update(HOME=workdir, TMPDIR=workdir)
        filename = os.path.join(workdir, "main.py")
        with open(filename, "w", encoding="utf-8") as f:
            f.write(request["source"])
        # Fresh streams on the new descriptors, line-buffered so a killed program's output shows.
        sys.stdin, sys.stdout, sys.stderr = (
            open(fd, mode, buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
            for fd, mode in ((0, "r"), (1, "w"), (2, "w"))
        )
        sys.argv = [filename]
        module = type(sys)("__main__")
        module.__file__ = filename
        sys.modules["__main__"] = module
        source = request["source"]
    except BaseException as exc:
        try:  # with tests, fd 3 is no report pipe: the test process then reports the failure
            write(3, nonce + f" error {type(exc).__name__}: {exc}".encode()[:300] + b"\n")
        finally:
            exit_now(1)

    me = getpid()
    if "report" not in fds:
        _serve(source, filename, module)
    try:
        exec(compile(source, filename, "exec"), module.__dict__)
        outcome, status = b"ok", 0
    except SystemExit as exc:
        outcome, status = f"exit {exc.code!r}"[:200].encode(errors="replace"), 1
    except BaseException as exc:
        try:
            # The traceback starts at the program's own frame, not this one.
            exc = exc.with_traceback(exc.__traceback__.tb_next)
            sys.__excepthook__(type(exc), exc, exc.__traceback__)
            name = type(exc).__name__
        except BaseException:
            name = "exception"
        outcome, status = f"exception {name}".encode(errors="replace"), 1
    if getpid() != me:  # a child the program forked ran off its end: only the program reports
        exit_now(status)
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 (the program may have replaced contextlib; plain syntax it cannot)
            stream.flush()
        except BaseException:
            pass
    try:
        write(3, nonce + b" " + outcome + b"\n")
    finally:
        exit_now(status)


def _arrange(fds: list[int], opened: list[int] | None = None) -> None:
    """Put fds[i] at descriptor i (not inherited past exec) and close every other descriptor.

    `opened`: the descriptors open now, listed by the caller where this process's /proc may
    not be its own (the test process's program may mount a /proc over the server's at any
    moment); None: listed here. (closerange is slow without close_range.)"""
    if opened is None:
        opened = [int(fd) for fd in os.listdir("/proc/self/fd")]
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]  # no source is overwritten
    for i, fd in enumerate(high):
        os.dup2(fd, i, inheritable=i < 3)
    for fd in {*opened, *high} - set(range(len(fds))):
        with contextlib.suppress(OSError):  # one listdir itself used, or a standard one
            os.close(fd)


def _serve(source: str, filename: str, module: types.ModuleType) -> None:
    """With tests: run the solution, then answer the test process's calls until it hangs up.

    Nothing here decides a verdict: the test process does, from the plain data it receives.
    The solution may replace anything this function uses; it can then only send wrong data."""
    calls, replies = open(3, "rb"), open(4, "wb", buffering=0)  # noqa: SIM115
    try:
        exec(compile(source, filename, "exec"), module.__dict__)
        names, objects = {}, {}
        for name, value in list(module.__dict__.items()):
            if isinstance(value, types.ModuleType):
                names[name] = ["module", value.__name__]
            elif callable(value):
                names[name], objects[name] = ["call", ""], value
            else:
                with contextlib.suppress(plaindata.NotPlainData):
                    plaindata.encode(value)
                    names[name] = ["data", value]
        replies.write(plaindata.dumps({"names": names}))
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            replies.write(plaindata.dumps({"raised": [type(exc).__name__, str(exc)[:300]]}))
        os._exit(1)
    for line in calls:
        request = plaindata.loads(line)
        try:
            value = objects[request["call"]](*request["args"], **request["kwargs"])
            reply = plaindata.dumps({"value": value})
        except BaseException as exc:
            reply = plaindata.dumps({"raised": [type(exc).__name__, str(exc)[:300]]})
        replies.write(reply)
    os._exit(0)


class _Remote:
    """In the test process: a function of the solution, called with copies of plain data."""

    def __init__(self, name: str, calls, replies) -> None:
        self.__name__ = self.__qualname__ = name
        self._calls, self._replies = calls, replies

    def __repr__(self) -> str:
        return f"<solution function {self.__name__}>"

    def __call__(self, *args, **kwargs):
        self._calls.write(plaindata.dumps({"call": self.__name__, "args": args, "kwargs": kwargs}))
        return _answer(self._replies.readline())["value"]


def _answer(line: bytes) -> dict:
    """A reply of the solution's process; what it raised is raised here."""
    if not line:
        raise RuntimeError("the solution's process ended before answering")
    reply = plaindata.loads(line)
    if type(reply) is not dict:
        raise RuntimeError("the solution's process sent something other than a reply")
    if "raised" in reply:
        name, message = reply["raised"]
        kind = getattr(builtins, str(name), None)
        if not (isinstance(kind, type) and issubclass(kind, Exception)):
            kind, message = RuntimeError, f"the solution raised {name}: {message}"
        raise kind(message)
    return reply


def _checker(request: dict, iso: Isolation, nonce: bytes, fds: dict) -> None:
    """The test process: the benchmark's tests, run apart from the solution. Never returns.

    Its namespace holds the solution's names, save those of built-ins: functions as `_Remote`
    calls, plain data as copies, modules as this process's own standard-library modules. It
    alone holds the report pipe, and the solution's process is forked after it, into a PID
    namespace that cannot see it; not dumpable, so neither ptrace nor /proc/PID/fd reach it
    where namespaces are missing."""
    try:
        _arrange([os.open(os.devnull, os.O_RDWR), fds["out"], fds["out"], fds["report"],
                  fds["calls"], fds["replies"]], fds["opened"])  # fmt: skip
        os.chdir("/")
        _set_limits(request["limits"], request["timeout_s"])
        if iso.run_as is not None:
            uid, gid = iso.run_as
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        elif iso.user_namespace:
            _drop_capabilities()
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(DUMPABLE)")
        sys.stdout = sys.stderr = open(1, "w", buffering=1, errors="backslashreplace")  # noqa: SIM115
        calls, replies = open(4, "wb", buffering=0), open(5, "rb")  # noqa: SIM115
        names = _answer(replies.readline()).get("names")
        if type(names) is not dict:
            raise RuntimeError("the solution's process did not list its names")
        namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
        for name, (kind, value) in names.items():
            # A solution's `abs` or `__builtins__` would answer the tests' own checks.
            if name.startswith("__") or hasattr(builtins, name):
                continue
            if kind == "call":
                namespace[name] = _Remote(name, calls, replies)
            elif kind == "data":
                namespace[name] = value
            elif kind == "module" and value in sys.stdlib_module_names:
                namespace[name] = __import__(value)
        exec(compile(request["tests"], "tests.py", "exec"), namespace)
        outcome, status = b"ok", 0
    except SystemExit as exc:
        outcome, status = f"exit {exc.code!r}"[:200].encode(errors="replace"), 1
    except BaseException as exc:
        traceback.print_exception(exc)
        outcome, status = f"exception {type(exc).__name__}".encode(errors="replace"), 1
    with contextlib.suppress(BaseException):
        sys.stdout.flush()
    os.write(3, nonce + b" " + outcome + b"\n")
    os._exit(status)


def _supervise(request: dict, iso: Isolation, workdir: str, nonce: bytes, pipes: dict) -> None:
    """The supervisor process: PID and IPC namespaces, then the timer around the program.

    With tests, it first forks the test process, outside the PID namespace the program gets,
    and the program gets the call pipes instead of the report pipe; the test process's end is
    the verdict."""
    checker = None
    try:
        os.setsid()
        _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        if request.get("tests") is not None:
            calls, replies = os.pipe(), os.pipe()
            opened = [int(fd) for fd in os.listdir("/proc/self/fd")]  # the program mounts none yet
            checker = os.fork()
            if checker == 0:
                mine = {"out": pipes["out"], "report": pipes["report"], "opened": opened}
                _checker(request, iso, nonce, {**mine, "calls": calls[1], "replies": replies[0]})
            os.close(pipes.pop("report"))
            os.close(calls[1])
            os.close(replies[0])
            pipes.update(calls=calls[0], replies=replies[1])
        if iso.namespaces:
            _check(_libc.unshare(CLONE_NEWPID | CLONE_NEWIPC), "unshare(pid, ipc)")
        pid = os.fork()
    except BaseException as exc:
        os.write(pipes["status"], json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        os._exit(1)
    if pid == 0:
        os.close(pipes["status"])
        _program(request, iso, workdir, nonce, pipes)
    for name, fd in pipes.items():
        if name != "status":
            os.close(fd)
    timed_out = False
    judged = pid if checker is None else checker

    def on_alarm(signum, frame):
        nonlocal timed_out
        timed_out = True
        os.kill(pid, signal.SIGKILL)  # PID 1 of the namespace: takes every descendant along
        if checker is not None:
            os.kill(checker, signal.SIGKILL)

    start = time.monotonic()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, request["timeout_s"])
    _, wait_status = os.waitpid(judged, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    duration = time.monotonic() - start
    message = {"wait_status": wait_status, "timed_out": timed_out, "duration_s": duration}
    os.write(pipes["status"], json.dumps(message).encode())
    # Without a PID namespace, children the program left in its session die here.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    if checker is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    os._exit(0)


class _Tail:
    """Keeps the last `limit` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit, self.data, self.total = limit, bytearray(), 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]


class _Head(_Tail):
    """Keeps the first `limit` bytes of a stream (a whole output up to a size) and counts all."""

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk[: max(0, self.limit - len(self.data))]


def _stdin_file(text: str) -> int:
    """An in-memory file holding `text`, positioned at its start: the program's stdin. A file
    rather than a pipe, so no input size can block the server, and it seeks like a
    redirected file does."""
    fd = os.memfd_create("stdin", os.MFD_CLOEXEC)
    data = text.encode("utf-8")
    while data:
        data = data[os.write(fd, data) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _collect(pid: int, fds: dict, tails: dict, deadline: float) -> bool:
    """Read the program's pipes until the supervisor has reported; False if it overran."""
    poller = select.poll()
    open_fds = {}
    for name, fd in fds.items():
        poller.register(fd, select.POLLIN)
        open_fds[fd] = name
    while "status" in open_fds.values():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            os.killpg(pid, signal.SIGKILL)
            return False
        for fd, _ in poller.poll(remaining * 1000):
            chunk = os.read(fd, READ_CHUNK)
            if chunk:
                tails[open_fds[fd]].add(chunk)
            else:
                poller.unregister(fd)
                del open_fds[fd]
    # The program is gone; what it wrote is already in the pipes.
    for fd, name in open_fds.items():
        os.set_blocking(fd, False)
        try:
            while chunk := os.read(fd, READ_CHUNK):
                tails[name].add(chunk)
        except BlockingIOError:
            pass
    return True


def _verdict(
    report: bytes, nonce: bytes, status: dict, timeout_s: float, exit_ok: bool
) -> tuple[str, str]:
    """(status, detail) from the program's report and the supervisor's account."""
    if status.get("timed_out"):
        return "timeout", f"still running after the {timeout_s:g} s wall-clock limit"
    wait_status = status["wait_status"]
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        why = {"SIGXCPU": " (CPU time limit)", "SIGXFSZ": " (file size limit)"}.get(name, "")
        return "killed", f"killed by {name}{why}"
    lines = report.split(b"\n")
    mine = [line for line in lines if line.startswith(nonce + b" ")]
    if len(mine) != 1 or lines[:-1] != mine:
        code = os.waitstatus_to_exitcode(wait_status)
        return "exited", f"exited with status {code} without reporting that it reached its end"
    kind, _, rest = mine[0][len(nonce) + 1 :].decode(errors="replace").partition(" ")
    if kind == "ok":
        return "passed", "ran to its end"
    if kind == "exit":
        if exit_ok:
            return "passed", f"raised SystemExit({rest}), which counts as its end here"
        return "exited", f"raised SystemExit({rest}) before reaching its end"
    if kind == "exception":
        return "failed", f"uncaught {rest}"
    return "error", f"the sandbox could not start the program: {rest}"


def run_one(request: dict, iso: Isolation) -> dict:
    nonce = os.urandom(16).hex().encode()
    limits = request["limits"]
    if iso.namespaces:
        workdir = "/tmp"
        iso.mount_private_tmp(limits["disk_mib"])
    else:
        workdir = tempfile.mkdtemp(prefix="evalpipe-sandbox-")
        if iso.run_as is not None:
            os.chown(workdir, *iso.run_as)
    tails = {
        "out": _Tail(limits["output_tail_bytes"]),
        "report": _Tail(4096),
        "status": _Tail(65536),
    }
    if request.get("capture_stdout"):
        tails["stdout"] = _Head(limits["stdout_bytes"])
    pipes = {name: os.pipe() for name in tails}
    stdin = request.get("stdin")
    stdin_fd = _stdin_file(stdin) if stdin is not None else None
    pid = os.fork()
    if pid == 0:
        child = {name: w for name, (_, w) in pipes.items()}
        if stdin_fd is not None:
            child["stdin"] = stdin_fd
        for r, _ in pipes.values():
            os.close(r)
        try:
            _supervise(request, iso, workdir, nonce, child)
        finally:
            os._exit(1)
    for _, w in pipes.values():
        os.close(w)
    if stdin_fd is not None:
        os.close(stdin_fd)
    reads = {name: r for name, (r, _) in pipes.items()}
    deadline = time.monotonic() + request["timeout_s"] + SUPERVISOR_GRACE_S
    finished = _collect(pid, reads, tails, deadline)
    os.waitpid(pid, 0)
    for fd in reads.values():
        os.close(fd)
    if iso.namespaces:
        iso.unmount_program()
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    try:
        status = json.loads(bytes(tails["status"].data)) if finished else {}
    except ValueError:
        status = {}
    if not finished:
        verdict = ("error", "the sandbox supervisor did not finish; it was killed")
    elif "error" in status or "wait_status" not in status:
        verdict = ("error", f"the sandbox could not start the program: {status.get('error')}")
    else:
        exit_ok = bool(request.get("exit_ok"))
        verdict = _verdict(
            bytes(tails["report"].data), nonce, status, request["timeout_s"], exit_ok
        )
    wait_status = status.get("wait_status")
    return {
        "status": verdict[0],
        "passed": verdict[0] == "passed",
        "detail": verdict[1],
        "returncode": None if wait_status is None else os.waitstatus_to_exitcode(wait_status),
        "output_tail": bytes(tails["out"].data).decode("utf-8", errors="replace"),
        "output_bytes": tails["out"].total,
        "duration_s": status.get("duration_s", 0.0),
        **_stdout(tails.get("stdout")),
    }


def _stdout(head: _Tail | None) -> dict:
    if head is None:
        return {"stdout": None, "stdout_truncated": False}
    text = bytes(head.data).decode("utf-8", errors="replace")
    return {"stdout": text, "stdout_truncated": head.total > head.limit}


PROBE_REQUEST = {
    "source": "pass\n",
    "timeout_s": 10.0,
    "limits": {
        "cpu_s": None,
        "address_space_mib": 1024,
        "file_size_mib": 1,
        "processes": 16,
        "open_files": 64,
        "disk_mib": 1,
        "output_tail_bytes": 1024,
        "stdout_bytes": 1024,
    },
}


def probe(shown: list[str], host_network: bool = False) -> Isolation:
    """Find what isolation this machine allows: enter a user namespace unless root, then try
    the namespaces and a trivial program in a child; where they fail, say why and go on with what
    remains (rlimits, session, environment, and the uid where root). `shown`: hidden folders
    programs may read; `host_network`: keep the host's network namespace."""
    iso = Isolation(
        tmp_mounts=["/tmp"]
        + [p for p in PRIVATE_TMP_ALIASES if os.path.isdir(p) and not os.path.islink(p)],
        host_network=host_network,
        shown=shown,
    )
    if os.geteuid() == 0:
        try:
            nobody = pwd.getpwnam("nobody")
            iso.run_as = (nobody.pw_uid, nobody.pw_gid)
        except KeyError:
            iso.run_as = (65534, 65534)
    else:
        try:
            _enter_user_namespace()
            iso.user_namespace = True
        except OSError as exc:
            iso.namespaces = False
            iso.notes.append(f"no user namespace ({exc}); running as the calling user")
    if iso.namespaces:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                iso.isolate_server()
                result = run_one(PROBE_REQUEST, iso)
                why = "" if result["passed"] else result["detail"]
            except BaseException as exc:
                why = f"{type(exc).__name__}: {exc}"
            os.write(write_end, why.encode()[:1000])
            os._exit(0)
        os.close(write_end)
        why = os.read(read_end, 1000).decode(errors="replace")
        os.close(read_end)
        os.waitpid(pid, 0)
        if not why:
            iso.isolate_server()
            return iso
        iso.namespaces = False
        iso.notes.append(f"no namespaces ({why}): network and file system stay open")
    result = run_one(PROBE_REQUEST, iso)
    if not result["passed"]:
        iso.notes.append(f"the probe program failed: {result['detail']}")
    return iso


def _send(message: dict) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


def main() -> None:
    for module in WARM_MODULES:
        __import__(module)
    gc.freeze()  # collections in forked programs then leave the shared pages untouched
    args = sys.argv[1:]
    iso = probe([a for a in args if a != "--network"], host_network="--network" in args)
    _send({"isolation": iso.parts, "notes": iso.notes})
    for line in sys.stdin.buffer:
        _send(run_one(json.loads(line), iso))


if __name__ == "__main__":
    main()
