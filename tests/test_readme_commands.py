"""Every `aloft` command the README, CONTRIBUTING.md and docs/ show is valid as written: each
`aloft train` resolves to a valid config whose registry names exist (a command that imports the
reader's own module is checked by the test that runs it), every other command parses, and the
quick ones run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from aloft.cli import DATA_BUILD_KEYS, SERVE_KEYS, SETTINGS_COMMANDS, build_parser, main
from aloft.cli_eval import EVAL_KEYS
from aloft.cli_settings import parse_settings, split_settings
from aloft.config import ConfigError, load_config
from aloft.trainer.preflight import check_names

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]


def readme_commands(pages: list[Path] | None = None) -> list[str]:
    """The `aloft ...` lines of the pages' bash blocks (continuations joined, comments dropped);
    the README's alone by default."""
    commands = []
    text = "\n".join(page.read_text() for page in (pages or [README]))
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            for start in [i for i, word in enumerate(words) if word == "aloft"]:
                # `... && aloft train quickstart`, `aloft tinker-serve ... &`: the command runs to the
                # next &&, & or ; (or the line's end)
                rest = words[start + 1 :]
                end = next((i for i, word in enumerate(rest) if word in ("&&", "&", ";")), len(rest))
                commands.append(shlex.join(["aloft", *rest[:end]]))
    return commands


COMMANDS = sorted(set(readme_commands(PAGES)))
SETTING_KEYS = {"eval": list(EVAL_KEYS), "data": DATA_BUILD_KEYS, "serve": SERVE_KEYS}
"""The keys each subcommand reads (``aloft experiment``'s settings go to its training runs)."""


def test_the_readme_shows_the_commands_users_copy():
    front_page = readme_commands()
    assert "aloft train quickstart" in front_page
    assert any(c.startswith("aloft eval ") for c in front_page)
    assert any(c.startswith("aloft experiment skyrl-sql") for c in front_page)
    assert len(front_page) >= 10 and len(COMMANDS) >= 30  # the docs pages add theirs


@pytest.mark.parametrize("command", COMMANDS)
def test_every_readme_command_is_valid_as_written(command):
    words = shlex.split(command)[1:]
    if words[0] == "train":
        target, overrides = words[1], words[2:]
        if target in ("--help", "my_config.yaml"):  # help runs below; a user's own file is theirs
            return
        try:
            config = load_config(target, overrides)  # imports trainer.imports
        except ConfigError as error:
            # The reader's own module (calc_adder.py, a tutorial's): its page's test runs the command.
            assert str(error).startswith("trainer.imports: cannot import"), error
            return
        check_names(config)  # the registry names (estimator, loss, plan, env, engine) exist
        return
    settings, rest = split_settings(words[1:]) if words[0] in SETTINGS_COMMANDS else ([], words[1:])
    if words[0] in SETTING_KEYS:  # the section.key=value words: keys the command reads, valid values
        parse_settings(settings, SETTING_KEYS[words[0]], words[0])
    try:
        build_parser()[0].parse_args([words[0], *rest])
    except SystemExit as stop:  # argparse exits 2 on an unknown flag or a missing argument
        assert stop.code == 0, command  # --version, --help: exit 0


@pytest.mark.parametrize(
    "words",
    [["--version"], ["train", "--help"], ["data", "list"]],
)
def test_the_quick_readme_commands_run(words, capsys):
    try:
        code = main(words)
    except SystemExit as stop:  # --version exits through argparse
        code = stop.code
    assert code == 0
    assert capsys.readouterr().out.strip()


def test_the_readme_data_build_command_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    command = next(c for c in COMMANDS if c.startswith("aloft data build sql --size "))
    assert main(shlex.split(command)[1:]) == 0
    assert len((tmp_path / "sql_eval.jsonl").read_text().splitlines()) == int(shlex.split(command)[5])
