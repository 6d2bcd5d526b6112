"""Presets, GPUs and clusters: YAML files in configs/ → frozen, validated dataclasses."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.configio import build, read_yaml, unknown_name
from evalpipe.errors import ConfigError

DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
QUANTIZATIONS = ("none", "fp8", "awq", "gptq", "bitsandbytes", "mxfp4")


def config_dir() -> Path:
    """The configs/ folder: $EVALPIPE_CONFIG_DIR, else the one beside the package."""
    env = os.environ.get("EVALPIPE_CONFIG_DIR")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "configs"


def _is_path(name_or_path: str) -> bool:
    return name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path


def _resolve(kind: str, folder: str, name_or_path: str) -> tuple[str, Path]:
    """(name, file) for a registry name or a path to a YAML file of the same schema."""
    if _is_path(name_or_path):
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise ConfigError(f"{kind.capitalize()} file {str(path)!r} does not exist.")
        return path.stem, path
    path = config_dir() / folder / f"{name_or_path}.yaml"
    if not path.is_file():
        raise unknown_name(kind, name_or_path, names(folder))
    return name_or_path, path


def names(folder: str) -> list[str]:
    """Names of the YAML files in configs/<folder>/, sorted."""
    return sorted(p.stem for p in (config_dir() / folder).glob("*.yaml"))


def _positive(where: str, **values: int | None) -> None:
    for key, value in values.items():
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise ValueError(f"{key} must be a positive integer, got {value!r} ({where})")


@dataclass(frozen=True, kw_only=True)
class Moe:
    """Mixture-of-experts facts: every expert's weights are resident, only some are active."""

    experts: int  # routed experts per MoE layer
    experts_per_token: int
    active_params_b: float
    shared_experts: int = 0  # always-on experts (DeepSeek-V2); they are in params_b too
    moe_intermediate_size: int | None = None  # FFN width of one expert
    # Parameters held by the routed experts, billions: what expert-only quantization (gpt-oss
    # MXFP4) shrinks. None when unknown; planning an expert-only format then refuses.
    expert_params_b: float | None = None

    def __post_init__(self) -> None:
        _positive(
            "architecture.moe",
            experts=self.experts,
            experts_per_token=self.experts_per_token,
            moe_intermediate_size=self.moe_intermediate_size,
        )
        if self.experts_per_token > self.experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) exceeds experts ({self.experts})"
            )


@dataclass(frozen=True, kw_only=True)
class Architecture:
    """Facts needed for sizing, as in the model's config.json (sources cited in the YAML)."""

    params_b: float
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    # FFN width (dense models; MoE models give moe.moe_intermediate_size): sizes activations.
    intermediate_size: int | None = None
    # The output projection shares the input embedding's matrix (stored once).
    tie_word_embeddings: bool = False
    # MLA (DeepSeek-V2/V3) caches one compressed latent per token and layer instead of K and V.
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    # Sliding-window attention: `sliding_window_layers` of the layers only keep that many tokens.
    sliding_window: int | None = None
    sliding_window_layers: int | None = None
    moe: Moe | None = None

    def __post_init__(self) -> None:
        _positive(
            "architecture",
            layers=self.layers,
            hidden_size=self.hidden_size,
            attention_heads=self.attention_heads,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            vocab_size=self.vocab_size,
            max_position_embeddings=self.max_position_embeddings,
            intermediate_size=self.intermediate_size,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            sliding_window=self.sliding_window,
            sliding_window_layers=self.sliding_window_layers,
        )
        if self.params_b <= 0:
            raise ValueError(f"params_b must be positive, got {self.params_b!r}")
        if self.attention_heads % self.kv_heads:
            raise ValueError(
                f"attention_heads ({self.attention_heads}) must be a multiple of "
                f"kv_heads ({self.kv_heads})"
            )
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise ValueError("MLA needs both kv_lora_rank and qk_rope_head_dim, or neither")
        if (self.sliding_window is None) != (self.sliding_window_layers is None):
            raise ValueError("sliding_window and sliding_window_layers go together")
        if self.sliding_window_layers is not None and self.sliding_window_layers > self.layers:
            raise ValueError(
                f"sliding_window_layers ({self.sliding_window_layers}) exceeds "
                f"layers ({self.layers})"
            )


@dataclass(frozen=True, kw_only=True)
class Preset:
    """One model and how to serve it."""

    name: str
    model: str  # Hugging Face id or local path
    description: str = ""
    revision: str | None = None
    chat: bool = True  # prompts go through the tokenizer's chat template
    architecture: Architecture
    dtype: str = "bfloat16"
    quantization: str = "none"
    kv_cache_dtype: str = "auto"
    tensor_parallel: int | str = "auto"
    pipeline_parallel: int | str = "auto"
    max_model_len: int
    gpu_memory_utilization: float = 0.9
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    categories: tuple[str, ...] = ("reasoning", "math", "coding")
    # Name of a recipe that builds the weights locally (`evalpipe models prepare`), for
    # machines without a model hub.
    prepare: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
        if self.quantization not in QUANTIZATIONS:
            raise ValueError(
                f"quantization {self.quantization!r} is not one of {', '.join(QUANTIZATIONS)}"
            )
        for key in ("tensor_parallel", "pipeline_parallel"):
            value = getattr(self, key)
            if value != "auto" and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"{key} must be 'auto' or a positive integer, got {value!r}")
        _positive("preset", max_model_len=self.max_model_len)
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}"
            )


def preset_names() -> list[str]:
    return names("presets")


def load_preset(name_or_path: str) -> Preset:
    """A preset by registry name or YAML path; the file's stem is its name."""
    name, path = _resolve("preset", "presets", name_or_path)
    data = read_yaml(path)
    data.setdefault("name", name)
    return build(Preset, data, str(path))


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """One GPU model as the driver reports it."""

    name: str
    memory_gib: float  # total memory as nvidia-smi / NVML reports it, GiB
    bandwidth_gbs: float  # peak memory bandwidth, GB/s
    fp8: bool  # native FP8 tensor cores (Hopper, Ada, Blackwell)
    # The name NVML / nvidia-smi / torch report ("NVIDIA A100-SXM4-80GB"): vLLM picks some
    # defaults from it, and the monitor can match a live device to this entry.
    device_name: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        if self.memory_gib <= 0 or self.bandwidth_gbs <= 0:
            raise ValueError(
                f"memory_gib and bandwidth_gbs must be positive, got {self.memory_gib!r} "
                f"and {self.bandwidth_gbs!r}"
            )


def load_gpus() -> dict[str, Gpu]:
    """The GPU catalogue, configs/gpus.yaml, keyed by name."""
    path = config_dir() / "gpus.yaml"
    data = read_yaml(path)
    return {
        name: build(Gpu, {"name": name, **(spec or {})}, f"{path}:{name}")
        for name, spec in data.items()
    }


def get_gpu(name: str) -> Gpu:
    gpus = load_gpus()
    if name not in gpus:
        raise unknown_name("GPU", name, gpus)
    return gpus[name]
