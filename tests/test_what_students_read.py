"""What a refused or failing notebook's feedback tells: the cause and the way out of a notebook
too large, and never the grader's own install paths."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import numpy
import pytest
from conftest import ROOT, grade_json

from normlab.grader import i18n

pytestmark = pytest.mark.isolation

SOLUTION = ROOT / "solutions" / "01_why_normalize.ipynb"


def with_stored_output(folder: Path, size: int) -> Path:
    """Lab 01's solution whose first code cell kept a printout of ``size`` characters."""
    notebook = nbformat.read(SOLUTION, as_version=4)
    cell = next(c for c in notebook.cells if c.cell_type == "code")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="0.5 " * (size // 4))]
    path = folder / "ana" / "01_why_normalize.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(notebook, path)
    return path


def test_a_notebook_too_large_is_told_its_stored_outputs_and_the_limit_option(tmp_path):
    path = with_stored_output(tmp_path, 17 << 20)
    assert path.stat().st_size > 16 << 20
    code, report, stderr = grade_json(path)
    assert code == 0, stderr
    (result,) = report["submissions"]
    assert result["score"] == 0
    error = result["error"]
    assert error.startswith("the file is larger than 16 MB: stored outputs")
    assert "Clear Outputs of All Cells" in error
    assert "`--limit max_notebook_bytes=33554432`" in error
    spanish = i18n.translate(error, "es")
    assert spanish.startswith("el archivo ocupa más de 16 MB: lo que hace tan grande")
    assert "`--limit max_notebook_bytes=33554432`" in spanish
    # The option the message names is the way out: the same notebook then earns full marks.
    code, report, stderr = grade_json(path, extra=["--limit", "max_notebook_bytes=33554432"])
    assert code == 0, stderr
    (result,) = report["submissions"]
    assert result["error"] is None and result["score"] == result["max_score"] > 0


def test_an_import_error_does_not_show_the_graders_install_path(tmp_path):
    notebook = nbformat.read(SOLUTION, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("from numpy import not_there"))
    path = tmp_path / "ben" / "01_why_normalize.ipynb"
    path.parent.mkdir()
    nbformat.write(notebook, path)
    code, report, stderr = grade_json(path)
    assert code == 0, stderr
    (result,) = report["submissions"]
    assert (
        "cannot import name 'not_there' from 'numpy' (<site-packages>/numpy/__init__.py)"
        in (result["error"])
    )
    shown = json.dumps(report)
    numpy_folder = str(Path(numpy.__file__).resolve().parent.parent)
    assert numpy_folder not in shown and sys.prefix not in shown
    # An import that fails in a cell of its own costs the answers nothing.
    assert result["score"] == result["max_score"]


def test_only_paths_inside_the_graders_folders_are_rewritten():
    from normlab.grader.grade import without_grader_paths

    numpy_file = str(Path(numpy.__file__))
    assert without_grader_paths(f"in {numpy_file}") == "in <site-packages>/numpy/__init__.py"
    python = Path(json.__file__).parent.parent  # the standard library's folder
    assert without_grader_paths(f"{python}/json/decoder.py") == "<python>/json/decoder.py"
    for kept in ("/tmp/ben/helpers.py", "<notebook cell 3>", f"{sys.prefix}x/a.py", "", None):
        assert without_grader_paths(kept) == kept
