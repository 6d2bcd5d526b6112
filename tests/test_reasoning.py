"""Reasoning kept out of answers: recorded completions of each style replayed through the fake
engine, split by the preset's reasoning parser, and only the final answer scored."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from evalpipe.catalog.preset import REASONING_PARSERS, load_preset
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.reasoning import Split, joined, split
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import SampleRecord, read_samples
from evalpipe.rundir.summary import read_summary
from evalpipe.tasks import load_task, load_tasks
from evalpipe.tasks.reasoning import reasoning_tokens

# Shaped as the models write them (Qwen3-32B with thinking on; DeepSeek-R1, whose template
# opens <think> in the prompt; gpt-oss with special tokens kept and with them skipped). Each
# reasoning mentions a wrong number last, which a reasoning-blind extractor would take.
QUESTION = "Fay had 13 marbles and gave 3 of them to Ivo."
COMPLETIONS = {
    "qwen3": "<think>\n13 - 3 = 10, not 16 or 13.\n</think>\n\nThe answer is 10.",
    "deepseek_r1": "13 - 3 = 10; check 7.\n</think>\n\nThe answer is 10.",
    "gpt_oss": "<|channel|>analysis<|message|>13 - 3 = 10, not 7.<|end|><|start|>assistant"
    "<|channel|>final<|message|>The answer is 10.<|return|>",
    "gpt_oss_plain": "analysis13 - 3 = 10, not 7.assistantfinalThe answer is 10.",
}
# Cut off by max_tokens inside the reasoning; the last number there is the right answer,
# which must not count.
CUT = {
    "qwen3": "<think>\nFay has 13 and gives 3 away so she has " + "hmm " * 200 + "10",
    "deepseek_r1": "Fay has 13 and gives 3 away so she has " + "hmm " * 200 + "10",
    "gpt_oss": "<|channel|>analysis<|message|>Fay has 13, gives 3: " + "hmm " * 200 + "10",
}


def _replay(parser: str, completion: str):
    preset = load_preset("tiny_random")
    task = load_task("arithmetic", reasoning_parser=parser.removesuffix("_plain"))
    (sample,) = [s for s in task.samples(limit=40) if QUESTION in str(s.prompt)]
    engine = FakeEngine(preset, EngineSettings(), script={QUESTION: completion}, delay_s=0)
    (generation,) = engine.generate([sample.prompt], task.sampling)
    return task, sample, generation, task.score(sample, generation.texts)


@pytest.mark.parametrize("style", sorted(COMPLETIONS))
def test_only_the_final_answer_is_scored_and_the_reasoning_is_kept(style: str) -> None:
    *_, scored = _replay(style, COMPLETIONS[style])
    assert scored.extracted == ("10",) and scored.scores == {"accuracy": 1.0}
    assert scored.cut_off == (False,)
    (reasoning,) = scored.reasoning
    assert reasoning is not None and reasoning.startswith("13 - 3 = 10")
    assert "answer" not in reasoning.lower() and "<" not in reasoning


@pytest.mark.parametrize("style", sorted(CUT))
def test_a_completion_cut_off_in_its_reasoning_is_unanswered(style: str) -> None:
    task, _, generation, scored = _replay(style, CUT[style])
    # The fake engine truncates at the task's max_tokens (128 words): the answer never came.
    assert generation.completion_tokens[0] >= task.sampling.max_tokens
    assert not generation.texts[0].endswith("10")
    assert scored.extracted == (None,) and scored.scores == {"accuracy": 0.0}
    assert scored.cut_off == (True,) and scored.reasoning[0]


def test_without_a_parser_the_reasoning_leaks_into_the_answer() -> None:
    # The defect the parser removes: the cut-off reasoning's last number is taken as the answer.
    task = load_task("arithmetic")
    (sample,) = [s for s in task.samples(limit=40) if QUESTION in str(s.prompt)]
    assert task.score(sample, ["<think>she has 10"]).scores == {"accuracy": 1.0}


def test_the_run_records_reasoning_apart_and_its_summary_counts_it(tmp_path: Path) -> None:
    preset = load_preset("tiny_random")
    task = load_task("arithmetic", reasoning_parser="qwen3")
    other = next(s for s in task.samples(limit=40) if QUESTION not in str(s.prompt))
    asked = str(other.prompt).splitlines()[0]  # its question, which no other prompt holds
    script = {QUESTION: COMPLETIONS["qwen3"], asked: CUT["qwen3"]}
    engine = FakeEngine(preset, EngineSettings(), script=script, delay_s=0)
    run_evaluation(
        lambda settings: engine, [task], tmp_path, preset=preset,
        options=RunOptions(backend="fake", limit=40),
    )  # fmt: skip
    records = {r.sample_id: r for r in read_samples(RunDir(tmp_path).samples).records}
    answered = next(r for r in records.values() if QUESTION in str(r.prompt))
    assert answered.reasoning == ("13 - 3 = 10, not 16 or 13.",) and answered.cut_off == (False,)
    assert answered.extracted == ("10",) and answered.completions == (COMPLETIONS["qwen3"],)
    cut = records[other.id]
    assert cut.cut_off == (True,) and cut.extracted == (None,)
    (spent,), (total,) = cut.reasoning_tokens, cut.completion_tokens
    assert 0.95 * total < spent <= total  # nearly all of it was reasoning ("<think>" aside)
    # Thinking off (no markers, the fake engine's other answers): all answer, nothing cut.
    plain = [r for r in records.values() if r.reasoning == (None,)]
    assert len(plain) == 38 and all(r.reasoning_tokens == (0,) for r in plain)
    line = json.loads(json.dumps(cut.to_dict()))
    old = {k: v for k, v in line.items() if k not in ("reasoning", "reasoning_tokens", "cut_off")}
    assert SampleRecord.from_dict(old).reasoning == ()  # files written before still load
    summary = read_summary(RunDir(tmp_path))
    assert summary is not None
    counted = summary.tasks["arithmetic"]
    assert counted.cut_off_in_reasoning == 1
    assert counted.reasoning_tokens == sum(sum(r.reasoning_tokens) for r in records.values())


def test_split_rules() -> None:
    assert split("The answer is 4.", "qwen3").reasoning is None  # thinking off: all answer
    assert split("The answer is 4.", "deepseek_r1").cut_off  # <think> was in the prompt
    assert split("plain text", "gpt_oss").answer == "plain text"
    assert split("<think>x</think>y", None).answer == "<think>x</think>y"
    assert reasoning_tokens(10, "abcd", "ab") == 5 and reasoning_tokens(10, "ab", None) == 0


@pytest.mark.parametrize("parser", REASONING_PARSERS)
def test_reasoning_a_server_kept_apart_is_joined_back_and_split_alike(parser: str) -> None:
    # vLLM serving with --reasoning-parser returns the reasoning in its own field; the endpoint
    # engine joins it back (records/reasoning.joined) and the preset's parser splits it again.
    whole = split(joined("13 - 3 = 10, not 7.", "The answer is 10.", parser), parser)
    assert whole == Split(
        reasoning="13 - 3 = 10, not 7.", answer="The answer is 10.", cut_off=False
    )
    cut = split(joined("13 - 3 is", None, parser), parser)  # stopped inside its reasoning
    assert (cut.reasoning, cut.answer, cut.cut_off) == ("13 - 3 is", "", True)
    assert joined("13 - 3 is", "10", None) == "10"  # no parser: the server's answer alone


def test_presets_and_loader_carry_the_parser() -> None:
    assert load_preset("qwen3_32b").reasoning_parser == "qwen3"
    assert load_preset("gpt_oss_20b").reasoning_parser == "gpt_oss"
    (task,) = load_tasks(tasks=["ordering"], mc_method="generate", reasoning_parser="qwen3")
    assert task.reasoning_parser == "qwen3"
    with pytest.raises(ValueError, match="reasoning_parser 'o1' is not one of"):
        dataclasses.replace(load_preset("tiny_random"), reasoning_parser="o1")


def test_report_shows_cut_offs_inside_the_reasoning_per_task(tmp_path, capsys) -> None:
    """A run whose completions carry reasoning (as the runner records them for a reasoning
    preset): `evalpipe report` counts, per task, those cut off inside it."""
    from synthetic_runs import append_samples

    from evalpipe.cli import main
    from evalpipe.rundir.layout import RunDir
    from evalpipe.rundir.samplelog import read_samples

    out = tmp_path / "run"
    argv = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "arithmetic",
            "--limit", "4", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    log = RunDir(out).samples
    records = read_samples(log).records
    log.unlink()
    append_samples(
        log,
        [
            dataclasses.replace(r, reasoning=("...",), cut_off=(i < 3,), reasoning_tokens=(9,))
            for i, r in enumerate(records)
        ],
    )
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "Cut off inside the reasoning" in shown
    assert "| arithmetic | 3/4 | 75% |" in shown
