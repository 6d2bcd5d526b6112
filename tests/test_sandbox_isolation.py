"""The sandbox's isolation level: recorded for every run that scores code, and the weak
fallback (no namespaces) used only where the user accepts it with --sandbox weak."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError, SandboxError
from evalpipe.rundir.samplelog import read_json
from evalpipe.sandbox import pool
from evalpipe.sandbox.pool import Program, require_isolation, run_program

NO_NAMESPACES = Path(__file__).with_name("sandbox_no_namespaces.py")
RUN = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "pyfuncs", "--limit", "2"]


@pytest.fixture
def weak_machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Sandbox servers that find no namespaces, as on a machine that refuses them."""
    pool.shutdown()  # idle servers that found namespaces are not reused
    monkeypatch.setattr(pool, "WORKER", NO_NAMESPACES)
    yield
    monkeypatch.undo()
    pool.shutdown()
    require_isolation("weak")  # whatever this machine gives, as the other tests expect


def test_the_weak_fallback_runs_nothing_unless_accepted(weak_machine: None) -> None:
    with pytest.raises(SandboxError) as refused:
        run_program("pass")
    message = str(refused.value)
    assert "weak fallback" in message and "--sandbox weak" in message
    assert "user namespaces" in message and "seccomp" in message  # what to change
    assert "refused as a seccomp profile does" in message  # what the server found
    assert require_isolation("weak") == "weak"
    result = run_program(Program(source="def f():\n    return 1\n", tests="assert f() == 1\n"))
    assert result.passed and result.level == "weak"


def test_a_code_run_refuses_the_weak_fallback_then_records_it_when_accepted(
    weak_machine: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main([*RUN, "--out", str(out)]) == exitcodes.ERROR
    assert "--sandbox weak" in capsys.readouterr().err
    assert not out.exists()  # refused before the model generated anything

    assert main([*RUN, "--sandbox", "weak", "--out", str(out)]) == exitcodes.OK
    assert read_json(out / "manifest.json")["sandbox"] == "weak"
    assert read_json(out / "summary.json")["sandbox"] == "weak"
    capsys.readouterr()
    assert main(["report", str(out)]) == exitcodes.OK
    printed = capsys.readouterr().out
    assert "‡[sandbox weak]" in printed and "weak fallback (--sandbox weak)" in printed


def test_a_run_with_namespaces_records_full_and_one_without_code_records_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if require_isolation("weak") != "full":
        pytest.skip("this machine gives the sandbox no namespaces")
    assert main([*RUN, "--out", str(tmp_path / "code")]) == exitcodes.OK
    assert read_json(tmp_path / "code" / "manifest.json")["sandbox"] == "full"
    assert read_json(tmp_path / "code" / "summary.json")["sandbox"] == "full"
    plain = [*RUN[:-3], "arithmetic", "--limit", "2", "--out", str(tmp_path / "plain")]
    assert main(plain) == exitcodes.OK
    assert "sandbox" not in read_json(tmp_path / "plain" / "manifest.json")
    capsys.readouterr()
    assert main(["report", str(tmp_path / "code")]) == exitcodes.OK
    assert "sandbox weak" not in capsys.readouterr().out


def test_a_cluster_profile_accepts_the_weak_fallback_for_its_jobs(tmp_path: Path) -> None:
    import yaml

    from evalpipe.catalog.clusters import load_cluster
    from evalpipe.jobs.jobspec import JobOptions
    from evalpipe.jobs.prepare import prepare
    from evalpipe.run.runoptions import RunnerOptions, RuntimeOptions

    root = Path(__file__).resolve().parent.parent
    local = yaml.safe_load((root / "configs" / "clusters" / "local.yaml").read_text())
    profile = tmp_path / "site.yaml"
    profile.write_text(yaml.safe_dump(local | {"sandbox": "weak"}))
    out = tmp_path / "run"
    job = prepare("tiny_random", str(profile), JobOptions(), out)
    assert ("--sandbox", "weak") in job.spec.runner_options
    assert "--sandbox weak" in job.script
    given = JobOptions(run=RunnerOptions(runtime=RuntimeOptions(sandbox="full")))
    assert ("--sandbox", "full") in prepare(
        "tiny_random", str(profile), given, out
    ).spec.runner_options
    plain = prepare(
        "tiny_random", str(root / "configs" / "clusters" / "local.yaml"), JobOptions(), out
    )
    assert not any(flag == "--sandbox" for flag, _ in plain.spec.runner_options)
    profile.write_text(yaml.safe_dump(local | {"sandbox": "none"}))
    with pytest.raises(ConfigError, match="sandbox 'none' is not one of full, weak"):
        load_cluster(str(profile))


def test_the_sandbox_command_refuses_the_weak_fallback_unless_told(
    weak_machine: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = tmp_path / "p.py"
    program.write_text("print('hi')\n")
    assert main(["sandbox", str(program)]) == exitcodes.ERROR
    assert "--sandbox weak" in capsys.readouterr().err
    assert main(["sandbox", str(program), "--sandbox", "weak"]) == exitcodes.OK
    printed = capsys.readouterr().out
    assert "hi" in printed and "note: no filesystem, network, pid isolation here" in printed


@pytest.mark.parametrize(
    ("levels", "weakest_level"),
    [(["full", "weak", None], "weak"), (["full", None], "full"), ([None, None], None), ([], None)],
)
def test_a_run_of_several_parts_takes_its_weakest_level(levels, weakest_level) -> None:
    from evalpipe.core.isolation import weakest

    assert weakest(levels) == weakest_level
