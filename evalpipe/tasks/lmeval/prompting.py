"""The model's chat template as lm-eval's vLLM backend applies it (`--apply_chat_template`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# lm-eval's chat_template argument: (history, add_generation_prompt=True) -> the prompt text.
ChatTemplate = Callable[..., str]


def chat_template(tokenizer: Any, template_kwargs: Mapping[str, Any] | None = None) -> ChatTemplate:
    """lm-eval's `apply_chat_template(history, add_generation_prompt)` for `tokenizer`: the
    template as text; a template that refuses a system turn gets the history without it."""
    import jinja2

    # lm-eval always passes enable_thinking (None unless asked), which some templates test.
    extra = {"enable_thinking": None} | dict(template_kwargs or {})

    def apply(history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        def render(turns: list[dict[str, str]]) -> str:
            return tokenizer.apply_chat_template(
                turns,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=not add_generation_prompt,
                **extra,
            )

        try:
            return render(history)
        except jinja2.exceptions.TemplateError:
            return render([turn for turn in history if turn["role"] != "system"])

    return apply


def load_chat_template(
    model: str, template_kwargs: Mapping[str, Any] | None = None
) -> ChatTemplate:
    """The chat template of the model at `model` (a folder or a cached hub id)."""
    from transformers import AutoTokenizer

    return chat_template(AutoTokenizer.from_pretrained(model), template_kwargs)
