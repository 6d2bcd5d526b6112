"""LiveCodeBench: evalpipe's verdicts beside nvidia-livecodebench's grader on the same programs,
and programs per second, evalpipe's sandbox against the grader's own runner.

    python bench/lcb_agreement.py [--workers 2] [--timeout 6] [--reps 2]
    python bench/lcb_agreement.py --quick    # a dozen programs, 1 s limit, evalpipe's side alone
                                             # unless the reference is installed

Problems: the five of tests/fixtures/livecodebench/test.jsonl and five more written here, in
`code_generation_lite`'s schema (stdin/stdout and functional, private tests as base64 → zlib →
pickle). Programs: for each problem, completions that are correct (several input and output
styles), correct with extra whitespace, wrong, crashing, timing out, exiting early, and
malformed; each a whole completion with its code in a ```python block (or none), so extraction
is compared too. The reference side runs the package's own code: `extract_code(…,
LMStyle.GenericOAIServer)`, `CodeGenerationProblem(**row).get_evaluation_sample()` and
`codegen_metrics(…, num_process_evaluate=WORKERS, timeout=TIMEOUT)`; a program passes there when
every test result is > 0, as its pass@k counts it. evalpipe's side runs the shipped task's
scorer on the same rows. Both use the same parallelism and per-test time limit; the programs
without infinite loops are timed again, interleaved (A B, B A, …), medians reported.

The reference comes from .cache/bench-livecodebench (`make bench` installs
bench/livecodebench_requirements.txt there with --no-deps; its grader needs only numpy and tqdm
beside the standard library).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import pickle
import sys
import time
import types
import zlib
from collections import Counter

from benchlib import REPO, interleave, load_average, machine, median, parse_args

LCB_DIR = REPO / ".cache" / "bench-livecodebench"
LCB_MISSING = (
    f"nvidia-livecodebench is not installed in {LCB_DIR}: run `make bench`, or\n  "
    f"{sys.executable} -m pip install --no-deps --target {LCB_DIR} "
    "-r bench/livecodebench_requirements.txt"
)
FIXTURE = REPO / "tests" / "fixtures" / "livecodebench" / "test.jsonl"


def _packed(tests: list[dict]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def _row(qid: str, platform: str, tests: list[tuple[str, str]], fn: str | None, starter: str):
    kind = "functional" if fn else "stdin"
    cases = [{"input": i, "output": o, "testtype": kind} for i, o in tests]
    return {
        "question_title": qid, "question_content": f"Problem {qid}.", "platform": platform,
        "question_id": qid, "contest_id": "bench", "contest_date": "2025-03-01T00:00:00",
        "starter_code": starter, "difficulty": "medium",
        "public_test_cases": json.dumps(cases[:1]), "private_test_cases": _packed(cases[1:]),
        "metadata": json.dumps({"func_name": fn} if fn else {}),
    }  # fmt: skip


def problems() -> list[dict]:
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    grid = [("2 3\n#.#\n...\n", "2\n0\n"), ("1 1\n#\n", "1\n"), ("3 2\n##\n#.\n..\n", "2\n1\n0\n")]
    parity = [("4\n", "Yes\n"), ("7\n", "No\n"), ("0\n", "Yes\n"), ("-3\n", "No\n")]
    pal = [('"abba"', "true"), ('"abc"', "false"), ('""', "true"), ('"a"', "true")]
    divmod_ = [("7\n2", "[3, 1]"), ("9\n3", "[3, 0]"), ("-7\n2", "[-4, 1]")]
    mean = [("[1, 2]", "1.5"), ("[4]", "4.0"), ("[1, 2, 3, 4]", "2.5")]
    starter = "class Solution:\n    def {}(self, {}) -> {}:\n        "
    return [
        *rows,
        _row("fx_grid", "atcoder", grid, None, ""),
        _row("fx_parity", "codeforces", parity, None, ""),
        _row("4001", "leetcode", pal, "isPal", starter.format("isPal", "s: str", "bool")),
        _row("4002", "leetcode", divmod_, "divMod",
             starter.format("divMod", "a: int, b: int", "List[int]")),
        _row("4003", "leetcode", mean, "mean", starter.format("mean", "nums: List[int]", "float")),
    ]  # fmt: skip


# Correct solutions per stdio problem: (how it reads, the body given `data`, a list of lines).
STDIO = {
    "fx_sum": "n = int(data[0])\nout = [str(sum(map(int, data[1].split()[:n])))]",
    "fx_mean": "out = []\nfor line in data[1 : 1 + int(data[0])]:\n"
    "    xs = list(map(int, line.split()))\n    out.append(f'{sum(xs) / len(xs):.2f}')",
    "fx_rev": "out = [data[0].strip()[::-1]]",
    "fx_grid": "h, w = map(int, data[0].split())\n"
    "out = [str(row.count('#')) for row in data[1 : 1 + h]]",
    "fx_parity": "out = ['Yes' if int(data[0]) % 2 == 0 else 'No']",
}
READERS = {
    "read": "import sys\ndata = sys.stdin.read().split('\\n')\n",
    "readline": "import sys\ndata = [sys.stdin.readline() for _ in range(50)]\n",
    "no-import": "data = sys.stdin.read().split('\\n')\n",  # the judge's prelude imports sys
    "loop-input": "data = []\nwhile True:\n    try:\n        data.append(input())\n"
    "    except EOFError:\n        break\n",
}
# Reading stdin as a file: the reference's runner replaces sys.stdin by a StringIO (no
# `.buffer`) and its process's real stdin is empty, so it fails these correct programs, which
# evalpipe runs on a real stdin. Counted apart as the known difference.
FILE_READERS = {
    "stdin as a file (open(0))": "data = open(0).read().split('\\n')\n",
    "stdin as a file (sys.stdin.buffer)": "import sys\n"
    "data = sys.stdin.buffer.read().decode().split('\\n')\n",
}
KNOWN_DIFFERENCES = tuple(FILE_READERS)
WRITERS = {
    "print": "print('\\n'.join(out))",
    "print-each": "for line in out:\n    print(line)",
    "stdout-write": "sys.stdout.write('\\n'.join(out) + '\\n')",
    "main-guard": "def main():\n    print('\\n'.join(out))\nif __name__ == '__main__':\n    main()",
}
SPACED = {
    "trailing-spaces": "print('\\n'.join(line + '   ' for line in out))",
    "blank-lines-after": "print('\\n'.join(out) + '\\n\\n\\n')",
    "leading-newline": "print('\\n' + '\\n'.join(out))",
    "tabs-around": "print('\\n'.join('\\t' + line + ' \\t' for line in out))",
    "crlf": "sys.stdout.write('\\r\\n'.join(out) + '\\r\\n')",
}
BROKEN = {
    "wrong-extra-line": ("wrong", "print('\\n'.join(out + ['0']))"),
    "wrong-nothing": ("wrong", "pass"),
    "wrong-first-only": ("wrong", "print(out[0] + ' 1')"),
    "wrong-doubled": ("wrong", "print('\\n'.join(line + line for line in out))"),
    "crash-zero-division": ("crashing", "print(1 // 0)"),
    "crash-after-output": ("crashing", "print('\\n'.join(out))\nraise ValueError('late')"),
    "crash-index": ("crashing", "print(out[99])"),
    "timeout-loop": ("timing out", "while True:\n    pass"),
    "timeout-after-output": ("timing out", "print('\\n'.join(out))\nwhile True:\n    pass"),
    "exit-after-output": ("exiting", "print('\\n'.join(out))\nexit()"),
    "sys-exit-1-after-output": ("exiting", "print('\\n'.join(out))\nsys.exit(1)"),
    "exit-before-output": ("exiting", "sys.exit(0)\nprint('\\n'.join(out))"),
}
FUNCTIONAL = {
    "3456": ("countAbove", "nums, k", "return sum(1 for x in nums if x > k)", "return len(nums)"),
    "3001": ("sortDesc", "nums", "return sorted(nums, reverse=True)", "return sorted(nums)"),
    "4001": ("isPal", "s", "return s == s[::-1]", "return len(s) < 2"),
    "4002": ("divMod", "a, b", "return [a // b, a % b]", "return [a / b, a % b]"),
    "4003": ("mean", "nums", "return sum(nums) / len(nums)", "return sum(nums) // len(nums)"),
}


def _fence(code: str) -> str:
    return f"Here is a solution.\n\n```python\n{code}\n```\n\nIt runs in linear time."


def programs(rows: list[dict]) -> list[tuple[str, str, str]]:
    """(problem id, category, completion) for every program of the agreement set."""
    out = []
    for qid, body in STDIO.items():
        for reader in READERS.values():
            for writer in WRITERS.values():
                out.append((qid, "correct", _fence(reader + body + "\n" + writer)))
        for category, reader in FILE_READERS.items():
            out.append((qid, category, _fence(reader + body + "\n" + WRITERS["print"])))
        reader = READERS["read"]
        for writer in SPACED.values():
            out.append((qid, "extra whitespace", _fence(reader + body + "\n" + writer)))
        for category, writer in BROKEN.values():
            out.append((qid, category, _fence(reader + body + "\n" + writer)))
        out.append((qid, "malformed", "I would read the input and print the answer."))
        out.append((qid, "malformed", _fence(reader + body + "\nprint('\\n'.join(out)")))
        out.append((qid, "correct", reader + body + "\nprint('\\n'.join(out))"))  # no fence
    for qid, (fn, args, right, wrong) in FUNCTIONAL.items():
        method = f"class Solution:\n    def {fn}(self, {args}):\n        {{}}"
        variants = {
            "correct": [method.format(right),
                        f"def {fn}({args}):\n    {right}",  # a plain function, no class
                        method.format(f"print('debug')\n        {right}"),
                        f"from typing import List\n{method.format(right)}"],
            "wrong": [method.format(wrong), method.format("return None")],
            "crashing": [method.format("raise RuntimeError('no')"),
                         method.format("return undefined_name"),
                         "class Solution:\n    pass"],
            "timing out": [method.format("while True:\n            pass")],
            "exiting": [method.format("exit()")],
            "malformed": ["```py\n" + method.format(right) + "\n```",
                          method.format(right).replace(":", "", 1)],
        }  # fmt: skip
        for category, codes in variants.items():
            out += [(qid, category, _fence(code)) for code in codes]
        if right.startswith("return ["):  # a tuple stands for a list in both judges
            tuple_ok = "return (" + right.removeprefix("return [").removesuffix("]") + ")"
            out.append((qid, "correct", _fence(method.format(tuple_ok))))
    ids = {r["question_id"] for r in rows}
    return [p for p in out if p[0] in ids]


def evalpipe_verdicts(rows, progs, workers: int, timeout: float) -> list[bool]:
    from evalpipe.tasks import load_task
    from evalpipe.tasks.livecodebench import LiveCodeBenchScorer, problem

    ks = load_task("livecodebench").config.scorer.k
    targets = {r["question_id"]: problem(r) for r in rows}
    scorer = LiveCodeBenchScorer(ks, timeout, workers=workers)
    scored = scorer.score_many([(targets[q], [text]) for q, _, text in progs])
    return [s.scores["pass@1"] == 1.0 for s in scored]


def reference_verdicts(rows, progs, workers: int, timeout: float) -> list[bool]:
    from livecodebench.benchmarks.code_generation import CodeGenerationProblem
    from livecodebench.evaluation.compute_code_generation_metrics import codegen_metrics
    from livecodebench.lm_styles import LMStyle
    from livecodebench.utils.extraction_utils import extract_code

    by_id = {r["question_id"]: CodeGenerationProblem(**r) for r in rows}
    samples = [by_id[q].get_evaluation_sample() for q, _, _ in progs]
    codes = [[extract_code(text, LMStyle.GenericOAIServer)] for _, _, text in progs]
    # Its prints go nowhere; stderr stays a real file, which its faulthandler calls need.
    with contextlib.redirect_stdout(io.StringIO()):
        _, results, _ = codegen_metrics(
            samples, codes, k_list=[1], num_process_evaluate=workers, timeout=int(timeout)
        )
    return [all(g > 0 for g in results[i][0]) for i in range(len(progs))]


def prompts_agree(rows) -> tuple[int, int]:
    """(prompts equal to the reference's, prompts compared) for the shipped task's template."""
    if "anthropic" not in sys.modules:  # the prompts package imports two constants of it
        try:
            import anthropic
        except ImportError:
            anthropic = sys.modules["anthropic"] = types.ModuleType("anthropic")
        for name in ("HUMAN_PROMPT", "AI_PROMPT"):
            if not hasattr(anthropic, name):
                setattr(anthropic, name, "")
    from livecodebench.benchmarks.code_generation import CodeGenerationProblem
    from livecodebench.lm_styles import LMStyle
    from livecodebench.prompts.code_generation import format_prompt_generation

    from evalpipe.tasks import load_task
    from evalpipe.tasks.prompts import PromptBuilder
    from evalpipe.tasks.records import build_record

    task = load_task("livecodebench")
    builder = PromptBuilder(task.config.prompt, str(task.path))
    same = 0
    for row in rows:
        ours = builder.build(build_record(row, task.config.fields, task.config.scorer), [])
        ref = format_prompt_generation(CodeGenerationProblem(**row), LMStyle.GenericOAIServer)
        same += ours == ref
    return same, len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="parallel programs, both sides")
    parser.add_argument("--timeout", type=float, default=6.0, help="per-test limit (LCB: 6 s)")
    parser.add_argument("--reps", type=int, default=2, help="timing repetitions (no loops)")
    parser.add_argument("--programs", type=int, default=None, help="only the first N programs")
    args = parse_args(parser, {"programs": 12, "timeout": 1.0, "reps": 1})
    if not (LCB_DIR / "livecodebench").is_dir() and not args.quick:
        print(LCB_MISSING)
        return 1
    sys.path.insert(0, str(LCB_DIR))
    have_reference = (LCB_DIR / "livecodebench").is_dir()
    rows = problems()
    progs = programs(rows)
    if args.programs:  # a spread over problems and categories, not one problem's programs
        progs = progs[:: max(1, len(progs) // args.programs)][: args.programs]
    print(machine(), load_average())
    counts = Counter(category for _, category, _ in progs)
    print(f"{len(progs)} programs on {len(rows)} problems: " + ", ".join(
        f"{c} {n}" for c, n in sorted(counts.items())))  # fmt: skip

    start = time.monotonic()
    ours = evalpipe_verdicts(rows, progs, args.workers, args.timeout)
    ours_s = time.monotonic() - start
    print(f"evalpipe: {sum(ours)} of {len(progs)} pass; {ours_s:.1f} s wall, "
          f"{len(progs) / ours_s:.1f} programs/s at {args.workers} workers")  # fmt: skip
    if not have_reference:
        print(f"the reference's side SKIPPED: {LCB_MISSING}")
        return 0
    same, compared = prompts_agree(rows)
    print(f"prompts equal to the reference's (GenericOAIServer): {same} of {compared}")
    start = time.monotonic()
    theirs = reference_verdicts(rows, progs, args.workers, args.timeout)
    theirs_s = time.monotonic() - start
    print(f"reference: {sum(theirs)} of {len(progs)} pass; {theirs_s:.1f} s wall, "
          f"{len(progs) / theirs_s:.1f} programs/s at {args.workers} workers")  # fmt: skip

    print("\n| category | programs | evalpipe passes | reference passes | verdicts equal |")
    print("|---|---|---|---|---|")
    for category in sorted(counts):
        idx = [i for i, p in enumerate(progs) if p[1] == category]
        agree = sum(ours[i] == theirs[i] for i in idx)
        print(f"| {category} | {len(idx)} | {sum(ours[i] for i in idx)} | "
              f"{sum(theirs[i] for i in idx)} | {agree} |")  # fmt: skip
    compared = [i for i, p in enumerate(progs) if p[1] not in KNOWN_DIFFERENCES]
    equal = sum(ours[i] == theirs[i] for i in compared)
    print(f"\nverdicts equal: {equal} of {len(compared)} (the known differences apart)")
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a != b and progs[i][1] not in KNOWN_DIFFERENCES:
            qid, category, text = progs[i]
            print(f"  DIFFERS {qid} {category}: evalpipe {a}, reference {b}\n{text}\n")

    quick_set = [p for p in progs if p[1] != "timing out"]
    timings = interleave(
        {
            "evalpipe": lambda: _timed(evalpipe_verdicts, rows, quick_set, args),
            "reference": lambda: _timed(reference_verdicts, rows, quick_set, args),
        },
        args.reps,
    )
    ours_m, theirs_m = median(timings["evalpipe"]), median(timings["reference"])
    print(f"\nwithout the {len(progs) - len(quick_set)} infinite loops, {len(quick_set)} programs, "
          f"medians of {args.reps}: evalpipe {len(quick_set) / ours_m:.1f} programs/s, reference "
          f"{len(quick_set) / theirs_m:.1f} programs/s; ratio evalpipe/reference: throughput "
          f"{theirs_m / ours_m:.2f}")  # fmt: skip
    return 0 if equal == len(compared) else 1


def _timed(verdicts, rows, progs, args) -> float:
    start = time.monotonic()
    verdicts(rows, progs, args.workers, args.timeout)
    return time.monotonic() - start


if __name__ == "__main__":
    sys.exit(main())
