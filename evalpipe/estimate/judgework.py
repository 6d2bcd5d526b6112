"""The judging phase's cost and each placement's wall (pure, given the work and the estimates).

A judge's prompt is its template around the question (and references) plus the answers it
quotes: the asks are built by the task's own grading with a marker for each answer, so the
template's tokens are counted with the judge's tokenizer and every quoted answer costs the
model's predicted answer length. A judgment is predicted at the judge's max_tokens (an upper
bound, as for any task without past runs).

After generation the phases add up, the judge's start-up included. Side by side the judge
starts with the generation and judges each answer as it is written: the wall is the longer of
the two phases, plus the judging of the last answer once generation ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from evalpipe.catalog.preset import Preset
from evalpipe.core.span import Span, fmt_span
from evalpipe.core.textable import format_table
from evalpipe.estimate.cost import Estimate, generate_s
from evalpipe.estimate.throughput import Rates
from evalpipe.estimate.workmodel import (
    TOKENISED_SAMPLES,
    TaskWork,
    TokenCounter,
    counted_how,
    helper_work,
    prompt_counter,
)
from evalpipe.records.prompt import messages
from evalpipe.tasks.base import Task
from evalpipe.tasks.gradings import Grading

# Stands for an answer in a judge's prompt while its template is measured.
_ANSWER = "\x00answer\x00"


def turns_work(task: Task, work: TaskWork, limit: int | None) -> TaskWork:
    """A multi-turn task's generation: a sample of k turns is k requests, turn i's prompt
    holding the earlier questions and answers (each question counted as long as the first)."""
    samples = task.samples(limit)
    turns = sum(1 + len(s.turns) for s in samples) / max(1, len(samples))
    if turns == 1:
        return work
    history = work.prompt_tokens.scale((turns + 1) / 2) + work.generated_tokens.scale(
        (turns - 1) / 2
    )
    return replace(
        work,
        samples=round(work.samples * turns),
        prompt_tokens=history,
        sources=(
            *work.sources,
            f"{turns:.2g} turns per sample, each turn a request with its history",
        ),
    )


def judge_work(
    task: Task,
    grading: Grading,
    answers: TaskWork,
    judge: Preset,
    *,
    limit: int | None,
    max_tokens: int,
    counter: TokenCounter | None,
) -> TaskWork:
    """The judge's work for one judged task whose answers `answers` predicts."""
    samples = task.samples(limit)
    chosen = samples[:: max(1, len(samples) // TOKENISED_SAMPLES)]
    count = prompt_counter(judge, counter)
    asks = quoted = 0
    template = 0.0
    for sample in chosen:
        for ask in grading.asks(sample, [_ANSWER] * (1 + len(sample.turns))):
            texts = [m["content"] for m in messages(ask.prompt)]
            quoted += sum(t.count(_ANSWER) for t in texts)
            bare = [{**m, "content": m["content"].replace(_ANSWER, "")} for m in ask.prompt]
            template += count(bare)
            asks += 1
    per_ask = max(1, asks) / max(1, len(chosen))
    prompt = Span.exact(template / max(1, asks)) + answers.generated_tokens.scale(
        quoted / max(1, asks)
    )
    source = (
        f"judge prompts: the grading's template {counted_how(counter)} + "
        f"{quoted / max(1, asks):.2g} quoted answer(s) of the predicted length"
    )
    requests = round(len(samples) * per_ask)
    return helper_work(answers, requests, prompt, max_tokens, helper="judge", source=source)


@dataclass(frozen=True, kw_only=True)
class PhasesEstimate:
    """A judged run's two phases and the wall of each placement (None: side by side does not
    fit), with the planner's choice."""

    generation: Estimate
    judging: Estimate
    after_s: Span
    side_by_side_s: Span | None
    placement: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "judging": self.judging.to_dict(),
            "walls_s": {
                "after": self.after_s.to_dict(1),
                "side-by-side": None
                if self.side_by_side_s is None
                else self.side_by_side_s.to_dict(1),
            },
            "placement": self.placement,
            "reason": self.reason,
        }

    def describe(self) -> str:
        """The judging phase's table and both placements' walls (`plan --estimate`)."""
        j = self.judging
        side = "does not fit" if self.side_by_side_s is None else fmt_span(self.side_by_side_s)
        rows = [
            ("judge load (import, weights, engine)", fmt_span(j.load_s)),
            ("judging", fmt_span(j.generate_s)),
            ("judging phase wall", fmt_span(j.wall_s)),
            ("generation phase wall", fmt_span(self.generation.wall_s)),
            ("total, judge after generation", fmt_span(self.after_s)),
            ("total, judge side by side", side),
        ]
        work = format_table(
            ("judged task", "judgments", "prompt tok", "judgment tok", "source"),
            [
                (
                    t.task,
                    t.samples,
                    f"{t.prompt_tokens.mid:.0f}",
                    f"{t.generated_tokens.mid:.0f}",
                    "; ".join(t.sources),
                )
                for t in j.tasks
            ],
        )
        lines = [
            f"judging: {j.preset} on {j.gpu}, TP={j.tensor_parallel_size} × "
            f"PP={j.pipeline_parallel_size}",
            f"basis: {j.basis}",
            format_table(("figure", "expected (low - high)"), rows),
            work,
            f"placement: {self.placement}: {self.reason}",
        ]
        return "\n".join(lines) + "\n"


def last_answer_s(rates: Rates, tasks: Sequence[TaskWork], factor: Span) -> Span:
    """Judging one answer alone: what is left to judge once the generation beside it ends."""
    one = [t for t in tasks if t.samples][:1]
    if not one:
        return Span.exact(0.0)
    single = [replace(one[0], samples=1)]
    ends = [
        generate_s(rates, single, 1, end) * getattr(factor, end) for end in ("low", "mid", "high")
    ]
    return Span(min(ends), sorted(ends)[1], max(ends))


def placement_walls(
    generation: Estimate, beside: Estimate | None, judging: Estimate, last: Span
) -> tuple[Span, Span | None]:
    """(the wall with the judge after generation, the wall side by side or None): `beside` is
    the generation as it runs side by side (maybe with fewer replicas), None when it cannot."""
    after = generation.wall_s + judging.wall_s
    if beside is None:
        return after, None
    return after, beside.wall_s.combine(judging.wall_s, max) + last
