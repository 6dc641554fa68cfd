"""Metric sinks. Each gets flat ``{name: number}`` dicts with a ``step``.

``metrics.jsonl`` is the run's record: one JSON object per training step and one per eval. On
resume it is cut back to the checkpoint's step so a resumed run's file reads as if never
interrupted.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Protocol


class Sink(Protocol):
    def log(self, metrics: dict[str, Any], step: int) -> None: ...
    def close(self) -> None: ...


class JsonlSink:
    def __init__(self, path: str | Path, resume_step: int | None = None) -> None:
        self.path = Path(path)
        if resume_step is not None and self.path.exists():
            kept = [r for r in read_metrics(self.path) if r.get("step", 0) <= resume_step]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        elif resume_step is None and self.path.exists():
            self.path.unlink()
        self._file = self.path.open("a")

    def log(self, metrics: dict[str, Any], step: int) -> None:
        # "time" (Unix seconds) gives reports their wall-clock axis.
        row = {"step": step, "time": round(time.time(), 3), **{k: _finite(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardSink:
    def __init__(self, log_dir: str | Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(log_dir), purge_step=purge_step)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        for k, v in metrics.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class MetricsLogger:
    """Fans metrics out to every configured sink."""

    def __init__(self, sinks: list[Sink]) -> None:
        self.sinks = sinks

    def log(self, metrics: dict[str, Any], step: int) -> None:
        for sink in self.sinks:
            sink.log(metrics, step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def _finite(v: Any) -> Any:
    # JSON has no NaN/inf; write them as strings so nothing is silently dropped or invalid.
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v
