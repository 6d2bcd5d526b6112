"""evalpipe's Arena-Hard-Auto judging against arena-hard-auto's own code, on the same judge outputs.

    python bench/arena_agreement.py --reference DIR            # all 750 questions
    python bench/arena_agreement.py --reference DIR --quick    # 20 questions

DIR is a copy of github.com/lmarena/arena-hard-auto (never committed; BENCHMARKS.md §20 says how
to get one). evalpipe reads the benchmark from DIR exactly as `--judge-data DIR` does; the
model's and the baseline's answers are written here to probe formatting (braces, brackets that
look like verdicts, newlines, non-ASCII). Then:

- Prompts: for every question, both games' judge chats evalpipe's PairwiseGrading builds against
  those gen_judgment.py's judgment() builds (its pairwise_judgment, round 1 and round 2, through
  an API type registered here that records the messages and returns a scripted judge output):
  byte-equal or not.
- Parsing: the verdict evalpipe reads from every scripted output against the score judgment()
  wrote, and edge cases written here through its get_score with the config's patterns.
- Scores: the judgment files judgment() wrote, for two models, through show_result.py's
  load_judgments and print_leaderboard (its pandas bootstrap, numpy's generator seeded with
  --seed first; its format_confidence_interval wrapped to keep the unrounded numbers) against
  evalpipe's arena_scores on the same battles: each model alone as a judge's summary.json has
  it (summarize_judgments), and both together; score, lower and upper equal or not.

utils/completion.py imports boto3 and shortuuid at the top for clients no path here uses; when
they are not installed, empty modules stand in for them. Prints the counts and every
disagreement; exit 1 on any.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchlib import REPO, parse_args, print_checks

from evalpipe.rundir.judgments import JudgeDefinition, judgment_id, summarize_judgments
from evalpipe.rundir.samplelog import SampleRecord
from evalpipe.tasks.arenahard import arena_hard
from evalpipe.tasks.pairwise import GAMES, Baseline, arena_scores, pair_battles, read_verdict

DEFAULT_REFERENCE = REPO / ".cache" / "arena-hard-auto"
FIXTURE = REPO / "tests" / "fixtures" / "arena_hard"
MODELS = ("model-a", "model-b")
JUDGE = "bench-judge"

# Judge outputs the pipeline sees: every verdict of show_result.py's table, in several
# spellings, and outputs with none (a parse failure that drops the question's pair).
OUTPUTS = [
    "My final verdict is: [[A>>B]]",
    "[[A>B]]",
    "tie: [[A=B]]",
    "[[B>A]]",
    "Assistant B is significantly better: [[B>>A]]",
    "[[a<b]]",
    "[[A<<B]]",
    "[[B=A]]",
    "[[B<A]]",
    "[[B<<A]]",
    "first [[A>B]], on reflection [[B>A]]",
    "single brackets [A>B]",
    "[A>B] but [[B>>A]]",
    "no verdict at all",
    "[[ A>B ]]",
    "Verdict: A>B",
]
# Outputs only read, not scored: labels that are no verdict stop show_result.py (KeyError).
EDGE_CASES = [
    "[[A]]",
    "[[AB]]",
    "[[A>B>C]]",
    "[[>]]",
    "[[]] [A=B]",
    "[[A>B]]\n[[A=B]]\n",
    "[[\nA>B]]",
    "Évaluation : [[B>A]]",
    "",
]


def _stub(name: str) -> None:
    with contextlib.suppress(ImportError):
        __import__(name)
        return
    sys.modules[name] = types.ModuleType(name)


def reference(root: Path) -> tuple[types.ModuleType, types.ModuleType]:
    """arena-hard-auto's gen_judgment and show_result modules, imported from `root`."""
    sys.path.insert(0, str(root))
    _stub("boto3")
    _stub("shortuuid")
    import gen_judgment
    import show_result

    return gen_judgment, show_result


def answer_text(who: str, uid: str) -> str:
    return f"{who} on {uid}: {{not a field}} and [[A>>B]] as text\nline two — ünïcode [1]"


def answer_row(model: str, question: dict[str, Any], text: str) -> dict[str, Any]:
    return {
        "uid": question["uid"],
        "model": model,
        "messages": [
            {"role": "user", "content": question["prompt"]},
            {"role": "assistant", "content": {"answer": text}},
        ],
    }


@contextlib.contextmanager
def chdir(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE)
    parser.add_argument("--limit", type=int, default=None, help="questions (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, {"limit": 20}, argv)
    have_reference = (args.reference / "gen_judgment.py").is_file()
    root = args.reference if have_reference else FIXTURE
    if not have_reference:
        print(f"the reference's side SKIPPED: no arena-hard-auto copy at {args.reference}; "
              f"evalpipe's side runs on {FIXTURE.relative_to(REPO)}")  # fmt: skip
    rng = random.Random(args.seed)
    bench = arena_hard(root, Baseline(name="baseline", answers={}))
    questions = [
        {"uid": s.id, "category": t.topic, "prompt": s.prompt}
        for t in bench.tasks
        for s in t.samples()
    ][: args.limit]
    baseline = Baseline(
        name="baseline", answers={q["uid"]: answer_text("baseline", q["uid"]) for q in questions}
    )
    bench = arena_hard(root, baseline)
    tasks = {t.topic: t for t in bench.tasks}
    samples = {s.id: s for t in bench.tasks for s in t.samples()}
    # One scripted output per (model, question, game), the same for both sides.
    outputs = {
        (m, q["uid"], g): rng.choice(OUTPUTS) for m in MODELS for q in questions for g in GAMES
    }
    records: dict[str, list[SampleRecord]] = {m: [] for m in MODELS}
    for model in MODELS:
        for q in sorted(questions, key=lambda q: q["uid"]):
            task = tasks[q["category"]]
            grading = bench.gradings[task.name]
            for ask in grading.asks(samples[q["uid"]], [answer_text(model, q["uid"])]):
                text = outputs[(model, q["uid"], ask.game)]
                records[model].append(
                    SampleRecord(
                        task=task.name, category=task.category,
                        sample_id=judgment_id(q["uid"], ask.turn, ask.game),
                        prompt=ask.prompt, completions=(text,),
                        extracted=(read_verdict(text, grading.patterns),), scores={},
                        prompt_tokens=0, completion_tokens=(0,),
                    )
                )  # fmt: skip
    print(f"evalpipe: {len(questions)} question(s), {sum(map(len, records.values()))} judgments")
    if not have_reference:
        return 0

    gen_judgment, show_result = reference(args.reference)
    configs = gen_judgment.make_config(str(args.reference / "config" / "arena-hard-v2.0.yaml"))
    calls: list[list[dict[str, str]]] = []
    current: dict[str, Any] = {}

    def scripted(messages: list[dict[str, str]], **_: Any) -> dict[str, str]:
        calls.append(messages)
        current["game"] += 1
        return {"answer": outputs[(current["model"], current["uid"], current["game"])]}

    gen_judgment.registered_api_completion["evalpipe_scripted"] = scripted
    settings = {"api_type": "evalpipe_scripted", "endpoints": None}
    checks: dict[str, tuple[int, list[str]]] = {}
    with tempfile.TemporaryDirectory() as tmp, chdir(Path(tmp)):
        folder = Path("data", configs["bench_name"], "model_judgment", JUDGE)
        folder.mkdir(parents=True)
        configs["judge_model"] = JUDGE
        prompts_wrong: list[str] = []
        parsed_wrong: list[str] = []
        for model in MODELS:
            for q in sorted(questions, key=lambda q: q["uid"]):
                current.update(model=model, uid=q["uid"], game=0)
                calls.clear()
                gen_judgment.judgment({
                    "question": q,
                    "answer": answer_row(model, q, answer_text(model, q["uid"])),
                    "baseline": answer_row("baseline", q, answer_text("baseline", q["uid"])),
                    "reference": None, "configs": configs, "settings": settings,
                    "output_file": str(folder / f"{model}.jsonl"),
                })  # fmt: skip
                ours = [r for r in records[model] if r.sample_id.startswith(f"{q['uid']}@")]
                for game, theirs in enumerate(calls, 1):
                    mine = next(r for r in ours if r.sample_id.endswith(f"/{game}"))
                    if json.dumps(theirs, ensure_ascii=False) != json.dumps(
                        mine.prompt, ensure_ascii=False
                    ):
                        prompts_wrong.append(f"{model} {q['uid']} game {game}")
            written = [json.loads(x) for x in (folder / f"{model}.jsonl").open()]
            for row in written:
                for game, played in enumerate(row["games"], 1):
                    mine = next(
                        r for r in records[model] if r.sample_id == judgment_id(row["uid"], 1, game)
                    )
                    if played["score"] != mine.extracted[0]:
                        parsed_wrong.append(
                            f"{played['judgment']['answer']!r}: arena-hard-auto "
                            f"{played['score']!r}, evalpipe {mine.extracted[0]!r}"
                        )
        checks["judge prompts byte-equal"] = (2 * len(MODELS) * len(questions), prompts_wrong)
        edge_wrong = [
            f"{text!r}: arena-hard-auto {theirs!r}, evalpipe {ours!r}"
            for text in EDGE_CASES
            if (theirs := gen_judgment.get_score(text, configs["regex_patterns"]))
            != (ours := read_verdict(text, configs["regex_patterns"]))
        ]
        checks["verdicts read alike"] = (
            2 * len(MODELS) * len(questions) + len(EDGE_CASES),
            parsed_wrong + edge_wrong,
        )
        checks["scores and intervals equal"] = compare_scores(
            show_result, configs["bench_name"], records, sorted(tasks), args.seed
        )
    return print_checks(checks)


def compare_scores(
    show_result: types.ModuleType,
    bench_name: str,
    records: dict[str, list[SampleRecord]],
    topics: list[str],
    seed: int,
) -> tuple[int, list[str]]:
    """show_result.py's leaderboard per category (each model alone, then both) against
    evalpipe's summary and arena_scores; every score, lower and upper compared exactly."""
    import numpy as np

    kept: list[Any] = []
    original = show_result.format_confidence_interval

    def keep(mean: Any, lower: Any, upper: Any, baseline: Any = None) -> Any:
        kept.append(mean.merge(lower, on="model").merge(upper, on="model").set_index("model"))
        return original(mean, lower, upper, baseline)

    show_result.format_confidence_interval = keep
    battles_all = show_result.load_judgments([JUDGE], bench_name)
    checked, wrong = 0, []
    for topic in topics:
        task = f"arena_hard_{topic}"
        battles = battles_all[battles_all.category == topic].reset_index(drop=True)
        if battles.empty:
            continue
        ours_alone = {}
        ours_battles = {}
        for model in MODELS:
            mine = [r for r in records[model] if r.task == task]
            summary = summarize_judgments(
                mine,
                judge=JudgeDefinition(gradings={task: {"kind": "pairwise"}}),
                published_judge=None,
            )
            ours_alone[model] = summary.pairwise[task].to_dict()
            games: dict[str, dict[int, str | None]] = {}
            for r in sorted(mine, key=lambda r: r.sample_id):
                uid, _, game = r.sample_id.partition("@1/")
                games.setdefault(uid, {})[int(game)] = r.extracted[0]
            ours_battles[model] = [
                x for both in games.values() for x in (pair_battles(both[1], both[2]) or [])
            ]
        sides = [(m, {m: ours_alone[m]}) for m in MODELS]
        joint = arena_scores(ours_battles, seed=seed)
        sides.append(("both", {m: joint[m].to_dict() for m in MODELS}))
        for label, ours in sides:
            models = list(ours)
            np.random.seed(seed)
            kept.clear()
            show_result.print_leaderboard(
                battles[battles.model.isin(models)].reset_index(drop=True), topic
            )
            (theirs,) = kept
            for model in models:
                for key, column in (("score", "scores"), ("lower", "lower"), ("upper", "upper")):
                    checked += 1
                    value = float(theirs.loc[model, column])
                    if ours[model][key] != value:
                        wrong.append(
                            f"{topic} {label} {model} {key}: arena-hard-auto {value!r}, "
                            f"evalpipe {ours[model][key]!r}"
                        )
    show_result.format_confidence_interval = original
    return checked, wrong


if __name__ == "__main__":
    sys.exit(main())
