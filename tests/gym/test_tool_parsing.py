"""Tool-call parsing: tags, Hermes/Qwen ``<tool_call>`` JSON and OpenAI ``tool_calls``."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aloft.gym.tools import (
    ParseResult,
    ToolCall,
    first_tag,
    last_tag,
    parse_hermes_calls,
    parse_openai_tool_calls,
    parse_tag_calls,
    strip_code_fence,
)

TAGS = ["sql", "search", "python", "answer", "solution"]


# ---- tags ---------------------------------------------------------------------------------------
def test_tag_calls_in_order_with_raw_text():
    text = (
        "<think>plan</think> <search> capital of France </search> then "
        "<sql>SELECT 1;</sql> and finally <answer>Paris</answer>"
    )
    calls = parse_tag_calls(text, TAGS)
    assert [(c.name, c.arguments) for c in calls] == [
        ("search", {"input": "capital of France"}),
        ("sql", {"input": "SELECT 1;"}),
        ("answer", {"input": "Paris"}),
    ]
    assert calls[0].raw == "<search> capital of France </search>"
    assert all(isinstance(c, ToolCall) and c.id is None for c in calls)


def test_only_requested_tags_are_parsed():
    assert parse_tag_calls("<think>x</think><answer>y</answer>", ["answer"]) == [
        ToolCall("answer", {"input": "y"}, "<answer>y</answer>")
    ]
    assert parse_tag_calls("<answer>y</answer>", ["sql"]) == []


@pytest.mark.parametrize(
    ("inner", "expected"),
    [
        ("```python\nprint(1)\n```", "print(1)"),
        ("\n```py\nx = 1\ny = 2\n```\n", "x = 1\ny = 2"),
        ("```\nprint(2)\n```", "print(2)"),
        ("print(3)", "print(3)"),
        ("print('```')", "print('```')"),
    ],
)
def test_code_fences_are_stripped_inside_python(inner, expected):
    assert parse_tag_calls(f"<python>{inner}</python>", ["python"])[0].arguments["input"] == expected


def test_code_fences_in_sql_stripped_but_not_in_answer():
    assert first_tag("<sql>```sql\nSELECT 2\n```</sql>", "sql") == "SELECT 2"
    assert first_tag("<answer>```x```</answer>", "answer") == "```x```"


def test_unclosed_tags():
    text = "<search>first</search> <search>second, stopped on the stop string"
    assert [c.arguments["input"] for c in parse_tag_calls(text, ["search"])] == ["first"]
    calls = parse_tag_calls(text, ["search"], allow_unclosed=True)
    assert [c.arguments["input"] for c in calls] == ["first", "second, stopped on the stop string"]


def test_multiline_content_and_first_last_tag():
    text = "<answer>\n  one\n</answer> text <answer>two</answer>"
    assert first_tag(text, "answer") == "one"
    assert last_tag(text, "answer") == "two"
    assert first_tag("nothing here", "answer") is None
    assert last_tag("<answer>open", "answer") is None
    assert first_tag("<answer></answer>", "answer") == ""


def test_similar_tag_names_do_not_collide():
    calls = parse_tag_calls("<sql>a</sql><sqlite>b</sqlite>", ["sql", "sqlite"])
    assert [(c.name, c.arguments["input"]) for c in calls] == [("sql", "a"), ("sqlite", "b")]


def test_bad_tag_arguments():
    with pytest.raises(TypeError, match="did you mean"):
        parse_tag_calls("<sql>x</sql>", "sql")
    with pytest.raises(ValueError, match="invalid tag name"):
        parse_tag_calls("x", ["a|b"])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=20), max_size=5))
def test_tag_round_trip(contents):
    text = " filler ".join(f"<search>{content}</search>" for content in contents)
    calls = parse_tag_calls(text, ["search"])
    assert [c.arguments["input"] for c in calls] == [content.strip() for content in contents]


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=80))
def test_tag_parsing_never_raises(text):
    parse_tag_calls(text, TAGS, allow_unclosed=True)
    parse_hermes_calls(text)


def test_strip_code_fence():
    assert strip_code_fence("  ```sql\nSELECT 1\n```  ") == "SELECT 1"
    assert strip_code_fence("plain") == "plain"


# ---- Hermes / Qwen --------------------------------------------------------------------------------
def test_hermes_calls():
    text = (
        "Let me look.\n<tool_call>\n"
        '{"name": "search", "arguments": {"query": "paris", "k": 3}}\n'
        "</tool_call>\n<tool_call>"
        '{"name": "calculate", "arguments": "{\\"expression\\": \\"1+2\\"}"}'
        "</tool_call>"
    )
    result = parse_hermes_calls(text)
    assert isinstance(result, ParseResult)
    assert result.ok and result.errors == []
    assert [(c.name, c.arguments) for c in result.calls] == [
        ("search", {"query": "paris", "k": 3}),
        ("calculate", {"expression": "1+2"}),
    ]
    assert result.calls[0].raw.startswith("<tool_call>") and result.calls[0].raw.endswith("</tool_call>")
    assert len(result) == 2 and list(result) == result.calls


def test_hermes_missing_arguments_and_parameters_alias():
    result = parse_hermes_calls(
        '<tool_call>{"name": "now"}</tool_call><tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>'
    )
    assert [(c.name, c.arguments) for c in result.calls] == [("now", {}), ("f", {"a": 1})]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{bad json}", "not valid JSON"),
        ('["search"]', "must be a JSON object"),
        ('{"arguments": {}}', "no 'name'"),
        ('{"name": "f", "arguments": "{oops"}', "arguments of 'f' are not valid JSON"),
        ('{"name": "f", "arguments": [1, 2]}', "must be a JSON object, got list"),
    ],
)
def test_hermes_malformed_calls_become_errors_not_calls(body, message):
    text = f'<tool_call>{body}</tool_call> <tool_call>{{"name": "ok", "arguments": {{}}}}</tool_call>'
    result = parse_hermes_calls(text)
    assert [c.name for c in result.calls] == ["ok"]
    assert len(result.errors) == 1
    assert not result.ok
    assert message in result.errors[0].message
    assert result.errors[0].raw == f"<tool_call>{body}</tool_call>"


def test_hermes_unclosed_call_at_the_end():
    assert parse_hermes_calls('<tool_call>{"name": "f", "arguments": {}}').calls[0].name == "f"
    truncated = parse_hermes_calls('<tool_call>{"name": "f", "argu')
    assert truncated.calls == [] and "not valid JSON" in truncated.errors[0].message


def test_hermes_no_calls():
    assert parse_hermes_calls("just text") == ParseResult([], [])


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[a-z_]{1,10}", fullmatch=True),
            st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=10), max_size=3),
        ),
        max_size=4,
    )
)
def test_hermes_round_trip(calls):
    text = "\n".join(
        f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
        for name, arguments in calls
    )
    result = parse_hermes_calls(text)
    assert result.ok
    assert [(c.name, c.arguments) for c in result.calls] == calls


# ---- OpenAI ---------------------------------------------------------------------------------------
def test_openai_tool_calls():
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"query": "x"}'},
            },
            {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": ""}},
            {"id": "call_3", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}},
        ],
    }
    result = parse_openai_tool_calls(message)
    assert result.ok
    assert [(c.id, c.name, c.arguments) for c in result.calls] == [
        ("call_1", "search", {"query": "x"}),
        ("call_2", "now", {}),
        ("call_3", "f", {"a": 1}),
    ]
    assert result.calls[0].raw == '{"query": "x"}'


def test_openai_malformed_entries():
    message = {
        "tool_calls": [
            {"id": "a", "function": {"name": "f", "arguments": "{not json"}},
            {"id": "b"},
            {"id": "c", "function": {"arguments": "{}"}},
            {"id": "d", "function": {"name": "g", "arguments": "{}"}},
        ]
    }
    result = parse_openai_tool_calls(message)
    assert [c.id for c in result.calls] == ["d"]
    assert [e.message.split(" (")[0] for e in result.errors] == [
        "the arguments of 'f' are not valid JSON",
        "a tool call needs a 'function' object",
        "the tool call has no 'name' string",
    ]


def test_openai_message_without_calls():
    assert parse_openai_tool_calls({"role": "assistant", "content": "hi"}) == ParseResult()
    assert parse_openai_tool_calls({"tool_calls": None}) == ParseResult()
    assert not parse_openai_tool_calls({"tool_calls": "x"}).ok
