"""Every code block of README.md, CONTRIBUTING.md and docs/ is run by a test, or is a picture.

- ``bash`` blocks: every ``aloft`` command in them is checked by tests/test_readme_commands.py.
- ``python`` blocks: only on pages whose own test runs them as written (``RUN_BY``); a python block
  added anywhere else fails here until a test runs it.
- transcripts (a block whose lines start with ``$ aloft``): the command runs here and prints what
  the page shows (pages whose own test runs their transcript are left to it).
- anything else is a picture (the design's diagrams) or a citation, and says so by its page.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from aloft.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    page
    for page in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    if page != ROOT / "docs" / "reference" / "cli.md"  # generated from --help; test_cli_reference
]
RUN_BY = {
    "README.md": "tests/test_readme_snippets.py",
    "docs/guide/algorithms.md": "tests/test_readme_snippets.py",
    "docs/tutorials/new_env.md": "tests/test_tutorials.py",
    "docs/tutorials/new_loss.md": "tests/test_tutorials.py",
    "docs/tutorials/new_plan.md": "tests/test_tutorials.py",
}
"""Pages whose python blocks a test of their own runs as written."""
OWN_TRANSCRIPT_TESTS = {"docs/guide/algorithms.md", "docs/tutorials/new_loss.md"}
"""Pages whose transcripts their own test runs (the command needs the page's module)."""
PICTURES = {"docs/reference/design.md": 2, "README.md": 1, "docs/experiments/skyrl-sql.md": 2}
"""Pages with blocks that are not code (the data-flow diagram and package tree; the citation; two
episodes quoted from the SkyRL-SQL eval rollouts)."""


def fenced_blocks() -> list[tuple[str, str, str]]:
    """(page relative to the repository, language, body) of every fenced block."""
    found = []
    for page in PAGES:
        for language, body in re.findall(r"```(\w*)\n(.*?)```", page.read_text(), re.S):
            found.append((str(page.relative_to(ROOT)), language, body))
    return found


def is_transcript(body: str) -> bool:
    return body.startswith("$ aloft ")


def transcripts() -> list[tuple[str, str, str]]:
    """(page, command, what it prints) of every transcript its page's own test does not run."""
    found = []
    for page, language, body in fenced_blocks():
        if language == "" and is_transcript(body) and page not in OWN_TRANSCRIPT_TESTS:
            for command, printed in re.findall(r"^\$ (aloft .*)\n((?:(?!\$ ).*\n)*)", body, re.M):
                found.append((page, command, printed.strip()))
    return found


def test_every_block_is_run_by_a_test_or_is_a_picture():
    pictures: dict[str, int] = {}
    for page, language, body in fenced_blocks():
        if language == "python":
            assert page in RUN_BY, f"{page}: a python block no test runs; add it to a test and to RUN_BY"
        elif language == "" and not is_transcript(body) or language == "bibtex":
            pictures[page] = pictures.get(page, 0) + 1
        else:
            assert language in ("bash", ""), f"{page}: a {language!r} block no test reads"
    assert pictures == PICTURES


@pytest.mark.parametrize(("page", "command", "printed"), transcripts(), ids=lambda v: str(v)[:60])
def test_a_transcript_prints_what_its_page_shows(page, command, printed, tiny_model_dir, tmp_path, capsys):
    words = shlex.split(command)[1:]
    words = [
        w.replace("/tmp/tiny-llama", tiny_model_dir)
        if "/tmp/tiny-llama" in w
        else w.replace("/tmp/", f"{tmp_path}/")
        for w in words
    ]
    if "model.path=" not in command:  # a config error: it stops before any model loads
        words.append(f"trainer.run_root={tmp_path}")
    main(words)
    shown = capsys.readouterr().err.strip().replace(f"{tmp_path}/", "/tmp/")
    assert shown == printed


def test_every_relative_link_resolves():
    """A link to a file of the repository (README, docs pages, source) points at one that exists."""
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # links, not code
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or an anchor on the page
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_benchmark_tables_in_the_docs_are_rendered_from_their_json():
    """Each ``<!-- results: NAME -->`` region holds what benchmarks/render.py makes of
    benchmarks/results/NAME.json (the JSON a benchmark's ``--json`` wrote, machine and date in it)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "render.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
