"""The search corpora: Debian's DICT databases read into documents, and the packaged corpora.

The corpora ship with aloft, gzipped, under ``aloft/data/sources/search_corpora/``
(``scripts/build_search_corpora.py`` rebuilds them from the ``.deb`` files with ``read_dictd`` and
the ``*_documents`` functions here). Every document is ``{"id", "title", "text", "aliases"}``, the
format of ``aloft.gym.tools.search.LocalIndex``. The questions over them are in
``aloft.data.sources.search``, which re-exports these names.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = [
    "CORPORA",
    "corpus_path",
    "elements_documents",
    "foldoc_documents",
    "load_corpus",
    "read_dictd",
]

CORPORA_DIR = Path(__file__).resolve().parent / "search_corpora"
CORPORA: dict[str, str] = {
    "foldoc": "The Free On-line Dictionary of Computing (FOLDOC)",
    "elements": "a database of the chemical elements",
}
"""Corpus name -> what it is, as the user prompt names it."""

_DICTD_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_DATE_PARAGRAPH = re.compile(r"\(\d{4}-?\d{2}-?\d{2}\)")
_WHITESPACE = re.compile(r"\s+")
_CROSS_REFERENCE = re.compile(r"\{([^{}]+)\}")


# --------------------------------------------------------------------------------------------------
# The DICT format: ``NAME.index`` lines "headword<TAB>offset<TAB>length" (base64 numbers) into the
# uncompressed ``NAME.dict.dz`` (dictzip, which gzip reads).


def _decode_dictd_number(text: str) -> int:
    value = 0
    for character in text:
        position = _DICTD_B64.find(character)
        if position < 0:
            raise ValueError(f"invalid DICT base64 number {text!r}")
        value = value * 64 + position
    return value


def read_dictd(index_path: str | Path, dict_path: str | Path) -> list[tuple[list[str], str]]:
    """The entries of a DICT database, in file order: ``(index headwords, entry text)``.

    Headwords that point at the same bytes are one entry with several names; the ``00database*``
    meta entries are skipped.
    """
    data = gzip.decompress(Path(dict_path).read_bytes()) if str(dict_path).endswith(".dz") else None
    if data is None:
        data = Path(dict_path).read_bytes()
    by_span: dict[tuple[int, int], list[str]] = defaultdict(list)
    for line_number, line in enumerate(Path(index_path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 3:
            raise ValueError(f"{index_path} line {line_number}: expected 'headword<TAB>offset<TAB>length'")
        headword, offset, length = fields[0], _decode_dictd_number(fields[1]), _decode_dictd_number(fields[2])
        if headword.startswith("00database") or headword.startswith("00-database"):
            continue
        if offset + length > len(data):
            raise ValueError(
                f"{index_path} line {line_number}: entry {headword!r} points past the end of {dict_path}"
            )
        by_span[(offset, length)].append(headword)
    return [
        (headwords, _decode(data[offset : offset + length]))
        for (offset, length), headwords in sorted(by_span.items())
    ]


def _decode(raw: bytes) -> str:
    """UTF-8, or Latin-1 for the entries of older databases that are not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _collapse(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip()


def foldoc_documents(
    entries: Iterable[tuple[list[str], str]], exclude_titles: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """FOLDOC entries as documents ``{id, title, text, aliases}``.

    The title is the entry's first line; the text drops the trailing revision date and the braces of
    cross-references (``{Scheme}`` -> ``Scheme``) and joins each paragraph onto one line; ``aliases``
    are the index headwords of the entry. ``exclude_titles`` drops entries (e.g. Debian's additions,
    which are under another license).
    """
    excluded = set(exclude_titles)
    documents: list[dict[str, Any]] = []
    for headwords, raw in entries:
        lines = raw.strip("\n").split("\n")
        title = lines[0].strip()
        if not title or title in excluded:
            continue
        paragraphs = []
        for paragraph in re.split(r"\n\s*\n", "\n".join(lines[1:])):
            paragraph = _collapse(paragraph)
            if paragraph and not _DATE_PARAGRAPH.fullmatch(paragraph):
                paragraphs.append(_CROSS_REFERENCE.sub(r"\1", paragraph))
        text = "\n".join(paragraphs)
        if not text:
            continue
        documents.append(
            {
                "id": f"foldoc-{len(documents):05d}",
                "title": title,
                "text": text,
                "aliases": sorted(set(headwords)),
            }
        )
    return documents


def elements_documents(entries: Iterable[tuple[list[str], str]]) -> list[dict[str, Any]]:
    """Elements-database entries as documents ``{id, title, text, aliases}`` (text on one line)."""
    documents: list[dict[str, Any]] = []
    for headwords, raw in entries:
        lines = raw.strip("\n").split("\n")
        title = lines[0].strip()
        text = _CROSS_REFERENCE.sub(r"\1", _collapse(" ".join(lines[1:])))
        if not title or not text:
            continue
        documents.append(
            {
                "id": f"elements-{len(documents):03d}",
                "title": title,
                "text": text,
                "aliases": sorted(set(headwords)),
            }
        )
    return documents


# --------------------------------------------------------------------------------------------------
# The vendored corpora.


def corpus_path(corpus: str) -> Path:
    """The packaged ``.jsonl.gz`` file of ``corpus`` (``"foldoc"`` or ``"elements"``)."""
    if corpus not in CORPORA:
        raise ValueError(f"unknown search corpus {corpus!r}; available: {sorted(CORPORA)}")
    path = CORPORA_DIR / f"{corpus}.jsonl.gz"
    if not path.is_file():
        raise FileNotFoundError(
            f"search corpus file {path} is missing; reinstall aloft or rebuild it with "
            "python scripts/build_search_corpora.py"
        )
    return path


@lru_cache(maxsize=4)
def _load_corpus_cached(corpus: str) -> tuple[dict[str, Any], ...]:
    with gzip.open(corpus_path(corpus), "rt", encoding="utf-8") as handle:
        return tuple(json.loads(line) for line in handle if line.strip())


def load_corpus(corpus: str) -> list[dict[str, Any]]:
    """The documents of a packaged corpus (fresh dicts; the file is read once per process)."""
    return [dict(document) for document in _load_corpus_cached(corpus)]
