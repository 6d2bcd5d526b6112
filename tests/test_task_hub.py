"""The hub-backed tasks, on small local datasets shaped like the real ones (no network here).

Each fixture mirrors its dataset's columns and configurations as published on the Hugging Face
hub (checked against the dataset cards): ARC's nested choices with letter or digit labels,
MMLU's integer answers and dev split, BBH's inline "(A)" options, GSM8K's "#### N" solutions,
MATH-500's LaTeX answers, MBPP's assert lists.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalpipe.tasks import load_task
from evalpipe.tasks.config import SourceConfig
from evalpipe.tasks.configured import ConfiguredTask

Rows = list[dict[str, Any]]
BBH_CONFIGS = load_task("bbh").config.subsets.values  # type: ignore[union-attr]


def _bbh(config: str) -> Rows:
    question = (
        f"[{config}] Today is 9/7/2021. What is the date one week ago?\n"
        "Options:\n(A) 08/31/2021\n(B) 09/14/2021\n(C) 08/29/2021"
    )
    return [{"input": question, "target": "(A)"}, {"input": question, "target": "(C)"}]


# dataset → {(config, split): rows}
HUB: dict[str, dict[tuple[str | None, str], Rows]] = {
    "allenai/ai2_arc": {
        ("ARC-Challenge", "test"): [
            {
                "id": "Mercury_7175875",
                "question": "Which gas do plants take in from the air?",
                "choices": {
                    "text": ["oxygen", "carbon dioxide", "helium", "neon"],
                    "label": ["A", "B", "C", "D"],
                },
                "answerKey": "B",
            },
            {
                "id": "NYSEDREGENTS_2015_8_21",
                "question": "What shape is the Earth's orbit?",
                "choices": {
                    "text": ["ellipse", "square", "line", "triangle"],
                    "label": ["1", "2", "3", "4"],
                },
                "answerKey": "1",
            },
        ]
    },
    "cais/mmlu": {
        ("all", "test"): [
            {
                "question": "2 + 2 = ?",
                "subject": "elementary_mathematics",
                "choices": ["3", "4", "5", "6"],
                "answer": 1,
            },
            {
                "question": "Who wrote Hamlet?",
                "subject": "world_literature",
                "choices": ["Marlowe", "Jonson", "Shakespeare", "Kyd"],
                "answer": 2,
            },
        ],
        ("all", "dev"): [
            {
                "question": "1 + 1 = ?",
                "subject": "elementary_mathematics",
                "choices": ["2", "3", "4", "5"],
                "answer": 0,
            },
            {
                "question": "Who wrote Faust?",
                "subject": "world_literature",
                "choices": ["Goethe", "Schiller", "Heine", "Mann"],
                "answer": 0,
            },
        ],
    },
    "lukaemon/bbh": {(config, "test"): _bbh(config) for config in BBH_CONFIGS},
    "openai/gsm8k": {
        ("main", "test"): [
            {
                "question": "Tom has 3 apples and buys 1,000 more. How many now?",
                "answer": "3 + 1000 = <<3+1000=1003>>1003\n#### 1,003",
            },
        ],
        ("main", "train"): [
            {
                "question": "Ann has 2 pens and buys 3. How many?",
                "answer": "2 + 3 = <<2+3=5>>5\n#### 5",
            },
        ],
    },
    "HuggingFaceH4/MATH-500": {
        (None, "test"): [
            {
                "problem": "Simplify $\\frac{2}{4}$.",
                "solution": "It is $\\boxed{\\frac12}$.",
                "answer": "\\frac{1}{2}",
                "subject": "Prealgebra",
                "level": 1,
                "unique_id": "test/prealgebra/1.json",
            },
        ]
    },
    "google-research-datasets/mbpp": {
        ("full", "test"): [
            {
                "task_id": 11,
                "text": "Write a function to add two numbers.",
                "code": "def add(a, b):\n    return a + b",
                "test_list": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
                "test_setup_code": "",
                "challenge_test_list": [],
            },
        ]
    },
}
TASK_DATASET = {
    "arc_challenge": "allenai/ai2_arc",
    "mmlu": "cais/mmlu",
    "bbh": "lukaemon/bbh",
    "gsm8k": "openai/gsm8k",
    "math500": "HuggingFaceH4/MATH-500",
    "mbpp": "google-research-datasets/mbpp",
}


def _write_parquet(path: Path, rows: Rows) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding each dataset as a local hub-style repository (README + parquet)."""
    root = tmp_path_factory.mktemp("hub")
    for dataset, parts in HUB.items():
        repo = root / dataset
        configs: dict[str, list[str]] = {}
        for (config, split), rows in parts.items():
            name = config or "default"
            _write_parquet(repo / name / f"{split}-00000-of-00001.parquet", rows)
            configs.setdefault(name, []).append(f"  - split: {split}\n    path: {name}/{split}-*")
        card = "".join(
            f"- config_name: {name}\n  data_files:\n" + "\n".join(files) + "\n"
            for name, files in configs.items()
        )
        (repo / "README.md").write_text(f"---\nconfigs:\n{card}---\n", encoding="utf-8")
    return root


def _as_parquet(name: str, tmp_path: Path) -> ConfiguredTask:
    """The shipped task with its source swapped for parquet files of the fixture rows."""
    task = load_task(name)
    ((config, _), *_) = HUB[TASK_DATASET[name]]
    for (cfg, split), rows in HUB[TASK_DATASET[name]].items():
        if cfg == config:
            _write_parquet(tmp_path / f"{split}.parquet", rows)
    config_ = dataclasses.replace(
        task.config, source=SourceConfig(uri="parquet:{split}.parquet", split="test")
    )
    return ConfiguredTask(config_, path=tmp_path / f"{name}.yaml")


def _score(task: ConfiguredTask, completions: list[str]) -> list[dict[str, float]]:
    samples = task.samples()
    return [task.score(s, [c]).scores for s, c in zip(samples, completions, strict=True)]


def test_arc_maps_nested_choices_and_digit_labels(tmp_path: Path) -> None:
    task = _as_parquet("arc_challenge", tmp_path)
    first, second = task.samples()
    assert first.id == "Mercury_7175875"
    assert "B. carbon dioxide" in str(first.prompt)
    assert first.target == {
        "answer": "B",
        "choices": ["oxygen", "carbon dioxide", "helium", "neon"],
    }
    assert second.target["answer"] == "A"  # label "1" is the first option
    assert _score(task, ["The answer is (B).", "B"]) == [{"accuracy": 1.0}, {"accuracy": 0.0}]


def test_mmlu_takes_integer_answers_and_same_subject_examples(tmp_path: Path) -> None:
    task = _as_parquet("mmlu", tmp_path)
    maths, literature = task.samples()
    assert maths.id == "elementary_mathematics/0"
    assert maths.meta == {"subset": "elementary_mathematics"}
    assert maths.target["answer"] == "B"
    prompt = str(maths.prompt)
    assert prompt.startswith("The following are multiple choice questions (with answers) about")
    assert "elementary mathematics.\n\n1 + 1 = ?\nA. 2\nB. 3\nC. 4\nD. 5\nAnswer: A\n\n" in prompt
    assert prompt.endswith("2 + 2 = ?\nA. 3\nB. 4\nC. 5\nD. 6\nAnswer:")
    assert "Faust" not in prompt and "Faust" in str(literature.prompt)
    # Ranked by log-probability: the letters follow "Answer:" as the worked examples' do.
    assert [o.continuation for o in maths.options] == [" A", " B", " C", " D"]
    assert _score(task, [" B", "C. Shakespeare"]) == [{"accuracy": 1.0}, {"accuracy": 1.0}]


def test_bbh_reads_inline_options_from_the_input(tmp_path: Path) -> None:
    rows = _bbh("date_understanding")
    _write_parquet(tmp_path / "test.parquet", rows)
    task = load_task("bbh")
    config = dataclasses.replace(
        task.config,
        source=SourceConfig(uri="parquet:{split}.parquet"),
        subsets=None,
    )
    task = ConfiguredTask(config, path=tmp_path / "bbh.yaml")
    first, second = task.samples()
    assert first.target == {"answer": "A", "choices": ["08/31/2021", "09/14/2021", "08/29/2021"]}
    assert second.target["answer"] == "C"
    assert _score(task, ["So the answer is (A).", "The answer is (B)."]) == [
        {"accuracy": 1.0},
        {"accuracy": 0.0},
    ]


def test_gsm8k_prompts_with_train_examples_and_reads_hashes(tmp_path: Path) -> None:
    task = _as_parquet("gsm8k", tmp_path)
    (sample,) = task.samples()
    assert sample.id == "0"
    assert str(sample.prompt).startswith("Question: Ann has 2 pens and buys 3. How many?\nAnswer:")
    assert str(sample.prompt).endswith(
        "Question: Tom has 3 apples and buys 1,000 more. How many now?\nAnswer:"
    )
    assert task.sampling.stop == ("Question:", "\n\n\n")
    assert _score(task, [" 3 + 1000 = 1003\n#### 1003"]) == [{"accuracy": 1.0}]
    assert _score(task, [" So he has 1,003 apples."]) == [{"accuracy": 1.0}]
    assert _score(task, [" #### 1002"]) == [{"accuracy": 0.0}]


def test_math500_compares_latex_answers(tmp_path: Path) -> None:
    task = _as_parquet("math500", tmp_path)
    (sample,) = task.samples()
    assert sample.id == "test/prealgebra/1.json"
    assert isinstance(sample.prompt, list) and "\\boxed{}" in sample.prompt[-1]["content"]
    assert _score(task, ["So it is $\\boxed{0.5}$."]) == [{"accuracy": 1.0}]
    assert _score(task, ["So it is $\\boxed{\\frac{1}{3}}$."]) == [{"accuracy": 0.0}]


def test_mbpp_prompt_lists_the_asserts(tmp_path: Path) -> None:
    task = _as_parquet("mbpp", tmp_path)
    (sample,) = task.samples()
    assert sample.id == "11"
    assert "assert add(1, 2) == 3\nassert add(-1, 1) == 0" in str(sample.prompt)
    assert sample.target == {
        "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
        "setup": "",
        "imports": [],
    }


def _cli(args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        "HF_DATASETS_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "evalpipe", "tasks", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_hf_sources_load_through_datasets(hub: Path, tmp_path: Path) -> None:
    """The real `hf:` path: `datasets` resolves ORG/NAME to the local repositories."""
    done = _cli(["show", "bbh", "--limit", "100"], hub, tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    samples = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(samples) == 2 * len(BBH_CONFIGS)
    assert samples[0]["id"] == "date_understanding/0"
    assert {s["meta"]["subset"] for s in samples} == set(BBH_CONFIGS)
    done = _cli(["fetch", "arc_challenge", "mmlu", "gsm8k", "math500", "mbpp"], hub, tmp_path / "c")
    assert done.returncode == 0, done.stderr
    assert "mmlu: 2 samples available" in done.stdout


def test_a_missing_dataset_says_how_to_make_it_available(tmp_path: Path) -> None:
    done = _cli(["show", "gsm8k"], tmp_path, tmp_path / "empty-cache")
    assert done.returncode == 1
    message = done.stderr
    assert "Traceback" not in message
    assert "Task 'gsm8k': dataset hf:openai/gsm8k config 'main' split 'test' is not available" in (
        message
    )
    assert f"HF_DATASETS_CACHE={tmp_path / 'empty-cache'}" in message
    assert "evalpipe tasks fetch gsm8k" in message
    assert "HF_HUB_OFFLINE=1" in message
    assert "parquet:/path/{split}.parquet" in message
