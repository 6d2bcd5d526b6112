"""Options declared once: every runner and job option has its flag and help on the commands that
take it, a job's argv parses back to the record it came from, bad values name their flag, and the
planning commands check task names without loading the tasks."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evalpipe.catalog.selection import Selection
from evalpipe.cli import parse_args
from evalpipe.commands._options import job_options
from evalpipe.commands.run import runner_options
from evalpipe.core.errors import ConfigError, UnknownNameError
from evalpipe.core.options import leaves, options_of, record_from, to_argv, value_at
from evalpipe.jobs.jobspec import JOB_RUNNER_GROUPS, JobOptions
from evalpipe.jobs.prepare import prepare
from evalpipe.run.runoptions import (
    EndpointOptions,
    EngineOptions,
    JudgeOptions,
    LayoutOptions,
    RunnerOptions,
    RuntimeOptions,
    TrackingOptions,
    UserSimOptions,
)
from evalpipe.rundir.shard import Shard

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = Path("/scratch/evalpipe/results/options-run")

# Every runner option given, none at its default.
EVERY_RUNNER_OPTION = RunnerOptions(
    engine=EngineOptions(
        backend="openai", admission="given", window=8, deterministic=True, no_oom_fallback=True
    ),
    layout=LayoutOptions(
        tp=2, pp=3, replicas=4, max_model_len=4096, distributed_executor_backend="ray"
    ),
    endpoint=EndpointOptions(
        base_url="http://127.0.0.1:8000/v1", model="served-name", api_key_env="MY_KEY",
        concurrency=7,
    ),
    selection=Selection(
        categories=("math", "coding"),
        tasks=("arithmetic", "/data/my tasks/t.yaml", "suite:reasoning-2026"),
        limit=5,
        max_tokens=64,
        mc_method="logprobs",
        since="2024-08-01",
        until="2025-05-01",
        allow_unsafe_code=True,
        tau2_trials=4,
        tau2_max_steps=30,
        pilot="0.05",
        pilot_seed=3,
        ruler_lengths=(4096, 131072),
    ),
    runtime=RuntimeOptions(
        stall_timeout=0.1 + 0.2,  # no short decimal form: the argv must keep every digit
        monitor_interval=0.25,
        strict_versions=True,
        sandbox="weak",
        shard=Shard(index=1, count=3),
    ),
    judge=JudgeOptions(
        preset="smollm2_135m",
        endpoint=EndpointOptions(
            base_url="http://127.0.0.1:8001/v1", model="judge-name", api_key_env="JUDGE_KEY",
            concurrency=3,
        ),
        max_tokens=512,
        data="/data/llm_judge data",
        baseline="/data/answers/base model.jsonl",
        phase="judge",
        placement="side-by-side",
    ),
    user_sim=UserSimOptions(
        preset="smollm2_135m",
        endpoint=EndpointOptions(
            base_url="http://127.0.0.1:8002/v1", model="user-name", api_key_env="USER_KEY",
            concurrency=5,
        ),
    ),
    tracking=TrackingOptions(track="mlflow"),
)  # fmt: skip
# Every job option given, none at its default, with the runner options a job takes.
EVERY_JOB_OPTION = JobOptions(
    run=RunnerOptions(
        engine=EngineOptions(admission="longest-first", window=4, deterministic=True,
                             no_oom_fallback=True),
        layout=LayoutOptions(tp=2, pp=1, replicas=2, max_model_len=2048),
        selection=Selection(
            categories=("reasoning",),
            tasks=("gsm8k",),
            limit=3,
            max_tokens=128,
            mc_method="generate",
            since="2025-02-01",
            until="2025-05-01",
            allow_unsafe_code=True,
            tau2_trials=2,
            tau2_max_steps=12,
            pilot="20",
            pilot_seed=1,
            ruler_lengths=(8192,),
        ),
        runtime=RuntimeOptions(
            stall_timeout=600, monitor_interval=2, strict_versions=True, sandbox="weak"
        ),
        judge=JudgeOptions(
            preset="smollm2_135m",
            endpoint=EndpointOptions(
                base_url="http://judge.example:8000/v1", model="judge", api_key_env="JUDGE_KEY",
                concurrency=4,
            ),
            max_tokens=256,
            data="/data/llm_judge",
            baseline="results/baseline-run",
            phase="generate",
            placement="after",
        ),
        user_sim=UserSimOptions(
            preset="smollm2_135m",
            endpoint=EndpointOptions(
                base_url="http://user.example:8000/v1", model="user", api_key_env="USER_KEY",
                concurrency=2,
            ),
        ),
        tracking=TrackingOptions(track="wandb"),
    ),
    shards="auto",
    time="auto",
    budget=40.5,
    target_wall="12:30:00",
    margin=0.75,
    signal_seconds=120,
    max_restarts=0,
    mode="serve",
    container_image="nvcr.io#nvidia/vllm:25.01",
)  # fmt: skip


def flat(pairs: list[tuple[str, ...]]) -> list[str]:
    return [word for pair in pairs for word in pair]


def parse(*argv: str):
    return parse_args(list(argv))


def unset(record: object, groups: tuple[str, ...] | None = None) -> list[str]:
    """The record's options (in `groups`) left at their default, None included."""
    return [
        leaf.option.name
        for leaf in leaves(type(record), groups=groups)
        if value_at(record, leaf.path) in (None, leaf.field.default)
    ]


def test_every_runner_option_survives_the_argv_round_trip() -> None:
    assert unset(EVERY_RUNNER_OPTION) == [], "give the new option a value above"
    argv = flat(to_argv(EVERY_RUNNER_OPTION))
    assert runner_options(parse("run", "--preset", "p", *argv)) == EVERY_RUNNER_OPTION


def test_every_job_option_survives_the_command_line_round_trip() -> None:
    assert unset(EVERY_JOB_OPTION) == [], "give the new option a value above"
    # --backend stays vLLM's: serve mode needs it (the runner round trip covers the others).
    assert unset(EVERY_JOB_OPTION.run, JOB_RUNNER_GROUPS) == ["backend"]
    argv = flat(to_argv(EVERY_JOB_OPTION.run) + to_argv(EVERY_JOB_OPTION))
    args = parse("render", "--preset", "p", "--cluster", "c", *argv)
    assert job_options(args) == EVERY_JOB_OPTION


@pytest.mark.parametrize(
    "options",
    [
        JobOptions(
            run=RunnerOptions(
                selection=Selection(
                    categories=("math",), tasks=("arithmetic",), limit=3, mc_method="logprobs"
                ),
                runtime=RuntimeOptions(stall_timeout=90.5),
            )
        ),
        # two nodes: vLLM over Ray
        JobOptions(
            run=RunnerOptions(layout=LayoutOptions(tp=4, pp=2), selection=Selection(limit=2))
        ),
        JobOptions(mode="serve", run=RunnerOptions(selection=Selection(tasks=("ordering",)))),
    ],
    ids=["engine", "multi-node", "serve"],
)
def test_a_jobs_runner_argv_parses_back_to_its_options_with_the_plans_layout(
    options: JobOptions,
) -> None:
    spec = prepare("tiny_random", "local", options, RUN_DIR).spec
    args = parse("run", *flat(spec.runner_options), "--out", str(RUN_DIR))
    assert args.preset == ["tiny_random"]
    plan = spec.plan
    run = options.run
    if spec.serve:
        expected = dataclasses.replace(
            run,
            engine=dataclasses.replace(run.engine, backend="openai"),
            layout=LayoutOptions(max_model_len=plan.max_model_len),
            endpoint=EndpointOptions(concurrency=spec.serve_concurrency),
        )
    else:
        expected = dataclasses.replace(
            run,
            layout=LayoutOptions(
                tp=plan.tensor_parallel_size,
                pp=plan.pipeline_parallel_size,
                replicas=plan.replicas,
                max_model_len=plan.max_model_len,
                distributed_executor_backend="ray" if spec.multi_node else None,
            ),
        )
    assert runner_options(args) == expected


def test_a_smoke_jobs_argv_parses_with_the_smoke_command() -> None:
    options = JobOptions(
        run=RunnerOptions(engine=EngineOptions(backend="fake"), layout=LayoutOptions(tp=2)),
        smoke=True,
    )
    spec = prepare("tiny_random", "local", options, RUN_DIR).spec
    args = parse(*spec.command, *flat(spec.runner_options), "--out", str(RUN_DIR))
    assert (args.backend, args.tp, args.gpu) == ("fake", 2, spec.plan.gpu)


def help_text(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    """`evalpipe COMMAND --help` with no whitespace (argparse wraps lines where it likes)."""
    with pytest.raises(SystemExit):
        parse(command, "--help")
    return "".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("command", ["run", "render", "submit"])
def test_each_option_is_on_the_command_line_with_its_help(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = help_text(command, capsys)
    declared = [leaf.option for leaf in leaves(RunnerOptions)]
    if command != "run":
        declared = [o for o in declared if o.group in JOB_RUNNER_GROUPS]
        declared += [o for _, o in options_of(JobOptions)]
    for opt in declared:
        assert opt.flag in shown
        start = "".join(opt.help.split("{")[0].split())[:40]
        assert start in shown, (opt.flag, start)


def test_layout_help_says_where_the_default_comes_from(capsys: pytest.CaptureFixture[str]) -> None:
    assert "tensorparallelsize(default:plannedfromthevisibleGPUs" in help_text("run", capsys)
    assert "tensorparallelsize(default:auto)" in help_text("plan", capsys)
    assert "tensorparallelsize(default:planned)" in help_text("render", capsys)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Selection(limit=0), "--limit: must be a positive integer, got 0"),
        (lambda: Selection(mc_method="rank"), "--mc-method 'rank' is not one of generate"),
        (lambda: Selection(categories=()), "--categories: expected one or more names"),
        (
            lambda: RuntimeOptions(stall_timeout=-1),
            "--stall-timeout must be 0 (off) or a positive",
        ),
        (
            lambda: RunnerOptions(endpoint=EndpointOptions(concurrency=4)),
            "--concurrency only apply to --backend openai",
        ),
        (
            lambda: JudgeOptions(preset="p", endpoint=EndpointOptions(model="m")),
            "--judge-model apply to a judge behind a server",
        ),
        (lambda: EngineOptions(deterministic="yes"), "--deterministic: expected True or False"),
        (
            lambda: record_from(RunnerOptions, {"tp": 2, "tensor_parallel": 2}),
            "Unknown option 'tensor_parallel'",
        ),
        (lambda: JobOptions(margin=1.5), "--margin: 1.5 must be a share of the time limit"),
        (lambda: JobOptions(shards=0), "--shards: must be a positive integer, got 0"),
        (lambda: JobOptions(time="soon"), "--time: time 'soon' is not a SLURM time"),
        (lambda: JobOptions(signal_seconds=-5), "--signal-seconds: signal_seconds must be within"),
        (
            lambda: JobOptions(
                run=RunnerOptions(layout=LayoutOptions(distributed_executor_backend="mp"))
            ),
            "--distributed-executor-backend: a job's runner does not take these",
        ),
        (
            lambda: JobOptions(run=RunnerOptions(selection=Selection(limit=3)), smoke=True),
            "--limit: a smoke job's runner does not take these",
        ),
        (
            lambda: JobOptions(
                shards="auto", run=RunnerOptions(engine=EngineOptions(backend="fake"))
            ),
            "--backend fake has none",
        ),
    ],
)
def test_a_bad_value_is_refused_naming_its_flag(make, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        make()


def test_an_unknown_task_or_category_is_refused_with_near_matches() -> None:
    with pytest.raises(UnknownNameError, match=r"Unknown task 'arithmetc'\. Did you mean"):
        prepare(
            "tiny_random",
            "local",
            JobOptions(run=RunnerOptions(selection=Selection(tasks=("arithmetc",)))),
            RUN_DIR,
        )
    with pytest.raises(UnknownNameError, match=r"Unknown category 'maths'\. Did you mean 'math'"):
        prepare(
            "tiny_random",
            "local",
            JobOptions(run=RunnerOptions(selection=Selection(categories=("maths",)))),
            RUN_DIR,
        )
    with pytest.raises(ConfigError, match=r"Task file '/nowhere/t\.yaml' does not exist"):
        prepare(
            "tiny_random",
            "local",
            JobOptions(run=RunnerOptions(selection=Selection(tasks=("/nowhere/t.yaml",)))),
            RUN_DIR,
        )


def imported_modules(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], set]:
    """Run `python -X importtime -m evalpipe ARGV`; the modules it imported."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALPIPE_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "evalpipe", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    return done, {line.rsplit("|", 1)[1].strip() for line in lines[1:]}


RENDER = ["render", "--preset", "tiny_random", "--cluster", "local"]
SELECTION = ["--categories", "math", "--tasks", "arithmetic,gsm8k", "--mc-method", "logprobs"]


@pytest.mark.parametrize(
    "argv, status",
    [
        (["plan", "--preset", "llama3_1_8b", "--gpu", "a100-40gb"], 0),
        (["plan", "--preset", "llama3_1_8b", "--all-gpus"], 0),
        (RENDER, 0),
        ([*RENDER, *SELECTION, "--limit", "3"], 0),
        ([*RENDER, "--tasks", "arithmetc"], 1),
        ([*RENDER, "--tasks", "suite:card-2026", "--judge", "tiny_random"], 0),
    ],
    ids=["plan", "plan-all-gpus", "render", "render-tasks", "render-unknown-task", "render-card"],
)
def test_planning_commands_load_no_task_module(
    argv: list[str], status: int, tmp_path: Path
) -> None:
    done, modules = imported_modules(tmp_path, *argv)
    assert done.returncode == status, done.stderr[-2000:]
    assert "evalpipe.cli" in modules  # the probe sees evalpipe's own imports
    assert sorted(m for m in modules if m.startswith("evalpipe.tasks")) == []
    if status:
        assert "Unknown task 'arithmetc'. Did you mean 'arithmetic'?" in done.stderr
