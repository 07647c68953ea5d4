"""The edition as a whole: which chapters it covers, and everything wrong with the Spanish files
that exist (``normlab translations check``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path, PurePosixPath

import nbformat

from normlab import chapter_files, is_chapter_stem
from normlab.translation.catalog import catalog_path, catalog_problems, load_catalog
from normlab.translation.glossary import GLOSSARY, glossary_problems
from normlab.translation.parity import (
    _diff,
    _edition_folders_to_english,
    _to_english,
    analyse,
    link_problems,
    parity_problems,
)
from normlab.translation.scope import LANG, START_PAGE, TranslationError
from normlab.translation.stamps import english_of, spanish_markdown, stamp_problem, stamped_files


def coverage(root: Path) -> dict[str, list[str]]:
    """Stem -> the Spanish parts it lacks (chapter, worked solutions, lab catalog)."""
    root = Path(root)
    missing = {}
    for chapter in chapter_files(root / "theory", ".md"):
        stem = chapter.stem
        parts = {
            "chapter": root / LANG / "theory" / f"{stem}.md",
            "worked solutions": root / LANG / "solutions" / f"{stem}.md",
            "lab catalog": catalog_path(root, stem),
        }
        missing[stem] = [name for name, path in parts.items() if not path.is_file()]
    return missing


WORK_AS = {"work/es": "es/labs", "work": "labs"}


def edition_problems(root: Path) -> list[str]:
    """Everything that is wrong with the Spanish files that exist."""
    root = Path(root)
    problems = [p for p in (stamp_problem(root, f) for f in stamped_files(root)) if p]
    for spanish in spanish_markdown(root):
        where = spanish.relative_to(root).as_posix()
        english = english_of(where)
        text = spanish.read_text(encoding="utf-8")
        if (root / english).is_file():
            found = parity_problems(
                (root / english).read_text(encoding="utf-8"), english, text, where
            )
            problems += [f"{where}: {p}" for p in found]
        problems += link_problems(root, text, where)
    readme = root / LANG / "README.md"
    if readme.is_file():
        problems += link_problems(root, readme.read_text(encoding="utf-8"), f"{LANG}/README.md")
    start = root / LANG / START_PAGE
    if start.is_file():
        text = start.read_text(encoding="utf-8")
        problems += link_problems(root, text, f"{LANG}/{START_PAGE}", WORK_AS)
        problems += start_page_problems(root)
    for catalog in sorted((root / LANG / "catalog").glob("*.json")):
        try:
            problems += catalog_problems(root, catalog.stem)
            problems += catalog_parity_problems(root, catalog.stem)
        except (TranslationError, OSError) as error:
            problems.append(str(error))
    if (root / GLOSSARY).is_file():
        problems += glossary_problems(root)
    return problems


def _start_page_targets(text: str, where: str) -> Counter:
    """The pages a start page links (the other language's start page left out), in English
    terms: a Spanish chapter as its English file, the learner's ``work/es/`` copy as ``work/``."""
    targets: Counter = Counter()
    for target, _ in analyse(text, where).links:
        target = _to_english(_edition_folders_to_english(target))
        if target not in (where, START_PAGE, f"{LANG}/{START_PAGE}"):
            targets[target] += 1
    return targets


def start_page_problems(root: Path) -> list[str]:
    """The Spanish start page against the English one: the same rows (chapter, lab, demo) for
    every chapter that has a Spanish chapter (``es/theory/NN_stem.md``), and no other."""
    root = Path(root)
    english = _start_page_targets((root / START_PAGE).read_text(encoding="utf-8"), START_PAGE)
    spanish_where = f"{LANG}/{START_PAGE}"
    spanish = _start_page_targets((root / spanish_where).read_text(encoding="utf-8"), spanish_where)

    def claimed(target: str) -> bool:
        stem = PurePosixPath(target).stem
        return not is_chapter_stem(stem) or (root / LANG / "theory" / f"{stem}.md").is_file()

    english = Counter({t: n for t, n in english.items() if claimed(t)})
    if english == spanish:
        return []
    return [
        f"{spanish_where}: the pages it links differ from {START_PAGE}'s: {_diff(english, spanish)}"
    ]


def catalog_parity_problems(root: Path, stem: str) -> list[str]:
    """Each translated Markdown cell against its English cell: the same parity as the chapters,
    and its links resolve from ``es/labs/``. Stale cells are left to the generator."""
    root = Path(root)
    solution = nbformat.read(root / "solutions" / f"{stem}.ipynb", as_version=4)
    english = {c.get("id"): c for c in solution.cells}
    problems = []
    for cell_id, entry in load_catalog(catalog_path(root, stem))["cells"].items():
        if not isinstance(entry, dict) or "markdown" not in entry or cell_id not in english:
            continue
        where = f"{LANG}/catalog/{stem}.json cell {cell_id}"
        found = parity_problems(
            english[cell_id].source,
            f"labs/{stem}.ipynb",
            entry["markdown"],
            f"{LANG}/labs/{stem}.ipynb",
        )
        problems += [f"{where}: {p}" for p in found]
        for broken in link_problems(root, entry["markdown"], f"{LANG}/labs/{stem}.ipynb"):
            problems.append(f"{where}: {broken.split(': ', 1)[1]}")
    return problems
