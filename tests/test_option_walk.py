"""Every `evalpipe run` option reaches a job: set on `submit --dry-run`, it is in the rendered
job's runner command, and that command parses back (with run's own parser) to the same value on
the node. A `run` option that `submit` lacks fails here unless it is named below with why."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from evalpipe.cli import build_parser, main
from evalpipe.commands.run import runner_options
from evalpipe.core.options import leaves, value_at
from evalpipe.jobs.jobspec import JOB_RUNNER_GROUPS
from evalpipe.run.runoptions import RunnerOptions

JUDGED = Path(__file__).parent / "fixtures" / "judged" / "capitals.yaml"
JUDGE_SERVER = ["--judge-base-url", "http://127.0.0.1:8001/v1"]
USER_SIM_SERVER = ["--user-sim-base-url", "http://127.0.0.1:8002/v1"]

# `run` options a submission does not take, and why.
NOT_SUBMITTED = {
    "resume": "submit resumes an existing --out by itself (it needs no flag to insist)",
    "shard": "the job sets it: each array task of --shards N runs its own slice",
    "distributed_executor_backend": "the job sets it: ray when the plan spans nodes",
    "base_url": "the job sets the endpoint in --mode serve: its own server's",
    "model": "the job sets the endpoint in --mode serve: its own server's",
    "api_key_env": "the job sets the endpoint in --mode serve: its own server's",
    "concurrency": "the job sets the endpoint in --mode serve: a full window per replica",
}
# A value for each option a job takes, and the flags it needs beside it to be valid.
WALK: dict[str, tuple[list[str], list[str]]] = {
    "--backend": (["fake"], []),
    "--admission": (["given"], []),
    "--window": (["8"], []),
    "--deterministic": ([], []),
    "--no-oom-fallback": ([], []),
    "--tp": (["2"], []),
    "--pp": (["2"], []),
    "--replicas": (["2"], []),
    "--max-model-len": (["512"], []),
    "--categories": (["math,coding"], []),
    "--tasks": (["arithmetic,ordering"], []),
    "--limit": (["3"], []),
    "--max-tokens": (["16"], []),
    "--mc-method": (["logprobs"], []),
    "--since": (["2024-08-01"], []),
    "--until": (["2025-05-01"], []),
    "--allow-unsafe-code": ([], []),
    "--tau2-trials": (["3"], []),
    "--tau2-max-steps": (["12"], []),
    "--pilot": (["0.05"], []),
    "--pilot-seed": (["3"], ["--pilot", "0.05"]),
    "--ruler-lengths": (["4096,8192"], []),
    "--stall-timeout": (["90.5"], []),
    "--monitor-interval": (["0.5"], []),
    "--strict-versions": ([], []),
    "--sandbox": (["weak"], []),
    "--judge": (["tiny_random"], ["--tasks", f"judge:{JUDGED}"]),
    "--judge-base-url": (["http://127.0.0.1:8001/v1"], ["--tasks", f"judge:{JUDGED}"]),
    "--judge-model": (["judge-name"], JUDGE_SERVER),
    "--judge-api-key-env": (["JUDGE_KEY"], JUDGE_SERVER),
    "--judge-concurrency": (["3"], JUDGE_SERVER),
    "--judge-max-tokens": (["64"], JUDGE_SERVER),
    "--judge-data": (["/data/llm_judge data"], JUDGE_SERVER),
    "--judge-baseline": (["/data/answers/base model.jsonl"], JUDGE_SERVER),
    "--phase": (["generate"], JUDGE_SERVER),
    "--judge-placement": (["after"], [*JUDGE_SERVER, "--tasks", f"judge:{JUDGED}"]),
    "--user-sim": (["tiny_random"], []),
    "--user-sim-base-url": (["http://127.0.0.1:8002/v1"], []),
    "--user-sim-model": (["user-name"], USER_SIM_SERVER),
    "--user-sim-api-key-env": (["USER_KEY"], USER_SIM_SERVER),
    "--user-sim-concurrency": (["3"], USER_SIM_SERVER),
    "--track": (["mlflow"], []),
}


def _command(name: str) -> argparse.ArgumentParser:
    parser = build_parser(name)  # only the named verb gets its flags
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _names(name: str) -> set[str]:
    return {a.dest for a in _command(name)._actions if a.option_strings and a.dest != "help"}


def test_every_run_option_is_on_submit_or_named_with_the_reason() -> None:
    missing = _names("run") - _names("submit")
    assert missing == set(NOT_SUBMITTED), "add the option to JOB_RUNNER_GROUPS or NOT_SUBMITTED"


def test_the_walk_covers_every_option_a_job_takes() -> None:
    taken = {leaf.option.flag for leaf in leaves(RunnerOptions, groups=JOB_RUNNER_GROUPS)}
    assert taken == set(WALK), "give the new option a value in WALK"


def _runner_words(script: str) -> list[str]:
    """The rendered job's `evalpipe run` command line, as the node's shell splits it."""
    start = script.index("-m evalpipe run \\")
    end = script.index('--out "$out"', start)
    words = shlex.split(script[start:end].replace("\\\n", " "))
    return words[words.index("run") + 1 :]


@pytest.mark.parametrize("flag", list(WALK))
def test_an_option_set_on_submit_reaches_the_jobs_runner(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    value, context = WALK[flag]
    argv = ["submit", "--preset", "tiny_random", "--cluster", "local", "--no-check", "--dry-run"]
    code = main([*argv, *context, flag, *value, "--out", str(tmp_path / "run")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    words = _runner_words(captured.out)
    assert flag in words
    on_node = runner_options(_command("run").parse_args([*words, "--out", "/run"]))
    leaf = next(x for x in leaves(RunnerOptions) if x.option.flag == flag)
    expected = True if leaf.option.switch else leaf.option.parse(value[0])
    assert value_at(on_node, leaf.path) == expected
