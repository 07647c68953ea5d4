"""The glossary: one Spanish term per concept, checked over every Spanish text a learner reads."""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath

from normlab.translation.catalog import load_catalog
from normlab.translation.parity import _squash, analyse
from normlab.translation.scope import LANG, START_PAGE
from normlab.translation.stamps import spanish_markdown

# One Spanish term per concept, for every Spanish text of the course: chapters, worked
# solutions, the lab catalogs, the README and start page, the figures' texts (es/figures.json)
# and the grader's messages (es.po).
# es/glossary.json is the machine-readable list (each entry's "avoid" patterns are the variants
# it replaces); es/GLOSARIO.md is the page a translator reads.
GLOSSARY = PurePosixPath(LANG) / "glossary.json"
GLOSSARY_PAGE = PurePosixPath(LANG) / "GLOSARIO.md"
PO_FILE = PurePosixPath("src/normlab/grader/locale") / f"{LANG}.po"
FIGURE_TEXTS = PurePosixPath(LANG) / "figures.json"


def load_glossary(root: Path) -> list[dict]:
    entries = json.loads((Path(root) / GLOSSARY).read_text(encoding="utf-8"))["terms"]
    for entry in entries:
        if not (isinstance(entry.get("es"), str) and isinstance(entry.get("avoid"), list)):
            raise ValueError(f"{GLOSSARY}: each term needs a string 'es' and a list 'avoid'")
    return entries


def _prose(text: str, where: str) -> str:
    """A Markdown text without its code, math, link targets and HTML tags: the words."""
    return "\n".join(analyse(text, where).sections)


def spanish_texts(root: Path) -> list[tuple[str, str, bool]]:
    """(where, words, prose) of every Spanish text a learner reads; ``prose`` is False for the
    Spanish side of a catalog's code replacements (comments and strings of code)."""
    root = Path(root)
    texts = []
    for path in spanish_markdown(root) + [root / LANG / "README.md", root / LANG / START_PAGE]:
        if path.is_file():
            where = path.relative_to(root).as_posix()
            texts.append((where, _prose(path.read_text(encoding="utf-8"), where), True))
    for path in sorted((root / LANG / "catalog").glob("*.json")):
        for cell_id, entry in load_catalog(path)["cells"].items():
            if not isinstance(entry, dict):
                continue
            where = f"{LANG}/catalog/{path.name} cell {cell_id}"
            if isinstance(entry.get("markdown"), str):
                texts.append((where, _prose(entry["markdown"], f"{LANG}/labs/x.ipynb"), True))
            for pair in entry.get("replace", []):
                if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str):
                    texts.append((where, pair[1], False))
    figures = root / FIGURE_TEXTS
    if figures.is_file():  # the figures' texts (normlab.plotting): one text a label
        for english, text in json.loads(figures.read_text(encoding="utf-8")).items():
            texts.append(
                (f"{FIGURE_TEXTS} text {english!r}", _prose(text, FIGURE_TEXTS.as_posix()), True)
            )
    po = root / PO_FILE
    if po.is_file():
        from normlab.grader.i18n import read_po

        for _, _, msgstr, where in read_po(po):
            texts.append((where, re.sub(r"`[^`]*`", " ", msgstr), True))
    return texts


def _term(pattern: str) -> re.Pattern:
    """A glossary pattern as a whole word: not part of a name, path or {slot}."""
    return re.compile(rf"(?<![\w/{{.-]){pattern}(?![\w/}}])", re.I)


def glossary_problems(root: Path) -> list[str]:
    """Each variant the glossary replaces, where a Spanish text uses it, and each text whose
    first use of a glossed word (``warmup``) is not the glossed form."""
    problems = []
    terms = [(entry, [_term(p) for p in entry["avoid"]]) for entry in load_glossary(root)]
    glossed_in: set[tuple[str, str]] = set()  # (file, word): the gloss is given once a file
    for where, words, prose in spanish_texts(root):
        document = where.split(" cell ")[0]
        for entry, patterns in terms:
            if entry.get("prose_only") and not prose:
                continue
            for pattern in patterns:
                for found in pattern.finditer(words):
                    start = max(0, found.start() - 30)
                    context = _squash(words[start : found.end() + 30])
                    problems.append(
                        f"{where}: «{found.group(0)}» — the glossary says «{entry['es']}»"
                        f" ({entry.get('en', '')}): …{context}…"
                    )
            glossed = entry.get("gloss")
            if glossed and prose and (document, glossed) not in glossed_in:
                first = _term(re.escape(glossed)).search(words)
                if first:
                    glossed_in.add((document, glossed))
                if first and not _squash(words[: first.end() + 1]).endswith(entry["es"]):
                    context = _squash(words[max(0, first.start() - 40) : first.end() + 10])
                    problems.append(
                        f"{where}: the first «{glossed}» is not glossed as «{entry['es']}»:"
                        f" …{context}…"
                    )
    return problems
