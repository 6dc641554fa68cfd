"""Metric sinks read back for real: TensorBoard event files, a W&B offline run, an MLflow store;
a resumed run logs on to the same W&B and MLflow run."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from aloft.tracking import mlflow_key, read_metrics
from tests.trainer.test_trainer import run

pytest.importorskip("wandb", reason="the wandb extra (aloft[wandb]) is part of the dev install")
pytest.importorskip("mlflow", reason="the mlflow extra (aloft[mlflow]) is part of the dev install")


def wandb_history(path: Path) -> list[dict]:
    """The history rows of a W&B offline run file (a LevelDB-style log of protobuf records: 32 KiB
    blocks, each record a 7-byte header of crc32c, length and chunk type; wandb ships no reader)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    position, block, chunks, rows = 7, 32768, b"", []  # after the ':W&B' file header
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:  # a block's tail too short for a header is padding
            position += left
            continue
        length, kind = struct.unpack("<HB", data[position + 4 : position + 7])
        if length == 0 and kind == 0:
            position += left
            continue
        chunks += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a FULL record, or the LAST chunk of one
            record = pb.Record()
            record.ParseFromString(chunks)
            chunks = b""
            if record.WhichOneof("record_type") == "history":
                rows.append(
                    {
                        item.key or "/".join(item.nested_key): json.loads(item.value_json)
                        for item in record.history.item
                    }
                )
    return rows


def test_every_sink_reads_back_and_a_resumed_run_continues_the_same_runs(
    tiny_overrides, tmp_path, monkeypatch
):
    monkeypatch.setenv("WANDB_SILENT", "true")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = [
        *tiny_overrides,
        "env=test_digits",
        "trainer.loggers=[jsonl,tensorboard,wandb,mlflow]",
        "trainer.wandb_mode=offline",
        "trainer.tracking_project=aloft-test",
        f"trainer.mlflow_tracking_uri={uri}",
        "trainer.checkpoint_every=1",
        "trainer.eval_every=2",
    ]
    trainer, _, _ = run([*common, "trainer.max_steps=2"])
    run_dir = trainer.c.run_dir
    first_ids = json.loads((run_dir / "tracking.json").read_text())
    run([*common, "trainer.max_steps=3"])  # resumes from step 2
    assert json.loads((run_dir / "tracking.json").read_text()) == first_ids
    rows = read_metrics(run_dir / "metrics.jsonl")
    steps = {r["step"]: r for r in rows if "reward/mean" in r}
    assert sorted(steps) == [1, 2, 3]

    # TensorBoard: the event files hold every step's scalars.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard")).Reload()
    tb = {e.step: e.value for e in events.Scalars("reward/mean")}
    assert tb == pytest.approx({step: r["reward/mean"] for step, r in steps.items()})

    # W&B offline: one run id, two attempts (the second resumed it), every step in its history.
    attempts = sorted((run_dir / "wandb").glob(f"offline-run-*-{first_ids['wandb']}/run-*.wandb"))
    assert len(attempts) == 2
    history = [row for attempt in attempts for row in wandb_history(attempt)]
    logged = {row["_step"]: row["reward/mean"] for row in history if "reward/mean" in row}
    assert logged == pytest.approx({step: r["reward/mean"] for step, r in steps.items()})
    assert any("eval/pass@1" in row for row in history)

    # MLflow: the same run, every step, the config as parameters, finished.
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    mlflow_run = client.get_run(first_ids["mlflow"])
    assert mlflow_run.info.status == "FINISHED" and mlflow_run.data.params["trainer.max_steps"] in ("2", "3")
    history = {m.step: m.value for m in client.get_metric_history(first_ids["mlflow"], "reward/mean")}
    assert history == pytest.approx({step: r["reward/mean"] for step, r in steps.items()})
    assert client.get_metric_history(first_ids["mlflow"], mlflow_key("eval/pass@1"))
    assert mlflow_key("eval/pass@1") == "eval/pass_at_1"
