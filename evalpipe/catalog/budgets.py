"""Token budgets and the context length they need (pure). Each task kind says what its tasks
ask (evalpipe/catalog/taskrefs.py from files alone, so `render` sizes a job without loading any
task code; evalpipe/tasks/kinds.py from the loaded tasks).

A reasoning task's budget (AIME: 32,768 tokens) is often longer than a preset's default
max_model_len. When a budget and the least its prompt can take (the chat template's share, and
the prompt bytes the task file records for estimates, else its template's text) do not fit the
preset's max_model_len, the run's max_model_len is raised to the budget plus a prompt
allowance (the recorded bytes, at least one byte per token, so a generous bound for typical
prompts; else DEFAULT_PROMPT_TOKENS), up to the model's context ceiling (max_position_embeddings,
or the rope-scaled length where the preset configures rope scaling); only a budget beyond that
(or beyond a --max-model-len the user gave) is capped, with a note. Short budgets
never move the context. Everything comes from the task file, so `render` on a login node
(without the data) and the runner in the job reach the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evalpipe.catalog.preset import Preset
from evalpipe.core.errors import ConfigError
from evalpipe.records.sampling import DEFAULT_N

# Tokens a chat template may add around a prompt (role markers, BOS, a default system prompt).
TEMPLATE_TOKENS = 64
# The prompt allowance of a task whose file records no prompt size: a zero-shot question
# (AIME's longest problems are about 1,000 bytes).
DEFAULT_PROMPT_TOKENS = 1024


@dataclass(frozen=True, kw_only=True)
class Ask:
    """What one task asks of the context: its budget and its prompt's size."""

    name: str
    max_tokens: int
    n: int = DEFAULT_N
    prompt_bytes: int | None = None  # the mean the task file records, if it does
    # The longest prompt in tokens, where the task knows it exactly (prompts generated for the
    # model's tokenizer); it replaces the byte bound.
    prompt_tokens: int | None = None
    # Only the context the kind's prompts need (RULER's lengths, before its tasks load): no
    # task runs under this name, so it gets no budget.
    sizes_only: bool = False
    # The context the kind's prompts need, given the model's ceiling (RULER's default lengths
    # run up to the longest power of two within it).
    context_of: Callable[[int], int] | None = None
    template_bytes: int = 0  # the prompt template's own text (system prompt included)
    generates: bool = True  # false: options ranked by log-probability, nothing generated
    # Answers per conversation: a later turn's prompt holds the earlier answers (MT-Bench: 2).
    turns: int = 1
    # An agent task whose episodes have a simulated user answering each step (τ²): the user
    # simulator's share of the estimate (evalpipe/estimate/usersimwork.py).
    simulated_user: bool = False

    @property
    def allowance(self) -> int:
        """Tokens kept for the prompt (chat template included) when the context is sized."""
        if self.prompt_tokens is not None:
            return TEMPLATE_TOKENS + self.prompt_tokens
        if self.prompt_bytes is None:
            return TEMPLATE_TOKENS + max(self.template_bytes, DEFAULT_PROMPT_TOKENS)
        return TEMPLATE_TOKENS + self.prompt_bytes

    @property
    def least(self) -> int:
        """The shortest sequence the budget can take: whether a context must change."""
        prompt = self.prompt_tokens or self.prompt_bytes or self.template_bytes
        return TEMPLATE_TOKENS + prompt + self.answers

    @property
    def answers(self) -> int:
        """Tokens the answers of one conversation take at most."""
        return self.turns * self.max_tokens

    def room(self, length: int) -> int:
        """The budget per answer that fits `length` with the prompt allowance."""
        return (length - self.allowance) // self.turns


@dataclass(frozen=True, kw_only=True)
class Context:
    """The max_model_len a run gets, and each generating task's budget within it."""

    max_model_len: int
    budgets: dict[str, int]  # task → the max_tokens it runs with
    notes: tuple[str, ...] = ()


def fit_context(preset: Preset, asks: Sequence[Ask], given: int | None) -> Context:
    """The context for `asks` on `preset`; `given` is --max-model-len (None: choose).
    ConfigError for a prompt counted in tokens that the model cannot hold at all."""
    check_ceiling(preset, asks)
    ceiling = preset.architecture.context_ceiling
    long = [a for a in asks if a.generates and a.least > (given or preset.max_model_len)]
    wanted = max((a.allowance + a.answers for a in long), default=0)
    wanted = max([wanted, *(a.context_of(ceiling) for a in asks if a.context_of)])
    length = given or min(max(preset.max_model_len, wanted), ceiling)
    notes = []
    if length > preset.max_model_len and given is None:
        notes.append(
            f"max_model_len {length} (preset: {preset.max_model_len}) for the longest budget "
            f"({wanted} tokens with its prompt; the model's ceiling: "
            f"{preset.architecture.ceiling_text()})"
        )
    limit = "--max-model-len" if given else "the model's ceiling"
    budgets = {a.name: a.max_tokens for a in asks if a.generates and not a.sizes_only}
    for ask in long:
        room = ask.room(length)
        if ask.allowance + ask.answers <= length:
            continue
        if room < 1:  # the allowance is a bound, not a measurement: vLLM stops at the limit
            notes.append(
                f"{ask.name}: its prompt allowance ({ask.allowance} tokens) leaves no room for "
                f"an answer within max_model_len {length} ({limit}); long prompts end there"
            )
            continue
        budgets[ask.name] = room
        notes.append(
            f"{ask.name}: budget capped at {room} tokens (asked: {ask.max_tokens}) to fit "
            f"max_model_len {length}, {limit}"
        )
    return Context(max_model_len=length, budgets=budgets, notes=tuple(notes))


def check_ceiling(preset: Preset, asks: Sequence[Ask]) -> None:
    """ConfigError for an ask whose prompt, counted exactly in tokens (RULER's, generated at a
    length), leaves no room for one answer token within the model's ceiling: no context can run
    it, so it is refused instead of recorded as context_overflow sample by sample."""
    arch = preset.architecture
    for ask in asks:
        if ask.prompt_tokens is None or ask.prompt_tokens < arch.context_ceiling:
            continue
        scaling = (
            ""
            if arch.rope_scaling is not None
            else ", or, where the model card documents rope scaling (YaRN) for longer contexts, "
            'add it to the preset\'s architecture.rope_scaling (docs/planner.md, "Long contexts")'
        )
        raise ConfigError(
            f"{ask.name}: its longest prompt has {ask.prompt_tokens} tokens, which leaves no "
            f"room for an answer in the most {preset.name} can hold ({arch.ceiling_text()}). "
            f"Ask for lengths below {arch.context_ceiling}{scaling}."
        )


def template_bytes(*texts: str | None) -> int:
    """UTF-8 bytes of a prompt's fixed text (its template, its system prompt)."""
    return sum(len(text.encode()) for text in texts if isinstance(text, str))
