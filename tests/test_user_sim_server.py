"""A local run's user simulator behind its own vLLM server (run/usersimserver.py): the command
it starts, and tiny_random served for real (bench tier: a vLLM server start on the CPU)."""

from __future__ import annotations

import os
import sys
import urllib.request
from pathlib import Path

import pytest

from evalpipe.cli import parse_args
from evalpipe.core.errors import ConfigError, EngineError
from evalpipe.run.usersimserver import server_command, user_sim_server
from evalpipe.run.vllmserver import probe


def test_the_server_is_evalpipe_serve_for_the_preset_beside_the_models_gpus() -> None:
    argv = server_command("smollm2_135m", port=8123, skip_gpus=2)
    assert argv[:3] == [sys.executable, "-m", "evalpipe"]
    args = parse_args(argv[3:])  # what `evalpipe serve` reads from it
    assert (args.preset, args.replicas, args.port, args.skip_gpus) == ("smollm2_135m", 1, 8123, 2)
    assert parse_args(server_command("smollm2_135m", port=8123)[3:]).skip_gpus is None


def test_a_preset_that_does_not_exist_is_refused_before_anything_starts(tmp_path: Path) -> None:
    refused = pytest.raises(ConfigError, match="no_such_preset")
    with refused, user_sim_server("no_such_preset", log=tmp_path / "log"):
        pass
    assert not (tmp_path / "log").exists()


def test_a_server_that_dies_is_reported_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "user-sim.log"
    # A server that cannot start: evalpipe serve refuses --skip-gpus 0 at once.
    died = pytest.raises(EngineError, match=rf"server process ended .*its log: {log}")
    with died, user_sim_server("tiny_random", log=log, skip_gpus=0, timeout_s=120):
        pass
    assert "--skip-gpus" in log.read_text()


@pytest.mark.bench
@pytest.mark.vllm
def test_tiny_random_is_served_for_the_block_and_stopped_after(
    tiny_random_path: Path, vllm_env: dict, tmp_path: Path
) -> None:
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}  # the server's own layout
    with user_sim_server("tiny_random", log=tmp_path / "log", env=env, timeout_s=300) as where:
        assert where.model == "tiny-random-llama"
        assert probe(where.base_url, where.model) == ""
    with pytest.raises(OSError):  # stopped: nothing listens there any more
        urllib.request.urlopen(where.base_url.removesuffix("/v1") + "/health", timeout=5)
