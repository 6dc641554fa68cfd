"""Metric sinks: jsonl (always readable), TensorBoard, W&B (optional)."""

from aloft.tracking.sinks import JsonlSink, MetricsLogger, TensorBoardSink, WandbSink, read_metrics

__all__ = ["JsonlSink", "MetricsLogger", "TensorBoardSink", "WandbSink", "read_metrics"]
