"""Student text is data: what a submission wrote, made inert for each place it is shown.

Everything a student chose reaches the instructor's screen and files: file and folder names
(ids, paths), exception text, printed output, names quoted in findings. Each exit gets the
student's text through one of these functions, so that it is shown as text and never acts as
markup, a formula or a terminal control:

* ``text``: for a terminal or any file. Control characters (C0, DEL, C1: escape sequences,
  screen clears, clipboard writes, carriage returns that overwrite a line), Unicode format
  characters (bidi overrides and isolates, zero-width characters), line and paragraph
  separators, lone surrogates (undecodable file names) and invisible letters are written as
  visible escapes (``\\x1b``, ``\\u202e``); newlines and tabs are kept where the format has lines.
* ``identifier``: a student id, settled once when submissions are found: the same escapes for
  every such character (newlines and tabs included) and ``\\`` doubled, so that two different
  ids never look alike in a gradebook.
* ``csv_cell``: OWASP's rule against CSV injection: a cell that starts with ``= + - @``, a tab
  or a carriage return (or their full-width forms) gets a leading ``'``.
* ``markdown`` and ``code_block``: Markdown that shows the text as it is, with no HTML, link,
  image or autolink made of it; a code block's fence is longer than any run of backticks in it.
* ``json_text``: the JSON that is printed, with the same characters as ``\\uXXXX`` escapes
  (the values are unchanged once parsed).
* ``folder_name``: the feedback folder of an id, one per id: the id itself when it is a plain
  lower-case name, else a slug and 16 hex digits of the id's SHA-256 after a ``~`` (which no
  plain name holds), so that no two ids share a folder, on case-insensitive file systems too.

And what a submission wrote is quoted short: ``clip`` cuts any text of the student's that a
message quotes (an answer, a returned value's type, an exception's message, a traceback) to
``Limits.shown_output_chars`` characters and says how long it was, so that no answer, however
long, makes a message, a cached result or a page long.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import hashlib
import re
import unicodedata

from normlab.grader.isolation.limits import DEFAULT

# Letters that render as nothing (Hangul fillers, the braille blank): spoofing, not text.
_INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u2800")
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(char, f"\\x{code:02x}")
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def is_unsafe(char: str) -> bool:
    """A character that controls a terminal, reorders or hides text, or cannot be encoded."""
    return unicodedata.category(char) in _UNSAFE_CATEGORIES or char in _INVISIBLE


def text(value: object, lines: bool = True) -> str:
    """``value`` as text safe for a terminal or a file: every unsafe character as a visible
    escape. ``lines``: keep newlines and tabs (``\\r\\n`` becomes ``\\n``)."""
    value = "" if value is None else str(value)
    if lines:
        value = value.replace("\r\n", "\n")
    keep = "\n\t" if lines else ""
    if value.isascii() and value.isprintable():
        return value  # the common case, nothing to do
    return "".join(_escape(c) if is_unsafe(c) and c not in keep else c for c in value)


def one_line(value: object) -> str:
    """``text`` on one line: runs of whitespace (newlines included) become one space."""
    return text(" ".join(("" if value is None else str(value)).split()), lines=False)


def identifier(value: str) -> str:
    """A student id that shows as itself: ``\\`` doubled, unsafe characters and any space
    other than U+0020 escaped. Different ids stay different (the mapping is one-to-one)."""
    out = []
    for char in value:
        if char == "\\":
            out.append("\\\\")
        elif is_unsafe(char) or (char != " " and unicodedata.category(char) == "Zs"):
            out.append(_escape(char))
        else:
            out.append(char)
    return "".join(out)


# ----------------------------------------------------------------------------- quotes

# The bound of ``clip`` in this thread: while ``normlab grade`` grades a submission, its run's
# ``Limits.shown_output_chars`` (``quoting``); elsewhere (the notebook's ``check()``) the default.
_SHOWN: contextvars.ContextVar[int] = contextvars.ContextVar(
    "shown_chars", default=DEFAULT.shown_output_chars
)

#: what a cut text says of itself (``i18n`` translates it wherever it appears)
CLIPPED = "({length} characters, the {end} {shown} shown)"
CLIPPED_PATTERN = re.compile(r"\((\d+) characters, the (first|last) (\d+) shown\)")
_CUT_AT_END = re.compile(r"… \(\d+ characters, the first (\d+) shown\)\Z")
_CUT_AT_START = re.compile(r"\A\(\d+ characters, the last (\d+) shown\) …")


@contextlib.contextmanager
def quoting(limits):
    """Quote with ``limits.shown_output_chars`` in this thread, for the ``with`` block."""
    token = _SHOWN.set(limits.shown_output_chars)
    try:
        yield
    finally:
        _SHOWN.reset(token)


def clip(value: object, limit: int | None = None, *, quote: bool = False, last: bool = False):
    """What a submission wrote, as a message quotes it: at most ``limit`` characters of it
    (default: ``Limits.shown_output_chars``, ``quoting``), and when it is longer, its length:
    ``'ééé'… (4000000 characters, the first 300 shown)``.

    Args:
        value: the text (anything else is quoted as ``str(value)``).
        quote: show it as Python writes a string (``repr``), as an answer is quoted.
        last: keep its end rather than its start (a traceback ends with what went wrong).

    A text cut already (by the parent, as it read the reply) is not cut again: it keeps the
    length it states.
    """
    text = value if isinstance(value, str) else str(value)
    limit = _SHOWN.get() if limit is None else limit
    if len(text) <= limit:
        return repr(text) if quote else text
    cut = None if quote else (_CUT_AT_START if last else _CUT_AT_END).search(text)
    if cut and int(cut.group(1)) <= limit and len(text) - len(cut.group()) <= limit:
        return text
    kept = text[len(text) - limit :] if last else text[:limit]
    kept = repr(kept) if quote else kept
    said = CLIPPED.format(length=len(text), end="last" if last else "first", shown=limit)
    return f"{said} …{kept}" if last else f"{kept}… {said}"


# ----------------------------------------------------------------------------- CSV

_FORMULA_START = tuple("=+-@\t\r") + tuple("\uff1d\uff0b\uff0d\uff20")


def csv_cell(value: object) -> object:
    """A cell for a CSV file: text on one line (newlines and tabs escaped too), never read as a
    formula. Numbers are the grader's own and stay numbers."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    cell = text(value, lines=False)
    return "'" + cell if cell.startswith(_FORMULA_START) else cell


def csv_row(cells: list) -> list:
    return [csv_cell(cell) for cell in cells]


# ----------------------------------------------------------------------------- Markdown

_BACKTICKS = re.compile(r"`+")
# What could make markup of text outside a code span: the escape character itself, HTML and
# character references.
_SPECIAL = {"\\": "\\\\", "<": "&lt;", "&": "&amp;"}
# The character that makes each of: an inline link or image ("](" ), GFM's bare autolinks
# (www., scheme://, e-mail addresses). A reference link needs a definition, which only a line's
# start can hold (below); brackets elsewhere are text.
_LINKING = re.compile(r"\](?=\()|(?i:(?<=www)\.)|:(?=//)|(?<=[\w.+-])@(?=\w)")
# What would start a block: heading, quote, list, rule, table, setext underline, fence, and a
# link reference definition ("[x]: url").
_BLOCK_START = re.compile(r"^( {0,3})([#>+*=|~\[-]|\d{1,9}(?=[.)]))")


def _escape_plain(part: str) -> str:
    part = "".join(_SPECIAL.get(c, c) for c in part)
    return _LINKING.sub(lambda m: "\\" + m.group(), part)


def markdown(value: object) -> str:
    """One line of Markdown that shows ``value`` as it is. Code spans (a run of backticks closed
    by a run of the same length, as CommonMark reads them) are kept, since nothing in them is
    markup; elsewhere the characters that make HTML, links, images and autolinks are escaped,
    unmatched backticks included, and so is a block marker at the start."""
    line = text(value, lines=False)
    runs = list(_BACKTICKS.finditer(line))
    by_length: dict[int, list[int]] = {}
    for number, run in enumerate(runs):
        by_length.setdefault(len(run.group()), []).append(number)
    out, at, index = [], 0, 0
    while index < len(runs):
        opener = runs[index]
        same = by_length[len(opener.group())]
        later = bisect.bisect_right(same, index)
        if later == len(same):  # no closer: the backticks are text
            out.append(_escape_plain(line[at : opener.end()].replace("`", "\0")))
            at, index = opener.end(), index + 1
            continue
        closer = runs[same[later]]
        out.append(_escape_plain(line[at : opener.start()]))
        out.append(line[opener.start() : closer.end()])
        at, index = closer.end(), same[later] + 1
    out.append(_escape_plain(line[at:]))
    shown = "".join(out).replace("\0", "\\`")
    block = _BLOCK_START.match(shown)
    if block and block.group(2).isdigit():  # "1." or "1)": an ordered list
        shown = f"{block.group()}\\{shown[block.end() :]}"
    elif block:
        shown = f"{block.group(1)}\\{shown[len(block.group(1)) :]}"
    return shown


def code_block(value: object) -> list[str]:
    """A fenced code block of ``value``'s lines: the fence is longer than any run of backticks
    in the text, so no line can close it."""
    body = text(value)
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(body)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, *body.split("\n"), fence]


# ----------------------------------------------------------------------------- JSON


def json_text(dumped: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``) with every unsafe character as a
    ``\\uXXXX`` escape: the same values once parsed, nothing a terminal acts on when printed.
    ``json.dumps`` already escapes C0 controls in strings and writes only ASCII outside them,
    so only strings change."""
    if dumped.isascii():
        return dumped

    def escape(char: str) -> str:
        if not is_unsafe(char) or char == "\n":  # a raw newline is the indentation's
            return char
        code = ord(char)
        if code < 0x10000:
            return f"\\u{code:04x}"
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"

    return "".join(escape(c) for c in dumped)


# ----------------------------------------------------------------------------- file names

_PLAIN_NAME = re.compile(r"[a-z0-9_@+](?:[a-z0-9._@+-]{0,62}[a-z0-9_@+-])?")
_RESERVED = re.compile(r"(?i)(con|prn|aux|nul|com\d|lpt\d)(\..*)?")


def folder_name(value: str) -> str:
    """The file or folder name of an id (or a file stem): the id itself when it is a plain
    lower-case name (``[a-z0-9._@+-]``, no leading or trailing dot, at most 64 characters, not a
    Windows device name), else an ASCII slug, ``~`` and 16 hex digits of the id's SHA-256.
    Different ids never share a name, whatever the file system's case rule."""
    if _PLAIN_NAME.fullmatch(value) and not _RESERVED.fullmatch(value):
        return value
    ascii_text = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^A-Za-z0-9._@+-]+", "_", ascii_text).strip("._-")[:48] or "id"
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{slug}~{digest}"
