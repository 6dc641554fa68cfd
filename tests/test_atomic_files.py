"""The small files that the ranks of a data-parallel run write and read as they start: a reader
racing the writer sees the old contents or the new ones, never an empty or half-written file (CI
caught rank 1 reading ``precision.json`` while rank 0 rewrote it)."""

from __future__ import annotations

import json
import threading

import pytest

from aloft.atomic_files import write_text_atomically
from aloft.config import load_config
from aloft.trainer import run_precision


def test_a_reader_racing_the_writer_always_reads_a_whole_file(tmp_path):
    path = tmp_path / "precision.json"
    texts = [json.dumps({"engine.dtype": "float32", "pad": "x" * n}) + "\n" for n in (1_000, 50_000)]
    write_text_atomically(path, texts[0])
    done = threading.Event()
    seen: list[str] = []

    def read_until_done() -> None:
        while not done.is_set():
            seen.append(path.read_text())

    reader = threading.Thread(target=read_until_done)
    reader.start()
    try:
        for i in range(300):
            write_text_atomically(path, texts[i % 2])
    finally:
        done.set()
        reader.join()
    assert seen and set(seen) <= set(texts)
    assert [p.name for p in tmp_path.iterdir()] == ["precision.json"]  # no temporary left behind


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "config.yaml"
    write_text_atomically(path, "old\n")
    with pytest.raises(UnicodeEncodeError):
        write_text_atomically(path, "\ud800")  # a lone surrogate cannot be written as UTF-8
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]


def test_a_rank_reading_the_precision_record_while_another_writes_it_reads_it_whole(tmp_path):
    """The CI failure itself: ``recorded_precision`` racing ``record_precision`` (a plain
    ``write_text`` there made most of these reads fail with a JSONDecodeError)."""
    cfg = load_config(None, ["data.builder=arithmetic", "trainer.device=cpu", "engine.device=cpu"])
    run_precision.record_precision(cfg, tmp_path)
    done = threading.Event()
    read: list[object] = []

    def read_until_done() -> None:
        while not done.is_set():
            try:
                read.append(run_precision.recorded_precision(tmp_path))
            except ValueError as error:  # JSONDecodeError
                read.append(error)

    reader = threading.Thread(target=read_until_done)
    reader.start()
    try:
        for _ in range(300):
            run_precision.record_precision(cfg, tmp_path)
    finally:
        done.set()
        reader.join()
    assert read and all(record == run_precision.choices_here(cfg) for record in read)
