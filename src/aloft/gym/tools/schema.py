"""From a typed, documented Python function to a JSON schema, and back: checking arguments.

``build_parameters`` reads the signature, the type hints and the Google-style docstring of a
function and returns its description and the JSON schema (an ``object``) of its parameters.
``check_arguments`` validates a call's arguments against that schema; the ``ToolGroup`` uses it so
that a model's badly typed call becomes a readable error instead of an exception inside the tool.

Supported annotations: ``str``, ``int``, ``float``, ``bool``, ``list`` / ``list[X]``, ``dict`` /
``dict[str, X]``, ``Literal[...]`` (an ``enum``) and ``X | None`` / ``Optional[X]``. A parameter with a
default or an ``Optional`` annotation is not required; a missing ``Optional`` parameter without a
default is passed as ``None``.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

__all__ = ["ToolDefinitionError", "build_parameters", "check_arguments", "parse_docstring"]


class ToolDefinitionError(TypeError):
    """A function cannot become a tool (missing annotation or docstring entry, unsupported type, ...)."""


_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_SECTION_HEADER = re.compile(r"^(\w[\w ]*):\s*$")
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(docstring: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {parameter: description}).

    The description is the first paragraph, its lines joined by spaces. Parameter descriptions come
    from the ``Args:`` (or ``Arguments:`` / ``Parameters:``) section, one ``name (type): text`` or
    ``name: text`` entry per parameter, continuation lines indented further.
    """
    text = inspect.cleandoc(docstring or "")
    if not text:
        return "", {}
    lines = text.splitlines()
    paragraph: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION_HEADER.match(line.strip()):
            break
        paragraph.append(line.strip())
    description = " ".join(paragraph)

    arguments: dict[str, str] = {}
    in_args = False
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = _SECTION_HEADER.match(stripped)
        if header and (entry_indent is None or indent < entry_indent):
            in_args = header.group(1).lower() in ("args", "arguments", "parameters")
            entry_indent, current = None, None
            continue
        if not in_args or not stripped:
            continue
        if entry_indent is None:
            entry_indent = indent
        if indent <= entry_indent:
            match = _ARG_LINE.match(stripped)
            if match:
                current = match.group(1).lstrip("*")
                arguments[current] = match.group(2).strip()
                continue
        if current is not None:  # continuation line of the current entry
            arguments[current] = f"{arguments[current]} {stripped}".strip()
    return description, arguments


def build_parameters(
    function: Callable[..., Any], tool_name: str, skip_first: bool
) -> tuple[dict[str, Any], dict[str, str], frozenset[str]]:
    """The JSON schema of ``function``'s parameters, its docstring's description, and the names of
    the ``Optional`` parameters without a default (filled with ``None`` when a call omits them).

    ``skip_first`` drops the first parameter (``self`` of a method). Raises ``ToolDefinitionError``.
    """
    signature = inspect.signature(function)
    try:
        hints = typing.get_type_hints(function)
    except Exception as error:  # an annotation naming something undefined, for example
        raise ToolDefinitionError(f"tool '{tool_name}': cannot resolve its type hints ({error})") from None
    _, documented = parse_docstring(function.__doc__)
    parameters = list(signature.parameters.values())[1 if skip_first else 0 :]

    properties: dict[str, Any] = {}
    required: list[str] = []
    fill_none: set[str] = set()
    for parameter in parameters:
        name = parameter.name
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            raise ToolDefinitionError(
                f"tool '{tool_name}': parameter '{name}' must be a plain named parameter "
                "(no *args, **kwargs or positional-only parameters)"
            )
        if name not in hints:
            raise ToolDefinitionError(
                f"tool '{tool_name}': parameter '{name}' has no type annotation; annotate it, e.g. '{name}: str'"
            )
        if name not in documented:
            raise ToolDefinitionError(
                f"tool '{tool_name}': parameter '{name}' is not documented; add '{name}: <description>' "
                "under 'Args:' in the docstring"
            )
        schema, optional = _schema_of(hints[name], f"tool '{tool_name}': parameter '{name}'")
        schema = {**schema, "description": documented[name]}
        has_default = parameter.default is not parameter.empty
        if has_default and parameter.default is not None and _is_json_value(parameter.default):
            schema["default"] = parameter.default
        properties[name] = schema
        if not has_default and not optional:
            required.append(name)
        elif optional and not has_default:
            fill_none.add(name)
    unknown = sorted(set(documented) - {parameter.name for parameter in parameters})
    if unknown:
        raise ToolDefinitionError(
            f"tool '{tool_name}': the docstring documents {unknown}, which the function does not take"
        )
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return schema, documented, frozenset(fill_none)


def _is_json_value(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def _schema_of(annotation: Any, where: str) -> tuple[dict[str, Any], bool]:
    """(JSON schema, is_optional) for one annotation."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        members = [member for member in get_args(annotation) if member is not type(None)]
        if len(members) != 1:
            raise ToolDefinitionError(
                f"{where}: unions other than 'X | None' are not supported ({annotation!r})"
            )
        return _schema_of(members[0], where)[0], True
    return _plain_schema(annotation, where), False


def _plain_schema(annotation: Any, where: str) -> dict[str, Any]:
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    origin = get_origin(annotation)
    arguments = get_args(annotation)
    if annotation is list or origin is list:
        if not arguments:
            return {"type": "array"}
        return {"type": "array", "items": _plain_schema(arguments[0], where)}
    if annotation is dict or origin is dict:
        if not arguments:
            return {"type": "object"}
        if arguments[0] is not str:
            raise ToolDefinitionError(f"{where}: dict keys must be str in JSON, got {annotation!r}")
        return {"type": "object", "additionalProperties": _plain_schema(arguments[1], where)}
    if origin is Literal:
        kinds = {type(value) for value in arguments}
        if len(kinds) != 1 or next(iter(kinds)) not in _SCALARS:
            raise ToolDefinitionError(f"{where}: Literal values must all be str, int, float or bool")
        return {"type": _SCALARS[next(iter(kinds))], "enum": list(arguments)}
    raise ToolDefinitionError(
        f"{where}: unsupported annotation {annotation!r}; use str, int, float, bool, list[...], dict, "
        "Literal[...] or X | None"
    )


def check_arguments(arguments: Any, schema: dict[str, Any]) -> str | None:
    """None if ``arguments`` fits the ``object`` schema built by ``build_parameters``, else a
    one-line description of the first problem (addressed to the model that made the call)."""
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, got {_json_type(arguments)}"
    properties: dict[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in arguments:
            return f"missing required argument '{name}'"
    extra = sorted(str(name) for name in arguments if name not in properties)
    if extra:
        return f"unexpected argument(s) {', '.join(map(repr, extra))}; accepted: {', '.join(properties) or 'none'}"
    for name, value in arguments.items():
        if value is None and name not in schema.get("required", []):
            continue  # an omitted-equivalent value for an optional parameter
        problem = _check_value(value, properties[name], f"argument '{name}'")
        if problem:
            return problem
    return None


def _check_value(value: Any, schema: dict[str, Any], where: str) -> str | None:
    expected = schema.get("type")
    if expected is not None and not _has_type(value, expected):
        return f"{where} must be of type {expected}, got {_json_type(value)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} must be one of {schema['enum']}, got {value!r}"
    if expected == "array" and "items" in schema:
        for index, item in enumerate(value):
            problem = _check_value(item, schema["items"], f"{where}[{index}]")
            if problem:
                return problem
    if expected == "object" and isinstance(schema.get("additionalProperties"), dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} must have string keys"
            problem = _check_value(item, schema["additionalProperties"], f"{where}[{key!r}]")
            if problem:
                return problem
    return None


def _has_type(value: Any, expected: str) -> bool:
    if expected == "string":
        return isinstance(value, str)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected == "array":
        return isinstance(value, list)
    if expected == "object":
        return isinstance(value, dict)
    return True


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
