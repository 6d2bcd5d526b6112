"""The endpoint engine against a real vLLM server on the CPU (slow tier): one `evalpipe serve`
of tiny_random for the module, its answers compared with the in-process engine's (modulo
near-ties: the server is another process with its own batches)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from neartie import Decode, assert_near_tie_equal, tokenizer_decode

from evalpipe.catalog.preset import load_preset
from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.records.completion import Generation
from evalpipe.records.sampling import SamplingSettings
from evalpipe.run.vllmserver import free_port, served_name, server_argv, wait_ready
from evalpipe.tasks import load_tasks

pytestmark = pytest.mark.vllm

LIMIT = 8


@pytest.fixture(scope="module")
def server(tiny_random_path: Path, vllm_env: dict, tmp_path_factory: pytest.TempPathFactory):
    """`evalpipe serve --preset tiny_random` on a free loopback port; its base URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}  # the server's own layout
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "evalpipe",
                "serve",
                "--preset",
                "tiny_random",
                "--port",
                f"{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    ready, why = wait_ready(
        base_url, "tiny-random-llama", timeout_s=240, alive=lambda: proc.poll() is None
    )
    if not ready:
        proc.kill()
        pytest.fail(f"vLLM server: {why}\n{log.read_text()[-3000:]}")
    yield base_url
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def endpoint_run(server: str, out: Path, *extra: str) -> list[dict]:
    args = ["run", "--preset", "tiny_random", "--backend", "openai", "--base-url", server]
    args += ["--limit", str(LIMIT), "--out", str(out), "--monitor-interval", "5", *extra]
    assert main(args) == exitcodes.OK
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def prompts_of(task_name: str, records: list[dict]) -> tuple[list, SamplingSettings]:
    [task] = load_tasks(tasks=[task_name])
    by_id = {s.id: s for s in task.samples(LIMIT)}
    return [by_id[r["sample_id"]].prompt for r in records], task.sampling


def assert_equals_in_process(record: dict, generation: Generation, decode: Decode) -> None:
    """The server's answer is the in-process engine's: the same prompt tokens, and completions
    equal modulo near-ties (the server batches in its own process; tests/neartie.py)."""
    assert record["prompt_tokens"] == generation.prompt_tokens
    assert_near_tie_equal(generation, record["completions"], decode, what=record["sample_id"])
    if record["completions"] == list(generation.texts):
        assert record["completion_tokens"] == list(generation.completion_tokens)


def test_greedy_answers_equal_the_in_process_engine(
    server: str, tiny_engine, tiny_random_path: Path, tmp_path: Path
):
    """The same completions, prompt and completion token counts: the server renders
    tiny_random's chat template exactly as the in-process engine does."""
    records = endpoint_run(server, tmp_path / "run", "--tasks", "arithmetic,ordering")
    assert len(records) == 2 * LIMIT
    decode = tokenizer_decode(tiny_random_path)
    for task in ("arithmetic", "ordering"):
        mine = [r for r in records if r["task"] == task]
        prompts, sampling = prompts_of(task, mine)
        expected = tiny_engine.generate(prompts, sampling, top_logprobs=2)
        for record, generation in zip(mine, expected, strict=True):
            assert_equals_in_process(record, generation, decode)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["engine"]["server_models"] == ["tiny-random-llama"]
    assert manifest["engine"]["retries"] == {}


def test_the_completions_api_with_the_template_rendered_here_equals_in_process(
    server: str, tiny_engine, tiny_random_path: Path, tmp_path: Path
):
    """`api: completions` for a chat preset: evalpipe renders the chat template and sends token
    ids; the answers are the in-process engine's."""
    import yaml

    data = yaml.safe_load(Path("configs/presets/tiny_random.yaml").read_text())
    data["endpoint"] = {"api": "completions"}
    preset = tmp_path / "tiny_completions.yaml"
    preset.write_text(yaml.safe_dump(data))
    args = ["run", "--preset", str(preset), "--backend", "openai", "--base-url", server]
    args += ["--tasks", "ordering", "--limit", str(LIMIT), "--out", str(tmp_path / "run")]
    assert main(args) == exitcodes.OK
    lines = (tmp_path / "run" / "samples.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    prompts, sampling = prompts_of("ordering", records)
    expected = tiny_engine.generate(prompts, sampling, top_logprobs=2)
    decode = tokenizer_decode(tiny_random_path)
    for record, generation in zip(records, expected, strict=True):
        assert_equals_in_process(record, generation, decode)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["engine"]["api"] == "completions"


def test_multiple_choice_by_logprobs_equals_the_in_process_engine(
    server: str, tiny_engine, tmp_path: Path
):
    records = endpoint_run(
        server, tmp_path / "run", "--tasks", "ordering", "--mc-method", "logprobs"
    )
    [task] = load_tasks(tasks=["ordering"], mc_method="logprobs")
    samples = {s.id: s for s in task.samples(LIMIT)}
    for record in records:
        sample = samples[record["sample_id"]]
        expected = tiny_engine.loglikelihoods(
            [(sample.prompt, o.continuation) for o in sample.options]
        )
        assert record["option_logprobs"] == pytest.approx([e.logprob for e in expected], abs=1e-3)
        assert record["prompt_tokens"] == expected[0].prompt_tokens


def test_a_prompt_longer_than_the_servers_context_fails_that_sample_only(
    server: str, tmp_path: Path
):
    """vLLM's server answers the 3,000-word question (tests/fixtures/overflow) with HTTP 400;
    the run completes with that sample recorded as a context overflow."""
    task = Path(__file__).parent / "fixtures" / "overflow" / "long_question.yaml"
    records = {
        r["sample_id"]: r for r in endpoint_run(server, tmp_path / "run", "--tasks", str(task))
    }
    refusal = records["1"]["refusal"]
    assert refusal["reason"] == "context_overflow" and refusal["limit"] == 1024
    assert refusal["detail"].startswith("HTTP 400: ")
    # The server counted characters only: the tokens are counted with the preset's tokenizer.
    assert refusal["prompt_tokens"] > 3000
    assert all("refusal" not in records[i] and records[i]["completions"][0] for i in ("0", "2"))


def test_a_wrong_model_name_lists_what_the_server_serves(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    args = ["run", "--preset", "tiny_random", "--backend", "openai", "--base-url", server]
    args += ["--model", "tiny-random", "--tasks", "arithmetic", "--out", str(tmp_path / "run")]
    assert main(args) == exitcodes.ERROR
    assert "it serves: tiny-random-llama" in capsys.readouterr().err


def test_every_field_a_server_would_default_is_sent():
    """vLLM's server fills the sampling fields a request leaves out from generation_config.json:
    the endpoint engine sends every one of them."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from evalpipe.engine.endpoint import sampling_fields

    sent = sampling_fields(SamplingSettings(temperature=0.7))
    defaults = ChatCompletionRequest._DEFAULT_SAMPLING_PARAMS  # a pydantic private attribute
    assert set(getattr(defaults, "default", defaults)) <= set(sent)
    assert {"max_tokens", "seed", "n", "stop"} <= set(sent)


def test_server_arguments_parse_back_to_the_engine_arguments(vllm_env: dict):
    """`vllm serve`'s own parser reads evalpipe's command line back into the same values."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    kwargs = {
        "model": "/models/x",
        "tensor_parallel_size": 2,
        "dtype": "bfloat16",
        "enforce_eager": True,
        "enable_prefix_caching": False,
        "kv_cache_memory_bytes": 16777216,
        "quantization": None,
        "data_parallel_size": 2,
        "limit_mm_per_prompt": {"image": 0},
    }
    argv = server_argv(kwargs, name="m", host="127.0.0.1", port=8000, parser=parser)
    parsed = parser.parse_args(argv)
    assert parsed.served_model_name == ["m"] and parsed.port == 8000
    for key, value in kwargs.items():
        if value is not None:
            assert getattr(parsed, key) == value, key
    assert served_name(load_preset("tiny_random")) == "tiny-random-llama"


def test_serve_dry_run_prints_the_server_command_with_the_engine_arguments(
    tiny_random_path: Path, vllm_env: dict, capsys: pytest.CaptureFixture[str]
):
    assert main(["serve", "--preset", "tiny_random", "--port", "8123", "--dry-run"]) == 0
    command = capsys.readouterr().err
    assert "-m vllm.entrypoints.openai.api_server --served-model-name tiny-random-llama" in command
    assert f"--model {tiny_random_path}" in command and "--port 8123" in command
    # The CPU build's KV cache default and the preset's engine_kwargs, as in-process.
    assert "--kv-cache-memory-bytes 16777216" in command and "--enforce-eager" in command


def test_a_preset_with_a_tool_parser_is_served_with_it(
    tiny_random_path: Path, vllm_env: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server parses tool calls with the preset's parser, as the in-process engine does."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.run.vllmserver import server_kwargs

    tools = dataclasses.replace(load_preset("tiny_random"), tool_parser="hermes")
    parser = make_arg_parser(FlexibleArgumentParser())
    kwargs = server_kwargs(tools, EngineSettings(), 1)
    parsed = parser.parse_args(server_argv(kwargs, name="m", host="h", port=1, parser=parser))
    assert (parsed.enable_auto_tool_choice, parsed.tool_call_parser) == (True, "hermes")
    plain = server_kwargs(load_preset("tiny_random"), EngineSettings(), 1)
    assert "tool_call_parser" not in plain and "enable_auto_tool_choice" not in plain
