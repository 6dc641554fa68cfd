"""docs/reference/cli.md is what ``python -m aloft.cli_reference`` prints: regenerate it after a
change to a parser or a config field (the message says how)."""

from __future__ import annotations

from pathlib import Path

from aloft.cli_reference import cli_reference

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "cli.md"


def test_the_cli_reference_matches_the_parsers():
    assert PAGE.read_text() == cli_reference(), (
        "docs/reference/cli.md is stale: run `python -m aloft.cli_reference > docs/reference/cli.md`"
    )


def test_the_reference_covers_every_subcommand_and_config_field():
    page = cli_reference()
    for command in ("train", "eval", "report", "serve", "tinker-serve", "experiment", "data", "data build"):
        assert f"## `aloft {command}`" in page, command
    assert "  algorithm.params  dict[str, Any] = {}" in page and "  trainer.max_steps  int" in page
