"""Effective sampling settings: the task's or the model's generation_config.json, with a note."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from evalpipe.catalog.configpath import config_dir
from evalpipe.catalog.preset import load_preset
from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError
from evalpipe.records.sampling import SamplingSettings
from evalpipe.rundir.samplelog import read_json
from evalpipe.tasks import load_task, load_tasks
from evalpipe.tasks.config import load_task_config
from evalpipe.tasks.generation import (
    effective_sampling,
    read_generation_config,
    recommended,
    with_generation_config,
)

# Qwen/Qwen3-32B's generation_config.json (sampling keys as published on the hub).
QWEN3 = {"bos_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
         "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95}  # fmt: skip


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "generation_config.json").write_text(json.dumps(QWEN3))
    return tmp_path


def _gsm8k(**changes):
    task = load_task_config(config_dir() / "tasks" / "gsm8k.yaml")
    return dataclasses.replace(task, **changes)


def _wanted(model_dir: Path) -> dict[str, float]:
    return recommended(read_generation_config(model_dir))


def test_task_rule_keeps_the_task_settings_and_names_the_model_s(model_dir: Path) -> None:
    preset = load_preset("qwen3_32b")
    assert preset.generation_config == "task"  # the default
    task = _gsm8k()
    settings, note = effective_sampling(preset, task, _wanted(model_dir))
    assert settings == task.sampling and settings.temperature == 0.0
    assert note == (
        "gsm8k: qwen3_32b's generation_config.json recommends temperature=0.6, top_p=0.95, "
        "top_k=20; the task's settings are used (temperature=0, top_p=1; generation_config: task)"
    )


def test_model_rule_takes_the_model_s_sampling_and_says_what_it_cannot_apply(
    model_dir: Path,
) -> None:
    preset = dataclasses.replace(load_preset("qwen3_32b"), generation_config="model")
    settings, note = effective_sampling(preset, _gsm8k(), _wanted(model_dir))
    assert settings == dataclasses.replace(_gsm8k().sampling, temperature=0.6, top_p=0.95, top_k=20)
    assert isinstance(settings.top_k, int)  # vLLM refuses top_k=20.0
    assert note == (
        "gsm8k: using qwen3_32b's generation_config.json: temperature=0.6, top_p=0.95, "
        "top_k=20 (the task's: temperature=0, top_p=1, top_k=0); generation_config: model"
    )
    wanted = {"min_p": 0.05, "repetition_penalty": 1.1}
    settings, note = effective_sampling(preset, _gsm8k(), wanted)
    assert settings.min_p == 0.05
    assert note is not None and note.endswith(
        "not applied (evalpipe has no such setting): repetition_penalty=1.1; "
        "generation_config: model"
    )


def test_a_task_rule_overrides_its_preset(model_dir: Path) -> None:
    preset = dataclasses.replace(load_preset("qwen3_32b"), generation_config="model")
    task = _gsm8k(generation_config="task")
    settings, _ = effective_sampling(preset, task, _wanted(model_dir))
    assert settings.temperature == 0.0
    preset = load_preset("qwen3_32b")
    settings, _ = effective_sampling(preset, _gsm8k(generation_config="model"), _wanted(model_dir))
    assert settings.temperature == 0.6


def test_no_note_when_the_model_recommends_nothing_or_the_same(tmp_path: Path) -> None:
    preset = load_preset("tiny_random")
    (tmp_path / "generation_config.json").write_text('{"bos_token_id": 1, "eos_token_id": 2}')
    assert _wanted(tmp_path) == {}
    (tmp_path / "generation_config.json").write_text('{"temperature": 0.0, "top_p": 1.0}')
    for which in ("task", "model"):
        task = _gsm8k(generation_config=which)
        assert effective_sampling(preset, task, _wanted(tmp_path)) == (task.sampling, None)
    assert read_generation_config(tmp_path / "missing") == {}  # neither a folder nor a hub id


def test_model_rule_refuses_settings_the_task_cannot_run_with(tmp_path: Path) -> None:
    preset = dataclasses.replace(load_preset("tiny_random"), generation_config="model")
    task = _gsm8k(sampling=SamplingSettings(temperature=0.8, n=4))
    with pytest.raises(ConfigError, match="n = 4 with temperature 0 gives 4 identical"):
        effective_sampling(preset, task, {"temperature": 0.0})
    with pytest.raises(ConfigError, match=r"top_p=0\b.*must be in \(0, 1\], got 0.0.*task"):
        effective_sampling(preset, _gsm8k(), {"top_p": 0})


def test_bad_rule_values_are_refused() -> None:
    with pytest.raises(ValueError, match="generation_config 'both' is not one of task, model"):
        _gsm8k(generation_config="both")
    with pytest.raises(ValueError, match="generation_config 'hf'"):
        dataclasses.replace(load_preset("tiny_random"), generation_config="hf")


def test_tasks_get_their_effective_settings_and_one_line_each(model_dir: Path) -> None:
    preset = dataclasses.replace(load_preset("qwen3_32b"), generation_config="model")
    arithmetic, ordering = load_task("arithmetic"), load_task("ordering")
    [ranked] = load_tasks(tasks=["ordering"], mc_method="logprobs")
    tasks, notes = with_generation_config(preset, [arithmetic, ranked], str(model_dir))
    assert tasks[0].sampling.temperature == 0.6 and tasks[0].sampling.top_p == 0.95
    assert tasks[0].config == arithmetic.config  # the task file as written, for the manifest
    assert tasks[1] is ranked  # ranks options by log-probability: nothing is sampled
    assert [n.split(":")[0] for n in notes] == ["arithmetic"]
    # No file (or no model here at all): the tasks run as their files say, silently.
    assert with_generation_config(preset, [ordering], None) == ([ordering], [])
    assert with_generation_config(preset, [ordering], str(model_dir / "none")) == ([ordering], [])


# -- through `evalpipe run` with the fake engine --------------------------------------------------

TASK_FILE = """category: math
source: {{uri: "generated:arithmetic", split: test, size: 20}}
prompt: {{template: "{{{{ question }}}}"}}
sampling: {{max_tokens: {max_tokens}, temperature: {temperature}}}
scorer: {{kind: math, extractor: answer}}
generation_config: {rule}
"""


def write_run_inputs(folder: Path, model: Path) -> tuple[Path, str]:
    """A preset for the model folder `model`, and two task files: `follows` takes the model's
    settings (generation_config: model), `keeps` its own temperature 0.2."""
    shipped = (config_dir() / "presets" / "tiny_random.yaml").read_text()
    preset = folder / "local_tiny.yaml"
    preset.write_text(
        shipped.replace("model: tiny-random-llama", f"model: {model}").replace(
            "prepare: tiny_random", ""
        )
    )
    follows, keeps = folder / "follows.yaml", folder / "keeps.yaml"
    follows.write_text(TASK_FILE.format(max_tokens=8, temperature=0.0, rule="model"))
    keeps.write_text(TASK_FILE.format(max_tokens=12, temperature=0.2, rule="task"))
    return preset, f"{follows},{keeps}"


def test_evalpipe_run_generates_with_the_effective_settings(tmp_path: Path, capsys) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "generation_config.json").write_text('{"temperature": 0.6, "top_k": 20}')
    preset, tasks = write_run_inputs(tmp_path, model)
    out = tmp_path / "run"
    argv = ["run", "--preset", str(preset), "--backend", "fake", "--tasks", tasks, "--limit", "3"]
    assert main([*argv, "--out", str(out)]) == exitcodes.OK
    err = capsys.readouterr().err
    assert (
        "evalpipe run: follows: using local_tiny's generation_config.json: temperature=0.6, "
        "top_k=20 (the task's: temperature=0, top_k=0); generation_config: model" in err
    )
    assert (
        "evalpipe run: keeps: local_tiny's generation_config.json recommends temperature=0.6, "
        "top_k=20; the task's settings are used (temperature=0.2, top_p=1; "
        "generation_config: task)" in err
    )
    manifest = read_json(out / "manifest.json")
    sampling = manifest["config"]["sampling"]
    assert (sampling["follows"]["temperature"], sampling["keeps"]["temperature"]) == (0.6, 0.2)
    # The task files as written stay in the definitions.
    assert manifest["config"]["definitions"]["follows"]["sampling"]["temperature"] == 0.0
    engine = {(s["max_tokens"], s["temperature"]) for s in manifest["engine"]["sampling"]}
    assert engine == {(8, 0.6), (12, 0.2)}

    # The model's file gone: the run is another configuration (it generated otherwise).
    (model / "generation_config.json").unlink()
    assert main([*argv, "--out", str(out)]) == exitcodes.ERROR
    assert "sampling.follows.temperature: 0.6 → 0.0" in capsys.readouterr().err
    assert main([*argv, "--out", str(tmp_path / "plain")]) == exitcodes.OK
    assert "generation_config" not in capsys.readouterr().err
    manifest = read_json(tmp_path / "plain" / "manifest.json")
    assert manifest["config"]["sampling"]["follows"]["temperature"] == 0.0


@pytest.mark.vllm
def test_evalpipe_run_on_vllm_samples_at_the_model_s_temperature(
    tmp_path: Path, vllm_env: dict[str, str], tiny_random_path: Path, capsys
) -> None:
    """The real engine gets the effective settings: vLLM's own SamplingParams, as the engine
    handed them to it, are recorded in the manifest's `engine`."""
    model = tmp_path / "model"
    shutil.copytree(tiny_random_path, model)
    prepared = json.loads((model / "generation_config.json").read_text())  # bos/eos ids
    recommends = {"do_sample": True, "temperature": 0.6, "top_k": 20, "min_p": 0.05}
    (model / "generation_config.json").write_text(json.dumps(prepared | recommends))
    preset, tasks = write_run_inputs(tmp_path, model)
    out = tmp_path / "run"
    argv = ["run", "--preset", str(preset), "--backend", "vllm", "--tasks", tasks, "--limit", "2"]
    assert main([*argv, "--out", str(out)]) == exitcodes.OK
    err = capsys.readouterr().err
    assert "follows: using local_tiny's generation_config.json: temperature=0.6" in err
    assert (
        "evalpipe run: keeps: local_tiny's generation_config.json recommends temperature=0.6, "
        "top_k=20, min_p=0.05; the task's settings are used (temperature=0.2, top_p=1; "
        "generation_config: task)" in err
    )
    manifest = read_json(out / "manifest.json")
    sampling = manifest["config"]["sampling"]
    assert (sampling["follows"]["temperature"], sampling["keeps"]["temperature"]) == (0.6, 0.2)
    used = {s["max_tokens"]: s for s in manifest["engine"]["sampling"]}
    assert sorted(used) == [8, 12]  # one SamplingParams per task
    assert used[8]["temperature"] == pytest.approx(0.6)  # follows
    assert used[12]["temperature"] == pytest.approx(0.2)  # keeps
    assert used[8]["top_p"] == used[12]["top_p"] == 1.0
    # top_k and min_p reach vLLM's SamplingParams too (follows); keeps samples from all tokens.
    assert (used[8]["top_k"], used[8]["min_p"]) == (20, pytest.approx(0.05))
    assert (used[12]["top_k"], used[12]["min_p"]) == (0, 0.0)
