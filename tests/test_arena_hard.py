"""Arena-Hard-Auto: verdicts read as arena-hard-auto reads them, battles weighted as its
show_result.py weighs them, position inconsistency, and the whole benchmark through `evalpipe
run` with an endpoint judge whose scripted verdicts give exact, known scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from endpoint_support import FaultServer
from judge_support import thinking_judge

from evalpipe.cli import main
from evalpipe.core.errors import DatasetError
from evalpipe.run.judgephase import read_baseline
from evalpipe.rundir.judgments import JudgeDir, read_judge_summary
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.tracked import judge_metrics
from evalpipe.tasks.arenahard import arena_hard, read_judge_settings
from evalpipe.tasks.base import Sample
from evalpipe.tasks.pairwise import (
    a_outcomes,
    arena_scores,
    consistency,
    pair_battles,
    read_verdict,
)

DATA = Path(__file__).parent / "fixtures" / "arena_hard"
PATTERNS = (r"\[\[([AB<>=]+)\]\]", r"\[([AB<>=]+)\]")
FAKE = ["run", "--preset", "tiny_random", "--backend", "fake"]


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("My final verdict is tie: [[A=B]]", "A=B"),
        ("[[a>>b]]", "A>>B"),  # read from the upper-cased text
        ("[[A>B]] ... on reflection [[B>A]]", "B>A"),  # the last match
        ("[A>B] then [[B>>A]]", "B>>A"),  # the double brackets are tried first
        ("only [B>A] here", "B>A"),  # the single-bracket pattern
        ("[[A]]", "A"),  # read, but no verdict: a parse failure when scored
        ("[[ A>B ]]", None),
        ("no verdict", None),
        ("", None),
    ],
)
def test_verdicts_read_as_arena_hard_auto_reads_them(text: str, label: str | None) -> None:
    assert read_verdict(text, PATTERNS) == label


def test_battles_weigh_strong_verdicts_three_times() -> None:
    assert a_outcomes("A>>B") == [1.0, 1.0, 1.0] and a_outcomes("B<<A") == [1.0] * 3
    assert a_outcomes("A=B") == [0.5] and a_outcomes("A") is None and a_outcomes(None) is None
    # Game 1 has the baseline as A: its verdict counts from the other side, after game 2's.
    assert pair_battles("B>>A", "A>B") == [1.0, 1.0, 1.0, 1.0]
    assert pair_battles("A>B", "A=B") == [0.5, 0.0]
    assert pair_battles("A>B", None) is None and pair_battles("A", "A>B") is None


def test_position_inconsistency_counts_pairs_whose_orders_disagree() -> None:
    got = consistency(
        [
            ("B>A", "A>B"),  # the model wins both: consistent
            ("A>>B", "B>A"),  # the baseline wins both: consistent
            ("A=B", "A>B"),  # tie, then a win as A: favours the first position
            ("A>B", "A>B"),  # each first answer wins: favours the first position
            ("B>A", "B>>A"),  # each second answer wins: favours the second
            ("A=B", "B=A"),  # ties both: consistent
            (None, "A>B"),  # no verdict in game 1: not counted
        ]
    )
    assert (got.pairs, got.inconsistent, got.favours_first, got.favours_second) == (6, 3, 2, 1)
    assert got.rate == 0.5


def test_scores_with_all_battles_equal_are_exact() -> None:
    scores = arena_scores({"m": [1.0, 1.0, 1.0], "n": [0.5, 0.5]})
    assert scores["m"].score == scores["m"].lower == scores["m"].upper == 1.0
    assert scores["n"].to_dict() == {
        "battles": 2, "win_rate": 0.5, "score": 0.5, "lower": 0.5, "upper": 0.5,
    }  # fmt: skip
    mixed = arena_scores({"m": [0.0, 1.0, 1.0, 0.5]}, seed=3)["m"]
    assert mixed.win_rate == 0.625 and mixed.lower <= mixed.score <= mixed.upper
    assert arena_scores({"m": [0.0, 1.0, 1.0, 0.5]}, seed=3)["m"] == mixed  # seeded: repeatable


def test_the_data_folder_is_read_as_arena_hard_auto_lays_it_out(tmp_path: Path) -> None:
    settings = read_judge_settings(DATA / "utils" / "judge_utils.py")
    assert settings["hard_prompt"]["baseline"] == "base-a"
    assert settings["hard_prompt"]["system_prompt"].startswith("Compare the two answers {and}")
    bench = arena_hard(DATA)
    assert [t.name for t in bench.tasks] == [
        "arena_hard_hard_prompt",
        "arena_hard_creative_writing",
    ]
    assert bench.published == "judge-of-record"
    assert (bench.tasks[0].sampling.max_tokens, bench.tasks[0].sampling.temperature) == (4096, 0)
    grading = bench.gradings["arena_hard_hard_prompt"]
    (h1, *_) = bench.tasks[0].samples()
    first, second = grading.asks(h1, ["mine {x}"])
    assert (first.game, second.game) == (1, 2)
    assert first.prompt[1]["content"] == (
        "Question: H1: sort a list {in place}\nFirst: Baseline answer h1\nSecond: mine {x}"
    )
    assert second.prompt[0]["content"] == settings["hard_prompt"]["system_prompt"]
    assert second.prompt[1]["content"].endswith("First: mine {x}\nSecond: Baseline answer h1")
    with pytest.raises(DatasetError, match="no answer to question 'zz'"):
        grading.asks(Sample(id="zz", prompt="q", target=None), ["a"])
    # Code in the settings file is refused, never run.
    evil = tmp_path / "judge_utils.py"
    evil.write_text("JUDGE_SETTINGS = {'x': __import__('os').getcwd()}\n")
    with pytest.raises(DatasetError, match="not a literal"):
        read_judge_settings(evil)
    with pytest.raises(DatasetError, match="arena-hard-auto repository"):
        arena_hard(tmp_path)


# The scripted judge: per question, game 1 (the baseline's answer first) and game 2 (the
# model's, which the fake engine writes as "The answer is d.", first).
VERDICTS = {
    "H1: sort a list {in place}\nFirst: Baseline": "Clearly [[B>>A]]",
    "H1: sort a list {in place}\nFirst: The answer": "[[A>B]]",
    "H2: sum 1..10\nFirst: Baseline": "My final verdict is tie: [[A=B]]",
    "H2: sum 1..10\nFirst: The answer": "[[A>B]]",
    "H3: prime below 20\nFirst: Baseline": "I cannot decide.",
    "H3: prime below 20\nFirst: The answer": "[[B>A]]",
    "C1: a two-line poem\nFirst: Baseline": "[[B>A]]",
    "C1: a two-line poem\nFirst: The answer": "[A>B]",
}


def test_arena_hard_through_evalpipe_run_scores_exactly(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with FaultServer(model="judge-a", script=VERDICTS, faults=["500"]) as server:
        argv = [
            *FAKE, "--tasks", "arena_hard", "--judge-data", str(DATA), "--out", str(out),
            "--judge-base-url", server.base_url, "--judge-model", "judge-a",
        ]  # fmt: skip
        assert main(argv) == 0
        # Judged again: every judgment is on disk, none is asked twice.
        assert main([*argv, "--phase", "judge"]) == 0
    assert max(server.answered.values()) == 1 and len(server.answered) == 8
    (folder,) = sorted((out / "judgments").iterdir())
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["judgments"] == 8 and summary["parse_failures"] == 1
    hard = summary["pairwise"]["arena_hard_hard_prompt"]
    # h1: [1, 1, 1, 1]; h2: [1, 0.5]; h3 dropped (game 1 has no verdict).
    assert (hard["baseline"], hard["pairs"], hard["pairs_scored"]) == ("base-a", 3, 2)
    assert hard["battles"] == 6 and hard["win_rate"] == 5.5 / 6
    assert hard["lower"] <= hard["score"] <= hard["upper"] <= 1.0
    # The battles in question order, bootstrapped as arena_scores does (bench/arena_agreement.py
    # checks arena_scores against arena-hard-auto's show_result.py).
    known = arena_scores({"m": [1.0, 1.0, 1.0, 1.0, 1.0, 0.5]})["m"].to_dict()
    assert {k: hard[k] for k in known} == known
    assert hard["position"] == {
        "pairs": 2, "inconsistent": 1, "rate": 0.5, "favours_first": 1, "favours_second": 0,
    }  # fmt: skip
    ids = {json.loads(x)["sample_id"] for x in (folder / "judgments.jsonl").open()}
    assert ids == {f"{uid}@1/{game}" for uid in ("h1", "h2", "h3", "c1") for game in (1, 2)}
    assert hard["verdicts"] == {"A=B": 1, "A>B": 2, "B>>A": 1, "B>A": 1, "none": 1}
    poem = summary["pairwise"]["arena_hard_creative_writing"]
    assert (poem["baseline"], poem["battles"]) == ("base-b", 2)
    assert poem["score"] == poem["lower"] == poem["upper"] == poem["win_rate"] == 1.0
    assert summary["published_judge"] == "judge-of-record" and not summary["comparable"]
    # Judge's sampling: the config's temperature and max_tokens.
    judge = json.loads((folder / "judge.json").read_text())
    assert judge["gradings"]["arena_hard_hard_prompt"]["sampling"]["max_tokens"] == 64
    # A tracked run (--track, report --export) carries the same figures.
    judged = read_judge_summary(JudgeDir(RunDir(out), folder.name))
    assert judged.to_dict() == summary  # the record holds the whole file, pairwise included
    tracked = judge_metrics({folder.name: judged})
    prefix = f"judge/{folder.name[:8]}/pairwise/arena_hard_hard_prompt"
    assert tracked[f"{prefix}/score"] == hard["score"]
    assert tracked[f"{prefix}/position_inconsistency"] == 0.5
    printed = capfd.readouterr().out
    assert "arena_hard_creative_writing against base-b: score 100.0% (-0.0 / +0.0)" in printed
    assert "position inconsistency 1/2 (50%)" in printed
    assert main(["report", str(out)]) == 0
    report = capfd.readouterr().out
    (row,) = [line for line in report.splitlines() if "| base-a" in line]
    assert "base-a" in row and f"{100 * hard['score']:.1f}" in row and "1/2 (50%)" in row


def test_a_thinking_judges_verdict_is_read_from_its_final_answer(tmp_path: Path) -> None:
    # gpt-oss's Harmony channels: the analysis drafts the opposite strong verdict, which would
    # be read (the first pattern's last match) if the analysis were not set apart.
    drafted = "<|channel|>analysis<|message|>Draft: [[A>>B]]<|end|><|start|>assistant"
    script = {k: f"{drafted}<|channel|>final<|message|>{v}<|return|>" for k, v in VERDICTS.items()}
    out = tmp_path / "run"
    with FaultServer(model="judge-a", script=script) as server:
        assert main([
            *FAKE, "--tasks", "arena_hard", "--judge-data", str(DATA), "--out", str(out),
            "--judge", str(thinking_judge(tmp_path, "gpt_oss")),
            "--judge-base-url", server.base_url, "--judge-model", "judge-a",
        ]) == 0  # fmt: skip
    (folder,) = sorted((out / "judgments").iterdir())
    summary = json.loads((folder / "summary.json").read_text())
    hard = summary["pairwise"]["arena_hard_hard_prompt"]
    assert hard["verdicts"] == {"A=B": 1, "A>B": 2, "B>>A": 1, "B>A": 1, "none": 1}
    assert (hard["pairs_scored"], hard["win_rate"]) == (2, 5.5 / 6)
    assert summary["parse_failures"] == 1 and summary["cut_off_in_reasoning"] == 0
    records = [json.loads(x) for x in (folder / "judgments.jsonl").open()]
    assert {tuple(r["reasoning"]) for r in records} == {("Draft: [[A>>B]]",)}


def test_a_run_directory_is_a_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "base"
    argv = [*FAKE, "--tasks", "arena_hard", "--judge-data", str(DATA), "--phase", "generate"]
    assert main([*argv, "--out", str(base)]) == 0
    baseline = read_baseline(base)
    assert baseline.name == "tiny_random" and set(baseline.answers) == {"h1", "h2", "h3", "c1"}
    assert all(a.startswith("The answer is ") for a in baseline.answers.values())
    # Judged against that run (--judge-baseline); the fake judge gives no verdicts, and the
    # judge's tokens follow --judge-max-tokens over the config's.
    out = tmp_path / "run"
    judged = [*argv[:-2], "--out", str(out), "--judge", "tiny_random"]
    assert main([*judged, "--judge-baseline", str(base), "--judge-max-tokens", "8"]) == 0
    (folder,) = sorted((out / "judgments").iterdir())
    gradings = json.loads((folder / "judge.json").read_text())["gradings"]
    grading = gradings["arena_hard_creative_writing"]
    assert grading["baseline"] == "tiny_random" and grading["sampling"]["max_tokens"] == 8
    first = json.loads((folder / "judgments.jsonl").open().readline())
    assert "First: The answer is " in first["prompt"][1]["content"]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["parse_failures"] == summary["judgments"] == 8
    file = read_baseline(DATA / "data" / "arena-hard-v2.0" / "model_answer" / "base-b.jsonl")
    assert file.name == "base-b" and file.answers == {"c1": "Baseline answer c1"}
    capsys.readouterr()
    assert main([*FAKE, "--tasks", "arena_hard", "--phase", "generate"]) != 0
    assert "give its folder with --judge-data DIR" in capsys.readouterr().err
