"""Effective sampling settings: the task's or the model's generation_config.json, with a note."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from evalpipe.catalog import registry
from evalpipe.core.errors import ConfigError
from evalpipe.engine.base import SamplingSettings
from evalpipe.tasks.config import load_task_config
from evalpipe.tasks.generation import effective_sampling, read_generation_config

# Qwen/Qwen3-32B's generation_config.json (sampling keys as published on the hub).
QWEN3 = {"bos_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
         "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95}  # fmt: skip


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "generation_config.json").write_text(json.dumps(QWEN3))
    return tmp_path


def _gsm8k(**changes):
    task = load_task_config(registry.config_dir() / "tasks" / "gsm8k.yaml")
    return dataclasses.replace(task, **changes)


def test_task_rule_keeps_the_task_settings_and_names_the_model_s(model_dir: Path) -> None:
    preset = registry.load_preset("qwen3_32b")
    assert preset.generation_config == "task"  # the default
    task = _gsm8k()
    settings, note = effective_sampling(preset, task, model_dir)
    assert settings == task.sampling and settings.temperature == 0.0
    assert note == (
        "gsm8k: qwen3_32b's generation_config.json recommends temperature=0.6, top_p=0.95, "
        "top_k=20; the task's settings are used (temperature=0, top_p=1; generation_config: task)"
    )


def test_model_rule_takes_temperature_and_top_p_and_says_what_it_cannot_apply(
    model_dir: Path,
) -> None:
    preset = dataclasses.replace(registry.load_preset("qwen3_32b"), generation_config="model")
    settings, note = effective_sampling(preset, _gsm8k(), model_dir)
    assert settings == dataclasses.replace(_gsm8k().sampling, temperature=0.6, top_p=0.95)
    assert note is not None and "not applied (evalpipe has no such setting): top_k=20" in note


def test_a_task_rule_overrides_its_preset(model_dir: Path) -> None:
    preset = dataclasses.replace(registry.load_preset("qwen3_32b"), generation_config="model")
    settings, _ = effective_sampling(preset, _gsm8k(generation_config="task"), model_dir)
    assert settings.temperature == 0.0


def test_no_note_when_the_model_recommends_nothing_or_the_same(tmp_path: Path) -> None:
    preset = registry.load_preset("tiny_random")
    (tmp_path / "generation_config.json").write_text('{"bos_token_id": 1, "eos_token_id": 2}')
    assert effective_sampling(preset, _gsm8k(), tmp_path) == (_gsm8k().sampling, None)
    (tmp_path / "generation_config.json").write_text('{"temperature": 0.0, "top_p": 1.0}')
    assert effective_sampling(preset, _gsm8k(), tmp_path)[1] is None
    assert read_generation_config(tmp_path / "missing") == {}  # neither a folder nor a hub id


def test_model_rule_refuses_identical_samples(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text('{"temperature": 0.0}')
    preset = dataclasses.replace(registry.load_preset("tiny_random"), generation_config="model")
    task = _gsm8k(sampling=SamplingSettings(temperature=0.8, n=4))
    with pytest.raises(ConfigError, match="n = 4 completions"):
        effective_sampling(preset, task, tmp_path)


def test_bad_rule_values_are_refused() -> None:
    with pytest.raises(ValueError, match="generation_config 'both' is not one of task, model"):
        _gsm8k(generation_config="both")
    with pytest.raises(ValueError, match="generation_config 'hf'"):
        dataclasses.replace(registry.load_preset("tiny_random"), generation_config="hf")
