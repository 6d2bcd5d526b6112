"""The τ² kind: `--tasks tau2` (airline, retail and telecom, each on its default split) or
`tau2:DOMAIN[@SPLIT],...`, one task per domain, `--tau2-trials` episodes per τ² task of at most
`--tau2-max-steps` steps; a completed run keeps each domain's average reward and pass^k, and
the overall, as its results document (results.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.catalog.budgets import Ask
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import TAU2_DEFAULT, TAU2_DOMAINS, TAU2_SPLIT_MARK, TaskRef
from evalpipe.core.errors import ConfigError
from evalpipe.tasks.base import Task
from evalpipe.tasks.kindbase import FinishedScores, Loaded, LoadOptions, TaskKind
from evalpipe.tasks.tau2.domain import Domain
from evalpipe.tasks.tau2.install import tau2_dir
from evalpipe.tasks.tau2.results import results_document
from evalpipe.tasks.tau2.task import PREFIX, Tau2Task
from evalpipe.tasks.tau2.trajectory import Limits

DEFAULT_SPLIT = "base"
# Backends whose engine reads the agent's calls with the preset's tool_parser.
PARSED_HERE = ("vllm",)


def chosen(named: Sequence[str]) -> dict[str, str]:
    """Domain → split the references name (`tau2` alone: the default three); ConfigError for
    one domain named with two splits (results are keyed by domain)."""
    out: dict[str, str] = {}
    for name in named:
        pairs = [(d, DEFAULT_SPLIT) for d in TAU2_DEFAULT] if name == "tau2" else [
            tuple(name.split(TAU2_SPLIT_MARK, 1)) if TAU2_SPLIT_MARK in name
            else (name, DEFAULT_SPLIT)]  # fmt: skip
        for domain, split in pairs:
            if out.get(domain, split) != split:
                raise ConfigError(
                    f"--tasks names τ² domain {domain!r} with two splits ({out[domain]} and "
                    f"{split}); a run keys results by domain, so run them apart."
                )
            out[domain] = split
    return {d: out[d] for d in TAU2_DOMAINS if d in out}


class Tau2Kind(TaskKind):
    name = "tau2"

    def load(
        self, refs: Sequence[tuple[TaskRef, SuiteEntry | None]], options: LoadOptions
    ) -> Loaded:
        tau2_dir()  # missing: one message naming the install, before anything loads
        preset = options.preset
        if preset is not None and preset.tool_parser is None and options.backend in PARSED_HERE:
            raise ConfigError(
                f"Preset {preset.name!r} names no tool_parser, and τ²'s agent acts through "
                "tool calls, which the engine reads with it: set tool_parser to the vLLM "
                "tool-call parser its model card documents (e.g. hermes)."
            )
        domains = chosen([ref.name for ref, _ in refs])
        steps = options.tau2_max_steps
        limits = Limits() if steps is None else Limits(max_steps=steps)
        return Loaded(tasks=tuple(
            Tau2Task(domain=Domain.load(d, split), trials=options.tau2_trials, limits=limits)
            for d, split in domains.items()
        ))  # fmt: skip

    def ask(self, task: Task) -> Ask:
        # The prompt every agent step carries (policy and tools); the history each step adds
        # is left to the context check of each request (an overflow ends its episode only).
        assert isinstance(task, Tau2Task)  # this kind loads only these
        domain = task.domain
        fixed = len(domain.agent_system.encode()) + len(str(domain.agent_tools).encode())
        return Ask(name=task.name, max_tokens=task.sampling.max_tokens, prompt_bytes=fixed,
                   simulated_user=True)  # fmt: skip

    def notes(self, tasks: Sequence[Task]) -> list[str]:
        return [PUBLISHED_NOTE] if any(isinstance(t, Tau2Task) for t in tasks) else []

    def results(self, tasks: Sequence[Task], scores: FinishedScores) -> dict[str, Any] | None:
        names = [t.name for t in tasks if isinstance(t, Tau2Task)]
        return results_document(names, scores) if names else None

    def merged_results(
        self, shards: Mapping[Path, Mapping[str, Any]], scores: FinishedScores
    ) -> dict[str, Any] | None:
        names = {PREFIX + d for doc in shards.values() for d in doc.get("domains", {})}
        return results_document(sorted(names), scores) if names else None


# τ²'s leaderboard runs its user simulator on gpt-4.1 (tau2/config.py DEFAULT_LLM_USER).
PUBLISHED_USER_SIM = "gpt-4.1"
PUBLISHED_NOTE = (
    f"τ²-bench's published scores use {PUBLISHED_USER_SIM} as the user simulator: unless this "
    "run's is that model, its τ² scores are not comparable to them."
)

KIND = Tau2Kind()
