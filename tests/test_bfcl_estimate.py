"""`plan --estimate` prices BFCL from the entries' real lengths: single-turn prompts as the
tokenizer counts them, and multi-turn entries as requests whose prompts grow with the history
(each step a request; the steps per turn an assumption, docs/bfcl.md "Estimate")."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.taskrefs import expand_refs
from evalpipe.estimate.workmodel import task_work, token_counter
from evalpipe.records.prompt import Prompt
from evalpipe.tasks.bfcl.episode_requests import RESULT_BYTES, entry_requests, episode_requests
from evalpipe.tasks.bfcl.kind import KIND
from evalpipe.tasks.kindbase import LoadOptions


def test_an_entrys_requests_carry_its_history_two_per_turn_with_calls() -> None:
    system = {"role": "system", "content": "functions"}
    entry = {"turns": [[system, {"role": "user", "content": "a"}], [], [{"role": "user",
             "content": "c"}]], "ground_truth": [["f(x=1)", "g()"], [], ["h()"]]}  # fmt: skip
    requests = entry_requests(entry)
    assert len(requests) == 2 + 1 + 2
    for before, after in itertools.pairwise(requests):
        assert after[: len(before)] == before  # each holds everything before it
    result = {"role": "tool", "content": requests[1][3]["content"]}
    assert requests[1][2:] == [{"role": "assistant", "content": "[f(x=1), g()]"}, result, result]
    assert len(requests[1][3]["content"].encode()) == RESULT_BYTES
    assert requests[3][-1] == {"role": "user", "content": "c"}


def test_multi_turn_requests_are_priced_with_their_growing_history() -> None:
    preset = load_preset("tiny_random")
    counter = token_counter(preset)
    assert counter is not None
    (task,) = KIND.load(expand_refs(["bfcl:multi_turn_base"]), LoadOptions()).tasks
    entries = task.entries[:2]
    steps = [len(e["turns"]) + sum(1 for c in e["ground_truth"] if c) for e in entries]
    work = task_work(task, preset, limit=2, history=[], counter=counter)
    assert work.samples == sum(steps)  # every step a request, not one per entry
    tokens = [counter.count(p, preset.chat) for p in episode_requests(entries)]
    assert work.prompt_tokens.mid == sum(tokens) / len(tokens)
    # Above what pricing each step at its entry's first turn gives: the history grows.
    first = [counter.count(e["turns"][0], preset.chat) for e in entries]
    assert work.prompt_tokens.mid > sum(f * n for f, n in zip(first, steps, strict=True)) / sum(
        steps
    )
    assert "each step of its episodes a request" in work.sources[0]


def test_single_turn_prompts_are_priced_from_the_entries_as_tokenised() -> None:
    preset = load_preset("tiny_random")
    counter = token_counter(preset)
    assert counter is not None
    (task,) = KIND.load(expand_refs(["bfcl:live_parallel"]), LoadOptions()).tasks
    work = task_work(task, preset, limit=None, history=[], counter=counter)
    prompts: Sequence[Prompt] = [s.prompt for s in task.samples()]
    assert work.samples == len(prompts) == 16
    assert work.prompt_tokens.mid == sum(counter.count(p, preset.chat) for p in prompts) / 16
