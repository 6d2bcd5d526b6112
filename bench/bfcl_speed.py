"""BFCL: `evalpipe run --tasks bfcl:…` against BFCL's own `bfcl generate --backend vllm`, whole
processes, interleaved, medians. Target: evalpipe ≤ 0.7× BFCL's wall.

    python bench/bfcl_speed.py [--preset smollm2_135m] [--categories simple_python,multiple,…]
                               [--limit 20] [--max-tokens 128] [--reps 3]
    python bench/bfcl_speed.py --quick   # tiny_random, 2 entries of simple_python, once

Three sides, each a child process, rotated each repetition (bench/benchlib.interleave):
- `evalpipe run --tasks bfcl:CATS --limit N --max-tokens T`: load, generate, and BFCL's checker
  on every completion in the sandbox (scoring included; BFCL's generate scores nothing).
- `bfcl generate` (whole): BFCL starts `vllm serve` itself, waits for it, sends every entry to
  /v1/completions from its threads (100 by default for local models), stops the server.
- `bfcl generate --skip-server-setup` (generation alone): the same against a server the bench
  started before it (untimed, stopped after it: an idle vLLM server is not idle on the CPU).

Both run the same entries (the first N of each category, as `--limit` takes them; BFCL's own
`--run-ids` file lists them), the same prompts (BFCL's generic OSS prompting handler,
QuickTestingOSSHandler, which evalpipe's bfcl kind prompts with: it is registered for the
model in BFCL's MODEL_CONFIG_MAPPING before BFCL's CLI runs, as BFCL's README asks of a new
model), temperature 0.001, and the same engine: the server gets the LLM() arguments evalpipe's
engine recorded in its manifest (max_model_len, dtype, max_num_seqs, whole prefills …) and the
same vLLM environment. BFCL asks for max_tokens = min(4096, ctx − input − 2) with ctx the
model's max_position_embeddings; evalpipe's run is given that context as --max-model-len. The
token budget is lowered equally on both sides: evalpipe's --max-tokens T, the server's
server-wide cap (`--override-generation-config '{"max_new_tokens": T}'`).

bfcl-eval comes from its own folder (scripts/bfcl.sh), last on the path of BFCL's process.
BFCL runs `vllm serve MODEL …`; the CPU build's `vllm` console script cannot find its own
distribution, so the command `vllm` on BFCL's PATH is a two-line shim that runs what `vllm
serve` runs (vLLM's OpenAI server module) with BFCL's options followed by the engine's.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchlib import (
    QUICK_PRESET,
    REPO,
    VLLM_ENV,
    EvalpipeRun,
    Timing,
    child_env,
    evalpipe_run,
    interleave,
    load_average,
    machine,
    median,
    parse_args,
    timed_run,
    verdict,
)

from evalpipe.catalog import weights
from evalpipe.catalog.preset import load_preset
from evalpipe.run.vllmserver import VLLM_SERVER, free_port, server_argv, wait_ready
from evalpipe.tasks.bfcl.install import bfcl_dir
from evalpipe.tasks.bfcl.task import PREFIX

TARGET = 0.7
# What BFCL's CLI imports beyond bfcl-eval's folder: bench/bfcl_generate_requirements.txt.
GENERATE_DIR = REPO / ".cache" / "bench-bfcl-generate"
GENERATE_MISSING = (
    f"BFCL's CLI needs {GENERATE_DIR}: run `make bench`, or\n  {sys.executable} -m pip install "
    f"--no-deps --target {GENERATE_DIR} -r bench/bfcl_generate_requirements.txt"
)
WHOLE, ALONE, OURS = "bfcl generate", "bfcl generate --skip-server-setup", "evalpipe run"

# BFCL's CLI with the model registered on BFCL's generic prompting handler first.
# argv: the folders to append to sys.path, the model name, then `bfcl`'s own arguments.
LAUNCH = r"""
import os, sys
sys.path.extend(sys.argv[1].split(os.pathsep))
from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING, ModelConfig
from bfcl_eval.model_handler.local_inference.quick_testing_oss import QuickTestingOSSHandler
name = sys.argv[2]
MODEL_CONFIG_MAPPING[name] = ModelConfig(
    model_name=name, display_name=name, url="", org="", license="",
    model_handler=QuickTestingOSSHandler, input_price=None, output_price=None,
    is_fc_model=False, underscore_to_dot=False)
from bfcl_eval.__main__ import cli
cli(sys.argv[3:], prog_name="bfcl")
"""


def engine_options(run: EvalpipeRun, max_tokens: int, port: int) -> list[str]:
    """vLLM server options for the engine evalpipe's run built, its token budget as the
    server-wide cap; served under the model path BFCL asks for."""
    kwargs = {k: v for k, v in run.engine["engine_kwargs"].items() if k != "model"}
    kwargs["max_num_seqs"] = run.engine["resolved"]["max_num_seqs"]
    kwargs["override_generation_config"] = {"max_new_tokens": max_tokens}
    path = run.engine["engine_kwargs"]["model"]
    return server_argv(kwargs, name=path, host="127.0.0.1", port=port)


def vllm_shim(folder: Path, options: Sequence[str]) -> Path:
    """A `vllm` command for BFCL's `vllm serve MODEL OPTIONS…`: vLLM's server module, with
    BFCL's options first and the engine's after them (the later one wins)."""
    server = " ".join(shlex.quote(a) for a in (sys.executable, *VLLM_SERVER))
    shim = folder / "bin" / "vllm"
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = serve ] || {{ echo "vllm shim: only serve, not $1" >&2; exit 2; }}\n'
        f'shift; model="$1"; shift\n'
        f'exec {server} --model "$model" "$@" {" ".join(shlex.quote(a) for a in options)}\n'
    )
    shim.chmod(0o755)
    return shim.parent


def bfcl_generate(
    name: str, path: str, ids: Mapping[str, Sequence[str]], root: Path, env: Mapping[str, str],
    *extra: str,
) -> tuple[Timing, dict[str, Any]]:  # fmt: skip
    """One `bfcl generate` process over `ids` in a fresh BFCL_PROJECT_ROOT: its timing, and
    its result rows by entry id (completion, token counts)."""
    root.mkdir(parents=True)
    (root / "test_case_ids_to_generate.json").write_text(json.dumps(ids))
    folders = os.pathsep.join([str(bfcl_dir()), str(GENERATE_DIR)])
    argv = [sys.executable, "-c", LAUNCH, folders, name, "generate", "--model", name,
            "--run-ids", "--backend", "vllm", "--local-model-path", path, *extra]  # fmt: skip
    timing = timed_run(argv, env=dict(env, BFCL_PROJECT_ROOT=str(root)))
    print(f"  {' '.join(['bfcl generate', *extra])}: wall {timing.wall_s:.2f} s", flush=True)
    rows = {}
    for file in (root / "result").rglob("*_result.json"):
        for line in file.read_text().splitlines():
            row = json.loads(line)
            rows[row["id"]] = row
    return timing, rows


def shared_server(options: Sequence[str], path: str, env: Mapping[str, str], log: Path) -> Any:
    """vLLM's server with the engine's options, once it answers (untimed)."""
    port = int(options[options.index("--port") + 1])
    server = subprocess.Popen(
        [sys.executable, *VLLM_SERVER, "--model", path, *options],
        env=dict(env), stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    ready, why = wait_ready(
        f"http://127.0.0.1:{port}/v1", path, timeout_s=600, alive=lambda: server.poll() is None
    )
    if not ready:
        server.kill()
        raise RuntimeError(f"the shared server did not start: {why}; log {log}")
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="smollm2_135m", help="a prepared preset")
    parser.add_argument("--categories", default="simple_python,multiple,irrelevance")
    parser.add_argument("--limit", type=int, default=20, help="entries per category")
    parser.add_argument("--max-tokens", type=int, default=128, help="token budget, both sides")
    parser.add_argument("--reps", type=int, default=3)
    quick = {"preset": QUICK_PRESET, "categories": "simple_python", "limit": 2,
             "max_tokens": 8, "reps": 1}  # fmt: skip
    args = parse_args(parser, quick)
    bfcl_dir()  # bfcl-eval installed, or the message naming scripts/bfcl.sh
    preset = load_preset(args.preset)
    path = str(weights.model_source(preset))
    # BFCL's context: the model's max_position_embeddings, as its handler reads it.
    context = json.loads((Path(path) / "config.json").read_text())["max_position_embeddings"]
    categories = args.categories.split(",")
    print(f"machine: {machine()}")
    print(f"at start: {load_average()}")
    print(f"preset {args.preset}, categories {args.categories}, {args.limit} entries each, "
          f"max_tokens {args.max_tokens}, context {context}")  # fmt: skip
    env = child_env(**VLLM_ENV)
    # A server keeps vLLM's own engine-core process (evalpipe's engine sets this one itself).
    server_env = {k: v for k, v in env.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    ours: list[EvalpipeRun] = []
    theirs: dict[str, list[tuple[Timing, dict[str, Any]]]] = {WHOLE: [], ALONE: []}
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-bfcl-") as tmp:
        folder = Path(tmp)
        task = ",".join(f"bfcl:{c}" for c in categories)

        def run_ours() -> None:
            out = folder / f"run-{len(ours)}"
            ours.append(evalpipe_run(args.preset, task, args.limit, out, env,
                                     "--max-tokens", str(args.max_tokens),
                                     "--max-model-len", str(context)))  # fmt: skip
            print(f"  {OURS}: wall {ours[-1].timing.wall_s:.2f} s", flush=True)

        def ids() -> dict[str, list[str]]:
            found: dict[str, list[str]] = {c: [] for c in categories}
            for row in ours[0].samples:
                found[row["task"].removeprefix(PREFIX)].append(row["sample_id"])
            return found

        def run_whole() -> None:
            port = free_port()
            shim = vllm_shim(folder / "shim", engine_options(ours[0], args.max_tokens, port))
            run_env = dict(server_env, LOCAL_SERVER_PORT=str(port),
                           PATH=os.pathsep.join([str(shim), server_env["PATH"]]))  # fmt: skip
            root = folder / f"whole-{len(theirs[WHOLE])}"
            theirs[WHOLE].append(bfcl_generate(preset.model, path, ids(), root, run_env))

        def run_alone() -> None:
            options = engine_options(ours[0], args.max_tokens, free_port())
            port = options[options.index("--port") + 1]
            n = len(theirs[ALONE])
            server = shared_server(options, path, server_env, folder / f"server-{n}.log")
            try:
                run_env = dict(server_env, LOCAL_SERVER_ENDPOINT="127.0.0.1",
                               LOCAL_SERVER_PORT=port)  # fmt: skip
                theirs[ALONE].append(bfcl_generate(preset.model, path, ids(),
                                                   folder / f"alone-{n}", run_env,
                                                   "--skip-server-setup"))  # fmt: skip
            finally:
                server.terminate()
                server.wait(timeout=60)

        # evalpipe first in the first round: BFCL's sides take its engine arguments and entries.
        sides = {OURS: run_ours, WHOLE: run_whole, ALONE: run_alone}
        if not (GENERATE_DIR / "tabulate").is_dir():
            if not args.quick:
                print(GENERATE_MISSING)
                return 1
            print(f"BFCL's sides SKIPPED: {GENERATE_MISSING}")  # quick: evalpipe's side runs
            sides = {OURS: run_ours}
            theirs = {}
        interleave(sides, args.reps)

    return report(ours, theirs, args.reps)


def tokens_cell(counts: Sequence[int]) -> str:
    return f"completion tokens median {median(counts):g} (max {max(counts)})"


def report(
    ours: list[EvalpipeRun], theirs: dict[str, list[tuple[Timing, dict[str, Any]]]], reps: int
) -> int:
    """Print each side's walls, the ratios and the completions compared; the exit status."""

    def cell(timings: Sequence[Timing]) -> str:
        walls = [t.wall_s for t in timings]
        return (f"wall {median(walls):.2f} s ({min(walls):.2f}–{max(walls):.2f}), "
                f"CPU {median([t.cpu_s for t in timings]):.2f} s")  # fmt: skip

    mine = {s["sample_id"]: s["completions"][0] for s in ours[0].samples}
    tokens = [n for s in ours[0].samples for n in s["completion_tokens"]]
    print(f"\n(medians of {reps}, each a whole process: evalpipe's includes its model load and "
          "BFCL's checker on every completion)")  # fmt: skip
    print(f"{OURS}: {cell([o.timing for o in ours])}; load "
          f"{median([o.phase('load') for o in ours]):.2f} s, generate "
          f"{median([o.phase('generate') for o in ours]):.2f} s, score "
          f"{median([o.phase('score') for o in ours]):.2f} s; {len(mine)} entries, "
          f"{tokens_cell(tokens)}")  # fmt: skip
    failed = 0
    for side, runs in theirs.items():
        rows = runs[0][1]
        # BFCL records a request that failed as its error text, with no token counts.
        missing = sorted(set(mine) - {i for i, r in rows.items() if "output_token_count" in r})
        failed += bool(missing)
        texts = {i: row["result"] for i, row in rows.items()}
        same = sum(texts.get(i) == t for i, t in mine.items())
        differ = next((i for i, t in mine.items() if i in texts and texts[i] != t), None)
        ratios = [o.timing.wall_s / t.wall_s for o, (t, _) in zip(ours, runs, strict=True)]
        ratio = median(ratios)
        print(f"{side}: {cell([t for t, _ in runs])}; {len(rows)} entries, "
              f"{tokens_cell([r.get('output_token_count', 0) for r in rows.values()])}"
              f"{f', MISSING OR FAILED {missing[:3]}' if missing else ''}")  # fmt: skip
        print(f"  completions identical to evalpipe's: {same}/{len(mine)}")
        if differ is not None:  # temperature 0.001 samples (vLLM: at 0.01), seeds differ
            print(f"  first that differs, {differ}: BFCL {texts[differ][:80]!r}, evalpipe "
                  f"{mine[differ][:80]!r}")  # fmt: skip
        print(f"  wall-time ratio evalpipe / {side}: {ratio:.3f} (per repetition "
              f"{', '.join(f'{r:.3f}' for r in ratios)}); target ≤ {TARGET}: "
              f"{verdict(ratio, TARGET)}")  # fmt: skip
        if side == ALONE:  # generation against generation: neither side's model load counted
            phases = [o.phase("generate") / t.wall_s for o, (t, _) in zip(ours, runs, strict=True)]
            print(f"  evalpipe's generate phase / {side}: {median(phases):.3f} (per repetition "
                  f"{', '.join(f'{r:.3f}' for r in phases)}); target ≤ {TARGET}: "
                  f"{verdict(median(phases), TARGET)}")  # fmt: skip
    print(f"at end: {load_average()}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
