"""How a completion's text marks a reasoning model's reasoning, per reasoning parser (the
preset's `reasoning_parser`): the markers `split` splits on, and the text a
server that separated the reasoning itself (vLLM's `--reasoning-parser`: the message's
`reasoning`, or `reasoning_content` in older servers) is joined back into, so the completion
reads as the model wrote it and is split by the same rules as an in-process one.

vLLM 0.32's reasoning parsers need the model's tokenizer (they look up the ids of `<think>` and
`</think>`), and its gpt-oss parser only detects boundaries and defers to the Harmony parser,
which needs the o200k_harmony encoding files. Scoring works on text, offline and without the
model, so evalpipe splits the text itself, with the same rules as vLLM's parsers:

- `qwen3` (Qwen3ReasoningParser): reasoning is `<think>…</think>`; a completion with neither
  marker is all answer (thinking off: the chat template closed the block in the prompt).
- `deepseek_r1` (DeepSeekR1ReasoningParser, also Qwen3 thinking-2507 templates): the chat
  template opens `<think>` in the prompt, so everything before `</think>` is reasoning and a
  completion without `</think>` is all reasoning.
- `gpt_oss` (Harmony channels): `<|channel|>analysis<|message|>…<|end|>` is reasoning, the text
  after `<|channel|>final<|message|>` the answer. With special tokens skipped (vLLM's default
  detokenisation) the markers read `analysis…assistantfinal…`, which is recognised too.

A completion that ends inside its reasoning has no answer: `cut_off` is true, and it is scored
as unanswered rather than by extracting a number or letter from the reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass

# How a model's completions separate reasoning from the answer (a preset's reasoning_parser).
REASONING_PARSERS = ("qwen3", "deepseek_r1", "gpt_oss")

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


# The same boundaries after skip_special_tokens removed the <|...|> tokens.
PLAIN_ANALYSIS, PLAIN_FINAL = "analysis", "assistantfinal"


@dataclass(frozen=True, kw_only=True)
class Split:
    reasoning: str | None  # None: the completion had no reasoning part
    answer: str  # what is scored ("" when cut off)
    cut_off: bool  # ended inside the reasoning: unanswered


def split(text: str, parser: str | None) -> Split:
    """Separate `text` by `parser` (a REASONING_PARSERS name); None leaves it all answer."""
    if parser is None:
        return Split(reasoning=None, answer=text, cut_off=False)
    if parser not in REASONING_PARSERS:
        raise ValueError(f"reasoning parser {parser!r} is not one of {REASONING_PARSERS}")
    if parser == "gpt_oss":
        return _harmony(text)
    opened = text.lstrip().startswith(THINK_START)
    body = text.lstrip()[len(THINK_START) :] if opened else text
    if THINK_END in body:
        reasoning, _, answer = body.partition(THINK_END)
        return Split(reasoning=reasoning.strip(), answer=answer.strip(), cut_off=False)
    if opened or parser == "deepseek_r1":
        return Split(reasoning=body.strip(), answer="", cut_off=True)
    return Split(reasoning=None, answer=text, cut_off=False)


def _harmony(text: str) -> Split:
    if HARMONY_FINAL in text:
        reasoning, _, answer = text.rpartition(HARMONY_FINAL)
        for end in HARMONY_ENDS:
            answer = answer.removesuffix(end)
        reasoning = reasoning.replace(HARMONY_ANALYSIS, "").replace("<|start|>assistant", "")
        for end in HARMONY_ENDS:
            reasoning = reasoning.replace(end, "")
        return Split(reasoning=reasoning.strip() or None, answer=answer.strip(), cut_off=False)
    if text.startswith(HARMONY_ANALYSIS):
        return Split(reasoning=text[len(HARMONY_ANALYSIS) :].strip(), answer="", cut_off=True)
    if text.startswith(PLAIN_ANALYSIS):
        body = text[len(PLAIN_ANALYSIS) :]
        if PLAIN_FINAL in body:
            reasoning, _, answer = body.rpartition(PLAIN_FINAL)
            return Split(reasoning=reasoning.strip(), answer=answer.strip(), cut_off=False)
        return Split(reasoning=body.strip(), answer="", cut_off=True)
    return Split(reasoning=None, answer=text, cut_off=False)
