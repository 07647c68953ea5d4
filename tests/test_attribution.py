"""A learner's bug does not look like the grader's: cells say what they compared, reports say whose.

With a wrong ``layernorm_forward`` (eps outside the square root) and a correct ``d2_xhat``, the
cell comparing the two stops; the grader must put that on the learner's code, name both
functions, and point at ``layernorm_forward`` (whose own checks fail), not at ``d2_xhat``.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
from pathlib import Path

import nbformat
import numpy as np
import pytest
from conftest import ROOT, grade_json

from normlab import chapter_files
from normlab.grader.attribution import LEARNER_CODE, called_names, learner_cells_message
from normlab.grader.core import CheckResult
from normlab.grader.grade import find_submissions, grade_all
from normlab.grader.isolation.sandbox import bwrap_available
from normlab.grader.isolation.wire import CellError
from normlab.grader.registry import get_lab
from normlab.grader.results import SubmissionResult
from normlab.instructor.report import (
    feedback_html,
    feedback_markdown,
    to_csv,
    to_table,
)

SOLUTIONS = chapter_files(ROOT / "solutions", ".ipynb")


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_every_assertion_in_a_cell_running_learner_code_says_what_it_compared(path):
    notebook = nbformat.read(path, as_version=4)
    bare = []
    for index, cell in enumerate(notebook.cells):
        if "runs-learner-code" not in cell.metadata.get("tags", []):
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Assert) and node.msg is None:
                bare.append(f"cell {index + 1}, line {node.lineno}")
    assert bare == []


def wrong_forward_lab(tmp_path):
    notebook = nbformat.read(ROOT / "solutions" / "03_layernorm.ipynb", as_version=4)
    right = "x_hat = centred / np.sqrt(var + eps)"
    cells = [cell for cell in notebook.cells if right in cell.source]
    assert len(cells) == 1
    cells[0].source = cells[0].source.replace(right, "x_hat = centred / (np.sqrt(var) + eps)")
    path = tmp_path / "03_layernorm.ipynb"
    nbformat.write(notebook, path)
    return path


def grade_one(path: Path):
    """The result of ``normlab grade PATH``, as an object."""
    (result,) = grade_all(find_submissions([str(path)]))
    return result


@pytest.mark.isolation
def test_a_wrong_forward_is_put_on_the_learner_and_on_the_right_function(tmp_path):
    result = grade_one(wrong_forward_lab(tmp_path))
    assert result.error.startswith(LEARNER_CODE), result.error
    assert "not in the grader" in result.error
    # The d2_xhat cell: it calls both functions, and the one whose checks fail is the forward.
    d2_part = [line for line in result.error.splitlines() if "d2_xhat(pairs)" in line]
    assert d2_part, result.error
    assert "`layernorm_forward` also fails its own checks" in d2_part[0]
    assert "`d2_xhat` also fails" not in result.error
    assert "differs from layernorm_forward(pairs, ones, zeros)" in d2_part[0]

    table = to_table([result])
    assert "YOUR CODE: " + LEARNER_CODE in table and "ERROR" not in table
    for text in (feedback_markdown(result), feedback_html(result)):
        assert "your code, not the grader" in text and "Problem running" not in text
    assert LEARNER_CODE in to_csv([result])


def test_table_prints_every_line_of_a_failed_check(tmp_path):
    result = grade_one(wrong_forward_lab(tmp_path))
    failed = [c for c in result.checks if not c.passed and len(c.message.splitlines()) > 1]
    assert failed, "expected a multi-line message (with its hint) for eps outside the root"
    table = to_table([result])
    for check in failed:
        for line in check.message.splitlines():
            assert line in table


def test_a_stopped_cell_is_named_by_what_jupyterlab_shows_its_first_line():
    # JupyterLab shows no cell numbers (beside a cell is its execution count, changed by every
    # run): the message quotes the cell's first line, which the learner sees and Ctrl+F finds.
    lab = get_lab("03_layernorm")
    cells = [
        "import numpy as np",
        "\n\n# compare with beta\ny = layernorm_forward(x, g, b)\nassert False",
        "# compare with beta\nz = 1",
        "  \n",
        "print(`a`)",
    ]
    errors = [CellError(i, "ValueError", "boom") for i in (1, 2, 3, 4)]
    lines = learner_cells_message(errors, cells, lab, []).splitlines()[1:]
    assert lines[0].startswith(
        "- The cell that starts `# compare with beta` (number 1 of the 2 that start so) raised"
    )
    assert lines[1].startswith(
        "- The cell that starts `# compare with beta` (number 2 of the 2 that start so) raised"
    )
    assert lines[2].startswith("- An empty code cell raised ValueError")
    assert "code cell 2" not in " ".join(lines).lower()
    errors = [CellError(4, "ValueError", "boom")]
    assert "- The cell that starts `print('a')` raised" in learner_cells_message(
        errors, cells, lab, []
    )


def test_message_uses_only_valid_cell_indices_and_caps_its_length():
    lab = get_lab("03_layernorm")
    cells = ["y = layernorm_forward(x, g, b)\nassert False, 'compared y with beta'"]
    errors = [
        CellError(0, "AssertionError", "compared y with beta"),
        CellError(99, "ValueError", "x" * 5000),
        CellError(-1, "", ""),
    ]
    text = learner_cells_message(errors, cells, lab, [])
    assert (
        "- The cell that starts `y = layernorm_forward(x, g, b)` failed its assertion: "
        "compared y with beta"
    ) in text
    assert "It calls your `layernorm_forward`" in text
    assert "- A code cell raised ValueError" in text and len(text) < 1200
    assert called_names("def f(:", {"f"}) == []


@pytest.fixture(scope="module")
def narrow_page():
    """A page of headless Chromium 480 CSS pixels wide (a phone, a narrow side panel)."""
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("Playwright is not installed: pip install -e '.[browser]' (make test does)")
    executable = next(
        (c for c in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(c).exists()),
        shutil.which("chromium"),
    )
    if executable is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        yield browser.new_page(viewport={"width": 480, "height": 800})
        browser.close()


def test_html_feedback_wraps_a_stopped_cell_and_long_messages_in_a_narrow_window(narrow_page):
    lab = get_lab("03_layernorm")
    cells = ["y = layernorm_forward(x, g, b)\nassert False"]
    relative = "relative errors {'dx': 0.05573202770540662, 'dgamma': 0.05572774768905761}"
    errors = [CellError(0, "AssertionError", f"layernorm_backward: {relative} " * 3)]
    long_token = "x_hat_" + "0" * 150
    checks = [CheckResult("forward", 0, 2, False, f"layernorm_forward: {long_token} is wrong")]
    result = SubmissionResult(
        "03_layernorm.ipynb",
        "03_layernorm",
        0,
        16,
        learner_cells_message(errors, cells, lab, []),
        checks,
        student="alice",
    )
    narrow_page.set_content(feedback_html(result))
    widths = narrow_page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], f"the page scrolls sideways: {widths[0]} > {widths[1]} px"


def _sigma_cell_with(forward):
    """Run lab 03's cell "σ → 0: why ε sits inside the root" with ``forward`` as the learner's."""
    notebook = nbformat.read(ROOT / "labs" / "03_layernorm.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if c.get("id") == "1cd8bf2b"]
    exec(compile(cell.source, "sigma_cell", "exec"), {"np": np, "layernorm_forward": forward})


def _layernorm(eps_where):
    def forward(x, gamma, beta, eps=1e-5):
        centred = x - x.mean(axis=-1, keepdims=True)
        var = (centred**2).mean(axis=-1, keepdims=True)
        root = {"inside": np.sqrt(var + eps), "outside": np.sqrt(var) + eps}[eps_where]
        return gamma * centred / root + beta

    return forward


def test_the_sigma_to_zero_cell_stops_when_eps_is_outside_the_root(capsys):
    _sigma_cell_with(_layernorm("inside"))
    with pytest.raises(AssertionError, match="eps goes inside the root"):
        _sigma_cell_with(_layernorm("outside"))


@pytest.mark.isolation
@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) is not installed")
def test_the_same_notebook_reports_the_same_stopped_cells_with_and_without_the_sandbox(tmp_path):
    # The lab's own comparisons with PyTorch stop on its stand-in in both modes and are left
    # out of the error; every other stopped cell is reported alike.
    path = wrong_forward_lab(tmp_path)
    errors = {}
    for mode in ("--sandbox", "--no-sandbox"):
        code, data, stderr = grade_json(path, extra=[mode, "--allow-root", "--force"])
        assert code == 0, stderr
        (result,) = data["submissions"]
        errors[mode] = result["error"]
    assert errors["--sandbox"].startswith(LEARNER_CODE), errors
    assert errors["--sandbox"] == errors["--no-sandbox"]
