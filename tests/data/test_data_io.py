"""Dataset files: round trips in both formats, atomic writes, and one-line errors that name the fix."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aloft.data import build_dataset, read_rows, validate_row, write_rows

RAW_ROWS = build_dataset("arithmetic", n=5, seed=3)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_round_trip_gives_the_rows_that_were_written(tmp_path, suffix):
    path = tmp_path / "nested" / f"train{suffix}"  # parent folders are created
    write_rows(path, RAW_ROWS)
    rows = read_rows(path)
    assert rows == [validate_row(raw, index, str(path)) for index, raw in enumerate(RAW_ROWS)]
    assert [row.index for row in rows] == [0, 1, 2, 3, 4]
    assert rows[2].extras["answer"] == RAW_ROWS[2]["answer"]


def test_jsonl_and_parquet_hold_the_same_rows(tmp_path):
    write_rows(tmp_path / "a.jsonl", RAW_ROWS)
    write_rows(tmp_path / "a.parquet", RAW_ROWS)
    from_jsonl, from_parquet = read_rows(tmp_path / "a.jsonl"), read_rows(tmp_path / "a.parquet")
    assert [(r.prompt, r.env_class, r.extras) for r in from_jsonl] == [
        (r.prompt, r.env_class, r.extras) for r in from_parquet
    ]


def test_jsonl_is_one_object_per_line_and_keeps_unicode(tmp_path):
    path = tmp_path / "train.jsonl"
    write_rows(path, [{"prompt": [{"role": "user", "content": "Combien font 3 + 5 ? ☃"}], "env_class": "x"}])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1
    assert "☃" in lines[0]
    assert json.loads(lines[0])["env_class"] == "x"


def test_overwrite_is_atomic_and_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "train.jsonl"
    write_rows(path, RAW_ROWS)
    write_rows(path, RAW_ROWS[:2])
    assert len(read_rows(path)) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["train.jsonl"]


def test_a_failed_write_keeps_the_old_file_and_names_the_bad_row(tmp_path):
    path = tmp_path / "train.jsonl"
    write_rows(path, RAW_ROWS)
    bad = [*RAW_ROWS[:2], {"prompt": [], "answer": object()}]
    with pytest.raises(ValueError, match=r"train.jsonl row 2: cannot be written as JSON"):
        write_rows(path, bad)
    assert len(read_rows(path)) == 5
    assert [p.name for p in tmp_path.iterdir()] == ["train.jsonl"]


def test_parquet_with_a_mixed_type_column_names_the_column(tmp_path):
    rows = [{**RAW_ROWS[0], "answer": 8}, {**RAW_ROWS[1], "answer": "eight"}]
    with pytest.raises(
        ValueError, match=r"column 'answer' has values of different types .* write a .jsonl file"
    ):
        write_rows(tmp_path / "train.parquet", rows)
    assert list(tmp_path.iterdir()) == []


def test_missing_file_is_one_line_with_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        read_rows(tmp_path / "nope.jsonl")
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'nope.jsonl'}: dataset file not found; check the path")
    assert "\n" not in message


@pytest.mark.parametrize("name", ["train.csv", "train"])
def test_unknown_extension_is_one_line_with_the_fix(tmp_path, name):
    (tmp_path / name).write_text("a,b\n")
    with pytest.raises(ValueError, match=r"unsupported dataset format .*; use a .jsonl or .parquet file"):
        read_rows(tmp_path / name)
    with pytest.raises(ValueError, match="use a .jsonl or .parquet file"):
        write_rows(tmp_path / name, RAW_ROWS)


def test_bad_json_names_the_line_counting_blank_lines(tmp_path):
    path = tmp_path / "train.jsonl"
    good = json.dumps(RAW_ROWS[0])
    path.write_text(f"{good}\n\n{{'prompt': oops}}\n{good}\n")
    with pytest.raises(ValueError, match=rf"{path} line 3: invalid JSON \(.* at column 2\); fix the line"):
        read_rows(path)


def test_blank_lines_are_skipped_and_rows_are_numbered_from_zero(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join([json.dumps(RAW_ROWS[0]), "", json.dumps(RAW_ROWS[1]), ""]))
    assert [row.index for row in read_rows(path)] == [0, 1]


def test_invalid_rows_deep_in_a_file_are_named_by_file_row_and_field(tmp_path):
    path = tmp_path / "train.jsonl"
    raw = [dict(row) for row in RAW_ROWS]
    raw[3]["prompt"] = "Add 1 and 2."
    write_rows(path, raw)
    with pytest.raises(ValueError, match=rf"^{path} row 3: field 'prompt' must be a list .* got str"):
        read_rows(path)

    raw[3] = dict(RAW_ROWS[3])
    raw[4]["prompt"] = [{"role": "user", "content": None}]
    write_rows(path, raw)
    with pytest.raises(ValueError, match=rf"^{path} row 4: field 'prompt\[0\].content' must be a string"):
        read_rows(path)


def test_parquet_row_without_env_class_uses_default_env_or_fails_naming_the_row(tmp_path):
    path = tmp_path / "train.parquet"
    raw = [dict(row) for row in RAW_ROWS[:3]]
    raw[1]["env_class"] = None
    write_rows(path, raw)
    with pytest.raises(ValueError, match=rf"{path} row 1: field 'env_class' is missing"):
        read_rows(path)
    assert [row.env_class for row in read_rows(path, default_env="math")] == [
        "arithmetic",
        "math",
        "arithmetic",
    ]


def test_verl_style_parquet_written_by_pyarrow_reads_as_is(tmp_path):
    # Messages with different keys become structs with the union of keys; the missing ones read as None.
    path = tmp_path / "verl.parquet"
    table = pa.Table.from_pylist(
        [
            {
                "data_source": "gsm8k",
                "prompt": [
                    {"role": "user", "content": "1+1?"},
                    {"role": "assistant", "content": "2", "name": "bot"},
                ],
                "env_class": "arithmetic",
                "reward_spec": {"method": "rule", "ground_truth": "2"},
                "extra_info": {"split": "train", "index": 0},
            }
        ]
    )
    pq.write_table(table, path)
    (row,) = read_rows(path)
    assert row.prompt == [
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "2", "name": "bot"},
    ]
    assert row.extras["data_source"] == "gsm8k"
    assert row.reward_spec == {"method": "rule", "ground_truth": "2"}


def test_empty_and_corrupt_files_are_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="empty.jsonl: the dataset has no rows"):
        read_rows(tmp_path / "empty.jsonl")
    (tmp_path / "corrupt.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match="corrupt.parquet: not a readable parquet file"):
        read_rows(tmp_path / "corrupt.parquet")
