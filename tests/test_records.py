"""The request/response records below the engine: each checks its own values when built."""

from __future__ import annotations

import pytest

from evalpipe.core.errors import ConfigError
from evalpipe.records.prompt import messages
from evalpipe.records.request import Request
from evalpipe.records.sampling import SamplingSettings


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"max_tokens": 0}, "sampling.max_tokens must be a positive integer, got 0"),
        ({"n": 0}, "sampling.n must be a positive integer, got 0"),
        ({"stop": ("",)}, "sampling.stop must be a list of non-empty strings"),
        ({"temperature": -0.1}, "sampling.temperature must be >= 0, got -0.1"),
        ({"top_p": 0.0}, r"sampling.top_p must be in \(0, 1\], got 0.0"),
        ({"top_k": -2}, r"sampling.top_k must be 0 \(off\) or a positive integer, got -2"),
        ({"min_p": 1.5}, r"sampling.min_p must be in \[0, 1\] \(0: off\), got 1.5"),
    ],
)
def test_sampling_settings_refuse_a_value_out_of_bounds_naming_it(
    fields: dict[str, object], expected: str
) -> None:
    with pytest.raises(ValueError, match=expected):
        SamplingSettings(**fields)  # type: ignore[arg-type]


def test_sampling_settings_leave_the_task_s_rules_to_the_task() -> None:
    # lm-eval asks for repeats at temperature 0; vLLM's top_k -1 means all tokens.
    assert SamplingSettings(n=4, top_k=-1).n == 4


def test_a_plain_prompt_is_one_user_message_and_chat_messages_stay() -> None:
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert messages("Hi") == [{"role": "user", "content": "Hi"}]
    assert messages(chat) == chat and messages(chat) is not chat


def test_a_request_generates_or_scores_never_both() -> None:
    with pytest.raises(ConfigError, match=r"either generate .* or score continuations"):
        Request(id="r", prompt="q", sampling=SamplingSettings(), continuations=(" A",))
    with pytest.raises(ConfigError, match="top_logprobs=2 must be 0 to 20"):
        Request(id="r", prompt="q", continuations=(" A",), top_logprobs=2)
