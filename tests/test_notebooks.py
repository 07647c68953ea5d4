"""Fresh labs run to the end and say "not implemented" (their grades: tests/test_adversarial.py).

Solutions and demos are executed once per ``make test``, by nbval (which also compares their
stored outputs); labs are stored without outputs, so they are executed here. How long each
notebook takes is measured by ``make bench`` (benchmarks/bench.py), not asserted here.
"""

from __future__ import annotations

import nbformat
import pytest
from conftest import HANG_GUARD_S, ROOT
from nbclient import NotebookClient

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


# That every solution earns full marks and every fresh lab none, graded by `normlab grade`, is
# tests/test_adversarial.py::test_every_solution_full_and_every_fresh_lab_zero (in each mode).
