"""The report's HTML: the page template and its script (``assets/``), Plotly's JavaScript and the
data, in one file."""

from __future__ import annotations

import base64
import gzip
import html
import re
from importlib import resources
from typing import Any

import orjson

from aloft.report.content import build_payload
from aloft.report.runs import RunRecord

__all__ = ["encode_payload", "render_page", "render_report", "report_payload"]

_SLOT = re.compile(r"@@(PLOTLY|APP|STYLE|DATA|TITLE|REFRESH)@@")


def render_report(runs: list[RunRecord], *, samples_per_step: int = 32, refresh_s: float = 0) -> str:
    """The whole page for ``runs`` (overlaid in every chart). ``refresh_s`` > 0: the page fetches
    ``data`` from its server that often and redraws (``aloft.report.serve``)."""
    payload = report_payload(runs, samples_per_step)
    return render_page(payload, title=" vs ".join(run.name for run in runs), refresh_s=refresh_s)


def report_payload(runs: list[RunRecord], samples_per_step: int) -> dict[str, Any]:
    return build_payload(runs, samples_per_step, [_tokenizer(run) for run in runs])


def encode_payload(payload: dict[str, Any]) -> str:
    """gzip + base64: a long run's trajectories shrink several-fold, and base64 holds no "<" that
    could close the page's script element; the page inflates it (DecompressionStream)."""
    # orjson: the payload's numpy arrays (token ids, logprobs) as they are, and ~10x json's speed on a
    # long run's page; a non-finite float becomes null, which the page's JSON.parse accepts.
    raw = orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    return base64.b64encode(gzip.compress(raw, compresslevel=1, mtime=0)).decode("ascii")


def render_page(payload: dict[str, Any], title: str, refresh_s: float = 0) -> str:
    from plotly.offline import get_plotlyjs

    assets = resources.files("aloft.report") / "assets"
    parts = {
        "PLOTLY": get_plotlyjs(),
        "APP": (assets / "report.js").read_text(encoding="utf-8"),
        "STYLE": (assets / "report.css").read_text(encoding="utf-8"),
        "DATA": encode_payload(payload),
        "TITLE": html.escape(f"aloft report: {title}"),
        "REFRESH": f"{refresh_s:g}",
    }
    template = (assets / "report.html").read_text(encoding="utf-8")
    # One pass: text put in a slot is not searched for slots again.
    return _SLOT.sub(lambda match: parts[match.group(1)], template)


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
