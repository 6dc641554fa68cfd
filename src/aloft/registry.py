"""Name -> plugin tables behind aloft's ``@register_*`` decorators (algorithms, plans, engines),
and the run settings registered envs bring (``ENV_OVERLAYS``).

Standard library only, so every layer may use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

ENV_OVERLAYS: dict[str, dict[str, Any]] = {}
"""Env id -> the config sections a run selecting the env starts from (``register_env(id, overlay=...)``).
Kept here, not in aloft.gym, so that aloft.config reads it without importing the gym."""


def register(table: dict[str, Any], kind: str, decorator_name: str, name: str) -> Callable[[_F], _F]:
    """A decorator putting its target in ``table`` as ``name``.

    Registering the same object again is a no-op (a module imported twice); another object under a
    taken name raises ValueError naming the decorator and the names in use.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind} name must be a non-empty string, got {name!r}")

    def decorator(target: _F) -> _F:
        existing = table.get(name)
        if existing is not None and existing is not target:
            raise ValueError(
                f"{kind} {name!r} is already registered (registered: {', '.join(sorted(table))}); "
                f"pick another name for @{decorator_name}"
            )
        table[name] = target
        return target

    return decorator


def lookup(table: dict[str, Any], kind: str, decorator_name: str, name: str) -> Any:
    """``table[name]``, or a ValueError listing the known names and how to add one."""
    try:
        return table[name]
    except KeyError:
        raise ValueError(
            f"unknown {kind} {name!r}; known: {', '.join(sorted(table))} "
            f"(register your own with @{decorator_name}, in a module imported before training starts)"
        ) from None
