"""Estimates as a user meets them: `plan --estimate`, `submit --shards auto --time auto`, the
submission record, and `evalpipe report`'s predicted vs actual."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic_runs import SyntheticRun, write_run
from test_estimate import _calibration

from evalpipe.catalog.selection import Selection
from evalpipe.cli import main
from evalpipe.jobs.jobspec import JobOptions
from evalpipe.jobs.prepare import prepare
from evalpipe.jobs.sbatchsubmit import submit_prepared
from evalpipe.run.runoptions import RunnerOptions
from evalpipe.slurm.client import FakeSlurm

ROOT = Path(__file__).resolve().parent.parent


def evalpipe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # No datasets and no weights here, as on a fresh login node; the hub is offline.
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    env |= {"HF_HOME": str(cwd / "hf"), "EVALPIPE_CACHE": str(cwd / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "evalpipe", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


DONE_WHEN = (
    "submit", "--preset", "llama3_3_70b", "--cluster", "example-h100-site", "--tasks",
    "gsm8k,mmlu", "--shards", "auto", "--time", "auto", "--dry-run",
)  # fmt: skip


def test_submit_auto_prints_cost_shards_and_time_without_the_data(tmp_path: Path) -> None:
    done = evalpipe(*DONE_WHEN, cwd=tmp_path)
    out = done.stdout
    # The cost and the choice come first; the preflight then refuses the absent weights and data.
    assert done.returncode == 1 and "[weights]" in done.stderr and "[dataset]" in done.stderr
    assert "llama3_3_70b on h100-80gb, TP=4 × PP=1, 2 replica(s), 8 GPU(s) per job" in out
    for figure in ("load (import, weights, engine)", "generation", "wall per job", "GPU-hours"):
        assert figure in out
    assert "energy (board power × time)" in out
    assert re.search(r"gsm8k\s+1319 .*1319 rows recorded in gsm8k.yaml", out)
    assert re.search(r"mmlu\s+14042 .*ranked", out)
    assert "optimistic bound" in out and "max_tokens 384 as an upper bound" in out
    assert "1 shard fits: 1 shard(s) × 2 replica(s)" in out
    assert "within 80% of the 2880 min limit (cluster example-h100-site's max_time)" in out
    chosen = re.search(r"→ --shards (\d+) --replicas 2 --time (\d\d:\d\d:00)", out)
    assert chosen is not None and chosen.group(1) == "1"

    checked = evalpipe(*DONE_WHEN, "--no-check", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert f"#SBATCH --time={chosen.group(2)}" in checked.stdout
    assert "#SBATCH --gres=gpu:h100:8" in checked.stdout


def test_plan_estimate_json_carries_every_figure(tmp_path: Path) -> None:
    args = ("plan", "--preset", "llama3_1_8b", "--gpu", "h100-80gb", "--tasks", "gsm8k")
    done = evalpipe(*args, "--estimate", "--shards", "2", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    est = json.loads(done.stdout)["estimate"]
    assert (est["shards"], est["replicas"], est["gpus_per_job"]) == (2, 8, 8)
    assert set(est["per_shard"]) == {"load_s", "generate_s", "score_s", "overhead_s", "wall_s"}
    for key in ("wall_s", "gpu_hours", "energy_kwh"):
        assert est[key]["low"] <= est[key]["mid"] <= est[key]["high"]
    assert est["tasks"][0]["samples"] == 1319 and est["calibrated"] is False
    refused = evalpipe(*args, "--limit", "5", cwd=tmp_path)
    assert refused.returncode == 1 and "--limit only matter with --estimate" in refused.stderr


def test_submission_records_the_estimate_and_the_choice(tmp_path: Path) -> None:
    options = JobOptions(
        run=RunnerOptions(selection=Selection(tasks=("arithmetic",), limit=20)),
        shards="auto",
        time="auto",
    )
    prepared = prepare("tiny_random", "local", options, tmp_path / "run", results=[tmp_path])
    assert prepared.choice is not None and prepared.estimate is not None
    submit_prepared(prepared, slurm=FakeSlurm(), run_checks=False)
    record = json.loads((tmp_path / "run" / "submission.json").read_text())
    assert record["choice"]["time_limit"] == prepared.spec.options.time
    assert f"#SBATCH --time={prepared.spec.options.time}" in prepared.script
    assert record["choice"]["reasons"] and record["estimate"]["tasks"][0]["samples"] == 20
    assert record["shards"] == record["choice"]["shards"] == 1


def test_report_shows_predicted_against_actual(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "results" / "run"
    options = JobOptions(run=RunnerOptions(selection=Selection(tasks=("arithmetic",), limit=20)))
    prepared = prepare("tiny_random", "local", options, run, results=[tmp_path / "none"])
    submit_prepared(prepared, slurm=FakeSlurm(), run_checks=False)
    write_run(run, SyntheticRun(run_id="run", preset="tiny_random", wall_s=100.0,
                                tasks={"arithmetic": ("math", [1, 0] * 10)}))  # fmt: skip
    write_run(tmp_path / "results" / "other", SyntheticRun(run_id="other", preset="p",
                                                           tasks={"a": ("math", [1])}))  # fmt: skip
    assert main(["report", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    section = out.split("## Predicted vs actual")[1]
    row = next(line for line in section.splitlines() if line.startswith("| tiny_random | run |"))
    predicted = json.loads((run / "submission.json").read_text())["estimate"]
    error = f"{predicted['wall_s']['mid'] / 100.0 - 1:+.0%}"
    inside = "yes" if predicted["wall_s"]["low"] <= 100 <= predicted["wall_s"]["high"] else "no"
    assert f"| 100 s | {error} | {inside} |" in row
    assert "| other |" not in section  # submitted without an estimate: no row


def test_render_prints_the_reasoning_of_an_automatic_choice(tmp_path: Path) -> None:
    done = evalpipe("render", "--preset", "tiny_random", "--cluster", "local", "--tasks",
                    "arithmetic", "--time", "auto", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "time limit 00:10:00" in done.stderr and "#SBATCH --time=00:10:00" in done.stdout


def test_prompts_are_counted_with_the_models_own_tokenizer(tiny_random_path: Path) -> None:
    from evalpipe.catalog.preset import load_preset
    from evalpipe.estimate.workmodel import task_work, token_counter
    from evalpipe.tasks import load_task

    preset = load_preset("tiny_random")
    counter = token_counter(preset)
    assert counter is not None and counter.where == str(tiny_random_path)
    work = task_work(load_task("arithmetic"), preset, limit=10, history=[], counter=counter)
    assert work.samples == 10 and work.sources[0] == f"prompts tokenised ({tiny_random_path})"
    assert work.prompt_tokens.low == work.prompt_tokens.high > 0


def test_a_smoke_record_in_the_results_folder_calibrates_the_estimate(tmp_path: Path) -> None:
    record = tmp_path / "results" / "smoke-run" / "smollm2_135m-cpu-tp1-pp1.calibration.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps(_calibration(0.02, 0.003).to_dict()))
    args = ("plan", "--preset", "smollm2_135m", "--gpu", "cpu", "--tasks", "arithmetic")
    done = evalpipe(*args, "--estimate", "--results", str(tmp_path / "results"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "calibrated on smoke calibration on vm (2026-01-01T00:00:00+00:00, vllm)" in done.stdout
    # smoke's import + load + first token: 15.5 s
    assert re.search(r"load \(import, weights, engine\)\s+16 s", done.stdout)


def test_target_wall_takes_hours_and_minutes(tmp_path: Path) -> None:
    done = evalpipe("render", "--preset", "llama3_1_8b", "--cluster", "example-h100-site",
                    "--tasks", "gsm8k", "--target-wall", "00:30", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "target wall 30.0 min:" in done.stderr
    assert re.search(r"→ --shards 1 --replicas \d --time", done.stderr)


def test_a_smoke_record_in_the_clusters_cache_dir_calibrates_submit(tmp_path: Path) -> None:
    """`evalpipe smoke` on a cluster writes its record under cache_dir/calibrations/; a later
    submit to that cluster finds it there, with no results folder at all."""
    import dataclasses

    shared = tmp_path / "shared"
    record = dataclasses.replace(_calibration(0.02, 0.003), preset="llama3_1_8b", gpu="h100-80gb")
    record.write(tmp_path / "smoke-run", shared_dir=shared)
    site = (ROOT / "configs" / "clusters" / "example-h100-site.yaml").read_text()
    profile = tmp_path / "site.yaml"
    profile.write_text(site.replace("/scratch/shared/evalpipe-cache", str(shared)))
    args = ("submit", "--preset", "llama3_1_8b", "--cluster", str(profile), "--tasks", "gsm8k")
    done = evalpipe(*args, "--time", "auto", "--dry-run", "--no-check", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "calibrated on smoke calibration on vm (2026-01-01T00:00:00+00:00, vllm)" in done.stdout
