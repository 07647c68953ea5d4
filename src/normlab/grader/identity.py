"""Who a submission is: its student id, display name and lab, decided once from where it lies.

The id comes from the part of the path that the LMS wrote, the outermost part relative to the
folder the instructor named, and from nothing deeper: everything inside a student's folder, and
everything after an LMS's prefix in a file's name, is the student's to choose.

Layouts (the id is what the same LMS's grade import matches on):

* **Moodle** "Download all submissions": a top-level folder per student,
  ``Carol Diaz_1234_assignsubmission_file_/03_layernorm.ipynb``, or a top-level flat file
  ``Carol Diaz_1234_assignsubmission_file_03_layernorm.ipynb``. 1234 is the assignment's
  participant number (the grading worksheet's ``Participant 1234``). Id ``1234``; name
  ``Carol Diaz``. A folder named like this *inside* a student's folder is the student's.
* **Canvas** "Download submissions": a top-level flat file ``evansd_23456_789_03_layernorm.ipynb``
  (``evansd_LATE_...`` when late). Only the prefix ``login_userid_submissionid_`` is Canvas's;
  the rest is the student's own file name and is never parsed for an id. Id ``23456`` (the
  ``ID`` column of Canvas's gradebook); name ``evansd``. Canvas's prefix is read first: when a
  name could be either LMS's, the shorter prefix is the LMS's and the rest the student's.
* **Gradescope** "Export submissions": top-level ``submission_NNN/`` folders beside
  ``submission_metadata.yml`` at the top of the named folder (a metadata file anywhere else is
  a student's). Id: the first submitter's ``:sid:`` (else ``:email:``, else ``NNN``); name
  ``:name:``.
* **Plain folders**: ``STUDENT/.../03_layernorm.ipynb`` (the top-level folder's name);
  ``03_layernorm_STUDENT.ipynb`` (the file name without the lab and a browser's copy number); a
  named folder that holds ``03_layernorm.ipynb`` itself (that folder's name: ``normlab grade
  class/alice class/bob``); a notebook named on the command line (its name without the lab).

The lab of a submission is its assignment's when one is given (``normlab grade --lab``, the
Gradescope autograder); otherwise the notebook's metadata (``normlab.lab``) or, without one, the
lab its file name names. Under an assignment, a notebook of another lab gets 0 and says so.

Two submissions of one lab that claim one id both keep it and are both flagged
(``id_conflict``) for the instructor to resolve; no id is renamed and no export merges them.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable
from pathlib import Path

from normlab.grader import inert
from normlab.grader.isolation import files
from normlab.grader.isolation.limits import DEFAULT
from normlab.grader.registry import all_labs, lab_for_path

MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_[a-z]+_(?P<rest>.*)$")
CANVAS = re.compile(r"^(?P<name>[a-z0-9]+)(?:_LATE)?_(?P<id>\d+)_(?P<submission>\d+)_(?P<rest>.+)$")
GRADESCOPE = re.compile(r"^submission_\d+$")
GRADESCOPE_METADATA = "submission_metadata.yml"
NOTEBOOK = ".ipynb"
#: where an id can come from; a result carries its own (``layout`` in ``normlab grade --json``)
LAYOUTS = ("moodle", "canvas", "gradescope", "folder", "file")


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who a submission is, as its place in the folder says (decided once, then carried).

    ``student``: the id gradebooks and LMS imports match on; ``name``: the display name;
    ``layout``: ``"moodle"``, ``"canvas"``, ``"gradescope"``, ``"folder"`` or ``"file"``;
    ``file_lab``: the lab the student's own file name names (None when it names none);
    ``assignment``: the lab every notebook is graded as (``--lab``), or None.
    """

    student: str
    name: str
    layout: str
    file_lab: str | None = None
    assignment: str | None = None

    @property
    def lab(self) -> str | None:
        """The lab known before the notebook is read: the assignment's, else the file name's."""
        return self.assignment or self.file_lab

    @property
    def grading_key(self) -> str:
        """What, besides the notebook's bytes, decides how it is graded (for the cache)."""
        return f"assignment={self.assignment or ''};file={self.file_lab or ''}"


WRONG_LAB = "this notebook is lab `{found}`, not this assignment's lab `{assignment}`: hand in the `{assignment}` notebook"
UNKNOWN_LAB = "cannot tell which lab this is: name the file after the lab (e.g. 03_layernorm.ipynb)"


def lab_to_grade(who: Identity, declared: object) -> tuple[str | None, str | None]:
    """(the lab a notebook is graded as, the reason it earns nothing or None).

    ``declared``: the notebook's ``metadata.normlab.lab`` (used only when it is a known lab).
    Under an assignment the lab is the assignment's; a notebook whose metadata (or, without it,
    whose file name) names another lab is graded as the assignment's and earns 0.
    """
    declared = declared if isinstance(declared, str) and declared in all_labs() else None
    if who.assignment is not None:
        found = declared or who.file_lab
        if found is not None and found != who.assignment:
            return who.assignment, WRONG_LAB.format(found=found, assignment=who.assignment)
        return who.assignment, None
    lab = declared or who.file_lab
    return lab, None if lab is not None else UNKNOWN_LAB


def _lab_named(file_name: str) -> str | None:
    lab = lab_for_path(Path(file_name))
    return lab.stem if lab is not None else None


def _is_bare_lab_name(file_name: str) -> bool:
    """``03_layernorm.ipynb``, ``03_layernorm (1).ipynb``: the lab's name and nothing else."""
    path = Path(file_name)
    lab = lab_for_path(path)
    if lab is None:
        return False
    rest = re.sub(re.escape(lab.stem), "", path.stem, flags=re.IGNORECASE)
    return re.fullmatch(r"[\s_\-.]*(\(\d+\))?[\s_\-.]*", rest) is not None


def student_in_file_name(file_name: str) -> str:
    """``03_layernorm_bob.ipynb``, ``dan-03_layernorm (1).ipynb`` -> ``bob``, ``dan``: the file
    name without the lab's stem and a browser's copy number (the whole stem when nothing is
    left: ``03_layernorm.ipynb`` named alone is ``03_layernorm``)."""
    path = Path(file_name)
    lab = lab_for_path(path)
    name = path.stem
    if lab is not None:
        name = re.sub(re.escape(lab.stem), " ", name, flags=re.IGNORECASE)
    name = re.sub(r"\(\d+\)", " ", name)  # "(1)": a browser's copy number, not the student
    name = re.sub(r"[\s_\-.]+", " ", name).strip().replace(" ", "_")
    return name or path.stem


def read_gradescope_submitters(folder: Path) -> dict[str, tuple[str, str]]:
    """``submission_NNN`` -> (id, name) from ``folder/submission_metadata.yml`` (empty without).

    Read line by line (no YAML library needed): each top-level ``submission_NNN:`` block lists
    ``:submitters:`` with ``:name:``, ``:sid:`` and ``:email:``; the first submitter counts.
    """
    try:
        raw = files.read_regular_file(folder / GRADESCOPE_METADATA, DEFAULT.max_notebook_bytes)
        lines = raw.decode("utf-8").splitlines()
    except (OSError, ValueError):
        return {}
    found: dict[str, tuple[str, str]] = {}
    current, fields = None, {}

    def close():
        if current is not None:
            student = fields.get("sid") or fields.get("email") or current.split("_")[-1]
            found[current] = (student, fields.get("name", student))

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


def _flat_file(file_name: str) -> Identity | None:
    """A top-level file whose name an LMS wrote: Canvas's prefix first (the shorter one)."""
    stem = file_name[: -len(NOTEBOOK)] if file_name.endswith(NOTEBOOK) else file_name
    canvas = CANVAS.match(stem)
    if canvas:
        lab = _lab_named(canvas.group("rest") + NOTEBOOK)
        return Identity(canvas.group("id"), canvas.group("name"), "canvas", lab)
    moodle = MOODLE.match(stem)
    if moodle:
        lab = _lab_named(moodle.group("rest") + NOTEBOOK)
        return Identity(moodle.group("id"), moodle.group("name").strip(), "moodle", lab)
    return None


def _moodle_folder(name: str) -> Identity | None:
    moodle = MOODLE.match(name)
    return Identity(moodle.group("id"), moodle.group("name").strip(), "moodle") if moodle else None


def identify(
    path: Path,
    folder: Path | None = None,
    assignment: str | None = None,
    submitters: dict[str, tuple[str, str]] | None = None,
) -> Identity:
    """The identity of the notebook ``path``, found below the named ``folder`` (None: the
    notebook was named itself). ``submitters``: the named folder's Gradescope metadata, when
    the caller has read it once for many notebooks (read here otherwise)."""
    parts = path.relative_to(folder).parts if folder is not None else (path.name,)
    top, file_name = parts[0], parts[-1]
    file_lab = _lab_named(file_name)
    found: Identity | None = None
    if len(parts) > 1:
        found = _moodle_folder(top)
        if found is None and GRADESCOPE.match(top):
            if submitters is None:
                submitters = read_gradescope_submitters(folder)
            if top in submitters:
                student, name = submitters[top]
                found = Identity(student, name, "gradescope")
            elif (folder / GRADESCOPE_METADATA).is_file():
                number = top.split("_")[-1]
                found = Identity(number, number, "gradescope")
        if found is None:
            found = Identity(top, top, "folder")
    else:
        found = _flat_file(file_name)
        if found is not None:
            file_lab = found.file_lab
        elif folder is not None and _is_bare_lab_name(file_name):
            # class/alice/03_layernorm.ipynb graded as `normlab grade class/alice`: alice (or
            # the participant number of a Moodle folder named on the command line).
            own = folder.resolve().name
            found = _moodle_folder(own) or Identity(own, own, "folder")
        if found is None:
            student = student_in_file_name(file_name)
            found = Identity(student, student, "file")
    return dataclasses.replace(found, file_lab=file_lab, assignment=assignment)


# ----------------------------------------------------------------------------- conflicts

Claim = tuple  # (student, lab, path) of one submission


def _groups(claims: list[Claim]) -> dict[tuple[str, str], list[int]]:
    """(student, lab) -> the indices of the claims that share it; no lab shares with none."""
    groups: dict[tuple[str, str], list[int]] = {}
    for index, (student, lab, _path) in enumerate(claims):
        if student is not None and lab is not None:
            groups.setdefault((student, lab), []).append(index)
    return groups


def conflicts(claims: list[Claim]) -> list[list[str]]:
    """For each claim, the paths of the other claims of its id and lab (empty: no conflict)."""
    others: list[list[str]] = [[] for _ in claims]
    for indices in _groups(claims).values():
        for index in indices:
            others[index] = sorted(claims[i][2] for i in indices if i != index)
    return others


def warn_conflicts(
    claims: list[Claim], command: str, write: Callable[[str], object] | None = None
) -> int:
    """One line on stderr per id that several submissions of one lab claim; how many ids."""
    write = write or (lambda line: print(line, file=sys.stderr))
    shared = 0
    for (student, lab), indices in sorted(_groups(claims).items()):
        if len(indices) > 1:
            shared += 1
            paths = ", ".join(sorted(claims[i][2] for i in indices))
            line = (
                f"{command}: {len(indices)} submissions of {lab} claim the id {student!r}: "
                f"{paths}; each keeps it and is flagged (id_conflict): decide which is the "
                "student's before importing grades"
            )
            write(inert.text(line, lines=False))
    return shared


def flag_conflicts(results: list, command: str = "normlab grade") -> list:
    """``results`` with ``id_conflict`` set afresh on each (the other paths that claim its id
    and lab; empty for none), and a warning on stderr for each shared id."""
    claims = [(r.student, r.lab, r.path) for r in results]
    warn_conflicts(claims, command)
    return [
        dataclasses.replace(r, id_conflict=others)
        for r, others in zip(results, conflicts(claims), strict=True)
    ]
