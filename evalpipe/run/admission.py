"""The order in which the streaming loop admits a run's samples: as given, or longest first.

vLLM's scheduler serves requests in the order they arrive. When its batch is capped (by
max_num_seqs, or on a GPU by the KV cache), long completions admitted late run at the end in a
nearly empty batch. Admitting the longest predicted completions first, across all the run's
tasks (replicas take from the same queue), lets the short ones fill the batch around them.
What is generated does not change, only when (docs/runner.md: batch invariance).

Where the KV cache caps the batch, the longest sequences, started together, can need more cache
blocks than it has; vLLM then preempts some and computes them again. The manifest records
whether the engine's slots, filled with the longest predicted samples, fit its cache.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the options record imports this module at start-up: keep it light
    from evalpipe.engine.protocol import Room
    from evalpipe.estimate.lengths import LengthModel, PastLengths, Predicted
    from evalpipe.run.stream import Item

Policy = Literal["given", "longest-first"]
POLICIES: tuple[Policy, ...] = ("given", "longest-first")
# The first admitted samples the manifest lists, to show what went first.
HEAD = 10
# A prompt's tokens where no past run recorded them: characters over this (English text).
CHARS_PER_TOKEN = 4


def length_model(past: Sequence[PastLengths], preset: str, backend: str) -> LengthModel:
    """Predictions for a run of `preset` on `backend` from past runs; the fake engine's lengths
    only predict the fake engine's, and a model's only a model's."""
    from evalpipe.estimate.lengths import LengthModel

    fake = backend == "fake"
    return LengthModel([p for p in past if (p.backend == "fake") == fake], preset)


def _prompt_size(item: Item) -> int:
    prompt = item.sample.prompt
    if isinstance(prompt, str):
        return len(prompt)
    return sum(len(m.get("content", "")) for m in prompt)


def _longest_need(
    order: Sequence[int],
    items: Sequence[Item],
    predicted: Sequence[Predicted],
    model: LengthModel,
    room: Room,
) -> int:
    """KV cache tokens, in whole blocks, that the first samples of `order` need at their
    predicted final lengths (at most max_tokens) when they fill the engine's slots (each of a
    sample's n sequences holds its prompt and its completion; a ranked sample reads its prompt
    only)."""
    need, slots = 0, room.slots
    for k in order:
        if slots <= 0:
            break
        item = items[k]
        prompt = model.prompt_tokens(item.task.name, item.sample.id)
        if prompt is None:
            prompt = math.ceil(_prompt_size(item) / CHARS_PER_TOKEN)
        ranked = bool(item.sample.options)
        seqs = min(slots, 1 if ranked else item.task.sampling.n)
        completion = min(predicted[k].tokens, item.task.sampling.max_tokens)  # where it stops
        tokens = prompt + (0 if ranked else max(1, round(completion)))
        need += seqs * math.ceil(tokens / room.block) * room.block
        slots -= seqs
    return need


def admission_order(
    items: Sequence[Item],
    model: LengthModel,
    policy: Policy | None,
    *,
    deterministic: bool,
    room: Room | None = None,
) -> tuple[list[Item], dict[str, Any]]:
    """`items` in admission order, and the manifest's record of it.

    `policy` None: longest first where past runs predict some of the lengths, as given
    otherwise, and as given in a deterministic run (its order must not depend on what the
    results folder holds). Longest first sorts by predicted length, then prompt length, both
    descending; ties keep the given order. With the engine's `room`, a longest-first record
    says whether its slots, filled with the longest predicted samples, fit its KV cache."""
    from evalpipe.estimate.lengths import BASES

    predicted = [model.predict(i.task.name, i.sample.id, i.task.sampling.max_tokens) for i in items]
    counts = {basis: sum(p.basis == basis for p in predicted) for basis in BASES}
    if policy is None:
        informed = counts["sample"] + counts["task"] > 0
        chosen: Policy = "longest-first" if informed and not deterministic else "given"
    else:
        chosen = policy
    order = list(range(len(items)))
    cache = None
    if chosen == "longest-first":
        order.sort(key=lambda k: (-predicted[k].tokens, -_prompt_size(items[k]), k))
        if room is not None:
            need = _longest_need(order, items, predicted, model, room)
            cache = {
                "slots": room.slots,
                "kv_tokens": room.kv_tokens,
                "block": room.block,
                "longest_need_tokens": need,
                "fits": need <= room.kv_tokens,
            }
    record = {
        "policy": chosen,
        "requested": policy or "auto",
        "predicted_by": counts,
        "sources": list(model.sources),
        "cache": cache,
        "head": [
            {
                "task": items[k].task.name,
                "sample_id": items[k].sample.id,
                "predicted_tokens": round(predicted[k].tokens, 1),
            }
            for k in order[:HEAD]
        ],
    }
    return [items[k] for k in order], record
