"""``Tool``, the ``@tool`` decorator and ``ToolGroup`` (docs/reference/design.md §3). Torch-free.

A tool is a typed, documented function::

    @tool
    def add(a: int, b: int = 0) -> int:
        \"\"\"Add two integers.

        Args:
            a: The first addend.
            b: The second addend.
        \"\"\"
        return a + b

    add.schema()   # {"type": "function", "function": {"name": "add", "description": ..., "parameters": ...}}
    add(a=1, b=2)  # 3

Tools that share state live on a ``ToolGroup`` subclass, as methods (``self`` is bound by the
group)::

    class Counter(ToolGroup):
        name = "counter"

        def __init__(self, start: int = 0) -> None:
            super().__init__(timeout_s=5.0)
            self.value = start

        @tool
        def increment(self, by: int = 1) -> int:
            \"\"\"Increment the counter and return it.

            Args:
                by: How much to add.
            \"\"\"
            self.value += by
            return self.value

    with Counter() as group:
        group.call("increment", {"by": 2})   # ToolResult(output="2", ok=True, error=None, elapsed_s=...)

``ToolGroup.call`` is what envs use: it never raises for the model's mistakes or the tool's
failures (unknown tool, bad arguments, an exception, a timeout); each becomes a ``ToolResult`` with
``ok=False``, an ``error`` kind and a message the model can read, and is counted in ``metrics()``.
The one exception is ``aloft.types.InfrastructureError`` (a server down, a sandbox that cannot
start): it is not the model's doing, so it goes through and fails the trajectory instead. A call
that reaches the group's safety-net timeout is one too, ``ToolTimeoutError``, unless the group says
a call's running time is the model's doing (``policy_causes_timeouts``, as the calculator does).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from aloft.gym.tools.schema import ToolDefinitionError, build_parameters, check_arguments, parse_docstring
from aloft.types import InfrastructureError


class ToolTimeoutError(InfrastructureError):
    """A tool call reached its group's safety-net timeout: the tool hung, not the model (see
    ``ToolGroup``); the trajectory fails rather than being trained on."""


__all__ = [
    "ErrorKind",
    "Tool",
    "ToolDefinitionError",
    "ToolError",
    "ToolGroup",
    "ToolResult",
    "ToolStats",
    "tool",
]

ErrorKind = Literal["unknown_tool", "bad_arguments", "exception", "timeout"]
"""Why a ``ToolGroup.call`` failed."""


class ToolError(Exception):
    """Raise it inside a tool to fail with exactly this message for the model (no exception type
    prefix, no traceback), e.g. ``raise ToolError("division by zero")``."""


@dataclass(frozen=True)
class Tool:
    """A callable with a name, a description and the JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema (``{"type": "object", "properties": ..., "required": [...]}``) of the arguments."""
    function: Callable[..., Any]
    fill_none: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    """Optional parameters without a default: passed as ``None`` when a call leaves them out."""
    is_method: bool = field(default=False, repr=False, compare=False)
    """Defined on a class with ``self`` first: accessing it on an instance binds ``self``."""

    def schema(self) -> dict[str, Any]:
        """The tool in the OpenAI tools format (what chat templates and ``tools=`` take)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def __call__(self, *args: Any, **arguments: Any) -> Any:
        """Call the function (no validation; ``ToolGroup.call`` validates model-made calls)."""
        for name in self.fill_none:
            arguments.setdefault(name, None)
        return self.function(*args, **arguments)

    def __get__(self, instance: Any, owner: type | None = None) -> Tool:
        # A method tool read through an instance becomes a Tool bound to that instance.
        if instance is None or not self.is_method:
            return self
        return dataclasses.replace(self, function=self.function.__get__(instance, owner), is_method=False)


@overload
def tool(fn: Callable[..., Any], *, name: str | None = None, description: str | None = None) -> Tool: ...
@overload
def tool(
    fn: None = None, *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function with a Google-style docstring into a ``Tool``.

    Usable as ``@tool`` or ``@tool(name=..., description=...)``. The description defaults to the
    docstring's first paragraph; each parameter's description comes from its ``Args:`` entry. A
    function whose first parameter is ``self`` is a method: put it on a ``ToolGroup`` subclass.
    Raises ``ToolDefinitionError`` (a ``TypeError``) at decoration time for a parameter without an
    annotation or a docstring entry, an unsupported annotation, or no description at all.
    """

    def decorate(function: Callable[..., Any]) -> Tool:
        if not callable(function):
            raise ToolDefinitionError(f"@tool needs a function, got {type(function).__name__}")
        tool_name = name or getattr(function, "__name__", "")
        if not tool_name.isidentifier():
            raise ToolDefinitionError(f"tool name must be an identifier, got {tool_name!r}")
        first = next(iter(_parameter_names(function)), None)
        is_method = first == "self"
        parameters, _, fill_none = build_parameters(function, tool_name, skip_first=is_method)
        text = description if description is not None else parse_docstring(function.__doc__)[0]
        if not text:
            raise ToolDefinitionError(
                f"tool '{tool_name}': no description; write a docstring or pass @tool(description=...)"
            )
        return Tool(tool_name, text, parameters, function, fill_none=fill_none, is_method=is_method)

    return decorate(fn) if fn is not None else decorate


def _parameter_names(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


@dataclass(frozen=True)
class ToolResult:
    """The outcome of ``ToolGroup.call``: what the model sees, and whether it worked."""

    output: str
    """The tool's return value as text, or a readable error message for the model."""
    ok: bool
    error: ErrorKind | None
    """None when ``ok``; else ``"unknown_tool"``, ``"bad_arguments"``, ``"exception"`` or ``"timeout"``."""
    elapsed_s: float


@dataclass
class ToolStats:
    """Counters of one group's calls (thread-safe through the group's lock)."""

    calls: int = 0
    errors: int = 0
    """Failed calls of any kind, timeouts included."""
    timeouts: int = 0
    seconds: float = 0.0
    """Total wall time spent in calls."""

    def as_metrics(self) -> dict[str, float]:
        return {
            "tool_calls": float(self.calls),
            "tool_errors": float(self.errors),
            "tool_timeouts": float(self.timeouts),
            "tool_seconds": float(self.seconds),
        }


class ToolGroup:
    """Tools that share state (a DB connection, an index, a sandbox), reusable by any env.

    Subclasses set ``name`` and define methods decorated with ``@tool``; they release resources in
    ``on_close`` (called once by ``close``, which is idempotent). ``call`` runs a tool by name with
    a JSON-style argument dict, validates the arguments against the schema and never raises for
    the model's or the tool's problems (see ``ToolResult``).

    Timeouts: with ``timeout_s`` set (default 10 s) each call runs on a fresh daemon thread and the
    caller waits at most ``timeout_s``. A Python thread cannot be killed, so a timed-out call keeps
    running in the background until it returns: tools that can hang or run long (code execution,
    SQL) must enforce their own limits (a subprocess with a kill, a progress handler), as the
    python sandbox and the sql tools do, and report their own limits to the model as observations;
    the group's timeout is a safety net that keeps the episode moving. A call that reaches it is a
    tool that hung (a server, a lock, a sandbox that failed to kill its child): ``ToolTimeoutError``,
    an ``InfrastructureError`` that fails the trajectory instead of becoming a reward. A group whose
    running time the model's arguments decide (a calculator's expression) sets
    ``policy_causes_timeouts = True``: its timed-out calls become observations the model learns
    from. ``timeout_s=None`` runs calls inline on the caller's thread.
    """

    name: str = "tools"
    timeout_s: float | None = 10.0
    policy_causes_timeouts: bool = False
    """True: a call that reaches ``timeout_s`` is the model's doing and becomes an observation;
    False: it is a hung tool, and fails the trajectory (``ToolTimeoutError``)."""

    def __init__(self, *, timeout_s: float | None | Literal["default"] = "default") -> None:
        if timeout_s != "default":
            if timeout_s is not None and (isinstance(timeout_s, bool) or not timeout_s > 0):
                raise ValueError(f"{type(self).__name__}: timeout_s must be > 0 or None, got {timeout_s!r}")
            self.timeout_s = timeout_s
        self._ensure_state()

    # State is created lazily too, so a subclass that forgets super().__init__() still works.
    def _ensure_state(self) -> None:
        if "_lock" not in self.__dict__:
            self._lock = threading.Lock()
            self.stats = ToolStats()
            self._closed = False

    # ---- the tools -------------------------------------------------------------------------
    def tools(self) -> list[Tool]:
        """This group's tools, bound to this instance, in definition order (base classes first)."""
        attributes: dict[str, None] = {}
        for klass in reversed(type(self).__mro__):
            for attribute, value in vars(klass).items():
                if isinstance(value, Tool):
                    attributes[attribute] = None
        return [getattr(self, attribute) for attribute in attributes]

    def get(self, name: str) -> Tool:
        """The tool called ``name``; ``KeyError`` listing the available names if there is none."""
        for candidate in self.tools():
            if candidate.name == name:
                return candidate
        raise KeyError(f"{type(self).__name__} has no tool {name!r}; available: {self.tool_names()}")

    def tool_names(self) -> list[str]:
        return [candidate.name for candidate in self.tools()]

    def schemas(self) -> list[dict[str, Any]]:
        """All tools in the OpenAI tools format, e.g. for ``tokenizer.apply_chat_template(tools=...)``."""
        return [candidate.schema() for candidate in self.tools()]

    # ---- calling ---------------------------------------------------------------------------
    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        """Run tool ``name`` with ``arguments``; every failure becomes a ``ToolResult`` with ok=False.

        Raises only ``RuntimeError`` when the group is already closed (a bug in the env, not the model).
        """
        self._ensure_state()
        if self._closed:
            raise RuntimeError(f"{type(self).__name__}.call({name!r}) after close()")
        start = time.perf_counter()
        tools = {candidate.name: candidate for candidate in self.tools()}
        selected = tools.get(name)
        if selected is None:
            known = ", ".join(tools) or "none"
            return self._finish(
                start, f"Error: unknown tool {name!r}. Available tools: {known}.", "unknown_tool"
            )
        given = dict(arguments) if isinstance(arguments, Mapping) else arguments
        if given is None:
            given = {}
        problem = check_arguments(given, selected.parameters)
        if problem:
            return self._finish(start, f"Error: bad arguments for tool {name!r}: {problem}.", "bad_arguments")
        return self._run(selected, given, start)

    def _run(self, selected: Tool, arguments: dict[str, Any], start: float) -> ToolResult:
        if self.timeout_s is None:
            outcome = _invoke(selected, arguments)
        else:
            holder: list[tuple[bool, Any]] = []
            worker = threading.Thread(
                target=lambda: holder.append(_invoke(selected, arguments)),
                name=f"aloft-tool-{selected.name}",
                daemon=True,
            )
            worker.start()
            worker.join(self.timeout_s)
            if not holder:
                message = f"Error: tool {selected.name!r} timed out after {self.timeout_s:g} s."
                result = self._finish(start, message, "timeout")
                if self.policy_causes_timeouts:
                    return result
                raise ToolTimeoutError(
                    f"tool {selected.name!r} of {type(self).__name__} did not return within its group's "
                    f"safety-net timeout_s={self.timeout_s:g} (its own limits did not stop it); fix the "
                    "tool, raise timeout_s, or set policy_causes_timeouts=True if the model's arguments "
                    "decide its running time"
                )
            outcome = holder[0]
        succeeded, value = outcome
        if isinstance(value, InfrastructureError):
            raise value  # not the policy's doing: the trajectory fails instead (aloft.types)
        if not succeeded:
            return self._finish(start, f"Error: {value}", "exception")
        return self._finish(start, _to_text(value), None)

    def _finish(self, start: float, output: str, error: ErrorKind | None) -> ToolResult:
        elapsed = time.perf_counter() - start
        with self._lock:
            self.stats.calls += 1
            self.stats.seconds += elapsed
            if error is not None:
                self.stats.errors += 1
            if error == "timeout":
                self.stats.timeouts += 1
        return ToolResult(output=output, ok=error is None, error=error, elapsed_s=elapsed)

    # ---- metrics and lifecycle ----------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """``tool_calls``, ``tool_errors``, ``tool_timeouts`` and ``tool_seconds`` since the last
        ``reset_stats`` (envs usually reset them per episode and report them in ``Env.metrics``)."""
        self._ensure_state()
        with self._lock:
            return self.stats.as_metrics()

    def reset_stats(self) -> None:
        self._ensure_state()
        with self._lock:
            self.stats = ToolStats()

    @property
    def closed(self) -> bool:
        self._ensure_state()
        return self._closed

    def close(self) -> None:
        """Release the group's resources (calls ``on_close`` once). Idempotent."""
        self._ensure_state()
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.on_close()

    def on_close(self) -> None:
        """Override to release resources (connections, sandboxes, temp dirs). Called once."""

    def __enter__(self) -> ToolGroup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _invoke(selected: Tool, arguments: dict[str, Any]) -> tuple[bool, Any]:
    """(True, return value) or (False, a one-line message about the exception, or the
    ``InfrastructureError`` itself: the caller raises it again)."""
    try:
        return True, selected(**arguments)
    except InfrastructureError as error:
        return False, error
    except ToolError as error:
        return False, str(error)
    except Exception as error:
        detail = str(error).strip().splitlines()
        return False, f"{type(error).__name__}: {detail[0]}" if detail else type(error).__name__


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list | tuple | bool | int | float):
        try:
            return json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            return str(value)
    return str(value)
