"""`normlab grade`: the authoritative door. Each submission in its own process; bad ones cost only themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, grade_json, grading_budget

from normlab.grader.registry import get_lab

SOLUTION = ROOT / "solutions" / "03_layernorm.ipynb"
LAB = ROOT / "labs" / "03_layernorm.ipynb"
FULL = 16


# `normlab grade --json` run in this process (its submissions still run in processes of their
# own); test_parallel_workers_do_not_crash_the_grader needs a fresh grader process.
grade = grade_json


def by_name(data: dict) -> dict:
    return {Path(s["path"]).name: s for s in data["submissions"]}


def write_notebook(path: Path, cells: list[str]) -> Path:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbformat.write(notebook, path)
    return path


def solution_with(path: Path, replace: dict[str, str] = None, extra_cells=()) -> Path:
    """A copy of the solution notebook with text replaced and cells appended."""
    notebook = nbformat.read(SOLUTION, as_version=4)
    for cell in notebook.cells:
        for old, new in (replace or {}).items():
            cell.source = cell.source.replace(old, new)
    notebook.cells += [nbformat.v4.new_code_cell(c) for c in extra_cells]
    nbformat.write(notebook, path)
    return path


def test_solution_full_marks_and_fresh_lab_zero():
    code, data, _ = grade(SOLUTION, LAB)
    assert code == 0
    solution, lab = data["submissions"]
    assert (solution["score"], solution["max_score"], solution["error"]) == (FULL, FULL, None)
    assert (lab["score"], lab["max_score"]) == (0, FULL)
    assert all(not c["passed"] for c in lab["checks"])
    assert sum("not implemented yet" in c["message"] for c in lab["checks"]) == 11
    assert sum("no answer yet" in c["message"] for c in lab["checks"]) == 3


def test_json_contract_fields():
    _, data, _ = grade(SOLUTION)
    assert list(data) == ["submissions"]
    (submission,) = data["submissions"]
    # The contract's fields, in place; "student" was added for gradebooks (additions only).
    assert {"path", "lab", "score", "max_score", "error", "checks"} <= set(submission)
    for check in submission["checks"]:
        assert set(check) == {"name", "points", "max_points", "passed", "message", "probes"}
        assert isinstance(check["passed"], bool) and isinstance(check["points"], int)


def test_usage_errors_exit_nonzero(tmp_path):
    code, _, stderr = grade(tmp_path / "nope.ipynb")
    assert code == 2 and "no such file" in stderr
    code, _, stderr = grade(tmp_path)
    assert code == 2 and "no notebooks" in stderr


@pytest.mark.parametrize("how", ["alone", "class"])
def test_an_isolation_that_cannot_be_had_is_a_usage_error_beside_the_import(monkeypatch, how):
    """The probes run beside the grader's import of PyTorch: for a class, in a thread of their
    own while this one imports it (``grade.probe_isolation``); for one notebook, here, while a
    thread of its own imports it (``grade.import_oracle_in_background``). Either way, what they
    refuse still stops the command with its reason."""
    import threading

    from normlab.grader import grade as grade_module
    from normlab.grader.isolation.sandbox import IsolationError

    probed_in = []

    def refused(sandbox, allow_root):
        probed_in.append(threading.current_thread())
        raise IsolationError("no isolation to be had here (a test's)")

    monkeypatch.setattr(grade_module, "choose_isolation", refused)
    paths, extra = ([SOLUTION], ()) if how == "alone" else ([SOLUTION, LAB], ("--jobs", "2"))
    code, data, stderr = grade(*paths, extra=extra)
    assert (code, data) == (2, {})
    assert "normlab grade: no isolation to be had here (a test's)" in stderr
    assert (probed_in[0] is threading.current_thread()) == (how == "alone")


@pytest.fixture(scope="module")
def class_folder(tmp_path_factory) -> Path:
    """The foundation's mixed folder: correct, buggy, endless loop, sys.exit, syntax error, truncated JSON."""
    folder = tmp_path_factory.mktemp("class")
    solution_with(folder / "03_layernorm_correct.ipynb")
    solution_with(
        folder / "03_layernorm_buggy.ipynb",
        {"x_hat = centred / np.sqrt(var + eps)": "x_hat = centred / (np.sqrt(var) + eps)"},
    )
    write_notebook(
        folder / "03_layernorm_loop.ipynb",
        [
            "import numpy as np",
            "def layernorm_forward(x, gamma, beta, eps=1e-5):\n    while True:\n        pass",
        ],
    )
    solution_with(folder / "03_layernorm_exit.ipynb", extra_cells=["import sys\nsys.exit(0)"])
    write_notebook(
        folder / "03_layernorm_syntax.ipynb",
        ["import numpy as np", "def layernorm_forward(x, gamma, beta, eps=1e-5)\n    return x"],
    )
    text = SOLUTION.read_text()
    (folder / "03_layernorm_truncated.ipynb").write_text(text[: len(text) // 2])
    return folder


# The endless loop is graded in a run of its own, with a short call budget: a loop reaches any
# budget, and under the others' generous one (GENEROUS_CALL_S) it spun a core for two minutes.
LOOP = "03_layernorm_loop.ipynb"
LOOP_CALL_S = 1.0


@pytest.fixture(scope="module")
def class_results(class_folder):
    others = sorted(path for path in class_folder.iterdir() if path.name != LOOP)
    code, data, stderr = grade(*others, extra=grading_budget(cell_s=5))
    assert code == 0, stderr
    loop_budget = [*grading_budget(cell_s=5), f"--limit=call_timeout={LOOP_CALL_S:g}"]
    code, loop, stderr = grade(class_folder / LOOP, extra=loop_budget)
    assert code == 0, stderr
    return by_name(data) | by_name(loop)


def test_every_submission_is_graded(class_results):
    assert len(class_results) == 6


def test_correct_and_buggy(class_results):
    assert class_results["03_layernorm_correct.ipynb"]["score"] == FULL
    buggy = class_results["03_layernorm_buggy.ipynb"]
    assert 0 < buggy["score"] < FULL
    assert any("Put eps inside the root" in c["message"] for c in buggy["checks"])


def test_each_reason_is_given_in_full_by_one_check_only(class_results):
    # eps outside the root fails several forward checks: its hint is said by the first alone,
    # the others refer to it by name
    buggy = class_results["03_layernorm_buggy.ipynb"]["checks"]
    reasons = [
        line
        for check in buggy
        for line in check["message"].splitlines()
        if line.startswith(("Why: ", "Or: ")) and not line.endswith(" above.")
    ]
    assert len(reasons) == len(set(reasons)), reasons
    first = next(c["name"] for c in buggy if "Put eps inside the root" in c["message"])
    assert sum(f"Why: as in “{first}” above." in c["message"] for c in buggy) >= 2


def test_endless_loop_costs_only_that_function(class_results):
    loop = class_results[LOOP]
    assert loop["score"] == 0
    forward = [c for c in loop["checks"] if c["name"].startswith("forward")]
    assert all("did not finish in time" in c["message"] for c in forward)
    backward = [c for c in loop["checks"] if c["name"].startswith("backward")]
    assert all("is not defined" in c["message"] for c in backward)


def test_sys_exit_in_a_cell_is_contained(class_results):
    exiting = class_results["03_layernorm_exit.ipynb"]
    assert exiting["score"] == FULL, json.dumps(exiting, indent=1)
    assert "SystemExit" in exiting["error"]


def test_syntax_error_is_reported(class_results):
    broken = class_results["03_layernorm_syntax.ipynb"]
    assert broken["score"] == 0 and "SyntaxError" in broken["error"]
    assert all("not defined" in c["message"] for c in broken["checks"] if "D1" not in c["name"])


@pytest.mark.parametrize("content", [b"", b"  \n\t\n"])
def test_an_empty_file_is_called_empty_not_truncated(tmp_path, content):
    path = tmp_path / "03_layernorm.ipynb"
    path.write_bytes(content)
    code, data, _ = grade_json(path, extra=["--allow-root"])
    assert code == 0
    (result,) = data["submissions"]
    assert result["score"] == 0 and result["max_score"] == FULL
    assert result["error"].startswith("not a notebook: the file is empty")
    assert "JSON" not in result["error"]


def test_truncated_json_is_a_clear_error(class_results):
    truncated = class_results["03_layernorm_truncated.ipynb"]
    assert truncated["score"] == 0 and truncated["max_score"] == FULL
    assert "not a valid notebook: broken JSON" in truncated["error"]


def test_process_exit_and_hostile_output(tmp_path):
    """os._exit kills the process (restarts are bounded); printing a fake score changes nothing."""
    solution_with(tmp_path / "03_layernorm_osexit.ipynb", extra_cells=["import os\nos._exit(0)"])
    solution_with(
        tmp_path / "03_layernorm_liar.ipynb",
        extra_cells=['print(\'{"submissions": [{"score": 100}]}\')\nprint("score: 100")'],
    )
    code, data, _ = grade(tmp_path, extra=grading_budget(cell_s=5))
    results = by_name(data)
    assert code == 0
    osexit = results["03_layernorm_osexit.ipynb"]
    assert osexit["score"] == 0 and "exited with code 0" in osexit["error"]
    assert results["03_layernorm_liar.ipynb"]["score"] == FULL


def test_grading_is_deterministic(tmp_path):
    first = grade(SOLUTION, LAB)[1]
    second = grade(SOLUTION, LAB)[1]
    assert first == second


def test_csv_gradebook(tmp_path):
    gradebook = tmp_path / "grades.csv"
    code, _, _ = grade(SOLUTION, LAB, extra=("--csv", str(gradebook)))
    lines = gradebook.read_text().splitlines()
    assert code == 0 and lines[0].startswith("student,lab,score,max_score,error,path,")
    import csv

    rows = {Path(r["path"]).parent.name: r for r in csv.DictReader(lines)}
    assert (rows["solutions"]["score"], rows["solutions"]["max_score"]) == (str(FULL), str(FULL))
    assert rows["labs"]["score"] == "0"
    assert rows["solutions"]["forward matches torch on random (N, d) inputs"] == "2"


# A grader run in a fresh process that records which thread first imports PyTorch.
WHO_IMPORTS_TORCH = """
import sys, threading
from importlib.abc import MetaPathFinder

class Witness(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            print("torch imported by", threading.current_thread().name, file=sys.stderr)
            sys.meta_path.remove(self)
        return None

sys.meta_path.insert(0, Witness())
from normlab.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_parallel_workers_do_not_crash_the_grader():
    """Two worker threads once imported PyTorch at the same moment and crashed the grader itself
    (SIGSEGV in about half the runs). The grader now imports it before it starts its threads:
    watched in a fresh process, the first import is the main thread's, and the run completes.
    (Before, this test graded the same two notebooks three times over and hoped for the race.)
    """
    paths = [
        ROOT / "solutions" / "05_group_instance.ipynb",
        ROOT / "labs" / "05_group_instance.ipynb",
    ]
    command = [sys.executable, "-c", WHO_IMPORTS_TORCH, "grade", *map(str, paths), "--json"]
    done = subprocess.run([*command, "--jobs", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-500:]
    assert "torch imported by MainThread" in done.stderr.splitlines()
    data = json.loads(done.stdout)
    assert [s["score"] == s["max_score"] for s in data["submissions"]] == [True, False]


# A grader run in a fresh process whose import of PyTorch cannot run its package's code before
# the child has run the notebook's cells (or two minutes have passed): it records what happened.
ORDER_OF_START = """
import json, sys, threading
from importlib.abc import MetaPathFinder
from importlib.machinery import PathFinder
from normlab.grader import core
from normlab.grader.isolation import sandbox

events, ready = [], threading.Event()
start_early, run_checks = sandbox.ChildSubmission.start_early, core.run_checks

def recorded_start(self):
    start_early(self)
    events.append("cells run")
    ready.set()

def recorded_checks(*args, **kwargs):
    events.append("checks")
    return run_checks(*args, **kwargs)

class Held:  # runs the package's code once the child has run the cells (the import lock held)
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        events.append("import in " + threading.current_thread().name)
        events.append("import went on" if ready.wait(120) else "import waited in vain")
        self.loader.exec_module(module)

class HeldImport(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = PathFinder.find_spec(name, path)
        spec.loader = Held(spec.loader)
        return spec

sandbox.ChildSubmission.start_early, core.run_checks = recorded_start, recorded_checks
sys.meta_path.insert(0, HeldImport())
from normlab.cli import main
code = main(sys.argv[1:])
print(json.dumps(events), file=sys.stderr)
sys.exit(code)
"""


def test_one_notebook_runs_its_cells_while_the_grader_imports_pytorch():
    """One notebook of a lab written in PyTorch graded alone: the grader imports PyTorch (its
    oracle) in a thread of its own, beside the probes and the child's start-up and cells, and
    the checks begin once it is done. Watched in a fresh process whose import of PyTorch is
    held until the child has run the notebook's cells: the import goes on (before, the grader
    imported it before it started any child, and waited in vain), the checks come after both,
    and the grade is full. (A NumPy lab's notebook is graded without importing it at all:
    tests/test_oracle_memo.py.)"""
    stem = "09_modern_norms"
    solution = ROOT / "solutions" / f"{stem}.ipynb"
    command = [sys.executable, "-c", ORDER_OF_START, "grade", str(solution), "--json"]
    done = subprocess.run([*command, "--jobs", "1"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    events = json.loads(done.stderr.splitlines()[-1])
    assert {"import in normlab-oracle-import", "import went on"} <= set(events), events
    assert events.index("checks") > max(events.index("cells run"), events.index("import went on"))
    (submission,) = json.loads(done.stdout)["submissions"]
    full = get_lab(stem).max_score
    assert (submission["score"], submission["error"]) == (full, None)


def test_the_documented_limits_are_the_limits():
    """docs/grading.md's limits table is the one generated from the fields of ``Limits``: one
    row per field, with its help and its value (update: ``python -m
    normlab.grader.isolation.limits --update docs/grading.md``)."""
    import dataclasses
    import re

    from normlab.grader.isolation import limits

    text = (ROOT / "docs" / "grading.md").read_text()
    assert limits.with_table(text) == text, "stale: run the update command in the docstring"
    rows = dict(re.findall(r"^\| `(\w+)` \|[^|]*\| ([^|]+?) \|$", text, flags=re.MULTILINE))
    assert set(rows) == {field.name for field in dataclasses.fields(limits.Limits)}
    for name, shown in rows.items():
        value = getattr(limits.DEFAULT, name)
        number, _, unit = shown.partition(" ")
        if unit == "MB" and name.endswith("_bytes"):
            value = value >> 20
        assert float(number) == value, (name, shown, value)


def test_every_limit_has_a_unit_and_a_help():
    import dataclasses
    import re

    from normlab.grader.isolation import limits

    for field in dataclasses.fields(limits.Limits):
        assert field.metadata["unit"] in limits.UNITS, field.name
        assert len(field.metadata["help"]) > 10, field.name
    assert "max_files=65536, max_notebook_bytes=16777216," in limits.option_help()
    assert not re.search(r"\b(timeout|memory_mb)=", limits.option_help())  # options of their own


def filled_lab(path: Path, stem: str) -> Path:
    """A learner's copy of lab ``stem``, filled in: the solution's cells, the lab's metadata
    (``normlab.lab``, which every generated lab carries)."""
    lab = json.loads((ROOT / "labs" / f"{stem}.ipynb").read_text())
    solution = json.loads((ROOT / "solutions" / f"{stem}.ipynb").read_text())
    solution["metadata"]["normlab"] = lab["metadata"]["normlab"]
    path.write_text(json.dumps(solution))
    return path


def test_an_assignment_grades_every_notebook_as_its_lab(tmp_path):
    """``--lab``: the lab is the assignment's. A filled lab 04 named after lab 03 earned 18/18
    on lab 03's 16-point assignment (graded with lab 04's checks, its metadata's); under
    ``--lab 03_layernorm`` it earns 0 and is told why, and so does a notebook whose file name
    names lab 04. A notebook whose name names no lab is graded as the assignment's."""
    from normlab.grader import i18n

    (tmp_path / "one").mkdir()
    other = filled_lab(tmp_path / "one" / "03_layernorm.ipynb", "04_rmsnorm")
    cache = ["--cache", str(tmp_path / "cache.json")]
    code, data, stderr = grade(other, extra=cache)
    (alone,) = data["submissions"]
    assert (alone["lab"], alone["score"], alone["max_score"]) == ("04_rmsnorm", 18, 18), stderr

    (tmp_path / "by name").mkdir()
    named = tmp_path / "by name" / "04_rmsnorm.ipynb"
    named.write_bytes((ROOT / "solutions" / "04_rmsnorm.ipynb").read_bytes())
    renamed = tmp_path / "by name" / "my lab.ipynb"
    renamed.write_bytes(SOLUTION.read_bytes())
    assignment = ["--lab", "03_layernorm", *cache]
    code, data, stderr = grade(other, named, renamed, LAB, extra=assignment)
    assert code == 0, stderr
    assert "graded 4 notebook(s), reused 0" in stderr  # the cache graded it as lab 04
    wrong = (
        "this notebook is lab `04_rmsnorm`, not this assignment's lab `03_layernorm`: hand in "
        "the `03_layernorm` notebook"
    )
    outcomes = [
        (s["lab"], s["score"], s["max_score"], s["error"], len(s["checks"]))
        for s in data["submissions"]
    ]
    assert outcomes == [
        ("03_layernorm", 0, FULL, wrong, 0),
        ("03_layernorm", 0, FULL, wrong, 0),
        ("03_layernorm", FULL, FULL, None, 14),
        ("03_layernorm", 0, FULL, None, 14),
    ]
    i18n.untranslated.clear()
    assert i18n.translate(wrong, "es").startswith("este cuaderno es del laboratorio `04_rmsnorm`")
    assert i18n.untranslated == []

    code, _, stderr = grade(other, extra=["--lab", "03_layer"])
    assert code == 2 and "--lab must be one of 01_why_normalize" in stderr


def _cache_entry(tmp_path: Path, index: int):
    from normlab.grader import grade as grade_module
    from normlab.grader.identity import identify
    from normlab.grader.results import SubmissionResult

    path = tmp_path / f"student{index:03d}" / "03_layernorm.ipynb"
    entry = grade_module.Entry(path, identify(path, tmp_path))
    result = SubmissionResult(
        str(path),
        "03_layernorm",
        0,
        FULL,
        None,
        [],
        entry.student,
        isolation="processes",
        name=entry.identity.name,
        layout=entry.identity.layout,
    )
    return f"{index:064x}", result, entry


def test_the_cache_writes_each_result_once(tmp_path, monkeypatch):
    """A class of n costs the cache n lines written, not n rewrites of a growing file (which
    wrote about n / 2 times the final file: 100 times for 200 results). Every byte written
    through the operating system is counted, and every result reads back."""
    import os

    from normlab.grader import grade as grade_module

    written = []
    real_write = os.write

    def counting_write(fd, data):
        written.append(len(data))
        return real_write(fd, data)

    def counting_atomic(path, text):
        written.append(len(text))
        return write_atomically(path, text)

    write_atomically = grade_module.write_atomically
    monkeypatch.setattr(grade_module, "write_atomically", counting_atomic)
    monkeypatch.setattr(grade_module.os, "write", counting_write)
    path = tmp_path / "cache.json"
    cache = grade_module.ResultCache(path, "fingerprint")
    entries = [_cache_entry(tmp_path, index) for index in range(200)]
    for digest, result, entry in entries:
        cache.put(digest, result, entry)
    monkeypatch.undo()
    assert sum(written) <= 1.01 * path.stat().st_size, (sum(written), path.stat().st_size)
    reread = grade_module.ResultCache(path, "fingerprint")
    assert [reread.get(digest, entry) for digest, _, entry in entries] == [
        result for _, result, _ in entries
    ]
    assert grade_module.ResultCache(path, "another grader").entries == {}


def test_a_cache_line_cut_short_costs_that_result_alone(tmp_path):
    """A run killed while it appended a result leaves half a line: the results before it are
    reused, that one is graded again, and the next results are appended after it intact."""
    from normlab.grader import grade as grade_module

    path = tmp_path / "cache.json"
    cache = grade_module.ResultCache(path, "fingerprint")
    entries = [_cache_entry(tmp_path, index) for index in range(3)]
    for digest, result, entry in entries[:2]:
        cache.put(digest, result, entry)
    path.write_bytes(path.read_bytes()[:-40])  # the second line, cut short
    cache = grade_module.ResultCache(path, "fingerprint")
    assert [cache.get(digest, entry) is not None for digest, _, entry in entries[:2]] == [
        True,
        False,
    ]
    cache.put(*entries[2])
    again = grade_module.ResultCache(path, "fingerprint")
    assert [again.get(digest, entry) is not None for digest, _, entry in entries] == [
        True,
        False,
        True,
    ]


def _nobody_runs(command: list[str]) -> bool:
    done = subprocess.run(
        command, user=65534, group=65534, extra_groups=[], capture_output=True, cwd="/"
    )
    return done.returncode == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only: learner code then runs as nobody")
def test_the_nobody_probe_imports_what_the_child_imports_as_the_child_does():
    """An interpreter copied outside a 0700 /root whose standard library stays inside it: run
    as nobody from the start, it finds the system's standard library instead and imports
    everything; the child, which starts as root and drops to nobody, then fails importing
    ``dataclasses`` from the library it started with. The probe starts and drops as the child
    does, so it says nobody cannot run that child (and the grader refuses, or runs as root
    with --allow-root)."""
    import shutil
    import sysconfig
    import tempfile
    import venv

    from normlab.grader.isolation import sandbox, worker

    if _nobody_runs(["test", "-r", os.path.join(sysconfig.get_paths()["stdlib"], "os.py")]):
        pytest.skip("nobody can read this Python's standard library: no such situation here")
    folder = Path(tempfile.mkdtemp(dir="/tmp", prefix="normlab-copied-python-"))
    try:
        folder.chmod(0o755)
        venv.create(folder, symlinks=False, with_pip=False)
        python = str(folder / "bin" / "python")
        site = subprocess.run(
            [python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        ours = [sysconfig.get_paths()["purelib"], str(Path(sandbox.__file__).parents[3])]
        Path(site, "course.pth").write_text("\n".join(ours) + "\n")
        started_as_nobody = [python, "-I", "-c", "import " + ", ".join(worker.CHILD_IMPORTS)]
        if not _nobody_runs(started_as_nobody):
            pytest.skip("nobody cannot start that interpreter at all: no such situation here")
        assert sandbox.unprivileged_ids(False, python) is None
    finally:
        shutil.rmtree(folder)


def test_the_nobody_probe_drops_inside_and_then_imports_the_childs_modules():
    from normlab.grader.isolation import sandbox, worker

    command = sandbox.nobody_probe((65534, 65533), "/some/python")
    assert command[:3] == ["/some/python", "-I", "-c"]
    lines = command[3].strip().splitlines()
    assert lines[1:4] == ["os.setgroups([])", "os.setgid(65533)", "os.setuid(65534)"]
    assert lines[-1] == "import " + ", ".join(worker.PROBE_IMPORTS)  # after the drop
    assert {"normlab.grader.isolation.wire", "numpy"} <= set(worker.PROBE_IMPORTS)
    assert set(worker.CHILD_IMPORTS) - set(worker.PROBE_IMPORTS) == {"torch"}


def test_the_hidden_probe_reads_every_distribution_file_as_importlib_does(tmp_path):
    """The probe of PyTorch's folders (``sandbox.HIDDEN_PROBE``) reads the first part of each
    installed file's path from RECORD without a path object per file: for every distribution
    installed here, and for a RECORD of awkward paths, it finds what ``dist.files`` gives. Both
    are read in a fresh interpreter, as the probe runs (in a test worker that had run other
    tests first, ``dist.files`` once listed only the RECORD file of the awkward distribution)."""
    from normlab.grader.isolation.sandbox import HIDDEN_PROBE

    info = tmp_path / "awkward-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Name: awkward\nVersion: 1.0\n")
    rows = ["pkg/a.py,,", "./dot/b.py,,", "/abs/c.py,,", '"comma,name/d.py",,', "../../bin/e,,"]
    rows += [",,", "single.py,,", "dir//f.py,,", "awkward-1.0.dist-info/RECORD,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    source = HIDDEN_PROBE.format(modules=(), distributions=()).split("\nfor entry in sys.path:")[0]
    compare = source + (
        "\ndef expected(dist):\n"
        "    return {file.parts[0] for file in dist.files or [] if file.parts}\n"
        "found = {}\n"
        "for dist in importlib.metadata.distributions():\n"
        "    found[dist.metadata['Name']] = [sorted(tops(dist)), sorted(expected(dist))]\n"
        "(dist,) = importlib.metadata.distributions(path=[sys.argv[1]])\n"
        "found['awkward'] = [sorted(tops(dist)), sorted(expected(dist))]\n"
        "print(json.dumps(found))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", compare, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert len(found) > 20, sorted(found)  # every distribution of this environment
    for name, (probe, importlib_files) in found.items():
        assert probe == importlib_files, name
    assert set(found["awkward"][0]) == {
        "pkg", "dot", "/", "comma,name", "..", "single.py", "dir", "awkward-1.0.dist-info"
    }  # fmt: skip
