"""Reading a run directory for a report: its config, metrics and rollouts, as far as they exist.

A run being written is read as it stands: a half-written last line of ``metrics.jsonl`` or of a
rollouts file is left out (it is the line still being written), and a run with no finished step yet
reports its config alone. Anything else that is not a run is one ``ReportError`` line naming the
path and the fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

__all__ = ["ReportError", "RunRecord", "load_run", "read_rollouts"]

_STEP_FILE = re.compile(r"^step_(\d+)\.jsonl$")


class ReportError(ValueError):
    """A report input problem, as one line: the path, what is wrong, the fix."""


@dataclass
class RunRecord:
    """What a run directory holds so far."""

    name: str
    path: Path
    config: dict[str, Any]
    """The resolved config (``config.yaml``), nested as written."""
    steps: list[dict[str, Any]]
    """``metrics.jsonl`` rows of training steps, in order."""
    evals: list[dict[str, Any]]
    """``metrics.jsonl`` rows of evals (their keys start with ``eval/``)."""
    rollout_steps: list[int] = field(default_factory=list)
    """Steps with a ``rollouts/step_<n>.jsonl`` file."""
    notes: list[str] = field(default_factory=list)
    """What was left out while reading (a half-written line), for the page to say."""


def load_run(path: str | Path) -> RunRecord:
    """Read ``path`` (``runs/<name>``); ``ReportError`` when it is not a run."""
    run = Path(path)
    if not run.is_dir():
        raise ReportError(f"{run}: no such run directory; pass a run's directory (e.g. runs/quickstart)")
    config_path, metrics_path = run / "config.yaml", run / "metrics.jsonl"
    if not config_path.exists() and not metrics_path.exists():
        raise ReportError(
            f"{run}: not an aloft run (no config.yaml or metrics.jsonl); pass a run's directory "
            "(e.g. runs/quickstart), which `aloft train` writes"
        )
    notes: list[str] = []
    config: dict[str, Any] = {}
    if config_path.exists():
        try:
            config = yaml.safe_load(config_path.read_text()) or {}
        except yaml.YAMLError as error:
            raise ReportError(
                f"{config_path}: not valid YAML ({error.__class__.__name__}); restore the run's config"
            ) from None
    rows = list(_json_lines(metrics_path, notes)) if metrics_path.exists() else []
    if not rows:
        notes.append("no step has finished yet")
    steps = [row for row in rows if not _is_eval(row)]
    evals = [row for row in rows if _is_eval(row)]
    rollouts = run / "rollouts"
    rollout_steps = sorted(
        int(match.group(1))
        for match in (_STEP_FILE.match(p.name) for p in (rollouts.iterdir() if rollouts.is_dir() else []))
        if match
    )
    name = config.get("trainer", {}).get("name") or run.name
    return RunRecord(name, run, config, steps, evals, rollout_steps, notes)


def read_rollouts(
    run: RunRecord, step: int, want: Callable[[str], bool] | None = None
) -> Iterator[dict[str, Any]]:
    """The trajectories of ``step``'s rollouts file (a half-written last line is left out); with
    ``want``, only the lines it accepts are parsed (a cheap test on the raw line)."""
    path = run.path / "rollouts" / f"step_{step}.jsonl"
    yield from _json_lines(path, run.notes, want)


def _json_lines(
    path: Path, notes: list[str], want: Callable[[str], bool] | None = None
) -> Iterator[dict[str, Any]]:
    text = path.read_text(errors="replace")
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip() or (want is not None and not want(line)):
            continue
        try:
            yield _loads(line)
        except json.JSONDecodeError:
            if number == len(lines) and not text.endswith("\n"):  # the line being written now
                notes.append(f"{path.name}: the last line is still being written; left out")
                return
            raise ReportError(
                f"{path}:{number}: not a JSON line; the file is damaged (remove the line to report the rest)"
            ) from None


def _loads(line: str) -> Any:
    """orjson (a long run's rollouts parse ~3x faster), and json where orjson refuses: the NaN and
    Infinity that Python's json writes for a non-finite metric."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


def _is_eval(row: dict[str, Any]) -> bool:
    return any(key.startswith("eval/") for key in row) and not any(
        key.startswith(("policy/", "reward/")) for key in row
    )
