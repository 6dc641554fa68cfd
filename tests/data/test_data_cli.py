"""`aloft data list|build`: ready-to-train files from the built-in builders."""

from __future__ import annotations

from aloft.cli import main
from aloft.data import read_rows


def test_data_build_writes_valid_rows(tmp_path, capsys):
    out = tmp_path / "sql_eval.jsonl"
    assert (
        main(["data", "build", "sql", "--n", "5", "--split", "eval", "--out", str(out), "-o", "db=chinook"])
        == 0
    )
    rows = read_rows(out)
    assert len(rows) == 5 and {r.env_class for r in rows} == {"text2sql"}
    assert "wrote 5 rows" in capsys.readouterr().out


def test_data_build_errors_are_one_line(tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    assert main(["data", "build", "sql", "--n", "5", "--out", str(out), "-o", "nope=1"]) == 2
    assert "unknown options ['nope']; accepted: ['db']" in capsys.readouterr().err
    assert main(["data", "build", "sql", "--n", "5000", "--out", str(out)]) == 2
    assert "asked for 5000" in capsys.readouterr().err
    assert not out.exists()


def test_data_list_names_every_builder(capsys):
    assert main(["data", "list"]) == 0
    assert {"arithmetic", "math", "search", "sql"} <= set(capsys.readouterr().out.split())
