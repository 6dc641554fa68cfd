"""The report's HTML: the page template and its script (``assets/``), Plotly's JavaScript and the
data, in one file."""

from __future__ import annotations

import base64
import gzip
import html
import json
import re
from importlib import resources
from typing import Any

from aloft.report.content import build_payload
from aloft.report.runs import RunRecord

__all__ = ["render_report"]

_SLOT = re.compile(r"@@(PLOTLY|APP|STYLE|DATA|TITLE)@@")


def render_report(runs: list[RunRecord], *, samples_per_step: int = 32) -> str:
    """The whole page for ``runs`` (overlaid in every chart)."""
    payload = build_payload(runs, samples_per_step, [_tokenizer(run) for run in runs])
    return render_page(payload, title=" vs ".join(run.name for run in runs))


def render_page(payload: dict[str, Any], title: str) -> str:
    from plotly.offline import get_plotlyjs

    assets = resources.files("aloft.report") / "assets"
    parts = {
        "PLOTLY": get_plotlyjs(),
        "APP": (assets / "report.js").read_text(encoding="utf-8"),
        "STYLE": (assets / "report.css").read_text(encoding="utf-8"),
        # gzip + base64: a long run's trajectories shrink several-fold, and base64 holds no "<" that
        # could close the script element; the page inflates it (DecompressionStream).
        "DATA": base64.b64encode(
            gzip.compress(
                json.dumps(payload, separators=(",", ":")).encode("utf-8"), compresslevel=1, mtime=0
            )
        ).decode("ascii"),
        "TITLE": html.escape(f"aloft report: {title}"),
    }
    template = (assets / "report.html").read_text(encoding="utf-8")
    return _SLOT.sub(
        lambda match: parts[match.group(1)], template
    )  # one pass: inserted text is not rescanned


def _tokenizer(run: RunRecord) -> Any:
    """The run's tokenizer for token texts, or None (ids are shown) when its model is not here."""
    path = run.config.get("model", {}).get("path")
    if not path or not run.rollout_steps:
        return None
    from aloft.models import load_tokenizer

    try:
        return load_tokenizer(str(path))
    except Exception as error:
        run.notes.append(
            f"token texts: the run's tokenizer {path!r} did not load ({type(error).__name__}); ids shown"
        )
        return None
