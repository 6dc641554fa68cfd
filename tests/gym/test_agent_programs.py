"""The agent programs shipped for env=agent are ordinary OpenAI-SDK programs: nothing of aloft, and
a calculator that never evaluates model-written text as Python."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from aloft.gym.agents import calculator


def test_the_calculator_agent_imports_nothing_of_aloft():
    tree = ast.parse(Path(calculator.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported == {"__future__", "ast", "json", "operator", "os", "sys", "openai"}


@pytest.mark.parametrize(
    ("expression", "value"),
    [("17 * (3 + 4)", "119"), ("7 / 2", "3.5"), ("-3 + 10 % 4", "-1"), ("2 ** 10", "1024"), (" 8 ", "8")],
)
def test_the_calculator_evaluates_arithmetic(expression, value):
    assert calculator.calculate(expression) == value


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('true')",
        "open('/etc/passwd')",
        "1 / 0",
        "2 ** 10000",
        "x + 1",
        "[1, 2]",
        "1 +",
    ],
)
def test_anything_but_arithmetic_is_an_error_message(expression):
    assert calculator.calculate(expression).startswith("error: ")
