"""Search-QA data: two real offline corpora and question sets generated from them and checked.

The corpora are derived from Debian's DICT packages and ship with aloft, gzipped, under
``aloft/data/sources/search_corpora/`` (``scripts/build_search_corpora.py`` rebuilds them from the
``.deb`` files; the README there states sources and licenses). Reading them is
``aloft.data.sources.search_corpus`` (re-exported here); this module makes the questions:

- ``"foldoc"``: the Free On-line Dictionary of Computing (``dict-foldoc``, GFDL 1.1 or later), one
  document per entry (title = headword, text = the definition without DICT mark-up).
- ``"elements"``: Jay Kominek's elements database (``dict-elements``, public domain), one document
  per entry (title = element name, text = symbol, atomic number, atomic weight and a description).

Every document is ``{"id", "title", "text"}``, the format of ``aloft.gym.tools.search.LocalIndex``.

Questions, one per document and kind, generated deterministically and verified against their gold
document (``verify_question``); a candidate that fails a check is dropped, never rewritten:

- foldoc, ``definition``: "Which term is defined as: <the entry's first sentence, with the headword
  masked as ___>?" -> the headword. Kept only when the clue is long and specific enough, the
  headword no longer appears in it, and no other entry starts with the same sentence.
- elements, ``atomic_number`` / ``symbol`` / ``element_of_symbol`` / ``atomic_weight``: read off the
  entry's ``Symbol:``, ``Atomic number:`` and ``Atomic weight:`` fields; names given by other entries
  as alternatives ("Same as {aluminum}") are accepted answers too.

The train/eval split is by gold document (a stable hash of its id, 1 in 10 to eval), so no document
answers questions in both splits. The builder ``"search"`` turns them into rows for the ``search``
env: ``build_dataset("search", n=64, seed=0, split="train", corpus="foldoc")``.
"""

from __future__ import annotations

import random
import re
import string
from collections import Counter, defaultdict
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from aloft.data.builders import dataset_builder, stable_hash
from aloft.data.sources.search_corpus import (
    CORPORA,
    corpus_path,
    elements_documents,
    foldoc_documents,
    load_corpus,
    read_dictd,
)

__all__ = [
    "CORPORA",
    "SEARCH_SYSTEM_PROMPT",
    "corpus_path",
    "elements_documents",
    "foldoc_documents",
    "generate_questions",
    "load_corpus",
    "normalize_answer",
    "questions",
    "read_dictd",
    "split_of",
    "verify_question",
]

SEARCH_SYSTEM_PROMPT = (
    "Answer the user's question. Think step by step inside <think> and </think>. Whenever you lack "
    "knowledge, search the corpus by writing a query between <search> and </search>; the top results "
    "come back between <information> and </information>. You may search as many times as you need. "
    "When you know the answer, write it, and nothing else, between <answer> and </answer>, for "
    "example <answer> Beijing </answer>."
)
"""The Search-R1 protocol, as the ``search`` env expects it."""

EVAL_FRACTION_DENOMINATOR = 10
"""One gold document in this many goes to the eval split."""

MASK = "___"
_CATEGORY_PREFIX = re.compile(r"^(?:<[^<>]{1,80}>\s*)+")
# A sentence ends at ". " (or "? "/"! ") followed by an upper-case letter, digit or bracket,
# unless the word before the period is a common abbreviation.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9({\"'])")
_ABBREVIATIONS = (
    "e.g.",
    "i.e.",
    "etc.",
    "vs.",
    "inc.",
    "ltd.",
    "co.",
    "corp.",
    "dr.",
    "mr.",
    "st.",
    "no.",
    "cf.",
)
_ELEMENT_FIELDS = re.compile(
    r"^Symbol:\s*(?P<symbol>[A-Z][a-z]{0,2})\s+Atomic number:\s*(?P<number>\d{1,3})\s+"
    r"At(?:o)?mic weight:\s*(?:\(?(?P<weight>\d+(?:\.\d+)?)\)?(?=\s)|\S+)"  # the source spells it "Atmic" too
)
# Stop words of the clue check: what is left of a clue must say something specific.
_CLUE_STOPWORDS = frozenset(
    "a an the of in on for to and or is are was be by with as at from that this which it its ___ "
    "used one term any".split()
)


# --------------------------------------------------------------------------------------------------
# Normalisation (SQuAD / Search-R1): lower case, no punctuation, no articles, single spaces.


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation, as Search-R1 uses it for exact match."""
    text = text.lower()
    text = "".join(character for character in text if character not in string.punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


# --------------------------------------------------------------------------------------------------
# Questions.


def split_of(document_id: str) -> str:
    """``"eval"`` for about one document in ten (a stable hash of its id), else ``"train"``."""
    return "eval" if stable_hash(document_id) % EVAL_FRACTION_DENOMINATOR == 0 else "train"


def _first_sentence(paragraph: str) -> str:
    start = 0
    for match in _SENTENCE_END.finditer(paragraph):
        candidate = paragraph[start : match.start()]
        last_word = candidate.rsplit(" ", 1)[-1].lower()
        if last_word in _ABBREVIATIONS or re.fullmatch(r"(?:[a-z]\.){2,3}", last_word):
            continue
        return candidate.strip()
    return paragraph.strip()


def _mask_pattern(names: Iterable[str]) -> re.Pattern[str]:
    alternatives = sorted({name for name in names if name.strip()}, key=len, reverse=True)
    return re.compile(
        r"(?<![\w])(?:" + "|".join(re.escape(name) for name in alternatives) + r")(?![\w])", re.IGNORECASE
    )


def _contains_phrase(haystack: str, needle: str) -> bool:
    """Whether the normalised ``needle`` occurs as whole words in the normalised ``haystack``."""
    needle_words, haystack_words = normalize_answer(needle).split(), normalize_answer(haystack).split()
    if not needle_words:
        return False
    width = len(needle_words)
    return any(haystack_words[i : i + width] == needle_words for i in range(len(haystack_words) - width + 1))


def _foldoc_clue(document: dict[str, Any]) -> str | None:
    """The masked first sentence of a FOLDOC definition, or None if it is not a usable clue."""
    first_paragraph = document["text"].split("\n", 1)[0]
    sentence = _first_sentence(_CATEGORY_PREFIX.sub("", first_paragraph))
    names = [document["title"], *document.get("aliases", [])]
    clue = _mask_pattern(names).sub(MASK, sentence)
    return clue if _clue_is_usable(clue, names) else None


def _clue_is_usable(clue: str, names: list[str]) -> bool:
    if not 40 <= len(clue) <= 300 or clue.startswith(("See ", "Compare ", "Same as", MASK)):
        return False
    if clue.count(MASK) > 2 or "/" in clue.split(" ", 1)[0]:  # several masks or a pronunciation first
        return False
    if clue.startswith(("[", "(Or ", "(or ")) or "@" in clue:  # a citation, an alias, an e-mail address
        return False
    content_words = [word for word in normalize_answer(clue).split() if word not in _CLUE_STOPWORDS]
    if len(content_words) < 5:
        return False
    return not any(_contains_phrase(clue, name) for name in names)


def _foldoc_answer_ok(title: str) -> bool:
    normalized = normalize_answer(title)
    return bool(normalized) and len(title) <= 40 and len(normalized.split()) <= 4


def _foldoc_questions(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    clues = {
        document["id"]: _foldoc_clue(document)
        for document in documents
        if _foldoc_answer_ok(document["title"])
    }
    # A clue that also opens another entry's definition (of the same or another headword) is ambiguous.
    first_sentences = Counter(
        normalize_answer(_first_sentence(_CATEGORY_PREFIX.sub("", document["text"].split("\n", 1)[0])))
        for document in documents
    )
    title_counts = Counter(normalize_answer(document["title"]) for document in documents)
    items = []
    for document in documents:
        clue = clues.get(document["id"])
        if clue is None or title_counts[normalize_answer(document["title"])] > 1:
            continue
        sentence_key = normalize_answer(
            _first_sentence(_CATEGORY_PREFIX.sub("", document["text"].split("\n", 1)[0]))
        )
        if first_sentences[sentence_key] > 1:
            continue
        answers = _unique([document["title"], *document.get("aliases", [])])
        items.append(
            {
                "kind": "definition",
                "question": f'Which computing term is defined as: "{clue}"? ({MASK} stands for the term.)',
                "names": [document["title"], *document.get("aliases", [])],
                "clue": clue,
                "answers": answers,
                "doc_id": document["id"],
            }
        )
    return items


def _unique(values: Iterable[str]) -> list[str]:
    seen: dict[str, str] = {}
    for value in values:
        seen.setdefault(normalize_answer(value), value)
    return [value for key, value in seen.items() if key]


def _element_fields(document: dict[str, Any]) -> dict[str, str] | None:
    """``symbol``, ``number`` and ``weight`` (None when the source gives none) of an element entry."""
    match = _ELEMENT_FIELDS.match(document["text"] + " ")
    return match.groupdict() if match else None


def _elements_questions(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    elements = {document["title"].lower(): document for document in documents if _element_fields(document)}
    # Other names: short entries that point at exactly one element ("Same as aluminum, chiefly
    # British in usage.", "Roman name for copper.", "The original name for niobium.").
    other_names: dict[str, list[str]] = defaultdict(list)
    for document in documents:
        if _element_fields(document) is not None or len(document["text"]) > 80:
            continue
        targets = [name for name in elements if _contains_phrase(document["text"], name)]
        if len(targets) == 1:
            other_names[targets[0]].append(document["title"])
    symbols = Counter(fields["symbol"] for document in documents if (fields := _element_fields(document)))
    items = []
    for name, document in elements.items():
        fields = _element_fields(document)
        assert fields is not None
        names = _unique([document["title"], *other_names.get(name, [])])
        candidates: list[tuple[str, str, list[str]]] = [
            ("atomic_number", f"What is the atomic number of {document['title']}?", [fields["number"]]),
            ("symbol", f"What is the chemical symbol of {document['title']}?", [fields["symbol"]]),
        ]
        if symbols[fields["symbol"]] == 1:  # the reverse question needs a symbol of one element only
            candidates.append(
                ("element_of_symbol", f"Which chemical element has the symbol {fields['symbol']}?", names)
            )
        if fields["weight"] is not None:
            candidates.append(
                (
                    "atomic_weight",
                    f"What is the atomic weight of {document['title']}, as the database gives it?",
                    [fields["weight"]],
                )
            )
        for kind, question, answers in candidates:
            items.append({"kind": kind, "question": question, "answers": answers, "doc_id": document["id"]})
    return items


def verify_question(item: dict[str, Any], document: dict[str, Any]) -> None:
    """Check a generated question against its gold document; raise ``ValueError`` saying what fails.

    The first (canonical) answer must occur in the document (its title or text); the others are other
    names of it (index headwords, or entries such as "Roman name for copper."). The question must be
    answerable from the gold document alone: a definition clue, with the answer put back in place of
    ``___``, is the document's own first sentence; an element's answer is the value of its field.
    """
    if item["doc_id"] != document["id"]:
        raise ValueError(f"question {item['question']!r}: gold document {item['doc_id']} != {document['id']}")
    contents = f"{document['title']}\n{document['text']}"
    if not _contains_phrase(contents, item["answers"][0]):
        raise ValueError(
            f"question {item['question']!r}: answer {item['answers'][0]!r} is not in {document['id']}"
        )
    if item["kind"] == "definition":
        if normalize_answer(item["answers"][0]) != normalize_answer(document["title"]):
            raise ValueError(
                f"question {item['question']!r}: the answer is not the title of {document['id']}"
            )
        names = "|".join(re.escape(name) for name in item.get("names", item["answers"]))
        pattern = re.escape(item["clue"]).replace(re.escape(MASK), f"(?:{names})")
        if not re.search(pattern, document["text"].split("\n", 1)[0], re.IGNORECASE):
            raise ValueError(
                f"question {item['question']!r}: the clue is not the first sentence of {document['id']}"
            )
        if any(_contains_phrase(item["clue"], answer) for answer in item["answers"]):
            raise ValueError(f"question {item['question']!r}: the clue gives the answer away")
        return
    fields = _element_fields(document)
    if fields is None:
        raise ValueError(f"question {item['question']!r}: document {document['id']} has no element fields")
    expected = {
        "atomic_number": fields["number"],
        "symbol": fields["symbol"],
        "atomic_weight": fields["weight"],
        "element_of_symbol": document["title"],
    }.get(item["kind"])
    if expected is None:
        raise ValueError(f"question {item['question']!r}: unknown kind {item['kind']!r}")
    if normalize_answer(item["answers"][0]) != normalize_answer(expected):
        raise ValueError(
            f"question {item['question']!r}: answer {item['answers'][0]!r} != field value {expected!r}"
        )


def generate_questions(corpus: str, documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """All verified questions of ``corpus`` over ``documents``, each tagged with its ``split``."""
    generator = {"foldoc": _foldoc_questions, "elements": _elements_questions}.get(corpus)
    if generator is None:
        raise ValueError(f"unknown search corpus {corpus!r}; available: {sorted(CORPORA)}")
    by_id = {document["id"]: document for document in documents}
    items = []
    for item in generator(documents):
        try:
            verify_question(item, by_id[item["doc_id"]])
        except ValueError:
            continue  # a candidate that fails a check is dropped
        items.append({**item, "split": split_of(item["doc_id"])})
    return items


@lru_cache(maxsize=4)
def _questions_cached(corpus: str) -> tuple[dict[str, Any], ...]:
    return tuple(generate_questions(corpus, load_corpus(corpus)))


def questions(corpus: str = "foldoc", split: str | None = None) -> list[dict[str, Any]]:
    """The verified questions of a packaged corpus (of one split, or all when ``split`` is None)."""
    if split not in (None, "train", "eval"):
        raise ValueError(f"split must be 'train', 'eval' or None, got {split!r}")
    return [dict(item) for item in _questions_cached(corpus) if split is None or item["split"] == split]


# --------------------------------------------------------------------------------------------------
# The builder.


@dataset_builder("search")
def _search(n: int, seed: int, split: str = "train", corpus: str = "foldoc") -> list[dict[str, Any]]:
    """``n`` questions of ``split`` over ``corpus`` (drawn without replacement with ``seed``), as rows
    for the ``search`` env. The rows carry the packaged corpus file in ``corpus_path``."""
    pool = questions(corpus, split)
    if n > len(pool):
        raise ValueError(
            f"dataset builder 'search': corpus {corpus!r} has {len(pool)} {split} questions, asked for {n}"
        )
    path = str(corpus_path(corpus))
    chosen = random.Random(seed).sample(pool, n)
    rows = []
    for index, item in enumerate(chosen):
        rows.append(
            {
                "prompt": [
                    {"role": "system", "content": SEARCH_SYSTEM_PROMPT},
                    {
                        "role": "user",
                        "content": f"The corpus is {CORPORA[corpus]}.\nQuestion: {item['question']}",
                    },
                ],
                "env_class": "search",
                # Search-R1 / SkyRL shape: every accepted answer under "target".
                "reward_spec": {"method": "rule", "ground_truth": {"target": list(item["answers"])}},
                "extra_info": {
                    "index": index,
                    "split": split,
                    "corpus": corpus,
                    "kind": item["kind"],
                    "gold_doc_id": item["doc_id"],
                },
                "question": item["question"],
                "answer": item["answers"][0],
                "corpus_path": path,
            }
        )
    return rows
