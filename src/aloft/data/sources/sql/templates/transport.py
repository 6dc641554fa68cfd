"""Question / gold-SQL templates for the transport databases: ``cars`` (the auto-mpg cars and their
makers) and ``flights`` (the flights out of New York City in 2013; held out of training).
"""

from __future__ import annotations

from aloft.data.sources.sql.templates.base import PairTemplate

__all__ = ["CARS", "FLIGHTS"]

T = PairTemplate

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
