"""``aloft report``: one self-contained HTML page of a run's curves, config, evals and trajectories.

    from aloft.report import build_report
    build_report(["runs/quickstart"], "report.html")

The page needs no network: Plotly's JavaScript (from the ``plotly`` package) is inlined, and so is
the data (``aloft.report.content``). ``aloft report RUN --serve`` serves it on 127.0.0.1, rebuilt
while the run trains (``aloft.report.serve``).
"""

from __future__ import annotations

from pathlib import Path

from aloft.atomic_files import write_text_atomically
from aloft.report.page import render_report
from aloft.report.runs import ReportError, RunRecord, load_run

__all__ = ["ReportError", "RunRecord", "build_report", "load_run", "render_report"]


def build_report(run_dirs: list[str | Path], out: str | Path, *, samples_per_step: int = 32) -> Path:
    """Write the report of ``run_dirs`` (overlaid) to ``out``; returns its path."""
    html = render_report([load_run(path) for path in run_dirs], samples_per_step=samples_per_step)
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(target, html)  # a browser reloading the page never reads half of it
    return target
