"""``@tool``, ``ToolGroup`` and the calculator tool group, on real calls."""

from __future__ import annotations

import math
import re
import threading
import time
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aloft.gym.tools import (
    CalculatorTools,
    Tool,
    ToolDefinitionError,
    ToolError,
    ToolGroup,
    ToolResult,
    tool,
)
from aloft.gym.tools.calculator import MAX_INT_BITS, evaluate
from aloft.types import InfrastructureError


# ---- @tool ----------------------------------------------------------------------------------------
@tool
def search_books(
    query: str,
    limit: int = 5,
    min_rating: float | None = None,
    tags: list[str] | None = None,
    order: Literal["asc", "desc"] = "desc",
    exact: bool = False,
    filters: dict[str, int] | None = None,
) -> list[str]:
    """Search the catalogue for books.

    Longer explanation that is not part of the description.

    Args:
        query: Words to look for.
        limit (int): How many results to return,
            at most 50.
        min_rating: Lowest rating to accept.
        tags: Only books with all these tags.
        order: Sort order by rating.
        exact: Match the whole title.
        filters: Extra numeric filters.

    Returns:
        The titles.
    """
    return [f"{query}:{limit}:{min_rating}:{order}"]


def test_tool_schema_from_hints_and_docstring():
    assert isinstance(search_books, Tool)
    assert search_books.name == "search_books"
    assert search_books.description == "Search the catalogue for books."
    schema = search_books.schema()
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "search_books"
    parameters = function["parameters"]
    assert parameters["type"] == "object"
    assert parameters["required"] == ["query"]
    properties = parameters["properties"]
    assert properties["query"] == {"type": "string", "description": "Words to look for."}
    assert properties["limit"] == {
        "type": "integer",
        "description": "How many results to return, at most 50.",
        "default": 5,
    }
    assert properties["min_rating"] == {"type": "number", "description": "Lowest rating to accept."}
    assert properties["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "Only books with all these tags.",
    }
    assert properties["order"]["enum"] == ["asc", "desc"]
    assert properties["order"]["type"] == "string"
    assert properties["exact"]["type"] == "boolean"
    assert properties["filters"]["additionalProperties"] == {"type": "integer"}


def test_tool_call_and_optional_without_default_is_filled_with_none():
    @tool
    def greet(name: str, title: str | None) -> str:
        """Greet someone.

        Args:
            name: Their name.
            title: Their title, if any.
        """
        return f"{title or ''} {name}".strip()

    assert greet.parameters["required"] == ["name"]
    assert greet(name="Ada") == "Ada"
    assert greet(name="Ada", title="Dr") == "Dr Ada"
    assert search_books(query="dune") == ["dune:5:None:desc"]


def test_tool_decorator_with_name_and_description():
    @tool(name="lookup", description="Look a word up.")
    def _lookup(word: str) -> str:
        """Ignored description.

        Args:
            word: The word.
        """
        return word.upper()

    assert _lookup.name == "lookup"
    assert _lookup.description == "Look a word up."
    assert _lookup(word="hi") == "HI"


def test_tool_without_parameters():
    @tool
    def now() -> str:
        """The time."""
        return "noon"

    assert now.parameters == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "def f(x):\n    '''Doc.\n\n    Args:\n        x: X.\n    '''",
            "parameter 'x' has no type annotation",
        ),
        ("def f(x: int):\n    '''Doc.'''", "parameter 'x' is not documented"),
        ("def f(x: int):\n    pass", "parameter 'x' is not documented"),
        ("def f():\n    pass", "no description"),
        ("def f(*args: int):\n    '''Doc.\n\n    Args:\n        args: A.\n    '''", "no *args"),
        (
            "def f(x: int):\n    '''Doc.\n\n    Args:\n        x: X.\n        y: Y.\n    '''",
            "documents ['y']",
        ),
        ("def f(x: set):\n    '''Doc.\n\n    Args:\n        x: X.\n    '''", "unsupported annotation"),
        ("def f(x: int | str):\n    '''Doc.\n\n    Args:\n        x: X.\n    '''", "unions other than"),
        ("def f(x: dict[int, int]):\n    '''Doc.\n\n    Args:\n        x: X.\n    '''", "keys must be str"),
    ],
)
def test_bad_tool_definitions_fail_at_decoration_with_one_line(source, message):
    namespace: dict = {}
    exec(source, namespace)
    with pytest.raises(ToolDefinitionError, match=re.escape(message)) as info:
        tool(namespace["f"])
    assert "\n" not in str(info.value)
    assert isinstance(info.value, TypeError)


# ---- ToolGroup ----------------------------------------------------------------------------------
class Notebook(ToolGroup):
    name = "notebook"

    def __init__(self, *, timeout_s: float | None = 2.0) -> None:
        super().__init__(timeout_s=timeout_s)
        self.notes: dict[str, str] = {}
        self.closed_count = 0

    @tool
    def write(self, key: str, text: str) -> str:
        """Store a note.

        Args:
            key: The note's name.
            text: Its content.
        """
        self.notes[key] = text
        return "saved"

    @tool(name="read_note")
    def read(self, key: str) -> str:
        """Read a note.

        Args:
            key: The note's name.
        """
        if key not in self.notes:
            raise ToolError(f"no note called {key!r}")
        return self.notes[key]

    @tool
    def explode(self, count: int) -> str:
        """Raise an exception.

        Args:
            count: Anything.
        """
        raise ValueError(f"boom {count}\nsecond line")

    @tool
    def sleep(self, seconds: float) -> str:
        """Sleep.

        Args:
            seconds: How long.
        """
        time.sleep(seconds)
        return "awake"

    @tool
    def listing(self) -> dict:
        """All notes."""
        return dict(self.notes)

    def on_close(self) -> None:
        self.closed_count += 1


def test_group_lists_bound_tools_and_schemas_in_definition_order():
    group = Notebook()
    assert [t.name for t in group.tools()] == ["write", "read_note", "explode", "sleep", "listing"]
    assert [s["function"]["name"] for s in group.schemas()] == group.tool_names()
    assert "self" not in group.get("write").parameters["properties"]
    # A method tool reached through the instance is bound: no self to pass.
    assert group.write(key="a", text="x") == "saved"
    assert group.get("read_note")(key="a") == "x"
    with pytest.raises(KeyError, match="available"):
        group.get("missing")


def test_state_is_per_instance():
    first, second = Notebook(), Notebook()
    first.call("write", {"key": "k", "text": "v"})
    assert second.call("read_note", {"key": "k"}).ok is False
    assert first.call("read_note", {"key": "k"}).output == "v"


def test_call_success_and_json_output():
    group = Notebook()
    result = group.call("write", {"key": "a", "text": "hello"})
    assert isinstance(result, ToolResult)
    assert (result.output, result.ok, result.error) == ("saved", True, None)
    assert result.elapsed_s >= 0
    assert group.call("listing", {}).output == '{"a": "hello"}'
    assert group.call("listing", None).ok


@pytest.mark.parametrize(
    ("name", "arguments", "kind", "fragment"),
    [
        ("erase", {}, "unknown_tool", "unknown tool 'erase'. Available tools: write, read_note"),
        ("write", {"key": "a"}, "bad_arguments", "missing required argument 'text'"),
        ("write", {"key": "a", "text": "b", "color": 1}, "bad_arguments", "unexpected argument(s) 'color'"),
        (
            "write",
            {"key": 3, "text": "b"},
            "bad_arguments",
            "argument 'key' must be of type string, got integer",
        ),
        ("explode", {"count": True}, "bad_arguments", "must be of type integer, got boolean"),
        ("write", ["a", "b"], "bad_arguments", "arguments must be a JSON object, got array"),
        ("read_note", {"key": "nope"}, "exception", "Error: no note called 'nope'"),
        ("explode", {"count": 2}, "exception", "Error: ValueError: boom 2"),
    ],
)
def test_call_turns_every_problem_into_a_result(name, arguments, kind, fragment):
    group = Notebook()
    result = group.call(name, arguments)
    assert result.ok is False
    assert result.error == kind
    assert fragment in result.output
    assert "second line" not in result.output
    assert group.metrics()["tool_errors"] == 1.0


def test_argument_validation_of_nested_types_and_enums():
    class Books(ToolGroup):
        @tool
        def find(self, tags: list[int], order: Literal["asc", "desc"] = "asc", rating: float = 0) -> str:
            """Find.

            Args:
                tags: Tag ids.
                order: Order.
                rating: Minimum rating.
            """
            return f"{tags} {order} {rating}"

    group = Books()
    assert group.call("find", {"tags": [1, 2], "rating": 3}).output == "[1, 2] asc 3"  # int is a number
    assert "argument 'tags'[1] must be of type integer" in group.call("find", {"tags": [1, "x"]}).output
    assert "must be one of ['asc', 'desc']" in group.call("find", {"tags": [], "order": "up"}).output
    assert group.call("find", {"tags": [], "order": None}).ok  # None for an optional means "default"


def test_a_timeout_the_model_caused_returns_promptly_as_an_observation_and_is_counted():
    group = Notebook(timeout_s=0.2)
    group.policy_causes_timeouts = True  # the model chooses how long `sleep` runs
    start = time.perf_counter()
    result = group.call("sleep", {"seconds": 1.5})
    assert time.perf_counter() - start < 1.0
    assert (result.ok, result.error) == (False, "timeout")
    assert result.output == "Error: tool 'sleep' timed out after 0.2 s."
    assert group.metrics()["tool_timeouts"] == 1.0
    assert group.call("sleep", {"seconds": 0}).output == "awake"  # the group still works


def test_a_call_that_reaches_the_safety_net_is_a_hung_tool_and_fails_the_trajectory():
    """By default a group's tools enforce their own limits, so reaching ``timeout_s`` means the tool
    hung: an InfrastructureError, never an observation the policy is rewarded for."""
    from aloft.gym import InfrastructureError
    from aloft.gym.tools import CalculatorTools, ToolTimeoutError

    group = Notebook(timeout_s=0.2)
    start = time.perf_counter()
    with pytest.raises(ToolTimeoutError, match="tool 'sleep' of Notebook did not return within") as stop:
        group.call("sleep", {"seconds": 1.5})
    assert isinstance(stop.value, InfrastructureError) and time.perf_counter() - start < 1.0
    assert group.metrics()["tool_timeouts"] == 1.0
    assert group.call("sleep", {"seconds": 0}).output == "awake"
    assert CalculatorTools.policy_causes_timeouts  # a calculator's running time is its expression's


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_an_infrastructure_error_goes_through_instead_of_reaching_the_model(timeout_s):
    """A server that is down is not the model's doing: the call raises (the env's step fails, and
    with it the trajectory) rather than returning an error message the model would be scored on."""

    class Backend(ToolGroup):
        @tool
        def lookup(self, key: str) -> str:
            """Look a key up.

            Args:
                key: The key.
            """
            if key == "down":
                raise InfrastructureError("backend at 127.0.0.1:9 is down")
            raise RuntimeError("bad key")

    group = Backend(timeout_s=timeout_s)
    with pytest.raises(InfrastructureError, match="is down"):
        group.call("lookup", {"key": "down"})
    result = group.call("lookup", {"key": "x"})  # any other exception is the model's to read
    assert (result.ok, result.output) == (False, "Error: RuntimeError: bad key")


def test_without_timeout_the_call_runs_on_the_callers_thread():
    seen = []

    class Where(ToolGroup):
        timeout_s = None

        @tool
        def thread(self) -> str:
            """The thread's name."""
            seen.append(threading.current_thread())
            return "ok"

    Where().call("thread", {})
    assert seen == [threading.current_thread()]


def test_metrics_counts_and_reset():
    group = Notebook()
    group.call("write", {"key": "a", "text": "b"})
    group.call("nope", {})
    metrics = group.metrics()
    assert metrics["tool_calls"] == 2.0
    assert metrics["tool_errors"] == 1.0
    assert metrics["tool_timeouts"] == 0.0
    assert set(metrics) == {"tool_calls", "tool_errors", "tool_timeouts", "tool_seconds"}
    assert all(isinstance(value, float) and math.isfinite(value) for value in metrics.values())
    group.reset_stats()
    assert group.metrics()["tool_calls"] == 0.0


def test_close_is_idempotent_context_manager_and_call_after_close_raises():
    with Notebook() as group:
        assert not group.closed
    assert group.closed
    group.close()
    assert group.closed_count == 1
    with pytest.raises(RuntimeError, match="after close"):
        group.call("listing", {})


def test_subclass_that_skips_super_init_still_works():
    class Bare(ToolGroup):
        def __init__(self) -> None:
            self.value = 1

        @tool
        def value_of(self) -> int:
            """The value."""
            return self.value

    group = Bare()
    assert group.call("value_of", {}).output == "1"
    assert group.metrics()["tool_calls"] == 1.0
    group.close()
    group.close()


def test_invalid_timeout():
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        Notebook(timeout_s=0)


def test_calls_from_many_threads_are_all_counted():
    group = Notebook()
    threads = [
        threading.Thread(target=lambda i=i: group.call("write", {"key": str(i), "text": "x"}))
        for i in range(16)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert group.metrics()["tool_calls"] == 16.0
    assert len(group.notes) == 16


# ---- calculator -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("2 ** 10", "1024"),
        ("2^10", "1024"),
        ("2^3 + 1", "9"),  # ^ is a power with the power's precedence
        ("-3 // 2", "-2"),
        ("7 % 3", "1"),
        ("7 / 2", "3.5"),
        ("0.1 + 0.2", "0.3"),
        ("-(-4)", "4"),
        ("+5", "5"),
        ("sqrt(16)", "4"),
        ("round(pi, 4)", "3.1416"),
        ("abs(-2.5)", "2.5"),
        ("log(e)", "1"),
        ("log(8, 2)", "3"),
        ("factorial(5)", "120"),
        ("max(3, 9, 4)", "9"),
        ("2 ** -1", "0.5"),
        ("12345678901234567890 * 98765432109876543210", str(12345678901234567890 * 98765432109876543210)),
        ("1_000 + 1", "1001"),
    ],
)
def test_calculator_values(expression, expected):
    result = CalculatorTools().call("calculate", {"expression": expression})
    assert (result.ok, result.output) == (True, expected)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("2 ** 100000", "result too large"),
        ("9 ** 9 ** 9", "result too large"),
        ("10.0 ** 400", "result too large"),
        ("exp(1000)", "result too large"),
        ("factorial(100000)", "argument too large"),
        ("__import__('os')", "unknown function '__import__'"),
        ("__import__('os').system('true')", "unknown function"),
        ("(1).__class__", "unsupported syntax: Attribute"),
        ("[1, 2]", "unsupported syntax: List"),
        ("1, 2", "unsupported syntax: Tuple"),
        ("x + 1", "unknown name 'x'"),
        ("'a' * 3", "unsupported value 'a'"),
        ("True + 1", "unsupported value True"),
        ("1 +", "invalid expression"),
        ("", "empty expression"),
        ("sqrt(-1)", "math domain error"),
        ("(-8) ** 0.5", "not a real number"),
        ("lambda: 1", "unsupported syntax: Lambda"),
        ("1 if 1 else 2", "unsupported syntax: IfExp"),
        ("round(2.5, x=1)", "positional arguments only"),
        ("1" * 2000, "expression too long"),
        ("-" * 900 + "1", "too deeply nested"),
        (
            "(" * 250 + "1" + ")" * 250,
            "invalid expression: '((((((",
        ),  # the parser's nesting limit  # the parser's own nesting limit
        ("1\x00", "invalid expression"),
    ],
)
def test_calculator_refuses_with_a_readable_message(expression, message):
    result = CalculatorTools().call("calculate", {"expression": expression})
    assert result.ok is False
    assert result.error == "exception"
    assert message in result.output
    assert result.output.startswith("Error: ")
    assert len(result.output) < 250


def test_calculator_huge_power_is_refused_fast():
    start = time.perf_counter()
    with pytest.raises(ToolError):
        evaluate("(2 ** 4000) ** (2 ** 4000)")
    assert time.perf_counter() - start < 0.5


def test_calculator_largest_allowed_integer():
    assert evaluate(f"2 ** {MAX_INT_BITS - 1}") == 2 ** (MAX_INT_BITS - 1)


_OPERATORS = ["+", "-", "*", "//", "%", "**"]


@st.composite
def integer_expressions(draw, depth: int = 3) -> str:
    if depth == 0 or draw(st.booleans()):
        value = draw(st.integers(-50, 50))
        return f"({value})" if value < 0 else str(value)
    operator = draw(st.sampled_from(_OPERATORS))
    left = draw(integer_expressions(depth=depth - 1))
    right = draw(integer_expressions(depth=depth - 1)) if operator != "**" else str(draw(st.integers(0, 4)))
    return f"({left} {operator} {right})"


@settings(max_examples=200, deadline=None)
@given(integer_expressions())
def test_calculator_agrees_with_python_on_integer_expressions(expression):
    try:
        expected = eval(expression, {"__builtins__": {}})  # the reference: trusted, generated input
    except ZeroDivisionError:
        with pytest.raises(ToolError, match="division by zero"):
            evaluate(expression)
        return
    if isinstance(expected, int) and expected.bit_length() > MAX_INT_BITS:
        with pytest.raises(ToolError, match="too large"):
            evaluate(expression)
        return
    assert evaluate(expression) == expected


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40))
def test_calculator_never_raises_anything_but_a_tool_error(text):
    result = CalculatorTools(timeout_s=None).call("calculate", {"expression": text})
    assert result.ok or result.error == "exception"
