"""Throughput of one engine (replica) of a preset × GPU × layout: decode-step and prefill costs
from the GPU catalogue's roofline, or fitted to what `evalpipe smoke` measured (pure; no vLLM).

The constants and their sources are in docs/planner.md, "Estimates".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evalpipe.catalog.gpus import Gpu
from evalpipe.catalog.preset import Architecture, Preset
from evalpipe.core.errors import EstimateError
from evalpipe.estimate.calibration import Calibration
from evalpipe.estimate.stepfit import StepFit
from evalpipe.planning.memory import GIB, max_seqs, vllm_batch_defaults
from evalpipe.planning.planner import Plan


@dataclass(frozen=True, kw_only=True)
class Attention:
    """Attention's FLOPs over one prompt beyond the weights' matmuls: each token's query against
    every earlier key (QKᵀ) and the weighted sum of their values, 2 FLOPs per multiply-add, so
    4 × heads × head_dim per (token, earlier token) pair and layer. Over a prompt of L tokens
    that is 2 × layers × heads × head_dim × L², the count of Kaplan et al. 2020 (Table 1,
    2·n_layer·n_ctx·d_attn per token); it grows with L² where the weights' 2 × params per token
    grow with L (docs/planner.md, "Long contexts")."""

    pair_flops: float  # per pair, summed over the full-attention layers
    window_pair_flops: float = 0.0  # per pair, over the sliding-window layers
    window: int | None = None  # their window: a token pairs with at most that many

    @classmethod
    def of(cls, arch: Architecture) -> Attention:
        per_layer = 4.0 * arch.attention_heads * arch.head_dim
        windowed = arch.sliding_window_layers or 0
        return cls(
            pair_flops=per_layer * (arch.layers - windowed),
            window_pair_flops=per_layer * windowed,
            window=arch.sliding_window,
        )

    def flops(self, tokens: float) -> float:
        """Over one prompt of `tokens` tokens (causal: about tokens² / 2 pairs)."""
        pairs = tokens * tokens / 2
        w = self.window
        windowed = pairs if w is None or tokens <= w else w * tokens - w * w / 2
        return self.pair_flops * pairs + self.window_pair_flops * windowed


@dataclass(frozen=True, kw_only=True)
class Rates:
    """What one engine's work costs.

    A decode step of `b` sequences, each holding `ctx` tokens of context, reads the weights
    (`fixed_s`) and every sequence's KV cache (`ctx_s` per token) and computes `seq_s` per
    sequence. The roofline lets memory traffic and compute overlap (the step takes the larger);
    a fit to measurements adds them, as the measured line does. Prefill costs `prefill_s` per
    prompt token, plus `attention_flop_s` per FLOP of attention over the prompt (`attention`):
    the share that grows with the prompt's square. At most `max_seqs` sequences run at once,
    and `kv_tokens` bound them too.
    """

    fixed_s: float
    seq_s: float
    ctx_s: float
    prefill_s: float
    max_seqs: int
    kv_tokens: float
    overlap: bool
    basis: str  # what the figures come from, for the estimate's "calibrated on" line
    attention: Attention
    attention_flop_s: float

    def prompt_s(self, tokens: float) -> float:
        """The prefill of one prompt of `tokens` tokens."""
        return tokens * self.prefill_s + self.attention.flops(tokens) * self.attention_flop_s

    def batch(self, streams: float, seq_tokens: float) -> float:
        """Sequences decoding together: the scheduler's limit, the KV cache's, the work's."""
        by_kv = self.kv_tokens / seq_tokens if seq_tokens > 0 else self.max_seqs
        return max(1.0, min(float(self.max_seqs), by_kv, streams))

    def step_s(self, batch: float, ctx: float) -> float:
        memory = self.fixed_s + batch * ctx * self.ctx_s
        compute = batch * self.seq_s
        return max(memory, compute) if self.overlap else memory + compute

    def decode_s(self, tokens: float, streams: float, ctx: float, seq_tokens: float) -> float:
        """`tokens` generated over `streams` sequences whose context averages `ctx` tokens and
        peaks at `seq_tokens`, with the batch full for as long as there is work."""
        if tokens <= 0:
            return 0.0
        batch = self.batch(streams, seq_tokens)
        return tokens / batch * self.step_s(batch, ctx)


def _kv(plan: Plan) -> tuple[float, float]:
    """(KV bytes per token on one GPU of the fullest stage, tokens the cache holds)."""
    per_token = plan.kv_cache_per_seq_gib * GIB / plan.max_model_len
    tokens = plan.kv_cache_per_gpu_gib * GIB / per_token if per_token else float("inf")
    return per_token, tokens


def _active_params(preset: Preset) -> float:
    moe = preset.architecture.moe
    return (moe.active_params_b if moe else preset.architecture.params_b) * 1e9


def attention_flop_s(preset: Preset, token_s: float) -> float:
    """Seconds per attention FLOP where a prompt token's weight matmuls (2 × active params
    FLOPs) take `token_s`: attention is taken to run at the same FLOP rate as the matmuls."""
    return token_s / (2 * _active_params(preset))


def peak_tflops(preset: Preset, gpu: Gpu) -> float:
    """The dense tensor-core peak the preset's weights run at on `gpu` (FP8 only where the GPU
    has FP8 tensor cores and the preset is FP8; weight-only FP8 computes in 16-bit)."""
    fp8 = preset.quantization == "fp8" and gpu.fp8_tflops is not None
    peak = gpu.fp8_tflops if fp8 else gpu.bf16_tflops
    if peak is None or not gpu.is_gpu:
        raise EstimateError(
            f"{gpu.name} has no bf16_tflops in the GPU catalogue, so there is no roofline for it. "
            f"Calibrate it with `evalpipe smoke --local --gpu {gpu.name} --preset {preset.name}`, "
            "or add the datasheet's dense "
            "bf16_tflops to its gpus.yaml entry."
        )
    return peak


def roofline(preset: Preset, gpu: Gpu, plan: Plan) -> Rates:
    """The optimistic bound: weights and KV cache read at the GPU's peak bandwidth every decode
    step, prefill at its dense peak FLOPs, every GPU of the replica busy (a full pipeline)."""
    flops = peak_tflops(preset, gpu) * 1e12
    bandwidth = gpu.bandwidth_gbs * 1e9
    gpus = plan.tensor_parallel_size * plan.pipeline_parallel_size
    kv_per_token, kv_tokens = _kv(plan)
    fixed = plan.weights_per_gpu_gib * GIB / bandwidth
    per_token_flops = 2 * _active_params(preset) / (gpus * flops)
    batched = int(preset.engine_kwargs.get("max_num_batched_tokens") or vllm_batch_defaults(gpu)[0])
    return Rates(
        fixed_s=fixed,
        seq_s=per_token_flops,
        ctx_s=kv_per_token / bandwidth,
        # A prefill step of max_num_batched_tokens reads the weights once too.
        prefill_s=max(per_token_flops, fixed / batched),
        max_seqs=max_seqs(preset, gpu),
        kv_tokens=kv_tokens,
        attention=Attention.of(preset.architecture),
        attention_flop_s=attention_flop_s(preset, per_token_flops),
        overlap=True,
        basis=f"roofline of {gpu.name} ({gpu.bandwidth_gbs:g} GB/s, "
        f"{flops / 1e12:g} dense TFLOPS): an optimistic bound",
    )


def per_token(preset: Preset, gpu: Gpu) -> Rates:
    """A rate of one unit per generated token, for a device with no roofline and no smoke
    record: finished jobs of the preset on it (a pilot) scale it to their measured seconds per
    token. Prompts are priced within it: a pilot's mix of prompts and answers is the run's."""
    return Rates(
        fixed_s=0.0,
        seq_s=1.0,
        ctx_s=0.0,
        prefill_s=0.0,
        max_seqs=max_seqs(preset, gpu),
        kv_tokens=float("inf"),
        attention=Attention.of(preset.architecture),
        attention_flop_s=0.0,  # prompts, attention included, are priced within the token's rate
        overlap=False,
        basis=f"seconds per generated token on {gpu.name}, as measured by finished jobs",
    )


def from_steps(
    fit: StepFit, preset: Preset, gpu: Gpu, plan: Plan, end: str = "mid", prefill_s: float = 0.0
) -> Rates:
    """The line fitted to finished jobs' own decode steps (a pilot's) at the estimate's `end`
    (StepFit.line), for a device with no roofline and no smoke record. Prompts cost
    `prefill_s` a token where a pilot's batch probe measured it; else they are priced within
    the line, as in `per_token`: those jobs correct the line by their measured generation,
    prompts included, and their mix of prompts and answers, and of contexts, is the run's."""
    fixed, per_seq = fit.line(end)
    basis = f"the finished jobs' own engine steps on {gpu.name}, {fit.describe()}"
    if prefill_s:
        basis += f"; prompts at {prefill_s * 1e3:.2f} ms a token (the pilot's batch probe)"
    return Rates(
        fixed_s=fixed,
        seq_s=per_seq,
        ctx_s=0.0,
        prefill_s=prefill_s,
        max_seqs=max_seqs(preset, gpu),
        kv_tokens=_kv(plan)[1],
        attention=Attention.of(preset.architecture),
        attention_flop_s=0.0,
        overlap=False,
        basis=basis,
    )


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares intercept and slope of step seconds over batch size, neither negative."""
    if len(points) == 1:
        batch, step = points[0]
        return 0.0, step / batch
    n = len(points)
    mean_b = sum(b for b, _ in points) / n
    mean_t = sum(t for _, t in points) / n
    spread = sum((b - mean_b) ** 2 for b, _ in points)
    slope = sum((b - mean_b) * (t - mean_t) for b, t in points) / spread if spread else 0.0
    slope = max(0.0, slope)
    return max(0.0, mean_t - slope * mean_b), slope


def _fit(cal: Calibration, bandwidth_ctx_s: float) -> tuple[float, float, float]:
    """(fixed_s, seq_s, ctx_s) from the probe's decode steps: step = fixed + b·seq + b·ctx·ctx_s
    where the probes' contexts differ enough to tell the terms apart (a record with the long-
    context probe), else a line over batch size with the KV read at the device's bandwidth."""
    rows = []
    for p in cal.probe:
        if p.decode_tok_s:
            ctx = (p.prompt_tokens + p.completion_tokens / 2) / p.batch  # mean while decoding
            rows.append((float(p.batch), p.batch * ctx, p.batch / p.decode_tok_s, ctx))
    contexts = [ctx for *_, ctx in rows]
    if len(rows) >= 3 and max(contexts) >= 2 * min(contexts):
        import numpy as np  # only with a smoke record: plain `plan` stays light

        terms = np.array([(1.0, b, b_ctx) for b, b_ctx, _, _ in rows])
        steps = np.array([t for _, _, t, _ in rows])
        fixed, per_seq, ctx_s = (float(x) for x in np.linalg.lstsq(terms, steps, rcond=None)[0])
        if min(fixed, per_seq, ctx_s) >= 0:
            return fixed, per_seq, max(ctx_s, bandwidth_ctx_s)
    fixed, per_seq = _line([(b, t) for b, _, t, _ in rows])
    return fixed, per_seq, bandwidth_ctx_s


def from_smoke(cal: Calibration, preset: Preset, gpu: Gpu, plan: Plan) -> Rates:
    """A fit to the smoke probe's decode steps (seconds per step against batch size and, with
    the long-context probe, context) and its best prefill rate."""
    prefill = max((p.prefill_tok_s for p in cal.probe), default=0.0)
    if not any(p.decode_tok_s for p in cal.probe) or prefill <= 0:
        raise EstimateError(
            f"The smoke calibration of {cal.preset} on {cal.gpu} ({cal.host}, {cal.created_at}) "
            "measured no decode or prefill rate; run `evalpipe smoke` again."
        )
    kv_per_token, kv_tokens = _kv(plan)
    fixed, per_seq, ctx_s = _fit(cal, kv_per_token / (gpu.bandwidth_gbs * 1e9))
    return Rates(
        fixed_s=fixed,
        seq_s=per_seq,
        ctx_s=ctx_s,
        prefill_s=1.0 / prefill,
        # The probe's prompts are short: its rate is the matmuls'; attention runs at their rate.
        attention=Attention.of(preset.architecture),
        attention_flop_s=attention_flop_s(preset, 1.0 / prefill),
        max_seqs=max_seqs(preset, gpu),
        # The engine's own capacity where it said (the CPU build sizes it from an environment
        # variable, not from the device's memory).
        kv_tokens=float(cal.kv_cache_tokens) if cal.kv_cache_tokens else kv_tokens,
        overlap=False,
        basis=f"smoke calibration on {cal.host} ({cal.created_at}, {cal.backend})",
    )
