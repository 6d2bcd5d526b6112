"""The endpoint engine (`--backend openai`) against a local fault-injecting server: every sample
written exactly once whatever the server does, bounded retries, a clear error when the server
stays down, resume, stop signals, and an API key that never reaches the run directory."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from endpoint_support import FaultServer, answer

from evalpipe.catalog.preset import load_preset
from evalpipe.cli import main
from evalpipe.core import exitcodes

LIMIT = 12
SECRET = "sk-evalpipe-test-4f2a9c"  # must never appear in the run directory or the output


def endpoint_preset(tmp_path: Path, **endpoint: object) -> Path:
    """tiny_random with an endpoint block tuned for tests (short timeouts and backoff)."""
    data = yaml.safe_load(Path("configs/presets/tiny_random.yaml").read_text())
    data["endpoint"] = {"timeout_s": 5.0, "backoff_s": 0.05, "max_retries": 3, **endpoint}
    path = tmp_path / "tiny_endpoint.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run_args(preset: Path, server: FaultServer, out: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--preset",
        str(preset),
        "--backend",
        "openai",
        "--base-url",
        server.base_url,
        "--tasks",
        "arithmetic",
        "--limit",
        str(LIMIT),
        "--out",
        str(out),
        "--monitor-interval",
        "5",
        *extra,
    ]


def samples(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def assert_complete_once(out: Path) -> None:
    """Every planned sample exactly once, each with the server's answer to its own prompt."""
    records = samples(out)
    ids = [r["sample_id"] for r in records]
    assert len(ids) == len(set(ids)) == LIMIT
    for record in records:
        assert record["completions"] == [answer(record["prompt"])]


def test_every_fault_is_retried_and_no_sample_is_lost_or_written_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    faults = ["429", "500", "timeout", "truncated", "drop", "garbage"]
    monkeypatch.setenv("EVALPIPE_TEST_KEY", SECRET)
    out = tmp_path / "run"
    with FaultServer(faults=faults, api_key=SECRET, hang_s=4.0) as server:
        preset = endpoint_preset(tmp_path, timeout_s=2.0)
        status = main(run_args(preset, server, out, "--api-key-env", "EVALPIPE_TEST_KEY"))
    assert status == exitcodes.OK
    assert_complete_once(out)
    assert all(server.outcomes[f] == 1 for f in faults)
    engine = json.loads((out / "manifest.json").read_text())["engine"]
    assert engine["backend"] == "openai" and engine["device"] == "remote"
    # One retry per fault (a loaded machine may time out an answer more than once).
    retries = engine["retries"]
    assert retries["429"] == retries["500"] == retries["bad body"] == 1
    assert retries["connection"] == 2 and retries["timeout"] >= 1
    assert engine["http_calls"] == LIMIT + sum(retries.values()) + 1  # + GET /models
    # Bounded: no prompt was sent more than 1 + max_retries (3) times, though a retry may meet
    # the next fault. The 429 said Retry-After: 1, and the retry of that prompt came no sooner.
    arrivals = list(server.times.values())
    assert max(len(t) for t in arrivals) <= 4
    assert max(b - a for t in arrivals for a, b in itertools.pairwise(t)) >= 1.0
    # The key went to the server (it refuses requests without it) but nowhere else.
    assert engine["api_key_env"] == "EVALPIPE_TEST_KEY"
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_a_server_that_stays_down_fails_clearly_and_resume_finishes_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    preset = endpoint_preset(tmp_path, max_retries=2)
    out = tmp_path / "run"
    with FaultServer() as server:
        server.down = True
        # Two requests in flight: the first to give up ends the run.
        assert main(run_args(preset, server, out, "--concurrency", "2")) == exitcodes.ERROR
        err = capsys.readouterr().err
        assert "failed 3 time(s); last: HTTP 503: Service Unavailable" in err
        assert "rerun the same command" in err
        # Retries are bounded: at most 3 attempts for each request that was in flight.
        assert max(len(t) for t in server.times.values()) == 3
        assert not (out / "samples.jsonl").exists() or samples(out) == []
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["status"] == "failed"
    # Back up on another port (a requeued server-mode job gets a new one): the run resumes.
    with FaultServer() as server:
        assert main(run_args(preset, server, out, "--concurrency", "2")) == exitcodes.OK
    assert_complete_once(out)


def test_a_failure_mid_run_keeps_what_finished(tmp_path: Path) -> None:
    """Some samples finish, then the server goes down: they stay written, resume adds the rest."""
    preset = endpoint_preset(tmp_path, max_retries=1)
    out = tmp_path / "run"
    with FaultServer(delay_s=0.05) as server:
        original = server.reply

        def reply_then_fail(path: str, body: dict) -> dict:
            if sum(server.answered.values()) >= 5:
                server.down = True
            return original(path, body)

        server.reply = reply_then_fail  # type: ignore[method-assign]
        assert main(run_args(preset, server, out, "--concurrency", "1")) == exitcodes.ERROR
        first = samples(out)
        assert 5 <= len(first) < LIMIT
        server.down = False
        server.reply = original  # type: ignore[method-assign]
        assert main(run_args(preset, server, out, "--concurrency", "1")) == exitcodes.OK
    assert_complete_once(out)
    # Nothing finished before the failure was asked for again.
    assert all(server.answered[s["prompt"]] == 1 for s in first)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--model", "llama-9", "does not serve model 'llama-9'; it serves: tiny-random-llama"),
        ("--api-key-env", "EVALPIPE_UNSET_KEY", "the variable EVALPIPE_UNSET_KEY is not set"),
        ("--replicas", "2", "the server runs its own replicas"),
    ],
)
def test_refused_before_the_first_request(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    option: str,
    value: str,
    message: str,
) -> None:
    """A model the server does not serve (the error lists what it serves), a key variable that
    is not set, replicas of a client."""
    monkeypatch.delenv("EVALPIPE_UNSET_KEY", raising=False)
    with FaultServer() as server:
        args = run_args(endpoint_preset(tmp_path), server, tmp_path / "run", option, value)
        assert main(args) == exitcodes.ERROR
        assert not server.bodies
    assert message in capsys.readouterr().err


def test_a_refused_key_says_which_variable_to_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("EVALPIPE_TEST_KEY", "sk-wrong")
    with FaultServer(api_key=SECRET) as server:
        args = run_args(
            endpoint_preset(tmp_path),
            server,
            tmp_path / "run",
            "--api-key-env",
            "EVALPIPE_TEST_KEY",
        )
        assert main(args) == exitcodes.ERROR
    err = capsys.readouterr().err
    assert "HTTP 401: Invalid API key" in err and "EVALPIPE_TEST_KEY" in err
    assert "sk-wrong" not in err


def test_endpoint_options_need_the_openai_backend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["run", "--preset", "tiny_random", "--backend", "fake", "--base-url", "http://x/v1"]
    assert main([*args, "--out", str(tmp_path / "run")]) == exitcodes.ERROR
    assert "--base-url only apply to --backend openai" in capsys.readouterr().err


def test_a_key_in_the_url_is_refused() -> None:
    from evalpipe.catalog.preset import with_endpoint
    from evalpipe.core.errors import ConfigError

    for url in ("http://me:sk-1@host:8000/v1", "http://host:8000/v1?key=sk-1"):
        with pytest.raises(ConfigError, match="credentials and query strings in the URL"):
            with_endpoint(load_preset("tiny_random"), base_url=url)


def test_a_stop_signal_cancels_requests_in_flight_and_resume_finishes(tmp_path: Path) -> None:
    """SIGUSR1 mid-run: the runner aborts the slow requests at once, checkpoints, exits 75;
    the rerun finishes without asking again for anything written."""
    preset = endpoint_preset(tmp_path, timeout_s=30.0)
    out = tmp_path / "run"
    with FaultServer(delay_s=2.0) as server:
        argv = run_args(preset, server, out, "--concurrency", "2")
        proc = subprocess.Popen(
            [sys.executable, "-m", "evalpipe", *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            path = out / "samples.jsonl"
            if path.exists() and path.read_text().count("\n") >= 2:
                break
            time.sleep(0.1)
        time.sleep(0.5)  # the next two requests are now in flight on the server
        stopped_at = time.monotonic()
        proc.send_signal(signal.SIGUSR1)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == exitcodes.RESUMABLE, err
        # Aborted, not waited for: the in-flight requests needed 2 s more.
        assert time.monotonic() - stopped_at < 1.9 or server.disconnects > 0
        first = samples(out)
        assert 2 <= len(first) < LIMIT
        server.delay_s = 0.0
        assert main(run_args(preset, server, out)) == exitcodes.OK
    assert_complete_once(out)
    assert all(server.answered[s["prompt"]] == 1 for s in first)


def test_multiple_choice_by_logprobs_reads_the_options_prompt_logprobs(
    tmp_path: Path, tiny_random_path: Path
) -> None:
    preset = endpoint_preset(tmp_path)
    out = tmp_path / "run"
    with FaultServer() as server:
        args = run_args(preset, server, out, "--mc-method", "logprobs")
        args[args.index("arithmetic")] = "ordering"
        assert main(args) == exitcodes.OK
        scoring = [b for b in server.bodies if b.get("echo")]
    records = samples(out)
    assert len(records) == LIMIT
    for record in records:
        assert len(record["option_logprobs"]) >= 2
        assert all(lp < 0 for lp in record["option_logprobs"])
    # One echo request per option, generating nothing.
    assert len(scoring) == sum(len(r["option_logprobs"]) for r in records)
    assert all(b["max_tokens"] == 0 and b["logprobs"] == 1 for b in scoring)


def test_a_server_without_prompt_logprobs_is_refused_clearly(
    tmp_path: Path, tiny_random_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FaultServer(echo_logprobs=False) as server:
        args = run_args(endpoint_preset(tmp_path), server, tmp_path / "run", "--mc-method")
        args += ["logprobs"]
        args[args.index("arithmetic")] = "ordering"
        assert main(args) == exitcodes.ERROR
    err = capsys.readouterr().err
    assert "did not return the prompt's log-probabilities" in err
    assert "--mc-method generate" in err


def test_top_logprobs_are_refused_since_the_api_names_no_token_ids(tmp_path: Path) -> None:
    from evalpipe.core.errors import ConfigError
    from evalpipe.engine.endpoint import EndpointEngine
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.records.sampling import SamplingSettings

    with FaultServer() as server:
        preset = load_preset(str(endpoint_preset(tmp_path, base_url=server.base_url)))
        engine = EndpointEngine.open(preset, EngineSettings())
        try:
            with pytest.raises(ConfigError, match="top_logprobs=2, which the openai backend"):
                engine.generate(["q"], SamplingSettings(), top_logprobs=2)
        finally:
            engine.close()
        assert server.bodies == []  # refused before anything was sent


def test_the_report_shows_an_endpoint_run_on_a_remote_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with FaultServer() as server:
        assert main(run_args(endpoint_preset(tmp_path), server, out)) == exitcodes.OK
    capsys.readouterr()
    assert main(["report", str(out)]) == exitcodes.OK
    table = capsys.readouterr().out
    [row] = [line for line in table.splitlines() if line.startswith("| tiny_endpoint |")]
    cells = [c.strip() for c in row.split("|")]
    assert cells[3] == "remote" and cells[-2] == cells[-3] == cells[-4] == "—"
    assert "Devices 'remote': the model ran on a server" in table


@pytest.mark.parametrize(
    ("fault", "retry_after", "message"),
    [
        ("400", "1", "HTTP 400: Unrecognized request argument: top_k"),
        ("429", "1000", "asks to come back in 1000 s (Retry-After)"),
    ],
)
def test_answers_that_retrying_cannot_fix_fail_at_once_with_the_servers_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: str, retry_after: str, message: str
) -> None:
    """A 4xx other than 429 (a field the server refuses), or a Retry-After beyond ten minutes."""
    with FaultServer(faults=[fault], retry_after=retry_after) as server:
        args = run_args(endpoint_preset(tmp_path), server, tmp_path / "run", "--concurrency", "1")
        assert main(args) == exitcodes.ERROR
        assert sum(server.outcomes.values()) == 1  # not retried
    assert message in capsys.readouterr().err
