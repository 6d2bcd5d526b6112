"""Containers on SLURM: the profile's `container:` block, the launch lines rendered for pyxis and
Apptainer (golden files, shellcheck, quoting), and bad input refused with the fix."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import evalpipe
from evalpipe.catalog.clusters import load_cluster
from evalpipe.catalog.configpath import config_dir
from evalpipe.catalog.containers import cached_sif_name
from evalpipe.core.errors import ConfigError
from evalpipe.core.options import record_from
from evalpipe.jobs.jobspec import JobOptions
from evalpipe.jobs.prepare import prepare
from evalpipe.run.runoptions import LayoutOptions, RunnerOptions
from tests.test_render import GOLDEN, HOSTILE, RUN_DIR, UPDATE, golden_texts

IMAGES = {"pyxis": "/scratch/images/vllm.sqsh", "apptainer": "/scratch/images/vllm.sif"}
MOUNTS = ["/scratch/weights:/weights:ro", "/scratch/shared"]


def container_site(
    folder: Path, runtime: str, hf_cache: str = "/scratch/hf", **container: Any
) -> str:
    """The local cluster's profile with a container block (named <runtime>-site)."""
    data = yaml.safe_load((config_dir() / "clusters" / "local.yaml").read_text())
    data["hf_cache"] = hf_cache
    data["container"] = {
        "runtime": runtime,
        "image": IMAGES["apptainer" if runtime == "apptainer" else "pyxis"],
        "mounts": MOUNTS,
        "env": ["HF_TOKEN"],
        **container,
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{runtime}-site.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def limited(**values: Any) -> RunnerOptions:
    return record_from(RunnerOptions, {"limit": 5, **values})


# Each job shape the issue names, under each runtime.
SHAPES = {
    "single": ("tiny_random", JobOptions(run=limited(backend="fake"))),
    "ray": ("tiny_random", JobOptions(run=RunnerOptions(layout=LayoutOptions(tp=4, pp=2)))),
    "serve": ("tiny_random", JobOptions(mode="serve", run=limited())),
    "judged": ("tiny_random", JobOptions(run=limited(tasks=("mt_bench",), judge="tiny_random"))),
    "shards2": ("tiny_random", JobOptions(shards=2, run=limited())),
    "usersim": ("tiny_random", JobOptions(run=limited(user_sim="smollm2_135m"))),
}
CASES = [(runtime, shape) for runtime in IMAGES for shape in SHAPES]


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("sites")
    return {runtime: container_site(folder, runtime) for runtime in IMAGES}


@pytest.mark.parametrize(("runtime", "shape"), CASES)
def test_golden(runtime: str, shape: str, sites: dict[str, str]) -> None:
    preset, options = SHAPES[shape]
    prepared = prepare(preset, sites[runtime], options, RUN_DIR)
    for file, text in golden_texts(f"{preset}-{runtime}-{shape}", prepared).items():
        path = GOLDEN / file
        if UPDATE:
            path.write_text(text)
        assert path.is_file(), f"{path} missing: run EVALPIPE_UPDATE_GOLDEN=1 pytest {__file__}"
        assert text == path.read_text(), f"{file} differs; regenerate with EVALPIPE_UPDATE_GOLDEN=1"


def container_goldens() -> list[Path]:
    return sorted(p for r in IMAGES for p in GOLDEN.glob(f"*-{r}-*.sbatch"))


def test_container_goldens_cover_every_shape() -> None:
    """(test_render shellchecks every golden file, these included.)"""
    assert len(container_goldens()) == len(CASES) + len(IMAGES)  # the arrays' merge jobs too


def without_launch(text: str) -> str:
    """A script less its container partial (the lines between python= and run_dir=)."""
    return re.sub(r"(?ms)^python=\(.*?^(?=run_dir=)", "", text)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_job_with_a_container_differs_only_in_its_launch_lines(
    shape: str, sites: dict[str, str], tmp_path: Path
) -> None:
    data = yaml.safe_load(Path(sites["pyxis"]).read_text())
    del data["container"]
    plain = tmp_path / "SITE.yaml"
    plain.write_text(yaml.safe_dump(data))
    preset, options = SHAPES[shape]
    without = prepare(preset, str(plain), options, RUN_DIR).script
    for runtime in IMAGES:
        text = (GOLDEN / f"tiny_random-{runtime}-{shape}.sbatch").read_text()
        assert without_launch(text.replace(f"{runtime}-site", "SITE")) == without_launch(without)


def test_pyxis_flags_go_on_srun_lines_and_every_process_is_a_step() -> None:
    single = (GOLDEN / "tiny_random-pyxis-single.sbatch").read_text()
    assert not re.search(r"^#SBATCH --container", single, re.M)
    assert (
        "    --container-image=/scratch/images/vllm.sqsh\n"
        "    --container-mounts=/scratch/weights:/weights:ro,/scratch/shared:/scratch/shared,"
        f"{RUN_DIR}:{RUN_DIR},/scratch/hf:/scratch/hf,/tmp:/tmp\n"
        "    --no-container-mount-home --container-name=evalpipe\n"
        "    --container-env=HF_HUB_OFFLINE,VLLM_CPU_KVCACHE_SPACE,VLLM_ENABLE_V1_MULTIPROCESSING,"
        "HF_HOME,EVALPIPE_CONTAINER_RUNTIME,EVALPIPE_CONTAINER_IMAGE,HF_TOKEN\n"
    ) in single
    assert 'python=("${node_step[@]}" -w "$SLURMD_NODENAME" "${python[@]}")\n' in single
    # The runner, the preflight and (in other shapes) the server and Ray run through "python".
    assert '"${python[@]}" -m evalpipe run' in single
    ray = (GOLDEN / "tiny_random-pyxis-ray.sbatch").read_text()
    monitor = '"${node_step[@]}" -w "$node" \\\n            "${node_python[@]}" -m evalpipe monitor'
    assert monitor in ray
    assert '"${node_python[@]}" -m ray.scripts.scripts start' in ray
    merge = (GOLDEN / "tiny_random-pyxis-shards2.merge.sbatch").read_text()
    assert "--container-image=/scratch/images/vllm.sqsh" in merge
    assert 'exec "${python[@]}" -m evalpipe merge' in merge


def test_apptainer_passes_the_environment_its_containall_drops() -> None:
    single = (GOLDEN / "tiny_random-apptainer-single.sbatch").read_text()
    assert "apptainer exec --nv --containall\n" in single
    assert "    --bind /scratch/weights:/weights:ro\n" in single
    assert f"    --bind {RUN_DIR}:{RUN_DIR}\n" in single
    pattern = (
        "'^(SLURMD?_.*|CUDA_VISIBLE_DEVICES|HF_HOME|RAY_ADDRESS|HF_HUB_OFFLINE|"
        "VLLM_CPU_KVCACHE_SPACE|VLLM_ENABLE_V1_MULTIPROCESSING|EVALPIPE_CONTAINER_RUNTIME|"
        "EVALPIPE_CONTAINER_IMAGE|HF_TOKEN)$'"
    )
    assert f"evalpipe-container {pattern}\n" in single


# ---- the profile's container block: checked when it loads ----


def load(tmp_path: Path, runtime: str = "pyxis", **container: Any) -> Any:
    return load_cluster(container_site(tmp_path, runtime, **container))


@pytest.mark.parametrize(
    ("container", "message"),
    [
        ({"runtime": ["pyxis", "apptainer"]}, "a profile runs one runtime"),
        ({"runtime": "docker"}, "is not one of pyxis, apptainer"),
        ({"image": "vllm.sqsh"}, "does not start with / or ./"),
        ({"image": "/img/vllm.sif"}, "is a .sif file, which pyxis does not run"),
        ({"mounts": ["weights:/w"]}, "'weights' must be an absolute path"),
        ({"mounts": ["/a:/b:/c"]}, "is not SOURCE"),
        ({"mounts": ["/a,/b"]}, "without commas"),
        ({"env": ["HF TOKEN"]}, "not a variable name"),
        ({"workdir": "work"}, "workdir 'work' must be an absolute path"),
        ({"imag": "/x.sqsh"}, "unknown key 'imag'. Did you mean 'image'"),
    ],
)
def test_bad_container_blocks_are_refused_with_the_fix(
    tmp_path: Path, container: dict, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(tmp_path, **container)


def test_an_apptainer_registry_reference_needs_a_pull_cache(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"Set container\.sif_cache"):
        load(tmp_path, "apptainer", image="docker://vllm/vllm-openai:v0.9.1")
    site = load(tmp_path, "apptainer", image="docker://vllm/vllm-openai:v0.9.1", sif_cache="/sif")
    assert site.container.launch_image == "/sif/vllm_vllm-openai_v0.9.1.sif"
    assert cached_sif_name("docker://vllm/vllm-openai:v0.9.1") == "vllm_vllm-openai_v0.9.1.sif"


def test_a_python_wrapper_and_a_container_block_are_refused_together(tmp_path: Path) -> None:
    path = Path(container_site(tmp_path, "apptainer"))
    path.write_text(path.read_text() + "python: apptainer exec --nv img.sif python3\n")
    with pytest.raises(ConfigError, match="set python to the image's own python"):
        load_cluster(str(path))


def test_container_image_overrides_the_profile(tmp_path: Path) -> None:
    site = container_site(tmp_path, "pyxis")
    options = JobOptions(container_image="nvcr.io#nvidia/vllm:25.01", run=limited(backend="fake"))
    script = prepare("tiny_random", site, options, RUN_DIR).script
    assert "--container-image=nvcr.io#nvidia/vllm:25.01'" in script
    assert "vllm.sqsh" not in script
    with pytest.raises(ConfigError, match="has no container: block"):
        prepare("tiny_random", "local", options, RUN_DIR)
    with pytest.raises(ConfigError, match=r"--container-image: .*\.sif file"):
        prepare("tiny_random", site, JobOptions(container_image="/x.sif"), RUN_DIR)


def test_hostile_image_and_mounts_are_quoted_and_run_nothing(tmp_path: Path) -> None:
    """Each runtime's launch line, run in bash with recording stand-ins: the hostile image and
    mount reach the runtime as single literal words, and nothing is executed."""
    from tests.test_render import recorded, run_job, stand_ins

    hostile_path = "/data/" + HOSTILE.replace(",", "").replace(":", "")
    for runtime in IMAGES:
        folder = tmp_path / runtime
        image = hostile_path + IMAGES[runtime][-5:]
        site = container_site(folder, runtime, image=image, mounts=[hostile_path])
        options = JobOptions(run=limited(backend="fake"))
        script = prepare("tiny_random", site, options, RUN_DIR).script
        stand_ins(folder / "stub")
        # The runtime records its argv, then runs the command from the python3 stand-in on.
        launcher = folder / "stub" / ("srun" if runtime == "pyxis" else "apptainer")
        launcher.write_text(
            '#!/bin/bash\nprintf "%s\\0" "$@" >> "$STUB_DIR/launch.argv"\n'
            'for ((i = 1; i <= $#; i++)); do [ "${!i}" = python3 ] && exec "${@:i}"; done\n'
            "exit 99\n"
        )
        launcher.chmod(0o755)
        result = run_job(script, folder, SLURMD_NODENAME="node1")
        assert result.returncode == 0, result.stderr
        argv = recorded(folder / "launch.argv")
        if runtime == "pyxis":
            assert f"--container-image={image}" in argv
            assert f"--container-mounts={hostile_path}:{hostile_path},{RUN_DIR}:{RUN_DIR}," in (
                "".join(a + "," for a in argv if a.startswith("--container-mounts="))
            )
        else:
            assert image in argv and f"{hostile_path}:{hostile_path}" in argv
        run = recorded(folder / "python.argv")
        assert run[run.index("--out") + 1] == str(RUN_DIR)
    assert not list(tmp_path.rglob("PWNED")), "a hostile value was executed"


@pytest.mark.slurm
def test_the_local_slurm_accepts_every_container_golden(local_slurm: Any, tmp_path: Path) -> None:
    """sbatch --test-only on a SLURM without pyxis: the container flags are on srun lines only,
    so nothing in the batch options is refused."""
    for path in container_goldens():
        answer = local_slurm.test_only(path)
        assert re.search(r"to start at .* on nodes node", answer), (path.name, answer)
    # Why: the same option as a batch directive is refused where pyxis is missing.
    from evalpipe.core.errors import SlurmError

    text = (
        (GOLDEN / "tiny_random-pyxis-single.sbatch")
        .read_text()
        .replace("#SBATCH --requeue\n", "#SBATCH --requeue\n#SBATCH --container-image=/x.sqsh\n")
    )
    refused = tmp_path / "directive.sbatch"
    refused.write_text(text)
    with pytest.raises(SlurmError, match="unrecognized option '--container-image"):
        local_slurm.test_only(refused)


# ---- real jobs on the local SLURM, through each runtime's stand-in (tests/container_standins) ----

STANDINS = Path(__file__).parent / "container_standins"


def standin_job(tmp_path: Path, runtime: str) -> tuple[str, dict[str, str]]:
    """A profile running the job in a stand-in image, and the submitter's environment with the
    runtime's stand-in first on PATH. The Apptainer image file holds the image's environment:
    this checkout's python and evalpipe (what a real image would have installed)."""
    from tests.test_slurm_local import job_env

    env = job_env(EVALPIPE_FAKE_DELAY_S="1", EVALPIPE_STANDIN_LOG=str(tmp_path / "standin.log"))
    env["PATH"] = f"{STANDINS / runtime}:{env['PATH']}"
    image = tmp_path / ("image.sqsh" if runtime == "pyxis" else "image.sif")
    image.write_text(f"PATH={env['PATH']}\nPYTHONPATH={env['PYTHONPATH']}\n")
    for folder in ("weights", "hf"):
        (tmp_path / folder).mkdir()
    site = container_site(
        tmp_path,
        runtime,
        hf_cache=str(tmp_path / "hf"),
        image=str(image),
        mounts=[f"{tmp_path / 'weights'}:/weights:ro"],
        env=["EVALPIPE_FAKE_DELAY_S", "PYTHONPATH"],
    )
    return site, env


@pytest.mark.slurm
def test_jobs_in_containers_complete_and_resume_after_the_warning_signal(
    local_slurm: Any, tmp_path: Path
) -> None:
    """A job per runtime, side by side: the runner runs in the (stand-in) image; SLURM's
    warning reaches it there, it checkpoints into the mounted run directory, the job requeues
    and the next start resumes."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    from tests.test_slurm_local import preempt, samples, submit_fake

    jobs = {}
    for runtime in IMAGES:
        folder = tmp_path / runtime
        folder.mkdir()
        site, env = standin_job(folder, runtime)
        jobs[runtime] = submit_fake(folder, "run", cluster=site, env=env)
    with ThreadPoolExecutor(len(jobs)) as pool:
        list(pool.map(lambda job: preempt(job, "--signal=USR1", "--batch"), jobs.values()))
    for runtime, job in jobs.items():
        status = job.wait(poll_s=1, timeout_s=180)
        log = next((job.run_dir / "logs").glob("*.out")).read_text()
        assert status.ok, log[-3000:]
        assert "stopped at a checkpoint; requeueing job" in log and "start 2 of at most 3" in log
        manifest = json.loads((job.run_dir / "manifest.json").read_text())
        # SLURM's variables reached the runner in the image (Apptainer's --containall drops them).
        assert manifest["slurm"]["job_id"] == job.job_id
        assert manifest["slurm"]["restart_count"] == 1
        assert manifest["hosts"][0] in ("node1", "node2")  # SLURMD_NODENAME, passed in
        image = tmp_path / runtime / ("image.sqsh" if runtime == "pyxis" else "image.sif")
        assert manifest["slurm"]["container"] == {"runtime": runtime, "image": str(image)}
        # The versions the runner found in the image.
        assert manifest["versions"]["evalpipe"] == evalpipe.__version__
        assert manifest["status"] == "complete" and len(samples(job.run_dir)) > 0
        folder = tmp_path / runtime
        launches = (folder / "standin.log").read_text().splitlines()
        assert all(f"image={folder}/image" in line for line in launches), launches
        assert all(f"{folder / 'weights'}:/weights:ro" in line for line in launches)
        # Each start: the preflight's version check and the runner, both in the image (the
        # fake engine needs no vLLM import check).
        assert len(launches) == 2 * 2, launches
        if runtime == "apptainer":
            for line in launches:
                kept = set(line.split(" env=")[1].split())
                wanted = {"SLURM_JOB_ID", "SLURMD_NODENAME", "EVALPIPE_FAKE_DELAY_S", "HF_HOME"}
                assert wanted <= kept, line


# ---- the login node: preflight, `evalpipe check`, `evalpipe site detect` ----


def test_preflight_names_a_missing_runtime_image_and_mount_with_their_fixes(tmp_path: Path) -> None:
    from evalpipe.jobs.preflight import check_container

    pyxis = load(tmp_path, "pyxis", image=str(tmp_path / "vllm.sqsh"), mounts=["/no/such:/w"])
    found = [f.message for f in check_container(pyxis, find=lambda runtime: None)]
    assert len(found) == 3, found
    assert "srun --help does not list --container-image" in found[0]
    assert "github.com/NVIDIA/pyxis" in found[0] and "runtime: apptainer" in found[0]
    assert (
        f"the image file {tmp_path / 'vllm.sqsh'} of cluster pyxis-site does not exist" in found[1]
    )
    assert f"enroot import -o {tmp_path / 'vllm.sqsh'} docker://IMAGE" in found[1]
    assert "the source /no/such does not exist" in found[2]

    (tmp_path / "vllm.sqsh").write_text("")
    ready = load(tmp_path, "pyxis", image=str(tmp_path / "vllm.sqsh"), mounts=[str(tmp_path)])
    assert check_container(ready, find=lambda runtime: "srun --help lists it") == []

    # A registry reference under Apptainer: its copy in sif_cache, pulled once, by name.
    ref = "docker://vllm/vllm-openai:v0.9.1"
    pulled = load(tmp_path, "apptainer", image=ref, sif_cache=str(tmp_path), mounts=[])
    (message,) = [f.message for f in check_container(pulled, find=lambda runtime: "apptainer")]
    assert f"apptainer pull {tmp_path}/vllm_vllm-openai_v0.9.1.sif {ref}" in message
    (tmp_path / "vllm_vllm-openai_v0.9.1.sif").write_text("")
    assert check_container(pulled, find=lambda runtime: "apptainer") == []
    # Without apptainer on the login node it is a warning: compute nodes may load it.
    (missing,) = check_container(pulled, find=lambda runtime: None)
    assert missing.level == "warning" and "module load apptainer" in missing.message


def evalpipe_cli(*args: str, path: str | None = None) -> Any:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PATH": f"{path}:{os.environ['PATH']}" if path else os.environ["PATH"]}
    return subprocess.run(
        [sys.executable, "-m", "evalpipe", *args], env=env, capture_output=True, text=True
    )


@pytest.mark.slurm
def test_check_says_which_runtime_the_profile_needs_and_whether_this_node_has_it(
    local_slurm: Any, tmp_path: Path, tiny_random_path: Path
) -> None:
    image = tmp_path / "vllm.sqsh"
    image.write_text("")
    site = container_site(tmp_path, "pyxis", image=str(image), mounts=[str(tmp_path)])
    # The local SLURM has no pyxis: refused, with the fix.
    refused = evalpipe_cli("check", "--preset", "tiny_random", "--cluster", site)
    assert refused.returncode != 0
    assert f"runs jobs in {image} with pyxis; this login node does not have it" in refused.stdout
    assert "srun --help does not list --container-image" in refused.stderr
    # With the pyxis stand-in's srun first on PATH.
    ready = evalpipe_cli(
        "check", "--preset", "tiny_random", "--cluster", site, path=str(STANDINS / "pyxis")
    )
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert "with pyxis; this login node has it (" in ready.stdout
    assert "tiny_random is ready" in ready.stdout


def test_site_detect_writes_a_commented_container_block_per_runtime_found(tmp_path: Path) -> None:
    from evalpipe.catalog.gpus import load_gpus
    from evalpipe.slurm import sitedetect
    from tests.test_site_detect import fixture

    found = sitedetect.detect(
        *fixture("multi"), load_gpus(), python="python3", partition="gpu", runtimes=["pyxis"]
    )
    text = found.yaml()
    assert "# container:" in text and "#   runtime: pyxis\n" in text
    assert '#   image: "/path/on/shared/storage/image.sqsh"\n' in text
    assert "container" not in found.data()
    # Uncommented, the block is one the profile loader takes.
    path = tmp_path / "site.yaml"
    head, block = text.split("# container:")
    path.write_text(head + "container:" + block.replace("#   ", "  "))
    assert load_cluster(str(path)).container.runtime == "pyxis"
    assert (
        "# container:"
        not in sitedetect.detect(
            *fixture("multi"), load_gpus(), python="python3", partition="gpu"
        ).yaml()
    )


@pytest.mark.slurm
def test_site_detect_finds_pyxis_where_srun_lists_it(local_slurm: Any, tmp_path: Path) -> None:
    without = evalpipe_cli("site", "detect")
    assert without.returncode == 0, without.stderr
    assert "# container:" not in without.stdout
    found = evalpipe_cli("site", "detect", path=str(STANDINS / "pyxis"))
    assert found.returncode == 0, found.stderr
    assert "#   runtime: pyxis\n" in found.stdout and "runtime: apptainer" not in found.stdout


def test_the_working_profiles_in_the_docs_load(tmp_path: Path) -> None:
    docs = (Path(__file__).parent.parent / "docs" / "slurm.md").read_text()
    section = docs.split("## Containers (pyxis/enroot and Apptainer)")[1].split("\n## ")[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    for runtime, block in zip(("pyxis", "apptainer"), blocks, strict=True):
        path = tmp_path / f"{runtime}.yaml"
        path.write_text(
            "gpu: h100-80gb\ngpus_per_node: 8\ncpus_per_node: 64\nmemory_per_node_gib: 512\n"
            + block
        )
        assert load_cluster(str(path)).container.runtime == runtime


def test_the_example_profiles_commented_container_block_loads(tmp_path: Path) -> None:
    text = (config_dir() / "clusters" / "example-h100-site.yaml").read_text()
    block = re.search(r"^# container:.*?(?=^# sandbox)", text, re.M | re.S)
    assert block is not None
    path = tmp_path / "site.yaml"
    path.write_text(text + re.sub(r"^# ", "", block.group(0), flags=re.M))
    assert load_cluster(str(path)).container.image == "/scratch/shared/images/vllm.sqsh"


@pytest.mark.bench
@pytest.mark.slurm
@pytest.mark.ray
def test_a_two_node_job_in_containers_runs_ray_and_every_nodes_monitor_inside(
    local_slurm: Any, tmp_path: Path
) -> None:
    """TP=4 × PP=2 over Ray on both local nodes, every process in the Apptainer stand-in: the
    Ray head and worker, node2's monitor (its metrics file lands in the mounted run
    directory), the runner. About a minute: marker bench (`pytest -m bench
    tests/test_containers.py`), outside make test."""
    from tests.test_slurm_local import raylets, site_profile, submit_fake

    site, env = standin_job(tmp_path, "apptainer")
    data = yaml.safe_load(Path(site).read_text())
    data["env"] = yaml.safe_load(Path(site_profile(tmp_path, "fake_nvml")).read_text())["env"]
    Path(site).write_text(yaml.safe_dump(data))
    job = submit_fake(
        tmp_path, "ray", "--tp", "4", "--pp", "2", "--limit", "1", cluster=site,
        env={**env, "EVALPIPE_FAKE_DELAY_S": "2"},
    )  # fmt: skip
    status = job.wait(poll_s=1, timeout_s=300)
    log = next((job.run_dir / "logs").glob("*.out")).read_text()
    assert status.ok, log[-3000:]
    assert re.search(r"Ray cluster at \S+ is up: 2 node\(s\), 8 GPU\(s\)", log), log[-3000:]
    assert (job.run_dir / "metrics-node2.csv").stat().st_size > 0
    assert raylets(job.job_id) == []
    launched = (tmp_path / "standin.log").read_text()
    # Ray's head and worker, node2's monitor, and the job's own commands: all in the image.
    assert launched.count("apptainer image=") >= 5, launched


def test_the_submitit_executor_refuses_a_container_job(tmp_path: Path) -> None:
    from evalpipe.jobs.submitit_exec import submit_with_submitit

    spec = prepare("tiny_random", container_site(tmp_path, "pyxis"), JobOptions(), RUN_DIR).spec
    with pytest.raises(ConfigError, match="Submit with the default sbatch executor"):
        submit_with_submitit(spec, copy_script_to=tmp_path / "job.sbatch")
