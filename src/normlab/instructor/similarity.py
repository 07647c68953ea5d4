"""The similarity report: which students' code shares unusually much, and where.

Everything a student wrote is compared, not only the functions the checks call: every function,
class and assignment of a ``lambda`` (or of a table of them) that a code cell defines, at any
depth (a definition under ``if True:`` or ``try:`` is found), with the helpers they call, since
those are in it too. The notebooks are parsed as ``normlab grade`` parses them
(``trap.parse_cells``, within the token bounds ``Limits.max_cell_tokens`` and
``Limits.max_code_tokens``; no code runs). A notebook that cannot be read, or a cell past those
bounds, is listed as not analysed, and the rest of the class is reported.

Each definition is normalised by its syntax tree into tokens: a name the notebook itself
binds (a local, a parameter, a helper, a class, an attribute it assigns) becomes ``V``, a
module alias becomes its module (``np`` and ``xp`` for ``numpy`` are one), the names of
library functions and attributes stay (``.mean``, ``axis=`` carry the method); literals become
their kind; comments, docstrings and layout are gone. Dead statements are dropped: ``pass``,
an expression without a call (a bare name, a string), ``print(...)``, an assignment to names
no live statement reads (``_dead_statements``), and the branch an ``if`` on a constant never
takes (the other is flattened into its block).

Fingerprints are chosen by winnowing (Schleimer, Wilkerson and Aiken, "Winnowing: local
algorithms for document fingerprinting", SIGMOD 2003, sections 2.1 and 3; the algorithm MOSS
uses): each run of ``K`` tokens (a k-gram; ``K`` is the noise threshold, no shorter match
counts) is hashed, and in each window of ``WINDOW`` consecutive hashes the smallest (the
rightmost on a tie) is kept, which guarantees that any shared run of at least
``t = WINDOW + K - 1`` tokens shares a fingerprint. The runs do not cross statements: a
statement (or a compound statement's header) is a document of its own, so reordered
statements, functions and cells keep every fingerprint.

Removed before comparing: every k-gram of the course's starter notebook (the given code and
the stubs), and every fingerprint that more than ``common`` of the class's *students* have
(MOSS's rule: what many write is how the problem is solved). A student is counted once however
many notebooks they hand in, so one student's drafts never make their own code common.

A pair's score is the share of the smaller side's remaining fingerprints that the pair shares,
``shared / (min(|A|, |B|) + EVIDENCE)`` (MOSS reports such shares per side; ``EVIDENCE`` keeps a
pair with a handful of fingerprints left low, as its little evidence deserves). Pairs are found
through an index from fingerprint to students, never by comparing every pair: the work is
linear in the code read, plus one count per pair of the at most ``common`` students holding a
fingerprint. It flags; it does not accuse (see the page's text).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import html
import itertools
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

from normlab.grader import inert, trap
from normlab.grader.isolation.limits import DEFAULT

K = 5  # noise threshold: tokens per k-gram, about one short sub-expression
WINDOW = 4  # winnowing's window: a shared run of K + WINDOW - 1 = 8 tokens is always found
GUARANTEE = K + WINDOW - 1
SHORTEST = 3  # a statement of fewer tokens (``return x``) says nothing about who wrote it
# added to the smaller side of a pair: two students who share a couple of fragments and have
# nothing else left (their rest is common code) score low, as their little evidence deserves
EVIDENCE = 4
PLACES = 8  # where a fingerprint occurs in one notebook, at most this many places kept

# A compound statement's own tokens (its header); its blocks are statements of their own.
_HEADERS = {
    ast.FunctionDef: ("decorator_list", "args", "returns"),
    ast.AsyncFunctionDef: ("decorator_list", "args", "returns"),
    ast.ClassDef: ("decorator_list", "bases", "keywords"),
    ast.If: ("test",),
    ast.While: ("test",),
    ast.For: ("target", "iter"),
    ast.AsyncFor: ("target", "iter"),
    ast.With: ("items",),
    ast.AsyncWith: ("items",),
    ast.Try: (),
    ast.Match: ("subject",),
}
if hasattr(ast, "TryStar"):
    _HEADERS[ast.TryStar] = ()
_BLOCKS = ("body", "handlers", "orelse", "finalbody", "cases")
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_EFFECTS = (ast.Call, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)


def _hash(tokens: list[str]) -> int:
    digest = hashlib.blake2b("\x1f".join(tokens).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def winnow(hashes: list[int], window: int | None = None) -> list[int]:
    """The positions winnowing selects in ``hashes``: in each window of ``window`` consecutive
    hashes, the smallest, the rightmost of equal ones, each position once (a sequence shorter
    than a window is one window)."""
    window = window or WINDOW
    if not hashes:
        return []
    selected: list[int] = []
    for start in range(max(1, len(hashes) - window + 1)):
        part = hashes[start : start + window]
        smallest = min(part)
        position = start + max(i for i, value in enumerate(part) if value == smallest)
        if not selected or selected[-1] != position:
            selected.append(position)
    return selected


def _assigned(statement: ast.AST) -> list[str] | None:
    """The names an assignment binds, or None when it is not one that binds only names."""
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        targets = [statement.target]
    else:
        return None
    names = []
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, (ast.Attribute, ast.Subscript)):
                return None
            if isinstance(node, ast.Name):
                names.append(node.id)
    return names or None


def _idle(statement: ast.AST) -> bool:
    """An expression statement that does nothing: no call (a bare name, a string), or a
    ``print``."""
    if not isinstance(statement, ast.Expr):
        return False
    value = statement.value
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "print"
    ):
        return True
    return not any(isinstance(node, _EFFECTS) for node in ast.walk(value))


def _dead_statements(trees: list[ast.Module]) -> set[int]:
    """The ``id`` of each statement of the notebook that changes nothing another live statement
    reads: an idle expression, or an assignment to names read nowhere else but in dead
    statements (found again as the statements that read a name die, so a chain of unused
    assignments dies whole). A name is read by a ``Name`` or an attribute of that name (a class
    body's ``eps = 1e-5`` read as ``self.eps``). Each statement dies once, each read is
    counted down once: linear in the code."""
    reads: Counter = Counter()
    assigners: dict[str, list[ast.AST]] = defaultdict(list)
    pending: list[ast.AST] = []
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                reads[node.id] += 1
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                reads[node.attr] += 1
            elif _idle(node):
                pending.append(node)
            else:
                for name in _assigned(node) or ():
                    assigners[name].append(node)
    pending += [node for nodes in assigners.values() for node in nodes]
    dead: set[int] = set()
    while pending:
        node = pending.pop()
        if id(node) in dead:
            continue
        names = _assigned(node)
        if names is not None and any(reads[name] for name in names):
            continue  # still read (it may die later, when its readers do)
        dead.add(id(node))
        for inner in ast.walk(node):
            name = None
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load):
                name = inner.id
            elif isinstance(inner, ast.Attribute) and isinstance(inner.ctx, ast.Load):
                name = inner.attr
            if name is not None:
                reads[name] -= 1
                if reads[name] == 0:
                    pending += assigners.get(name, ())
    return dead


class _Names:
    """What the notebook binds, what it reads, and its module aliases: the normalisation's
    vocabulary, gathered once over all its cells (``ast.walk`` does not recurse)."""

    def __init__(self, trees: list[ast.Module]):
        self.bound: set[str] = set()  # names of locals, parameters, functions, classes, globals
        self.attributes: set[str] = set()  # attributes assigned, methods and functions defined
        self.parameters: set[str] = set()  # names a keyword argument can have
        self.modules: dict[str, str] = {}
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.Name):
                    if not isinstance(node.ctx, ast.Load):
                        self.bound.add(node.id)
                elif isinstance(node, ast.arg):
                    self.bound.add(node.arg)
                    self.parameters.add(node.arg)
                elif isinstance(node, _DEFINITIONS):
                    self.bound.add(node.name)
                    self.attributes.add(node.name)
                elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
                    self.attributes.add(node.attr)
                elif isinstance(node, (ast.Global, ast.Nonlocal)):
                    self.bound.update(node.names)
                elif isinstance(node, ast.ExceptHandler) and node.name:
                    self.bound.add(node.name)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.asname:
                            self.modules[alias.asname] = alias.name
                        else:
                            first = alias.name.split(".")[0]
                            self.modules[first] = first
                elif isinstance(node, ast.ImportFrom):
                    for alias in node.names:
                        self.modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"

        self.dead = _dead_statements(trees)

    def name(self, identifier: str) -> str:
        if identifier in self.modules:
            return "M:" + self.modules[identifier]
        return "V" if identifier in self.bound else "N:" + identifier


def _constant(value: object) -> str:
    if isinstance(value, (str, bytes)):
        return "S"
    if value is None or isinstance(value, bool) or value is Ellipsis:
        return repr(value)
    return "C"  # a number, of any size


class _Tokens:
    """One notebook's statements as lists of (token, line)."""

    def __init__(self, names: _Names):
        self.names = names

    def walk(self, node: ast.AST, out: list, line: int) -> None:
        line = getattr(node, "lineno", line)
        if isinstance(node, ast.Name):
            out.append((self.names.name(node.id), line))
        elif isinstance(node, ast.Constant):
            out.append((_constant(node.value), line))
        elif isinstance(node, ast.expr_context):
            pass
        elif isinstance(node, ast.Attribute):
            self.walk(node.value, out, line)
            out.append(("." + ("V" if node.attr in self.names.attributes else node.attr), line))
        elif isinstance(node, ast.keyword):
            arg = node.arg
            out.append(("K:" + ("V" if arg in self.names.parameters else arg or "**"), line))
            self.walk(node.value, out, line)
        elif isinstance(node, ast.arg):
            out.append(("V", line))
            if node.annotation is not None:
                self.walk(node.annotation, out, line)
        elif isinstance(node, ast.alias):
            out.append(("I:" + node.name, line))
        else:
            out.append((type(node).__name__, line))
            for child in ast.iter_child_nodes(node):
                self.walk(child, out, line)

    def dead(self, statement: ast.stmt) -> bool:
        return isinstance(statement, ast.Pass) or id(statement) in self.names.dead

    def statements(self, body: list[ast.stmt], out: list) -> None:
        """Each live statement of ``body`` (and of its blocks) as one token list in ``out``."""
        for statement in body:
            if self.dead(statement):
                continue
            if isinstance(statement, ast.If) and isinstance(statement.test, ast.Constant):
                self.statements(statement.body if statement.test.value else statement.orelse, out)
                continue
            fields = _HEADERS.get(type(statement))
            if fields is None:  # a simple statement
                tokens: list = []
                self.walk(statement, tokens, statement.lineno)
                out.append(tokens)
                continue
            header = [(type(statement).__name__, statement.lineno)]
            for field in fields:
                value = getattr(statement, field, None)
                for node in value if isinstance(value, list) else [value]:
                    if node is not None:
                        self.walk(node, header, statement.lineno)
            out.append(header)
            for block in _BLOCKS:
                for item in getattr(statement, block, None) or []:
                    if isinstance(item, ast.stmt):
                        self.statements([item], out)
                        continue
                    inner = [(type(item).__name__, getattr(item, "lineno", statement.lineno))]
                    for field in ("type", "pattern", "guard"):  # an except clause, a case
                        node = getattr(item, field, None)
                        if node is not None:
                            self.walk(node, inner, inner[0][1])
                    out.append(inner)
                    self.statements(item.body, out)


def definitions(tree: ast.Module) -> list[ast.stmt]:
    """The functions, classes and assignments of lambdas (``f = lambda ...``, a table of them)
    a cell defines at its top level, found through any compound statement that wraps them
    (``if True:``, ``try:``, ``with``)."""
    found = []
    pending = list(reversed(tree.body))
    while pending:
        statement = pending.pop()
        if isinstance(statement, _DEFINITIONS) or (
            isinstance(statement, ast.Assign)
            and any(isinstance(node, ast.Lambda) for node in ast.walk(statement.value))
        ):
            found.append(statement)
        elif type(statement) in _HEADERS:
            inner = []
            for block in _BLOCKS:
                for item in getattr(statement, block, None) or []:
                    inner += [item] if isinstance(item, ast.stmt) else list(item.body)
            pending += reversed(inner)
    return found


def _name_of(definition: ast.stmt) -> str:
    if isinstance(definition, ast.Assign):
        target = definition.targets[0]
        return target.id if isinstance(target, ast.Name) else "lambda"
    return definition.name


_LINE_BREAKS = re.compile(r"\r\n|\r|\n")


@dataclasses.dataclass
class Code:
    """What one notebook's student wrote, fingerprinted.

    ``units``: each definition as (cell index, first line, last line, name); ``where``:
    fingerprint -> the places it was selected, as (unit index, first line, last line), at most
    ``PLACES`` of them; ``every``: the hash of every k-gram (kept only for the starter)."""

    sources: list[str]
    units: list[tuple[int, int, int, str]]
    where: dict[int, list[tuple[int, int, int]]]
    every: set[int]
    #: the code cells that are not Python (a syntax error), by index: not compared
    not_python: list[int] = dataclasses.field(default_factory=list)

    def lines(self, cell: int) -> list[str]:
        return _LINE_BREAKS.split(self.sources[cell])


# A line of IPython's own syntax (``%%time``, ``%timeit f(x)``, ``!pip install ...``): read as
# ``pass`` (kept in place, so line numbers hold) in a cell that is not Python otherwise.
_MAGIC = re.compile(r"(?:^|(?<=\r))([ \t]*)[%!][^\r\n]*", re.MULTILINE)


def code_of(sources: list[str], every: bool = False) -> Code:
    """A notebook's code cells, fingerprinted (``every``: also keep every k-gram's hash).

    The cells are parsed as the grader parses them (``trap.parse_cells``, within this thread's
    token bounds, ``trap.parse_bounds``); a cell past them (``unanalysed``) is not read, and a
    cell that is Python once its lines of IPython syntax (``_MAGIC``) are read as ``pass`` is
    read so."""
    trees = trap.parse_cells(tuple(sources))
    if any(tree is None for tree in trees):  # a syntax error: IPython's syntax, perhaps
        trees = trap.parse_cells(
            tuple(
                _MAGIC.sub(r"\1pass", source)
                if tree is None and isinstance(source, str)
                else source
                for source, tree in zip(sources, trees, strict=True)
            )
        )
    parsed = [tree for tree in trees if isinstance(tree, ast.Module)]
    tokens = _Tokens(_Names(parsed))
    code = Code(list(sources), [], {}, set())
    code.not_python = [cell for cell, tree in enumerate(trees) if tree is None]
    for cell, tree in enumerate(trees):
        if not isinstance(tree, ast.Module):
            continue  # a syntax error, or past the bounds
        for definition in definitions(tree):
            statements: list = []
            try:
                if isinstance(definition, ast.Assign):
                    statement: list = []
                    tokens.walk(definition, statement, definition.lineno)
                    statements.append(statement)
                else:
                    tokens.statements([definition], statements)
            except RecursionError:  # a tree too deep to walk: nothing to compare
                continue
            unit = len(code.units)
            first = min(
                [node.lineno for node in getattr(definition, "decorator_list", [])]
                + [definition.lineno]
            )
            code.units.append(
                (cell, first, definition.end_lineno or definition.lineno, _name_of(definition))
            )  # fmt: skip
            for statement in statements:
                _fingerprint(statement, unit, code, every)
    return code


def _fingerprint(statement: list, unit: int, code: Code, every: bool) -> None:
    if len(statement) < SHORTEST:
        return
    words = [token for token, _ in statement]
    if len(words) <= K:
        grams = [(0, len(words))]
    else:
        grams = [(i, i + K) for i in range(len(words) - K + 1)]
    hashes = [_hash(words[begin:end]) for begin, end in grams]
    if every:
        code.every.update(hashes)
    for position in winnow(hashes):
        begin, end = grams[position]
        lines = [line for _, line in statement[begin:end]]
        places = code.where.setdefault(hashes[position], [])
        place = (unit, min(lines), max(lines))
        if len(places) < PLACES and place not in places:
            places.append(place)


def unanalysed(sources: list[str]) -> str:
    """Why some of a notebook's code is not compared ("" when all of it is): its cells past the
    grader's token bounds, or too deep to parse (``trap.unanalysable_cells``)."""
    cells = trap.unanalysable_cells(sources)
    if not cells:
        return ""
    numbers = ", ".join(str(index + 1) for index in cells)
    return (
        f"code cell{'s' if len(cells) > 1 else ''} {numbers}: {trap.UNANALYSABLE} (past the "
        "grader's bounds max_cell_tokens or max_code_tokens, or nested too deeply); the code "
        "in them is not compared"
    )


def not_python(cells: list[int]) -> str:
    """Why the code of cells that are not Python is not compared ("" when there are none)."""
    if not cells:
        return ""
    numbers = ", ".join(str(index + 1) for index in cells)
    return (
        f"code cell{'s' if len(cells) > 1 else ''} {numbers}: not Python (a syntax error, even "
        "with its lines of IPython syntax such as %%time or !pip set aside); the code in "
        f"{'them' if len(cells) > 1 else 'it'} is not compared"
    )


def compare(
    class_code: dict[str, list[tuple[str, Code]]],
    starter: set[int],
    common: float = 0.25,
) -> list[dict]:
    """Every pair of students who share a fingerprint, ranked by score, with where.

    ``class_code``: student -> their notebooks as (path, ``code_of(...)``); ``starter``:
    fingerprints to ignore; ``common``: ignore a fingerprint that more than this fraction of
    the students (and at least 3) have. A student's notebooks count as one.
    """
    held = {
        who: set().union(*(code.where.keys() for _, code in notebooks)) - starter
        for who, notebooks in class_code.items()
    }
    counts = Counter(fp for fps in held.values() for fp in fps)
    limit = max(3, common * len(held))
    kept = {who: {fp for fp in fps if counts[fp] <= limit} for who, fps in held.items()}
    holders: dict[int, list[str]] = defaultdict(list)
    for who in sorted(kept):
        for fp in kept[who]:
            holders[fp].append(who)
    shared: dict[tuple[str, str], set[int]] = defaultdict(set)
    for fp, students in holders.items():  # at most ``limit`` students each
        for pair in itertools.combinations(students, 2):
            shared[pair].add(fp)
    pairs = []
    for (a, b), fps in shared.items():
        smaller = min(len(kept[a]), len(kept[b]))
        notebook_a = _best(class_code[a], fps)
        notebook_b = _best(class_code[b], fps)
        pairs.append(
            {
                "a": a,
                "b": b,
                "score": round(len(fps) / (smaller + EVIDENCE), 4),
                "shared": len(fps),
                "a_share": round(len(fps) / len(kept[a]), 4),
                "b_share": round(len(fps) / len(kept[b]), 4),
                "a_notebook": notebook_a[0],
                "b_notebook": notebook_b[0],
                "regions": regions(notebook_a[1], notebook_b[1], fps),
                "_code": (notebook_a[1], notebook_b[1]),
                "_shared": fps,
            }
        )
    pairs.sort(key=lambda p: (-p["score"], -p["shared"], p["a"], p["b"]))
    return pairs


def _best(notebooks: list[tuple[str, Code]], fps: set[int]) -> tuple[str, Code]:
    """The notebook of a student that holds most of ``fps`` (the first on a tie)."""
    return max(notebooks, key=lambda item: sum(fp in item[1].where for fp in fps))


def regions(left: Code, right: Code, fps: set[int]) -> list[dict]:
    """The definitions of two notebooks that share fingerprints, paired: each definition on
    either side with the one of the other side it shares most with, the lines of each that
    the shared fingerprints cover, and how many it shares. Work linear in ``fps``."""
    together: Counter = Counter()
    marked: tuple[dict, dict] = (defaultdict(set), defaultdict(set))
    for fp in fps:
        places = (left.where.get(fp, ()), right.where.get(fp, ()))
        for side, found in enumerate(places):
            for unit, first, last in found:
                marked[side][unit].update(range(first, last + 1))
        for unit_a, unit_b in {(a[0], b[0]) for a in places[0] for b in places[1]}:
            together[unit_a, unit_b] += 1
    strongest: tuple[dict, dict] = ({}, {})  # per side, unit -> (count, pair) it shares most
    for pair, count in together.items():
        for side in (0, 1):
            unit, other = pair[side], pair[1 - side]
            held = strongest[side].get(unit)
            if held is None or (count, -other) > (held[0], -held[1][1 - side]):
                strongest[side][unit] = (count, pair)
    best = {pair: count for side in (0, 1) for count, pair in strongest[side].values()}
    rows = []
    for (unit_a, unit_b), count in sorted(best.items()):
        rows.append(
            {
                "shared": count,
                "a": _region(left, unit_a, marked[0][unit_a]),
                "b": _region(right, unit_b, marked[1][unit_b]),
            }
        )
    return rows


def _region(code: Code, unit: int, lines: set[int]) -> dict:
    cell, first, last, name = code.units[unit]
    return {
        "cell": cell + 1,
        "name": name,
        "lines": [first, last],
        "matched": _ranges(sorted(lines)),
    }


def _ranges(lines: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for line in lines:
        if runs and line == runs[-1][1] + 1:
            runs[-1][1] = line
        else:
            runs.append([line, line])
    return runs


# ----------------------------------------------------------------------------- the page

EXPLANATION = (
    "<p>This page flags pairs of students to look at; it accuses nobody. A from-scratch norm "
    "is a few lines, and there are only so many ways to write <code>x / sqrt(mean(x**2) + eps)"
    "</code>: two students who never met often write the same statement, and the worked "
    "examples of the course push everyone towards the same form. So the comparison ignores the "
    "code the lab gives and every fragment that more than a quarter of the class wrote (each "
    "student counted once, however many notebooks they handed in), and it ignores names, "
    "comments, layout, the order of statements and functions, and dead code.</p>"
    "<p><b>How to read a score.</b> It is the share of the smaller side's remaining fragments "
    "that the pair has in common (0 to 1; a pair with only a few fragments left scores lower, "
    "since a few fragments are little evidence); each side's own share is in the JSON. Near 1: "
    "one student's code is, up to names and layout, inside the other's, which is worth a "
    "conversation, not a verdict (the students may have worked together as allowed, or both "
    "adapted one public example). A pair that shares one short statement says little. Read the "
    "code side by side below: each definition beside the one of the other student it shares "
    "most with, the lines of the shared fragments highlighted.</p>"
)


def _shown(code: Code, region: dict) -> str:
    """A definition's source lines as text, the matched ones marked."""
    first, last = region["lines"]
    marked = {line for begin, end in region["matched"] for line in range(begin, end + 1)}
    out = []
    for number, line in enumerate(code.lines(region["cell"] - 1)[first - 1 : last], first):
        shown = html.escape(inert.text(line))
        out.append(f"<mark>{shown}</mark>" if number in marked else shown)
    return "\n".join(out)


def _where(region: dict) -> str:
    first, last = region["lines"]
    return html.escape(
        inert.text(f"{region['name']}: cell {region['cell']}, lines {first}-{last}", lines=False)
    )


def to_html(
    class_code: dict,
    pairs: list[dict],
    lab: str,
    top: int = 20,
    not_analysed: list[dict] = (),
) -> str:
    notebooks = sum(len(found) for found in class_code.values())
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">",
        f"<title>Similarity: {html.escape(lab)}</title><style>"
        "body{font-family:sans-serif;max-width:80em;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em;"
        "vertical-align:top;text-align:left}pre{margin:0;white-space:pre-wrap}"
        "mark{background:#fe9}</style></head><body>",
        f"<h1>Similar code in {html.escape(lab)}</h1>",
        EXPLANATION,
        f"<p>{len(class_code)} students ({notebooks} notebooks) compared; the "
        f"{min(top, len(pairs))} highest of {len(pairs)} pairs that share anything are "
        "shown.</p>",
        "<table><tr><th>score</th><th>students</th><th>shared</th></tr>",
    ]
    parts += [
        f"<tr><td>{p['score']:.2f}</td><td>{html.escape(inert.text(p['a']))} &amp; "
        f"{html.escape(inert.text(p['b']))}</td><td>{p['shared']}</td></tr>"
        for p in pairs[:top]
    ]
    parts.append("</table>")
    for pair in pairs[:top]:
        a, b = (html.escape(inert.text(pair[side])) for side in "ab")
        paths = (html.escape(inert.text(pair[f"{side}_notebook"])) for side in "ab")
        parts.append(
            f"<h2>{pair['score']:.2f}: {a} &amp; {b}</h2>"
            f"<table><tr><th>{a}: {next(paths)}</th><th>{b}: {next(paths)}</th></tr>"
        )
        left, right = pair["_code"]
        for region in pair["regions"]:
            parts.append(
                f"<tr><th>{_where(region['a'])}</th><th>{_where(region['b'])}</th></tr>"
                f"<tr><td><pre>{_shown(left, region['a'])}</pre></td>"
                f"<td><pre>{_shown(right, region['b'])}</pre></td></tr>"
            )
        parts.append("</table>")
    parts.append(not_analysed_html(list(not_analysed)))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _notebook(path: Path, limits, every: bool = False) -> tuple[Code | None, str]:
    """A notebook's code and why some of it is not compared ("" when all of it is).

    The barrier around one notebook: whatever it holds, it costs the report that notebook's
    code at most, said in the reason."""
    from normlab.grader.grade import read_code_cells

    try:
        with trap.parse_bounds(limits):
            sources, _ = read_code_cells(path, limits)
            code = code_of(sources, every)
            return code, "; ".join(
                reason for reason in (unanalysed(sources), not_python(code.not_python)) if reason
            )
    except (OSError, ValueError) as error:
        return None, f"not read: {error}"
    except Exception as error:  # noqa: BLE001 -- one notebook never stops the class's report
        return None, f"not analysed: {type(error).__name__} while reading its code"


def not_analysed_html(listed: list[dict]) -> str:
    """The notebooks whose code is not all compared, and why (ids and reasons as text)."""
    if not listed:
        return ""
    rows = "".join(
        f"<tr><td>{html.escape(inert.text(item['student']))}</td>"
        f"<td>{html.escape(inert.text(item['reason']))}</td></tr>"
        for item in listed
    )
    return (
        f"<h2>Not analysed ({len(listed)})</h2><p>The code of these notebooks is not, or not "
        "all, compared: a notebook that is not one, code past the bounds within which the "
        "grader parses a notebook, or a cell that is not Python. What was read is compared; the rest deserves a look by "
        "hand.</p><table><tr><th>student</th><th>why</th></tr>" + rows + "</table>"
    )


def starter_notebook(stem: str, given: str | None) -> tuple[Path | None, list[str]]:
    """The lab's starter notebook whose code is removed from the comparison, and where it was
    looked for: ``given`` (``--starter``), else ``labs/STEM.ipynb`` under the current folder,
    else in the course checkout this ``normlab`` runs from (an editable install's ``src/``
    parent), wherever the report is run."""
    if given:
        return (Path(given) if Path(given).is_file() else None), [given]
    import normlab

    places = [Path("labs")]
    package = Path(normlab.__file__).resolve().parent
    if package.parent.name == "src":
        places.append(package.parent.parent / "labs")
    looked = [str(place / f"{stem}.ipynb") for place in places]
    return next((Path(p) for p in looked if Path(p).is_file()), None), looked


def run(args) -> int:
    """``normlab report similarity SUBMISSIONS... --lab STEM --out DIR``."""
    import sys

    from normlab.grader.grade import UsageError, find_submissions, parse_limit_overrides
    from normlab.grader.registry import all_labs
    from normlab.instructor.report import write_atomically

    if args.lab not in all_labs():
        print(
            f"normlab report similarity: --lab must be one of {', '.join(all_labs())}",
            file=sys.stderr,
        )
        return 2
    try:
        limits = dataclasses.replace(
            DEFAULT, **dict(parse_limit_overrides(getattr(args, "limit", None) or []))
        )
        entries = find_submissions(args.paths, args.lab)
    except UsageError as error:
        print(f"normlab report similarity: {inert.text(error)}", file=sys.stderr)
        return 2
    class_code: dict[str, list[tuple[str, Code]]] = {}
    listed: list[dict] = []
    for entry in entries:
        code, reason = _notebook(entry.path, limits)
        if reason:
            name = entry.student
            if any(item["student"] == name for item in listed) or entry.student in class_code:
                name = f"{name} ({entry.path.name})"  # a second notebook of one student
            listed.append({"student": name, "path": str(entry.path), "reason": reason})
        if code is not None:
            class_code.setdefault(entry.student, []).append((str(entry.path), code))
    starter: set[int] = set()
    stub, looked = starter_notebook(args.lab, args.starter)
    if args.starter and stub is None:
        print(f"normlab report similarity: --starter {args.starter}: no such file", file=sys.stderr)
        return 2
    if stub is None:
        print(
            f"normlab report similarity: warning: no starter notebook of {args.lab} found (looked "
            f"for {' and '.join(looked)}): the code the lab gives is compared as if the students "
            "wrote it; give the lab's notebook with --starter",
            file=sys.stderr,
        )
    else:
        given, _ = _notebook(stub, limits, every=True)
        if given is not None:
            starter = given.every
    pairs = compare(class_code, starter, args.common)
    out = Path(args.out)
    shown = [{k: v for k, v in p.items() if not k.startswith("_")} for p in pairs]
    dumped = json.dumps(
        {
            "lab": args.lab,
            "pairs": shown,
            "not_analysed": listed,
            "starter": None if stub is None else str(stub),
            "fingerprints": {"k": K, "window": WINDOW, "guarantee": GUARANTEE},
        },
        indent=1,
        ensure_ascii=False,
    )
    write_atomically(out / "similarity.json", inert.json_text(dumped + "\n"))
    page = to_html(class_code, pairs, args.lab, args.top, listed)
    write_atomically(out / "similarity.html", page)
    notebooks = sum(len(found) for found in class_code.values())
    print(
        f"compared {len(class_code)} students' code ({notebooks} notebooks) of {args.lab}: "
        f"{len(pairs)} pairs share code"
        + (f"; {len(listed)} not (all) analysed, listed in the report" if listed else "")
    )
    return 0
