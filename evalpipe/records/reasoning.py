"""How a completion's text marks a reasoning model's reasoning, per reasoning parser (the
preset's `reasoning_parser`): the markers evalpipe/tasks/reasoning.py splits on, and the text a
server that separated the reasoning itself (vLLM's `--reasoning-parser`: the message's
`reasoning`, or `reasoning_content` in older servers) is joined back into, so the completion
reads as the model wrote it and is split by the same rules as an in-process one."""

from __future__ import annotations

THINK_START, THINK_END = "<think>", "</think>"
HARMONY_FINAL = "<|channel|>final<|message|>"
HARMONY_ANALYSIS = "<|channel|>analysis<|message|>"
HARMONY_ENDS = ("<|return|>", "<|end|>", "<|call|>")
# Between gpt-oss's analysis and its final message.
HARMONY_NEXT = "<|end|><|start|>assistant"


def joined(reasoning: str | None, answer: str | None, parser: str | None) -> str:
    """The completion a server split into `reasoning` and `answer`, as the model wrote it for
    `parser` (`answer` None: it stopped inside its reasoning, which is left open); without a
    parser (or reasoning) the answer alone, which is what is scored."""
    if not reasoning or parser is None:
        return answer or ""
    if parser == "gpt_oss":
        opened = f"{HARMONY_ANALYSIS}{reasoning}"
        return opened if answer is None else f"{opened}{HARMONY_NEXT}{HARMONY_FINAL}{answer}"
    opened = f"{THINK_START}{reasoning}"
    return opened if answer is None else f"{opened}{THINK_END}{answer}"
