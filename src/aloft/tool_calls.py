"""Finding tool calls in a completion, for the formats models use. Torch-free.

Three formats, chosen per env:

- **Tags** (Search-R1, SkyRL-SQL, tool-integrated reasoning): ``<search>query</search>``,
  ``<sql>SELECT ...</sql>``, ``<python>code</python>``, ``<answer>..</answer>``. ``parse_tag_calls``
  returns one ``ToolCall`` per tag, in order, named after the tag, with the inner text in
  ``arguments["input"]``. Markdown code fences inside ``<python>`` / ``<sql>`` are removed. Tags
  never fail to parse: text that is not a complete tag is simply not a call.
- **Hermes / Qwen JSON**: ``<tool_call>{"name": "f", "arguments": {...}}</tool_call>``
  (``parse_hermes_calls``).
- **OpenAI** ``tool_calls`` of an assistant message (``parse_openai_tool_calls``).

The JSON formats can be malformed (bad JSON, no name, arguments that are not an object). Those
functions return a ``ParseResult``: the well-formed ``calls`` and, separately, one ``ParseError``
per malformed call (the raw text and a message to show the model). A malformed call never becomes a
``ToolCall``, so an env either answers the errors (e.g. "your tool call was not valid JSON: ...")
or ignores them, but never runs a half-parsed call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ParseError",
    "ParseResult",
    "ToolCall",
    "first_tag",
    "last_tag",
    "parse_hermes_calls",
    "parse_openai_tool_calls",
    "parse_tag_calls",
    "strip_code_fence",
]

FENCED_TAGS: tuple[str, ...] = ("python", "sql")
"""Tags whose inner text has its markdown code fence removed by default."""


@dataclass(frozen=True)
class ToolCall:
    """One call found in a completion."""

    name: str
    """The tool's name (for tag calls: the tag)."""
    arguments: dict[str, Any]
    """The arguments (for tag calls: ``{"input": inner text}``)."""
    raw: str
    """The exact text the call was parsed from (the whole tag or ``<tool_call>`` block, or the
    OpenAI ``function.arguments`` string)."""
    id: str | None = None
    """The OpenAI ``tool_call_id`` to answer with a ``tool`` message, when the format has one."""


@dataclass(frozen=True)
class ParseError:
    """A call that could not be parsed."""

    raw: str
    message: str
    """One line saying what is wrong, readable by the model."""


@dataclass(frozen=True)
class ParseResult:
    """The well-formed ``calls`` and the ``errors`` of the malformed ones, each in text order."""

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[ParseError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing was malformed (there may still be no calls at all)."""
        return not self.errors

    def __iter__(self) -> Iterator[ToolCall]:
        return iter(self.calls)

    def __len__(self) -> int:
        return len(self.calls)


# ---- tags ---------------------------------------------------------------------------------------
_FENCE = re.compile(r"^```[\w+-]*[ \t]*\n(.*?)\n?```$", re.DOTALL)


def strip_code_fence(text: str) -> str:
    """``text`` stripped, without a surrounding markdown code fence (```lang ... ```) if it has one."""
    stripped = text.strip()
    match = _FENCE.match(stripped)
    return match.group(1).strip() if match else stripped


def _tag_pattern(tags: Sequence[str], allow_unclosed: bool) -> re.Pattern[str]:
    if isinstance(tags, str):
        raise TypeError(f"tags must be a sequence of tag names, not a str; did you mean [{tags!r}]?")
    for tag in tags:
        if not re.fullmatch(r"[A-Za-z_][\w-]*", tag):
            raise ValueError(f"invalid tag name {tag!r}; use letters, digits, '_' or '-'")
    names = "|".join(re.escape(tag) for tag in sorted(tags, key=len, reverse=True))
    end = r"(?:</(?P=tag)>|\Z)" if allow_unclosed else r"</(?P=tag)>"
    return re.compile(rf"<(?P<tag>{names})>(?P<inner>.*?){end}", re.DOTALL)


def parse_tag_calls(
    text: str,
    tags: Sequence[str],
    *,
    allow_unclosed: bool = False,
    fenced_tags: Collection[str] = FENCED_TAGS,
) -> list[ToolCall]:
    """Every ``<tag>inner</tag>`` of one of ``tags`` in ``text``, in order, as ``ToolCall(name=tag,
    arguments={"input": inner}, raw=whole tag)``. The inner text is stripped; for tags in
    ``fenced_tags`` a markdown code fence around it is removed.

    ``allow_unclosed``: also accept a last tag left open at the end of ``text`` (a generation that
    stopped on the stop string ``</tag>``, which engines drop from the text by default).
    """
    calls = []
    for match in _tag_pattern(tags, allow_unclosed).finditer(text):
        tag, inner = match.group("tag"), match.group("inner")
        content = strip_code_fence(inner) if tag in fenced_tags else inner.strip()
        calls.append(ToolCall(name=tag, arguments={"input": content}, raw=match.group(0)))
    return calls


def first_tag(text: str, tag: str, *, fenced_tags: Collection[str] = FENCED_TAGS) -> str | None:
    """The (stripped) inner text of the first complete ``<tag>...</tag>``, or None."""
    calls = parse_tag_calls(text, [tag], fenced_tags=fenced_tags)
    return calls[0].arguments["input"] if calls else None


def last_tag(text: str, tag: str, *, fenced_tags: Collection[str] = FENCED_TAGS) -> str | None:
    """The (stripped) inner text of the last complete ``<tag>...</tag>``, or None."""
    calls = parse_tag_calls(text, [tag], fenced_tags=fenced_tags)
    return calls[-1].arguments["input"] if calls else None


# ---- JSON calls ---------------------------------------------------------------------------------
_HERMES = re.compile(r"<tool_call>(?P<body>.*?)(?:</tool_call>|\Z)", re.DOTALL)


def parse_hermes_calls(text: str) -> ParseResult:
    """The Hermes / Qwen calls ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in ``text``.

    ``arguments`` may be an object or a JSON string holding one (``parameters`` is accepted as an
    alias); missing arguments mean ``{}``. A ``<tool_call>`` left open at the end of the text is
    parsed too (generation may stop on ``</tool_call>``); if its JSON is incomplete it is an error.
    """
    calls: list[ToolCall] = []
    errors: list[ParseError] = []
    for match in _HERMES.finditer(text):
        raw = match.group(0)
        body = strip_code_fence(match.group("body"))
        try:
            payload = json.loads(body)
        except json.JSONDecodeError as error:
            errors.append(
                ParseError(raw, f"the tool call is not valid JSON ({error.msg} at char {error.pos})")
            )
            continue
        call = _call_from_payload(payload, raw, call_id=None)
        (calls if isinstance(call, ToolCall) else errors).append(call)  # type: ignore[arg-type]
    return ParseResult(calls, errors)


def parse_openai_tool_calls(message: Mapping[str, Any]) -> ParseResult:
    """The calls in an OpenAI assistant message's ``tool_calls``
    (``[{"id", "type": "function", "function": {"name", "arguments": "<JSON string>"}}]``).

    ``function.arguments`` may also be an already-decoded object. A message without
    ``tool_calls`` gives an empty result.
    """
    entries = message.get("tool_calls") or []
    calls: list[ToolCall] = []
    errors: list[ParseError] = []
    if not isinstance(entries, list):
        return ParseResult([], [ParseError(repr(entries), "tool_calls must be a list")])
    for entry in entries:
        function = entry.get("function") if isinstance(entry, Mapping) else None
        if not isinstance(function, Mapping):
            errors.append(ParseError(_dump(entry), "a tool call needs a 'function' object"))
            continue
        call_id = entry.get("id")
        payload = {"name": function.get("name"), "arguments": function.get("arguments")}
        raw = function.get("arguments") if isinstance(function.get("arguments"), str) else _dump(entry)
        call = _call_from_payload(payload, raw, call_id=str(call_id) if call_id is not None else None)
        (calls if isinstance(call, ToolCall) else errors).append(call)  # type: ignore[arg-type]
    return ParseResult(calls, errors)


def _call_from_payload(payload: Any, raw: str, call_id: str | None) -> ToolCall | ParseError:
    if not isinstance(payload, dict):
        return ParseError(raw, "the tool call must be a JSON object with 'name' and 'arguments'")
    name = payload.get("name")
    if not isinstance(name, str) or not name.strip():
        return ParseError(raw, "the tool call has no 'name' string")
    arguments = payload.get("arguments", payload.get("parameters"))
    if arguments is None or arguments == "":
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as error:
            return ParseError(
                raw, f"the arguments of '{name}' are not valid JSON ({error.msg} at char {error.pos})"
            )
    if not isinstance(arguments, dict):
        return ParseError(
            raw, f"the arguments of '{name}' must be a JSON object, got {type(arguments).__name__}"
        )
    return ToolCall(name=name.strip(), arguments=arguments, raw=raw, id=call_id)


def _dump(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
