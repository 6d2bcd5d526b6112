"""lm-eval's task catalogue on evalpipe's runner: `--tasks lm_eval:NAME` (a task or group of
EleutherAI lm-eval), `lm_eval:PATH.yaml` (a task file of one's own) or `lm_eval:FOLDER` (searched
for the names beside it, as lm-eval's --include_path).

lm-eval builds the requests and scores the responses; evalpipe streams, checkpoints, shards and
submits them. lm_eval is imported only when an `lm_eval:` task is loaded (the evalpipe[lmeval]
extra); nothing else in evalpipe imports it.
"""

from __future__ import annotations

from collections.abc import Sequence

from evalpipe.catalog.preset import Preset
from evalpipe.catalog.weights import find_model
from evalpipe.tasks.lmeval.loader import load, split_specs
from evalpipe.tasks.lmeval.task import LmEvalTask, Prompting

__all__ = [
    "LmEvalTask",
    "Prompting",
    "lm_eval_prompting",
    "load_lmeval_tasks",
]


def load_lmeval_tasks(
    specs: Sequence[str],
    *,
    prompting: Prompting | None = None,
    reasoning_parser: str | None = None,
    allow_unsafe_code: bool = False,
) -> list[LmEvalTask]:
    """The leaf tasks `specs` name (what `lm_eval:` references give after their prefix; groups
    expand to their tasks), in lm-eval's order, each knowing the groups it belongs to for the
    results record.
    `reasoning_parser` (a reasoning preset's) keeps reasoning out of what lm-eval scores.
    A task marked unsafe_code is refused unless `allow_unsafe_code`; then it is scored in the
    sandbox."""
    wanted, folders = split_specs(specs)
    loaded = load(wanted, folders, allow_unsafe_code=allow_unsafe_code)
    made = {"prompting": prompting or Prompting(), "groups": loaded.get("groups", {}),
            "reasoning_parser": reasoning_parser}  # fmt: skip
    return [LmEvalTask(task, **made) for task in loaded["tasks"].values()]


def lm_eval_prompting(preset: Preset, backend: str) -> Prompting:
    """How lm-eval renders prompts for `preset`: a chat model's with its chat template and
    few-shot examples as turns (`lm_eval --apply_chat_template --fewshot_as_multiturn`), a
    plain model's as plain text. The fake engine renders no template, so it gets plain text."""
    model = find_model(preset) if preset.chat and backend != "fake" else None
    return Prompting(chat_model=model, template_kwargs=dict(preset.chat_template_kwargs))
