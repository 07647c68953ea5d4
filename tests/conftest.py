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
import signal
import socket
import subprocess
import sys
import time
import types
import urllib.request
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


@pytest.fixture(autouse=True)
def torch_default_dtype_restored():
    """Each test leaves PyTorch's default dtype as it found it. Some tests run a lab's code in
    this process, and a lab's first cell may set float64 (lab 09's does): a float32 model built
    by a later test of the same worker then draws its initial weights from another stream
    (chapter 12's re-run sweep started at loss 5.568 instead of the stored 5.535)."""
    dtype = torch.get_default_dtype()
    yield
    torch.set_default_dtype(dtype)


# A limit only for a hung process or kernel, far above any healthy run on a loaded machine.
# How fast things are is reported by `make bench`, never asserted.
HANG_GUARD_S = 900


GENEROUS_CALL_S = 120.0


def grading_budget(cell_s: float | None = None) -> list[str]:
    """`normlab grade` options for a test whose point is not the submission's time budget.

    The budget (``--timeout``) counts the submission's own time, with wall time only as a
    backstop (``Limits.wall_backstop`` times it): on a machine at load 12 (six runnable
    processes per core) a correct solution that needs a few CPU seconds to grade can take
    minutes, and when the budgets were wall time the default 60 s, or a test's 20 s, ran out.
    Such a test still grades on the hang guard, which only a hung grader reaches, so that no
    backstop is ever near either (where the grader has no CPU group, the whole notebook's
    budget is wall time). ``cell_s``: each notebook cell is still
    stopped after that many wall seconds (a share of the budget, as the grader computes it), for
    a class with a notebook that sleeps forever; a correct cell of a NumPy lab takes
    milliseconds. A test *of* a time limit sets its own, small one. One call of a learner's
    function gets ``GENEROUS_CALL_S`` wall seconds instead of the default 5: on a loaded machine
    a call of a few milliseconds once ran out of its 5 s, and a bug's message became a timeout.
    """
    options = ["--timeout", str(HANG_GUARD_S), f"--limit=call_timeout={GENEROUS_CALL_S:g}"]
    if cell_s is not None:
        options.append(f"--limit=cell_timeout_share={cell_s / HANG_GUARD_S:.6g}")
    return options


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
# the last to finish is a short one (benchmarks/results/suite_cpu.txt: test_triton_kernels_checks,
# 57 s, handed out after 487 s, ended that run 15 s after the other workers).
LONGEST_FIRST = (
    "tests/test_adversarial.py",
    "notebooks/06_pre_post_ln.ipynb",
    "tests/test_workflow.py",
    "tests/test_slurm.py",  # mostly waiting on the cluster
    "tests/test_site.py",
    "tests/test_release.py",
    "tests/test_edition_earns_nothing.py",
    "tests/test_triton_kernels_checks.py",
    "tests/test_binder.py",
    "tests/test_mutants.py",
    "tests/test_classroom.py",
    "tests/test_gradescope.py",
    "tests/test_oracle_memo.py",
    "tests/test_gpu_check.py",
    "notebooks/12_language_model.ipynb",
    "notebooks/13_other_architectures.ipynb",
    "notebooks/08_training.ipynb",
    "tests/test_grade.py",
    "tests/test_spanish.py",
    "tests/test_every_probe_fires.py",
    "tests/test_i18n.py",
    "tests/test_class_report.py",
    "tests/test_notebooks.py",
)


# Triton decides when a kernel is defined whether it is interpreted; a lab's first cell sets
# TRITON_INTERPRET before it imports triton, but in a test process something else may import
# triton first (torch.optim does, through torch._dynamo: lab 08's checks), and lab 11's kernels,
# defined later in the same process, then could not run on a CPU. Set once, for the whole run
# (the kernels nbval starts inherit it).
if importlib.util.find_spec("triton") is not None:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


# Labs whose kernels need an optional extra: without it, only their tests and notebooks skip.
OPTIONAL_EXTRAS = {"11_triton_kernels": ("triton", "make kernels")}


def missing_extra(stem: str) -> str:
    """Why ``stem`` cannot run here ("" when it can): its optional extra is not installed."""
    module, target = OPTIONAL_EXTRAS.get(stem, (None, ""))
    if module is None or importlib.util.find_spec(module) is not None:
        return ""
    return f"lab {stem[:2]} needs {module.capitalize()}, an optional extra: run `{target}`"


# Files whose processes-mode tests (a test id starting "[processes]" or "[processes-") form a work
# unit of their own under `make test`'s --dist loadfile, the rest of the file (sandbox mode and
# the tests without a mode) another: test_adversarial.py grades its corpus once per mode (a module
# fixture per mode), and both modes in one worker made that one file the whole run's critical
# path (about 290 s of wall alone). Each unit still builds its own mode's fixtures once. The
# processes mode's longest tests are the busy loops' (a full core beside eight loops, in that mode
# only: it is named so, to run in that unit) and the slowed solutions' (in both modes; the
# sandbox's fresh interpreters import their libraries slowed too).
SPLIT_BY_MODE = ("tests/test_adversarial.py",)
PROCESSES_ID = re.compile(r"\[processes[\]-]")
# Tests of those files that spend most of their wall time waiting (on a CPU quota of a tenth or
# a thirtieth of a core, beside spinners or busy loops held to their share, on a grader stopped
# from outside): another unit per mode, handed out first, so that their waits overlap the other
# units' computing instead of adding to one worker's queue (in one unit per mode, each mode's
# adversarial tests took 400 to 450 s of wall time, most of a 712-s run). None of them uses the
# corpus, which each unit that does grades once.
WAITING = {
    "tests/test_adversarial.py": (
        "test_every_solution_full_and_every_fresh_lab_zero_slowed_thirtyfold",
        "test_worked_solutions_keep_full_marks_beside_busy_loops",
        "test_classmates_graded_beside_setsid_spinners_keep_their_marks",
        "test_a_cell_kept_waiting_for_a_cpu_is_the_machines_and_a_sleep_is_the_students",
        "test_a_result_killed_from_outside_is_never_cached",
        "test_classmates_graded_beside_a_killer_keep_their_marks",
    ),
}


def _waits(nodeid: str) -> bool:
    path, _, rest = nodeid.partition("::")
    return rest.split("[", 1)[0] in WAITING.get(path, ())


def unit_of(scope: str, nodeid: str) -> str:
    """The unit of the suite that a test goes in: its file (``scope``, pytest-xdist's loadfile
    scope), SPLIT_BY_MODE's files one per mode and WAITING (benchmarks/suite_cpu.py's too)."""
    if scope in SPLIT_BY_MODE:
        scope += "[processes]" if PROCESSES_ID.search(nodeid) else ""
        scope += "[waits]" if _waits(nodeid) else ""
    return scope


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's loadfile, except that SPLIT_BY_MODE's files are two units (see above)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LoadFileAndModeScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(super()._split_scope(nodeid), nodeid)

    return LoadFileAndModeScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    for stem in OPTIONAL_EXTRAS:
        reason = missing_extra(stem)
        for item in items if reason else ():
            if stem in item.nodeid:
                item.add_marker(pytest.mark.skip(reason=reason))
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(  # stable: a file's waiting tests first, then the rest in their order
        key=lambda item: (rank.get(item.nodeid.split("::")[0], len(rank)), not _waits(item.nodeid))
    )
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
    """`normlab grade --json PATH... EXTRA...` run in this process: (exit status, JSON, stderr).

    Without a ``--timeout`` in EXTRA, on the hang guard's budget (``grading_budget``)."""
    budget = [] if "--timeout" in extra else grading_budget()
    code, stdout, stderr = run_cli(["grade", *paths, "--json", *budget, *extra])
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


def solution_namespace(
    stem: str, replace: tuple[str, str] | None = None, jit: bool = True, sources: bool = False
) -> dict:
    """Execute the solution notebook's definition cells (no demos) and return its namespace.

    Only cells that define functions or answers are run, so the tests get the solution's
    functions without its slower demonstration cells. ``replace=(old, new)`` swaps one piece of
    source first (a mutated function or class), so that everything defined after it — a table
    of classes, an adapter — is built from the new version. ``jit=False``: a Numba kernel that
    was not compiled before runs as plain Python (see ``_numba_compiles_once``). ``sources``:
    each cell gets a file name of its own in ``linecache``, so that ``inspect.getsource`` finds
    its functions, as it does in Jupyter (``check()`` of lab 11 reads its kernels' source).
    """
    if missing_extra(stem):
        pytest.skip(missing_extra(stem))
    namespace: dict = {"__name__": "solution"}
    os.environ.pop("NORMLAB_GRADING", None)
    for index, source in enumerate(definition_cells(stem)):
        if replace is not None:
            source = source.replace(*replace)
        source = "\n".join(line for line in source.splitlines() if not line.startswith("check("))
        filename = f"<{stem}>"
        if sources:
            import linecache

            filename = f"<{stem} cell {index}>"
            text = source + "\n"
            linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        with _numba_compiles_once(jit):
            exec(_compiled(source, filename), namespace)
    return namespace


@functools.lru_cache(maxsize=512)
def _compiled(source: str, filename: str) -> types.CodeType:
    """A cell's code, compiled once: the mutation tests execute the same unmutated cells around
    each mutant's (some 35,000 compilations of a few hundred cells)."""
    return compile(source, filename, "exec")


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
    submission = notebook.InProcessSubmission(objects, lab.forbidden)
    if lab.companion is not None:  # lab 11: its kernels launched by the checks themselves
        submission = notebook.submission_for(lab, objects)
    guarded = core.ForbiddenGuard(submission, lab)
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


# The checks modules' tests (tests/test_<name>_checks.py): a lab's report on the functions given,
# what its failed checks say, and whether a probe's hint is among it.


def lab_results(stem: str, **functions) -> list:
    """The results of lab ``stem``'s checks of ``functions``, as ``check()`` reports them."""
    from normlab.grader import notebook

    _, results = notebook.run(lab=stem, **functions)
    return results


def messages(results) -> str:
    """The messages of the failed checks, one after another."""
    return "\n".join(r.message for r in results if not r.passed)


def hints(probes) -> dict[str, str]:
    """Probe name -> its hint, over ``probes`` (a list of Probes or of slips)."""
    return {probe.name: probe.hint for probe in probes}


def caught(results, probes, name: str) -> bool:
    """Some check failed, and a failed check gives the hint of a probe of ``probes`` called
    ``name`` (two probes of a lab, for two functions, may share a name and differ in hint)."""
    given = [probe.hint for probe in probes if probe.name == name]
    assert given, f"no probe called {name!r}"
    text = messages(results)
    return not all(r.passed for r in results) and any(hint in text for hint in given)


def assert_caught(results, probes, name: str) -> None:
    """``caught``, asserted, with the failed checks' messages when it is not."""
    assert caught(results, probes, name), messages(results) or "every check passed"


# Headless Chromium for the tests that click through pages (Playwright drives Debian's build).
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per test module; skipped without Playwright or Chromium."""
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("Playwright is not installed: pip install -e '.[browser]' (make test does)")
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


# ----------------------------------------------------------------------------- shared helpers
# Helpers that several test modules use live here: a test module never imports another.

VENV = ROOT / ".venv"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fetch(url: str, process: subprocess.Popen, log: list[str]) -> bytes:
    """GET url (HTTP 200 required), retrying while the server is still settling and alive."""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                assert answer.status == 200
                return answer.read()
        except OSError as error:
            if process.poll() is not None:
                raise AssertionError(f"{url}: {error}\n" + "".join(log[-20:])) from None
            time.sleep(1)


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


@functools.cache
def check_modules() -> dict:
    """Lab stem -> its checks module (``normlab.grader.checks.<name>``), in course order."""
    import importlib
    import pkgutil

    from normlab.grader import checks

    found = {}
    for info in pkgutil.iter_modules(checks.__path__):
        module = importlib.import_module(f"{checks.__name__}.{info.name}")
        if hasattr(module, "LAB"):
            found[module.LAB.stem] = module
    return dict(sorted(found.items()))


def probe_lists(module) -> dict[str, list]:
    """The module-level lists of probes, by variable name."""
    from normlab.grader.probes import Probe

    return {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, list) and value and all(isinstance(p, Probe) for p in value)
    }


def as_learner_function(probe):
    """The learner's function with the probe's bug: it returns what the probe computes."""

    def buggy(*args, **kwargs):
        return probe.compute(*args, **kwargs)

    return buggy


# Running `make` in a copy of the course (tests/test_workflow.py, test_release.py, test_binder.py)

MAKE_ENV = {**os.environ, "DISPLAY": "", "WAYLAND_DISPLAY": ""}

# The copy shares this checkout's .venv. Its install steps are never remade from the copy: with
# a pyproject.toml newer than the venv's stamp, `make` reinstalled the course from the copy in a
# temporary folder, and every later grading in the suite imported a package that was gone.
MAKE = ("make", f"VENV={VENV}", "-o", f"{VENV}/.installed", "-o", f"{VENV}/.site-installed",
        "-o", f"{VENV}/.browser-installed")  # fmt: skip


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
            found = re.search(rf"http://localhost:{port}/lab/tree/START_HERE\.md\?token=\w+", line)
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
        if (course / "es" / "START_HERE.md").is_file():
            spanish = f"http://localhost:{port}/lab/tree/es/START_HERE.md"
            assert spanish in "".join(log), "".join(log[-20:])
            assert b"JupyterLab" in fetch(f"{spanish}?token={token}", process, log)
            contents = fetch(
                f"http://localhost:{port}/api/contents/es/START_HERE.md?token={token}",
                process,
                log,
            )
            assert json.loads(contents)["type"] == "file"
        return "".join(log)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def with_spanish_edition(course):
    """Give a course copy a Spanish edition if it has none: the sample chapter 03, its start
    page and one lab catalog (tests/spanish_sample.py), and its generated lab."""
    from spanish_sample import write_sample_edition

    from normlab.build import build_all

    if not (course / "es" / "START_HERE.md").is_file():
        write_sample_edition(course)
        assert build_all(course) == 0
    return course


# Running notebooks in a kernel (tests/test_notebooks.py, test_spanish.py)

# Before each lab: its own empty namespace, and no figure of the lab before.
FRESH_NAMESPACE = (
    "import sys as _sys\n"
    "if 'matplotlib.pyplot' in _sys.modules:\n"
    "    _sys.modules['matplotlib.pyplot'].close('all')\n"
    "%reset -f"
)


class SharedKernel:
    """One kernel for the notebooks of one folder, started by the first one run."""

    def __init__(self):
        self.km = None

    def execute(self, path):
        from nbclient import NotebookClient
        from nbclient.util import run_sync

        if self.km is not None and not run_sync(self.km.is_alive)():
            self.km = None  # a lab before killed it: start another
        notebook = nbformat.read(path, as_version=4)
        notebook.cells.insert(0, nbformat.v4.new_code_cell(FRESH_NAMESPACE))
        client = NotebookClient(
            notebook,
            km=self.km,
            timeout=HANG_GUARD_S,  # per cell; a healthy cell takes seconds
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )
        try:
            client.execute(cleanup_kc=False)
        finally:
            self.km = client.km
            if client.kc is not None:
                client.kc.stop_channels()
        del notebook.cells[0]
        return notebook

    def close(self):
        from nbclient.util import run_sync

        if self.km is not None and run_sync(self.km.is_alive)():
            run_sync(self.km.shutdown_kernel)(now=True)


def check_reports(kernel, path):
    """Run a notebook to the end; the text reports of its ``check(...)`` cells."""
    notebook = kernel.execute(path)
    return [
        output.get("data", {}).get("text/plain", "")
        for cell in notebook.cells
        if cell.cell_type == "code" and cell.source.startswith("check(")
        for output in cell.outputs
    ]


def fill_answer_regions(lab_path, solution_path):
    """Paste each answer region of the solution over its stub in a (Spanish) lab copy: the
    translated text around the stubs stays as it is."""
    from normlab.build import BEGIN, END

    solution = {c.id: c for c in nbformat.read(solution_path, as_version=4).cells}
    lab = nbformat.read(lab_path, as_version=4)
    filled = 0
    for cell in lab.cells:
        english = solution.get(cell.id)
        if (
            cell.cell_type != "code"
            or english is None
            or "### BEGIN SOLUTION" not in english.source
        ):
            continue
        regions, inside = [], None
        for line in english.source.split("\n"):
            if BEGIN.match(line):
                inside = [line]
            elif END.match(line) and inside is not None:
                regions.append(inside + [line])
                inside = None
            elif inside is not None:
                inside.append(line)
        lines, out, i = cell.source.split("\n"), [], 0
        for region in regions:
            indent = re.match(r"[ \t]*", region[0]).group(0)
            if indent:
                stub = re.compile(rf"^{indent}raise NotImplementedError\(")
            else:
                stub = re.compile(r"^[A-Za-z_]\w* = None\b")
            while not stub.match(lines[i]):
                out.append(lines[i])
                i += 1
            if indent:  # the stub's comment line before the raise
                out.pop()
                i += 1
            else:
                while i < len(lines) and stub.match(lines[i]):
                    i += 1
            out += region
            filled += 1
        cell.source = "\n".join(out + lines[i:])
    assert filled, f"{lab_path.name}: nothing to fill in"
    nbformat.write(lab, lab_path)


# ----------------------------------------------------------------------------- golden files
# A test that holds an output byte for byte (today's English feedback) compares it with a file
# under tests/golden/. After a deliberate change of that output, rewrite the files and review
# the diff before committing it:
#
#     NORMLAB_UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_i18n.py     (or: pytest --update-golden)

GOLDEN = Path(__file__).parent / "golden"


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite the files of tests/golden/ from what the tests produce",
    )


def pytest_configure(config):
    if config.getoption("--update-golden", default=False):
        os.environ["NORMLAB_UPDATE_GOLDEN"] = "1"


# A number printed with 8 or more significant digits (a learner's own assertion message prints
# its floats in full): its last digits may differ from one CPU to another.
_LONG_NUMBER = re.compile(r"\d*\.\d{8,}(?:e[-+]\d+)?|\d\.\d{7,}e[-+]\d+")


def golden(name: str, produced: str, long_numbers: bool = True) -> None:
    """Assert that ``produced`` is the text of ``tests/golden/NAME``, byte for byte; with
    ``NORMLAB_UPDATE_GOLDEN=1`` (or ``--update-golden``), write it there instead.

    ``long_numbers=False`` writes and compares every number of 8 or more significant digits as
    ``<number>``, for a text that quotes a computation in full precision."""
    if not long_numbers:
        produced = _LONG_NUMBER.sub("<number>", produced)
    path = GOLDEN / name
    if os.environ.get("NORMLAB_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(produced.encode("utf-8"))
        return
    assert path.is_file(), f"no {path}: write it with NORMLAB_UPDATE_GOLDEN=1 (and review it)"
    expected = path.read_bytes().decode("utf-8")
    assert produced == expected, (
        f"{name} differs from tests/golden/{name}; if the change is meant, rewrite it with "
        "NORMLAB_UPDATE_GOLDEN=1 and review the diff"
    )
