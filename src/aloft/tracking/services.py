"""Sinks for tracking services: Weights & Biases and MLflow.

Both keep one service-side run per aloft run: its id is stored in ``<run>/tracking.json`` when the
run starts and read back when it resumes, so a resumed run logs on to the same W&B / MLflow run.
(Steps a killed attempt logged after its last checkpoint are logged again on resume; W&B keeps the
first values of a step it has seen, MLflow keeps both points. aloft's resume is exact, so with
``trainer.deterministic`` they are the same numbers.)
"""

from __future__ import annotations

import json
import re
import secrets
import time
from pathlib import Path
from typing import Any

from aloft.atomic_files import write_text_atomically
from aloft.config import flatten


class RunIds:
    """The service run ids of an aloft run (``tracking.json``); ``fresh``: forget earlier ones."""

    def __init__(self, path: Path, fresh: bool) -> None:
        self.path = path
        self.ids: dict[str, str] = {}
        if not fresh and path.exists():
            self.ids = json.loads(path.read_text())

    def get(self, service: str) -> str | None:
        return self.ids.get(service)

    def set(self, service: str, run_id: str) -> None:
        self.ids[service] = run_id
        write_text_atomically(self.path, json.dumps(self.ids, indent=1))


class WandbSink:
    def __init__(
        self,
        run_dir: str | Path,
        name: str,
        config: dict[str, Any],
        *,
        project: str = "aloft",
        entity: str | None = None,
        mode: str = "online",
        ids: RunIds | None = None,
    ) -> None:
        try:
            import wandb
        except ImportError:
            raise ImportError(
                "trainer.loggers includes wandb but it is not installed: pip install 'aloft[wandb]'"
            ) from None
        ids = ids or RunIds(Path(run_dir) / "tracking.json", fresh=True)
        run_id = ids.get("wandb") or secrets.token_hex(6)  # W&B run ids: [a-z0-9]
        self._run = wandb.init(
            project=project,
            entity=entity,
            name=name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            config=config,
            mode=mode,
        )
        ids.set("wandb", run_id)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        self._run.finish()


class MlflowSink:
    """Metrics into an MLflow run (``tracking_uri``: a server, or ``sqlite:///path.db``); the run's
    config is logged as its parameters (dotted keys)."""

    def __init__(
        self, tracking_uri: str, experiment: str, name: str, config: dict[str, Any], *, ids: RunIds
    ) -> None:
        try:
            from mlflow import MlflowClient
            from mlflow.entities import Param
        except ImportError:
            raise ImportError(
                "trainer.loggers includes mlflow but it is not installed: pip install 'aloft[mlflow]'"
            ) from None
        self.client = MlflowClient(tracking_uri)
        run_id = ids.get("mlflow")
        if run_id is None:
            found = self.client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
            run_id = self.client.create_run(experiment_id, run_name=name).info.run_id
            params = [Param(key, str(value)[:6000]) for key, value in flatten(config).items()]
            self.client.log_batch(run_id, params=params)
            ids.set("mlflow", run_id)
        else:
            self.client.update_run(run_id, status="RUNNING")
        self.run_id = run_id

    def log(self, metrics: dict[str, Any], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        points = [
            Metric(mlflow_key(key), float(value), now, step)
            for key, value in metrics.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        ]
        for start in range(0, len(points), 1000):  # MLflow takes at most 1000 metrics per batch
            self.client.log_batch(self.run_id, metrics=points[start : start + 1000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def mlflow_key(key: str) -> str:
    """An aloft metric name in MLflow's alphabet (``eval/pass@4`` -> ``eval/pass_at_4``)."""
    return re.sub(r"[^\w\-. :/]", "_", key.replace("@", "_at_"))
