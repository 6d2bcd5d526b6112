"""`evalpipe serve`: start vLLM's OpenAI-compatible server for a preset (for `--backend openai`)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from evalpipe.core.options import add_options, positive_int
from evalpipe.planning.helperplacement import USER_SIM
from evalpipe.run.runoptions import LayoutOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", required=True, help="preset name or path to a preset YAML")
    parser.add_argument("--port", type=positive_int, required=True)
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: loopback only)"
    )
    add_options(parser, LayoutOptions, help_values={"layout": "planned"})
    parser.add_argument(
        "--skip-gpus",
        type=positive_int,
        metavar="N",
        help="serve on the visible GPUs after the first N, which another model uses (a job's "
        "user simulator beside its model; docs/planner.md)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the server command; start nothing"
    )


def run(args: argparse.Namespace) -> int:
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.run.localplan import plan_local
    from evalpipe.run.vllmserver import VLLM_SERVER, served_name, server_argv, server_kwargs

    preset = load_preset(args.preset)
    if args.skip_gpus is not None:
        _skip_gpus(args.skip_gpus, gpus=(args.tp or 1) * (args.pp or 1))
    layout = plan_local(
        preset, tp=args.tp, pp=args.pp, replicas=args.replicas, max_model_len=args.max_model_len
    )
    settings = EngineSettings(
        tensor_parallel_size=layout.tp,
        pipeline_parallel_size=layout.pp,
        max_model_len=args.max_model_len,
        distributed_executor_backend=args.distributed_executor_backend,
    )
    kwargs = server_kwargs(preset, settings, layout.replicas)
    argv = [
        sys.executable,
        *VLLM_SERVER,
        *server_argv(kwargs, name=served_name(preset), host=args.host, port=args.port),
    ]
    print(f"evalpipe serve: {shlex.join(argv)}", file=sys.stderr, flush=True)
    if args.dry_run:
        return 0
    # The server takes this process's place: signals sent to it reach vLLM directly.
    os.execv(sys.executable, argv)


def _skip_gpus(skipped: int, *, gpus: int) -> None:
    """Narrow CUDA_VISIBLE_DEVICES to the `gpus` after the first `skipped` visible ones, before
    anything plans or loads (no GPU visible: the CPU engine, nothing to narrow)."""
    from evalpipe.run.judgeprocess import split_gpus
    from evalpipe.run.localplan import visible_gpus

    visible = [g.entry for g in visible_gpus()]
    if visible:
        _, mine = split_gpus(visible, model_gpus=skipped, judge_gpus=gpus, helper=USER_SIM)
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(mine)
