"""Engines by backend name (name → lazy factory); the heavy real one is imported only when asked
for. The CLI's `--backend` choices come from BACKENDS."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from evalpipe.catalog.preset import Preset
from evalpipe.core.errors import ConfigError

# The options record imports BACKENDS at start-up: the engine's types, and the records they
# speak, load when an engine is built.
if TYPE_CHECKING:
    from evalpipe.engine.protocol import Engine, EngineSettings


def _vllm(preset: Preset, settings: EngineSettings) -> Engine:
    from evalpipe.engine.vllm import VllmEngine

    return VllmEngine.open(preset, settings)


def _fake(preset: Preset, settings: EngineSettings) -> Engine:
    from evalpipe.engine.fake import FakeEngine

    return FakeEngine(preset, settings)


def _openai(preset: Preset, settings: EngineSettings) -> Engine:
    from evalpipe.engine.endpoint import EndpointEngine

    return EndpointEngine.open(preset, settings)


BACKENDS: dict[str, Callable[[Preset, EngineSettings], Engine]] = {
    "vllm": _vllm,
    "fake": _fake,
    "openai": _openai,
}


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ConfigError(
            f"Unknown engine backend {backend!r}. Valid backends: {', '.join(BACKENDS)}."
        )


def open_engine(backend: str, preset: Preset, settings: EngineSettings) -> Engine:
    """Build the engine for `preset`. `fake` is the deterministic engine used by tests; `openai`
    talks to the server the preset's endpoint block (or `run --base-url`) names."""
    check_backend(backend)
    return BACKENDS[backend](preset, settings)
