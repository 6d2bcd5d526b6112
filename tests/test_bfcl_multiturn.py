"""BFCL's multi-turn categories as episodes, without a model: a scripted model issuing the
ground-truth calls through the whole runner scores 1.0, a step that outgrows the context ends
its entry as a refusal, a run killed between steps resumes to the same trajectories and scores,
BFCL's step limit and held-out functions as its handler applies them, and a crafted call that
writes a file does so only in the sandbox."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from bfcl_scripted import DONE, records, run, step_rows, subset

from evalpipe.catalog.taskrefs import expand_refs
from evalpipe.records.episode import Ended, Step
from evalpipe.rundir.layout import RunDir
from evalpipe.tasks.bfcl.kind import KIND
from evalpipe.tasks.bfcl.multiturn import BfclMultiTurnTask
from evalpipe.tasks.kindbase import LoadOptions

REPO = Path(__file__).resolve().parents[1]
# Entries of four turns each (so the scripted ones finish together, scored in one batch) whose
# ground truth passes keywords only: BFCL's prompting decoder drops positional arguments.
SCRIPTED = ["multi_turn_base_1", "multi_turn_base_8", "multi_turn_base_14", "multi_turn_base_22"]
CHATTY = "multi_turn_base_25"


@pytest.fixture(scope="module")
def tasks() -> dict[str, BfclMultiTurnTask]:
    refs = expand_refs(["bfcl:multi_turn_base", "multi_turn_miss_func"])
    return {t.bfcl_category: t for t in KIND.load(refs, LoadOptions()).tasks}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def whole(tasks: dict[str, BfclMultiTurnTask], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted run of the scripted model."""
    out = tmp_path_factory.mktemp("whole")
    task = subset(tasks["multi_turn_base"], [*SCRIPTED, CHATTY])
    assert run(out, task, CHATTY, delay_s=0.0).status == "complete"
    return out


def test_the_ground_truth_calls_score_one_and_an_outgrown_context_ends_its_entry(
    whole: Path,
) -> None:
    found = records(whole)
    for sample_id in SCRIPTED:
        record = found[sample_id]
        assert record["extracted"] == ["valid"]
        assert record["scores"] == {"accuracy": 1.0, "sandbox_failed": 0.0, "step_limit": 0.0}
        # Four turns, each a step of calls and a step in words that ends it.
        assert len(record["turns"]) == 8 and record["turns"][1::2] == [DONE] * 4
    document = json.loads((whole / "bfcl_results.json").read_text())
    assert document["categories"]["multi_turn_base"]["correct"] == len(SCRIPTED)
    # The chatty entry's first answer ended its turn; the second turn could not hold it.
    chatty = found[CHATTY]
    assert chatty["refusal"]["reason"] == "context_overflow" and chatty["scores"]["accuracy"] == 0
    assert len(chatty["turns"]) == 1
    recorded = [s for s in step_rows(whole) if s["sample_id"] == SCRIPTED[0]]
    assert [s["index"] for s in recorded] == list(range(8))
    first = recorded[0]["outcome"]
    assert first["turn"] == 0 and first["calls"] and len(first["results"]) == len(first["calls"])
    assert recorded[1]["outcome"]["calls"] == [] and recorded[1]["outcome"]["decode_error"]
    assert all(s["outcome"].get("replay_equal", True) for s in step_rows(whole))


def test_a_run_killed_between_steps_resumes_to_the_same_trajectories(
    tasks: dict[str, BfclMultiTurnTask], whole: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    argv = [sys.executable, str(REPO / "tests" / "bfcl_scripted.py"), str(out), CHATTY, *SCRIPTED]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    log = tmp_path / "stderr.txt"
    with log.open("w") as err:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 120
    # Killed once two rounds of steps are recorded: every conversation is under way.
    while not (RunDir(out).steps.exists() and len(step_rows(out)) >= 2 * len(SCRIPTED)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the run was not killed between steps: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(records(out) if RunDir(out).samples.exists() else {}) < len(SCRIPTED) + 1
    task = subset(tasks["multi_turn_base"], [*SCRIPTED, CHATTY])
    assert run(out, task, CHATTY, delay_s=0.0).status == "complete"  # the resume

    assert records(out).keys() == records(whole).keys()
    for sample_id, record in records(whole).items():
        resumed = records(out)[sample_id]
        for key in ("turns", "completions", "extracted", "scores", "refusal", "prompt_tokens"):
            assert resumed.get(key) == record.get(key), (sample_id, key)

    def keyed(out: Path) -> list[tuple]:
        return sorted((s["sample_id"], s["index"], s["text"], json.dumps(s["outcome"]))
                      for s in step_rows(out))  # fmt: skip

    assert keyed(out) == keyed(whole)  # no step duplicated or dropped


def test_bfcls_step_limit_held_out_functions_and_failed_entries(
    tasks: dict[str, BfclMultiTurnTask],
) -> None:
    task = tasks["multi_turn_base"]
    sample = task.samples(1)[0]
    limit = task.entries[0]["step_limit"]

    def calling(i: int) -> Step:
        return Step(index=i, text="[ls()]", prompt_tokens=1, completion_tokens=1,
                    outcome={"turn": 0, "calls": ["ls()"], "results": ["{}"]})  # fmt: skip

    # BFCL counts the steps that executed calls and quits once the count passes its limit.
    at_limit = task.next_request(sample, [calling(i) for i in range(limit)])
    assert isinstance(at_limit, list) and at_limit[-1] == {"role": "tool", "name": "ls()",
                                                           "content": "{}"}  # fmt: skip
    assert task.next_request(sample, [calling(i) for i in range(limit + 1)]) == Ended(
        reason="step_limit"
    )

    # A step whose calls broke the sandboxed process ends its entry; it and an entry whose step
    # was refused fail without BFCL's checker: a failed inference is a string to BFCL.
    broke = Step(
        index=0,
        text="[ls()]",
        prompt_tokens=1,
        completion_tokens=1,
        outcome={"turn": 0, "calls": [], "results": [], "sandbox_failed": "killed"},
    )
    assert task.next_request(sample, [broke]) == Ended(reason="sandbox_failed")
    failed, refused = task.score_episodes(
        [
            (sample, [broke], Ended(reason="sandbox_failed")),
            (sample, [], Ended(reason="context_overflow")),
        ]
    )
    assert failed.extracted == ("sandbox_failed",) and failed.scores["sandbox_failed"] == 1.0
    assert refused.extracted == ("multi_turn:inference_error",)
    assert failed.scores["accuracy"] == refused.scores["accuracy"] == 0.0

    # miss_func: the held-out function is offered at the turn BFCL offers it.
    missing = tasks["multi_turn_miss_func"]
    entry = next(e for e in missing.entries if e["id"] == "multi_turn_miss_func_0")
    sample = next(s for s in missing.samples() if s.id == entry["id"])
    words = [Step(index=i, text=DONE, prompt_tokens=1, completion_tokens=1,
                  outcome={"turn": i, "calls": [], "results": []}) for i in range(3)]  # fmt: skip
    system = missing.next_request(sample, [])[0]["content"]
    assert '"name": "sort"' not in system and '"name": "grep"' in system
    offered = missing.next_request(sample, words)[-1]
    assert offered["role"] == "user" and "'name': 'sort'" in offered["content"]


def test_the_estimate_asks_for_each_entrys_first_request(
    tasks: dict[str, BfclMultiTurnTask],
) -> None:
    task = tasks["multi_turn_miss_func"]
    ask = KIND.ask(task)
    first = max(len(json.dumps([m["content"] for m in e["turns"][0]], ensure_ascii=False).encode())
                for e in task.entries)  # fmt: skip
    assert (ask.name, ask.max_tokens, ask.prompt_bytes) == (task.name, 4096, first)


def test_a_crafted_call_writes_its_file_in_the_sandbox_only(
    tasks: dict[str, BfclMultiTurnTask],
) -> None:
    marker = Path("/tmp") / f"ep-bfcl-step-{uuid.uuid4().hex}"
    task = tasks["multi_turn_base"]
    sample = task.samples(1)[0]
    text = f"[open(file='{marker}', mode='w')]"
    new = Step(index=0, text=text, prompt_tokens=1, completion_tokens=1)
    (outcome,) = task.resolve([(sample, [], new)])
    assert outcome["calls"] == [f"open(file='{marker}', mode='w')"]
    assert "TextIOWrapper" in outcome["results"][0]  # BFCL's executor evaluated it
    assert not marker.exists()
