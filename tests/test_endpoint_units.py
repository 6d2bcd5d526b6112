"""The endpoint engine's pure parts: retry delays, Retry-After, token splits, the endpoint block,
and the server-mode readiness wait (no server, no vLLM)."""

from __future__ import annotations

import random
import re
import subprocess
from datetime import datetime, timezone
from email.utils import format_datetime

import pytest

from evalpipe.catalog.preset import Endpoint, load_preset, with_endpoint
from evalpipe.core.errors import ConfigError
from evalpipe.engine.endpoint import sampling_fields, split_tokens
from evalpipe.engine.http import RetryPolicy, retry_after_seconds, server_detail
from evalpipe.records.sampling import SamplingSettings
from evalpipe.run.vllmserver import wait_ready

POLICY = RetryPolicy(max_retries=5, timeout_s=10, backoff_s=1.0, backoff_max_s=8.0)


def test_backoff_doubles_with_jitter_up_to_the_cap_and_retry_after_wins() -> None:
    rng = random.Random(0)
    for retry, ceiling in enumerate([1, 2, 4, 8, 8, 8]):
        delays = [POLICY.delay(retry, None, rng) for _ in range(200)]
        assert ceiling / 2 <= min(delays) and max(delays) <= ceiling
        assert max(delays) - min(delays) > ceiling / 4  # jittered, not fixed
    assert POLICY.delay(0, 30.0, rng) == 30.0


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    when = datetime(2030, 1, 1, 0, 0, 10, tzinfo=timezone.utc)
    now = datetime(2030, 1, 1, tzinfo=timezone.utc).timestamp()
    assert retry_after_seconds(format_datetime(when, usegmt=True), lambda: now) == 10.0


def test_server_messages_are_read_from_both_error_shapes() -> None:
    assert server_detail(404, '{"error": {"message": "no such model"}}') == "no such model"
    assert server_detail(400, '{"object": "error", "message": "bad echo"}') == "bad echo"
    assert server_detail(502, "") == "HTTP 502 with an empty body"


def test_usage_is_split_over_the_choices_without_losing_a_token() -> None:
    assert split_tokens(10, 3) == (4, 3, 3) and split_tokens(7, 1) == (7,)


def test_a_seed_is_sent_only_when_sampling() -> None:
    assert "seed" not in sampling_fields(SamplingSettings(temperature=0.0))
    assert sampling_fields(SamplingSettings(temperature=0.5, seed=7))["seed"] == 7


def test_top_k_and_min_p_are_the_task_s_not_the_server_s() -> None:
    chosen = sampling_fields(SamplingSettings(temperature=0.6, top_k=20, min_p=0.05))
    assert (chosen["top_k"], chosen["min_p"]) == (20, 0.05)
    kept = sampling_fields(SamplingSettings(skip_special_tokens=False))  # lm_eval: tasks
    assert kept["skip_special_tokens"] is False


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("base_url", "127.0.0.1:8000/v1", "is not an http(s) URL"),
        ("api_key_env", "MY-KEY", "not an environment variable name"),
        ("concurrency", 0, "concurrency must be a positive integer"),
        ("max_retries", -1, "max_retries must be 0 or more"),
        ("timeout_s", 0, "timeout_s must be a positive number"),
        ("api", "responses", "api 'responses' is not one of chat, completions"),
    ],
)
def test_the_endpoint_block_refuses_bad_values(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        with_endpoint(load_preset("tiny_random"), **{field: value})


def test_the_api_follows_the_chat_mode_unless_named() -> None:
    assert Endpoint().api_for(chat=True) == "chat"
    assert Endpoint().api_for(chat=False) == "completions"
    assert Endpoint(api="completions").api_for(chat=True) == "completions"


def test_waiting_for_a_server_stops_when_it_dies_or_the_time_is_up() -> None:
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    def never(url: str, model: str) -> str:
        return "no answer ([Errno 111] Connection refused)"

    ready, why = wait_ready(
        "http://h/v1", "m", timeout_s=30, check=never, clock=lambda: clock[0], sleep=sleep
    )
    assert not ready and why.startswith("not ready after 30 s (last seen: no answer")
    ready, why = wait_ready("http://h/v1", "m", timeout_s=30, check=never, alive=lambda: False)
    assert not ready and why.startswith("the server process ended")
    answers = iter(["/health answers HTTP 503", ""])
    ready, _ = wait_ready(
        "http://h/v1", "m", timeout_s=30, check=lambda u, m: next(answers), sleep=sleep
    )
    assert ready


def test_the_job_helper_says_why_the_server_is_not_usable_and_where_its_log_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from evalpipe.run.vllmserver import free_port, main

    url = f"http://127.0.0.1:{free_port()}/v1"
    argv = ["wait", "--base-url", url, "--model", "m", "--timeout", "0.1", "--log", "/x/s.log"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"the vLLM server at {url} for m is not usable: not ready after 0.1 s" in err
    assert "Connection refused" in err and "its log: /x/s.log" in err
    ended = subprocess.Popen(["true"])
    ended.wait()
    assert main(["wait", "--base-url", url, "--model", "m", "--pid", str(ended.pid)]) == 1
    assert "the server process ended" in capsys.readouterr().err


def test_serve_mode_needs_the_vllm_backend() -> None:
    from evalpipe.jobs.jobspec import JobOptions
    from evalpipe.run.runoptions import EngineOptions, RunnerOptions

    with pytest.raises(ConfigError, match="--mode serve starts vLLM's server"):
        JobOptions(mode="serve", run=RunnerOptions(engine=EngineOptions(backend="fake")))
    with pytest.raises(ConfigError, match="--mode 'remote' is not one of engine, serve"):
        JobOptions(mode="remote")  # type: ignore[arg-type]


def test_a_serve_mode_job_talks_to_its_own_server_with_a_full_window() -> None:
    from pathlib import Path

    from evalpipe.jobs.jobspec import JobOptions
    from evalpipe.jobs.prepare import prepare

    spec = prepare("tiny_random", "local", JobOptions(mode="serve"), Path("/tmp/run")).spec
    options = dict(spec.runner_options)
    assert options["--backend"] == "openai" and "--tp" not in options
    # 2 × vLLM's default max_num_seqs for the profile's GPU (1024 on an H100) × 1 replica.
    assert options["--concurrency"] == "2048"
    assert dict(spec.server_options)["--replicas"] == "1"
