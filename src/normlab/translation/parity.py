"""Markdown parity: what a translation keeps unchanged (headings, equations, numbers, inline
code, code blocks, figures, link targets, practice-problem labels), and the links of a Spanish
text that do not resolve."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path, PurePosixPath

import nbformat

from normlab.translation.scope import LANG, MIRRORED
from normlab.translation.stamps import english_of

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


# Counts of parameters: the English writes 3.2B, 130M or 22 billion; the Spanish writes
# 3200 millones, 130 millones or 22 000 millones, since in Spain a billón is 10^12. Both count
# as the same number, written out in digits.
ENGLISH_MAGNITUDE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:([BM])\b| (billion|million)\b)")
SPANISH_MILLIONS = re.compile(
    rf"(?<![\w.])(\d{{1,3}}(?:[{THIN_SPACES}]\d{{3}})+|\d+)(\.\d+)? millones\b"
)


def _count_in_digits(text: str) -> str:
    def english(match: re.Match) -> str:
        unit = match.group(2) or match.group(3)
        factor = 10**9 if unit in ("B", "billion") else 10**6
        return str(round(float(match.group(1)) * factor))

    def spanish(match: re.Match) -> str:
        digits = number_value(match.group(1)) + (match.group(2) or "")
        return str(round(float(digits) * 10**6))

    return SPANISH_MILLIONS.sub(spanish, ENGLISH_MAGNITUDE.sub(english, text))


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


def _fenced_blocks(text: str) -> tuple[list[str], Counter]:
    """The lines of prose (a blank line where a block was) and the fenced code blocks, kept
    aside and dedented."""
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
    return prose_lines, blocks


def _sections(prose: str) -> list[str]:
    """The prose before the first heading, then that of each heading (the heading included)."""
    sections, current = [], []
    for line in prose.split("\n"):
        if HEADING.match(line):
            sections.append("\n".join(current))
            current = []
        current.append(line)
    sections.append("\n".join(current))
    return sections


def analyse(text: str, where: str) -> Parts:
    """Split a Markdown text (repository-relative path ``where``) into what stays identical."""
    folder = PurePosixPath(where).parent
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    prose_lines, blocks = _fenced_blocks(text)
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
    numbers = Counter(number_value(n) for n in NUMBER.findall(_count_in_digits(prose)))
    sections = _sections(prose)
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
        if name in ("code_spans", "code_blocks"):  # a path to the learner's copies names the
            # edition's folder, in a span or in a command block
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
        elif where.startswith(LANG + "/") and not figure.startswith(LANG + "/"):
            # a chapter figure is drawn in both languages (normlab.plotting.bilingual_figure)
            broken.append(
                f"{where}: shows the English {figure}; show the Spanish {LANG}/{figure}"
                + ("" if (root / LANG / figure).is_file() else " (not drawn in Spanish yet)")
            )
    return broken
