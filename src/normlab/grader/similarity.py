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

A pair's score is the Jaccard index of the two answers' remaining fingerprints, with
``EVIDENCE`` added to the union: near 1 when they are the same code up to names and layout
(and there is enough of it), near 0 for independent answers. It flags; it does
not accuse (see the page's text).
"""

from __future__ import annotations

import ast
import hashlib
import html
import itertools
import json
from collections import Counter
from pathlib import Path

from normlab.grader import inert, trap

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
            value = item.value
            out.append("S" if isinstance(value, str) else f"C:{value!r}")
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


def answers(sources: list[str], names: list[str]) -> dict[str, list[tuple[str, set[str]]]]:
    """Function name -> its body's statements as (source text, fingerprints), for each of
    ``names`` that the code cells define (the last definition wins, as when they run)."""
    found: dict[str, list[tuple[str, set[str]]]] = {}
    for source in sources:
        try:
            tree = trap.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
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
                local = _local_names(node)
                try:
                    found[node.name] = [
                        (
                            ast.get_source_segment(source, statement) or "",
                            {f"{node.name}:{h}" for h in fingerprints(statement, params, local)},
                        )
                        for statement in body
                    ]
                except RecursionError:  # a tree too deep to walk: nothing to compare
                    found.pop(node.name, None)
    return found


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
    class_answers: dict, pairs: list[dict], lab: str, names: list[str], top: int = 20
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
    parts.append("</body></html>\n")
    return "\n".join(parts)


def run(args) -> int:
    """``normlab report similarity SUBMISSIONS... --lab STEM --out DIR``."""
    import sys

    from normlab.grader.grade import UsageError, find_submissions, read_code_cells
    from normlab.grader.registry import all_labs
    from normlab.grader.report import write_atomically

    if args.lab not in all_labs():
        print(
            f"normlab report similarity: --lab must be one of {', '.join(all_labs())}",
            file=sys.stderr,
        )
        return 2
    lab = all_labs()[args.lab]
    try:
        entries = find_submissions(args.paths, args.lab)
    except UsageError as error:
        print(f"normlab report similarity: {inert.text(error)}", file=sys.stderr)
        return 2
    class_answers: dict[str, dict] = {}
    for entry in entries:
        try:
            sources, _ = read_code_cells(entry.path)
        except (OSError, ValueError):
            continue  # an unreadable notebook has nothing to compare
        found = answers(sources, lab.names)
        if found:
            who = entry.student
            if who in class_answers:  # a second notebook of one student: keep both, apart
                who = f"{who} ({entry.path.name})"
            class_answers[who] = found
    starter: set[str] = set()
    stub = Path(args.starter or Path("labs") / f"{args.lab}.ipynb")
    if stub.is_file():
        sources, _ = read_code_cells(stub)
        for statements in answers(sources, lab.names).values():
            for _, fps in statements:
                starter |= fps
    pairs = compare(class_answers, starter, args.common)
    out = Path(args.out)
    listed = [{k: v for k, v in p.items() if not k.startswith("_")} for p in pairs]
    dumped = json.dumps({"lab": args.lab, "pairs": listed}, indent=1, ensure_ascii=False)
    write_atomically(out / "similarity.json", inert.json_text(dumped + "\n"))
    write_atomically(
        out / "similarity.html", to_html(class_answers, pairs, args.lab, lab.names, args.top)
    )
    print(f"compared {len(class_answers)} notebooks of {args.lab}: {len(pairs)} pairs share code")
    return 0
