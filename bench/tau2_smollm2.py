"""τ²-bench with a real model: `evalpipe run --tasks tau2:mock` with SmolLM2-135M-Instruct as
agent and user simulator (one engine, in-process), every episode's reward then re-scored by τ²'s
own `evaluate_simulation` from the run directory's records (==, episode by episode).

    python bench/tau2_smollm2.py                  # mock's tasks, 8 steps, 48 new tokens a step
    python bench/tau2_smollm2.py --max-steps 200  # τ²'s own step limit (hours on 2 busy cores)
    python bench/tau2_smollm2.py --quick          # tiny_random, 2 tasks, 4 steps, 8 tokens

mock is the domain whose prompts fit SmolLM2 on a CPU: its policy is ~70 tokens (airline's
1.8k, telecom's 5.8k plus tools). SmolLM2 rarely stops, so its episodes run to the step limit:
`--tau2-max-steps` and `--max-tokens` keep the run to minutes while it stays τ²'s workload.
The preset's model writes no tool-call markers, so its calls are read with vLLM's `pythonic`
parser (`[name(arg=value)]`), set on a copy of the preset (same name, so `--user-sim NAME` is
the run's own engine). Prints each episode's end, steps and reward beside τ²'s; exit 1 when
the run fails, an episode is unscored, or a reward differs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from benchlib import QUICK_PRESET, VLLM_ENV, child_env, evalpipe_run, load_average, parse_args

from evalpipe.catalog.configpath import resolve
from evalpipe.catalog.preset import load_preset
from evalpipe.records.episode import Ended
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import read_samples
from evalpipe.rundir.steps import stored_steps
from evalpipe.tasks.tau2.domain import Domain
from evalpipe.tasks.tau2.install import import_tau2
from evalpipe.tasks.tau2.scoring import simulation_run
from evalpipe.tasks.tau2.task import Tau2Task
from evalpipe.tasks.tau2.trajectory import Limits

PARSER = "pythonic"  # vLLM's parser for `[name(arg=value)]`, which needs no special tokens


def parsed_preset(name: str, folder: Path) -> Path:
    """A copy of preset `name` in `folder`, under the same name, reading tool calls with
    PARSER where the preset names no parser of its own."""
    if load_preset(name).tool_parser is not None:
        return resolve("preset", "presets", name)[1]
    path = folder / f"{name}.yaml"
    text = resolve("preset", "presets", name)[1].read_text()
    path.write_text(f"{text.rstrip()}\ntool_parser: {PARSER}\n")
    return path


@dataclass(frozen=True, kw_only=True)
class Episode:
    """One episode as evalpipe stored it and as τ² re-scores it."""

    sample_id: str
    end: str  # the termination reason (a refused step: its refusal)
    steps: int
    calls: int  # steps whose answer held parsed tool calls
    reward: float | None  # evalpipe's (None: unscored)
    tau2: float  # τ²'s evaluate_simulation on the trajectory rebuilt from the records


def rescored(out: Path, domain: str, max_steps: int, limit: int | None) -> list[Episode]:
    """Every episode of run `out` (tasks tau2:`domain`), re-scored by τ²'s evaluate_simulation
    from its stored steps."""
    import_tau2()
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    task = Tau2Task(domain=Domain.load(domain, "base"), limits=Limits(max_steps=max_steps))
    records = {r.sample_id: r for r in read_samples(RunDir(out).samples).records}
    steps = stored_steps(RunDir(out).steps)
    episodes = []
    for sample in task.samples(limit):
        record = records.get(sample.id)
        recorded = steps.get((task.name, sample.id), ())
        if record is None:
            episodes.append(Episode(sample_id=sample.id, end="(no record)", steps=len(recorded),
                                    calls=0, reward=None, tau2=float("nan")))  # fmt: skip
            continue
        end = record.refusal.reason if record.refusal else str(record.extracted[0])
        again = evaluate_simulation(
            simulation=simulation_run(task, sample, recorded, Ended(reason=end)),
            task=task.task_of(sample),
            evaluation_type=EvaluationType.ALL, solo_mode=False, domain=domain,
        )  # fmt: skip
        episodes.append(Episode(
            sample_id=sample.id, end=end, steps=len(recorded),
            calls=sum(bool(s.calls and s.calls.calls) for s in recorded),
            reward=(record.scores or {}).get("reward"), tau2=again.reward,
        ))  # fmt: skip
    return episodes


def report(episodes: list[Episode]) -> int:
    """Print each episode and the ends counted; the number of episodes unscored or differing."""
    bad = 0
    for e in episodes:
        same = e.reward is not None and e.reward == e.tau2
        bad += not same
        print(f"  {e.sample_id:45} {e.end:16} steps {e.steps:3} calls {e.calls:2} "
              f"reward {e.reward} τ² {e.tau2} {'==' if same else 'DIFFERS'}")  # fmt: skip
    ends = Counter(e.end for e in episodes)
    print(f"  ends: {', '.join(f'{k} {v}' for k, v in sorted(ends.items()))}; rewards equal to "
          f"τ²'s: {len(episodes) - bad}/{len(episodes)}")  # fmt: skip
    return bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2_135m", help="a prepared preset")
    parser.add_argument("--domain", default="mock")
    parser.add_argument("--limit", type=int, default=None, help="τ² tasks (default: all)")
    parser.add_argument("--max-steps", type=int, default=8, help="τ²'s max steps")
    parser.add_argument("--max-tokens", type=int, default=48, help="new tokens per step")
    quick = {"preset": QUICK_PRESET, "limit": 2, "max_steps": 4, "max_tokens": 8}
    args = parse_args(parser, quick)
    print(f"at start: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-tau2-") as tmp:
        folder = Path(tmp)
        preset = parsed_preset(args.preset, folder)
        t0 = time.monotonic()
        run = evalpipe_run(str(preset), f"tau2:{args.domain}", args.limit, folder / "run",
                           child_env(**VLLM_ENV), "--user-sim", args.preset,
                           "--tau2-max-steps", str(args.max_steps),
                           "--max-tokens", str(args.max_tokens))  # fmt: skip
        wall = time.monotonic() - t0
        print(f"evalpipe run --preset {args.preset} --tasks tau2:{args.domain} --user-sim "
              f"{args.preset} --tau2-max-steps {args.max_steps} --max-tokens {args.max_tokens}"
              f"{f' --limit {args.limit}' if args.limit else ''}: exit 0, wall {wall:.0f} s, "
              f"CPU {run.timing.cpu_s:.0f} s, {run.generated_tokens} tokens generated")  # fmt: skip
        bad = report(rescored(folder / "run", args.domain, args.max_steps, args.limit))
    print(f"at end: {load_average()}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
