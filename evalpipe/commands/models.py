"""`evalpipe models`: build models locally from recipes and show where each preset's model is."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from evalpipe.catalog import weights
from evalpipe.catalog.preset import Preset, load_preset, preset_names
from evalpipe.core.textable import format_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    prepare = sub.add_parser(
        "prepare",
        help="build a preset's model from its recipe into the cache (once)",
        description="Build a preset's model from its `prepare` recipe into "
        "$EVALPIPE_CACHE/models/<recipe> (default ~/.cache/evalpipe). Atomic and idempotent.",
    )
    prepare.add_argument("name", metavar="NAME", help="preset name or YAML path, or recipe name")
    prepare.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    listing = sub.add_parser("list", help="where each preset's model comes from")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    if args.action == "prepare":
        return _prepare(args.name, force=args.force)
    return _list(as_json=args.json)


def _prepare(name: str, *, force: bool) -> int:
    recipe, _ = weights.recipe_for(name)
    existing = weights.model_dir(recipe.name)
    if existing.is_dir() and not force:
        print(f"{recipe.name}: already prepared in {existing}")
        return 0
    start = time.monotonic()
    path = weights.prepare(name, force=force)
    print(f"{recipe.name}: prepared in {time.monotonic() - start:.1f} s → {path}")
    return 0


def _source(preset: Preset) -> dict[str, object]:
    """Where the model would come from, without touching the network or the HF cache."""
    if Path(preset.model).expanduser().is_dir():
        return {"source": "local", "path": str(Path(preset.model).expanduser())}
    if preset.prepare is None:
        return {"source": "hub", "path": preset.model}
    folder = weights.model_dir(preset.prepare)
    if folder.is_dir():
        return {
            "source": "prepared",
            "path": str(folder),
            "size_mib": round(weights.folder_size(folder) / 2**20, 1),
        }
    return {"source": "not prepared", "path": f"evalpipe models prepare {preset.name}"}


def _list(*, as_json: bool) -> int:
    rows = []
    for name in preset_names():
        preset = load_preset(name)
        rows.append(
            {"preset": name, "model": preset.model, "recipe": preset.prepare, **_source(preset)}
        )
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    table = [
        (
            r["preset"],
            r["model"],
            r["recipe"] or "-",
            r["source"] + (f" ({r['size_mib']} MiB)" if "size_mib" in r else ""),
            r["path"],
        )
        for r in rows
    ]
    print(format_table(("preset", "model", "recipe", "source", "path / how to get it"), table))
    print(f"cache: {weights.cache_dir()}")
    return 0
