"""The natural-science databases built from packaged data: ``elements`` (mendeleev's ``elements.db``)
and ``penguins`` (palmerpenguins' ``penguins-raw.csv``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from aloft.data.sources.sql.build import write_database
from aloft.data.sources.sql.packaged.files import cell_number, csv_rows, package_file

__all__ = ["build_elements", "build_penguins"]

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
    rows = csv_rows(package_file("palmerpenguins", "data/penguins-raw.csv"))
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
            cell_number(row["Culmen Length (mm)"]),
            cell_number(row["Culmen Depth (mm)"]),
            cell_number(row["Flipper Length (mm)"], int),
            cell_number(row["Body Mass (g)"], int),
            {"MALE": "male", "FEMALE": "female"}.get(row["Sex"]),
            cell_number(row["Delta 15 N (o/oo)"]),
            cell_number(row["Delta 13 C (o/oo)"]),
        )
        for index, row in enumerate(rows, 1)
    ]
    write_database(
        Path(path),
        PENGUINS_SCHEMA,
        {"species": species, "islands": list(enumerate(island_names, 1)), "penguins": penguins},
    )
