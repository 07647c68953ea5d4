"""``normlab progress`` (``make grade``): a learner's progress, one line per lab they started.

A learner's copies live in ``work/`` (English) and ``work/es/`` (Spanish), one per lab, made by
``normlab work``. A copy whose code cells are still the lab's own (notes in Markdown cells do not
count) is not started: it is named once, in one line, instead of a screen of "not implemented
yet". The started copies are graded as ``normlab grade`` grades them, and each gets one line in
the language of its folder: its points and the first check still to pass. ``normlab grade
work/NN_name.ipynb`` prints every message in full.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from normlab import chapter_files
from normlab.grader import i18n, inert
from normlab.grader.grade import Settings, UsageError, grade_paths
from normlab.grader.isolation.sandbox import IsolationError
from normlab.grader.results import SubmissionResult

#: the folders of a learner's copies, with their language and the labs they are copies of
EDITIONS = (("", "en", "labs"), ("es", "es", "es/labs"))


def _code_cells(path: Path) -> list[str] | None:
    """The code cells' sources of a notebook, or None when it cannot be read as one."""
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        cells = notebook["cells"]
        return [
            "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in cells
            if c.get("cell_type") == "code"
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def copies(root: Path, work: str) -> dict[str, tuple[list[Path], list[Path]]]:
    """Per language: the learner's copies that are started, and those still as copied."""
    found: dict[str, tuple[list[Path], list[Path]]] = {}
    for sub, lang, labs in EDITIONS:
        folder = root / work / sub if sub else root / work
        started, untouched = [], []
        for copy in chapter_files(folder, ".ipynb"):
            original = root / labs / copy.name
            same = original.is_file() and _code_cells(copy) == _code_cells(original)
            (untouched if same else started).append(copy)
        if started or untouched:
            found[lang] = (started, untouched)
    return found


def _line(result: SubmissionResult, lang: str) -> str:
    name = Path(result.path).stem
    score = f"{result.score}/{result.max_score}"
    if result.error and not result.checks:
        return f"  {name:<20} {score:>6}  " + i18n.text(
            "could not be graded: see `normlab grade {path}`", lang, path=result.path
        )
    failed = [c for c in result.checks if not c.passed]
    if not failed:
        return f"  {name:<20} {score:>6}  " + i18n.text("every check passes", lang)
    line = f"  {name:<20} {score:>6}  " + i18n.text(
        "next: {check}", lang, check=i18n.translate(failed[0].name, lang)
    )
    if len(failed) > 1:
        line += " " + i18n.text("({count} more to pass)", lang, count=len(failed) - 1)
    return line


def progress(root: Path, work: str = "work", settings: Settings | None = None) -> int:
    """Print the learner's progress, each started copy graded under ``settings`` (``grade_paths``;
    None: ``normlab grade``'s defaults); returns a process exit status."""
    found = copies(root, work)
    if not found:
        print(f"normlab progress: no copies of the labs in {root / work}", file=sys.stderr)
        return 2
    shown = {lang: parts for lang, parts in found.items() if parts[0]} or {
        lang: parts for lang, parts in found.items() if lang == i18n.DEFAULT
    }
    for lang, (started, untouched) in shown.items():
        folder = f"{work}/es/" if lang == "es" else f"{work}/"
        if started:
            print(i18n.text("Your labs in {folder}:", lang, folder=folder))
            try:
                graded = grade_paths(started, settings or Settings())
            except (UsageError, IsolationError) as error:
                print(f"normlab progress: {inert.text(error)}", file=sys.stderr)
                return 2
            for result in graded:
                print(_line(result, lang))
        if untouched:
            names = ", ".join(p.stem for p in untouched)
            print(
                i18n.text("Not started yet ({folder}): {names}", lang, folder=folder, names=names)
            )
        if started:
            print(
                i18n.text(
                    "Every message of one lab: normlab grade {path}",
                    lang,
                    path=folder + started[0].name,
                )
            )
    return 0
