"""Render the docs' benchmark tables from the JSON the benchmarks wrote (``benchmarks/results/``).

Run from the repo root::

    python benchmarks/render.py            # rewrite every results region in README.md and docs/**/*.md
    python benchmarks/render.py --check    # exit 1, listing stale regions and missing JSON; write nothing

A region is delimited in Markdown by two comments::

    <!-- results: NAME [TABLE_INDEX] -->
    ...
    <!-- /results -->

and its content is table ``TABLE_INDEX`` (default 0) of ``benchmarks/results/NAME.json`` as a
Markdown table, formatted with the table's own column formats (``results.Table``, as the benchmark
printed it), then one line saying where the figures come from: the command, the CPU and its flags,
and the date. Everything between the two comments is replaced, so edit the JSON (rerun the
benchmark), never the region.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded by path: its siblings
from machine import FLAGS
from result_tables import Table

REGION = re.compile(
    r"(?P<open><!-- results: (?P<name>[\w.-]+)(?: (?P<index>\d+))? -->)(?P<body>.*?)(?P<close><!-- /results -->)",
    re.DOTALL,
)
REPO = Path(__file__).resolve().parent.parent


def provenance(document: dict[str, Any]) -> str:
    """```COMMAND` on CPU (flags), DATE``: what produced the figures, and where and when."""
    machine = document["machine"]
    flags = ", ".join(machine["cpu_flags"]) or "none of " + ", ".join(FLAGS)
    return f"`{document['command']}` on {machine['cpu']} ({flags}), {machine['date']}"


def region_body(document: dict[str, Any], index: int) -> str:
    """What goes between a region's comments: the table, then its provenance, blank lines around
    both so that Markdown reads the table as a table next to the HTML comments."""
    table = Table.from_json(document["tables"][index])
    return f"\n\n{table.markdown()}\n\n{provenance(document)}\n\n"


def render_text(text: str, results_dir: Path) -> tuple[str, list[str]]:
    """``text`` with every region rendered, and a problem line per region that could not be (its
    JSON missing, or no such table); those regions are left as they are."""
    problems: list[str] = []

    def render(match: re.Match[str]) -> str:
        name, index = match["name"], int(match["index"] or 0)
        path = results_dir / f"{name}.json"
        if not path.is_file():
            problems.append(f"results: {name} {index}: missing {path}")
            return match[0]
        document = json.loads(path.read_text())
        tables = document.get("tables", [])
        if index >= len(tables):
            problems.append(f"results: {name} {index}: {path} has {len(tables)} table(s)")
            return match[0]
        return match["open"] + region_body(document, index) + match["close"]

    return REGION.sub(render, text), problems


def markdown_files(root: Path) -> list[Path]:
    """README.md and every Markdown file under docs/."""
    readme = root / "README.md"
    return ([readme] if readme.is_file() else []) + sorted((root / "docs").rglob("*.md"))


def stale_regions(old: str, new: str) -> list[str]:
    """The regions (by their opening comment) whose content rendering would change."""
    return [
        before["open"]
        for before, after in zip(REGION.finditer(old), REGION.finditer(new), strict=True)
        if before[0] != after[0]
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a region is stale")
    parser.add_argument(
        "--root",
        type=Path,
        default=REPO,
        help="the repository root: its README.md, docs/ and benchmarks/results/ (default: this checkout)",
    )
    args = parser.parse_args(argv)
    results_dir = args.root / "benchmarks" / "results"
    failed = False
    for path in markdown_files(args.root):
        old = path.read_text()
        new, problems = render_text(old, results_dir)
        shown = path.relative_to(args.root)
        for problem in problems:
            print(f"{shown}: {problem}")
        failed |= bool(problems)
        if new == old:
            continue
        if args.check:
            for opening in stale_regions(old, new):
                print(f"{shown}: stale {opening}")
            failed = True
        else:
            path.write_text(new)
            print(f"{shown}: rendered")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
