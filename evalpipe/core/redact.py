"""Secrets out of messages: what in a URL or a name may be a key, and the URL with it hidden.

Error messages reach stderr, and from there SLURM logs that others can read, so a message that
quotes a URL quotes `redact_url(url)`. Hidden, each as `***`:

- the user-info part (`user:password@`);
- the query string and the fragment (`?key=...`, `#...`);
- the host and every path segment that `looks_like_key`: one that starts with a common key
  prefix (KEY_PREFIXES: OpenAI's `sk-`, Hugging Face's `hf_`, GitHub's `ghp_`, …) or holds a
  run of at least TOKEN_RUN letters and digits, mixing both, unbroken by `-`, `_` or `.` (hex
  digests, base64url keys). Model and deployment names (`Llama-3.3-70B-Instruct`) are runs of
  short words and stay; so does a UUID, whose runs are short.
"""

from __future__ import annotations

import re

KEY_PREFIXES = (
    "sk-",
    "sk_",
    "hf_",
    "ghp_",
    "gho_",
    "ghs_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
)
TOKEN_RUN = 20
HIDDEN = "***"
_RUN = re.compile(rf"[A-Za-z0-9]{{{TOKEN_RUN},}}")


def looks_like_key(text: str) -> bool:
    """True for text that may be a key or token (the rule is the module's docstring)."""
    if text.startswith(KEY_PREFIXES):
        return True
    return any(
        re.search(r"[A-Za-z]", run) and re.search(r"[0-9]", run) for run in _RUN.findall(text)
    )


def redact_url(url: str) -> str:
    """`url` with its user info, query, fragment and key-like path segments shown as ***."""
    cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=len(url))
    head, tail = url[:cut], url[cut:]
    scheme, sep, rest = head.partition("://")
    if not sep:
        scheme, rest = "", head
    # Without a scheme the first part may be the key itself (a key given where a URL belongs).
    host, *path = rest.split("/")
    if "@" in host:
        host = f"{HIDDEN}@{host.rpartition('@')[2]}"
    shown = "/".join(HIDDEN if looks_like_key(s) else s for s in [host, *path])
    return scheme + sep + shown + (f"{tail[0]}{HIDDEN}" if tail else "")
