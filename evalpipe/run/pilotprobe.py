"""A pilot's batch probe: decode steps at the full run's batch size, on the pilot's engine.

A pilot draws a sample of each task, so its engine steps hold a fraction of the sequences the
full run's will. Where a step's cost per sequence grows with the batch (the CPU engine under
other work, BENCHMARKS §26), a line through the pilot's batches does not reach the run's. So
after its samples, a pilot whose batches stayed well below the run's decodes PROBE_STEPS
tokens for as many sequences as the full run holds at once (its samples × answers, up to the
engine's sequence slots), timing each step as the run times its own, and records those
steps in the manifest beside its own, where the estimate's step fit reads them
(estimate/stepfit.py), and the seconds its prefill took per prompt token, which price the full
run's prompts (the pilot's few prompts cannot: the step fit prices decode steps alone). The
probe's prompts are the smoke probe's text cut to about 20 tokens, without the chat template:
its prefill, not its steps, had been most of its cost, and a prompt token's price hardly
depends on the prompt's length at a run's prompt lengths. Its cost, its prefill and
PROBE_STEPS steps, is recorded as the manifest's `probe` timing (kept out of the job's
overhead, estimate/history.py)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from evalpipe.engine.protocol import Engine
from evalpipe.records.prompt import Rendered
from evalpipe.records.request import Request
from evalpipe.records.sampling import SamplingSettings
from evalpipe.run.smokeprobe import probe_prompts
from evalpipe.rundir.pilotrecord import PilotRecord, Probe
from evalpipe.rundir.samplelog import SampleRecord
from evalpipe.rundir.stepprofile import StepProfile

PROBE_STEPS = 8  # decode steps timed at the run's batch
PROBE_REPEATS = 2  # the smoke probe's text twice: about 20 tokens a prompt
# Probe only where the run's batch is at least this multiple of the pilot's largest: nearer,
# the pilot's own steps already reach it.
SPREAD = 2.0


def run_batch(pilot: PilotRecord, records: Iterable[SampleRecord], slots: int) -> int:
    """The sequences the full run decodes at once: every generated answer its tasks owe (the
    pilot's answers per sample, times the task's samples), up to the engine's slots."""
    answers: dict[str, int] = {}
    for record in records:
        if record.completion_tokens and not record.option_logprobs:
            answers[record.task] = len(record.completion_tokens)
    owed = sum(pilot.tasks[task].of * n for task, n in answers.items() if task in pilot.tasks)
    return min(slots, owed)


def largest_batch(steps: StepProfile) -> float:
    """The largest batch among the pilot's decode steps (0 without any)."""
    return max((b.batch for b in steps.bins.values()), default=0.0)


def wanted(batch: int, steps: StepProfile) -> bool:
    """Whether the run's `batch` lies beyond what the pilot's own `steps` reached."""
    return batch >= SPREAD * max(1.0, largest_batch(steps))


def batch_probe(engine: Engine, batch: int) -> Probe:
    """`batch` sequences making PROBE_STEPS tokens each after their first (end of text
    ignored, so the batch stays whole), each step timed as the run times its own. The last
    PROBE_STEPS steps in which the engine reports the whole batch are its decode steps; those
    before them prefilled the prompts (their seconds over the prompts' tokens price a prompt
    token: the decoding they did beside it is counted in, a slight overstatement)."""
    settings = SamplingSettings(max_tokens=PROBE_STEPS + 1, ignore_eos=True)
    # Sent as rendered text: a chat template would more than double the probe's prefill.
    prompts = [Rendered(p) for p in probe_prompts(batch, "pilot", PROBE_REPEATS)]
    engine.add([Request(id=f"pilot-probe-{i}", prompt=prompt, sampling=settings)
                for i, prompt in enumerate(prompts)])  # fmt: skip
    steps: list[tuple[float, int]] = []
    prompt_tokens = 0
    while engine.in_flight():
        start = time.perf_counter()
        done = engine.step()
        slots = engine.slots()
        steps.append((time.perf_counter() - start, slots.busy if slots else batch))
        prompt_tokens += sum(c.generation.prompt_tokens for c in done if c.generation)
    decode = [(s, b) for s, b in steps[-PROBE_STEPS:] if b >= batch]  # the batch was whole
    profile = StepProfile()
    for seconds, busy in decode:
        profile.add(seconds, busy)
    prefill_s = sum(s for s, _ in steps[: len(steps) - len(decode)])
    return Probe(steps=profile, prompt_tokens=prompt_tokens, prefill_s=prefill_s)


def probed(
    engine: Engine, pilot: PilotRecord, records: Iterable[SampleRecord], steps: StepProfile
) -> PilotRecord:
    """`pilot` with its batch probe, where the engine tells its sequence slots and the full
    run's batch lies beyond the pilot's own `steps`; else `pilot` as it was."""
    room = engine.room()
    if room is None:  # a remote server: its batches are not this process's to time
        return pilot
    batch = run_batch(pilot, records, room.slots)
    if not wanted(batch, steps):
        return pilot
    return pilot.with_probe(batch_probe(engine, batch))
