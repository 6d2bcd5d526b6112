"""Pick and build an engine by backend name; the heavy real one is imported only when asked for."""

from __future__ import annotations

from evalpipe.engine.base import Engine, EngineSettings
from evalpipe.errors import ConfigError
from evalpipe.registry import Preset

BACKENDS = ("vllm", "fake")


def open_engine(backend: str, preset: Preset, settings: EngineSettings) -> Engine:
    """Build the engine for `preset`. `fake` is the deterministic engine used by tests."""
    if backend == "vllm":
        from evalpipe.engine.vllm import VllmEngine

        return VllmEngine.open(preset, settings)
    if backend == "fake":
        from evalpipe.engine.fake import FakeEngine

        return FakeEngine(preset, settings)
    raise ConfigError(f"Unknown engine backend {backend!r}. Valid backends: {', '.join(BACKENDS)}.")
