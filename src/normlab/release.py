"""``normlab release OUT/``: the student edition of the course, without its answers.

The edition holds the chapters, the labs, the demos, the start page and the whole package (the
grader that ``check()`` and ``normlab grade`` run, and ``normlab.instructor``, which ``normlab
grade`` prints through), and the same of the Spanish edition (``es/theory``, ``es/labs``,
``es/START_HERE.md``, ``es/README.md``). It leaves out the solution notebooks, the worked
solutions (also ``es/solutions``), the Spanish lab catalog, the tests and the instructor's
documents (it keeps ``docs/running.md``, which is the learner's), and it removes every lab answer
from what it ships:

* the oracle's memo (``grader/oracle_memo/*.npz``: the answers to the checks' questions) is left
  out, and the edition's oracle computes with PyTorch;
* answer keys in the check modules (the letter a multiple-choice check accepts, ``key=`` of
  ``choice`` or the second argument of ``expect_choice``, and module-level
  strings equal to a top-level answer, such as ``POSTLN_FIXES``) become salted hashes
  (:mod:`normlab.grader.keys`), which the checks compare against;
* a demo statement that is a lab's answer (same code, up to the names of its local variables) is
  replaced by a ``raise NotImplementedError`` that sends the reader to the lab; the demo's stored
  outputs are kept;
* an answer found anywhere else in the package stops the release (exit status 1): the package
  must not ship it, and cutting it out would break the checks.

It is a course a student can use as it is:

* every relative link of its Markdown files and notebooks leads to a file of the edition (or to
  the copy of a lab that ``make lab`` writes into ``work/``); a link to what stays with the
  instructor (a worked solution, a solution notebook, a benchmark script that holds an answer)
  becomes its text and says that it is available from the instructor;
* its ``Makefile`` lists only what works there: ``make lab``, ``make grade``, ``make test`` (the
  course works on this machine: :mod:`normlab.selfcheck`) and ``make site`` (its website, with no
  worked solution: ``normlab release OUT --site`` builds it into ``OUT/_site``).
"""

from __future__ import annotations

import ast
import copy
import hashlib
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat

from normlab import chapter_files
from normlab.build import BEGIN, END
from normlab.grader import keys

# The Spanish edition ships its chapters, labs, start page and README; its worked solutions
# (es/solutions) and the lab catalog (es/catalog, which holds the solution notebooks' text) stay
# with the instructor like the English ones.
# Of benchmarks/, the recorded results the chapters quote: its scripts time and grade the
# solution notebooks, which the edition leaves out (``make bench`` is not in its Makefile).
SHIPPED = ["theory", "labs", "notebooks", "benchmarks/results", "jupyterlab-settings"]
SHIPPED += ["es/theory"]
SHIPPED += ["es/labs"]
SHIPPED_FILES = ["START_HERE.md", "pyproject.toml", "environment.yml", ".gitignore"]
SHIPPED_FILES += ["es/START_HERE.md", "docs/running.md"]
# Binder's build step (the learner's copies in work/, the course's JupyterLab settings).
SHIPPED_FILES += ["postBuild"]
# The website's builder: ``make site`` in the edition builds an answer-free site from it.
SHIPPED_FILES += ["site/build.py", "site/conf.py"]
SHIPPED_SITE = ["site/_static"]
DEMO_STUB = "the student edition leaves this out: it is an answer of lab {lab}"


class ReleaseError(Exception):
    """The edition would ship an answer."""


# ----------------------------------------------------------------------------- answer regions


def answer_regions(root: Path) -> list[tuple[str, str]]:
    """Every marked answer region of the solution notebooks: (lab stem, dedented source)."""
    regions = []
    for path in chapter_files(root / "solutions", ".ipynb"):
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type != "code":
                continue
            lines, inside = cell.source.split("\n"), None
            for line in lines:
                if BEGIN.match(line):
                    inside = []
                elif END.match(line) and inside is not None:
                    regions.append((path.stem, textwrap.dedent("\n".join(inside))))
                    inside = None
                elif inside is not None:
                    inside.append(line)
    return regions


class _Locals(ast.NodeTransformer):
    """Rename the names a piece of code assigns (its local variables) to v0, v1, ... in order."""

    def __init__(self, assigned: set[str]):
        self.assigned, self.names = assigned, {}

    def visit_Name(self, node):
        if node.id in self.assigned:
            node.id = self.names.setdefault(node.id, f"v{len(self.names)}")
        return node


def _assigned(statements: list[ast.stmt]) -> set[str]:
    found = set()
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                found.add(node.id)
    return found


def normalized(statements: list[ast.stmt]) -> str:
    """A statement list's AST without positions, comments, or the names of its local variables."""
    module = ast.Module(body=copy.deepcopy(statements), type_ignores=[])
    module = _Locals(_assigned(module.body)).visit(module)
    return ast.dump(module, annotate_fields=False)


def statement_lists(tree: ast.AST):
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            value = getattr(node, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value


class AnswerIndex(dict):
    """Normalized answer region -> its lab; ``sizes``: the statement counts of the regions;
    ``signatures`` and ``shapes``: the regions' (``signature``, ``shape``), the filters a run of
    statements passes before it is normalized."""

    sizes: set[int]
    signatures: set[tuple[str, ...]]
    shapes: set[tuple[str, ...]]


def signature(statements: list[ast.stmt]) -> tuple[str, ...]:
    """A cheap first filter: the kinds of the statements and of their top expression."""
    return tuple(
        type(s).__name__ + ":" + type(getattr(s, "value", None)).__name__ for s in statements
    )


NAME_ID = re.compile(r"Name\('[^']*'")


def shape(statements: list[ast.stmt], known: dict | None = None) -> tuple[str, ...]:
    """The second filter: each statement's AST without positions and with every name blanked.
    Two runs that ``normalized`` makes equal (they differ at most in their local names) have
    the same shape, so a run whose shape no region has is no answer; ``normalized`` copies and
    renames, and runs only where the shapes agree. ``known``: statement id -> its shape, for
    the windows of one source, which overlap."""
    known = {} if known is None else known
    for statement in statements:
        if id(statement) not in known:
            dump = ast.dump(statement, annotate_fields=False)
            known[id(statement)] = NAME_ID.sub("Name(", dump)
    return tuple(known[id(statement)] for statement in statements)


def answer_index(root: Path) -> AnswerIndex:
    """Normalized answer region -> its lab."""
    index = AnswerIndex()
    index.sizes, index.signatures, index.shapes = set(), set(), set()
    for stem, source in answer_regions(root):
        statements = ast.parse(source).body
        if statements:
            index[normalized(statements)] = stem
            index.sizes.add(len(statements))
            index.signatures.add(signature(statements))
            index.shapes.add(shape(statements))
    return index


def find_answers(source: str, index: AnswerIndex) -> list[tuple[list[ast.stmt], str]]:
    """Runs of consecutive statements in ``source`` that are an answer: (statements, lab)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found, shapes = [], {}
    for body in statement_lists(tree):
        for size in sorted(index.sizes):
            for start in range(len(body) - size + 1):
                window = body[start : start + size]
                if signature(window) not in index.signatures:
                    continue
                if shape(window, shapes) not in index.shapes:
                    continue
                lab = index.get(normalized(window))
                if lab is not None:
                    found.append((window, lab))
    return found


# ----------------------------------------------------------------------------- rewriting


def _splice(source: str, replacements: list[tuple[int, int, int, int, str]]) -> str:
    """Replace (line, col, end_line, end_col) spans (1-based lines) by text, last first."""
    lines = source.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode()) + 1)
    data = source.encode()
    for line, col, end_line, end_col, text in sorted(replacements, reverse=True):
        start, end = offsets[line - 1] + col, offsets[end_line - 1] + end_col
        data = data[:start] + text.encode() + data[end:]
    return data.decode()


def _salt(where: str, answer: str) -> str:
    return hashlib.sha256(f"normlab release:{where}:{answer}".encode()).hexdigest()[:16]


def choice_key(node: ast.AST) -> ast.Constant | None:
    """The literal key of a multiple-choice check, in either of its forms: the declaration
    ``choice(LAB, ..., key="b", ...)`` or the call ``expect_choice(sub.get("NAME"), "b", ...)``;
    None for any other node."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return None
    key = None
    if node.func.id == "choice":
        key = next((k.value for k in node.keywords if k.arg == "key"), None)
    elif node.func.id == "expect_choice" and len(node.args) >= 2:
        key = node.args[1]
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key
    return None


def hide_keys(source: str, where: str, top_level_answers: set[str]) -> tuple[str, int]:
    """Hash the answer keys of a check module. Returns the new source and how many were hashed."""
    tree = ast.parse(source)
    spans = []

    def hash_constant(node: ast.Constant) -> None:
        text = keys.hashed(node.value, _salt(f"{where}:{node.lineno}", node.value))
        spans.append(
            (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, repr(text))
        )

    for node in ast.walk(tree):
        key = choice_key(node)
        if key is not None:
            hash_constant(key)
    for node in tree.body:
        # ``*_WHY`` maps each wrong letter to its misconception: its letters would name the key
        # by elimination, so they are hashed too (expect_choice compares hashes).
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id.endswith("_WHY") for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            for key in node.value.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    hash_constant(key)
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and node.value.value in top_level_answers
        ):
            hash_constant(node.value)
    return _splice(source, spans), len(spans)


def _top_level_answers(root: Path) -> set[str]:
    values = set()
    for _, source in answer_regions(root):
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                if isinstance(node.value.value, str):
                    values.add(node.value.value)
    return values


def scrub_demo_cell(source: str, index: AnswerIndex) -> str:
    """Replace each answer in a demo cell by a stub at its indentation."""
    spans = []
    for window, lab in find_answers(source, index):
        first, last = window[0], window[-1]
        indent = " " * first.col_offset
        stub = f"raise NotImplementedError({DEMO_STUB.format(lab=lab)!r})"
        text = f"# (lab {lab}: your code goes here)\n{indent}{stub}"
        spans.append((first.lineno, first.col_offset, last.end_lineno, last.end_col_offset, text))
    # Overlapping windows: keep the outermost (they come in order of size, largest last).
    kept: list = []
    for span in sorted(spans, key=lambda s: (s[0], -s[2])):
        if kept and span[0] <= kept[-1][2]:
            continue
        kept.append(span)
    return _splice(source, kept)


# ----------------------------------------------------------------------------- the edition


def _chapter_rows(chapters: Path, labs: str, demos: str, words: tuple[str, str]) -> list[str]:
    rows = []
    for chapter in chapter_files(chapters, ".md"):
        title = chapter.read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
        stem = chapter.stem
        rows.append(
            f"| {stem[:2]} | [{title}](theory/{stem}.md) | [{words[0]}]({labs}/{stem}.ipynb) "
            f"| [{words[1]}]({demos}/{stem}.ipynb) |"
        )
    return rows


def _edition_readme(root: Path) -> str:
    rows = _chapter_rows(root / "theory", "labs", "notebooks", ("lab", "demo"))
    return "\n".join(
        [
            "# normlab — activation normalization, built from scratch (student edition)",
            "",
            "```bash",
            "make lab    # creates .venv, copies the labs into work/, opens JupyterLab",
            "make grade  # your progress: a line per lab you started in work/",
            "make test   # checks that the course works on this machine (touches nothing of yours)",
            "```",
            "",
            "Fill in your copies of the labs in `work/`: no command overwrites them. Other ways to",
            "run the labs (conda, a hosted Jupyter): [docs/running.md](docs/running.md).",
            "",
            "The `check(...)` cells and `make grade` are **formative**: they help you learn and",
            "run in your own kernel. If your course is graded, your instructor grades what you",
            "hand in with the same grader in a sandbox and with checks you have not seen; that",
            "grade is the authority.",
            "",
            "This edition has no worked solutions and no solution notebooks: where a chapter or a",
            "lab mentions one, it is available from your instructor.",
            "",
            *(
                [
                    "Español: [es/README.md](es/README.md) · [es/START_HERE.md](es/START_HERE.md)",
                    "",
                ]
                if (root / "es" / "README.md").is_file()
                else []
            ),
            "| stem | chapter | lab | demo |",
            "|---|---|---|---|",
            *rows,
            "",
            "For instructors: `make site` builds this edition's website into `_site/` (offline;",
            "open `_site/index.html`), with the chapters, demos and labs and no worked solution.",
            "",
        ]
    )


def _edition_readme_es(root: Path) -> str:
    """The Spanish README of the edition (the course's own es/README.md is for the full course)."""
    rows = _chapter_rows(
        root / "es" / "theory", "labs", "../notebooks", ("laboratorio", "demo (en inglés)")
    )
    return "\n".join(
        [
            "# normlab — la normalización de activaciones, construida desde cero (edición del"
            " estudiante)",
            "",
            "```bash",
            "make lab    # crea .venv, copia los laboratorios en work/ (los de español, en work/es/)"
            " y abre JupyterLab",
            "make grade  # tu progreso: una línea por laboratorio que hayas empezado en work/",
            "make test   # comprueba que el curso funciona en esta máquina (no toca nada tuyo)",
            "```",
            "",
            "Ejecuta estos comandos en la carpeta principal del curso (la que contiene `es/`).",
            "Completas tus copias de los laboratorios en `work/es/`: ningún comando las"
            " sobrescribe.",
            "La página de inicio en español es [START_HERE.md](START_HERE.md); otras formas",
            "de ejecutar los laboratorios (conda, un Jupyter alojado):"
            " [docs/running.md](../docs/running.md) (en inglés).",
            "",
            "Las celdas `check(...)` y `make grade` son **formativas**: te ayudan a aprender y se",
            "ejecutan en tu propio kernel. Si tu curso se califica, tu instructor califica lo que",
            "entregas con el mismo calificador, en un sandbox y con comprobaciones que no has"
            " visto;",
            "esa nota es la que cuenta.",
            "",
            "Esta edición no incluye las soluciones desarrolladas ni los cuadernos de solución:"
            " cuando",
            "un capítulo o un laboratorio menciona uno, está disponible a través de tu instructor.",
            "",
            "English: [README.md](../README.md)",
            "",
            "| raíz | capítulo | laboratorio | demo |",
            "|---|---|---|---|",
            *rows,
            "",
        ]
    )


# Targets of the course Makefile that need what the edition leaves out (solutions, tests, the
# authors' tools): the edition's Makefile has its own ``test`` and ``site`` instead.
AUTHOR_TARGETS = (
    "test",
    "test-fast",
    "bench",
    "gpu-check",
    "labs",
    "oracles",
    "lint",
    "format",
    "site",
)
EDITION_TARGETS = {
    "test": (
        "check that the course works here: the package, a Jupyter kernel and every lab's "
        "checks, in your language (touches nothing in $(WORK)/)",
        "$(VENV)/.installed",
        "$(PY) -m normlab.selfcheck",
    ),
    "site": (
        "the edition's website, without worked solutions, into _site/ (offline; "
        "open _site/index.html)",
        "$(VENV)/.site-installed",
        "$(PY) site/build.py _site",
    ),
}


def _edition_makefile(root: Path) -> str:
    """The course Makefile without the authors' targets, with the edition's test and site."""
    text = (root / "Makefile").read_text(encoding="utf-8")
    for target in AUTHOR_TARGETS:
        text = re.sub(rf"\n{re.escape(target)}: [^\n]*\n(\t[^\n]*\n)*", "\n", text)
        text = re.sub(rf'\n\t@echo "make {re.escape(target)} [^\n]*', "", text)
    help_lines = "".join(
        f'\n\t@echo "make {name:<5}  - {line}"' for name, (line, _, _) in EDITION_TARGETS.items()
    )
    text = re.sub(
        r"(\nhelp:\n(\t[^\n]*\n)*)",
        lambda m: m.group(1).rstrip("\n") + help_lines + "\n",
        text,
        count=1,
    )
    targets = [t for t in re.findall(r"^([a-z][\w-]*):", text, re.M)]
    targets += list(EDITION_TARGETS)
    text = re.sub(
        r"^\.PHONY:[^\n]*", ".PHONY: " + " ".join(dict.fromkeys(targets)), text, flags=re.M
    )
    for name, (_, prerequisite, recipe) in EDITION_TARGETS.items():
        text += f"\n{name}: {prerequisite}\n\t{recipe}\n"
    return text


# ----------------------------------------------------------------------------- links

LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(([^()\s]+)\)")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)
ELSEWHERE = {"en": "available from your instructor", "es": "disponible a través de tu instructor"}


def made_by_make_lab(relative: Path, out: Path) -> bool:
    """``work/NN.ipynb`` (``work/es/NN.ipynb``): the learner's copy ``make lab`` writes of a lab
    the edition ships."""
    parts = relative.parts
    if len(parts) == 2 and parts[0] == "work":
        return (out / "labs" / parts[1]).is_file()
    if len(parts) == 3 and parts[:2] == ("work", "es"):
        return (out / "es" / "labs" / parts[2]).is_file()
    return False


def rewrite_links(text: str, page: Path, out: Path) -> str:
    """Each relative link of ``text`` (on ``page``, a file of the edition at ``out``) to a file
    the edition does not have becomes its text, and says where it is available."""
    language = "es" if page.relative_to(out).parts[0] == "es" else "en"

    def fix(match: re.Match) -> str:
        bang, label, target = match.groups()
        if SCHEME.match(target) or target.startswith("#"):
            return match.group(0)
        path = target.split("#", 1)[0]
        resolved = Path(os.path.normpath(page.parent / path))
        if resolved.is_relative_to(out):
            relative = resolved.relative_to(out)
            if resolved.exists() or made_by_make_lab(relative, out):
                return match.group(0)
        if bang:
            return label
        return f"{label} ({ELSEWHERE[language]})"

    return LINK.sub(fix, text)


def _rewrite_all_links(out: Path) -> None:
    for path in sorted(out.rglob("*.md")):
        if path.relative_to(out).parts[0] == "src":
            continue
        text = path.read_text(encoding="utf-8")
        new = rewrite_links(text, path, out)
        if new != text:
            path.write_text(new, encoding="utf-8")
    for path in sorted(out.rglob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        changed = False
        for cell in notebook.cells:
            if cell.cell_type == "markdown":
                new = rewrite_links(cell.source, path, out)
                changed |= new != cell.source
                cell.source = new
        if changed:
            nbformat.write(notebook, path)


# ----------------------------------------------------------------------------- the website


def build_site(out: Path) -> None:
    """Build the edition's website into ``out/_site`` with the edition's own site/build.py."""
    done = subprocess.run(
        [sys.executable, str(out / "site" / "build.py"), str(out / "_site")],
        cwd=out,
        capture_output=True,
        text=True,
    )
    shutil.rmtree(out / "build", ignore_errors=True)  # the builder's scratch folder
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ReleaseError(
            "the website did not build (it needs the `site` extra: "
            f"pip install -e '.[site]'):\n{tail}"
        )
    print(f"wrote the edition's website to {out / '_site'} (open {out / '_site' / 'index.html'})")


def write_release(root: Path, out: Path, site: bool = False) -> int:
    """Write the student edition of the course at ``root`` into ``out`` (which must not exist
    or be empty), and with ``site`` its website into ``out/_site``. Returns a process exit
    status."""
    root, out = Path(root), Path(out)
    if out.exists() and any(out.iterdir()):
        print(f"normlab release: {out} is not empty; give a new folder", file=sys.stderr)
        return 2
    try:
        if out.resolve() == root.resolve() or root.resolve() in out.resolve().parents:
            if not out.resolve().is_relative_to(root.resolve() / "build"):
                raise ReleaseError("write the edition outside the course (or under build/)")
        index = answer_index(root)
        _write(root, out, index)
        print(f"wrote the student edition to {out}")
        if site:
            build_site(out)
    except ReleaseError as error:
        print(f"normlab release: {error}", file=sys.stderr)
        shutil.rmtree(out, ignore_errors=True)
        return 1
    return 0


def _write(root: Path, out: Path, index: AnswerIndex) -> None:
    out.mkdir(parents=True, exist_ok=True)
    left_out = ("__pycache__", "*.pyc", ".ipynb_checkpoints")
    ignore = shutil.ignore_patterns(*left_out)
    for folder in SHIPPED:
        if (root / folder).is_dir():
            shutil.copytree(root / folder, out / folder, ignore=ignore)
    for name in SHIPPED_FILES:
        if (root / name).is_file():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, out / name)
    for folder in SHIPPED_SITE:
        if (root / folder).is_dir():
            shutil.copytree(root / folder, out / folder, ignore=ignore)
    (out / "README.md").write_text(_edition_readme(root), encoding="utf-8")
    if (root / "es" / "README.md").is_file():
        (out / "es" / "README.md").write_text(_edition_readme_es(root), encoding="utf-8")
    (out / "Makefile").write_text(_edition_makefile(root), encoding="utf-8")

    # The package, with its keys hashed; any other answer in it stops the release. The oracle's
    # memo (grader/oracle_memo: its answers to every question the checks ask, beside the
    # questions) stays with the instructor: without it the edition's oracle computes with
    # PyTorch, as it did before there was a memo.
    package = root / "src" / "normlab"
    memo_ignore = shutil.ignore_patterns(*left_out, "*.npz")
    shutil.copytree(package, out / "src" / "normlab", ignore=memo_ignore)
    top_level = _top_level_answers(root)
    for module in sorted((out / "src" / "normlab").rglob("*.py")):
        relative = module.relative_to(out).as_posix()
        source = module.read_text(encoding="utf-8")
        if module.parent.name == "checks":
            source, _ = hide_keys(source, relative, top_level)
            module.write_text(source, encoding="utf-8")
        found = find_answers(source, index)
        if found:
            window, lab = found[0]
            raise ReleaseError(
                f"{relative}, line {window[0].lineno}, holds an answer of lab {lab}; "
                "the package must not ship it"
            )

    # Demos and the other notebooks: answers cut out, outputs kept.
    for path in sorted(out.rglob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        changed = False
        for cell in notebook.cells:
            if cell.cell_type == "code" and find_answers(cell.source, index):
                cell.source = scrub_demo_cell(cell.source, index)
                changed = True
        if changed:
            nbformat.write(notebook, path)
    # A benchmark script that times a lab's answer (chapter 07's fused kernels) stays with the
    # instructor: the edition keeps its recorded results, not the script.
    for path in sorted((out / "benchmarks").rglob("*.py")):
        if find_answers(path.read_text(encoding="utf-8"), index):
            path.unlink()
            print(f"left out {path.relative_to(out)}: it holds a lab answer", file=sys.stderr)
    for path in sorted(out.rglob("*.py")):
        if find_answers(path.read_text(encoding="utf-8"), index):
            raise ReleaseError(f"{path.relative_to(out)} holds a lab answer")
    # Last, when every file the edition ships is in place: links to what it left out.
    _rewrite_all_links(out)
