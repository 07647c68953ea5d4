"""Hashes and stamps: a hand-written Spanish file records the English version it translates
(its first line, or ``metadata.normlab`` in a notebook); a changed English file makes it stale."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path, PurePosixPath

import nbformat

from normlab import chapter_files
from normlab.translation.scope import LANG, MIRRORED, START_PAGE

STAMP = re.compile(r"^<!-- es: translation of (\S+) sha256=([0-9a-f]{64}) -->[ \t]*$")


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def cell_sha256(source: str | list[str]) -> str:
    """The hash the catalog records for an English cell: its source as one UTF-8 string."""
    text = source if isinstance(source, str) else "".join(source)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_stamp(english: str, sha256: str) -> str:
    return f"<!-- es: translation of {english} sha256={sha256} -->"


def read_stamp(path: Path) -> tuple[str, str] | None:
    """(English path, recorded hash) of a Spanish file, or None when it has no valid stamp."""
    path = Path(path)
    if path.suffix == ".ipynb":
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))["metadata"]["normlab"]
            english, sha = meta["translation_of"], meta["sha256"]
        except (ValueError, KeyError, TypeError):
            return None
        if isinstance(english, str) and re.fullmatch(r"[0-9a-f]{64}", str(sha)):
            return english, sha
        return None
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    found = STAMP.match(first)
    return (found.group(1), found.group(2)) if found else None


def english_of(spanish: str) -> str:
    """``es/theory/03_layernorm.md`` -> ``theory/03_layernorm.md`` (the file it mirrors)."""
    path = PurePosixPath(spanish)
    if path.parts[:1] != (LANG,):
        raise ValueError(f"{spanish} is not under {LANG}/")
    return PurePosixPath(*path.parts[1:]).as_posix()


def spanish_markdown(root: Path) -> list[Path]:
    """The Spanish chapters and worked solutions that exist."""
    es = Path(root) / LANG
    return [p for folder in MIRRORED for p in chapter_files(es / folder, ".md")]


def stamped_files(root: Path) -> list[Path]:
    """Every hand-written Spanish file that carries a stamp (those that exist)."""
    es = Path(root) / LANG
    found = [p for folder in MIRRORED for p in chapter_files(es / folder, ".md")]
    found += [p for p in (es / "README.md", es / START_PAGE) if p.is_file()]
    return found


def stamp_problem(root: Path, spanish: Path) -> str | None:
    """Why a Spanish file's stamp is wrong or stale, or None when it is fresh."""
    root = Path(root)
    relative = spanish.relative_to(root).as_posix()
    stamp = read_stamp(spanish)
    expected = english_of(relative)
    if stamp is None:
        how = (
            'metadata.normlab {"translation_of": ..., "sha256": ...}'
            if spanish.suffix == ".ipynb"
            else "first line " + make_stamp(expected, "<sha256 of the English file>")
        )
        return f"{relative}: no translation stamp ({how})"
    english, recorded = stamp
    if english != expected:
        return f"{relative}: the stamp names {english}, expected {expected}"
    if not (root / english).is_file():
        return f"{relative}: the English file {english} does not exist"
    current = file_sha256(root / english)
    if current != recorded:
        return (
            f"{relative} is stale: {english} changed since it was translated "
            f"(stamp {recorded[:12]}..., now {current[:12]}...): `normlab translations diff "
            f"{relative}` shows what changed; update the translation, then "
            f"`normlab translations stamp {relative}`"
        )
    return None


def restamp(root: Path, spanish: Path) -> None:
    """Record the English file's current hash in a Spanish Markdown file or notebook."""
    root = Path(root)
    relative = Path(spanish).resolve().relative_to(root.resolve()).as_posix()
    english = english_of(relative)
    sha = file_sha256(root / english)
    path = root / relative
    if path.suffix == ".ipynb":
        notebook = nbformat.read(path, as_version=4)
        notebook.metadata.setdefault("normlab", {})
        notebook.metadata["normlab"].update({"translation_of": english, "sha256": sha})
        nbformat.write(notebook, path)
        return
    text = path.read_text(encoding="utf-8")
    first, _, rest = text.partition("\n")
    if STAMP.match(first) or first.startswith("<!-- es: translation of"):
        text = rest
    path.write_text(make_stamp(english, sha) + "\n" + text, encoding="utf-8")
