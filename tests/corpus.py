"""An adversarial grading corpus: broken and hostile submissions, each with its exact outcome.

Every case is a notebook for lab 03 built from the solution notebook (or from nothing) plus one
attack. ``EXPECTED[name] = (score, text that must appear in its error or messages)``. The
solution earns 16: 7 for the forward checks, 4 backward, 2 for practice problem 1, 2 for
problem 2 and 1 for problem 3.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from conftest import ROOT

SOLUTION = ROOT / "solutions" / "03_layernorm.ipynb"
LAB = ROOT / "labs" / "03_layernorm.ipynb"
FULL, FORWARD = 16, 7
FORWARD_DEF = "def layernorm_forward(x, gamma, beta, eps=1e-5):"


def _solution() -> nbformat.NotebookNode:
    return nbformat.read(SOLUTION, as_version=4)


def _with_cells(before=(), after=(), notebook=None) -> nbformat.NotebookNode:
    notebook = notebook or _solution()
    new = [nbformat.v4.new_code_cell(source) for source in before]
    notebook.cells = new + notebook.cells + [nbformat.v4.new_code_cell(s) for s in after]
    return notebook


def _forward_returning(expression: str) -> nbformat.NotebookNode:
    """The solution, but layernorm_forward returns ``expression`` of the right answer ``y``."""
    notebook = _solution()
    for cell in notebook.cells:
        if cell.source.startswith(FORWARD_DEF):
            cell.source = cell.source.replace(
                "    return gamma * x_hat + beta",
                f"    y = gamma * x_hat + beta\n    return {expression}",
            )
    return notebook


def _without_function(name: str) -> nbformat.NotebookNode:
    notebook = _solution()
    notebook.cells = [c for c in notebook.cells if not c.source.startswith(f"def {name}(")]
    return notebook


def _edit_forward(old: str, new: str) -> nbformat.NotebookNode:
    notebook = _solution()
    for cell in notebook.cells:
        if cell.source.startswith(FORWARD_DEF):
            cell.source = cell.source.replace(old, new)
    return notebook


def build(
    folder: Path, targets: dict[str, Path], sandbox: bool = False
) -> dict[str, tuple[int, str]]:
    """Write every case into ``folder``; return the expected (score, text) per file name.

    Args:
        targets: absolute paths the hostile cases try to write to or read:
            ``sentinel`` (a file outside the grader's temp dirs), ``gradebook``, ``victim``
            (another student's notebook).
    """
    sentinel, gradebook, victim = (str(targets[k]) for k in ("sentinel", "gradebook", "victim"))
    notebooks = {
        "empty_notebook": (nbformat.v4.new_notebook(), 0, "is not defined in the notebook"),
        "missing_function": (
            _without_function("layernorm_backward"),
            FULL - 4,
            "`layernorm_backward` is not defined",
        ),
        "wrong_signature": (
            _edit_forward(FORWARD_DEF, "def layernorm_forward(x):"),
            FULL - FORWARD,
            "TypeError",
        ),
        "syntax_error": (
            _edit_forward(FORWARD_DEF, FORWARD_DEF[:-1]),
            FULL - FORWARD,
            "SyntaxError",
        ),
        "exception_at_import": (
            _with_cells(before=["import module_that_does_not_exist"]),
            FULL,
            "ModuleNotFoundError",
        ),
        "infinite_loop": (_with_cells(after=["while True:\n    pass"]), FULL, "Timeout"),
        "sleep_forever": (_with_cells(after=["import time\ntime.sleep(1e9)"]), FULL, "Timeout"),
        "memory_bomb": (_with_cells(after=["hog = bytearray(16 * 1024**3)"]), FULL, "MemoryError"),
        "sys_exit": (_with_cells(after=["import sys\nsys.exit(0)"]), FULL, "SystemExit"),
        "os_exit": (_with_cells(after=["import os\nos._exit(0)"]), 0, "exited with code 0"),
        # Its parent is never the grader: a small nanny process, or under bubblewrap the
        # sandbox's init, which ignores the signal. Either way the notebook is graded.
        "kill_parent": (
            _with_cells(after=["import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"]),
            FULL,
            "",
        ),
        "fork_bomb": (
            _with_cells(after=["import os\nfor _ in range(5):\n    os.fork()"]),
            FULL,
            "",
        ),
        "huge_output": (_with_cells(after=["print('x' * 100_000_000)"]), FULL, "OSError"),
        "segfault": (_with_cells(after=["import ctypes\nctypes.string_at(0)"]), 0, "SIGSEGV"),
        "ignores_alarm_then_loops": (
            _with_cells(
                after=[
                    "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass"
                ]
            ),
            0,
            "timed out",
        ),
        "returns_nan": (
            _forward_returning("np.full_like(y, np.nan)"),
            FULL - FORWARD,
            "non-finite",
        ),
        "returns_list": (_forward_returning("y.tolist()"), FULL - FORWARD, "returned a list"),
        "wrong_shape": (_forward_returning("y[:1]"), FULL - FORWARD, "shape is"),
        "wrong_dtype": (_forward_returning("y.astype(np.int64)"), FULL - FORWARD, "max abs error"),
        "returns_object": (
            _forward_returning("object()"),
            FULL - FORWARD,
            "returned an object of type object",
        ),
        "patches_numpy": (
            _with_cells(
                after=["np.allclose = lambda *a, **k: True\nnp.isfinite = lambda a: True"],
                notebook=_forward_returning("x"),
            ),
            FULL - FORWARD,
            "max abs error",
        ),
        "patches_normlab": (
            _with_cells(
                after=[
                    "import normlab.grader.core as core, normlab.grader.probes as probes\n"
                    "probes.expect_array = lambda *a, **k: None\n"
                    "core.run_checks = lambda *a, **k: []"
                ],
                notebook=_forward_returning("x"),
            ),
            FULL - FORWARD,
            "max abs error",
        ),
        "prints_fake_score": (
            _with_cells(
                after=[
                    'print(\'{"submissions": [{"score": 13, "max_score": 13}]}\')\nprint("score: 13/13")'
                ],
                notebook=nbformat.read(LAB, as_version=4),
            ),
            0,
            "not implemented yet",
        ),
        "writes_outside": (
            _with_cells(
                after=[
                    f"for path in [{sentinel!r}, {gradebook!r}]:\n    open(path, 'w').write('student,score\\nme,100\\n')"
                ]
            ),
            FULL,
            "",
        ),
        "reads_other_student": (
            _with_cells(after=[f"stolen = open({victim!r}).read()"]),
            FULL,
            "",
        ),
    }
    expected = {}
    for name, (notebook, score, text) in notebooks.items():
        nbformat.write(notebook, folder / f"03_layernorm_{name}.ipynb")
        expected[f"03_layernorm_{name}.ipynb"] = (score, text)
    text = SOLUTION.read_text()
    (folder / "03_layernorm_malformed_json.ipynb").write_text(text[: len(text) // 3])
    expected["03_layernorm_malformed_json.ipynb"] = (0, "broken JSON")
    (folder / "03_layernorm_not_a_notebook.ipynb").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    expected["03_layernorm_not_a_notebook.ipynb"] = (0, "not UTF-8")
    (folder / "03_layernorm_json_not_notebook.ipynb").write_text(json.dumps([1, 2, 3]))
    expected["03_layernorm_json_not_notebook.ipynb"] = (0, "no list of cells")
    return expected
