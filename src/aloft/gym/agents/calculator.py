"""A tool-calling agent loop as anyone writes it with the official ``openai`` SDK, and nothing of aloft.

It reads a question on stdin, offers the model a ``calculator`` tool, runs the calls the model makes
and prints the model's final answer. The endpoint comes from ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` (the SDK's own variables), the model name from ``OPENAI_MODEL``. Under
``env=agent`` aloft points those at its capturing server; run by hand it talks to any
OpenAI-compatible server::

    echo "Add 3 and 5." | OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=x \\
        python -m aloft.gym.agents.calculator

The calculator evaluates model-written arithmetic by walking its syntax tree (numbers, + - * / %
** and parentheses), never with ``eval``.
"""

from __future__ import annotations

import ast
import json
import operator
import os
import sys

from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression, e.g. 12 * (3 + 4)",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def calculate(expression: str) -> str:
    """The value of ``expression``, or ``error: ...`` for anything that is not plain arithmetic."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ValueError("exponent too large")
            return OPERATORS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.operand))
        raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")

    try:
        result = value(ast.parse(expression.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError) as error:
        return f"error: {error}"
    return str(int(result)) if float(result).is_integer() else str(result)


def main() -> int:
    question = sys.stdin.read().strip()
    client = OpenAI()
    model = os.environ.get("OPENAI_MODEL", "default")
    messages = [{"role": "user", "content": question}]
    for _ in range(int(os.environ.get("AGENT_MAX_TURNS", "3"))):
        reply = client.chat.completions.create(model=model, messages=messages, tools=TOOLS).choices[0].message
        messages.append(reply.model_dump(exclude_none=True))
        if not reply.tool_calls:
            print(reply.content or "")
            return 0
        for call in reply.tool_calls:
            try:
                expression = str(json.loads(call.function.arguments).get("expression", ""))
            except (json.JSONDecodeError, AttributeError):
                expression = call.function.arguments
            messages.append({"role": "tool", "tool_call_id": call.id, "content": calculate(expression)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
