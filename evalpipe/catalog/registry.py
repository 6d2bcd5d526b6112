"""Presets, GPUs and clusters: YAML files in configs/ → frozen, validated dataclasses."""

from __future__ import annotations

import dataclasses
import importlib.resources
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from evalpipe.core.configio import build, read_yaml, unknown_name
from evalpipe.core.errors import ConfigError

DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
Quantization = Literal["none", "fp8", "awq", "gptq", "bitsandbytes", "mxfp4"]
QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# User folders of presets, clusters, tasks and GPUs, searched before the shipped configs/.
CONFIG_PATH = "EVALPIPE_CONFIG_PATH"


def shipped_dir(name: str) -> Path:
    """A data folder that ships with evalpipe ("configs", "slurm_templates").

    An installed wheel holds it inside the package (pyproject.toml maps the repository's
    top-level folders there); a source checkout (editable install, PYTHONPATH) has it beside the
    package, at the repository's top level.
    """
    packaged = importlib.resources.files("evalpipe") / name
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / name


def config_dir() -> Path:
    """The shipped configs/ folder, or $EVALPIPE_CONFIG_DIR, which replaces it."""
    env = os.environ.get("EVALPIPE_CONFIG_DIR")
    return Path(env) if env else shipped_dir("configs")


def config_dirs() -> list[Path]:
    """Where presets, clusters, tasks and GPUs are looked up, first match first.

    The folders in $EVALPIPE_CONFIG_PATH (separated by ':' like PATH, each laid out like
    configs/), then config_dir(). A listed folder that does not exist is an error: a typo there
    would otherwise fall back to the shipped files without a word.
    """
    user = [Path(p).expanduser() for p in os.environ.get(CONFIG_PATH, "").split(os.pathsep) if p]
    for folder in user:
        if not folder.is_dir():
            raise ConfigError(
                f"{CONFIG_PATH} names {str(folder)!r}, which is not a folder; create it or "
                "remove it from the setting."
            )
    return [*user, config_dir()]


def find_file(folder: str, name: str) -> Path | None:
    """configs/<folder>/<name>.yaml from the first search folder that has it."""
    for root in config_dirs():
        path = root / folder / f"{name}.yaml"
        if path.is_file():
            return path
    return None


def is_path(name_or_path: str) -> bool:
    """Whether a --preset/--cluster value names a YAML file rather than a registry entry."""
    return name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path


def given_file(kind: str, name_or_path: str) -> Path | None:
    """The file a --preset/--cluster/--tasks value names, or None for a registry name."""
    if not is_path(name_or_path):
        return None
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise ConfigError(f"{kind.capitalize()} file {str(path)!r} does not exist.")
    return path


def _resolve(kind: str, folder: str, name_or_path: str) -> tuple[str, Path]:
    """(name, file) for a registry name or a path to a YAML file of the same schema."""
    given = given_file(kind, name_or_path)
    if given is not None:
        return given.stem, given
    path = find_file(folder, name_or_path)
    if path is None:
        raise unknown_name(kind, name_or_path, names(folder))
    return name_or_path, path


def names(folder: str) -> list[str]:
    """Names of the YAML files in <folder>/ of every search folder, sorted."""
    return sorted({p.stem for root in config_dirs() for p in (root / folder).glob("*.yaml")})


def _positive(where: str, **values: int | None) -> None:
    for key, value in values.items():
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise ValueError(f"{key} must be a positive integer, got {value!r} ({where})")


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
        _positive(
            "architecture.moe",
            experts=self.experts,
            experts_per_token=self.experts_per_token,
            moe_intermediate_size=self.moe_intermediate_size,
        )
        if self.experts_per_token > self.experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) exceeds experts ({self.experts})"
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

    def __post_init__(self) -> None:
        _positive(
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


EndpointApi = Literal["chat", "completions"]
ENDPOINT_APIS: tuple[str, ...] = get_args(EndpointApi)
# No user:password@ and no ?query: a key there would reach the manifest and the logs.
_BASE_URL = re.compile(r"https?://[^/@\s?#]+(/[^\s?#]*)?")


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
        if self.base_url is not None and not _BASE_URL.fullmatch(self.base_url):
            raise ValueError(
                f"base_url {self.base_url!r} is not an http(s) URL such as "
                "http://127.0.0.1:8000/v1 (credentials and query strings in the URL are "
                "refused: name the variable that holds the key with api_key_env)"
            )
        if self.api is not None and self.api not in ENDPOINT_APIS:
            raise ValueError(f"api {self.api!r} is not one of {', '.join(ENDPOINT_APIS)}")
        if self.api_key_env is not None and not _ENV_NAME.fullmatch(self.api_key_env):
            raise ValueError(
                f"api_key_env {self.api_key_env!r} is not an environment variable name; give "
                "the name of the variable that holds the key, not the key"
            )
        _positive("endpoint", concurrency=self.concurrency)
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
# How a model's completions separate reasoning from the answer (evalpipe/tasks/reasoning.py).
REASONING_PARSERS = ("qwen3", "deepseek_r1", "gpt_oss")


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
    # Extra keyword arguments for the tokenizer's chat template, e.g. {enable_thinking: false}.
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    endpoint: Endpoint = field(default_factory=Endpoint)  # where `--backend openai` finds it

    def __post_init__(self) -> None:
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
        _positive("preset", max_model_len=self.max_model_len)
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}"
            )


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
    name, path = _resolve("preset", "presets", name_or_path)
    data = read_yaml(path)
    data.setdefault("name", name)
    return build(Preset, data, str(path))


DeviceKind = Literal["gpu", "cpu"]
DEVICE_KINDS: tuple[str, ...] = get_args(DeviceKind)


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """One GPU model as the driver reports it (or, kind cpu, a host running the CPU engine)."""

    name: str
    memory_gib: float  # total memory as nvidia-smi / NVML reports it, GiB
    bandwidth_gbs: float  # peak memory bandwidth, GB/s
    fp8: bool  # native FP8 tensor cores (Hopper, Ada, Blackwell)
    # The name NVML / nvidia-smi / torch report ("NVIDIA A100-SXM4-80GB"): vLLM picks some
    # defaults from it, and the monitor can match a live device to this entry.
    device_name: str = ""
    description: str = ""
    # Dense tensor-core peaks and the board power limit: the estimate's roofline and energy
    # (evalpipe/estimate/throughput.py). None: unknown, so only a calibrated estimate is possible.
    bf16_tflops: float | None = None
    fp8_tflops: float | None = None
    power_w: float | None = None
    # cpu: a host for the CPU engine, there to be calibrated; never offered as a larger GPU.
    kind: DeviceKind = "gpu"

    def __post_init__(self) -> None:
        if self.memory_gib <= 0 or self.bandwidth_gbs <= 0:
            raise ValueError(
                f"memory_gib and bandwidth_gbs must be positive, got {self.memory_gib!r} "
                f"and {self.bandwidth_gbs!r}"
            )
        for key in ("bf16_tflops", "fp8_tflops", "power_w"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not value > 0):
                raise ValueError(f"{key} must be a positive number or left out, got {value!r}")
        if self.fp8_tflops is not None and not self.fp8:
            raise ValueError("fp8_tflops needs fp8: true (FP8 tensor cores)")
        if self.kind not in DEVICE_KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {', '.join(DEVICE_KINDS)}")

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"


def load_gpus() -> dict[str, Gpu]:
    """The GPU catalogue keyed by name: the shipped gpus.yaml plus every search folder's.

    A user folder's entry is added, or replaces the shipped entry of the same name whole (the
    first folder in $EVALPIPE_CONFIG_PATH wins).
    """
    gpus: dict[str, Gpu] = {}
    for root in reversed(config_dirs()):
        path = root / "gpus.yaml"
        if root != config_dir() and not path.is_file():
            continue
        for name, spec in read_yaml(path).items():
            gpus[name] = build(Gpu, {"name": name, **(spec or {})}, f"{path}:{name}")
    return gpus


def get_gpu(name: str) -> Gpu:
    gpus = load_gpus()
    if name not in gpus:
        raise unknown_name("GPU", name, gpus)
    return gpus[name]


# ---- Clusters: one SLURM site each (configs/clusters/*.yaml) ----

GpuRequest = Literal["gres", "gpus-per-node"]
GPU_REQUESTS: tuple[str, ...] = get_args(GpuRequest)
# Experiment trackers a run can log to (`--track`, a cluster's `track:`).
Tracker = Literal["wandb", "mlflow"]
TRACKERS: tuple[str, ...] = get_args(Tracker)
# Partition, account, QOS and GRES names go into #SBATCH lines: plain SLURM names only.
_SLURM_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
# SLURM's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
_SLURM_TIME = re.compile(r"(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)")
MAX_SIGNAL_SECONDS = 65535  # SLURM's upper bound for --signal=...@SECONDS


def check_signal_seconds(value: object) -> None:
    """The preemption warning a profile or a submission asks for (ValueError if SLURM would not)."""
    if not isinstance(value, int) or not 0 <= value <= MAX_SIGNAL_SECONDS:
        raise ValueError(f"signal_seconds must be within 0..{MAX_SIGNAL_SECONDS}, got {value!r}")


def check_max_restarts(value: object) -> None:
    """Requeues allowed after a checkpointed stop (ValueError if not a count)."""
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"max_restarts must be 0 or more, got {value!r}")


def slurm_minutes(text: str) -> int:
    """Whole minutes in a SLURM time string ("90", "04:00:00", "1-12"); seconds round up."""
    m = _SLURM_TIME.fullmatch(str(text).strip())
    if not m:
        raise ValueError(
            f"time {text!r} is not a SLURM time (MM, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)"
        )
    days, dh, dm, ds, a, b, c = (int(g) if g else 0 for g in m.groups())
    if m.group(1) is not None:
        seconds = ((days * 24 + dh) * 60 + dm) * 60 + ds
    elif m.group(7) is not None:
        seconds = (a * 60 + b) * 60 + c
    else:
        seconds = a * 60 + b
    return -(-seconds // 60)


def _one_line(where: str, key: str, values: tuple[str, ...]) -> None:
    for value in values:
        if not isinstance(value, str) or "\n" in value or "\r" in value:
            raise ValueError(f"each {key} entry must be one line of text, got {value!r} ({where})")


@dataclass(frozen=True, kw_only=True)
class RaySettings:
    """The Ray cluster a multi-node job starts inside its allocation.

    Node i (0 = head) takes ports from `node_port_base + i * node_port_stride` upwards, so
    several nodes can share one host (the local test cluster) without colliding.
    """

    port: int = 6379  # the head's GCS port
    node_port_base: int = 20000
    node_port_stride: int = 1000
    object_store_gib: float | None = None  # None: Ray's default (30% of the node's memory)

    def __post_init__(self) -> None:
        _positive(
            "ray",
            port=self.port,
            node_port_base=self.node_port_base,
            node_port_stride=self.node_port_stride,
        )
        if self.object_store_gib is not None and self.object_store_gib < 0.08:
            raise ValueError(
                f"object_store_gib must be at least 0.08 (Ray's minimum), "
                f"got {self.object_store_gib}"
            )
        if self.node_port_stride < 200:
            raise ValueError(f"node_port_stride must be at least 200, got {self.node_port_stride}")


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Facts about one SLURM site: where jobs go, what a node has, how to set up a job."""

    name: str
    description: str = ""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    gpu: str  # a name from configs/gpus.yaml
    gres_name: str | None = None  # SLURM's type for that GPU (gpu:TYPE:N); None: untyped
    gpu_request: GpuRequest = "gres"  # "gres": --gres=gpu:TYPE:N, or --gpus-per-node=N
    gpus_per_node: int
    cpus_per_node: int
    memory_per_node_gib: int  # what a job may request per node, not the physical total
    max_nodes: int = 1
    time_limit: str = "04:00:00"  # default --time
    max_time: str | None = None  # the partition's limit; longer requests are refused up front
    signal_seconds: int = 300  # preemption warning: SIGUSR1 this long before the time limit
    max_restarts: int = 3  # requeues after a checkpointed stop
    # Copies of a model that fits in fewer GPUs than a node has, side by side in one job (data
    # parallel); None fills the node (gpus_per_node // (TP × PP)). `evalpipe render` and the
    # run inside the job both take it from here unless --replicas is given.
    replicas: int | None = None
    test_only: bool = True  # the site allows `sbatch --test-only`
    # The command that runs Python in a job (a path, or a container wrapper ending in python).
    python: str = "python3"
    # Shell lines run first in every job (module load, venv activation). The only field that
    # is shell code by design: it comes from the site's own profile, like a login script.
    setup: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # exported, values quoted literally
    cache_dir: str | None = None  # EVALPIPE_CACHE: prepared model weights
    hf_cache: str | None = None  # HF_HOME
    scratch_dir: str | None = None  # TMPDIR (Ray's temp dirs go there)
    sbatch_extra: tuple[str, ...] = ()  # further options, e.g. "--constraint=h100"
    # GiB added to the planner's runtime overhead per GPU: what `evalpipe smoke` measured here
    # beyond the plan (negative when the plan was generous).
    overhead_correction_gib: float = 0.0
    ray: RaySettings = field(default_factory=RaySettings)
    # The tracker every job on this site logs to unless --track says otherwise; None: none.
    track: Tracker | None = None

    def __post_init__(self) -> None:
        where = f"cluster {self.name}"
        if self.track is not None and self.track not in TRACKERS:
            raise ValueError(f"track {self.track!r} is not one of {', '.join(TRACKERS)}")
        _positive(
            where,
            gpus_per_node=self.gpus_per_node,
            cpus_per_node=self.cpus_per_node,
            memory_per_node_gib=self.memory_per_node_gib,
            max_nodes=self.max_nodes,
        )
        check_max_restarts(self.max_restarts)
        if self.replicas is not None and (not isinstance(self.replicas, int) or self.replicas < 1):
            raise ValueError(
                f"replicas must be 1 or more (or left out to fill each node), got {self.replicas!r}"
            )
        for key in ("partition", "account", "qos", "gres_name"):
            value = getattr(self, key)
            if value is not None and not _SLURM_NAME.fullmatch(str(value)):
                raise ValueError(
                    f"{key} {value!r} is not a SLURM name (letters, digits, _ . + - only)"
                )
        if self.gpu_request not in GPU_REQUESTS:
            raise ValueError(
                f"gpu_request {self.gpu_request!r} is not one of {', '.join(GPU_REQUESTS)}"
            )
        for key in ("time_limit", "max_time"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, str):
                # YAML 1.1 reads an unquoted 04:00:00 as the number 14400.
                raise ValueError(f"{key} must be a quoted string such as '04:00:00', got {value!r}")
            if value is not None:
                slurm_minutes(value)
        if self.max_time is not None and slurm_minutes(self.time_limit) > slurm_minutes(
            self.max_time
        ):
            raise ValueError(f"time_limit {self.time_limit} exceeds max_time {self.max_time}")
        check_signal_seconds(self.signal_seconds)
        _one_line(where, "setup", self.setup)
        _one_line(where, "sbatch_extra", self.sbatch_extra)
        for option in self.sbatch_extra:
            if not option.startswith("--"):
                raise ValueError(f"sbatch_extra takes long options (--name=value), got {option!r}")
        _one_line(where, "python", (self.python,))
        try:
            words = shlex.split(self.python)
        except ValueError as exc:
            raise ValueError(f"python {self.python!r} is not a valid command line: {exc}") from None
        if not words:
            raise ValueError("python must name a command, got an empty string")
        for key, value in self.env.items():
            if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
                raise ValueError(f"env name {key!r} is not a shell variable name")
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise ValueError(f"env {key} must be text or a number, got {value!r}")
        paths = (self.cache_dir, self.hf_cache, self.scratch_dir)
        _one_line(where, "path", tuple(p for p in paths if p is not None))


def cluster_names() -> list[str]:
    return names("clusters")


def load_cluster(name_or_path: str) -> Cluster:
    """A cluster profile by registry name or YAML path; its GPU must be in the catalogue."""
    name, path = _resolve("cluster", "clusters", name_or_path)
    data = read_yaml(path)
    data.setdefault("name", name)
    cluster = build(Cluster, data, str(path))
    get_gpu(cluster.gpu)
    return cluster
