"""τ²-bench: evalpipe's episodes and rewards against τ²'s own Orchestrator and evaluator.

    python bench/tau2_agreement.py                      # every airline and retail task
    python bench/tau2_agreement.py --domains mock       # (mock's tasks with their own scenario)
    python bench/tau2_agreement.py --quick              # the first QUICK tasks of each domain
    python bench/tau2_agreement.py --domains telecom --modes gt   # telecom's user acts too

No model: tests/tau2_scripted.py's scripted agent and user, the agent in two modes — "gt"
performs each task's ground-truth actions and says its communicate_info, "idle" does nothing
and says so — run through evalpipe's runner (the fake engine answering both sides) and through
τ²'s Orchestrator with the same script. Per task and mode it checks: the same message sequence,
the same final database hash, evalpipe's reward == τ²'s evaluate_simulation on τ²'s trajectory
== τ²'s evaluate_simulation re-run on the trajectory rebuilt from evalpipe's stored steps. It
prints per domain how many tasks score 1.0 by each (the counts must be equal), and for "idle"
that every task whose ground truth changes the database scores 0. Exit 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import benchlib  # noqa: F401 (this checkout and tests/ on the import path)
from tau2_scripted import orchestrated, run, subset

from evalpipe.records.episode import Ended
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import read_samples
from evalpipe.rundir.steps import stored_steps
from evalpipe.tasks.tau2.domain import Domain
from evalpipe.tasks.tau2.scoring import simulation_run
from evalpipe.tasks.tau2.trajectory import Limits, replay

QUICK = 5
MODES = ("gt", "idle")


def shape(message: Any) -> tuple:
    data = message if isinstance(message, dict) else message.model_dump()
    calls = [(c["name"], c["arguments"], c["requestor"]) for c in data.get("tool_calls") or ()]
    return (data["role"], data.get("content"), calls, data.get("error"), data.get("requestor"))


def distinct(domain: str) -> list[str]:
    """The domain's tasks whose scenario no earlier task has (the scripted user knows its task
    by its scenario)."""
    seen: set[str] = set()
    ids = []
    for task in Domain.load(domain, "base").tasks:
        if str(task.user_scenario) not in seen:
            seen.add(str(task.user_scenario))
            ids.append(task.id)
    return ids


def changes_db(task: Any, domain: Domain) -> bool:
    """Whether the task's ground-truth actions change the database."""
    from tau2.data_model.message import ToolCall

    env = domain.started(task)
    before = env.get_db_hash()
    for action in task.evaluation_criteria.actions or []:
        env.get_response(ToolCall(id="gt", name=action.name, arguments=action.arguments,
                                  requestor=action.requestor))  # fmt: skip
    return env.get_db_hash() != before


def check(domain: str, ids: list[str], mode: str, folder: Path) -> tuple[int, int, int, list[str]]:
    """(tasks, ours at 1.0, τ²'s at 1.0, disagreements) for one domain and mode."""
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    task = subset(domain, ids)
    modes = dict.fromkeys(ids, mode)
    assert run(folder, task, modes).status == "complete"
    found = {r.sample_id: r for r in read_samples(RunDir(folder).samples).records}
    steps = stored_steps(RunDir(folder).steps)
    ours_ones = theirs_ones = 0
    wrong = []
    for sample in task.samples():
        record = found[sample.id]
        recorded = steps[(task.name, sample.id)]
        theirs, environment = orchestrated(domain, task.task_of(sample), mode, Limits())
        ended = Ended(reason=str(record.extracted[0]))
        again = evaluate_simulation(
            simulation=simulation_run(task, sample, recorded, ended), task=task.task_of(sample),
            evaluation_type=EvaluationType.ALL, solo_mode=False, domain=domain,
        )  # fmt: skip
        reward = record.scores["reward"]
        ours_ones += reward == 1.0
        theirs_ones += theirs.reward_info.reward == 1.0
        messages = [shape(m) for m in replay(recorded, Limits()).messages]
        hash_ours = task.environment_after(sample, recorded).get_db_hash()
        expected = theirs.reward_info.reward
        if not (reward == again.reward == expected):
            wrong.append(f"{sample.id}: reward {reward}, re-scored {again.reward}, τ² {expected}")
        if messages != [shape(m) for m in theirs.messages]:
            wrong.append(f"{sample.id}: messages differ")
        if hash_ours != environment.get_db_hash():
            wrong.append(f"{sample.id}: final database differs")
        if mode == "idle" and reward != 0.0 and changes_db(task.task_of(sample), task.domain):
            wrong.append(f"{sample.id}: doing nothing scored {reward} on a task changing the DB")
    return len(ids), ours_ones, theirs_ones, wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", default="airline,retail")
    parser.add_argument("--modes", default=",".join(MODES), help="the agent's modes to run")
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK} tasks each")
    args = parser.parse_args()
    failed = False
    print(f"{'domain':8} {'mode':5} {'tasks':>5} {'evalpipe 1.0':>12} {'τ² 1.0':>7}  seconds")
    for domain in args.domains.split(","):
        ids = distinct(domain)[: QUICK if args.quick else None]
        for mode in args.modes.split(","):
            t0 = time.monotonic()
            with tempfile.TemporaryDirectory() as tmp:
                n, ours, theirs, wrong = check(domain, ids, mode, Path(tmp) / "run")
            verdict = "agree" if not wrong and ours == theirs else "DIFFERENT"
            print(f"{domain:8} {mode:5} {n:5} {ours:12} {theirs:7}  {time.monotonic() - t0:.0f}"
                  f"  {verdict}")  # fmt: skip
            for line in wrong:
                print("   ", line)
            failed = failed or verdict != "agree"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
