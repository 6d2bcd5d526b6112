"""The endpoint engine against a local vLLM server, beside the in-process engine: the same model
and the same prompts, the generation phase's wall time, and a concurrency sweep.

    python bench/endpoint.py [--preset smollm2_135m] [--limit 200] [--concurrency 1,8,64,200]
    python bench/endpoint.py --part mc [--limit 40]      # multiple choice by log-probabilities
    python bench/endpoint.py --quick    # 2 prompts on tiny_random at c=2: does it work

Each side is one `evalpipe run` process: in-process first (no server yet), then one
`evalpipe serve` of the preset for the endpoint sides, then in-process again beside the idle
server. generation (the default part): the offline arithmetic task (greedy, 128 tokens at
most), `--backend openai` at each concurrency. mc: the offline ordering task with
`--mc-method logprobs`, in-process (one decoding step per question) against the endpoint (one
echo request per option) at the first concurrency. A side's figure is the `generate:CATEGORY`
time its manifest records (the streaming loop's wall from first admission to last answer;
model load and process start excluded) and its generated tokens per second. The load average
is printed beside every side: the machine is shared. Answers equal to the in-process run's are
counted too (greedy SmolLM2 on the CPU depends on the batch, so some differ); where generated
texts differ, a reference run in this process records evalpipe's top-2 log-probabilities and
each side is compared with it under the near-tie rule (tests/neartie.py). --quick skips the
second in-process side (the same code as the first).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import (
    QUICK_PRESET,
    REPO,
    child_env,
    load_average,
    machine,
    near_ties,
    parse_args,
    reference_run,
)

from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.summary import read_summary

# part → (task, category, extra `evalpipe run` options)
PARTS = {
    "generation": ("arithmetic", "math", ()),
    "mc": ("ordering", "reasoning", ("--mc-method", "logprobs")),
}


def run_side(preset: str, part: str, limit: int, out: Path, *extra: str) -> dict[str, Any]:
    task, category, options = PARTS[part]
    argv = [sys.executable, "-m", "evalpipe", "run", "--preset", preset, "--tasks", task]
    argv += options
    argv += ["--limit", str(limit), "--out", str(out), *extra]
    start = time.perf_counter()
    done = subprocess.run(argv, env=child_env(), cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    summary = read_summary(RunDir(out))
    if summary is None or summary.throughput.generated_tokens is None:
        raise RuntimeError(f"{' '.join(argv)} wrote no summary.json with its generated tokens")
    generate_s = manifest["timings"][f"generate:{category}"]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    tokens = summary.throughput.generated_tokens
    return {
        "generate_s": round(generate_s, 2),
        "per_sample_s": round(generate_s / limit, 3),
        "tokens": tokens,
        "tok_per_s": round(tokens / generate_s, 1),
        "process_s": round(time.perf_counter() - start, 1),
        "load": load_average(),
        "completions": {s["sample_id"]: s["completions"] for s in samples},
        "prompts": {s["sample_id"]: s["prompt"] for s in samples},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="smollm2_135m")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--concurrency", default="1,8,64,200")
    parser.add_argument("--part", choices=PARTS, default="generation")
    parser.add_argument("--out", type=Path, help="working folder (default: a temporary one)")
    args = parse_args(parser, {"limit": 2, "concurrency": "2", "preset": QUICK_PRESET})
    from evalpipe.catalog import weights
    from evalpipe.catalog.preset import load_preset
    from evalpipe.run.vllmserver import free_port, served_name, wait_ready

    weights.prepare(args.preset)
    print(json.dumps({"machine": machine(), "load_start": load_average()}), flush=True)
    folder = args.out or Path(tempfile.mkdtemp(prefix="evalpipe-bench-endpoint-"))
    folder.mkdir(parents=True, exist_ok=True)
    # In-process first, before the server exists: an idle vLLM server is not idle on the CPU
    # (its worker polls for work), so the in-process side runs again beside it at the end.
    sides: dict[str, dict[str, Any]] = {}
    sides["in-process"] = run_side(args.preset, args.part, args.limit, folder / "in-process")
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    log = (folder / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "evalpipe", "serve", "--preset", args.preset, "--port", str(port)],
        env=child_env(),
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        started = time.perf_counter()
        ready, why = wait_ready(
            base_url,
            served_name(load_preset(args.preset)),
            timeout_s=600,
            alive=lambda: server.poll() is None,
        )
        if not ready:
            raise RuntimeError(f"server: {why}; log {log.name}")
        print(json.dumps({"server_ready_s": round(time.perf_counter() - started, 1)}), flush=True)
        sweep = args.concurrency.split(",")
        for concurrency in sweep if args.part == "generation" else sweep[:1]:
            if server.poll() is not None:
                raise RuntimeError(f"the server exited ({server.returncode}); log {log.name}")
            sides[f"endpoint c={concurrency}"] = run_side(
                args.preset,
                args.part,
                args.limit,
                folder / f"endpoint-{concurrency}",
                "--backend",
                "openai",
                "--base-url",
                base_url,
                "--concurrency",
                concurrency,
            )
        if not args.quick:
            sides["in-process, idle server beside"] = run_side(
                args.preset, args.part, args.limit, folder / "in-process-beside"
            )
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
    reference = sides["in-process"]["completions"]
    prompts = sides["in-process"]["prompts"]
    texts = {name: side.pop("completions") for name, side in sides.items()}
    # Untimed, after every side, and only where generated texts differ.
    differ = args.part == "generation" and any(t != reference for t in texts.values())
    tallies: dict[str, Any] = {}
    if differ:
        task = PARTS[args.part][0]
        recorded = reference_run(args.preset, task, args.limit, folder / "reference", {})
        tallies = near_ties(prompts, texts, recorded)
    for name, side in sides.items():
        side.pop("prompts")
        side["same_as_in_process"] = sum(texts[name][k] == reference[k] for k in reference)
        if name in tallies:
            side["near_tie_rule"] = tallies[name].lines()[0]
        print(json.dumps({"side": name, **side}), flush=True)
    print(json.dumps({"load_end": load_average(), "files": str(folder)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
