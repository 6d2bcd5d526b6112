"""LiveCodeBench code generation: its test cases, its programs and its judge's rules.

Protocol (LiveCodeBench, Jain et al. 2024; the grader of the `nvidia-livecodebench` package,
which bench/lcb_agreement.py runs beside this one):

- a problem's tests are its public tests, then its private ones. Private tests are stored as
  JSON, or as base64 → zlib → pickle of that JSON; the pickle is loaded by a plain-data
  unpickler (tasks/safepickle.py), never `pickle.loads`;
- stdin/stdout problems (no `func_name` in the metadata) run the program with the test's input
  on stdin. The output matches when, after stripping the whole text and each line, it has as
  many lines as the expected output and each line is equal, or equal as a list of decimal
  numbers ("1.50 2" matches "1.5 2.0"). `exit()` after printing is allowed;
- functional (LeetCode-style) problems call `Solution().FUNC_NAME(*args)`, each input line
  being one JSON argument, and compare the result with the JSON output by `==` (a tuple counts
  as a list). The program receives only the input and writes its result as JSON; evalpipe
  compares it outside the program, so the expected output never enters the model's process
  and no object the model returns can answer the comparison itself;
- every program starts with the judge's standard imports (`from math import *`, …) and a
  recursion limit of 50,000;
- each test has its own time limit (the task's `timeout_s`, 6 s in LiveCodeBench); a solution
  passes when every test passes, and its tests stop at the first failure.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from evalpipe.core.errors import DatasetError
from evalpipe.sandbox.pool import Limits, Program, SandboxResult, run_in_order
from evalpipe.tasks.base import Scored
from evalpipe.tasks.safepickle import decompress, plain_loads
from evalpipe.tasks.scorers import pass_at_k

Target = dict[str, Any]
# The modules the judge imports by name and star-imports before every program, so a solution
# may call `gcd`, `deque` or `sys.stdin` without importing them.
PRELUDE_MODULES = (
    "string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
    "statistics", "itertools", "functools", "operator", "io", "sys", "json",
)  # fmt: skip
PRELUDE = (
    "".join(f"from {m} import *\n" for m in PRELUDE_MODULES)
    + "from builtins import *\nfrom typing import *\n"
    + "".join(f"import {m}\n" for m in PRELUDE_MODULES)
    + "sys.setrecursionlimit(50000)\nsys.set_int_max_str_digits(50000)\n"
)
# The functional harness reads its arguments from stdin before the solution can touch stdin,
# and keeps the real stdout for its result: the solution's own prints go to stderr.
FUNCTIONAL_HEAD = (
    "import json as _lcb_json, os as _lcb_os\n"
    "_lcb_input = sys.stdin.read()\n"
    "_lcb_result = open(_lcb_os.dup(1), 'w', encoding='utf-8')\n"
    "_lcb_os.dup2(2, 1)\n"
)
# LeetCode solutions are methods of `class Solution`; the judge calls a plain function else.
FUNCTIONAL_TAIL = """
_lcb_args = [_lcb_json.loads(line) for line in _lcb_input.split("\\n")]
_lcb_got = {owner}.{fn_name}(*_lcb_args)
if isinstance(_lcb_got, tuple):
    _lcb_got = list(_lcb_got)
_lcb_result.write(_lcb_json.dumps(_lcb_got))
_lcb_result.flush()
"""
_PYTHON_BLOCK = re.compile(r"```python\n(.+?)\n```", re.DOTALL)


def extract_solution(completion: str) -> str:
    """The first ```python block of a completion (stripped), else the whole text stripped."""
    found = _PYTHON_BLOCK.search(completion)
    return (found.group(1) if found else completion).strip()


def decode_tests(raw: object, *, what: str) -> list[dict[str, str]]:
    """A test-case column: JSON, or base64 → zlib → pickle of JSON (LiveCodeBench's private
    tests), as [{"input", "output", "testtype"}, …]; DatasetError naming `what` otherwise."""
    if not isinstance(raw, str):
        raise DatasetError(f"{what}: expected text, got {type(raw).__name__}")
    text = raw if raw.lstrip().startswith("[") else _unpack(raw, what)
    try:
        tests = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than Python's
        raise DatasetError(f"{what}: not JSON ({type(exc).__name__}: {str(exc)[:200]})") from exc
    if not isinstance(tests, list) or not all(
        isinstance(t, dict) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str)
        for t in tests
    ):
        raise DatasetError(f"{what}: expected a list of {{input, output}} strings")
    return tests


def _unpack(raw: str, what: str) -> str | bytes:
    try:
        packed = base64.b64decode(raw.encode("utf-8"), validate=True)
    except ValueError as exc:  # binascii.Error and UnicodeEncodeError are ValueErrors
        raise DatasetError(f"{what} is neither JSON nor base64 → zlib → pickle ({exc})") from exc
    text = plain_loads(decompress(packed, what=what), what=what)
    if not isinstance(text, str | bytes):
        raise DatasetError(f"{what}: the pickle holds {type(text).__name__}, not JSON text")
    return text


def problem(record: dict[str, Any]) -> Target:
    """The scorer's reference for one dataset row (tests still encoded: decoded when scored)."""
    metadata = record["metadata"]
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata or "{}")
        except ValueError as exc:
            raise DatasetError(f"field 'metadata' is not JSON: {exc}") from exc
    if not isinstance(metadata, dict):
        raise DatasetError(f"field 'metadata' must be a JSON object, got {metadata!r}")
    return {
        "question_id": str(record.get("question_id", "")),
        "public": record["public_test_cases"],
        "private": record["private_test_cases"],
        "fn_name": metadata.get("func_name"),
    }


def test_cases(target: Target) -> list[dict[str, str]]:
    """The public, then the private tests of a problem."""
    what = f"LiveCodeBench problem {target['question_id']!r}"
    return decode_tests(target["public"], what=f"{what} public tests") + decode_tests(
        target["private"], what=f"{what} private tests"
    )


def programs(code: str, target: Target, tests: Sequence[dict[str, str]]) -> list[Program]:
    """One sandbox program per test: the solution, run on that test's input."""
    fn_name = target["fn_name"]
    if fn_name is None:
        source = PRELUDE + code + "\n"
        return [
            Program(source=source, stdin=t["input"], capture_stdout=True, exit_ok=True)
            for t in tests
        ]
    if not fn_name.isidentifier():
        raise DatasetError(f"func_name {fn_name!r} of {target['question_id']!r} is not a name")
    owner = "Solution()" if "class Solution" in code else "sys.modules[__name__]"
    tail = FUNCTIONAL_TAIL.format(owner=owner, fn_name=fn_name)
    source = PRELUDE + FUNCTIONAL_HEAD + code + "\n" + tail
    return [Program(source=source, stdin=t["input"], capture_stdout=True) for t in tests]


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(word) for word in line.split()]
    except InvalidOperation:
        return None


def same_output(got: str, expected: str) -> bool:
    """The judge's comparison of a program's stdout with a test's expected output."""
    ours, theirs = _lines(got), _lines(expected)
    if len(ours) != len(theirs):
        return False
    for a, b in zip(ours, theirs, strict=True):
        if a == b:
            continue
        da, db = _decimals(a), _decimals(b)
        if da is None or db is None or da != db:
            return False
    return True


def same_result(got: str, expected: str) -> bool:
    """A functional program's result, as the JSON it wrote, against the test's JSON output.

    Both sides are decoded to plain data here, in evalpipe's process: what the program wrote is
    only text, so it cannot carry an object whose `==` lies."""
    try:
        return json.loads(got) == json.loads(expected)
    except ValueError:
        return False


def test_passed(result: SandboxResult, test: dict[str, str], functional: bool) -> bool:
    """Whether one sandbox result passes its test."""
    if not result.passed or result.stdout_truncated:
        return False
    compare = same_result if functional else same_output
    return compare(result.stdout or "", test["output"])


class LiveCodeBenchScorer:
    """pass@k over n completions; each completion's tests run in order in the sandbox."""

    # LiveCodeBench sets no memory limit of its own; its programs may build large tables.
    ADDRESS_SPACE_MIB = 4096

    def __init__(self, ks: Sequence[int], timeout_s: float, workers: int | None = None) -> None:
        self._ks = tuple(ks)
        self._timeout_s = timeout_s
        self._workers = workers  # None: the cores this process may use

    def score_many(self, items: Sequence[tuple[Target, Sequence[str]]]) -> list[Scored]:
        codes = [[extract_solution(t) for t in texts] for _, texts in items]
        tests = [test_cases(target) for target, _ in items]
        groups, owners = [], []
        for i, (target, _) in enumerate(items):
            for code in codes[i]:
                groups.append(programs(code, target, tests[i]))
                owners.append(i)

        def go_on(group: int, index: int, result: SandboxResult) -> bool:
            i = owners[group]
            return test_passed(result, tests[i][index], items[i][0]["fn_name"] is not None)

        results = run_in_order(
            groups,
            go_on=go_on,
            workers=self._workers,
            timeout_s=self._timeout_s,
            limits=Limits(address_space_mib=self.ADDRESS_SPACE_MIB),
        )
        passed = [
            len(ran) == len(groups[g]) and (not ran or go_on(g, len(ran) - 1, ran[-1]))
            for g, ran in enumerate(results)
        ]
        out, position = [], 0
        for item_codes in codes:
            n = len(item_codes)
            c = sum(passed[position : position + n])
            position += n
            scores = {f"pass@{k}": pass_at_k(n, c, k) for k in self._ks if k <= n}
            out.append(Scored(extracted=tuple(item_codes), scores=scores))
        return out
