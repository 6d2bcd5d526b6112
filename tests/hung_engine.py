"""A FakeEngine that stops progressing, as an engine waiting on a dead worker does: the fault the
stall watchdog exists for (tests/test_watchdog.py in-process, tests/sites/hung_engine in a job)."""

from __future__ import annotations

from typing import Any

from evalpipe.core.errors import EngineError
from evalpipe.engine.fake import FakeEngine
from evalpipe.records.completion import Completion


class HungEngine(FakeEngine):
    """Answers `hang_after` requests, then every step blocks (sleeping in the engine's `sleep`)
    until the engine is closed, and fails."""

    def __init__(self, *args: Any, hang_after: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hang_after = hang_after

    def step(self) -> list[Completion]:
        self._check_open()
        if len(self.served) >= self.hang_after:
            while not self.closed:
                self._sleep(1.0)
            raise EngineError("The fake engine hung (hang_after) and was closed while stepping.")
        return super().step()
