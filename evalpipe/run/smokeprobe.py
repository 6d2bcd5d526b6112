"""`evalpipe smoke --local`: load a preset on the planned layout, answer a chat and a plain
prompt, read per-device memory, probe throughput, and record it all as a Calibration.

The engine is used only through open_engine and its public generate/describe/close, and the
memory through the Monitor (NVML, or the CPU here; a FakeNvml in tests), so the figures come
from the same code paths as a real run.
"""

from __future__ import annotations

import csv
import importlib
import math
import os
import socket
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalpipe.catalog.preset import Preset
from evalpipe.engine.factory import open_engine
from evalpipe.engine.protocol import Engine, EngineSettings
from evalpipe.estimate.calibration import Calibration, DeviceMemory, Planned, ProbePoint
from evalpipe.planning.memory import GIB, kv_bytes_per_token, kv_bytes_per_token_layer
from evalpipe.planning.planner import Plan
from evalpipe.records.sampling import SamplingSettings
from evalpipe.rundir.layout import RunDir

BATCHES = (1, 4, 16, 64)  # up to a batch that fills a prefill step of the CPU build (4096 tokens)
PROMPT_REPEATS = 12  # ~60 prompt tokens per sequence
# One more probe with up to 8 times the context: what attention over a long context costs per
# step (reasoning and code tasks decode hundreds of tokens past prompts of hundreds), which the
# short probes cannot tell from the per-sequence cost. Fewer repeats where the model's context
# is short; none below twice the short probes' context (the fit could not use it).
LONG_CONTEXT = (16, 8 * PROMPT_REPEATS)  # batch, prompt repeats (~480 tokens)
DECODE_TOKENS = 32
PROBE_TRIES = 2
CHAT_PROMPT = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
PLAIN_PROMPT = "Question: What is 2 + 3? Answer:"
_AFTER_LOAD = "loaded"


def kv_gib_per_token(preset: Preset, plan: Plan) -> float:
    """KV cache of one token on one GPU of the fullest stage, as the planner sizes it (exact:
    the plan's own figures are rounded to MiB)."""
    arch = preset.architecture
    kv_bytes = plan.kv_cache_bytes_per_token / kv_bytes_per_token(arch, 1.0)
    stage_layers = math.ceil(arch.layers / plan.pipeline_parallel_size)
    per_layer = kv_bytes_per_token_layer(arch, kv_bytes, plan.tensor_parallel_size)
    return stage_layers * per_layer / GIB


def planned(preset: Preset, plan: Plan) -> Planned:
    per_token = kv_gib_per_token(preset, plan)
    return Planned(
        weights_gib=plan.weights_per_gpu_gib,
        kv_cache_gib=plan.kv_cache_per_gpu_gib,
        overhead_gib=plan.overhead_per_gpu_gib,
        kv_cache_tokens=int(plan.kv_cache_per_gpu_gib / per_token) if per_token else 0,
    )


def probe_prompts(batch: int, call: str, repeats: int = PROMPT_REPEATS) -> list[str]:
    """`batch` prompts of about `repeats` × 5 tokens for one probe call named `call`. Every
    call's prompts differ from their first token on, from each other and from every other
    call's: vLLM's prefix cache would otherwise turn a prefill into a lookup (the decode call's
    own prefill included, which would hide in its decode time)."""
    text = "the quick brown fox jumps " * repeats
    return [f"{batch}.{repeats}.{call}.{i}: {text}" for i in range(batch)]


def _probe(engine: Engine, batch: int, repeats: int = PROMPT_REPEATS) -> ProbePoint:
    prefill_s = full_s = math.inf
    # The faster of two tries: a burst of other work on a shared node would skew one alone.
    for attempt in range(PROBE_TRIES):
        start = time.perf_counter()
        prompts = probe_prompts(batch, f"p{attempt}", repeats)
        first = engine.generate(prompts, SamplingSettings(max_tokens=1))
        prefill_s = min(prefill_s, time.perf_counter() - start)
        start = time.perf_counter()
        prompts = probe_prompts(batch, f"d{attempt}", repeats)
        full = engine.generate(prompts, SamplingSettings(max_tokens=DECODE_TOKENS))
        full_s = min(full_s, time.perf_counter() - start)
    prompt_tokens = sum(g.prompt_tokens for g in first)
    completion = sum(sum(g.completion_tokens) for g in full)
    decoded = completion - batch  # past the first token of each sequence, which prefill made
    decode_s = full_s - prefill_s
    return ProbePoint(
        batch=batch,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion,
        prefill_tok_s=prompt_tokens / prefill_s if prefill_s > 0 else 0.0,
        decode_tok_s=decoded / decode_s if decoded > 0 and decode_s > 0 else None,
    )


def _long_repeats(short: ProbePoint, max_model_len: int) -> int | None:
    """Prompt repeats for the long-context probe that fit the model's context with its decode
    tokens (the short probe tells the tokens a repeat costs), or None when that is not at least
    twice the short probes' context."""
    per_repeat = short.prompt_tokens / short.batch / PROMPT_REPEATS
    fitting = int((max_model_len - DECODE_TOKENS - 16) / per_repeat)  # 16: the prompt's prefix
    repeats = min(LONG_CONTEXT[1], fitting)
    return repeats if repeats >= 2 * PROMPT_REPEATS else None


def _memory(path: Path, kv_tokens: int | None, per_token_gib: float) -> tuple[DeviceMemory, ...]:
    """Each device's first reading of the run (before the load) and of the `loaded` phase."""
    before: dict[str, dict[str, str]] = {}
    after: dict[str, dict[str, str]] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            before.setdefault(row["device"], row)
            if row["phase"] == _AFTER_LOAD:
                after.setdefault(row["device"], row)

    def number(row: dict[str, str] | None, key: str) -> float | None:
        return float(row[key]) if row and row.get(key) else None

    kv_gib = (kv_tokens or 0) * per_token_gib
    return tuple(
        DeviceMemory(
            device=device,
            total_gib=number(after.get(device), "memory_total_gib"),
            used_before_gib=number(row, "memory_used_gib"),
            used_after_gib=number(after.get(device), "memory_used_gib"),
            kv_cache_gib=kv_gib,
        )
        for device, row in before.items()
    )


def run_smoke(
    preset: Preset,
    plan: Plan,
    *,
    backend: str,
    out: Path,
    settings: EngineSettings,
    nvml: Any | None = None,
    opener: Callable[[str, Preset, EngineSettings], Engine] = open_engine,
) -> Calibration:
    """Load, answer, measure; the Calibration (not yet written). `nvml`: a FakeNvml in tests."""
    from evalpipe.monitor import Monitor

    out.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = {}
    monitor = Monitor(RunDir(out).smoke_metrics, interval_s=5.0, nvml=nvml).start()
    try:
        monitor.set_phase("import")
        start = time.perf_counter()
        if backend == "vllm":
            importlib.import_module("vllm")  # timed apart from the load it precedes
        phases["import"] = time.perf_counter() - start
        monitor.set_phase("load")
        start = time.perf_counter()
        engine = opener(backend, preset, settings)
        phases["load"] = time.perf_counter() - start
        monitor.set_phase(_AFTER_LOAD)
        try:
            start = time.perf_counter()
            engine.generate([PLAIN_PROMPT], SamplingSettings(max_tokens=1))
            phases["first_token"] = time.perf_counter() - start
            plain = engine.generate([PLAIN_PROMPT], SamplingSettings(max_tokens=16))[0]
            answers = {"plain": plain.texts[0]}
            if preset.chat:
                chat = engine.generate([CHAT_PROMPT], SamplingSettings(max_tokens=16))[0]
                answers["chat"] = chat.texts[0]
            monitor.set_phase("probe")
            probe = tuple(_probe(engine, batch) for batch in BATCHES)
            repeats = _long_repeats(probe[0], settings.max_model_len or plan.max_model_len)
            if repeats:
                probe = (*probe, _probe(engine, LONG_CONTEXT[0], repeats))
            described = engine.describe()
        finally:
            engine.close()
    finally:
        monitor.stop()
    kv_tokens = (described.get("resolved") or {}).get("kv_cache_tokens")
    per_token = kv_gib_per_token(preset, plan)
    return Calibration(
        preset=preset.name,
        gpu=plan.gpu,
        tensor_parallel_size=plan.tensor_parallel_size,
        pipeline_parallel_size=plan.pipeline_parallel_size,
        backend=backend,
        host=os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        phases_s={k: round(v, 3) for k, v in phases.items()},
        kv_cache_tokens=kv_tokens,
        planned=planned(preset, plan),
        devices=_memory(RunDir(out).smoke_metrics, kv_tokens, per_token),
        probe=probe,
        answers=answers,
    )
