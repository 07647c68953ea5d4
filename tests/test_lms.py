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
from conftest import ROOT

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
"""


def lms_class(folder: Path) -> Path:
    """One class in every documented layout: who did the lab (solution) and who did not."""
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
    put(folder / "plain" / "grace" / "03_layernorm.ipynb", SOLUTION)
    put(folder / "plain" / "03_layernorm_heidi.ipynb", LAB)
    return folder


EXPECTED_IDS = {
    "moodle/Carol Diaz_1234_assignsubmission_file_/03_layernorm.ipynb": "1234",
    "moodle/Dan Wu_1240_assignsubmission_file_/03_layernorm.ipynb": "1240",
    "canvas/evansd_23456_789_03_layernorm.ipynb": "23456",
    "canvas/fongg_LATE_23460_790_03_layernorm-1.ipynb": "23460",
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


def test_two_submissions_never_share_an_id(tmp_path, capsys):
    put(tmp_path / "a" / "x" / "03_layernorm.ipynb", LAB)
    put(tmp_path / "b" / "x" / "03_layernorm.ipynb", LAB)
    entries = find_submissions([str(tmp_path / "a"), str(tmp_path / "b")])
    assert [e.student for e in entries] == ["x", "x#2"]
    assert "would share the id 'x'" in capsys.readouterr().err


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

    normlab("export", "moodle", out / "moodle", "--results", out / "one.json")
    moodle = rows((out / "moodle" / "moodle-03_layernorm.csv").read_text())
    assert moodle[0] == ["Identifier", "Full name", "Grade", "Maximum Grade", "Feedback comments"]
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
    bundle = tmp_path / "bundle"
    normlab("export", "gradescope", bundle, "--lab", "03_layernorm")
    assert (bundle / "setup.sh").is_file() and os.access(bundle / "run_autograder", os.X_OK)
    subprocess.run(["bash", "-n", str(bundle / "setup.sh")], check=True)
    assert (bundle / "normlab" / "src" / "normlab" / "grader" / "grade.py").is_file()

    solved = run_gradescope(bundle, tmp_path, SOLUTION, "solved")
    fresh = run_gradescope(bundle, tmp_path, LAB, "fresh")
    empty = run_gradescope(bundle, tmp_path, None, "empty")
    full = sum(test["max_score"] for test in solved["tests"])
    assert full > 0 and solved["score"] == full
    assert fresh["score"] == 0 and len(fresh["tests"]) == len(solved["tests"])
    for test in solved["tests"] + fresh["tests"]:
        assert {"name", "score", "max_score", "output", "visibility"} <= set(test)
        assert 0 <= test["score"] <= test["max_score"]
    assert any(test["output"] for test in fresh["tests"])
    assert empty["score"] == 0 and "No notebook" in empty["output"]


def test_a_notebook_named_on_the_command_line_gets_its_lms_id(tmp_path):
    put(tmp_path / "evansd_23456_789_03_layernorm.ipynb", LAB)
    (entry,) = find_submissions([str(tmp_path / "evansd_23456_789_03_layernorm.ipynb")])
    assert entry.student == "23456"
