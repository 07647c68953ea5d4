"""A learner's work is sacred: work in every lab, run every README command, find the work intact.

The course is copied to a temporary folder (the files git would commit), the learner's copies
are made by `make lab`, each copy is given the learner's work (two labs filled in with their
solution's answers, a note of the learner's in every other one), and then each command the README
documents runs (a cheap equivalent where the command starts a server or the whole suite).
Afterwards every copy must be byte for byte what the learner left.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import nbformat
import pytest
from conftest import (
    MAKE,
    MAKE_ENV,
    ROOT,
    VENV,
    course_copy,
    fill_with_solutions,
    make,
    serve_and_stop,
    with_spanish_edition,
)

from normlab import chapter_files
from normlab.build import copy_missing_labs


def add_a_note(notebook_path, text):
    """A learner's own markdown cell at the end of a copy."""
    lab = nbformat.read(notebook_path, as_version=4)
    lab.cells.append(nbformat.v4.new_markdown_cell(text))
    nbformat.write(lab, notebook_path)


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
COVERED |= {"make test-fast", "make bench", "make site", "make kernels"}
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
        if "pytest" in line:  # collected, not run; imported with its asserts left as written
            command += ["--collect-only", "-q", "--assert=plain"]
        done = subprocess.run(command, cwd=course, capture_output=True, text=True)
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert "work/" not in done.stdout, f"{line} looks at the learner's copies"
    # make bench and make site write only under benchmarks/results/ and _site/, make kernels
    # only installs Triton into .venv: their recipes (run for real by tests/test_site.py,
    # benchmarks/bench.py and CI's .ci/run) must not name the copies.
    for target in ("bench", "site", "kernels"):
        recipe = make(course, "-n", target)
        assert not re.search(r"(^|[\s=])work/?(\s|$)", recipe), recipe
    # make lab again: the copies are kept, not replaced by fresh labs. It is stopped once its
    # copying step has said so; that the server then starts was seen the first time.
    assert "never overwritten" in serve_and_stop(course, until="never overwritten")

    assert learner_files(work) == before


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
