"""aloft.data: the dataset row format, file I/O, the resumable prompt loader and dataset builders.

Independent of the gym (it imports only ``aloft.types``): rows name their env by id (``env_class``)
and the trainer resolves it.

    rows = build_dataset("arithmetic", n=64, seed=0)
    write_rows("data/train.jsonl", rows)
    loader = PromptLoader(read_rows("data/train.jsonl"), batch_size=8, seed=0)
    batch = loader.next_batch()          # 8 DatasetRow
"""

from aloft.data.builders import build_dataset, dataset_builders, dataset_splits, is_fixed_dataset
from aloft.data.io import read_rows, write_rows
from aloft.data.loader import PromptLoader
from aloft.data.rows import DatasetRow, validate_row

__all__ = [
    "DatasetRow",
    "PromptLoader",
    "build_dataset",
    "dataset_builders",
    "dataset_splits",
    "is_fixed_dataset",
    "read_rows",
    "validate_row",
    "write_rows",
]
