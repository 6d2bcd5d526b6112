"""`evalpipe report` as a user runs it: every output format parses back, plots are PNGs, the
HTML page renders in a real headless Chromium, --compare flags a planted difference."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from synthetic_runs import SyntheticRun, write_run

from evalpipe.cli import main

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden" / "report"
# EVALPIPE_UPDATE_GOLDEN=1 pytest tests/test_report_cli.py rewrites the golden files.
UPDATE = os.environ.get("EVALPIPE_UPDATE_GOLDEN") == "1"
GSM = [1, 0, 1, 1] * 10  # mean 75 %, CI 1.96 × 0.0693 = 13.6 points (checked by hand)
ARC = [1, 1, 0, 0, 1] * 10  # mean 60 %


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("results")
    write_run(
        root / "a",
        SyntheticRun(run_id="a", preset="p1", tasks={"gsm": ("math", GSM), "arc": ("mc", ARC)}),
    )
    write_run(
        root / "b",
        SyntheticRun(
            run_id="b", preset="p2", gpus=2, peak_memory_gib=(30.0, 31.0),
            mean_util_pct=(80.0, 90.0), energy_j=(1000.0, 2000.0),
            tasks={"gsm": ("math", [1] * 40), "arc": ("mc", ARC)},
        ),
    )  # fmt: skip
    for i in range(2):
        write_run(
            root / "c" / "shards" / str(i),
            SyntheticRun(run_id="c", preset="p3", shard=f"{i}/2", first_id=20 * i,
                         tasks={"gsm": ("math", GSM[:20])}),
        )  # fmt: skip
    write_run(
        root / "d",
        SyntheticRun(run_id="d", preset="cpu_model", on_cpu=True, gpus=0, energy_j=None,
                     peak_memory_gib=(3.0,), tasks={"gsm": ("math", GSM)}),
    )  # fmt: skip
    write_run(
        root / "e",
        SyntheticRun(run_id="e", preset="p1", status="interrupted", n_total={"gsm": 40},
                     tasks={"gsm": ("math", GSM[:12])}),
    )  # fmt: skip
    return root


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["report", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_markdown_leaderboard_keeps_incomplete_runs_apart(results, capsys) -> None:
    code, out, _ = _report(capsys, str(results))
    assert code == 0
    complete, incomplete = out.split("## Incomplete runs")
    row_a = next(line for line in complete.splitlines() if line.startswith("| p1 | a |"))
    assert "| 75.0 [59.8, 85.8] (40) | 60.0 [46.2, 72.4] (50) |" in row_a
    row_b = next(line for line in complete.splitlines() if line.startswith("| p2 | b |"))
    # 2 GPUs × 100 s = 0.06 GPU-h; 3000 J / 40000 tokens = 0.075 J/token; 500 tok/s, 250/GPU.
    assert "| 2×NVIDIA H100 80GB HBM3 |" in row_b
    assert row_b.endswith("| 100 s | 0.06 | 500.0 | 250.0 | 31.0 | 85 | 0.075 |")
    assert "| p3 | c [2 shards] |" in complete and "| cpu_model | d | cpu |" in complete
    assert "| p1 | e |" not in complete
    assert "| p1 | e | interrupted | 12/40 |" in incomplete and "(12/40)" in incomplete


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("leaderboard.md", ["{results}"]),
        ("leaderboard_by_task.md", ["{results}", "--by", "task"]),
        ("compare_a_b.md", ["--compare", "{results}/a", "{results}/b"]),
    ],
)
def test_golden_markdown(results, capsys, name: str, args: list[str]) -> None:
    code, out, _ = _report(capsys, *(a.format(results=results) for a in args))
    assert code == 0
    golden = GOLDEN / name
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(out)
    assert out == golden.read_text(), (
        f"{name} differs from the golden file; if the change is intended, regenerate with "
        "EVALPIPE_UPDATE_GOLDEN=1 pytest tests/test_report_cli.py"
    )


def test_by_task_columns(results, capsys) -> None:
    _, out, _ = _report(capsys, str(results), "--by", "task")
    header = out.splitlines()[2]
    assert header.startswith("| preset | run | devices | arc | gsm | wall |")


def test_csv_json_xlsx_parse_back(results, capsys, tmp_path: Path) -> None:
    _, out, _ = _report(capsys, str(results), "--format", "csv")
    frame = pd.read_csv(io.StringIO(out)).set_index("run_id")
    assert frame.loc["a", "math:mean"] == 0.75 and frame.loc["a", "math:n"] == 40
    assert frame.loc["b", "j_per_token"] == pytest.approx(0.075)
    assert frame.loc["c", "gpu_hours"] == pytest.approx(200 / 3600)
    assert not frame.loc["e", "complete"] and frame.loc["e", "math:n_total"] == 40

    _, out, _ = _report(capsys, str(results), "--format", "json")
    data = json.loads(out)
    runs = {r["run_id"]: r for r in data["runs"]}
    assert runs["a"]["scores"]["mc"]["mean"] == pytest.approx(0.6)
    math_a = runs["a"]["scores"]["math"]  # 30 of 40: Wilson [0.5981, 0.8581]
    assert (math_a["ci_low"], math_a["ci_high"]) == pytest.approx((0.5981, 0.8581), abs=1e-4)
    assert runs["d"]["j_per_token"] is None and runs["d"]["devices"] == "cpu"
    assert runs["e"]["status"] == "interrupted"

    target = tmp_path / "report.xlsx"
    assert _report(capsys, str(results), "--format", "xlsx", "-o", str(target))[0] == 0
    sheets = pd.read_excel(target, sheet_name=None)
    assert set(sheets) == {"leaderboard", "scores"}
    board = sheets["leaderboard"].set_index("run_id")
    assert board.loc["a", "math:mean"] == 0.75 and board.loc["b", "gpus"] == 2


def test_plots_dir_gets_pngs(results, capsys, tmp_path: Path) -> None:
    code, _, _ = _report(capsys, str(results), "--plots", str(tmp_path / "plots"))
    assert code == 0
    files = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert {"scores_by_category.png", "throughput_vs_gpus.png", "timeline_a.png"} <= set(files)
    assert {"timeline_c_shard_0.png", "timeline_c_shard_1.png", "timeline_d.png"} <= set(files)
    for name in files:
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_flags_planted_difference_not_noise(capsys, tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    base = rng.integers(0, 2, size=200).tolist()
    better = [1 if i % 3 == 0 else v for i, v in enumerate(base)]  # ~33 failures fixed
    shuffled = base[:]
    up = [i for i, v in enumerate(base) if v == 0][:4]
    down = [i for i, v in enumerate(base) if v == 1][:4]
    for i in up:
        shuffled[i] = 1
    for i in down:
        shuffled[i] = 0
    a = write_run(
        tmp_path / "a",
        SyntheticRun(run_id="a", preset="p", tasks={"planted": ("x", base), "noise": ("y", base)}),
    )
    b = write_run(
        tmp_path / "b",
        SyntheticRun(run_id="b", preset="p", gpus=2, generate_s=40.0, energy_j=(10_000.0, 10_000.0),
                     peak_memory_gib=(40.0, 40.0), mean_util_pct=(90.0, 90.0),
                     tasks={"planted": ("x", better), "noise": ("y", shuffled)}),
    )  # fmt: skip
    code, out, _ = _report(capsys, "--compare", str(a), str(b), "--format", "json")
    assert code == 0
    tasks = {t["task"]: t for t in json.loads(out)["compare"]["tasks"]}
    assert tasks["planted"]["significant"] and tasks["planted"]["test"] == "mcnemar-exact"
    assert tasks["planted"]["diff"] > 0.1 and tasks["planted"]["ci_low"] > 0
    assert not tasks["noise"]["significant"] and tasks["noise"]["p"] == 1.0
    ratios = {r["quantity"]: r["ratio"] for r in json.loads(out)["compare"]["ratios"]}
    assert ratios["tokens_per_s"] == pytest.approx(2.0)  # same tokens in half the time
    assert ratios["j_per_token"] == pytest.approx(1.0)  # 20 kJ for 40k tokens in both

    _, out, _ = _report(capsys, "--compare", str(a), str(b))
    planted = next(line for line in out.splitlines() if line.startswith("| planted |"))
    noise = next(line for line in out.splitlines() if line.startswith("| noise |"))
    assert planted.endswith("| yes |") and noise.endswith("|  |")

    book = tmp_path / "compare.xlsx"
    _report(capsys, "--compare", str(a), str(b), "--format", "xlsx", "-o", str(book))
    sheets = pd.read_excel(book, sheet_name=None)
    assert set(sheets) == {"leaderboard", "scores", "compare", "ratios"}
    flagged = sheets["compare"].set_index("task")["significant"]
    assert bool(flagged["planted"]) and not bool(flagged["noise"])


def test_user_mistakes_exit_1_with_the_path_named(results, capsys, tmp_path: Path) -> None:
    missing = tmp_path / "no_such_results"
    proc = subprocess.run(
        [sys.executable, "-m", "evalpipe", "report", str(missing)],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"evalpipe report: error: {str(missing)!r} does not exist" in proc.stderr
    cases = [
        ([str(results), "--format", "xlsx"], "add -o FILE.xlsx"),
        (["--compare", str(results), str(results / "a")], "holds 5 runs"),
        ([], "give a run directory"),
    ]
    for args, message in cases:
        code, _, err = _report(capsys, *args)
        assert code == 1 and message in err, (args, err)


def test_damaged_run_warns_on_stderr_and_still_reports(capsys, tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", SyntheticRun(run_id="r", preset="p", metrics_csv=False,
                                                 tasks={"gsm": ("math", GSM)}))  # fmt: skip
    with (run / "samples.jsonl").open("a") as f:
        f.write('{"task": "gsm", "sampl')
    code, _, err = _report(capsys, str(run), "--format", "html", "-o", str(tmp_path / "r.html"))
    assert code == 0
    assert "warning:" in err and "samples.jsonl: last line 41 is truncated" in err
    assert "no metrics.csv" in err
    page = (tmp_path / "r.html").read_text()
    assert "75.0 [59.8, 85.8] (40)" in page and "last line 41 is truncated" in page


def test_help_imports_neither_pandas_nor_matplotlib() -> None:
    code = (
        "import sys\nfrom evalpipe.cli import main\n"
        "for argv in (['--help'], ['report', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "heavy = [m for m in ('pandas', 'matplotlib') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert "HEAVY []" in proc.stdout
    assert "--compare RUN_A RUN_B" in proc.stdout


# --- the HTML page in a real browser ---------------------------------------------------------


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Debian package chromium is not installed (scripts/setup.sh installs it)")
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
    ]  # fmt: skip
    return subprocess.run(
        [exe, *flags, *args], capture_output=True, text=True, timeout=120, check=True
    )


def _console(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]


def test_html_renders_offline_in_headless_chromium(results, capsys, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    assert _report(capsys, str(results), "--format", "html", "-o", str(page))[0] == 0
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # nothing to fetch
    n_images = text.count('src="data:image/png;base64,')
    assert n_images == 8  # scores, throughput, timelines a, b, c×2 shards, d, e

    # The page as written: no console message (a blocked load or a CSP violation would be one).
    proc = _chromium(tmp_path / "profile", "--dump-dom", page.as_uri())
    assert _console(proc) == []
    assert proc.stdout.count("<table>") == 2 and "75.0 [59.8, 85.8] (40)" in proc.stdout

    # A copy with a probe script (the page itself allows no scripts): every image decoded?
    probe = tmp_path / "probe.html"
    probe.write_text(
        text.replace("default-src 'none';", "default-src 'none'; script-src 'unsafe-inline';")
        .replace(
            "</body>",
            "<script>addEventListener('load', () => { const imgs = [...document.images];"
            " document.body.dataset.decoded = imgs.filter(i => i.complete && i.naturalWidth > 100)"
            ".length; });</script></body>",
        )
    )  # fmt: skip
    proc = _chromium(tmp_path / "profile", "--dump-dom", probe.as_uri())
    assert f'data-decoded="{n_images}"' in proc.stdout
    assert _console(proc) == []

    shot = tmp_path / "report.png"
    _chromium(
        tmp_path / "profile", f"--screenshot={shot}", "--window-size=1400,2000", page.as_uri()
    )
    from PIL import Image

    with Image.open(shot) as image:
        assert image.size == (1400, 2000)
        colors = image.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colors is not None and len(colors) > 200  # tables and plots, not a blank page


def test_runs_with_weights_quantized_by_the_ladder_are_marked_in_every_format(
    capsys, tmp_path: Path
) -> None:
    step = (
        "build: the device ran out of memory → quantization none → bitsandbytes (weights "
        "quantized on load by the OOM fallback)"
    )
    undone = [step, "bnb_4bit_weights undone: it failed with AttributeError: no packed modules"]
    for name, steps in (("q", [step]), ("full", []), ("tried", undone)):
        write_run(
            tmp_path / name,
            SyntheticRun(
                run_id=name, preset=name, tasks={"gsm": ("math", GSM)}, oom_fallback=steps
            ),
        )
    _, md, _ = _report(capsys, str(tmp_path))
    assert "q †[bitsandbytes]" in md and "weights quantized by the OOM fallback" in md
    assert "full †" not in md and "tried †" not in md
    _, csv, _ = _report(capsys, str(tmp_path), "--format", "csv")
    frame = pd.read_csv(io.StringIO(csv)).set_index("run_id")
    assert frame.loc["q", "ladder_quantization"] == "bitsandbytes"
    assert frame["ladder_quantization"].isna().sum() == 2
    _, text, _ = _report(capsys, str(tmp_path), "--format", "json")
    runs = {r["run_id"]: r for r in json.loads(text)["runs"]}
    assert runs["q"]["ladder_quantization"] == "bitsandbytes"
    assert runs["full"]["ladder_quantization"] is None
    target = tmp_path / "r.xlsx"
    _report(capsys, str(tmp_path), "--format", "xlsx", "-o", str(target))
    board = pd.read_excel(target, sheet_name="leaderboard").set_index("run_id")
    assert board.loc["q", "ladder_quantization"] == "bitsandbytes"
    page = tmp_path / "r.html"
    _report(capsys, str(tmp_path), "--format", "html", "-o", str(page))
    assert "q †[bitsandbytes]" in page.read_text() and "OOM fallback" in page.read_text()
