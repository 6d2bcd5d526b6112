"""GPQA-Diamond and MMLU-Pro: evalpipe against nvidia-simple-evals' own evaluation code, on
identical completions.

    python bench/agree_mcq.py [--rows N] [--repeats R]
    python bench/agree_mcq.py --quick    # 12 rows each

Both sides read the same synthetic rows in each dataset's published columns (written here, one
completion per row): the reference's GPQAEval and MMLUProEval run whole (their dataset loader
handed those rows, their sampler a stand-in that answers each prompt with its row's completion)
and evalpipe scores the same completions with its shipped task files. The completions are built
to sit on the extraction patterns' edges: "Answer: X" in markdown, LaTeX and lowercase, several
answers, letters beyond the options, truncated and empty answers, answers only the loosest
pattern finds. Counted per benchmark: prompts equal (GPQA; MMLU-Pro's reference prompt is
zero-shot, evalpipe's 5-shot chain of thought, so only its scoring is compared), extracted
answers equal, scores equal, and extraction failures on each side; GPQA's option permutations
are compared for every repeat of every row (the reference's GPQAEval with n_repeats=R).

The reference comes from .cache/bench-simple-evals (`make bench`: pip install --no-deps
--target .cache/bench-simple-evals -r bench/simple_evals_requirements.txt); without it the
script scores evalpipe's side only and says so. Exit 1 if any count disagrees.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import html
import json
import random
import re
import string
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchlib import REPO, parse_args

from evalpipe.tasks import load_task
from evalpipe.tasks.config import SourceConfig
from evalpipe.tasks.configured import ConfiguredTask

SIMPLE_EVALS_DIR = REPO / ".cache" / "bench-simple-evals"
SIMPLE_EVALS_MISSING = (
    f"nvidia-simple-evals is not installed in {SIMPLE_EVALS_DIR}: run `make bench`, or\n  "
    f"{sys.executable} -m pip install --no-deps --target {SIMPLE_EVALS_DIR} "
    "-r bench/simple_evals_requirements.txt"
)
CATEGORIES = (
    "biology", "business", "chemistry", "computer science", "economics", "engineering", "health",
    "history", "law", "math", "other", "philosophy", "physics", "psychology",
)  # fmt: skip

# --- completions on the edges ------------------------------------------------------------------

# {X}: the letter given, {x}: it in lowercase, {Y}: another option's letter, {Z}: a letter past
# the last option.
FORMS = (
    "Answer: {X}", "answer: {x}", "ANSWER: {X}", "Answer:{X}", "Answer :{X}", "Answer:\t{X}",
    "Answer:\n{X}", "Answer:  {X}", "**Answer:** {X}", "**Answer: {X}**", "Answer: **{X}**",
    "__Answer__: {X}", "*Answer*: {X}", "Answer: ({X})", "Answer: [{X}]", "Answer: {X}.",
    "Answer: {X})", "Answer: {X}{X}", "Answer: {X}1", "Answer: {X}pple", "Answer = {X}",
    "Answer: $\\boxed{{{X}}}$", "$\\boxed{{{X}}}$", "\\boxed{{{X}}}", "\\boxed{{\\text{{{X}}}}}",
    "$\\text{{({X})}}$", "Answer: \\({X}\\)", "Answer: $ {X} $", "The answer is ({X}).",
    "The answer is {X}.", "the answer is {x}", "the answer is ({x})", "The answer is **({X})**",
    "So the answer is: {X}", "Answer: {Y}\nWait, no. Answer: {X}",
    "The answer is ({Y}). Answer: {X}",
    "Answer: {X} or maybe {Y}", "{X}) is right", "{X} is the correct answer", "Option {X}.",
    "{X}", "{X}.", "({X})", "I choose {X}", "Final answer - {X}", "答案：{X}", "Answer: Ｂ",
    "Answer:", "", "no idea, sorry", "i think it's {x}", "Answer: {Z}", "the answer is {z}",
    "Answer: {x}.", "answer is {X} because {Y} is wrong",
)  # fmt: skip
PREFIXES = ("", "Let's think step by step. ", "I think the second statement is wrong. ",
            "we compute 3 + 4 = 7 and compare.\n", "Looking at options A and D, ",
            "Reasoning:\n- First, B is implausible.\n- Then C fails too.\n")  # fmt: skip
SUFFIXES = ("", "\n", ".", " Hope this helps!", "\n\nQuestion: next", "\nAnswer: ")


def completion(rng: random.Random, letters: str, answer: str) -> str:
    """A completion that picks `answer` (mostly) or another letter, in one of FORMS."""
    pick = answer if rng.random() < 0.6 else rng.choice(letters)
    other = rng.choice([c for c in letters if c != pick])
    past = string.ascii_uppercase[len(letters)]
    form = rng.choice(FORMS).format(X=pick, x=pick.lower(), Y=other, Z=past, z=past.lower())
    return rng.choice(PREFIXES) + form + rng.choice(SUFFIXES)


# --- datasets ----------------------------------------------------------------------------------


def gpqa_rows(count: int, rng: random.Random) -> list[dict[str, Any]]:
    """Rows in GPQA's published columns; some options repeat another's text, as edge cases."""
    rows = []
    for i in range(count):
        options = [
            f"{rng.randint(1, 999)} {rng.choice(['mol', 'eV', 'K', 'nm'])}" for _ in range(4)
        ]
        if i % 25 == 0:
            options[2] = options[0]  # an incorrect option equal to the correct one
        rows.append({
            "Question": f"Q{i:04d}: which value does experiment {i} measure?",
            "Correct Answer": options[0], "Incorrect Answer 1": options[1],
            "Incorrect Answer 2": options[2], "Incorrect Answer 3": options[3],
            "Record ID": f"rec{i:05d}", "High-level domain": rng.choice(["Physics", "Chemistry"]),
        })  # fmt: skip
    return rows


def mmlu_pro_rows(count: int, rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """Test rows (4 to 10 options) and five validation rows per category, published columns."""

    def row(qid: int, category: str, text: str, cot: str) -> dict[str, Any]:
        options = [f"{category} option {j} of {qid}" for j in range(rng.choice([4, 6, 9, 10, 10]))]
        index = rng.randrange(len(options))
        return {"question_id": qid, "question": text, "options": options,
                "answer": "ABCDEFGHIJ"[index], "answer_index": index,
                "cot_content": cot.format(L="ABCDEFGHIJ"[index]), "category": category,
                "src": "bench"}  # fmt: skip

    test = [row(i, CATEGORIES[i % 14], f"Q{i:04d}: pick the right one.", "") for i in range(count)]
    validation = [
        row(10_000 + 5 * c + k, cat, f"Worked example {k}.",
            "A: Let's think step by step. It is {L}. The answer is ({L}).")
        for c, cat in enumerate(CATEGORIES) for k in range(5)
    ]  # fmt: skip
    return {"test": test, "validation": validation}


def _write(folder: Path, split: str, rows: Sequence[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _task(name: str, folder: Path, **changes: Any) -> ConfiguredTask:
    task = load_task(name)
    source = SourceConfig(uri=f"jsonl:{folder}/{{split}}.jsonl", split=task.config.source.split)
    return ConfiguredTask(
        dataclasses.replace(task.config, source=source, **changes), path=task.path
    )


# --- the reference -----------------------------------------------------------------------------


class ScriptedSampler:
    """simple-evals' sampler interface, answering a prompt with the completion of the row whose
    question it contains; prompts it was not told about are kept for the report."""

    def __init__(self, by_question: dict[str, str]) -> None:
        self.by_question = by_question
        self.prompts: list[str] = []

    def _pack_message(self, content: Any, role: str) -> dict[str, Any]:
        return {"role": role, "content": content}

    async def __call__(self, messages: list[dict[str, Any]], seed: int | None = None) -> str:
        content = messages[-1]["content"]
        self.prompts.append(content)
        key = re.search(r"Q\d{4}:[^\n]*", content)
        return self.by_question[key.group(0)] if key else ""


def _run_reference(module: Any, make_eval: Any, rows: dict[str, list], sampler: Any) -> list:
    """Run a simple-evals Eval on `rows` (its loader patched); its per-example results."""
    import datasets

    captured: list[Any] = []
    common = module.common
    aggregate = common.aggregate_results

    def loader(*args: Any, split: str | None = None, **kwargs: Any) -> Any:
        parts = {k: datasets.Dataset.from_list(v) for k, v in rows.items()}
        return parts[split] if split else parts

    def keep(results: list, **kwargs: Any) -> Any:
        captured.extend(results)
        return aggregate(results, **kwargs)

    module.load_dataset, common.aggregate_results = loader, keep
    try:
        with tempfile.TemporaryDirectory() as cache:
            evaluation = make_eval(cache)
            asyncio.run(evaluation(sampler))
    finally:
        common.aggregate_results = aggregate
    return captured


def _reference_verdicts(results: list) -> dict[str, tuple[str | None, float]]:
    """question key → (extracted answer, score) from each result's conversation and report."""
    out = {}
    for result in results:
        key = re.search(r"Q\d{4}:[^\n]*", result.convo[0]["content"]).group(0)
        shown = re.search(r"<p>Extracted Answer: (.*?)</p>", result.html, re.DOTALL).group(1)
        extracted = None if shown == "None" else html.unescape(shown)
        out[key] = (extracted, float(result.score))
    return out


def _aa_v3(task_type: str) -> Any:
    """The package's own MMLU-Pro extraction config (framework.yml, mmlu_pro_aa_v3)."""
    import yaml
    from simple_evals.custom_parametrization.config_loader import EvalConfig

    framework = yaml.safe_load(
        (SIMPLE_EVALS_DIR / "core_evals" / "simple_evals" / "framework.yml").read_text()
    )
    (entry,) = [e for e in framework["evaluations"] if e["name"] == task_type]
    return EvalConfig(**entry["defaults"]["config"]["params"]["extra"]["custom_config"])


# --- the comparison ----------------------------------------------------------------------------


def compare(
    name: str, task: ConfiguredTask, completions: dict[str, str], reference: dict | None
) -> tuple[Counter, list[str]]:
    """Counts of equal extracted answers and scores, and extraction failures on each side."""
    counts: Counter = Counter()
    problems = []
    for sample in task.samples():
        content = sample.prompt if isinstance(sample.prompt, str) else sample.prompt[-1]["content"]
        key = re.search(r"Q\d{4}:[^\n]*", content).group(0)
        text = completions[key]
        scored = task.score(sample, [text])
        ours = (scored.extracted[0], scored.scores["accuracy"])
        counts["completions"] += 1
        counts["evalpipe no answer"] += ours[0] is None
        counts["evalpipe correct"] += ours[1] == 1.0
        if reference is None:
            continue
        theirs = reference[key]
        counts["reference no answer"] += theirs[0] is None
        counts["extracted equal"] += ours[0] == theirs[0]
        counts["score equal"] += ours[1] == theirs[1]
        if ours != theirs:
            problems.append(f"{name} {key}: {text!r}: evalpipe {ours}, reference {theirs}")
    return counts, problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=400, help="rows (and completions) per set")
    parser.add_argument("--repeats", type=int, default=4, help="GPQA repeats for permutations")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, {"rows": 12, "repeats": 2}, argv)
    have_reference = (SIMPLE_EVALS_DIR / "simple_evals").is_dir()
    if have_reference:
        sys.path.insert(0, str(SIMPLE_EVALS_DIR))
    else:
        print(f"reference skipped: {SIMPLE_EVALS_MISSING}")
    rng = random.Random(args.seed)
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        # GPQA: prompts, extraction and scoring on one repeat; permutations on several.
        rows = gpqa_rows(args.rows, rng)
        _write(folder / "gpqa", "train", rows)
        gpqa = _task("gpqa_diamond", folder / "gpqa")
        completions = {}
        for sample in gpqa.samples():
            key = re.search(r"Q\d{4}:[^\n]*", sample.prompt[-1]["content"]).group(0)
            completions[key] = completion(rng, "ABCD", sample.target["answer"])
        reference = None
        if have_reference:
            from simple_evals.evals import gpqa_eval
            from simple_evals.seed_generator import SeedGenerator

            sampler = ScriptedSampler(completions)
            results = _run_reference(
                gpqa_eval,
                lambda cache: gpqa_eval.GPQAEval(
                    n_repeats=1, seed_generator=SeedGenerator(42), cache_dir=cache, num_threads=4
                ),
                {"train": rows},
                sampler,
            )
            reference = _reference_verdicts(results)
            ours = {s.prompt[-1]["content"] for s in gpqa.samples()}
            equal = sum(p in ours for p in sampler.prompts)
            print(f"gpqa prompts: {equal} equal of {len(sampler.prompts)}")
            failed |= equal != len(rows)
        counts, problems = compare("gpqa", gpqa, completions, reference)
        print(f"gpqa: {json.dumps(dict(counts))}")
        failed |= bool(problems)
        if have_reference:
            shuffle = dataclasses.replace(gpqa.config.shuffle, repeats=args.repeats)
            repeated = _task("gpqa_diamond", folder / "gpqa", shuffle=shuffle)
            theirs = gpqa_eval.GPQAEval(n_repeats=args.repeats, seed_generator=SeedGenerator(42))
            mine = [s.meta["permutation"] for s in repeated.samples()]
            same = sum(a == b["permutation"] for a, b in zip(mine, theirs.examples, strict=True))
            print(f"gpqa permutations: {same} equal of {len(mine)} ({args.repeats} repeats)")
            failed |= same != len(mine)

        # MMLU-Pro: extraction and scoring (the prompts differ by protocol, see above).
        parts = mmlu_pro_rows(args.rows, rng)
        for split, split_rows in parts.items():
            _write(folder / "mmlu_pro", split, split_rows)
        mmlu_pro = _task("mmlu_pro", folder / "mmlu_pro")
        completions = {
            f"Q{r['question_id']:04d}: pick the right one.": completion(
                rng, "ABCDEFGHIJ"[: len(r["options"])], r["answer"]
            )
            for r in parts["test"]
        }
        reference = None
        if have_reference:
            from simple_evals.evals import mmlu_pro_eval

            results = _run_reference(
                mmlu_pro_eval,
                lambda cache: mmlu_pro_eval.MMLUProEval(
                    cache_dir=cache, num_threads=4, custom_eval_config=_aa_v3("mmlu_pro_aa_v3")
                ),
                {"test": parts["test"]},
                ScriptedSampler(completions),
            )
            reference = _reference_verdicts(results)
        counts, more = compare("mmlu_pro", mmlu_pro, completions, reference)
        print(f"mmlu_pro: {json.dumps(dict(counts))}")
        problems += more
    for line in problems[:40]:
        print(f"DISAGREE {line}")
    return 1 if failed or problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
