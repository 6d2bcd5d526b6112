"""The planner: memory figures against hand arithmetic, vLLM's layout rules, and the advice."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from evalpipe.catalog import modelconfig
from evalpipe.catalog.gpus import Gpu, get_gpu, load_gpus
from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.core.errors import ConfigError, DoesNotFitError, LayoutError
from evalpipe.planning import parallelism, planner

GIB = 1024**3


def preset(name: str) -> Preset:
    return load_preset(name)


def gpu(name: str) -> Gpu:
    return get_gpu(name)


def plan(name: str, gpu_name: str, **kwargs) -> planner.Plan:
    return planner.plan(preset(name), gpu(gpu_name), read_model_config=False, **kwargs)


def test_llama2_70b_on_four_a100_80gb_matches_hand_arithmetic() -> None:
    p = plan("llama2_70b", "a100-80gb", tp=4, pp=1)
    # Weights: 68.98e9 params × 2 bytes = 137.96e9 B = 128.485 GiB; TP=4 splits all of it
    # (PP=1 keeps both the embedding and the head on every stage): 34.49e9 B = 32.121 GiB.
    assert p.weights_gib == pytest.approx(137.96e9 / GIB, abs=1e-3)
    assert p.weights_per_gpu_gib == pytest.approx(32.121, abs=1e-3)
    # KV per token, whole model: 2 (K,V) × 80 layers × 8 KV heads × 128 dims × 2 bytes = 327,680.
    assert p.kv_cache_bytes_per_token == 327_680
    # Per GPU: 8 KV heads / TP 4 = 2 heads → 2 × 2 × 128 × 2 = 1024 B per layer and token;
    # × 80 layers × 4096 tokens = 335,544,320 B = 0.3125 GiB per full-length sequence.
    assert p.kv_cache_per_seq_gib == pytest.approx(0.3125, abs=1e-3)
    # Overhead: an A100 gets vLLM's 8192-token / 256-sequence defaults.
    # activations 8192 × (6 × 8192 + 3 × 28672 / 4) × 2 B = 1,157,627,904 B
    # logits      2 × 256 × 32000 × 4 B                 =    65,536,000 B
    # fixed       0.25 + 0.5 (NCCL, TP > 1) + 1.0 (CUDA graphs) GiB = 1,879,048,192 B
    overhead = 1_157_627_904 + 65_536_000 + 1_879_048_192
    assert p.overhead_per_gpu_gib == pytest.approx(overhead / GIB, abs=1e-3)  # 2.889
    # Usable 80 × 0.9 = 72 GiB; KV space 72 - 32.121 - 2.889 = 36.990 GiB → 118 sequences.
    assert p.usable_per_gpu_gib == pytest.approx(72.0)
    assert p.kv_cache_per_gpu_gib == pytest.approx(36.990, abs=2e-3)
    assert p.max_concurrent_seqs == 118
    assert (p.nodes, p.gpus_per_node, p.total_gpus, p.fits) == (1, 4, 4, True)


def test_falcon_40b_on_a100_40gb_chooses_tp4() -> None:
    p = plan("falcon_40b", "a100-40gb")
    # TP=2 needs 41.3e9 × 2 / 2 B = 38.46 GiB of weights alone, more than 40 × 0.9 = 36 usable;
    # TP=3 does not divide the 128 heads; TP=4 holds 19.232 GiB of weights per GPU.
    assert (p.tensor_parallel_size, p.pipeline_parallel_size, p.total_gpus) == (4, 1, 4)
    assert p.weights_per_gpu_gib == pytest.approx(41.3e9 * 2 / 4 / GIB, abs=1e-3)
    # Tied embeddings (one 65024 × 8192 matrix): the total is params × 2 bytes = 76.927 GiB.
    assert p.weights_gib == pytest.approx(76.927, abs=1e-3)
    # 2 × 60 layers × 8 KV heads × 64 dims × 2 bytes = 122,880 B per token.
    assert p.kv_cache_bytes_per_token == 122_880
    # activations 8192 × (6 × 8192 + 3 × 32768 / 4) × 2 = 1,207,959,552; logits
    # 2 × 256 × 65024 × 4 = 133,169,152; fixed 1.75 GiB → 2.999 GiB.
    assert p.overhead_per_gpu_gib == pytest.approx(
        (1_207_959_552 + 133_169_152 + 1.75 * GIB) / GIB, abs=1e-3
    )
    # Sequence per GPU: 2 heads × 2 × 64 × 2 B × 60 layers × 2048 = 62,914,560 B; KV space
    # 36 - 19.232 - 2.999 = 13.769 GiB → 234 sequences.
    assert p.max_concurrent_seqs == 234
    assert p.fits


def test_plan_json_reads_back_as_the_same_plan() -> None:
    p = plan("falcon_40b", "a100-40gb")
    assert p.notes  # the tuple that JSON turns into a list
    written = json.loads(json.dumps(p.to_dict()))
    assert planner.Plan.from_dict(written) == p
    # A plan.json from before a field existed reads with its default; an incomplete one is named.
    older = {k: v for k, v in written.items() if k not in ("replicas", "load_peak_per_gpu_gib")}
    assert planner.Plan.from_dict(older) == dataclasses.replace(
        p, replicas=1, load_peak_per_gpu_gib=0.0
    )
    with pytest.raises(ValueError, match="a plan lacks gpu, total_gpus"):
        planner.Plan.from_dict({k: v for k, v in written.items() if k not in ("gpu", "total_gpus")})


def test_deepseek_v2_5_mla_cache_is_the_latent_and_not_split_by_tp() -> None:
    p = plan("deepseek_v2_5", "h200-141gb", tp=8, pp=1)
    # MLA: 60 layers × (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 B = 69,120 B per token
    # (a plain 128-head cache would be 2 × 60 × 128 × 128 × 2 = 3,932,160 B).
    assert p.kv_cache_bytes_per_token == 69_120
    # Every TP rank keeps the whole latent: 69,120 × 8192 = 566,231,040 B = 0.527 GiB per GPU.
    assert p.kv_cache_per_seq_gib == pytest.approx(566_231_040 / GIB, abs=1e-3)
    # MoE: all 235.74e9 parameters are resident: 471.48e9 B / 8 GPUs = 54.887 GiB.
    assert p.weights_per_gpu_gib == pytest.approx(235.74e9 * 2 / 8 / GIB, abs=1e-3)
    # H200 gets 16384 tokens / 1024 sequences; FFN width = 1536 × (6 routed + 2 shared) = 12288:
    # activations 16384 × (6 × 5120 + 3 × 12288 / 8) × 2 = 1,157,627,904;
    # logits 2 × 1024 × 102400 × 4 = 838,860,800; fixed 1.75 GiB → 3.609 GiB.
    assert p.overhead_per_gpu_gib == pytest.approx(
        (1_157_627_904 + 838_860_800 + 1.75 * GIB) / GIB, abs=1e-3
    )
    assert any(n.startswith("MLA:") for n in p.notes)
    assert any(n.startswith("MoE:") for n in p.notes)


def test_gpt_oss_20b_mxfp4_weights_and_sliding_window() -> None:
    p = plan("gpt_oss_20b", "a100-40gb", max_model_len=65536)
    # Embedding + head: 2 × 201088 × 2880 = 1,158,266,880 params in bf16 = 2,316,533,760 B.
    # Experts: 19.12e9 × (4 bits + 8-bit scale / 32) / 8 = 19.12e9 × 0.53125 = 10,157,500,000 B.
    # Rest: 20.91e9 - 1,158,266,880 - 19.12e9 = 631,733,120 params × 2 = 1,263,466,240 B.
    # Sum 13,737,500,000 B = 12.794 GiB: the model card's 12.8 GiB checkpoint.
    assert p.weights_gib == pytest.approx(13_737_500_000 / GIB, abs=1e-3)
    # 24 layers × 2 × 8 KV heads × 64 × 2 B = 49,152 B per token (every layer counted).
    assert p.kv_cache_bytes_per_token == 49_152
    # Per sequence: 12 full layers hold 65536 tokens, 12 window layers hold
    # 128 - 1 + 2 × 8192 in-flight tokens = 16511; 2048 B × (12 × 65536 + 12 × 16511).
    assert p.kv_cache_per_seq_gib == pytest.approx(2048 * (12 * 65536 + 12 * 16511) / GIB, abs=1e-3)
    assert any(n.startswith("sliding window") for n in p.notes)


def test_sliding_window_saves_nothing_while_in_flight_tokens_cover_the_context() -> None:
    p = plan("gpt_oss_20b", "a100-40gb", max_model_len=8192)
    # min(8192, 127 + 16384) = 8192: every layer holds the whole sequence.
    assert p.kv_cache_per_seq_gib == pytest.approx(2048 * 24 * 8192 / GIB, abs=1e-3)


def test_fp8_weights_are_one_byte_plus_block_scales() -> None:
    p = plan("behemoth_r1_123b", "h100-80gb", tp=4, pp=1)
    emb = 32768 * 12288  # one matrix, kept in bf16; untied → two
    body = 122.61e9 - 2 * emb
    expected = body * (1 + 4 / (128 * 128)) + 2 * emb * 2
    assert p.weights_gib == pytest.approx(expected / GIB, abs=1e-3)
    assert p.quantization == "fp8"


def test_pipeline_stage_holds_its_layers_and_one_embedding() -> None:
    p = plan("llama2_70b", "a100-40gb", tp=4, pp=2)
    emb = 32000 * 8192 * 2
    body = 68.98e9 * 2 - 2 * emb
    # Stage of 40 of 80 layers plus one of the two vocab matrices, split over 4 GPUs.
    assert p.weights_per_gpu_gib == pytest.approx((body / 2 + emb) / 4 / GIB, abs=1e-3)
    assert (p.nodes, p.gpus_per_node) == (1, 8)


def test_auto_layout_spans_nodes_with_pipeline_stages() -> None:
    p = plan("falcon_180b", "a100-40gb")
    # 332.6 GiB of weights cannot fit on 8 × 36 usable GiB: two nodes of TP=8, one stage each.
    assert (p.tensor_parallel_size, p.pipeline_parallel_size) == (8, 2)
    assert (p.nodes, p.gpus_per_node, p.total_gpus) == (2, 8, 16)
    assert any("ray" in n for n in p.notes)


def test_gpus_per_node_limits_tp_and_pushes_pp_across_nodes() -> None:
    p = plan("falcon_180b", "h100-80gb", gpus_per_node=4)
    assert p.tensor_parallel_size <= 4
    assert p.nodes == p.pipeline_parallel_size > 1


def test_kv_head_replication_is_noted() -> None:
    p = plan("llama2_70b", "a100-40gb", tp=16, pp=1, gpus_per_node=16)
    assert any("replicated on 2 GPUs" in n for n in p.notes)


# --- rejections --------------------------------------------------------------------------------


def test_tp_that_does_not_divide_heads_lists_valid_sizes() -> None:
    with pytest.raises(LayoutError) as err:
        plan("falcon_180b", "h100-80gb", tp=3)
    msg = str(err.value)
    assert "Tensor parallel size 3 is invalid for falcon_180b" in msg
    assert "does not divide the 232 attention heads" in msg
    assert "Valid TP sizes up to 8 GPUs per node: 1, 2, 4, 8." in msg


def test_tp_incompatible_with_kv_heads_is_refused() -> None:
    with pytest.raises(LayoutError) as err:
        plan("behemoth_r1_123b", "h100-80gb", tp=3)
    msg = str(err.value)
    assert "the 8 KV heads must divide one another" in msg
    assert "Valid TP sizes up to 8 GPUs per node: 1, 2, 4, 8." in msg


def test_tp_beyond_a_node_not_filling_whole_nodes_is_refused_with_alternatives() -> None:
    with pytest.raises(LayoutError) as err:
        plan("llama2_70b", "a100-40gb", tp=16, gpus_per_node=12)
    msg = str(err.value)
    assert "exceeds the 12 GPUs per node without filling whole nodes" in msg
    assert "--tp 24" in msg and "--tp 12 --pp 2" in msg


def test_explicit_tp_across_nodes_is_planned_with_an_interconnect_note() -> None:
    p = plan("llama2_70b", "a100-40gb", tp=16, gpus_per_node=8)
    assert (p.tensor_parallel_size, p.pipeline_parallel_size) == (16, 1)
    assert (p.nodes, p.gpus_per_node, p.total_gpus, p.replicas) == (2, 8, 16, 1)
    assert any(n.startswith("2 nodes: TP groups span nodes") for n in p.notes)
    (note,) = [n for n in p.notes if n.startswith("interconnect:")]
    assert "TP=16 spans 2 nodes of 8 GPUs" in note and "--tp 8 --pp 2" in note
    # What the local SLURM test runs for real: tiny_random with TP=2 over two 1-GPU nodes.
    wide = plan("tiny_random", "h100-80gb", tp=2, gpus_per_node=1)
    assert (wide.nodes, wide.gpus_per_node, wide.total_gpus) == (2, 1, 2)


def test_auto_keeps_tp_inside_a_node() -> None:
    p = plan("llama2_70b", "a100-40gb", gpus_per_node=2)
    assert p.tensor_parallel_size <= 2 and p.nodes > 1
    assert not any(n.startswith("interconnect:") for n in p.notes)


def test_pp_beyond_layers_is_refused() -> None:
    with pytest.raises(LayoutError, match=r"Pipeline parallel size 3 exceeds the 2 layers"):
        plan("tiny_random", "a100-40gb", pp=3)


def test_non_positive_sizes_are_refused() -> None:
    with pytest.raises(LayoutError, match="tensor parallel size must be a positive integer"):
        plan("llama2_70b", "a100-40gb", tp=0)
    with pytest.raises(LayoutError, match="GPUs per node must be a positive integer, got 0"):
        plan("llama2_70b", "a100-40gb", gpus_per_node=0)
    with pytest.raises(LayoutError, match="node limit must be a positive integer"):
        plan("llama2_70b", "a100-40gb", max_nodes=0)


def test_explicit_layout_over_the_node_limit_is_refused() -> None:
    with pytest.raises(LayoutError, match=r"needs 3 nodes, more than the limit of 2"):
        plan("llama2_70b", "a100-40gb", tp=8, pp=3, max_nodes=2)


def test_max_model_len_beyond_trained_context_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        plan("llama2_70b", "a100-80gb", max_model_len=8192)
    assert "max_model_len 8192 is outside 1..4096" in str(err.value)
    assert "configures no rope scaling, so vLLM refuses longer lengths. Plan at most 4096" in str(
        err.value
    )


def test_nothing_fits_says_what_would() -> None:
    catalogue = list(load_gpus().values())
    with pytest.raises(DoesNotFitError) as err:
        planner.plan(
            preset("falcon_180b"),
            gpu("rtx3090-24gb"),
            max_nodes=1,
            alternatives=catalogue,
            read_model_config=False,
        )
    msg = str(err.value)
    assert "falcon_180b does not fit on rtx3090-24gb with 8 GPUs per node, at most 1 node" in msg
    assert "at TP=8 × PP=1 (8 GPUs, 1 node)" in msg
    assert "a larger GPU: a100-80gb (80 GiB) with TP=8 × PP=1" in msg
    assert "more nodes: --max-nodes 3 gives TP=8 × PP=3 (24 GPUs, 3 nodes × 8)" in msg
    assert "fp8 weights via quantization: fp8" in msg
    assert "int4 (AWQ) weights via an int4 AWQ/GPTQ checkpoint" in msg
    assert "saves " in msg and "fits with TP=8 × PP=1" in msg
    # The OOM ladder's weight steps first, in its order: fp8, then bitsandbytes NF4.
    nf4 = msg.index("nf4 (bitsandbytes) weights via quantization: bitsandbytes")
    assert msg.index("fp8 weights via") < nf4 < msg.index("int8 weights via")


def test_cpu_offload_is_offered_and_flagged_slow() -> None:
    with pytest.raises(DoesNotFitError) as err:
        plan("llama3_1_8b", "rtx3090-24gb", max_nodes=1, gpus_per_node=1, max_model_len=65536)
    msg = str(err.value)
    assert "--max-model-len" in msg
    with pytest.raises(DoesNotFitError) as err:
        plan("qwen3_32b", "rtx3090-24gb", max_nodes=1, gpus_per_node=2)
    assert "cpu_offload_gb:" in str(err.value) and "SLOW" in str(err.value)


def test_explicit_layout_that_does_not_fit_returns_advice() -> None:
    p = plan("falcon_40b", "a100-40gb", tp=1, pp=1)
    assert not p.fits
    assert p.max_concurrent_seqs == 0
    assert p.notes[0].startswith("does not fit: at TP=1 × PP=1")
    assert any(n.startswith("option: int4 (AWQ) weights") for n in p.notes)


def test_expert_only_format_needs_expert_params() -> None:
    base = preset("gpt_oss_20b")
    moe = dataclasses.replace(base.architecture.moe, expert_params_b=None)
    broken = dataclasses.replace(base, architecture=dataclasses.replace(base.architecture, moe=moe))
    with pytest.raises(ConfigError, match=r"add it \(from the model card\)"):
        planner.plan(broken, gpu("h100-80gb"), read_model_config=False)


def test_valid_tp_sizes_follow_heads_and_kv_heads() -> None:
    smol = preset("smollm2_135m").architecture  # 9 heads, 3 KV heads
    assert parallelism.valid_tp_sizes(smol, 9) == [1, 3, 9]


# --- config.json cross-check -------------------------------------------------------------------


def write_config(folder: Path, **changes: object) -> Path:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 80,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "intermediate_size": 28672,
        "tie_word_embeddings": False,
        **changes,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_local_model_folder_config_disagreement_is_noted(tmp_path: Path) -> None:
    folder = write_config(tmp_path / "llama", num_key_value_heads=64)
    local = dataclasses.replace(preset("llama2_70b"), model=str(folder))
    p = planner.plan(local, gpu("a100-80gb"))
    assert (
        "config.json disagrees with preset llama2_70b: kv_heads is 64 there, 8 in the preset"
        in "\n".join(p.notes)
    )


def test_matching_config_adds_no_notes(tmp_path: Path) -> None:
    folder = write_config(tmp_path / "llama")
    local = dataclasses.replace(preset("llama2_70b"), model=str(folder))
    assert not [n for n in planner.plan(local, gpu("a100-80gb")).notes if "config.json" in n]


def test_hub_cache_snapshot_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "hub" / "models--meta-llama--Llama-2-70b-chat-hf"
    write_config(repo / "snapshots" / "abc123", num_hidden_layers=81)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    found = modelconfig.find_local(preset("llama2_70b"))
    assert found is not None and found["num_hidden_layers"] == 81
    notes = planner.plan(preset("llama2_70b"), gpu("a100-80gb")).notes
    assert any("layers is 81 there, 80 in the preset" in n for n in notes)


def test_falcon_style_config_facts() -> None:
    raw = {
        "hidden_size": 8192,
        "num_attention_heads": 128,
        "num_kv_heads": 8,
        "num_hidden_layers": 60,
        "new_decoder_architecture": True,
        "vocab_size": 65024,
    }
    assert modelconfig.facts(raw) == {
        "layers": 60,
        "hidden_size": 8192,
        "attention_heads": 128,
        "kv_heads": 8,
        "head_dim": 64,
        "vocab_size": 65024,
    }
    assert modelconfig.disagreements(preset("falcon_40b"), raw) == []


def test_deepseek_v2_5_config_agrees_with_its_preset() -> None:
    """The published DeepSeek-V2.5 config.json (shapes only) raises no disagreement."""
    raw = {
        "architectures": ["DeepseekV2ForCausalLM"],
        "hidden_size": 5120,
        "intermediate_size": 12288,
        "kv_lora_rank": 512,
        "max_position_embeddings": 163840,
        "moe_intermediate_size": 1536,
        "n_routed_experts": 160,
        "n_shared_experts": 2,
        "num_attention_heads": 128,
        "num_experts_per_tok": 6,
        "num_hidden_layers": 60,
        "num_key_value_heads": 128,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "tie_word_embeddings": False,
        "vocab_size": 102400,
    }
    assert modelconfig.disagreements(preset("deepseek_v2_5"), raw) == []
    assert modelconfig.disagreements(preset("deepseek_v2_5"), raw | {"kv_lora_rank": 256}) == [
        "config.json disagrees with preset deepseek_v2_5: kv_lora_rank is 256 there, 512 in the "
        "preset (vLLM uses config.json; fix the preset)"
    ]


def test_gpt_oss_layer_types_count_the_sliding_layers() -> None:
    raw = {
        "num_hidden_layers": 24,
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "experts_per_token": 4,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 12,
        "max_position_embeddings": 131072,
        "vocab_size": 201088,
        "tie_word_embeddings": False,
    }
    assert modelconfig.facts(raw)["sliding_window_layers"] == 12
    assert modelconfig.disagreements(preset("gpt_oss_20b"), raw) == []


def test_llama2_70b_on_h100_tp2_alone_searches_pp_and_only_tp2_pp1_is_tight() -> None:
    # What docs/planner.md says about `--tp 2` for llama2_70b on H100-80GB.
    auto = plan("llama2_70b", "h100-80gb")
    assert (auto.tensor_parallel_size, auto.pipeline_parallel_size) == (4, 1)
    searched = plan("llama2_70b", "h100-80gb", tp=2)
    assert (searched.tensor_parallel_size, searched.pipeline_parallel_size) == (2, 2)
    assert not any(n.startswith("tight") for n in searched.notes)
    forced = plan("llama2_70b", "h100-80gb", tp=2, pp=1)
    assert forced.fits and any(n.startswith("tight") for n in forced.notes)


def test_fp8_on_load_plans_the_bf16_load_peak() -> None:
    # behemoth_r1_123b quantizes its bf16 checkpoint on load: 2 × H100 would hold 57.5 GiB of
    # FP8 weights per GPU, but ~114 GiB of bf16 while loading (vLLM before PR #31914).
    p = plan("behemoth_r1_123b", "h100-80gb")
    assert (p.tensor_parallel_size, p.pipeline_parallel_size) == (4, 1)
    assert p.load_peak_per_gpu_gib == pytest.approx(2 * p.weights_per_gpu_gib, rel=0.02)
    assert any("applied on load" in n for n in p.notes)
    forced = plan("behemoth_r1_123b", "h100-80gb", tp=2, pp=1)
    assert not forced.fits and forced.load_peak_per_gpu_gib > 80
    # A model loaded at its own precision has no separate load peak.
    assert plan("llama2_70b", "h100-80gb").load_peak_per_gpu_gib == 0.0
