"""`normlab report class`: the class report counts what a generated class was built to have.

The class (tests/classbuilder.py, 40 notebooks of lab 04) is graded once for the module; every
expected number comes from how the class was built.
"""

from __future__ import annotations

import csv
import html.parser
import json
import os
import shutil

import pytest
from classbuilder import HOSTILE_ERROR, HOSTILE_ID, build_class
from conftest import check_dict, run_cli

from normlab.grader import results

pytestmark = pytest.mark.isolation


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    out = tmp_path_factory.mktemp("class")
    built = build_class(out / "class")
    assert built.notebooks >= 40
    arguments = ["grade", str(built.folder), "--json", "--jobs", "2", "--no-sandbox"]
    if os.geteuid() == 0:
        arguments.append("--allow-root")  # this Python may not be runnable by nobody here
    code, stdout, stderr = run_cli(arguments)
    assert code == 0, stderr
    (out / "graded.json").write_text(stdout, encoding="utf-8")
    with open(out / "roster.csv", "w", newline="", encoding="utf-8") as stream:
        csv.writer(stream).writerows([["id", "name"], *([who, "x"] for who in built.roster)])
    return built, out


def make_report(out, name="report", roster=True):
    arguments = ["report", "class", str(out / "graded.json"), str(out / name)]
    if roster:
        arguments += ["--roster", str(out / "roster.csv")]
    code, _, stderr = run_cli(arguments)
    assert code == 0, stderr
    folder = out / name
    return json.loads((folder / "class-report.json").read_text(encoding="utf-8")), folder


def test_each_misconception_is_counted_exactly(graded):
    built, out = graded
    summary, _ = make_report(out)
    (lab,) = summary["labs"]
    counted = {probe["name"]: probe["students"] for probe in lab["probes"]}
    assert counted == {name: len(students) for name, students in built.planted.items()}
    hints = {probe["name"]: probe["hint"] for probe in lab["probes"]}
    assert "Put eps inside the root" in hints["eps outside the root"]
    assert all(hints.values())


def test_pass_rates_scores_and_who_is_missing(graded):
    built, out = graded
    summary, _ = make_report(out)
    (lab,) = summary["labs"]
    assert summary["roster"] == len(built.roster)
    # a student handing in twice counts once; the unreadable notebook has no checks
    assert lab["students"] == len(built.students)
    assert lab["submissions"] == built.notebooks
    checks = {c["name"]: c for c in lab["checks"]}
    forward = checks["forward matches torch on random (N, d) inputs"]
    backward_slips = {"RMS treated as a constant", "gamma missing in dx", "dgamma from x"}
    only_backward = {s for p in backward_slips for s in built.planted[p]} - {"two"}
    assert forward["of"] == len(built.students) - len(built.broken - {"syntax"})
    assert forward["passed"] == len(built.correct | only_backward)
    assert lab["scores"]["full_marks"] == len(built.correct)
    assert lab["scores"]["zero"] == len(built.blank) + 1  # the blanks and the unreadable file
    assert sum(n for _, n in lab["scores"]["histogram"]) == len(built.students)
    assert {r["student"] for r in lab["did_not_run"]} == {"junk"}
    slipped = {s for students in built.planted.values() for s in students}
    assert {r["student"] for r in lab["stopped"]} == slipped | {"syntax", HOSTILE_ID}
    assert set(lab["not_submitted"]) == built.absent
    without, _ = make_report(out, "no-roster", roster=False)
    assert without["roster"] is None and without["labs"][0]["not_submitted"] == []


def test_reruns_are_byte_identical_and_need_no_notebook(graded):
    built, out = graded
    _, first = make_report(out, "first")
    saved = {p.name: p.read_bytes() for p in first.iterdir()}
    shutil.move(built.folder, out / "moved")  # nothing is regraded: the notebooks are not read
    try:
        _, second = make_report(out, "second")
    finally:
        shutil.move(out / "moved", built.folder)
    assert {p.name: p.read_bytes() for p in second.iterdir()} == saved
    assert set(saved) == {"class-report.json", "class-report.md", "class-report.html"}


class Tags(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


SAFE_TAGS = {
    *"html head meta title style body h1 h2 h3 p img table tr th td div ul li code br".split(),
}


def test_nothing_a_submission_wrote_becomes_markup(graded):
    _, out = graded
    _, folder = make_report(out)
    page = (folder / "class-report.html").read_text(encoding="utf-8")
    parser = Tags()
    parser.feed(page)
    assert {tag for tag, _ in parser.tags} <= SAFE_TAGS
    images = [attrs for tag, attrs in parser.tags if tag == "img"]
    assert images and all(a["src"].startswith("data:image/png;base64,") for a in images)
    assert not any(name.startswith("on") for _, attrs in parser.tags for name in attrs)
    # nothing to fetch: no link, no source but the inlined images
    assert not any({"href", "action", "srcset"} & set(attrs) for _, attrs in parser.tags)
    # the hostile id and error are shown, as text
    assert HOSTILE_ID.replace("<", "&lt;").replace(">", "&gt;") in page
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page
    markdown = (folder / "class-report.md").read_text(encoding="utf-8")
    assert HOSTILE_ID not in markdown and HOSTILE_ERROR not in markdown
    assert "&lt;img src=x onerror=alert(1)>" in markdown


def test_a_check_keeps_its_probes_through_the_json():
    base = check_dict("c", 0, 1)
    kept = results._check_from_dict({**base, "probes": ["no eps", "eps outside the root"]})
    assert kept.probes == ("no eps", "eps outside the root")
    assert kept.as_dict()["probes"] == ["no eps", "eps outside the root"]
    assert results._check_from_dict(base).probes == ()  # results written before the field
    for wrong in ("no eps", [1], ["a"] * 4, [""]):
        with pytest.raises(ValueError, match="probes"):
            results._check_from_dict({**base, "probes": wrong})
    with pytest.raises(ValueError, match="probes"):  # a passed check matched no misconception
        results._check_from_dict({**check_dict("c", 1, 1), "probes": ["no eps"]})


def test_names_where_the_lms_gave_them_errors_cut_at_a_word_and_a_table_for_a_slide(tmp_path):
    """A Moodle student shows as "Carol Diaz (1234)"; a long error is cut at a word's end;
    the misconception table has three short columns, each hint below it."""
    long_error = "the cell that starts `x = 1` raised ValueError: " + "wordy " * 100
    stopped = check_dict("forward", 2, 2)
    wrong = {**check_dict("backward", 0, 2), "probes": ["no eps"]}
    graded = [
        {
            "path": "Carol Diaz_1234_assignsubmission_file_/04_rmsnorm.ipynb",
            "student": "1234",
            "name": "Carol Diaz",
            "lab": "04_rmsnorm",
            "score": 2,
            "max_score": 4,
            "error": long_error,
            "checks": [stopped, wrong],
        },
        {
            "path": "bob/04_rmsnorm.ipynb",
            "student": "bob",
            "name": "bob",
            "lab": "04_rmsnorm",
            "score": 2,
            "max_score": 4,
            "error": "short",
            "checks": [stopped, wrong],
        },
    ]
    (tmp_path / "graded.json").write_text(json.dumps({"submissions": graded}), encoding="utf-8")
    summary, folder = make_report(tmp_path, roster=False)
    (lab,) = summary["labs"]
    carol, bob = lab["stopped"]
    assert (carol["name"], bob["name"]) == ("Carol Diaz", None)
    assert len(carol["error"]) <= 400 and carol["error"].endswith("wordy…")
    assert long_error.startswith(carol["error"][:-1])
    markdown = (folder / "class-report.md").read_text(encoding="utf-8")
    assert "- Carol Diaz (1234) (Carol Diaz_1234_assignsubmission_file_/04_rmsnorm.ipynb)" in (
        markdown
    )
    assert "- bob (bob/04_rmsnorm.ipynb): short" in markdown
    assert "| misconception | students | checks |" in markdown
    assert "| no eps | 2 | 1 |" in markdown
    assert "- **no eps**: " in markdown and "In: backward (2)." in markdown
    page = (folder / "class-report.html").read_text(encoding="utf-8")
    assert "<td>no eps</td><td class=n>2</td><td class=n>1</td>" in page
    assert "Carol Diaz (1234) <code>" in page
