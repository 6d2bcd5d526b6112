"""Start-up latency of the login-node commands (`--help`, `plan`, `render`, `check`) against
`python -c pass`: wall time of a fresh process and the modules it imports.

Each command runs in its own process, interleaved with the others, after one unmeasured warm-up
(so .pyc files exist and the page cache is warm: "cold" means a new interpreter, as on a login
node that has run evalpipe before). A separate probe run of each command records sys.modules at
exit to count imports and check that no heavy library (vllm, torch, pandas) was loaded, and that
`plan` and `render` load no task code (evalpipe.tasks: only a run or `--estimate` needs tasks).

    python bench/startup.py [--reps N]
    python bench/startup.py --quick     # one repetition
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from benchlib import (
    REPO,
    child_env,
    interleave,
    load_average,
    machine,
    median,
    parse_args,
    spread,
    timed_run,
    verdict,
)

HEAVY = ("vllm", "torch", "pandas")
# Reported for information: libraries a login-node command has no use for either.
OTHER_HEAVY = ("numpy", "pynvml", "matplotlib", "datasets", "ray", "transformers", "pyarrow")
TARGET_S = 0.3
# Task code (datasets, prompts, scorers) and the commands that must not load any of it.
TASKS = "evalpipe.tasks"
WITHOUT_TASKS = ("evalpipe plan", "evalpipe render")

COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "evalpipe --help": ["-m", "evalpipe", "--help"],
    "evalpipe plan": ["-m", "evalpipe", "plan", "--preset", "llama3_3_70b", "--gpu", "h100-80gb"],
    "evalpipe render": [
        "-m",
        "evalpipe",
        "render",
        "--preset",
        "llama3_3_70b",
        "--cluster",
        "example-h100-site",
    ],
    # The login-node preflight on a prepared model (`evalpipe models prepare tiny_random` first).
    "evalpipe check": ["-m", "evalpipe", "check", "--preset", "tiny_random", "--cluster", "local"],
}

# Runs the command's code in-process and writes the final sys.modules to the file in argv[1].
# `python -c pass` is probed the same way with nothing to run, so both sides count the probe's
# own imports (json, atexit, runpy).
PROBE = """
import atexit, json, runpy, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
args = sys.argv[2:]
if args[:2] == ["-m", "evalpipe"]:
    sys.argv = ["evalpipe", *args[2:]]
    runpy.run_module("evalpipe", run_name="__main__", alter_sys=True)
"""


def modules(args: list[str]) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-startup-") as tmp:
        out = Path(tmp) / "modules.json"
        timed_run([sys.executable, "-c", PROBE, str(out), *args])
        return json.loads(out.read_text())


def loaded_of(names: list[str], wanted: tuple[str, ...]) -> list[str]:
    return [w for w in wanted if w in names]


def under(names: list[str], package: str) -> list[str]:
    """The modules in `names` that are `package` or inside it."""
    return [n for n in names if n == package or n.startswith(package + ".")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=15)
    args = parse_args(parser, {"reps": 1})
    env = child_env()
    # The warm-up must leave the .pyc files a login node keeps after its first run: inherited,
    # PYTHONDONTWRITEBYTECODE would have every timed run compile evalpipe's modules again.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    print(f"machine: {machine()}")
    print(f"at start: {load_average()}")
    print(f"python: {sys.executable}, checkout: {REPO}\n")

    # Warm-up (.pyc, page cache); a command that fails is reported, not timed.
    broken: dict[str, str] = {}
    for name, argv in COMMANDS.items():
        try:
            timed_run([sys.executable, *argv], env=env)
        except RuntimeError as exc:
            broken[name] = str(exc).strip().splitlines()[-1]
    working = {name: argv for name, argv in COMMANDS.items() if name not in broken}
    times = interleave(
        {
            name: (lambda a=argv: timed_run([sys.executable, *a], env=env))
            for name, argv in working.items()
        },
        args.reps,
    )
    wall = {name: [t.wall_s for t in runs] for name, runs in times.items()}
    cpu = {name: [t.cpu_s for t in runs] for name, runs in times.items()}
    baseline = median(wall["python -c pass"])
    base_modules = modules(COMMANDS["python -c pass"])
    heavy_seen: list[str] = []
    unwanted_seen: list[str] = []
    print(
        f"{'command':<16} {'wall s: median (min–max, n)':<32} {'× python':>8} "
        f"{'CPU s':>6} {'modules':>7} {'+ python':>8}  heavy libraries imported"
    )
    for name, argv in working.items():
        loaded = modules(argv)
        heavy = loaded_of(loaded, HEAVY)
        heavy_seen += [f"{name}: {lib}" for lib in heavy]
        unwanted = under(loaded, TASKS) if name in WITHOUT_TASKS else []
        if unwanted:
            unwanted_seen.append(f"{name}: {len(unwanted)} modules, {', '.join(unwanted[:3])} …")
        other = loaded_of(loaded, OTHER_HEAVY)
        note = ", ".join(heavy) or "none"
        if other:
            note += f" (also: {', '.join(other)})"
        print(
            f"{name:<16} {spread(wall[name]):<32} {median(wall[name]) / baseline:>7.1f}× "
            f"{median(cpu[name]):>6.3f} {len(loaded):>7} {len(loaded) - len(base_modules):>8}  "
            f"{note}"
        )
    for name, error in broken.items():
        print(f"{name:<16} FAILED: {error}")
    print()
    for name in ("evalpipe plan", "evalpipe render"):
        if name in broken:
            print(f"target {name} ≤ {TARGET_S} s: not measured, the command failed")
        else:
            value = median(wall[name])
            print(f"target {name} ≤ {TARGET_S} s: {value:.3f} s, {verdict(value, TARGET_S)}")
    print(
        f"target no {'/'.join(HEAVY)} imported: "
        + (f"MISSES ({'; '.join(heavy_seen)})" if heavy_seen else "meets")
    )
    print(
        f"target {' and '.join(WITHOUT_TASKS)} import no {TASKS}: "
        + (f"MISSES ({'; '.join(unwanted_seen)})" if unwanted_seen else "meets")
    )
    print(f"at end: {load_average()}")
    return 1 if broken or heavy_seen or unwanted_seen else 0


if __name__ == "__main__":
    raise SystemExit(main())
