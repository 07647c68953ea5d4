"""Moodle takes what ``normlab export moodle`` writes: its grading worksheet and its feedback zip.

The importers are re-implemented here from Moodle's source (moodle/moodle), rule by rule:
* ``lib/csvlib.class.php``: the file is read with PHP's fgetcsv (quotes doubled, a backslash
  inside quotes keeps the next character from closing them); a row with another number of
  cells than the header refuses the whole file.
* ``mod/assign/feedback/offline/importgradeslib.php``: columns found by their header's exact
  name; no "Identifier", "Grade" or "Last modified (grade)" refuses the file; the participant's
  number is the identifier after the length of "Participant "; a feedback column at index 0 is
  never read.
* ``mod/assign/feedback/offline/locallib.php`` (process_import_grades): the date goes through
  strtotime; a row is skipped when the grade stored in Moodle was modified more than 60 s after
  it (grade and comments), unless "ignore modified" is ticked; a grade equal to the stored one,
  empty, negative or above the maximum is skipped.
* ``mod/assign/feedback/file/importziplib.php``: hidden files skipped; each folder of a path is
  split on "_" into at most 5 parts; the first with 4 or more whose second is numeric, a
  participant, and whose third and fourth name the plugin gives the participant; the rest of
  the path is the feedback file's name.
"""

from __future__ import annotations

import datetime
import html.parser
import io
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, check_dict, run_cli_process

from normlab.instructor import lms

SOLUTION = ROOT / "solutions" / "03_layernorm.ipynb"
LAB = ROOT / "labs" / "03_layernorm.ipynb"
UTC = datetime.timezone.utc

# ----------------------------------------------------------------------------- Moodle's rules


class Refused(Exception):
    """Moodle refuses the whole file (its error page)."""


def php_fgetcsv(text: str) -> list[list[str]]:
    """Rows as PHP's fgetcsv reads them (delimiter ",", enclosure '"', escape "\\"), after
    csvlib's clean-up: newlines made \\n, the content trimmed, empty lines dropped."""
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n").strip()
    rows, at, end = [], 0, len(text)
    while at < end:
        row = []
        while True:
            if at < end and text[at] == '"':
                at, cell = at + 1, []
                while at < end:
                    char = text[at]
                    if char == "\\" and at + 1 < end:  # both kept; the next one cannot close
                        cell += [char, text[at + 1]]
                        at += 2
                    elif char == '"' and text[at + 1 : at + 2] == '"':
                        cell.append('"')
                        at += 2
                    elif char == '"':
                        at += 1
                        break
                    else:
                        cell.append(char)
                        at += 1
                while at < end and text[at] not in ",\n":  # after the closing quote: as it is
                    cell.append(text[at])
                    at += 1
                row.append("".join(cell))
            else:
                stop = at
                while stop < end and text[stop] not in ",\n":
                    stop += 1
                row.append(text[at:stop])
                at = stop
            if at < end and text[at] == ",":
                at += 1
                continue
            at += 1
            break
        if row != [""]:
            rows.append(row)
    return rows


def strtotime(value: str) -> int | None:
    """strtotime for ISO 8601 with an offset (what the export writes) and nothing else: any
    other text counts as unreadable here (False in PHP, which the importer compares as 0)."""
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", value):
        return None
    return int(datetime.datetime.fromisoformat(value).timestamp())


_PHP_NUMERIC = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*")


def import_worksheet(text, participants, stored=None, maximum=16.0, ignore_modified=False):
    """What Moodle keeps of a worksheet: {participant: (grade, comment)} for the rows it takes.

    ``participants``: the assignment's participant numbers; ``stored``: {participant:
    (grade, timemodified)} already in Moodle."""
    stored = stored or {}
    rows = php_fgetcsv(text)
    if not rows or any(len(row) != len(rows[0]) for row in rows):
        raise Refused("csvweirdcolumns")
    header = rows[0]
    index = {name: at for at, name in enumerate(header)}
    if not {"Identifier", "Grade", "Last modified (grade)"} <= set(index):
        raise Refused("invalidgradeimport")
    comments = index.get("Feedback comments")
    kept = {}
    for row in rows[1:]:
        number = row[index["Identifier"]][len("Participant ") :]
        if not _PHP_NUMERIC.fullmatch(number) or int(float(number)) not in participants:
            continue
        participant = int(float(number))
        grade_text = row[index["Grade"]]
        grade = float(grade_text) if grade_text.strip() else None
        modified = strtotime(row[index["Last modified (grade)"]]) or 0
        old = stored.get(participant)
        stale = old is not None and old[1] > modified + 60
        take_grade = not (
            (old is not None and old[0] == grade)
            or grade is None
            or grade < 0
            or (stale and not ignore_modified)
            or grade > maximum
        )
        comment = row[comments] if comments and (ignore_modified or not stale) else None
        if take_grade or comment is not None:
            kept[participant] = (grade if take_grade else None, comment)
    return kept


def import_feedback_zip(data: bytes, participants) -> dict[int, dict[str, bytes]]:
    """{participant: {file name: content}} of the files Moodle's zip importer takes."""
    taken: dict[int, dict[str, bytes]] = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for entry in archive.infolist():
            if entry.is_dir():
                continue
            base = entry.filename.rsplit("/", 1)[-1]
            if base.startswith((".", "~")):
                continue
            parts = entry.filename.split("/")
            while parts:
                info = parts.pop(0).split("_", 4)
                if len(info) < 4 or not _PHP_NUMERIC.fullmatch(info[1]):
                    continue
                participant = int(float(info[1]))
                if participant not in participants or info[2:4] != ["assignfeedback", "file"]:
                    continue
                name = "/".join([info[4] if len(info) == 5 else "", *parts])
                taken.setdefault(participant, {})[name] = archive.read(entry)
                break
    return taken


class _Tags(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_endtag(self, tag):
        self.tags.append("/" + tag)

    def handle_data(self, data):
        self.text.append(data)


def shown(comment: str) -> tuple[list[str], str]:
    """(tags, text) of a feedback comment as a browser reads Moodle's HTML."""
    parser = _Tags()
    parser.feed(comment)
    parser.close()
    return parser.tags, "".join(parser.text)


# ----------------------------------------------------------------------------- the tests of the rules


def test_the_rules_refuse_what_moodle_refuses():
    """The re-implementation is not lax: the worksheet the export wrote before (no date), a
    row short of a cell, and a backslash that swallows a closing quote are refused, and a stale
    date loses the row."""
    old = (
        "Identifier,Full name,Grade,Maximum Grade,Feedback comments\nParticipant 7,A,3.00,16.00,\n"
    )
    with pytest.raises(Refused, match="invalidgradeimport"):
        import_worksheet(old, {7})
    with pytest.raises(Refused, match="csvweirdcolumns"):
        import_worksheet('Identifier,Grade,Last modified (grade)\n"Participant 7",3\n', {7})
    swallowed = 'Identifier,Grade,Last modified (grade),x,y\nParticipant 7,3,2026-01-01T00:00:00+00:00,"a\\",b\n'
    with pytest.raises(Refused, match="csvweirdcolumns"):
        import_worksheet(swallowed, {7})
    good = "Identifier,Grade,Last modified (grade),Feedback comments\nParticipant 7,3,2026-01-01T00:00:00+00:00,ok\n"
    assert import_worksheet(good, {7}) == {7: (3.0, "ok")}
    late = int(datetime.datetime(2026, 1, 1, 0, 2, tzinfo=UTC).timestamp())
    assert import_worksheet(good, {7}, stored={7: (5.0, late)}) == {}
    names = ["Ann_7_assignfeedback_file_/03.html", "Bo_8_assignsubmission_file_/x", "~Cy_7_a_b"]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in names:
            archive.writestr(name, "x")
    assert import_feedback_zip(buffer.getvalue(), {7, 8}) == {7: {"/03.html": b"x"}}


# ----------------------------------------------------------------------------- the export


TIMED_OUT = "timed out while running code cell 3 (an endless loop or sleep?)"
HOSTILE_NAMES = {
    "1001": 'Ann "Q" Lee, Jr.\\',
    "1002": '=HYPERLINK("http://evil")_9999_assignfeedback_file_',
    "1003": "Bo\u202eWu\x1b[2J<script>alert(1)</script>",
    "1004": "Cy/../../etc_passwd",
}


def _results() -> list[dict]:
    checks_right = [
        check_dict("layernorm_forward: matches F.layer_norm", 10, 10),
        check_dict("layernorm_backward: dx", 6, 6),
    ]
    checks_half = [
        check_dict("layernorm_forward: matches F.layer_norm", 10, 10),
        check_dict("layernorm_backward: <b>dx</b> & \\", 0, 6),
    ]
    submissions = [
        ("1001", 16, None, checks_right, None),
        ("1002", 10, None, checks_half, None),
        ("1003", 0, TIMED_OUT, [], None),
        ("1004", 10, None, checks_half, "es"),
    ]
    return [
        {
            "path": f"moodle/{student}/03_layernorm.ipynb",
            "student": student,
            "layout": "moodle",
            "name": HOSTILE_NAMES[student],
            "lab": "03_layernorm",
            "score": score,
            "max_score": 16,
            "error": error,
            "checks": checks,
            "lang": lang,
        }
        for student, score, error, checks, lang in submissions
    ]


def _export(tmp_path, results) -> tuple[Path, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    graded = tmp_path / "graded.json"
    graded.write_text(json.dumps({"submissions": results}))
    done = run_cli_process(["export", "moodle", tmp_path / "moodle", "--results", graded])
    assert done.returncode == 0, done.stderr
    return tmp_path / "moodle", done.stderr


def test_the_worksheet_imports_every_grade_and_its_comment(tmp_path):
    before = datetime.datetime.now(UTC).replace(microsecond=0)
    out, _ = _export(tmp_path, _results())
    after = datetime.datetime.now(UTC)
    text = (out / "moodle-03_layernorm.csv").read_text(encoding="utf-8")
    kept = import_worksheet(text, {1001, 1002, 1003, 1004})
    assert {p: grade for p, (grade, _) in kept.items()} == {1001: 16, 1002: 10, 1003: 0, 1004: 10}
    rows = php_fgetcsv(text)
    header = rows[0]
    assert header[:4] == ["Identifier", "Full name", "Grade", "Maximum Grade"]
    dates = {row[header.index("Last modified (grade)")] for row in rows[1:]}
    (date,) = dates
    assert before.timestamp() <= strtotime(date) <= after.timestamp() + 1
    # every cell is one line, no formula, no control character, and the names read as written
    for row in rows[1:]:
        for cell in row:
            assert "\n" not in cell and not cell.startswith(("=", "+", "-", "@"))
            assert not re.search(r"[\x00-\x1f\x7f\u202e]", cell)
    names = {row[0]: row[1] for row in rows[1:]}
    assert names["Participant 1001"].startswith('Ann "Q" Lee, Jr.\\')
    assert names["Participant 1002"].startswith("'=HYPERLINK")

    comments = {p: shown(comment) for p, (_, comment) in kept.items()}
    assert all(tags == [] for tags, _ in comments.values()), comments
    assert comments[1001][1] == "16/16 points."
    assert comments[1002][1].startswith("10/16 points. ")
    assert "layernorm_backward: <b>dx</b> & \\" in comments[1002][1]
    assert "layernorm_forward" not in comments[1002][1]  # passed: not named
    assert comments[1003][1].startswith("0/16 points. ERROR: timed out while running code cell 3")
    assert comments[1004][1].startswith("10/16 puntos. ")  # the submission's language


def test_a_grade_changed_in_moodle_after_the_export_is_kept(tmp_path):
    """Moodle takes a row unless its stored grade changed more than a minute after the
    worksheet's date; the export's date is the time it ran."""
    at = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    text = lms.moodle_csv(_results(), "03_layernorm", modified=at)
    earlier = int((at - datetime.timedelta(days=1)).timestamp())
    later = int((at + datetime.timedelta(minutes=2)).timestamp())
    stored = {1001: (3.0, earlier), 1002: (4.0, later)}
    kept = import_worksheet(text, {1001, 1002}, stored=stored)
    assert set(kept) == {1001} and kept[1001][0] == 16
    kept = import_worksheet(text, {1001, 1002}, stored=stored, ignore_modified=True)
    assert {p: grade for p, (grade, _) in kept.items()} == {1001: 16, 1002: 10}


def test_the_feedback_zip_gives_each_participant_their_pages(tmp_path):
    out, _ = _export(tmp_path, _results())
    data = (out / "moodle-03_layernorm-feedback.zip").read_bytes()
    taken = import_feedback_zip(data, {1001, 1002, 1003, 1004, 9999})
    assert set(taken) == {1001, 1002, 1003, 1004}  # a name that imitates a folder takes nothing
    for files in taken.values():
        assert set(files) == {"/03_layernorm.html", "/03_layernorm.md"}
        page = files["/03_layernorm.html"].decode()
        assert "<script>" not in page and "\x1b" not in page
    assert "Puntuación: 10 / 16" in taken[1004]["/03_layernorm.html"].decode()
    assert "Score: 0 / 16" in taken[1003]["/03_layernorm.md"].decode()
    for name in zipfile.ZipFile(io.BytesIO(data)).namelist():
        assert ".." not in name.split("/") and not name.startswith("/")
        assert name.count("/") == 1
    # the same results, the same bytes
    again, _ = _export(tmp_path / "again", _results())
    assert (again / "moodle-03_layernorm-feedback.zip").read_bytes() == data


# ----------------------------------------------------------------------------- a class, end to end


def _put(path: Path, source: Path | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(source, Path):
        shutil.copy(source, path)
    else:
        path.write_text(source)


@pytest.mark.isolation
def test_a_moodle_class_round_trip(tmp_path):
    """A Moodle download graded for real, exported, and imported as Moodle would: each
    participant gets their grade, a comment that says why, and their own feedback pages (the
    ones ``normlab grade --feedback`` writes)."""
    download = tmp_path / "download"
    _put(download / "Carol Diaz_1234_assignsubmission_file_" / "03_layernorm.ipynb", SOLUTION)
    _put(download / "Dan Wu_1240_assignsubmission_file_" / "03_layernorm.ipynb", LAB)
    _put(download / "Eve Ng_1250_assignsubmission_file_" / "03_layernorm.ipynb", '{"cells": [')
    done = run_cli_process(
        ["grade", download, "--json", "--feedback", tmp_path / "feedback", "--jobs", "2"]
    )
    assert done.returncode == 0, done.stderr
    graded = tmp_path / "graded.json"
    graded.write_text(done.stdout)
    by_id = {s["student"]: s for s in json.loads(done.stdout)["submissions"]}
    full = by_id["1234"]["max_score"]
    assert full > 0 and by_id["1234"]["score"] == full

    exported = run_cli_process(["export", "moodle", tmp_path / "moodle", "--results", graded])
    assert exported.returncode == 0, exported.stderr
    text = (tmp_path / "moodle" / "moodle-03_layernorm.csv").read_text(encoding="utf-8")
    kept = import_worksheet(text, {1234, 1240, 1250}, maximum=full)
    assert {p: grade for p, (grade, _) in kept.items()} == {1234: full, 1240: 0, 1250: 0}
    comments = {p: shown(comment)[1] for p, (_, comment) in kept.items()}
    assert comments[1234] == f"{full}/{full} points."
    failed = [c["name"] for c in by_id["1240"]["checks"] if not c["passed"]]
    assert failed and all(name in comments[1240] for name in failed[:3])
    assert comments[1250].startswith(f"0/{full} points. ERROR: not a valid notebook")

    data = (tmp_path / "moodle" / "moodle-03_layernorm-feedback.zip").read_bytes()
    taken = import_feedback_zip(data, {1234, 1240, 1250})
    assert set(taken) == {1234, 1240, 1250}
    for participant, files in taken.items():
        written = tmp_path / "feedback" / str(participant)
        assert files == {
            "/03_layernorm.html": (written / "03_layernorm.html").read_bytes(),
            "/03_layernorm.md": (written / "03_layernorm.md").read_bytes(),
        }


def test_a_submission_without_a_participant_number_is_named_not_zipped(tmp_path):
    results = _results()[:1]
    results.append({**_results()[1], "student": "grace", "path": "plain/grace/03_layernorm.ipynb"})
    out, stderr = _export(tmp_path, results)
    data = (out / "moodle-03_layernorm-feedback.zip").read_bytes()
    assert set(import_feedback_zip(data, {1001})) == {1001}
    assert "plain/grace/03_layernorm.ipynb" in stderr and "participant number" in stderr


def test_two_submissions_claiming_one_participant_keep_their_own_comment_and_pages(tmp_path):
    """Both rows are written (the instructor deletes the wrong one, as export warns), each with
    the comment of its own submission; the zip keeps both pages, the second named after its
    notebook."""
    first, second = _results()[:2]
    second = {**second, "student": "1001", "path": "moodle/other/03_layernorm_final.ipynb"}
    out, stderr = _export(tmp_path, [first, second])
    assert "claim the id '1001'" in stderr
    rows = php_fgetcsv((out / "moodle-03_layernorm.csv").read_text(encoding="utf-8"))
    pairs = [(row[2], shown(row[-1])[1].split(" ")[0]) for row in rows[1:]]
    assert pairs == [("16.00", "16/16"), ("10.00", "10/16")]
    data = (out / "moodle-03_layernorm-feedback.zip").read_bytes()
    (files,) = import_feedback_zip(data, {1001}).values()
    assert sorted(files) == [
        "/03_layernorm-03_layernorm_final.html",
        "/03_layernorm-03_layernorm_final.md",
        "/03_layernorm.html",
        "/03_layernorm.md",
    ]
    assert "Score: 10 / 16" in files["/03_layernorm-03_layernorm_final.md"].decode()


def test_only_moodles_own_participant_numbers_address_a_participant(tmp_path):
    """A blank lab handed in as 03_layernorm_1002.ipynb (a plain file name: the student chose
    1002, a classmate's participant number), and one whose name ends in a number after 12
    characters (Moodle reads the number after "Participant "'s length): Moodle keeps neither,
    only each participant's own grade, and the export names both."""
    right = _results()[:2]
    blank = {**_results()[2], "error": None, "checks": [], "score": 0}
    forged = [
        {**blank, "student": "1002", "path": "03_layernorm_1002.ipynb", "layout": "file"},
        {
            **blank,
            "student": "xxxxxxxxxxx_1001",
            "path": "x/03_layernorm.ipynb",
            "layout": "folder",
        },
    ]
    out, stderr = _export(tmp_path, right + forged)
    text = (out / "moodle-03_layernorm.csv").read_text(encoding="utf-8")
    kept = import_worksheet(text, {1001, 1002})
    assert {k: v[0] for k, v in kept.items()} == {1001: 16.0, 1002: 10.0}
    assert len(php_fgetcsv(text)) == 3  # the header and the two participants
    data = (out / "moodle-03_layernorm-feedback.zip").read_bytes()
    assert set(import_feedback_zip(data, {1001, 1002})) == {1001, 1002}
    assert "03_layernorm_1002.ipynb" in stderr and "x/03_layernorm.ipynb" in stderr
    assert "not from Moodle's download" in stderr
