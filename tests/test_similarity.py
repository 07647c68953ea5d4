"""`normlab report similarity`: planted copies rank above independent correct answers.

The class is tests/classbuilder.py's (nothing is graded: only the notebooks' source is read).
"""

from __future__ import annotations

import ast
import html.parser
import inspect
import itertools
import json
import sys

import pytest
from classbuilder import COPIES, CORRECT_FORWARD, HOSTILE_ID, build_class
from conftest import run_cli

from normlab.grader import similarity


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
