"""Metric sinks: jsonl (always readable), TensorBoard, W&B and MLflow (optional extras)."""

from aloft.tracking.services import MlflowSink, RunIds, WandbSink, mlflow_key
from aloft.tracking.sinks import JsonlSink, MetricsLogger, TensorBoardSink, read_metrics

__all__ = [
    "JsonlSink",
    "MetricsLogger",
    "MlflowSink",
    "RunIds",
    "TensorBoardSink",
    "WandbSink",
    "mlflow_key",
    "read_metrics",
]
