"""The student edition gives nothing away, judged by behaviour: no function it ships earns a point.

``test_release`` looks for the answers' *text*; a demo can hand over a working answer in other
words (its own BatchNorm, a Jacobian in closed form). Here every function the edition defines,
in its notebooks (demos, labs, start page) and in its Python files (the package the labs import,
check modules included, and the benchmark scripts), is handed to each lab as each lab function
whose number of positional arguments it can take, and graded by the lab's checks as ``check()``
grades a learner's function (library norms and autograd refused as in the lab). It must earn 0.

How the functions are collected, without running the demos' experiments: the top-level imports,
``def`` and ``class`` statements and the call-free assignments (constants such as ``EPS = 1e-5``)
of each notebook's code cells are executed in order in one namespace per notebook; a statement
that fails is left out. Package modules are imported whole from the edition's files; the
benchmark scripts, which run their measurements at import, are read like notebooks. A function
is any callable defined there: a ``def``, a lambda bound to a name, and every function a table
holds (a dict of lambdas, a list of functions).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import linecache
import math
import signal
import sys
import types
import warnings
from pathlib import Path

import nbformat
import pytest
from conftest import HANG_GUARD_S, ROOT, _numba_compiles_once, check_results

from normlab.grader.registry import all_labs
from normlab.release import write_release

# Package modules that act on processes, files and notebooks, never on arrays: handed arrays
# they raise, or worse (a cleanup that kills a process group, a writer that creates files), so
# their functions are not tried. Every module named here must exist (checked below).
INFRASTRUCTURE = {
    "build.py",
    "cli.py",
    "pytest_plugin.py",
    "startup.py",
    "release.py",
    "translation",
    "grader/grade.py",
    "instructor/exports.py",
    "instructor/gradescope.py",
    "instructor/lms.py",
    "instructor/report.py",
    "grader/trap.py",
    "grader/results.py",
    "grader/attribution.py",
    "grader/i18n.py",
    "grader/isolation",
}


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "edition"
    assert write_release(ROOT, out) == 0
    return out


def _cheap(statement: ast.stmt) -> bool:
    """Imports, definitions and assignments that call nothing (so run no experiment)."""
    if isinstance(statement, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
        return True
    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
        return not _calls_now(statement.value)
    return False


def _calls_now(node: ast.AST) -> bool:
    """Whether evaluating ``node`` calls something (a lambda's body runs later: not counted)."""
    if isinstance(node, ast.Call):
        return True
    if isinstance(node, ast.Lambda):
        defaults = [d for d in (*node.args.defaults, *node.args.kw_defaults) if d is not None]
        return any(_calls_now(d) for d in defaults)
    return any(_calls_now(child) for child in ast.iter_child_nodes(node))


def _defined(statements: list[ast.stmt], namespace: dict, where: str) -> dict[str, object]:
    """Execute the cheap statements one by one; return the functions they define, by label."""
    found = {}
    for statement in statements:
        if not _cheap(statement):
            continue
        module = ast.Module(body=[statement], type_ignores=[])
        try:
            exec(compile(module, where, "exec"), namespace)
        except Exception:
            continue
        if isinstance(statement, ast.FunctionDef) and callable(namespace.get(statement.name)):
            found[f"{where}: {statement.name}"] = namespace[statement.name]
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):  # a lambda, a table of them
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in namespace:
                    found.update(callables_in(namespace[target.id], f"{where}: {target.id}", where))
    return found


def callables_in(value, label: str, defined_in: str, depth: int = 0) -> dict[str, object]:
    """``value`` when it is a function (a lambda too), else the functions a table of it holds
    (dicts, lists, tuples, sets, nested up to three deep): only those defined in
    ``defined_in`` (a module's name, or a notebook cell's file name)."""
    if isinstance(value, types.FunctionType):
        where = {value.__module__, value.__code__.co_filename}
        return {label: value} if defined_in in where else {}
    found: dict[str, object] = {}
    if depth >= 3:
        return found
    if isinstance(value, dict):
        items = [(f"{label}[{key!r:.40}]", item) for key, item in value.items()]
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = [(f"{label}[{index}]", item) for index, item in enumerate(value)]
    else:
        return found
    for name, item in items:
        found.update(callables_in(item, name, defined_in, depth + 1))
    return found


def _source_without_magics(source: str) -> str:
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n")
    )


def _parsed(source: str, where: str) -> list[ast.stmt]:
    """The statements of a cell or script, its source registered as a notebook's kernel does,
    so that the forbidden-library scan of ``check()`` reads the candidate's own code."""
    try:
        tree = ast.parse(source, where)
    except SyntaxError:
        return []
    linecache.cache[where] = (len(source), None, source.splitlines(keepends=True), where)
    return tree.body


def notebook_functions(path: Path, label: str) -> dict[str, object]:
    """A notebook's functions; a Numba kernel among them is the Python function it compiles
    (conftest's ``_numba_compiles_once``): what it computes is the same, and compiling lab 07's
    and its demo's for each kind of argument tried cost some 2 s."""
    namespace: dict = {"__name__": "edition_notebook"}
    found = {}
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type == "code":
            where = f"<edition {label} cell {index}>"
            statements = _parsed(_source_without_magics(cell.source), where)
            with _numba_compiles_once(jit=False):
                found.update(_defined(statements, namespace, where))
    return found


def script_functions(path: Path, label: str) -> dict[str, object]:
    namespace: dict = {"__name__": "edition_script"}
    where = f"<edition {label}>"
    return _defined(_parsed(path.read_text(encoding="utf-8"), where), namespace, where)


def module_functions(path: Path, label: str) -> dict[str, object]:
    """The functions a package module defines at its top level (imported names left out)."""
    name = "edition_" + label.removesuffix(".py").replace("/", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    found = {}
    for key, value in vars(module).items():  # its functions, lambdas and tables of them
        if isinstance(key, str) and not key.startswith("__"):
            found.update(callables_in(value, f"{label}: {key}", name))
    return found


def edition_functions(edition: Path) -> dict[str, object]:
    found = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in sorted(edition.rglob("*.ipynb")):
            found.update(notebook_functions(path, path.relative_to(edition).as_posix()))
        for path in sorted((edition / "benchmarks").rglob("*.py")):
            found.update(script_functions(path, path.relative_to(edition).as_posix()))
        package = edition / "src" / "normlab"
        for path in sorted(package.rglob("*.py")):
            label = path.relative_to(package).as_posix()
            folders = {"/".join(label.split("/")[:depth]) for depth in (1, 2)}
            if label in INFRASTRUCTURE or folders & INFRASTRUCTURE:
                continue
            found.update(module_functions(path, f"src/normlab/{label}"))
    return found


def positional_range(function) -> tuple[int, float] | None:
    """(fewest, most) positional arguments the function takes; None if it has no signature."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    keyword_only_required = [
        p for p in parameters if p.kind == p.KEYWORD_ONLY and p.default is p.empty
    ]
    if keyword_only_required:
        return None  # no check passes keyword-only arguments a lab function does not have
    most = math.inf if any(p.kind == p.VAR_POSITIONAL for p in parameters) else len(positional)
    return len(required), most


def lab_functions(edition: Path) -> dict[tuple[str, str], tuple[int, float]]:
    """(lab, function) -> its positional range, read from the stubs of the edition's labs."""
    found = {}
    for stem, lab in all_labs().items():
        notebook = nbformat.read(edition / "labs" / f"{stem}.ipynb", as_version=4)
        for cell in notebook.cells:
            if cell.cell_type != "code":
                continue
            try:
                tree = ast.parse(_source_without_magics(cell.source))
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and node.name in lab.names:
                    arguments = node.args
                    count = len(arguments.posonlyargs) + len(arguments.args)
                    found[stem, node.name] = (count - len(arguments.defaults), count)
    return found


class Hung(BaseException):
    """A candidate ran past the hang guard (a BaseException: the checks catch Exception)."""


def _hung(signum, frame):
    raise Hung


def _names(code: types.CodeType) -> set[str]:
    found = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            found |= _names(constant)
    return found


def _from_torch(value) -> bool:
    owner = (
        value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", "")
    )
    return isinstance(owner, str) and owner.split(".")[0] == "torch"


def uses_torch(function) -> bool:
    """Whether the function, or a function of its module that it calls, reaches PyTorch."""
    pending, seen = [function], set()
    while pending:
        current = pending.pop()
        if id(current) in seen or not isinstance(current, types.FunctionType):
            continue
        seen.add(id(current))
        names = _names(current.__code__)
        if "torch" in names:
            return True
        for name in names:
            value = current.__globals__.get(name)
            if value is not None and _from_torch(value):
                return True
            pending.append(getattr(value, "__wrapped__", value))  # through functools.cache
    return False


def points_earned(stem: str, name: str, candidate) -> int:
    """What ``candidate`` earns as the lab's ``name``, graded as ``check()`` grades it, except
    that in a NumPy lab code that reaches PyTorch earns nothing, as under ``normlab grade``,
    where PyTorch cannot be imported while a NumPy lab is graded."""
    if not all_labs()[stem].torch and uses_torch(candidate):
        return 0
    previous = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(HANG_GUARD_S)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return sum(result.points for result in check_results(stem, {name: candidate}))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def overlaps(first: tuple[int, float], second: tuple[int, float]) -> bool:
    return max(first[0], second[0]) <= min(first[1], second[1])


def distinct(functions: dict[str, object]) -> dict[str, object]:
    """One of each function whose source is the same (a lab's helper in English and Spanish)."""
    kept, seen = {}, set()
    for label, function in sorted(functions.items()):
        try:
            key = inspect.getsource(function)
        except (OSError, TypeError):
            key = label
        if key not in seen:
            seen.add(key)
            kept[label] = function
    return kept


@contextlib.contextmanager
def each_source_scanned_once():
    """``check()`` reads and scans a function's source for library norms and autograd at every
    call of it (``InProcessSubmission.static_forbidden``: in a notebook, a function may be
    redefined between two calls); a candidate here is one function object that never changes,
    tried as some twenty lab functions, each through several checks. So its scan is kept, per
    name and forbidden list: the same scan of the same source, once (it was two thirds of the
    test's time). The scan reads the function's own name, not the name it is tried as (but
    for a callable without one), so one scan serves every lab function it is tried as."""
    from normlab.grader import notebook

    scan = notebook.InProcessSubmission.static_forbidden
    kept: dict = {}

    def scanned_once(self, name, forbidden):
        function = self.objects.get(name)
        own_name = getattr(function, "__name__", None) is not None
        key = (id(function), None if own_name else name, repr(forbidden))
        if key not in kept:
            kept[key] = (function, scan(self, name, forbidden))  # the function kept alive
        return list(kept[key][1])

    notebook.InProcessSubmission.static_forbidden = scanned_once
    try:
        yield
    finally:
        notebook.InProcessSubmission.static_forbidden = scan


def earning(edition: Path) -> tuple[list[tuple[str, int]], int]:
    """Every (candidate, lab function) pair that earns a point, and how many pairs were tried."""
    candidates = distinct(edition_functions(edition))
    targets = lab_functions(edition)
    with each_source_scanned_once():
        return _earning(candidates, targets)


def _earning(candidates, targets) -> tuple[list[tuple[str, int]], int]:
    earned, tried = [], 0
    for label, candidate in sorted(candidates.items()):
        accepts = positional_range(candidate)
        if accepts is None:
            continue
        for (stem, name), wants in sorted(targets.items()):
            if not overlaps(accepts, wants):
                continue
            tried += 1
            points = points_earned(stem, name, candidate)
            if points:
                earned.append((f"{label} as {stem}'s {name}", points))
    return earned, tried


def test_the_package_modules_left_out_exist(edition):
    package = edition / "src" / "normlab"
    assert all((package / name).exists() for name in INFRASTRUCTURE)


@pytest.mark.slow
def test_no_function_of_the_edition_earns_a_point(edition):
    earned, tried = earning(edition)
    assert tried > 1000  # the demos', the labs' and the package's functions were all tried
    assert earned == []


# Lab 11's four "bytes moved" answers as its check module once shipped them in the edition: a
# table of lambdas, which neither the answers' text scan (parameter names differ) nor a
# collector of `def`s found. Kept here (tests are not part of the edition) as the case the
# collector must catch.
ANSWERS_AS_A_TABLE = """
BYTES = {
    "tri_rmsnorm_forward_bytes": lambda m, n, e: 2 * m * n * e + 4 * n + 4 * m,
    "tri_rmsnorm_backward_bytes": lambda m, n, e: 3 * m * n * e + 4 * n + 4 * m + 4 * n,
    "tri_layernorm_forward_bytes": lambda m, n, e: 2 * m * n * e + 8 * n + 8 * m,
    "tri_layernorm_backward_bytes": lambda m, n, e: 3 * m * n * e + 4 * n + 8 * m + 8 * n,
}
"""


@pytest.mark.parametrize("form", ["module", "notebook"])
def test_answers_in_a_table_of_lambdas_are_tried_and_caught(tmp_path, form):
    """The collector finds the lambdas of a table, in a package module or a notebook cell,
    and grading them finds the 4 points they earned (what the edition test then reports)."""
    if form == "module":
        path = tmp_path / "old_triton_kernels.py"
        path.write_text(ANSWERS_AS_A_TABLE, encoding="utf-8")
        found = module_functions(path, "src/normlab/grader/checks/old_triton_kernels.py")
    else:
        notebook = nbformat.v4.new_notebook()
        notebook.cells = [nbformat.v4.new_code_cell(ANSWERS_AS_A_TABLE)]
        path = tmp_path / "old.ipynb"
        nbformat.write(notebook, path)
        found = notebook_functions(path, "old.ipynb")
    assert len(found) == 4, found
    targets = {name: wants for (stem, name), wants in lab_functions(ROOT).items() if stem == STEM}
    earned = 0
    for candidate in found.values():
        for name, wants in targets.items():
            if overlaps(positional_range(candidate), wants):
                earned += points_earned(STEM, name, candidate)
    assert earned == 4


STEM = "11_triton_kernels"
