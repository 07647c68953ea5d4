"""The Spanish edition (``es/``): stamps, the lab catalog, and what must stay identical.

The English files are the source of truth. A hand-written Spanish file records the English
version it translates in its first line::

    <!-- es: translation of theory/03_layernorm.md sha256=<hex> -->

(``es/START_HERE.ipynb`` keeps the same in ``metadata.normlab.translation_of`` / ``sha256``).
When the English file changes, its hash no longer matches and the translation is *stale*.

The Spanish labs are generated (``normlab labs``): the English lab of ``solutions/NN_stem.ipynb``
with the text of ``es/catalog/NN_stem.json`` put in, keyed by cell id. A Markdown cell is
replaced by the catalog's ``markdown`` when its ``en_sha256`` still matches the English solution
cell; a code cell gets the catalog's ``replace`` pairs ``[English, Spanish]``, each of which must
occur in the lab cell, and the result must be the same code up to its strings and comments.

:func:`analyse` extracts from a Markdown text what a translation keeps unchanged (heading
structure, equations, numbers, inline code, code blocks, figures, link targets, practice-problem
labels); :func:`parity_problems` compares an English file with its Spanish one.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import re
from collections import Counter
from pathlib import Path, PurePosixPath

import nbformat

LANG = "es"
# The chapters the Spanish edition claims to cover: each needs its chapter (es/theory), worked
# solutions (es/solutions) and lab catalog (es/catalog), all fresh, and the edition's start
# page and README. Add a stem here only when all of its parts are translated.
SPANISH_CHAPTERS: tuple[str, ...] = (
    "01_why_normalize",
    "02_batchnorm",
    "03_layernorm",
    "04_rmsnorm",
    "05_group_instance",
    "06_pre_post_ln",
    "07_cost",
    "10_low_precision",
)

STAMP = re.compile(r"^<!-- es: translation of (\S+) sha256=([0-9a-f]{64}) -->[ \t]*$")
# Hand-written Spanish Markdown: folder -> the English folder it mirrors.
MIRRORED = ("theory", "solutions")


class TranslationError(ValueError):
    """A Spanish lab cannot be generated: a stale or broken catalog entry."""


# ----------------------------------------------------------------------------- hashes, stamps


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


def stamped_files(root: Path) -> list[Path]:
    """Every hand-written Spanish file that carries a stamp (those that exist)."""
    es = Path(root) / LANG
    found = [p for folder in MIRRORED for p in sorted((es / folder).glob("[0-9][0-9]_*.md"))]
    found += [p for p in (es / "README.md", es / "START_HERE.ipynb") if p.is_file()]
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


# ----------------------------------------------------------------------------- the lab catalog


def catalog_path(root: Path, stem: str) -> Path:
    return Path(root) / LANG / "catalog" / f"{stem}.json"


def load_catalog(path: Path) -> dict:
    try:
        catalog = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as error:
        raise TranslationError(f"{path.name}: not valid JSON: {error}") from None
    if not isinstance(catalog, dict) or not isinstance(catalog.get("cells"), dict):
        raise TranslationError(f'{path.name}: expected an object with a "cells" object')
    return catalog


def _code_shape(source: str) -> str | None:
    """The code's AST with every string constant blanked (comments are not in the AST)."""
    lines = ["pass" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.split("\n")]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    return ast.dump(tree, annotate_fields=False)


def translate_lab(
    lab: nbformat.NotebookNode,
    solution: nbformat.NotebookNode,
    catalog: dict,
    stem: str,
    strip_markdown,
) -> nbformat.NotebookNode:
    """The Spanish lab: ``lab`` (the English lab of ``solution``) with the catalog's text.

    ``strip_markdown`` is the English build's function that hides Markdown answer regions.
    Raises TranslationError naming the cell id on a stale or broken entry.
    """
    where = f"{LANG}/catalog/{stem}.json"
    english = {cell.get("id"): cell for cell in solution.cells}
    entries = catalog["cells"]
    problems = [
        f"{where}: cell {cell_id} does not exist in solutions/{stem}.ipynb "
        "(deleted, or its id changed): remove or re-key the entry"
        for cell_id in entries
        if cell_id not in english
    ]
    out = nbformat.from_dict(json.loads(json.dumps(lab)))
    out.metadata["normlab"] = {
        **lab.metadata.get("normlab", {}),
        "lang": LANG,
        "translated_from": f"{LANG}/catalog/{stem}.json",
    }
    for cell in out.cells:
        cell_id = cell.get("id")
        entry = entries.get(cell_id)
        if entry is None:
            continue
        try:
            _translate_cell(cell, entry, english[cell_id].source, where, strip_markdown)
        except TranslationError as error:
            problems.append(str(error))
    if not _speak_spanish(out):
        problems.append(
            f"labs/{stem}.ipynb has no setup cell importing `{SETUP_IMPORT}`: the Spanish lab "
            "cannot switch check()'s reports to Spanish"
        )
    if problems:
        raise TranslationError("\n".join(problems))
    return out


# The labs' setup cell imports check; the Spanish lab's also chooses the language of its reports
# (a kernel cannot read its notebook's metadata, so the choice is written where the learner sees it).
SETUP_IMPORT = "from normlab import check, set_seed"


def _speak_spanish(lab: nbformat.NotebookNode) -> bool:
    for cell in lab.cells:
        if cell.cell_type == "code" and SETUP_IMPORT + "\n" in cell.source:
            if "\nset_seed(" not in cell.source:
                return False
            source = cell.source.replace(
                SETUP_IMPORT, "from normlab import check, set_language, set_seed", 1
            )
            cell.source = source.replace(
                "\nset_seed(",
                f'\nset_language("{LANG}")  # los informes de check() en español\nset_seed(',
                1,
            )
            return True
    return False


def _translate_cell(cell, entry, source: str, where: str, strip_markdown) -> None:
    """Put one catalog entry's Spanish into one lab cell (in place)."""
    cell_id = cell.get("id")
    if not isinstance(entry, dict):
        raise TranslationError(f"{where}: cell {cell_id}: the entry must be an object")
    if cell.cell_type == "markdown":
        if "markdown" not in entry or "en_sha256" not in entry:
            raise TranslationError(
                f'{where}: cell {cell_id} is a Markdown cell: give "markdown" and "en_sha256"'
            )
        if entry["en_sha256"] != cell_sha256(source):
            raise TranslationError(
                f"{where}: cell {cell_id} is stale: its English Markdown changed since it "
                f"was translated (en_sha256 {str(entry['en_sha256'])[:12]}..., now "
                f'{cell_sha256(source)[:12]}...): update "markdown", then '
                f"`normlab translations stamp {where} --cell {cell_id}`"
            )
        spanish = entry["markdown"]
        if "BEGIN SOLUTION" in source and "BEGIN SOLUTION" not in spanish:
            raise TranslationError(
                f"{where}: cell {cell_id}: the English cell marks an answer region "
                "(### BEGIN SOLUTION ... ### END SOLUTION); keep the markers"
            )
        cell.source = strip_markdown(spanish, f"{where} cell {cell_id}")
    elif cell.cell_type == "code":
        if "markdown" in entry:
            raise TranslationError(
                f'{where}: cell {cell_id} is a code cell: translate it with "replace"'
            )
        text = cell.source
        for pair in entry.get("replace", []):
            if not (isinstance(pair, list) and len(pair) == 2 and all(map(_is_str, pair))):
                raise TranslationError(
                    f"{where}: cell {cell_id}: each replace entry is [English, Spanish]"
                )
            fragment, spanish = pair
            if not fragment or fragment not in text:
                raise TranslationError(
                    f"{where}: cell {cell_id}: the English fragment {fragment!r} does not "
                    f"occur in the lab cell (the English code text changed?)"
                )
            text = text.replace(fragment, spanish)
        if _code_shape(text) != _code_shape(cell.source):
            raise TranslationError(
                f"{where}: cell {cell_id}: after the replacements the code is not the "
                "same apart from strings and comments (an identifier or a quote was "
                "translated?)"
            )
        cell.source = text


def _is_str(value) -> bool:
    return isinstance(value, str)


def catalog_problems(root: Path, stem: str) -> list[str]:
    """Markdown cells of the lab without a Spanish entry (the catalog is incomplete)."""
    root = Path(root)
    solution = nbformat.read(root / "solutions" / f"{stem}.ipynb", as_version=4)
    entries = load_catalog(catalog_path(root, stem))["cells"]
    missing = []
    for cell in solution.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "markdown" and "solution-only" not in tags:
            if cell.get("id") not in entries:
                missing.append(f"{LANG}/catalog/{stem}.json: no entry for Markdown cell {cell.id}")
    return missing


# ----------------------------------------------------------------------------- Markdown parity

FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?!`)((?:(?!\1).|\n(?![ \t]*\n))+?)\1(?!`)")
DISPLAY_MATH = re.compile(r"\$\$(.+?)\$\$", re.S)
INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\$)((?:[^$\n\\]|\\.|\n(?![ \t]*\n))+?)\$")
IMAGE = re.compile(r"!\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^()\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
LINK = re.compile(r"\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^()\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_IMG = re.compile(r"<img\b[^>]*\bsrc=[\"']([^\"']+)[\"'][^>]*>", re.I)
URL = re.compile(r"<?\bhttps?://[^\s)>]+>?")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t#]*$")
# Thousands: the English groups them with commas (1,000), the Spanish with a thin space
# (1 000, U+202F or U+2009), since a Spanish reader takes 1,000 or 1.000 for a decimal; both
# count as the same number. Decimals use the point in both editions, as code does.
THIN_SPACES = "\u202f\u2009"
NUMBER = re.compile(
    r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])(?:\.\d+)?"
    rf"|(?<![\d.])\d{{1,3}}(?:[{THIN_SPACES}]\d{{3}})+(?!\d)(?:\.\d+)?"
    r"|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
)
ITALICS = re.compile(r"(?<![*\w])\*(?![*\s])[^*]+?(?<![*\s])\*(?![*\w])")
COMMA_GROUPS = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])")
# Words inside a formula may be translated: \text{(biased)} and \text{(sesgada)} are the same
# mathematics; only the numbers of the words count.
MATH_TEXT = re.compile(r"\\(?:text|textrm|textit|mbox)\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
MATH_GROUPS = re.compile(r"(?<=\d)(?:\{,\}|\\,|\\ |[,\u202f\u2009])(?=\d{3}(?!\d))")


def number_value(text: str) -> str:
    """A number as written (1,000 or 1 000) -> its digits (1000)."""
    return re.sub(rf"[,{THIN_SPACES}]", "", text)


def math_key(span: str) -> str:
    """What a formula must keep in a translation: its mathematics and numbers, with the words
    of each \\text{...} reduced to their numbers and thousands written without separators."""
    span = MATH_TEXT.sub(lambda m: "\\text{" + " ".join(NUMBER.findall(m.group(1))) + "}", span)
    span = MATH_GROUPS.sub("", span)
    return _squash(span)


LABEL = re.compile(r"\(([a-h])\)")
LIST_MARKER = re.compile(r"^[ \t]*(?:>[ \t]*)*(\d+)\.[ \t]", re.M)


def _squash(text: str) -> str:
    return " ".join(text.split())


def slug(title: str) -> str:
    """A heading's anchor as GitHub and MyST make it: lower case, spaces to ``-``, punctuation
    dropped, accents kept (``Problemas de práctica`` -> ``problemas-de-práctica``); the text of
    inline code counts, math does not (as in MyST's ``myst_heading_anchors``)."""
    text = re.sub(r"\$[^$]*\$", "", title)
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = LINK.sub(r"\1", text)
    text = re.sub(r"\*{1,3}([^*]+)\*{1,3}", r"\1", text)
    return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", text.lower().replace(" ", "-"))


@dataclasses.dataclass
class Parts:
    """What a translation of a Markdown text keeps unchanged."""

    headings: list[tuple[int, str]]  # (level, text)
    math: Counter
    numbers: Counter
    code_spans: Counter
    code_blocks: Counter
    figures: list[str]  # resolved, repository-relative, in order
    links: list[tuple[str, str]]  # (resolved target without anchor, anchor)
    external: Counter  # URLs linked
    sections: list[str]  # the prose of each section (before the first heading, then each)

    @property
    def anchors(self) -> set[str]:
        seen: Counter = Counter()
        found = set()
        for _, text in self.headings:
            base = slug(text)
            found.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
        return found


def _resolve(folder: PurePosixPath, target: str) -> str:
    parts: list[str] = []
    for piece in (folder / target).parts:
        if piece == "..":
            if parts:
                parts.pop()
            else:
                parts.append("..")
        elif piece != ".":
            parts.append(piece)
    return "/".join(parts)


def analyse(text: str, where: str) -> Parts:
    """Split a Markdown text (repository-relative path ``where``) into what stays identical."""
    folder = PurePosixPath(where).parent
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    # Fenced code blocks: kept aside (dedented), out of the prose.
    prose_lines, blocks, block, fence = [], Counter(), [], None
    for line in text.split("\n"):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence, indent, block = opened.group(1), len(line) - len(line.lstrip()), []
        elif (
            fence is not None
            and line.strip().startswith(fence[0] * len(fence))
            and not (line.strip().strip(fence[0]))
        ):
            blocks[
                "\n".join(ln[indent:] if ln[:indent].isspace() else ln.lstrip() for ln in block)
            ] += 1
            fence = None
            prose_lines.append("")
        elif fence is not None:
            block.append(line)
        else:
            prose_lines.append(line)
    prose = "\n".join(prose_lines)
    headings = []
    for line in prose_lines:
        found = HEADING.match(line)
        if found:
            headings.append((len(found.group(1)), found.group(2)))

    code_spans: Counter = Counter()

    def code(match: re.Match) -> str:
        code_spans[_squash(match.group(2))] += 1
        return " "

    prose = INLINE_CODE.sub(code, prose)
    math: Counter = Counter()

    def display(match: re.Match) -> str:
        math["$$" + math_key(match.group(1))] += 1
        return " "

    def inline(match: re.Match) -> str:
        math["$" + math_key(match.group(1))] += 1
        return " "

    prose = DISPLAY_MATH.sub(display, prose)
    prose = INLINE_MATH.sub(inline, prose)
    figures: list[str] = []
    links: list[tuple[str, str]] = []
    external: Counter = Counter()

    def image(match: re.Match) -> str:
        figures.append(_resolve(folder, match.group(2)))
        return " " + match.group(1) + " "

    def html_image(match: re.Match) -> str:
        figures.append(_resolve(folder, match.group(1)))
        return " "

    def link(match: re.Match) -> str:
        label, target = match.groups()
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            external[target] += 1
        else:
            path, _, anchor = target.partition("#")
            links.append((_resolve(folder, path) if path else where, anchor))
        return " " + label + " "

    prose = IMAGE.sub(image, prose)
    prose = HTML_IMG.sub(html_image, prose)
    prose = LINK.sub(link, prose)
    prose = LINK.sub(link, prose)  # a link whose label held an image
    for url in URL.findall(prose):
        external[url.strip("<>")] += 1
    prose = URL.sub(" ", prose)
    prose = re.sub(r"<[^>\n]+>", " ", prose)  # HTML tags
    numbers = Counter(number_value(n) for n in NUMBER.findall(prose))
    sections, current = [], []
    for line in prose.split("\n"):
        if HEADING.match(line):
            sections.append("\n".join(current))
            current = []
        current.append(line)
    sections.append("\n".join(current))
    return Parts(headings, math, numbers, code_spans, blocks, figures, links, external, sections)


def _diff(english: Counter, spanish: Counter) -> str:
    lost, added = english - spanish, spanish - english
    parts = []
    if lost:
        parts.append(f"missing {sorted(lost.elements())[:8]}")
    if added:
        parts.append(f"not in the English {sorted(added.elements())[:8]}")
    return "; ".join(parts)


def _to_english(target: str) -> str:
    return english_of(target) if target.startswith(LANG + "/") else target


# The Spanish edition's own folders, as a command or path in the text names them: the learner's
# copies (work/es/ for work/) and the generated labs (es/labs/ for labs/).
EDITION_FOLDERS = ((f"work/{LANG}/", "work/"), (f"{LANG}/labs/", "labs/"))


def _edition_folders_to_english(span: str) -> str:
    for spanish, english in EDITION_FOLDERS:
        span = span.replace(spanish, english)
    return "work/" if span == f"work/{LANG}" else span


PRACTICE = re.compile(r"^practice problems?$", re.I)


def labels(parts: Parts, practice: int | None) -> tuple[list[str], Counter]:
    """Problem numbers and (a)-items: list markers and labels of the practice section."""
    if practice is None:
        text = "\n".join(parts.sections)
    else:
        text = parts.sections[practice + 1] if practice + 1 < len(parts.sections) else ""
        # the section runs until the next heading of the same or a higher level
        level = parts.headings[practice][0]
        for offset, (other, _) in enumerate(parts.headings[practice + 1 :], practice + 2):
            if other <= level:
                break
            text += "\n" + parts.sections[offset]
    return LIST_MARKER.findall(text), Counter(LABEL.findall(text))


def parity_problems(english_text: str, english_where: str, spanish_text: str, spanish_where: str):
    """How the Spanish Markdown differs from the English in what must stay identical."""
    en, es = analyse(english_text, english_where), analyse(spanish_text, spanish_where)
    problems = []
    en_levels, es_levels = [lvl for lvl, _ in en.headings], [lvl for lvl, _ in es.headings]
    if en_levels != es_levels:
        problems.append(f"heading levels differ: English {en_levels}, Spanish {es_levels}")
    else:
        for index, ((_, en_title), (_, es_title)) in enumerate(
            zip(en.headings, es.headings, strict=True)
        ):
            a = Counter(
                map(number_value, NUMBER.findall(re.sub(r"\$[^$]*\$|`[^`]*`", " ", en_title)))
            )
            b = Counter(
                map(number_value, NUMBER.findall(re.sub(r"\$[^$]*\$|`[^`]*`", " ", es_title)))
            )
            if a != b:
                problems.append(
                    f"heading {index + 1} ({en_title!r} / {es_title!r}): numbers differ"
                )
    # a title in italics (a paper's, in the references) is quoted as published
    grouped = COMMA_GROUPS.findall(ITALICS.sub(" ", "\n".join(es.sections)))
    if grouped:
        problems.append(
            f"numbers grouped with commas {grouped[:8]}: a Spanish reader takes 1,000 for a "
            "decimal; group thousands with a thin space (1\u202f000)"
        )
    for name in ("math", "numbers", "code_spans", "code_blocks", "external"):
        a, b = getattr(en, name), getattr(es, name)
        if name == "code_spans":  # a path to the learner's copies names the edition's folder
            b = Counter({_edition_folders_to_english(span): n for span, n in b.items()})
        if a != b:
            problems.append(f"{name.replace('_', ' ')} differ: {_diff(a, b)}")
    if en.figures != [_to_english(f) for f in es.figures]:
        problems.append(f"figures differ: English {en.figures}, Spanish {es.figures}")
    en_targets = Counter(t for t, _ in en.links if t != english_where)
    es_targets = Counter(_to_english(t) for t, _ in es.links if t != spanish_where)
    if en_targets != es_targets:
        problems.append(f"link targets differ: {_diff(en_targets, es_targets)}")
    practice = next(
        (i for i, (lvl, title) in enumerate(en.headings) if PRACTICE.match(title.strip())), None
    )
    if practice is not None or "solutions/" in english_where:
        if en_levels == es_levels:
            en_labels, es_labels = labels(en, practice), labels(es, practice)
            if en_labels != es_labels:
                problems.append(
                    f"practice-problem labels differ: English {en_labels[0]} "
                    f"{sorted(en_labels[1].elements())}, Spanish {es_labels[0]} "
                    f"{sorted(es_labels[1].elements())}"
                )
    return problems


def notebook_anchors(path: Path) -> set[str]:
    notebook = nbformat.read(path, as_version=4)
    text = "\n\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    return analyse(text, "x.md").anchors


def link_problems(root: Path, text: str, where: str, work_as: dict | None = None) -> list[str]:
    """Relative links of a Spanish text that do not resolve (file or anchor).

    ``work_as`` maps a folder a learner fills (``work/es``) to where its files come from.
    """
    root = Path(root)
    parts = analyse(text, where)
    broken = []
    for target, anchor in parts.links:
        for folder, source in (work_as or {}).items():
            if target.startswith(folder + "/"):
                target = source + target[len(folder) :]
        path = root / target
        if target.startswith("..") or not path.exists():
            broken.append(f"{where}: link to {target} (no such file)")
            continue
        if target == where:
            anchors = parts.anchors
        elif path.suffix == ".md":
            anchors = analyse(path.read_text(encoding="utf-8"), target).anchors
        elif path.suffix == ".ipynb":
            anchors = notebook_anchors(path)
        else:
            anchors = None
        if anchor and anchors is not None and anchor not in anchors:
            broken.append(f"{where}: link to {target}#{anchor} (no such heading there)")
        if where.startswith(LANG + "/") and not target.startswith(LANG + "/"):
            mirror = root / LANG / target
            if path.suffix == ".md" and target.split("/")[0] in MIRRORED:
                broken.append(
                    f"{where}: links to the English {target}; link the Spanish {LANG}/{target}"
                    + ("" if mirror.exists() else " (not translated yet)")
                )
    for figure in parts.figures:
        if not (root / figure).is_file():
            broken.append(f"{where}: image {figure} (no such file)")
    return broken


# ----------------------------------------------------------------------------- the edition


def spanish_markdown(root: Path) -> list[Path]:
    """The Spanish chapters and worked solutions that exist."""
    es = Path(root) / LANG
    return [p for folder in MIRRORED for p in sorted((es / folder).glob("[0-9][0-9]_*.md"))]


def coverage(root: Path) -> dict[str, list[str]]:
    """Stem -> the Spanish parts it lacks (chapter, worked solutions, lab catalog)."""
    root = Path(root)
    missing = {}
    for chapter in sorted((root / "theory").glob("[0-9][0-9]_*.md")):
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
    start = root / LANG / "START_HERE.ipynb"
    if start.is_file():
        notebook = nbformat.read(start, as_version=4)
        text = "\n\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
        problems += link_problems(root, text, f"{LANG}/START_HERE.ipynb", WORK_AS)
    for catalog in sorted((root / LANG / "catalog").glob("*.json")):
        try:
            problems += catalog_problems(root, catalog.stem)
            problems += catalog_parity_problems(root, catalog.stem)
        except (TranslationError, OSError) as error:
            problems.append(str(error))
    if (root / GLOSSARY).is_file():
        problems += glossary_problems(root)
    return problems


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


def stamp_catalog_cells(root: Path, stem: str, cell_ids: list[str]) -> list[str]:
    """Record the English cells' current hashes for ``cell_ids``; returns unknown ids."""
    root = Path(root)
    path = catalog_path(root, stem)
    catalog = load_catalog(path)
    solution = nbformat.read(root / "solutions" / f"{stem}.ipynb", as_version=4)
    english = {c.get("id"): c for c in solution.cells}
    unknown = [i for i in cell_ids if i not in english or i not in catalog["cells"]]
    if unknown:
        return unknown
    for cell_id in cell_ids:
        catalog["cells"][cell_id]["en_sha256"] = cell_sha256(english[cell_id].source)
    path.write_text(json.dumps(catalog, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return []


def stale_catalog_cells(root: Path, stem: str) -> list[str]:
    root = Path(root)
    catalog = load_catalog(catalog_path(root, stem))
    solution = nbformat.read(root / "solutions" / f"{stem}.ipynb", as_version=4)
    english = {c.get("id"): c for c in solution.cells}
    return [
        cell_id
        for cell_id, entry in catalog["cells"].items()
        if cell_id in english
        and isinstance(entry, dict)
        and "en_sha256" in entry
        and entry["en_sha256"] != cell_sha256(english[cell_id].source)
    ]


# ----------------------------------------------------------------------------- what changed


def _git(root: Path, *arguments: str) -> bytes | None:
    import subprocess

    done = subprocess.run(["git", "-C", str(root), *arguments], capture_output=True, check=False)
    return done.stdout if done.returncode == 0 else None


def translated_version(root: Path, english: str, matches) -> tuple[str, bytes] | None:
    """The newest commit whose ``english`` file satisfies ``matches(bytes)``: (commit, bytes).

    The stamps record a SHA-256 of the file (not git's blob id), so the history is searched."""
    revisions = _git(root, "log", "--format=%H", "--", english)
    for revision in (revisions or b"").decode().split():
        content = _git(root, "show", f"{revision}:{english}")
        if content is not None and matches(content):
            return revision, content
    return None


def english_changes(root: Path, spanish: Path, cell_id: str | None = None) -> str:
    """A unified diff of the English since the version the Spanish file (or catalog cell)
    translates: what the translation has to carry over."""
    import difflib

    root = Path(root)
    relative = Path(spanish).resolve().relative_to(root.resolve()).as_posix()
    if relative.endswith(".json"):
        stem = Path(relative).stem
        english = f"solutions/{stem}.ipynb"
        entry = load_catalog(root / relative)["cells"].get(cell_id or "")
        if not isinstance(entry, dict) or "en_sha256" not in entry:
            return f"{relative}: give --cell ID of a Markdown entry"

        def cell_source(content: bytes) -> str | None:
            notebook = nbformat.reads(content.decode("utf-8"), as_version=4)
            found = [c.source for c in notebook.cells if c.get("id") == cell_id]
            return found[0] if found else None

        def matches(content: bytes) -> bool:
            source = cell_source(content)
            return source is not None and cell_sha256(source) == entry["en_sha256"]

        found = translated_version(root, english, matches)
        now = cell_source((root / english).read_bytes()) or ""
        label = f"{english} cell {cell_id}"
        old = cell_source(found[1]) if found else None
    else:
        stamp = read_stamp(root / relative)
        english = english_of(relative)
        if stamp is None:
            return f"{relative}: no stamp"
        found = translated_version(
            root, english, lambda content: hashlib.sha256(content).hexdigest() == stamp[1]
        )
        now = (root / english).read_text(encoding="utf-8")
        label = english
        old = found[1].decode("utf-8") if found else None
    if old is None:
        return f"{label}: no committed version has the recorded hash (not committed yet?)"
    diff = difflib.unified_diff(
        old.splitlines(keepends=True),
        now.splitlines(keepends=True),
        f"{label} (translated, {found[0][:10]})",
        f"{label} (now)",
    )
    return "".join(diff) or f"{label}: unchanged since it was translated"


# ----------------------------------------------------------------------------- the glossary

# One Spanish term per concept, for every Spanish text of the course: chapters, worked
# solutions, the lab catalogs, the README and start page, and the grader's messages (es.po).
# es/glossary.json is the machine-readable list (each entry's "avoid" patterns are the variants
# it replaces); es/GLOSARIO.md is the page a translator reads.
GLOSSARY = PurePosixPath(LANG) / "glossary.json"
GLOSSARY_PAGE = PurePosixPath(LANG) / "GLOSARIO.md"
PO_FILE = PurePosixPath("src/normlab/grader/locale") / f"{LANG}.po"


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
    for path in spanish_markdown(root) + [root / LANG / "README.md"]:
        if path.is_file():
            where = path.relative_to(root).as_posix()
            texts.append((where, _prose(path.read_text(encoding="utf-8"), where), True))
    start = root / LANG / "START_HERE.ipynb"
    if start.is_file():
        notebook = nbformat.read(start, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "markdown":
                where = f"{LANG}/START_HERE.ipynb cell {cell.get('id')}"
                texts.append((where, _prose(cell.source, f"{LANG}/START_HERE.ipynb"), True))
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
