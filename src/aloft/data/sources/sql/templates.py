"""Question / gold-SQL templates, written for aloft, one list per database.

A template's question and SQL share named slots (``{country}``); ``slots`` is a query over the same
database whose columns are named like the slots, and each of its rows fills one instance: raw in the
question, as a quoted SQL literal in the query. ``aloft.data.sources.sql.pairs`` draws up to
``count`` instances per template (a fixed shuffle of the slot rows, seeded by the template key), keeps
only those whose gold query returns rows that do not depend on SQLite's scan order, and drops
duplicates. A template without slots is one pair.

Every question names the columns it wants, in order, and says when the rows must be ordered, so that
the gold result is the only right one (see the ``text2sql`` env for how results are compared).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TEMPLATES", "PairTemplate"]


@dataclass(frozen=True)
class PairTemplate:
    """One question / gold-SQL template (see the module docstring)."""

    key: str
    question: str
    sql: str
    slots: str | None = None
    count: int = 8


T = PairTemplate

ELEMENTS = [
    T(
        "elements.symbol_of",
        "What is the chemical symbol of {name}?",
        "SELECT symbol FROM elements WHERE name = {name}",
        "SELECT name FROM elements",
    ),
    T(
        "elements.in_period",
        "List the names of the elements in period {period}, by atomic number.",
        "SELECT name FROM elements WHERE period = {period} ORDER BY atomic_number",
        "SELECT DISTINCT period FROM elements",
        7,
    ),
    T(
        "elements.count_block",
        "How many elements are in the {block} block?",
        "SELECT COUNT(*) FROM elements WHERE block = {block}",
        "SELECT DISTINCT block FROM elements",
        4,
    ),
    T(
        "elements.discovered_after",
        "Which elements were discovered after {year}? Give their names and "
        "discovery years, earliest discovery first (ties by name).",
        "SELECT name, discovery_year FROM elements WHERE discovery_year > {year} ORDER BY discovery_year, name",
        "SELECT DISTINCT discovery_year AS year FROM elements WHERE discovery_year BETWEEN 1900 AND 1990",
    ),
    T(
        "elements.density_above",
        "How many elements have a density above {density} g/cm3?",
        "SELECT COUNT(*) FROM elements WHERE density > {density}",
        "SELECT DISTINCT CAST(density AS INTEGER) AS density FROM elements WHERE density BETWEEN 1 AND 20",
    ),
    T(
        "elements.series_members",
        "Which elements belong to the series '{series}'? Give their symbols.",
        "SELECT e.symbol FROM elements e JOIN series s ON s.series_id = e.series_id WHERE s.name = {series}",
        "SELECT name AS series FROM series",
        10,
    ),
    T(
        "elements.count_per_series",
        "How many elements does each series have? Give the series name and the count.",
        "SELECT s.name, COUNT(*) FROM series s JOIN elements e ON e.series_id = s.series_id GROUP BY s.series_id",
    ),
    T(
        "elements.isotope_count_of",
        "How many isotopes of {name} are listed?",
        "SELECT COUNT(*) FROM isotopes i JOIN elements e ON e.atomic_number = i.atomic_number WHERE e.name = {name}",
        "SELECT name FROM elements WHERE atomic_number <= 100",
    ),
    T(
        "elements.stable_isotopes_of",
        "Give the mass numbers of the isotopes of {name} that are not radioactive, smallest first.",
        "SELECT i.mass_number FROM isotopes i JOIN elements e ON e.atomic_number = i.atomic_number "
        "WHERE e.name = {name} AND i.is_radioactive = 0 ORDER BY i.mass_number",
        "SELECT name FROM elements WHERE atomic_number <= 82",
    ),
    T(
        "elements.most_abundant_isotope",
        "What is the mass number of the most abundant isotope of {name}?",
        "SELECT i.mass_number FROM isotopes i JOIN elements e ON e.atomic_number = i.atomic_number "
        "WHERE e.name = {name} AND i.abundance = (SELECT MAX(abundance) FROM isotopes "
        "WHERE atomic_number = e.atomic_number)",
        "SELECT name FROM elements WHERE atomic_number <= 82",
    ),
    T(
        "elements.main_states",
        "What are the common ('main') oxidation states of {name}? List them from lowest to highest.",
        "SELECT o.oxidation_state FROM oxidation_states o JOIN elements e ON e.atomic_number = o.atomic_number "
        "WHERE e.name = {name} AND o.category = 'main' ORDER BY o.oxidation_state",
        "SELECT name FROM elements WHERE atomic_number <= 90",
    ),
    T(
        "elements.many_states",
        "Which elements have more than {k} oxidation states listed? Give their names.",
        "SELECT e.name FROM elements e JOIN oxidation_states o ON o.atomic_number = e.atomic_number "
        "GROUP BY e.atomic_number HAVING COUNT(*) > {k}",
        "SELECT value AS k FROM (SELECT 5 AS value UNION SELECT 6 UNION SELECT 7 UNION SELECT 8)",
        4,
    ),
    T(
        "elements.heavier_than_group_avg",
        "Which elements in group {group} are heavier than the average "
        "atomic weight of that group? Give their names.",
        "SELECT name FROM elements WHERE group_id = {group} AND atomic_weight > "
        "(SELECT AVG(atomic_weight) FROM elements WHERE group_id = {group})",
        'SELECT group_id AS "group" FROM element_groups',
        10,
    ),
    T(
        "elements.highest_melting_in_period",
        "Which element of period {period} has the highest melting point? Give its name and melting point.",
        "SELECT name, melting_point FROM elements WHERE period = {period} ORDER BY melting_point DESC LIMIT 1",
        "SELECT DISTINCT period FROM elements",
        7,
    ),
    T(
        "elements.group_name_of",
        "What is the name of the group that {name} belongs to?",
        "SELECT g.name FROM element_groups g JOIN elements e ON e.group_id = g.group_id WHERE e.name = {name}",
        "SELECT e.name FROM elements e JOIN element_groups g ON g.group_id = e.group_id WHERE g.name IS NOT NULL",
    ),
    T(
        "elements.radioactive_count_per_period",
        "For each period, how many radioactive elements does it have? "
        "Give the period and the count, only for periods that have at least one.",
        "SELECT period, COUNT(*) FROM elements WHERE is_radioactive = 1 GROUP BY period",
    ),
]

WORLD = [
    T(
        "world.code_of",
        "What is the two-letter ISO code of {name}?",
        "SELECT code FROM countries WHERE name = {name}",
        "SELECT name FROM countries",
    ),
    T(
        "world.official_name",
        "What is the official name of the country with the code '{code}'?",
        "SELECT official_name FROM countries WHERE code = {code}",
        "SELECT code FROM countries WHERE official_name IS NOT NULL",
    ),
    T(
        "world.subdivision_count",
        "How many subdivisions does {name} have in total?",
        "SELECT COUNT(*) FROM subdivisions s JOIN countries c ON c.code = s.country_code WHERE c.name = {name}",
        "SELECT name FROM countries WHERE code IN (SELECT country_code FROM subdivisions)",
        10,
    ),
    T(
        "world.subdivisions_of_type",
        "List the names of the subdivisions of {name} whose type is '{type}', in alphabetical order.",
        "SELECT s.name FROM subdivisions s JOIN countries c ON c.code = s.country_code "
        "WHERE c.name = {name} AND s.type = {type} ORDER BY s.name",
        "SELECT c.name, s.type FROM subdivisions s JOIN countries c ON c.code = s.country_code "
        "GROUP BY c.code, s.type HAVING COUNT(*) BETWEEN 3 AND 25",
        10,
    ),
    T(
        "world.types_in_country",
        "Which subdivision types does {name} use, and how many subdivisions of "
        "each? Give the type and the count.",
        "SELECT s.type, COUNT(*) FROM subdivisions s JOIN countries c ON c.code = s.country_code "
        "WHERE c.name = {name} GROUP BY s.type",
        "SELECT name FROM countries WHERE code IN (SELECT country_code FROM subdivisions "
        "GROUP BY country_code HAVING COUNT(DISTINCT type) >= 2)",
        10,
    ),
    T(
        "world.airports_in_city",
        "Which airports are in the city of {city} in {name}? Give their IATA codes and names.",
        "SELECT a.iata, a.name FROM airports a JOIN countries c ON c.code = a.country_code "
        "WHERE a.city = {city} AND c.name = {name}",
        "SELECT a.city, c.name FROM airports a JOIN countries c ON c.code = a.country_code "
        "WHERE a.city IS NOT NULL GROUP BY a.city, c.code HAVING COUNT(*) >= 2",
        10,
    ),
    T(
        "world.airport_count",
        "How many airports with an IATA code are there in {name}?",
        "SELECT COUNT(*) FROM airports a JOIN countries c ON c.code = a.country_code WHERE c.name = {name}",
        "SELECT name FROM countries WHERE code IN (SELECT country_code FROM airports)",
        10,
    ),
    T(
        "world.iata_lookup",
        "What are the name and the city of the airport with the IATA code '{iata}'?",
        "SELECT name, city FROM airports WHERE iata = {iata}",
        "SELECT iata FROM airports WHERE city IS NOT NULL GROUP BY iata HAVING COUNT(*) = 1",
    ),
    T(
        "world.highest_airport",
        "Which airport in {name} has the highest elevation? Give its name and its elevation in feet.",
        "SELECT a.name, a.elevation_ft FROM airports a JOIN countries c ON c.code = a.country_code "
        "WHERE c.name = {name} ORDER BY a.elevation_ft DESC LIMIT 1",
        "SELECT c.name FROM countries c JOIN airports a ON a.country_code = c.code "
        "GROUP BY c.code HAVING COUNT(*) >= 5",
        10,
    ),
    T(
        "world.airports_above",
        "How many airports lie higher than {feet} feet?",
        "SELECT COUNT(*) FROM airports WHERE elevation_ft > {feet}",
        "SELECT value AS feet FROM (SELECT 5000 AS value UNION SELECT 8000 UNION SELECT 10000 "
        "UNION SELECT 12000)",
        4,
    ),
    T(
        "world.countries_without_airports",
        "How many countries have no airport with an IATA code?",
        "SELECT COUNT(*) FROM countries WHERE code NOT IN (SELECT country_code FROM airports)",
    ),
    T(
        "world.top_airport_countries",
        "Which {k} countries have the most airports? Give the country name and "
        "the number of airports, most first.",
        "SELECT c.name, COUNT(*) AS airports FROM countries c JOIN airports a ON a.country_code = c.code "
        "GROUP BY c.code ORDER BY airports DESC, c.name LIMIT {k}",
        "SELECT value AS k FROM (SELECT 3 AS value UNION SELECT 5 UNION SELECT 10)",
        3,
    ),
    T(
        "world.timezones_of",
        "In how many different time zones are the airports of {name}?",
        "SELECT COUNT(DISTINCT a.timezone) FROM airports a JOIN countries c ON c.code = a.country_code "
        "WHERE c.name = {name}",
        "SELECT c.name FROM countries c JOIN airports a ON a.country_code = c.code GROUP BY c.code "
        "HAVING COUNT(DISTINCT a.timezone) >= 2",
        10,
    ),
    T(
        "world.child_subdivisions",
        "Which subdivisions have '{parent}' as their parent? Give their codes and names.",
        "SELECT s.code, s.name FROM subdivisions s JOIN subdivisions p ON p.code = s.parent_code "
        "WHERE p.name = {parent}",
        "SELECT p.name AS parent FROM subdivisions p JOIN subdivisions s ON s.parent_code = p.code "
        "GROUP BY p.name HAVING COUNT(DISTINCT p.code) = 1 AND COUNT(*) BETWEEN 2 AND 15",
    ),
    T(
        "world.countries_more_subdivisions_than",
        "Which countries have more subdivisions than {name}? Give their names.",
        "SELECT c.name FROM countries c JOIN subdivisions s ON s.country_code = c.code GROUP BY c.code "
        "HAVING COUNT(*) > (SELECT COUNT(*) FROM subdivisions s2 JOIN countries c2 ON c2.code = s2.country_code "
        "WHERE c2.name = {name})",
        "SELECT c.name FROM countries c JOIN subdivisions s ON s.country_code = c.code GROUP BY c.code "
        "HAVING COUNT(*) BETWEEN 60 AND 150",
        6,
    ),
]

PENGUINS = [
    T(
        "penguins.count_island",
        "How many penguins were sampled on {island}?",
        "SELECT COUNT(*) FROM penguins p JOIN islands i ON i.island_id = p.island_id WHERE i.name = {island}",
        "SELECT name AS island FROM islands",
        3,
    ),
    T(
        "penguins.scientific_name",
        "What is the scientific name of the {species} penguin?",
        "SELECT scientific_name FROM species WHERE common_name = {species}",
        "SELECT common_name AS species FROM species",
        3,
    ),
    T(
        "penguins.avg_mass_species_sex",
        "What is the average body mass in grams of {sex} {species} penguins?",
        "SELECT AVG(p.body_mass_g) FROM penguins p JOIN species s ON s.species_id = p.species_id "
        "WHERE s.common_name = {species} AND p.sex = {sex}",
        "SELECT DISTINCT s.common_name AS species, p.sex FROM penguins p JOIN species s "
        "ON s.species_id = p.species_id WHERE p.sex IS NOT NULL",
        6,
    ),
    T(
        "penguins.count_per_island_species",
        "How many penguins of each species were sampled on each island? "
        "Give the island name, the species' common name and the count.",
        "SELECT i.name, s.common_name, COUNT(*) FROM penguins p JOIN islands i ON i.island_id = p.island_id "
        "JOIN species s ON s.species_id = p.species_id GROUP BY i.name, s.common_name",
    ),
    T(
        "penguins.unknown_sex",
        "How many penguins in study {study} have no recorded sex?",
        "SELECT COUNT(*) FROM penguins WHERE study = {study} AND sex IS NULL",
        "SELECT DISTINCT study FROM penguins",
        3,
    ),
    T(
        "penguins.heavier_than",
        "How many penguins weigh more than {grams} grams?",
        "SELECT COUNT(*) FROM penguins WHERE body_mass_g > {grams}",
        "SELECT DISTINCT (body_mass_g / 250) * 250 AS grams FROM penguins WHERE body_mass_g BETWEEN 3000 AND 6000",
    ),
    T(
        "penguins.longest_flippers",
        "Which {k} penguins have the longest flippers? Give their individual IDs, "
        "studies and flipper lengths, longest first (ties by individual ID, then study).",
        "SELECT individual_id, study, flipper_length_mm FROM penguins WHERE flipper_length_mm IS NOT NULL "
        "ORDER BY flipper_length_mm DESC, individual_id, study LIMIT {k}",
        "SELECT value AS k FROM (SELECT 3 AS value UNION SELECT 5)",
        2,
    ),
    T(
        "penguins.incomplete_clutch_by_species",
        "For each species, how many penguins did not complete their "
        "clutch? Give the common name and the count, for species with at least one.",
        "SELECT s.common_name, COUNT(*) FROM penguins p JOIN species s ON s.species_id = p.species_id "
        "WHERE p.clutch_completion = 'No' GROUP BY s.common_name",
    ),
    T(
        "penguins.max_bill_species",
        "What is the longest bill length measured on a {species} penguin?",
        "SELECT MAX(p.bill_length_mm) FROM penguins p JOIN species s ON s.species_id = p.species_id "
        "WHERE s.common_name = {species}",
        "SELECT common_name AS species FROM species",
        3,
    ),
    T(
        "penguins.above_species_average",
        "How many {species} penguins are heavier than the average {species} penguin?",
        "SELECT COUNT(*) FROM penguins p JOIN species s ON s.species_id = p.species_id "
        "WHERE s.common_name = {species} AND p.body_mass_g > (SELECT AVG(p2.body_mass_g) FROM penguins p2 "
        "WHERE p2.species_id = s.species_id)",
        "SELECT common_name AS species FROM species",
        3,
    ),
    T(
        "penguins.islands_of_species",
        "On which islands were {species} penguins sampled? Give the island names in alphabetical order.",
        "SELECT DISTINCT i.name FROM penguins p JOIN islands i ON i.island_id = p.island_id "
        "JOIN species s ON s.species_id = p.species_id WHERE s.common_name = {species} ORDER BY i.name",
        "SELECT common_name AS species FROM species",
        3,
    ),
    T(
        "penguins.eggs_in_month",
        "How many eggs were recorded in {month} (egg dates in that year and month)?",
        "SELECT COUNT(*) FROM penguins WHERE substr(egg_date, 1, 7) = {month}",
        "SELECT DISTINCT substr(egg_date, 1, 7) AS month FROM penguins",
    ),
    T(
        "penguins.avg_per_study",
        "For each study, what is the average flipper length? Give the study and the "
        "average, ordered by study.",
        "SELECT study, AVG(flipper_length_mm) FROM penguins GROUP BY study ORDER BY study",
    ),
    T(
        "penguins.species_more_than",
        "Which species have more than {k} penguins sampled with a known sex? Give the common names.",
        "SELECT s.common_name FROM species s JOIN penguins p ON p.species_id = s.species_id "
        "WHERE p.sex IS NOT NULL GROUP BY s.species_id HAVING COUNT(*) > {k}",
        "SELECT value AS k FROM (SELECT 60 AS value UNION SELECT 100 UNION SELECT 130)",
        3,
    ),
    T(
        "penguins.isotope_extremes",
        "What are the lowest and the highest delta 15 N values measured on {island}?",
        "SELECT MIN(p.delta_15n), MAX(p.delta_15n) FROM penguins p JOIN islands i ON i.island_id = p.island_id "
        "WHERE i.name = {island}",
        "SELECT name AS island FROM islands",
        3,
    ),
]

GAPMINDER = [
    T(
        "gapminder.life_in_year",
        "What was the life expectancy in {name} in {year}?",
        "SELECT o.life_expectancy FROM observations o JOIN countries c ON c.country_id = o.country_id "
        "WHERE c.name = {name} AND o.year = {year}",
        "SELECT c.name, o.year FROM countries c JOIN observations o ON o.country_id = c.country_id",
        10,
    ),
    T(
        "gapminder.continent_of",
        "On which continent is {name}?",
        "SELECT ct.name FROM continents ct JOIN countries c ON c.continent_id = ct.continent_id "
        "WHERE c.name = {name}",
        "SELECT name FROM countries",
    ),
    T(
        "gapminder.countries_in",
        "How many countries of {continent} are in the data?",
        "SELECT COUNT(*) FROM countries c JOIN continents ct ON ct.continent_id = c.continent_id "
        "WHERE ct.name = {continent}",
        "SELECT name AS continent FROM continents",
        5,
    ),
    T(
        "gapminder.population_series",
        "What was the population of {name} in each year of the data? Give the "
        "year and the population, in year order.",
        "SELECT o.year, o.population FROM observations o JOIN countries c ON c.country_id = o.country_id "
        "WHERE c.name = {name} ORDER BY o.year",
        "SELECT name FROM countries",
    ),
    T(
        "gapminder.richest_in_year",
        "Which {k} countries had the highest GDP per capita in {year}? Give the "
        "country name and the GDP per capita, highest first.",
        "SELECT c.name, o.gdp_per_capita FROM observations o JOIN countries c ON c.country_id = o.country_id "
        "WHERE o.year = {year} ORDER BY o.gdp_per_capita DESC LIMIT {k}",
        "SELECT DISTINCT o.year, k.k FROM observations o, (SELECT 3 AS k UNION SELECT 5) k",
    ),
    T(
        "gapminder.avg_life_continent",
        "What was the average life expectancy of the countries of {continent} in {year}?",
        "SELECT AVG(o.life_expectancy) FROM observations o JOIN countries c ON c.country_id = o.country_id "
        "JOIN continents ct ON ct.continent_id = c.continent_id WHERE ct.name = {continent} AND o.year = {year}",
        "SELECT ct.name AS continent, o.year FROM continents ct, (SELECT DISTINCT year FROM observations) o",
        10,
    ),
    T(
        "gapminder.life_above",
        "How many countries had a life expectancy above {age} years in {year}?",
        "SELECT COUNT(*) FROM observations WHERE year = {year} AND life_expectancy > {age}",
        "SELECT DISTINCT o.year, a.age FROM observations o, (SELECT 50 AS age UNION SELECT 60 UNION SELECT 70) a "
        "WHERE o.year >= 1967",
    ),
    T(
        "gapminder.population_continent",
        "What was the total population of {continent} in {year}, summed over its countries in the data?",
        "SELECT SUM(o.population) FROM observations o JOIN countries c ON c.country_id = o.country_id "
        "JOIN continents ct ON ct.continent_id = c.continent_id WHERE ct.name = {continent} AND o.year = {year}",
        "SELECT ct.name AS continent, o.year FROM continents ct, (SELECT DISTINCT year FROM observations) o",
        10,
    ),
    T(
        "gapminder.life_gain",
        "By how many years did the life expectancy in {name} change from 1952 to 2007?",
        "SELECT late.life_expectancy - early.life_expectancy FROM observations early "
        "JOIN observations late ON late.country_id = early.country_id JOIN countries c "
        "ON c.country_id = early.country_id WHERE c.name = {name} AND early.year = 1952 AND late.year = 2007",
        "SELECT name FROM countries",
    ),
    T(
        "gapminder.above_continent_avg",
        "Which countries of {continent} had a GDP per capita above their "
        "continent's average in {year}? Give the country names.",
        "SELECT c.name FROM observations o JOIN countries c ON c.country_id = o.country_id "
        "JOIN continents ct ON ct.continent_id = c.continent_id WHERE ct.name = {continent} AND o.year = {year} "
        "AND o.gdp_per_capita > (SELECT AVG(o2.gdp_per_capita) FROM observations o2 JOIN countries c2 "
        "ON c2.country_id = o2.country_id WHERE c2.continent_id = ct.continent_id AND o2.year = {year})",
        "SELECT ct.name AS continent, o.year FROM continents ct, (SELECT DISTINCT year FROM observations) o "
        "WHERE ct.name <> 'Oceania'",
        10,
    ),
    T(
        "gapminder.continents_avg_life_above",
        "Which continents had an average life expectancy above {age} in {year}? Give their names.",
        "SELECT ct.name FROM observations o JOIN countries c ON c.country_id = o.country_id "
        "JOIN continents ct ON ct.continent_id = c.continent_id WHERE o.year = {year} GROUP BY ct.continent_id "
        "HAVING AVG(o.life_expectancy) > {age}",
        "SELECT DISTINCT o.year, a.age FROM observations o, (SELECT 50 AS age UNION SELECT 60 UNION SELECT 70) a",
    ),
    T(
        "gapminder.lowest_life",
        "Which country had the lowest life expectancy in {year}? Give its name and life expectancy.",
        "SELECT c.name, o.life_expectancy FROM observations o JOIN countries c ON c.country_id = o.country_id "
        "WHERE o.year = {year} ORDER BY o.life_expectancy LIMIT 1",
        "SELECT DISTINCT year FROM observations",
        12,
    ),
    T(
        "gapminder.countries_starting",
        "Which countries have a name starting with '{letter}'? Give the names in alphabetical order.",
        "SELECT name FROM countries WHERE name LIKE {letter} || '%' ORDER BY name",
        "SELECT DISTINCT substr(name, 1, 1) AS letter FROM countries",
    ),
    T(
        "gapminder.declined_population",
        "How many countries had a smaller population in {later} than in {earlier}?",
        "SELECT COUNT(*) FROM observations a JOIN observations b ON b.country_id = a.country_id "
        "WHERE a.year = {earlier} AND b.year = {later} AND b.population < a.population",
        "SELECT a.year AS earlier, b.year AS later FROM (SELECT DISTINCT year FROM observations) a, "
        "(SELECT DISTINCT year FROM observations) b WHERE b.year - a.year BETWEEN 5 AND 15",
    ),
]

CARS = [
    T(
        "cars.count_maker",
        "How many cars made by {maker} are in the data?",
        "SELECT COUNT(*) FROM cars c JOIN makers m ON m.maker_id = c.maker_id WHERE m.name = {maker}",
        "SELECT name AS maker FROM makers",
    ),
    T(
        "cars.origin_of",
        "Where does the maker {maker} come from?",
        "SELECT origin FROM makers WHERE name = {maker}",
        "SELECT name AS maker FROM makers",
    ),
    T(
        "cars.avg_mpg_year",
        "What was the average fuel economy (mpg) of the cars of model year {year}?",
        "SELECT AVG(mpg) FROM cars WHERE model_year = {year}",
        "SELECT DISTINCT model_year AS year FROM cars",
    ),
    T(
        "cars.cylinders_count",
        "How many cars have {n} cylinders?",
        "SELECT COUNT(*) FROM cars WHERE cylinders = {n}",
        "SELECT DISTINCT cylinders AS n FROM cars",
        5,
    ),
    T(
        "cars.models_of_maker_year",
        "Which {maker} models of model year {year} are in the data? Give the model names.",
        "SELECT c.model FROM cars c JOIN makers m ON m.maker_id = c.maker_id WHERE m.name = {maker} "
        "AND c.model_year = {year}",
        "SELECT m.name AS maker, c.model_year AS year FROM cars c JOIN makers m ON m.maker_id = c.maker_id "
        "GROUP BY m.maker_id, c.model_year HAVING COUNT(*) >= 2",
        10,
    ),
    T(
        "cars.avg_by_origin",
        "What is the average horsepower of the cars from each origin? Give the origin and the average.",
        "SELECT m.origin, AVG(c.horsepower) FROM cars c JOIN makers m ON m.maker_id = c.maker_id GROUP BY m.origin",
    ),
    T(
        "cars.heavier_than",
        "How many cars weigh more than {lbs} pounds?",
        "SELECT COUNT(*) FROM cars WHERE weight_lbs > {lbs}",
        "SELECT DISTINCT (weight_lbs / 500) * 500 AS lbs FROM cars WHERE weight_lbs BETWEEN 2000 AND 4500",
    ),
    T(
        "cars.most_efficient",
        "Which {k} cars have the best fuel economy? Give the maker name, the model and the mpg, best first.",
        "SELECT m.name, c.model, c.mpg FROM cars c JOIN makers m ON m.maker_id = c.maker_id "
        "WHERE c.mpg IS NOT NULL ORDER BY c.mpg DESC LIMIT {k}",
        "SELECT value AS k FROM (SELECT 1 AS value UNION SELECT 3 UNION SELECT 5)",
        3,
    ),
    T(
        "cars.makers_from",
        "Which makers come from {origin}? Give their names in alphabetical order.",
        "SELECT name FROM makers WHERE origin = {origin} ORDER BY name",
        "SELECT DISTINCT origin FROM makers",
        3,
    ),
    T(
        "cars.makers_many_models",
        "Which makers have more than {k} cars in the data? Give the maker name and the number of cars.",
        "SELECT m.name, COUNT(*) FROM makers m JOIN cars c ON c.maker_id = m.maker_id GROUP BY m.maker_id "
        "HAVING COUNT(*) > {k}",
        "SELECT value AS k FROM (SELECT 10 AS value UNION SELECT 20 UNION SELECT 25 UNION SELECT 30)",
        4,
    ),
    T(
        "cars.faster_than_avg",
        "How many {origin} cars accelerate from 0 to 60 mph faster than the average "
        "car of the data (a lower acceleration time)?",
        "SELECT COUNT(*) FROM cars c JOIN makers m ON m.maker_id = c.maker_id WHERE m.origin = {origin} "
        "AND c.acceleration < (SELECT AVG(acceleration) FROM cars)",
        "SELECT DISTINCT origin FROM makers",
        3,
    ),
    T(
        "cars.unknown_mpg",
        "Which cars have no known mpg? Give the maker name and the model.",
        "SELECT m.name, c.model FROM cars c JOIN makers m ON m.maker_id = c.maker_id WHERE c.mpg IS NULL",
    ),
    T(
        "cars.max_hp_maker",
        "What is the highest horsepower of any {maker} car?",
        "SELECT MAX(c.horsepower) FROM cars c JOIN makers m ON m.maker_id = c.maker_id WHERE m.name = {maker}",
        "SELECT name AS maker FROM makers",
    ),
    T(
        "cars.years_of_maker",
        "In which model years does the data have cars made by {maker}? List the years in order.",
        "SELECT DISTINCT c.model_year FROM cars c JOIN makers m ON m.maker_id = c.maker_id "
        "WHERE m.name = {maker} ORDER BY c.model_year",
        "SELECT m.name AS maker FROM makers m JOIN cars c ON c.maker_id = m.maker_id GROUP BY m.maker_id "
        "HAVING COUNT(*) >= 3",
    ),
    T(
        "cars.origin_count_year",
        "How many cars from each origin have model year {year}? Give the origin and the count.",
        "SELECT m.origin, COUNT(*) FROM cars c JOIN makers m ON m.maker_id = c.maker_id "
        "WHERE c.model_year = {year} GROUP BY m.origin",
        "SELECT DISTINCT model_year AS year FROM cars",
    ),
]

CHINOOK = [
    T(
        "chinook.tracks_of_artist",
        "How many tracks by the artist '{artist}' are in the store?",
        "SELECT COUNT(*) FROM Track t JOIN Album al ON al.AlbumId = t.AlbumId JOIN Artist ar "
        "ON ar.ArtistId = al.ArtistId WHERE ar.Name = {artist}",
        "SELECT Name AS artist FROM Artist WHERE ArtistId IN (SELECT ArtistId FROM Album)",
    ),
    T(
        "chinook.albums_of_artist",
        "What are the titles of the albums by {artist}?",
        "SELECT al.Title FROM Album al JOIN Artist ar ON ar.ArtistId = al.ArtistId WHERE ar.Name = {artist}",
        "SELECT Name AS artist FROM Artist WHERE ArtistId IN (SELECT ArtistId FROM Album)",
    ),
    T(
        "chinook.customers_in_country",
        "Which customers live in {country}? Give their first and last names.",
        "SELECT FirstName, LastName FROM Customer WHERE Country = {country}",
        "SELECT DISTINCT Country AS country FROM Customer",
    ),
    T(
        "chinook.sales_in_country",
        "What is the total of all invoices billed to {country}?",
        "SELECT SUM(Total) FROM Invoice WHERE BillingCountry = {country}",
        "SELECT DISTINCT BillingCountry AS country FROM Invoice",
    ),
    T(
        "chinook.genre_track_count",
        "How many tracks of the genre '{genre}' are there?",
        "SELECT COUNT(*) FROM Track t JOIN Genre g ON g.GenreId = t.GenreId WHERE g.Name = {genre}",
        "SELECT Name AS genre FROM Genre",
    ),
    T(
        "chinook.playlist_size",
        "How many tracks does the playlist '{playlist}' contain?",
        "SELECT COUNT(*) FROM PlaylistTrack pt JOIN Playlist p ON p.PlaylistId = pt.PlaylistId "
        "WHERE p.Name = {playlist}",
        "SELECT Name AS playlist FROM Playlist WHERE PlaylistId IN (SELECT PlaylistId FROM PlaylistTrack) "
        "GROUP BY Name HAVING COUNT(*) = 1",
    ),
    T(
        "chinook.longer_than_album_avg",
        "Which tracks of the album '{album}' are longer than the album's "
        "average track? Give the track names.",
        "SELECT t.Name FROM Track t JOIN Album al ON al.AlbumId = t.AlbumId WHERE al.Title = {album} "
        "AND t.Milliseconds > (SELECT AVG(Milliseconds) FROM Track WHERE AlbumId = al.AlbumId)",
        "SELECT al.Title AS album FROM Album al JOIN Track t ON t.AlbumId = al.AlbumId GROUP BY al.AlbumId "
        "HAVING COUNT(*) >= 8",
    ),
    T(
        "chinook.support_rep_customers",
        "How many customers does the support representative {first} {last} look after?",
        "SELECT COUNT(*) FROM Customer c JOIN Employee e ON e.EmployeeId = c.SupportRepId "
        "WHERE e.FirstName = {first} AND e.LastName = {last}",
        "SELECT FirstName AS first, LastName AS last FROM Employee WHERE EmployeeId IN "
        "(SELECT SupportRepId FROM Customer)",
        3,
    ),
]

SCHOOL = [
    T(
        "school.students_in_city",
        "How many students live in {city}?",
        "SELECT COUNT(*) FROM students WHERE city = {city}",
        "SELECT DISTINCT city FROM students",
        6,
    ),
    T(
        "school.courses_of_dept",
        "Which courses does the {dept} department offer? Give the titles and credits.",
        "SELECT c.title, c.credits FROM courses c JOIN departments d ON d.dept_id = c.dept_id WHERE d.name = {dept}",
        "SELECT name AS dept FROM departments WHERE dept_id IN (SELECT dept_id FROM courses)",
    ),
    T(
        "school.avg_score_course",
        "What was the average score in {course} in the term {term}?",
        "SELECT AVG(e.score) FROM enrollments e JOIN courses c ON c.course_id = e.course_id "
        "WHERE c.title = {course} AND e.term = {term}",
        "SELECT DISTINCT c.title AS course, e.term FROM enrollments e JOIN courses c ON c.course_id = e.course_id "
        "WHERE e.score IS NOT NULL",
        10,
    ),
    T(
        "school.students_of_teacher",
        "How many different students have taken a course taught by {first} {last}?",
        "SELECT COUNT(DISTINCT e.student_id) FROM enrollments e JOIN courses c ON c.course_id = e.course_id "
        "JOIN teachers t ON t.teacher_id = c.teacher_id WHERE t.first_name = {first} AND t.last_name = {last}",
        "SELECT first_name AS first, last_name AS last FROM teachers WHERE teacher_id IN "
        "(SELECT teacher_id FROM courses)",
    ),
    T(
        "school.grade_count",
        "How many students are in grade {grade}?",
        "SELECT COUNT(*) FROM students WHERE grade_level = {grade}",
        "SELECT DISTINCT grade_level AS grade FROM students",
        4,
    ),
    T(
        "school.above_course_avg",
        "Which students scored above the course average in {course} in "
        "'2024-spring'? Give their first and last names.",
        "SELECT s.first_name, s.last_name FROM enrollments e JOIN students s ON s.student_id = e.student_id "
        "JOIN courses c ON c.course_id = e.course_id WHERE c.title = {course} AND e.term = '2024-spring' "
        "AND e.score > (SELECT AVG(score) FROM enrollments WHERE course_id = c.course_id AND term = '2024-spring')",
        "SELECT DISTINCT c.title AS course FROM courses c JOIN enrollments e ON e.course_id = c.course_id "
        "WHERE e.term = '2024-spring'",
    ),
]

SHOP = [
    T(
        "shop.products_in_category",
        "Which products are in the category '{category}'? Give their names and prices.",
        "SELECT p.name, p.price FROM products p JOIN categories c ON c.category_id = p.category_id "
        "WHERE c.name = {category}",
        "SELECT name AS category FROM categories",
    ),
    T(
        "shop.orders_of_customer",
        "How many orders has {customer} placed?",
        "SELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id WHERE c.name = {customer}",
        "SELECT name AS customer FROM customers WHERE customer_id IN (SELECT customer_id FROM orders)",
    ),
    T(
        "shop.customers_country",
        "How many customers come from {country}?",
        "SELECT COUNT(*) FROM customers WHERE country = {country}",
        "SELECT DISTINCT country FROM customers",
    ),
    T(
        "shop.status_count",
        "How many orders have the status '{status}'?",
        "SELECT COUNT(*) FROM orders WHERE status = {status}",
        "SELECT DISTINCT status FROM orders",
        4,
    ),
    T(
        "shop.avg_rating_product",
        "What is the average rating of the product '{product}'?",
        "SELECT AVG(r.rating) FROM reviews r JOIN products p ON p.product_id = r.product_id WHERE p.name = {product}",
        "SELECT name AS product FROM products WHERE product_id IN (SELECT product_id FROM reviews)",
    ),
    T(
        "shop.revenue_category",
        "What is the revenue (quantity times unit price) of the category '{category}' "
        "over orders that were not cancelled?",
        "SELECT SUM(oi.quantity * oi.unit_price) FROM order_items oi JOIN orders o ON o.order_id = oi.order_id "
        "JOIN products p ON p.product_id = oi.product_id JOIN categories c ON c.category_id = p.category_id "
        "WHERE c.name = {category} AND o.status <> 'cancelled'",
        "SELECT name AS category FROM categories",
    ),
]

LIBRARY = [
    T(
        "library.books_of_genre",
        "Which books are in the genre '{genre}'? Give their titles and publication years.",
        "SELECT title, published_year FROM books WHERE genre = {genre}",
        "SELECT DISTINCT genre FROM books",
    ),
    T(
        "library.books_by_author",
        "What are the titles of the books written by {author}?",
        "SELECT b.title FROM books b JOIN authors a ON a.author_id = b.author_id WHERE a.name = {author}",
        "SELECT name AS author FROM authors WHERE author_id IN (SELECT author_id FROM books)",
    ),
    T(
        "library.copies_at_branch",
        "How many copies does the {branch} branch hold?",
        "SELECT COUNT(*) FROM copies c JOIN branches b ON b.branch_id = c.branch_id WHERE b.name = {branch}",
        "SELECT name AS branch FROM branches",
        5,
    ),
    T(
        "library.loans_of_member",
        "How many loans has the member with ID {member} made?",
        "SELECT COUNT(*) FROM loans WHERE member_id = {member}",
        "SELECT DISTINCT member_id AS member FROM loans",
    ),
    T(
        "library.members_of_type",
        "How many members have a '{membership}' membership?",
        "SELECT COUNT(*) FROM members WHERE membership = {membership}",
        "SELECT DISTINCT membership FROM members",
        3,
    ),
    T(
        "library.unreturned_at_branch",
        "How many loans of copies held by the {branch} branch have not been returned?",
        "SELECT COUNT(*) FROM loans l JOIN copies c ON c.copy_id = l.copy_id JOIN branches b "
        "ON b.branch_id = c.branch_id WHERE b.name = {branch} AND l.returned_date IS NULL",
        "SELECT name AS branch FROM branches",
        5,
    ),
    T(
        "library.times_borrowed",
        "How many times was the book '{title}' borrowed?",
        "SELECT COUNT(*) FROM loans l JOIN copies c ON c.copy_id = l.copy_id JOIN books b "
        "ON b.book_id = c.book_id WHERE b.title = {title}",
        "SELECT title FROM books",
    ),
    T(
        "library.late_returns",
        "How many loans made in {year} were returned after their due date?",
        "SELECT COUNT(*) FROM loans WHERE substr(loan_date, 1, 4) = {year} AND returned_date > due_date",
        "SELECT DISTINCT substr(loan_date, 1, 4) AS year FROM loans",
        6,
    ),
    T(
        "library.longer_than_genre_avg",
        "Which books of the genre '{genre}' have more pages than the average "
        "book of that genre? Give their titles.",
        "SELECT title FROM books b WHERE genre = {genre} AND pages > (SELECT AVG(pages) FROM books "
        "WHERE genre = b.genre)",
        "SELECT DISTINCT genre FROM books",
    ),
    T(
        "library.branches_with_book",
        "Which branches hold a copy of '{title}'? Give the branch names in alphabetical order.",
        "SELECT DISTINCT br.name FROM branches br JOIN copies c ON c.branch_id = br.branch_id JOIN books b "
        "ON b.book_id = c.book_id WHERE b.title = {title} ORDER BY br.name",
        "SELECT title FROM books",
    ),
    T(
        "library.popular_genres",
        "Which genres were borrowed more than {k} times in all? Give the genre and the number of loans.",
        "SELECT b.genre, COUNT(*) FROM loans l JOIN copies c ON c.copy_id = l.copy_id JOIN books b "
        "ON b.book_id = c.book_id GROUP BY b.genre HAVING COUNT(*) > {k}",
        "SELECT value AS k FROM (SELECT 50 AS value UNION SELECT 80 UNION SELECT 100 UNION SELECT 120)",
        4,
    ),
    T(
        "library.author_country",
        "How many authors in the catalogue come from {country}?",
        "SELECT COUNT(*) FROM authors WHERE country = {country}",
        "SELECT DISTINCT country FROM authors",
    ),
]

FLIGHTS = [
    T(
        "flights.airline_name",
        "What is the full name of the airline with carrier code '{carrier}'?",
        "SELECT name FROM airlines WHERE carrier = {carrier}",
        "SELECT carrier FROM airlines",
        6,
    ),
    T(
        "flights.flights_of_airline",
        "How many flights did {airline} operate in the data?",
        "SELECT COUNT(*) FROM flights f JOIN airlines a ON a.carrier = f.carrier WHERE a.name = {airline}",
        "SELECT name AS airline FROM airlines",
    ),
    T(
        "flights.from_origin_month",
        "How many flights left {origin} in month {month}?",
        "SELECT COUNT(*) FROM flights WHERE origin = {origin} AND month = {month}",
        "SELECT DISTINCT origin, month FROM flights",
    ),
    T(
        "flights.avg_delay_dest",
        "What is the average departure delay, in minutes, of the flights to {dest}?",
        "SELECT AVG(dep_delay) FROM flights WHERE dest = {dest}",
        "SELECT dest FROM flights GROUP BY dest HAVING COUNT(*) >= 50",
    ),
    T(
        "flights.cancelled_by_airline",
        "How many flights of {airline} were cancelled (no departure time)?",
        "SELECT COUNT(*) FROM flights f JOIN airlines a ON a.carrier = f.carrier WHERE a.name = {airline} "
        "AND f.dep_time IS NULL",
        "SELECT a.name AS airline FROM airlines a JOIN flights f ON f.carrier = a.carrier "
        "WHERE f.dep_time IS NULL GROUP BY a.carrier",
    ),
    T(
        "flights.dest_airport_name",
        "What is the name of the airport with the FAA code '{faa}'?",
        "SELECT name FROM airports WHERE faa = {faa}",
        "SELECT DISTINCT dest AS faa FROM flights WHERE dest IN (SELECT faa FROM airports)",
        6,
    ),
    T(
        "flights.plane_manufacturer_seats",
        "How many seats do the planes made by {manufacturer} have on average?",
        "SELECT AVG(seats) FROM planes WHERE manufacturer = {manufacturer}",
        "SELECT manufacturer FROM planes GROUP BY manufacturer HAVING COUNT(*) >= 5",
        6,
    ),
    T(
        "flights.longest_routes",
        "Which {k} destinations are the farthest from {origin}? Give the destination "
        "code and the distance in miles, farthest first.",
        "SELECT dest, MAX(distance) AS miles FROM flights WHERE origin = {origin} GROUP BY dest "
        "ORDER BY miles DESC, dest LIMIT {k}",
        "SELECT o.origin, k.k FROM (SELECT DISTINCT origin FROM flights) o, (SELECT 3 AS k UNION SELECT 5) k",
        6,
    ),
    T(
        "flights.airlines_to_dest",
        "Which airlines flew to {dest}? Give the airline names in alphabetical order.",
        "SELECT DISTINCT a.name FROM flights f JOIN airlines a ON a.carrier = f.carrier WHERE f.dest = {dest} "
        "ORDER BY a.name",
        "SELECT dest FROM flights GROUP BY dest HAVING COUNT(DISTINCT carrier) >= 2",
    ),
    T(
        "flights.seats_out_of_origin",
        "How many flights from {origin} used a plane with more than {seats} seats?",
        "SELECT COUNT(*) FROM flights f JOIN planes p ON p.tailnum = f.tailnum WHERE f.origin = {origin} "
        "AND p.seats > {seats}",
        "SELECT o.origin, s.seats FROM (SELECT DISTINCT origin FROM flights) o, "
        "(SELECT 100 AS seats UNION SELECT 200 UNION SELECT 300) s",
        6,
    ),
    T(
        "flights.delayed_more_than_avg",
        "How many flights of {airline} departed later than the average departure delay of all flights?",
        "SELECT COUNT(*) FROM flights f JOIN airlines a ON a.carrier = f.carrier WHERE a.name = {airline} "
        "AND f.dep_delay > (SELECT AVG(dep_delay) FROM flights)",
        "SELECT name AS airline FROM airlines",
        6,
    ),
    T(
        "flights.busy_airlines",
        "Which airlines operated more than {k} flights? Give the carrier code and the number of flights.",
        "SELECT carrier, COUNT(*) FROM flights GROUP BY carrier HAVING COUNT(*) > {k}",
        "SELECT value AS k FROM (SELECT 1000 AS value UNION SELECT 2000 UNION SELECT 3000 UNION SELECT 4000)",
        4,
    ),
]

TEMPLATES: dict[str, list[PairTemplate]] = {
    "chinook": CHINOOK,
    "school": SCHOOL,
    "shop": SHOP,
    "elements": ELEMENTS,
    "world": WORLD,
    "penguins": PENGUINS,
    "gapminder": GAPMINDER,
    "cars": CARS,
    "library": LIBRARY,
    "flights": FLIGHTS,
}
"""Database id -> its templates."""
