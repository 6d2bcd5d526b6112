"""Tools a request offers the model (OpenAI function tools), the structured output it must
follow, and the tool calls read back from a completion."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# OpenAI's tool_choice strings; a named function is {"type": "function", "function": {"name": …}}.
TOOL_CHOICES = ("auto", "none", "required")
ToolChoice = str | dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """One function call the model made: its name and its arguments as JSON text."""

    name: str
    arguments: str  # JSON text, as the parser (or server) gave it

    def args(self) -> Any:
        """The arguments as a JSON value; ValueError when they are not JSON."""
        return json.loads(self.arguments)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: Any) -> ToolCall:
        if not isinstance(data, dict):
            raise ValueError(f"a tool call must be a JSON object, got {type(data).__name__}")
        return cls(name=str(data["name"]), arguments=str(data["arguments"]))


@dataclass(frozen=True, kw_only=True)
class ToolCalls:
    """What one completion's answer says once its calls are parsed: the calls, the text
    outside them, and why a call the answer began could not be parsed ("" when it could, or
    when there was none): an unparsed call is recorded and counted, never raised."""

    calls: tuple[ToolCall, ...] = ()
    content: str = ""
    unparsed: str = ""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"calls": [c.to_dict() for c in self.calls], "content": self.content}
        if self.unparsed:
            data["unparsed"] = self.unparsed
        return data

    @classmethod
    def from_dict(cls, data: Any) -> ToolCalls:
        if not isinstance(data, dict):
            raise ValueError(f"tool calls must be a JSON object, got {type(data).__name__}")
        return cls(
            calls=tuple(ToolCall.from_dict(c) for c in data.get("calls") or ()),
            content=str(data.get("content") or ""),
            unparsed=str(data.get("unparsed") or ""),
        )


def check_tools(tools: Sequence[Any], tool_choice: ToolChoice, *, where: str) -> None:
    """Refuse tools that are not OpenAI function tools with distinct names, and a tool_choice
    that is not one of TOOL_CHOICES or names a function not among them (ValueError)."""
    names = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        name = name if isinstance(name, str) else None
        if not (function is not None and tool.get("type") == "function" and name):
            raise ValueError(
                f"{where}: tool {tool!r} is not an OpenAI function tool; write "
                '{"type": "function", "function": {"name": ..., "parameters": {...}}}.'
            )
        parameters = function.get("parameters")
        if parameters is not None:
            check_schema(parameters, where=f"{where}: tool {name!r}'s parameters")
        names.append(name)
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: tool names must be distinct, got {names}")
    if isinstance(tool_choice, str):
        if tool_choice not in TOOL_CHOICES:
            raise ValueError(
                f"{where}: tool_choice {tool_choice!r} is not one of {', '.join(TOOL_CHOICES)} "
                'or {"type": "function", "function": {"name": ...}}'
            )
        if tool_choice == "required" and not names:
            raise ValueError(f"{where}: tool_choice 'required' needs tools; give it some.")
        return
    named = forced_name(tool_choice)
    if named not in names:
        raise ValueError(
            f"{where}: tool_choice names function {named!r}, which is not among the tools "
            f"({', '.join(names) or 'none'}); name one of them."
        )


def forced_name(tool_choice: ToolChoice) -> str | None:
    """The function a named tool_choice forces; None for the strings."""
    if isinstance(tool_choice, str):
        return None
    function = tool_choice.get("function") if isinstance(tool_choice, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    if function is None or tool_choice.get("type") != "function" or not isinstance(name, str):
        raise ValueError(
            f"tool_choice {tool_choice!r} is not one of {', '.join(TOOL_CHOICES)} or "
            '{"type": "function", "function": {"name": ...}}'
        )
    return name


# Schemas found valid, as JSON text: an episode's every step offers the same tools, and checking
# a schema against its meta-schema costs milliseconds each time.
_VALID: set[str] = set()


def check_schema(schema: Any, *, where: str) -> None:
    """Refuse a value that is not a valid JSON schema (by its meta-schema) with the reason."""
    # Imported here: only requests with a schema pay for jsonschema's import.
    import jsonschema

    if not isinstance(schema, Mapping):
        raise ValueError(f"{where}: a JSON schema must be an object, got {schema!r}")
    try:
        text = json.dumps(schema, sort_keys=True)
        if text in _VALID:
            return
        jsonschema.validators.validator_for(schema).check_schema(schema)
        _VALID.add(text)
    except (TypeError, ValueError, jsonschema.SchemaError) as exc:
        message = getattr(exc, "message", str(exc))
        raise ValueError(
            f"{where}: {json.dumps(schema, default=str)[:200]} is not a valid JSON schema "
            f"({message}); fix the schema."
        ) from None


def forced_schema(tools: Sequence[Mapping[str, Any]], tool_choice: ToolChoice) -> Any:
    """The structured output a required or named tool_choice becomes (as vLLM's server builds
    it when its parser takes JSON calls): a named function's parameters, or a non-empty list of
    {"name", "parameters"} objects, one of the tools each; None for "auto" and "none"."""
    named = forced_name(tool_choice)
    if tool_choice in ("auto", "none"):
        return None
    functions = [t["function"] for t in tools]
    if named is not None:
        [function] = [f for f in functions if f["name"] == named]
        return function.get("parameters") or {"type": "object", "properties": {}}
    return {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "anyOf": [
                {
                    "properties": {
                        "name": {"type": "string", "enum": [f["name"]]},
                        "parameters": f.get("parameters") or {"type": "object", "properties": {}},
                    },
                    "required": ["name", "parameters"],
                }
                for f in functions
            ],
        },
    }


def read_forced(answer: str, tool_choice: ToolChoice) -> ToolCalls:
    """The calls an answer written under `forced_schema` holds: the named function with the
    answer as its arguments, or each {"name", "parameters"} of the list; an answer that is not
    that JSON (cut off by max_tokens, say) is an unparsed call."""
    try:
        value = json.loads(answer)
    except ValueError as exc:
        return ToolCalls(content=answer, unparsed=f"not JSON ({exc})")
    named = forced_name(tool_choice)
    if named is not None:
        if not isinstance(value, dict):
            return ToolCalls(content=answer, unparsed="the arguments are not a JSON object")
        return ToolCalls(calls=(ToolCall(name=named, arguments=answer),))
    if not isinstance(value, list) or not all(
        isinstance(c, dict) and isinstance(c.get("name"), str) and "parameters" in c for c in value
    ):
        return ToolCalls(content=answer, unparsed='not a list of {"name", "parameters"} objects')
    return ToolCalls(
        calls=tuple(
            ToolCall(name=c["name"], arguments=json.dumps(c["parameters"], ensure_ascii=False))
            for c in value
        )
    )
