"""Fresh labs run to the end and say "not implemented"; the grader gives solutions full marks, labs 0.

Solutions and demos are executed once per ``make test``, by nbval (which also compares their
stored outputs); labs are stored without outputs, so they are executed here. How long each
notebook takes is measured by ``make bench`` (benchmarks/bench.py), not asserted here.
"""

from __future__ import annotations

import nbformat
import pytest
from conftest import HANG_GUARD_S, ROOT, grade_json
from nbclient import NotebookClient

from normlab.grader.registry import all_labs

LABS = sorted((ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))


def execute(path):
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook,
        timeout=HANG_GUARD_S,  # per cell; a healthy cell takes seconds
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    return notebook


@pytest.mark.notebooks
@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_fresh_lab_runs_to_the_end_and_says_not_implemented(path):
    reports = check_reports(path)
    assert reports and all("not implemented yet" in r or "no answer yet" in r for r in reports)


def check_reports(path):
    """Run a notebook to the end; the text reports of its ``check(...)`` cells."""
    notebook = execute(path)
    return [
        output.get("data", {}).get("text/plain", "")
        for cell in notebook.cells
        if cell.cell_type == "code" and cell.source.startswith("check(")
        for output in cell.outputs
    ]


@pytest.fixture(scope="module")
def every_solution_and_lab():
    """All solutions and fresh labs graded in one `normlab grade --json` run."""
    paths = [
        ROOT / folder / f"{stem}.ipynb" for stem in all_labs() for folder in ("solutions", "labs")
    ]
    code, data, stderr = grade_json(*paths)
    assert code == 0, stderr[-2000:]
    return {(s["lab"], ROOT / s["path"]): s for s in data["submissions"]}


@pytest.mark.isolation
@pytest.mark.parametrize("stem", sorted(all_labs()))
def test_solution_gets_full_marks_and_lab_gets_zero(stem, every_solution_and_lab):
    solution = every_solution_and_lab[stem, ROOT / "solutions" / f"{stem}.ipynb"]
    lab = every_solution_and_lab[stem, ROOT / "labs" / f"{stem}.ipynb"]
    assert solution["score"] == solution["max_score"] > 0, solution
    assert lab["score"] == 0 and lab["max_score"] == solution["max_score"]
