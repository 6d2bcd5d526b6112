"""The near-tie rule for comparing model text between runs (tests/neartie.py), on made-up
tokens: equal up to the first differing token, a near-tie there, and the runner-up taken."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from neartie import Recorder, assert_near_tie_equal, assert_records_near_tie_equal, tally

from evalpipe.catalog.preset import load_preset
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.completion import Generation, TokenStep
from evalpipe.records.sampling import SamplingSettings

# A made-up vocabulary: id → text (0 ends the sequence and decodes to nothing).
PIECES = {0: "", 1: " 12", 2: " 7", 3: " 9", 4: " +", 5: "\n", 6: "\xe2", 7: "\x82\xac"}


def decode(ids: Sequence[int]) -> str:
    """Byte-level decoding: an incomplete character decodes to U+FFFD, as tokenizers do."""
    data = "".join(PIECES[i] for i in ids).encode("latin-1")
    return data.decode("utf-8", errors="replace")


def step(token: int, runner_up: int, gap: float) -> TokenStep:
    return TokenStep(token=token, logprob=-1.0, top=((token, -1.0), (runner_up, -1.0 - gap)))


def reference(*steps: TokenStep) -> Generation:
    text = decode([s.token for s in steps]).rstrip("\ufffd")  # vLLM holds back a partial one
    return Generation(
        texts=(text,), prompt_tokens=3, completion_tokens=(len(steps),), steps=(steps,)
    )


# " 12 + 7" then the end; at " 7" the runner-up " 9" is 0.004 nats behind, at " +" " 7" is 2 nats.
REF = reference(step(1, 2, 0.5), step(4, 2, 2.0), step(2, 3, 0.004), step(0, 5, 0.3))


def test_equal_texts_and_a_near_tie_taken_the_other_way_are_equal() -> None:
    assert_near_tie_equal(REF, [" 12 + 7"], decode)
    assert_near_tie_equal(REF, [" 12 + 9 + 9"], decode)  # anything may follow the near-tie


def test_a_clear_divergence_fails_with_where_and_how_far_apart() -> None:
    with pytest.raises(AssertionError) as err:
        assert_near_tie_equal(REF, [" 12 7 +"], decode, what="arithmetic/3")
    message = str(err.value)
    assert "arithmetic/3: the completions part at token 1 (after ' 12')" in message
    assert "2.000 nats apart (a near-tie is under 0.1)" in message


def test_a_near_tie_where_the_other_took_neither_likeliest_token_fails() -> None:
    with pytest.raises(AssertionError, match="did not take the reference's runner-up"):
        assert_near_tie_equal(REF, [" 12 +\n"], decode)


def test_the_reference_ending_where_the_other_goes_on_is_judged_at_its_last_token() -> None:
    # The end of sequence was 0.3 nats likelier than "\n": not a near-tie.
    with pytest.raises(AssertionError, match=r"at token 3 .* 0\.300 nats apart"):
        assert_near_tie_equal(REF, [" 12 + 7\n"], decode)
    assert_near_tie_equal(REF, [" 12 + 7\n"], decode, epsilon=0.5)
    # The other ending early, at a near-tie whose runner-up is the end of sequence.
    ends = reference(step(1, 2, 0.5), step(4, 0, 0.01), step(2, 3, 0.5))
    assert_near_tie_equal(ends, [" 12"], decode)


def test_a_character_split_across_tokens_is_compared_whole() -> None:
    # "€" is two tokens; the texts part at the token after it, a near-tie.
    euro = reference(step(1, 2, 0.5), step(6, 2, 0.5), step(7, 2, 0.5), step(2, 3, 0.01))
    assert euro.texts == (" 12€ 7",)
    assert_near_tie_equal(euro, [" 12€ 9"], decode)
    with pytest.raises(AssertionError, match=r"at token 1 \(after ' 12'\)"):
        assert_near_tie_equal(euro, [" 12 7"], decode)


def test_a_sampled_reference_or_one_without_logprobs_is_refused() -> None:
    sampled = reference(
        step(1, 2, 0.5), TokenStep(token=2, logprob=-3.0, top=((3, -1.0), (4, -2.0)))
    )
    with pytest.raises(AssertionError, match="did not take its likeliest token"):
        assert_near_tie_equal(sampled, [" 12 +"], decode)
    bare = Generation(texts=(" 12",), prompt_tokens=3, completion_tokens=(1,))
    with pytest.raises(AssertionError, match="recorded without top_logprobs"):
        assert_near_tie_equal(bare, [" 7"], decode)


def test_run_records_compare_their_completions_by_the_rule_and_the_rest_exactly() -> None:
    def record(sample: str, completion: str, score: float) -> dict:
        return {
            **{"task": "t", "category": "math", "sample_id": sample, "prompt": f"q{sample}"},
            **{"prompt_tokens": 3, "completions": [completion], "scores": {"acc": score}},
        }

    want = {"a": record("a", " 12 + 7", 1.0), "b": record("b", " 12", 0.0)}
    generations = {'"qa"': REF}
    near = {"a": record("a", " 12 + 9", 0.0), "b": record("b", " 12", 0.0)}
    assert assert_records_near_tie_equal(near, want, generations, decode) is False
    assert assert_records_near_tie_equal(want, want, generations, decode) is True
    with pytest.raises(AssertionError):  # same completion, another score: a real difference
        assert_records_near_tie_equal({**want, "b": record("b", " 12", 1.0)}, want, {}, decode)
    with pytest.raises(AssertionError):  # a sample missing
        assert_records_near_tie_equal({"a": want["a"]}, want, generations, decode)
    with pytest.raises(AssertionError, match=r"2\.000 nats apart"):
        far = {**want, "a": record("a", " 12 7", 1.0)}
        assert_records_near_tie_equal(far, want, generations, decode)


def test_the_recorder_asks_for_top_2_and_keeps_each_generation_by_prompt() -> None:
    engine = FakeEngine(load_preset("tiny_random"), EngineSettings())
    recorder = Recorder(engine)
    [plain] = engine.generate(["What is 2 + 2?"], SamplingSettings())
    [recorded] = recorder.generate(["What is 2 + 2?"], SamplingSettings())
    assert recorded.texts == plain.texts and plain.steps == ()
    assert recorder.generations == {'"What is 2 + 2?"': recorded}
    assert [len(s.top) for s in recorded.steps[0]] == [2] * recorded.completion_tokens[0]
    recorder.close()
    assert not engine.closed  # the runner may not close a shared engine


def test_a_tally_counts_equal_texts_near_ties_and_divergences_with_the_reason() -> None:
    """What a benchmark reports where a test would assert: 174 identical of 200 is no failure
    when the rest part at near-ties (`6 * 3` against `6 x 3`)."""
    found = tally(
        [("a", REF, [" 12 + 7"]), ("b", REF, [" 12 + 9 + 9"]), ("c", REF, [" 12 7 +"])], decode
    )
    assert (found.equal, found.tied, len(found.beyond)) == (1, 1, 1)
    assert not found.agrees
    assert "c: the completions part at token 1 (after ' 12')" in found.beyond[0]
    assert found.lines()[0] == "1 equal, 1 part at a near-tie, 1 part elsewhere"
    assert tally([("a", REF, [" 12 + 9"])], decode).agrees


def test_the_benches_tally_each_side_by_sample_against_the_reference_run() -> None:
    """bench/benchlib.near_ties, which overhead_vllm and peer_lm_eval use, on made-up runs."""
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from benchlib import near_ties
    from neartie import prompt_key

    prompts = {"s0": [{"role": "user", "content": "12 + 7?"}], "s1": "12 + 8?"}
    other = reference(step(1, 2, 0.5), step(0, 5, 0.3))  # " 12", then the end
    reference_run = SimpleNamespace(
        generations={prompt_key(prompts["s0"]): REF, prompt_key(prompts["s1"]): other},
        decode=decode,
    )
    sides = {
        "raw": {"s0": [" 12 + 9"], "s1": [" 12"]},
        "evalpipe": {"s0": [" 12 + 7"], "s1": [" 7"]},
    }
    found = near_ties(prompts, sides, reference_run)
    assert (found["raw"].equal, found["raw"].tied, found["raw"].agrees) == (1, 1, True)
    assert (found["evalpipe"].equal, len(found["evalpipe"].beyond)) == (1, 1)
    assert found["evalpipe"].beyond[0].startswith("s1: the completions part at token 0")
