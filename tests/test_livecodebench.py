"""LiveCodeBench code generation: the shipped task on a fixture in LCB's published schema.

tests/fixtures/livecodebench/test.jsonl holds five problems written for these tests, shaped as
`livecodebench/code_generation_lite`'s rows: stdin/stdout problems (AtCoder, Codeforces) and
functional LeetCode ones with starter code, public tests as JSON, private tests as JSON or as
base64 → zlib → pickle, contest dates before, inside and after the shipped window.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pickle
import time
import zlib
from pathlib import Path

import pytest

from evalpipe.cli import main
from evalpipe.core.errors import ConfigError, DatasetError
from evalpipe.rundir.samplelog import read_json
from evalpipe.tasks import load_task, load_tasks
from evalpipe.tasks.config import SourceConfig
from evalpipe.tasks.configured import ConfiguredTask
from evalpipe.tasks.datasets import load_rows
from evalpipe.tasks.livecodebench import decode_tests, extract_solution, same_output

FIXTURE = Path(__file__).parent / "fixtures" / "livecodebench" / "test.jsonl"
SHIPPED = load_task("livecodebench")


def hub_cache(root: Path) -> Path:
    """The shipped task's release files in a hub file cache at `root` (HF_HUB_CACHE), the
    fixture's problems one per file in order; the snapshot folder."""
    source = SHIPPED.config.source
    repo = root / "datasets--livecodebench--code_generation_lite"
    snapshot = repo / "snapshots" / str(source.revision)
    snapshot.mkdir(parents=True)
    lines = FIXTURE.read_text().splitlines(keepends=True)
    for i, name in enumerate(source.files):  # release_v6: test.jsonl … test6.jsonl, in order
        (snapshot / name).write_text(lines[i] if i < len(lines) else "")
    return snapshot


IN_WINDOW = ["fx_sum", "fx_mean", "3456"]  # contest dates 2025-02-10, 2025-03-01, 2025-04-20


def fixture_task(timeout_s: float = 6.0) -> ConfiguredTask:
    """The shipped task on the fixture."""
    config = SHIPPED.config
    scorer = dataclasses.replace(config.scorer, timeout_s=timeout_s)
    source = SourceConfig(uri=f"jsonl:{FIXTURE}")
    return SHIPPED.with_config(dataclasses.replace(config, source=source, scorer=scorer))


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    """A copy of the shipped task file reading the fixture."""
    text = (SHIPPED.path).read_text()
    source = text[text.index("source:") : text.index("dates:")]
    copy = tmp_path / "livecodebench.yaml"
    copy.write_text(text.replace(source, f"source:\n  uri: jsonl:{FIXTURE}\n"))
    return copy


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\nIt reads the input."


SUM_OK = "n = int(input())\nprint(sum(map(int, input().split())))"
MEAN_OK = (  # fast input through sys.stdin.buffer; prints 2.5 where 2.50 is expected
    "import sys\ndata = sys.stdin.buffer.read().split(b'\\n')\n"
    "for line in data[1 : 1 + int(data[0])]:\n    xs = list(map(int, line.split()))\n"
    "    print(sum(xs) / len(xs))"
)
COUNT_OK = (
    "class Solution:\n    def countAbove(self, nums: List[int], k: int) -> int:\n"
    "        return sum(1 for x in nums if x > k)"
)

# Each would pass if the expected output were in the program's process or compared there.
COUNT_CHEAT_READ = (
    "class Solution:\n    def countAbove(self, nums, k):\n"
    "        import gc\n"
    "        for o in gc.get_objects():\n"
    "            if isinstance(o, dict) and 'output' in o and 'input' in o:\n"
    "                return _lcb_json.loads(o['output'])\n"
    "        return _lcb_json.loads(_lcb_test['output'])"
)
COUNT_CHEAT_EQ = (
    "class Always(int):\n    def __eq__(self, other): return True\n"
    "    def __ne__(self, other): return False\n    __hash__ = int.__hash__\n"
    "class Solution:\n    def countAbove(self, nums, k):\n        return Always(-1)"
)
COUNT_CHEAT_CRASH = (  # the first public test's answer, then the end of the program skipped
    "class Solution:\n    def countAbove(self, nums, k):\n"
    "        _lcb_result.write('2'); _lcb_result.flush(); raise SystemExit(0)"
)


@pytest.mark.parametrize(
    ("completions", "verdicts"),
    [
        # correct, the answer padded with whitespace, exit() after printing (the judge allows it)
        ({"fx_sum": [SUM_OK, SUM_OK.replace("print(", "print('  ', "),
                     SUM_OK + "\nexit(0)"]}, [True, True, True]),
        # wrong on a private test only, crashing, no code block at all
        ({"fx_sum": ["n = int(input())\nxs = input().split()\nprint(6 if n == 3 else 0)",
                     "print(1 / 0)", "I cannot solve this."]},
         [False, False, False]),
        ({"fx_mean": [MEAN_OK, MEAN_OK.replace("sum(xs) / len(xs)", "round(sum(xs) / len(xs))")]},
         [True, False]),
        # functional: right, right with prints of its own, wrong answer, no such method
        ({"3456": [COUNT_OK, COUNT_OK.replace("return", "print('debug', k); return"),
                   COUNT_OK.replace("sum(1 for x in nums if x > k)", "len(nums)"),
                   "class Solution:\n    pass"]}, [True, True, False, False]),
        # functional cheats: echo the expected output if the program can see it, answer every
        # comparison "equal", write a right answer on the result channel and stop early
        ({"3456": [COUNT_CHEAT_READ, COUNT_CHEAT_EQ, COUNT_CHEAT_CRASH]}, [False, False, False]),
    ],
    ids=["stdin-pass", "stdin-fail", "decimals", "functional", "functional-cheats"],
)  # fmt: skip
def test_verdicts_follow_the_judges_rules(completions, verdicts) -> None:
    task = fixture_task()
    samples = {s.id: s for s in task.samples()}
    ((sample_id, texts),) = completions.items()
    sample = samples[sample_id]
    # Each completion alone (its verdict), then all as the n completions of one sample.
    scored = task.score_many(
        [(sample, [fenced(t)]) for t in texts] + [(sample, [fenced(t) for t in texts])]
    )
    assert [s.scores["pass@1"] == 1.0 for s in scored[:-1]] == verdicts
    assert scored[-1].scores["pass@1"] == pytest.approx(sum(verdicts) / len(verdicts))
    assert scored[-1].extracted == tuple(t.strip() for t in texts)


def test_an_infinite_loop_costs_one_time_limit_not_one_per_test() -> None:
    task = fixture_task(timeout_s=1.0)
    (sample,) = [s for s in task.samples() if s.id == "fx_sum"]
    start = time.monotonic()
    assert task.score(sample, [fenced("while True:\n    pass")]).scores["pass@1"] == 0.0
    assert time.monotonic() - start < 2.9  # 3 tests: the first times out, the rest never run


@pytest.mark.parametrize(
    ("got", "expected", "same"),
    [
        ("6\n", "6", True),
        ("  6  \n\n", "6\n", True),
        ("1 2\r\n3\n", "1 2\n3", True),
        ("2.5\n", "2.50\n", True),
        ("1e2", "100", True),
        ("1 2", "1  2", True),  # lines of numbers compare as lists of decimals
        ("a  b", "a b", False),  # other lines must match exactly once stripped
        ("6\n7", "6", False),
        ("6", "6\n\n7", False),
        ("0.333", "0.3333", False),
        ("", "", True),
    ],
)
def test_output_comparison(got: str, expected: str, same: bool) -> None:
    assert same_output(got, expected) is same


def test_solution_extraction_takes_the_first_python_block() -> None:
    assert extract_solution("```python\na = 1\n```\n```python\nb = 2\n```") == "a = 1"
    assert extract_solution("  print(3)  ") == "print(3)"  # no block: the whole text
    assert extract_solution("```\nx = 1\n```") == "```\nx = 1\n```"  # only ```python counts


def test_private_tests_decode_from_json_and_from_base64_zlib_pickle() -> None:
    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    packed = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()
    assert decode_tests(packed, what="p") == tests == decode_tests(json.dumps(tests), what="p")


class _Hostile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_hostile_pickle_is_refused_before_it_runs(tmp_path: Path) -> None:
    planted = tmp_path / "pwned"
    packed = base64.b64encode(zlib.compress(pickle.dumps(_Hostile(planted)))).decode()
    with pytest.raises(DatasetError, match=r"refused to unpickle.*names posix\.system"):
        decode_tests(packed, what="problem 'x' private tests")
    assert not planted.exists()
    # Through a task: the sample's problem is named, and no program runs.
    row = json.loads(FIXTURE.read_text().splitlines()[0])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**row, "private_test_cases": packed}) + "\n")
    task = SHIPPED.with_config(
        dataclasses.replace(SHIPPED.config, source=SourceConfig(uri=f"jsonl:{bad}"), dates=None)
    )
    (sample,) = task.samples()
    with pytest.raises(DatasetError, match="'fx_sum' private tests: refused"):
        task.score(sample, [fenced(SUM_OK)])
    assert not planted.exists()


def test_the_window_keeps_contests_inside_it_and_the_command_line_moves_it(
    task_file: Path,
) -> None:
    assert [s.id for s in fixture_task().samples()] == IN_WINDOW
    (moved,) = load_tasks(tasks=[str(task_file)], since="2024-01-01")
    assert [s.id for s in moved.samples()] == ["fx_sum", "fx_mean", "3456", "3001"]
    (moved,) = load_tasks(tasks=[str(task_file)], until="2025-12-31")
    assert [s.id for s in moved.samples()] == [*IN_WINDOW, "fx_rev"]
    assert moved.definition()["dates"] == {
        "field": "contest_date",
        "since": "2025-02-01",
        "until": "2025-12-31",
    }
    with pytest.raises(ConfigError, match=r"since 2025-06-01 is after dates\.until 2025-05-01"):
        load_tasks(tasks=[str(task_file)], since="2025-06-01")
    with pytest.raises(ConfigError, match=r"none of the chosen tasks \(arithmetic\) has one"):
        load_tasks(tasks=["arithmetic"], since="2025-01-01")


def test_the_release_files_are_read_from_the_hub_cache_at_the_pinned_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    source = SHIPPED.config.source
    assert source.revision and len(source.revision) == 40 and source.files[0] == "test.jsonl"
    snapshot = hub_cache(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    rows = load_rows("livecodebench", source, split="test", config=None, base_dir=tmp_path)
    assert [r["question_id"] for r in rows] == ["fx_sum", "fx_mean", "3456", "3001", "fx_rev"]
    (snapshot / "test6.jsonl").unlink()
    with pytest.raises(DatasetError, match=r"file 'test6.jsonl' is not available.*tasks fetch"):
        load_rows("livecodebench", source, split="test", config=None, base_dir=tmp_path)


def test_run_end_to_end_with_a_moved_window(task_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", str(task_file),
            "--since", "2024-01-01", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    summary = read_json(out / "summary.json")
    task = summary["tasks"]["livecodebench"]
    assert summary["n_done"] == 4 and "pass@1" in json.dumps(task)
    definition = read_json(out / "manifest.json")["config"]["definitions"]["livecodebench"]
    assert definition["dates"]["since"] == "2024-01-01"  # a resumed run must ask for the same


def test_a_window_compares_days_and_names_what_is_wrong() -> None:
    from evalpipe.tasks.window import DateWindow

    window = DateWindow(field="contest_date", since="2025-02-01", until="2025-05-01")
    assert window.keeps({"contest_date": "2025-05-01T23:59:00"}, "t")
    assert not window.keeps({"contest_date": "2025-05-02T00:00:00"}, "t")
    assert window.keeps({"contest_date": "2025-02-01"}, "t")
    with pytest.raises(DatasetError, match=r"dates\.field 'contest_date' is not a column"):
        window.keeps({"date": "2025-03-01"}, "t")
    with pytest.raises(ValueError, match=r"dates.since '1st of May' is not a date; write it as"):
        DateWindow(field="d", since="1st of May")
    with pytest.raises(SystemExit):  # argparse's usage error, exit 2
        main(["run", "--preset", "tiny_random", "--backend", "fake", "--since", "May"])


def test_the_instructions_come_from_the_pinned_package_not_this_repository() -> None:
    from evalpipe.tasks.packaged import package_constant

    template = SHIPPED.config.prompt.template
    module, name = "livecodebench/prompts/code_generation.py", "FORMATTING_WITHOUT_STARTER_CODE"
    # A class attribute, read from the source without importing the package.
    text = package_constant(module, f"PromptConstants.{name}")
    assert text.startswith("Read the inputs from stdin") and text not in template
    (stdin_sample, *_) = fixture_task().samples()
    assert text in stdin_sample.prompt[0]["content"]
