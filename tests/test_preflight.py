"""The login-node preflight: each rejection with its message, run by `evalpipe check`, `render
--check` and `submit`, without vLLM or torch imported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalpipe.catalog.clusters import load_cluster
from evalpipe.catalog.configpath import config_dir
from evalpipe.catalog.preset import load_preset

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("vllm", "torch", "transformers", "huggingface_hub", "pandas")


def check(*args: str, cwd: Path) -> tuple[int, str, str]:
    """`evalpipe check ARGS` in a fresh interpreter; fails if it imported anything heavy."""
    code = (
        "import sys\nfrom evalpipe.cli import main\n"
        f"rc = main({list(args)!r})\n"
        f"heavy = sorted(set({HEAVY!r}) & set(sys.modules))\n"
        "print('HEAVY', heavy, file=sys.stderr)\nsys.exit(rc)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "EVALPIPE_"))}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(REPO), "HOME": str(cwd)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "HEAVY []" in result.stderr, result.stderr
    return result.returncode, result.stdout, result.stderr.replace("HEAVY []\n", "")


def site(tmp_path: Path, **extra: str) -> Path:
    """An offline cluster profile whose caches live under tmp_path."""
    path = tmp_path / "site.yaml"
    lines = [
        "gpu: h100-80gb",
        "gpus_per_node: 4",
        "cpus_per_node: 8",
        "memory_per_node_gib: 64",
        f"cache_dir: {tmp_path / 'evalpipe-cache'}",
        f"hf_cache: {tmp_path / 'hf'}",
        "env:",
        "  HF_HUB_OFFLINE: 1",
        *(f"{k}: {v}" for k, v in extra.items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def preset_at(tmp_path: Path, model: str, **changes: str) -> Path:
    """tiny_random's preset, loading `model` and without its recipe."""
    text = (config_dir() / "presets" / "tiny_random.yaml").read_text()
    text = text.replace("model: tiny-random-llama", f"model: {model}")
    text = text.replace("prepare: tiny_random\n", "")
    for old, new in changes.items():
        text = text.replace(old, new)
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def model(tmp_path: Path, tiny_random_path: Path) -> Path:
    """A copy of the prepared test model that a test may break."""
    return Path(shutil.copytree(tiny_random_path, tmp_path / "model"))


def test_a_ready_model_passes_quickly_without_heavy_imports(tmp_path: Path, model: Path) -> None:
    rc, out, err = check(
        "check", "--preset", str(preset_at(tmp_path, str(model))), "--cluster",
        str(site(tmp_path)), cwd=tmp_path,
    )  # fmt: skip
    assert rc == 0, err
    assert f"p is ready in {model}" in out


def test_a_missing_prepared_model_offline_names_the_prepare_command(tmp_path: Path) -> None:
    rc, _, err = check(
        "check", "--preset", "tiny_random", "--cluster", str(site(tmp_path)), cwd=tmp_path
    )
    assert rc == 1
    cache = tmp_path / "evalpipe-cache"
    assert "error: [weights] preset tiny_random: model 'tiny-random-llama' is not available" in err
    assert f"the prepared build {cache}/models/tiny_random" in err
    assert f"Fetch it with: EVALPIPE_CACHE={cache} evalpipe models prepare tiny_random" in err


def test_a_hub_model_missing_offline_names_the_download_command(tmp_path: Path) -> None:
    rc, _, err = check(
        "check", "--preset", str(preset_at(tmp_path, "acme/tiny")), "--cluster",
        str(site(tmp_path)), cwd=tmp_path,
    )  # fmt: skip
    assert rc == 1
    assert "is not available and the hub is offline (HF_HUB_OFFLINE)" in err
    assert f"looked in the Hugging Face cache {tmp_path / 'hf' / 'hub'}" in err
    assert f"Fetch it with: HF_HOME={tmp_path / 'hf'} hf download acme/tiny" in err


def test_a_hub_model_online_is_a_warning_only(tmp_path: Path) -> None:
    profile = site(tmp_path)
    profile.write_text(profile.read_text().replace("  HF_HUB_OFFLINE: 1", "  HF_HUB_OFFLINE: 0"))
    rc, out, err = check(
        "check", "--preset", str(preset_at(tmp_path, "acme/tiny")), "--cluster", str(profile),
        cwd=tmp_path,
    )  # fmt: skip
    assert rc == 0, err
    assert "warning: [weights] acme/tiny is not in the Hugging Face cache" in out
    assert "the job will download it from the hub" in out


@pytest.mark.parametrize("offline", ["1", "0"])
def test_a_missing_local_folder_says_to_make_it_not_to_download_it(
    tmp_path: Path, offline: str
) -> None:
    profile = site(tmp_path)
    profile.write_text(
        profile.read_text().replace("  HF_HUB_OFFLINE: 1", f"  HF_HUB_OFFLINE: {offline}")
    )
    folder = tmp_path / "weights" / "tiny"
    rc, _, err = check(
        "check", "--preset", str(preset_at(tmp_path, str(folder))), "--cluster", str(profile),
        cwd=tmp_path,
    )  # fmt: skip
    assert rc == 1  # online too: no hub serves a path, so the job would fail at the load
    assert f"model '{folder}' is a local path and the folder {folder} does not exist" in err
    assert "Copy the model's Hugging Face folder there" in err
    assert "evalpipe models prepare p" in err
    assert "hf download" not in err


def test_the_hub_cache_of_the_profile_is_where_weights_are_found(
    tmp_path: Path, model: Path
) -> None:
    repo = tmp_path / "hf" / "hub" / "models--acme--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots").mkdir()
    shutil.move(model, repo / "snapshots" / "abc123")
    rc, out, err = check(
        "check", "--preset", str(preset_at(tmp_path, "acme/tiny")), "--cluster",
        str(site(tmp_path)), cwd=tmp_path,
    )  # fmt: skip
    assert rc == 0, err
    assert f"ready in {repo / 'snapshots' / 'abc123'}" in out


def test_a_missing_shard_is_named(tmp_path: Path, model: Path) -> None:
    (model / "model.safetensors").rename(model / "model-00001-of-00002.safetensors")
    index = {
        "metadata": {},
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
        },
    }
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    rc, _, err = check(
        "check", "--preset", str(preset_at(tmp_path, str(model))), "--cluster",
        str(site(tmp_path)), cwd=tmp_path,
    )  # fmt: skip
    assert rc == 1
    assert (
        f"error: [shards] 1 of 2 safetensors shard(s) named by model.safetensors.index.json are "
        f"missing from {model}: model-00002-of-00002.safetensors" in err
    )


def test_config_json_disagreeing_with_the_preset_is_refused(tmp_path: Path, model: Path) -> None:
    preset = preset_at(tmp_path, str(model), **{"kv_heads: 2": "kv_heads: 4"})
    rc, _, err = check(
        "check", "--preset", str(preset), "--cluster", str(site(tmp_path)), cwd=tmp_path
    )
    assert rc == 1
    assert "error: [config] config.json disagrees with preset p: kv_heads is 2 there, 4 in" in err
    assert f"(looked at {model}/config.json)" in err


def test_a_chat_preset_without_a_template_is_refused(tmp_path: Path, model: Path) -> None:
    (model / "chat_template.jinja").unlink()
    tokenizer_config = json.loads((model / "tokenizer_config.json").read_text())
    tokenizer_config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    preset = preset_at(tmp_path, str(model))
    rc, _, err = check(
        "check", "--preset", str(preset), "--cluster", str(site(tmp_path)), cwd=tmp_path
    )
    assert rc == 1
    assert "error: [chat template] preset p is a chat preset (chat: true), but its tokenizer" in err
    assert f"looked in {model}/tokenizer_config.json (chat_template)" in err
    assert "Set `chat: false` in the preset" in err
    plain = preset_at(tmp_path, str(model), **{"chat: true": "chat: false"})
    rc, _, err = check(
        "check", "--preset", str(plain), "--cluster", str(site(tmp_path)), cwd=tmp_path
    )
    assert rc == 0, err


def test_a_hub_dataset_missing_offline_names_the_fetch_command(tmp_path: Path, model: Path) -> None:
    preset = preset_at(tmp_path, str(model))
    args = ["check", "--preset", str(preset), "--cluster", str(site(tmp_path))]
    rc, _, err = check(*args, "--tasks", "gsm8k", cwd=tmp_path)
    assert rc == 1
    hf = tmp_path / "hf"
    assert (
        "error: [dataset] task gsm8k: dataset hf:openai/gsm8k is not cached and the job runs "
        f"offline (HF_HUB_OFFLINE); looked in {hf / 'datasets'} and {hf / 'hub'}. Fetch it "
        f"with: HF_HOME={hf} evalpipe tasks fetch gsm8k" in err
    )
    (hf / "datasets" / "openai___gsm8k" / "main").mkdir(parents=True)  # as `datasets` caches it
    rc, _, err = check(*args, "--tasks", "gsm8k", cwd=tmp_path)
    assert rc == 0, err


def test_a_local_dataset_file_missing_is_refused(tmp_path: Path, model: Path) -> None:
    task = (config_dir() / "tasks" / "arithmetic.yaml").read_text()
    task_file = tmp_path / "mine.yaml"
    start = task.index("source:")
    end = task.index("\nprompt:", start)
    source = "source:\n  uri: jsonl:data/{split}.jsonl\n  split: test"
    task_file.write_text(task[:start] + source + task[end:])
    rc, _, err = check(
        "check", "--preset", str(preset_at(tmp_path, str(model))), "--cluster",
        str(site(tmp_path)), "--tasks", str(task_file), cwd=tmp_path,
    )  # fmt: skip
    assert rc == 1
    assert f"data file '{tmp_path}/data/test.jsonl' (split 'test') does not exist" in err


def test_a_size_mismatch_warns_without_blocking(tmp_path: Path, model: Path) -> None:
    preset = preset_at(tmp_path, str(model), **{"params_b: 0.000427": "params_b: 0.001"})
    rc, out, err = check(
        "check", "--preset", str(preset), "--cluster", str(site(tmp_path)), cwd=tmp_path
    )
    assert rc == 0, err
    assert f"warning: [size] the shards in {model} hold 0.000855 GB, but" in out
    assert "0.001 B parameters in the checkpoint's bfloat16 make 0.002 GB" in out


def test_render_check_runs_the_preflight(tmp_path: Path) -> None:
    rc, _, err = check(
        "render", "--preset", "tiny_random", "--cluster", str(site(tmp_path)), "--check",
        "--out", "r", cwd=tmp_path,
    )  # fmt: skip
    assert rc == 1
    assert "evalpipe models prepare tiny_random" in err


def test_a_bf16_checkpoint_quantized_to_fp8_on_load_is_no_size_warning(
    tmp_path: Path, model: Path
) -> None:
    preset = preset_at(
        tmp_path, str(model), **{"dtype: bfloat16": "dtype: bfloat16\nquantization: fp8"}
    )
    rc, out, err = check(
        "check", "--preset", str(preset), "--cluster", str(site(tmp_path)), cwd=tmp_path
    )
    assert rc == 0, err
    # (tiny_random's tokenizer makes HumanEval's longest prompt too long: a context warning)
    assert "warning: [size]" not in out and "is ready in" in out


def test_the_fake_backend_loads_no_weights_so_only_data_is_checked(tmp_path: Path) -> None:
    from evalpipe.jobs import preflight

    preset, cluster = (
        load_preset("tiny_random"),
        load_cluster(str(site(tmp_path))),
    )
    assert preflight.check(preset, cluster, environ={}).errors  # no prepared model here
    assert preflight.check(preset, cluster, environ={}, backend="fake").findings == ()
