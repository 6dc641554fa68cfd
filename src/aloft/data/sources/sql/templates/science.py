"""Question / gold-SQL templates for the natural-science databases: ``elements`` (the chemical
elements, from mendeleev) and ``penguins`` (the Palmer Station penguins).
"""

from __future__ import annotations

from aloft.data.sources.sql.templates.base import PairTemplate

__all__ = ["ELEMENTS", "PENGUINS"]

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
