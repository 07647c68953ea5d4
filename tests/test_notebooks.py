"""Fresh labs run to the end and say "not implemented" (their grades: tests/test_adversarial.py).

Solutions and demos are executed once per ``make test``, by nbval (which also compares their
stored outputs); labs are stored without outputs, so they are executed here. How long each
notebook takes is measured by ``make bench`` (benchmarks/bench.py), not asserted here.

The labs of one folder share one kernel, each run in a namespace emptied by ``%reset -f``: a
kernel and its imports (PyTorch alone is 2.4 s of CPU here) cost more than a fresh lab's cells.
What a lab needs from a kernel of its own, its setup cells, is the same in its solution, which
nbval runs in a fresh kernel.
"""

from __future__ import annotations

import pytest
from conftest import ROOT, SharedKernel, check_reports

from normlab import chapter_files

LABS = chapter_files(ROOT / "labs", ".ipynb")


@pytest.fixture(scope="module")
def kernel():
    shared = SharedKernel()
    yield shared
    shared.close()


@pytest.mark.notebooks
@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_fresh_lab_runs_to_the_end_and_says_not_implemented(kernel, path):
    reports = check_reports(kernel, path)
    assert reports and all("not implemented yet" in r or "no answer yet" in r for r in reports)


# That every solution earns full marks and every fresh lab none, graded by `normlab grade`, is
# test_adversarial.py's test_every_solution_full_and_every_fresh_lab_zero_slowed_thirtyfold (in
# each mode).
