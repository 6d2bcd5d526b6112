"""What BFCL's memory_vector needs beyond the other memory categories: its simulated API
(bfcl-eval's memory_vector.py) loads the sentence-transformers encoder all-MiniLM-L6-v2 from the
Hugging Face hub when imported, and imports sentence-transformers and faiss-cpu. evalpipe
downloads nothing: the encoder must be in the user's hub cache, and its step processes load it
offline from there, the sandbox showing them its folder in the cache read-only (home
directories are hidden from them otherwise). Checked before anything loads; the packages' import
and the encoder's load are checked again by the child that reads the entries (it builds BFCL's
empty memory, which loads them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalpipe.catalog.modelconfig import hub_cache
from evalpipe.core.errors import MissingDependencyError
from evalpipe.tasks.bfcl.install import BFCL_EVAL, bfcl_dir

CATEGORY = "memory_vector"
# What SentenceTransformer("all-MiniLM-L6-v2") loads: the library prepends its organisation.
ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
# Each sandboxed program gets a private, empty copy of these (evalpipe/sandbox/worker.py): a
# cache there cannot be shown to it.
PRIVATE = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))
PACKAGES = ("sentence-transformers", "faiss-cpu")


@dataclass(frozen=True)
class Encoder:
    """The cached encoder: the hub cache the step processes read it from (HF_HUB_CACHE there),
    its folder in it (blobs, refs, snapshots), shown to the sandbox, and the snapshot's
    revision (recorded with the tasks: another encoder retrieves other memories)."""

    hub: str
    repo: str
    revision: str

    @property
    def name(self) -> str:
        return f"{ENCODER}@{self.revision}"


def find_encoder() -> Encoder | None:
    """The encoder in the hub cache ($HF_HUB_CACHE, else $HF_HOME/hub), as huggingface_hub's
    offline lookup finds it (refs/main's snapshot); None if it is not there."""
    from huggingface_hub import try_to_load_from_cache

    hub = hub_cache()
    found = try_to_load_from_cache(ENCODER, "modules.json", cache_dir=hub)
    if not isinstance(found, str):
        return None
    snapshot = Path(found).parent  # <repo>/snapshots/<revision>/modules.json
    return Encoder(hub=str(hub.resolve()), repo=str(snapshot.parents[1].resolve()),
                   revision=snapshot.name)  # fmt: skip


def missing() -> list[str]:
    """What memory_vector lacks here, each in words naming its fix ([] when nothing)."""
    out = []
    encoder = find_encoder()
    if encoder is None:
        out.append(
            f"the sentence-transformers model {ENCODER} in your Hugging Face cache "
            f"({hub_cache()}; HF_HUB_CACHE or HF_HOME name another): fetch it on a machine "
            f"with the hub with `hf download {ENCODER}` and copy that cache here if this "
            "machine has no hub"
        )
    elif any(Path(encoder.repo).is_relative_to(p) for p in PRIVATE):
        out.append(
            f"a Hugging Face cache outside {', '.join(map(str, PRIVATE))} ({encoder.hub} is "
            "inside, and evalpipe's sandbox gives each program its own empty copy of those): "
            "set HF_HUB_CACHE to a cache elsewhere holding the model"
        )
    absent = [p for p in PACKAGES if not BFCL_EVAL.version(p)]
    if absent:
        out.append(
            f"the {' and '.join(absent)} packages beside bfcl-eval in {bfcl_dir()}: reinstall "
            f"that folder with {BFCL_EVAL.install}"
        )
    return out


def load_failed(why: str) -> str:
    """The need, in missing()'s words, when memory_vector's simulated API did not import
    (`why`) though its packages and encoder were found."""
    return (
        f"its simulated API to import, which failed ({why}): reinstall bfcl-eval's folder with "
        f"{BFCL_EVAL.install}, or fetch the encoder again with `hf download {ENCODER}`"
    )


def refusal(needs: list[str]) -> MissingDependencyError:
    """One message naming everything memory_vector lacks and each fix."""
    return MissingDependencyError(
        "BFCL's memory_vector (its simulated memory embeds texts with a sentence-transformers "
        f"encoder) needs {'; and '.join(needs)}. Or leave memory_vector out: plain `bfcl` runs "
        "without it and marks its overall incomplete."
    )
