"""τ²-bench episodes on evalpipe's runner, without a model: a scripted agent and user (the fake
engine answering both sides, tau2_scripted.py) against τ²'s own Orchestrator playing the same
script — the same messages, final databases and rewards, and rewards equal to τ²'s
evaluate_simulation re-run from the stored records, on ground-truth runs and on scripted
failures; τ²'s limits; a run killed between steps resumes to the same trajectories; and one
clear message for each bad input."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tau2_scripted import UNKNOWN_TOOL, ScriptedModel, orchestrated, run, subset

from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.selection import Selection
from evalpipe.catalog.taskrefs import expand_refs
from evalpipe.core.errors import ConfigError, MissingDependencyError
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.episode import Ended, Step
from evalpipe.records.request import Request
from evalpipe.records.sampling import SamplingSettings
from evalpipe.records.tools import ToolCall, ToolCalls
from evalpipe.run.episodes import USER_SIM_ID
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.run.runoptions import RunnerOptions, UserSimOptions
from evalpipe.run.usersim import Routed, check_user_sim
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.steps import stored_steps
from evalpipe.tasks.kindbase import LoadOptions
from evalpipe.tasks.tau2 import install
from evalpipe.tasks.tau2.kind import KIND, chosen
from evalpipe.tasks.tau2.scoring import pass_hat_k, simulation_run
from evalpipe.tasks.tau2.task import Tau2Task
from evalpipe.tasks.tau2.trajectory import Limits, replay

REPO = Path(__file__).resolve().parents[1]
# Runs of τ² tasks (with scenarios of their own within a run) and the scripted agent's mode on
# each: ground truth, doing nothing on a task that changes the database, changing an argument,
# calling a tool the domain lacks, answering nothing, and repeating a call until τ²'s step limit.
CASES = {
    "mock": ("mock", {"create_task_1": "gt", "update_task_1": "idle", "impossible_task_1": "gt",
                      "update_task_with_initialization_actions": "wrong_args"}, Limits()),
    "failing": ("mock", {"update_task_with_initialization_data": "wrong_tool",
                         "create_task_1_with_env_assertions": "empty"}, Limits()),
    "looping": ("mock", {"create_task_1": "loop"}, Limits(max_steps=8)),
    "airline": ("airline", {"5": "gt"}, Limits()),
}  # fmt: skip


def records(out: Path) -> dict[str, dict[str, Any]]:
    rows = [json.loads(x) for x in RunDir(out).samples.read_text().splitlines()]
    assert len(rows) == len({r["sample_id"] for r in rows}), "a sample was written twice"
    return {r["sample_id"]: r for r in rows}


def shape(message: Any) -> tuple:
    """What two runs' messages must agree on (ids and timestamps are each run's own)."""
    data = message if isinstance(message, dict) else message.model_dump()
    calls = [(c["name"], c["arguments"], c["requestor"]) for c in data.get("tool_calls") or ()]
    return (data["role"], data.get("content"), calls, data.get("error"), data.get("requestor"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Tau2Task, Path]]:
    out = {}
    for name, (domain, modes, limits) in CASES.items():
        task = subset(domain, list(modes), limits)
        folder = tmp_path_factory.mktemp(name)
        assert run(folder, task, modes).status == "complete"
        out[name] = (task, folder)
    return out


def test_evalpipe_and_tau2s_orchestrator_play_the_same_episodes_to_the_same_rewards(
    runs: dict[str, tuple[Tau2Task, Path]],
) -> None:
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    modes = {(name, t): m for name, (_, given, _) in CASES.items() for t, m in given.items()}
    rewards = []
    for (where, task_id), mode in modes.items():
        task, out = runs[where]
        sample = next(s for s in task.samples() if s.target["task_id"] == task_id)
        record = records(out)[sample.id]
        steps = stored_steps(RunDir(out).steps)[(task.name, sample.id)]
        theirs, environment = orchestrated(task.domain.name, task.task_of(sample), mode,
                                           task.limits)  # fmt: skip
        ended = Ended(reason=record["extracted"][0])
        assert ended.reason == theirs.termination_reason.value, (where, task_id)
        if mode != "empty":  # τ²'s loop raises on the empty message and keeps no messages
            ours = replay(steps, task.limits).messages
            assert [shape(m) for m in ours] == [shape(m) for m in theirs.messages]
            ours_env = task.environment_after(sample, steps)
            assert ours_env.get_db_hash() == environment.get_db_hash(), (where, task_id)
        # τ²'s evaluate_simulation on the stored records gives the recorded reward.
        again = evaluate_simulation(
            simulation=simulation_run(task, sample, steps, ended), task=task.task_of(sample),
            evaluation_type=EvaluationType.ALL, solo_mode=False, domain=task.domain.name,
        )  # fmt: skip
        assert record["scores"]["reward"] == again.reward == theirs.reward_info.reward
        rewards.append((mode, record["scores"]["reward"], ended.reason))
    # Doing nothing on a task that changes the database fails; the early ends are τ²'s.
    assert ("idle", 0.0, "user_stop") in rewards and ("wrong_args", 0.0, "user_stop") in rewards
    assert ("empty", 0.0, "agent_error") in rewards and ("loop", 0.0, "max_steps") in rewards
    assert [r for m, r, _ in rewards if m == "gt"] == [1.0] * 3
    assert ("wrong_tool", 0.0, "user_stop") in rewards


def test_a_call_to_an_unknown_tool_is_recorded_as_tau2_records_it(
    runs: dict[str, tuple[Tau2Task, Path]],
) -> None:
    task, out = runs["failing"]
    steps = stored_steps(RunDir(out).steps)[(task.name, "update_task_with_initialization_data#0")]
    called = next(s for s in steps if s.calls is not None and s.calls.calls)
    assert called.calls.calls[0].name == UNKNOWN_TOOL
    assert called.outcome["results"] == [
        {"content": f"Error: Tool '{UNKNOWN_TOOL}' not found.", "error": True}
    ]


def test_the_results_document_has_each_domains_reward_and_pass_hat_k(
    runs: dict[str, tuple[Tau2Task, Path]],
) -> None:
    _, out = runs["mock"]
    document = json.loads((out / "tau2_results.json").read_text())
    mock = document["domains"]["mock"]
    assert mock["episodes"] == 4 and mock["avg_reward"] == 0.5
    assert mock["pass_hat_k"] == {"1": 0.5}
    # One trial: each task passes or not, so Wilson's interval on 2 of 4 (95 %).
    assert mock["pass_hat_k_ci"] == {"1": {"ci_low": pytest.approx(0.15004, abs=1e-5),
                                           "ci_high": pytest.approx(0.84996, abs=1e-5),
                                           "ci_method": "wilson"}}  # fmt: skip


def test_pass_hat_k_over_trials_gets_a_bootstrap_interval_over_tasks() -> None:
    from evalpipe.core.intervals import bootstrap_mean
    from evalpipe.tasks.tau2.results import results_document

    trials = {"a": [1.0, 1.0, 0.0], "b": [1.0, 1.0, 1.0], "c": [0.0, 0.0, 1.0], "d": [0.0] * 3}
    scores = {"tau2_airline": [(f"{t}#{k}", {"reward": r}) for t, rs in trials.items()
                               for k, r in enumerate(rs)]}  # fmt: skip
    airline = results_document(["tau2_airline"], scores)["domains"]["airline"]
    # pass^2 per task: comb(c, 2) / comb(3, 2) = 1/3, 1, 0, 0; its interval a bootstrap.
    low, high = bootstrap_mean([1 / 3, 1.0, 0.0, 0.0])
    assert airline["pass_hat_k"]["2"] == pytest.approx(1 / 3)
    assert airline["pass_hat_k_ci"]["2"] == {"ci_low": pytest.approx(low),
                                             "ci_high": pytest.approx(high),
                                             "ci_method": "bootstrap"}  # fmt: skip
    assert low < airline["pass_hat_k"]["2"] < high
    assert set(airline["pass_hat_k_ci"]) == {"1", "2", "3"}


def test_pass_hat_k_is_tau2s() -> None:
    install.import_tau2()  # τ² on the import path, as the kind puts it
    from tau2.metrics.agent_metrics import pass_hat_k as theirs

    rewards = {"a": [1.0, 0.0, 1.0, 1.0], "b": [0.0, 0.0, 1.0], "c": [1.0 - 1e-7, 1.0, 1.0]}
    expected = {k: sum(theirs(len(r), sum(abs(x - 1) <= 1e-6 for x in r), k)
                       for r in rewards.values()) / 3 for k in (1, 2, 3)}  # fmt: skip
    assert pass_hat_k(rewards) == pytest.approx(expected) and len(expected) == 3


def step(index: int, by: str, text: str = "", calls: tuple[ToolCall, ...] = (),
         errors: tuple[bool, ...] = ()) -> Step:  # fmt: skip
    parsed = ToolCalls(calls=calls, content="" if calls else text)
    results = [{"content": "r", "error": e} for e in errors]
    return Step(index=index, text=text, prompt_tokens=1, completion_tokens=1, by=by,  # type: ignore[arg-type]
                calls=parsed, outcome={"results": results} if calls else {})  # fmt: skip


def test_tau2s_termination_rules() -> None:
    call = ToolCall(name="f", arguments="{}")
    hello, words = step(0, "user_sim", "hi"), step(1, "model", "ok")
    stop = step(2, "user_sim", "thanks ###STOP###")
    assert replay([hello, words, stop], Limits()).ended == Ended(reason="user_stop")
    assert replay([hello, words], Limits()).next_by == "user_sim"
    # Each generation and each batch of tool results is a step; the limit overrides a stop.
    assert replay([hello, words, stop], Limits(max_steps=3)).ended == Ended(reason="max_steps")
    failing = [hello, *(step(i, "model", calls=(call,), errors=(True,)) for i in range(1, 4))]
    assert replay(failing, Limits(max_errors=3)).ended == Ended(reason="too_many_errors")
    assert replay(failing, Limits(max_errors=4)).next_by == "model"
    assert replay([hello, step(1, "model", "  ")], Limits()).ended == Ended(reason="agent_error")
    assert replay([step(0, "user_sim", "")], Limits()).ended == Ended(reason="user_error")
    not_object = ToolCall(name="f", arguments="[1]")
    bad = step(1, "model", calls=(not_object,), errors=(False,))
    assert replay([hello, bad], Limits()).ended == Ended(reason="agent_error")


def test_a_run_killed_between_steps_resumes_to_the_same_trajectories(
    runs: dict[str, tuple[Tau2Task, Path]], tmp_path: Path
) -> None:
    _, whole = runs["mock"]
    ids = ["create_task_1", "update_task_1", "impossible_task_1",
           "update_task_with_initialization_actions"]  # fmt: skip
    modes = CASES["mock"][1]
    out = tmp_path / "run"
    argv = [sys.executable, str(REPO / "tests" / "tau2_scripted.py"), str(out), "mock", "0.3",
            json.dumps(modes), *ids]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    log = tmp_path / "stderr.txt"
    with log.open("w") as err:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 120
    # Killed once every conversation has two steps recorded: all of them are under way.
    while not (RunDir(out).steps.exists()
               and len(RunDir(out).steps.read_text().splitlines()) >= 2 * len(ids)):  # fmt: skip
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the run was not killed between steps: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(records(out) if RunDir(out).samples.exists() else {}) < len(ids)
    assert run(out, subset("mock", ids), modes).status == "complete"  # the resume

    assert records(out).keys() == records(whole).keys()
    for sample_id, record in records(whole).items():
        for key in ("completions", "extracted", "scores", "refusal"):
            assert records(out)[sample_id].get(key) == record.get(key), (sample_id, key)

    def keyed(out: Path) -> list[tuple]:
        lines = RunDir(out).steps.read_text().splitlines()
        return sorted((s["sample_id"], s["index"], s["text"], json.dumps(s["outcome"]))
                      for s in map(json.loads, lines))  # fmt: skip

    assert keyed(out) == keyed(whole)  # no step duplicated or dropped


def test_the_user_simulators_requests_go_to_its_engine() -> None:
    preset = load_preset("tiny_random")
    model = FakeEngine(preset, EngineSettings(), delay_s=0.0, script={"": "agent"})
    user = FakeEngine(preset, EngineSettings(), delay_s=0.0, script={"": "user"})
    routed = Routed(model, user)
    sampling = SamplingSettings(max_tokens=4)
    done = routed.run([Request(id="1", prompt="a", sampling=sampling),
                       Request(id=USER_SIM_ID + "2", prompt="b", sampling=sampling)])  # fmt: skip
    assert [c.generation.texts for c in done if c.generation] == [("agent",), ("user",)]
    assert (model.served, user.served) == (["a"], ["b"])


def test_bad_input_is_refused_with_one_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="tau2 has no 'nowhere'"):
        expand_refs(["tau2:nowhere"])
    with pytest.raises(ConfigError, match=r"tau2 has no 'telecom@nope'.*telecom@small"):
        expand_refs(["tau2:telecom@nope"])
    with pytest.raises(ConfigError, match="two splits"):
        chosen(["telecom@small", "telecom"])
    assert chosen(["tau2"]) == {"airline": "base", "retail": "base", "telecom": "base"}
    preset = load_preset("tiny_random")
    agents = RunnerOptions(selection=Selection(tasks=("tau2:mock",)))
    with pytest.raises(ConfigError, match=r"need a user simulator.*--user-sim tiny_random"):
        check_user_sim(agents, preset)
    unknown = RunnerOptions(selection=Selection(tasks=("tau2:mock",)),
                            user_sim=UserSimOptions(preset="no_such_preset"))  # fmt: skip
    with pytest.raises(ConfigError, match="no_such_preset"):
        check_user_sim(unknown, preset)
    # Another preset is served beside the model (run/usersimserver.py): accepted here.
    other = dataclasses.replace(unknown, user_sim=UserSimOptions(preset="smollm2_135m"))
    check_user_sim(other, preset)
    check_user_sim(RunnerOptions(), preset)  # no agent task: no user simulator needed
    with pytest.raises(ConfigError, match="names no tool_parser"):
        KIND.load(expand_refs(["tau2:mock"]), LoadOptions(preset=preset, backend="vllm"))
    monkeypatch.setenv(install.ENV, "/nonexistent/tau2")
    with pytest.raises(MissingDependencyError, match=r"bash scripts/tau2\.sh"):
        KIND.load(expand_refs(["tau2:mock"]), LoadOptions(backend="fake"))


def test_the_report_has_a_tau2_table(
    runs: dict[str, tuple[Tau2Task, Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    from evalpipe.cli import main

    assert main(["report", str(runs["mock"][1]), str(runs["airline"][1])]) == 0
    table = capsys.readouterr().out.split("## τ²-bench")[1]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| run | airline reward % (pass^k) | mock reward % (pass^k) |")
    # Best overall first: airline's one task, ground truth; mock's two of four.
    # pass^1 with its interval: Wilson's on 1 of 1 and on 2 of 4.
    assert rows[-2].startswith("| airline0 | 100.0 (100.0 [20.7, 100.0]) |  | 100.0 |")
    assert rows[-1].startswith("| mock0 |  | 50.0 (50.0 [15.0, 85.0]) | 50.0 |")
    assert "not comparable" in table


def test_trials_limits_and_left_out_tasks(tmp_path: Path) -> None:
    options = LoadOptions(backend="fake", tau2_trials=3)
    (task,) = KIND.load(expand_refs(["tau2:mock"]), options).tasks
    assert isinstance(task, Tau2Task)
    assert task.definition()["left_out"] == 2  # the two that start from a recorded history
    samples = task.samples(2)
    first = ("create_task_1", "create_task_1_with_env_assertions")
    assert [s.id for s in samples] == [f"{t}#{k}" for k in range(3) for t in first]
    drawn = random.Random(300)  # τ²'s run_tasks: random.seed(seed), then a draw per trial
    assert [task.seed_of(s) for s in samples[::2]] == [drawn.randint(0, 1_000_000)
                                                       for _ in range(3)]  # fmt: skip
    assert task.definition()["max_steps"] == 200  # τ²'s default
    preset = load_preset("tiny_random")
    selection = Selection(tau2_trials=3, tau2_max_steps=12)
    selected = LoadOptions.selected(selection, preset, backend="fake")
    assert selected.tau2_trials == 3
    (short,) = KIND.load(expand_refs(["tau2:mock"]), selected).tasks
    assert isinstance(short, Tau2Task)
    assert short.limits.max_steps == 12 and short.definition()["max_steps"] == 12


def test_a_step_that_outgrows_the_context_ends_its_episode_only(tmp_path: Path) -> None:
    task = subset("mock", ["create_task_1"])
    model = ScriptedModel(task.domain.tasks, {})
    model.settings = EngineSettings(max_model_len=50)  # words: the user's first prompt has more
    result = run_evaluation(lambda settings: model, [task], tmp_path / "run",
                            preset=load_preset("tiny_random"),
                            options=RunOptions(backend="fake"))  # fmt: skip
    assert result.status == "complete"
    (record,) = records(tmp_path / "run").values()
    assert record["refusal"]["reason"] == "context_overflow"
    assert record["scores"]["reward"] == 0.0  # as τ² scores a failed generation


def test_the_estimate_asks_for_each_step_of_a_ground_truth_episode_once() -> None:
    task = subset("mock", ["create_task_1"])
    agent, user = task.request_prompts(1), task.user_request_prompts(1)
    # The agent's requests after the user's words and after its one action's result (the
    # model's work); the user's first request and the one after the agent's answer (the user
    # simulator's share), none of them in both.
    policy = [any((m["content"] or "").startswith("<instructions>") for m in p)
              for p in (*agent, *user)]  # fmt: skip
    assert policy == [True, True, False, False]
    assert len(json.dumps(agent[1])) > len(json.dumps(agent[0]))
    assert agent[1][-1]["role"] == "tool"


def test_the_estimate_counts_the_tools_every_agent_request_offers() -> None:
    from evalpipe.estimate.workmodel import TokenCounter, task_work

    task = subset("mock", ["create_task_1"])
    words = TokenCounter(lambda text: len(text.split()), 0, "words")
    work = task_work(task, load_preset("tiny_random"), limit=1, history=(), counter=words)
    # Each agent request carries the policy and every tool's schema (as the chat template
    # renders them), besides the conversation.
    tools = sum(len(json.dumps(t, ensure_ascii=False).split()) for t in task.domain.agent_tools)
    assert work.prompt_tokens.mid > tools + len(task.domain.agent_system.split())


def test_a_user_simulator_behind_a_server_answers_the_users_steps(tmp_path: Path) -> None:
    from endpoint_support import FaultServer

    from evalpipe.cli import main

    # The agent is the fake engine ("The answer is N."); the server's user says hello, then
    # stops at the agent's first words.
    script = {"The answer is": "###STOP###", "How can I help": "Hello, I need a task created."}
    out = tmp_path / "run"
    with FaultServer(model="user-model", script=script) as server:
        argv = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "tau2:mock",
                "--limit", "1", "--user-sim-base-url", server.base_url,
                "--user-sim-model", "user-model", "--out", str(out)]  # fmt: skip
        assert main(argv) == 0
        asked = [m["content"] for b in server.bodies for m in b["messages"]]
    steps = [json.loads(x) for x in RunDir(out).steps.read_text().splitlines()]
    assert [s.get("by", "model") for s in steps] == ["user_sim", "model", "user_sim"]
    assert [steps[0]["text"], steps[2]["text"]] == list(reversed(script.values()))
    assert len(server.bodies) == 2 and any("<scenario>" in (c or "") for c in asked)
    (record,) = records(out).values()
    assert record["extracted"] == ["user_stop"] and "reward" in record["scores"]
    manifest = json.loads(RunDir(out).manifest.read_text())
    simulated = manifest["user_sim"]
    assert (simulated["placement"], simulated["base_url"]) == ("server", server.base_url)
    assert simulated["model"] == "user-model" and simulated["sampling"]["temperature"] == 0
    # The user simulator shapes the episodes: its model is part of the run's fingerprint.
    assert manifest["config"]["user_sim"]["model"] == "user-model"


def test_another_preset_as_user_simulator_is_served_beside_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--user-sim PRESET` (not the run's) with no URL: the run starts a server for it
    (usersimserver.user_sim_server, stood in for by the test server) and talks to it."""
    from contextlib import contextmanager

    from endpoint_support import FaultServer

    from evalpipe.cli import main
    from evalpipe.run import usersim
    from evalpipe.run.usersimserver import UserSimEndpoint

    started = []
    script = {"The answer is": "###STOP###", "How can I help": "Hello."}
    with FaultServer(model="SmolLM2", script=script) as server:

        @contextmanager
        def serve(ref: str, *, log: Path):
            started.append((ref, log.name))
            yield UserSimEndpoint(base_url=server.base_url, model="SmolLM2")

        monkeypatch.setattr(usersim, "user_sim_server", serve)
        out = tmp_path / "run"
        argv = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "tau2:mock",
                "--limit", "1", "--user-sim", "smollm2_135m", "--out", str(out)]  # fmt: skip
        assert main(argv) == 0
    assert started == [("smollm2_135m", "user-sim-server.log")] and len(server.bodies) == 2
    simulated = json.loads(RunDir(out).manifest.read_text())["user_sim"]
    assert (simulated["placement"], simulated["preset"]) == ("side-by-side", "smollm2_135m")


def test_a_server_user_simulator_never_holds_up_the_models_steps() -> None:
    preset = load_preset("tiny_random")
    model = FakeEngine(preset, EngineSettings(), delay_s=0.0)

    class Waiting(FakeEngine):
        """A user simulator whose answers are not in yet (a server's, mid-request)."""

        def ready(self) -> bool:
            return False

        def step(self) -> list[Any]:
            raise AssertionError("stepped while the model had work and no answer was waiting")

    routed = Routed(model, Waiting(preset, EngineSettings(), delay_s=0.0))
    sampling = SamplingSettings(max_tokens=4)
    routed.add([Request(id="1", prompt="a", sampling=sampling),
                Request(id=USER_SIM_ID + "2", prompt="b", sampling=sampling)])  # fmt: skip
    assert [c.id for c in routed.step()] == ["1"]


def test_plan_estimates_the_user_simulators_share_of_a_tau2_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from evalpipe.cli import main

    argv = ["plan", "--preset", "qwen3_32b", "--gpu", "h100-80gb", "--tasks", "tau2:mock",
            "--limit", "1", "--user-sim", "qwen3_32b", "--estimate", "--json"]  # fmt: skip
    assert main(argv) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["user_sim"]["placement"]["kind"] == "same-engine"
    share = planned["estimate"]["user_sim"]
    assert "tau2_mock" in json.dumps(share) and planned["estimate"]["wall_s"]
    # The ground-truth episode's four requests, each counted once: the agent's two as the
    # model's work, the user's two as the user simulator's share.
    (agent,) = planned["estimate"]["tasks"]
    (user,) = share["user_sim"]["tasks"]
    assert (agent["samples"], user["samples"]) == (2, 2)


def test_plan_estimates_a_judge_and_a_user_simulator_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from evalpipe.cli import main

    judged = REPO / "tests" / "fixtures" / "judged" / "capitals.yaml"
    argv = ["plan", "--preset", "qwen3_32b", "--gpu", "h100-80gb", "--tasks",
            f"tau2:mock,judge:{judged}", "--limit", "1", "--user-sim", "qwen3_32b", "--judge",
            "qwen3_32b", "--estimate", "--results", str(tmp_path), "--json"]  # fmt: skip
    assert main(argv) == 0
    estimate = json.loads(capsys.readouterr().out)["estimate"]
    share, judging = estimate["user_sim"], estimate["judging"]
    assert [t["task"] for t in share["user_sim"]["tasks"]] == ["tau2_mock"]
    assert [t["task"] for t in judging["judging"]["tasks"]] == ["capitals_judged"]
    # The generation phase the judge follows holds the user simulator's turns.
    after = share["wall_s"]["mid"] + judging["judging"]["wall_s"]["mid"]
    assert judging["walls_s"]["after"]["mid"] == pytest.approx(after, abs=0.2)
    assert main(argv[:-1]) == 0
    text = capsys.readouterr().out
    assert "total, judge after generation" in text and "total, user simulator" in text
