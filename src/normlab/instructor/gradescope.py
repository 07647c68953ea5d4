"""A Gradescope autograder for one lab: ``normlab export gradescope OUT/ --lab 03_layernorm``.

Gradescope unpacks the bundle in ``/autograder/source``, runs ``setup.sh`` once (as root) when it
builds the autograder's image, then for each submission runs ``run_autograder`` (as root) with the
student's files in ``/autograder/submission`` and reads ``/autograder/results/results.json``: a
total ``score``, an ``output`` and a list of ``tests``, each with ``name``, ``score``,
``max_score``, ``output`` and ``visibility`` (``visible``, ``after_due_date``,
``after_published`` or ``hidden``: the last never shown to students). What ``run_autograder``
prints is shown to the instructor only (``stdout_visibility``).

The notebooks are graded by ``normlab grade`` exactly as on the instructor's machine (a child
process per submission, under bubblewrap where it runs, as the user ``nobody``); only the choice
among several uploads and the conversion to Gradescope's format are here.

The trust model (``docs/instructors.md``): the instructor's hidden checks live in
``hidden/``, a folder only root may enter, and are read by the grader's process alone; the
notebook's process never sees them (not in the sandbox's view; outside it, not readable by
``nobody``). Findings and the grader's own log reach the instructor in tests of visibility
``hidden`` and in ``extra_data``, never the student.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

from normlab.grader import i18n

#: Gradescope's visibility settings, from the most to the least shown
VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")
#: at most this many uploaded notebooks are graded (the first by name); the best one counts
MAX_NOTEBOOKS = 5
#: the folder of the bundle that only root may read: the hidden checks and the bundle's settings
HIDDEN = "hidden"


def pinned(name: str) -> str:
    """``name``'s requirement as pyproject.toml (its one owner) states it, e.g. ``"torch>=2.4"``,
    read from the installed course's metadata (when a bundle is written: the bundle's own
    grader runs without that metadata)."""
    import importlib.metadata  # here: ``normlab grade`` imports this module, and not it

    for requirement in importlib.metadata.requires("normlab") or ():
        if re.match(rf"{re.escape(name)}\s*[<>=!~]", requirement):
            return requirement.split(";")[0].strip()
    raise LookupError(f"pyproject.toml does not require {name}")


def _distribution(requirement: str) -> str:
    """``"scikit-learn>=1.3; ..."`` -> ``"scikit-learn"`` (PEP 503's normalised name)."""
    name = re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(lab: str) -> list[str]:
    """What the bundle installs besides PyTorch (from its CPU-only index: the CUDA build is
    several GB the grader never uses): the course's environment, so that a notebook that runs
    in it is graded as ``normlab grade`` grades it there, whatever of it the notebook imports.

    That is pyproject.toml's ``dependencies`` (their one owner, read from the installed
    course's metadata as ``pinned`` reads them), and the optional extra that provides the
    module ``lab`` declares it needs (``Lab.extra``: lab 11's ``triton``, from ``kernels``),
    each as pyproject.toml states it, without its environment marker (Gradescope's image is
    Linux x86-64).
    """
    import importlib.metadata

    from normlab.grader.registry import all_labs

    base, optional = [], []
    for requirement in importlib.metadata.requires("normlab") or ():
        spec, _, marker = requirement.partition(";")
        if re.search(r"\bextra\s*==", marker):
            optional.append(spec.strip())
        elif _distribution(spec) != "torch":
            base.append(spec.strip())
    known = all_labs().get(lab)
    if known is not None and known.extra is not None:
        module = known.extra[0]
        provides = importlib.metadata.packages_distributions().get(module) or [module]
        wanted = {_distribution(name) for name in provides}
        base += [spec for spec in optional if _distribution(spec) in wanted]
    return list(dict.fromkeys(base))


#: the course package the bundle copies (``src/normlab``): this file is its ``instructor/gradescope.py``
PACKAGE = Path(__file__).resolve().parents[1]


class BundleError(Exception):
    """The bundle cannot be written as asked (a usage error for ``normlab export``)."""


SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image. normlab needs
# Python 3.10 or newer: Gradescope's Ubuntu 22.04 (Python 3.10) or 24.04 (Python 3.12) base image.
set -euo pipefail
cd "$(dirname "$0")"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# bubblewrap: the sandbox each notebook runs in, where the container lets it make namespaces
apt-get install -y -qq python3 python3-venv bubblewrap > /dev/null
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "normlab needs Python 3.10 or newer, and this image has $(python3 --version 2>&1):" \\
    "choose the Ubuntu 22.04 or 24.04 base image in the autograder's settings" >&2
  exit 1
fi
python3 -m venv /autograder/venv
# CPU-only PyTorch, then the course's environment (pyproject.toml's dependencies: whatever of it
# a notebook imports is there, as on the instructor's machine), then the grader itself.
/autograder/venv/bin/pip install -q --no-cache-dir '__TORCH__' \\
  --index-url https://download.pytorch.org/whl/cpu
/autograder/venv/bin/pip install -q --no-cache-dir -r requirements.txt
/autograder/venv/bin/pip install -q --no-cache-dir --no-deps ./normlab
# The hidden checks are root's alone.
chown -R 0:0 __HIDDEN__ && chmod 0700 __HIDDEN__ && chmod 0600 __HIDDEN__/*
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this, as root, for each submission. AUTOGRADER_ROOT and NORMLAB_PYTHON only
# exist so that the same script can be tried in a local copy of the /autograder layout.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="${NORMLAB_PYTHON:-$ROOT/venv/bin/python}"
LAB="__LAB__"
HIDDEN="$ROOT/source/__HIDDEN__"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
umask 077
mkdir -p "$ROOT/results"
# Nothing the notebook's process can read may hold the hidden checks or earlier results
# (submission_metadata.json carries the earlier submissions' results.json).
chmod 0700 "$HIDDEN" 2> /dev/null
chmod 0600 "$HIDDEN"/* "$ROOT/submission_metadata.json" 2> /dev/null
# Every uploaded notebook (regular files only: a link is never followed), sorted by name; the
# first __MAX__ are graded, each in a folder of its own under the lab's name, and the best counts.
: > "$WORK/uploads"
COUNT=0
while IFS= read -r -d '' NOTEBOOK; do
  COUNT=$((COUNT + 1))
  printf '%s\\0' "${NOTEBOOK#"$ROOT/submission/"}" >> "$WORK/uploads"
  if [ "$COUNT" -le __MAX__ ]; then
    mkdir "$WORK/$COUNT" && cp --no-dereference -- "$NOTEBOOK" "$WORK/$COUNT/$LAB.ipynb"
  fi
done < <(find "$ROOT/submission" -name '*.ipynb' -type f -not -path '*/.ipynb_checkpoints/*' \\
  -print0 | LC_ALL=C sort -z)
EXTRA=(__OPTIONS__)
if [ -f "$HIDDEN/extra_checks.py" ]; then EXTRA+=(--extra-checks "$HIDDEN/extra_checks.py"); fi
if [ "$COUNT" -ge 1 ]; then
"$PYTHON" -m normlab.cli grade "$WORK" --json --lab "$LAB" "${EXTRA[@]}" > "$WORK/graded.json" 2> "$WORK/stderr.txt"
fi
# The grader's own messages: for the instructor (Gradescope shows this script's output to them only).
cat "$WORK/stderr.txt" 2> /dev/null
if ! "$PYTHON" -m normlab.instructor.gradescope "$WORK" "$LAB" "$HIDDEN/bundle.json" \\
  > "$WORK/results.json"; then
  echo "normlab: could not write results.json (see above)"
  printf '%s\\n' '{"score": 0, "tests": [], "output": "The grader could not run; please tell' \\
    'your instructor. / El calificador no pudo ejecutarse; avisa a tu profesor, por favor."}' \\
    > "$WORK/results.json"
fi
cp "$WORK/results.json" "$ROOT/results/results.json"
"""


def shown_name(name: str, limit: int = 120) -> str:
    """A file name the student chose, as plain text: control, format (bidi) and line-breaking
    characters become ``?``, and a long name is cut."""
    cleaned = "".join(
        "?" if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in name
    )
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def _upload_index(path: object) -> int | None:
    """The upload a graded path came from: ``WORK/3/LAB.ipynb`` -> 3."""
    if not isinstance(path, str):
        return None
    folder = Path(path).parent.name
    return int(folder) if folder.isdigit() else None


SUMMARY = "{lab}: {score} / {max_score} points."
SUMMARY_AFTER_DUE_DATE = (
    "{lab}: {score} / {max_score} points in the checks shown now; the instructor's further "
    "checks are shown after the due date."
)
SUMMARY_AFTER_PUBLISHED = (
    "{lab}: {score} / {max_score} points in the checks shown now; the instructor's further "
    "checks are shown when grades are published."
)
SUMMARY_HIDDEN = (
    "{lab}: {score} / {max_score} points in the checks shown now; the instructor's further "
    "checks are not shown."
)


def _summary(lab: str, score: int, max_score: int, visibility: str, lang: str) -> str:
    """The first line students read: the points of the checks they can see now."""
    fields = {"lab": lab, "score": score, "max_score": max_score}
    if visibility == "after_due_date":
        return i18n.text(SUMMARY_AFTER_DUE_DATE, lang, **fields)
    if visibility == "after_published":
        return i18n.text(SUMMARY_AFTER_PUBLISHED, lang, **fields)
    if visibility == "hidden":
        return i18n.text(SUMMARY_HIDDEN, lang, **fields)
    return i18n.text(SUMMARY, lang, **fields)


def _instructor_test(name: str, output: str) -> dict:
    """A test of no points that only the instructor sees (Gradescope's ``hidden``)."""
    return {"name": name, "score": 0, "max_score": 0, "output": output, "visibility": "hidden"}


def _check_tests(best: dict, extra: set, visibility: str, lang: str) -> tuple[list, int, int]:
    """One Gradescope test per check of the upload that counts, with the score and the most
    points that students see now (the instructor's hidden checks left out of both)."""
    tests = []
    shown_score, shown_max = best["score"], best["max_score"]
    for check in best["checks"]:
        hidden = check["name"] in extra
        if hidden and visibility != "visible":  # the summary counts what students see now
            shown_score -= check["points"]
            shown_max -= check["max_points"]
        tests.append(
            {
                "name": i18n.translate(check["name"], lang),
                "score": check["points"],
                "max_score": check["max_points"],
                "status": "passed" if check["passed"] else "failed",
                "output": i18n.translate(check["message"], lang),
                "visibility": visibility if hidden else "visible",
            }
        )
    return tests, shown_score, shown_max


def _uploads_note(uploads: list[str], name: str, lang: str) -> str:
    """Which upload was graded, and how many were."""
    if len(uploads) == 1:
        note = i18n.text(" Graded: {name}.", lang, name=name)
    else:
        note = i18n.text(
            " You uploaded {notebooks} notebooks; each was graded and the best counts: {name}.",
            lang,
            notebooks=len(uploads),
            name=name,
        )
    if len(uploads) > MAX_NOTEBOOKS:
        note += i18n.text(
            " Only the first {count} (by name) were graded.", lang, count=MAX_NOTEBOOKS
        )
    return note


def _findings_test(findings: dict[str, list[str]]) -> dict:
    """The instructor's test that lists each upload's findings."""
    lines = [
        f"{upload}:\n" + "\n".join(f"- {finding}" for finding in found)
        for upload, found in findings.items()
    ]
    return _instructor_test(
        i18n.text("For the instructor: findings to review (from-scratch rule)"),
        "\n\n".join(lines),
    )


def _nothing_graded(lab: str, uploaded: bool, extra_data: dict, instructor: list) -> dict:
    """results.json when no upload was graded: none was made, or the grader could not run."""
    lang = i18n.current_language()
    why = (
        i18n.text("The grader could not run; please tell your instructor.", lang)
        if uploaded
        else i18n.text("No notebook was submitted: upload your {lab}.ipynb.", lang, lab=lab)
    )
    return {
        "score": 0,
        "output": why,
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": extra_data,
        "tests": instructor,
    }


def results(
    graded: dict | None,
    lab: str,
    uploads: list[str],
    config: dict | None = None,
    log: str = "",
) -> dict:
    """Gradescope's results.json for what ``normlab grade --json`` printed (None: nothing).

    Args:
        graded: the grader's JSON, one submission per graded upload (``WORK/N/LAB.ipynb``).
        lab: the assignment's lab.
        uploads: every notebook the student uploaded, by name, in the order they were graded.
        config: the bundle's settings (``bundle.json``): ``extra_checks``, the names of the
            instructor's hidden checks, and ``extra_visibility``, Gradescope's visibility for them.
        log: what the grader printed on stderr (shown to the instructor only).

    The upload with the highest score counts (the first by name among equals). The texts
    students read are in that notebook's language.
    """
    config = config or {}
    extra = set(config.get("extra_checks") or [])
    visibility = config.get("extra_visibility", "visible")
    if visibility not in VISIBILITIES:
        visibility = "visible"
    submissions = []
    for position, submission in enumerate((graded or {}).get("submissions", []), 1):
        if isinstance(submission, dict):  # an upload's folder is its number; else its place
            index = _upload_index(submission.get("path")) or position
            submissions.append({**submission, "path": f"{index}/{lab}.ipynb"})
    isolation = sorted({s.get("isolation") for s in submissions if s.get("isolation")})
    extra_data = {"uploads": [shown_name(u) for u in uploads], "isolation": isolation}
    instructor = []
    if log.strip():
        instructor.append(
            _instructor_test(i18n.text("For the instructor: the grader's log"), log[-20000:])
        )
    if not uploads or not submissions:
        return _nothing_graded(lab, bool(uploads), extra_data, instructor)
    best = max(submissions, key=lambda s: (s["score"], -_upload_index(s["path"])))
    lang = i18n.normalise(best.get("lang")) or i18n.current_language()
    tests, shown_score, shown_max = _check_tests(best, extra, visibility, lang)
    output = _summary(lab, shown_score, shown_max, visibility if extra else "visible", lang)
    index = _upload_index(best["path"])
    name = shown_name(uploads[index - 1]) if index <= len(uploads) else "?"
    output += _uploads_note(uploads, name, lang)
    if best.get("error"):
        output += "\n\n" + i18n.translate(best["error"], lang)
    findings = {
        shown_name(uploads[i - 1]): list(s.get("findings") or [])
        for s in submissions
        if (i := _upload_index(s["path"])) <= len(uploads) and s.get("findings")
    }
    extra_data.update(
        graded=name,
        scores={
            shown_name(uploads[i - 1]): [s["score"], s["max_score"]]
            for s in submissions
            if (i := _upload_index(s["path"])) <= len(uploads)
        },
        findings=findings,
    )
    if findings:
        instructor.insert(0, _findings_test(findings))
    return {
        "score": best["score"],
        "output": output,
        "output_format": "text",
        "test_output_format": "text",
        "test_name_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": extra_data,
        "tests": tests + instructor,
    }


CHECK_EXTRA = """
import json, sys
from normlab.grader.registry import all_labs, load_extra_checks
before = {stem: len(lab.checks) for stem, lab in all_labs().items()}
load_extra_checks(__import__("pathlib").Path(sys.argv[1]))
print(json.dumps({stem: [c.name for c in lab.checks[before[stem]:]]
                  for stem, lab in all_labs().items() if len(lab.checks) > before[stem]}))
"""


def extra_check_names(path: Path, lab: str) -> list[str]:
    """The names of the checks an instructor's file adds to ``lab``, found by loading it in a
    separate interpreter as the grader will. Raises BundleError when it does not load, adds
    no check to ``lab``, or adds checks to another lab (they would never run here)."""
    if not path.is_file():
        raise BundleError(f"no such file: {path}")
    done = subprocess.run(
        [sys.executable, "-c", CHECK_EXTRA, str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(path.parent),
    )
    if done.returncode != 0:
        raise BundleError(f"{path} does not load:\n{done.stderr.strip()[-4000:]}")
    added = json.loads(done.stdout.strip().splitlines()[-1])
    others = sorted(set(added) - {lab})
    if others:
        raise BundleError(f"{path} adds checks to {', '.join(others)}, not to {lab} alone")
    if not added.get(lab):
        raise BundleError(f"{path} adds no check to {lab}")
    return added[lab]


def write_bundle(
    out: Path,
    lab: str,
    extra_checks: Path | None = None,
    extra_visibility: str = "after_due_date",
    require_sandbox: bool = False,
) -> None:
    """Write the autograder's files into ``out`` (zip its contents for Gradescope).

    Args:
        extra_checks: the instructor's hidden checks (``--extra-checks``); loaded once here, so
            a file that does not load is refused now rather than on every submission.
        extra_visibility: Gradescope's visibility for the hidden checks' tests.
        require_sandbox: grade with ``--sandbox`` (refuse to grade where bubblewrap cannot run).
    """
    if extra_visibility not in VISIBILITIES:
        raise BundleError(f"the visibility must be one of {', '.join(VISIBILITIES)}")
    names = extra_check_names(extra_checks, lab) if extra_checks is not None else []
    package = PACKAGE
    out.mkdir(parents=True, exist_ok=True)
    (out / "setup.sh").write_text(
        SETUP.replace("__TORCH__", pinned("torch")).replace("__HIDDEN__", HIDDEN), encoding="utf-8"
    )
    run = RUN.replace("__LAB__", lab).replace("__HIDDEN__", HIDDEN)
    run = run.replace("__MAX__", str(MAX_NOTEBOOKS))
    run = run.replace("__OPTIONS__", "--sandbox" if require_sandbox else "")
    (out / "run_autograder").write_text(run, encoding="utf-8")
    for name in ("setup.sh", "run_autograder"):
        (out / name).chmod(0o755)
    (out / "requirements.txt").write_text("\n".join(requirements(lab)) + "\n", encoding="utf-8")
    source = out / "normlab"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(package, source / "src" / "normlab", ignore=ignore, dirs_exist_ok=True)
    pyproject = package.parents[1] / "pyproject.toml"
    if pyproject.is_file():
        shutil.copy2(pyproject, source / "pyproject.toml")
    (source / "README.md").write_text(f"normlab's grader, for lab {lab}.\n", encoding="utf-8")
    hidden = out / HIDDEN
    hidden.mkdir(mode=0o700, exist_ok=True)
    hidden.chmod(0o700)
    config = {"lab": lab, "extra_checks": names, "extra_visibility": extra_visibility}
    (hidden / "bundle.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    if extra_checks is not None:
        shutil.copyfile(extra_checks, hidden / "extra_checks.py")
    for file in hidden.iterdir():
        file.chmod(0o600)


def main(argv: list[str]) -> int:
    """``python -m normlab.instructor.gradescope WORK LAB CONFIG``: results.json on stdout."""
    work, lab, config_path = Path(argv[0]), argv[1], Path(argv[2])
    try:
        graded = json.loads((work / "graded.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        graded = None
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    try:
        raw = (work / "uploads").read_bytes()
    except OSError:
        raw = b""
    uploads = [n.decode("utf-8", "replace") for n in raw.split(b"\0") if n]
    try:
        log = (work / "stderr.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        log = ""
    document = results(graded if isinstance(graded, dict) else None, lab, uploads, config, log)
    print(json.dumps(document, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
