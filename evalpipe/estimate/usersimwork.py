"""The user simulator's share of an agent run's cost (pure, given the work and the estimates).

An agent task plans its episodes' requests once, each answered by the model (the agent) or the
user simulator (tasks/tau2/requests.py): the agent's are the model's work (workmodel.py), the
user's are this share, so no step is counted twice. Its prompts (the user's instructions and
the conversation so far) are counted with the user simulator's tokenizer; a user turn is
predicted at the user simulator's max_tokens (an upper bound, as a judgment is).

Where it runs decides what it costs (planning/usersimplacement.py): in the model's engine its
requests join the model's work; side by side its turns interleave with the agent's on engines
of their own, so the wall is the longer of the two; behind a server it costs the job nothing
this estimate can see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from evalpipe.catalog.preset import Preset
from evalpipe.core.span import Span, fmt_span
from evalpipe.core.textable import format_table
from evalpipe.estimate.cost import Estimate
from evalpipe.estimate.workmodel import (
    TOKENISED_SAMPLES,
    MakesRequests,
    TaskWork,
    TokenCounter,
    counted_how,
    helper_work,
    prompt_counter,
)
from evalpipe.records.prompt import Prompt

# A user turn's budget when nothing says otherwise: τ²'s simulated users write a sentence or two;
# an upper bound, as the judge's max_tokens is.
USER_TURN_TOKENS = 256


@runtime_checkable
class SimulatesUser(MakesRequests, Protocol):
    """An agent task whose episodes' planned requests are the agent's (request_prompts) and a
    simulated user's."""

    name: str

    def user_request_prompts(self, limit: int | None) -> list[Prompt]:
        """The user's requests of the episodes request_prompts plans, in the same order."""
        ...


def user_sim_work(
    task: SimulatesUser,
    agent: TaskWork,
    user_sim: Preset,
    *,
    limit: int | None,
    counter: TokenCounter | None,
    max_tokens: int = USER_TURN_TOKENS,
) -> TaskWork:
    """The user simulator's requests for one agent task whose agent steps `agent` predicts:
    as many per agent step as the task's planned episodes have, each prompt counted for
    `user_sim` (the preset that answers them)."""
    prompts = task.user_request_prompts(limit)
    per_step = len(prompts) / max(1, len(task.request_prompts(limit)))
    chosen = prompts[:: max(1, len(prompts) // TOKENISED_SAMPLES)]
    count = prompt_counter(user_sim, counter)
    mean = sum(map(count, chosen)) / max(1, len(chosen))
    source = (
        f"{per_step:.2g} user turn(s) per agent step, as the task plans its episodes; each "
        f"prompt the conversation so far, {counted_how(counter)}"
    )
    requests = round(agent.samples * per_step)
    return helper_work(agent, requests, Span.exact(mean), max_tokens, helper="user turn",
                       source=source)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class UserSimEstimate:
    """The user simulator's work and the run's wall with it, where it runs (`placement`): in
    the model's engine both works on one engine, side by side the longer of the two; `share`
    None: behind a server, not estimated."""

    placement: str
    generation: Estimate  # the model's own work, as placed
    share: Estimate | None  # the user simulator's work (in the model's engine, or its own)
    wall_s: Span  # the run's, the user simulator's share included

    def to_dict(self) -> dict[str, Any]:
        return {
            "placement": self.placement,
            "user_sim": None if self.share is None else self.share.to_dict(),
            "wall_s": self.wall_s.to_dict(1),
        }

    def describe(self) -> str:
        """The user simulator's table and the wall with it (`plan --estimate`)."""
        if self.share is None:
            return (
                "user simulator: behind a server; its share of the work is not estimated "
                f"(run wall without it: {fmt_span(self.wall_s)})\n"
            )
        s = self.share
        rows = [
            ("user turns", fmt_span(s.generate_s)),
            ("generation (agent steps)", fmt_span(self.generation.wall_s)),
            (f"total, user simulator {self.placement}", fmt_span(self.wall_s)),
        ]
        work = format_table(
            ("agent task", "user turns", "prompt tok", "turn tok", "source"),
            [
                (t.task, t.samples, f"{t.prompt_tokens.mid:.0f}",
                 f"{t.generated_tokens.mid:.0f}", "; ".join(t.sources))
                for t in s.tasks
            ],
        )  # fmt: skip
        lines = [
            f"user simulator: {s.preset} on {s.gpu}, TP={s.tensor_parallel_size} × "
            f"PP={s.pipeline_parallel_size} ({self.placement})",
            format_table(("figure", "expected (low - high)"), rows),
            work,
        ]
        return "\n".join(lines) + "\n"
