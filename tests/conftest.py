"""Shared fixtures and helpers: the repository root, a solution's functions, `normlab grade`.

Also the test tiers. ``make test-fast`` deselects three markers (registered in pyproject.toml):
``notebooks`` (executes notebooks), ``isolation`` (grades through the fork server or the
sandbox, a process per submission) and ``slow`` (anything else that takes more than a few CPU
seconds, such as starting JupyterLab). Whole files are marked in TIERS below; single tests in
other files carry the marker themselves.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

# One thread per process, in this process and in every process the suite starts (kernels,
# graders, `make`): `make test` already runs a worker per core, and a second thread in each
# only spins beside the others. Set before NumPy and PyTorch load, so OpenBLAS and OpenMP read
# it; a value already in the environment is kept. The stored outputs hold with any thread
# count.
for _variable in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS",
):
    os.environ.setdefault(_variable, "1")

import nbformat  # noqa: E402
import numba  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

# The checks run thousands of tiny tensor operations in this process. With more than one
# intra-op thread each of them pays for waking the pool, which on a busy 2-core machine costs
# about 20 times the operation itself (measured: layer_norm forward and backward on (8, 16),
# 0.7 ms with one thread, 8-13 ms with two). Kernels and graders read OMP_NUM_THREADS above;
# graded submissions are given one thread by the grader itself, whatever its environment.
torch.set_num_threads(1)
# Numba's OpenMP layer sets OpenMP's thread count for the whole process each time a parallel
# kernel runs (lab 07's checks and mutants run some here), and PyTorch reads its count from
# there: without this, every check after lab 07's would run on two threads again.
numba.set_num_threads(1)

# A limit only for a hung process or kernel, far above any healthy run on a loaded machine.
# How fast things are is reported by `make bench`, never asserted.
HANG_GUARD_S = 900

TIERS = {
    "test_adversarial.py": "isolation",
    "test_classroom.py": "isolation",
    "test_grade.py": "isolation",
    "test_mutants.py": "slow",  # hundreds of mutants, each through every check of its lab
}


# `make test` hands whole files to its workers in collection order (pytest-xdist's
# --no-loadscope-reorder; by default it hands out the files with the most tests first, which
# left a file of 3 long tests, test_workflow.py, to run alone at the end). The files that take
# longest (their tests' time added up, in one full run of the present suite) come first, so that
# the last to finish is a short one.
LONGEST_FIRST = (
    "tests/test_adversarial.py",
    "notebooks/06_pre_post_ln.ipynb",
    "tests/test_workflow.py",
    "tests/test_site.py",
    "tests/test_release.py",
    "tests/test_mutants.py",
    "tests/test_classroom.py",
    "tests/test_grade.py",
    "tests/test_spanish.py",
    "tests/test_every_probe_fires.py",
    "tests/test_i18n.py",
    "tests/test_notebooks.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable
    for item in items:
        path = Path(str(item.path))
        if path.suffix == ".ipynb":  # collected by nbval
            item.add_marker("notebooks")
        elif path.name in TIERS and not any(
            item.get_closest_marker(m) for m in ("notebooks", "isolation", "slow")
        ):
            item.add_marker(TIERS[path.name])


def check_dict(name: str, points: int, most: int) -> dict:
    """One check of ``normlab grade --json``'s contract, earning all its points or none."""
    return {
        "name": name,
        "points": points,
        "max_points": most,
        "passed": points == most,
        "message": "",
    }


def run_cli(arguments) -> tuple[int, str, str]:
    """`normlab ARGUMENTS...` run in this process: (exit status, stdout, stderr).

    Submissions graded this way still run in their own processes (that is the grader's job);
    only the command's own start-up (a new interpreter importing the course and PyTorch) is
    saved.
    """
    from normlab.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main([str(argument) for argument in arguments])
    return code, stdout.getvalue(), stderr.getvalue()


def run_cli_process(arguments) -> subprocess.CompletedProcess:
    """``run_cli`` as a ``CompletedProcess``, for tests that read a command's result that way."""
    arguments = [str(argument) for argument in arguments]
    return subprocess.CompletedProcess(arguments, *run_cli(arguments))


def grade_json(*paths, extra=()) -> tuple[int, dict, str]:
    """`normlab grade --json PATH... EXTRA...` run in this process: (exit status, JSON, stderr)."""
    code, stdout, stderr = run_cli(["grade", *paths, "--json", *extra])
    data = json.loads(stdout) if code == 0 else {}
    return code, data, stderr


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


_COMPILED: dict = {}


def _code_key(code: types.CodeType) -> tuple:
    consts = tuple(
        _code_key(c) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c))
        for c in code.co_consts
    )
    return (code.co_code, consts, code.co_names, code.co_varnames)


def _globals_key(function) -> tuple:
    """What a compiled kernel froze of the globals it names (modules by name, others by value)."""
    key = []
    for name in function.__code__.co_names:
        value = function.__globals__.get(name)
        if isinstance(value, types.ModuleType):
            key.append((name, value.__name__))
        elif isinstance(value, (int, float, str, bool, type(None))):
            key.append((name, repr(value)))
        else:
            key.append((name, id(value)))  # another kernel: a new one (mutated) is a new key
    return tuple(key)


@contextlib.contextmanager
def _numba_compiles_once(jit: bool = True):
    """Reuse the compiled Numba kernel when the same source is executed again.

    The mutation tests execute a solution's cells once per mutant (hundreds of times); a
    ``@njit(parallel=True)`` kernel takes 0.5-1.5 s to compile per argument type and layout.
    A kernel whose code, options and globals are unchanged is the same kernel: compile it once.
    ``jit=False``: a kernel not compiled before (a mutant) runs as the Python function it is,
    ``prange`` being ``range`` outside Numba. Its arithmetic is the same; the 175 mutants of lab
    07 are killed or survive exactly as when each is compiled (about 100 s of compiling).
    """
    try:
        import numba
    except ImportError:
        yield
        return
    original = numba.njit

    def compile_once(function, options):
        if function.__closure__:
            return original(**options)(function)
        key = (_code_key(function.__code__), _globals_key(function), repr(sorted(options.items())))
        if key not in _COMPILED:
            if not jit:
                return function
            _COMPILED[key] = original(**options)(function)
        return _COMPILED[key]

    def njit(*args, **options):
        if len(args) == 1 and isinstance(args[0], types.FunctionType):
            return compile_once(args[0], options)
        if not args:
            return lambda function: compile_once(function, options)
        return original(*args, **options)  # explicit signatures: compile as asked

    numba.njit = njit
    try:
        yield
    finally:
        numba.njit = original


def solution_namespace(stem: str, replace: tuple[str, str] | None = None, jit: bool = True) -> dict:
    """Execute the solution notebook's definition cells (no demos) and return its namespace.

    Only cells that define functions or answers are run, so the tests get the solution's
    functions without its slower demonstration cells. ``replace=(old, new)`` swaps one piece of
    source first (a mutated function or class), so that everything defined after it — a table
    of classes, an adapter — is built from the new version. ``jit=False``: a Numba kernel that
    was not compiled before runs as plain Python (see ``_numba_compiles_once``).
    """
    namespace: dict = {"__name__": "solution"}
    os.environ.pop("NORMLAB_GRADING", None)
    for source in definition_cells(stem):
        if replace is not None:
            source = source.replace(*replace)
        source = "\n".join(line for line in source.splitlines() if not line.startswith("check("))
        with _numba_compiles_once(jit):
            exec(compile(source, f"<{stem}>", "exec"), namespace)
    return namespace


@functools.cache
def definition_cells(stem: str) -> tuple[str, ...]:
    """The solution's code cells that do not call the learner's code (read once per session)."""
    notebook = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    return tuple(
        cell.source
        for cell in notebook.cells
        if cell.cell_type == "code" and "runs-learner-code" not in cell.metadata.get("tags", [])
    )


def check_results(stem: str, objects: dict, first: str | None = None, from_scratch: bool = True):
    """The results of the lab's checks of ``objects``, one at a time, as ``check()`` grades them.

    A generator: a test that needs only the first failure (a mutant, a probe) stops there and
    the remaining checks never run. ``first``: the checks that use this name run before the
    others (a stable sort, so the lab's order otherwise). ``from_scratch=False`` lifts the lab's
    ban on library norms, for code that is not a learner's (a probe, whose value is compared
    with the learner's and never graded, may compute with the library).
    """
    import dataclasses

    from normlab.grader import core, notebook
    from normlab.grader.registry import get_lab

    lab = get_lab(stem)
    if not from_scratch:
        lab = dataclasses.replace(lab, forbidden={})
    guarded = core.ForbiddenGuard(notebook.InProcessSubmission(objects, lab.forbidden), lab)
    chosen = [check for check in lab.checks if set(check.uses) & set(objects)]
    chosen.sort(key=lambda check: first not in check.uses)
    return (core.run_check(check, guarded) for check in chosen)


# "Why: as in “<check>” above.": a reason that an earlier check of the report gave in full.
_REFERENCE = re.compile(r"^(?:Why|Or|Hint): as in “(.+)” above\.$", re.MULTILINE)


def told(results, name: str) -> str:
    """What check ``name`` tells the learner: its message, then the message of each earlier
    check it refers to for a reason ("Why: as in “...” above.")."""
    messages = {result.name: result.message for result in results}
    text, seen, pending = messages[name], {name}, _REFERENCE.findall(messages[name])
    while pending:
        earlier = pending.pop(0)
        if earlier not in seen:
            seen.add(earlier)
            text += "\n" + messages[earlier]
            pending += _REFERENCE.findall(messages[earlier])
    return text


# Headless Chromium for the tests that click through pages (Playwright drives Debian's build).
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per test module; skipped without Playwright or Chromium."""
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("Playwright is not installed: pip install -e '.[site]'")
    executable = next((c for c in CHROMIUM_CANDIDATES if Path(c).exists()), None)
    executable = executable or shutil.which("chromium")
    if executable is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield browser
        browser.close()
