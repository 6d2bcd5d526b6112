"""One self-contained HTML page: tables and base64-embedded PNGs, no scripts, no network.

A Content-Security-Policy that allows only inline styles and data: images makes the page's
offline promise checkable: a browser refuses anything else it might try to load.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence

from evalpipe.reports.tables import Table

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em;
       color: #1b1f24; max-width: 1600px; }
h1 { font-size: 1.6em; margin-bottom: .2em; }
h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #d0d7de; padding-bottom: .2em; }
.meta { color: #57606a; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: .5em 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d0d7de; padding: .3em .6em; white-space: nowrap; }
th { background: #f6f8fa; text-align: left; }
td.num { text-align: right; }
tbody tr:nth-child(even) { background: #fafbfc; }
ul.notes { color: #57606a; font-size: .9em; padding-left: 1.2em; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #d0d7de; }
figcaption { color: #57606a; font-size: .9em; }
.warnings li { color: #9a6700; }
"""

_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _table(table: Table) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in table.header)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{esc(c)}</td>' if right else f"<td>{esc(c)}</td>"
            for c, right in zip(row, table.right, strict=True)
        )
        + "</tr>"
        for row in table.rows
    )
    notes = "".join(f"<li>{esc(n)}</li>" for n in table.notes)
    return (
        f"<section><h2>{esc(table.title)}</h2>"
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        f"</div>{f'<ul class=notes>{notes}</ul>' if notes else ''}</section>"
    )


def _figure(name: str, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    caption = html.escape(name)
    return (
        f'<figure><img alt="{caption}" src="data:image/png;base64,{data}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def page(
    *,
    title: str,
    subtitle: str,
    tables: Sequence[Table],
    images: Mapping[str, bytes],
    warnings: Sequence[str],
) -> str:
    """The whole report as one HTML document."""
    esc = html.escape
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1><p class=meta>{esc(subtitle)}</p>",
        *(_table(t) for t in tables),
    ]
    if images:
        parts.append("<section><h2>Plots</h2>")
        parts += [_figure(name, png) for name, png in images.items()]
        parts.append("</section>")
    if warnings:
        items = "".join(f"<li>{esc(w)}</li>" for w in warnings)
        parts.append(f"<section class=warnings><h2>Warnings</h2><ul>{items}</ul></section>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
