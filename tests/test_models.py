"""Local model recipes, `evalpipe models`, and how presets resolve to what vLLM loads."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalpipe.catalog import weights
from evalpipe.catalog.preset import load_preset
from evalpipe.core.errors import ConfigError, UnknownNameError

REPO = Path(__file__).resolve().parent.parent


def evalpipe(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evalpipe", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def parameter_count(safetensors: Path) -> int:
    """Parameters in a safetensors file, from its header (8-byte length, then JSON)."""
    with safetensors.open("rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    return sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")


def test_resolve_prefers_a_local_folder_then_the_prepared_one_then_the_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    smollm2 = load_preset("smollm2_135m")
    assert weights.model_source(smollm2) == "HuggingFaceTB/SmolLM2-135M-Instruct"  # hub reachable
    prepared = tmp_path / "cache" / "models" / "smollm2_gguf"
    prepared.mkdir(parents=True)
    assert weights.model_source(smollm2) == str(prepared)
    local = tmp_path / "my-model"
    local.mkdir()
    assert weights.model_source(dataclasses.replace(smollm2, model=str(local))) == str(local)


def test_a_missing_prepared_model_without_a_hub_names_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))  # an empty Hugging Face cache
    with pytest.raises(ConfigError) as err:
        weights.model_source(load_preset("smollm2_135m"))
    assert "hub is offline" in str(err.value)
    assert "evalpipe models prepare smollm2_135m" in str(err.value)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(ConfigError, match=r"not a hub id.*evalpipe models prepare tiny_random"):
        weights.model_source(load_preset("tiny_random"))
    # Where a caller only looks (generation settings), a missing model is no error.
    assert weights.find_model(load_preset("tiny_random")) is None


def test_prepare_names_presets_and_recipes_and_refuses_others() -> None:
    with pytest.raises(UnknownNameError, match="Did you mean 'tiny_random'"):
        weights.prepare("tiny_rnadom")
    no_recipe = dataclasses.replace(load_preset("smollm2_135m"), prepare=None)
    with pytest.raises(ConfigError, match="has no `prepare` recipe"):
        weights.prepare(no_recipe)
    assert weights.recipe_for("smollm2_gguf")[0].name == "smollm2_gguf"
    assert weights.recipe_for("smollm2_135m")[0].name == "smollm2_gguf"


def test_tiny_random_matches_its_preset_exactly(tiny_random_path: Path) -> None:
    config = json.loads((tiny_random_path / "config.json").read_text())
    arch = load_preset("tiny_random").architecture
    assert config["num_hidden_layers"] == arch.layers
    assert config["hidden_size"] == arch.hidden_size
    assert config["num_attention_heads"] == arch.attention_heads
    assert config["num_key_value_heads"] == arch.kv_heads
    assert config["head_dim"] == arch.head_dim
    assert config["vocab_size"] == arch.vocab_size
    assert config["max_position_embeddings"] == arch.max_position_embeddings
    assert round(parameter_count(tiny_random_path / "model.safetensors") / 1e9, 6) == arch.params_b
    tokenizer = json.loads((tiny_random_path / "tokenizer.json").read_text())
    assert len(tokenizer["model"]["vocab"]) == arch.vocab_size
    assert "<|im_start|>assistant" in (tiny_random_path / "chat_template.jinja").read_text()


def test_prepare_is_atomic_when_killed_and_idempotent_after(tmp_path: Path) -> None:
    env = {"EVALPIPE_CACHE": str(tmp_path)}
    folder = tmp_path / "models"
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalpipe", "models", "prepare", "tiny_random"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not list(folder.glob(".tiny_random.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)  # mid-build: the recipe's imports alone take seconds
    proc.wait()
    assert list(folder.glob(".tiny_random.tmp-*")), "the build never started"
    assert not (folder / "tiny_random").exists()

    first = evalpipe("models", "prepare", "tiny_random", env=env)
    assert first.returncode == 0, first.stderr
    assert "prepared in" in first.stdout
    built = folder / "tiny_random"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in built.iterdir()
    }
    assert oct(built.stat().st_mode & 0o777) == "0o755"
    assert not list(folder.glob(".tiny_random.tmp-*"))  # the killed build's leftovers are gone
    stamp = (built / weights.MARKER).read_text()

    again = evalpipe("models", "prepare", "tiny_random", env=env)
    assert again.returncode == 0 and "already prepared" in again.stdout
    assert (built / weights.MARKER).read_text() == stamp


def test_models_list_says_how_to_get_each_model_without_heavy_imports(tmp_path: Path) -> None:
    code = (
        "import sys; from evalpipe.cli import main; rc = main(['models', 'list']); "
        "print(sorted({'torch', 'vllm', 'transformers'} & set(sys.modules))); sys.exit(rc)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "EVALPIPE_CACHE": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "not prepared" in result.stdout
    assert "evalpipe models prepare smollm2_135m" in result.stdout
    assert result.stdout.rstrip().endswith("[]")


def test_a_missing_vllm_names_the_extra_to_install() -> None:
    code = (
        "import sys; sys.modules['vllm'] = None\n"  # as on a machine without vLLM
        "from evalpipe.engine.protocol import EngineSettings\n"
        "from evalpipe.engine.factory import open_engine\n"
        "from evalpipe.catalog.preset import load_preset\n"
        "open_engine('vllm', load_preset('tiny_random'), EngineSettings())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "MissingDependencyError" in result.stderr
    assert "pip install 'evalpipe[gpu]'" in result.stderr
    assert "pip install 'evalpipe[cpu]'" in result.stderr


# Wrong answers a model of the right weights finds far less likely than " Paris".
DISTRACTORS = (" London", " Berlin", " Madrid", " Rome", " Lyon", " Marseille")


@pytest.mark.vllm
def test_smollm2_135m_prepared_from_gguf_knows_the_capital_of_france(
    vllm_env: dict, model_cache: Path
) -> None:
    """What the dequantised weights must get right on any CPU: kernels round differently (an
    Intel AMX and an AMD CPU give SmolLM2 different greedy answers), a margin of nats does not
    move. Its greedy text is only promised to repeat on the same engine and layout."""
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.engine.vllm import VllmEngine
    from evalpipe.records.sampling import SamplingSettings

    path = weights.prepare("smollm2_135m")
    assert path == model_cache / "models" / "smollm2_gguf"
    preset = dataclasses.replace(load_preset("smollm2_135m"), chat=False)
    engine = VllmEngine.open(preset, EngineSettings(deterministic=True))
    try:
        prompt = "The capital of France is"
        paris, *others = engine.loglikelihoods([(prompt, c) for c in (" Paris", *DISTRACTORS)])
        # Deterministic mode on the CPU build: the same requests in the same order and window
        # give the same completions.
        prompts = [f"Add {i} and {2 * i}." for i in range(12)]
        greedy = SamplingSettings(max_tokens=24)
        first = [g.texts for g in engine.generate(prompts, greedy)]
        assert [g.texts for g in engine.generate(prompts, greedy)] == first
        # vLLM 0.32's CPU build crashes with batch-invariant kernels: they stay off there.
        assert engine.describe()["batch_invariant"] is False
    finally:
        engine.close()
    # Measured here (AMD EPYC): " Paris" −0.24, the likeliest distractor (" London") −4.55.
    margin = paris.logprob - max(o.logprob for o in others)
    assert margin > 2.0, [paris.logprob, *(o.logprob for o in others)]
