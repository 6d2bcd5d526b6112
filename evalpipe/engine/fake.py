"""A deterministic scripted engine: same prompt, same completion, in any process, no model.

Used by the tests and by `evalpipe run --backend fake` (pipeline and SLURM checks without vLLM).
A completion comes from the first `script` entry whose key occurs in the prompt, else from a
stable hash of the prompt, so reruns, resumes and shards see identical outputs.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from evalpipe import __version__
from evalpipe.engine.base import (
    EngineSettings,
    Generation,
    Loglikelihood,
    Prompt,
    SamplingSettings,
)
from evalpipe.errors import ConfigError
from evalpipe.registry import Preset

# Seconds to sleep per generate() call when no delay is passed in: lets a SLURM job run with
# `--backend fake` live long enough to be preempted in a test.
DELAY_ENV = "EVALPIPE_FAKE_DELAY_S"


def prompt_text(prompt: Prompt) -> str:
    """The prompt as one string; chat messages become 'role: content' lines."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in prompt)


def _env_delay() -> float:
    raw = os.environ.get(DELAY_ENV, "")
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        raise ConfigError(f"{DELAY_ENV}={raw!r} must be a non-negative number of seconds.")
    return value


class FakeEngine:
    """Engine protocol implementation with scripted or hash-derived completions.

    Token counts are whitespace-separated words. `served` lists every prompt text generated for,
    in order, so tests can check what a resumed run asked for.
    """

    def __init__(
        self,
        preset: Preset,
        settings: EngineSettings,
        *,
        script: Mapping[str, str] | None = None,
        delay_s: float | None = None,
    ) -> None:
        self.preset = preset
        self.settings = settings
        self.script = dict(script or {})
        self.delay_s = _env_delay() if delay_s is None else delay_s
        self.fallback_steps: list[str] = []
        self.served: list[str] = []
        self.closed = False

    def generate(self, prompts: Sequence[Prompt], settings: SamplingSettings) -> list[Generation]:
        if self.closed:
            raise RuntimeError("FakeEngine.generate called after close()")
        if self.delay_s:
            time.sleep(self.delay_s)
        out = []
        for prompt in prompts:
            text = prompt_text(prompt)
            self.served.append(text)
            texts = tuple(
                _truncate(self._completion(text, settings, i), settings) for i in range(settings.n)
            )
            out.append(
                Generation(
                    texts=texts,
                    prompt_tokens=len(text.split()),
                    completion_tokens=tuple(len(t.split()) for t in texts),
                )
            )
        return out

    def loglikelihoods(self, requests: Sequence[tuple[Prompt, str]]) -> list[Loglikelihood]:
        """A scripted completion that starts with the continuation scores 0 (the likeliest);
        anything else a stable hash-derived log-probability in (-10, -0.01]."""
        if self.closed:
            raise RuntimeError("FakeEngine.loglikelihoods called after close()")
        out = []
        for prompt, continuation in requests:
            text = prompt_text(prompt)
            self.served.append(text)
            scripted = next((c for k, c in self.script.items() if k in text), None)
            if scripted is not None and scripted.strip().startswith(continuation.strip()):
                logprob = 0.0
            else:
                digest = hashlib.sha256(f"{text}\0{continuation}".encode()).hexdigest()
                logprob = -(1 + int(digest[:8], 16) % 1000) / 100
            out.append(
                Loglikelihood(
                    logprob=logprob,
                    tokens=len(continuation.split()),
                    prompt_tokens=len(text.split()),
                )
            )
        return out

    def _completion(self, text: str, settings: SamplingSettings, index: int) -> str:
        for key, completion in self.script.items():
            if key in text:
                return completion
        # Greedy decoding gives the same text for all n; sampling varies with seed and index.
        salt = "" if settings.temperature == 0 else f"\0{settings.seed}\0{index}"
        digest = hashlib.sha256((text + salt).encode("utf-8")).hexdigest()
        return f"The answer is {int(digest[:8], 16) % 10}."

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "fake",
            "model": self.preset.model,
            "engine_kwargs": {},
            "delay_s": self.delay_s,
            "scripted_keys": sorted(self.script),
            "versions": {"evalpipe": __version__},
        }

    def close(self) -> None:
        self.closed = True


def _truncate(text: str, settings: SamplingSettings) -> str:
    """Apply stop strings and max_tokens (in words) the way a real engine would cut output."""
    cuts = [text.index(stop) for stop in settings.stop if stop and stop in text]
    if cuts:
        text = text[: min(cuts)]
    words = text.split(" ")
    return " ".join(words[: settings.max_tokens]) if len(words) > settings.max_tokens else text
