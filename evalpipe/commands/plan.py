"""`evalpipe plan`: size a preset on a GPU type: layout, memory per GPU, whether it fits."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from evalpipe.catalog.gpus import Gpu, load_gpus
from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.catalog.selection import Selection
from evalpipe.commands._options import add_results_argument
from evalpipe.core import exitcodes
from evalpipe.core.configio import unknown_name
from evalpipe.core.errors import ConfigError, EvalpipeError
from evalpipe.core.options import add_options, flags_given, from_args, positive_int
from evalpipe.core.textable import format_table
from evalpipe.jobs.taskbudgets import task_model_len
from evalpipe.planning import planner
from evalpipe.planning.helperplacement import Placement
from evalpipe.planning.judgeplacement import choose_placement, plan_judge
from evalpipe.planning.usersimplacement import plan_user_sim
from evalpipe.run.runoptions import LAYOUT, JudgeOptions, LayoutOptions, UserSimOptions

if TYPE_CHECKING:  # loads tasks: imported only with --estimate
    from evalpipe.estimate.cost import Estimate
    from evalpipe.estimate.judgework import PhasesEstimate
    from evalpipe.estimate.usersimwork import UserSimEstimate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", required=True, help="preset name or path to a preset YAML")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--gpu", help="GPU type from configs/gpus.yaml, e.g. a100-40gb")
    target.add_argument(
        "--all-gpus", action="store_true", help="one row per catalogue GPU: which can run it"
    )
    parser.add_argument(
        "--gpus-per-node", type=positive_int, default=8, help="GPUs per node (default 8)"
    )
    add_options(parser, LayoutOptions, groups=(LAYOUT,), help_values={"layout": "auto"})
    parser.add_argument("--max-nodes", type=positive_int, help="most nodes the job may use")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="also predict the run's cost for the tasks: load, generation, scoring and wall "
        "time, GPU-hours, energy (loads the tasks and the model's tokenizer)",
    )
    add_options(parser, Selection)
    parser.add_argument(
        "--shards", type=positive_int, default=1, help="with --estimate: array jobs (default 1)"
    )
    add_results_argument(parser)
    judge = parser.add_argument_group(
        "judge (a judged run: the judge planned on the same GPU type and placed after "
        "generation or side by side; docs/judge.md)"
    )
    add_options(judge, JudgeOptions)
    user_sim = parser.add_argument_group(
        "user simulator (an agent run: the model playing the user, placed in the model's "
        "engine, side by side on the same GPU type or behind a server; docs/planner.md)"
    )
    add_options(user_sim, UserSimOptions)


# Selection flags that size the context from the task files (evalpipe/jobs/taskbudgets.py): a
# plain `plan` takes them too, to lay out a long-context run; the others need --estimate.
CONTEXT_FLAGS = ("--tasks", "--max-tokens", "--mc-method", "--ruler-lengths")


def _model_len(args: argparse.Namespace, preset: Preset) -> int | None:
    """--max-model-len; else, with named tasks, the context their budgets and prompts need, as
    `submit` plans it (evalpipe/jobs/taskbudgets.py)."""
    return task_model_len(preset, from_args(Selection, args), args.max_model_len)


def _plan(
    args: argparse.Namespace,
    preset: Preset,
    gpu: Gpu,
    others: Sequence[Gpu],
) -> planner.Plan:
    return planner.plan(
        preset,
        gpu,
        gpus_per_node=args.gpus_per_node,
        tp=args.tp,
        pp=args.pp,
        max_model_len=_model_len(args, preset),
        max_nodes=args.max_nodes,
        alternatives=others,
        replicas=args.replicas,
    )


def run(args: argparse.Namespace) -> int:
    _check(args)
    preset = load_preset(args.preset)
    gpus = load_gpus()
    if args.all_gpus:
        return _all_gpus(args, preset, gpus)
    if args.gpu not in gpus:
        raise unknown_name("GPU", args.gpu, gpus)
    gpu = gpus[args.gpu]
    result = _plan(args, preset, gpu, list(gpus.values()))
    judged = from_args(JudgeOptions, args)
    judge = _judge_plan(args, judged, gpu) if judged.named else None
    placement = phases = None
    if judged.named:
        wanted = judged.placement or "auto"
        placement = choose_placement(result, judge, gpus_per_node=args.gpus_per_node, wanted=wanted)
    user_sim = _user_sim(args, preset, gpu, result)
    cost = simulated = None
    if args.estimate:
        cost, phases, simulated = _estimate(args, preset, gpu, result, judged, judge, user_sim)
    if args.json:
        extra = {} if cost is None else {"estimate": cost.to_dict()}
        if placement is not None:
            extra["judge"] = None if judge is None else judge.to_dict()
            extra["placement"] = dataclasses.asdict(placement)
        if phases is not None:
            extra["estimate"]["judging"] = phases.to_dict()
        if user_sim is not None:
            layout, where = user_sim
            extra["user_sim"] = {
                "plan": None if layout is None else layout.to_dict(),
                "placement": dataclasses.asdict(where),
            }
        if simulated is not None:
            extra["estimate"]["user_sim"] = simulated.to_dict()
        print(json.dumps(result.to_dict() | extra, indent=2))
    else:
        text = _describe(result)
        if placement is not None:
            text += "\n\n" + _describe_judge(judge, placement, phases is None)
        if user_sim is not None:
            text += "\n\n" + _describe_user_sim(*user_sim)
        if cost is not None:
            text += "\n\n" + cost.describe()
        if phases is not None:
            text += "\n" + phases.describe()
        if simulated is not None:
            text += "\n" + simulated.describe()
        print(text, end="\n")
    if not result.fits:
        print(
            f"evalpipe plan: {preset.name} does not fit on {args.gpu} with TP="
            f"{result.tensor_parallel_size} × PP={result.pipeline_parallel_size}; the notes "
            "list the options.",
            file=sys.stderr,
        )
        return exitcodes.ERROR
    return exitcodes.OK


def _judge_plan(args: argparse.Namespace, judged: JudgeOptions, gpu: Gpu) -> planner.Plan | None:
    """The judge preset's smallest layout on one node of the GPU (None: a server's judge)."""
    if judged.endpoint.base_url is not None or judged.preset is None:
        return None
    return plan_judge(load_preset(judged.preset), gpu, gpus_per_node=args.gpus_per_node)


def _user_sim(
    args: argparse.Namespace, preset: Preset, gpu: Gpu, model: planner.Plan
) -> tuple[planner.Plan | None, Placement] | None:
    """The user simulator's own layout and placement (None: no user simulator named)."""
    asked = from_args(UserSimOptions, args)
    if not asked.named:
        return None
    return plan_user_sim(
        model, preset, asked.preset, served=asked.endpoint.base_url is not None, gpu=gpu,
        gpus_per_node=args.gpus_per_node,
    )  # fmt: skip


def _describe_user_sim(layout: planner.Plan | None, placement: Placement) -> str:
    where = {
        "same-engine": "in the model's engine: none of the job's GPUs of its own",
        "server": "behind a server (--user-sim-base-url): none of the job's GPUs",
    }.get(placement.kind)
    if layout is not None:
        where = (
            f"{layout.preset} ({layout.model}), TP={layout.tensor_parallel_size} × "
            f"PP={layout.pipeline_parallel_size}, {layout.gpus_per_node} GPU(s)"
        )
    return f"user simulator: {where}\nuser-sim placement: {placement.describe()}"


def _describe_judge(judge: planner.Plan | None, placement: Placement, final: bool) -> str:
    where = (
        "behind a server (--judge-base-url): none of the job's GPUs"
        if judge is None
        else f"{judge.preset} ({judge.model}), TP={judge.tensor_parallel_size} × "
        f"PP={judge.pipeline_parallel_size}, {judge.gpus_per_node} GPU(s)"
    )
    lines = [f"judge: {where}"]
    if final:  # with --estimate, the walls decide: the estimate's last line says where
        lines.append(f"placement: {placement.describe()}")
    return "\n".join(lines)


def _estimate(
    args: argparse.Namespace,
    preset: Preset,
    gpu: Gpu,
    plan: planner.Plan,
    judged: JudgeOptions,
    judge: planner.Plan | None,
    user_sim: tuple[planner.Plan | None, Placement] | None,
) -> tuple[Estimate, PhasesEstimate | None, UserSimEstimate | None]:
    """The run's cost; a judged run's phases too when its judge runs on the job's GPUs, and an
    agent run's user simulator's share (in the generation phase when both are there)."""
    from evalpipe.estimate.predict import (
        DEFAULT_RESULTS,
        estimate_phases,
        estimate_user_sim,
        judge_predictor,
        predictor,
        user_sim_predictor,
    )
    from evalpipe.run.judgephase import JUDGE_SAMPLING

    selection = from_args(Selection, args)
    results = args.results or [DEFAULT_RESULTS]
    prediction = predictor(preset, gpu, plan, selection, judge_data=judged.data, results=results,
                           user_sim=user_sim is not None)  # fmt: skip
    cost = prediction.estimate(shards=args.shards)
    share = helper = None
    if user_sim is not None and prediction.agents:
        layout, placement = user_sim
        simulator = None
        if placement.kind != "server":
            other = None if layout is None else load_preset(layout.preset)
            simulator = user_sim_predictor(prediction, other, gpu, layout,
                                           limit=selection.limit, results=results)  # fmt: skip
        helper = (simulator, placement)
        cost, share = estimate_user_sim(prediction, *helper, shards=args.shards)
    if judge is None or not prediction.judged:
        return cost, None, share
    judging = judge_predictor(
        prediction,
        load_preset(judged.preset),
        gpu,
        judge,
        limit=selection.limit,
        max_tokens=judged.max_tokens,
        default_max_tokens=JUDGE_SAMPLING.max_tokens,
        results=results,
    )
    cost, phases = estimate_phases(
        prediction,
        judging,
        gpus_per_node=args.gpus_per_node,
        wanted=judged.placement or "auto",
        shards=args.shards,
        user_sim=helper,
    )
    return cost, phases, share


def _check(args: argparse.Namespace) -> None:
    given = flags_given(from_args(Selection, args))
    chosen = [flag for flag in given if flag not in CONTEXT_FLAGS]
    chosen += [flag for flag, value in (("--results", args.results), ("--shards", args.shards != 1))
               if value]  # fmt: skip
    if chosen and not args.estimate:
        raise ConfigError(f"{', '.join(chosen)} only matter with --estimate; add it.")
    if args.estimate and args.all_gpus:
        raise ConfigError("--estimate needs one --gpu, not --all-gpus.")


def _describe(p: planner.Plan) -> str:
    nodes = f"{p.nodes} node{'s' if p.nodes > 1 else ''} × {p.gpus_per_node} GPU"
    nodes += "s" if p.gpus_per_node > 1 else ""
    weights = p.quantization if p.quantization != "none" else "16-bit"
    rows = [
        ("preset", f"{p.preset} ({p.model})"),
        ("gpu", f"{p.gpu} ({p.gpu_memory_gib:g} GiB)"),
        ("layout", f"TP={p.tensor_parallel_size} × PP={p.pipeline_parallel_size} on {nodes}"),
        ("replicas", f"{p.replicas} (data parallel, {p.total_gpus // p.replicas} GPU(s) each)"),
        ("total GPUs", str(p.total_gpus)),
        ("weights", f"{p.weights_gib:.2f} GiB total ({weights}), {p.weights_per_gpu_gib:.2f}/GPU"),
        ("usable / GPU", f"{p.usable_per_gpu_gib:.2f} GiB"),
        ("overhead / GPU", f"{p.overhead_per_gpu_gib:.2f} GiB"),
        ("KV cache / GPU", f"{p.kv_cache_per_gpu_gib:.2f} GiB"),
        ("KV / token", f"{p.kv_cache_bytes_per_token:,} bytes (whole model)"),
        ("KV / sequence", f"{p.kv_cache_per_seq_gib:.3f} GiB per GPU at {p.max_model_len} tokens"),
        ("full-length seqs", str(p.max_concurrent_seqs)),
        ("fits", "yes" if p.fits else "NO"),
    ]
    text = format_table(("plan", ""), rows)
    if p.notes:
        text += "\n\nnotes:\n" + "\n".join(f"- {note}" for note in p.notes)
    return text


def _all_gpus(args: argparse.Namespace, preset: Preset, gpus: Mapping[str, Gpu]) -> int:
    results: list[dict] = []
    for gpu in (g for g in gpus.values() if g.is_gpu):  # cpu entries are for calibration
        try:
            results.append(_plan(args, preset, gpu, ()).to_dict())
        except EvalpipeError as exc:
            results.append(
                {
                    "gpu": gpu.name,
                    "gpu_memory_gib": gpu.memory_gib,
                    "fits": False,
                    "error": str(exc),
                }
            )
    if args.json:
        print(json.dumps({"preset": preset.name, "model": preset.model, "gpus": results}, indent=2))
        return exitcodes.OK
    header = ("gpu", "GiB", "TP×PP", "replicas", "GPUs", "nodes", "weights/GPU", "KV/GPU", "seqs")
    header = (*header, "fits")
    rows = []
    for r in results:
        if "error" in r:
            rows.append((r["gpu"], f"{r['gpu_memory_gib']:g}", *["-"] * 7, "no"))
            continue
        tight = any(note.startswith("tight") for note in r["notes"])
        rows.append(
            (
                r["gpu"],
                f"{r['gpu_memory_gib']:g}",
                f"{r['tensor_parallel_size']}×{r['pipeline_parallel_size']}",
                r["replicas"],
                r["total_gpus"],
                r["nodes"],
                f"{r['weights_per_gpu_gib']:.1f}",
                f"{r['kv_cache_per_gpu_gib']:.1f}",
                r["max_concurrent_seqs"],
                ("tight" if tight else "yes") if r["fits"] else "no",
            )
        )
    length = _model_len(args, preset) or preset.max_model_len
    print(f"{preset.name} ({preset.model}), max_model_len {length}")
    print(format_table(header, rows))
    return exitcodes.OK
