"""`normlab report similarity`: planted copies rank above independent correct answers.

The class is tests/classbuilder.py's (nothing is graded: only the notebooks' source is read).
"""

from __future__ import annotations

import ast
import html.parser
import inspect
import itertools
import json
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from classbuilder import COPIES, CORRECT_FORWARD, HOSTILE_ID, build_class
from conftest import ROOT, run_cli

from normlab.instructor import similarity


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("similar")
    built = build_class(out / "class")
    # a classmate copies the notebook whose id and code carry markup
    (built.folder / "mallory").mkdir()
    hostile = built.folder / HOSTILE_ID / "04_rmsnorm.ipynb"
    (built.folder / "mallory" / "04_rmsnorm.ipynb").write_bytes(hostile.read_bytes())
    code, _, stderr = run_cli(
        [
            "report",
            "similarity",
            str(built.folder),
            "--lab",
            "04_rmsnorm",
            "--out",
            str(out / "report"),
            "--top",
            "1000",
        ]
    )
    assert code == 0, stderr
    pairs = json.loads((out / "report" / "similarity.json").read_text(encoding="utf-8"))["pairs"]
    return built, out / "report", pairs


def score(pairs, a, b):
    return next((p["score"] for p in pairs if {p["a"], p["b"]} == {a, b}), 0.0)


def test_every_copy_ranks_above_every_independent_pair(compared):
    _, _, pairs = compared
    copies = [score(pairs, copier, original) for copier, (original, _) in COPIES.items()]
    independent = [score(pairs, a, b) for a, b in itertools.combinations(CORRECT_FORWARD, 2)]
    assert len(independent) == 28
    assert min(copies) > max(independent), (copies, max(independent))
    assert min(copies) > 0.5 > 0.2 > max(independent)


def test_the_starter_code_is_not_a_match(compared):
    built, _, pairs = compared
    assert not [p for p in pairs if {p["a"], p["b"]} <= built.blank]


def body_fingerprints(source):
    function = ast.parse(source).body[0]
    found = similarity.answers([source], [function.name])[function.name]
    return set().union(*(fps for _, fps in found))


def test_names_layout_and_order_do_not_change_the_fingerprints():
    first = """
def f(x, eps):
    mean_square = (x**2).mean(axis=-1, keepdims=True)
    scale = 2.0 * eps
    return x / (mean_square + scale)
"""
    second = """
def f(x, eps):
    s = 2.0*eps  # swapped, renamed, re-formatted
    m = (x ** 2).mean(
        axis=-1, keepdims=True)
    return x / (m + s)
"""
    assert body_fingerprints(first) == body_fingerprints(second)
    other = first.replace("axis=-1", "axis=0")
    assert body_fingerprints(first) != body_fingerprints(other)


class Tags(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_the_page_shows_code_and_ids_as_text(compared):
    _, report, pairs = compared
    page = (report / "similarity.html").read_text(encoding="utf-8")
    parser = Tags()
    parser.feed(page)
    allowed = set("html head meta title style body h1 h2 p b code table tr th td pre mark".split())
    assert {tag for tag, _ in parser.tags} <= allowed
    assert not any(name.startswith("on") or name == "src" for _, a in parser.tags for name in a)
    assert score(pairs, HOSTILE_ID, "mallory") > 0  # listed, so shown side by side
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page
    assert "accuses nobody" in page


def test_an_answer_too_deep_to_walk_is_left_out():
    deep = "def f(x):\n    return " + "-" * 400 + "x\n"  # parses (C), too deep to walk here
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 150)
    try:
        found = similarity.answers([deep], ["f"])
    finally:
        sys.setrecursionlimit(limit)
    assert found == {}


# ----------------------------------------------------------------------------- one notebook

SOLUTION_04 = ROOT / "solutions" / "04_rmsnorm.ipynb"


def hostile_class(root, change) -> list[str]:
    """alice and bob hand in the worked solution; carol the solution as ``change`` leaves
    it (a notebook, or bytes written as they are): the report's arguments."""
    for who in ("alice", "bob", "carol"):
        (root / who).mkdir(parents=True)
    for who in ("alice", "bob"):
        shutil.copy(SOLUTION_04, root / who / "04_rmsnorm.ipynb")
    changed = change(nbformat.read(SOLUTION_04, as_version=4))
    target = root / "carol" / "04_rmsnorm.ipynb"
    if isinstance(changed, bytes):
        target.write_bytes(changed)
    else:
        nbformat.write(changed, target)
    return ["report", "similarity", str(root), "--lab", "04_rmsnorm", "--out", str(root / "out")]


def report_of(arguments) -> tuple[dict, str]:
    code, stdout, stderr = run_cli(arguments)
    assert code == 0, stderr
    out = Path(arguments[arguments.index("--out") + 1])
    page = (out / "similarity.html").read_text(encoding="utf-8")
    return json.loads((out / "similarity.json").read_text(encoding="utf-8")), page, stdout


def in_forward(source: str):
    """A change that puts ``source`` first in the body of carol's ``rmsnorm_forward``."""

    def change(notebook):
        (cell,) = [c for c in notebook.cells if c.source.startswith("def rmsnorm_forward")]
        head, _, rest = cell.source.partition("):\n")
        cell.source = f"{head}):\n    {source}\n{rest}"
        return notebook

    return change


def test_a_huge_integer_literal_is_compared_like_any_other_code(tmp_path):
    """An unused hexadecimal literal of 4,000 digits in carol's copy: the report is written, and
    carol's copy is compared (Python writes no integer of more than 4,300 decimal digits)."""
    literal = "0x" + "f" * 4000
    report, page, _ = report_of(hostile_class(tmp_path, in_forward(f"unused = {literal}")))
    assert report["not_analysed"] == []
    assert {frozenset((p["a"], p["b"])) for p in report["pairs"]} == {
        frozenset(pair) for pair in itertools.combinations(("alice", "bob", "carol"), 2)
    }
    assert f"unused = {literal}" in page  # carol's statement, shown beside alice's


def test_a_notebook_that_is_not_one_is_listed_and_the_class_reported(tmp_path):
    report, page, stdout = report_of(hostile_class(tmp_path, lambda _: b'{"cells": [ broken'))
    assert [(p["a"], p["b"]) for p in report["pairs"]] == [("alice", "bob")]
    (listed,) = report["not_analysed"]
    assert listed["student"] == "carol"
    assert listed["reason"].startswith("not read: not a valid notebook: broken JSON at line 1")
    assert "Not analysed (1)" in page and "1 not (all) analysed" in stdout


def test_a_function_past_the_token_bounds_is_listed_and_never_parsed(tmp_path, monkeypatch):
    """carol's rmsnorm_forward holds 60,000 statements ``a;`` (120,000 tokens, past
    max_cell_tokens): its cell is never parsed, carol is listed, and the rest of her notebook
    (an earlier cell defines the function too) and the class are compared."""
    from normlab.grader import trap

    parsed = []

    def counted(source, *args, **kwargs):
        parsed.append(len(source))
        return trap.parse.unlocked(source, *args, **kwargs)

    monkeypatch.setattr(trap, "_ast_parse", counted)

    def change(notebook):
        notebook.cells.append(
            nbformat.v4.new_code_cell(
                "def rmsnorm_forward(x, gamma, eps):\n    " + "a;" * 60_000 + "\n    return x\n"
            )
        )
        return notebook

    report, _, _ = report_of(hostile_class(tmp_path, change))
    (listed,) = report["not_analysed"]
    assert listed["student"] == "carol"
    cells = [c for c in nbformat.read(SOLUTION_04, as_version=4).cells if c.cell_type == "code"]
    assert listed["reason"].startswith(f"code cell {len(cells) + 1}: a cell too large or deep")
    assert parsed and max(parsed) < 120_000  # the big cell never reached the parser
    assert {frozenset((p["a"], p["b"])) for p in report["pairs"]} == {
        frozenset(pair) for pair in itertools.combinations(("alice", "bob", "carol"), 2)
    }


def traced_lines(function, *args) -> int:
    """How many lines of Python ``function(*args)`` executes (what it does in C is not seen)."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        count += 1
        return tracer

    sys.settrace(tracer)
    try:
        function(*args)
    finally:
        sys.settrace(None)
    return count


def test_the_work_of_the_report_is_linear_in_the_code():
    """A function of n statements on one line (``a;a;...``, within the token bounds): four
    times the statements cost at most five times the lines of Python run, from parse to page
    (counted, not timed). ``ast.get_source_segment`` splits the whole source again for each
    statement: sixteen times."""

    def report(n: int) -> None:
        source = "def f(x):\n    " + "a;" * n + "\n    return x\n"
        found = similarity.answers([source], ["f"])
        assert len(found["f"]) == n + 1
        class_answers = {"one": found, "two": found}
        pairs = similarity.compare(class_answers, set())
        similarity.to_html(class_answers, pairs, "lab", ["f"])

    small, large = traced_lines(report, 200), traced_lines(report, 800)
    assert large < 5 * small, (small, large)


def test_a_statement_is_shown_as_written_whatever_its_characters():
    source = "def f(x):\n    s = 'é…😀'; t = x  # née\n    return s, t\r\n"
    found = similarity.answers([source], ["f"])
    assert [text for text, _ in found["f"]] == ["s = 'é…😀'", "t = x", "return s, t"]


def test_the_token_bounds_of_limit_are_the_ones_used(tmp_path):
    """``--limit max_cell_tokens=20``: every cell of more than 20 tokens (each function's) is
    not parsed, so all three notebooks are listed and no pair shares anything."""
    arguments = hostile_class(tmp_path, lambda notebook: notebook)
    report, _, _ = report_of([*arguments, "--limit", "max_cell_tokens=20"])
    assert report["pairs"] == []
    assert [item["student"] for item in report["not_analysed"]] == ["alice", "bob", "carol"]
    assert all("a cell too large or deep" in item["reason"] for item in report["not_analysed"])


def test_the_starter_code_is_found_from_any_folder(tmp_path, monkeypatch):
    """Two students who hand in the lab as given share only its code: no pair, whether the
    report runs in the course checkout or anywhere else (from elsewhere the starter was once
    not found, and the blank labs were reported as copies of each other)."""
    for student in ("ann", "bo"):
        (tmp_path / "class" / student).mkdir(parents=True)
        shutil.copy(ROOT / "labs" / "04_rmsnorm.ipynb", tmp_path / "class" / student)
    monkeypatch.chdir(tmp_path)
    arguments = ["report", "similarity", "class", "--lab", "04_rmsnorm", "--out", "out"]
    code, _, stderr = run_cli(arguments)
    assert code == 0, stderr
    report = json.loads((tmp_path / "out" / "similarity.json").read_text(encoding="utf-8"))
    assert report["pairs"] == []
    assert Path(report["starter"]).resolve() == (ROOT / "labs" / "04_rmsnorm.ipynb").resolve()
    assert "no starter notebook" not in stderr

    # Without the course's labs, the report says what it could not remove.
    monkeypatch.setattr(similarity, "starter_notebook", lambda stem, given: (None, ["x.ipynb"]))
    code, _, stderr = run_cli(arguments)
    assert code == 0, stderr
    report = json.loads((tmp_path / "out" / "similarity.json").read_text(encoding="utf-8"))
    assert [(p["a"], p["b"]) for p in report["pairs"]] == [("ann", "bo")]
    assert report["starter"] is None
    assert "no starter notebook of 04_rmsnorm found (looked for x.ipynb)" in stderr


def test_a_starter_given_that_is_not_there_is_refused(tmp_path):
    (tmp_path / "ann").mkdir()
    shutil.copy(ROOT / "labs" / "04_rmsnorm.ipynb", tmp_path / "ann")
    code, _, stderr = run_cli(
        ["report", "similarity", str(tmp_path), "--lab", "04_rmsnorm", "--out", str(tmp_path)]
        + ["--starter", str(tmp_path / "missing.ipynb")]
    )
    assert code == 2 and "missing.ipynb: no such file" in stderr
