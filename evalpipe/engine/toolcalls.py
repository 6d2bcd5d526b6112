"""Tool calls read with vLLM's own parsers (a preset's `tool_parser`, as `vllm serve
--tool-call-parser`), doing what vLLM's chat server does around them: the parser adjusts the
request (hermes keeps special tokens), a required or named tool_choice becomes a structured
output, the reasoning is split off first and the calls are parsed from the answer.

vLLM's parsers log a malformed call and hand it back as plain content; here a call the answer
began (the parser's start marker) that did not parse is recorded on the completion instead."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from evalpipe.core.configio import suggest
from evalpipe.core.errors import ConfigError
from evalpipe.records.prompt import messages
from evalpipe.records.reasoning import split
from evalpipe.records.request import Request
from evalpipe.records.tools import ToolCall, ToolCalls, forced_schema, read_forced

# Where vLLM's parsers keep the text that opens a call (the first one a parser has is used).
MARKER_ATTRIBUTES = ("tool_call_start_token", "tool_calls_start_token", "bot_token")


@functools.cache
def parser_names() -> tuple[str, ...]:
    """The tool-call parsers the installed vLLM registers (`--tool-call-parser` choices)."""
    from vllm.tool_parsers import ToolParserManager

    return tuple(sorted(ToolParserManager.list_registered()))


def parser_class(name: str, *, preset: str) -> Any:
    """vLLM's parser class for `name`, or ConfigError naming the preset and the nearest names."""
    from vllm.tool_parsers import ToolParserManager

    if name not in parser_names():
        raise ConfigError(
            f"Preset {preset!r}: tool_parser {name!r} is not one of vLLM's tool-call parsers."
            f"{suggest(name, parser_names())} Valid: {', '.join(parser_names())}."
        )
    return ToolParserManager.get_tool_parser(name)


def check_parser(name: str, tokenizer: Any, *, preset: str) -> None:
    """Refuse a parser whose constructor refuses the preset's tokenizer (llama3_json and
    mistral need their models' special tokens), naming the preset."""
    cls = parser_class(name, preset=preset)
    try:
        cls(tokenizer)
    except Exception as exc:  # vLLM's parsers raise what they like (RuntimeError, KeyError, …)
        raise ConfigError(
            f"Preset {preset!r}: tool_parser {name!r} refuses this model's tokenizer "
            f"({type(exc).__name__}: {exc}); choose the parser the model's card names."
        ) from None


class ToolReader:
    """A preset's tool-call parser over its tokenizer: how a request with tools is generated
    and how its completions' calls are read."""

    def __init__(
        self, name: str | None, tokenizer: Any, *, preset: str, reasoning_parser: str | None
    ) -> None:
        if name is not None:
            check_parser(name, tokenizer, preset=preset)
        self.name = name
        self.tokenizer = tokenizer
        self.preset = preset
        self.reasoning_parser = reasoning_parser

    def schema(self, request: Request) -> Any:
        """The structured output the request must follow: its json_schema, or the one its
        required or named tool_choice becomes; None when free."""
        if request.json_schema is not None:
            return request.json_schema
        return forced_schema(request.tools, request.tool_choice) if request.tools else None

    def keeps_special_tokens(self, request: Request) -> bool:
        """Whether the parser needs the special tokens in the text (vLLM's `adjust_request`:
        hermes's call markers are special tokens in some models)."""
        if not self._parses(request):
            return False
        adjusted = self._parser(request).adjust_request(self._chat_request(request))
        return adjusted.skip_special_tokens is False

    def read(self, texts: Sequence[str], request: Request) -> tuple[ToolCalls, ...]:
        """Each completion's calls (empty when the request offered no tools)."""
        if not request.tools:
            return ()
        return tuple(self._read(text, request) for text in texts)

    def _read(self, text: str, request: Request) -> ToolCalls:
        parts = split(text, self.reasoning_parser)
        if parts.cut_off or request.tool_choice == "none":
            return ToolCalls(content=parts.answer)
        if request.tool_choice != "auto":
            return read_forced(parts.answer, request.tool_choice)
        self._parses(request)  # a preset without a parser is refused here
        parser, chat = self._parser(request), self._chat_request(request)
        found = parser.extract_tool_calls(parts.answer, chat)
        calls = tuple(
            ToolCall(name=c.function.name, arguments=c.function.arguments)
            for c in (found.tool_calls if found.tools_called else ())
        )
        content = found.content or ""
        marker = next(
            (m for a in MARKER_ATTRIBUTES if isinstance(m := getattr(parser, a, None), str)), None
        )
        unparsed = ""
        if not calls and marker and marker in parts.answer:
            unparsed = f"the answer opens a call ({marker}) that {self.name} could not parse"
        return ToolCalls(calls=calls, content=content, unparsed=unparsed)

    def _parses(self, request: Request) -> bool:
        """Whether the preset's parser reads this request's calls ("auto" with tools)."""
        if not request.tools or request.tool_choice != "auto":
            return False
        if self.name is None:
            raise ConfigError(
                f"Preset {self.preset!r} has no tool_parser, so the calls of a request with "
                f"tools and tool_choice 'auto' ({request.id!r}) cannot be read; set the "
                "preset's tool_parser to the model's (as vllm serve --tool-call-parser)."
            )
        return True

    def _parser(self, request: Request) -> Any:
        return parser_class(self.name, preset=self.preset)(
            self.tokenizer, tools=self._chat_request(request).tools
        )

    def _chat_request(self, request: Request) -> Any:
        """The request as vLLM's chat server holds it (what its parsers read)."""
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        return ChatCompletionRequest(
            messages=messages(request.prompt),  # type: ignore[arg-type]
            tools=list(request.tools),  # type: ignore[arg-type]
            tool_choice=request.tool_choice,  # type: ignore[arg-type]
        )
