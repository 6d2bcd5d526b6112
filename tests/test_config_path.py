"""User config folders ($EVALPIPE_CONFIG_PATH): searched before configs/, GPUs merged."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from evalpipe.catalog.configpath import find_file, shipped_dir
from evalpipe.catalog.gpus import load_gpus
from evalpipe.catalog.preset import load_preset, preset_names
from evalpipe.cli import main
from evalpipe.core.errors import ConfigError
from evalpipe.tasks import load_tasks, task_names

ROOT = Path(__file__).resolve().parent.parent


def user_folder(tmp_path: Path, name: str = "mine") -> Path:
    """A user folder laid out like configs/: a preset, a shadowing preset, a GPU, a task."""
    root = tmp_path / name
    for sub in ("presets", "clusters", "tasks"):
        (root / sub).mkdir(parents=True)
    tiny = yaml.safe_load((ROOT / "configs" / "presets" / "tiny_random.yaml").read_text())
    (root / "presets" / "my_model.yaml").write_text(yaml.safe_dump({**tiny, "model": "me/m"}))
    shadow = {**tiny, "description": "my own tiny_random"}
    (root / "presets" / "tiny_random.yaml").write_text(yaml.safe_dump(shadow))
    (root / "gpus.yaml").write_text(
        "x9-12gb: {memory_gib: 12, bandwidth_gbs: 500, fp8: false}\n"
        "a100-40gb: {memory_gib: 39.5, bandwidth_gbs: 1555, fp8: false}\n"
    )
    task = {
        "category": "math",
        "source": {"uri": "generated:arithmetic", "size": 3},
        "prompt": {"template": "{{ question }}"},
        "scorer": {"kind": "math"},
    }
    (root / "tasks" / "my_sums.yaml").write_text(yaml.safe_dump(task))
    return root


def test_shipped_folders_are_the_checkouts_top_level_ones() -> None:
    assert shipped_dir("configs") == ROOT / "configs"
    assert shipped_dir("slurm_templates") == ROOT / "slurm_templates"


def test_user_folders_come_first_and_add_to_the_shipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = user_folder(tmp_path)
    monkeypatch.setenv("EVALPIPE_CONFIG_PATH", f"{mine}{os.pathsep}{tmp_path / 'mine'}")
    names = preset_names()
    assert "my_model" in names and "falcon_40b" in names and names.count("tiny_random") == 1
    assert load_preset("my_model").model == "me/m"
    assert load_preset("tiny_random").description == "my own tiny_random"
    gpus = load_gpus()
    assert gpus["x9-12gb"].memory_gib == 12  # added
    assert gpus["a100-40gb"].memory_gib == 39.5  # replaced whole
    assert gpus["a100-40gb"].device_name == ""
    assert gpus["h100-80gb"].memory_gib == 79.65  # shipped, untouched
    assert "my_sums" in task_names() and "gsm8k" in task_names()
    (task,) = load_tasks(tasks=["my_sums"])
    assert task.path == mine / "tasks" / "my_sums.yaml"


def test_the_first_user_folder_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = user_folder(tmp_path, "first"), user_folder(tmp_path, "second")
    (first / "gpus.yaml").write_text("x9-12gb: {memory_gib: 11, bandwidth_gbs: 1, fp8: false}\n")
    monkeypatch.setenv("EVALPIPE_CONFIG_PATH", f"{first}{os.pathsep}{second}")
    assert load_gpus()["x9-12gb"].memory_gib == 11
    assert find_file("presets", "my_model") == first / "presets" / "my_model.yaml"


def test_a_missing_user_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALPIPE_CONFIG_PATH", str(tmp_path / "typo"))
    with pytest.raises(ConfigError, match=r"EVALPIPE_CONFIG_PATH names '.*typo', which is not"):
        preset_names()


def test_config_dir_still_replaces_the_shipped_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = user_folder(tmp_path)
    monkeypatch.setenv("EVALPIPE_CONFIG_DIR", str(mine))
    monkeypatch.delenv("EVALPIPE_CONFIG_PATH", raising=False)
    assert preset_names() == ["my_model", "tiny_random"]
    assert "h100-80gb" not in load_gpus()
    # User folders come before a replaced configs/ folder too.
    other = tmp_path / "other" / "presets"
    other.mkdir(parents=True)
    (other / "my_model.yaml").write_text((mine / "presets" / "tiny_random.yaml").read_text())
    monkeypatch.setenv("EVALPIPE_CONFIG_PATH", str(tmp_path / "other"))
    assert load_preset("my_model").model == "tiny-random-llama"


def test_cli_plans_and_lists_a_user_preset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("EVALPIPE_CONFIG_PATH", str(user_folder(tmp_path)))
    assert main(["presets", "--json"]) == 0
    assert "my_model" in {p["name"] for p in json.loads(capsys.readouterr().out)}
    assert main(["plan", "--preset", "my_model", "--gpu", "x9-12gb"]) == 0
    assert "my_model" in capsys.readouterr().out
