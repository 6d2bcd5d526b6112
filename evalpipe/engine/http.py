"""One JSON call to an HTTP API with bounded retries: exponential backoff with jitter on 429, 5xx,
timeouts and broken connections (Retry-After honoured); any other answer but 200 fails at once.

httpx is imported by the caller (evalpipe.engine.endpoint) and handed in as a client, so this
module stays importable without it."""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalpipe.core.errors import EngineError

# The longest Retry-After honoured: a server asking for more is treated as down for good.
RETRY_AFTER_MAX_S = 600.0


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How often and how patiently one request is tried (from the preset's endpoint block)."""

    max_retries: int
    timeout_s: float
    backoff_s: float
    backoff_max_s: float

    def delay(self, retry: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds before retry number `retry` (0 first): the server's Retry-After when it
        gave one, else base × 2^retry capped, with equal jitter (half fixed, half random) so
        that many clients refused together do not come back together."""
        if retry_after is not None:
            return retry_after
        ceiling = min(self.backoff_max_s, self.backoff_s * 2**retry)
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


class HttpStatusError(EngineError):
    """The server answered with a status that retrying cannot fix (a 4xx other than 429)."""

    def __init__(self, message: str, *, status: int, detail: str) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


@dataclass
class Tally:
    """What the calls cost so far: for the manifest (retries by reason)."""

    calls: int = 0
    retries: Counter[str] = field(default_factory=Counter)


def retry_after_seconds(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """A Retry-After header (delay seconds or an HTTP date) as seconds from now, or None."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - now()
    return max(0.0, seconds)


def server_detail(status: int, text: str) -> str:
    """The server's own words from an error body (OpenAI and vLLM shapes), else the body."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else data.get("message")
        if isinstance(message, str) and message:
            return message
    return text.strip()[:300] or f"HTTP {status} with an empty body"


async def request_json(
    client: Any,
    method: str,
    url: str,
    *,
    body: dict[str, Any] | None,
    policy: RetryPolicy,
    tally: Tally,
    rng: random.Random,
) -> dict[str, Any]:
    """The JSON object the server answers with, after at most policy.max_retries retries.

    Raises HttpStatusError for a 4xx other than 429 (at once), EngineError once the retries are
    spent (the message names the URL, the attempts and the last failure)."""
    import httpx

    last = ""
    for attempt in range(policy.max_retries + 1):
        retry_after = None
        tally.calls += 1
        try:
            # The whole attempt, not each read, is bounded: a server that trickles bytes
            # still times out.
            response = await asyncio.wait_for(
                client.request(method, url, json=body), policy.timeout_s
            )
        except (asyncio.TimeoutError, httpx.TimeoutException):
            reason, last = "timeout", f"no complete answer within {policy.timeout_s:g} s"
        except httpx.TransportError as exc:  # refused, reset, dropped, truncated
            reason, last = "connection", f"{type(exc).__name__}: {exc or 'connection failed'}"
        else:
            status = response.status_code
            if status == 200:
                try:
                    data = response.json()
                except ValueError:
                    data = None
                if isinstance(data, dict):
                    return data
                reason, last = "bad body", "HTTP 200 with a body that is not a JSON object"
            elif status == 429 or status >= 500:
                reason = str(status)
                last = f"HTTP {status}: {server_detail(status, response.text)}"
                retry_after = retry_after_seconds(response.headers.get("retry-after"))
                if retry_after is not None and retry_after > RETRY_AFTER_MAX_S:
                    raise EngineError(
                        f"{method} {url}: the server asks to come back in {retry_after:.0f} s "
                        f"(Retry-After), more than {RETRY_AFTER_MAX_S:.0f} s. Rerun the same "
                        "command once it is back; finished samples are kept."
                    )
            else:
                detail = server_detail(status, response.text)
                raise HttpStatusError(
                    f"{method} {url}: HTTP {status}: {detail}", status=status, detail=detail
                )
        if attempt == policy.max_retries:
            break
        tally.retries[reason] += 1
        await asyncio.sleep(policy.delay(attempt, retry_after, rng))
    raise EngineError(
        f"{method} {url} failed {policy.max_retries + 1} time(s); last: {last}. Check that the "
        "server is up (or raise the endpoint's max_retries/timeout_s), then rerun the same "
        "command: finished samples are kept."
    )
