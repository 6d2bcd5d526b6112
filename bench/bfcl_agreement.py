"""BFCL: evalpipe's per-category accuracy against `bfcl evaluate`'s own on the same completions.

    python bench/bfcl_agreement.py --run RUN_DIR      # a `--tasks bfcl...` run
    python bench/bfcl_agreement.py --scripted         # no model: calls built from the answers
    python bench/bfcl_agreement.py --scripted --quick # the first QUICK entries of each category
    python bench/bfcl_agreement.py --scripted --mode handler  # Qwen/Qwen3-8B-FC's handler
    python bench/bfcl_agreement.py --scripted --mode native   # chat tools, vLLM's hermes parser

The completions are written in BFCL's result layout (`result/MODEL/GROUP/BFCL_v4_CAT_result.json`,
one {"id", "result"} line per entry) and scored by `bfcl evaluate`'s code path
(`bfcl_eval.eval_checker.eval_runner.main`, partial evaluation: the entries present), with the
registered model evalpipe's checker is told (prompting mode: Qwen/Qwen3-8B, whose QwenHandler
decodes as the generic OSS handler; handler mode: the registered model, --model; native mode:
gpt-4o-2024-11-20-FC, whose OpenAIResponsesHandler decodes FC results). A --run's mode is read
from its manifest. BFCL's
evaluation `eval`s the model's text, so it too runs in evalpipe's sandbox. Its score files'
accuracy per category is compared (==) with the run's bfcl_results.json.

--scripted: a run on the fake engine would answer no calls; instead each entry of four
categories gets a completion made from its possible answers (each argument's first accepted
value; every third entry an argument's value turned into a string, every fifth a prose answer),
written as the mode's handler asks (prompting: `[f(a=1)]`; handler mode with Qwen's FC handler:
`<tool_call>` JSON lines, every seventh with a call's JSON broken), scored by evalpipe's tasks
in that mode and by BFCL. In native mode the model answers as in handler mode, calling each
function by its tool's name (dots made underscores), and the calls are those vLLM's hermes
parser reads from the answer, through evalpipe's tool reader (a broken call is the answer's
text, flagged unparsed); BFCL is given what its FC handler records of such a response (the calls
as [{name: arguments JSON}], or the text when there are none). Exit 1 on any disagreement.

Multi-turn categories (a run's in its mode; scripted ones in prompting and native mode): each
entry's trajectory is written as `bfcl generate` writes it (per turn, per step, the model's text,
in handler mode the handler's reading of it, in native mode the FC response of its parsed calls,
from steps.jsonl;
an entry whose inference failed, e.g. a step that outgrew the context, as its error string)
and scored by the same code path; accuracy and each entry's verdict are compared. --scripted
adds multi_turn_base's first MT_ENTRIES entries (--quick: six; native: seven) run on the fake
engine by tests/bfcl_scripted.py's ground-truth model, perturbed in the first turn by entry
position (as given, a wrong argument, a missing call, an extra call, prose; native mode adds a
broken call, which the fake engine's hermes reading leaves unparsed), every entry after a run
of them answering in words that outgrow the context (native mode: at a later turn, as its
prompts do not hold the function docs).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import benchlib  # noqa: F401 (this checkout and tests/ on the import path)
from bfcl_scripted import (
    BROKEN_CALL,
    CHATTY_WORDS,
    DONE,
    GroundTruthModel,
    NativeGroundTruthModel,
    last_role,
    load,
    qwen_tool_calls,
    subset,
)

from evalpipe.records.episode import Step
from evalpipe.records.sampling import SamplingSettings
from evalpipe.records.tools import ToolCalls
from evalpipe.rundir.layout import STEPS, RunDir
from evalpipe.rundir.manifest import read_manifest
from evalpipe.rundir.steps import stored_steps
from evalpipe.sandbox.exchange import run_exchange
from evalpipe.tasks.bfcl.checking import SANDBOX_FAILED
from evalpipe.tasks.bfcl.install import bfcl_dir
from evalpipe.tasks.bfcl.modes import NATIVE_CHECKER, PROMPTING_CHECKER
from evalpipe.tasks.bfcl.multiturn import step_calls
from evalpipe.tasks.bfcl.task import PREFIX, fc_response

SCRIPTED = ("simple_python", "multiple", "parallel", "irrelevance")
QUICK = 15  # --quick: entries per category
FC_MODEL = "Qwen/Qwen3-8B-FC"  # --mode handler's default registered model
MULTI_TURN = "multi_turn"  # the prefix of BFCL's multi-turn categories
MT_SCRIPTED = "multi_turn_base"
MT_ENTRIES = 24  # --scripted: multi-turn entries (--quick: one of each perturbation, one chatty)
PERTURBATIONS = ("as given", "wrong argument", "missing call", "extra call", "prose")
# Native mode's answers are parsed calls: an answer whose call does not parse is one more case.
NATIVE_PERTURBATIONS = (*PERTURBATIONS, "broken call")
MODES = ("prompting", "handler", "native")
Verdicts = dict[str, dict[str, bool]]  # category → entry id → passed

# Inside the sandbox: the result files, BFCL's evaluation, each category's score header and the
# ids of the entries it failed.
EVALUATE = r"""
import json, os, sys, tempfile
given = json.load(sys.stdin)
sys.path[:0] = given["path"]
sys.path.append(given["bfcl"])
root = tempfile.mkdtemp(prefix="bfcl-")
os.environ["BFCL_PROJECT_ROOT"] = root
# Native mode's checker model is served by OpenAI's handler, whose constructor builds an API
# client that wants a key; evaluating never calls the API.
os.environ.setdefault("OPENAI_API_KEY", "unused-by-bfcl-evaluate")
from bfcl_eval.eval_checker.eval_runner import main
from bfcl_eval.utils import get_directory_structure_by_category
model = given["model"]
folder = model.replace("/", "_")
for category, rows in given["results"].items():
    where = os.path.join(root, "result", folder, get_directory_structure_by_category(category))
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, f"BFCL_v4_{category}_result.json"), "w") as f:
        f.writelines(json.dumps({"id": i, "result": text}) + "\n" for i, text in rows)
main([model], list(given["results"]), None, None, partial_eval=True)
out = {}
for category in given["results"]:
    where = os.path.join(root, "score", folder, get_directory_structure_by_category(category))
    with open(os.path.join(where, f"BFCL_v4_{category}_score.json")) as f:
        header, *failed = (json.loads(line) for line in f)
    out[category] = {**header, "failed": [e["id"] for e in failed]}
sys.stdout.write("\n" + json.dumps(out) + "\n")
"""


def bfcl_scores(results: dict[str, list[tuple[str, Any]]], model: str) -> dict[str, dict[str, Any]]:
    """`bfcl evaluate`'s score header per category for these (id, result) pairs (a
    completion's text, or native mode's FC response), decoded with registered `model`'s
    handler."""
    path = [p for p in sys.path if p and Path(p).is_dir()]
    data = {"path": path, "bfcl": str(bfcl_dir()), "model": model, "results": results}
    answer, result = run_exchange(EVALUATE, data, timeout_s=1800)
    if answer is None:
        sys.exit(f"bfcl evaluate did not complete in the sandbox: {result.detail}\n"
                 f"{result.output_tail[-3000:]}")  # fmt: skip
    return answer


def run_mode(run: Path) -> tuple[str, str]:
    """The BFCL mode a run ran in and the registered model its checker was told, from its
    manifest's task definitions."""
    manifest = read_manifest(RunDir(run))
    found = {(d["mode"], d["checker_model"])
             for d in (manifest.config.definitions.values() if manifest else ())
             if d.get("kind") == "bfcl"}  # fmt: skip
    if len(found) != 1:
        sys.exit(f"{run}: its manifest names {len(found)} BFCL modes ({sorted(found)}); give a "
                 "run of bfcl tasks in one mode.")  # fmt: skip
    return found.pop()


def native_result(row: Mapping[str, Any]) -> Any:
    """A native single-turn sample's completion as BFCL's FC handler records the response: its
    parsed calls (none when the engine gave none: an empty answer, as evalpipe checks it)."""
    calls = row.get("tool_calls") or [None]
    return fc_response(ToolCalls() if calls[0] is None else ToolCalls.from_dict(calls[0]))


def from_run(run: Path, native: bool) -> tuple[dict[str, list[tuple[str, Any]]], dict[str, float]]:
    """The run's completions by category (`native`: their FC responses), and its per-category
    accuracy: its bfcl_results.json's, or for an interrupted run the mean of its finished
    samples' records."""
    results: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    scores: dict[str, list[float]] = defaultdict(list)
    for line in (run / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        category = row["task"].removeprefix(PREFIX)
        if row["task"].startswith(PREFIX) and not category.startswith(MULTI_TURN):
            found = native_result(row) if native else row["completions"][0]
            results[category].append((row["sample_id"], found))
            scores[category].append(row["scores"]["accuracy"])
    document = run / "bfcl_results.json"
    if document.is_file():
        found = json.loads(document.read_text())["categories"]
        return dict(results), {c: f["accuracy"] for c, f in found.items()}
    return dict(results), {c: sum(v) / len(v) for c, v in scores.items()}


def trajectory(record: dict[str, Any], steps: Sequence[Step], native: bool = False) -> Any:
    """A multi-turn entry's result as `bfcl generate` writes it: per turn, per step, the model's
    text (`native`: its FC response); for an entry whose inference failed (a refused step: its
    history outgrew the context; calls that broke the sandbox) the error string
    `multi_threaded_inference` records."""
    if record.get("refusal") or record["extracted"][0] == SANDBOX_FAILED:
        why = (record.get("refusal") or {}).get("reason", SANDBOX_FAILED)
        return f"Error during inference: {why}"
    turns: list[list[Any]] = []
    for step in steps:
        turns += [[] for _ in range(step.outcome["turn"] + 1 - len(turns))]
        # Handler mode: the handler's reading of the text, which BFCL's result keeps.
        read = fc_response(step_calls(step)) if native else step.outcome.get("response", step.text)
        turns[step.outcome["turn"]].append(read)
    return turns


def multi_turn_from_run(
    run: Path, native: bool = False
) -> tuple[dict[str, list[tuple[str, Any]]], Verdicts]:
    """The run's multi-turn trajectories by category (from samples.jsonl and steps.jsonl;
    `native`: of FC responses), and evalpipe's verdict on each entry."""
    steps = stored_steps(run / STEPS) if (run / STEPS).is_file() else {}
    results: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    verdicts: Verdicts = defaultdict(dict)
    for line in (run / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        category = row["task"].removeprefix(PREFIX)
        if row["task"].startswith(PREFIX) and category.startswith(MULTI_TURN):
            found = steps.get((row["task"], row["sample_id"]), ())
            results[category].append((row["sample_id"], trajectory(row, found, native)))
            verdicts[category][row["sample_id"]] = row["scores"]["accuracy"] == 1.0
    return dict(results), dict(verdicts)


PROSE = "I would use the tools for this, but I will not call them now."


def perturbed(calls: Sequence[str], kind: str) -> list[str]:
    """An entry's first-turn ground-truth calls (`f(a=1)`) perturbed as `kind` says (prose,
    whose answer has no calls, and a broken call, are the answer's to write)."""
    found = list(calls)
    if kind == "wrong argument":
        found[0] = re.sub(r"=('[^']*'|[0-9.]+)", "='wrong'", found[0], count=1)
    elif kind == "missing call":
        found = found[:-1]
    elif kind == "extra call":
        found.append(found[0])
    return found


def keyword_only(entry: Mapping[str, Any]) -> bool:
    """Whether every ground-truth call of the entry passes its arguments by name."""
    return not any(ast.parse(call, mode="eval").body.args  # type: ignore[attr-defined]
                   for turn in entry["ground_truth"] for call in turn)  # fmt: skip


class PerturbedModel(GroundTruthModel):
    """The ground-truth model, with each entry's first turn perturbed by its position among the
    entries: as given, a wrong argument, a missing call, an extra call, prose (no call); the
    chatty entries outgrow the context."""

    def __init__(self, entries: Sequence[Mapping[str, Any]], chatty: Sequence[str]) -> None:
        super().__init__(entries, chatty=chatty)
        self.position = {e["id"]: i for i, e in enumerate(entries)}

    def _completion(self, text: str, settings: SamplingSettings, index: int) -> str:
        answer = super()._completion(text, settings, index)
        entry = next(e for question, e in self.entries.items() if question in text)
        if (last_role(text) != "user" or entry["id"] in self.chatty
                or text.count("\nuser: ") != 1 or not entry["ground_truth"][0]):  # fmt: skip
            return answer
        kind = PERTURBATIONS[self.position[entry["id"]] % len(PERTURBATIONS)]
        if kind == "prose":
            return PROSE
        calls = perturbed(entry["ground_truth"][0], kind)
        return f"[{', '.join(calls)}]" if calls else DONE


class NativePerturbedModel(NativeGroundTruthModel):
    """The native ground-truth model (hermes tool calls), each entry's first turn perturbed by
    its position as PerturbedModel's, and a broken call besides; the chatty entries answer every
    user turn in words, until their history outgrows the context."""

    def __init__(self, entries: Sequence[Mapping[str, Any]], chatty: Sequence[str]) -> None:
        super().__init__(entries)
        self.chatty = set(chatty)
        self.position = {e["id"]: i for i, e in enumerate(entries)}

    def _completion(self, text: str, settings: SamplingSettings, index: int) -> str:
        entry = next(e for question, e in self.entries.items() if question in text)
        user = last_role("\n" + text) == "user"  # the first message is a user's
        if entry["id"] in self.chatty and user:
            return " ".join(["chat"] * CHATTY_WORDS)
        answer = super()._completion(text, settings, index)
        if not user or ("\n" + text).count("\nuser: ") != 1 or not entry["ground_truth"][0]:
            return answer
        kind = NATIVE_PERTURBATIONS[self.position[entry["id"]] % len(NATIVE_PERTURBATIONS)]
        if kind in ("prose", "broken call"):
            return PROSE if kind == "prose" else BROKEN_CALL
        calls = perturbed(entry["ground_truth"][0], kind)
        return qwen_tool_calls(calls) if calls else DONE


def multi_turn_scripted(
    limit: int, native: bool = False
) -> tuple[dict[str, list[tuple[str, Any]]], Verdicts]:
    """The first `limit` entries of MT_SCRIPTED run by PerturbedModel (`native`:
    NativePerturbedModel, in native mode, over entries whose calls are keyword_only) on the fake
    engine (every one after each run of
    perturbations chatty), into a scratch run directory that is then read as a --run's."""
    from evalpipe.catalog.preset import load_preset
    from evalpipe.run.runner import RunOptions, run_evaluation

    preset = scripted_preset("native" if native else "prompting", None)
    task = load(MT_SCRIPTED, preset)
    # Native calls are JSON, arguments by name: entries whose ground truth names them all.
    ids = [e["id"] for e in task.entries if not native or keyword_only(e)][:limit]
    cases = len(NATIVE_PERTURBATIONS if native else PERTURBATIONS)
    chatty = ids[cases :: cases + 1]
    task = subset(task, ids)
    model = (NativePerturbedModel if native else PerturbedModel)(task.entries, chatty)
    with tempfile.TemporaryDirectory(prefix="bfcl-mt-") as scratch:
        run = Path(scratch) / "run"
        run_evaluation(lambda settings: model, [task], run, preset=load_preset("tiny_random"),
                       options=RunOptions(backend="fake"))  # fmt: skip
        mode, _ = run_mode(run)  # read back as a --run's
        return multi_turn_from_run(run, mode == "native")


def call_text(ground_truth: list[dict[str, Any]], index: int, fc: bool = False,
              native: bool = False) -> str:  # fmt: skip
    """A completion of the entry's answer calls, in BFCL's prompting format, or with `fc` in
    Qwen's FC format (hermes `<tool_call>` JSON); `native`: calling each function by its tool's
    name (BFCL's convert_to_tool makes a dot `_`)."""
    if index % 5 == 4:
        return "I would call a function for this, but I am not sure which one."
    calls = []
    for call in ground_truth:
        ((name, arguments),) = call.items()
        name = name.replace(".", "_") if native else name
        values = {k: v[0] for k, v in arguments.items() if v and v[0] != ""}
        if index % 3 == 2 and values:
            first = next(iter(values))
            values[first] = str(values[first])
        if fc:
            body = json.dumps({"name": name, "arguments": values})
            calls.append(f"<tool_call>\n{body[:-1] if index % 7 == 6 else body}\n</tool_call>")
        else:
            calls.append(f"{name}({', '.join(f'{k}={v!r}' for k, v in values.items())})")
    return "\n".join(calls) if fc else "[" + ", ".join(calls) + "]"


def scripted_preset(mode: str, model: str | None) -> Any:
    """tiny_random in BFCL's `mode` (handler mode: registered `model`; native mode: hermes's
    tool parser)."""
    import dataclasses

    from evalpipe.catalog.preset import load_preset

    preset = load_preset("tiny_random")
    if mode == "handler":
        return dataclasses.replace(preset, bfcl_mode="handler", bfcl_model=model)
    if mode == "native":
        return dataclasses.replace(preset, bfcl_mode="native", tool_parser="hermes")
    return preset


def native_completions(samples: Sequence[Any], texts: Sequence[str]) -> list[Any]:
    """Each answer as the in-process engine completes it with the sample's tools: the text and
    the calls vLLM's hermes parser reads from it (evalpipe's tool reader, over tiny_random's
    tokenizer)."""
    from transformers import AutoTokenizer

    from evalpipe.catalog import weights
    from evalpipe.engine.toolcalls import ToolReader
    from evalpipe.records.completion import Completion, Generation
    from evalpipe.records.request import Request
    from evalpipe.tasks.bfcl.task import SAMPLING

    tokenizer = AutoTokenizer.from_pretrained(weights.prepare("tiny_random"))
    reader = ToolReader("hermes", tokenizer, preset="tiny_random", reasoning_parser=None)
    out = []
    for sample, text in zip(samples, texts, strict=True):
        request = Request(id=sample.id, prompt=sample.prompt, sampling=SAMPLING, tools=sample.tools)
        calls = reader.read([text], request)
        out.append(Completion(id=sample.id, generation=Generation(
            texts=(text,), prompt_tokens=0, completion_tokens=(0,), tool_calls=calls)))  # fmt: skip
    return out


def scripted(
    limit: int | None = None, mode: str = "prompting", model: str | None = None
) -> tuple[dict[str, list[tuple[str, Any]]], dict[str, float]]:
    """Scripted completions for every entry of SCRIPTED (the first `limit` of each), and
    evalpipe's accuracy on them in `mode` (handler mode: registered `model`'s handler); BFCL's
    result of each: the text, or in native mode the FC response of its parsed calls."""
    from evalpipe.catalog.taskrefs import expand_refs
    from evalpipe.tasks.bfcl.kind import KIND
    from evalpipe.tasks.kindbase import LoadOptions

    results, ours = {}, {}
    refs = expand_refs([f"bfcl:{c}" for c in SCRIPTED])
    options = LoadOptions(preset=scripted_preset(mode, model), backend="fake")
    for task in KIND.load(refs, options).tasks:
        samples = task.samples()[:limit]
        texts = [call_text(s.target["ground_truth"] or [{"get_weather": {"city": ["Paris"]}}],
                           i, mode != "prompting", mode == "native")
                 for i, s in enumerate(samples)]  # fmt: skip
        if mode == "native":
            completions = native_completions(samples, texts)
            scored = task.score_responses(list(zip(samples, completions, strict=True)))
            found = [fc_response(c.generation.tool_calls[0]) for c in completions]
        else:
            scored = task.score_many([(s, [t]) for s, t in zip(samples, texts, strict=True)])
            found = list(texts)
        ours[task.bfcl_category] = sum(x.scores["accuracy"] for x in scored) / len(scored)
        results[task.bfcl_category] = [(s.id, f) for s, f in zip(samples, found, strict=True)]
    return results, ours


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--run", type=Path, help="a completed evalpipe run of bfcl tasks")
    given.add_argument("--scripted", action="store_true", help="completions from the answers")
    parser.add_argument("--quick", action="store_true", help=f"--scripted on {QUICK} entries each")
    parser.add_argument(
        "--mode",
        choices=MODES,
        help="BFCL's mode of the scripted completions (default prompting; handler: --model's "
        "registered handler; native: chat tools, calls read by vLLM's hermes parser); a --run's "
        "is read from its manifest",
    )
    parser.add_argument("--model", default=FC_MODEL,
                        help="--mode handler's registered model (bfcl_model)")  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        print(f"quick mode ({QUICK} scripted entries per category)")
    limit = QUICK if args.quick else None
    if args.run:
        mode, model = run_mode(args.run)
        if args.mode not in (None, mode):
            sys.exit(f"--mode {args.mode}: {args.run} ran in BFCL's {mode} mode; leave --mode "
                     "out (a run's mode is read from its manifest).")  # fmt: skip
    else:
        mode = args.mode or "prompting"
        model = {"handler": args.model, "native": NATIVE_CHECKER}.get(mode, PROMPTING_CHECKER)
    native = mode == "native"
    print(f"mode {mode}, checker model {model}")
    if args.run:
        results, ours = from_run(args.run, native)
        mt_results, verdicts = multi_turn_from_run(args.run, native)
    else:
        results, ours = scripted(limit, mode, args.model if mode == "handler" else None)
        # Scripted multi-turn entries: prompting and native mode.
        cases = len(NATIVE_PERTURBATIONS if native else PERTURBATIONS)
        mt_results, verdicts = (({}, {}) if mode == "handler" else
                                multi_turn_scripted(cases + 1 if args.quick else MT_ENTRIES,
                                                    native))  # fmt: skip
    every = {**results, **mt_results}  # one evaluation: BFCL's imports are seconds
    theirs = bfcl_scores(every, model) if every else {}
    for category, found in verdicts.items():
        ours.setdefault(category, sum(found.values()) / len(found))
    failed = 0
    print(f"{'category':24} {'entries':>7} {'evalpipe':>9} {'bfcl':>9}")
    for category, accuracy in ours.items():
        header = theirs[category]
        same = accuracy == header["accuracy"]
        entries = ""
        if category in verdicts:  # multi-turn: each entry's verdict too
            agree = sum((i not in header["failed"]) == passed
                        for i, passed in verdicts[category].items())  # fmt: skip
            same = same and agree == len(verdicts[category])
            entries = f"  entries agree {agree}/{len(verdicts[category])}"
        failed += not same
        print(f"{category:24} {header['total_count']:>7} {accuracy:>9.4f} "
              f"{header['accuracy']:>9.4f}{entries}{'' if same else '  DIFFERENT'}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
