"""Broken and hostile submissions: the run completes, each gets its exact outcome, nobody else is touched.

The corpus is graded twice: as by default (children forked from the fork server) and under
``--sandbox`` (a new interpreter in bubblewrap, when bubblewrap can run here). Under the sandbox
the filesystem cases are checked too: nothing is written outside the submission's temporary
directory, and another student's file cannot be read.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from corpus import FULL, LAB, SOLUTION, build

from normlab.grader.sandbox import bwrap_available

SANDBOX = bwrap_available()
ORIGINAL = "original content\n"


MODES = ["fork server", "sandbox"] if SANDBOX else ["fork server"]


@pytest.fixture(scope="module", params=MODES)
def corpus_run(tmp_path_factory, request):
    base = tmp_path_factory.mktemp("adversarial")
    folder = base / "class"
    folder.mkdir()
    (base / "outside").mkdir()
    targets = {
        "sentinel": base / "outside" / "sentinel.txt",
        "gradebook": base / "out" / "grades.csv",
        "victim": folder / "03_layernorm_control_correct.ipynb",
    }
    targets["sentinel"].write_text(ORIGINAL)
    expected = build(folder, targets)
    shutil.copy(SOLUTION, targets["victim"])
    shutil.copy(LAB, folder / "03_layernorm_control_lab.ipynb")
    command = [
        sys.executable,
        "-m",
        "normlab.cli",
        "grade",
        str(folder),
        "--json",
        "--jobs",
        "2",
        "--timeout",
        "15",
        "--csv",
        str(targets["gradebook"]),
    ]
    if request.param == "sandbox":
        command.append("--sandbox")
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - start
    assert done.returncode == 0, done.stderr[-2000:]
    results = {Path(s["path"]).name: s for s in json.loads(done.stdout)["submissions"]}
    print(f"graded {len(results)} adversarial notebooks in {seconds:.1f} s ({request.param})")
    return results, expected, targets, request.param


def test_corpus_has_at_least_twenty_kinds(corpus_run):
    _, expected, _, _ = corpus_run
    assert len(expected) >= 20


def test_every_submission_is_graded(corpus_run):
    results, expected, _, _ = corpus_run
    assert set(expected) | {
        "03_layernorm_control_correct.ipynb",
        "03_layernorm_control_lab.ipynb",
    } == set(results)


def _outcome_cases():
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        targets = {"sentinel": scratch / "s", "gradebook": scratch / "g", "victim": scratch / "v"}
        return sorted(build(scratch, targets))


@pytest.mark.parametrize("name", _outcome_cases())
def test_exact_outcome(corpus_run, name):
    results, expected, _, _ = corpus_run
    score, text = expected[name]
    result = results[name]
    assert result["score"] == score, (result["error"], [c["message"] for c in result["checks"]])
    everything = (result["error"] or "") + "\n".join(c["message"] for c in result["checks"])
    assert text in everything


def test_other_students_are_graded_normally(corpus_run):
    results, _, _, mode = corpus_run
    assert results["03_layernorm_control_correct.ipynb"]["score"] == FULL
    assert results["03_layernorm_control_correct.ipynb"]["error"] is None
    assert results["03_layernorm_control_lab.ipynb"]["score"] == 0


def test_gradebook_holds_the_real_scores(corpus_run):
    results, _, targets, _ = corpus_run
    with open(targets["gradebook"], newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert len(rows) == len(results)
    for row in rows:
        assert int(row["score"]) == results[Path(row["path"]).name]["score"]


def test_nothing_written_outside_the_sandbox(corpus_run):
    _, _, targets, mode = corpus_run
    if mode != "sandbox":
        pytest.skip("without --sandbox a notebook can write where the grading user can")
    assert targets["sentinel"].read_text() == ORIGINAL


def test_another_students_file_cannot_be_read(corpus_run):
    results, _, _, mode = corpus_run
    if mode != "sandbox":
        pytest.skip("without --sandbox a notebook can read what the grading user can")
    assert "FileNotFoundError" in (results["03_layernorm_reads_other_student.ipynb"]["error"] or "")
