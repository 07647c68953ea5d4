"""The package's layers, read from its imports (every import, a function's included).

The grading engine (``normlab.grader``) holds the engine alone: every module of it serves a door
(``notebook.check``, ``grade``) or is a lab's checks, and it imports nothing outside itself but
the course's package (``normlab``: ``check()`` and the grader's own folder). What an instructor
reads or sends (``normlab.instructor``) imports the engine, never a command. No two modules of
normlab import each other, directly or around a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import ROOT

SRC = ROOT / "src"
ENGINE = "normlab.grader"
#: the modules each door starts from; every lab's checks (``checks/*``, loaded by the registry)
#: are reached as well
DOORS = ("normlab.grader.grade", "normlab.grader.notebook")
#: what the modules of a layer may import: its own and these (a name, or a name and below it)
LAYERS = {
    "normlab.grader": ("normlab.grader", "normlab"),
    "normlab.instructor": ("normlab.instructor", "normlab.grader", "normlab"),
}


def module_files(src: Path) -> dict[str, Path]:
    """Dotted name -> file of every module and package below ``src/normlab``."""
    found = {}
    for path in sorted((src / "normlab").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports, anywhere in its source:
    ``from a import b`` imports ``a.b`` when that is a module, else ``a``; relative imports
    resolved."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([module] if module else []))
            for alias in node.names:
                whole = f"{module}.{alias.name}"
                if whole in known:
                    found.add(whole)
                elif module in known:
                    found.add(module)
    found.discard(name)
    return found


def import_graph(src: Path) -> dict[str, set[str]]:
    known = module_files(src)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other around a circle (strongly connected
    components of more than one module), each sorted."""
    order, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(start: str) -> None:
        # Tarjan's algorithm, iteratively: a module's imports are walked from an iterator
        order[start] = low[start] = len(order)
        stack.append(start)
        on_stack.add(start)
        path = [(start, iter(sorted(graph[start])))]
        while path:
            module, todo = path[-1]
            following = next(todo, None)
            if following is not None:
                if following not in order:
                    order[following] = low[following] = len(order)
                    stack.append(following)
                    on_stack.add(following)
                    path.append((following, iter(sorted(graph[following]))))
                elif following in on_stack:
                    low[module] = min(low[module], order[following])
                continue
            path.pop()
            if path:
                low[path[-1][0]] = min(low[path[-1][0]], low[module])
            if low[module] == order[module]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == module:
                        break
                if len(group) > 1:
                    found.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return sorted(found)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_breaches(graph: dict[str, set[str]]) -> list[str]:
    """``"A imports B"`` for each import across the layers' bounds (``LAYERS``)."""
    breaches = []
    for layer, allowed in LAYERS.items():
        for module in sorted(m for m in graph if _within(m, layer)):
            for imported in sorted(graph[module]):
                # `normlab` itself, not every module below it
                fine = any(
                    _within(imported, prefix) if prefix != "normlab" else imported == "normlab"
                    for prefix in allowed
                )
                if not fine:
                    breaches.append(f"{module} imports {imported}")
    return breaches


def no_door_reaches(graph: dict[str, set[str]]) -> list[str]:
    """The engine's modules that neither door nor any lab's checks import, directly or through
    others (a package counts as reached when one of its modules is)."""
    todo = [*DOORS, *(m for m in graph if _within(m, f"{ENGINE}.checks"))]
    reached: set[str] = set()
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo += graph.get(module, ())
    packages = {m.rsplit(".", 1)[0] for m in reached}
    return sorted(m for m in graph if _within(m, ENGINE) and m not in reached and m not in packages)


def test_the_engine_and_the_instructors_package_import_within_their_layers():
    assert layer_breaches(import_graph(SRC)) == []


def test_every_module_of_the_engine_serves_a_door_or_is_a_labs_checks():
    lost = no_door_reaches(import_graph(SRC))
    assert lost == [], (
        f"{', '.join(lost)}: in the grader's folder, but neither door imports it (an "
        "instructor's tool belongs in normlab.instructor)"
    )


def test_no_modules_of_normlab_import_each_other_around_a_circle():
    assert circles(import_graph(SRC)) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "normlab" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


# The package as it was before the instructor's wing (its import lines, as they stood): the
# report writers and the LMS files in the engine's folder, `normlab progress` calling the CLI.
BEFORE = {
    "__init__.py": "def check():\n    from normlab.grader.notebook import check\n",
    "cli.py": "from normlab.grader import exports\n\ndef f():\n    from normlab.progress import p\n",
    "progress.py": "from normlab.grader import i18n\n\ndef g():\n    from normlab.cli import main\n",
    "grader/__init__.py": "",
    "grader/i18n.py": "",
    "grader/core.py": "from . import i18n\n",
    "grader/notebook.py": "from normlab.grader import core, i18n, report\n",
    "grader/grade.py": "import normlab\nfrom normlab.grader.report import SubmissionResult\n",
    "grader/report.py": "from normlab.grader.core import CheckResult\n",
    "grader/lms.py": "def h():\n    from normlab.grader import report\n",
    "grader/exports.py": "from .lms import feedback_comment\n",
    "grader/checks/__init__.py": "",
    "grader/checks/layernorm.py": "from ..core import Lab\n",
}


def test_the_import_graph_resolves_every_form_of_import(tmp_path):
    graph = import_graph(_tree(tmp_path, BEFORE))
    assert graph["normlab.grader.core"] == {"normlab.grader.i18n"}  # relative
    assert graph["normlab.grader.checks.layernorm"] == {"normlab.grader.core"}  # two levels up
    assert graph["normlab.grader.exports"] == {"normlab.grader.lms"}  # from .lms import name
    assert graph["normlab.grader.lms"] == {"normlab.grader.report"}  # inside a function
    assert graph["normlab.grader.grade"] == {"normlab", "normlab.grader.report"}
    assert graph["normlab.progress"] == {"normlab.grader.i18n", "normlab.cli"}


@pytest.mark.parametrize(
    ("check", "found"),
    [
        (circles, [["normlab.cli", "normlab.progress"]]),
        (no_door_reaches, ["normlab.grader.exports", "normlab.grader.lms"]),
    ],
)
def test_the_layout_before_the_instructors_wing_fails(tmp_path, check, found):
    assert check(import_graph(_tree(tmp_path, BEFORE))) == found


def test_an_engine_module_that_imports_the_instructors_package_is_a_breach(tmp_path):
    files = {
        **BEFORE,
        "grader/grade.py": "from normlab.instructor.report import SubmissionResult\n",
        "grader/notebook.py": "def show():\n    from normlab import cli\n",
        "instructor/__init__.py": "",
        "instructor/report.py": "from normlab.grader.results import SubmissionResult\n",
        "instructor/lms.py": "from normlab.progress import p\nfrom . import report\n",
    }
    assert layer_breaches(import_graph(_tree(tmp_path, files))) == [
        "normlab.grader.grade imports normlab.instructor.report",
        "normlab.grader.notebook imports normlab.cli",
        "normlab.instructor.lms imports normlab.progress",
    ]
