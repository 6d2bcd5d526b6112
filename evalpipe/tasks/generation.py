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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe.catalog.preset import Preset
from evalpipe.core.errors import ConfigError
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.base import Task
from evalpipe.tasks.config import TaskConfig, check_sampling
from evalpipe.tasks.configured import ConfiguredTask

FILE = "generation_config.json"
# Sampling keys of a generation_config.json that vLLM reads (vllm/config/model.py,
# get_diff_sampling_param; max_new_tokens aside: a task's token budget is its own). Only those
# SamplingSettings has a field for can be applied; the others are named as not applied.
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
)
APPLICABLE = frozenset(f.name for f in dataclasses.fields(SamplingSettings)) & set(SAMPLING_KEYS)


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
        and not isinstance(generation_config[key], bool)
    }


def rule(preset: Preset, task: TaskConfig) -> str:
    """`task` or `model`: the task's own setting, else its preset's."""
    return task.generation_config or preset.generation_config


def _shown(values: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in values.items())


def effective_sampling(
    preset: Preset, task: TaskConfig, wanted: dict[str, float]
) -> tuple[SamplingSettings, str | None]:
    """The settings a task runs with, given what the model's file recommends (`wanted`, from
    `recommended`), and one line when that differs from the task's own settings.

    Under `model`, the model's values replace the task's where SamplingSettings has the field
    (temperature, top_p, top_k, min_p); the others (repetition_penalty, …) are named in the line
    as not applied.
    """
    own = task.sampling
    if task.scorer.method == "logprobs":  # ranks options; nothing is generated
        return own, None
    differs = {k: v for k, v in wanted.items() if k not in APPLICABLE or getattr(own, k) != v}
    if not differs:
        return own, None
    if rule(preset, task) == "task":
        return own, (
            f"{task.name}: {preset.name}'s {FILE} recommends {_shown(differs)}; the task's "
            f"settings are used (temperature={own.temperature:g}, top_p={own.top_p:g}; "
            "generation_config: task)"
        )
    # In the field's own type: top_k 20, not 20.0 (vLLM refuses a float top_k).
    applied = {k: type(getattr(own, k))(v) for k, v in differs.items() if k in APPLICABLE}
    try:
        settings = dataclasses.replace(own, **applied)
        check_sampling(settings, task.scorer)
    except ValueError as exc:
        raise ConfigError(
            f"Task {task.name!r} with {preset.name}'s {FILE} ({_shown(applied)}; "
            f"generation_config: model): {exc}. Use generation_config: task for this task."
        ) from None
    parts = []
    if applied:
        replaced = _shown({k: getattr(own, k) for k in applied})
        parts.append(f"using {preset.name}'s {FILE}: {_shown(applied)} (the task's: {replaced})")
    unapplied = {k: v for k, v in differs.items() if k not in applied}
    if unapplied:
        parts.append(f"not applied (evalpipe has no such setting): {_shown(unapplied)}")
    return settings, f"{task.name}: {'; '.join(parts)}; generation_config: model"


def with_generation_config(
    preset: Preset, tasks: Sequence[Task], model: str | None
) -> tuple[list[Task], list[str]]:
    """`tasks` set to generate with their effective settings, and one line per task whose own
    settings differ from the model's recommendation. `model` is where the model is
    (models.find_model(preset); None: nowhere here, so nothing is recommended)."""
    wanted = recommended(read_generation_config(model, preset.revision)) if model else {}
    if not wanted:
        return list(tasks), []
    chosen: list[Task] = []
    notes: list[str] = []
    for task in tasks:
        if not isinstance(task, ConfiguredTask):
            # lm-eval's tasks generate with lm-eval's settings, as its vLLM backend does.
            chosen.append(task)
            continue
        settings, note = effective_sampling(preset, task.config, wanted)
        chosen.append(task if settings == task.sampling else task.with_sampling(settings))
        if note is not None:
            notes.append(note)
    return chosen, notes
