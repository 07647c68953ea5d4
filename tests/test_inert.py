"""What a student wrote reaches the instructor as data: never a formula, a terminal control,
markup, another student's folder or a merge that writes half a gradebook."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import unicodedata
from pathlib import Path

import markdown_it
import mistune
import nbformat
import pytest
from conftest import ROOT, run_cli_process

from normlab.grader.core import CheckResult
from normlab.grader.grade import find_submissions
from normlab.grader.results import SubmissionResult
from normlab.instructor import lms, report

SOLUTION = ROOT / "solutions" / "03_layernorm.ipynb"
LAB = ROOT / "labs" / "03_layernorm.ipynb"

# The attacks, as a red team wrote them.
OSC52 = "\x1b]52;c;cHduZWQ=\x07"  # writes "pwned" to the instructor's clipboard
CLEAR = "\x1b[2J\x1b[H"  # clears the screen
TITLE = "\x1b]0;all graded: 16/16\x07"  # sets the window title
CSI_C1 = "\x9b2J"  # the same clear as one C1 character
BIDI = "\u202eecilA"  # shows as "Alice"
FORMULAS = ["=1+1", "+1+1", "-1+1", "@SUM(1+1)", '=HYPERLINK("http://evil.example","x")']
HTML = '<script>alert(1)</script><img src=x onerror="alert(2)">'
BEACON = "![b](http://evil.example/beacon.png)"
JS_LINK = "[your real grade](javascript:alert(3))"


def unsafe(text: str) -> list[str]:
    """The characters of ``text`` that act on a terminal or reorder text (newline allowed)."""
    return [
        c for c in text if c != "\n" and unicodedata.category(c) in {"Cc", "Cf", "Cs", "Zl", "Zp"}
    ]


def result(**changes) -> SubmissionResult:
    fields = dict(
        path="class/x/03_layernorm.ipynb",
        lab="03_layernorm",
        score=1,
        max_score=3,
        error=None,
        checks=[
            CheckResult("forward", 1, 1, True, ""),
            CheckResult("backward", 0, 2, False, "wrong"),
        ],
        student="x",
    )
    return SubmissionResult(**{**fields, **changes})


def cells(text: str) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row]


# ----------------------------------------------------------------------------- CSV formulas


def formula_results() -> list[SubmissionResult]:
    return [
        result(
            student=formula,
            path=f"class/{formula}/03_layernorm.ipynb",
            error=f"{formula} raised",
            findings=[formula],
        )
        for formula in FORMULAS
    ]


def test_no_gradebook_cell_is_a_formula():
    gradebook = cells(report.to_csv(formula_results()))
    starts = [c for c in gradebook if c[:1] in tuple("=+-@\t\r")]
    assert starts == []
    for formula in FORMULAS:
        assert gradebook.count(f"'{formula}") == 2  # the id and the finding, quoted
        assert f"'{formula} raised" in gradebook


def test_no_lms_export_cell_is_a_formula():
    submissions = [r.as_dict() for r in formula_results()]
    exports = {
        "canvas": lms.canvas_csv(submissions),
        "summary": lms.class_summary(submissions),
        "moodle": lms.moodle_csv(submissions, "03_layernorm"),
    }
    neutralised = 0
    for name, text in exports.items():
        exported = cells(text)
        assert [c for c in exported if c[:1] in tuple("=+-@\t\r")] == [], name
        neutralised += sum(c in {f"'{f}" for f in FORMULAS} for c in exported)
    # canvas: Student (an id that is not from Canvas's download has no ID); summary: student
    # and name; moodle: no row (not a participant number from Moodle's download; its names are
    # neutralised in tests/test_moodle.py)
    assert neutralised == 3 * len(FORMULAS)


def test_the_grader_s_own_numbers_stay_numbers():
    from normlab.grader import inert

    assert inert.csv_row([-1, 0, 16, "-1", "a-1"]) == [-1, 0, 16, "'-1", "a-1"]
    assert inert.csv_cell("\t=1") == "\\t=1" and inert.csv_cell("\uff1d1+1") == "'\uff1d1+1"


# ----------------------------------------------------------------------------- terminal


def hostile_result() -> SubmissionResult:
    return result(
        path=f"class/{OSC52}x{BIDI}/03_layernorm.ipynb",
        student=f"{TITLE}{BIDI}",
        error=f"code cell 2: ValueError: {CLEAR}{CSI_C1}\nlast output: {OSC52}\r\n{TITLE}",
        checks=[
            CheckResult(f"forward{TITLE}", 0, 1, False, f"raised {CLEAR}\nWhy: {OSC52}"),
            CheckResult("backward", 0, 2, False, f"\u2066{BIDI}\u2069 \x1b[8mhidden"),
        ],
        score=0,
        findings=[f"`{BIDI}` {OSC52}"],
    )


def test_the_results_table_holds_no_terminal_control():
    table = report.to_table([hostile_result(), result()], verbose=True)
    assert unsafe(table) == []
    # shown, as escapes, rather than dropped: the instructor sees what was there
    assert "\\x1b]52;c;cHduZWQ=\\x07" in table and "\\u202eecilA" in table
    assert "\\x9b2J" in table and "\\x1b[8mhidden" in table
    assert "\\u2066" in table and "\\u2069" in table


def test_the_gradebook_and_json_hold_no_terminal_control():
    hostile = hostile_result()
    gradebook = report.to_csv([hostile])
    assert unsafe(gradebook) == []
    assert "\\x1b]0;all graded: 16/16\\x07\\u202eecilA" in gradebook
    printed = report.to_json([hostile])
    assert unsafe(printed) == [] and "\\u202e" in printed and "\\u009b" in printed
    # the JSON contract keeps the exact values: only their spelling in the text changed
    (back,) = json.loads(printed)["submissions"]
    assert (back["student"], back["error"], back["path"]) == (
        hostile.student,
        hostile.error,
        hostile.path,
    )


def test_an_undecodable_file_name_is_written_not_a_crash(tmp_path):
    name = os.fsdecode(b"\xff\xfe-bob")  # lone surrogates, which UTF-8 cannot encode
    broken = result(path=f"class/{name}/03_layernorm.ipynb", student=name)
    report.write_atomically(tmp_path / "grades.csv", report.to_csv([broken]))
    assert "\\udcff\\udcfe-bob" in (tmp_path / "grades.csv").read_text(encoding="utf-8")
    report.to_json([broken]).encode("utf-8")
    report.to_table([broken]).encode("utf-8")
    (written,) = {p.parent.name for p in report.write_feedback([broken], tmp_path / "fb")}
    assert written.isascii()


# ----------------------------------------------------------------------------- Markdown


def rendered(markdown: str) -> list[str]:
    """The Markdown as HTML by two renderers: CommonMark (raw HTML allowed, as on GitHub and
    in JupyterLab) and mistune with its bare-URL autolinks."""
    commonmark = markdown_it.MarkdownIt("commonmark", {"html": True}).render(markdown)
    autolinking = mistune.create_markdown(escape=False, plugins=["url", "table"])(markdown)
    return [commonmark, autolinking]


def test_markdown_feedback_makes_no_markup_of_what_the_student_wrote():
    hostile = result(
        student=f"{HTML}{BEACON}",
        error=f"code cell 1: ValueError: ```\n</pre>{HTML}\n````\n{BEACON}",
        checks=[
            CheckResult("forward", 0, 1, False, f"got {HTML}\n{BEACON}\n{JS_LINK}"),
            CheckResult("backward", 0, 2, False, "see www.evil.example or http://evil.example"),
            CheckResult("problem 1", 0, 1, False, "[x]: http://evil.example\n[x] <x@evil.example>"),
        ],
        score=0,
        findings=[f"{JS_LINK} {HTML}"],
    )
    markdown = report.feedback_markdown(hostile)
    for html in rendered(markdown):
        for markup in ("<script", "<img", "<a ", "href=", 'javascript:alert(3)"', 'onerror="'):
            assert markup not in html, (markup, html)
        # the error is one code block, whole: its backticks did not close the fence
        assert html.count("<pre>") == 1 and "````\n" in html.split("<pre>")[1]
    commonmark = rendered(markdown)[0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in commonmark
    assert "![b](http://evil.example/beacon.png)" in commonmark
    assert "[your real grade](javascript:alert(3))" in commonmark


def test_benign_markdown_is_unchanged():
    from normlab.grader import inert

    for line in (
        "the forward pass matches torch on random (N, d) inputs",
        "problem 1: mean and variance over [1, -1] (multiple choice)",
        "`layernorm_forward(x)[0]` has shape (4,) but should be (4, 1)",
        "Why: This matches eps outside the root: 1 / (sqrt(var) + eps).",
    ):
        assert inert.markdown(line) == line


# ----------------------------------------------------------------------------- ids and folders


def test_feedback_folders_are_one_per_id(tmp_path):
    results = [
        result(
            student="alice",
            path="a/alice/03_layernorm.ipynb",
            score=3,
            checks=[
                CheckResult("forward", 1, 1, True, ""),
                CheckResult("backward", 2, 2, True, ""),
            ],
        ),
        result(
            student="alice.",
            path="a/alice./03_layernorm.ipynb",
            score=0,
            checks=[
                CheckResult("forward", 0, 1, False, ""),
                CheckResult("backward", 0, 2, False, ""),
            ],
        ),
        result(student="Alice", path="a/Alice/03_layernorm.ipynb"),
        result(student=BIDI, path=f"a/{BIDI}/03_layernorm.ipynb"),
        result(student="con", path="a/con/03_layernorm.ipynb"),
    ]
    written = report.write_feedback(results, tmp_path / "feedback")
    folders = [p.parent.name for p in written if p.suffix == ".md"]
    assert len({f.casefold() for f in folders}) == len(results)
    assert all(f.isascii() and f.isprintable() for f in folders)
    assert folders[folders.index("alice")] == "alice"  # a plain id is its own folder
    real = (tmp_path / "feedback" / "alice" / "03_layernorm.md").read_text(encoding="utf-8")
    assert "**Score: 3 / 3**" in real


def test_ids_with_controls_are_escaped_when_found(tmp_path, capsys):
    for name in (f"mallory{BIDI}", "eve\x1b[2J", "bob\\x07", "bob\x07", "alice", "alice."):
        folder = tmp_path / "class" / name
        folder.mkdir(parents=True)
        shutil.copy(LAB, folder / "03_layernorm.ipynb")
    ids = sorted(e.student for e in find_submissions([str(tmp_path / "class")]))
    assert ids == sorted(
        ["mallory\\u202eecilA", "eve\\x1b[2J", "bob\\\\x07", "bob\\x07", "alice", "alice."]
    )
    assert capsys.readouterr().err == ""  # no two share an id once escaped


@pytest.mark.isolation
def test_a_class_of_hostile_names_grades_into_inert_outputs(tmp_path):
    """Graded for real: file names, printed output and exception text with terminal escapes,
    bidi overrides, formulas and HTML; the real alice beside a folder named ``alice.``."""
    hostile = nbformat.read(LAB, as_version=4)
    hostile.cells.append(
        nbformat.v4.new_code_cell(
            f"print({OSC52 + CLEAR + TITLE!r})\nraise ValueError({CLEAR + BIDI + HTML + '```'!r})"
        )
    )
    folder = tmp_path / "class"
    for name, book in (
        (f"=1+1{BIDI}", hostile),
        ("alice", None),
        ("alice.", None),
        (f"{OSC52}", None),
    ):
        (folder / name).mkdir(parents=True)
        target = folder / name / "03_layernorm.ipynb"
        if book is None:
            shutil.copy(SOLUTION if name == "alice" else LAB, target)
        else:
            nbformat.write(book, target)
    out = tmp_path / "out"
    done = run_cli_process(
        ["grade", folder, "--csv", out / "grades.csv", "--feedback", out / "fb", "--jobs", "2"]
    )
    assert done.returncode == 0, done.stderr
    assert unsafe(done.stdout) == [] and unsafe(done.stderr) == []
    assert "\\x1b]52;c;cHduZWQ=\\x07" in done.stdout
    gradebook = (out / "grades.csv").read_text(encoding="utf-8")
    assert unsafe(gradebook) == []
    rows = {row["student"]: row for row in csv.DictReader(io.StringIO(gradebook))}
    assert set(rows) == {"'=1+1\\u202eecilA", "alice", "alice.", "\\x1b]52;c;cHduZWQ=\\x07"}
    assert rows["alice"]["score"] == rows["alice"]["max_score"] != "0"
    assert "\\x1b[2J" in rows["'=1+1\\u202eecilA"]["error"]
    folders = {p.name for p in (out / "fb").iterdir()}
    assert len(folders) == 4 and "alice" in folders
    alice = (out / "fb" / "alice" / "03_layernorm.md").read_text(encoding="utf-8")
    assert f"**Score: {rows['alice']['score']} / " in alice
    for page in (out / "fb").rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        assert unsafe(text) == []
        for html in rendered(text):
            assert "<script" not in html and "<img" not in html


# ----------------------------------------------------------------------------- merge


def shard(index: int, count: int, submissions: list[dict], total: int) -> dict:
    positions = list(range(index - 1, total, count))
    return {
        "submissions": submissions,
        "shard": {"index": index, "count": count, "total": total, "positions": positions},
    }


def merge(tmp_path: Path, shards: list[dict], *extra: str):
    paths = []
    for number, payload in enumerate(shards, 1):
        path = tmp_path / f"shard{number}.json"
        path.write_text(json.dumps(payload), encoding="utf-8")
        paths.append(path)
    out = tmp_path / "grades.csv"
    done = run_cli_process(["merge", *paths, "--csv", out, "--feedback", tmp_path / "fb", *extra])
    return done, out


def two_shards(first: dict, second: dict) -> list[dict]:
    return [shard(1, 2, [first], 2), shard(2, 2, [second], 2)]


GOOD = {
    "a": result(student="a", path="c/a/03_layernorm.ipynb").as_dict(),
    "b": result(student="b", path="c/b/03_layernorm.ipynb").as_dict(),
}


def test_merge_of_good_shards_writes_the_gradebook(tmp_path):
    done, out = merge(tmp_path, two_shards(GOOD["a"], GOOD["b"]), "--json")
    assert done.returncode == 0, done.stderr
    assert [s["student"] for s in json.loads(done.stdout)["submissions"]] == ["a", "b"]
    assert out.is_file() and (tmp_path / "fb" / "a" / "03_layernorm.md").is_file()


@pytest.mark.parametrize(
    "change, why",
    [
        ({"score": 999, "max_score": 16}, "score 999 is not between 0 and max_score 16"),
        ({"score": 3, "max_score": 3}, "score 3/3 is not the sum of its checks' points 1/3"),
        ({"max_score": 999}, "is not the sum of its checks' points"),
        ({"score": "=1+1"}, "score is not an integer"),
        ({"score": True}, "score is not an integer"),
        ({"score": -1}, "score -1 is not between 0"),
        ({"student": ["a"]}, "student is not text or null"),
        ({"path": 7}, "path is not text"),
        ({"error": {"x": 1}}, "error is not text or null"),
        ({"lab": "../../etc"}, "is not a lab's stem"),
        ({"findings": "x"}, "findings is not a list of text"),
        ({"lang": "xx"}, "is not a language of the course"),
        (
            {
                "checks": [
                    {"name": "f", "points": 9, "max_points": 1, "passed": True, "message": ""}
                ]
            },
            "a check's points 9 are not between 0 and 1",
        ),
        (
            {"checks": [{"name": "f", "points": 1, "max_points": 1, "passed": 1, "message": ""}]},
            "passed is not true or false",
        ),
        (
            {
                "checks": [
                    {"name": "f", "points": 1, "max_points": 2, "passed": True, "message": ""}
                ]
            },
            "a check with 1/2 points has passed True",
        ),
        ({"name": 7}, "name is not text or null"),
        ({"id_conflict": "x"}, "id_conflict is not a list of text"),
        ({"layout": "lms"}, "layout 'lms' is not one of moodle, canvas"),
        ({"path": GOOD["a"]["path"]}, "is given twice"),
    ],
)
def test_merge_refuses_a_bad_field_and_writes_nothing(tmp_path, change, why):
    done, out = merge(tmp_path, two_shards(GOOD["a"], {**GOOD["b"], **change}))
    assert done.returncode == 2, done.stdout
    assert why in done.stderr and "Traceback" not in done.stderr
    assert not out.exists() and not (tmp_path / "fb").exists() and done.stdout == ""


def test_merge_flags_an_id_that_two_shards_claim_for_one_lab(tmp_path):
    """As one run does: both keep the id and are flagged, neither is dropped or refused."""
    done, out = merge(tmp_path, two_shards(GOOD["a"], {**GOOD["b"], "student": "a"}), "--json")
    assert done.returncode == 0, done.stderr
    merged = json.loads(done.stdout)["submissions"]
    assert [s["student"] for s in merged] == ["a", "a"]
    assert [s["id_conflict"] for s in merged] == [[GOOD["b"]["path"]], [GOOD["a"]["path"]]]
    assert "claim the id 'a'" in done.stderr


def test_merge_refuses_shard_fields_that_do_not_add_up(tmp_path):
    wrong_position = shard(1, 2, [GOOD["a"]], 2)
    wrong_position["shard"]["positions"] = [1]
    for shards, why in (
        ([wrong_position, shard(2, 2, [GOOD["b"]], 2)], "position 1 is not one of this shard's"),
        ([shard(3, 2, [GOOD["a"]], 2)], "shard 3/2 is not one of 2"),
        ([{"submissions": [], "shard": {"index": "1", "count": 1}}], "shard index is not"),
        ([[1, 2]], "not the JSON of `normlab grade --shard I/N --json`"),
    ):
        done, out = merge(tmp_path, shards)
        assert done.returncode == 2 and why in done.stderr, done.stderr
        assert not out.exists()


def test_export_refuses_a_bad_field_and_writes_nothing(tmp_path):
    results = tmp_path / "graded.json"
    bad = {**GOOD["b"], "score": 999, "max_score": 16}
    results.write_text(json.dumps({"submissions": [GOOD["a"], bad]}), encoding="utf-8")
    for kind, out in (("canvas", tmp_path / "c.csv"), ("moodle", tmp_path / "m")):
        done = run_cli_process(["export", kind, out, "--results", results])
        assert done.returncode == 2 and "score 999 is not between 0" in done.stderr
        assert not out.exists()


# ----------------------------------------------------------------------------- quotes


def test_a_quote_is_cut_at_the_limit_with_its_length_stated():
    from normlab.grader import inert
    from normlab.grader.isolation.limits import DEFAULT, Limits

    assert DEFAULT.shown_output_chars == 300
    assert inert.clip("é" * 300, quote=True) == repr("é" * 300)
    assert inert.clip("é" * 301, quote=True) == (
        repr("é" * 300) + "… (301 characters, the first 300 shown)"
    )
    assert inert.clip("ab\ncd", 2) == "ab… (5 characters, the first 2 shown)"
    assert inert.clip("ab\ncd", 2, last=True) == "(5 characters, the last 2 shown) …cd"
    assert inert.clip(12345, 3) == "123… (5 characters, the first 3 shown)"
    with inert.quoting(Limits(shown_output_chars=4)):
        assert inert.clip("abcdef") == "abcd… (6 characters, the first 4 shown)"
    assert inert.clip("x" * 300) == "x" * 300  # the default again, after the block


def test_a_result_is_bounded_whatever_a_check_wrote(monkeypatch):
    """The last guard: whatever text reached a result unquoted, each message, the error and
    each finding are cut to ``Limits.max_message_chars`` before the result goes anywhere."""
    from normlab.grader import grade
    from normlab.grader.identity import identify
    from normlab.grader.isolation.limits import DEFAULT

    long = "ñ" * 1_000_000
    huge = SubmissionResult(
        "a.ipynb",
        "03_layernorm",
        0,
        1,
        long,
        [CheckResult("a check", 0, 1, False, long)],
        findings=[long, "short"],
    )
    monkeypatch.setattr(grade, "grade_bytes", lambda *args: huge)

    class Isolation:
        description = "none"

    result = grade.guarded(
        b"", Path("a.ipynb"), grade.Settings(), Isolation(), identify(Path("a.ipynb")), None, None
    )
    cut = "ñ" * 4000 + "… (1000000 characters, the first 4000 shown)"
    assert DEFAULT.max_message_chars == 4000
    assert (result.error, result.checks[0].message, result.findings) == (cut, cut, [cut, "short"])
    assert len(json.dumps(result.as_dict())) < 80_000


def test_a_quote_cut_already_is_not_cut_again():
    """The parent cuts what the child sent as it reads the reply; a message that quotes it
    keeps the length the first cut stated."""
    from normlab.grader import inert

    for last in (False, True):
        once = inert.clip("z" * 5000, last=last)
        assert inert.clip(once, last=last) == once
        assert len(once) < 350
