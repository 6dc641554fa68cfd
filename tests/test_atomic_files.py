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


def test_the_run_precision_record_is_written_atomically(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(run_precision, "write_text_atomically", lambda path, text: calls.append(path))
    run_precision.record_precision(
        load_config(None, ["data.builder=arithmetic", "trainer.device=cpu", "engine.device=cpu"]), tmp_path
    )
    assert calls == [tmp_path / run_precision.PRECISION_FILE]
