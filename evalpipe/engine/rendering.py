"""Turn a task's prompt into what a model receives: its chat template or plain text, as tokens.

The one place prompts are rendered, so the in-process engine's generation and option scoring
(and any engine that renders on the client) see the same text."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from evalpipe.core.errors import ConfigError
from evalpipe.records.prompt import Prompt, Rendered, messages


def render(
    tokenizer: Any,
    prompt: Prompt,
    *,
    chat: bool,
    preset: str,
    template_kwargs: Mapping[str, Any] | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
) -> tuple[str, list[int]]:
    """The text the model continues and its token ids (`tools`: the OpenAI function tools the
    chat template shows the model, as `apply_chat_template(tools=…)`; a template that ignores
    tools renders without them).

    A chat model gets its chat template with the generation prompt (special tokens as the
    template writes them, so none are added when tokenising), as `LLM.chat` renders it; a plain
    model gets the prompt with the tokenizer's own special tokens (BOS), as `LLM.generate`. A
    `Rendered` prompt is sent as it is, whatever the model (see `rendered_ids`)."""
    if isinstance(prompt, Rendered):
        return str(prompt), rendered_ids(tokenizer, prompt)
    if chat:
        text = tokenizer.apply_chat_template(
            template_messages(messages(prompt)),
            tools=list(tools) or None,
            add_generation_prompt=True,
            tokenize=False,
            **(template_kwargs or {}),
        )
    else:
        text = plain_text(prompt, preset=preset)
    return text, list(tokenizer.encode(text, add_special_tokens=not chat))


def template_messages(chat: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as vLLM's chat path hands them to the template (`LLM.chat` and `vllm
    serve`: renderers/chat_utils.py, parse_chat_messages): a missing content is empty text, and
    a tool call's JSON arguments string is an object, as templates read it (`arguments |
    tojson`); arguments that are not a JSON object become {}, and an empty call list is dropped.
    Episodes keep calls in OpenAI's form (arguments as a string), which endpoints are sent."""
    out = []
    for message in chat:
        message = {**message, "content": message.get("content") or ""}
        calls = message.get("tool_calls")
        if message["role"] == "assistant" and isinstance(calls, list):
            if calls:
                message["tool_calls"] = [_object_arguments(call) for call in calls]
            else:
                del message["tool_calls"]
        out.append(message)
    return out


def _object_arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    function = dict(call["function"])
    arguments = function.get("arguments")
    if isinstance(arguments, str) and arguments:
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            arguments = None
    function["arguments"] = arguments if isinstance(arguments, dict) else {}
    return {**call, "function": function}


def plain_text(prompt: Prompt, *, preset: str) -> str:
    """A plain (non-chat) model's prompt: text only."""
    if not isinstance(prompt, str):
        raise ConfigError(
            f"Preset {preset!r} is not a chat model (chat: false) but was given chat messages; "
            "give it plain-text prompts or set chat: true."
        )
    return prompt


def encode_options(
    tokenizer: Any,
    prompt: Prompt,
    continuations: Sequence[str],
    *,
    chat: bool,
    preset: str,
    template_kwargs: Mapping[str, Any] | None = None,
) -> list[tuple[list[int], int]]:
    """Each continuation after the prompt rendered once: (token ids, where it starts)."""
    if isinstance(prompt, Rendered):
        return rendered_pairs(tokenizer, prompt, continuations)
    context = render(tokenizer, prompt, chat=chat, preset=preset, template_kwargs=template_kwargs)
    return [
        encode_continuation(tokenizer, prompt, c, chat=chat, preset=preset, context=context)
        for c in continuations
    ]


def encode_continuation(
    tokenizer: Any,
    prompt: Prompt,
    continuation: str,
    *,
    chat: bool,
    preset: str,
    context: tuple[str, list[int]],
) -> tuple[list[int], int]:
    """Token ids of the rendered prompt (`context`, from `render`) + continuation, and where
    the continuation starts: past the longest common prefix with the prompt alone, so a merge
    across the boundary (":" + " A") counts as continuation. A chat model's continuation
    starts its reply, so its leading whitespace is dropped."""
    text, before = context
    if chat:
        continuation = continuation.lstrip()
    ids = list(tokenizer.encode(text + continuation, add_special_tokens=not chat))
    start = next(
        (i for i, (a, b) in enumerate(zip(before, ids, strict=False)) if a != b),
        min(len(before), len(ids)),
    )
    if start == 0 or start >= len(ids):
        raise ConfigError(
            f"Cannot score continuation {continuation!r} after prompt {str(prompt)[:60]!r} "
            f"for preset {preset!r}: it needs a non-empty prompt and must add at least one "
            "token to it; give options non-empty text."
        )
    return ids, start


# --- already-rendered prompts: lm-eval's vLLM backend's tokenisation -------------------------


def prefix_token(tokenizer: Any) -> int:
    """The token an empty context stands for: BOS, or EOS where the model has no BOS."""
    bos = tokenizer.bos_token_id
    return int(bos if bos is not None else tokenizer.eos_token_id)


def rendered_ids(tokenizer: Any, text: str, *, special: bool = True) -> list[int]:
    """`text` as token ids with the tokenizer's special tokens, unless it already starts with
    the BOS text (a chat template wrote it) or `special` is False: no second BOS."""
    if not text:
        return []
    if special:
        special = not text.startswith(tokenizer.decode(prefix_token(tokenizer)))
    return list(tokenizer(text, add_special_tokens=special).input_ids)


def rendered_pairs(
    tokenizer: Any, context: str, continuations: Sequence[str]
) -> list[tuple[list[int], int]]:
    """Token ids of context + each continuation and where the continuation starts, split as
    lm-eval splits them: the context's trailing whitespace moves to the continuation, the whole
    is tokenised once and cut after as many tokens as the context alone has (tokenised once for
    all continuations); an empty context is the prefix token."""
    spaces = len(context) - len(context.rstrip())
    context, moved = context[: len(context) - spaces], context[len(context) - spaces :]
    if context:
        start = len(rendered_ids(tokenizer, context))
        pairs = [(rendered_ids(tokenizer, context + moved + c), start) for c in continuations]
    else:
        pairs = [(_after_prefix(tokenizer, moved + c), 1) for c in continuations]
    for (ids, start), continuation in zip(pairs, continuations, strict=True):
        if start >= len(ids):
            raise ConfigError(
                f"Cannot score continuation {moved + continuation!r} after context "
                f"{context[-60:]!r}: it adds no token to the context; the task must give "
                "non-empty continuations."
            )
    return pairs


def _after_prefix(tokenizer: Any, text: str) -> list[int]:
    """`text` after the prefix token, as lm-eval scores a continuation of an empty context."""
    ids, prefix = rendered_ids(tokenizer, text, special=False), prefix_token(tokenizer)
    return ids if ids and ids[0] == prefix else [prefix, *ids]
