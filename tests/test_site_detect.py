"""`evalpipe site detect`: recorded scontrol outputs of several site shapes (pure), and the local
SLURM for real: the written profile plans, renders and submits unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalpipe.catalog.clusters import Cluster, load_cluster
from evalpipe.catalog.gpus import load_gpus
from evalpipe.core.errors import ConfigError, SlurmError, UnknownNameError
from evalpipe.slurm import info as slurminfo
from evalpipe.slurm import sitedetect
from evalpipe.slurm.client import FakeSlurm

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "site"


def fixture(shape: str) -> tuple[str, str]:
    folder = FIXTURES / shape
    return (folder / "partition.txt").read_text(), (folder / "node.txt").read_text()


def detect(shape: str, **choices: str) -> sitedetect.Detected:
    return sitedetect.detect(*fixture(shape), load_gpus(), python="/opt/venv/bin/python", **choices)


def profile(detected: sitedetect.Detected, tmp_path: Path) -> Cluster:
    """The written file loaded as --cluster loads it; its YAML equals data()."""
    path = tmp_path / "site.yaml"
    path.write_text(detected.yaml())
    assert yaml.safe_load(path.read_text()) == detected.data()
    return load_cluster(str(path))


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("gpu:a100:4(S:0-1)", {"a100": 4}),
        ("gpu:4", {None: 4}),
        ("gpu:h100:4(S:0-1),nvme:1", {"h100": 4}),
        ("gpu:a100:2(S:0),gpu:v100:2(S:1)", {"a100": 2, "v100": 2}),
        ("gpu:nvidia_h100_80gb_hbm3:8(S:0,1)", {"nvidia_h100_80gb_hbm3": 8}),
        ("(null)", {}),
        ("mps:400,shard:32", {}),
    ],
)
def test_gres_strings(text: str, counts: dict) -> None:
    assert slurminfo.gpu_gres(text) == counts


def test_values_with_spaces_and_the_multiline_form_parse() -> None:
    (node,) = slurminfo.nodes(
        "NodeName=x1 CPUTot=8 OS=Linux 5.15 #1 SMP Tue Nov 14 Gres=gpu:a100:2 "
        "RealMemory=4096 Partitions=p,q CfgTRES=cpu=8,mem=4G\n"
    )
    assert (node.cpus, node.memory_mb, node.gpus, node.partitions) == (
        8,
        4096,
        {"a100": 2},
        ("p", "q"),
    )
    nodes = slurminfo.nodes(fixture("mixed")[1])
    assert [n.name for n in nodes] == ["g01", "g02", "g03", "h01", "h02"]
    assert nodes[3].gpus == {"h100": 4} and nodes[2].cpus == 64


def test_several_partitions_refuse_to_choose_then_each_one_is_read(tmp_path: Path) -> None:
    with pytest.raises(
        SlurmError, match=r"several have GPUs .*gpu: gpu:a100:4 on 2 nodes.*--partition"
    ):
        detect("multi")
    gpu = profile(detect("multi", partition="gpu"), tmp_path)
    assert (gpu.partition, gpu.gpu, gpu.gres_name, gpu.gpus_per_node) == (
        "gpu",
        "a100-80gb",
        "a100",
        4,
    )
    assert (gpu.cpus_per_node, gpu.memory_per_node_gib, gpu.max_nodes) == (64, 502, 2)
    assert (gpu.time_limit, gpu.max_time) == ("04:00:00", None)
    debug = profile(detect("multi", partition="debug"), tmp_path)
    assert (debug.time_limit, debug.max_time, debug.max_nodes, debug.cpus_per_node) == (
        "00:30:00",
        "00:30:00",
        1,
        32,
    )
    long = profile(detect("multi", partition="long"), tmp_path)
    assert (long.time_limit, long.max_time, long.qos) == ("04:00:00", "7-00:00:00", "long")
    with pytest.raises(SlurmError, match=r"'cpu' has no nodes with GPUs"):
        detect("multi", partition="cpu")
    with pytest.raises(UnknownNameError, match=r"Unknown partition 'gpus'\. Did you mean 'gpu'"):
        detect("multi", partition="gpus")


def test_every_uncertain_value_is_marked_and_listed() -> None:
    found = detect("multi", partition="gpu")
    checked = {e.key for e in found.checks()}
    assert checked == {
        "time_limit",  # MaxTime UNLIMITED
        "python",
        "setup",
        "account",
        "cache_dir",
        "hf_cache",
        "scratch_dir",
        "ray",
    }
    text = found.yaml()
    for key in checked:
        assert f"# CHECK {key}: " in text
    assert "# account: CHANGE-ME" in text and "account" not in found.data()
    assert "#   cpu*: no GPUs in GRES, MaxTime 2-00:00:00" in text
    assert "#   debug: gpu:a100:4 on 2 nodes, MaxTime 00:30:00" in text
    # A partition with a MaxTime has a time limit SLURM states.
    assert "time_limit" not in {e.key for e in detect("multi", partition="long").checks()}


def test_mixed_gpu_types_need_a_choice_and_uneven_nodes_are_marked(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match=r"mixes GPU types \(gpu:a100:8 on 3 nodes, gpu:h100:4"):
        detect("mixed")
    a100 = detect("mixed", gres_type="a100")
    cluster = profile(a100, tmp_path)
    # No features say 40 or 80 GB: the smaller A100 is assumed and marked.
    assert (cluster.gpu, cluster.gpus_per_node, cluster.cpus_per_node) == ("a100-40gb", 8, 64)
    notes = {e.key: e.note for e in a100.checks()}
    assert "a100-40gb, a100-80gb" in notes["gpu"] and "64–96 CPUs" in notes["cpus_per_node"]
    h100 = profile(detect("mixed", gres_type="h100", gpu="h100-80gb"), tmp_path)
    assert (h100.gpu, h100.gres_name, h100.gpus_per_node, h100.max_nodes) == (
        "h100-80gb",
        "h100",
        4,
        2,
    )
    with pytest.raises(UnknownNameError, match=r"Unknown GPU type in partition 'gpu' 'v100'"):
        detect("mixed", gres_type="v100")


def test_no_gres_refuses_with_the_partitions_seen() -> None:
    with pytest.raises(SlurmError, match=r"none has GPUs in GRES \(batch\*: no GPUs in GRES"):
        detect("nogres")


def test_autodetected_type_names_match_the_catalogue(tmp_path: Path) -> None:
    found = detect("autodetect")
    cluster = profile(found, tmp_path)
    assert (cluster.gpu, cluster.gres_name) == ("h100-80gb", "nvidia_h100_80gb_hbm3")
    # CPUEfctv (less specialized cores); RealMemory less MemSpecLimit, capped by MaxMemPerNode.
    assert (cluster.cpus_per_node, cluster.memory_per_node_gib) == (220, 1757)
    assert (cluster.max_nodes, cluster.time_limit, cluster.max_time) == (
        4,
        "04:00:00",
        "2-00:00:00",
    )
    assert "gpu" not in {e.key for e in found.checks()}


def test_an_unknown_gpu_refuses_and_names_the_option() -> None:
    nodes = "NodeName=z1 CPUTot=8 RealMemory=64000 Gres=gpu:4 Partitions=p\n"
    partitions = "PartitionName=p Default=YES MaxTime=1:00:00 MaxNodes=UNLIMITED\n"
    with pytest.raises(
        ConfigError, match=r"No GPU in the catalogue matches GRES type \(none\).*--gpu"
    ):
        sitedetect.detect(partitions, nodes, load_gpus(), python="python3")
    found = sitedetect.detect(partitions, nodes, load_gpus(), python="python3", gpu="l40s-48gb")
    assert "gres_name" not in found.data() and found.data()["gpu"] == "l40s-48gb"
    unconfigured = sitedetect.detect(
        partitions,
        nodes.replace("64000", "1"),
        load_gpus(),
        python="python3",
        gpu="l40s-48gb",
    )
    assert (
        "RealMemory 1 MB (not configured?)"
        in {e.key: e.note for e in unconfigured.checks()}["memory_per_node_gib"]
    )


def test_the_client_reads_scontrol_show() -> None:
    partitions, nodes = fixture("autodetect")
    slurm = FakeSlurm(shown={"partition": partitions, "node": nodes})
    assert slurm.show("node") == nodes
    assert slurm.calls == [["scontrol", "--oneliner", "show", "node"]]


# ---- The local SLURM (scripts/local-slurm.sh): two nodes, 4 fake H100 each ----


def evalpipe(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    return subprocess.run(
        [sys.executable, "-m", "evalpipe", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slurm
def test_detect_on_the_local_slurm_writes_a_profile_submit_takes(
    local_slurm, tmp_path: Path, tiny_random_path: Path
) -> None:
    # tiny_random_path: the jobs below load the prepared tiny_random, found through the
    # EVALPIPE_CACHE the fixture sets (not through an earlier test having set it).
    site = tmp_path / "mysite.yaml"
    done = evalpipe("site", "detect", "-o", str(site), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "check 8 values SLURM cannot tell" in done.stderr and "  account: " in done.stderr
    cluster = load_cluster(str(site))
    local = load_cluster("local")
    for key in ("partition", "gpu", "gres_name", "gpu_request", "gpus_per_node"):
        assert getattr(cluster, key) == getattr(local, key), key
    assert (cluster.cpus_per_node, cluster.memory_per_node_gib, cluster.max_nodes) == (4, 8, 2)
    assert cluster.python == sys.executable

    again = evalpipe("site", "detect", "-o", str(site), cwd=tmp_path)
    assert again.returncode == 1 and "exists; pass --force" in again.stderr

    common = ("--preset", "tiny_random", "--cluster", str(site), "--limit", "2")
    dry = evalpipe("submit", *common, "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "#SBATCH --gres=gpu:h100:" in dry.stdout and "#SBATCH --partition=local" in dry.stdout

    # A real job, of a preset from a user folder: the job finds it through EVALPIPE_CONFIG_PATH,
    # which sbatch passes on with the rest of the environment.
    mine = tmp_path / "mine" / "presets"
    mine.mkdir(parents=True)
    (mine / "my_tiny.yaml").write_text((ROOT / "configs/presets/tiny_random.yaml").read_text())
    run_dir = tmp_path / "run"
    args = ("--preset", "my_tiny", "--cluster", str(site), "--limit", "2", "--categories", "math")
    real = evalpipe(
        "submit",
        *args,
        *("--backend", "fake", "--out", str(run_dir), "--wait", "--poll", "1"),
        # The profile leaves replicas to fill the node (4 fake GPUs); this machine's 2 cores
        # take one CPU replica, as the shipped local profile says.
        *("--replicas", "1"),
        cwd=tmp_path,
        EVALPIPE_CONFIG_PATH=str(tmp_path / "mine"),
    )
    assert real.returncode == 0, real.stdout + real.stderr
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert "--preset my_tiny" in (run_dir / "job.sbatch").read_text()
