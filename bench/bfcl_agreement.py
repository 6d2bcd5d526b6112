"""BFCL: evalpipe's per-category accuracy against `bfcl evaluate`'s own on the same completions.

    python bench/bfcl_agreement.py --run RUN_DIR      # a `--tasks bfcl...` run
    python bench/bfcl_agreement.py --scripted         # no model: calls built from the answers
    python bench/bfcl_agreement.py --scripted --quick # the first QUICK entries of each category
    python bench/bfcl_agreement.py --scripted --mode handler  # Qwen/Qwen3-8B-FC's handler

The completions are written in BFCL's result layout (`result/MODEL/GROUP/BFCL_v4_CAT_result.json`,
one {"id", "result"} line per entry) and scored by `bfcl evaluate`'s code path
(`bfcl_eval.eval_checker.eval_runner.main`, partial evaluation: the entries present), with the
registered model evalpipe's checker is told (prompting mode: Qwen/Qwen3-8B, whose QwenHandler
decodes as the generic OSS handler; handler mode: the registered model, --model). BFCL's
evaluation `eval`s the model's text, so it too runs in evalpipe's sandbox. Its score files'
accuracy per category is compared (==) with the run's bfcl_results.json.

--scripted: a run on the fake engine would answer no calls; instead each entry of four
categories gets a completion made from its possible answers (each argument's first accepted
value; every third entry an argument's value turned into a string, every fifth a prose answer),
written as the mode's handler asks (prompting: `[f(a=1)]`; handler mode with Qwen's FC handler:
`<tool_call>` JSON lines, every seventh with a call's JSON broken), scored by evalpipe's tasks
in that mode and by BFCL. Exit 1 on any disagreement.

Multi-turn categories (a run's in its mode; scripted ones in prompting mode): each entry's
trajectory is written as `bfcl generate` writes it (per turn, per step, the model's text, or in
handler mode the handler's reading of it, from steps.jsonl;
an entry whose inference failed, e.g. a step that outgrew the context, as its error string)
and scored by the same code path; accuracy and each entry's verdict are compared. --scripted
adds multi_turn_base's first MT_ENTRIES entries (--quick: six) run on the fake engine by
tests/bfcl_scripted.py's ground-truth model, perturbed in the first turn by entry position (as
given, a wrong argument, a missing call, an extra call, prose), every sixth entry answering
in words that outgrow the context.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import benchlib  # noqa: F401 (this checkout and tests/ on the import path)
from bfcl_scripted import DONE, GroundTruthModel, last_role, load, subset

from evalpipe.records.episode import Step
from evalpipe.records.sampling import SamplingSettings
from evalpipe.rundir.layout import STEPS
from evalpipe.rundir.steps import stored_steps
from evalpipe.sandbox.exchange import run_exchange
from evalpipe.tasks.bfcl.checking import SANDBOX_FAILED
from evalpipe.tasks.bfcl.install import bfcl_dir
from evalpipe.tasks.bfcl.modes import PROMPTING_CHECKER
from evalpipe.tasks.bfcl.task import PREFIX

SCRIPTED = ("simple_python", "multiple", "parallel", "irrelevance")
QUICK = 15  # --quick: entries per category
FC_MODEL = "Qwen/Qwen3-8B-FC"  # --mode handler's default registered model
MULTI_TURN = "multi_turn"  # the prefix of BFCL's multi-turn categories
MT_SCRIPTED = "multi_turn_base"
MT_ENTRIES = 24  # --scripted: multi-turn entries (--quick: one of each perturbation, one chatty)
PERTURBATIONS = ("as given", "wrong argument", "missing call", "extra call", "prose")
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


def bfcl_scores(results: dict[str, list[tuple[str, str]]], model: str) -> dict[str, dict[str, Any]]:
    """`bfcl evaluate`'s score header per category for these (id, completion) pairs, decoded
    with registered `model`'s handler."""
    path = [p for p in sys.path if p and Path(p).is_dir()]
    data = {"path": path, "bfcl": str(bfcl_dir()), "model": model, "results": results}
    answer, result = run_exchange(EVALUATE, data, timeout_s=1800)
    if answer is None:
        sys.exit(f"bfcl evaluate did not complete in the sandbox: {result.detail}\n"
                 f"{result.output_tail[-3000:]}")  # fmt: skip
    return answer


def from_run(run: Path) -> tuple[dict[str, list[tuple[str, str]]], dict[str, float]]:
    """The run's completions by category, and its per-category accuracy: its
    bfcl_results.json's, or for an interrupted run the mean of its finished samples' records."""
    results: dict[str, list[tuple[str, str]]] = defaultdict(list)
    scores: dict[str, list[float]] = defaultdict(list)
    for line in (run / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        category = row["task"].removeprefix(PREFIX)
        if row["task"].startswith(PREFIX) and not category.startswith(MULTI_TURN):
            results[category].append((row["sample_id"], row["completions"][0]))
            scores[category].append(row["scores"]["accuracy"])
    document = run / "bfcl_results.json"
    if document.is_file():
        found = json.loads(document.read_text())["categories"]
        return dict(results), {c: f["accuracy"] for c, f in found.items()}
    return dict(results), {c: sum(v) / len(v) for c, v in scores.items()}


def trajectory(record: dict[str, Any], steps: Sequence[Step]) -> list[list[str]] | str:
    """A multi-turn entry's result as `bfcl generate` writes it: per turn, per step, the model's
    text; for an entry whose inference failed (a refused step: its history outgrew the context;
    calls that broke the sandbox) the error string `multi_threaded_inference` records."""
    if record.get("refusal") or record["extracted"][0] == SANDBOX_FAILED:
        why = (record.get("refusal") or {}).get("reason", SANDBOX_FAILED)
        return f"Error during inference: {why}"
    turns: list[list[str]] = []
    for step in steps:
        turns += [[] for _ in range(step.outcome["turn"] + 1 - len(turns))]
        # Handler mode: the handler's reading of the text, which BFCL's result keeps.
        turns[step.outcome["turn"]].append(step.outcome.get("response", step.text))
    return turns


def multi_turn_from_run(run: Path) -> tuple[dict[str, list[tuple[str, Any]]], Verdicts]:
    """The run's multi-turn trajectories by category (from samples.jsonl and steps.jsonl), and
    evalpipe's verdict on each entry."""
    steps = stored_steps(run / STEPS) if (run / STEPS).is_file() else {}
    results: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    verdicts: Verdicts = defaultdict(dict)
    for line in (run / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        category = row["task"].removeprefix(PREFIX)
        if row["task"].startswith(PREFIX) and category.startswith(MULTI_TURN):
            found = steps.get((row["task"], row["sample_id"]), ())
            results[category].append((row["sample_id"], trajectory(row, found)))
            verdicts[category][row["sample_id"]] = row["scores"]["accuracy"] == 1.0
    return dict(results), dict(verdicts)


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
        calls = list(entry["ground_truth"][0])
        kind = self.position[entry["id"]] % len(PERTURBATIONS)
        if PERTURBATIONS[kind] == "wrong argument":
            calls[0] = re.sub(r"=('[^']*'|[0-9.]+)", "='wrong'", calls[0], count=1)
        elif PERTURBATIONS[kind] == "missing call":
            calls = calls[:-1]
        elif PERTURBATIONS[kind] == "extra call":
            calls.append(calls[0])
        elif PERTURBATIONS[kind] == "prose":
            return "I would use the tools for this, but I will not call them now."
        return f"[{', '.join(calls)}]" if calls else DONE


def multi_turn_scripted(limit: int) -> tuple[dict[str, list[tuple[str, Any]]], Verdicts]:
    """The first `limit` entries of MT_SCRIPTED run by PerturbedModel on the fake engine (every
    one after each run of PERTURBATIONS chatty), into a scratch run directory that is
    then read as a --run's."""
    from evalpipe.catalog.preset import load_preset
    from evalpipe.run.runner import RunOptions, run_evaluation

    task = load(MT_SCRIPTED)
    ids = [e["id"] for e in task.entries[:limit]]
    chatty = ids[len(PERTURBATIONS) :: len(PERTURBATIONS) + 1]
    task = subset(task, ids)
    model = PerturbedModel(task.entries, chatty)
    with tempfile.TemporaryDirectory(prefix="bfcl-mt-") as scratch:
        run = Path(scratch) / "run"
        run_evaluation(lambda settings: model, [task], run, preset=load_preset("tiny_random"),
                       options=RunOptions(backend="fake"))  # fmt: skip
        return multi_turn_from_run(run)


def call_text(ground_truth: list[dict[str, Any]], index: int, fc: bool = False) -> str:
    """A completion of the entry's answer calls, in BFCL's prompting format, or with `fc` in
    Qwen's FC format (hermes `<tool_call>` JSON)."""
    if index % 5 == 4:
        return "I would call a function for this, but I am not sure which one."
    calls = []
    for call in ground_truth:
        ((name, arguments),) = call.items()
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


def scripted(
    limit: int | None = None, model: str | None = None
) -> tuple[dict[str, list[tuple[str, str]]], dict[str, float]]:
    """Scripted completions for every entry of SCRIPTED (the first `limit` of each), and
    evalpipe's accuracy on them: prompting mode, or with `model` its registered handler's."""
    import dataclasses

    from evalpipe.catalog.preset import load_preset
    from evalpipe.catalog.taskrefs import expand_refs
    from evalpipe.tasks.bfcl.kind import KIND
    from evalpipe.tasks.kindbase import LoadOptions

    preset = load_preset("tiny_random")
    if model is not None:
        preset = dataclasses.replace(preset, bfcl_mode="handler", bfcl_model=model)
    results, ours = {}, {}
    refs = expand_refs([f"bfcl:{c}" for c in SCRIPTED])
    for task in KIND.load(refs, LoadOptions(preset=preset)).tasks:
        samples = task.samples()[:limit]
        fc = model is not None
        texts = [call_text(s.target["ground_truth"] or [{"get_weather": {"city": ["Paris"]}}],
                           i, fc) for i, s in enumerate(samples)]  # fmt: skip
        scored = task.score_many([(s, [t]) for s, t in zip(samples, texts, strict=True)])
        ours[task.bfcl_category] = sum(x.scores["accuracy"] for x in scored) / len(scored)
        results[task.bfcl_category] = [(s.id, t) for s, t in zip(samples, texts, strict=True)]
    return results, ours


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--run", type=Path, help="a completed evalpipe run of bfcl tasks")
    given.add_argument("--scripted", action="store_true", help="completions from the answers")
    parser.add_argument("--quick", action="store_true", help=f"--scripted on {QUICK} entries each")
    parser.add_argument(
        "--mode",
        choices=("prompting", "handler"),
        default="prompting",
        help="BFCL's mode of the run or the scripted completions (handler: "
        "--model's registered handler; a --run's preset's bfcl_mode)",
    )
    parser.add_argument("--model", default=FC_MODEL,
                        help="--mode handler's registered model (bfcl_model)")  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        print(f"quick mode ({QUICK} scripted entries per category)")
    limit = QUICK if args.quick else None
    handler = args.mode == "handler"
    model = args.model if handler else PROMPTING_CHECKER
    print(f"mode {args.mode}, checker model {model}")
    results, ours = from_run(args.run) if args.run else scripted(limit, model if handler else None)
    # Scripted multi-turn entries: prompting mode; a run's, in its mode.
    mt_results, verdicts = (multi_turn_from_run(args.run) if args.run else ({}, {}) if handler
                            else multi_turn_scripted(len(PERTURBATIONS) + 1 if args.quick
                                                     else MT_ENTRIES))  # fmt: skip
    theirs = bfcl_scores(results, model) if results else {}
    if mt_results:
        theirs |= bfcl_scores(mt_results, model)
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
