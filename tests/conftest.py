"""Shared fixtures: the repository root and helpers to load a solution's functions."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))


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
    notebook = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    namespace: dict = {"__name__": "solution"}
    os.environ.pop("NORMLAB_GRADING", None)
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        if "runs-learner-code" in cell.metadata.get("tags", []):
            continue
        source = cell.source
        if replace is not None:
            source = source.replace(*replace)
        source = "\n".join(line for line in source.splitlines() if not line.startswith("check("))
        exec(compile(source, f"<{stem}>", "exec"), namespace)
    return namespace
