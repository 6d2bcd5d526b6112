"""Cluster profiles: every shipped one loads; bad values are refused with the value and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalpipe.catalog.clusters import load_cluster
from evalpipe.catalog.configpath import names
from evalpipe.catalog.slurmtime import slurm_minutes
from evalpipe.core.errors import ConfigError, UnknownNameError


def write(tmp_path: Path, text: str, name: str = "site.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


MINIMAL = """\
gpu: h100-80gb
gpus_per_node: 8
cpus_per_node: 64
memory_per_node_gib: 512
"""


def test_shipped_profiles_load() -> None:
    assert set(names("clusters")) >= {"local", "example-h100-site", "gh200"}
    local = load_cluster("local")
    assert (local.partition, local.gpu, local.gres_name) == ("local", "h100-80gb", "h100")
    assert (local.gpus_per_node, local.max_nodes) == (4, 2)
    assert local.env["VLLM_CPU_KVCACHE_SPACE"] == 1
    gh200 = load_cluster("gh200")
    assert (gh200.gpu, gh200.gpus_per_node, gh200.gpu_request) == ("gh200-96gb", 1, "gpus-per-node")


def test_local_profile_matches_the_local_slurm_script() -> None:
    """local.yaml describes what scripts/local-slurm.sh declares per node."""
    script = (Path(__file__).parent.parent / "scripts" / "local-slurm.sh").read_text()
    local = load_cluster("local")
    assert f"NODE_CPUS=${{EVALPIPE_SLURM_NODE_CPUS:-{local.cpus_per_node}}}" in script
    assert (
        f"NODE_MEM_MB=${{EVALPIPE_SLURM_NODE_MEM_MB:-{local.memory_per_node_gib * 1024}}}" in script
    )
    assert f"GPUS_PER_NODE={local.gpus_per_node}" in script
    assert f"Gres=gpu:{local.gres_name}:" in script
    assert f"PartitionName={local.partition} " in script


def test_a_profile_path_works_and_its_stem_is_the_name(tmp_path: Path) -> None:
    cluster = load_cluster(write(tmp_path, MINIMAL, "mysite.yaml"))
    assert cluster.name == "mysite"
    assert cluster.time_limit == "04:00:00" and cluster.gpu_request == "gres"


def test_unknown_cluster_name_suggests() -> None:
    with pytest.raises(UnknownNameError, match=r"Did you mean 'local'\?"):
        load_cluster("locl")


def test_unknown_key_is_refused_with_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'partiton'.*Did you mean 'partition'"):
        load_cluster(write(tmp_path, MINIMAL + "partiton: gpu\n"))


def test_unknown_gpu_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match="Unknown GPU 'h100'"):
        load_cluster(write(tmp_path, MINIMAL.replace("h100-80gb", "h100")))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("partition: gpu; rm -rf /\n", "partition 'gpu; rm -rf /' is not a SLURM name"),
        ("account: '$(id)'\n", "account '\\$\\(id\\)' is not a SLURM name"),
        ("gpu_request: gpus\n", "gpu_request 'gpus' is not one of gres, gpus-per-node"),
        ("time_limit: 4:00:00\n", "time_limit must be a quoted string"),  # YAML: 14400
        ("time_limit: 'four hours'\n", "is not a SLURM time"),
        ("time_limit: '10:00:00'\nmax_time: '08:00:00'\n", "exceeds max_time"),
        ("signal_seconds: 70000\n", "signal_seconds must be within 0..65535"),
        ("max_restarts: -1\n", "max_restarts must be 0 or more"),
        ('setup: ["module load cuda\\nrm -rf /"]\n', "each setup entry must be one line"),
        ("sbatch_extra: ['constraint=h100']\n", "long options"),
        ("python: ''\n", "python must name a command"),
        ('python: "python \'unclosed"\n', "not a valid command line"),
        ("env: {'BAD NAME': 1}\n", "not a shell variable name"),
        ("env: {X: [1]}\n", "must be text or a number"),
        ("ray: {node_port_stride: 50}\n", "node_port_stride must be at least 200"),
    ],
)
def test_bad_values_are_refused(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_cluster(write(tmp_path, MINIMAL + extra))


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("90", 90),
        ("90:30", 91),
        ("04:00:00", 240),
        ("1-12", 2160),
        ("1-00:30", 1470),
        ("2-00:00:01", 2881),
    ],
)
def test_slurm_time_forms(text: str, minutes: int) -> None:
    assert slurm_minutes(text) == minutes
