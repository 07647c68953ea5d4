"""The similarity report: which pairs of a class's answers share unusually much code.

Only what a student writes is compared: the bodies of the lab's functions (the names the
lab's checks use), read from the notebook's source with ``ast`` (no code runs). Each body is
normalised by its syntax tree, so that comments, formatting, quotes and the names of local
variables do not count: a local name becomes ``V``, the function's parameters, modules and
attributes stay (``np.sqrt``, ``axis=-1`` carry the method). Each top-level statement is
fingerprinted on its own, as the hashes of its k-grams of tokens (all of them: an answer is a
few lines, where winnowing's sampling, which exists to save space on long documents, would
only lose matches), so a reordered body keeps its fingerprints. Fingerprints of the lab's
starter code, and fingerprints that more than ``common`` of the class share (MOSS's rule: what
many write is how the problem is solved, not copying), are ignored.

The notebooks are parsed as ``normlab grade`` parses them (``trap.parse_cells``, within the
token bounds ``Limits.max_cell_tokens`` and ``Limits.max_code_tokens``), and the rest of the
work is linear in the code read. A notebook that cannot be read, or a cell past those bounds, is
listed in the report as not analysed (the cell's answers are not compared; a copy hidden in
such a cell is itself worth a look), and the rest of the class is reported.

A pair's score is the Jaccard index of the two answers' remaining fingerprints, with
``EVIDENCE`` added to the union: near 1 when they are the same code up to names and layout
(and there is enough of it), near 0 for independent answers. It flags; it does
not accuse (see the page's text).
"""

from __future__ import annotations

import ast
import bisect
import hashlib
import html
import itertools
import json
import re
from collections import Counter
from pathlib import Path

from normlab.grader import inert, trap
from normlab.grader.isolation.limits import DEFAULT

K = 5  # tokens per fingerprint: about one short sub-expression
# added to a pair's union: two answers that share a couple of fragments and have nothing else
# left (their rest is common code) score low, as their little evidence deserves
EVIDENCE = 5


def _tokens(node: ast.AST, params: set[str], local: set[str]) -> list[str]:
    out: list[str] = []

    def walk(item):
        if isinstance(item, ast.Name):
            out.append("V" if item.id in local else f"N:{item.id}")
            return
        if isinstance(item, ast.Constant):
            out.append(_constant(item.value))
            return
        if isinstance(item, ast.expr_context):
            return
        out.append(type(item).__name__)
        if isinstance(item, ast.Attribute):
            walk(item.value)
            out.append(f"A:{item.attr}")
            return
        if isinstance(item, ast.keyword):
            out.append(f"K:{item.arg}")
            walk(item.value)
            return
        for child in ast.iter_child_nodes(item):
            walk(child)

    walk(node)
    return out


def _constant(value: object) -> str:
    """A constant's token. An integer is written in hexadecimal: Python refuses to write one
    of more than 4300 decimal digits (``sys.int_info.default_max_str_digits``), and a literal of
    that size is a student's to write."""
    if isinstance(value, str):
        return "S"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"C:{value:#x}"
    return f"C:{value!r}"


def _hash(tokens: list[str]) -> str:
    return hashlib.sha256("\x1f".join(tokens).encode()).hexdigest()[:16]


def fingerprints(statement: ast.stmt, params: set[str], local: set[str]) -> set[str]:
    """The hashes of a statement's k-grams of normalised tokens (one hash if it is shorter)."""
    tokens = _tokens(statement, params, local)
    if len(tokens) <= K:
        return {_hash(tokens)}
    return {_hash(tokens[i : i + K]) for i in range(len(tokens) - K + 1)}


def _local_names(function: ast.FunctionDef) -> set[str]:
    params = {a.arg for a in function.args.args + function.args.kwonlyargs}
    stored = {
        node.id
        for node in ast.walk(function)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    }
    return stored - params


class _Segments:
    """The source text of a node of a tree parsed from ``source``, in time linear in the
    source over all the nodes asked for (``ast.get_source_segment`` splits the whole source
    again for each node: quadratic over a function of many statements). Lines are split as the
    parser splits them; a line's columns, which ``ast`` gives in UTF-8 bytes, are mapped to
    characters once, for a line that is not ASCII."""

    def __init__(self, source: str):
        self.source = source
        self.starts = [0] + [match.end() for match in re.finditer(r"\r\n|\r|\n", source)]
        self.columns: dict[int, list[int] | None] = {}

    def _offset(self, lineno: int, column: int) -> int:
        start = self.starts[lineno - 1]
        if lineno not in self.columns:
            end = self.starts[lineno] if lineno < len(self.starts) else len(self.source)
            line = self.source[start:end]
            self.columns[lineno] = (
                None
                if line.isascii()
                else list(
                    itertools.accumulate(
                        (len(c.encode("utf-8", "surrogatepass")) for c in line), initial=0
                    )
                )
            )
        widths = self.columns[lineno]
        return start + (column if widths is None else bisect.bisect_left(widths, column))

    def text(self, node: ast.AST) -> str:
        if (
            getattr(node, "end_lineno", None) is None
            or getattr(node, "end_col_offset", None) is None
        ):
            return ""
        begin = self._offset(node.lineno, node.col_offset)
        return self.source[begin : self._offset(node.end_lineno, node.end_col_offset)]


def answers(sources: list[str], names: list[str]) -> dict[str, list[tuple[str, set[str]]]]:
    """Function name -> its body's statements as (source text, fingerprints), for each of
    ``names`` that the code cells define (the last definition wins, as when they run).

    The cells are parsed as the grader parses them (``trap.parse_cells``, within this thread's
    token bounds, ``trap.parse_bounds``); a cell past them (``unanalysed``) is not read."""
    found: dict[str, list[tuple[str, set[str]]]] = {}
    for source, tree in zip(sources, trap.parse_cells(tuple(sources)), strict=True):
        if not isinstance(tree, ast.Module):
            continue  # a syntax error, or past the bounds
        segments = _Segments(source)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                body = node.body
                if (
                    body
                    and isinstance(body[0], ast.Expr)
                    and isinstance(getattr(body[0], "value", None), ast.Constant)
                ):
                    body = body[1:]  # the docstring is the lab's
                params = {a.arg for a in node.args.args + node.args.kwonlyargs}
                try:
                    local = _local_names(node)
                    found[node.name] = [
                        (
                            segments.text(statement),
                            {f"{node.name}:{h}" for h in fingerprints(statement, params, local)},
                        )
                        for statement in body
                    ]
                except RecursionError:  # a tree too deep to walk: nothing to compare
                    found.pop(node.name, None)
    return found


def unanalysed(sources: list[str]) -> str:
    """Why some of a notebook's code is not compared ("" when all of it is): its cells past the
    grader's token bounds, or too deep to parse (``trap.unanalysable_cells``)."""
    cells = trap.unanalysable_cells(sources)
    if not cells:
        return ""
    numbers = ", ".join(str(index + 1) for index in cells)
    return (
        f"code cell{'s' if len(cells) > 1 else ''} {numbers}: {trap.UNANALYSABLE} (past the "
        "grader's bounds max_cell_tokens or max_code_tokens, or nested too deeply); the answers "
        "in them are not compared"
    )


def compare(
    class_answers: dict[str, dict[str, list[tuple[str, set[str]]]]],
    starter: set[str],
    common: float = 0.25,
) -> list[dict]:
    """Every pair of students ranked by score, with the statements they share.

    ``class_answers``: student -> ``answers(...)``; ``starter``: fingerprints to ignore;
    ``common``: ignore a fingerprint that more than this fraction of the class (and at least
    3 students) has.
    """
    sets = {
        who: set().union(*(fp for statements in found.values() for _, fp in statements))
        for who, found in class_answers.items()
    }
    counts = Counter(fp for fps in sets.values() for fp in fps)
    limit = max(3, common * len(sets))
    ignored = starter | {fp for fp, n in counts.items() if n > limit}
    kept = {who: fps - ignored for who, fps in sets.items()}
    pairs = []
    for a, b in itertools.combinations(sorted(kept), 2):
        shared = kept[a] & kept[b]
        union = kept[a] | kept[b]
        if not shared:
            continue
        pairs.append(
            {
                "a": a,
                "b": b,
                "score": round(len(shared) / (len(union) + EVIDENCE), 4),
                "shared": len(shared),
                "_shared": shared,
            }
        )
    pairs.sort(key=lambda p: (-p["score"], p["a"], p["b"]))
    return pairs


# ----------------------------------------------------------------------------- the page

EXPLANATION = (
    "<p>This page flags pairs of answers to look at; it accuses nobody. A from-scratch norm is "
    "a few lines, and there are only so many ways to write <code>x / sqrt(mean(x**2) + eps)"
    "</code>: two students who never met often write the same statement, and the worked "
    "examples of the course push everyone towards the same form. So the comparison ignores the "
    "starter code and every fragment that more than a quarter of the class wrote, and it "
    "ignores names, comments and layout.</p>"
    "<p><b>How to read a score.</b> It is the share of the two answers' remaining fragments "
    "that they have in common (0 to 1; a pair with only a few fragments left scores lower, "
    "since a few fragments are little evidence). Near 1: the same code up to names and layout, which "
    "is worth a conversation, not a verdict (the students may have worked together as "
    "allowed, or both adapted one public example). A pair that only shares one short "
    "statement says little. Read the code side by side below: the statements they share are "
    "highlighted.</p>"
)


def _side(statements: list[tuple[str, set[str]]], shared: set[str]) -> str:
    lines = []
    for text, fps in statements:
        shown = html.escape(inert.text(text))
        lines.append(f"<mark>{shown}</mark>" if fps & shared else shown)
    return "\n".join(lines)


def to_html(
    class_answers: dict,
    pairs: list[dict],
    lab: str,
    names: list[str],
    top: int = 20,
    not_analysed: list[dict] = (),
) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">",
        f"<title>Similarity: {html.escape(lab)}</title><style>"
        "body{font-family:sans-serif;max-width:70em;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em;"
        "vertical-align:top}pre{margin:0;white-space:pre-wrap}mark{background:#fe9}"
        "</style></head><body>",
        f"<h1>Similar answers in {html.escape(lab)}</h1>",
        EXPLANATION,
        f"<p>{len(class_answers)} notebooks compared; the {min(top, len(pairs))} highest of "
        f"{len(pairs)} pairs that share anything are shown.</p>",
        "<table><tr><th>score</th><th>students</th></tr>",
    ]
    parts += [
        f"<tr><td>{p['score']:.2f}</td><td>{html.escape(inert.text(p['a']))} &amp; "
        f"{html.escape(inert.text(p['b']))}</td></tr>"
        for p in pairs[:top]
    ]
    parts.append("</table>")
    for pair in pairs[:top]:
        a, b = pair["a"], pair["b"]
        parts.append(
            f"<h2>{pair['score']:.2f}: {html.escape(inert.text(a))} &amp; "
            f"{html.escape(inert.text(b))}</h2><table>"
        )
        for name in names:
            left = class_answers[a].get(name, [])
            right = class_answers[b].get(name, [])
            if not left and not right:
                continue
            parts.append(
                f"<tr><th colspan=2>{html.escape(name)}</th></tr><tr>"
                f"<td><pre>{_side(left, pair['_shared'])}</pre></td>"
                f"<td><pre>{_side(right, pair['_shared'])}</pre></td></tr>"
            )
        parts.append("</table>")
    parts.append(not_analysed_html(list(not_analysed)))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _notebook(path: Path, names: list[str], limits) -> tuple[dict, str]:
    """A notebook's answers and why some of its code is not compared ("" when all of it is).

    The barrier around one notebook: whatever it holds, it costs the report that notebook's
    answers at most, said in the reason."""
    from normlab.grader.grade import read_code_cells

    try:
        with trap.parse_bounds(limits):
            sources, _ = read_code_cells(path, limits)
            return answers(sources, names), unanalysed(sources)
    except (OSError, ValueError) as error:
        return {}, f"not read: {error}"
    except Exception as error:  # noqa: BLE001 -- one notebook never stops the class's report
        return {}, f"not analysed: {type(error).__name__} while reading its code"


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
        "all, compared: a notebook that is not one, or code past the bounds within which the "
        "grader parses a notebook. What was read is compared; the rest deserves a look by "
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
    import dataclasses
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
    lab = all_labs()[args.lab]
    try:
        limits = dataclasses.replace(
            DEFAULT, **dict(parse_limit_overrides(getattr(args, "limit", None) or []))
        )
        entries = find_submissions(args.paths, args.lab)
    except UsageError as error:
        print(f"normlab report similarity: {inert.text(error)}", file=sys.stderr)
        return 2
    class_answers: dict[str, dict] = {}
    listed: list[dict] = []
    for entry in entries:
        found, reason = _notebook(entry.path, lab.names, limits)
        who = entry.student
        if who in class_answers or any(item["student"] == who for item in listed):
            who = f"{who} ({entry.path.name})"  # a second notebook of one student: kept apart
        if reason:
            listed.append({"student": who, "path": str(entry.path), "reason": reason})
        if found:
            class_answers[who] = found
    starter: set[str] = set()
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
        found, _ = _notebook(stub, lab.names, limits)
        for statements in found.values():
            for _, fps in statements:
                starter |= fps
    pairs = compare(class_answers, starter, args.common)
    out = Path(args.out)
    shown = [{k: v for k, v in p.items() if not k.startswith("_")} for p in pairs]
    dumped = json.dumps(
        {
            "lab": args.lab,
            "pairs": shown,
            "not_analysed": listed,
            "starter": None if stub is None else str(stub),
        },
        indent=1,
        ensure_ascii=False,
    )
    write_atomically(out / "similarity.json", inert.json_text(dumped + "\n"))
    page = to_html(class_answers, pairs, args.lab, lab.names, args.top, listed)
    write_atomically(out / "similarity.html", page)
    print(
        f"compared {len(class_answers)} notebooks of {args.lab}: {len(pairs)} pairs share code"
        + (f"; {len(listed)} not (all) analysed, listed in the report" if listed else "")
    )
    return 0
