"""Secrets given where a URL or a variable name belongs are refused without being echoed: not on
stderr, not in a run directory's manifest, not in the log of a SLURM job that meets them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalpipe.catalog.preset import load_preset, with_endpoint
from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError
from evalpipe.core.redact import looks_like_key, redact_url
from evalpipe.slurm.client import Slurm

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-abcdef0123456789abcdef0123456789"
# Each refused base URL and the secret in it.
SECRET_URLS = [
    ("https://user:hunter2secret@host/v1", "hunter2secret"),
    ("https://host/v1?key=sk-abc", "sk-abc"),
    (f"https://host/key/{KEY}/v1", KEY),
    ("https://host/v1#t0ken", "t0ken"),
]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pw@host:8000/v1", "https://***@host:8000/v1"),
        ("https://host/v1?key=1#frag", "https://host/v1?***"),
        ("https://host/v1#frag", "https://host/v1#***"),
        (f"https://host/key/{KEY}/v1", "https://host/key/***/v1"),
        ("https://host/hf_abc/v1", "https://host/***/v1"),
        ("https://host/a/0123456789abcdef0123456789abcdef01234567/v1", "https://host/a/***/v1"),
        (KEY, "***"),  # a key given where the URL belongs
        ("user:pw@host/v1", "***@host/v1"),
        # What stays: hosts, ports, versions, model and deployment names, a UUID.
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        (
            "https://h/openai/deployments/Llama-3.3-70B-Instruct-2024-08-06/v1",
            "https://h/openai/deployments/Llama-3.3-70B-Instruct-2024-08-06/v1",
        ),
        (
            "https://h/dc9911e2-c2d6-4b86-829a-036d3748eb4e/v1",
            "https://h/dc9911e2-c2d6-4b86-829a-036d3748eb4e/v1",
        ),
    ],
)
def test_redaction_hides_credentials_queries_and_key_like_segments(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_what_looks_like_a_key() -> None:
    keys = ["sk-1", "sk_live_abc", "hf_abc", "ghp_x", "abcdefghij0123456789", "A1" * 10]
    names = ["OPENAI_API_KEY", "HF_TOKEN", "MY_KEY_2", "abcdefghijklmnopqrstuvwxyz", "1" * 30]
    assert [looks_like_key(k) for k in keys] == [True] * len(keys)
    assert [looks_like_key(n) for n in names] == [False] * len(names)


@pytest.mark.parametrize(("url", "secret"), SECRET_URLS)
def test_a_refused_base_url_is_quoted_redacted(url: str, secret: str) -> None:
    with pytest.raises(ConfigError) as refused:
        with_endpoint(load_preset("tiny_random"), base_url=url)
    assert secret not in str(refused.value)
    assert "***" in str(refused.value) and "api_key_env" in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "https://h/openai/deployments/Llama-3.3-70B-Instruct/v1",
        "https://h/dc9911e2-c2d6-4b86-829a-036d3748eb4e/v1",
        "http://127.0.0.1:8000/v1",
    ],
)
def test_names_and_uuids_in_a_base_url_pass(url: str) -> None:
    assert with_endpoint(load_preset("tiny_random"), base_url=url).endpoint.base_url == url


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (KEY, "looks like a key rather than the name of an environment variable"),
        ("sk_live_0123456789abcdefghij", "looks like a key"),  # a valid name, still a key
        ("MY-KEY", "is not an environment variable name"),
    ],
)
def test_a_refused_api_key_env_is_not_echoed(value: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as refused:
        with_endpoint(load_preset("tiny_random"), api_key_env=value)
    assert value not in str(refused.value)
    assert f"a value of {len(value)} characters, not shown" in str(refused.value)


@pytest.mark.parametrize(("url", "secret"), SECRET_URLS)
@pytest.mark.parametrize("flag", ["--base-url", "--judge-base-url"])
def test_the_cli_refuses_without_echoing_and_records_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, secret: str, flag: str
) -> None:
    out = tmp_path / "run"
    args = ["run", "--preset", "tiny_random", "--backend", "openai", "--tasks", "arithmetic"]
    if flag == "--base-url":
        args += ["--base-url", url]
    else:
        args += ["--base-url", "http://127.0.0.1:9/v1", "--judge", "tiny_random", flag, url]
    assert main([*args, "--limit", "1", "--out", str(out)]) == exitcodes.ERROR
    err = capsys.readouterr().err
    assert "***" in err and secret not in err
    assert not out.exists()


def test_a_preset_file_with_a_key_in_its_url_is_refused_without_echoing(tmp_path: Path) -> None:
    preset = tmp_path / "served.yaml"
    preset.write_text(f"endpoint:\n  base_url: https://host/key/{KEY}/v1\n")
    with pytest.raises(ConfigError, match=r"served\.yaml.*looks like a key") as refused:
        load_preset(str(preset))
    assert KEY not in str(refused.value)


def _job_env() -> dict[str, str]:
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT)}


@pytest.mark.slurm
def test_a_slurm_job_that_meets_a_key_in_its_url_logs_it_redacted(
    local_slurm: Slurm, tmp_path: Path
) -> None:
    """Submit refuses the preset on the login node; a job whose preset gained the key after it
    was rendered refuses it on the node: neither stderr, the job's log nor its run directory
    holds the key."""
    tiny = (ROOT / "configs" / "presets" / "tiny_random.yaml").read_text()
    preset, out = tmp_path / "served.yaml", tmp_path / "run"
    common = ["--cluster", "local", "--backend", "openai", "--tasks", "arithmetic", "--limit", "1"]

    def evalpipe(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "evalpipe", *args]
        return subprocess.run(command, capture_output=True, text=True, env=_job_env(), timeout=120)

    preset.write_text(tiny + f"endpoint:\n  base_url: https://host/key/{KEY}/v1\n")
    refused = evalpipe("submit", "--preset", str(preset), *common, "--out", str(out))
    assert refused.returncode == exitcodes.ERROR and "looks like a key" in refused.stderr
    assert KEY not in refused.stdout + refused.stderr and not out.exists()

    preset.write_text(tiny + "endpoint:\n  base_url: http://127.0.0.1:9/v1\n")
    script = tmp_path / "job.sbatch"
    rendered = evalpipe(
        "render", "--preset", str(preset), *common, "--out", str(out), "-o", str(script)
    )
    assert rendered.returncode == 0, rendered.stderr
    preset.write_text(tiny + f"endpoint:\n  base_url: https://host/key/{KEY}/v1\n")
    (out / "logs").mkdir(parents=True)
    sbatch = ["sbatch", "--parsable", str(script)]  # the submitter's environment, as submit's
    submitted = subprocess.run(sbatch, capture_output=True, text=True, env=_job_env(), check=True)
    deadline = time.monotonic() + 180
    while not all(task.terminal for task in local_slurm.states(submitted.stdout.strip())):
        assert time.monotonic() < deadline, f"job {submitted.stdout} did not finish"
        time.sleep(1)
    logs = list((out / "logs").iterdir())
    assert logs and "looks like a key" in "".join(p.read_text() for p in logs)
    written = [p for p in out.rglob("*") if p.is_file()]
    assert all(KEY.encode() not in p.read_bytes() for p in written)  # the logs, any manifest
