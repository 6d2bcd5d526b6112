"""Report data path on synthetic run directories: discovery, robust reading, shard merge,
scores with hand-checked CIs, costs (GPU-hours, J/token), statistics and paired comparison."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from synthetic_runs import SyntheticRun, write_run

from evalpipe.core.errors import RunDirError
from evalpipe.reports import aggregate
from evalpipe.reports.compare import paired_tasks
from evalpipe.reports.loading import load_metrics, load_runs
from evalpipe.reports.stats import holm, is_binary, mcnemar_exact, paired_bootstrap
from evalpipe.rundir.discover import find_run_dirs


def _run(run_id: str, **kw) -> SyntheticRun:
    kw.setdefault("tasks", {"gsm": ("math", [1, 0, 1, 1])})
    return SyntheticRun(run_id=run_id, preset=kw.pop("preset", "p"), **kw)


def _load(*paths: Path):
    runset = load_runs(find_run_dirs(paths))
    return runset, aggregate.run_table(runset)


# --- discovery -------------------------------------------------------------------------------


def test_finds_nested_runs_and_never_counts_shards_as_runs(tmp_path: Path) -> None:
    write_run(tmp_path / "a", _run("a"))
    write_run(tmp_path / "batch" / "b", _run("b"))
    for i in range(2):
        write_run(tmp_path / "s" / "shards" / str(i), _run("s", shard=f"{i}/2", first_id=10 * i))
    found = find_run_dirs([tmp_path])
    assert [p.relative_to(tmp_path.resolve()).as_posix() for p in found] == ["a", "batch/b", "s"]
    # A run directory given twice (directly and via its parent) is one run.
    assert find_run_dirs([tmp_path / "a", tmp_path]) == found


def test_missing_path_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match=r"nope.*does not exist"):
        find_run_dirs([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunDirError, match=r"No run directories under .*empty"):
        find_run_dirs([tmp_path / "empty"])
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(RunDirError, match=r"file.txt.*is not a directory"):
        find_run_dirs([tmp_path / "file.txt"])


@pytest.mark.parametrize("name", ["summary.json", "manifest.json", "samples.jsonl", "metrics.csv"])
def test_unreadable_file_is_an_error_naming_it(tmp_path: Path, name: str) -> None:
    # A directory where the file should be cannot be opened, even by root (unlike a mode-0 file).
    run = write_run(tmp_path / "a", _run("a"))
    (run / name).unlink()
    (run / name).mkdir()
    with pytest.raises(RunDirError, match=rf"Cannot read .*{name}.*Is a directory"):
        _, table = _load(run)
        load_metrics(table)


# --- robust reading --------------------------------------------------------------------------


def test_truncated_last_line_is_dropped_with_a_warning(tmp_path: Path) -> None:
    run = write_run(tmp_path / "a", _run("a", tasks={"gsm": ("math", [1, 0, 1, 1, 1])}))
    with (run / "samples.jsonl").open("a") as f:
        f.write('{"task": "gsm", "category": "math", "sample_id": "gsm-9", "sco')
    runset, table = _load(run)
    assert any("last line 6 is truncated" in w for w in runset.warnings)
    assert table.loc[0, "n_done"] == 5 and bool(table.loc[0, "complete"])


def test_lost_line_makes_a_complete_run_incomplete(tmp_path: Path) -> None:
    run = write_run(tmp_path / "a", _run("a"))
    lines = (run / "samples.jsonl").read_text().splitlines(keepends=True)
    (run / "samples.jsonl").write_text("".join([lines[0], "not json\n", *lines[2:]]))
    runset, table = _load(run)
    assert any("1 line(s) are not sample records (2)" in w for w in runset.warnings)
    assert any("marked complete but holds 3 of 4" in w for w in runset.warnings)
    assert table.loc[0, "status"] == "incomplete" and not table.loc[0, "complete"]


def test_other_schema_and_missing_metrics_warn_but_still_report(tmp_path: Path) -> None:
    run = write_run(tmp_path / "a", _run("a", metrics_csv=False))
    summary = json.loads((run / "summary.json").read_text())
    summary["schema"] = 0
    del summary["devices"]
    (run / "summary.json").write_text(json.dumps(summary))
    runset, table = _load(run)
    assert any("schema 0 is older or unknown" in w for w in runset.warnings)
    assert any("no device figures" in w for w in runset.warnings)
    assert table.loc[0, "tokens_per_s"] == 500.0  # throughput still read
    assert np.isnan(table.loc[0, "peak_memory_gib"])
    metrics, warnings = load_metrics(table)
    assert metrics.empty and any("no metrics.csv" in w for w in warnings)


def test_devices_come_from_metrics_csv_when_summary_lacks_them(tmp_path: Path) -> None:
    run = write_run(tmp_path / "a", _run("a", peak_memory_gib=(60.0,), energy_j=(5000.0,)))
    summary = json.loads((run / "summary.json").read_text())
    del summary["devices"]
    (run / "summary.json").write_text(json.dumps(summary))
    _, table = _load(run)
    assert table.loc[0, "peak_memory_gib"] == pytest.approx(60.0)
    assert table.loc[0, "energy_j"] == pytest.approx(5000.0)  # cumulative counter's last value


def test_other_nodes_metrics_files_are_read_too(tmp_path: Path) -> None:
    # A 2-node job: the second node's monitor writes metrics-<host>.csv on the same clock.
    run = write_run(tmp_path / "a", _run("a", peak_memory_gib=(60.0,), energy_j=(5000.0,)))
    other = (run / "metrics.csv").read_text().replace(",node1,gpu0,", ",node2,gpu0,")
    (run / "metrics-node2.csv").write_text(other.replace(",60.000,", ",64.000,"))
    summary = json.loads((run / "summary.json").read_text())
    del summary["devices"]
    (run / "summary.json").write_text(json.dumps(summary))
    runset, table = _load(run)
    assert len(runset.devices) == 2 and set(runset.devices["host"]) == {"node1", "node2"}
    assert table.loc[0, "peak_memory_gib"] == 64.0
    assert table.loc[0, "energy_j"] == pytest.approx(10_000.0)  # both nodes' GPUs
    metrics, _ = load_metrics(table)
    assert set(metrics["host"]) == {"node1", "node2"}


def test_summary_only_run_reports_summary_scores(tmp_path: Path) -> None:
    run = write_run(tmp_path / "a", _run("a"))
    (run / "samples.jsonl").unlink()
    runset, table = _load(run)
    assert any("scores and their CI come from summary.json" in w for w in runset.warnings)
    row = aggregate.scores(runset, "task").iloc[0]
    assert (row["mean"], row["stderr"], row["n"]) == (0.75, 0.25, 4)
    assert table.loc[0, "n_done"] == 4 and bool(table.loc[0, "complete"])


# --- scores, CI and costs, checked by hand ---------------------------------------------------


def test_score_ci_by_hand(tmp_path: Path) -> None:
    # [1, 0, 1, 1]: mean 0.75, sample sd 0.5, stderr 0.5/√4 = 0.25; Wilson 3/4 = [0.3006, 0.9544].
    # [1]: one sample, stderr 0 by definition, yet Wilson 1/1 = [0.2065, 1] (no zero width).
    tasks = {"gsm": ("math", [1, 0, 1, 1]), "aime": ("math", [1]), "arc": ("mc", [0, 1])}
    runset, _ = _load(write_run(tmp_path / "a", _run("a", tasks=tasks)))
    by_task = aggregate.scores(runset, "task").set_index("group")
    assert by_task.loc["gsm", ["mean", "stderr", "n"]].tolist() == [0.75, 0.25, 4]
    assert by_task.loc["gsm", ["ci_low", "ci_high"]].tolist() == pytest.approx(
        [0.3006, 0.9544], abs=1e-4
    )
    assert by_task.loc["aime", ["stderr", "n"]].tolist() == [0.0, 1]
    assert by_task.loc["aime", ["ci_low", "ci_high"]].tolist() == pytest.approx(
        [0.2065, 1.0], abs=1e-4
    )
    # Category micro: math pools 5 samples [1,0,1,1,1]: mean 0.8, sd √0.2, stderr √0.2/√5 = 0.2.
    by_cat = aggregate.scores(runset, "category").set_index("group")
    assert by_cat.loc["math", "mean"] == pytest.approx(0.8)
    assert by_cat.loc["math", ["ci_low", "ci_high"]].tolist() == pytest.approx(
        [0.3755, 0.9638], abs=1e-4
    )  # Wilson 4/5
    assert by_cat.loc["math", "n"] == 5 and by_cat.loc["math", "n_total"] == 5


def test_primary_metric_is_the_first_one_recorded(tmp_path: Path) -> None:
    run = write_run(tmp_path / "a", _run("a", metric="pass@1"))
    path = run / "samples.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        r["scores"]["pass@10"] = 1.0
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    runset, _ = _load(run)
    row = aggregate.scores(runset, "task").iloc[0]
    assert row["metric"] == "pass@1" and row["mean"] == 0.75


def test_gpu_hours_and_energy_per_token_by_hand(tmp_path: Path) -> None:
    # 2 GPUs × 100 s = 200 GPU-s = 0.0556 GPU-h; (1000 + 2000) J / 40000 tokens = 0.075 J/token.
    run = write_run(
        tmp_path / "a",
        _run(
            "a", gpus=2, peak_memory_gib=(30.0, 31.0), mean_util_pct=(80.0, 90.0),
            energy_j=(1000.0, 2000.0), wall_s=100.0, generate_s=80.0, generated_tokens=40_000,
        ),
    )  # fmt: skip
    _, table = _load(run)
    row = table.iloc[0]
    assert row["gpu_hours"] == pytest.approx(200 / 3600)
    assert row["j_per_token"] == pytest.approx(0.075)
    assert row["tokens_per_s"] == pytest.approx(500.0)
    assert row["tokens_per_s_per_gpu"] == pytest.approx(250.0)
    assert row["peak_memory_gib"] == 31.0 and row["mean_util_pct"] == 85.0
    assert row["devices"] == "2×NVIDIA H100 80GB HBM3"


def test_a_run_that_generated_nothing_has_no_token_rates(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "a",
        _run("a", gpus=2, energy_j=(1000.0, 2000.0), generated_tokens=0),
    )
    _, table = _load(run)
    row = table.iloc[0]  # scored by log-probabilities: a rate of 0 tok/s would be misleading
    assert row["generated_tokens"] == 0
    assert np.isnan(row["tokens_per_s"]) and np.isnan(row["tokens_per_s_per_gpu"])
    assert np.isnan(row["j_per_token"]) and row["gpu_hours"] > 0


def test_cpu_run_has_no_gpu_hours_or_energy(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "a",
        _run("a", on_cpu=True, gpus=0, energy_j=None, peak_memory_gib=(2.5,)),
    )
    _, table = _load(run)
    row = table.iloc[0]
    assert row["devices"] == "cpu" and row["peak_memory_gib"] == 2.5
    assert np.isnan(row["gpu_hours"]) and np.isnan(row["j_per_token"])
    assert np.isnan(row["tokens_per_s_per_gpu"]) and row["tokens_per_s"] == 500.0


def test_unmerged_shards_are_merged_into_one_run(tmp_path: Path) -> None:
    # 3 shards × 4 samples (1 GPU, 100 s, 40000 tokens in 80 s each).
    for i in range(3):
        write_run(
            tmp_path / "r" / "shards" / str(i),
            _run("r", shard=f"{i}/3", first_id=4 * i, tasks={"gsm": ("math", [1, 0, 1, i % 2])}),
        )
    runset, table = _load(tmp_path)
    row = table.iloc[0]
    assert len(table) == 1 and row["shards"] == 3 and bool(row["complete"])
    assert (row["n_done"], row["n_total"]) == (12, 12)
    assert row["gpu_hours"] == pytest.approx(3 * 100 / 3600)  # summed over shards
    assert row["wall_s"] == 100.0  # the longest shard: array tasks run side by side
    assert row["tokens_per_s"] == pytest.approx(500.0)  # one job's rate
    assert row["j_per_token"] == pytest.approx(3 * 20_000 / (3 * 40_000))
    score = aggregate.scores(runset, "category").iloc[0]
    assert score["n"] == 12 and score["mean"] == pytest.approx(7 / 12)


def test_missing_shard_makes_the_run_incomplete(tmp_path: Path) -> None:
    for i in (0, 2):
        write_run(tmp_path / "r" / "shards" / str(i), _run("r", shard=f"{i}/3", first_id=4 * i))
    runset, table = _load(tmp_path)
    assert any("shard(s) 1 of 3 have no run files" in w for w in runset.warnings)
    assert not table.loc[0, "complete"] and table.loc[0, "status"] == "incomplete"


def test_merged_run_adds_samples_of_shards_only_once(tmp_path: Path) -> None:
    for i in range(2):
        write_run(tmp_path / "r" / "shards" / str(i), _run("r", shard=f"{i}/2", first_id=4 * i))
    # `evalpipe merge` already wrote the union into RUN_DIR: same keys, must not double.
    merged = "".join(
        (tmp_path / "r" / "shards" / str(i) / "samples.jsonl").read_text() for i in range(2)
    )
    (tmp_path / "r" / "samples.jsonl").write_text(merged)
    _, table = _load(tmp_path)
    assert (table.loc[0, "n_done"], table.loc[0, "n_total"]) == (8, 8)


def test_incomplete_runs_sort_after_complete_ones(tmp_path: Path) -> None:
    write_run(tmp_path / "a", _run("a", preset="aaa", status="interrupted", n_total={"gsm": 10}))
    write_run(tmp_path / "b", _run("b", preset="zzz"))
    _, table = _load(tmp_path)
    assert table["run_id"].tolist() == ["b", "a"]
    assert table["status"].tolist() == ["complete", "interrupted"]
    assert table.loc[1, "n_done"] == 4 and table.loc[1, "n_total"] == 10


# --- statistics ------------------------------------------------------------------------------


def test_mcnemar_exact_by_hand() -> None:
    # 1 vs 9 discordant pairs: p = 2 × (C(10,0) + C(10,1)) / 2^10 = 22/1024.
    a = np.array([1] * 1 + [0] * 9 + [1] * 5)
    b = np.array([0] * 1 + [1] * 9 + [1] * 5)
    assert mcnemar_exact(a, b) == pytest.approx(22 / 1024)
    assert mcnemar_exact(a, a) == 1.0
    assert is_binary(a, b) and not is_binary(np.array([0.5]))


def test_holm_by_hand() -> None:
    got = holm(np.array([0.01, 0.04, np.nan, 0.03]))
    # sorted 0.01, 0.03, 0.04 → 3×0.01, max(0.03, 2×0.03), max(0.06, 1×0.04).
    np.testing.assert_allclose(got, [0.03, 0.06, np.nan, 0.06])


def test_paired_bootstrap_is_seeded_and_covers_the_true_difference() -> None:
    diffs = np.random.default_rng(1).normal(0.1, 0.2, size=400)
    first = paired_bootstrap(diffs, resamples=2000, seed=7)
    assert first == paired_bootstrap(diffs, resamples=2000, seed=7)
    assert first.ci_low < diffs.mean() < first.ci_high
    assert first.ci_low > 0 and first.p < 0.01
    null = paired_bootstrap(diffs - diffs.mean(), resamples=2000, seed=7)
    assert null.ci_low < 0 < null.ci_high and null.p > 0.5


def _scores(task: str, values) -> list[dict]:
    return [
        {"task": task, "category": "c", "sample_id": str(i), "metric": "m", "score": float(v),
         "primary": True}
        for i, v in enumerate(values)
    ]  # fmt: skip


def test_paired_comparison_flags_a_planted_difference_but_not_noise() -> None:
    import pandas as pd

    rng = np.random.default_rng(3)
    base = rng.integers(0, 2, size=300)
    planted = base.copy()
    planted[np.flatnonzero(base == 0)[:40]] = 1  # B fixes 40 of A's failures
    noise = base.copy()
    noise[np.flatnonzero(base == 0)[:6]] = 1  # 6 up, 6 down: a wash
    noise[np.flatnonzero(base == 1)[:6]] = 0
    cont = rng.uniform(0, 1, size=300)
    a = pd.DataFrame(
        _scores("planted", base) + _scores("noise", base) + _scores("cont", cont)
        + _scores("cont_noise", cont)
    )  # fmt: skip
    b = pd.DataFrame(
        _scores("planted", planted) + _scores("noise", noise)
        + _scores("cont", np.clip(cont + 0.08, 0, 1.5))
        + _scores("cont_noise", cont + rng.normal(0, 0.05, size=300))
    )  # fmt: skip
    got = paired_tasks(a, b, resamples=4000, seed=0).set_index("task")
    assert got.loc["planted", "test"] == "mcnemar-exact"
    assert got.loc["planted", "diff"] == pytest.approx(40 / 300)
    assert bool(got.loc["planted", "significant"]) and got.loc["planted", "p"] < 1e-9
    assert not got.loc["noise", "significant"] and got.loc["noise", "p"] == 1.0
    assert got.loc["cont", "test"] == "paired-bootstrap" and bool(got.loc["cont", "significant"])
    assert not got.loc["cont_noise", "significant"]
    assert (got["n_shared"] == 300).all()


def test_comparison_uses_only_shared_samples() -> None:
    import pandas as pd

    a = pd.DataFrame(_scores("t", [1, 1, 0, 0]))
    b = pd.DataFrame(_scores("t", [1, 1]))  # B finished only samples 0 and 1
    got = paired_tasks(a, b, resamples=500).iloc[0]
    assert (got["n_a"], got["n_b"], got["n_shared"]) == (4, 2, 2)
    assert got["mean_a"] == 1.0 and got["diff"] == 0.0
