"""Student ids from LMS layouts, gradebooks LMSs import, shards that merge, a Gradescope bundle."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, check_dict

from normlab.grader.grade import find_submissions

SOLUTION = ROOT / "solutions" / "03_layernorm.ipynb"
LAB = ROOT / "labs" / "03_layernorm.ipynb"
FULL = None  # filled by the graded fixture


def put(path: Path, source: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, path)


GRADESCOPE_METADATA = """---
submission_101:
  :submitters:
  - :name: Ana Lima
    :sid: '2024001'
    :email: ana@example.edu
  :created_at: 2026-11-30 10:00:00.000000000 +00:00
submission_102:
  :submitters:
  - :name: Ben Okafor
    :sid: ''
    :email: ben@example.edu
submission_103:
  :submitters:
  - :name: Cy Park
    :sid: '2024003'
"""

# A student's own copy of the export's metadata, inside their own folder, giving a folder named
# like a classmate's submission the classmate's id.
FORGED_METADATA = """---
submission_101:
  :submitters:
  - :name: Ana Lima
    :sid: '2024001'
"""


def lms_class(folder: Path) -> Path:
    """One class in every documented layout: who did the lab (solution), who did not, and in
    each LMS's layout one who hands in a blank lab under a name that claims a classmate's id."""
    put(
        folder / "moodle" / "Carol Diaz_1234_assignsubmission_file_" / "03_layernorm.ipynb",
        SOLUTION,
    )
    put(folder / "moodle" / "Dan Wu_1240_assignsubmission_file_" / "03_layernorm.ipynb", LAB)
    put(folder / "canvas" / "evansd_23456_789_03_layernorm.ipynb", SOLUTION)
    put(folder / "canvas" / "fongg_LATE_23460_790_03_layernorm-1.ipynb", LAB)
    put(folder / "gradescope" / "submission_101" / "03_layernorm.ipynb", SOLUTION)
    put(folder / "gradescope" / "submission_102" / "lab.ipynb", LAB)
    (folder / "gradescope" / "submission_metadata.yml").write_text(GRADESCOPE_METADATA)
    # Canvas: the file name after Canvas's prefix is the student's: it imitates Moodle's for
    # evansd's id 23456.
    put(
        folder / "canvas" / "aaron_2222_335_Evans D_23456_assignsubmission_file_03_layernorm.ipynb",
        LAB,
    )
    # Moodle: inside one's own folder, a file named like a classmate's folder.
    put(
        folder
        / "moodle"
        / "Mallory Ng_1250_assignsubmission_file_"
        / "Carol Diaz_1234_assignsubmission_file_03_layernorm.ipynb",
        LAB,
    )
    # Gradescope: inside one's own folder, a metadata file and a folder named like Ana's.
    put(folder / "gradescope" / "submission_103" / "submission_101" / "03_layernorm.ipynb", LAB)
    (folder / "gradescope" / "submission_103" / "submission_metadata.yml").write_text(
        FORGED_METADATA
    )
    put(folder / "plain" / "grace" / "03_layernorm.ipynb", SOLUTION)
    put(folder / "plain" / "03_layernorm_heidi.ipynb", LAB)
    return folder


EXPECTED_IDS = {
    "moodle/Carol Diaz_1234_assignsubmission_file_/03_layernorm.ipynb": "1234",
    "moodle/Dan Wu_1240_assignsubmission_file_/03_layernorm.ipynb": "1240",
    "canvas/evansd_23456_789_03_layernorm.ipynb": "23456",
    "canvas/fongg_LATE_23460_790_03_layernorm-1.ipynb": "23460",
    "canvas/aaron_2222_335_Evans D_23456_assignsubmission_file_03_layernorm.ipynb": "2222",
    "moodle/Mallory Ng_1250_assignsubmission_file_/"
    "Carol Diaz_1234_assignsubmission_file_03_layernorm.ipynb": "1250",
    "gradescope/submission_103/submission_101/03_layernorm.ipynb": "2024003",
    "gradescope/submission_101/03_layernorm.ipynb": "2024001",
    "gradescope/submission_102/lab.ipynb": "ben@example.edu",
    "plain/grace/03_layernorm.ipynb": "grace",
    "plain/03_layernorm_heidi.ipynb": "heidi",
}


def test_each_lms_layout_gives_the_id_that_lms_imports(tmp_path):
    folder = lms_class(tmp_path / "class")
    for layout in ("moodle", "canvas", "gradescope", "plain"):
        found = {
            e.path.relative_to(folder).as_posix(): e.student
            for e in find_submissions([str(folder / layout)])
        }
        expected = {k: v for k, v in EXPECTED_IDS.items() if k.startswith(layout)}
        assert found == expected


def test_flat_moodle_files_and_folders_given_one_by_one(tmp_path):
    put(tmp_path / "m" / "Carol Diaz_1234_assignsubmission_file_03_layernorm.ipynb", LAB)
    assert [e.student for e in find_submissions([str(tmp_path / "m")])] == ["1234"]
    put(tmp_path / "class" / "alice" / "03_layernorm.ipynb", LAB)
    put(tmp_path / "class" / "bob" / "03_layernorm.ipynb", LAB)
    entries = find_submissions([str(tmp_path / "class" / "alice"), str(tmp_path / "class" / "bob")])
    assert [e.student for e in entries] == ["alice", "bob"]


def test_a_name_inside_the_lms_part_never_changes_the_id(tmp_path):
    """Only the outermost part, the one the LMS wrote, gives the id: a Moodle folder (or
    Gradescope folder, or Canvas file) named like a classmate's, inside a plain student folder,
    is that student's; so is a Gradescope metadata file below the top of the named folder."""
    put(tmp_path / "class" / "zoe" / "Carol Diaz_1234_assignsubmission_file_" / "03.ipynb", LAB)
    put(tmp_path / "class" / "yan" / "evansd_23456_789_03_layernorm.ipynb", LAB)
    put(tmp_path / "class" / "xia" / "submission_101" / "03_layernorm.ipynb", LAB)
    (tmp_path / "class" / "xia" / "submission_metadata.yml").write_text(GRADESCOPE_METADATA)
    entries = find_submissions([str(tmp_path / "class")])
    assert [(e.student, e.identity.layout) for e in entries] == [
        ("xia", "folder"),
        ("yan", "folder"),
        ("zoe", "folder"),
    ]


@pytest.mark.parametrize(
    "name, student",
    [
        # Canvas's prefix, then a file name that imitates Moodle's or Canvas's for 5678
        ("aaron_2222_335_Zoe Victim_5678_assignsubmission_file_03_layernorm.ipynb", "2222"),
        ("aaron_2222_335_victim_5678_901_03_layernorm.ipynb", "2222"),
        ("aaron_LATE_2222_336_victim_5678_901_03_layernorm.ipynb", "2222"),
        # Moodle's prefix, then a file name that imitates Canvas's or Moodle's
        ("Zoe Ruiz_1111_assignsubmission_file_victim_5678_901_03_layernorm.ipynb", "1111"),
        ("zoe_1111_assignsubmission_file_victim_5678_901_03_layernorm.ipynb", "1111"),
        (
            "Zoe Ruiz_1111_assignsubmission_file_V_5678_assignsubmission_file_03_layernorm.ipynb",
            "1111",
        ),
    ],
)
def test_a_flat_file_gets_the_id_of_the_lms_prefix_never_of_the_rest(tmp_path, name, student):
    put(tmp_path / "download" / name, LAB)
    (entry,) = find_submissions([str(tmp_path / "download")])
    assert (entry.student, entry.identity.file_lab) == (student, "03_layernorm")


def test_a_moodle_folder_named_on_the_command_line_gives_its_participant(tmp_path):
    folder = tmp_path / "Carol Diaz_1234_assignsubmission_file_"
    put(folder / "03_layernorm.ipynb", LAB)
    (entry,) = find_submissions([str(folder)])
    assert (entry.student, entry.identity.name) == ("1234", "Carol Diaz")


def test_two_submissions_claiming_one_id_keep_it_and_are_both_flagged(tmp_path):
    """Nothing is renamed: both keep the id, JSON, table, CSV and stderr flag both."""
    from conftest import grade_json, run_cli

    first, second = tmp_path / "a" / "x" / "03_layernorm.ipynb", tmp_path / "b" / "x" / "l.ipynb"
    put(first, SOLUTION)
    put(second, LAB)
    assert [
        e.student for e in find_submissions([str(first.parents[1]), str(second.parents[1])])
    ] == [
        "x",
        "x",
    ]
    arguments = [first.parents[1], second.parents[1], "--lab", "03_layernorm"]
    code, data, stderr = grade_json(*arguments, extra=["--csv", tmp_path / "grades.csv"])
    assert code == 0, stderr
    solved, fresh = data["submissions"]
    assert (solved["student"], solved["score"]) == ("x", solved["max_score"])
    assert (fresh["student"], fresh["score"]) == ("x", 0)
    assert solved["id_conflict"] == [str(second)] and fresh["id_conflict"] == [str(first)]
    warning = f"2 submissions of 03_layernorm claim the id 'x': {first}, {second}"
    assert warning in stderr
    gradebook = {row["path"]: row for row in csv.DictReader(open(tmp_path / "grades.csv"))}
    assert gradebook[str(first)]["id_conflict"] == str(second)
    assert gradebook[str(second)]["id_conflict"] == str(first)
    table = run_cli(["grade", *map(str, arguments), "--quiet"])[1]
    assert f"! the id x is also claimed for 03_layernorm by: {second}" in table
    # A third submission of another student, and one of another lab by x: no flag.
    put(tmp_path / "c" / "y" / "03_layernorm.ipynb", LAB)
    put(tmp_path / "c" / "x" / "04_rmsnorm.ipynb", ROOT / "labs" / "04_rmsnorm.ipynb")
    code, data, _ = grade_json(tmp_path / "c", first.parents[1])
    assert [(s["student"], s["id_conflict"]) for s in data["submissions"]] == [
        ("x", []),
        ("y", []),
        ("x", []),
    ]


def _graded(student, lab, score, path, name=None, layout="canvas"):
    return {
        "student": student,
        "name": name,
        "layout": layout,
        "lab": lab,
        "score": score,
        "max_score": 16,
        "path": path,
        "checks": [check_dict("passed", score, score), check_dict("failed", 0, 16 - score)],
    }


def test_the_canvas_import_gives_an_id_only_where_canvas_wrote_it(tmp_path):
    """A blank lab handed in as 03_layernorm_5678.ipynb (a plain file name: the student chose
    5678, a classmate's Canvas user id) gets a row without ID, and the export says so."""
    from normlab.instructor import lms

    submissions = [
        _graded("5678", "03_layernorm", 0, "03_layernorm_5678.ipynb", layout="file"),
        _graded("zoe", "03_layernorm", 16, "03_layernorm_zoe.ipynb", layout="file"),
        _graded("1111", "03_layernorm", 7, "b_1111_4_03_layernorm.ipynb", "bo"),
    ]
    assert rows(lms.canvas_csv(submissions))[2:] == [
        ["bo", "1111", "", "", "", "7"],
        ["5678", "", "", "", "", "0"],
        ["zoe", "", "", "", "", "16"],
    ]
    results = tmp_path / "graded.json"
    results.write_text(json.dumps({"submissions": submissions}))
    done = normlab("export", "canvas", tmp_path / "canvas.csv", "--results", results)
    assert done.stderr.splitlines() == [
        "normlab export canvas: 2 ids are not from Canvas's download, so their rows have no ID "
        "(Canvas's user id): 5678, zoe; fill it in (the ID column of Canvas's gradebook "
        "export) before importing"
    ]


def test_every_export_lists_both_submissions_that_claim_one_id(tmp_path):
    """No export merges them (the best score once won silently) or drops one: one row each, in
    the results' order, and a warning; the instructor deletes the wrong row before importing. A
    lab the id handed in once is on each of its rows, so deleting either keeps it."""
    from normlab.instructor import lms

    submissions = [
        _graded("5678", "03_layernorm", 0, "a_5678_1_03_layernorm.ipynb", "zoev"),
        _graded("5678", "03_layernorm", 16, "victim_5678_2_03_layernorm.ipynb", "victim"),
        _graded("5678", "04_rmsnorm", 9, "victim_5678_3_04_rmsnorm.ipynb", "victim"),
        _graded("1111", "03_layernorm", 7, "b_1111_4_03_layernorm.ipynb", "bo"),
    ]
    canvas = rows(lms.canvas_csv(submissions))
    assert canvas[2:] == [
        ["bo", "1111", "", "", "", "7", ""],
        ["zoev", "5678", "", "", "", "0", "9"],
        ["victim", "5678", "", "", "", "16", "9"],
    ]
    from_moodle = [{**s, "layout": "moodle"} for s in submissions]
    moodle = rows(lms.moodle_csv(from_moodle, "03_layernorm"))
    assert [row[:3] for row in moodle[1:]] == [
        ["Participant 1111", "bo", "7.00"],
        ["Participant 5678", "zoev", "0.00"],
        ["Participant 5678", "victim", "16.00"],
    ]
    summary = rows(lms.class_summary(submissions))
    assert [row[:4] for row in summary[1:]] == [
        ["1111", "bo", "7", ""],
        ["5678", "zoev", "0", "9"],
        ["5678", "victim", "16", "9"],
    ]
    results = tmp_path / "graded.json"
    results.write_text(json.dumps({"submissions": submissions}))
    done = normlab("export", "canvas", tmp_path / "canvas.csv", "--results", results)
    assert rows((tmp_path / "canvas.csv").read_text()) == canvas
    assert done.stderr.splitlines() == [
        "normlab export: 2 submissions of 03_layernorm claim the id '5678': "
        "a_5678_1_03_layernorm.ipynb, victim_5678_2_03_layernorm.ipynb; each keeps it and is "
        "flagged (id_conflict): decide which is the student's before importing grades"
    ]


def normlab(*arguments, check=True):
    """`normlab ARGUMENTS...` in this process (the submissions still run in their own): a new
    interpreter for each command would import PyTorch again, 2.4 s of CPU each time."""
    from conftest import run_cli_process

    done = run_cli_process(arguments)
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = lms_class(tmp_path_factory.mktemp("lms") / "class")
    out = folder.parent
    layouts = [folder / layout for layout in ("moodle", "canvas", "gradescope", "plain")]
    one = normlab("grade", *layouts, "--json", "--csv", out / "one.csv", "--jobs", "2").stdout
    (out / "one.json").write_text(one)
    return layouts, json.loads(one)


@pytest.mark.isolation
def test_lms_class_grades_into_the_right_ids(graded):
    _, result = graded
    by_id = {s["student"]: s for s in result["submissions"]}
    assert set(by_id) == set(EXPECTED_IDS.values())
    solved = {"1234", "23456", "2024001", "grace"}
    for student, submission in by_id.items():
        expected = submission["max_score"] if student in solved else 0
        assert submission["score"] == expected, (student, submission["error"])


def rows(text):
    return list(csv.reader(io.StringIO(text)))


def test_canvas_moodle_and_summary_exports(graded):
    layouts, result = graded
    out = layouts[0].parent.parent
    full = result["submissions"][0]["max_score"]
    normlab("export", "canvas", out / "canvas.csv", "--results", out / "one.json")
    canvas = rows((out / "canvas.csv").read_text())
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "03_layernorm"]
    assert canvas[1][0].strip() == "Points Possible" and canvas[1][-1] == str(full)
    by_id = {row[1]: row for row in canvas[2:]}
    assert by_id["23456"][0] == "evansd" and by_id["23456"][-1] == str(full)
    assert by_id["23460"][-1] == "0"
    # only Canvas's download gives Canvas user ids: every other row's ID is left to fill in
    canvas_ids = {i for p, i in EXPECTED_IDS.items() if p.startswith("canvas/")}
    assert set(by_id) == canvas_ids | {""}
    assert len(canvas) - 2 == len({s["student"] for s in result["submissions"]})

    normlab("export", "moodle", out / "moodle", "--results", out / "one.json")
    moodle = rows((out / "moodle" / "moodle-03_layernorm.csv").read_text())
    assert moodle[0] == [
        "Identifier",
        "Full name",
        "Grade",
        "Maximum Grade",
        "Last modified (grade)",
        "Feedback comments",
    ]
    by_participant = {row[0]: row for row in moodle[1:]}
    assert by_participant["Participant 1234"][1:4] == ["Carol Diaz", f"{full:.2f}", f"{full:.2f}"]
    assert by_participant["Participant 1240"][1:3] == ["Dan Wu", "0.00"]

    normlab("export", "summary", out / "summary.csv", "--results", out / "one.json")
    summary = rows((out / "summary.csv").read_text())
    assert summary[0] == ["student", "name", "03_layernorm", "total", "max_total"]
    assert len(summary) == 1 + len(EXPECTED_IDS)
    ana = next(row for row in summary if row[0] == "2024001")
    assert ana[1:] == ["Ana Lima", str(full), str(full), str(full)]


@pytest.mark.isolation
def test_three_shards_merge_into_the_one_run_byte_for_byte(graded):
    layouts, _ = graded
    out = layouts[0].parent.parent
    shards = []
    for index in (1, 2, 3):
        text = normlab("grade", *layouts, "--json", "--shard", f"{index}/3").stdout
        shard = out / f"shard{index}.json"
        shard.write_text(text)
        shards.append(shard)
        assert 0 < len(json.loads(text)["submissions"]) < len(EXPECTED_IDS)
    merged = normlab("merge", *shards, "--json", "--csv", out / "merged.csv").stdout
    assert merged == (out / "one.json").read_text()
    assert (out / "merged.csv").read_bytes() == (out / "one.csv").read_bytes()
    missing = normlab("merge", *shards[:2], check=False)
    assert missing.returncode == 2 and "missing shard" in missing.stderr


def run_gradescope(bundle: Path, tmp_path: Path, notebook: Path | None, name: str) -> dict:
    root = tmp_path / name / "autograder"
    shutil.copytree(bundle, root / "source")
    (root / "submission").mkdir(parents=True)
    if notebook is not None:
        shutil.copy(notebook, root / "submission" / "my lab.ipynb")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "NORMLAB_PYTHON": sys.executable}
    subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, check=True)
    return json.loads((root / "results" / "results.json").read_text())


@pytest.mark.isolation
def test_gradescope_bundle_in_a_simulated_autograder(tmp_path):
    """The solution earns full marks, the fresh lab 0, nothing submitted 0; a filled lab 04
    handed in to lab 03's autograder (named after lab 03: the bundle renames it anyway) 0, and is
    told why (it once earned 18/18 on the 16-point assignment, graded with lab 04's checks)."""
    bundle = tmp_path / "bundle"
    normlab("export", "gradescope", bundle, "--lab", "03_layernorm")
    assert (bundle / "setup.sh").is_file() and os.access(bundle / "run_autograder", os.X_OK)
    subprocess.run(["bash", "-n", str(bundle / "setup.sh")], check=True)
    assert (bundle / "normlab" / "src" / "normlab" / "grader" / "grade.py").is_file()

    solved = run_gradescope(bundle, tmp_path, SOLUTION, "solved")
    fresh = run_gradescope(bundle, tmp_path, LAB, "fresh")
    empty = run_gradescope(bundle, tmp_path, None, "empty")
    other = run_gradescope(bundle, tmp_path, filled_lab(tmp_path, "04_rmsnorm"), "other")
    full = sum(test["max_score"] for test in solved["tests"])
    assert full > 0 and solved["score"] == full
    assert fresh["score"] == 0 and len(fresh["tests"]) == len(solved["tests"])
    for test in solved["tests"] + fresh["tests"]:
        assert {"name", "score", "max_score", "output", "visibility"} <= set(test)
        assert 0 <= test["score"] <= test["max_score"]
    assert any(test["output"] for test in fresh["tests"])
    assert empty["score"] == 0 and "No notebook" in empty["output"]
    shown = [test for test in other["tests"] if test["visibility"] != "hidden"]
    assert (other["score"], shown) == (0, [])
    assert other["output"] == (
        f"03_layernorm: 0 / {full} points. Graded: my lab.ipynb.\n\nthis notebook is lab `04_rmsnorm`, not this "
        "assignment's lab `03_layernorm`: hand in the `03_layernorm` notebook"
    )


def filled_lab(folder: Path, stem: str) -> Path:
    """A learner's lab ``stem`` filled in: the solution's cells under the lab's metadata."""
    lab = json.loads((ROOT / "labs" / f"{stem}.ipynb").read_text())
    solution = json.loads((ROOT / "solutions" / f"{stem}.ipynb").read_text())
    solution["metadata"]["normlab"] = lab["metadata"]["normlab"]
    path = folder / f"filled-{stem}.ipynb"
    path.write_text(json.dumps(solution))
    return path


def test_a_notebook_named_on_the_command_line_gets_its_lms_id(tmp_path):
    put(tmp_path / "evansd_23456_789_03_layernorm.ipynb", LAB)
    (entry,) = find_submissions([str(tmp_path / "evansd_23456_789_03_layernorm.ipynb")])
    assert entry.student == "23456"
