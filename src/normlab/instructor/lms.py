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
import datetime
import html
import io
import re
import zipfile
from pathlib import Path

from normlab.grader import i18n, identity, inert


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
    assignment), and the "Points Possible" row under the header. Rows are matched on ID.

    ID is Canvas's user id, so it is filled only for an id that Canvas's own download wrote
    (``layout`` ``canvas`` in every submission of it): any other id is a name someone chose (a
    plain file name ``03_layernorm_5678.ipynb`` would give a classmate's user id), and its row
    is written with ID empty, for the instructor to fill in (``canvas_ids_missing`` names them).
    """
    mine = [s for s in submissions if s.get("layout") == "canvas"]
    others = [s for s in submissions if s.get("layout") != "canvas"]
    labs = sorted({s["lab"] for s in submissions if s.get("lab")})
    maximum = _lab_max(submissions)
    header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *labs]
    rows = [header, ["    Points Possible", "", "", "", "", *[maximum[lab] for lab in labs]]]
    for chosen, with_id in ((mine, True), (others, False)):
        _, students = _rows(chosen)
        for student, copy in sorted(students):
            row = students[student, copy]
            scores = [row["scores"].get(lab, "") for lab in labs]
            rows.append([row["name"], student if with_id else "", "", "", "", *scores])
    return _write(rows)


def canvas_ids_missing(submissions: list[dict]) -> list[str]:
    """The ids, in order, of the submissions that Canvas's download did not name (another
    layout, or results without ``layout``): no Canvas user id is known for them."""
    return sorted(
        {
            student
            for (student, _lab, _path), s in zip(claims(submissions), submissions, strict=True)
            if s.get("layout") != "canvas"
        }
    )


# ----------------------------------------------------------------------------- Moodle
#
# What Moodle's assignment accepts, as its source reads (moodle/moodle):
# * "Upload grading worksheet": mod/assign/feedback/offline/importgradeslib.php finds its
#   columns by header name, the strings of the instructor's Moodle language (English:
#   "Identifier", "Grade", "Last modified (grade)", and each feedback plugin's field, for
#   comments "Feedback comments"); without any of the first three the file is refused. The
#   identifier is "Participant " and the assignment's unique id of the user (its prefix is cut by
#   length). lib/csvlib.class.php reads the file with PHP's fgetcsv (a backslash escapes the
#   next character inside quotes) and refuses it when a row has another number of cells than
#   the header. mod/assign/feedback/offline/locallib.php (process_import_grades) parses the
#   modified date with strtotime and skips a row (grade and comments) when the grade stored in
#   Moodle was modified more than 60 s after it, unless the upload form's "ignore modified"
#   box is ticked. mod/assign/gradingtable.php writes the same columns when it downloads a
#   worksheet. Feedback comments are stored as HTML (mod/assign/feedback/comments/locallib.php,
#   set_editor_text: FORMAT_HTML).
# * "Upload multiple feedback files in a zip": mod/assign/feedback/file/importziplib.php splits
#   each folder of a file's path on "_" (at most 5 parts) and takes the first with at least 4
#   whose second is a participant's number and whose third and fourth name a plugin:
#   name_PARTICIPANT_assignfeedback_file_ (the name is not read, but must not hold "_"); what
#   follows is the file's name in the student's feedback. Files whose name starts with "." or
#   "~" are skipped. The trailing "_" is the form Moodle's own zips had before 4.1, which the
#   importer still reads (its comment says so), so that older sites read it too.

MOODLE_COLUMNS = (
    "Identifier",
    "Full name",
    "Grade",
    "Maximum Grade",
    "Last modified (grade)",
    "Feedback comments",
)
#: the date written in "Last modified (grade)": ISO 8601 with its UTC offset, which strtotime
#: reads as the same instant whatever the Moodle server's time zone
MOODLE_DATE = "%Y-%m-%dT%H:%M:%S+00:00"
_FEEDBACK_MOST = 1000  # characters of a feedback comment, so that a row stays a screenful


def _sort_ids(students):
    return sorted(
        students, key=lambda s: (not s[0].isdigit(), int(s[0]) if s[0].isdigit() else s[0], s[1])
    )


def _moodle_safe(cell: str) -> str:
    """A cell PHP's fgetcsv reads back as written: a backslash before a quote or at the end of a
    quoted cell would escape the quote, so a space follows it there."""
    return re.sub(r'\\(?="|$)', "\\\\ ", cell)


def feedback_comment(submission: dict, lang: str | None = None) -> str:
    """The short plain-text result shown in Moodle's feedback comments, as HTML text (Moodle
    stores the comments as HTML): the points, the error's label and first line when the
    notebook did not run to the end, and the names of the checks not passed. In the
    submission's language; every student-derived text is inert (one line, no control character)
    and escaped, so that nothing in it is markup."""
    from normlab.instructor import report

    lang = report.language(None, lang or submission.get("lang"))
    parts = [
        i18n.text(
            "{score}/{max_score} points.",
            lang,
            score=int(submission["score"]),
            max_score=int(submission["max_score"]),
        )
    ]
    error = submission.get("error")
    if error:
        first = (i18n.translate(error, lang).strip().splitlines() or [""])[0]
        parts.append(f"{report.error_label(error, lang)}: {inert.one_line(first)}")
    failed = [
        inert.one_line(i18n.translate(check["name"], lang))
        for check in submission.get("checks", [])
        if not check.get("passed")
    ]
    if failed:
        parts.append(i18n.text("Not passed: {checks}.", lang, checks="; ".join(failed)))
    comment = " ".join(parts)
    if len(comment) > _FEEDBACK_MOST:
        comment = comment[: _FEEDBACK_MOST - 1] + "…"
    return html.escape(comment, quote=True).replace("\\", "&#92;")


def moodle_csv(submissions: list[dict], lab: str, modified: datetime.datetime | None = None) -> str:
    """Moodle's assignment grading worksheet for one lab ("Upload grading worksheet"): rows are
    matched on Identifier ("Participant N", the number in the submission folder's name).

    ``modified`` (default: now) is written as each row's "Last modified (grade)": Moodle takes
    a row's grade and comments unless the grade stored in Moodle changed more than a minute
    after it, so a grade typed into Moodle after the export is kept."""
    modified = modified or datetime.datetime.now(datetime.timezone.utc)
    stamp = modified.astimezone(datetime.timezone.utc).strftime(MOODLE_DATE)
    # Moodle reads the number after "Participant "'s length, whatever precedes it: only a
    # submission Moodle's download named has a row (exports.py names the others)
    ours = [s for s in submissions if s.get("lab") == lab and s.get("layout") == "moodle"]
    labs, students = _rows(ours)
    maximum = _lab_max(submissions).get(lab, 0)
    comments = _comments(ours)
    rows = [list(MOODLE_COLUMNS)]
    for student, copy in _sort_ids(students):
        row = students[student, copy]
        if lab not in row["scores"] or not student.isdigit():
            continue
        identifier = f"Participant {student}"
        score = row["scores"][lab]
        comment = comments.get((student, copy), "")
        cells = [identifier, row["name"], f"{score:.2f}", f"{maximum:.2f}", stamp, comment]
        rows.append([_moodle_safe(str(inert.csv_cell(cell))) for cell in cells])
    return _write(rows)


def _copies(submissions: list[dict]) -> list[tuple[str, int, dict]]:
    """(student, row, submission) of each graded submission, the row as ``_rows`` numbers it
    for a lab several submissions of one student claim (in the results' order)."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for (student, lab, _path), submission in zip(claims(submissions), submissions, strict=True):
        if not lab:
            continue
        copy = seen.get((student, lab), 0)
        seen[student, lab] = copy + 1
        out.append((student, copy, submission))
    return out


def _comments(submissions: list[dict]) -> dict[tuple[str, int], str]:
    return {(student, copy): feedback_comment(s) for student, copy, s in _copies(submissions)}


_NOT_IN_NAME = re.compile(r'[_/\\:*?"<>|]+')


def moodle_folder(name: str, participant: str) -> str:
    """The zip folder Moodle's importer gives to ``participant``: ``NAME_N_assignfeedback_file_``.
    NAME is the student's name for the instructor to read, made inert and without what would
    split or nest the folder (``_``, ``/``, ``\\``) or what file systems refuse."""
    shown = _NOT_IN_NAME.sub(" ", inert.one_line(name))
    shown = " ".join(shown.split()).strip(" .~")[:48].strip() or "Participant"
    return f"{shown}_{participant}_assignfeedback_file_"


def moodle_feedback_zip(
    results: list, lab: str, lang: str | None = None
) -> tuple[bytes, list[str]]:
    """The feedback-files zip of one lab ("Upload multiple feedback files in a zip"): a folder
    per participant (``moodle_folder``) holding ``LAB.html`` and ``LAB.md``, the pages of
    ``report.feedback_html`` and ``report.feedback_markdown``. A second submission of the lab
    by one participant gets the notebook's stem after the lab (as ``report.write_feedback``).

    Returns the zip's bytes and the paths of the submissions left out: Moodle finds a
    participant only by number, so a submission whose id Moodle's download did not write (a
    plain file name ``03_layernorm_1234.ipynb`` would give a classmate's number) has no folder,
    nor a row in the worksheet. Entries carry a fixed date, so the same results give the same bytes."""
    from normlab.instructor import report

    mine = [r for r in results if r.lab == lab and r.layout == "moodle"]
    ours = mine + [r for r in results if r.lab == lab and r.layout != "moodle"]
    submissions = [r.as_dict() for r in ours]
    buffer = io.BytesIO()
    left_out, taken = [], set()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for (student, _copy, _s), result in zip(_copies(submissions), ours, strict=True):
            if result.layout != "moodle" or not student.isdigit():
                left_out.append(result.path)
                continue
            folder = moodle_folder(result.name or "", student)
            name = inert.folder_name(lab)
            if (student, name) in taken:
                base, number = f"{lab}-{Path(result.path).stem}", 2
                name = inert.folder_name(base)
                while (student, name) in taken:
                    name, number = inert.folder_name(f"{base}-{number}"), number + 1
            taken.add((student, name))
            pages = (
                (".html", report.feedback_html(result, lang)),
                (".md", report.feedback_markdown(result, lang)),
            )
            for suffix, text in pages:
                entry = zipfile.ZipInfo(f"{folder}/{name}{suffix}", date_time=(2000, 1, 1, 0, 0, 0))
                entry.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(entry, text.encode("utf-8"))
    return buffer.getvalue(), left_out
