"""`normlab report similarity`: planted copies rank above independent correct answers.

The class is tests/classbuilder.py's (nothing is graded: only the notebooks' source is read).
"""

from __future__ import annotations

import html.parser
import inspect
import itertools
import json
import shutil
import sys
from pathlib import Path

import classbuilder
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
    assert min(copies) > max(independent) + 0.15, (copies, max(independent))


def test_the_starter_code_is_not_a_match(compared):
    built, _, pairs = compared
    assert not [p for p in pairs if {p["a"], p["b"]} <= built.blank]


def body_fingerprints(source):
    return set(similarity.code_of([source]).where)


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
        found = similarity.code_of([deep])
    finally:
        sys.setrecursionlimit(limit)
    assert found.units == [] and found.where == {}


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
    """A function of n statements on one line (``a+=x;a+=x;...``, within the token bounds):
    four times the statements cost at most five times the lines of Python run, from parse to
    page (counted, not timed), though every statement has the same fingerprint."""

    def report(n: int) -> None:
        source = "def f(x):\n    a = 0\n    " + "a+=x;" * n + "\n    return a\n"
        found = similarity.code_of([source])
        assert len(found.where) == 3 and len(found.units) == 1  # def, a = 0, a += x
        class_code = {"one": [("one.ipynb", found)], "two": [("two.ipynb", found)]}
        pairs = similarity.compare(class_code, set())
        assert [(p["a"], p["b"], p["score"] > 0.4) for p in pairs] == [("one", "two", True)]
        similarity.to_html(class_code, pairs, "lab")

    small, large = traced_lines(report, 200), traced_lines(report, 800)
    assert large < 5 * small, (small, large)


def test_a_line_is_shown_as_written_whatever_its_characters():
    source = "def f(x):\n    s = 'é…😀'; t = x * 2.5 + 1  # née\n    return s, t\r\n"
    found = similarity.code_of([source])
    class_code = {"one": [("one.ipynb", found)], "two": [("two.ipynb", found)]}
    pairs = similarity.compare(class_code, set())
    page = similarity.to_html(class_code, pairs, "lab")
    assert "<mark>    s = &#x27;é…😀&#x27;; t = x * 2.5 + 1  # née</mark>" in page
    assert "<mark>    return s, t</mark>" in page


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


# ----------------------------------------------------------------------------- disguised copies

SIMILAR = {
    "03_layernorm": classbuilder.lab03_class,
    "06_pre_post_ln": classbuilder.lab06_class,
    "09_modern_norms": classbuilder.lab09_class,
    "11_triton_kernels": classbuilder.lab11_class,
}


@pytest.fixture(scope="module", params=sorted(SIMILAR))
def similar(request, tmp_path_factory):
    """A lab's class of independent and copied code, and its report (every pair)."""
    built = SIMILAR[request.param]()
    out = tmp_path_factory.mktemp(request.param)
    built.save(out / "class")
    arguments = ["report", "similarity", out / "class", "--lab", built.stem, "--out", out]
    report, page, _ = report_of([*map(str, arguments), "--top", "1000"])
    return built, report, page


def student(shown: str) -> str:
    """The student of a name in the report (a second notebook may be shown as ``who (file)``)."""
    return shown.split(" (")[0]


def best_score(report, a, b) -> float:
    found = [p["score"] for p in report["pairs"] if {student(p["a"]), student(p["b"])} == {a, b}]
    return max(found, default=0.0)


def test_every_disguised_copy_ranks_above_every_independent_pair(similar):
    """Each lab's class: students who wrote the lab alone in different styles (plain, a class,
    autograd.Function, CS231n-style helpers behind adapters two of them write alike,
    one-liners, match statements, Triton kernels), and copies disguised as the issue measured
    them: code moved into helpers, parameters renamed, 40 dead statements, definitions under
    ``if True:``, statements and methods reordered, comments and formatting, a verbatim copy
    handed in with two drafts, lab 09's students' functions behind the lab's wrappers. Every
    copy scores above every pair of students whose code has no copy in common."""
    built, report, _ = similar
    family = {who: built.copied.get(who, who) for who in built.notebooks}
    planted = {(copier, original): best_score(report, copier, original)
               for copier, original in built.copied.items()}  # fmt: skip
    independent = {
        (a, b): best_score(report, a, b)
        for a, b in itertools.combinations(sorted(built.notebooks), 2)
        if family[a] != family[b]
    }
    assert len(independent) >= 8
    assert min(planted.values()) > max(independent.values()), (planted, independent)


def test_a_copy_is_shown_beside_its_original_definition_by_definition(similar):
    """The JSON names, for each copy, the definitions on both sides that share code, with line
    ranges inside them; the page shows them side by side with the shared lines marked."""
    built, report, page = similar
    for copier, original in built.copied.items():
        (pair,) = [p for p in report["pairs"] if {p["a"], p["b"]} == {copier, original}]
        assert pair["regions"], pair
        for region in pair["regions"]:
            for side in (region["a"], region["b"]):
                first, last = side["lines"]
                assert all(first <= begin <= end <= last for begin, end in side["matched"])
        assert pair["shared"] >= sum(region["shared"] for region in pair["regions"]) / 2
    assert page.count("<mark>") >= 2 * len(built.copied)
    parser = Tags()
    parser.feed(page)
    allowed = set("html head meta title style body h1 h2 p b code table tr th td pre mark".split())
    assert {tag for tag, _ in parser.tags} <= allowed


def test_code_moved_into_a_helper_is_paired_with_the_code_it_was(tmp_path):
    """hal moved ada's forward pass into ``_forward_core``: the report pairs that helper with
    ada's ``layernorm_forward``, and marks on both sides the line that computes the variance
    (the same statement in both; the docstring that only ada's holds is not marked)."""
    built = classbuilder.lab03_class()
    built.save(tmp_path / "class")
    arguments = ["report", "similarity", tmp_path / "class", "--lab", built.stem]
    report, page, _ = report_of([*map(str, arguments), "--out", str(tmp_path / "out")])
    (pair,) = [p for p in report["pairs"] if {p["a"], p["b"]} == {"ada", "hal"}]
    names = {
        frozenset({(pair["a"], region["a"]["name"]), (pair["b"], region["b"]["name"])})
        for region in pair["regions"]
    }
    assert frozenset({("ada", "layernorm_forward"), ("hal", "_forward_core")}) in names
    assert frozenset({("ada", "layernorm_backward"), ("hal", "_backward_core")}) in names
    shown = page[page.index(f"<h2>{pair['score']:.2f}: ada &amp; hal</h2>") :]
    shown = shown[: shown.index("</table>")]
    assert shown.count("<mark>    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)</mark>") == 2
    assert "<mark>    &quot;&quot;&quot;LayerNorm over the last axis of x." not in shown


def definition_fingerprints(*sources: str) -> set:
    return set(similarity.code_of(list(sources)).where)


ORIGINAL = """
def forward(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    x_hat = (x - mu) / np.sqrt(var + eps)
    return gamma * x_hat + beta
"""


def test_renaming_wrapping_dead_code_and_order_leave_the_fingerprints_as_they_were():
    renamed = classbuilder.rename(
        {"forward": "f", "x": "inp", "gamma": "g", "beta": "b", "eps": "e", "mu": "m"}
    )(ORIGINAL)
    wrapped = classbuilder.under_if_true(ORIGINAL)
    dead = classbuilder.with_dead_statements(40)(ORIGINAL)
    assert len(dead.splitlines()) == len(ORIGINAL.splitlines()) + 40
    reordered = ORIGINAL.replace(
        "    mu = x.mean(axis=-1, keepdims=True)\n", "    unused = 1\n"
    ).replace("def forward(x, gamma, beta, eps=1e-5):\n", "def forward(x, gamma, beta, eps=1e-5):\n    mu = x.mean(axis=-1, keepdims=True)\n")  # fmt: skip
    reformatted = classbuilder.formatted(ORIGINAL)
    expected = definition_fingerprints(ORIGINAL)
    for disguised in (renamed, wrapped, dead, reordered, reformatted):
        assert definition_fingerprints(disguised) == expected, disguised
    assert definition_fingerprints("import numpy as xp\n", ORIGINAL.replace("np.", "xp.")) == (
        definition_fingerprints("import numpy as np\n", ORIGINAL)
    )
    # what changes the computation changes the fingerprints
    assert definition_fingerprints(ORIGINAL.replace("axis=-1", "axis=0")) != expected
    assert definition_fingerprints(ORIGINAL.replace(".mean(", ".sum(")) != expected


def test_a_students_drafts_never_make_their_code_common():
    """Four students in all: zed hands in three drafts of ann's code. Counted per notebook,
    the code would be in four of them (more than the 3 that ``common`` allows at least) and
    ignored; counted per student, it is in two, and the pair is found."""
    code = similarity.code_of([ORIGINAL])
    other = similarity.code_of(
        ["def g(a, b):\n    total = (a @ b.T).sum(axis=0)\n    return total"]
    )
    class_code = {
        "ann": [("ann.ipynb", code)],
        "zed": [(f"zed{i}.ipynb", code) for i in range(3)],
        "bob": [("bob.ipynb", other)],
        "cid": [("cid.ipynb", other)],
    }
    pairs = similarity.compare(class_code, set())
    assert (pairs[0]["a"], pairs[0]["b"], pairs[0]["score"] > 0.6) == ("ann", "zed", True)
    assert pairs[0]["a_share"] == pairs[0]["b_share"] == 1.0


def test_code_the_whole_class_holds_costs_no_pair():
    """Every student hands in one function: its fingerprints are common and never paired, so
    four times the class costs about four times the lines of Python, not sixteen (counted, not
    timed; pairing every holder of a fingerprint would cost the square)."""
    code = similarity.code_of([ORIGINAL])

    def report(students: int) -> None:
        class_code = {f"s{i:04d}": [(f"{i}.ipynb", code)] for i in range(students)}
        assert similarity.compare(class_code, set()) == []

    small, large = traced_lines(report, 100), traced_lines(report, 400)
    assert large < 5 * small, (small, large)


def test_a_decorated_definition_is_shown_from_its_decorator():
    source = "@triton.jit\ndef kernel(X, N):\n    return tl.program_id(0) * N + tl.arange(0, 8)\n"
    code = similarity.code_of([source])
    assert code.units == [(0, 1, 3, "kernel")]
    class_code = {"one": [("one.ipynb", code)], "two": [("two.ipynb", code)]}
    (pair,) = similarity.compare(class_code, set())
    (region,) = pair["regions"]
    assert region["a"]["matched"] == [[1, 3]]


def test_a_table_of_lambdas_is_compared_like_a_function():
    source = (
        'RULES = {\n    "pre": lambda x, f: x + f(x * 2),\n    "post": lambda x, f: f(x) - x,\n}\n'
    )
    code = similarity.code_of(["x = 1\n", source])
    assert code.units == [(1, 1, 4, "RULES")]
    assert code.where


def test_a_chain_of_unused_assignments_dies_whole_and_a_class_attribute_lives():
    chain = ORIGINAL.replace(
        "    return gamma",
        "    first = x * 3 + mu\n    second = np.sqrt(first) - var\n    third = second.sum()\n"
        "    print(third)\n    return gamma",
    )
    assert definition_fingerprints(chain) == definition_fingerprints(ORIGINAL)
    read = (
        "class Norm:\n    scale = 2.5 * 4\n\n    def f(self, x):\n        return x * self.scale\n"
    )
    unread = read.replace("self.scale", "self.other")
    assert len(definition_fingerprints(read)) > len(definition_fingerprints(unread))


def test_a_cell_with_ipython_syntax_is_compared():
    """``%%time`` on a cell and ``!echo`` inside a function (IPython's syntax, not Python's)
    hide nothing: the cell is read with those lines as ``pass``, its lines numbered as
    written."""
    magic = "%%time\n" + ORIGINAL.replace("    return", "    !echo done\n    return")
    assert (
        similarity.code_of([magic.replace("\n", "\r")]).where == similarity.code_of([magic]).where
    )
    code = similarity.code_of([magic])
    assert set(code.where) == definition_fingerprints(ORIGINAL)
    assert [(cell, first, last) for cell, first, last, _ in code.units] == [(0, 3, 8)]
    assert similarity.code_of(["%%bash\nls -l $HOME\n"]).units == []


def test_a_cell_that_is_not_python_is_listed(tmp_path):
    """carol's notebook gains a cell that is not Python (nor IPython): she is listed, and the
    rest of her notebook is compared."""

    def change(notebook):
        notebook.cells.append(nbformat.v4.new_code_cell("def broken(:\n    return 1\n"))
        return notebook

    report, _, _ = report_of(hostile_class(tmp_path, change))
    (listed,) = report["not_analysed"]
    cells = [c for c in nbformat.read(SOLUTION_04, as_version=4).cells if c.cell_type == "code"]
    assert listed["student"] == "carol"
    assert listed["reason"].startswith(f"code cell {len(cells) + 1}: not Python (a syntax error")
    assert {frozenset((p["a"], p["b"])) for p in report["pairs"]} == {
        frozenset(pair) for pair in itertools.combinations(("alice", "bob", "carol"), 2)
    }


@pytest.mark.parametrize("stem", sorted(path.stem for path in (ROOT / "labs").glob("*.ipynb")))
def test_in_every_lab_two_copies_of_the_worked_solution_are_a_pair(stem, tmp_path):
    """alice and bob hand in the worked solution, carol the lab as given: whatever the lab's
    students write (functions behind the lab's wrappers, classes, kernels), alice and bob are
    the one pair, near 1, and carol shares nothing."""
    for who, source in (("alice", "solutions"), ("bob", "solutions"), ("carol", "labs")):
        (tmp_path / who).mkdir()
        shutil.copy(ROOT / source / f"{stem}.ipynb", tmp_path / who)
    arguments = ["report", "similarity", str(tmp_path), "--lab", stem, "--out", str(tmp_path)]
    report, _, _ = report_of(arguments)
    assert [(p["a"], p["b"], p["score"] > 0.8) for p in report["pairs"]] == [("alice", "bob", True)]
