"""A learner's work is sacred: work in every lab, run every README command, find the work intact.

The course is copied to a temporary folder (the files git would commit), the learner's copies
are made by `make lab`, each copy is given the learner's work (two labs filled in with their
solution's answers, a note of the learner's in every other one), and then each command the README
documents runs (a cheap equivalent where the command starts a server or the whole suite).
Afterwards every copy must be byte for byte what the learner left.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys

import nbformat
import pytest
from conftest import ROOT
from test_setup import free_port

from normlab import chapter_files
from normlab.build import copy_missing_labs

VENV = ROOT / ".venv"
MAKE_ENV = {**os.environ, "DISPLAY": "", "WAYLAND_DISPLAY": ""}


def course_copy(target):
    """The files git would commit (tracked, or untracked and not ignored), copied to target."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def fill_with_solutions(notebook_path, solutions_dir):
    """Paste the solution's answers into a learner's copy: cell by cell, matched by cell id."""
    lab = nbformat.read(notebook_path, as_version=4)
    solution = nbformat.read(solutions_dir / notebook_path.name, as_version=4)
    by_id = {cell.get("id"): cell for cell in solution.cells}
    changed = 0
    for cell in lab.cells:
        answer = by_id.get(cell.get("id"))
        if answer is not None and answer.source != cell.source:
            cell.source = answer.source
            changed += 1
    assert changed, f"{notebook_path.name}: nothing to fill in"
    nbformat.write(lab, notebook_path)


def add_a_note(notebook_path, text):
    """A learner's own markdown cell at the end of a copy."""
    lab = nbformat.read(notebook_path, as_version=4)
    lab.cells.append(nbformat.v4.new_markdown_cell(text))
    nbformat.write(lab, notebook_path)


# The copy shares this checkout's .venv. Its install steps are never remade from the copy: with
# a pyproject.toml newer than the venv's stamp, `make` reinstalled the course from the copy in a
# temporary folder, and every later grading in the suite imported a package that was gone.
MAKE = ("make", f"VENV={VENV}", "-o", f"{VENV}/.installed", "-o", f"{VENV}/.site-installed")


def make(course, *arguments, timeout=600):
    done = subprocess.run(
        [*MAKE, *arguments],
        cwd=course,
        capture_output=True,
        text=True,
        env=MAKE_ENV,
        timeout=timeout,
    )
    assert done.returncode == 0, f"make {' '.join(arguments)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def serve_and_stop(course, until=None):
    """`make lab` on a free port: wait for the start page's URL, fetch it, stop the server.

    Where the course has a Spanish start page, `make lab` names its URL too, and it opens.
    With ``until``, stop as soon as a line holds that text (before JupyterLab starts, when the
    line comes from the copying step) and return the output up to it."""
    from test_setup import fetch

    port = free_port()
    process = subprocess.Popen(
        [*MAKE, "lab", f"PORT={port}"],
        cwd=course,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=MAKE_ENV,
    )
    try:
        log, url = [], None
        while url is None:
            line = process.stdout.readline()
            if not line:
                break
            log.append(line)
            if until is not None and until in line:
                return "".join(log)
            found = re.search(
                rf"http://localhost:{port}/lab/tree/START_HERE\.ipynb\?token=\w+", line
            )
            url = found and found.group(0)
        assert url, "".join(log[-20:])
        assert b"JupyterLab" in fetch(url, process, log)
        # The course's settings reach JupyterLab: chapters (.md) open rendered by default.
        token = url.split("token=")[1]
        settings = json.loads(
            fetch(
                f"http://localhost:{port}/lab/api/settings/"
                f"@jupyterlab/docmanager-extension:plugin?token={token}",
                process,
                log,
            )
        )
        viewers = settings["schema"]["properties"]["defaultViewers"]["default"]
        assert viewers.get("markdown") == "Markdown Preview", viewers
        if (course / "es" / "START_HERE.ipynb").is_file():
            spanish = f"http://localhost:{port}/lab/tree/es/START_HERE.ipynb"
            assert spanish in "".join(log), "".join(log[-20:])
            assert b"JupyterLab" in fetch(f"{spanish}?token={token}", process, log)
            contents = fetch(
                f"http://localhost:{port}/api/contents/es/START_HERE.ipynb?token={token}",
                process,
                log,
            )
            assert json.loads(contents)["type"] == "notebook"
        return "".join(log)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


@pytest.mark.skipif(not (VENV / "bin" / "jupyter").exists(), reason="needs the course's .venv")
@pytest.mark.slow
def test_make_lab_on_a_busy_port_stops_and_says_so(tmp_path):
    """JupyterLab would move to the next port, away from the address printed above it."""
    import socket

    course = course_copy(tmp_path / "course")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [*MAKE, "lab", f"PORT={port}"], cwd=course, capture_output=True, text=True,
            env=MAKE_ENV, timeout=600,
        )  # fmt: skip
        said = done.stdout + done.stderr
        assert done.returncode != 0, said
        assert f"port {port} is in use" in said and f"el puerto {port} está ocupado" in said
        assert "http://" not in said, said  # no address printed, none served
        # Taken between the check and the start: JupyterLab itself gives up, on no other port.
        recipe = make(course, "-n", "lab", f"PORT={port}").replace("\\\n", " ")
        (line,) = [line for line in recipe.splitlines() if "jupyter lab" in line]
        server = subprocess.run(
            shlex.split(line), cwd=course, capture_output=True, text=True, env=MAKE_ENV,
            timeout=600,
        )  # fmt: skip
        log = server.stdout + server.stderr
        assert server.returncode != 0, log
        assert not re.search(r"http://\S+:\d+/lab", log), log


def readme_commands() -> set[str]:
    """Every `make TARGET` and `normlab SUBCOMMAND` the README shows a reader."""
    text = (ROOT / "README.md").read_text()
    found = {f"make {target}" for target in re.findall(r"\bmake ([a-z][\w-]*)", text)}
    found |= {
        f"normlab {sub}"
        for sub in re.findall(r"\bnormlab (grade|labs|work|release|merge|export)\b", text)
    }
    return found


# What each README command becomes in the test. A command the README gains without an entry
# here fails the test, so that nothing documented goes untried.
COVERED = {"make lab", "make test", "make grade", "make labs", "make lint", "make help"}
COVERED |= {"make format", "normlab grade", "normlab labs", "normlab work"}
COVERED |= {"make test-fast", "make bench", "make site"}
# Instructors' commands that write elsewhere, tested on their own: tests/test_release.py, test_lms.py.
COVERED |= {"normlab release", "normlab merge", "normlab export"}


def test_every_readme_command_is_covered():
    assert readme_commands() - COVERED == set()


def test_copying_never_overwrites_and_fills_what_is_missing(tmp_path):
    course = tmp_path
    (course / "labs").mkdir()
    (course / "labs" / "01_a.ipynb").write_text("original 01")
    (course / "labs" / "02_b.ipynb").write_text("original 02")
    (course / "work").mkdir()
    (course / "work" / "01_a.ipynb").write_text("the learner's 01")
    assert copy_missing_labs(course, quiet=True) == 0
    assert (course / "work" / "01_a.ipynb").read_text() == "the learner's 01"
    assert (course / "work" / "02_b.ipynb").read_text() == "original 02"
    (course / "labs" / "02_b.ipynb").write_text("regenerated 02")
    assert copy_missing_labs(course, quiet=True) == 0
    assert (course / "work" / "02_b.ipynb").read_text() == "original 02"


def with_spanish_edition(course):
    """Give a course copy a Spanish edition if it has none: the sample chapter 03, its start
    page and one lab catalog (tests/spanish_sample.py), and its generated lab."""
    from spanish_sample import write_sample_edition

    from normlab.build import build_all

    if not (course / "es" / "START_HERE.ipynb").is_file():
        write_sample_edition(course)
        assert build_all(course) == 0
    return course


def learner_files(work):
    return {p.relative_to(work).as_posix(): p.read_bytes() for p in work.rglob("*") if p.is_file()}


@pytest.mark.skipif(not (VENV / "bin" / "jupyter").exists(), reason="needs the course's .venv")
@pytest.mark.slow
def test_filled_labs_survive_every_readme_command(tmp_path):
    course = with_spanish_edition(course_copy(tmp_path / "course"))
    serve_and_stop(course)  # make lab: makes the learner's copies, then serves
    work = course / "work"
    labs = [p.name for p in chapter_files(course / "labs", ".ipynb")]
    assert sorted(p.name for p in work.glob("*.ipynb")) == labs
    spanish = [p.name for p in chapter_files(course / "es" / "labs", ".ipynb")]
    assert spanish and sorted(p.name for p in (work / "es").glob("*.ipynb")) == spanish
    # Every copy holds the learner's work: two labs filled in, the others a note of theirs. That
    # every lab, filled, earns full marks is tested where it is graded (test_adversarial's
    # solutions, test_release's editions, Spanish included); filling all fourteen here as well
    # cost about 20 s of CPU in grading.
    filled = labs[:1] + [name for name in labs if name.startswith("03_")]
    for name in labs:
        if name in filled:
            fill_with_solutions(work / name, course / "solutions")
        else:
            add_a_note(work / name, "My notes: eps goes inside the root.")
    for name in spanish:
        add_a_note(work / "es" / name, "Mis notas: epsilon va dentro de la raíz.")
    before = learner_files(work)

    # make grade: the learner's progress, a line per lab started (the filled ones, full marks);
    # the copies that hold only a note are named once as not started, in the learner's language.
    graded = make(course, "grade")
    rows = re.findall(r"^  (\d\d_\w+)\s+(\d+)/(\d+)  every check passes$", graded, re.M)
    assert sorted(f"{stem}.ipynb" for stem, _, _ in rows) == filled, graded
    assert all(got == total and int(total) > 0 for _, got, total in rows), graded
    untouched = re.search(r"^Not started yet \(work/\): (.+)$", graded, re.M).group(1)
    assert sorted(f"{stem}.ipynb" for stem in untouched.split(", ")) == sorted(
        set(labs) - set(filled)
    ), graded
    assert "work/es/" not in graded and len(graded.splitlines()) < 25, graded
    # The instructor's form of the command, on the learner's folder, writes elsewhere. One
    # shard of it: every notebook was just graded, and what it writes does not depend on which.
    normlab = VENV / "bin" / "normlab"
    instructor = [normlab, "grade", "work", "--csv", "grades.csv", "--feedback", "feedback"]
    subprocess.run([*instructor, "--shard", "1/7"], cwd=course, check=True, capture_output=True)
    shard = len(range(0, len(labs) + len(spanish), 7))  # the 1st, 8th, ... of the sorted list
    assert len((course / "grades.csv").read_text().splitlines()) == 1 + shard
    assert len(list((course / "feedback").rglob("*.md"))) == shard
    # make labs, one lab and all of them: regenerate labs/ only.
    subprocess.run([normlab, "labs", "03_layernorm"], cwd=course, check=True, capture_output=True)
    make(course, "labs")
    subprocess.run([normlab, "work"], cwd=course, check=True, capture_output=True)
    make(course, "help")
    make(course, "lint")
    make(course, "format")
    # make test, cheaply: run its own lint and staleness lines as they are, and let pytest and
    # nbval collect what they would run (the whole suite is this test's caller).
    # make -n prints a recipe as written: join its continued lines first.
    # TEST_JOBS=0: one process collects (the two workers would each collect the same again).
    recipes = make(course, "-n", "test", "TEST_JOBS=0") + "\n" + make(course, "-n", "test-fast")
    for line in recipes.replace("\\\n", " ").splitlines():
        if not line.strip() or line.startswith(("make", "touch")) or "pip install" in line:
            continue  # make's own notes and the one-time install steps
        command = shlex.split(line)
        if "pytest" in line:
            command += ["--collect-only", "-q"]
        done = subprocess.run(command, cwd=course, capture_output=True, text=True)
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert "work/" not in done.stdout, f"{line} looks at the learner's copies"
    # make bench and make site write only under benchmarks/results/ and _site/: their recipes
    # (run for real by tests/test_site.py and benchmarks/bench.py) must not name the copies.
    for target in ("bench", "site"):
        recipe = make(course, "-n", target)
        assert not re.search(r"(^|[\s=])work/?(\s|$)", recipe), recipe
    # make lab again: the copies are kept, not replaced by fresh labs. It is stopped once its
    # copying step has said so; that the server then starts was seen the first time.
    assert "never overwritten" in serve_and_stop(course, until="never overwritten")

    assert learner_files(work) == before


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
