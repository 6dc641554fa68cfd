"""One grammar for every subcommand: settings are the dotted config keys ``aloft train`` takes.

``aloft eval RUN generator.eval_temperature=0.7 generator.eval_n_samples=4`` spells a setting the
way the config does, and means what it means in training. A subcommand declares the keys it reads
(``keys``); ``parse_settings`` checks the words against them and against the config schema (the same
one-line errors as ``aloft train``). Flags remain only for what has no config key (``--out``,
``--port``, ``--debug``). A flag that spelled a setting before keeps working for one release, with a
one-line note naming the key that replaces it (``note_deprecated_flags``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from aloft.config import ConfigError
from aloft.config.loading import apply_override, validate_config

__all__ = ["DeprecatedFlag", "note_deprecated_flags", "parse_settings", "split_settings"]


FLAGS_WITH_KEY_VALUES = ("-o", "--option", "--url")
"""Deprecated flags whose value may hold ``=`` (``-o db=chinook``, a URL's query): the word after one
of them is its value, not a setting."""


def split_settings(words: list[str]) -> tuple[list[str], list[str]]:
    """``words`` split into settings (``section.key=value``, and ``env=X``) and the rest."""
    settings, rest = [], []
    for index, word in enumerate(words):
        follows_flag = index > 0 and words[index - 1] in FLAGS_WITH_KEY_VALUES
        is_setting = "=" in word and not word.startswith("-") and not follows_flag
        (settings if is_setting else rest).append(word)
    return settings, rest


def parse_settings(words: list[str], keys: list[str], command: str) -> dict[str, Any]:
    """``section.key=value`` words -> {dotted key: value as the config schema reads it}.

    ``keys`` are the dotted keys ``command`` reads; one ending in ``.*`` takes any key under it
    (``data.builder_args.*``). ``env=X`` is ``env.name=X``, as in ``aloft train``. A key outside
    ``keys``, or a value the schema refuses, is a one-line ``ConfigError``.
    """
    raw: dict[str, Any] = {}
    given: list[str] = []
    for word in words:
        key, _, value = word.partition("=")
        key = key.strip()
        if key == "env" and not value.strip().startswith("{"):
            key, word = "env.name", f"env.name={value}"
        apply_override(raw, word)
        given.append(key)
    for key in given:
        if not any(key == k or k.endswith(".*") and key.startswith(k[:-1]) for k in keys):
            shown = ", ".join(k.replace(".*", ".<key>") for k in keys)
            raise ConfigError(f"{key} is not a setting of aloft {command}; it takes: {shown}")
    config = validate_config(raw, whole_run=False)  # the schema's types, ranges and one-line errors
    values: dict[str, Any] = {}
    for key in given:
        node: Any = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else getattr(node, part)
        values[key] = node
    return values


class DeprecatedFlag:
    """A flag that spelled a setting: ``--temperature`` -> ``generator.eval_temperature``."""

    def __init__(self, flag: str, key: str, dest: str | None = None) -> None:
        self.flag, self.key = flag, key
        self.dest = dest or flag.lstrip("-").replace("-", "_")


def note_deprecated_flags(args: argparse.Namespace, flags: list[DeprecatedFlag], command: str) -> None:
    """One line on stderr for each deprecated flag given (their argparse default is None)."""
    for flag in flags:
        if getattr(args, flag.dest, None) not in (None, []):
            print(
                f"aloft {command}: {flag.flag} is deprecated and goes in the next release; write "
                f"{flag.key}=VALUE instead",
                file=sys.stderr,
            )
