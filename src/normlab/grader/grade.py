"""Door 2: ``normlab grade`` — authoritative grading of notebooks, each in its own process."""

from __future__ import annotations

import json
from pathlib import Path

from normlab.grader import core
from normlab.grader.registry import lab_for_path
from normlab.grader.report import SubmissionResult
from normlab.grader.sandbox import DEFAULT_MEMORY_MB, ChildSubmission

DEFAULT_TIMEOUT = 60.0
MAX_NOTEBOOK_BYTES = 50 << 20


class UsageError(Exception):
    """Bad command-line input (a path that does not exist, nothing to grade)."""


def find_notebooks(paths: list[str]) -> list[Path]:
    """Every ``.ipynb`` named or found below the given folders, sorted, checkpoints skipped."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found += sorted(
                p
                for p in path.rglob("*.ipynb")
                if ".ipynb_checkpoints" not in p.parts and p.is_file()
            )
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"no such file or folder: {raw}")
    if not found:
        raise UsageError(f"no notebooks (.ipynb) found in: {' '.join(paths)}")
    return found


def read_code_cells(path: Path) -> tuple[list[str], dict]:
    """The code cells' sources and the notebook metadata; ValueError with a clear reason."""
    if path.stat().st_size > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"the file is larger than {MAX_NOTEBOOK_BYTES >> 20} MB")
    raw = path.read_bytes()
    try:
        notebook = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not a notebook: the file is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise ValueError(
            f"not a valid notebook: broken JSON at line {error.lineno}, column {error.colno} "
            f"({error.msg}); was the file truncated or edited by hand?"
        ) from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise ValueError("not a notebook: no list of cells in the file")
    cells = []
    for cell in notebook["cells"]:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            if isinstance(source, list):
                source = "".join(s for s in source if isinstance(s, str))
            if not isinstance(source, str):
                raise ValueError("not a valid notebook: a code cell's source is not text")
            cells.append(source)
    metadata = notebook.get("metadata") if isinstance(notebook.get("metadata"), dict) else {}
    return cells, metadata


def _cell_error_summary(errors: list[dict], limit: int = 3) -> str:
    parts = []
    for error in errors[:limit]:
        message = error.get("message", "")
        parts.append(
            f"cell {error.get('cell', '?') + 1}: {error.get('error_type')}: {message}".strip()
        )
    more = f" (+{len(errors) - limit} more)" if len(errors) > limit else ""
    return "; ".join(parts) + more


def grade_notebook(
    path: Path, timeout: float = DEFAULT_TIMEOUT, memory_mb: int = DEFAULT_MEMORY_MB
) -> SubmissionResult:
    """Grade one notebook. Never raises for anything the notebook contains."""
    shown = str(path)
    try:
        cells, metadata = read_code_cells(path)
    except (OSError, ValueError) as error:
        lab = lab_for_path(path)  # the file name may still say which lab it was meant for
        return SubmissionResult(
            shown, lab.stem if lab else None, 0, lab.max_score if lab else 0, str(error), []
        )
    lab = lab_for_path(path, metadata)
    if lab is None:
        return SubmissionResult(
            shown,
            None,
            0,
            0,
            "cannot tell which lab this is: name the file after the lab (e.g. 03_layernorm.ipynb)",
            [],
        )
    with ChildSubmission(cells, lab.forbidden, budget=timeout, memory_mb=memory_mb) as submission:
        results = core.run_checks(lab, submission)
        error = None
        if submission.dead_reason:
            error = submission.dead_reason
            tail = submission.output_tail()
            if tail:
                error += f"\nlast output: {tail[-300:]}"
        elif submission.cell_errors:
            error = "some cells raised errors: " + _cell_error_summary(submission.cell_errors)
    score = sum(r.points for r in results)
    return SubmissionResult(shown, lab.stem, score, lab.max_score, error, results)


def grade_paths(
    paths: list[str],
    timeout: float = DEFAULT_TIMEOUT,
    memory_mb: int = DEFAULT_MEMORY_MB,
    progress=None,
) -> list[SubmissionResult]:
    """Grade every notebook found in ``paths``, one child process each, in a stable order."""
    results = []
    for path in find_notebooks(paths):
        results.append(grade_notebook(path, timeout, memory_mb))
        if progress:
            progress(results[-1])
    return results
