"""`evalpipe.evaluate`, the Python API: per-task metrics with intervals, a resumed `out` that
generates nothing again, the same run directory as `evalpipe run`, and `import evalpipe` that
loads none of it until it is used."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

import evalpipe
from evalpipe.catalog.preset import load_preset
from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError, ResumeMismatchError, UnknownNameError
from evalpipe.rundir.samplelog import read_json

ROOT = Path(__file__).resolve().parents[1]
FAKE = {"backend": "fake"}


def test_evaluate_returns_per_task_metrics_and_the_records(tmp_path: Path) -> None:
    result = evalpipe.evaluate(preset="tiny_random", tasks=["arithmetic"], limit=4,
                               out=tmp_path / "run", **FAKE)  # fmt: skip
    assert (result.status, result.exit_status, result.run_dir) == (
        "complete", exitcodes.OK, tmp_path / "run"
    )  # fmt: skip
    accuracy = result.tasks["arithmetic"].metrics["accuracy"]
    assert accuracy.n == 4 and accuracy.ci_low is not None and accuracy.ci_high is not None
    assert accuracy.ci_low <= accuracy.mean <= accuracy.ci_high
    shown = str(result)
    assert shown.startswith(f"RunResult(complete, {tmp_path / 'run'})")
    assert "arithmetic accuracy: " in shown and "(n=4)" in shown
    records = list(result.samples())
    assert len(records) == 4 and {r.task for r in records} == {"arithmetic"}
    assert list(result.judgments()) == []


def test_calling_again_with_the_same_out_resumes_without_generating(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = evalpipe.evaluate(preset="tiny_random", tasks="arithmetic", limit=4, out=out, **FAKE)
    samples = (out / "samples.jsonl").read_bytes()
    again = evalpipe.evaluate(preset="tiny_random", tasks=["arithmetic"], limit=4, out=out,
                              resume=True, **FAKE)  # fmt: skip
    assert (out / "samples.jsonl").read_bytes() == samples  # not one sample generated again
    assert len(read_json(out / "manifest.json")["attempts"]) == 1  # no engine was started
    assert again.tasks == first.tasks
    with pytest.raises(ResumeMismatchError, match="limit: 4 → 3"):
        evalpipe.evaluate(preset="tiny_random", tasks=["arithmetic"], limit=3, out=out, **FAKE)


def test_a_preset_object_or_file_and_every_run_option_by_its_flags_name(tmp_path: Path) -> None:
    preset = load_preset("tiny_random")
    by_object = evalpipe.evaluate(preset, tasks=["arithmetic"], limit=2, out=tmp_path / "a",
                                  deterministic=True, window=8, **FAKE)  # fmt: skip
    config = read_json(by_object.run_dir / "manifest.json")["config"]
    assert config["deterministic"] is True
    path = ROOT / "configs" / "presets" / "tiny_random.yaml"
    by_file = evalpipe.evaluate(path, tasks=["arithmetic"], limit=2, out=tmp_path / "b",
                                deterministic=True, **FAKE)  # fmt: skip
    assert by_file.tasks == by_object.tasks


def test_an_unknown_keyword_names_itself_and_the_valid_ones() -> None:
    with pytest.raises(UnknownNameError, match=r"'tensor_parallel'\..*Known .*\btp\b"):
        evalpipe.evaluate("tiny_random", tensor_parallel=2)
    with pytest.raises(ConfigError, match="--window: must be a positive integer, got 0"):
        evalpipe.evaluate("tiny_random", window=0, **FAKE)


def test_a_stop_flag_from_another_thread_checkpoints_and_a_new_call_resumes(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    stop = SimpleNamespace(requested="enough")  # asked before the first sample
    results: list[evalpipe.RunResult] = []
    worker = threading.Thread(target=lambda: results.append(evalpipe.evaluate(
        "tiny_random", tasks=["arithmetic"], limit=4, out=out, stop=stop, **FAKE
    )))  # fmt: skip
    worker.start()
    worker.join(timeout=120)
    [stopped] = results
    assert (stopped.status, stopped.exit_status) == ("interrupted", exitcodes.RESUMABLE)
    done = evalpipe.evaluate("tiny_random", tasks=["arithmetic"], limit=4, out=out, **FAKE)
    assert done.status == "complete" and len(list(done.samples())) == 4


def _contents(run_dir: Path) -> dict[str, object]:
    """A run directory's files and what they say, without times, hosts and the run's id."""
    lines = (run_dir / "samples.jsonl").read_text().splitlines()
    # in the order they finished, which the engine's timing decides
    samples = sorted(
        (json.loads(line) for line in lines), key=lambda r: (r["task"], r["sample_id"])
    )
    manifest = read_json(run_dir / "manifest.json")
    summary = read_json(run_dir / "summary.json")
    return {
        "files": sorted(p.name for p in run_dir.iterdir()),
        "samples": samples,
        **{key: manifest[key] for key in ("preset", "seed", "engine", "oom_fallback", "admission")},
        "config": manifest["config"],
        "config_hash": manifest["config_hash"],
        "plan": manifest["plan"],
        "status": manifest["status"],
        "samples_planned": manifest["samples_planned"],
        "tasks": summary["tasks"],
        "categories": summary["categories"],
    }


def test_the_command_line_and_evaluate_write_the_same_run_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each in a folder of its own: a run beside another predicts its lengths from it.
    cli, api = tmp_path / "a" / "run", tmp_path / "b" / "run"
    argv = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "arithmetic,ordering",
            "--limit", "3", "--mc-method", "logprobs", "--out", str(cli)]  # fmt: skip
    assert main(argv) == exitcodes.OK
    capsys.readouterr()
    evalpipe.evaluate(preset="tiny_random", tasks=["arithmetic", "ordering"], limit=3,
                      mc_method="logprobs", out=api, **FAKE)  # fmt: skip
    assert _contents(cli) == _contents(api)


def test_import_evalpipe_loads_the_api_on_first_use() -> None:
    code = (
        "import sys, evalpipe\n"
        "before = sorted(m for m in sys.modules if m.startswith('evalpipe'))\n"
        "assert before == ['evalpipe'], before\n"
        "assert 'evaluate' in dir(evalpipe) and callable(evalpipe.evaluate)\n"
        "assert 'evalpipe.run.session' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with pytest.raises(AttributeError, match="has no attribute 'evaluat'"):
        evalpipe.evaluat  # noqa: B018


def _doc_code(after: str) -> str:
    """The indented code block of docs/python.md that follows the text `after`."""
    text = (ROOT / "docs" / "python.md").read_text()
    block = text.split(after)[1].split("\n\n", 1)[1]
    lines = []
    for line in block.splitlines():
        if line and not line.startswith("    "):
            break
        lines.append(line[4:])
    return "\n".join(lines)


def _run_code(code: str, cwd: Path) -> str:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=cwd, env=env, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_docs_example_runs(tmp_path: Path) -> None:
    code = _doc_code("For example, a table of accuracies").replace(
        "limit=20)", 'limit=20, backend="fake")'
    )
    assert "evalpipe.evaluate(" in code and 'backend="fake"' in code
    out = _run_code(code, tmp_path)
    assert "arithmetic: " in out and "ordering: " in out


def test_the_docs_submitting_example_renders_both_options(tmp_path: Path) -> None:
    code = _doc_code("submits it (docs/slurm.md):")
    out = _run_code(code + "\nprint(script)", tmp_path)
    command = out[out.index("-m evalpipe run") :]
    assert "--window 8" in command and "--deterministic" in command


@pytest.mark.vllm
def test_evaluate_on_the_real_engine_then_resume(
    tmp_path: Path, vllm_env: dict[str, str], tiny_random_path: Path
) -> None:
    """The issue's example: tiny_random is a real vLLM model with random weights."""
    out = tmp_path / "run"
    result = evalpipe.evaluate(preset="tiny_random", tasks=["arithmetic"], limit=4, out=out)
    assert result.status == "complete" and "arithmetic accuracy: " in str(result)
    assert result.tasks["arithmetic"].metrics["accuracy"].n == 4
    samples = (out / "samples.jsonl").read_bytes()
    again = evalpipe.evaluate(preset="tiny_random", tasks=["arithmetic"], limit=4, out=out)
    assert (out / "samples.jsonl").read_bytes() == samples
    assert len(read_json(out / "manifest.json")["attempts"]) == 1
    assert again.tasks == result.tasks
