"""The dataset row format (docs/reference/design.md §4), as SkyRL and verl users already have it.

One row, as a JSON object (one line of a ``.jsonl`` file, or one row of a ``.parquet`` file)::

    {
      "prompt": [{"role": "system", "content": "..."}, {"role": "user", "content": "Add 3 and 5. ..."}],
      "env_class": "arithmetic",                               # which registered env runs the episode
      "reward_spec": {"method": "rule", "ground_truth": "8"},   # optional
      "extra_info": {"index": 0},                              # optional
      "question": "Add 3 and 5.", "answer": "8"                # free columns
    }

The env receives ``extras``: every free column plus ``reward_spec`` and ``extra_info``.
Validation is strict (a plain-string prompt is rejected, not guessed at): a file that is wrong in one
row is usually wrong in all of them, and the fix belongs in the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aloft.types import Message

__all__ = ["MESSAGE_ROLES", "RESERVED_FIELDS", "DatasetRow", "validate_row"]

MESSAGE_ROLES = ("system", "user", "assistant", "tool")
RESERVED_FIELDS = ("prompt", "env_class", "reward_spec", "extra_info")
_FIX = "fix the row or regenerate the file"


@dataclass(kw_only=True)
class DatasetRow:
    """One validated dataset row."""

    prompt: list[Message]
    """The chat messages the episode starts from."""
    env_class: str
    """The registered env id that runs this row's episodes."""
    reward_spec: dict[str, Any] | None
    """``{"method": str, "ground_truth": ...}`` or None."""
    extra_info: dict[str, Any]
    """Free metadata (``{}`` when the row has none)."""
    extras: dict[str, Any]
    """What the env receives: every free column plus ``reward_spec`` and ``extra_info``."""
    index: int
    """Row number in its file, from 0 (blank ``.jsonl`` lines are not counted)."""


def validate_row(raw: dict[str, Any], index: int, source: str, default_env: str | None = None) -> DatasetRow:
    """Check one raw row and build its ``DatasetRow``.

    ``source`` names the file in error messages; ``default_env`` is the ``env_class`` of rows that
    have none (without it, ``env_class`` is required). Raises ``ValueError`` naming the file, the row
    and the field, e.g. ``train.jsonl row 17: field 'prompt' must be a list of {role, content}
    messages, got str; fix the row or regenerate the file``.
    """
    where = f"{source} row {index}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: a row must be a JSON object, got {type(raw).__name__}; {_FIX}")
    prompt = _validate_prompt(raw.get("prompt"), where)

    env_class = raw.get("env_class")
    if env_class is None:
        if default_env is None:
            raise ValueError(
                f"{where}: field 'env_class' is missing; add it to every row or give the loader a default env"
            )
        env_class = default_env
    if not isinstance(env_class, str) or not env_class:
        raise ValueError(f"{where}: field 'env_class' must be a non-empty string, got {env_class!r}; {_FIX}")

    reward_spec = raw.get("reward_spec")
    if reward_spec is not None:
        if not isinstance(reward_spec, dict):
            raise ValueError(
                f"{where}: field 'reward_spec' must be an object {{method, ground_truth}}, "
                f"got {type(reward_spec).__name__}; {_FIX}"
            )
        if not isinstance(reward_spec.get("method"), str):
            raise ValueError(
                f"{where}: field 'reward_spec.method' must be a string, got {reward_spec.get('method')!r}; {_FIX}"
            )

    extra_info = raw.get("extra_info")
    if extra_info is None:
        extra_info = {}
    if not isinstance(extra_info, dict):
        raise ValueError(
            f"{where}: field 'extra_info' must be an object, got {type(extra_info).__name__}; {_FIX}"
        )

    extras = {key: value for key, value in raw.items() if key not in RESERVED_FIELDS}
    extras["reward_spec"] = reward_spec
    extras["extra_info"] = extra_info
    return DatasetRow(
        prompt=prompt,
        env_class=env_class,
        reward_spec=reward_spec,
        extra_info=extra_info,
        extras=extras,
        index=index,
    )


def _validate_prompt(prompt: object, where: str) -> list[Message]:
    expected = "field 'prompt' must be a list of {role, content} messages"
    if prompt is None:
        raise ValueError(f"{where}: {expected}, but the row has none; {_FIX}")
    if not isinstance(prompt, list):
        raise ValueError(f"{where}: {expected}, got {type(prompt).__name__}; {_FIX}")
    if not prompt:
        raise ValueError(f"{where}: {expected}, got an empty list; {_FIX}")
    messages: list[Message] = []
    for position, message in enumerate(prompt):
        field_name = f"prompt[{position}]"
        if not isinstance(message, dict):
            raise ValueError(
                f"{where}: field '{field_name}' must be a {{role, content}} object, got {type(message).__name__}; {_FIX}"
            )
        role, content = message.get("role"), message.get("content")
        if role not in MESSAGE_ROLES:
            raise ValueError(
                f"{where}: field '{field_name}.role' must be one of {list(MESSAGE_ROLES)}, got {role!r}; {_FIX}"
            )
        if not isinstance(content, str):
            raise ValueError(
                f"{where}: field '{field_name}.content' must be a string, got {type(content).__name__}; {_FIX}"
            )
        # Parquet stores a list of messages as structs with the union of all keys, so a message
        # read back carries e.g. "name": None when another message had a name: drop those.
        messages.append({key: value for key, value in message.items() if value is not None})  # type: ignore[misc]
    return messages
