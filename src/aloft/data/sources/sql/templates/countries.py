"""Question / gold-SQL templates for the databases about countries: ``world`` (ISO countries,
subdivisions and airports) and ``gapminder`` (life expectancy, population and GDP, 1952-2007).
"""

from __future__ import annotations

from aloft.data.sources.sql.templates.base import PairTemplate

__all__ = ["GAPMINDER", "WORLD"]

T = PairTemplate

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
