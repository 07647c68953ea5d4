"""`normlab release`: the student edition ships no solution and no answer, and still grades.

The search for answers here is written independently of the release's own: every marked region
of every solution notebook is parsed, its local variable names are replaced by placeholders,
and its AST is compared with every run of consecutive statements of every code cell and every
Python module of the edition.
"""

from __future__ import annotations

import ast
import functools
import html
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import nbformat
import pytest
from conftest import (
    ROOT,
    VENV,
    course_copy,
    fill_answer_regions,
    fill_with_solutions,
    make,
    serve_and_stop,
)

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
        elif path.suffix == ".html":
            # A website's page: each code block, its highlighting markup removed.
            blocks = re.findall(r"<pre[^>]*>(.*?)</pre>", path.read_text(), re.S)
            for index, block in enumerate(blocks):
                source = html.unescape(re.sub(r"<[^>]+>", "", block))
                yield f"{path.relative_to(edition)} block {index + 1}", source
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
    assert {"theory", "labs", "notebooks", "src", "START_HERE.md"} <= names
    # the oracle's memo: its answers to the checks' questions, beside the questions
    assert (ROOT / "src/normlab/grader/oracle_memo/layernorm.npz").is_file()
    assert not [n for n in names if n.endswith(".npz")]


def test_the_edition_ships_the_whole_package_the_instructors_included(edition):
    """The edition's ``normlab grade`` (the command ``make grade`` sends a learner to) prints its
    table through ``normlab.instructor``, and no module of that package holds an answer (the
    release searches every module): the edition ships every module, the grader's and the
    instructor's."""
    package = ROOT / "src" / "normlab"
    course = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    shipped = {
        p.relative_to(edition / "src" / "normlab").as_posix()
        for p in (edition / "src" / "normlab").rglob("*.py")
    }
    assert shipped == course
    assert {"instructor/report.py", "instructor/gradescope.py", "grader/results.py"} <= shipped


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


def test_an_answer_with_its_local_names_changed_is_still_found():
    """The search compares answers with their local names numbered (``release.normalized``),
    and its cheap filters before that must not tell renamed locals apart either: an answer
    region that is found is still found with every name it assigns renamed."""
    from normlab import release

    index = release.answer_index(ROOT)
    renamed_any = False
    for stem, source in regions():
        tree = ast.parse(source)
        stored = release._assigned(tree.body)
        if not stored or not release.find_answers(source, index):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in stored:
                node.id += "_renamed"
        renamed = ast.unparse(tree)
        # found, as some lab's answer (``NAME = "c"`` is the answer of several labs)
        assert release.find_answers(renamed, index), (stem, renamed)
        renamed_any = True
    assert renamed_any


def choice_keys(source: str) -> list[ast.expr]:
    """The key of every multiple-choice check of a module, in both forms it is written in:
    ``choice(LAB, ..., key="b")`` and ``expect_choice(sub.get("NAME"), "b", ...)``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "choice":
            found += [k.value for k in node.keywords if k.arg == "key"]
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "expect_choice":
            found.append(node.args[1])
    return found


def test_answer_keys_are_not_stored_in_plain_text(edition):
    plain_keys = []
    for module in (edition / "src" / "normlab" / "grader" / "checks").glob("*.py"):
        for key in choice_keys(module.read_text()):
            assert isinstance(key, ast.Constant) and key.value.startswith(keys.PREFIX)
            plain_keys.append(key.value)
    assert len(plain_keys) >= 11
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


CHOICES_BOTH_WAYS = """
choice(LAB, "problem 1 (multiple choice)", points=1, name="A_ANSWER", key="b", hint="h", why=A_WHY)


@LAB.check("problem 2 (multiple choice)", points=1, uses=["B_ANSWER"])
def problem_b(sub):
    expect_choice(sub.get("B_ANSWER"), "c", what="B_ANSWER", hint="h", why=B_WHY)
"""


def test_both_forms_of_a_multiple_choice_check_have_their_key_hashed():
    from normlab.release import hide_keys

    source, count = hide_keys(CHOICES_BOTH_WAYS, "checks/x.py", set())
    hidden = [key.value for key in choice_keys(source)]
    assert count == 2 and len(hidden) == 2
    assert all(value.startswith(keys.PREFIX) for value in hidden)
    assert keys.matches("b", hidden[0]) and keys.matches("c", hidden[1])
    assert not keys.matches("c", hidden[0]) and not keys.matches("b", hidden[1])
    assert '"b"' not in source and '"c"' not in source


def test_hashed_keys_match_only_the_right_answer():
    key = keys.hashed("b", "salt")
    assert keys.matches("b", key) and not keys.matches("c", key) and not keys.matches(None, key)
    assert keys.matches("b", "b") and not keys.matches("a", "b")


def grade_with_edition(edition, folder):
    """`normlab grade FOLDER --json` by the edition's package, in separate processes: forked
    from one process that imported PyTorch once, where the sandbox starts (and imports PyTorch
    in) a fresh interpreter per notebook. What each mode adds to a grade is test_adversarial's;
    here what is graded is the edition's grader and its labs."""
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
        [sys.executable, "-m", "normlab.cli", "grade", str(folder), "--json", "--no-sandbox"]
        + (["--allow-root"] if os.geteuid() == 0 else []),  # this Python may not run as nobody
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return {folder_and_stem(s["path"]): s for s in json.loads(done.stdout)["submissions"]}


def folder_and_stem(path: str) -> tuple[str, str]:
    folder, name = path.rsplit("/", 2)[-2:]
    return folder, name.removesuffix(".ipynb")


@pytest.mark.isolation
def test_edition_labs_grade_full_when_filled(spanish_edition, tmp_path):
    """The Spanish labs of an edition that has both languages, their answers pasted into the
    Spanish cells, graded by the edition's grader in one run: full marks. The English labs are
    not graded here again: the edition's grader is one for both languages (its check modules,
    answers hidden, are what this run tries), and the English labs are the repository's, whose
    answers are the worked solutions that test_adversarial grades in both isolation modes;
    grading them here as well cost some 25 s of the suite's CPU. That each lab as shipped earns
    0 under that grader is the edition's own ``make test`` (``normlab.selfcheck``: the labs of
    the learner's language), which test_a_student_uses_the_edition_and_an_instructor_builds_its_site
    runs in English; a Spanish lab's code is the English lab's but for its comments, messages and
    ``set_language`` (test_spanish), and no function of either language earns a point
    (test_edition_earns_nothing)."""
    for lab in (spanish_edition / "es" / "labs").glob("*.ipynb"):
        (tmp_path / lab.name).write_bytes(lab.read_bytes())
        fill_answer_regions(tmp_path / lab.name, ROOT / "solutions" / lab.name)
    graded = grade_with_edition(spanish_edition, tmp_path)
    assert {stem: (s["score"], s["error"]) for (_, stem), s in graded.items()} == {
        stem: (lab.max_score, None) for stem, lab in all_labs().items()
    }


# ----------------------------------------------------------------------------- the Spanish edition


@pytest.fixture(scope="module")
def spanish_edition(tmp_path_factory):
    """The student edition of a course copy that has a Spanish edition: the sample chapter 03
    and, for every lab, its catalog (the repository's, or a pseudo-translation)."""
    from spanish_sample import pseudo_catalog, write_catalog, write_sample_edition

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
    assert {"es/theory", "es/labs", "es/START_HERE.md", "es/README.md"} <= names
    assert {f"es/labs/{stem}.ipynb" for stem in all_labs()} <= names
    assert not [n for n in names if n.startswith(("es/solutions", "es/catalog"))]
    assert "es/README.md" in (spanish_edition / "README.md").read_text()


def test_spanish_edition_ships_the_spanish_figures_its_chapters_show(spanish_edition):
    from normlab import translation

    shown = []
    for chapter in sorted((spanish_edition / "es" / "theory").glob("[0-9][0-9]_*.md")):
        where = chapter.relative_to(spanish_edition).as_posix()
        shown += translation.analyse(chapter.read_text(encoding="utf-8"), where).figures
    assert shown and all(f.startswith("es/theory/figures/") for f in shown), shown
    missing = [f for f in shown if not (spanish_edition / f).is_file()]
    assert missing == []


def test_no_answer_region_is_in_the_spanish_labs(spanish_edition):
    assert leaks_in(spanish_edition / "es") == []
    # The same search does find the answers in a Spanish lab that holds them.
    lab = spanish_edition / "es" / "labs" / "03_layernorm.ipynb"
    filled = spanish_edition.parent / "filled-es"
    filled.mkdir()
    (filled / lab.name).write_bytes(lab.read_bytes())
    fill_with_solutions(filled / lab.name, ROOT / "solutions")
    assert leaks_in(filled)


# ----------------------------------------------------------------------------- using the edition

# A relative link in Markdown ([text](target), ![alt](target)), in HTML (href=, src=), or as a
# reference definition ([name]: target).
LINKS = (
    re.compile(r"\]\(\s*<?([^()\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)"),
    re.compile(r"""(?:href|src)\s*=\s*["']([^"']+)["']"""),
    re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M),
)


def dead_links(course):
    """(file, target) for every relative link of a Markdown file or notebook Markdown cell of
    ``course`` (its package and website aside) to no file."""
    texts = []
    for path in sorted(course.rglob("*")):
        parts = path.relative_to(course).parts
        if parts[0] in ("src", "_site", ".venv"):
            continue
        if path.suffix == ".md":
            texts.append((path, path.read_text()))
        elif path.suffix == ".ipynb":
            for cell in nbformat.read(path, as_version=4).cells:
                if cell.cell_type == "markdown":
                    texts.append((path, cell.source))
    dead = []
    for path, text in texts:
        for pattern in LINKS:
            for target in pattern.findall(text):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                    continue
                if not (path.parent / target.split("#", 1)[0]).resolve().is_file():
                    dead.append((path.relative_to(course).as_posix(), target))
    return dead


def test_the_link_finder_finds_the_links_the_edition_must_not_keep(tmp_path):
    """On a copy of the course without its worked solutions, the same search finds the chapters'
    and labs' links to them, in both languages."""
    course = course_copy(tmp_path)
    shutil.rmtree(course / "solutions")
    shutil.rmtree(course / "es" / "solutions", ignore_errors=True)
    dead = {tuple(page.split("/")[:-1]) for page, _ in dead_links(course)}
    assert {("theory",), ("labs",), ("es", "theory"), ("es", "labs")} <= dead


def test_no_script_of_the_edition_needs_what_it_leaves_out(edition):
    scripts = [
        p for p in edition.rglob("*.py") if p.relative_to(edition).parts[0] not in ("src", "site")
    ]
    assert [p for p in scripts if "solutions" in p.read_text()] == []
    assert (edition / "benchmarks" / "results" / "h200.txt").is_file()  # the chapters quote it


def test_the_edition_opens_on_binder_as_the_course_does(edition):
    """Binder runs the edition's postBuild (the learner's copies, the JupyterLab settings)."""
    build = edition / "postBuild"
    assert build.read_bytes() == (ROOT / "postBuild").read_bytes()
    assert os.access(build, os.X_OK)
    assert (edition / "jupyterlab-settings" / "install.py").is_file()


def test_links_to_what_stays_with_the_instructor_say_so(edition):
    chapter = (edition / "theory" / "03_layernorm.md").read_text()
    assert [t for t in re.findall(r"\]\(([^)\s]*)\)", chapter) if "solutions/" in t] == []
    assert "worked solution (available from your instructor)" in chapter
    spanish = (edition / "es" / "theory" / "03_layernorm.md").read_text()
    assert "(disponible a través de tu instructor)" in spanish
    readme = (edition / "README.md").read_text()
    assert "available from your instructor" in readme and "make test" in readme


def worked_solution_lines(root):
    """Lines of the worked solutions (English and Spanish) that no chapter, lab or demo has."""
    elsewhere = "\n".join(
        p.read_text()
        for folder in ("theory", "labs", "notebooks", "es/theory", "es/labs")
        for p in (root / folder).glob("*.*")
    )
    lines = set()
    for path in [*(root / "solutions").glob("*.md"), *(root / "es" / "solutions").glob("*.md")]:
        for line in path.read_text().splitlines():
            line = line.strip()
            if len(line) >= 60 and line not in elsewhere and not line.startswith(("|", "<!--")):
                lines.add(line)
    return lines


def page_text(page):
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def html_answers_finder_works(tmp_path):
    """The search over a page's code blocks finds an answer highlighted as Sphinx shows it."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    stem, source = next((s, r) for s, r in regions() if len(r.splitlines()) > 3)
    tmp_path.mkdir()
    page = tmp_path / "page.html"
    page.write_text(f"<html>{highlight(source, PythonLexer(), HtmlFormatter())}</html>")
    return [where for where, found, _ in leaks_in(tmp_path) if found == stem]


@pytest.mark.parametrize(
    ("lang", "spanish_labs", "graded"),
    [("en", True, "labs"), ("es", True, "es/labs"), ("es", False, "labs"), (None, True, "labs")],
)
def test_the_edition_test_grades_the_labs_of_the_learners_language(
    tmp_path, monkeypatch, lang, spanish_labs, graded
):
    """`make test` of the edition grades the labs in the learner's language (NORMLAB_LANG), the
    English ones where the edition has no Spanish labs."""
    from normlab import selfcheck
    from normlab.grader import i18n

    (tmp_path / "labs").mkdir()
    if spanish_labs:
        (tmp_path / "es" / "labs").mkdir(parents=True)
    monkeypatch.setattr(i18n, "_chosen", None)
    if lang is None:
        monkeypatch.delenv("NORMLAB_LANG", raising=False)
    else:
        monkeypatch.setenv("NORMLAB_LANG", lang)
    assert selfcheck.learners_folder(tmp_path) == graded


@pytest.mark.slow
@pytest.mark.isolation
@pytest.mark.skipif(not (VENV / "bin" / "jupyter").exists(), reason="needs the course's .venv")
def test_a_student_uses_the_edition_and_an_instructor_builds_its_site(tmp_path, monkeypatch):
    """What a student does in the edition: `make help`, then each target it lists, to the end;
    then every link of every Markdown file and notebook leads to a file (the start page's links
    to the learner's copies, once `make lab` has made them). The instructor's `make site` builds
    a website with no worked solution and no lab answer."""
    import conftest

    course = tmp_path / "edition"
    assert write_release(ROOT, course) == 0
    # The edition's own package, not this checkout's: what the student's .venv would hold.
    environment = {**conftest.MAKE_ENV, "PYTHONPATH": str(course / "src")}
    monkeypatch.setattr(conftest, "MAKE_ENV", environment)

    def lab():
        log = serve_and_stop(course)
        assert (course / "work" / "03_layernorm.ipynb").is_file(), log
        assert (course / "work" / "es" / "03_layernorm.ipynb").is_file(), log

    def grade():
        # The student's code: the solution's code cells (its Markdown links to the worked
        # solutions, which are the instructor's, not the student's).
        copy = course / "work" / "03_layernorm.ipynb"
        lab = nbformat.read(copy, as_version=4)
        answers = nbformat.read(ROOT / "solutions" / copy.name, as_version=4).cells
        by_id = {cell.get("id"): cell for cell in answers if cell.cell_type == "code"}
        for cell in lab.cells:
            if cell.get("id") in by_id:
                cell.source = by_id[cell.get("id")].source
        nbformat.write(lab, copy)
        shown = make(course, "grade")
        maximum = all_labs()["03_layernorm"].max_score
        assert re.search(rf"03_layernorm\s+{maximum}/{maximum}", shown), shown

    def test():
        before = {p: p.read_bytes() for p in (course / "work").rglob("*") if p.is_file()}
        shown = make(course, "test")
        assert "the course works on this machine" in shown, shown
        # the labs of the learner's language only (normlab.selfcheck.learners_folder)
        assert shown.count("each 0 as shipped") == 1, shown
        assert f"every lab of labs/ ({len(all_labs())})" in shown, shown
        assert before == {p: p.read_bytes() for p in (course / "work").rglob("*") if p.is_file()}

    def site():
        make(course, "site")
        assert (course / "_site" / "index.html").is_file()

    def kernels():
        # Triton is about 1 GB: the edition's recipe is read (make -n), not run; CI installs
        # the extra for real (.ci/run), and pyproject.toml of the edition declares it.
        shown = subprocess.run(
            ["make", "-n", "kernels"],
            cwd=course,
            capture_output=True,
            text=True,
            env=conftest.MAKE_ENV,
        ).stdout
        assert "pip install -e '.[kernels]'" in shown, shown
        assert "kernels = [" in (course / "pyproject.toml").read_text()

    runs = {"lab": lab, "grade": grade, "test": test, "site": site, "kernels": kernels}
    listed = re.findall(r"^make ([\w-]+)", make(course, "help"), re.M)
    assert sorted(listed) == sorted(runs)  # a target it lists and this test does not run fails
    for target in listed:
        runs[target]()

    assert dead_links(course) == []

    built = course / "_site"
    pages = sorted(built.rglob("*.html"))
    names = {p.relative_to(built).as_posix() for p in pages}
    assert {
        "theory/03_layernorm.html",
        "labs/03_layernorm.html",
        "es/labs/03_layernorm.html",
    } <= names
    assert {p.relative_to(built).parts[0] for p in pages} >= {"theory", "labs", "notebooks", "es"}
    assert not (built / "solutions").exists() and not (built / "es" / "solutions").exists()
    shown = "\n".join(page_text(p) for p in pages)
    worked = worked_solution_lines(ROOT)
    assert len(worked) >= 50
    assert sorted(line for line in worked if line in shown) == []
    assert "BEGIN SOLUTION" not in shown
    assert leaks_in(built) == []
    assert html_answers_finder_works(tmp_path / "proof")  # the search reads highlighted code
