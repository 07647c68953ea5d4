"""Gradebooks that LMSs import, from the JSON of ``normlab grade --json`` (or ``merge``).

Who each submission is (its id, display name and lab) was decided once, when it was found
(``identity.py``, where every layout is described), and is read here from the results' fields
``student``, ``name`` and ``lab``; nothing is derived from a path again.

Each gradebook has one row per student (one column per lab). When several submissions of one
lab claim one id (``id_conflict``), none is merged into another or dropped: the id gets one row
per such submission, in path order, each with that submission's own score (and the labs the id
handed in once on every row), and ``normlab export`` warns on stderr: the instructor deletes the
rows that are not the student's before importing.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from normlab.grader import identity, inert


def claims(submissions: list[dict]) -> list[identity.Claim]:
    """(student, lab, path) of each submission of the results."""
    return [
        (s.get("student") or Path(s["path"]).stem, s.get("lab"), s["path"]) for s in submissions
    ]


def _rows(submissions: list[dict]) -> tuple[list[str], dict[tuple[str, int], dict]]:
    """Labs in course order and, per (student, row), name and score per lab.

    A student has one row (0), or one per submission of a lab that several of theirs claim
    (0, 1, ...: the k-th such submission, in the results' order, is on row k). A lab the student
    handed in once is on every row, so deleting the wrong rows keeps it.
    """
    labs = sorted({s["lab"] for s in submissions if s.get("lab")})
    handed: dict[str, dict[str, list[tuple[int, str]]]] = {}
    for (student, lab, _path), submission in zip(claims(submissions), submissions, strict=True):
        name = submission.get("name")
        name = name if isinstance(name, str) and name else student
        entry = (int(submission["score"]), name) if lab else (None, name)
        handed.setdefault(student, {}).setdefault(lab or "", []).append(entry)
    rows: dict[tuple[str, int], dict] = {}
    for student, by_lab in handed.items():
        first_name = next(iter(by_lab.values()))[0][1]
        graded = {lab: handed_in for lab, handed_in in sorted(by_lab.items()) if lab}
        shared = [handed_in for handed_in in graded.values() if len(handed_in) > 1]
        for copy in range(max([len(handed_in) for handed_in in shared], default=1)):
            scores = {
                lab: handed_in[0 if len(handed_in) == 1 else copy][0]
                for lab, handed_in in graded.items()
                if len(handed_in) == 1 or copy < len(handed_in)
            }
            named = [handed_in[copy][1] for handed_in in shared if copy < len(handed_in)]
            rows[student, copy] = {"name": named[0] if named else first_name, "scores": scores}
    return labs, rows


def _lab_max(submissions: list[dict]) -> dict[str, int]:
    return {s["lab"]: int(s["max_score"]) for s in submissions if s.get("lab")}


def _write(rows: list[list]) -> str:
    """CSV text; every text cell through ``inert.csv_cell`` (ids, names: no formula, no
    control character), numbers as they are."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(inert.csv_row(row) for row in rows)
    return buffer.getvalue()


def class_summary(submissions: list[dict]) -> str:
    """One row per student, one column per lab (points), then the total and the maximum."""
    labs, students = _rows(submissions)
    maximum = _lab_max(submissions)
    rows = [["student", "name", *labs, "total", "max_total"]]
    for student, copy in sorted(students):
        row = students[student, copy]
        scores = [row["scores"].get(lab, "") for lab in labs]
        total = sum(v for v in scores if v != "")
        rows.append([student, row["name"], *scores, total, sum(maximum[lab] for lab in labs)])
    return _write(rows)


def canvas_csv(submissions: list[dict]) -> str:
    """Canvas's gradebook import: Student, ID, SIS User ID, SIS Login ID, Section, one column per
    assignment (named after the lab; rename it to "Name (assignment id)" to fill an existing
    assignment), and the "Points Possible" row under the header. Rows are matched on ID."""
    labs, students = _rows(submissions)
    maximum = _lab_max(submissions)
    header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *labs]
    rows = [header, ["    Points Possible", "", "", "", "", *[maximum[lab] for lab in labs]]]
    for student, copy in sorted(students):
        row = students[student, copy]
        scores = [row["scores"].get(lab, "") for lab in labs]
        rows.append([row["name"], student, "", "", "", *scores])
    return _write(rows)


def moodle_csv(submissions: list[dict], lab: str) -> str:
    """Moodle's assignment grading worksheet for one lab ("Upload grading worksheet"): rows are
    matched on Identifier ("Participant N", the number in the submission folder's name)."""
    labs, students = _rows([s for s in submissions if s.get("lab") == lab])
    maximum = _lab_max(submissions).get(lab, 0)
    rows = [["Identifier", "Full name", "Grade", "Maximum Grade", "Feedback comments"]]
    for student, copy in sorted(
        students, key=lambda s: (not s[0].isdigit(), int(s[0]) if s[0].isdigit() else s[0], s[1])
    ):
        row = students[student, copy]
        if lab not in row["scores"]:
            continue
        identifier = f"Participant {student}" if student.isdigit() else student
        score = row["scores"][lab]
        rows.append([identifier, row["name"], f"{score:.2f}", f"{maximum:.2f}", ""])
    return _write(rows)
