"""Model presets: configs/presets/*.yaml → a frozen, validated Preset (architecture, endpoint)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from evalpipe.catalog.configpath import names, resolve
from evalpipe.catalog.lengthprior import LengthPrior, TaskLengthPrior
from evalpipe.core.configio import ENV_NAME, build, check_positive, first_repeat, read_yaml
from evalpipe.core.errors import ConfigError
from evalpipe.core.redact import looks_like_key, redact_url
from evalpipe.records.reasoning import REASONING_PARSERS

DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
Quantization = Literal["none", "fp8", "awq", "gptq", "bitsandbytes", "mxfp4"]
QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)


@dataclass(frozen=True, kw_only=True)
class Moe:
    """Mixture-of-experts facts: every expert's weights are resident, only some are active."""

    experts: int  # routed experts per MoE layer
    experts_per_token: int
    active_params_b: float
    shared_experts: int = 0  # always-on experts (DeepSeek-V2); they are in params_b too
    moe_intermediate_size: int | None = None  # FFN width of one expert
    # Parameters held by the routed experts, billions: what expert-only quantization (gpt-oss
    # MXFP4) shrinks. None when unknown; planning an expert-only format then refuses.
    expert_params_b: float | None = None

    def __post_init__(self) -> None:
        check_positive(
            "architecture.moe",
            experts=self.experts,
            experts_per_token=self.experts_per_token,
            moe_intermediate_size=self.moe_intermediate_size,
        )
        if self.experts_per_token > self.experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) exceeds experts ({self.experts})"
            )


# Rope scaling kinds a preset may configure: vLLM reads YaRN's factor and original length as the
# model cards state them (Qwen3, Qwen2.5). Kinds already in a model's config.json (Llama 3.1's
# "llama3") need no preset block.
RopeType = Literal["yarn"]
ROPE_TYPES: tuple[str, ...] = get_args(RopeType)
# The model-config keys the engine overrides to apply rope scaling (rope_scaling is the name
# before Transformers 5).
ROPE_OVERRIDES = frozenset({"rope_parameters", "rope_scaling", "max_position_embeddings"})


@dataclass(frozen=True, kw_only=True)
class RopeScaling:
    """The rope scaling a model card documents for contexts past the trained one.

    It is not in config.json: the card asks to add it only for long contexts, because static
    scaling degrades short texts, so vLLM gets it (evalpipe/engine/vllm.py) only for a run whose
    max_model_len exceeds max_position_embeddings."""

    rope_type: RopeType = "yarn"  # one of ROPE_TYPES
    factor: float  # the context is stretched this many times
    original_max_position_embeddings: int  # the length the scaling stretches
    # config.json's rope_theta: vLLM replaces the model's rope parameters with this block
    # whole, so the base frequency must be in it (else vLLM's default base, 10000, applies).
    rope_theta: float

    def __post_init__(self) -> None:
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(
                f"rope_type {self.rope_type!r} is not one of {', '.join(ROPE_TYPES)} (scaling "
                "already in the model's config.json needs no rope_scaling block)"
            )
        check_positive(
            "architecture.rope_scaling",
            original_max_position_embeddings=self.original_max_position_embeddings,
        )
        for key in ("factor", "rope_theta"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(
                    f"{key} must be a positive number, got {value!r} (architecture.rope_scaling; "
                    "the model card's value)"
                )
        if self.factor <= 1:
            raise ValueError(
                f"factor must exceed 1 to lengthen the context, got {self.factor!r} "
                "(architecture.rope_scaling; the model card's value, e.g. 4.0)"
            )

    @property
    def max_length(self) -> int:
        """The longest context the scaling reaches: factor × the original length."""
        return int(self.factor * self.original_max_position_embeddings)

    def describe(self) -> str:
        return (
            f"{self.rope_type} factor {self.factor:g} over "
            f"{self.original_max_position_embeddings} tokens"
        )


@dataclass(frozen=True, kw_only=True)
class Architecture:
    """Facts needed for sizing, as in the model's config.json (sources cited in the YAML)."""

    params_b: float
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    # FFN width (dense models; MoE models give moe.moe_intermediate_size): sizes activations.
    intermediate_size: int | None = None
    # The output projection shares the input embedding's matrix (stored once).
    tie_word_embeddings: bool = False
    # MLA (DeepSeek-V2/V3) caches one compressed latent per token and layer instead of K and V.
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    # Sliding-window attention: `sliding_window_layers` of the layers only keep that many tokens.
    sliding_window: int | None = None
    sliding_window_layers: int | None = None
    moe: Moe | None = None
    # The model card's rope scaling (YaRN) past max_position_embeddings; None: the model runs at
    # most max_position_embeddings tokens.
    rope_scaling: RopeScaling | None = None

    def __post_init__(self) -> None:
        check_positive(
            "architecture",
            layers=self.layers,
            hidden_size=self.hidden_size,
            attention_heads=self.attention_heads,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            vocab_size=self.vocab_size,
            max_position_embeddings=self.max_position_embeddings,
            intermediate_size=self.intermediate_size,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            sliding_window=self.sliding_window,
            sliding_window_layers=self.sliding_window_layers,
        )
        if self.params_b <= 0:
            raise ValueError(f"params_b must be positive, got {self.params_b!r}")
        if self.attention_heads % self.kv_heads:
            raise ValueError(
                f"attention_heads ({self.attention_heads}) must be a multiple of "
                f"kv_heads ({self.kv_heads})"
            )
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise ValueError("MLA needs both kv_lora_rank and qk_rope_head_dim, or neither")
        if (self.sliding_window is None) != (self.sliding_window_layers is None):
            raise ValueError("sliding_window and sliding_window_layers go together")
        if self.sliding_window_layers is not None and self.sliding_window_layers > self.layers:
            raise ValueError(
                f"sliding_window_layers ({self.sliding_window_layers}) exceeds "
                f"layers ({self.layers})"
            )
        scaling = self.rope_scaling
        if scaling is not None and scaling.original_max_position_embeddings > (
            self.max_position_embeddings
        ):
            raise ValueError(
                f"rope_scaling.original_max_position_embeddings "
                f"({scaling.original_max_position_embeddings}) exceeds max_position_embeddings "
                f"({self.max_position_embeddings}): the scaling stretches the trained length, "
                "which config.json states; check both against the model card"
            )
        if scaling is not None and scaling.max_length <= self.max_position_embeddings:
            raise ValueError(
                f"rope_scaling reaches {scaling.max_length} tokens (factor {scaling.factor:g} × "
                f"{scaling.original_max_position_embeddings}), no more than "
                f"max_position_embeddings ({self.max_position_embeddings}): it would never be "
                "used; drop the block or take the card's factor"
            )

    @property
    def native_context(self) -> int:
        """The longest context without rope scaling: what the model runs as config.json has it."""
        return self.max_position_embeddings

    @property
    def context_ceiling(self) -> int:
        """The longest context the model can have: the rope-scaled length where the preset
        configures scaling, else max_position_embeddings."""
        if self.rope_scaling is None:
            return self.max_position_embeddings
        return self.rope_scaling.max_length

    def ceiling_text(self) -> str:
        """The ceiling and where it comes from, for notes and refusals."""
        if self.rope_scaling is None:
            return f"max_position_embeddings {self.max_position_embeddings}"
        return f"{self.context_ceiling} with rope scaling ({self.rope_scaling.describe()})"


EndpointApi = Literal["chat", "completions"]
# How BFCL tasks prompt the model and read its calls (docs/bfcl.md "Modes"): BFCL's generic
# prompting handler, the model family's registered BFCL handler (bfcl_model names it), or
# chat tools through the engine and the preset's tool_parser.
BfclMode = Literal["prompting", "handler", "native"]
BFCL_MODES: tuple[str, ...] = get_args(BfclMode)
ENDPOINT_APIS: tuple[str, ...] = get_args(EndpointApi)
# No user:password@, no ?query and no key-like path segment: a key there would reach the
# manifest, the job script and the logs. Refusals quote the URL redacted, never whole.
_BASE_URL = re.compile(r"https?://[^/@\s?#]+(/[^\s?#]*)?")
_KEY_ADVICE = "put the key in an environment variable and name that variable with api_key_env"


def check_base_url(url: str) -> None:
    """ValueError for a base URL that is not plain http(s) or may carry a key (quoted redacted)."""
    if not _BASE_URL.fullmatch(url):
        raise ValueError(
            f"base_url {redact_url(url)!r} (secrets shown as ***) is not an http(s) URL such as "
            "http://127.0.0.1:8000/v1 (credentials and query strings in the URL are refused: "
            f"{_KEY_ADVICE})"
        )
    if any(looks_like_key(segment) for segment in url.split("://", 1)[1].split("/")[1:]):
        raise ValueError(
            f"base_url {redact_url(url)!r} has a path segment that looks like a key (shown as "
            "***: a key prefix such as sk- or hf_, or a run of 20+ letters and digits); "
            f"{_KEY_ADVICE}"
        )


def check_api_key_env(name: str) -> None:
    """ValueError, never quoting `name`, unless it is a variable name that is not key-like."""
    if ENV_NAME.fullmatch(name) and not looks_like_key(name):
        return
    # The value is not shown: what is given here instead of a name is often the key itself.
    why = (
        "looks like a key rather than the name of an environment variable"
        if looks_like_key(name)
        else "is not an environment variable name (letters, digits and underscores)"
    )
    raise ValueError(
        f"api_key_env (a value of {len(name)} characters, not shown) {why}; give the name of "
        "the variable that holds the key (e.g. OPENAI_API_KEY), not the key"
    )


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """An OpenAI-compatible server that serves the preset's model (`--backend openai`).

    The preset still names the model, the chat mode, the tokenizer and the context length; this
    block says where the model is served and how hard to push it. `evalpipe run --base-url
    --model --api-key-env --concurrency` override it."""

    base_url: str | None = None  # e.g. http://127.0.0.1:8000/v1; None: --base-url gives it
    model: str | None = None  # the name the server serves it under; None: the preset's `model`
    api: EndpointApi | None = None  # None: chat for chat presets, completions otherwise
    # The environment variable that holds the API key; the key itself is never stored.
    api_key_env: str | None = None
    concurrency: int = 32  # requests in flight at once
    timeout_s: float = 600.0  # one attempt at one request, start to last byte
    max_retries: int = 5  # further attempts after 429, 5xx, timeouts and dropped connections
    backoff_s: float = 1.0  # the first retry's delay; doubles per retry, with jitter
    backoff_max_s: float = 60.0  # the longest delay between two attempts

    def __post_init__(self) -> None:
        if self.base_url is not None:
            check_base_url(self.base_url)
        if self.api is not None and self.api not in ENDPOINT_APIS:
            raise ValueError(f"api {self.api!r} is not one of {', '.join(ENDPOINT_APIS)}")
        if self.api_key_env is not None:
            check_api_key_env(self.api_key_env)
        check_positive("endpoint", concurrency=self.concurrency)
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {self.max_retries!r}")
        for key in ("timeout_s", "backoff_s", "backoff_max_s"):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{key} must be a positive number of seconds, got {value!r}")

    def api_for(self, chat: bool) -> EndpointApi:
        """The API generation goes through for a preset with this chat mode."""
        return self.api or ("chat" if chat else "completions")


# Whose sampling settings a task runs with: the task file's, or the model's
# generation_config.json (evalpipe/tasks/generation.py; docs/tasks.md).
GENERATION_CONFIG_RULES = ("task", "model")


@dataclass(frozen=True, kw_only=True)
class Preset:
    """One model and how to serve it."""

    name: str
    model: str  # Hugging Face id or local path
    description: str = ""
    revision: str | None = None
    chat: bool = True  # prompts go through the tokenizer's chat template
    architecture: Architecture
    dtype: str = "bfloat16"
    quantization: Quantization = "none"
    kv_cache_dtype: str = "auto"
    tensor_parallel: int | Literal["auto"] = "auto"
    pipeline_parallel: int | Literal["auto"] = "auto"
    max_model_len: int
    gpu_memory_utilization: float = 0.9
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    categories: tuple[str, ...] = ("reasoning", "math", "coding")
    # Name of a recipe that builds the weights locally (`evalpipe models prepare`), for
    # machines without a model hub.
    prepare: str | None = None
    seed: int = 0
    generation_config: str = "task"  # one of GENERATION_CONFIG_RULES; a task may override it
    reasoning_parser: str | None = None  # one of REASONING_PARSERS, for reasoning models
    # vLLM's tool-call parser for the model (as `vllm serve --tool-call-parser`), which reads the
    # calls of requests with tools; checked against vLLM's registry when the engine opens.
    tool_parser: str | None = None
    bfcl_mode: BfclMode = "prompting"  # one of BFCL_MODES
    # bfcl_mode handler: the model BFCL registers (as `bfcl generate --model`), e.g.
    # Qwen/Qwen3-8B-FC, whose handler formats the prompts and decodes the answers.
    bfcl_model: str | None = None
    # Extra keyword arguments for the tokenizer's chat template, e.g. {enable_thinking: false}.
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    endpoint: Endpoint = field(default_factory=Endpoint)  # where `--backend openai` finds it
    # Published mean answer lengths of this model per task, with their sources: the estimate's
    # prior where nothing was run (before a task file's own length_prior).
    length_priors: tuple[TaskLengthPrior, ...] = ()

    def __post_init__(self) -> None:
        if (twice := first_repeat(p.task for p in self.length_priors)) is not None:
            raise ValueError(f"length_priors names task {twice!r} twice; keep one figure per task")
        if self.generation_config not in GENERATION_CONFIG_RULES:
            raise ValueError(
                f"generation_config {self.generation_config!r} is not one of "
                f"{', '.join(GENERATION_CONFIG_RULES)}"
            )
        if self.reasoning_parser is not None and self.reasoning_parser not in REASONING_PARSERS:
            raise ValueError(
                f"reasoning_parser {self.reasoning_parser!r} is not one of "
                f"{', '.join(REASONING_PARSERS)}"
            )
        if self.tool_parser is not None and (
            not isinstance(self.tool_parser, str) or not self.tool_parser
        ):
            raise ValueError(
                f"tool_parser must name one of vLLM's tool-call parsers, got {self.tool_parser!r}"
            )
        if self.bfcl_mode not in BFCL_MODES:
            raise ValueError(f"bfcl_mode {self.bfcl_mode!r} is not one of {', '.join(BFCL_MODES)}")
        if (self.bfcl_mode == "handler") != (self.bfcl_model is not None):
            raise ValueError(
                f"bfcl_model {self.bfcl_model!r} with bfcl_mode {self.bfcl_mode!r}: the handler "
                "mode needs bfcl_model (a model BFCL registers, e.g. Qwen/Qwen3-8B-FC) and the "
                "other modes take none; set both or neither"
            )
        if not isinstance(self.chat_template_kwargs, dict) or not all(
            isinstance(k, str) for k in self.chat_template_kwargs
        ):
            raise ValueError("chat_template_kwargs must map names to values")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
        if self.quantization not in QUANTIZATIONS:
            raise ValueError(
                f"quantization {self.quantization!r} is not one of {', '.join(QUANTIZATIONS)}"
            )
        for key in ("tensor_parallel", "pipeline_parallel"):
            value = getattr(self, key)
            if value != "auto" and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"{key} must be 'auto' or a positive integer, got {value!r}")
        check_positive("preset", max_model_len=self.max_model_len)
        overrides = self.engine_kwargs.get("hf_overrides")
        clash = ROPE_OVERRIDES & set(overrides) if isinstance(overrides, dict) else set()
        if self.architecture.rope_scaling is not None and clash:
            raise ValueError(
                f"engine_kwargs.hf_overrides sets {', '.join(sorted(clash))} and "
                "architecture.rope_scaling is given: evalpipe passes the scaling to vLLM itself "
                "(only for runs past max_position_embeddings); drop those keys"
            )
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}"
            )

    def length_prior(self, task: str) -> LengthPrior | None:
        """The model's published mean answer length on `task`, where the preset records one."""
        return next((p for p in self.length_priors if p.task == task), None)


def with_endpoint(preset: Preset, **overrides: Any) -> Preset:
    """`preset` with the given endpoint fields replaced (None keeps the preset's own), checked
    by the Endpoint record like the YAML block."""
    given = {key: value for key, value in overrides.items() if value is not None}
    if not given:
        return preset
    try:
        endpoint = dataclasses.replace(preset.endpoint, **given)
    except ValueError as exc:
        raise ConfigError(f"Preset {preset.name!r}, endpoint: {exc}.") from None
    return dataclasses.replace(preset, endpoint=endpoint)


def preset_names() -> list[str]:
    return names("presets")


def load_preset(name_or_path: str) -> Preset:
    """A preset by registry name or YAML path; the file's stem is its name."""
    name, path = resolve("preset", "presets", name_or_path)
    data = read_yaml(path)
    data.setdefault("name", name)
    return build(Preset, data, str(path))
