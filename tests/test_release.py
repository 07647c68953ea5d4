"""`normlab release`: the student edition ships no solution and no answer, and still grades.

The search for answers here is written independently of the release's own: every marked region
of every solution notebook is parsed, its local variable names are replaced by placeholders,
and its AST is compared with every run of consecutive statements of every code cell and every
Python module of the edition.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
import textwrap

import nbformat
import pytest
from conftest import ROOT
from test_workflow import fill_with_solutions

from normlab.grader import keys
from normlab.grader.registry import all_labs
from normlab.release import write_release

REGION = re.compile(r"^[ \t]*### BEGIN SOLUTION[ \t]*\n(.*?)^[ \t]*### END SOLUTION", re.M | re.S)


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "edition"
    assert write_release(ROOT, out) == 0
    return out


@functools.cache
def regions():
    found = []
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                found += [(path.stem, textwrap.dedent(r)) for r in REGION.findall(cell.source)]
    return tuple(found)


def shape(statements):
    """AST dump with positions dropped and assigned names numbered in order of appearance."""
    stored = {
        n.id
        for s in statements
        for n in ast.walk(s)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    dump = ast.dump(ast.Module(body=statements, type_ignores=[]))
    numbering = {}
    for name in re.findall(r"Name\(id='(\w+)'", dump):
        if name in stored:
            numbering.setdefault(name, f"_{len(numbering)}")
    return re.sub(
        r"Name\(id='(\w+)'", lambda m: f"Name(id='{numbering.get(m.group(1), m.group(1))}'", dump
    )


def code_units(edition):
    for path in sorted(edition.rglob("*")):
        if path.suffix == ".py":
            yield str(path.relative_to(edition)), path.read_text()
        elif path.suffix == ".ipynb":
            notebook = nbformat.read(path, as_version=4)
            for index, cell in enumerate(notebook.cells):
                if cell.cell_type == "code":
                    source = "\n".join(
                        "" if line.lstrip().startswith(("%", "!")) else line
                        for line in cell.source.split("\n")
                    )
                    yield f"{path.relative_to(edition)} cell {index + 1}", source


def test_no_solutions_worked_solutions_or_tests_are_shipped(edition):
    names = {p.relative_to(edition).as_posix() for p in edition.rglob("*")}
    assert not [n for n in names if n.startswith(("solutions", "tests", "work/", "build"))]
    for path in edition.rglob("*.md"):
        assert "### BEGIN SOLUTION" not in path.read_text()
    assert {"theory", "labs", "notebooks", "src", "START_HERE.ipynb"} <= names


def kinds(statements) -> tuple[str, ...]:
    """The statements' node types: equal whenever their ``shape`` is, and far cheaper."""
    return tuple(type(s).__name__ for s in statements)


def leaks_in(folder):
    answers, sequences = {}, set()
    for stem, source in regions():
        body = ast.parse(source).body
        answers[shape(body)] = (stem, source.strip()[:80])
        sequences.add(kinds(body))
    assert len(answers) >= 40
    sizes = {len(sequence) for sequence in sequences}
    leaks = []
    for where, source in code_units(folder):
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            for field in ("body", "orelse", "finalbody"):
                body = getattr(node, field, None)
                if not (isinstance(body, list) and body and isinstance(body[0], ast.stmt)):
                    continue
                for size in sizes:
                    for start in range(len(body) - size + 1):
                        window = body[start : start + size]
                        if kinds(window) not in sequences:
                            continue  # no answer has these statements: shapes cannot match
                        found = answers.get(shape(window))
                        if found:
                            leaks.append((where, *found))
    return leaks


@pytest.mark.slow
def test_no_answer_region_is_in_any_code_cell_or_module(edition):
    assert leaks_in(edition) == []


@pytest.mark.slow
def test_the_search_finds_the_answers_the_course_itself_holds():
    """Run on the instructor's course, the same search finds what the edition must not ship."""
    assert leaks_in(ROOT / "solutions")  # every answer, of course
    demos = {where.split(" cell")[0] for where, *_ in leaks_in(ROOT / "notebooks")}
    assert "06_pre_post_ln.ipynb" in demos  # the demo's Pre-LN block is lab 06's answer
    keys_found = [w for w, *_ in leaks_in(ROOT / "src") if w.endswith("pre_post_ln.py")]
    assert keys_found  # MEASURED_FIXES = "abcd" is POSTLN_FIXES's answer


def test_answer_keys_are_not_stored_in_plain_text(edition):
    plain_keys = []
    for module in (edition / "src" / "normlab" / "grader" / "checks").glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "expect_choice":
                key = node.args[1]
                assert isinstance(key, ast.Constant) and key.value.startswith(keys.PREFIX)
                plain_keys.append(key.value)
    assert len(plain_keys) >= 10
    # The letters that name each wrong option's misconception would give the key by elimination.
    why_letters = []
    for module in (edition / "src" / "normlab" / "grader" / "checks").glob("*.py"):
        for node in ast.parse(module.read_text()).body:
            names = [getattr(t, "id", "") for t in getattr(node, "targets", [])]
            if any(n.endswith("_WHY") for n in names) and isinstance(node.value, ast.Dict):
                why_letters += [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    assert why_letters and all(k.startswith(keys.PREFIX) for k in why_letters)
    values = set()
    for _, source in regions():
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                values.add(node.value.value)
    package = "\n".join(p.read_text() for p in (edition / "src").rglob("*.py"))
    constants = {n.value for n in ast.walk(ast.parse(package)) if isinstance(n, ast.Constant)}
    assert {v for v in values if isinstance(v, str) and len(v) > 1} & constants == set()


def test_hashed_keys_match_only_the_right_answer():
    key = keys.hashed("b", "salt")
    assert keys.matches("b", key) and not keys.matches("c", key) and not keys.matches(None, key)
    assert keys.matches("b", "b") and not keys.matches("a", "b")


def grade_with_edition(edition, folder):
    env = {**os.environ, "PYTHONPATH": str(edition / "src")}
    where = subprocess.run(
        [sys.executable, "-c", "import normlab; print(normlab.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(edition)), where
    done = subprocess.run(
        [sys.executable, "-m", "normlab.cli", "grade", str(folder), "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return {folder_and_stem(s["path"]): s for s in json.loads(done.stdout)["submissions"]}


def folder_and_stem(path: str) -> tuple[str, str]:
    folder, name = path.rsplit("/", 2)[-2:]
    return folder, name.removesuffix(".ipynb")


def grade_fresh_and_filled(edition, labs, tmp_path, fill):
    """The edition's labs as shipped (``fresh/``) and with the answers pasted in (``filled/``),
    graded by the edition's own grader in one run: each fresh lab 0, each filled one full."""
    for kind in ("fresh", "filled"):
        (tmp_path / kind).mkdir()
        for lab in labs.glob("*.ipynb"):
            (tmp_path / kind / lab.name).write_bytes(lab.read_bytes())
            if kind == "filled":
                fill(tmp_path / kind / lab.name)
    graded = grade_with_edition(edition, tmp_path)
    stems = sorted(all_labs())
    assert sorted(graded) == sorted((kind, s) for kind in ("fresh", "filled") for s in stems)
    assert all(
        s["score"] == 0 and s["max_score"] > 0 for (kind, _), s in graded.items() if kind == "fresh"
    )
    full = {stem: s for (kind, stem), s in graded.items() if kind == "filled"}
    maxima = {stem: lab.max_score for stem, lab in all_labs().items()}
    assert {k: (s["score"], s["error"]) for k, s in full.items()} == {
        k: (maxima[k], None) for k in full
    }


@pytest.mark.isolation
def test_edition_labs_grade_zero_fresh_and_full_when_filled(edition, tmp_path):
    grade_fresh_and_filled(
        edition,
        edition / "labs",
        tmp_path,
        lambda lab: fill_with_solutions(lab, ROOT / "solutions"),
    )


# ----------------------------------------------------------------------------- the Spanish edition


@pytest.fixture(scope="module")
def spanish_edition(tmp_path_factory):
    """The student edition of a course copy that has a Spanish edition: the sample chapter 03
    and, for every lab, its catalog (the repository's, or a pseudo-translation)."""
    from spanish_sample import pseudo_catalog, write_catalog, write_sample_edition
    from test_workflow import course_copy

    from normlab.build import build_all

    course = course_copy(tmp_path_factory.mktemp("es-course"))
    if not (course / "es" / "theory").is_dir():
        write_sample_edition(course)
    for stem in all_labs():
        if not (course / "es" / "catalog" / f"{stem}.json").is_file():
            write_catalog(course, stem, pseudo_catalog(course, stem))
    assert build_all(course) == 0
    out = tmp_path_factory.mktemp("es-release") / "edition"
    assert write_release(course, out) == 0
    return out


def test_spanish_edition_ships_chapters_labs_and_start_page_not_solutions(spanish_edition):
    names = {p.relative_to(spanish_edition).as_posix() for p in spanish_edition.rglob("*")}
    assert {"es/theory", "es/labs", "es/START_HERE.ipynb", "es/README.md"} <= names
    assert {f"es/labs/{stem}.ipynb" for stem in all_labs()} <= names
    assert not [n for n in names if n.startswith(("es/solutions", "es/catalog"))]
    assert "es/README.md" in (spanish_edition / "README.md").read_text()


def test_no_answer_region_is_in_the_spanish_labs(spanish_edition):
    assert leaks_in(spanish_edition / "es") == []
    # The same search does find the answers in a Spanish lab that holds them.
    lab = spanish_edition / "es" / "labs" / "03_layernorm.ipynb"
    filled = spanish_edition.parent / "filled-es"
    filled.mkdir()
    (filled / lab.name).write_bytes(lab.read_bytes())
    fill_with_solutions(filled / lab.name, ROOT / "solutions")
    assert leaks_in(filled)


@pytest.mark.isolation
def test_spanish_edition_labs_grade_zero_fresh_and_full_when_filled(spanish_edition, tmp_path):
    """The Spanish labs, graded by the edition's grader (their answers, pasted into the
    Spanish cells, earn full marks: what the repository's Spanish labs earn too)."""
    from test_spanish import fill_answer_regions

    grade_fresh_and_filled(
        spanish_edition,
        spanish_edition / "es" / "labs",
        tmp_path,
        lambda lab: fill_answer_regions(lab, ROOT / "solutions" / lab.name),
    )
