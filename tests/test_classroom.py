"""Grading a class: student ids from LMS layouts, gradebook and feedback, idempotent, resumable."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import grading_budget, run_cli_process
from corpus import FULL, LAB, SOLUTION

from normlab.grader.grade import find_submissions
from normlab.grader.identity import identify


@pytest.mark.parametrize(
    "relative, student",
    [
        ("alice/03_layernorm.ipynb", "alice"),
        (
            "Alice Smith_1234_assignsubmission_file_/notebooks/03_layernorm.ipynb",
            "1234",  # Moodle's participant number: the grading worksheet's "Participant 1234"
        ),
        ("03_layernorm_bob.ipynb", "bob"),
        ("carol_03_layernorm.ipynb", "carol"),
        ("dan-03_layernorm (1).ipynb", "dan"),
        ("smithe_12345_678_03_LayerNorm.ipynb", "12345"),  # Canvas's user ID
    ],
)
def test_student_ids_from_documented_layouts(tmp_path, relative, student):
    path = tmp_path / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    (entry,) = find_submissions([str(tmp_path)])
    assert entry.student == student


def test_a_lone_notebook_is_its_own_student():
    assert identify(Path("03_layernorm.ipynb")).student == "03_layernorm"


def _buggy(path: Path, old: str, new: str) -> None:
    notebook = nbformat.read(SOLUTION, as_version=4)
    for cell in notebook.cells:
        cell.source = cell.source.replace(old, new)
    nbformat.write(notebook, path)


BUGS = [
    ("centred / np.sqrt(var + eps)", "centred / (np.sqrt(var) + eps)"),
    (
        "(centred**2).mean(axis=-1, keepdims=True)  # population",
        "(centred**2).sum(axis=-1, keepdims=True) / (x.shape[-1] - 1)  #",
    ),
    ("return gamma * x_hat + beta", "return x_hat"),
    ("dx = inv_std * (g - mean_term - variance_term)", "dx = inv_std * (g - mean_term)"),
    ('D1_ANSWER = "b"', 'D1_ANSWER = "a"'),
]
HOSTILE = {
    "looper": "import time\nwhile True:\n    time.sleep(0.1)",  # endless (CPU burners: corpus.py)
    "exiter": "import os\nos._exit(3)",
    "liar": "print('score: 13/13')",
}


CORRECT = 5  # the correct students: the first five, then the buggy ones


@pytest.fixture(scope="module")
def a_class(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    """20 students: 5 correct (the same bytes: more would cost grading time and test nothing
    new), 10 with one bug each, 2 fresh labs, 3 hostile."""
    root = tmp_path_factory.mktemp("class") / "submissions"
    expected = {}
    for i in range(CORRECT):
        folder = root / f"student{i:02d}"
        folder.mkdir(parents=True)
        shutil.copy(SOLUTION, folder / "03_layernorm.ipynb")
        expected[f"student{i:02d}"] = FULL
    # What each bug must lose, reasoned from the checks' inputs:
    # eps outside the root: random (2), 3-D with 0.01-scale rows (1), variance 1e-8 (1) = 4;
    # d - 1 in the variance: every forward check (7; d = 1 even divides by zero);
    # no affine step: every forward check but the gamma = 1, beta = 0 invariants (6);
    # dx without the variance term: dx (2) and the 3-D backward check (1) = 3; wrong letter: 1.
    bug_scores = [FULL - 4, FULL - 7, FULL - 6, FULL - 3, FULL - 1]
    for i in range(10):
        name = f"student{CORRECT + i:02d}"
        (root / name).mkdir()
        old, new = BUGS[i % len(BUGS)]
        _buggy(root / name / "03_layernorm.ipynb", old, new)
        expected[name] = bug_scores[i % len(BUGS)]
    for i in range(2):
        name = f"student{CORRECT + 10 + i:02d}"
        (root / name).mkdir()
        shutil.copy(LAB, root / name / "03_layernorm.ipynb")
        expected[name] = 0
    for i, (kind, source) in enumerate(HOSTILE.items()):
        name = f"student{CORRECT + 12 + i:02d}"
        (root / name).mkdir()
        notebook = nbformat.read(SOLUTION, as_version=4)
        notebook.cells.append(nbformat.v4.new_code_cell(source))
        nbformat.write(notebook, root / name / "03_layernorm.ipynb")
        expected[name] = 0 if kind == "exiter" else FULL
    return root, expected


def grade_class(root: Path, out: Path, *extra) -> subprocess.CompletedProcess:
    """`normlab grade` over the class, run in this process (the submissions in their own)."""
    arguments = [
        "grade",
        str(root),
        "--csv",
        str(out / "grades.csv"),
        "--feedback",
        str(out / "feedback"),
        "--json",
        "--jobs",
        "2",
        *grading_budget(cell_s=5),  # the looper's cell stops after 5 s, as on a 20 s budget
        *extra,
    ]
    return run_cli_process(arguments)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_class_grades_exactly_and_identically_twice(a_class, tmp_path):
    root, expected = a_class
    first = grade_class(root, tmp_path / "a", "--force")
    assert first.returncode == 0, first.stderr
    scores = {s["student"]: s["score"] for s in json.loads(first.stdout)["submissions"]}
    assert scores == expected
    again = grade_class(root, tmp_path / "b", "--force")
    assert again.stdout == first.stdout
    produced_a = {k: v for k, v in snapshot(tmp_path / "a").items() if not k.endswith("cache.json")}
    produced_b = {k: v for k, v in snapshot(tmp_path / "b").items() if not k.endswith("cache.json")}
    assert produced_a == produced_b
    assert len([k for k in produced_a if k.endswith(".md")]) == len(expected)
    first_bug = f"student{CORRECT:02d}"  # eps outside the root
    feedback = (tmp_path / "a" / "feedback" / first_bug / "03_layernorm.md").read_text()
    assert "Put eps inside the root" in feedback and f"Score: {FULL - 4} / {FULL}" in feedback


def test_interrupted_run_resumes_without_regrading(a_class, tmp_path):
    """A run killed at any moment leaves no half-written gradebook; a later run with the same
    cache reuses every result it holds (the cache is keyed by the notebooks' bytes)."""
    root, expected = a_class
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "normlab.cli",
        "grade",
        str(root),
        "--csv",
        str(out / "grades.csv"),
        "--jobs",
        "2",
        *grading_budget(cell_s=5),
        "--quiet",
    ]
    cache = out / "grades.csv.cache.json"
    # An interrupted run: a first run over part of the class, then a run killed as abruptly as
    # it gets (no chance to clean up) at whatever point it reached.
    part = tmp_path / "part"
    part.mkdir()
    for student in sorted(expected)[::3]:
        shutil.copytree(root / student, part / student)
    partial = subprocess.run(
        [*command[:4], str(part), *command[5:]], capture_output=True, text=True, timeout=900
    )
    assert partial.returncode == 0, partial.stderr[-2000:]
    (out / "grades.csv").unlink()
    cached = cached_digests(cache)
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    if (out / "grades.csv").exists():  # it may have finished: then it is whole
        assert len((out / "grades.csv").read_text().splitlines()) == 1 + len(expected)
    assert cached_digests(cache) >= cached  # every result it held is still there and valid

    resumed = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0
    reused = int(resumed.stderr.split("reused ")[1].split()[0])
    # Every student whose notebook's bytes were graded before is reused, not regraded.
    digests = {
        student: hashlib.sha256((root / student / "03_layernorm.ipynb").read_bytes()).hexdigest()
        for student in expected
    }
    assert reused >= sum(digest in cached for digest in digests.values())
    rows = (out / "grades.csv").read_text().splitlines()[1:]
    assert {row.split(",")[0]: int(row.split(",")[2]) for row in rows} == expected


def cached_digests(cache: Path) -> set[str]:
    """The digests of the results a cache file holds (JSON lines: the fingerprint, then one
    result per line); a line cut short by the kill is not one of them."""
    digests = set()
    for line in cache.read_text().splitlines()[1:]:
        try:
            digests.add(json.loads(line)["digest"])
        except ValueError:
            pass
    return digests


def test_late_submissions_only_are_graded(a_class, tmp_path):
    root, expected = a_class
    class_copy = tmp_path / "class"
    shutil.copytree(root, class_copy)
    out = tmp_path / "out"
    first = grade_class(class_copy, out)
    assert first.returncode == 0
    for name in ("late1", "late2", "late3"):
        (class_copy / name).mkdir()
        notebook = nbformat.read(SOLUTION, as_version=4)
        notebook.cells.append(nbformat.v4.new_code_cell(f"# submitted late by {name}"))
        nbformat.write(notebook, class_copy / name / "03_layernorm.ipynb")
    (class_copy / "late4").mkdir()  # the same bytes as an earlier notebook: its result is reused
    shutil.copy(SOLUTION, class_copy / "late4" / "03_layernorm.ipynb")
    second = grade_class(class_copy, out)
    assert f"graded 3 notebook(s), reused {len(expected) + 1}" in second.stderr
    scores = {s["student"]: s["score"] for s in json.loads(second.stdout)["submissions"]}
    assert scores == {**expected, "late1": FULL, "late2": FULL, "late3": FULL, "late4": FULL}


def test_extra_checks_count_and_show_by_name_only(tmp_path):
    extra = tmp_path / "hidden_checks.py"
    extra.write_text(
        "import numpy as np\n"
        "from normlab.grader.core import CheckFailed\n"
        "from normlab.grader.registry import get_lab\n\n"
        "@get_lab('03_layernorm').check('hidden: wide rows', points=2, uses=['layernorm_forward'])\n"
        "def wide_rows(sub):\n"
        "    SECRET_SOURCE_MARKER = 1\n"
        "    y = sub.call('layernorm_forward', np.ones((2, 4096)) * np.arange(4096), np.ones(4096), np.zeros(4096)).items[0].array\n"
        "    if not np.allclose(y.mean(-1), 0, atol=1e-9):\n"
        "        raise CheckFailed('rows of 4096 features should have mean 0')\n"
    )
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "normlab.cli",
        "grade",
        str(SOLUTION),
        str(LAB),
        "--json",
        "--extra-checks",
        str(extra),
        "--feedback",
        str(out),
        *grading_budget(),  # the default 60 s of wall time ran out once at load 12
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    solution, lab = json.loads(done.stdout)["submissions"]
    assert (solution["score"], solution["max_score"]) == (FULL + 2, FULL + 2)
    assert lab["checks"][-1]["name"] == "hidden: wide rows" and not lab["checks"][-1]["passed"]
    for page in out.rglob("*.*"):
        assert "SECRET_SOURCE_MARKER" not in page.read_text()


def test_bad_extra_checks_path_is_a_usage_error(tmp_path):
    done = run_cli_process(["grade", SOLUTION, "--extra-checks", tmp_path / "none.py"])
    assert done.returncode == 2 and "no such file" in done.stderr
