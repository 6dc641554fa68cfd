"""PNG images of a report's main curves (``aloft report RUN --png DIR``), for READMEs and papers.

matplotlib draws them (Agg, no display needed): one image per main metric the runs logged, and
``curves.png`` with all of them in a grid, the runs overlaid in the page's colours.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from aloft.report.content import metric_columns
from aloft.report.runs import RunRecord

__all__ = ["MAIN_CURVES", "export_pngs"]

MAIN_CURVES = [
    "reward/mean",
    "eval/reward/mean",
    "eval/pass@1",
    "completion/mean_len",
    "policy/entropy",
    "policy/update_kl",
    "policy/update_rel_norm",
    "policy/approx_kl",
    "policy/clip_frac",
    "logprob/sampler_abs_diff",
    "timing/step_s",
]
"""The curves exported, those a run logged, in this order."""

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
"""The page's run colours (report.js)."""


def export_pngs(runs: list[RunRecord], directory: str | Path, *, dpi: int = 150) -> list[Path]:
    """Write the images to ``directory``; returns their paths (``curves.png`` last)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tables = [(run, metric_columns(run.steps, None), metric_columns(run.evals, None)) for run in runs]
    keys = [key for key in MAIN_CURVES if any(_points(t, e, key)[0] for _, t, e in tables)]
    written = []
    for key in keys:
        figure, axes = plt.subplots(figsize=(5, 3.2))
        _draw(axes, tables, key)
        figure.tight_layout()
        path = out / (key.replace("/", "_").replace("@", "_at_") + ".png")
        figure.savefig(path, dpi=dpi)
        plt.close(figure)
        written.append(path)
    if keys:
        cols = min(3, len(keys))
        rows = math.ceil(len(keys) / cols)
        figure, grid = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False)
        for axes, key in zip(grid.flat, keys, strict=False):
            _draw(axes, tables, key)
        for axes in list(grid.flat)[len(keys) :]:
            axes.axis("off")
        figure.tight_layout()
        path = out / "curves.png"
        figure.savefig(path, dpi=dpi)
        plt.close(figure)
        written.append(path)
    return written


def _points(
    steps: dict[str, list[Any]], evals: dict[str, list[Any]], key: str
) -> tuple[list[Any], list[Any]]:
    table = evals if key.startswith("eval/") else steps
    pairs = [(x, y) for x, y in zip(table.get("step", []), table.get(key, []), strict=False) if y is not None]
    return [x for x, _ in pairs], [y for _, y in pairs]


def _draw(
    axes: Any, tables: list[tuple[RunRecord, dict[str, list[Any]], dict[str, list[Any]]]], key: str
) -> None:
    for index, (run, steps, evals) in enumerate(tables):
        x, y = _points(steps, evals, key)
        if x:
            axes.plot(
                x,
                y,
                marker="o",
                markersize=3,
                linewidth=1.5,
                color=COLORS[index % len(COLORS)],
                label=run.name,
            )
    axes.set_title(key, fontsize=10)
    axes.set_xlabel("step")
    axes.grid(alpha=0.3)
    if len(tables) > 1:
        axes.legend(fontsize=8)
