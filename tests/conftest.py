"""Shared fixtures and helpers: the repository root, a solution's functions, `normlab grade`.

Also the test tiers. ``make test-fast`` deselects three markers (registered in pyproject.toml):
``notebooks`` (executes notebooks), ``isolation`` (grades through the fork server or the
sandbox, a process per submission) and ``slow`` (anything else that takes more than a few CPU
seconds, such as starting JupyterLab). Whole files are marked in TIERS below; single tests in
other files carry the marker themselves.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

# The checks run thousands of tiny tensor operations in this process. With more than one
# intra-op thread each of them pays for waking the pool, which on a busy 2-core machine costs
# about 20 times the operation itself (measured: layer_norm forward and backward on (8, 16),
# 0.7 ms with one thread, 8-13 ms with two). Kernels and graded submissions are separate
# processes and keep PyTorch's default.
torch.set_num_threads(1)

# A limit only for a hung process or kernel, far above any healthy run on a loaded machine.
# How fast things are is reported by `make bench`, never asserted.
HANG_GUARD_S = 900

TIERS = {
    "test_adversarial.py": "isolation",
    "test_classroom.py": "isolation",
    "test_grade.py": "isolation",
    "test_mutants.py": "slow",  # hundreds of mutants, each through every check of its lab
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.path))
        if path.suffix == ".ipynb":  # collected by nbval
            item.add_marker("notebooks")
        elif path.name in TIERS and not any(
            item.get_closest_marker(m) for m in ("notebooks", "isolation", "slow")
        ):
            item.add_marker(TIERS[path.name])


def grade_json(*paths, extra=()) -> tuple[int, dict, str]:
    """`normlab grade --json PATH... EXTRA...` run in this process: (exit status, JSON, stderr).

    The submissions themselves still run in their own processes (that is the grader's job); only
    the command's own start-up (a new interpreter importing the course and PyTorch) is saved.
    """
    from normlab.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["grade", *map(str, paths), "--json", *map(str, extra)])
    data = json.loads(stdout.getvalue()) if code == 0 else {}
    return code, data, stderr.getvalue()


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def solution_namespace(stem: str, replace: tuple[str, str] | None = None) -> dict:
    """Execute the solution notebook's definition cells (no demos) and return its namespace.

    Only cells that define functions or answers are run, so the tests get the solution's
    functions without its slower demonstration cells. ``replace=(old, new)`` swaps one piece of
    source first (a mutated function or class), so that everything defined after it — a table
    of classes, an adapter — is built from the new version.
    """
    namespace: dict = {"__name__": "solution"}
    os.environ.pop("NORMLAB_GRADING", None)
    for source in definition_cells(stem):
        if replace is not None:
            source = source.replace(*replace)
        source = "\n".join(line for line in source.splitlines() if not line.startswith("check("))
        exec(compile(source, f"<{stem}>", "exec"), namespace)
    return namespace


@functools.cache
def definition_cells(stem: str) -> tuple[str, ...]:
    """The solution's code cells that do not call the learner's code (read once per session)."""
    notebook = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    return tuple(
        cell.source
        for cell in notebook.cells
        if cell.cell_type == "code" and "runs-learner-code" not in cell.metadata.get("tags", [])
    )
