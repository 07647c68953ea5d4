"""A Gradescope autograder for one lab: ``normlab export gradescope OUT/ --lab 03_layernorm``.

Gradescope unpacks the bundle in ``/autograder/source``, runs ``setup.sh`` once when it builds
the image, then for each submission runs ``run_autograder`` with the student's files in
``/autograder/submission`` and reads ``/autograder/results/results.json``: a total ``score``
and a list of ``tests``, each with ``name``, ``score``, ``max_score``, ``output`` and
``visibility``. The notebook is graded by ``normlab grade`` exactly as on the instructor's
machine (a child process per submission); only the conversion to that format is here.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from normlab.grader import i18n

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image.
set -euo pipefail
cd "$(dirname "$0")"
apt-get update -qq && apt-get install -y -qq python3 python3-venv python3-pip > /dev/null
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install -q 'torch>=2.4' --index-url https://download.pytorch.org/whl/cpu
/autograder/venv/bin/pip install -q ./normlab
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission. AUTOGRADER_ROOT and NORMLAB_PYTHON only exist so the
# same script can be tried in a local copy of the /autograder layout.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="${NORMLAB_PYTHON:-$ROOT/venv/bin/python}"
LAB="__LAB__"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$ROOT/results"
# The lab is known: grade the submitted notebook under the lab's name, whatever it was called.
mapfile -t NOTEBOOKS < <(find "$ROOT/submission" -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' | sort)
if [ "${#NOTEBOOKS[@]}" -ge 1 ]; then
  cp "${NOTEBOOKS[0]}" "$WORK/$LAB.ipynb"
fi
EXTRA=()
if [ -f "$ROOT/source/extra_checks.py" ]; then EXTRA=(--extra-checks "$ROOT/source/extra_checks.py"); fi
"$PYTHON" -m normlab.cli grade "$WORK" --lab "$LAB" --json "${EXTRA[@]}" > "$WORK/graded.json" 2> "$WORK/stderr.txt"
"$PYTHON" -m normlab.grader.gradescope "$WORK/graded.json" "$LAB" "${#NOTEBOOKS[@]}" \\
  > "$ROOT/results/results.json"
"""


def results(graded: dict | None, lab: str, notebooks: int) -> dict:
    """Gradescope's results.json for the JSON ``normlab grade --json`` printed (or None).

    The texts students read are in the submission's ``lang`` (the notebook's language)."""
    submissions = (graded or {}).get("submissions", [])
    if notebooks == 0 or not submissions:
        why = (
            i18n.text("No notebook was submitted: upload your {lab}.ipynb.", lab=lab)
            if notebooks == 0
            else i18n.text("The grader could not run; please tell your instructor.")
        )
        return {"score": 0, "output": why, "visibility": "visible", "tests": []}
    submission = submissions[0]
    lang = i18n.normalise(submission.get("lang")) or i18n.current_language()
    tests = [
        {
            "name": i18n.translate(check["name"], lang),
            "score": check["points"],
            "max_score": check["max_points"],
            "output": i18n.translate(check["message"], lang),
            "visibility": "visible",
        }
        for check in submission["checks"]
    ]
    output = i18n.text(
        "{lab}: {score} / {max_score} points.",
        lang,
        lab=lab,
        score=submission["score"],
        max_score=submission["max_score"],
    )
    if notebooks > 1:
        output += i18n.text(
            " {notebooks} notebooks were submitted; the first (by name) was graded.",
            lang,
            notebooks=notebooks,
        )
    if submission.get("error"):
        output += "\n\n" + i18n.translate(submission["error"], lang)
    return {
        "score": submission["score"],
        "output": output,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def write_bundle(out: Path, lab: str, extra_checks: Path | None = None) -> None:
    """Write the autograder's files into ``out`` (zip its contents for Gradescope)."""
    import normlab

    package = Path(normlab.__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    (out / "setup.sh").write_text(SETUP, encoding="utf-8")
    (out / "run_autograder").write_text(RUN.replace("__LAB__", lab), encoding="utf-8")
    for name in ("setup.sh", "run_autograder"):
        (out / name).chmod(0o755)
    source = out / "normlab"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(package, source / "src" / "normlab", ignore=ignore, dirs_exist_ok=True)
    pyproject = package.parents[1] / "pyproject.toml"
    if pyproject.is_file():
        shutil.copy2(pyproject, source / "pyproject.toml")
    (source / "README.md").write_text(f"normlab's grader, for lab {lab}.\n", encoding="utf-8")
    if extra_checks is not None:
        shutil.copy2(extra_checks, out / "extra_checks.py")


def main(argv: list[str]) -> int:
    graded_path, lab, notebooks = argv[0], argv[1], int(argv[2])
    try:
        graded = json.loads(Path(graded_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        graded = None
    print(json.dumps(results(graded, lab, notebooks), indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
