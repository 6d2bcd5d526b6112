"""`evalpipe presets`: list the model presets."""

from __future__ import annotations

import argparse
import json

from evalpipe.catalog.preset import load_preset, preset_names
from evalpipe.core.textable import format_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")


def run(args: argparse.Namespace) -> int:
    rows = []
    for name in preset_names():
        p = load_preset(name)
        rows.append(
            {
                "name": p.name,
                "model": p.model,
                "description": p.description,
                "params_b": p.architecture.params_b,
                "dtype": p.dtype,
                "quantization": p.quantization,
                "tensor_parallel": p.tensor_parallel,
                "pipeline_parallel": p.pipeline_parallel,
                "max_model_len": p.max_model_len,
                "categories": list(p.categories),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ("preset", "model", "params", "dtype/quant", "TP×PP")
    table = [
        (
            r["name"],
            r["model"],
            f"{r['params_b']:g}B",
            r["dtype"] if r["quantization"] == "none" else f"{r['dtype']}/{r['quantization']}",
            f"{r['tensor_parallel']}×{r['pipeline_parallel']}",
        )
        for r in rows
    ]
    print(format_table(header, table))
    return 0
