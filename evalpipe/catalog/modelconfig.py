"""A model's config.json found on this machine, read as plain JSON and compared with a preset."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalpipe.catalog.preset import Architecture, Preset


def hub_cache() -> Path:
    """The Hugging Face hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return Path(home) / "hub"


def hub_snapshot(hub: Path, preset: Preset) -> Path | None:
    """The preset's snapshot folder in hub cache `hub`: its revision (or main's), else the
    newest one holding a config.json; None if absent."""
    repo = hub / ("models--" + preset.model.replace("/", "--"))
    ref = repo / "refs" / (preset.revision or "main")
    snapshot = ref.read_text().strip() if ref.is_file() else preset.revision
    if snapshot and (repo / "snapshots" / snapshot).is_dir():
        return repo / "snapshots" / snapshot
    found = sorted((repo / "snapshots").glob("*/config.json")) if not preset.revision else []
    return found[-1].parent if found else None


def find_local(preset: Preset) -> dict[str, Any] | None:
    """The preset's config.json: in its local model folder or the hub cache; None if absent."""
    local = Path(preset.model).expanduser()
    if (local / "config.json").is_file():
        return read_json(local / "config.json")
    snapshot = hub_snapshot(hub_cache(), preset)
    return read_json(snapshot / "config.json") if snapshot else None


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from `path`; None if unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    return next((config[k] for k in keys if config.get(k) is not None), None)


def facts(config: Mapping[str, Any]) -> dict[str, Any]:
    """Architecture fields as config.json states them (names vary by model family).

    Multimodal and nested configs keep the language model under text_config.
    """
    if isinstance(config.get("text_config"), dict):
        config = {**config, **config["text_config"]}
    heads = _first(config, "num_attention_heads", "n_head", "num_heads")
    hidden = _first(config, "hidden_size", "n_embd", "d_model")
    kv = _first(config, "num_key_value_heads", "num_kv_heads", "n_head_kv")
    if kv is None and config.get("multi_query"):  # Falcon-7B style multi-query attention
        kv = 1
    if kv is None and not config.get("new_decoder_architecture"):
        kv = heads
    # MLA configs have no head_dim; the preset records the per-head K/V width.
    head_dim = _first(config, "head_dim") or (
        config.get("qk_nope_head_dim") if config.get("kv_lora_rank") else None
    )
    if head_dim is None and heads and hidden:
        head_dim = hidden // heads
    found = {
        "layers": _first(config, "num_hidden_layers", "n_layer", "num_layers"),
        "hidden_size": hidden,
        "attention_heads": heads,
        "kv_heads": kv,
        "head_dim": head_dim,
        "vocab_size": _first(config, "vocab_size"),
        "max_position_embeddings": _first(config, "max_position_embeddings"),
        "intermediate_size": _first(config, "intermediate_size", "ffn_hidden_size"),
        "tie_word_embeddings": config.get("tie_word_embeddings"),
        "kv_lora_rank": _first(config, "kv_lora_rank"),
        "qk_rope_head_dim": _first(config, "qk_rope_head_dim"),
        "sliding_window": _first(config, "sliding_window"),
        "experts": _first(config, "n_routed_experts", "num_local_experts", "num_experts"),
        "experts_per_token": _first(config, "num_experts_per_tok", "experts_per_token"),
        "moe_intermediate_size": _first(config, "moe_intermediate_size"),
    }
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and found["sliding_window"] is not None:
        found["sliding_window_layers"] = sum(t == "sliding_attention" for t in layer_types)
    return {k: v for k, v in found.items() if v is not None}


def _preset_value(arch: Architecture, key: str) -> Any:
    if key in ("experts", "experts_per_token", "moe_intermediate_size"):
        return getattr(arch.moe, key) if arch.moe is not None else None
    return getattr(arch, key)


def disagreements(
    preset: Preset, config: Mapping[str, Any] | None, *, stated_only: bool = False
) -> list[str]:
    """One note per architecture fact where the local config.json and the preset differ.

    `stated_only` skips the optional facts the preset leaves out (None)."""
    if config is None:
        return []
    notes = []
    for key, value in facts(config).items():
        ours = _preset_value(preset.architecture, key)
        if key == "sliding_window" and ours is None:
            continue  # configs carry unused window sizes (e.g. Qwen2 with use_sliding_window off)
        if stated_only and ours is None:
            continue
        if ours != value:
            notes.append(
                f"config.json disagrees with preset {preset.name}: {key} is {value!r} there, "
                f"{ours!r} in the preset (vLLM uses config.json; fix the preset)"
            )
    return notes
