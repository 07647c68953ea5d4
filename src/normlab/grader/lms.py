"""Student ids from the folders LMSs export, and gradebooks those LMSs import.

Layouts recognised (the id is what the LMS's own import matches on):

* **Moodle** "Download all submissions": ``Carol Diaz_1234_assignsubmission_file_/`` (a folder
  per student) or ``Carol Diaz_1234_assignsubmission_file_03_layernorm.ipynb`` (flat). 1234 is
  the participant number of the assignment; the grading worksheet names the row
  ``Participant 1234``. Id: ``1234``; name: ``Carol Diaz``.
* **Canvas** "Download submissions": ``evansd_23456_789_03_layernorm.ipynb`` (``evansd_LATE_...``
  for a late one): sortable login name, Canvas user id, submission id, then the file's own
  name. Id: ``23456`` (the ``ID`` column of Canvas's gradebook CSV); name: ``evansd``.
* **Gradescope** "Export submissions": ``submission_metadata.yml`` beside ``submission_NNN/``
  folders. Id: the submitter's ``:sid:`` (else ``:email:``, else ``NNN``); name: ``:name:``.
* **Plain folders**: ``STUDENT/03_layernorm.ipynb`` (the folder), ``03_layernorm_STUDENT.ipynb``
  (the file name without the lab), and a folder given on the command line that holds
  ``03_layernorm.ipynb`` itself (that folder's name: ``normlab grade class/alice class/bob``).

No two submissions of a lab ever share an id: a repeated id gets ``#2``, ``#3`` (in path order)
and a warning, so that nothing is merged silently.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re
import sys
from collections.abc import Callable
from pathlib import Path

from normlab.grader import inert

MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_[a-z]+_(?P<rest>.*)$")
CANVAS = re.compile(r"^(?P<name>[a-z0-9]+)(?:_LATE)?_(?P<id>\d+)_(?P<submission>\d+)_(?P<rest>.+)$")
GRADESCOPE = re.compile(r"^submission_(?P<id>\d+)$")


@dataclasses.dataclass(frozen=True)
class Identity:
    student: str
    name: str
    lms: str  # "moodle", "canvas", "gradescope" or "folder"


def _gradescope_submitters(metadata: Path) -> dict[str, tuple[str, str]]:
    """``submission_NNN`` -> (id, name) from Gradescope's ``submission_metadata.yml``.

    Read line by line (no YAML library needed): each top-level ``submission_NNN:`` block lists
    ``:submitters:`` with ``:name:``, ``:sid:`` and ``:email:``; the first submitter counts.
    """
    found: dict[str, tuple[str, str]] = {}
    current, fields = None, {}

    def close():
        if current is not None:
            student = fields.get("sid") or fields.get("email") or current.split("_")[-1]
            found[current] = (student, fields.get("name", student))

    try:
        lines = metadata.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    for line in lines:
        top = re.match(r"^(submission_\d+):\s*$", line)
        if top:
            close()
            current, fields = top.group(1), {}
            continue
        field = re.match(r"^\s*-?\s*:(name|sid|email):\s*(.*?)\s*$", line)
        if field and current is not None and field.group(1) not in fields:
            value = field.group(2).strip().strip("'\"")
            if value:
                fields[field.group(1)] = value
    close()
    return found


def identify(path: Path, folder: Path | None) -> Identity | None:
    """The LMS identity of a submission, or None when no LMS layout matches."""
    parts = path.relative_to(folder).parts if folder is not None else (path.name,)
    for depth in range(len(parts) - 1, -1, -1):
        part = parts[depth]
        stem = part[: -len(".ipynb")] if part.endswith(".ipynb") else part
        moodle = MOODLE.match(stem)
        if moodle:
            return Identity(moodle.group("id"), moodle.group("name").strip(), "moodle")
        canvas = CANVAS.match(stem)
        if canvas and depth == len(parts) - 1:
            return Identity(canvas.group("id"), canvas.group("name"), "canvas")
        gradescope = GRADESCOPE.match(part)
        if gradescope and folder is not None and depth < len(parts) - 1:
            metadata = folder.joinpath(*parts[:depth], "submission_metadata.yml")
            if metadata.is_file():
                student, name = _gradescope_submitters(metadata).get(
                    part, (gradescope.group("id"), gradescope.group("id"))
                )
                return Identity(student, name, "gradescope")
    return None


def student_id(
    path: Path, folder: Path | None, fallback: Callable[[Path, Path | None], str]
) -> str:
    """The id of a submission: an LMS layout's, else ``fallback`` (the plain layouts)."""
    found = identify(path, folder)
    if found is not None:
        return found.student
    student = fallback(path, folder)
    if folder is not None and path.parent == folder and _is_bare_lab_name(path):
        # class/alice/03_layernorm.ipynb graded as `normlab grade class/alice`: alice.
        return folder.resolve().name or student
    return student


def _is_bare_lab_name(path: Path) -> bool:
    from normlab.grader.registry import lab_for_path

    lab = lab_for_path(path)
    if lab is None:
        return False
    rest = re.sub(re.escape(lab.stem), "", path.stem, flags=re.IGNORECASE)
    return re.fullmatch(r"[\s_\-.]*(\(\d+\))?[\s_\-.]*", rest) is not None


def unique(entries: list, lab_of: Callable[[Path], str | None]) -> list:
    """Entries (with ``path`` and ``student``) where no two of one lab share an id."""
    seen: dict[tuple[str, str | None], int] = {}
    out = []
    for entry in sorted(entries, key=lambda e: str(e.path)):
        key = (entry.student, lab_of(entry.path))
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            renamed = f"{entry.student}#{seen[key]}"
            print(
                f"normlab grade: {inert.text(entry.path, lines=False)} would share the id "
                f"{inert.text(repr(entry.student))} with another submission of the same lab; "
                f"graded as {inert.text(repr(renamed))}",
                file=sys.stderr,
            )
            entry = dataclasses.replace(entry, student=renamed)
        out.append(entry)
    order = {str(e.path): i for i, e in enumerate(entries)}
    return sorted(out, key=lambda e: order[str(e.path)])


# ----------------------------------------------------------------------------- gradebooks


def _rows(submissions: list[dict]) -> tuple[list[str], dict[str, dict]]:
    """Labs in course order and, per student, name and best score per lab."""
    labs = sorted({s["lab"] for s in submissions if s.get("lab")})
    students: dict[str, dict] = {}
    for submission in submissions:
        student = submission.get("student") or Path(submission["path"]).stem
        row = students.setdefault(student, {"name": student, "scores": {}, "max": {}})
        path = Path(submission["path"])
        found = identify(path, None)
        for folder in path.parents if found is None else ():
            found = identify(path, folder)
            if found is not None:
                break
        if found is not None and found.student == student.split("#")[0]:
            row["name"] = found.name
        lab = submission.get("lab")
        if lab:
            row["scores"][lab] = max(row["scores"].get(lab, 0), int(submission["score"]))
            row["max"][lab] = int(submission["max_score"])
    return labs, students


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
    for student in sorted(students):
        row = students[student]
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
    for student in sorted(students):
        row = students[student]
        scores = [row["scores"].get(lab, "") for lab in labs]
        rows.append([row["name"], student, "", "", "", *scores])
    return _write(rows)


def moodle_csv(submissions: list[dict], lab: str) -> str:
    """Moodle's assignment grading worksheet for one lab ("Upload grading worksheet"): rows are
    matched on Identifier ("Participant N", the number in the submission folder's name)."""
    labs, students = _rows([s for s in submissions if s.get("lab") == lab])
    maximum = _lab_max(submissions).get(lab, 0)
    rows = [["Identifier", "Full name", "Grade", "Maximum Grade", "Feedback comments"]]
    for student in sorted(students, key=lambda s: (not s.isdigit(), int(s) if s.isdigit() else s)):
        row = students[student]
        if lab not in row["scores"]:
            continue
        identifier = f"Participant {student}" if student.isdigit() else student
        score = row["scores"][lab]
        rows.append([identifier, row["name"], f"{score:.2f}", f"{maximum:.2f}", ""])
    return _write(rows)
