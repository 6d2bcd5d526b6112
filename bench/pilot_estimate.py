"""The pilot's estimate of a full run against the full run measured, beside the estimate with
no history, on a workload whose answer lengths differ a lot by task.

    python bench/pilot_estimate.py [--out DIR] [--reps 3] [--preset P] [--limit N] [--pilot F|N]
    python bench/pilot_estimate.py --quick    # tiny_random, a few samples, one repetition

The workload (bench/pilot_tasks/): short multiple choice (a letter in ≤ 8 tokens), long
free-form explanations (≤ 96 tokens), and repeated sampling (3 sampled answers of ≤ 48 tokens
each), --limit samples of each (the default 40 is one engine batch, three repetitions in about
20 minutes on the shared 2-core machine; `--limit 400 --pilot 8`, the task files' whole size,
is eight batches, where a pilot's fixed costs weigh as they do in a long run: about 40 minutes).
Each repetition runs, as processes timed whole:
  1. `evalpipe run --pilot N` into its own directory, then the full run's estimate from it
     (`estimate/pilot.py`, as `evalpipe run --pilot` prints it);
  2. the full run, without a pilot, into another directory: the measured wall, and its
     GPU-seconds (device-seconds on the CPU: wall × the one device).
Before the repetitions (unless --no-smoke), `evalpipe smoke --local --gpu cpu` once: the
engine's decode steps against batch size, which the pilot's job then corrects (a pilot's
batch is small; its seconds per token alone may price the full run's large batches wrongly).
The pilot's estimate is given both ways: with the smoke record, and from the pilot alone (a
step cost fitted to its own engine steps against their batch, its batch probe's steps at the
run's batch included); and from the same pilot's own steps without its batch probe (its
manifest's `pilot.probe` left out, in a copy), which shows what the probe changes. The
no-history estimate prices every answer at its max_tokens: at the smoke record's rates, or with
--no-smoke at the pilot's (the difference is then the lengths alone).
The first repetition then resumes the pilot's directory as the full run, counts what it
generated (none of the pilot's samples again) and sets its completions and scores beside the
full run's; the pilot's added cost is then its wall plus that run's, less the full run's.
Prints a markdown table with medians; the load before each process goes to the JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
from pathlib import Path

from benchlib import (
    QUICK_PRESET,
    REPO,
    VLLM_ENV,
    child_env,
    load_average,
    machine,
    median,
    parse_args,
    timed_run,
)

from evalpipe.catalog.gpus import get_gpu
from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.catalog.selection import Selection
from evalpipe.core.span import Span
from evalpipe.estimate.cost import Estimate
from evalpipe.estimate.pilot import Measured, PilotEstimate, pilot_estimate
from evalpipe.estimate.predict import predictor
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import read_manifest
from evalpipe.rundir.samplelog import read_samples
from evalpipe.rundir.summary import read_summary

TASKS = tuple(str(REPO / "bench" / "pilot_tasks" / f"{n}.yaml") for n in ("pilot_mc", "pilot_long",
              "pilot_repeat"))  # fmt: skip
WALL_TARGET = 0.15  # the pilot's estimate within ±15 % of the measured wall
COST_TARGET = 0.10  # the pilot at ≤ 10 % of the full run's cost


def _run(args: argparse.Namespace, out: Path, *extra: str) -> float:
    argv = [sys.executable, "-m", "evalpipe", "run", "--preset", args.preset, "--out", str(out)]
    argv += ["--tasks", ",".join(TASKS), "--limit", str(args.limit), *extra]
    return timed_run(argv, env=child_env(**VLLM_ENV)).wall_s


def _generated(run: Path) -> dict[tuple[str, str], tuple[str, ...]]:
    return {r.key: r.completions for r in read_samples(RunDir(run).samples).records}


def _continuation(pilot: Path, full: Path, args: argparse.Namespace) -> dict[str, object]:
    """Resume the pilot's directory as the full run: what it generated, and its completions
    and scores beside the full run's (the CPU kernels batch differently: some greedy texts
    may part where two tokens nearly tie)."""
    before = _generated(pilot)
    wall = _run(args, pilot)
    after, plain = _generated(pilot), _generated(full)
    manifest = read_manifest(RunDir(pilot))
    scores = {}
    for name, run in (("full", full), ("after pilot", pilot)):
        summary = read_summary(RunDir(run))
        scores[name] = {
            task.rsplit("/", 1)[-1]: {k: m.mean for k, m in t.metrics.items()}
            for task, t in (summary.tasks if summary else {}).items()
        }
    return {
        "wall_s": round(wall, 1),
        "pilot_samples": len(before),
        "resumed": manifest.pilot.resumed if manifest and manifest.pilot else None,
        "generated": len(after) - len(before),
        "pilot_samples_generated_again": sum(after[k] != before[k] for k in before),
        "identical_completions": sum(plain[k] == after.get(k) for k in plain),
        "samples": len(plain),
        "scores": scores,
    }


def _no_history(
    args: argparse.Namespace, found: PilotEstimate, selection: Selection, smoke: Path
) -> Estimate:
    """Every answer at its max_tokens (no past run): at the smoke record's rates, or without
    one at the pilot's own (the difference is then the lengths alone)."""
    if args.no_smoke:
        bounded = tuple(
            w if w.ranked else dataclasses.replace(w, generated_tokens=Span.exact(w.max_tokens))
            for w in found.prediction.work
        )
        return dataclasses.replace(found.prediction, work=bounded).estimate()
    plain = predictor(load_preset(args.preset), get_gpu("cpu"), found.prediction.plan, selection,
                      results=[], calibration_dirs=[smoke])  # fmt: skip
    return plain.estimate()


def _without_probe(
    preset: Preset, selection: Selection, pilot: Path, copy: Path
) -> tuple[PilotEstimate, float]:
    """The pilot-alone estimate as if the pilot had not probed the run's batch (its manifest's
    `pilot.probe` left out, in a copy of its directory; the `probe` timing kept, so the probe's
    seconds stay out of the job's overhead as they do with it), and the probe's seconds (0
    without one): the probe's effect, from the same pilot."""
    shutil.copytree(pilot, copy, dirs_exist_ok=True)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["pilot"].pop("probe", None)
    probe_s = manifest["timings"].get("probe", 0.0)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return pilot_estimate(preset, selection, copy), probe_s


def _lengths(m: Measured) -> list[float]:
    """[samples measured, mean answer tokens, the 90 % half-width]."""
    return [len(m.lengths), round(m.mean, 1), round(m.half_width, 1)]


def _span(span: Span) -> list[float]:
    return [round(span.low, 1), round(span.mid, 1), round(span.high, 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="working folder (default: a temporary one)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--preset", default="smollm2_135m", help="a prepared preset")
    parser.add_argument("--limit", type=int, default=40, help="samples per task")
    parser.add_argument("--pilot", default="0.1", help="--pilot's value (default 0.1)")
    parser.add_argument(
        "--no-smoke",
        action="store_true",
        help="no smoke record: the pilot's own engine steps price the run, as `evalpipe "
        "run --pilot` does on a CPU without one (the no-history estimate then at those rates)",
    )
    args = parse_args(parser, {"reps": 1, "preset": QUICK_PRESET, "limit": 6, "pilot": "2"})
    out = args.out or Path(tempfile.mkdtemp(prefix="evalpipe-pilot-"))
    preset = load_preset(args.preset)
    selection = Selection(tasks=TASKS, limit=args.limit)
    print(f"# {machine()}\n# start: {load_average()}", file=sys.stderr)
    smoke = out / "smoke"
    if not args.no_smoke and not list(smoke.glob("*.calibration.json")):
        argv = [sys.executable, "-m", "evalpipe", "smoke", "--local", "--gpu", "cpu"]
        timed_run([*argv, "--preset", args.preset, "--out", str(smoke)], env=child_env(**VLLM_ENV))
    rows, check = [], None
    for rep in range(args.reps):
        pilot, full = out / f"pilot-{rep}", out / f"full-{rep}"
        load_pilot = load_average()
        pilot_wall = _run(args, pilot, "--pilot", args.pilot)
        piloted = dataclasses.replace(selection, pilot=args.pilot)
        alone = pilot_estimate(preset, piloted, pilot)
        own, probe_s = _without_probe(preset, piloted, pilot, out / f"pilot-{rep}-own-steps")
        found = alone if args.no_smoke else pilot_estimate(preset, piloted, pilot, [smoke])
        no_history = _no_history(args, found, selection, smoke)
        load_full = load_average()
        full_wall = _run(args, full)
        rows.append(
            {
                "rep": rep,
                "pilot_wall_s": round(pilot_wall, 1),
                "pilot_estimate_wall_s": _span(found.full.wall_s),
                "pilot_alone_estimate_wall_s": _span(alone.full.wall_s),
                "pilot_own_steps_estimate_wall_s": _span(own.full.wall_s),
                "probe_s": round(probe_s, 1),
                "no_history_wall_s": _span(no_history.wall_s),
                "full_wall_s": round(full_wall, 1),
                "pilot_share": round(pilot_wall / full_wall, 3),
                "lengths": {
                    m.task.rsplit("/", 1)[-1]: _lengths(m) for m in found.measured.values()
                },
                "load": [load_pilot, load_full],
            }
        )
        print(f"  rep {rep + 1}/{args.reps}: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
        if rep == 0:
            check = _continuation(pilot, full, args)
            print(f"  continuation: {json.dumps(check)}", file=sys.stderr, flush=True)
    print(f"# end: {load_average()}", file=sys.stderr)
    _table(rows, check)
    (out / "pilot-estimate-bench.json").write_text(
        json.dumps({"rows": rows, "continuation": check}, indent=2) + "\n"
    )
    print(
        f"\n(raw figures: {out / 'pilot-estimate-bench.json'}; repository {REPO})", file=sys.stderr
    )
    ok = check is not None and check["pilot_samples_generated_again"] == 0
    return 0 if ok else 1


def _table(rows: list[dict], check: dict | None) -> None:
    full = median([r["full_wall_s"] for r in rows])
    est = median([r["pilot_estimate_wall_s"][1] for r in rows])
    alone = median([r["pilot_alone_estimate_wall_s"][1] for r in rows])
    own = median([r["pilot_own_steps_estimate_wall_s"][1] for r in rows])
    probe = median([r["probe_s"] for r in rows])
    bound = median([r["no_history_wall_s"][1] for r in rows])
    share = median([r["pilot_share"] for r in rows])
    error = est / full - 1
    pilot = median([r["pilot_wall_s"] for r in rows])
    lines = [
        ("no-history estimate (max_tokens)", bound, f"{bound / full - 1:+.0%}"),
        ("pilot's estimate (smoke record corrected by the pilot)", est, f"{error:+.0%}"),
        (
            "pilot's estimate, pilot alone (its own engine steps)",
            alone,
            f"{alone / full - 1:+.0%}",
        ),
        (
            "pilot's estimate, its own steps without the batch probe",
            own,
            f"{own / full - 1:+.0%}",
        ),
        ("measured full run", full, "-"),
        ("the pilot itself", pilot, f"{share:.0%} of the full run"),
        ("its batch probe", probe, f"{probe / full:.0%} of the full run"),
    ]
    print(f"| figure (medians of {len(rows)}) | wall s | GPU-s (1 device) | vs measured |")
    print("|---|---|---|---|")
    for name, seconds, versus in lines:
        print(f"| {name} | {seconds:.1f} | {seconds:.1f} | {versus} |")
    wall_ok = "meets" if abs(error) <= WALL_TARGET else "MISSES"
    cost_ok = "meets" if share <= COST_TARGET else "MISSES"
    print(f"\nestimate within ±{WALL_TARGET:.0%}: {wall_ok}; pilot ≤ {COST_TARGET:.0%} of the "
          f"full run's cost: {cost_ok}")  # fmt: skip
    if check is not None:
        added = rows[0]["pilot_wall_s"] + check["wall_s"] - rows[0]["full_wall_s"]
        print(
            f"the pilot's added cost (rep 1: the pilot, plus the run that resumed it, less the "
            f"run without it): {added:.1f} s, {added / rows[0]['full_wall_s']:.0%} of the full run"
        )
        print(
            f"continuation: {check['pilot_samples']} pilot samples resumed "
            f"({check['pilot_samples_generated_again']} generated again), "
            f"{check['generated']} generated; completions identical to the full run's: "
            f"{check['identical_completions']} of {check['samples']}; scores "
            f"{json.dumps(check['scores'])}"
        )


if __name__ == "__main__":
    sys.exit(main())
