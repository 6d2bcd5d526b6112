"""`evalpipe serve`: start vLLM's OpenAI-compatible server for a preset (for `--backend openai`)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from evalpipe.core.options import add_options, positive_int
from evalpipe.run.runoptions import LayoutOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", required=True, help="preset name or path to a preset YAML")
    parser.add_argument("--port", type=positive_int, required=True)
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: loopback only)"
    )
    add_options(parser, LayoutOptions, help_values={"layout": "planned"})
    parser.add_argument(
        "--dry-run", action="store_true", help="print the server command; start nothing"
    )


def run(args: argparse.Namespace) -> int:
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.run.localplan import plan_local
    from evalpipe.run.vllmserver import VLLM_SERVER, served_name, server_argv, server_kwargs

    preset = load_preset(args.preset)
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
