"""Presets and the GPU catalogue: every shipped file loads, validates and can be planned."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalpipe.catalog.configpath import config_dir
from evalpipe.catalog.gpus import get_gpu, load_gpus
from evalpipe.catalog.preset import load_preset, preset_names
from evalpipe.core.errors import ConfigError, UnknownNameError
from evalpipe.planning import planner

REQUIRED_PRESETS = {
    "falcon_40b",
    "falcon_180b",
    "llama2_70b",
    "codellama_70b",
    "llama3_1_8b",
    "llama3_3_70b",
    "qwen2_5_72b",
    "qwen3_32b",
    "deepseek_llm_7b_chat",
    "gpt_oss_20b",
    "deepseek_v2_5",
    "behemoth_r1_123b",
    "smollm2_135m",
    "tiny_random",
}
REQUIRED_GPUS = {
    "rtx3090-24gb",
    "l40s-48gb",
    "a100-40gb",
    "a100-80gb",
    "h100-80gb",
    "gh200-96gb",
    "h200-141gb",
    "b200-192gb",
}


def test_required_presets_and_gpus_ship() -> None:
    assert set(preset_names()) >= REQUIRED_PRESETS
    assert set(load_gpus()) >= REQUIRED_GPUS


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_loads_and_plans_on_the_largest_gpu(name: str) -> None:
    preset = load_preset(name)
    assert preset.name == name
    largest = max(load_gpus().values(), key=lambda g: g.memory_gib)
    result = planner.plan(preset, largest, read_model_config=False)
    assert result.fits and result.max_concurrent_seqs >= 1


@pytest.mark.parametrize("name", sorted(REQUIRED_PRESETS - {"tiny_random"}))
def test_every_fact_names_its_source(name: str) -> None:
    """Each architecture line carries a comment (the config.json key, the card, the arithmetic)."""
    text = (config_dir() / "presets" / f"{name}.yaml").read_text()
    block = text.split("architecture:", 1)[1].split("\ndtype:", 1)[0]
    facts = [line for line in block.splitlines()[1:] if line.strip() and ":" in line]
    bare = [line for line in facts if "#" not in line and not line.strip().endswith(":")]
    assert facts and not bare, f"facts without a source comment: {bare}"


def test_gpu_memory_is_the_driver_total() -> None:
    gpus = load_gpus()
    # nvidia-smi totals in MiB / 1024.
    assert gpus["a100-40gb"].memory_gib == 40960 / 1024
    assert gpus["h100-80gb"].memory_gib == pytest.approx(81559 / 1024, abs=0.01)
    assert gpus["h200-141gb"].memory_gib == pytest.approx(143771 / 1024, abs=0.01)
    assert gpus["b200-192gb"].memory_gib == pytest.approx(183359 / 1024, abs=0.01)
    no_fp8 = {n for n, g in gpus.items() if g.is_gpu and not g.fp8}
    assert no_fp8 == {"rtx3090-24gb", "a100-40gb", "a100-80gb"}


def test_moe_mla_and_sliding_window_are_modelled() -> None:
    oss = load_preset("gpt_oss_20b").architecture
    assert oss.moe is not None and oss.moe.expert_params_b == 19.12
    assert (oss.sliding_window, oss.sliding_window_layers) == (128, 12)
    ds = load_preset("deepseek_v2_5").architecture
    assert (ds.kv_lora_rank, ds.qk_rope_head_dim) == (512, 64)
    assert ds.moe is not None and ds.moe.shared_experts == 2
    assert load_preset("behemoth_r1_123b").quantization == "fp8"


def write(tmp_path: Path, text: str, name: str = "custom.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


BASE = """\
model: some/model
max_model_len: 1024
architecture:
  params_b: 1.0
  layers: 4
  hidden_size: 256
  attention_heads: 4
  kv_heads: 2
  head_dim: 64
  vocab_size: 1000
  max_position_embeddings: 2048
"""


def test_preset_from_a_path_takes_its_stem_as_name(tmp_path: Path) -> None:
    preset = load_preset(write(tmp_path, BASE))
    assert preset.name == "custom" and preset.architecture.layers == 4


def test_typo_in_a_preset_key_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_preset(write(tmp_path, BASE + "tensor_paralel: 2\n"))
    msg = str(err.value)
    assert "unknown key 'tensor_paralel'. Did you mean 'tensor_parallel'" in msg
    assert "Valid keys:" in msg and "pipeline_parallel" in msg


def test_typo_in_an_architecture_key_names_the_nesting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"custom.yaml.architecture: unknown key 'kv_head'"):
        load_preset(write(tmp_path, BASE.replace("kv_heads", "kv_head")))


def test_unknown_preset_suggests_the_closest(tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError) as err:
        load_preset("falcon40b")
    assert "Unknown preset 'falcon40b'. Did you mean 'falcon_40b'" in str(err.value)


def test_unknown_gpu_suggests_the_closest() -> None:
    with pytest.raises(UnknownNameError, match=r"Did you mean 'a100-40gb'"):
        get_gpu("a100-40g")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("  kv_lora_rank: 512\n", "MLA needs both kv_lora_rank and qk_rope_head_dim"),
        ("  sliding_window: 128\n", "sliding_window and sliding_window_layers go together"),
        (
            "  sliding_window: 128\n  sliding_window_layers: 9\n",
            "sliding_window_layers (9) exceeds layers (4)",
        ),
        (
            "  moe: {experts: 4, experts_per_token: 8, active_params_b: 0.5}\n",
            "experts_per_token (8) exceeds experts (4)",
        ),
        ("  intermediate_size: 0\n", "intermediate_size must be a positive integer"),
    ],
)
def test_inconsistent_architecture_is_refused(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_preset(write(tmp_path, BASE + extra))
    assert message in str(err.value)


def test_heads_must_be_a_multiple_of_kv_heads(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"attention_heads \(4\) must be a multiple of kv_heads"):
        load_preset(write(tmp_path, BASE.replace("kv_heads: 2", "kv_heads: 3")))


def test_unknown_quantization_lists_the_known(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"quantization 'int3' is not one of none, fp8"):
        load_preset(write(tmp_path, BASE + "quantization: int3\n"))


def test_bad_gpu_entry_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gpus.yaml").write_text("x-1gb: {memory_gib: 0, bandwidth_gbs: 1, fp8: false}\n")
    monkeypatch.setenv("EVALPIPE_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="memory_gib and bandwidth_gbs must be positive"):
        load_gpus()
