"""`aloft data list|build`: ready-to-train files from the built-in builders."""

from __future__ import annotations

from aloft.cli import main
from aloft.data import read_rows


def test_data_build_writes_valid_rows(tmp_path, capsys):
    out = tmp_path / "sql_eval.jsonl"
    assert (
        main(
            [
                "data",
                "build",
                "sql",
                "--size",
                "5",
                "--split",
                "eval",
                "--out",
                str(out),
                "data.builder_args.db=chinook",
            ]
        )
        == 0
    )
    rows = read_rows(out)
    assert len(rows) == 5 and {r.env_class for r in rows} == {"text2sql"}
    assert "wrote 5 rows" in capsys.readouterr().out


def test_data_build_errors_are_one_line(tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    assert main(["data", "build", "sql", "--size", "5", "--out", str(out), "data.builder_args.nope=1"]) == 2
    assert "unknown options ['nope']; accepted: ['db', 'max_turns', 'hint']" in capsys.readouterr().err
    assert main(["data", "build", "sql", "--size", "5000", "--out", str(out)]) == 2
    assert "asked for 5000" in capsys.readouterr().err
    assert not out.exists()


def test_data_build_sql_all_writes_every_split_of_both_protocols(tmp_path, capsys):
    """`aloft data build sql --split all --out DIR`: SkyRL-SQL-shaped train, in-domain eval and
    held-out files; `data.builder_args.max_turns=1` gives the 1-turn protocol of the same questions."""
    assert main(["data", "build", "sql", "--split", "all", "--out", str(tmp_path / "sql")]) == 0
    assert (
        main(
            [
                "data",
                "build",
                "sql",
                "--split",
                "all",
                "data.builder_args.max_turns=1",
                "--out",
                str(tmp_path / "one"),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    five = {split: read_rows(tmp_path / "sql" / f"{split}.jsonl") for split in ("train", "eval", "heldout")}
    one = {split: read_rows(tmp_path / "one" / f"{split}.jsonl") for split in ("train", "eval", "heldout")}
    assert len(five["train"]) >= 600 and len(five["heldout"]) >= 100
    assert f"wrote {len(five['train'])} rows to {tmp_path / 'sql' / 'train.jsonl'}" in printed
    heldout_dbs = {row.extras["db_id"] for row in five["heldout"]}
    assert heldout_dbs == {"flights", "library"}
    assert heldout_dbs.isdisjoint({row.extras["db_id"] for row in five["train"] + five["eval"]})
    for split in five:
        assert [row.prompt[1] for row in five[split]] == [row.prompt[1] for row in one[split]]
        assert {row.extras["max_turns"] for row in five[split]} == {5}
        assert {row.extras["max_turns"] for row in one[split]} == {1}
    assert main(["data", "build", "arithmetic", "--out", str(tmp_path / "a.jsonl")]) == 2
    assert "generates rows: give their number with --size" in capsys.readouterr().err


def test_data_list_names_every_builder(capsys):
    assert main(["data", "list"]) == 0
    assert {"arithmetic", "math", "search", "sql"} <= set(capsys.readouterr().out.split())


def test_data_builds_old_spellings_work_with_a_note(tmp_path, capsys):
    out = tmp_path / "old.jsonl"
    assert (
        main(["data", "build", "sql", "--n", "3", "--split", "eval", "--out", str(out), "-o", "db=chinook"])
        == 0
    )
    assert len(read_rows(out)) == 3
    assert capsys.readouterr().err.splitlines() == [
        "aloft data build: --n is deprecated and goes in the next release; write --size=VALUE instead",
        "aloft data build: -o is deprecated and goes in the next release; write data.builder_args.<key>=VALUE instead",
    ]
