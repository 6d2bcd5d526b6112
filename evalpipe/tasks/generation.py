"""Effective generation settings per task: the task's or the model's generation_config.json.

vLLM's offline `LLM` applies a model's generation_config.json only when no sampling parameters
are passed (evalpipe always passes them), while `vllm serve` fills every field a request leaves
out from it. So evalpipe decides explicitly, by the rule `generation_config: task | model` (a
task's setting wins over its preset's; default `task`, see docs/tasks.md), and says so when the
model recommends something else.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from evalpipe.catalog.registry import GENERATION_CONFIG_RULES, Preset
from evalpipe.core.errors import ConfigError
from evalpipe.engine.base import SamplingSettings
from evalpipe.tasks.config import TaskConfig

FILE = "generation_config.json"
# Sampling keys of a generation_config.json that vLLM reads (vllm/config/model.py,
# get_diff_sampling_param), and the SamplingSettings field each becomes, if it has one.
SAMPLING_KEYS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": None,
    "min_p": None,
    "repetition_penalty": None,
}


def read_generation_config(model: str | Path, revision: str | None = None) -> dict[str, Any]:
    """The model's generation_config.json (a local folder, else the Hugging Face cache); {}
    when it has none. Nothing is downloaded."""
    local = Path(model).expanduser()
    if local.is_dir():
        path: Path | None = local / FILE
    else:
        from huggingface_hub import try_to_load_from_cache

        try:
            found = try_to_load_from_cache(str(model), FILE, revision=revision)
        except ValueError:  # not a repo id
            found = None
        path = Path(found) if isinstance(found, str) else None
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"Cannot read {str(path)!r}: {exc}. Fix or delete the file (vLLM reads it too)."
        ) from exc
    return data if isinstance(data, dict) else {}


def recommended(generation_config: dict[str, Any]) -> dict[str, float]:
    """The sampling keys the model's file sets, in SAMPLING_KEYS order."""
    return {
        key: generation_config[key]
        for key in SAMPLING_KEYS
        if isinstance(generation_config.get(key), int | float)
    }


def rule(preset: Preset, task: TaskConfig) -> str:
    """`task` or `model`: the task's own setting, else its preset's."""
    return task.generation_config or preset.generation_config


def effective_sampling(
    preset: Preset, task: TaskConfig, model: str | Path
) -> tuple[SamplingSettings, str | None]:
    """The settings a task runs with, and one line when the model recommends others.

    `model` is what the engine loads (models.model_source(preset)). Under `model`, the model's
    temperature and top_p replace the task's; keys SamplingSettings cannot carry (top_k, min_p,
    repetition_penalty) are named in the note as not applied.
    """
    which = rule(preset, task)
    assert which in GENERATION_CONFIG_RULES  # validated by Preset and TaskConfig
    wanted = recommended(read_generation_config(model, preset.revision))
    settings = task.sampling
    if which == "model":
        fields = {SAMPLING_KEYS[k]: float(v) for k, v in wanted.items() if SAMPLING_KEYS[k]}
        settings = dataclasses.replace(task.sampling, **fields)
        if settings.n > 1 and settings.temperature == 0:
            raise ConfigError(
                f"Task {task.name!r} asks for n = {settings.n} completions, but the model's "
                f"{FILE} sets temperature 0 (generation_config: model), which makes them "
                "identical. Use generation_config: task for this task."
            )
    differs = {
        k: v
        for k, v in wanted.items()
        if SAMPLING_KEYS[k] is None or getattr(settings, str(SAMPLING_KEYS[k])) != v
    }
    if not differs:
        return settings, None
    shown = ", ".join(f"{k}={v:g}" for k, v in differs.items())
    used = f"temperature={settings.temperature:g}, top_p={settings.top_p:g}"
    if which == "model":
        note = (
            f"{task.name}: using {preset.name}'s {FILE} ({used}; generation_config: model); "
            f"not applied (evalpipe has no such setting): {shown}"
        )
    else:
        note = (
            f"{task.name}: {preset.name}'s {FILE} recommends {shown}; the task's settings are "
            f"used ({used}; generation_config: task)"
        )
    return settings, note
