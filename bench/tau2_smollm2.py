"""τ²-bench with a real model: SmolLM2-135M as both agent and user on the mock domain (its
policy is ~70 tokens; the others' do not fit SmolLM2's practical context on CPUs), through
evalpipe's runner on vLLM, each episode's reward then re-scored by τ²'s own
evaluate_simulation from the stored records (==).

    python bench/tau2_smollm2.py                 # mock's tasks, τ²'s limits
    python bench/tau2_smollm2.py --quick         # 3 tasks, 24 steps, 64 new tokens a step

SmolLM2's tokenizer has no hermes markers, so the agent's calls are read with vLLM's
`pythonic` parser (`[name(arg=value)]`), set on a copy of the smollm2_135m preset.
Exit 1 on any reward that differs.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import benchlib  # noqa: F401 (this checkout and tests/ on the import path)

from evalpipe.catalog import weights
from evalpipe.catalog.preset import load_preset
from evalpipe.engine.factory import open_engine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.episode import Ended
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import read_samples
from evalpipe.rundir.steps import stored_steps
from evalpipe.tasks.tau2.domain import Domain
from evalpipe.tasks.tau2.scoring import simulation_run
from evalpipe.tasks.tau2.task import SAMPLING, Tau2Task
from evalpipe.tasks.tau2.trajectory import Limits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    weights.prepare("smollm2_135m")
    preset = dataclasses.replace(load_preset("smollm2_135m"), tool_parser="pythonic")
    domain = Domain.load("mock", "base")
    limits, sampling = Limits(), SAMPLING
    if args.quick:
        domain.tasks = domain.tasks[:3]
        limits = Limits(max_steps=24)
        sampling = dataclasses.replace(SAMPLING, max_tokens=64)
    task = Tau2Task(domain=domain, limits=limits, sampling=sampling)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        t0 = time.monotonic()
        result = run_evaluation(
            lambda settings: open_engine("vllm", preset, settings), [task], out, preset=preset,
            options=RunOptions(backend="vllm", engine=EngineSettings(max_model_len=2048)),
        )  # fmt: skip
        wall = time.monotonic() - t0
        from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

        records = {r.sample_id: r for r in read_samples(RunDir(out).samples).records}
        steps = stored_steps(RunDir(out).steps)
        differ = 0
        print(f"{result.status}: {len(records)} episodes in {wall:.0f} s")
        for sample in task.samples():
            record = records[sample.id]
            recorded = steps.get((task.name, sample.id), ())
            reason = record.refusal.reason if record.refusal else str(record.extracted[0])
            again = evaluate_simulation(
                simulation=simulation_run(task, sample, recorded, Ended(reason=reason)),
                task=task.task_of(sample), evaluation_type=EvaluationType.ALL,
                solo_mode=False, domain="mock",
            )  # fmt: skip
            same = record.scores["reward"] == again.reward
            differ += not same
            calls = sum(bool(s.calls and s.calls.calls) for s in recorded)
            print(f"{sample.id:45} {reason:16} steps {len(recorded):3} calls {calls:2} "
                  f"reward {record.scores['reward']} τ² {again.reward} "
                  f"{'==' if same else 'DIFFERENT'}")  # fmt: skip
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
