"""Rendering sbatch scripts: golden files, shellcheck, quoting of hostile values, the templates'
signal/requeue logic run for real in bash (with recording stand-ins for python and scontrol)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import evalpipe
from evalpipe.catalog.configpath import config_dir, names
from evalpipe.catalog.preset import preset_names
from evalpipe.catalog.selection import Selection
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError, DoesNotFitError
from evalpipe.core.options import record_from
from evalpipe.jobs import sbatchrender
from evalpipe.jobs.jobspec import JobOptions
from evalpipe.jobs.prepare import Prepared, prepare
from evalpipe.run.runoptions import LayoutOptions, RunnerOptions

GOLDEN = Path(__file__).parent / "golden"
# EVALPIPE_UPDATE_GOLDEN=1 pytest tests/test_render.py rewrites the golden files.
UPDATE = os.environ.get("EVALPIPE_UPDATE_GOLDEN") == "1"
RUN_DIR = Path("/scratch/evalpipe/results/golden-run")

CASES = {
    "tiny_random-local": (
        "tiny_random",
        "local",
        JobOptions(run=record_from(RunnerOptions, {"backend": "fake", "limit": 5})),
    ),
    "tiny_random-local-shards2": (
        "tiny_random",
        "local",
        JobOptions(shards=2, run=RunnerOptions(selection=Selection(limit=5))),
    ),
    "deepseek_v2_5-local": ("deepseek_v2_5", "local", JobOptions()),
    "llama3_3_70b-example-h100-site": (
        "llama3_3_70b",
        "example-h100-site",
        JobOptions(
            run=RunnerOptions(
                selection=Selection(categories=("reasoning", "coding"), mc_method="logprobs")
            ),
            time="12:00:00",
        ),
    ),
    "falcon_180b-gh200": ("falcon_180b", "gh200", JobOptions()),
    "tiny_random-local-serve": (
        "tiny_random",
        "local",
        JobOptions(mode="serve", run=RunnerOptions(selection=Selection(limit=5))),
    ),
    "deepseek_v2_5-local-serve": ("deepseek_v2_5", "local", JobOptions(mode="serve")),
    # An agent job whose user simulator is served side by side on the node's next GPU.
    "tiny_random-local-usersim": (
        "tiny_random",
        "local",
        JobOptions(run=record_from(RunnerOptions, {"limit": 5, "user_sim": "smollm2_135m"})),
    ),
}


def shellcheck(paths: list[Path]) -> None:
    if shutil.which("shellcheck") is None:
        pytest.fail(
            "shellcheck is not installed: run scripts/setup.sh (apt-get install shellcheck)"
        )
    result = subprocess.run(
        ["shellcheck", "--shell=bash", *map(str, paths)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def golden_texts(name: str, prepared: Prepared) -> dict[str, str]:
    texts = {f"{name}.sbatch": prepared.script}
    if prepared.merge_script is not None:
        texts[f"{name}.merge.sbatch"] = prepared.merge_script
    return texts


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    preset, cluster, options = CASES[name]
    for file, text in golden_texts(name, prepare(preset, cluster, options, RUN_DIR)).items():
        path = GOLDEN / file
        if UPDATE:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
        assert path.is_file(), f"{path} missing: run EVALPIPE_UPDATE_GOLDEN=1 pytest {__file__}"
        assert text == path.read_text(), (
            f"{file} differs from the golden file; if the change is intended, regenerate with "
            "EVALPIPE_UPDATE_GOLDEN=1"
        )


def test_golden_files_are_shellcheck_clean() -> None:
    shellcheck(sorted(GOLDEN.glob("*.sbatch")))


def test_every_exit_hook_a_script_registers_is_defined_in_it() -> None:
    """Parts register their cleanup in one EXIT trap's list; a name no part defines would end
    a job without stopping its server or Ray nodes (shellcheck cannot see it)."""
    for path in sorted(GOLDEN.glob("*.sbatch")):
        text = path.read_text()
        hooks = re.findall(r"^on_exit\+=\((\w+)\)$", text, re.M)
        assert all(re.search(rf"^{hook}\(\) \{{$", text, re.M) for hook in hooks), path.name
    serve_on_ray = (GOLDEN / "deepseek_v2_5-local-serve.sbatch").read_text()
    assert re.findall(r"^on_exit\+=\((\w+)\)$", serve_on_ray, re.M) == [
        "stop_steps",
        "stop_server",  # run first: the list runs newest first
    ]


def test_local_slurm_script_is_shellcheck_clean() -> None:
    shellcheck([Path(__file__).parent.parent / "scripts" / "local-slurm.sh"])


def test_every_preset_renders_shellcheck_clean_on_every_cluster(tmp_path: Path) -> None:
    paths = []
    for cluster in names("clusters"):
        for preset in preset_names():
            for shards in (1, 3):
                options = JobOptions(shards=shards, run=RunnerOptions(selection=Selection(limit=2)))
                prepared = prepare(preset, cluster, options, tmp_path / "run")
                for file, text in golden_texts(f"{preset}-{cluster}-{shards}", prepared).items():
                    (tmp_path / file).write_text(text)
                    paths.append(tmp_path / file)
    assert len(paths) >= 3 * 14 * 2
    shellcheck(paths)


def test_resources_follow_the_plan_and_the_profile() -> None:
    single = prepare("tiny_random", "local", JobOptions(), RUN_DIR).script
    assert "#SBATCH --nodes=1\n" in single and "#SBATCH --gres=gpu:h100:1\n" in single
    # one GPU of a 4-GPU, 4-CPU, 8 GiB node: a quarter of its CPUs and memory
    assert "#SBATCH --cpus-per-task=1\n" in single and "#SBATCH --mem=2048M\n" in single
    assert "#SBATCH --signal=B:USR1@60\n#SBATCH --requeue\n" in single
    assert "ray" not in single.lower()

    multi = prepare(
        "tiny_random",
        "local",
        JobOptions(run=RunnerOptions(layout=LayoutOptions(tp=4, pp=2))),
        RUN_DIR,
    ).script
    assert "#SBATCH --nodes=2\n" in multi and "#SBATCH --gres=gpu:h100:4\n" in multi
    assert "--distributed-executor-backend ray" in multi
    assert "ray_port=26379\n" in multi and "--object-store-memory=214748364" in multi
    assert "ray stop" not in multi.replace("Not `ray stop`", "")

    gh = prepare("tiny_random", "gh200", JobOptions(), RUN_DIR).script
    assert "#SBATCH --gpus-per-node=1\n" in gh and "--gres" not in gh


def test_arrays_shard_and_merge() -> None:
    prepared = prepare("tiny_random", "local", JobOptions(shards=4), RUN_DIR)
    assert "#SBATCH --array=0-3\n" in prepared.script
    assert f"#SBATCH --output={RUN_DIR}/logs/%x-%A_%a.out\n" in prepared.script
    assert '--shard "$SLURM_ARRAY_TASK_ID/$shards"' in prepared.script
    assert 'out="$run_dir/shards/$SLURM_ARRAY_TASK_ID"' in prepared.script
    assert prepared.merge_script is not None
    assert 'exec "${python[@]}" -m evalpipe merge "$run_dir"' in prepared.merge_script
    assert "--gres" not in prepared.merge_script and "--array" not in prepared.merge_script
    argv = prepared.argv("77")
    assert argv[1] == [
        "sbatch",
        "--parsable",
        "--dependency=afterany:77",
        str(RUN_DIR / "merge.sbatch"),
    ]


def test_time_and_signal_checks() -> None:
    with pytest.raises(ConfigError, match="exceeds cluster local's limit of 02:00:00"):
        prepare("tiny_random", "local", JobOptions(time="03:00:00"), RUN_DIR)
    with pytest.raises(ConfigError, match="is not a SLURM time"):
        prepare("tiny_random", "local", JobOptions(time="soon"), RUN_DIR)
    with pytest.raises(ConfigError, match="Lower --signal-seconds or raise --time"):
        prepare("tiny_random", "local", JobOptions(time="1", signal_seconds=60), RUN_DIR)


def test_a_plan_that_does_not_fit_is_refused_with_the_planner_message(tmp_path: Path) -> None:
    site = tmp_path / "small.yaml"
    site.write_text(
        "gpu: a100-40gb\ngpus_per_node: 1\ncpus_per_node: 8\nmemory_per_node_gib: 64\n"
        "max_nodes: 1\n"
    )
    with pytest.raises(DoesNotFitError) as err:
        prepare("falcon_180b", str(site), JobOptions(), RUN_DIR)
    message = str(err.value)
    assert "falcon_180b does not fit on a100-40gb" in message
    assert "Cluster small allows at most 1 node(s) of 1 × a100-40gb" in message


# ---- hostile values: quoted so the shell keeps them literal, or refused ----

HOSTILE = "we ird $(touch PWNED) `touch PWNED` 'q' \"dq\" ;&|"


def stand_ins(bin_dir: Path) -> None:
    """`python3` and `scontrol` that record their argv (NUL-separated) and act as told."""
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(
        "#!/bin/bash\n"
        # The job's preflight lines (`python -c ...`): the node's version, or a failing import.
        'for a in "$@"; do if [ "$a" = -c ]; then case "$*" in\n'
        '*"import vllm"*) [ -z "${STUB_NO_VLLM:-}" ] || { echo "ModuleNotFoundError: vllm";'
        " exit 1; } ;;\n"
        '*) echo "${STUB_VERSION:-}" ;;\n'
        "esac; exit 0; fi; done\n"
        'printf "%s\\0" "$@" > "$STUB_DIR/python.argv"\n'
        'printf "%s" "${EVALPIPE_CACHE:-}" > "$STUB_DIR/cache.env"\n'
        'case "${STUB_MODE:-ok}" in\n'
        "ok) exit 0 ;;\n"
        "fail) exit 1 ;;\n"
        # Killed by the signal before the runner installed its handler.
        'early) sleep 0.3; kill -s USR1 "$PPID"; while :; do sleep 0.05; done ;;\n'
        # The runner's behaviour on the warning signal: checkpoint, exit 75.
        'preempt) trap \'exit 75\' USR1 TERM; sleep 0.3; kill -s "$STUB_SIGNAL" "$PPID";'
        " while :; do sleep 0.05; done ;;\n"
        # The disk filled while it checkpointed after the warning: exit 74 (STORAGE).
        "storage) trap 'exit 74' USR1; sleep 0.3; kill -s USR1 \"$PPID\";"
        " while :; do sleep 0.05; done ;;\n"
        "esac\n"
    )
    (bin_dir / "scontrol").write_text(
        '#!/bin/bash\nprintf "%s\\0" "$@" >> "$STUB_DIR/scontrol.argv"\n'
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)


def run_script(script: str, tmp_path: Path, **env: str) -> tuple[int, Path]:
    return run_job(script, tmp_path, **env).returncode, tmp_path


def run_job(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    stub = tmp_path / "stub"
    if not stub.exists():
        stand_ins(stub)
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    full_env = {
        "PATH": f"{stub}:/usr/bin:/bin",
        "STUB_DIR": str(tmp_path),
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "node1",
        "STUB_VERSION": evalpipe.__version__,
        **env,
    }
    return subprocess.run(
        ["bash", str(path)], cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=30
    )


def recorded(path: Path) -> list[str]:
    return path.read_text().split("\0")[:-1] if path.exists() else []


def test_hostile_values_reach_the_runner_literally_and_run_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A task file with a hostile name and category, so that the selection passes its check.
    tasks = tmp_path / "config" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / f"{HOSTILE}.yaml").write_text(
        (config_dir() / "tasks" / "arithmetic.yaml")
        .read_text()
        .replace("category: math", 'category: "a b$(touch PWNED)"')
    )
    monkeypatch.setenv("EVALPIPE_CONFIG_PATH", str(tmp_path / "config"))
    preset_dir = tmp_path / HOSTILE.replace("/", "_")
    preset_dir.mkdir()
    preset_file = preset_dir / "p.yaml"
    preset_file.write_text(
        (config_dir() / "presets" / "tiny_random.yaml").read_text()
        + 'name: "evil\\n#SBATCH --wrap=reboot"\n'
    )
    site = tmp_path / "site.yaml"
    site.write_text(
        (config_dir() / "clusters" / "local.yaml")
        .read_text()
        .replace("python: python3", "python: \"python3 -X 'utf8'\"")
        + f"cache_dir: {json.dumps(HOSTILE)}\n"
    )
    run_dir = tmp_path / "run $(touch PWNED) dir"
    options = JobOptions(
        run=RunnerOptions(
            selection=Selection(
                categories=("math", "a b$(touch PWNED)"),
                tasks=(HOSTILE,),
                limit=3,
                mc_method="logprobs",
            )
        )
    )
    prepared = prepare(str(preset_file), str(site), options, run_dir)
    script = prepared.script

    # The preset's name cannot end the header comment or add an #SBATCH line.
    assert "#SBATCH --wrap" not in script.replace("# evalpipe job: preset evil #SBATCH --wrap", "")
    assert "#SBATCH --job-name=evalpipe-evil__SBATCH_--wrap_reboot\n" in script
    assert f'#SBATCH --output="{run_dir}/logs/%x-%j.out"\n' in script

    status, _ = run_script(script, tmp_path)
    assert status == 0
    argv = recorded(tmp_path / "python.argv")
    assert argv[:4] == ["-X", "utf8", "-m", "evalpipe"]
    assert argv[argv.index("--preset") + 1] == str(preset_file)
    assert argv[argv.index("--categories") + 1] == "math,a b$(touch PWNED)"
    assert argv[argv.index("--tasks") + 1] == HOSTILE
    assert argv[argv.index("--mc-method") + 1] == "logprobs"
    assert argv[argv.index("--out") + 1] == str(run_dir)
    assert (tmp_path / "cache.env").read_text() == HOSTILE
    assert not list(tmp_path.rglob("PWNED")), "a hostile value was executed"


def test_values_sbatch_cannot_carry_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="holds a %, quote, backslash or line break"):
        prepare("tiny_random", "local", JobOptions(), tmp_path / 'a"b')
    with pytest.raises(ConfigError, match="holds a %, quote, backslash or line break"):
        prepare("tiny_random", "local", JobOptions(), tmp_path / "a\nb")
    with pytest.raises(ConfigError, match="holds a %"):
        prepare("tiny_random", "local", JobOptions(), tmp_path / "100%")


def test_an_unquoted_template_value_is_a_render_error(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "single_node.sbatch.j2").write_text("#!/bin/bash\nrm -rf {{ job.run_dir }}\n")
    monkeypatch.setenv("EVALPIPE_TEMPLATE_DIR", str(tmp_path))
    with pytest.raises(sbatchrender.RenderError, match="without a quoting filter"):
        prepare("tiny_random", "local", JobOptions(), tmp_path / "run")


def test_a_missing_template_value_is_a_render_error(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "single_node.sbatch.j2").write_text("#!/bin/bash\necho {{ job.no_such | q }}\n")
    monkeypatch.setenv("EVALPIPE_TEMPLATE_DIR", str(tmp_path))
    with pytest.raises(sbatchrender.RenderError, match="no_such"):
        prepare("tiny_random", "local", JobOptions(), tmp_path / "run")


# ---- the script's preemption logic, run in bash ----


def script_for(tmp_path: Path, **options) -> str:
    return prepare("tiny_random", "local", JobOptions(**options), tmp_path / "run").script


def test_warning_signal_is_forwarded_and_the_job_requeues(tmp_path: Path) -> None:
    status, _ = run_script(script_for(tmp_path), tmp_path, STUB_MODE="preempt", STUB_SIGNAL="USR1")
    assert status == 0
    assert recorded(tmp_path / "scontrol.argv") == ["requeue", "42"]


def test_a_runner_killed_by_the_warning_signal_is_requeued_too(tmp_path: Path) -> None:
    status, _ = run_script(script_for(tmp_path), tmp_path, STUB_MODE="early")
    assert status == 0
    assert recorded(tmp_path / "scontrol.argv") == ["requeue", "42"]


def test_no_requeue_once_the_restarts_are_spent(tmp_path: Path) -> None:
    status, _ = run_script(
        script_for(tmp_path, max_restarts=2),
        tmp_path,
        STUB_MODE="preempt",
        STUB_SIGNAL="USR1",
        SLURM_RESTART_COUNT="2",
    )
    assert status == 75
    assert recorded(tmp_path / "scontrol.argv") == []


def test_sigterm_checkpoints_without_requeue(tmp_path: Path) -> None:
    """SIGTERM is a cancellation (or a preemption SLURM requeues itself): no scontrol requeue."""
    status, _ = run_script(script_for(tmp_path), tmp_path, STUB_MODE="preempt", STUB_SIGNAL="TERM")
    assert status == 75
    assert recorded(tmp_path / "scontrol.argv") == []


def test_a_failing_runner_fails_the_job(tmp_path: Path) -> None:
    status, _ = run_script(script_for(tmp_path), tmp_path, STUB_MODE="fail")
    assert status == 1
    assert recorded(tmp_path / "scontrol.argv") == []


def test_a_storage_fault_fails_the_job_without_requeue(tmp_path: Path) -> None:
    """A requeued job would meet the same full disk: exit 74 ends the job for the user to fix."""
    status, _ = run_script(script_for(tmp_path), tmp_path, STUB_MODE="storage")
    assert status == exitcodes.STORAGE
    assert recorded(tmp_path / "scontrol.argv") == []


def test_array_task_gets_its_shard_and_directory(tmp_path: Path) -> None:
    status, _ = run_script(script_for(tmp_path, shards=3), tmp_path, SLURM_ARRAY_TASK_ID="2")
    assert status == 0
    argv = recorded(tmp_path / "python.argv")
    assert argv[argv.index("--shard") + 1] == "2/3"
    assert argv[argv.index("--out") + 1] == str(tmp_path / "run" / "shards" / "2")


# ---- the job's own preflight: the node's environment, before anything loads ----


def test_a_node_with_another_evalpipe_version_fails_fast_without_requeue(tmp_path: Path) -> None:
    result = run_job(script_for(tmp_path), tmp_path, STUB_VERSION="0.0.1")
    assert result.returncode == exitcodes.PREFLIGHT
    assert not (tmp_path / "python.argv").exists()  # the runner never started
    assert recorded(tmp_path / "scontrol.argv") == []
    assert f"the node runs evalpipe 0.0.1, but {evalpipe.__version__} rendered" in result.stderr


def test_a_node_without_vllm_fails_fast_with_the_import_error(tmp_path: Path) -> None:
    result = run_job(script_for(tmp_path), tmp_path, STUB_NO_VLLM="1")
    assert result.returncode == exitcodes.PREFLIGHT
    assert not (tmp_path / "python.argv").exists()
    assert "vLLM does not import" in result.stderr
    assert "ModuleNotFoundError: vllm" in result.stderr
