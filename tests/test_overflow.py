"""Prompts longer than the context, and other per-request refusals: each fails its sample (recorded
with its reason, scored 0, counted), never the run; resume does not ask it again. lm-eval's own
prompts are cut from the left instead, by lm-eval's rule."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from endpoint_support import FaultServer
from judge_support import mt_bench_data
from lmeval_support import use_lm_eval
from runner_support import ChatTask, ToyTask, preset

from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.engine.contextfit import lmeval_generation_ids, lmeval_scoring_pair, refusal_of
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.refusal import Refusal, overflow
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.rundir.samplelog import SampleRecord
from evalpipe.rundir.summary import Summary
from evalpipe.rundir.summarytext import format_summary

TASK = Path(__file__).parent / "fixtures" / "overflow" / "long_question.yaml"


def rows(path: Path) -> dict[str, dict]:
    found = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(found) == len({r["sample_id"] for r in found})  # never duplicated
    return {r["sample_id"]: r for r in found}


def test_the_prompt_and_one_generated_token_must_fit() -> None:
    assert overflow(1023, 1024) is None
    refusal = overflow(1024, 1024)
    assert refusal is not None and refusal.reason == "context_overflow"
    assert (refusal.prompt_tokens, refusal.limit) == (1024, 1024)
    assert Refusal.from_dict(refusal.to_dict()) == refusal
    with pytest.raises(ValueError, match="'too_long' is not one of context_overflow, refused"):
        Refusal(reason="too_long")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("message", "tokens", "limit"),
    [
        (
            "This model's maximum context length is 1024 tokens. However, your prompt contains "
            "15071 input tokens, which exceeds this limit even without any output tokens.",
            15071,
            1024,
        ),
        (
            "The decoder prompt (length 1500) is longer than the maximum model length of 1024.",
            1500,
            1024,
        ),
        (
            "This model's maximum context length is 2048 tokens. However, you requested 2100 "
            "tokens (2000 in the messages, 100 in the completion).",
            2000,
            2048,
        ),
    ],
)
def test_engines_context_refusals_are_read_with_their_counts(
    message: str, tokens: int, limit: int
) -> None:
    refusal = refusal_of(message)
    assert (refusal.reason, refusal.prompt_tokens, refusal.limit) == (
        "context_overflow",
        tokens,
        limit,
    )
    assert refusal.detail == message
    chars = refusal_of(
        "This model's maximum context length is 1024 tokens. However, your prompt contains "
        "15865 characters (more than 12288 characters, which is the upper bound for 1024 "
        "input tokens)."
    )
    assert (chars.reason, chars.prompt_tokens, chars.limit) == ("context_overflow", None, 1024)
    other = refusal_of("HTTP 400: temperature must be non-negative")
    assert (other.reason, other.prompt_tokens, other.limit) == ("refused", None, None)


def test_lm_eval_prompts_are_cut_from_the_left_as_lm_eval_cuts_them() -> None:
    """Generation: lm-eval's vLLM backend calls models.utils.maybe_truncate (side left, max_gen_toks
    kept); it is run here on the same inputs. Log-likelihood: its _loglikelihood_tokens keeps the
    last max_length - 1 tokens (tests/test_overflow_vllm.py runs that method itself)."""
    use_lm_eval()
    from lm_eval.models.utils import maybe_truncate

    rng = random.Random(0)
    for _ in range(500):
        ids = [rng.randrange(512) for _ in range(rng.randrange(1, 300))]
        limit, max_tokens = rng.randrange(16, 256), rng.randrange(1, 64)
        expected, kept = maybe_truncate(ids, max_tokens, limit, verbose=False)
        assert lmeval_generation_ids(ids, limit, max_tokens) == expected and kept == max_tokens
    ids = list(range(100))
    assert lmeval_scoring_pair(ids, 95, 50) == (ids[-49:], 44)  # 51 context tokens cut
    assert lmeval_scoring_pair(ids, 95, 200) == (ids, 95)  # fits: unchanged


def test_a_long_prompt_is_recorded_scored_0_counted_and_not_asked_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fake engine counts words as tokens: the 3,000-word question outgrows tiny_random's
    1,024-token context."""
    out = tmp_path / "run"
    assert main(["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", str(TASK),
                 "--out", str(out)]) == 0  # fmt: skip
    found = rows(out / "samples.jsonl")
    long = found["1"]
    assert long["refusal"]["reason"] == "context_overflow" and long["refusal"]["limit"] == 1024
    assert long["refusal"]["prompt_tokens"] > 3000 and long["scores"] == {"accuracy": 0.0}
    assert long["completions"] == [""] and long["extracted"] == [None]
    assert "refusal" not in found["0"] and "refusal" not in found["2"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tasks"]["long_question"]["refused"] == {"context_overflow": 1}
    assert summary["tasks"]["long_question"]["metrics"]["accuracy"]["n"] == 3  # counted as 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    report = capsys.readouterr().out
    assert "## Refused by the engine" in report
    assert "| long_question | context_overflow | 1/3 |" in report
    from evalpipe.rundir.summary import Summary
    from evalpipe.rundir.tracked import tracked_metrics

    tracked = tracked_metrics(Summary.from_dict(summary))
    assert tracked["task/long_question/refused/context_overflow"] == 1.0

    # A resume owes nothing: the refused sample is finished.
    engine = FakeEngine(preset(), EngineSettings())
    from evalpipe.tasks import load_tasks

    tasks = load_tasks(tasks=[str(TASK)])
    result = run_evaluation(
        lambda settings: engine, tasks, out, preset=preset(), options=RunOptions(backend="fake")
    )
    assert result.status == "complete" and engine.served == []
    assert rows(out / "samples.jsonl") == found


def test_a_conversation_that_outgrows_the_context_ends_at_that_turn(tmp_path: Path) -> None:
    """The second turn carries the first answer and a follow-up longer than the context."""

    class LongFollowUp(ChatTask):
        def samples(self, limit: int | None = None):
            import dataclasses

            first, second = super().samples(limit)[:2]
            long = ("word " * 1100).strip()
            return [first, dataclasses.replace(second, turns=(long,))]

    task = LongFollowUp(name="chat", category="chat", size=2)
    engine = FakeEngine(preset(), EngineSettings())
    out = tmp_path / "run"
    result = run_evaluation(
        lambda settings: engine, [task], out, preset=preset(), options=RunOptions(backend="fake")
    )
    assert result.status == "complete"
    found = rows(out / "samples.jsonl")
    assert "refusal" not in found["chat-0"] and len(found["chat-0"]["turns"]) == 2
    refused = found["chat-1"]
    assert refused["refusal"]["reason"] == "context_overflow"
    assert len(refused["turns"]) == 1 and refused["turns"][0]  # the answered turn is kept
    assert refused["refusal"]["prompt_tokens"] > 1100


def test_a_refusal_before_anything_was_answered_fails_the_run(tmp_path: Path) -> None:
    """Every request refused for the same setting is the run's problem, not one sample's."""

    class Refusing(FakeEngine):
        def _answer(self, request):
            from evalpipe.records.completion import Completion

            return Completion(id=request.id, refusal=Refusal(reason="refused", detail="no top_k"))

    task = ToyTask(name="alpha", category="math", size=3)
    with pytest.raises(Exception, match=r"refused the run's first request\(s\) \(no top_k\)"):
        run_evaluation(
            lambda settings: Refusing(preset(), EngineSettings()),
            [task],
            tmp_path / "run",
            preset=preset(),
            options=RunOptions(backend="fake"),
        )


def test_a_servers_400_context_refusal_fails_that_sample_only(tmp_path: Path) -> None:
    data = yaml.safe_load(Path("configs/presets/tiny_random.yaml").read_text())
    data["endpoint"] = {"timeout_s": 5.0, "backoff_s": 0.05, "max_retries": 1}
    endpoint_preset = tmp_path / "tiny_endpoint.yaml"
    endpoint_preset.write_text(yaml.safe_dump(data))
    out = tmp_path / "run"
    with FaultServer(context_words=1024) as server:
        status = main([
            "run", "--preset", str(endpoint_preset), "--backend", "openai",
            "--base-url", server.base_url, "--model", server.model, "--tasks", str(TASK),
            "--out", str(out), "--concurrency", "1",
        ])  # fmt: skip
        assert server.outcomes["context"] == 1  # asked once: a 400 is not retried
    assert status == exitcodes.OK
    found = rows(out / "samples.jsonl")
    refusal = found["1"]["refusal"]
    assert refusal["reason"] == "context_overflow" and refusal["limit"] == 1024
    assert refusal["prompt_tokens"] > 3000 and refusal["detail"].startswith("HTTP 400: ")
    assert all("refusal" not in found[i] and found[i]["completions"][0] for i in ("0", "2"))


def test_the_summary_and_its_table_show_the_refusals() -> None:
    record = SampleRecord(
        task="t", category="c", sample_id="1", prompt="p", completions=("",), extracted=(None,),
        scores={"accuracy": 0.0}, prompt_tokens=2000, completion_tokens=(0,),
        refusal=Refusal(reason="context_overflow", prompt_tokens=2000, limit=1024),
    )  # fmt: skip
    assert SampleRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    from evalpipe.rundir.manifest import PlannedTask
    from evalpipe.rundir.summary import summarize

    summary = summarize(
        [record], run_id="r", preset="p", planned=[PlannedTask(name="t", category="c", n_total=1)],
        timings={}, wall_s=1.0, devices=[], gpus=0, oom_fallback=[],
    )  # fmt: skip
    again = Summary.from_dict(json.loads(json.dumps(summary.to_dict())))
    assert again.tasks["t"].refused == {"context_overflow": 1}
    assert "refused by the engine (scored 0): t 1 context_overflow" in format_summary(again)


def test_mt_bench_turns_and_judgments_that_outgrow_their_contexts_are_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """MT-Bench from a data folder, answered on tiny_random (its context raised to 2,048 tokens
    for MT-Bench's budgets) and judged by a preset of 200 tokens, both on the fake engine (a
    word is a token): question 2's judge prompts outgrow the judge, question 3's second turn
    outgrows the model; the run completes."""
    data = tmp_path / "llm_judge"
    questions = [
        {"question_id": 1, "category": "writing", "turns": ["Write a haiku.", "Shorter."]},
        {"question_id": 2, "category": "writing", "turns": ["Describe it. " * 150, "Again."]},
        {"question_id": 3, "category": "writing", "turns": ["Name a colour.", "More. " * 2100]},
        {"question_id": 4, "category": "writing", "turns": ["Long. " * 2100, "And?"]},
    ]
    mt_bench_data(data, questions, references=[])
    judge = yaml.safe_load(Path("configs/presets/tiny_random.yaml").read_text())
    judge["max_model_len"] = 200
    (tmp_path / "short_judge.yaml").write_text(yaml.safe_dump(judge))
    out = tmp_path / "run"
    assert main([
        "run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "mt_bench",
        "--judge-data", str(data), "--judge", str(tmp_path / "short_judge.yaml"),
        "--out", str(out),
    ]) == 0  # fmt: skip
    answers = rows(out / "samples.jsonl")
    assert "refusal" not in answers["1"] and "refusal" not in answers["2"]
    assert answers["3"]["refusal"]["reason"] == "context_overflow"
    assert answers["3"]["refusal"]["prompt_tokens"] > 2100 and len(answers["3"]["turns"]) == 1
    assert answers["3"]["refusal"]["limit"] == 2048
    assert answers["4"]["refusal"]["reason"] == "context_overflow" and "turns" not in answers["4"]
    (folder,) = sorted((out / "judgments").iterdir())
    judged = rows(folder / "judgments.jsonl")
    # No turn 3@2 to judge, and nothing of question 4, refused at its first turn.
    assert set(judged) == {"1@1", "1@2", "2@1", "2@2", "3@1"}
    for overflowing in ("2@1", "2@2"):
        refusal = judged[overflowing]["refusal"]
        assert refusal["reason"] == "context_overflow" and refusal["limit"] == 200
        assert judged[overflowing]["scores"] == {}  # no verdict
    assert all("refusal" not in judged[k] for k in ("1@1", "1@2", "3@1"))
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["refused"] == {"context_overflow": 2} and summary["parse_failures"] >= 2
    from evalpipe.rundir.judgments import JudgeSummary, format_judge_summary

    printed = format_judge_summary(JudgeSummary.from_dict(summary))
    assert "without a readable score, 2 refused (context_overflow)" in printed
    from evalpipe.rundir.tracked import judge_metrics

    tracked = judge_metrics({folder.name: JudgeSummary.from_dict(summary)})
    assert tracked[f"judge/{folder.name[:8]}/refused/context_overflow"] == 2.0
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    judges = capsys.readouterr().out.split("## Judges", 1)[1]
    assert ", 2 context_overflow |" in judges


def test_check_warns_of_a_task_whose_longest_prompt_cannot_fit(tmp_path: Path) -> None:
    from evalpipe.catalog.clusters import load_cluster
    from evalpipe.jobs import preflight

    def context_findings(task: str) -> list[str]:
        report = preflight.check(preset(), load_cluster("local"), tasks=[task])
        return [f.message for f in report.warnings if f.check == "context"]

    (message,) = context_findings(str(TASK))
    assert message.startswith("task long_question: its longest prompt (sample '1', ")
    assert "in the context of 1,024 tokens, so the run records it as context_overflow" in message
    assert "the model's 2,048 positions cannot hold it" in message
    assert context_findings("arithmetic") == []  # short prompts: nothing to say


def test_plan_estimate_notes_the_prompt_that_cannot_fit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--preset", "tiny_random", "--gpu", "a100-80gb", "--estimate", "--tasks"]
    assert main([*argv, str(TASK)]) == 0
    out = capsys.readouterr().out
    assert "- task long_question: its longest prompt (sample '1', " in out
    assert "context_overflow and scores it 0" in out
    assert main([*argv, "arithmetic"]) == 0
    assert "longest prompt" not in capsys.readouterr().out


def test_an_lm_eval_prompt_is_said_to_be_cut_and_a_fitting_one_is_not_named() -> None:
    from evalpipe.estimate.longprompts import longest_prompt
    from evalpipe.records.prompt import Rendered
    from evalpipe.tasks.base import Sample

    samples = [
        Sample(id="short", prompt=Rendered("a b"), target="a"),
        Sample(id="long", prompt=Rendered("word " * 40), target="a"),
    ]
    words = lambda prompt: len(str(prompt).split())  # noqa: E731
    long = longest_prompt("t", samples, words, 40, ceiling=64, counted=True)
    assert long is not None and (long.sample_id, long.tokens) == ("long", 40)
    assert "it is cut from the left to fit, as lm-eval cuts it" in long.line()
    assert "--max-model-len above 40 fits it (the model has 64 positions)" in long.line()
    assert longest_prompt("t", samples, words, 41, ceiling=64, counted=True) is None


def test_a_refused_multiple_choice_sample_extracts_nothing_and_scores_0(tmp_path: Path) -> None:
    """Options ranked by log-probability: a refused sample picks no option."""
    from evalpipe.tasks import load_tasks

    tasks = load_tasks(tasks=["ordering"], mc_method="logprobs")
    engine = FakeEngine(preset(), EngineSettings(max_model_len=10))  # every prompt is longer
    out = tmp_path / "run"
    result = run_evaluation(
        lambda settings: engine,
        tasks,
        out,
        preset=preset(),
        options=RunOptions(backend="fake", limit=2),
    )
    assert result.status == "complete" and engine.served == []
    for record in rows(out / "samples.jsonl").values():
        assert (
            record["refusal"]["reason"] == "context_overflow" and record["refusal"]["limit"] == 10
        )
        assert record["extracted"] == [None] and "option_logprobs" not in record
        assert record["scores"] and set(record["scores"].values()) == {0.0}


def test_the_python_api_shows_the_refusal(tmp_path: Path) -> None:
    import evalpipe

    result = evalpipe.evaluate(
        preset="tiny_random", tasks=[str(TASK)], out=tmp_path / "run", backend="fake"
    )
    assert result.status == "complete"
    assert result.tasks["long_question"].refused == {"context_overflow": 1}
    refused = {r.sample_id: r.refusal for r in result.samples() if r.refusal is not None}
    assert list(refused) == ["1"] and refused["1"].limit == 1024


def test_the_fake_engine_refuses_by_words_but_answers_lm_evals_prompts_whole() -> None:
    from evalpipe.records.prompt import Rendered
    from evalpipe.records.request import Request
    from evalpipe.records.sampling import SamplingSettings

    engine = FakeEngine(preset(), EngineSettings(max_model_len=5))
    settings = SamplingSettings(max_tokens=4)
    fits, long, rendered = engine.run([
        Request(id="fits", prompt="one two three four", sampling=settings),
        Request(id="long", prompt="one two three four five", sampling=settings),
        Request(id="rendered", prompt=Rendered("one two three four five"), sampling=settings),
    ])  # fmt: skip
    assert fits.refusal is None and rendered.refusal is None and rendered.generation is not None
    assert long.refusal == overflow(5, 5)
