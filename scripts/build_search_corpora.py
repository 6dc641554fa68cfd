"""Rebuild aloft's packaged search corpora from Debian's DICT packages.

    python scripts/build_search_corpora.py                 # apt-get download dict-foldoc dict-elements
    python scripts/build_search_corpora.py --deb-dir DIR   # use .deb files already in DIR

Writes ``src/aloft/data/sources/search_corpora/{foldoc,elements}.jsonl.gz`` (one JSON document
``{id, title, text, aliases}`` a line, gzip with a fixed timestamp so a rebuild from the same package
versions is byte-identical) and prints the package versions, document and question counts. Needs
``dpkg-deb`` (Debian/Ubuntu) and, without ``--deb-dir``, a reachable Debian archive.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from aloft.data.sources.search import generate_questions
from aloft.data.sources.search_corpus import CORPORA_DIR, elements_documents, foldoc_documents, read_dictd

PACKAGES = {"foldoc": "dict-foldoc", "elements": "dict-elements"}


def _extract(deb_dir: Path, package: str, into: Path) -> Path:
    debs = sorted(deb_dir.glob(f"{package}_*.deb"))
    if not debs:
        raise SystemExit(f"no {package}_*.deb in {deb_dir}; run without --deb-dir to download it")
    target = into / package
    subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(target)], check=True)
    print(f"{package}: {debs[-1].name}")
    return target


def _debian_headwords(dictionary_debian: Path) -> set[str]:
    """Headwords of Debian's own additions (Dictionary.debian, under a different license)."""
    if not dictionary_debian.is_file():
        return set()
    lines = dictionary_debian.read_text(encoding="utf-8", errors="replace").splitlines()
    return {line.strip() for line in lines[1:] if line.strip() and not line[0].isspace()}


def _write(documents: list[dict], path: Path) -> None:
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as handle:
        for document in documents:
            handle.write((json.dumps(document, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
    path.write_bytes(buffer.getvalue())
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB, {len(documents)} documents)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--deb-dir", type=Path, help="directory holding dict-foldoc_*.deb and dict-elements_*.deb"
    )
    parser.add_argument("--out-dir", type=Path, default=CORPORA_DIR)
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        deb_dir = args.deb_dir
        if deb_dir is None:
            deb_dir = work / "debs"
            deb_dir.mkdir()
            subprocess.run(["apt-get", "download", *PACKAGES.values()], cwd=deb_dir, check=True)
        for corpus, package in PACKAGES.items():
            root = _extract(deb_dir, package, work)
            dictd = root / "usr/share/dictd"
            entries = read_dictd(dictd / f"{corpus}.index", dictd / f"{corpus}.dict.dz")
            if corpus == "foldoc":
                excluded = _debian_headwords(root / "usr/share/doc/dict-foldoc/Dictionary.debian")
                documents = foldoc_documents(entries, exclude_titles=excluded)
            else:
                documents = elements_documents(entries)
            _write(documents, args.out_dir / f"{corpus}.jsonl.gz")
            items = generate_questions(corpus, documents)
            eval_count = sum(item["split"] == "eval" for item in items)
            print(
                f"{corpus}: {len(items)} verified questions ({len(items) - eval_count} train, {eval_count} eval)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
