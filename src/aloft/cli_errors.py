"""How ``aloft`` commands report an error: one line for a mistake a user can make, a traceback for a bug.

``expected_failure`` sorts an exception a command raised: the project's own one-line errors, a missing
package, a file problem, bad YAML and a bad value become ``(line, exit code)``; anything else is a bug
and returns None, so ``aloft.cli.main`` lets its traceback through. The lookups go through
``sys.modules``, so sorting an error never imports torch or the report stack.
"""

from __future__ import annotations

import sys
from typing import Any

EXTRAS = {"serve": "serve", "tinker-serve": "tinker", "report": "report", "experiment": "experiment"}
"""Command -> the extra (``pip install 'aloft[EXTRA]'``) that installs the packages it imports."""

PROJECT_ERRORS = (
    ("aloft.config.loading", "ConfigError", "config error: ", 2),
    ("aloft.report.runs", "ReportError", "report error: ", 2),
    ("aloft.models.loading", "ModelUnavailableError", "", 2),
    ("aloft.trainer.failures", "TooManyFailures", "run stopped: ", 1),
)
"""The project's own one-line errors: (module, class, what the line starts with, exit code). A run
stopped by failed trajectories is an outcome, not bad input, hence its exit code 1."""


def expected_failure(error: Exception, command: str) -> tuple[str, int] | None:
    """``(one line, exit code)`` for an error that bad input or a missing install causes in
    ``command``, or None for any other error (a bug, whose traceback must stay visible).

    Expected: the project's own one-line errors (``PROJECT_ERRORS``), a missing package, a file
    problem (``OSError``), bad YAML, and a bad value (``ValueError``, pydantic's ``ValidationError``)
    in every command but ``train``: train's preflight turns each bad setting into a ``ConfigError``
    before the model loads, so a bare ``ValueError`` there comes from the run itself. ``experiment``
    also phrases its failed runs and warm start as one-line ``RuntimeError``s.
    """
    for module, name, start, code in PROJECT_ERRORS:
        if _is_loaded_class(error, module, name):
            return start + _flat(error), code
    if isinstance(error, ImportError):
        line = _missing_install(error, command)
        return None if line is None else (line, 2)
    if _is_loaded_class(error, "yaml", "YAMLError"):
        source = getattr(getattr(error, "problem_mark", None), "name", "") or ""
        named = source and not source.startswith("<")  # "<unicode string>": parsed from a string
        return (f"{source} is " if named else "") + yaml_problem(error), 2
    if isinstance(error, OSError):
        return _os_problem(error), 2
    if isinstance(error, ValueError) and command != "train":
        return _value_problem(error), 2
    if isinstance(error, RuntimeError) and command == "experiment":
        return _flat(error), 2
    return None


def _is_loaded_class(error: Exception, module: str, name: str) -> bool:
    """``isinstance(error, module.name)``, looked up in ``sys.modules``: an error of that class can
    only exist once its module is imported, and the error path must not import torch or the report
    stack to find out."""
    cls = getattr(sys.modules.get(module), name, None)
    return isinstance(cls, type) and isinstance(error, cls)


def _flat(error: BaseException | str) -> str:
    """The message on one line (a multi-line message's lines joined), or the class name if empty."""
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return text or type(error).__name__


def _missing_install(error: ImportError, command: str) -> str | None:
    """One line for a package that is not installed, or None for a broken import (a bug)."""
    if "pip install" in str(error):
        return _flat(error)  # the project's own message: the package and its install line
    package = (error.name or "").split(".")[0]
    if not isinstance(error, ModuleNotFoundError) or not package or package == "aloft":
        return None  # a missing aloft module or a name missing from an installed package
    extra = EXTRAS.get(command)
    install = f"pip install 'aloft[{extra}]'" if extra else f"pip install {package}"
    return f"{command} needs {package}, which is not installed: {install}"


def yaml_problem(error: Exception) -> str:
    """A YAML parse error as one line, what is wrong and where: ``not valid YAML (PROBLEM, line L,
    column C)`` (PyYAML's own text spans several lines)."""
    mark = getattr(error, "problem_mark", None)
    where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"not valid YAML ({getattr(error, 'problem', None) or _flat(error)}{where})"


def _os_problem(error: OSError) -> str:
    """``strerror: path`` (``-> path2`` for a rename) when the error names a path, else its message."""
    if error.filename is None:
        return _flat(error)
    target = f" -> {error.filename2}" if error.filename2 is not None else ""
    return f"{error.strerror}: {error.filename}{target}"


def _value_problem(error: ValueError) -> str:
    """A bad value as one line; a pydantic ``ValidationError`` as its first error's field and problem."""
    if not _is_loaded_class(error, "pydantic_core", "ValidationError"):
        return _flat(error)
    invalid: Any = error  # a pydantic_core.ValidationError, not imported here (see _is_loaded_class)
    first = invalid.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or invalid.title
    more = invalid.error_count() - 1
    return f"{field}: {first['msg']}" + (f" (+{more} more)" if more else "")
