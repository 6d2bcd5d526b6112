"""BFCL's web search categories' needs: the user's SerpAPI key, named by its variable and read
from the environment, BFCL's web dependencies beside bfcl-eval, and the environment their
networked sandbox gets (the key and the proxy settings). None of it is recorded: the values
reach that sandbox's environment alone (docs/bfcl.md, "Web search")."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from evalpipe.catalog.taskrefs import BFCL_WEB_SEARCH
from evalpipe.core.errors import ConfigError, MissingDependencyError
from evalpipe.sandbox.pool import Network
from evalpipe.tasks.bfcl.install import BFCL_EVAL, bfcl_dir

# A web search entry's calls that were not executed (steps_program.literal_call refused them):
# its metric, and its category's sum in bfcl_results.json.
REFUSED_CALLS = "refused_calls"
KEY = "SERPAPI_API_KEY"  # what bfcl-eval's web_search.py reads
KEY_PAGE = "https://serpapi.com/manage-api-key"
# What users behind a proxy need, in both spellings requests reads.
PROXY = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy")
# The CA bundles a proxy that opens TLS needs: files the sandbox may hide (under /tmp or a home
# folder), so their text goes in with the step and is written in the sandbox (certificates()).
CA_BUNDLES = ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
# The modules web_search.py imports that bfcl.sh installs beside bfcl-eval (requests is the
# virtualenv's): google-search-results, beautifulsoup4, html2text.
MODULES = ("serpapi", "bs4", "html2text")


def has_key() -> bool:
    return bool(os.environ.get(KEY))


def web_search_asked(chosen: Sequence[str], named: Sequence[str]) -> list[str]:
    """The web search categories of `chosen` to run: all of them with the key; without it,
    none, and naming one is refused (plain `bfcl` then runs without them, its overall marked
    incomplete). Refused too where BFCL's web dependencies are missing."""
    web = [c for c in chosen if c in BFCL_WEB_SEARCH]
    if web and not has_key():
        asked = [c for c in web if c in named]
        if asked:
            raise ConfigError(
                f"BFCL's web search categories ({', '.join(asked)}) search through SerpAPI "
                f"with your key, and {KEY} is not set: get a key at {KEY_PAGE} and export "
                f"{KEY}=... before evalpipe run (or evalpipe submit, whose job inherits it). "
                "evalpipe passes it to the web search's sandbox alone and records it nowhere. "
                "Or leave them out."
            )
        return []
    missing = [m for m in MODULES if not any((bfcl_dir() / n).exists() for n in (m, f"{m}.py"))]
    if web and missing:
        raise MissingDependencyError(
            f"BFCL's web search imports {', '.join(missing)}, which {bfcl_dir()} lacks "
            f"(installed before web search ran). Reinstall it with: {BFCL_EVAL.install}"
        )
    return web


def web_network() -> Network:
    """The networked sandbox of web search steps: the host's network, the key and the proxy
    settings of this process's environment."""
    return Network(env={k: os.environ[k] for k in (KEY, *PROXY, *CA_BUNDLES) if k in os.environ})


def certificates() -> dict[str, str]:
    """The CA bundle files CA_BUNDLES name, by variable, read here (a folder of them is
    passed as its path, which the sandbox sees unless it hides it)."""
    files = {k: Path(os.environ[k]) for k in CA_BUNDLES if os.environ.get(k)}
    return {k: path.read_text() for k, path in files.items() if path.is_file()}
