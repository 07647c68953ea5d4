"""``make test`` in the student edition: the course works on this machine.

    python -m normlab.selfcheck [--root .]

A student's edition has no test suite (the tests need the solutions). What a student needs to
know before starting is that what the course will do works here, so this runs each piece once:

1. a Jupyter kernel (the one JupyterLab starts) imports the course and runs ``check`` on a
   function, as the labs' ``check(...)`` cells do;
2. the grader that ``make grade`` runs grades a copy of every lab as shipped, in the learner's
   language (``labs/``, or ``es/labs/`` with ``NORMLAB_LANG=es``), in a temporary folder: each
   lab is graded without an error, scores 0, and is out of the points its checks are worth.

The other language's copies are not graded: their code is the same, and what could fail on this
machine (PyTorch, Numba or Triton under the grader, the sandbox) fails for the labs of either
language; grading both made the whole check take 25 s of CPU instead of 15 (2-core machine).

Nothing in ``work/`` is read or written. Exit status 0 when every step passes, 1 otherwise (the
first problem is printed). Its messages are in the learner's language.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from normlab.startup import skip_unused_iri_parser

skip_unused_iri_parser()  # before nbformat: a command of its own (normlab.startup)

import nbformat  # noqa: E402

from normlab import chapter_files  # noqa: E402
from normlab.grader import i18n  # noqa: E402

KERNEL_CELL = """\
import numpy as np
from normlab import check, set_seed

set_seed(0)


def layernorm_forward(x, gamma, beta, eps=1e-5):
    raise NotImplementedError


check(layernorm_forward)
print("kernel ok")
"""


def check_kernel(root: Path) -> str | None:
    """Run the lab's first steps in a fresh kernel; None when it works, else the problem."""
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(KERNEL_CELL)])
    try:
        NotebookClient(notebook, timeout=300, resources={"metadata": {"path": str(root)}}).execute()
    except Exception as error:  # any failure to start or run the kernel is the finding
        return i18n.text("a Jupyter kernel could not run a lab's first cell: {error}", error=error)
    printed = "".join(o.get("text", "") for o in notebook.cells[0].outputs)
    if "kernel ok" not in printed:
        return i18n.text(
            "a Jupyter kernel ran a lab's first cell but printed: {printed}", printed=printed[-500:]
        )
    return None


def check_grading(root: Path, folder: str) -> tuple[str | None, int]:
    """Grade a copy of every lab in ``root/folder``; (the problem or None, labs graded)."""
    from normlab.grader.registry import all_labs

    labs = all_labs()
    shipped = chapter_files(root / folder, ".ipynb")
    missing = sorted(set(labs) - {p.stem for p in shipped})
    if missing:
        return i18n.text(
            "{folder}/ has no notebook for lab(s) {labs}", folder=folder, labs=", ".join(missing)
        ), 0
    with tempfile.TemporaryDirectory(prefix="normlab-selfcheck-") as scratch:
        for path in shipped:
            shutil.copy2(path, Path(scratch) / path.name)
        done = subprocess.run(
            [sys.executable, "-m", "normlab.cli", "grade", scratch, "--json"],
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        return i18n.text(
            "the grader failed on {folder}/ (exit status {status}):\n{errors}",
            folder=folder,
            status=done.returncode,
            errors=done.stderr,
        ), 0
    graded = {Path(s["path"]).stem: s for s in json.loads(done.stdout)["submissions"]}
    for stem, lab in sorted(labs.items()):
        result = graded.get(stem)
        if result is None:
            return i18n.text("the grader did not grade {path}", path=f"{folder}/{stem}.ipynb"), 0
        if result["error"] is not None:
            path = f"{folder}/{stem}.ipynb"
            return i18n.text(
                "{path} could not be graded: {error}", path=path, error=result["error"]
            ), 0
        if (result["score"], result["max_score"]) != (0, lab.max_score):
            return i18n.text(
                "{path} as shipped scored {score}/{max_score}, not 0/{expected}",
                path=f"{folder}/{stem}.ipynb",
                score=result["score"],
                max_score=result["max_score"],
                expected=lab.max_score,
            ), 0
    return None, len(shipped)


def learners_folder(root: Path) -> str:
    """The folder of the labs in the learner's language: ``es/labs`` in Spanish, where the
    edition has it, else ``labs``."""
    if i18n.current_language() == "es" and (root / "es" / "labs").is_dir():
        return "es/labs"
    return "labs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m normlab.selfcheck", description=__doc__)
    parser.add_argument("--root", default=".", help="the course folder (default: .)")
    root = Path(parser.parse_args(argv).root).resolve()
    problem = check_kernel(root)
    if problem:
        print(f"make test: {problem}", file=sys.stderr)
        return 1
    print(i18n.text("ok: a Jupyter kernel imports the course and runs check(...)"))
    folder = learners_folder(root)
    problem, count = check_grading(root, folder)
    if problem:
        print(f"make test: {problem}", file=sys.stderr)
        return 1
    print(
        i18n.text(
            "ok: the grader grades every lab of {folder}/ ({count}), each 0 as shipped",
            folder=folder,
            count=count,
        )
    )
    print(
        i18n.text(
            "the course works on this machine: `make lab` to start, `make grade` for your progress"
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
