"""Where an agent run's user simulator runs: the planner's choice and its refusals, what the job
asks for and starts, `evalpipe plan`'s lines, the manifest's record and the estimate's share."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from evalpipe.catalog.gpus import get_gpu
from evalpipe.catalog.preset import load_preset
from evalpipe.cli import main
from evalpipe.core.errors import ConfigError, DamagedFileError, DoesNotFitError
from evalpipe.core.options import record_from
from evalpipe.core.span import Span
from evalpipe.estimate.cost import basis
from evalpipe.estimate.predict import Prediction, estimate_user_sim, user_sim_predictor
from evalpipe.estimate.usersimwork import user_sim_work
from evalpipe.estimate.workmodel import TaskWork, TokenCounter, helper_work
from evalpipe.jobs.jobspec import JobOptions
from evalpipe.jobs.prepare import Prepared, prepare
from evalpipe.planning import planner
from evalpipe.planning.helperplacement import USER_SIM
from evalpipe.planning.usersimplacement import plan_user_sim
from evalpipe.run.judgeprocess import split_gpus
from evalpipe.run.runoptions import EndpointOptions, RunnerOptions, UserSimOptions
from evalpipe.run.vllmserver import served_name
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import UserSimulator, read_manifest, write_manifest
from evalpipe.rundir.samplelog import write_json
from tests.test_render import GOLDEN

H100 = get_gpu("h100-80gb")
FIXTURE = RunDir(Path(__file__).parent / "fixtures" / "rundir-submitted-e4af4c7")


def plan(name: str, gpus_per_node: int = 8, **kw: object) -> planner.Plan:
    return planner.plan(load_preset(name), H100, gpus_per_node=gpus_per_node, **kw)


def place(model: str, user_sim: str | None, *, served: bool = False, gpus_per_node: int = 8,
          **kw: object):  # fmt: skip
    return plan_user_sim(
        plan(model, gpus_per_node, **kw), load_preset(model), user_sim, served=served,
        gpu=H100, gpus_per_node=gpus_per_node,
    )  # fmt: skip


def test_the_runs_own_preset_plays_the_user_in_the_models_engine() -> None:
    layout, placement = place("llama3_1_8b", "llama3_1_8b")
    assert layout is None and placement.kind == "same-engine" and placement.helper_gpus == 0
    assert placement.gpus_per_node == plan("llama3_1_8b").gpus_per_node
    assert "the model's engine serves both" in placement.reason


def test_another_preset_runs_side_by_side_on_a_split_of_the_node() -> None:
    layout, placement = place("llama3_1_8b", "qwen3_32b", replicas=1)
    assert layout is not None and placement.kind == "side-by-side"
    tp = layout.tensor_parallel_size * layout.pipeline_parallel_size
    assert (placement.model_gpus, placement.helper_gpus) == (1, tp)
    assert placement.gpus_per_node == 1 + tp
    assert "both fit on one node at once (1 GPU(s) for the model" in placement.reason
    # A model filling the node keeps the replicas the user simulator leaves it: there is no
    # "after" to fall back to.
    _, filled = place("llama3_1_8b", "qwen3_32b", replicas=None)
    assert filled.kind == "side-by-side" and filled.model_replicas == 8 - tp
    assert f"leaves the model {8 - tp} of its 8 replicas" in filled.reason


def test_a_user_simulator_behind_a_server_takes_none_of_the_jobs_gpus() -> None:
    layout, placement = place("llama3_1_8b", "qwen3_32b", served=True)
    assert layout is None and (placement.kind, placement.helper_gpus) == ("server", 0)
    assert placement.gpus_per_node == plan("llama3_1_8b").gpus_per_node


def test_a_user_simulator_that_fits_nowhere_is_refused_saying_what_does_not_fit() -> None:
    with pytest.raises(DoesNotFitError, match=r"need \d+ GPUs at once; a node has 4.*"
                       r"--user-sim-base-url URL"):  # fmt: skip
        place("llama3_3_70b", "qwen2_5_72b", gpus_per_node=4)
    # Its own layout needs more than one node: refused by the helper's planner, naming it.
    with pytest.raises(DoesNotFitError, match="The user simulator falcon_180b on one node"):
        place("llama3_1_8b", "falcon_180b", gpus_per_node=2)
    # A multi-node model cannot have anything beside it on one node.
    with pytest.raises(DoesNotFitError, match="spans 2 nodes"):
        place("falcon_180b", "llama3_1_8b", gpus_per_node=4)


def test_endpoint_flags_without_a_url_are_refused() -> None:
    with pytest.raises(ConfigError, match="--user-sim-model apply to a user simulator behind a "
                       "server: add --user-sim-base-url URL"):  # fmt: skip
        UserSimOptions(preset="tiny_random", endpoint=EndpointOptions(model="x"))


def test_plan_says_where_the_user_simulator_runs(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--preset", "llama3_1_8b", "--gpu", "h100-80gb", "--replicas", "1"]
    assert main([*argv, "--user-sim", "qwen3_32b"]) == 0
    text = capsys.readouterr().out
    assert "user simulator: qwen3_32b (Qwen/Qwen3-32B), TP=" in text
    assert "user-sim placement: side-by-side: both fit on one node at once" in text
    assert main([*argv, "--user-sim", "qwen3_32b", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["user_sim"]
    assert data["plan"]["preset"] == "qwen3_32b" and data["placement"]["kind"] == "side-by-side"
    assert data["placement"]["helper_gpus"] == data["plan"]["total_gpus"]
    assert main([*argv, "--user-sim", "llama3_1_8b"]) == 0
    assert "user-sim placement: same-engine:" in capsys.readouterr().out
    assert main([*argv, "--user-sim-base-url", "http://sim:8000/v1", "--json"]) == 0
    served = json.loads(capsys.readouterr().out)["user_sim"]
    assert served["plan"] is None and served["placement"]["kind"] == "server"
    # Without a user simulator, plan says nothing of one.
    assert main(argv) == 0
    assert "user simulator" not in capsys.readouterr().out
    too_big = ["plan", "--preset", "llama3_3_70b", "--gpu", "h100-80gb", "--gpus-per-node", "4",
               "--user-sim", "qwen2_5_72b"]  # fmt: skip
    assert main(too_big) != 0
    assert "The user simulator qwen2_5_72b cannot run beside" in capsys.readouterr().err


def job(tmp_path: Path, name: str, **options: object) -> Prepared:
    mode = str(options.pop("mode", "engine"))
    run = record_from(RunnerOptions, {"backend": "fake", "limit": 5, **options})
    return prepare("tiny_random", "local", JobOptions(run=run, mode=mode), tmp_path / name)


def test_the_job_serves_its_user_simulator_beside_the_model(tmp_path: Path) -> None:
    beside = job(tmp_path, "a", user_sim="smollm2_135m").script
    assert "#SBATCH --gres=gpu:h100:2" in beside  # the model's GPU and the user simulator's
    assert "# User simulator placement, side-by-side: both fit on one node at once" in beside
    serve = beside[beside.index('"${python[@]}" -m evalpipe serve') :]
    assert "--preset smollm2_135m" in serve and "--skip-gpus 1" in serve
    model = served_name(load_preset("smollm2_135m"))
    run = beside[beside.index('"${python[@]}" -m evalpipe run') :]
    assert f'--user-sim-base-url "$user_sim_base_url" --user-sim-model {model}' in run
    assert "--replicas 1" in run and "on_exit+=(stop_user_sim_server)" in beside
    # In the model's engine, or behind a server: no server started, no GPU of its own.
    for name, options in (("b", {"user_sim": "tiny_random"}),
                          ("c", {"user_sim_base_url": "http://sim:8000/v1"})):  # fmt: skip
        script = job(tmp_path, name, **options).script
        assert "#SBATCH --gres=gpu:h100:1" in script and "evalpipe serve" not in script
        assert "--user-sim-model" not in script
        kind = "same-engine" if name == "b" else "server"
        assert f"# User simulator placement, {kind}:" in script


def test_a_job_that_cannot_hold_the_user_simulator_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DoesNotFitError, match=r"cannot run beside tiny_random: the job's vLLM "
                       r"server holds the model's GPUs \(--mode serve\)"):  # fmt: skip
        job(tmp_path, "a", user_sim="smollm2_135m", backend="vllm", mode="serve")
    with pytest.raises(ConfigError, match="the judge and the user simulator both need GPUs"):
        job(tmp_path, "b", user_sim="smollm2_135m", tasks=("mt_bench",), judge="smollm2_135m")


@pytest.mark.slurm
def test_the_local_slurm_accepts_the_user_simulator_golden(local_slurm: Any) -> None:
    answer = local_slurm.test_only(GOLDEN / "tiny_random-local-usersim.sbatch")
    assert re.search(r"to start at .* on nodes node", answer), answer


def test_the_user_simulators_gpus_follow_the_models() -> None:
    assert split_gpus(["0", "1", "2"], model_gpus=1, judge_gpus=2, helper=USER_SIM) == (
        ["0"], ["1", "2"])  # fmt: skip
    with pytest.raises(DoesNotFitError, match="the user simulator 2, but 2 are visible"):
        split_gpus(["0", "1"], model_gpus=1, judge_gpus=2, helper=USER_SIM)


def test_the_manifest_records_the_user_simulator(tmp_path: Path) -> None:
    files = RunDir(tmp_path)
    data = json.loads(FIXTURE.manifest.read_text())
    assert "user_sim" not in data  # a run without one: read as None, written without the key
    write_json(files.manifest, data)
    plain = read_manifest(files)
    assert plain is not None and plain.user_sim is None and "user_sim" not in plain.to_dict()
    sampling = {"temperature": 0.0, "max_tokens": 512, "seed": 300}
    plain.user_sim = UserSimulator(model="Qwen/Qwen3-32B", preset="qwen3_32b",
                                   placement="side-by-side", sampling=sampling)  # fmt: skip
    write_manifest(files, plain)
    written = json.loads(files.manifest.read_text())["user_sim"]
    assert written == {"model": "Qwen/Qwen3-32B", "placement": "side-by-side",
                       "preset": "qwen3_32b", "sampling": sampling}  # fmt: skip
    again = read_manifest(files)
    assert again is not None and again.user_sim == plain.user_sim
    served = UserSimulator(model="m", placement="server", base_url="http://sim:8000/v1")
    assert UserSimulator.from_dict(served.to_dict()) == served
    write_json(files.manifest, data | {"user_sim": {"model": "m", "placement": "beside"}})
    with pytest.raises(DamagedFileError, match="user_sim placement 'beside' is not one of"):
        read_manifest(files)


class Episodes:
    """An agent task of 100 episodes planning 10 agent steps and 11 user turns each."""

    name = "airline"

    def request_prompts(self, limit: int | None) -> list[Any]:
        return [[{"role": "user", "content": "agent " * 3000}]] * 1000

    def user_request_prompts(self, limit: int | None) -> list[Any]:
        return [[{"role": "user", "content": "user " * k}] for k in range(1100)]


def agent_run(replicas: int | None = 1) -> Prediction:
    """`Episodes` on llama3_1_8b (its agent steps' work a fake one)."""
    preset = load_preset("llama3_1_8b")
    model = planner.plan(preset, H100, gpus_per_node=8, replicas=replicas, read_model_config=False)
    work = TaskWork(task="airline", category="agents", samples=1000, completions=1,
                    prompt_tokens=Span.exact(3000.0), generated_tokens=Span.exact(100.0),
                    max_tokens=512, score_s=Span.exact(0.0), sources=("test",))  # fmt: skip
    return Prediction(preset=preset, plan=model, work=(work,), basis=basis(preset, H100, model),
                      agents=(Episodes(),))  # fmt: skip


def test_the_user_simulators_turns_are_the_users_steps_the_task_plans() -> None:
    (agent,) = agent_run().work
    words = TokenCounter(lambda text: len(text.split()), 0, "words")
    preset = load_preset("llama3_1_8b")
    work = user_sim_work(Episodes(), agent, preset, limit=None, counter=words, max_tokens=200)
    # As many user turns per agent step as the planned episodes have (11 / 10), each prompt
    # the planned one's tokens (the mean of 0 .. 1099 words, 1 in every 4 counted).
    assert work.samples == 1100 and work.generated_tokens == Span.exact(200.0)
    assert work.prompt_tokens.mid == pytest.approx(sum(range(0, 1100, 4)) / 275)
    assert "1.1 user turn(s) per agent step" in work.sources[0]
    default = user_sim_work(Episodes(), agent, preset, limit=None, counter=None)
    assert default.generated_tokens == Span.exact(256.0)  # the default bound
    # A helper's request, built as a judgment is (tests/test_judge_placement.py).
    assert work == helper_work(agent, 1100, work.prompt_tokens, 200, helper="user turn",
                               source=work.sources[0])  # fmt: skip


def test_the_estimate_counts_the_user_simulators_share_where_it_runs() -> None:
    model = agent_run()
    alone = model.estimate().wall_s
    _, placed = plan_user_sim(model.plan, model.preset, "llama3_1_8b", served=False, gpu=H100,
                              gpus_per_node=8)  # fmt: skip
    in_model = user_sim_predictor(model, None, H100, None, limit=None)
    _, in_engine = estimate_user_sim(model, in_model, placed)
    assert in_engine.share is not None and in_engine.share.tasks[0].samples == 1100
    assert in_engine.wall_s.mid > alone.mid  # one engine does both works
    layout, beside = plan_user_sim(model.plan, model.preset, "qwen3_32b", served=False, gpu=H100,
                                   gpus_per_node=8)  # fmt: skip
    simulator = user_sim_predictor(model, load_preset("qwen3_32b"), H100, layout,
                                   limit=None)  # fmt: skip
    _, side = estimate_user_sim(model, simulator, beside)
    assert side.share is not None and side.share.preset == "qwen3_32b"
    assert side.wall_s.mid == max(alone.mid, side.share.wall_s.mid)  # turns interleave
    record = json.loads(json.dumps(side.to_dict()))
    assert record["placement"] == "side-by-side" and record["user_sim"]["tasks"][0]["samples"]
    text = side.describe()
    assert "user simulator: qwen3_32b on h100-80gb" in text and "user turns" in text
    served = plan_user_sim(model.plan, model.preset, None, served=True, gpu=H100,
                           gpus_per_node=8)[1]  # fmt: skip
    _, elsewhere = estimate_user_sim(model, None, served)
    assert elsewhere.share is None and elsewhere.wall_s == alone
    assert "behind a server; its share of the work is not estimated" in elsewhere.describe()
