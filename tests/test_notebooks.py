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

import nbformat
import pytest
from conftest import HANG_GUARD_S, ROOT
from nbclient import NotebookClient
from nbclient.util import run_sync

from normlab import chapter_files

LABS = chapter_files(ROOT / "labs", ".ipynb")

# Before each lab: its own empty namespace, and no figure of the lab before.
FRESH_NAMESPACE = (
    "import sys as _sys\n"
    "if 'matplotlib.pyplot' in _sys.modules:\n"
    "    _sys.modules['matplotlib.pyplot'].close('all')\n"
    "%reset -f"
)


class SharedKernel:
    """One kernel for the notebooks of one folder, started by the first one run."""

    def __init__(self):
        self.km = None

    def execute(self, path):
        if self.km is not None and not run_sync(self.km.is_alive)():
            self.km = None  # a lab before killed it: start another
        notebook = nbformat.read(path, as_version=4)
        notebook.cells.insert(0, nbformat.v4.new_code_cell(FRESH_NAMESPACE))
        client = NotebookClient(
            notebook,
            km=self.km,
            timeout=HANG_GUARD_S,  # per cell; a healthy cell takes seconds
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )
        try:
            client.execute(cleanup_kc=False)
        finally:
            self.km = client.km
            if client.kc is not None:
                client.kc.stop_channels()
        del notebook.cells[0]
        return notebook

    def close(self):
        if self.km is not None and run_sync(self.km.is_alive)():
            run_sync(self.km.shutdown_kernel)(now=True)


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


def check_reports(kernel, path):
    """Run a notebook to the end; the text reports of its ``check(...)`` cells."""
    notebook = kernel.execute(path)
    return [
        output.get("data", {}).get("text/plain", "")
        for cell in notebook.cells
        if cell.cell_type == "code" and cell.source.startswith("check(")
        for output in cell.outputs
    ]


# That every solution earns full marks and every fresh lab none, graded by `normlab grade`, is
# tests/test_adversarial.py::test_every_solution_full_and_every_fresh_lab_zero (in each mode).
