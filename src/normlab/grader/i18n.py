"""The grader's messages in the learner's language (English, the source, or Spanish).

The checks build their messages as English sentences with the values of the case filled in
(``f"row {row} has mean {mean:.4g}"``), and the probes carry English hints. Translating them
where they are written would mean a ``_()`` around every string of every check and a catalog
entry per value, so the translation happens where the messages are shown instead: a message is
cut into lines, each line is abstracted (its numbers, shapes, identifiers, dtype names and quoted
answers become numbered tokens) and looked up in a catalog keyed by the abstracted English; the
Spanish entry is filled with the same tokens, in the order the Spanish sentence needs them.

The catalog, ``locale/<lang>.po``, is an ordinary gettext file (readable in any PO editor) with
three contexts:

- no context: a *text* -- a hint, a check name, a multiple-choice "why" line, a whole message --
  written as a concrete English sentence and its translation. The tokens of both must be the same
  (the Spanish keeps every number and identifier); the catalog refuses to load otherwise.
- ``frame``: a sentence with slots, ``{what}`` (a text, translated in turn), ``{=rest}`` (copied
  as it is, e.g. the learner's own exception message), ``{~name}`` (one word, copied) and
  ``{list_names}`` (a ", "-separated list of texts). Frames assemble what the grading framework composes (``"{what}: shape is (4,) but
  should be (4, 1)"``, ``"Why: {hint}"``).
- ``ui``: the framework's own fixed templates (report headings, "points"), looked up by their
  exact English with ``str.format`` fields, as gettext does.

The language: ``set_language("es")``, else the environment variable ``NORMLAB_LANG``, else English.
A line without a translation stays in English (a missing entry is a bug the tests catch, not a
failure the learner meets); ``untranslated`` lists such lines for the tests.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path

from normlab.grader import inert

LANGUAGES = ("en", "es")
DEFAULT = "en"
_LOCALE = Path(__file__).with_name("locale")
_chosen: str | None = None


# ----------------------------------------------------------------------------- the language


def normalise(lang: object) -> str | None:
    """``"es"``, ``"es_ES.UTF-8"``, ``"ES"`` -> ``"es"``; None for a language the course lacks."""
    if not isinstance(lang, str) or not lang.strip():
        return None
    code = re.split(r"[_.@-]", lang.strip().lower())[0]
    return code if code in LANGUAGES else None


def set_language(lang: str | None) -> None:
    """Choose the language of ``check()``'s report in this kernel (None: back to the default)."""
    global _chosen
    if lang is not None and normalise(lang) is None:
        raise ValueError(f"no messages in {lang!r}; available: {', '.join(LANGUAGES)}")
    _chosen = normalise(lang) if lang is not None else None


def current_language() -> str:
    """``set_language``'s choice, else ``NORMLAB_LANG``, else English."""
    return _chosen or normalise(os.environ.get("NORMLAB_LANG")) or DEFAULT


# ----------------------------------------------------------------------------- tokens

# What varies between two emissions of the same sentence, and what a translation keeps as is.
_TOKEN = re.compile(
    r"(?P<code>`[^`\n]+`)"
    r"|(?P<repr>(?:^|(?<=[(\[=,:] )|(?<=[(\[=]))'[^'\n]*'"
    r"(?:… \(\d+ characters, the first \d+ shown\))?(?![\w']))"
    r"|(?P<shape>\((?:\s*-?\d+\s*,)+\s*(?:-?\d+\s*)?\)|\(\))"
    r"|(?P<number>(?<![\w.])-?(?:\d+(?:\.\d+)?|\.\d+)(?:e[-+]?\d+)?(?![\w])|(?<![\w])-?(?:nan|inf)(?![\w]))"
    r"|(?P<name>\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b|\b[A-Za-z]\w*_\w*\b"
    r"|\b(?:b?float|u?int|complex)(?:8|16|32|64|128)\b)"
)
_MARK = re.compile(r"⟨([a-z])(\d+)⟩")
_KIND = {"code": "c", "repr": "q", "shape": "s", "number": "n", "name": "i"}


def _is_token(kind: str, text: str) -> bool:
    # "e.g." and "i.e." are words, not dotted names
    return not (kind == "name" and "." in text and all(len(p) == 1 for p in text.split(".")))


def abstract(text: str, values: list[str] | None = None) -> tuple[str, list[str]]:
    """``text`` with each token replaced by ``⟨kN⟩`` (kind k, N its index in ``values``)."""
    values = [] if values is None else values
    parts, last = [], 0
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if not _is_token(kind, match.group()):
            continue
        parts.append(text[last : match.start()])
        parts.append(f"⟨{_KIND[kind]}{len(values)}⟩")
        values.append(match.group())
        last = match.end()
    parts.append(text[last:])
    return "".join(parts), values


def _key(skeleton: str) -> str:
    return _MARK.sub(lambda m: f"⟨{m.group(1)}⟩", skeleton)


def _marks(skeleton: str) -> list[str]:
    return [m.group(0) for m in _MARK.finditer(skeleton)]


def tokens(text: str) -> list[str]:
    """The tokens of ``text`` (numbers, shapes, identifiers...), in order."""
    return abstract(text)[1]


# ----------------------------------------------------------------------------- the catalog


class CatalogError(ValueError):
    """A catalog entry that cannot be used (tokens that differ, slots that differ, a clash)."""


def read_po(path: Path) -> list[tuple[str, str, str, str]]:
    """(msgctxt, msgid, msgstr, where) of each entry of a PO file (plural forms are not used);
    ``where`` is ``file:line``."""
    entries, current, field, line_no = [], {}, None, ""

    def flush():
        if "msgid" in current and current.get("msgid"):
            entries.append(
                (current.get("msgctxt", ""), current["msgid"], current.get("msgstr", ""), line_no)
            )
        current.clear()

    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        where = f"{path.name}:{number}"
        line = raw.strip()
        if not line or line.startswith("#"):
            if not line and current:
                flush()
            continue
        keyword, _, rest = line.partition(" ")
        if keyword in ("msgctxt", "msgid", "msgstr"):
            if keyword in ("msgctxt", "msgid") and "msgstr" in current:
                flush()
            if not current:
                line_no = where
            field, line = keyword, rest.strip()
            current[field] = ""
        if not (line.startswith('"') and line.endswith('"')) or field is None:
            raise CatalogError(f"{where}: not a PO line: {raw!r}")
        current[field] += ast.literal_eval(line)
    flush()
    return entries


_SLOT = re.compile(r"\{([=~]?)([a-z_]+)\}")


def _abstract_frame(text: str) -> tuple[str, list[str]]:
    """``abstract`` for a frame: its slots (``{what}``) are kept as they are, not tokens."""
    values: list[str] = []
    pieces, last = [], 0
    for slot in _SLOT.finditer(text):
        pieces += [abstract(text[last : slot.start()], values)[0], slot.group(0)]
        last = slot.end()
    pieces.append(abstract(text[last:], values)[0])
    return "".join(pieces), values


class Frame:
    """A sentence with slots; matches an abstracted line and rebuilds it in the other language."""

    def __init__(self, english: str, spanish: str, where: str):
        en_skeleton, values = _abstract_frame(english)
        es_skeleton, es_values = _abstract_frame(spanish)
        _check_tokens(values, es_values, where)
        en_slots = [m.group(0) for m in _SLOT.finditer(en_skeleton)]
        if sorted(en_slots) != sorted(m.group(0) for m in _SLOT.finditer(es_skeleton)):
            raise CatalogError(f"{where}: the slots of the two languages differ")
        if len(set(en_slots)) != len(en_slots):
            raise CatalogError(f"{where}: a slot is named twice")
        self.template = _relative(es_skeleton, es_values, values)
        # the English as parts: literal text, a token of one kind, or a slot
        self.parts: list[tuple[str, str]] = []
        last = 0
        for match in re.finditer(r"\{[=~]?[a-z_]+\}|⟨([a-z])\d+⟩", en_skeleton):
            if match.start() > last:
                self.parts.append(("text", en_skeleton[last : match.start()]))
            if match.group(1):
                self.parts.append(("token", match.group(1)))
            else:
                self.parts.append(("slot", match.group(0)[1:-1]))
            last = match.end()
        if last < len(en_skeleton):
            self.parts.append(("text", en_skeleton[last:]))
        self.key = _key(en_skeleton)

    def _match(self, skeleton: str, part: int, at: int, catalog: Catalog, found: dict):
        """Assignments of the parts from ``part`` on to ``skeleton[at:]`` (every split tried)."""
        if part == len(self.parts):
            if at == len(skeleton):
                yield {k: list(v) if k == "" else v for k, v in found.items()}
            return
        kind, value = self.parts[part]
        if kind == "text":
            if skeleton.startswith(value, at):
                yield from self._match(skeleton, part + 1, at + len(value), catalog, found)
            return
        if kind == "token":
            mark = _MARK.match(skeleton, at)
            if mark and mark.group(1) == value:
                found.setdefault("", []).append(mark.group(0))
                yield from self._match(skeleton, part + 1, mark.end(), catalog, found)
                found[""].pop()
            return
        for end in self._ends(skeleton, part, at):
            piece = skeleton[at:end]
            translated = self._fill(value, piece, catalog)
            if translated is None:
                continue
            found[value] = translated
            yield from self._match(skeleton, part + 1, end, catalog, found)
            del found[value]

    def _ends(self, skeleton: str, part: int, at: int):
        if part + 1 == len(self.parts):
            yield len(skeleton)
            return
        kind, value = self.parts[part + 1]
        if kind == "text":
            end = skeleton.find(value, at)
            while end != -1:
                yield end
                end = skeleton.find(value, end + 1)
        elif kind == "token":
            for mark in _MARK.finditer(skeleton, at):
                yield mark.start()
        else:  # two slots side by side: every split
            yield from range(at, len(skeleton) + 1)

    @staticmethod
    def _fill(slot: str, piece: str, catalog: Catalog) -> str | None:
        if slot.startswith("="):
            return piece
        if slot.startswith("~"):  # one word or token, copied
            return piece if re.fullmatch(r"[\w⟨⟩]+", piece) else None
        if piece == "":
            return ""
        if slot.startswith("list_"):
            items = [catalog.translate_skeleton(p) for p in piece.split(", ")]
            return None if None in items else ", ".join(items)
        return catalog.translate_skeleton(piece)

    def apply(self, skeleton: str, catalog: Catalog) -> str | None:
        found = next(self._match(skeleton, 0, 0, catalog, {}), None)
        if found is None:
            return None
        tokens_seen = found.get("", [])
        text = _MARK.sub(lambda m: tokens_seen[int(m.group(2))], self.template)
        return _SLOT.sub(lambda m: found[m.group(0)[1:-1]], text)


def _check_tokens(en: list[str], es: list[str], where: str) -> None:
    if sorted(en) != sorted(es):
        missing = [t for t in en if en.count(t) > es.count(t)]
        extra = [t for t in es if es.count(t) > en.count(t)]
        raise CatalogError(
            f"{where}: the Spanish must keep the English tokens (missing {missing}, added {extra})"
        )


def _relative(es_skeleton: str, es_values: list[str], en_values: list[str]) -> str:
    """The Spanish skeleton with each mark renumbered to the English token it stands for.

    A value that occurs several times maps occurrence by occurrence, in order."""
    seen: dict[str, int] = {}

    def renumber(match):
        value = es_values[int(match.group(2))]
        k = seen.get(value, 0)
        seen[value] = k + 1
        positions = [i for i, v in enumerate(en_values) if v == value]
        return f"⟨{match.group(1)}{positions[k]}⟩"

    return _MARK.sub(renumber, es_skeleton)


class Catalog:
    """One language's texts, frames and ui templates.

    Args:
        lang: the language code.
        entries: (msgctxt, msgid, msgstr, where) as ``read_po`` gives them.
    """

    def __init__(self, lang: str, entries: list[tuple[str, str, str, object]]):
        self.lang = lang
        self.texts: dict[str, str] = {}
        self.frames: list[Frame] = []
        self.ui: dict[str, str] = {}
        self._memo: dict[str, str | None] = {}
        for context, english, spanish, where in entries:
            if not spanish:
                raise CatalogError(f"{where}: no translation of {english!r}")
            if context == "ui":
                if _format_fields(english) != _format_fields(spanish):
                    raise CatalogError(f"{where}: the fields of the two languages differ")
                self.ui[english] = spanish
            elif context == "frame":
                self.frames.append(Frame(english, spanish, where))
            elif context == "":
                en_skeleton, en_values = abstract(english)
                es_skeleton, es_values = abstract(spanish)
                _check_tokens(en_values, es_values, where)
                key = _key(en_skeleton)
                template = _relative(es_skeleton, es_values, en_values)
                if self.texts.get(key, template) != template:
                    raise CatalogError(f"{where}: {english!r} clashes with an earlier entry")
                self.texts[key] = template
            else:
                raise CatalogError(f"{where}: unknown context {context!r}")

    def translate_skeleton(self, skeleton: str) -> str | None:
        """An abstracted text in this language (marks kept), or None when nothing matches."""
        if skeleton not in self._memo:
            self._memo[skeleton] = self._translate(skeleton)
        return self._memo[skeleton]

    def _translate(self, skeleton: str) -> str | None:
        marks = _marks(skeleton)
        template = self.texts.get(_key(skeleton))
        if template is not None:
            return _MARK.sub(lambda m: marks[int(m.group(2))], template)
        for frame in self.frames:
            found = frame.apply(skeleton, self)
            if found is not None:
                return found
        return None


def _format_fields(template: str) -> list[str]:
    return sorted(re.findall(r"\{(\w*)\}", template))


def catalog_path(lang: str) -> Path:
    return _LOCALE / f"{lang}.po"


@functools.cache
def catalog(lang: str) -> Catalog | None:
    """The catalog of ``lang`` (None for English, the source language)."""
    path = catalog_path(lang)
    return Catalog(lang, read_po(path)) if lang != DEFAULT and path.is_file() else None


# ----------------------------------------------------------------------------- translating

# The learner's own exception message and traceback follow this line; they stay as they are.
_RAISED = re.compile(r"^`[^`\n]+` raised ")
# ... and the output of the notebook's process after this one.
_OUTPUT = "last output: "
_WHY = "Why: "
RAISED = "{name} raised {rest}"

#: lines that found no translation (for the tests), as (language, line); the first 1000 only
untranslated: list[tuple[str, str]] = []


def _note(lang: str, lines: list[str]) -> None:
    room = 1000 - len(untranslated)
    untranslated.extend((lang, line) for line in lines[: max(0, room)])


def _line(text: str, book: Catalog) -> str | None:
    skeleton, values = abstract(text)
    found = book.translate_skeleton(skeleton)
    if found is None:
        return None
    return _MARK.sub(lambda m: values[int(m.group(2))], found)


def translation(message: str, book: Catalog) -> tuple[str, list[str]]:
    """``message`` in ``book``'s language, and the lines that found no translation (kept)."""
    lines, missed, verbatim = [], [], False
    for text in message.split("\n"):
        if verbatim and not text.startswith(_WHY):
            lines.append(_said_clipped(text, book))  # the learner's traceback
            continue
        raised = _RAISED.match(text)
        found = _line(text, book) if text.strip() else text
        if found is None and raised and RAISED in book.ui:
            name = raised.group(0)[: -len(" raised ")]
            found = book.ui[RAISED].format(name=name, rest=text[raised.end() :])
        if found is None:
            missed.append(text)
            found = text
        verbatim = verbatim or bool(raised) or text.startswith(_OUTPUT)
        lines.append(_said_clipped(found, book))
    return "\n".join(lines), missed


#: what a quote cut short says of itself (``inert.clip``), at its first or last characters
CLIPPED = {
    "first": "({length} characters, the first {shown} shown)",
    "last": "({length} characters, the last {shown} shown)",
}


def _said_clipped(line: str, book: Catalog) -> str:
    """``line`` with what each quote cut short says of itself (``inert.CLIPPED``) in the book's
    language: the quote itself, a token (a clipped answer) or copied text (a clipped
    exception message), stays as it is."""

    def said(match: re.Match) -> str:
        template = book.ui.get(CLIPPED[match.group(2)])
        if template is None:
            _note(book.lang, [CLIPPED[match.group(2)]])
            return match.group()
        return template.format(length=match.group(1), shown=match.group(3))

    return inert.CLIPPED_PATTERN.sub(said, line) if "characters, the " in line else line


def translate(message: str, lang: str | None = None) -> str:
    """A learner message in ``lang`` (default: the current language), line by line.

    A line the catalog lacks stays in English (and is listed in ``untranslated``)."""
    lang = current_language() if lang is None else (normalise(lang) or DEFAULT)
    book = catalog(lang)
    if book is None or not message:
        return message
    translated, missed = translation(message, book)
    _note(lang, missed)
    return translated


def text(english: str, lang: str | None = None, **fields) -> str:
    """A framework template (context ``ui``) in ``lang``, filled with ``fields``."""
    lang = (normalise(lang) or DEFAULT) if lang is not None else current_language()
    book = catalog(lang)
    template = book.ui.get(english) if book else None
    if template is None:
        if book is not None:
            _note(lang, [english])
        template = english
    return template.format(**fields) if fields else template
