"""`evalpipe plan` and `evalpipe presets` end to end, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalpipe.catalog.gpus import load_gpus
from evalpipe.catalog.preset import preset_names

ROOT = Path(__file__).resolve().parent.parent
PLAN_KEYS = {
    "preset",
    "model",
    "gpu",
    "gpu_memory_gib",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "nodes",
    "gpus_per_node",
    "total_gpus",
    "weights_gib",
    "weights_per_gpu_gib",
    "kv_cache_bytes_per_token",
    "kv_cache_per_gpu_gib",
    "overhead_per_gpu_gib",
    "usable_per_gpu_gib",
    "max_model_len",
    "max_concurrent_seqs",
    "fits",
    "notes",
}


def evalpipe(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "evalpipe", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


def test_plan_json_is_one_object_with_the_contract_keys() -> None:
    done = evalpipe("plan", "--preset", "falcon_40b", "--gpu", "a100-40gb", "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert set(plan) >= PLAN_KEYS
    assert (plan["tensor_parallel_size"], plan["pipeline_parallel_size"]) == (4, 1)
    assert plan["fits"] is True and plan["gpu_memory_gib"] == 40.0
    assert isinstance(plan["notes"], list)


def test_plan_answers_well_under_a_second() -> None:
    # Best of three: the check is about the code path (no heavy imports), not a busy machine.
    times = []
    for _ in range(3):
        start = time.perf_counter()
        done = evalpipe("plan", "--preset", "falcon_40b", "--gpu", "a100-40gb")
        times.append(time.perf_counter() - start)
        assert done.returncode == 0, done.stderr
    assert min(times) < 1.0, times


def test_plan_table_shows_layout_memory_and_verdict() -> None:
    done = evalpipe("plan", "--preset", "deepseek_v2_5", "--gpu", "h100-80gb")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "layout            TP=8 × PP=1 on 1 node × 8 GPUs" in out
    assert "fits              yes" in out
    assert "- MLA: the KV cache holds one 576-value latent" in out


def test_explicit_layout_flags_are_used() -> None:
    done = evalpipe(
        "plan", "--preset", "llama2_70b", "--gpu", "a100-40gb", "--tp", "8", "--pp", "2",
        "--gpus-per-node", "8", "--max-model-len", "2048", "--json",
    )  # fmt: skip
    plan = json.loads(done.stdout)
    assert (plan["tensor_parallel_size"], plan["pipeline_parallel_size"]) == (8, 2)
    assert (plan["nodes"], plan["total_gpus"], plan["max_model_len"]) == (2, 16, 2048)


def test_layout_that_does_not_fit_prints_the_plan_and_exits_1() -> None:
    done = evalpipe(
        "plan", "--preset", "falcon_40b", "--gpu", "a100-40gb", "--tp", "1", "--pp", "1", "--json"
    )
    assert done.returncode == 1
    plan = json.loads(done.stdout)
    assert plan["fits"] is False
    assert any(note.startswith("option:") for note in plan["notes"])
    assert "does not fit on a100-40gb with TP=1 × PP=1" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "falcon40b", "--gpu", "a100-40gb"], "Did you mean 'falcon_40b'"),
        (["--preset", "falcon_40b", "--gpu", "a100"], "Unknown GPU 'a100'."),
        (
            ["--preset", "falcon_40b", "--gpu", "a100-40gb", "--tp", "3"],
            "Valid TP sizes up to 8 GPUs per node: 1, 2, 4, 8.",
        ),
        (
            ["--preset", "falcon_180b", "--gpu", "rtx3090-24gb", "--max-nodes", "1"],
            "Options:",
        ),
        (
            ["--preset", "llama2_70b", "--gpu", "a100-80gb", "--max-model-len", "100000"],
            "max_model_len 100000 is outside 1..4096",
        ),
    ],
)
def test_user_mistakes_exit_1_with_one_clear_message(args: list[str], message: str) -> None:
    done = evalpipe("plan", *args)
    assert done.returncode == 1
    assert message in done.stderr
    assert done.stderr.startswith("evalpipe plan: error: ")
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_bad_yaml_preset_file_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("model: [unclosed\n")
    done = evalpipe("plan", "--preset", str(bad), "--gpu", "a100-40gb")
    assert done.returncode == 1
    assert "is not valid YAML" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--preset", "falcon_40b", "--gpu", "a100-40gb", "--tp", "0"],
        ["--preset", "falcon_40b", "--gpu", "a100-40gb", "--all-gpus"],
        ["--preset", "falcon_40b"],
        ["--preset", "falcon_40b", "--gpu", "a100-40gb", "--pp", "two"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    done = evalpipe("plan", *args)
    assert done.returncode == 2
    assert "usage:" in done.stderr and "Traceback" not in done.stderr


def test_all_gpus_table_has_one_row_per_catalogue_gpu() -> None:
    done = evalpipe("plan", "--preset", "falcon_180b", "--all-gpus")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "falcon_180b (tiiuae/falcon-180B-chat), max_model_len 2048"
    rows = {line.split()[0]: line.split() for line in lines[3:]}
    # The cpu entry is there to calibrate estimates on this machine, not to run models.
    assert set(rows) == {name for name, gpu in load_gpus().items() if gpu.is_gpu}
    assert "cpu" not in rows
    assert rows["a100-40gb"][2:6] == ["8×2", "1", "16", "2"]
    assert rows["h200-141gb"][2:6] == ["4×1", "2", "8", "1"]  # two copies fill the node


def test_all_gpus_json_reports_unfit_gpus_with_the_reason() -> None:
    done = evalpipe("plan", "--preset", "falcon_180b", "--all-gpus", "--max-nodes", "1", "--json")
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)
    by_gpu = {row["gpu"]: row for row in table["gpus"]}
    assert by_gpu["rtx3090-24gb"]["fits"] is False
    assert "does not fit on rtx3090-24gb" in by_gpu["rtx3090-24gb"]["error"]
    assert by_gpu["h100-80gb"]["fits"] is True and set(by_gpu["h100-80gb"]) >= PLAN_KEYS


def test_presets_json_lists_every_preset() -> None:
    done = evalpipe("presets", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["name"] for r in rows] == preset_names()
    oss = next(r for r in rows if r["name"] == "gpt_oss_20b")
    assert (oss["quantization"], oss["params_b"]) == ("mxfp4", 20.91)


def test_presets_table_has_a_row_per_preset() -> None:
    done = evalpipe("presets")
    assert done.returncode == 0, done.stderr
    assert "behemoth_r1_123b" in done.stdout and "bfloat16/fp8" in done.stdout


HEAVY = ("vllm", "torch", "pandas", "pynvml", "matplotlib", "datasets", "ray", "transformers")


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["--help"], 0),
        (["plan", "--preset", "deepseek_v2_5", "--gpu", "h100-80gb", "--json"], 0),
        (["plan", "--preset", "falcon_180b", "--all-gpus"], 0),
        (["presets", "--json"], 0),
        (["plan", "--help"], 0),
        (["presets", "--help"], 0),
        (["render", "--preset", "smollm2_135m", "--cluster", "local"], 0),
        (
            ["submit", "--preset", "smollm2_135m", "--cluster", "local", "--dry-run", "--no-check"],
            0,
        ),
        # The preflight refuses the unprepared model, on the login node's light imports alone.
        (["submit", "--preset", "smollm2_135m", "--cluster", "local", "--dry-run"], 1),
        (["submit", "--help"], 0),
        # Estimates load tasks and the tokenizer, still without any heavy library.
        (["plan", "--preset", "smollm2_135m", "--gpu", "h100-80gb", "--estimate"], 0),
        (
            [
                "submit",
                "--preset",
                "llama3_3_70b",
                "--cluster",
                "example-h100-site",
                "--tasks",
                "gsm8k,mmlu",
                "--shards",
                "auto",
                "--time",
                "auto",
                "--dry-run",
                "--no-check",
            ],
            0,
        ),
        # A directory never submitted: status fails before asking the scheduler.
        (["status", "never-submitted"], 1),
    ],
)
def test_login_node_commands_import_no_heavy_library(
    argv: list[str], status: int, tmp_path: Path
) -> None:
    probe = (
        "import sys, contextlib, io\n"
        "from evalpipe.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        status = main({argv!r})\n"
        "    except SystemExit as exc:\n"
        "        status = exc.code\n"
        f"print(status, sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALPIPE_CACHE": str(tmp_path / "cache")}
    env |= {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{status} []", done.stderr


def test_every_command_module_is_a_verb_and_only_the_verb_that_runs_is_loaded(
    tmp_path: Path,
) -> None:
    """`evalpipe --help` lists every verb from evalpipe.commands.VERBS; `evalpipe render`
    imports render's module alone and builds no other verb's flags."""
    from evalpipe.commands import VERBS

    modules = {p.stem for p in (ROOT / "evalpipe" / "commands").glob("[!_]*.py")}
    assert set(VERBS) == modules
    probe = (
        "import sys, contextlib, io\n"
        "from evalpipe.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['render', '--preset', 'tiny_random', '--cluster', 'local'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('evalpipe.commands.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['evalpipe.commands._options', 'evalpipe.commands.render']"
    listed = evalpipe("--help").stdout
    assert all(f"    {verb}" in listed for verb in VERBS)
