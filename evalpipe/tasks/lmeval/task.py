"""One lm-eval task as an evalpipe Task: lm-eval builds its requests and scores its responses.

Every document is one sample, its id lm-eval's document id; its repeats are the sample's
completions (n), in order. lm-eval builds all instances as rank 0 of world size 1, so few-shot
examples do not change with shards, limits taken after it, or resumed attempts. Requests go to
the engine as `Rendered` prompts (nothing templated or stripped again); responses come back
through lm-eval's own filters, `process_results` and, in results.py, its aggregations.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
from collections.abc import Iterator, Sequence
from typing import Any

from evalpipe.core.errors import ConfigError, EngineError
from evalpipe.records.completion import Completion, Generation
from evalpipe.records.prompt import Rendered
from evalpipe.records.reasoning import Split, split
from evalpipe.records.sampling import SamplingSettings
from evalpipe.sandbox.pool import SandboxResult
from evalpipe.tasks.base import Option, Sample, Scored, check_limit
from evalpipe.tasks.lmeval.prompting import ChatTemplate, load_chat_template
from evalpipe.tasks.lmeval.sandboxed import score_in_sandbox
from evalpipe.tasks.lmeval.unsafe import runs_model_code

CATEGORY = "lm_eval"
GENERATE = "generate_until"
SCORED_TYPES = ("loglikelihood", "multiple_choice")
FEWSHOT_SEED = 1234  # lm_eval --fewshot_random_seed's default
# lm-eval's vLLM backend generates this many tokens where a task does not say.
DEFAULT_MAX_GEN_TOKS = 256
# unsafe_code tasks: 1 for a document whose scoring in the sandbox ended before its metrics
# (the code it ran killed the metric's process, or overran), so a run counts them.
SANDBOX_FAILED = "sandbox_failed"
# generation_kwargs keys evalpipe's SamplingSettings carries (the rest is refused, by name).
_GEN_KEYS = {"until", "max_gen_toks", "do_sample", "temperature", "top_p", "seed"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prompting:
    """How lm-eval renders the prompts: `lm_eval --apply_chat_template [--fewshot_as_multiturn]
    [--system_instruction]`. A chat model (`chat_model`: its folder) gets its chat template."""

    chat_model: str | None = None
    template_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    fewshot_as_multiturn: bool = True
    system_instruction: str | None = None

    @functools.cached_property
    def chat_template(self) -> ChatTemplate | None:
        """The model's chat template as lm-eval applies it; its tokenizer loads on first use."""
        if self.chat_model is None:
            return None
        return load_chat_template(self.chat_model, self.template_kwargs)

    def describe(self) -> dict[str, Any]:
        chat = self.chat_model is not None
        return {
            "apply_chat_template": chat,
            "fewshot_as_multiturn": chat and self.fewshot_as_multiturn,
            "system_instruction": self.system_instruction,
        }


class LmEvalTask:
    """Implements the Task protocol (and ScoresResponses) for one lm-eval leaf task."""

    category = CATEGORY

    def __init__(
        self,
        task: Any,
        *,
        prompting: Prompting,
        groups: dict[str, Any] | None = None,
        reasoning_parser: str | None = None,
    ) -> None:
        self.lm_task = task
        # A reasoning model's completions reach lm-eval's filters as their final answers only.
        self.reasoning_parser = reasoning_parser
        self.groups = groups or {}  # every lm-eval group loaded with it, by name
        self.name: str = task.task_name
        self.prompting = prompting
        self.output_type: str = task.OUTPUT_TYPE
        if self.output_type not in (GENERATE, *SCORED_TYPES):
            raise ConfigError(
                f"lm-eval task {self.name!r} sends {self.output_type} requests, which evalpipe "
                f"does not run yet; its lm-eval tasks may send {GENERATE}, "
                f"{', '.join(SCORED_TYPES)}. Run this task with lm-eval itself."
            )
        # Its metric executes the model's code (lm-eval's unsafe_code): scored in the sandbox.
        self.unsafe_code = runs_model_code(task)
        self.repeats = int(task.config.repeats or 1)
        self.sampling = _sampling(self.name, task.config.generation_kwargs or {}, self.repeats)
        self._built: dict[int, tuple[Any, list[Any]]] | None = None  # doc id → (doc, instances)

    @property
    def runs_code(self) -> bool:
        """Whether scoring runs model-written code in the sandbox (tasks.base.runs_code)."""
        return self.unsafe_code

    def definition(self) -> dict[str, Any]:
        """lm-eval's version, the task's resolved config and the prompting: a run's fingerprint."""
        import lm_eval

        config = json.loads(json.dumps(self.lm_task.dump_config(), default=_stable, sort_keys=True))
        return {
            "lm_eval": lm_eval.__version__,
            "config": config,
            "prompting": self.prompting.describe(),
            "reasoning_parser": self.reasoning_parser,
        }

    def samples(self, limit: int | None = None) -> list[Sample]:
        """One sample per document; `limit` keeps the first N, as lm-eval's --limit."""
        check_limit(limit)
        with templates_compiled_once():
            built = self._build()
            ids = sorted(built)[:limit] if limit is not None else sorted(built)
            return [self._sample(doc_id, *built[doc_id]) for doc_id in ids]

    def score(self, sample: Sample, texts: Sequence[str]) -> Scored:
        return self.score_many([(sample, texts)])[0]

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        """Scores of generated texts (a generating task's only response)."""
        if self.output_type != GENERATE:
            raise ConfigError(
                f"lm-eval task {self.name!r} scores log-likelihoods, not texts; score it "
                "through score_responses."
            )
        return self.score_responses(
            [(s, Completion(id=s.id, generation=_generation(texts))) for s, texts in items]
        )

    def score_responses(self, items: Sequence[tuple[Sample, Completion]]) -> list[Scored]:
        """lm-eval's filters, then its process_results, per document; metric keys are lm-eval's
        "metric,filter"."""
        built = self._build()
        chunk = []
        for sample, completion in items:
            doc, instances = built[int(sample.id)]
            fresh = [dataclasses.replace(i, resps=[], filtered_resps={}) for i in instances]
            for instance, response in zip(fresh, self._responses(completion, fresh), strict=True):
                instance.resps.extend(response)
            chunk.append((sample, doc, fresh))
        if self.unsafe_code:
            found: list[dict | SandboxResult | None] = list(
                score_in_sandbox(self.lm_task, [(doc, fresh) for _, doc, fresh in chunk])
            )
        else:
            every = [instance for _, _, fresh in chunk for instance in fresh]
            for ensemble in self.lm_task._filters:
                ensemble.apply(every)
            found = [None] * len(chunk)
        with templates_compiled_once():
            scored = [
                self._failed(metrics)
                if isinstance(metrics, SandboxResult)
                else self._scored(doc, fresh, metrics)
                for (_, doc, fresh), metrics in zip(chunk, found, strict=True)
            ]
        if self.reasoning_parser is None or self.output_type != GENERATE:
            return scored
        return [
            dataclasses.replace(
                result,
                reasoning=tuple(p.reasoning for p in parts),
                cut_off=tuple(p.cut_off for p in parts),
            )
            for result, parts in zip(scored, self._splits(items), strict=True)
        ]

    def _splits(self, items: Sequence[tuple[Sample, Completion]]) -> list[list[Split]]:
        """Each completion's reasoning and final answer (the preset's reasoning parser)."""
        return [
            [split(t, self.reasoning_parser) for t in completion.generation.texts]
            for _, completion in items
            if completion.generation is not None
        ]

    # --- building -------------------------------------------------------------------------

    def _build(self) -> dict[int, tuple[Any, list[Any]]]:
        if self._built is None:
            prompting = self.prompting
            # lm-eval's default few-shot seed (simple_evaluate sets it; TaskManager does not).
            self.lm_task.set_fewshot_seed(seed=FEWSHOT_SEED)
            self.lm_task.build_all_requests(
                rank=0,
                world_size=1,
                system_instruction=prompting.system_instruction,
                apply_chat_template=prompting.chat_template is not None,
                fewshot_as_multiturn=prompting.chat_template is not None
                and prompting.fewshot_as_multiturn,
                chat_template=prompting.chat_template,
            )
            built: dict[int, tuple[Any, list[Any]]] = {}
            for instance in self.lm_task.instances:
                built.setdefault(instance.doc_id, (instance.doc, []))[1].append(instance)
            for _, instances in built.values():
                instances.sort(key=lambda i: i.idx)
            self._built = built
        return self._built

    def _sample(self, doc_id: int, doc: Any, instances: list[Any]) -> Sample:
        contexts = {i.args[0] for i in instances}
        if len(contexts) != 1:
            raise ConfigError(
                f"lm-eval task {self.name!r}, document {doc_id}: its {len(instances)} requests "
                "have different contexts (one per choice, as winogrande's); evalpipe scores "
                "the options of one context. Run this task with lm-eval itself."
            )
        options: tuple[Option, ...] = ()
        if self.output_type != GENERATE:
            options = tuple(
                Option(answer=str(n), continuation=i.args[1]) for n, i in enumerate(instances)
            )
        target = json.loads(json.dumps(self.lm_task.doc_to_target(doc), default=str))
        return Sample(
            id=str(doc_id), prompt=Rendered(contexts.pop()), target=target, options=options
        )

    # --- scoring --------------------------------------------------------------------------

    def _responses(self, completion: Completion, instances: list[Any]) -> list[list[Any]]:
        """Each instance's responses as lm-eval's model would return them."""
        if self.output_type == GENERATE:
            if completion.generation is None:
                raise EngineError(f"lm-eval task {self.name!r}: a request came back ungenerated.")
            from lm_eval.models.utils import postprocess_generated_text

            until = list(self.sampling.stop)
            # Only the final answer is scored; one cut off inside its reasoning is empty.
            answers = [split(t, self.reasoning_parser).answer for t in completion.generation.texts]
            return [[postprocess_generated_text(t, until, None) for t in answers]]
        found = completion.loglikelihoods
        if len(found) != len(instances):
            raise EngineError(
                f"lm-eval task {self.name!r}: {len(found)} log-likelihoods for "
                f"{len(instances)} requests; the engine must return one per continuation."
            )
        if self.output_type == "loglikelihood" and any(x.is_greedy is None for x in found):
            raise EngineError(
                f"lm-eval task {self.name!r} needs is_greedy, which this engine does not "
                "report; run it on the vllm or fake backend."
            )
        return [[(x.logprob, bool(x.is_greedy))] for x in found]

    def _failed(self, result: SandboxResult) -> Scored:
        """A document whose scoring in the sandbox did not end cleanly: every metric 0, and
        counted (SANDBOX_FAILED), as a program that fails its tests."""
        scores = {
            f"{metric},{ensemble.name}": 0.0
            for ensemble in self.lm_task._filters
            for metric in self.lm_task._metric_fn_list
        }
        return Scored(extracted=(None,), scores=scores | {SANDBOX_FAILED: 1.0})

    def _scored(self, doc: Any, instances: list[Any], found: dict | None = None) -> Scored:
        """The document's scores: `found` ({filter: metrics}, computed in the sandbox), else
        lm-eval's process_results here."""
        scores: dict[str, float] = {}
        for key in instances[0].filtered_resps:
            metrics = (
                found[key]
                if found is not None
                else self.lm_task.process_results(doc, [i.filtered_resps[key] for i in instances])
            )
            for metric, value in metrics.items():
                scores[f"{metric},{key}"] = _number(self.name, metric, value)
        if self.unsafe_code:
            scores[SANDBOX_FAILED] = 0.0
        first = instances[0].filtered_resps[next(iter(instances[0].filtered_resps))]
        if self.output_type == GENERATE:
            extracted = tuple(map(str, first)) if isinstance(first, list) else (str(first),)
        else:
            lls = [i.resps[0][0] for i in instances]
            extracted = (str(max(range(len(lls)), key=lls.__getitem__)),)
        return Scored(extracted=extracted, scores=scores)


@contextlib.contextmanager
def templates_compiled_once() -> Iterator[None]:
    """lm-eval compiles a task's Jinja templates again for every document
    (`utils.apply_template`: `env.from_string`, then render), most of the time its task building
    takes; within this block each template is compiled once by the same environment, and the
    texts are the same."""
    from lm_eval import utils

    original = utils.apply_template
    compiled = functools.lru_cache(maxsize=256)(utils.env.from_string)

    def apply_template(template: str, doc: dict[str, Any]) -> str:
        return compiled(template).render(**doc)

    utils.apply_template = apply_template
    try:
        yield
    finally:
        utils.apply_template = original


def _sampling(task: str, kwargs: dict[str, Any], repeats: int) -> SamplingSettings:
    """SamplingSettings for lm-eval's generation_kwargs, as its vLLM backend reads them."""
    unknown = sorted(set(kwargs) - _GEN_KEYS)
    if unknown:
        raise ConfigError(
            f"lm-eval task {task!r}: generation_kwargs {', '.join(unknown)} have no evalpipe "
            f"sampling setting (it takes {', '.join(sorted(_GEN_KEYS))}); drop them in a copy "
            "of the task file (lm_eval:PATH.yaml)."
        )
    until = kwargs.get("until") or []
    sample = bool(kwargs.get("do_sample", False))
    try:
        return SamplingSettings(
            max_tokens=int(kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS)),
            temperature=float(kwargs.get("temperature", 1.0 if sample else 0.0)) if sample else 0.0,
            top_p=float(kwargs.get("top_p", 1.0)),
            n=repeats,
            stop=tuple([until] if isinstance(until, str) else until),
            seed=int(kwargs.get("seed", 0)),
            # lm-eval's vLLM backend decodes with special tokens kept: its filters see them.
            skip_special_tokens=False,
        )
    except ValueError as exc:
        raise ConfigError(
            f"lm-eval task {task!r}: generation_kwargs {kwargs!r}: {exc}; fix them in a copy "
            "of the task file (lm_eval:PATH.yaml)."
        ) from None


def _generation(texts: Sequence[str]) -> Generation:
    return Generation(texts=tuple(texts), prompt_tokens=0, completion_tokens=(0,) * len(texts))


def _number(task: str, metric: str, value: Any) -> float:
    """A per-document metric value as a float: what sample records and summaries hold."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if math.isnan(number) and not (isinstance(value, float) and math.isnan(value)):
        raise ConfigError(
            f"lm-eval task {task!r}: metric {metric!r} gives per-document values like "
            f"{value!r}, not numbers (a corpus-level metric such as bleu); evalpipe records "
            "numeric per-document metrics only. Run this task with lm-eval itself."
        )
    return number


def _stable(value: Any) -> str:
    """A config value JSON cannot hold, named without its memory address (functions, classes)."""
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    return f"{getattr(value, '__module__', '')}.{name}" if name else type(value).__name__
