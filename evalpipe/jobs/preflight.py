"""Login-node checks before a job is queued: weights, shards, config, chat template, datasets.

Everything here reads file metadata only (no vLLM, torch or huggingface_hub import), so `submit`
can run it in well under a second. It looks where the job will look: the cluster profile's
`cache_dir` (prepared models) and `hf_cache` (HF_HOME), and its `HF_HUB_OFFLINE`.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from evalpipe.catalog import modelconfig, weights
from evalpipe.catalog.clusters import Cluster
from evalpipe.catalog.containers import Mount, Runtime
from evalpipe.catalog.preset import DTYPE_BYTES, Preset
from evalpipe.core.errors import ConfigError, DatasetError, EvalpipeError, PreflightError
from evalpipe.slurm import runtimes

Level = Literal["error", "warning"]
# A checkpoint's files may hold a little more (headers, buffers) or less (tied weights counted
# once) than params × dtype bytes; beyond this they are probably another model or incomplete.
SIZE_TOLERANCE = 0.25
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One problem: what is missing, where it looked, and the fix, in one message."""

    level: Level
    check: str  # weights, config, shards, size, chat template, dataset, context
    message: str

    def line(self) -> str:
        return f"{self.level}: [{self.check}] {self.message}"


@dataclass(frozen=True, kw_only=True)
class Report:
    findings: tuple[Finding, ...]
    model_dir: str | None = None  # the folder the weights resolved to, if any

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "warning"]

    def raise_for_errors(self) -> None:
        """PreflightError listing every error (warnings never block)."""
        if self.errors:
            lines = "\n".join(f.line() for f in self.errors)
            raise PreflightError(
                f"preflight found {len(self.errors)} problem(s) before anything was queued:\n"
                f"{lines}\n(`evalpipe submit --no-check` skips these checks.)"
            )


# -- where the job will look ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Site:
    """The paths and switches a job on `cluster` sees (profile first, else this environment)."""

    offline: bool
    evalpipe_cache: Path
    hf_home: Path
    hub_cache: Path
    datasets_cache: Path

    @classmethod
    def of(cls, cluster: Cluster, environ: Mapping[str, str] | None = None) -> Site:
        env = dict(os.environ if environ is None else environ)
        env.update({k: str(v) for k, v in cluster.env.items()})
        if cluster.cache_dir:
            env["EVALPIPE_CACHE"] = cluster.cache_dir
        if cluster.hf_cache:  # the job exports HF_HOME, which moves the hub and datasets caches
            env["HF_HOME"] = cluster.hf_cache
            for name in ("HF_HUB_CACHE", "HF_DATASETS_CACHE"):
                if name not in cluster.env:
                    env.pop(name, None)
        home = Path(env.get("HF_HOME") or Path.home() / ".cache" / "huggingface").expanduser()
        cache = env.get("EVALPIPE_CACHE")
        return cls(
            offline=env.get("HF_HUB_OFFLINE", "").lower() in _TRUE,
            evalpipe_cache=Path(cache).expanduser() if cache else weights.cache_dir(),
            hf_home=home,
            hub_cache=Path(env.get("HF_HUB_CACHE") or home / "hub").expanduser(),
            datasets_cache=Path(env.get("HF_DATASETS_CACHE") or home / "datasets").expanduser(),
        )

    def env_prefix(self) -> str:
        return f"HF_HOME={shlex.quote(str(self.hf_home))}"


# -- weights --------------------------------------------------------------------------------------


def _fetch_command(preset: Preset, site: Site) -> str:
    if preset.prepare is not None:
        cache = shlex.quote(str(site.evalpipe_cache))
        return f"EVALPIPE_CACHE={cache} evalpipe models prepare {preset.name}"
    revision = f" --revision {shlex.quote(preset.revision)}" if preset.revision else ""
    return (
        f"{site.env_prefix()} hf download {shlex.quote(preset.model)}{revision} "
        "(on a machine with network access to the same storage)"
    )


def locate_weights(preset: Preset, site: Site) -> tuple[Path | None, list[Finding]]:
    """The folder vLLM will load, as models.model_source finds it on the node; or why not."""
    local = Path(preset.model).expanduser()
    if local.is_dir():
        return local, []
    looked = []
    if preset.prepare is not None:
        built = site.evalpipe_cache / "models" / preset.prepare
        if built.is_dir():
            return built, []
        looked.append(f"the prepared build {built}")
    if preset.prepare is None and weights.is_local_path(preset.model):
        return None, [_missing_folder(preset, local)]
    if "/" not in preset.model:
        looked.insert(0, f"a local folder {local}")
        return None, [_missing(preset, site, looked)]
    snapshot = modelconfig.hub_snapshot(site.hub_cache, preset)
    if snapshot is not None:
        return snapshot, []
    looked.append(f"the Hugging Face cache {site.hub_cache}")
    if site.offline:
        return None, [_missing(preset, site, looked)]
    return None, [
        Finding(
            level="warning",
            check="weights",
            message=f"{preset.model} is not in {', '.join(looked)}; the job will download it "
            f"from the hub before loading. To fetch it once ahead: {_fetch_command(preset, site)}",
        )
    ]


def _missing(preset: Preset, site: Site, looked: list[str]) -> Finding:
    why = " and the hub is offline (HF_HUB_OFFLINE)" if site.offline else ""
    return Finding(
        level="error",
        check="weights",
        message=f"preset {preset.name}: model {preset.model!r} is not available{why}; looked in "
        f"{', '.join(looked)}. Fetch it with: {_fetch_command(preset, site)}",
    )


def _missing_folder(preset: Preset, folder: Path) -> Finding:
    # A path is no hub id: nothing can download it, so the fix is to make the folder exist.
    recipes = ", ".join(sorted(weights.RECIPES))
    return Finding(
        level="error",
        check="weights",
        message=f"preset {preset.name}: model {preset.model!r} is a local path and the folder "
        f"{folder} does not exist. Copy the model's Hugging Face folder there (config.json, "
        "tokenizer files, *.safetensors), or point `model:` at a hub id (org/name), or at a "
        f"model evalpipe builds (`prepare:` one of {recipes}, then `evalpipe models prepare "
        f"{preset.name}`).",
    )


def check_folder(preset: Preset, folder: Path) -> list[Finding]:
    """config.json against the preset, the safetensors shards, their total size."""
    config = modelconfig.read_json(folder / "config.json")
    if config is None:
        return [
            Finding(
                level="error",
                check="config",
                message=f"no readable config.json in {folder}: the download or build is "
                "incomplete. Fetch or prepare the model again.",
            )
        ]
    found = [
        Finding(level="error", check="config", message=f"{note} (looked at {folder}/config.json)")
        for note in modelconfig.disagreements(preset, config, stated_only=True)
    ]
    index_path = folder / "model.safetensors.index.json"
    if index_path.is_file():
        index = modelconfig.read_json(index_path) or {}
        names = sorted(set((index.get("weight_map") or {}).values()))
    else:
        names = sorted(p.name for p in folder.glob("*.safetensors"))
    if not names:
        if not any(folder.glob("*.bin")) and not any(folder.glob("*.pt")):
            found.append(
                Finding(
                    level="error",
                    check="shards",
                    message=f"no weight files (*.safetensors, *.bin) in {folder}. "
                    "Fetch or prepare the model again.",
                )
            )
        return found
    absent = [n for n in names if not (folder / n).is_file()]
    if absent:
        shown = ", ".join(absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
        found.append(
            Finding(
                level="error",
                check="shards",
                message=f"{len(absent)} of {len(names)} safetensors shard(s) named by "
                f"{index_path.name} are missing from {folder}: {shown}. Fetch the model again "
                "(a download that stopped half-way leaves this).",
            )
        )
        return found
    total = sum((folder / n).stat().st_size for n in names)
    found += _size(preset, config, folder, total)
    return found


def _size(preset: Preset, config: Mapping[str, Any], folder: Path, total: int) -> list[Finding]:
    if config.get("quantization_config"):
        return []  # packed weights: bytes per parameter are not the dtype's
    dtype = str(config.get("torch_dtype") or config.get("dtype") or preset.dtype)
    per = DTYPE_BYTES.get(dtype)
    if per is None:
        return []
    expected = preset.architecture.params_b * 1e9 * per
    if abs(total - expected) <= SIZE_TOLERANCE * expected:
        return []
    return [
        Finding(
            level="warning",
            check="size",
            message=f"the shards in {folder} hold {total / 1e9:.3g} GB, but "
            f"{preset.architecture.params_b:g} B parameters in the checkpoint's {dtype} make "
            f"{expected / 1e9:.3g} GB: another model, or an incomplete copy? Check params_b in "
            "the preset and the files.",
        )
    ]


# -- chat template --------------------------------------------------------------------------------


def check_chat_template(preset: Preset, folder: Path) -> list[Finding]:
    """A chat preset needs a template in its tokenizer files (vLLM refuses chat without one)."""
    if not preset.chat:
        return []
    tokenizer_config = modelconfig.read_json(folder / "tokenizer_config.json") or {}
    if tokenizer_config.get("chat_template"):
        return []
    for name in ("chat_template.jinja", "chat_template.json"):
        if (folder / name).is_file():
            return []
    return [
        Finding(
            level="error",
            check="chat template",
            message=f"preset {preset.name} is a chat preset (chat: true), but its tokenizer has "
            f"no chat template: looked in {folder}/tokenizer_config.json (chat_template), "
            f"{folder}/chat_template.jinja and chat_template.json. vLLM would refuse the "
            "first prompt after loading the weights. Set `chat: false` in the preset (plain "
            "prompts), or add a chat_template.jinja to the model folder.",
        )
    ]


def check_tool_parser(preset: Preset, folder: Path) -> list[Finding]:
    """A preset's tool_parser must be one of vLLM's and accept the model's tokenizer (vLLM's
    llama3_json and mistral parsers refuse one without their special tokens)."""
    if preset.tool_parser is None:
        return []
    from evalpipe.engine.toolcalls import check_parser

    try:
        # Imported here: only a preset with a tool parser pays for transformers' (and vLLM's).
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
        check_parser(preset.tool_parser, tokenizer, preset=preset.name)
    except ConfigError as exc:
        return [Finding(level="error", check="tool parser", message=str(exc))]
    except ImportError as exc:
        return [
            Finding(
                level="warning",
                check="tool parser",
                message=f"preset {preset.name}'s tool_parser {preset.tool_parser!r} was not "
                f"checked: vLLM's parsers cannot be imported here ({exc}); the run checks it "
                "when its engine opens.",
            )
        ]
    return []


# -- datasets -------------------------------------------------------------------------------------


def _hf_dataset_cached(site: Site, name: str) -> list[Path]:
    """Where `datasets` (arrow cache) or the hub (raw files) would hold ORG/NAME; those present."""
    candidates = [
        site.datasets_cache / name.replace("/", "___"),
        site.hub_cache / ("datasets--" + name.replace("/", "--")),
    ]
    return [p for p in candidates if p.is_dir() and any(p.iterdir())]


def check_datasets(tasks: Sequence[Any], site: Site) -> list[Finding]:
    """Each task's data: local and packaged files exist; hub sets are cached when offline."""
    from evalpipe.tasks.datasets import source_file
    from evalpipe.tasks.lmeval import LmEvalTask

    found = []
    for task in tasks:
        if isinstance(task, LmEvalTask):  # lm-eval loaded its datasets as its tasks loaded
            continue
        cfg = task.config
        source = cfg.source
        splits = [source.split] + ([cfg.prompt.shots_split] if cfg.prompt.shots else [])
        if source.scheme == "hf":
            if site.offline and not _hf_dataset_cached(site, source.location):
                found.append(
                    Finding(
                        level="error",
                        check="dataset",
                        message=f"task {cfg.name}: dataset {source.uri} is not cached and the "
                        f"job runs offline (HF_HUB_OFFLINE); looked in "
                        f"{site.datasets_cache} and {site.hub_cache}. Fetch it with: "
                        f"{site.env_prefix()} evalpipe tasks fetch {cfg.name} (on a machine "
                        "with network access to the same storage)",
                    )
                )
            continue
        if source.scheme == "generated":
            continue
        for split in dict.fromkeys(splits):
            try:
                source_file(cfg.name, source, split=split, base_dir=task.path.parent)
            except DatasetError as exc:
                found.append(Finding(level="error", check="dataset", message=str(exc)))
    return found


# -- packages -------------------------------------------------------------------------------------


def check_packages(tasks: Sequence[Any], *, strict: bool = False) -> list[Finding]:
    """The installed packages the tasks read prompts or data from: one that is missing is an
    error (the job would fail on the node); another version than evalpipe pins is a warning,
    an error when the job runs with --strict-versions (it would refuse)."""
    from evalpipe.tasks.packages import check_sources, sources_of

    found = check_sources(sources_of(tasks))
    return [Finding(level="error", check="package", message=m) for m in found.missing] + [
        Finding(level="error" if strict else "warning", check="package", message=m)
        for m in found.off_pin
    ]


def check_prompts(
    preset: Preset, tasks: Sequence[Any], origin: Mapping[str, str], given: int | None = None
) -> list[Finding]:
    """A warning for each task (its data on this machine) whose longest prompt leaves no room
    for an answer in the context the run will have (the preset's, or what the budgets raise it
    to, or `given`): its samples would be recorded as context_overflow, or cut by lm-eval's
    rule."""
    from evalpipe.estimate.workmodel import long_prompt, token_counter
    from evalpipe.tasks.configured import ConfiguredTask
    from evalpipe.tasks.kinds import fit

    _, context = fit(preset, tasks, origin, max_tokens=None, given=given)
    local = [
        t for t in tasks if not (isinstance(t, ConfiguredTask) and t.config.source.scheme == "hf")
    ]
    counter = token_counter(preset) if local else None
    found = []
    for task in local:
        try:
            long = long_prompt(task, preset, counter, context.max_model_len, None)
        except EvalpipeError:  # its data cannot be read: the dataset check says why
            continue
        if long is not None:
            found.append(Finding(level="warning", check="context", message=long.line()))
    return found


# -- container ------------------------------------------------------------------------------------


def check_container(
    cluster: Cluster, find: Callable[[Runtime], str | None] = runtimes.find
) -> list[Finding]:
    """The profile's container on this login node: its runtime, its image file (an Apptainer
    reference: its pulled copy) and each mount's source. `find` says where a runtime is."""
    container = cluster.container
    if container is None:
        return []
    found = []
    if find(container.runtime) is None:
        found.append(
            Finding(
                level="error" if container.runtime == "pyxis" else "warning",
                check="container",
                message=f"cluster {cluster.name} runs jobs with {container.runtime}, but "
                f"{runtimes.missing_fix(container.runtime)}.",
            )
        )
    image = container.image_path
    if image is not None and not Path(image).is_file():
        if container.image != image:  # an Apptainer reference, pulled once into sif_cache
            fix = f"pull it there once: apptainer pull {shlex.quote(image)} " + shlex.quote(
                container.image
            )
        elif container.runtime == "pyxis":
            fix = f"import it once: enroot import -o {shlex.quote(image)} docker://IMAGE"
        else:
            fix = f"build or pull it once: apptainer pull {shlex.quote(image)} docker://IMAGE"
        found.append(
            Finding(
                level="error",
                check="container",
                message=f"the image file {image} of cluster {cluster.name} does not exist; "
                f"{fix} (on storage every node reads), or correct container.image.",
            )
        )
    for mount in container.mounts:
        source = Mount.parse(mount).source
        if not Path(source).exists():
            found.append(
                Finding(
                    level="error",
                    check="container",
                    message=f"container mount {mount!r} of cluster {cluster.name}: the source "
                    f"{source} does not exist; the runtime would refuse to start the job. "
                    "Create it or correct container.mounts.",
                )
            )
    return found


# -- all of it ------------------------------------------------------------------------------------


def check(
    preset: Preset,
    cluster: Cluster,
    *,
    categories: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    backend: str = "vllm",
    allow_unsafe_code: bool = False,
    strict_versions: bool = False,
    max_model_len: int | None = None,
) -> Report:
    """Every check for `preset` on `cluster` with the chosen tasks; nothing raised.
    `max_model_len`: the job's context where it is planned (None: as the run fits it)."""
    site = Site.of(cluster, environ)
    findings: list[Finding] = check_container(cluster)
    folder = None
    if backend == "vllm":  # the fake engine loads no weights
        folder, located = locate_weights(preset, site)
        findings += located
        if folder is not None:
            findings += check_folder(preset, folder)
            findings += check_chat_template(preset, folder)
            findings += check_tool_parser(preset, folder)
    try:
        from evalpipe.tasks.kindbase import LoadOptions
        from evalpipe.tasks.kinds import load_refs

        # Every kind's tasks are loaded (a missing task file or judged benchmark's package is
        # an error here); the judged ones' data is local, so only the others' is checked.
        given = LoadOptions(
            categories=tuple(categories or ()) or None, allow_unsafe_code=allow_unsafe_code
        )
        loaded, origin = load_refs(tasks, given)
        chosen = [task for task in loaded.tasks if task.name not in loaded.gradings]
    except EvalpipeError as exc:
        findings.append(Finding(level="error", check="dataset", message=str(exc)))
    else:
        findings += check_packages(loaded.tasks, strict=strict_versions)
        findings += check_datasets(chosen, site)
        # The fake engine counts words, not the model's tokens: nothing to warn of there.
        read = not any(f.level == "error" and f.check == "dataset" for f in findings)
        if read and backend != "fake":
            findings += check_prompts(preset, loaded.tasks, origin, max_model_len)
    return Report(findings=tuple(findings), model_dir=str(folder) if folder else None)
