"""``CalculatorTools``: safe arithmetic for tool-integrated reasoning. Never uses ``eval``.

The expression is parsed with ``ast`` and evaluated by walking an allow-list of node types:
numbers, ``+ - * / // % **`` (``^`` is read as ``**``, as people write it), unary ``+``/``-``,
parentheses, the constants ``pi``, ``e``, ``tau`` and the functions in ``FUNCTIONS``. Anything else
(names, attributes, subscripts, comprehensions, strings, ...) is refused with a one-line message.
Integer arithmetic is exact; results larger than ``MAX_INT_BITS`` bits, float overflow, NaN and
infinity are refused before they cost time or memory.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from aloft.gym.tools.base import ToolError, ToolGroup, tool

__all__ = ["CONSTANTS", "FUNCTIONS", "CalculatorTools", "evaluate", "format_number"]

MAX_EXPRESSION_CHARS = 1_000
MAX_INT_BITS = 4_096
"""Largest integer result (about 1233 decimal digits)."""
MAX_FACTORIAL = 300
MAX_DEPTH = 100
"""Deepest nesting of operations and calls."""

Number = int | float


def _factorial(value: Number) -> int:
    if isinstance(value, float):
        if not value.is_integer():
            raise ToolError("factorial() needs a non-negative integer")
        value = int(value)
    if value < 0:
        raise ToolError("factorial() needs a non-negative integer")
    if value > MAX_FACTORIAL:
        raise ToolError(f"factorial() argument too large (at most {MAX_FACTORIAL})")
    return math.factorial(value)


def _log(value: Number, base: Number | None = None) -> float:
    return math.log(value) if base is None else math.log(value, base)


def _round(value: Number, digits: int | None = None) -> Number:
    if digits is not None and not isinstance(digits, int):
        raise ToolError("round() digits must be an integer")
    return round(value) if digits is None else round(value, digits)


FUNCTIONS: dict[str, Callable[..., Number]] = {
    "sqrt": math.sqrt,
    "cbrt": lambda value: math.copysign(abs(value) ** (1 / 3), value),
    "exp": math.exp,
    "log": _log,
    "ln": math.log,
    "log2": math.log2,
    "log10": math.log10,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "abs": abs,
    "round": _round,
    "floor": math.floor,
    "ceil": math.ceil,
    "factorial": _factorial,
    "gcd": math.gcd,
    "min": min,
    "max": max,
}
"""Functions an expression may call (positional arguments only)."""

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def format_number(value: Number) -> str:
    """An int as is; a float with up to 15 significant digits (``0.1 + 0.2`` -> ``0.3``)."""
    if isinstance(value, int):
        return str(value)
    return format(value, ".15g")


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression safely; raises ``ToolError`` with a readable message."""
    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("empty expression")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression too long (at most {MAX_EXPRESSION_CHARS} characters)")
    source = expression.strip().replace("^", "**")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError:
        raise ToolError(f"invalid expression: {_shorten(expression)}") from None
    except (RecursionError, MemoryError):
        raise ToolError("expression too deeply nested") from None
    except ValueError:  # e.g. a NUL byte
        raise ToolError(f"invalid expression: {_shorten(expression)}") from None
    try:
        result = _evaluate(tree.body)
    except ToolError:
        raise
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("result too large") from None
    except RecursionError:
        raise ToolError("expression too deeply nested") from None
    except (ValueError, TypeError) as error:
        raise ToolError(f"math error: {error}") from None
    return _checked(result)


def _shorten(expression: str, limit: int = 60) -> str:
    text = expression.strip()
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def _checked(value: Any) -> Number:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError(f"the result is not a real number ({type(value).__name__})")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("the result is not a finite number")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolError(f"result too large (more than {MAX_INT_BITS} bits)")
    return value


def _evaluate(node: ast.AST, depth: int = 0) -> Number:
    if depth > MAX_DEPTH:
        raise ToolError(f"expression too deeply nested (more than {MAX_DEPTH} levels)")
    depth += 1
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise ToolError(f"unsupported value {node.value!r}; only numbers are allowed")
        return _checked(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, depth), _evaluate(node.right, depth)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        return _checked(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _checked(_UNARY[type(node.op)](_evaluate(node.operand, depth)))
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise ToolError(f"unknown name {node.id!r}; constants: {', '.join(CONSTANTS)}")
    if isinstance(node, ast.Call):
        return _call(node, depth)
    raise ToolError(f"unsupported syntax: {type(node).__name__}; use numbers, + - * / // % ** and functions")


def _call(node: ast.Call, depth: int) -> Number:
    name = node.func.id if isinstance(node.func, ast.Name) else None
    if name not in FUNCTIONS:
        shown = name if name is not None else ast.unparse(node.func)
        raise ToolError(f"unknown function {shown!r}; available: {', '.join(FUNCTIONS)}")
    if node.keywords:
        raise ToolError(f"{name}() takes positional arguments only")
    arguments = [_evaluate(argument, depth) for argument in node.args]
    try:
        return _checked(FUNCTIONS[name](*arguments))
    except TypeError as error:
        raise ToolError(f"{name}(): {error}") from None
    except ValueError:
        raise ToolError(f"{name}(): math domain error") from None


def _check_power(base: Number, exponent: Number) -> None:
    """Refuse powers whose result would be huge before computing them."""
    if abs(base) <= 1 or exponent <= 0:
        return
    if math.log2(abs(base)) * exponent > MAX_INT_BITS + 1:
        raise ToolError(f"result too large (more than {MAX_INT_BITS} bits)")


class CalculatorTools(ToolGroup):
    """A stateless calculator tool group: one tool, ``calculate``."""

    name = "calculator"
    policy_causes_timeouts = True  # the model's expression decides how long a call runs

    def __init__(self, *, timeout_s: float | None = 5.0) -> None:
        super().__init__(timeout_s=timeout_s)

    @tool
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression and return the result. Supports + - * / // % **
        (or ^), parentheses, the constants pi and e, and the functions sqrt, exp, log, ln, log2,
        log10, sin, cos, tan, asin, acos, atan, abs, round, floor, ceil, factorial, gcd, min, max.

        Args:
            expression: The expression, e.g. "(3 + 4) * sqrt(16) / 2".
        """
        return format_number(evaluate(expression))
