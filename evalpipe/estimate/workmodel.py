"""The work a task asks of the engine: samples, prompt tokens, generated tokens and scoring,
each with where it came from (the data and the model's tokenizer, past runs, the sizes and the
published mean answer length the task file records, or bounds), so an estimate can say what it
rests on.

Hub data is never loaded here (the `datasets` library pulls in pandas, and a login node may not
have the data): hub tasks are counted from the task file's `rows` and `prompt_bytes`, or from
past runs of the task.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

from evalpipe.catalog import modelconfig, weights
from evalpipe.catalog.preset import Preset
from evalpipe.core.errors import EstimateError
from evalpipe.core.span import Span
from evalpipe.estimate.history import PastJob, TaskRecord, family, task_lengths
from evalpipe.estimate.longprompts import LongPrompt, counted_prompt, longest_prompt, prompt_bytes
from evalpipe.records.prompt import Prompt, message_text, messages
from evalpipe.tasks.base import Task
from evalpipe.tasks.configured import ConfiguredTask

# Bytes of English text per token when no tokenizer is at hand: "one token ≈ 4 characters of
# common English text" (OpenAI's tokenizer guide); Llama-3's 128k vocabulary packs a little
# more, small vocabularies and code less, hence the range.
BYTES_PER_TOKEN = Span(3.0, 4.0, 4.5)
# Chat markup around one user message, when the model's chat template cannot be rendered here.
CHAT_TOKENS = 10
# A record's text when neither the data, the task file nor a past run says (a guess, widely
# ranged: MMLU questions with their options run 200-1500 bytes).
GUESSED_RECORD_BYTES = Span(300.0, 600.0, 1200.0)
# Prompts tokenised per task: enough for a mean within a few percent.
TOKENISED_SAMPLES = 256
# Scoring cost per sample on the orchestrator's worker (math-verify, letter extraction), and per
# model-written program in the sandbox (docs/sandbox.md; BENCHMARKS.md §4: 5.8 ms/program with
# two workers); a program that runs into its timeout costs the timeout.
SCORE_S = Span(0.0002, 0.001, 0.005)
PROGRAM_S = Span(0.004, 0.01, 0.05)
TIMED_OUT_SHARE = 0.05  # the high end assumes this share of programs runs into the timeout
SANDBOX_WORKERS = 2
# A task file's published mean answer length (its length_prior) as the estimate's range: the
# mean ×(1 ± this), the high end within max_tokens.
PRIOR_SPREAD = 0.5


@dataclass(frozen=True, kw_only=True)
class TaskWork:
    """What one task costs the engine, per sample, and how many samples."""

    task: str
    category: str
    samples: int  # requests, where a task's samples make several (MakesRequests)
    completions: int  # generated sequences per sample (sampling.n); 0 when options are ranked
    prompt_tokens: Span  # per sample, chat markup included
    generated_tokens: Span  # per completion
    max_tokens: int
    score_s: Span  # per sample
    sources: tuple[str, ...]  # how the figures above were obtained
    # The longest prompt where it leaves no room for an answer in the context (local data).
    long_prompt: LongPrompt | None = None
    # Every answer priced at max_tokens: nothing measured the task's lengths (a bound).
    length_bound: bool = False

    @property
    def ranked(self) -> bool:
        return self.completions == 0

    def shard(self, shards: int) -> TaskWork:
        """The largest share of one of `shards` array tasks (samples are dealt round robin)."""
        return replace(self, samples=math.ceil(self.samples / shards))

    def to_dict(self) -> dict[str, object]:
        return {
            "task": self.task,
            "samples": self.samples,
            "completions": self.completions,
            "prompt_tokens": self.prompt_tokens.to_dict(1),
            "generated_tokens": self.generated_tokens.to_dict(1),
            "max_tokens": self.max_tokens,
            "sources": list(self.sources),
        }


class TokenCounter:
    """Counts a prompt's tokens as the model will see them: its tokenizer.json (the `tokenizers`
    library, no torch) plus the chat template's markup, measured once."""

    def __init__(self, encode: Callable[[str], int], chat_tokens: int, where: str) -> None:
        self.encode = encode
        self.chat_tokens = chat_tokens
        self.where = where

    def count(self, prompt: Prompt, chat: bool) -> int:
        parts = messages(prompt)
        text = sum(self.encode(message_text(m)) for m in parts)
        return text + (self.chat_tokens * len(parts) if chat else 0)


def model_folder(preset: Preset) -> Path | None:
    """Where the preset's tokenizer files are on this machine: a local folder, the prepared
    build, or the Hugging Face cache; None when none has them."""
    candidates = [Path(preset.model).expanduser()]
    if preset.prepare is not None:
        candidates.append(weights.model_dir(preset.prepare))
    snapshot = modelconfig.hub_snapshot(modelconfig.hub_cache(), preset)
    if snapshot is not None:
        candidates.append(snapshot)
    return next((c for c in candidates if (c / "tokenizer.json").is_file()), None)


def _chat_markup(folder: Path, encode: Callable[[str], int]) -> int | None:
    """Tokens the chat template adds around one user message; None if it cannot be rendered."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    config = modelconfig.read_json(folder / "tokenizer_config.json") or {}
    template = config.get("chat_template")
    if not template and (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    if not isinstance(template, str):
        return None

    def token(key: str) -> str:
        value = config.get(key) or ""
        return value.get("content", "") if isinstance(value, dict) else str(value)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    probe = "estimate"
    try:
        text = env.from_string(template).render(
            messages=[{"role": "user", "content": probe}],
            add_generation_prompt=True,
            bos_token=token("bos_token"),
            eos_token=token("eos_token"),
        )
    except (TemplateError, TypeError, ValueError):
        return None
    return max(0, encode(text) - encode(probe))


def token_counter(preset: Preset) -> TokenCounter | None:
    """The preset's tokenizer where its files are on this machine, else None (bytes/token)."""
    folder = model_folder(preset)
    if folder is None:
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))

    def encode(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    markup = _chat_markup(folder, encode) if preset.chat else 0
    return TokenCounter(encode, CHAT_TOKENS if markup is None else markup, str(folder))


def helper_work(
    of: TaskWork, requests: int, prompt_tokens: Span, max_tokens: int, *, helper: str, source: str
) -> TaskWork:
    """A helper model's requests for the task `of` predicts (a judge's judgments of its
    answers, a user simulator's turns in its episodes): one answer each, priced at the
    helper's max_tokens (an upper bound, as for a task without past runs)."""
    return TaskWork(
        task=of.task,
        category=of.category,
        samples=requests,
        completions=1,
        prompt_tokens=prompt_tokens,
        generated_tokens=Span.exact(float(max_tokens)),
        max_tokens=max_tokens,
        score_s=SCORE_S,
        sources=(source, f"{helper} max_tokens {max_tokens} as an upper bound"),
    )


def counted_how(counter: TokenCounter | None) -> str:
    """How a helper's prompts were counted, for its work's sources."""
    return f"tokenised ({counter.where})" if counter else "bytes / token"


def bytes_to_tokens(prompt_bytes: Span, chat: bool) -> Span:
    tokens = Span(
        prompt_bytes.low / BYTES_PER_TOKEN.high,
        prompt_bytes.mid / BYTES_PER_TOKEN.mid,
        prompt_bytes.high / BYTES_PER_TOKEN.low,
    )
    return tokens + Span.exact(CHAT_TOKENS if chat else 0)


def prompt_counter(preset: Preset, counter: TokenCounter | None) -> Callable[[Prompt], int]:
    """A prompt's tokens for `preset`: tokenised where `counter` is, else from its bytes."""
    if counter is not None:
        return lambda prompt: counter.count(prompt, preset.chat)
    return lambda prompt: round(bytes_to_tokens(Span.exact(prompt_bytes(prompt)), preset.chat).mid)


def long_prompt(
    task: Task, preset: Preset, counter: TokenCounter | None, context: int, limit: int | None
) -> LongPrompt | None:
    """`task`'s longest prompt (of its first `limit` samples) where it cannot fit `context`."""
    return longest_prompt(
        task.name,
        task.samples(limit),
        prompt_counter(preset, counter),
        context,
        ceiling=preset.architecture.context_ceiling,
        counted=counter is not None,
    )


@runtime_checkable
class MakesRequests(Protocol):
    """A task whose samples make several requests each (a multi-turn episode: a request per
    step, its prompt holding the history before it)."""

    def request_prompts(self, limit: int | None) -> list[Prompt]:
        """Every request's prompt its first `limit` samples make, as the estimate assumes
        them (the task's module says how)."""
        ...


def _local_prompts(
    task: Task, limit: int | None, preset: Preset, counter: TokenCounter | None
) -> tuple[int, Span, str]:
    """(requests: one per sample unless the task makes more, prompt tokens per request,
    source) from the task's own data."""
    episodes = isinstance(task, MakesRequests)
    prompts = (
        task.request_prompts(limit)
        if episodes
        else [counted_prompt(s) for s in task.samples(limit)]
    )
    if not prompts:
        raise EstimateError(f"Task {task.name!r} has no samples; nothing to estimate.")
    step = max(1, len(prompts) // TOKENISED_SAMPLES)
    chosen = prompts[::step]
    steps = "; each step of its episodes a request with its history" if episodes else ""
    if counter is not None:
        mean = sum(counter.count(p, preset.chat) for p in chosen) / len(chosen)
        return len(prompts), Span.exact(mean), f"prompts tokenised ({counter.where}){steps}"
    mean_bytes = sum(prompt_bytes(p) for p in chosen) / len(chosen)
    tokens = bytes_to_tokens(Span.exact(mean_bytes), preset.chat)
    return len(prompts), tokens, f"prompt bytes / {BYTES_PER_TOKEN.mid:g} bytes per token{steps}"


def _hub_prompts(
    task: ConfiguredTask, limit: int | None, preset: Preset, past: Sequence[TaskRecord]
) -> tuple[int, Span, str]:
    """(samples, prompt tokens per sample, source) for a hub task, without its data."""
    source = task.config.source
    if source.rows is None:
        raise EstimateError(
            f"Task {task.name!r} reads {source.uri} and its file records no `rows:` (the "
            f"split's size), so its samples cannot be counted without the data. Add "
            f"`rows: N` under source: in {task.path} (from the dataset card), or pass --limit."
        )
    samples = source.rows if limit is None else min(limit, source.rows)
    counted = f"{source.rows} rows recorded in {task.path.name}"
    if past:
        prompt = sum(t.prompt_tokens for t in past) / sum(t.samples for t in past)
        return samples, Span.exact(prompt), f"{counted}; prompt tokens of past runs"
    if source.prompt_bytes is not None:
        tokens = bytes_to_tokens(Span.exact(source.prompt_bytes), preset.chat)
        return samples, tokens, f"{counted}; {source.prompt_bytes} prompt bytes recorded there"
    prompt = task.config.prompt
    fixed = len((prompt.template + (prompt.system or "")).encode())
    guess = GUESSED_RECORD_BYTES.scale(prompt.shots + 1) + Span.exact(fixed)
    return samples, bytes_to_tokens(guess, preset.chat), f"{counted}; prompt length GUESSED"


def _score_s(
    task: Task, completions: int, past: Sequence[TaskRecord], scope: str
) -> tuple[Span, str | None]:
    """Seconds of scoring per sample: what past runs of the task measured (a model's wrong
    programs, slow or timing out, cost more than a right one: no constant knows that), else
    the sandbox's and the scorers' own costs."""
    timed = [t for t in past if t.score_s > 0]
    if timed:
        mean = sum(t.score_s for t in timed) / sum(t.samples for t in timed)
        spread = 0.3 if scope == "preset" else 0.6
        source = f"scoring time of {len(timed)} past job(s) of this {scope}"
        return Span(mean * (1 - spread), mean, mean * (1 + spread)), source
    if not isinstance(task, ConfiguredTask):  # lm-eval's scoring runs no programs
        return SCORE_S, None
    scorer = task.config.scorer
    if scorer.kind != "code":
        return SCORE_S, None
    per_program = Span(
        PROGRAM_S.low,
        PROGRAM_S.mid,
        PROGRAM_S.high + TIMED_OUT_SHARE * scorer.timeout_s,
    )
    return per_program.scale(completions / SANDBOX_WORKERS), None


def task_work(
    task: Task,
    preset: Preset,
    *,
    limit: int | None,
    history: Sequence[PastJob],
    counter: TokenCounter | None,
    context: int | None = None,
) -> TaskWork:
    """The work of `task` for `preset` (see the module's docstring for the sources); with
    `context` (the run's max_model_len), the longest prompt where it does not fit."""
    scope, past = task_lengths(history, task.name, preset.name, family(preset.model))
    long = None
    # lm-eval's tasks (not ConfiguredTask) hold their loaded data: counted as local ones.
    if isinstance(task, ConfiguredTask) and task.config.source.scheme == "hf":
        samples, prompt, prompt_source = _hub_prompts(task, limit, preset, past)
    else:
        samples, prompt, prompt_source = _local_prompts(task, limit, preset, counter)
        if context is not None:
            long = long_prompt(task, preset, counter, context, limit)
    ranked = _ranked(task)
    n = task.sampling.n
    max_tokens = task.sampling.max_tokens
    generated = [t for t in past if t.completions]
    prior = preset.length_prior(task.name) or (
        task.config.length_prior if isinstance(task, ConfiguredTask) else None
    )
    if ranked:
        lengths, length_source = Span.exact(1.0), "options ranked in one step"
    elif generated:
        mean = sum(t.generated_tokens for t in generated) / sum(t.completions for t in generated)
        longest = max(t.longest for t in generated)
        # Another model of the family answers at its own length: a wider range than the preset's.
        spread = 0.15 if scope == "preset" else 0.5
        lengths = Span(
            mean * (1 - spread), mean, min(float(max_tokens), max(mean * (1 + spread), longest))
        )
        length_source = f"generated lengths of {len(generated)} past job(s) of this {scope}"
    elif prior is not None:
        # Published for another setup (hardware, sampling, often another model): widely ranged.
        mean = float(min(prior.tokens, max_tokens))
        lengths = Span(mean * (1 - PRIOR_SPREAD), mean, min(max_tokens, mean * (1 + PRIOR_SPREAD)))
        length_source = (
            f"length prior (not measured here): {prior.tokens} tok mean answer, from {prior.source}"
        )
    else:
        lengths = Span.exact(float(max_tokens))
        length_source = f"no past run of the task: max_tokens {max_tokens} as an upper bound"
    completions = 0 if ranked else n
    score_s, score_source = _score_s(task, max(1, completions), past, scope)
    return TaskWork(
        task=task.name,
        category=task.category,
        samples=samples,
        completions=completions,
        prompt_tokens=prompt,
        generated_tokens=lengths,
        max_tokens=max_tokens,
        score_s=score_s,
        sources=(prompt_source, length_source, *([score_source] if score_source else [])),
        long_prompt=long,
        length_bound=not ranked and not generated and prior is None,
    )


def _ranked(task: Task) -> bool:
    """Whether the task ranks options by log-probability instead of generating."""
    if isinstance(task, ConfiguredTask):
        return task.config.scorer.method == "logprobs"
    return any(sample.options for sample in task.samples(1))
