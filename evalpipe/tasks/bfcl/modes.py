"""How a BFCL task prompts the model and reads its calls, chosen by the preset's `bfcl_mode`
(docs/bfcl.md "Modes"), and what a run records of it: BFCL's leaderboard names the mode beside
the model, so every task definition and bfcl_results.json carries it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evalpipe.catalog.preset import BfclMode

# Prompting mode's checker: ast_checker reads one setting of the model it is told
# (MODEL_CONFIG_MAPPING[...].underscore_to_dot); the generic handler is registered under no
# name, so a registered prompting model of the same setting (False, as every local prompting
# handler) stands in.
PROMPTING_CHECKER = "Qwen/Qwen3-8B"
PROMPTING_HANDLER = "QuickTestingOSSHandler"
# Native mode's checker: a registered FC model whose handler decodes BFCL's FC result layout
# ([{name: arguments JSON}]) and whose underscore_to_dot is True, as the tools' names had their
# dots made underscores (convert_to_tool, as for OpenAI's FC models).
NATIVE_CHECKER = "gpt-4o-2024-11-20-FC"
NATIVE_HANDLER = "OpenAIResponsesHandler"


@dataclass(frozen=True, kw_only=True)
class Mode:
    """One BFCL mode: its name, the handler that formats prompts and decodes answers, and the
    registered model BFCL's checker is told."""

    name: BfclMode
    handler: str  # the BFCL handler class whose format and decoder are used
    checker_model: str
    bfcl_model: str | None = None  # handler mode: the registered model named by the preset
    # The checker model's settings (entries_program.config_of): the sandboxed programs build
    # the handler from them, importing its module alone; not recorded (the names are).
    config: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def comparable(self) -> bool:
        """Whether BFCL's leaderboard has this mode: native tools through vLLM's parsers are
        evalpipe's extra mode, not one of BFCL's own paths."""
        return self.name != "native"

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.name, "handler": self.handler, "bfcl_model": self.bfcl_model,
                "checker_model": self.checker_model,
                "leaderboard_comparable": self.comparable}  # fmt: skip


PROMPTING = Mode(name="prompting", handler=PROMPTING_HANDLER, checker_model=PROMPTING_CHECKER)
NATIVE = Mode(name="native", handler=NATIVE_HANDLER, checker_model=NATIVE_CHECKER)


def registered(model: str, handler: str) -> Mode:
    """Handler mode for BFCL's registered `model`, served by its `handler` class."""
    return Mode(name="handler", handler=handler, checker_model=model, bfcl_model=model)


def checker_model(mode: BfclMode, model: str | None) -> str:
    """The registered model BFCL's checker is told in `mode` (`model`: handler mode's)."""
    if mode == "handler":
        return str(model)
    return NATIVE_CHECKER if mode == "native" else PROMPTING_CHECKER
