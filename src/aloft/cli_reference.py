"""The CLI reference page (docs/reference/cli.md), generated from the parsers and the config schema.

``python -m aloft.cli_reference > docs/reference/cli.md`` writes it; a test regenerates it and fails
when the committed page differs, so the reference can never drift from ``--help``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator

HELP_WIDTH = 100
"""Columns argparse wraps the help to (fixed, so the page does not depend on the terminal)."""


@contextlib.contextmanager
def _fixed_width() -> Iterator[None]:
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_WIDTH)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_reference() -> str:
    """The markdown page: ``aloft --help``, then each subcommand's help (``train``'s with every
    config field), nested subcommands (``data build``) included."""
    from aloft.cli import _train_help, build_parser
    from aloft.config import describe_fields, presets

    with _fixed_width():
        parser, _ = build_parser()
        sections = [("aloft", parser.format_help())]
        for name, sub in _subparsers(parser).items():
            if name == "train":  # train parses its own arguments: dotted config keys
                sections.append(("aloft train", _train_help(describe_fields(), presets(), builtin_only=True)))
                continue
            sections.append((f"aloft {name}", sub.format_help()))
            for inner, inner_parser in _subparsers(sub).items():
                sections.append((f"aloft {name} {inner}", inner_parser.format_help()))
    lines = [
        "# CLI reference",
        "",
        "Generated from the parsers and the config schema by `python -m aloft.cli_reference`; a test",
        "fails when this page differs from `--help`. Do not edit it by hand.",
    ]
    for title, text in sections:
        lines += ["", f"## `{title}`", "", "```text", text.rstrip(), "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(cli_reference(), end="")
