"""Broken and hostile submissions: the run completes, each gets its exact outcome, nobody else is touched.

The corpus is graded in both modes: as plain processes (children forked from the fork server;
as root, ``--allow-root`` where ``nobody`` cannot run this Python) and under the bubblewrap
sandbox. What each mode enforces is in ``docs/grading.md``; where the two differ, the corpus
says so case by case.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import nbformat
import numpy as np
import pytest
from conftest import ROOT, grading_budget
from corpus import (
    CONTROLS,
    FORWARD_DEF,
    FULL,
    KILL_CLASSMATES,
    LAB,
    LIMIT_OPTIONS,
    SETSID_SPINNERS,
    SHM_KEYS,
    SOLUTION,
    SPINNER_CELL_OPTIONS,
    SPINNER_FILES,
    SURVIVOR_MARK,
    TEST_MEMORY_MB,
    TORCH_HIDDEN,
    build,
)

from normlab.grader import core, grade
from normlab.grader.isolation import cgroup
from normlab.grader.isolation.limits import DEFAULT
from normlab.grader.isolation.sandbox import bwrap_available

SANDBOX = bwrap_available()
ORIGINAL = "original content\n"
SECRET = "the instructor's secret 8c1f\n"

MODES = ["processes", "sandbox"] if SANDBOX else ["processes"]


def grade_arguments(folder: Path, mode: str, *extra: str) -> list[str]:
    """`normlab grade FOLDER --json EXTRA...` in one isolation mode."""
    arguments = ["grade", str(folder), "--json", *extra]
    if mode == "sandbox":
        arguments.append("--sandbox")
    else:
        arguments.append("--no-sandbox")
        if os.geteuid() == 0:
            arguments.append("--allow-root")  # this Python may not be runnable by nobody here
    return arguments


def grade_command(folder: Path, mode: str, *extra: str) -> list[str]:
    """The same, as a grader process of its own (for the tests that watch that process)."""
    return [sys.executable, "-m", "normlab.cli", *grade_arguments(folder, mode, *extra)]


def grade_here(folder: Path, mode: str, *extra: str) -> subprocess.CompletedProcess:
    """The same, run in this process (the submissions still run in their own): a new
    interpreter would import PyTorch again, 2.4 s of CPU each time. Without a ``--timeout`` in
    EXTRA, on the hang guard's budget (``conftest.grading_budget``)."""
    from conftest import run_cli_process

    budget = [] if "--timeout" in extra else grading_budget()
    return run_cli_process(grade_arguments(folder, mode, *budget, *extra))


# The survivor mark of each mode's gradings: under `make test` the two modes run on two workers
# at the same time, and one mode's check that nothing survived must not see the other's
# notebooks, alive while they are graded. The sandbox mode's corpus gets its mark by rewriting.
SURVIVOR_MARKS = {"processes": SURVIVOR_MARK, "sandbox": "4242.0424243"}


def survivors(mode: str) -> list[int]:
    """Processes whose command line carries the survivor mark of MODE's gradings."""
    mark = SURVIVOR_MARKS[mode]
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                line = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if mark.encode() in line:
                found.append(int(name))
    return found


def make_targets(base: Path, folder: Path) -> dict[str, Path]:
    (base / "outside").mkdir()
    (base / "home").mkdir()
    targets = {
        "sentinel": base / "outside" / "sentinel.txt",
        "gradebook": base / "out" / "grades.csv",
        "spinners' gradebook": base / "out" / "spinners.csv",
        "victim": folder / "03_layernorm_control_correct.ipynb",
        "secret": base / "home" / "secret.txt",
        "linked": base / "outside" / "linked.txt",
    }
    targets["sentinel"].write_text(ORIGINAL)
    targets["linked"].write_text(ORIGINAL)
    targets["secret"].write_text(SECRET)
    return targets


@pytest.fixture(scope="module", params=MODES)
def corpus_run(tmp_path_factory, request):
    base = tmp_path_factory.mktemp("adversarial")
    folder = base / "class"
    folder.mkdir()
    targets = make_targets(base, folder)
    expected = build(folder, targets)
    if request.param == "sandbox":  # the spinners: in the processes mode only (corpus.SPINNERS)
        for name in SPINNER_FILES:
            (folder / name).unlink()
            del expected[name]
        marked = []
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                text = path.read_bytes()
                mark = SURVIVOR_MARK.encode()
                if mark in text:
                    path.write_bytes(text.replace(mark, SURVIVOR_MARKS["sandbox"].encode()))
                    marked.append(path.name)
        assert marked, "no notebook of the corpus carries the survivor mark"
    else:  # the spinners: a run of their own, on a cell budget of 2 s (SPINNER_CELL_OPTIONS)
        (base / "spinners").mkdir()
        for name in SPINNER_FILES:
            (folder / name).rename(base / "spinners" / name)
    shutil.copy(SOLUTION, targets["victim"])
    shutil.copy(LAB, folder / "03_layernorm_control_lab.ipynb")
    scratch = base / "tmp"  # the grader's temporary folders, checked empty afterwards
    scratch.mkdir()
    environment = dict(os.environ, TMPDIR=str(scratch))
    runs = {folder: [targets["gradebook"], []]}
    if request.param == "processes":
        runs[base / "spinners"] = [targets["spinners' gradebook"], SPINNER_CELL_OPTIONS]
    results, stderr = {}, ""
    for graded, (gradebook, extra) in runs.items():
        command = grade_command(graded, request.param, "--jobs", "2", "--timeout", "20", *extra)
        command += ["--csv", str(gradebook), "--memory", str(TEST_MEMORY_MB)]
        command += LIMIT_OPTIONS  # every limit reached long before its time budget
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=1800, env=environment
        )
        assert done.returncode == 0, done.stderr[-3000:]
        results.update({Path(s["path"]).name: s for s in json.loads(done.stdout)["submissions"]})
        stderr += done.stderr
    return results, expected, targets, request.param, scratch, stderr


def _for_mode(value, mode):
    return value[mode] if isinstance(value, dict) else value


def test_corpus_has_every_kind(corpus_run):
    _, expected, _, mode, _, _ = corpus_run
    assert len(expected) >= 50 - (len(SPINNER_FILES) if mode == "sandbox" else 0)
    assert SPINNER_FILES <= set(_outcome_cases())  # every spinner is still a case


def test_every_submission_is_graded(corpus_run):
    results, expected, _, _, _, _ = corpus_run
    assert set(expected) | {
        "03_layernorm_control_correct.ipynb",
        "03_layernorm_control_lab.ipynb",
    } == set(results)


def _outcome_cases():
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        (scratch / "class").mkdir()
        return sorted(build(scratch / "class", make_targets(scratch, scratch / "class")))


@pytest.mark.parametrize("name", _outcome_cases())
def test_exact_outcome(corpus_run, name):
    results, expected, _, mode, _, _ = corpus_run
    if name not in expected:
        pytest.skip(
            "an endless loop stopped by the child's own alarm: graded in the processes mode"
        )
    score, text, finding = expected[name]
    result = results[name]
    assert result["score"] == _for_mode(score, mode), (
        result["error"],
        [c["message"] for c in result["checks"]],
    )
    everything = (result["error"] or "") + "\n".join(c["message"] for c in result["checks"])
    assert _for_mode(text, mode) in everything
    if finding:
        assert any(finding in f for f in result["findings"]), result["findings"]


def test_every_run_records_its_isolation(corpus_run):
    results, _, _, mode, _, stderr = corpus_run
    word = "bubblewrap" if mode == "sandbox" else "separate processes"
    assert f"isolation: {word}" in stderr
    assert all(word in r["isolation"] for r in results.values())


def test_other_students_are_graded_normally(corpus_run):
    results, _, _, _, _, _ = corpus_run
    correct = results["03_layernorm_control_correct.ipynb"]
    assert (correct["score"], correct["error"], correct["findings"]) == (FULL, None, [])
    assert results["03_layernorm_control_lab.ipynb"]["score"] == 0


def test_gradebook_holds_the_real_scores(corpus_run):
    results, _, targets, _, _, _ = corpus_run
    rows = []
    for gradebook in (targets["gradebook"], targets["spinners' gradebook"]):
        if gradebook.exists():  # the spinners' run is the processes mode's only
            with open(gradebook, newline="") as stream:
                rows += list(csv.DictReader(stream))
    assert len(rows) == len(results)
    for row in rows:
        result = results[Path(row["path"]).name]
        assert int(row["score"]) == result["score"]
        assert row["findings"] == "; ".join(result["findings"])


def test_the_gradebook_is_inert(corpus_run):
    """No cell of the gradebook is a formula or holds a terminal control; the escapes that the
    terminal_escapes case raised are shown as text."""
    _, _, targets, _, _, _ = corpus_run
    text = targets["gradebook"].read_text(encoding="utf-8")
    controls = {"Cc", "Cf", "Cs", "Zl", "Zp"}
    assert [c for c in text if c != "\n" and unicodedata.category(c) in controls] == []
    cells = [cell for row in csv.reader(io.StringIO(text)) for cell in row]
    assert [c for c in cells if c[:1] in tuple("=+-@\t\r")] == []
    assert "\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J \\u202eecilA" in text


def test_the_grader_never_follows_a_link_left_by_a_child(corpus_run):
    results, _, targets, _, _, _ = corpus_run
    assert targets["linked"].read_text() == ORIGINAL
    for result in results.values():
        text = json.dumps(result)
        assert SECRET.strip() not in text


def test_no_process_survives_its_submission(corpus_run):
    assert survivors(corpus_run[3]) == []


def test_no_shared_memory_survives_its_submission(corpus_run):
    """The corpus's ``sysv_shared_memory`` leaves two segments of 250 MB: they lived in the
    submission's IPC namespace and went with it."""
    with open("/proc/sysvipc/shm") as stream:
        keys = {int(line.split()[0]) for line in list(stream)[1:] if line.split()}
    assert not keys & set(SHM_KEYS), sorted(keys & set(SHM_KEYS))


def test_every_temporary_folder_is_removed(corpus_run):
    _, _, _, _, scratch, _ = corpus_run
    assert list(scratch.iterdir()) == []


def test_nothing_written_outside_the_childs_folder(corpus_run):
    results, _, targets, mode, _, _ = corpus_run
    isolation = results["03_layernorm_writes_outside.ipynb"]["isolation"]
    if mode != "sandbox" and "the rest read-only" not in isolation:
        pytest.skip("no mount namespace here: a notebook can write where its user can")
    assert targets["sentinel"].read_text() == ORIGINAL
    refused = "No such file or directory" if mode == "sandbox" else "Read-only file system"
    assert refused in results["03_layernorm_writes_outside.ipynb"]["error"]


def test_another_students_file_cannot_be_read(corpus_run):
    results, _, _, mode, _, _ = corpus_run
    if mode != "sandbox":
        pytest.skip("without the sandbox a notebook can read what its user can")
    assert "FileNotFoundError" in (results["03_layernorm_reads_other_student.ipynb"]["error"] or "")


# ----------------------------------------------------------------------------- every lab


# A test that slows its submissions tenfold on purpose runs under `make test`, whose own load
# (other tests, other work) slows them further: the wall-time backstop is five times the
# grader's (``Limits.wall_backstop``), so that only that extra load, not the test's own
# slowdown, could reach it. The budgets themselves are the grader's.
MAKE_TEST_BACKSTOP = "--limit=wall_backstop=50"


# The labs whose worked solutions need the most CPU time (07's Numba kernels compile, 08
# trains a network, 11's kernels run in Triton's interpreter, in two processes, 12 trains six
# small language models for its measurement, its grading about 8 s of CPU): graded on a
# thirtieth of a core, each took 50 to 150 s of wall time in the processes mode (the others 10
# to 30 s), and more under the sandbox, whose fresh interpreters import their libraries on
# that thirtieth too. They are slowed tenfold (the course's promise) instead, in a run beside
# the others'.
HEAVIEST = ("07_cost", "08_training", "11_triton_kernels", "12_language_model")
SLOWED = {"thirtyfold": "--limit=cpus=0.03", "tenfold": "--limit=cpus=0.1"}


@pytest.mark.parametrize("mode", MODES)
def test_every_solution_full_and_every_fresh_lab_zero_slowed_thirtyfold(tmp_path, mode):
    """Every lab's worked solution, graded on the grader's own budgets (no test's hang guard)
    with a thirtieth of a core each (its CPU quota, ``cpus=0.03``: every process of it waits for
    a CPU 97% of the time, as beside 32 busy loops of the same weight), earns every point with
    no error, and every fresh lab earns none; a second run grades none again, since no result
    was stopped by the machine's load (such a result is not cached). NumPy labs are graded
    without PyTorch (under the sandbox), labs 06, 09, 11 and 12 with it. The budgets count the
    submission's own time, not the machine's: counted in wall time, as they were, labs 06, 07
    and 09 lost points here to "ran out of time" (a tenfold slowdown, the course's promise, was
    not yet enough to show it). Where no CPU group can be made, the same runs go unslowed.

    The labs that need the most CPU time (``HEAVIEST``) are slowed tenfold, in a second run at
    the same time, with the fresh labs: below the wall-time backstop, a budget counted in the
    submission's own time gives the same verdict at any slowdown (a call that uses 0.2 s of CPU
    uses 0.2 s tenfold or thirtyfold slowed), so thirtyfold would only prove again what tenfold
    does, three times as long; what a thirtyfold slowdown adds, catching budgets counted in wall
    time, labs 06 and 09 still show. (The fresh labs and the solutions were graded once more,
    unslowed, by a test of their own: some 60 s of the suite's CPU for nothing this one does
    not show.)

    The fresh labs are graded in the processes mode only: under the sandbox every fresh English
    lab is graded, to 0 with no error, by the student edition's own ``make test``
    (``normlab.selfcheck``, in ``normlab grade``'s default isolation), which
    test_release.py's student-edition test runs; here they cost the sandbox a fresh
    interpreter, and PyTorch's import, each (some 8 s of the suite's CPU)."""
    from normlab.grader.registry import all_labs

    labs = all_labs()
    slowed = cgroup.cpu_available() is not None
    folders = {speed: tmp_path / speed for speed in SLOWED}
    with_fresh = mode == "processes"
    fresh_labs = folders["tenfold"] / "labs"
    if with_fresh:
        fresh_labs.mkdir(parents=True)
    for stem in labs:
        folder = folders["tenfold" if stem in HEAVIEST else "thirtyfold"] / "solutions"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "solutions" / f"{stem}.ipynb", folder / f"{stem}.ipynb")
        if with_fresh:
            shutil.copy(ROOT / "labs" / f"{stem}.ipynb", fresh_labs / f"{stem}.ipynb")

    def count(speed):
        return len(list(folders[speed].rglob("*.ipynb")))

    def options(speed):  # one job per notebook: at most a third of a core (thirtyfold) in all
        extra = ["--timeout", str(DEFAULT.timeout), "--jobs", str(count(speed))]
        extra += [SLOWED[speed]] if slowed else []
        return [*extra, MAKE_TEST_BACKSTOP, "--cache", str(tmp_path / f"{speed}.cache.json")]

    tenfold = subprocess.Popen(
        grade_command(folders["tenfold"], mode, *options("tenfold")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        thirtyfold = grade_here(folders["thirtyfold"], mode, *options("thirtyfold"))
        stdout, stderr = tenfold.communicate(timeout=900)
    finally:
        if tenfold.poll() is None:  # this test failed first: the grader stops as on Ctrl-C
            tenfold.send_signal(signal.SIGINT)
            tenfold.communicate(timeout=120)
    runs = [(thirtyfold.returncode, thirtyfold.stdout, thirtyfold.stderr)]
    runs.append((tenfold.returncode, stdout, stderr))
    results = {}
    for code, out, err in runs:
        assert code == 0, err[-3000:]
        for s in json.loads(out)["submissions"]:
            results[Path(s["path"]).parent.name, s["lab"]] = s
    assert len(results) == (2 if with_fresh else 1) * len(labs)
    solutions = {stem: r for (kind, stem), r in results.items() if kind == "solutions"}
    assert {stem: (r["score"], r["error"]) for stem, r in solutions.items()} == {
        stem: (lab.max_score, None) for stem, lab in labs.items()
    }
    fresh = {stem: r for (kind, stem), r in results.items() if kind == "labs"}
    assert {stem: r["score"] for stem, r in fresh.items()} == dict.fromkeys(
        labs if with_fresh else (), 0
    )
    assert all(r["max_score"] == labs[stem].max_score for stem, r in fresh.items())
    assert {stem for stem, lab in labs.items() if lab.torch} == {
        "06_pre_post_ln",
        "09_modern_norms",
        "11_triton_kernels",
        "12_language_model",
    }
    for speed in folders:
        again = grade_here(folders[speed], mode, *options(speed))
        assert f"reused {count(speed)} unchanged" in again.stderr, again.stderr[-2000:]


BUSY_LOOP = ["sh", "-c", "while :; do :; done"]


@pytest.mark.skipif(
    cgroup.cpu_available() is None or cgroup.cpu_available()[0] != 1,
    reason="needs cgroup v1's cpu controller (a group that holds processes and groups)",
)
# in the processes mode only; so named, it runs with that mode's waiting tests (conftest.WAITING)
@pytest.mark.parametrize("mode", ["processes"])
def test_worked_solutions_keep_full_marks_beside_busy_loops(tmp_path, mode):
    """Lab 03's worked solution (it lost points on a loaded machine: "timed out while calling
    `layernorm_forward`"), graded on the grader's own budgets beside eight busy loops: the
    grader, its submission and the loops share one core (a CPU group this test makes, with a
    quota of one core, so that the rest of the machine is not theirs), each loop weighing as
    much as the submission, so that it gets about a tenth of the core (one submission, eight
    loops, the grader). It earns every point with no error; run again (without the loops), it
    is not graded again: nothing was stopped by the machine's load. Every lab, in both modes,
    lab 08 ("ran out of time") among them: the test above (a CPU quota, which costs no CPU;
    beside the loops lab 08's training had them burn some 40 s of CPU of the suite's)."""
    import functools

    stems = ["03_layernorm"]
    for stem in stems:
        shutil.copy(ROOT / "solutions" / f"{stem}.ipynb", tmp_path / f"{stem}.ipynb")
    extra = ["--jobs", str(len(stems)), "--cache", str(tmp_path / "cache.json")]
    extra.append(MAKE_TEST_BACKSTOP)
    box = cgroup.Cgroup(None, cpus=1.0)
    join = functools.partial(cgroup.join, box.paths)
    hogs = []
    try:
        hogs = [subprocess.Popen(BUSY_LOOP, preexec_fn=join) for _ in range(8)]
        done = subprocess.run(
            grade_command(tmp_path, mode, *extra),
            preexec_fn=join,
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        box.remove()
    assert done.returncode == 0, done.stderr[-3000:]
    from normlab.grader.registry import all_labs

    labs = all_labs()
    results = {s["lab"]: s for s in json.loads(done.stdout)["submissions"]}
    assert {stem: (r["score"], r["error"]) for stem, r in results.items()} == {
        stem: (labs[stem].max_score, None) for stem in stems
    }
    again = grade_here(tmp_path, mode, "--timeout", str(DEFAULT.timeout), *extra)
    assert f"reused {len(stems)} unchanged" in again.stderr, again.stderr[-2000:]


# A LayerNorm whose forward reads the oracle's memo, the grader's answers to its checks'
# questions (shipped beside the grader so that a NumPy lab is graded without PyTorch): where it
# could read it, it could answer from it (looking its input up among the memo's questions, or
# calling the grader's own oracle, which the memo answers without PyTorch).
MEMO_READER = """
import os
from normlab.grader import memo as _memo


def layernorm_forward(x, gamma, beta, eps=1e-5):
    with open(os.path.join(_memo.MEMO_DIR, "layernorm.npz"), "rb") as stream:
        raise RuntimeError(f"read {len(stream.read())} bytes of the oracle's answers")
"""


@pytest.mark.parametrize("mode", MODES)
def test_a_notebook_cannot_read_the_oracles_answers(tmp_path, mode):
    """The memo is an empty folder in the child's filesystem, in both modes and every lab: the
    forward above finds no file (before, it read all 58,860 bytes of LayerNorm's entries: each
    keeps its question with its answer)."""
    from normlab.grader import memo

    assert (memo.MEMO_DIR / "layernorm.npz").is_file()  # the grader's own copy is there
    notebook = nbformat.read(SOLUTION, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(MEMO_READER))
    nbformat.write(notebook, tmp_path / "03_layernorm.ipynb")
    done = grade_here(tmp_path, mode)
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = json.loads(done.stdout)["submissions"]
    forward = [c for c in result["checks"] if "layernorm_forward" in c["message"]]
    assert forward and not any(c["passed"] for c in forward), result["checks"]
    assert all("FileNotFoundError" in c["message"] for c in forward), forward[0]["message"]
    assert not any("oracle's answers" in c["message"] for c in result["checks"])


def test_the_sandbox_hides_torch_at_the_os_level(tmp_path):
    """Without the stand-in, nothing in the sandbox of a NumPy lab imports PyTorch: its folders
    hold only the grader's ``__init__.py``, which raises; the root and /dev are read-only."""
    if not SANDBOX:
        pytest.skip("bubblewrap is not available")
    from normlab.grader.isolation.sandbox import HIDDEN_INIT, bwrap_command, hidden_paths

    init = tmp_path / "init.py"
    init.write_text(HIDDEN_INIT)
    folders = hidden_paths()
    assert any(folder.endswith("/torch") for folder in folders), folders
    probe = (
        "import json, os, sys\n"
        "found = {}\n"
        "for folder in json.loads(sys.argv[1]):\n"
        "    found[folder] = sorted(os.listdir(folder))\n"
        "try:\n"
        "    import torch\n"
        "    found['import'] = 'imported ' + repr(getattr(torch, '__file__', None))\n"
        "except ImportError as error:\n"
        "    found['import'] = str(error)\n"
        "for place in ('/x', '/dev/x', json.loads(sys.argv[1])[0] + '/x'):\n"
        "    try:\n"
        "        open(place, 'w')\n"
        "        found[place] = 'written'\n"
        "    except OSError as error:\n"
        "        found[place] = error.strerror\n"
        "print(json.dumps(found))"
    )
    done = subprocess.run(
        [
            *bwrap_command(hide_init=str(init)),
            sys.executable,
            "-I",
            "-c",
            probe,
            json.dumps(folders),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert all(found[folder] == ["__init__.py"] for folder in folders), found
    assert found["import"].startswith("PyTorch is not available"), found["import"]
    assert found["/x"] != "written" and found["/dev/x"] != "written", found
    assert found[folders[0] + "/x"] != "written", found


# The two doors agree on PyTorch in a NumPy lab: a graded function that computes with it (an
# llm.c-style LayerNorm behind a NumPy adapter, a tensor made inside, the library's own norm)
# fails its checks in the learner's notebook as it does under ``normlab grade``, in both modes;
# importing PyTorch or naming it (``isinstance``) is no use and costs nothing anywhere.
TORCH_STYLES = {
    "adapter": (
        "    t = torch.from_numpy(np.asarray(x, dtype=np.float64))\n"
        "    mean = t.mean(-1, keepdim=True)\n"
        "    var = ((t - mean) ** 2).mean(-1, keepdim=True)\n"
        "    y = ((t - mean) / torch.sqrt(var + eps)).numpy()\n"
        "    return (y * gamma + beta).astype(np.asarray(x).dtype)"
    ),
    "tensor_method": (
        "    mean = x.mean(-1, keepdims=True)\n"
        "    var = ((x - mean) ** 2).mean(-1, keepdims=True)\n"
        "    y = (x - mean) / np.sqrt(var + eps) * gamma + beta\n"
        "    return y + torch.zeros(()).double().numpy()"
    ),
    "library": (
        "    t = torch.from_numpy\n"
        "    return torch.nn.functional.layer_norm(\n"
        "        t(x), x.shape[-1:], t(gamma), t(beta), eps).numpy()"
    ),
    "named_only": (
        "    import torch\n"
        "    assert not isinstance(x, torch.Tensor)\n"
        "    mean = x.mean(-1, keepdims=True)\n"
        "    var = ((x - mean) ** 2).mean(-1, keepdims=True)\n"
        "    return (x - mean) / np.sqrt(var + eps) * gamma + beta"
    ),
}


def _torch_reason(message: str) -> str:
    if TORCH_HIDDEN in message:
        return "hidden"
    return "library" if "uses torch.nn.functional.layer_norm" in message else message


@pytest.mark.parametrize("style", sorted(TORCH_STYLES))
def test_check_and_the_grader_agree_on_torch_in_a_numpy_lab(tmp_path, style):
    from corpus import _replace_function

    from normlab.grader import notebook

    source = f"{FORWARD_DEF}\n{TORCH_STYLES[style]}"
    namespace: dict = {}
    exec("import numpy as np\nimport torch\n" + source, namespace)
    _, results = notebook.run(layernorm_forward=namespace["layernorm_forward"])
    in_notebook = sum(r.points for r in results)
    if style == "named_only":
        assert in_notebook == sum(r.max_points for r in results)
    else:
        assert in_notebook == 0
        assert style == "library" or all(TORCH_HIDDEN in r.message for r in results), results
    folder = tmp_path / "class"
    folder.mkdir()
    nbformat.write(
        _replace_function(FORWARD_DEF, source, ["import numpy as np\nimport torch"]),
        folder / "03_layernorm_torch.ipynb",
    )
    told = {r.name: (r.points, _torch_reason(r.message)) for r in results}
    for mode in MODES:
        graded = json.loads(grade_here(folder, mode).stdout)["submissions"][0]
        forward = {c["name"]: (c["points"], _torch_reason(c["message"])) for c in graded["checks"]}
        assert {name: forward[name] for name in told} == told, mode
        assert graded["score"] == FULL - sum(r.max_points for r in results) + in_notebook


@pytest.mark.parametrize("style", sorted(CONTROLS))
def test_correct_styles_get_full_marks_in_the_notebook_too(style):
    """The styles the grader gives full marks (a class, an ``autograd.Function`` with its
    backward by hand, CS231n's functions) get them from ``check()`` as well."""
    from normlab.grader import notebook

    namespace: dict = {}
    exec("import numpy as np\n" + CONTROLS[style], namespace)
    functions = {name: namespace[name] for name in ("layernorm_forward", "layernorm_backward")}
    _, results = notebook.run(**functions)
    assert all(r.passed for r in results), [r.message for r in results if not r.passed]


@pytest.mark.parametrize("mode", MODES)
def test_memory_is_bounded_for_the_submission_as_a_whole(tmp_path, mode):
    """Six forked children of 250 MB, each under the per-process bound: the submission's one
    memory total (a cgroup of memory_mb + tmp_mb) kills one at least. Graded alone with a
    60 s budget, so that a cell's 15 s are ten times what writing 1.5 GB takes on one idle
    core: the limit is reached long before the cell's time, even on a loaded machine."""
    from corpus import MEMORY_ACROSS_PROCESSES, MEMORY_TOTAL, _with_cells

    folder = tmp_path / "class"
    folder.mkdir()
    nbformat.write(
        _with_cells(after=[MEMORY_ACROSS_PROCESSES]), folder / "03_layernorm_memory.ipynb"
    )
    extra = ["--timeout", "60", "--memory", str(TEST_MEMORY_MB), *LIMIT_OPTIONS]
    graded = json.loads(grade_here(folder, mode, *extra).stdout)["submissions"][0]
    assert graded["score"] == FULL, graded["error"]
    said = "of 6 children killed" if MEMORY_TOTAL else "six children held 1.5 GB"
    assert said in (graded["error"] or ""), graded["error"]


# ----------------------------------------------------------------------------- the result cache


@pytest.mark.parametrize("mode", MODES)
def test_cache_is_bound_to_the_bytes_graded(tmp_path, mode):
    """A notebook that cheats and then rewrites its own file is regraded from the new bytes."""
    folder = tmp_path / "class"
    folder.mkdir()
    target = folder / "03_layernorm_rewrites_itself.ipynb"
    import nbformat

    notebook = nbformat.read(SOLUTION, as_version=4)
    notebook.cells.append(
        nbformat.v4.new_code_cell(
            f"try:\n    open({str(target)!r}, 'w').write(open({str(LAB)!r}).read())\n"
            "except OSError:\n    pass"
        )
    )
    nbformat.write(notebook, target)
    shutil.copy(SOLUTION, folder / "03_layernorm_honest.ipynb")
    cache = tmp_path / "cache.json"
    first = grade_here(folder, mode, "--cache", str(cache))
    assert first.returncode == 0, first.stderr[-2000:]
    scores = {Path(s["path"]).name: s["score"] for s in json.loads(first.stdout)["submissions"]}
    assert scores == {target.name: FULL, "03_layernorm_honest.ipynb": FULL}
    second = grade_here(folder, mode, "--cache", str(cache))
    scores = {Path(s["path"]).name: s["score"] for s in json.loads(second.stdout)["submissions"]}
    rewritten = target.read_bytes() != SOLUTION.read_bytes() and b"BEGIN SOLUTION" not in (
        target.read_bytes()
    )
    # Whatever the file holds now is what is graded: the lab (0) if it was rewritten.
    assert scores[target.name] == (0 if rewritten else FULL)
    assert scores["03_layernorm_honest.ipynb"] == FULL
    if mode == "sandbox":
        assert not rewritten  # the sandbox does not even show the submission its own file


# Three multiple-choice answers of 4,000,000 non-ASCII characters each (lab 03): each check's
# message quoted the whole answer (4,000,107 characters), the cache line was 69 MB, and at 63 M
# characters an answer the line passed the cache's size bound, so that every later run threw
# away the whole class's cache.
HUGE_ANSWERS = {"D1_ANSWER": "é", "D2_ANSWER": "ü", "INVARIANCE_ANSWER": "ß"}
HUGE_CHARS = 4_000_000
NO_LETTER = ' does not start with an option letter; write one letter, e.g. "b" or "(b) because ..."'


@pytest.mark.parametrize("mode", MODES)
def test_a_huge_answer_is_quoted_short_and_costs_no_classmate_their_cache(
    tmp_path, mode, monkeypatch
):
    """Each huge answer is quoted by its first 300 characters and its length; the result, the
    cache line, the gradebook and the feedback stay small. Then the cache holds the huge
    result as an older grader wrote it (a 72 MB line, each answer quoted whole) past the
    cache's size bound (scaled down to 32 MiB here: that line, not the class, is what is
    large): that one result is graded again, the classmates' are reused."""
    from normlab.grader import grade

    folder = tmp_path / "class"
    folder.mkdir()
    notebook = nbformat.read(SOLUTION, as_version=4)
    answers = "\n".join(f"{name} = {char!r} * {HUGE_CHARS}" for name, char in HUGE_ANSWERS.items())
    notebook.cells.append(nbformat.v4.new_code_cell(answers))
    nbformat.write(notebook, folder / "03_layernorm_huge.ipynb")
    shutil.copy(SOLUTION, folder / "03_layernorm_alice.ipynb")
    shutil.copy(LAB, folder / "03_layernorm_carol.ipynb")
    cache, gradebook, feedback = tmp_path / "cache.json", tmp_path / "grades.csv", tmp_path / "fb"
    extra = ["--cache", str(cache), "--csv", str(gradebook), "--feedback", str(feedback)]

    def graded() -> tuple[dict, str]:
        done = grade_here(folder, mode, *extra)
        assert done.returncode == 0, done.stderr[-2000:]
        results = {
            Path(s["path"]).stem.split("_")[-1]: s for s in json.loads(done.stdout)["submissions"]
        }
        return results, done.stderr

    results, _ = graded()
    assert {who: r["score"] for who, r in results.items()} == {
        "huge": FULL - 3,
        "alice": FULL,
        "carol": 0,
    }
    quoted = {
        name: f"{name}: {char * 300!r}… ({HUGE_CHARS} characters, the first 300 shown)" + NO_LETTER
        for name, char in HUGE_ANSWERS.items()
    }
    failed = [c["message"] for c in results["huge"]["checks"] if not c["passed"]]
    assert sorted(failed) == sorted(quoted.values())
    lines = cache.read_bytes().splitlines()
    assert len(lines) == 4 and max(len(line) for line in lines) < 16_000, [len(x) for x in lines]
    assert gradebook.stat().st_size < 8_000
    pages = [page.stat().st_size for page in feedback.rglob("*.*")]
    assert len(pages) == 6 and max(pages) < 30_000, pages

    # The huge result as an older grader cached it: every answer quoted whole.
    (line,) = [x for x in lines[1:] if b"_huge.ipynb" in x]
    stored = json.loads(line)
    for check in stored["result"]["checks"]:
        for name, char in HUGE_ANSWERS.items():
            if check["message"] == quoted[name]:
                check["message"] = f"{name}: {char * HUGE_CHARS!r}" + NO_LETTER
    old_line = json.dumps(stored, sort_keys=True).encode()
    assert len(old_line) > 72_000_000
    cache.write_bytes(b"\n".join([x if x != line else old_line for x in lines]) + b"\n")
    monkeypatch.setattr(grade, "MAX_CACHE_BYTES", 32 << 20)
    again, said = graded()
    assert "graded 1 notebook(s), reused 2 unchanged" in said, said[-2000:]
    assert again == results
    assert max(len(x) for x in cache.read_bytes().splitlines()) < 16_000
    _, said = graded()
    assert "graded 0 notebook(s), reused 3 unchanged" in said, said[-2000:]


# ----------------------------------------------------------------------------- a held-out class


HOSTILE_CLASS = {
    # kind -> (cell appended to the solution, expected score)
    "daemon_rewrites_gradebook": (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(3)\n"
        "        for path in [GRADEBOOK, CACHE]:\n"
        "            try:\n"
        "                open(path, 'w').write('student,score\\nmallory,100\\n')\n"
        "            except OSError:\n"
        "                pass\n"
        "        os.execv('/bin/sleep', ['sleep', MARK])\n"
        "    os._exit(0)",
        FULL,
    ),
    "reads_canary": (
        "try:\n    print(open(CANARY).read())\nexcept OSError as error:\n    print(error)",
        FULL,
    ),
    "writes_canary": (
        "try:\n    open(CANARY, 'a').write('changed')\nexcept OSError as error:\n    print(error)",
        FULL,
    ),
    "creates_outside": (
        "try:\n    open(OUTSIDE, 'w').write('x')\nexcept OSError as error:\n    print(error)",
        FULL,
    ),
    "log_link_to_canary": (
        "import os, contextlib\n"
        "with contextlib.suppress(OSError):\n"
        "    os.symlink(CANARY, 'output.log')\n"
        "    os.mkfifo('log')\n"
        "os._exit(1)",
        0,
    ),
    "kills_its_parents": (
        "import os, signal\n"
        "for pid in (os.getppid(),):\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass",
        FULL,
    ),
}


def _hostile_class(root: Path, paths: dict[str, Path], mode: str) -> dict[str, tuple[int, bool]]:
    """A mixed class (controls in public course styles, hostile notebooks, bypasses) ->
    expected (score, must it be flagged) per student."""
    import nbformat
    from corpus import CONTROLS, hostile_cases, styled

    prelude = (
        f"GRADEBOOK, CACHE = {str(paths['gradebook'])!r}, {str(paths['cache'])!r}\n"
        f"CANARY, OUTSIDE = {str(paths['canary'])!r}, {str(paths['outside'])!r}\n"
        f"MARK = {SURVIVOR_MARKS[mode]!r}"
    )
    expected = {}

    def add(student: str, notebook, score, flagged=False):
        (root / student).mkdir()
        nbformat.write(notebook, root / student / "03_layernorm.ipynb")
        expected[student] = (score, flagged)

    add("control_solution", nbformat.read(SOLUTION, as_version=4), FULL)
    add("control_lab", nbformat.read(LAB, as_version=4), 0)
    for style, source in CONTROLS.items():
        add(f"control_{style}", styled(source), FULL)
    for kind, (cell, score) in HOSTILE_CLASS.items():
        notebook = nbformat.read(SOLUTION, as_version=4)
        notebook.cells += [nbformat.v4.new_code_cell(prelude), nbformat.v4.new_code_cell(cell)]
        add(kind, notebook, score)
    bypasses = hostile_cases(
        str(paths["outside"]), str(paths["canary"]), str(paths["canary"]), str(SOLUTION)
    )
    for kind in (
        "exec_of_encoded_source",
        "norm_as_default_argument",
        "group_norm_by_computed_name",
        "autograd_bound_at_module_level",
        "forward_mode_autodiff",
    ):
        notebook, score, _text, *finding = bypasses[kind]
        add(f"bypass_{kind}", notebook, _for_mode(score, mode), True)
    return expected


@pytest.mark.parametrize("mode", MODES)
def test_held_out_hostile_class(tmp_path, mode):
    root = tmp_path / "class"
    root.mkdir()
    private = tmp_path / "private"
    private.mkdir()
    paths = {
        "gradebook": tmp_path / "out" / "grades.csv",
        "cache": tmp_path / "out" / "grades.csv.cache.json",
        "canary": private / "canary.txt",
        "outside": private / "created.txt",
    }
    paths["canary"].write_text(SECRET)
    os.utime(paths["canary"], (1_000_000_000, 1_000_000_000))
    expected = _hostile_class(root, paths, mode)
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    command = grade_command(root, mode, "--jobs", "2", "--timeout", "40")
    command += ["--csv", str(paths["gradebook"])]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=1800,
        env=dict(os.environ, TMPDIR=str(scratch)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = {s["student"]: s for s in json.loads(done.stdout)["submissions"]}
    gradebook = paths["gradebook"].read_text()
    time.sleep(5)  # longer than any daemon of the class waits before it strikes

    # The run completed, the CSV is whole and holds the real scores.
    assert set(results) == set(expected)
    assert paths["gradebook"].read_text() == gradebook
    rows = {r["student"]: r for r in csv.DictReader(gradebook.splitlines())}
    assert {s: int(r["score"]) for s, r in rows.items()} == {
        s: r["score"] for s, r in results.items()
    }
    # Every control and hostile notebook has its exact score; no score is forged.
    for student, (score, flagged) in expected.items():
        result = results[student]
        assert result["score"] == score, (student, result["error"], result["findings"])
        if student.startswith("control_"):
            assert result["findings"] == [], (student, result["findings"])
        if flagged:  # every from-scratch bypass is zero on what it bypassed, or flagged
            assert result["findings"] or result["score"] < FULL, student
    # No process survives.
    assert survivors(mode) == []
    assert list(scratch.iterdir()) == []
    # Nothing outside the grader's temporary folders changed, was created or leaked.
    for student, result in results.items():
        assert SECRET.strip() not in json.dumps(result), student
    if mode == "sandbox":
        assert paths["canary"].stat().st_atime == 1_000_000_000  # not even read
    if mode == "sandbox" or all("the rest read-only" in r["isolation"] for r in results.values()):
        # Under the sandbox, or outside it with a private folder and the rest read-only.
        assert paths["canary"].read_text() == SECRET
        assert not paths["outside"].exists()
        after = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
        changed = {p for p in after if before.get(p) != after[p]}
        assert changed <= {paths["gradebook"], paths["cache"]}, changed


# ----------------------------------------------------------------------------- the parts, alone


def test_remove_tree_survives_what_a_child_leaves(tmp_path):
    from normlab.grader.isolation.files import remove_tree

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text(ORIGINAL)
    work = tmp_path / "work"
    work.mkdir()
    deep = os.open(work, os.O_RDONLY)
    for _ in range(5000):  # 5,000 nested folders: no recursion, no descriptor per level
        os.mkdir("d", dir_fd=deep)
        next_fd = os.open("d", os.O_RDONLY, dir_fd=deep)
        os.close(deep)
        deep = next_fd
    os.mkfifo("fifo", dir_fd=deep)
    os.close(deep)
    os.symlink(outside, work / "link_to_folder")
    os.symlink(outside / "keep.txt", work / "link_to_file")
    os.makedirs(work / "a" / "b")
    os.chmod(work / "a" / "b", 0)
    os.chmod(work / "a", 0)
    remove_tree(str(work))
    assert not work.exists()
    assert (outside / "keep.txt").read_text() == ORIGINAL


def test_notebooks_are_read_without_following_or_blocking(tmp_path):
    from normlab.grader.isolation.files import read_regular_file

    os.mkfifo(tmp_path / "fifo.ipynb")
    with pytest.raises(ValueError, match="not a regular file"):
        read_regular_file(tmp_path / "fifo.ipynb", 1 << 20)  # would block forever if opened
    (tmp_path / "secret").write_text(SECRET)
    os.symlink(tmp_path / "secret", tmp_path / "link.ipynb")
    with pytest.raises(ValueError, match="symbolic link"):
        read_regular_file(tmp_path / "link.ipynb", 1 << 20)
    with open(tmp_path / "big.ipynb", "wb") as stream:
        stream.truncate(1 << 30)
    with pytest.raises(ValueError, match="larger than"):
        read_regular_file(tmp_path / "big.ipynb", 16 << 20)


def test_every_reply_field_is_checked_by_type():
    import numpy as np

    from normlab.grader import core
    from normlab.grader.isolation import wire

    good = {
        "ok": True,
        "names": ["f"],
        "cell_errors": [{"cell": 0, "error_type": "E", "message": ""}],
    }
    assert wire.parse_load_reply(good, [], 1)[0] == {"f"}
    forged = [
        dict(good, ok="yes"),
        dict(good, names="f"),
        dict(good, names=[1]),
        dict(good, cell_errors=[{"cell": "x", "error_type": "E", "message": ""}]),
        dict(good, cell_errors=[{"cell": 5, "error_type": "E", "message": ""}]),
        dict(good, cell_errors=[{"cell": 0, "error_type": 7, "message": ""}]),
        dict(good, cell_errors="none"),
    ]
    for header in forged:
        with pytest.raises(wire.ProtocolError):
            wire.parse_load_reply(header, [], 1)
    with pytest.raises(wire.ProtocolError):  # a load reply carries no arrays
        wire.parse_load_reply(good, [np.zeros(3)], 1)
    assert wire.parse_hung(dict(good, hung={"f": 0}), {"f"}, 1) == {"f": 0}
    for hung in ([["f", 0]], {"g": 0}, {"f": 1}, {"f": True}, {"f": "0"}):
        with pytest.raises(wire.ProtocolError):
            wire.parse_hung(dict(good, hung=hung), {"f"}, 1)
    call = {"ok": True, "tuple": False, "items": [{"kind": "ndarray", "array": 0}]}
    assert wire.parse_call_reply("f", call, [np.ones(2)]).items[0].array.shape == (2,)
    for header in (
        dict(call, items=[{"kind": "ndarray", "array": 1}]),
        dict(call, items=[{"kind": "ndarray", "array": True}]),
        dict(call, tuple=1),
        dict(call, items={"kind": "x"}),
        {"ok": False, "error_type": ["x"], "message": "m"},
    ):
        with pytest.raises(wire.ProtocolError):
            wire.parse_call_reply("f", header, [np.ones(2)])
    with pytest.raises(core.NotImplementedYet):
        wire.parse_call_reply(
            "f", {"ok": False, "error_type": "NotImplementedError", "message": ""}, []
        )


def test_every_text_the_child_sends_is_quoted_short():
    """An exception's type, message and traceback, a returned object's type, a cell's error
    and a name in a finding: 300 characters of each at most (``Limits.shown_output_chars``),
    its length stated, whatever the child sent (its header may hold a megabyte)."""
    from normlab.grader import attribution, core, probes, trap
    from normlab.grader.isolation import wire
    from normlab.grader.registry import get_lab

    def cut(char: str, length: int) -> str:
        return char * 300 + f"… ({length} characters, the first 300 shown)"

    raised = {"ok": False, "error_type": "E" * 5000, "message": "m" * 400_000}
    raised["traceback"] = "t" * 9000 + "\nZeroDivisionError: x"
    with pytest.raises(core.RaisedError) as error:
        wire.parse_call_reply("f", raised, [])
    tail = ("t" * 9000 + "\nZeroDivisionError: x")[-300:]
    assert str(error.value) == f"`f` raised {cut('E', 5000)}: {cut('m', 400_000)}"
    assert error.value.detail == f"(9021 characters, the last 300 shown) …{tail}"
    odd = {"ok": True, "tuple": False, "items": [{"kind": "K" * 5000}]}
    output = wire.parse_call_reply("f", odd, [])
    with pytest.raises(core.CheckFailed) as failed:
        probes.array_of(output, "f")
    assert str(failed.value) == f"f: returned a {cut('K', 5000)}, expected a NumPy array"
    names, errors = wire.parse_load_reply(
        {
            "ok": True,
            "names": ["n" * 5000],
            "cell_errors": [{"cell": 0, "error_type": "E", "message": "a  b" * 1000}],
        },
        [],
        1,
    )
    assert names == {cut("n", 5000)}
    said = attribution.learner_cells_message(errors, ["x = 1"], get_lab("03_layernorm"), [])
    assert said.splitlines()[1] == (
        f"- The cell that starts `x = 1` raised E: {' '.join(('a  b' * 1000)[:300].split())}… "
        "(4000 characters, "
        "the first 300 shown)."
    )
    module = "torch._" + "a" * 5000
    (finding,) = trap.notebook_findings([f"import {module}"], [])
    assert (
        finding
        == f"PyTorch internals: {module[:300]}… (5007 characters, the first 300 shown) (code cell 1, line 1)"
    )


def test_an_array_header_cannot_make_the_grader_allocate():
    import io

    import numpy as np

    from normlab.grader.isolation import wire

    small = io.BytesIO()
    np.save(small, np.zeros(4))
    data = small.getvalue().replace(b"(4,)", b"(4000000000000,)".ljust(4))
    with pytest.raises(wire.ProtocolError):
        wire.decode_array(data)  # the shape promises 32 TB: refused before any allocation


def test_from_scratch_is_judged_by_resolved_names_not_attribute_names():
    from corpus import CONTROLS

    from normlab.grader.forbidden import AUTOGRAD, LIBRARY_NORMS
    from normlab.grader.trap import notebook_findings, scan_source

    forbidden = LIBRARY_NORMS + AUTOGRAD
    for style, source in CONTROLS.items():
        cells = ["import numpy as np", source]
        assert scan_source(cells, "layernorm_backward", forbidden) == [], style
        assert scan_source(cells, "layernorm_forward", forbidden) == [], style
        assert notebook_findings(cells, forbidden) == [], style
    bypasses = {
        "ln = F.layer_norm\ndef f(x):\n    return ln(x, (4,))": "ln",
        "def f(x, g=torch.autograd.grad):\n    return g(x, x)": "torch.autograd.grad",
        "def f(x):\n    return getattr(F, 'group_norm')(x, 1)": "getattr(F, 'group_norm')",
        "def f(x):\n    return torch._C._VariableFunctions.layer_norm(x, (4,))": "layer_norm",
        "def f(x):\n    x.requires_grad_(True)\n    return x": "requires_grad_",
    }
    for source, hit in bypasses.items():
        cells = ["import torch\nimport torch.nn.functional as F", source]
        assert any(hit in found for found in scan_source(cells, "f", forbidden)), source
        assert notebook_findings(cells, forbidden) or "requires_grad" in source, source


def test_a_late_child_of_a_replaced_fork_server_finds_nobody_listening():
    """A fork server too slow to answer is replaced, but it may still fork a child with the
    pipes it was handed: the submission's fresh interpreter gets pipes of its own."""
    from normlab.grader import core
    from normlab.grader.grade import parse_notebook
    from normlab.grader.isolation import wire
    from normlab.grader.isolation.limits import DEFAULT
    from normlab.grader.isolation.sandbox import ChildSubmission, choose_isolation
    from normlab.grader.registry import get_lab

    class LateServer:
        def spawn(self, workdir, env, fds, limits, memory_group=None):
            wire.send(fds[1], {"ready": True})  # the child it forked after all, too late
            raise OSError("the fork server did not answer in time")

    isolation = choose_isolation(False, allow_root=True)
    cells, _ = parse_notebook(SOLUTION.read_bytes())
    with ChildSubmission(cells, DEFAULT, isolation, LateServer()) as submission:
        results = core.run_checks(get_lab("03_layernorm"), submission)
    assert all(r.passed for r in results), [r.message for r in results if not r.passed]


@pytest.mark.isolation
@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) is not installed")
def test_a_course_checked_out_under_tmp_stays_visible_in_the_sandbox(monkeypatch):
    """A clone under /tmp is bound back inside the sandbox's /tmp. As root the child remounts
    its working folder with a bound on its number of files: that folder must hide nothing the
    notebook needs (it was /tmp itself, and every NumPy-lab child died importing the grader)."""
    import tempfile

    from normlab.grader.isolation import sandbox
    from normlab.grader.isolation.limits import DEFAULT

    course = Path(tempfile.mkdtemp(dir="/tmp", prefix="normlab-course-"))
    try:
        (course / "course_module.py").write_text("VALUE = 42\n")
        course.chmod(0o755)
        shown = sandbox.child_paths()
        monkeypatch.setattr(sandbox, "child_paths", lambda: (*shown, str(course)))
        cells = [
            f"import sys\nsys.path.insert(0, {str(course)!r})\n"
            "import course_module\nvalue = float(course_module.VALUE)"
        ]
        isolation = sandbox.choose_isolation(True, False)
        with sandbox.ChildSubmission(cells, DEFAULT, isolation, torch=False) as sub:
            assert sub.has("value"), (sub.cell_errors, sub.output_tail(2000))
            assert float(sub.get("value").items[0].array) == 42.0
    finally:
        shutil.rmtree(course)


def test_a_forked_childs_exit_is_known_after_the_first_wait():
    """The fork server reports each exit once. A submission that crashes is waited for twice
    (to say why, then while closing); the second wait must return the status already known,
    as ``Popen.wait`` does, not wait out its timeout for a report that never comes (it cost
    each crashing submission 10 s, a crash and two restarts 15 s)."""
    from normlab.grader.isolation.forkserver import ForkedProcess

    class OneReport:
        def __init__(self):
            self.reports = {123: -11}

        def wait_for(self, pid, timeout):
            return self.reports.pop(pid, None)  # None: nothing more to report

        def alive(self):
            return True

    process = ForkedProcess(OneReport(), 123)
    assert process.wait(timeout=1) == -11
    assert process.wait(timeout=1) == -11
    assert process.returncode == -11


def test_a_stopped_fork_server_is_seen_as_stopped():
    """A submission may SIGSTOP the fork server (the corpus's ``stops_fork_server``). The next
    spawn replaces it at once instead of waiting ``fork_server_wait`` for an answer, and a
    wait for a child's exit report gives up instead of waiting out its timeout."""
    import signal

    from normlab.grader.isolation.forkserver import ForkServer
    from normlab.grader.isolation.processes import Reaper

    def stopped_after(sig) -> bool:
        os.kill(server.process.pid, sig)
        for _ in range(3000):  # the state changes as the signal is delivered (far below 30 s)
            if server._stopped() == (sig == signal.SIGSTOP):
                break
            time.sleep(0.01)
        return server._stopped()

    server = ForkServer({}, Reaper(), wait=10, torch=True)
    server.process = subprocess.Popen(["sleep", "60"])
    try:
        assert not server._stopped()
        assert stopped_after(signal.SIGSTOP)
        # No report will come: the wait returns at once (the limit below is far from that).
        import threading

        waited = []
        waiter = threading.Thread(
            target=lambda: waited.append(server.wait_for(12345, 600)), daemon=True
        )
        waiter.start()
        waiter.join(60)
        assert waited == [None]
        assert not stopped_after(signal.SIGCONT)
    finally:
        server.process.kill()
        server.process.wait()


def test_a_forked_childs_backward_imports_nothing_and_the_server_no_triton():
    """What PyTorch imports when a child first calls ``backward(gradient)`` (its symbolic shapes
    and SymPy: 0.3 s of CPU) the fork server has imported once (``SERVER_PRELOAD``). It imports
    no Triton (``torch._dynamo`` would): the lab's environment chooses Triton's interpreter, in
    the child; and the NumPy labs' server imports no PyTorch at all, and Matplotlib only for a
    run whose labs ask for it (``Lab.preload``)."""
    code = (
        "import json, sys\n"
        "from normlab.grader.isolation import forkserver\n"
        "forkserver._preload(torch=False)\n"
        "assert 'torch' not in sys.modules, 'the NumPy server imported torch'\n"
        "assert 'matplotlib' not in sys.modules, 'imported without a lab that asks for it'\n"
        "forkserver._preload(torch=False, extra=('matplotlib.pyplot',))\n"
        "assert 'matplotlib.pyplot' in sys.modules, 'not imported when a lab asks for it'\n"
        "forkserver._preload(torch=True)\n"
        "assert 'triton' not in sys.modules, 'the server imported Triton'\n"
        "import torch\n"
        "before = set(sys.modules)\n"
        "y = torch.nn.Linear(3, 3)(torch.ones(2, 3))\n"
        "y.backward(torch.ones_like(y))\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    imported = json.loads(done.stdout)
    assert [name for name in imported if name.startswith(("torch.fx", "sympy"))] == [], imported


def test_a_class_s_fork_servers_import_what_its_labs_name_and_no_more():
    """A fork server imports, beyond NumPy (and PyTorch), what the run's labs name
    (``Lab.preload``): Matplotlib for lab 08, whose notebook plots, and for no other run (0.45 s
    of CPU each server start). A kind of lab with one notebook in the run has no server (its
    start-up would cost as much as the fresh interpreter it saves, and more); a notebook whose
    lab is not known before it is read counts for both kinds."""
    from normlab.grader.identity import Identity

    def preload(*stems):
        entries = [
            grade.Entry(Path(f"{s}.ipynb"), Identity("ana", "Ana", "file", s)) for s in stems
        ]
        return grade.server_preload(entries)

    assert preload("03_layernorm", "06_pre_post_ln") == {}
    assert preload("03_layernorm", "06_pre_post_ln", "03_layernorm") == {False: ()}
    assert preload("08_training", "06_pre_post_ln", "09_modern_norms") == {True: ()}
    assert preload("08_training", "03_layernorm", "08_training") == {False: ("matplotlib.pyplot",)}
    assert preload("08_training", None, "06_pre_post_ln") == {
        True: (),
        False: ("matplotlib.pyplot",),
    }
    # what a server then imports: test_a_forked_childs_backward_imports_nothing_and_the_server_no_triton
    # (and through a real server, test_children_of_the_sandboxs_fork_server_share_nothing_but_its_imports)


def test_the_reaper_leaves_the_graders_own_children_alone():
    """While one submission ends (and the reaper sweeps up orphans), another worker thread may
    be running a probe of its own, a plain child of the grader. Killing it once cost a correct
    notebook its first check under load ("internal error ... JSONDecodeError")."""
    from normlab.grader.isolation.processes import Reaper

    reaper = Reaper()
    helper = subprocess.Popen(["sleep", "60"])  # the grader's own, never tracked
    try:
        reaper.sweep()
        assert helper.poll() is None
    finally:
        helper.kill()
        helper.wait()


def test_the_grader_parses_one_source_at_a_time():
    """Worker threads parse notebooks at once; on CPython 3.11 two interleaved AST conversions
    raised "SystemError: AST constructor recursion depth mismatch" in a class graded under load
    (correct notebooks lost 2 or 3 points to an internal error). Every parse in the process,
    the grader's and the standard library's (``ast.literal_eval``, ``traceback``'s carets),
    goes through ``trap.parse``, which holds one lock."""
    import ast
    import re
    import threading

    from normlab.grader import trap

    package = Path(trap.__file__).parent
    direct = [
        path.relative_to(package).as_posix()
        for path in sorted(package.rglob("*.py"))
        for line in path.read_text().splitlines()
        if re.search(r"\bast\.parse\(", line)
    ]
    assert direct == [], direct
    assert ast.parse is trap.parse
    entered = threading.Event()
    release = threading.Event()

    class SlowSource(str):  # the parse reads it while another thread waits for the lock
        def __new__(cls):
            return super().__new__(cls, "x = 1")

    original = trap._ast_parse

    def parse_slowly(source, *args, **kwargs):
        if isinstance(source, SlowSource):
            entered.set()
            release.wait(30)
        return original(source, *args, **kwargs)

    trap._ast_parse = parse_slowly
    try:
        first = threading.Thread(target=trap.parse, args=(SlowSource(),), daemon=True)
        first.start()
        entered.wait(30)
        done = {"grader": threading.Event(), "literal_eval": threading.Event()}
        others = [
            threading.Thread(target=lambda: (trap.parse("y = 2"), done["grader"].set())),
            threading.Thread(
                target=lambda: (ast.literal_eval("'a PO string'"), done["literal_eval"].set())
            ),
        ]
        for other in others:
            other.daemon = True
            other.start()
        time.sleep(0.5)
        assert not any(event.is_set() for event in done.values())  # held back by the first
        release.set()
        assert all(event.wait(30) for event in done.values())
    finally:
        release.set()
        trap._ast_parse = original


@pytest.mark.isolation
@pytest.mark.parametrize("mode", MODES)
def test_a_submission_computes_on_one_thread(mode):
    """Submissions are graded ``--jobs`` at a time, one per core, so each computes on one
    thread. Numba's OpenMP layer starts a thread per core unless told otherwise, and sets
    OpenMP's count for PyTorch too: two threads per submission on a full machine spin at every
    barrier. Lab 07's solution graded 12 times, two at a time, took 37 s instead of 30 s."""
    import tempfile

    from normlab.grader.isolation.forkserver import ForkServer
    from normlab.grader.isolation.limits import DEFAULT
    from normlab.grader.isolation.processes import Reaper
    from normlab.grader.isolation.sandbox import (
        ChildSubmission,
        choose_isolation,
        fork_server_environment,
    )

    cells = [
        "import numba\nimport numpy as np\nimport torch\nfrom numba import njit, prange\n\n"
        "@njit(parallel=True)\ndef add_one(x):\n    for i in prange(x.shape[0]):\n"
        "        x[i] += 1.0\n    return x\n\n"
        "add_one(np.zeros(64))\n"
        "threads = np.array([numba.get_num_threads(), torch.get_num_threads()], dtype=float)"
    ]
    isolation = choose_isolation(mode == "sandbox", allow_root=True)
    with tempfile.TemporaryDirectory(prefix="normlab-fork-") as home:
        server = None
        if mode == "processes":  # as a class is graded: children of the fork server
            server = ForkServer(
                fork_server_environment(home), Reaper(), DEFAULT.fork_server_wait, torch=True
            )
        try:
            with ChildSubmission(cells, DEFAULT, isolation, server, torch=True) as submission:
                assert submission.has("threads"), submission.cell_errors
                assert submission.get("threads").items[0].array.tolist() == [1.0, 1.0]
        finally:
            if server is not None:
                server.close()


@pytest.mark.isolation
@pytest.mark.parametrize("mode", MODES)
def test_a_cell_that_ignores_its_alarm_and_spins_is_killed_at_the_deadline(mode):
    """A cell's time limit is an alarm in the child, which the child can ignore. The grader's
    own deadline for the whole submission still ends it, spinning as it is: a short budget
    here (the class corpus has the same cell asleep, on the class's budget)."""
    import dataclasses
    import tempfile

    from normlab.grader import core
    from normlab.grader.isolation.forkserver import ForkServer
    from normlab.grader.isolation.limits import DEFAULT
    from normlab.grader.isolation.processes import Reaper
    from normlab.grader.isolation.sandbox import (
        ChildSubmission,
        choose_isolation,
        fork_server_environment,
    )

    cells = [
        "answer = 42",
        "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass",
    ]
    limits = dataclasses.replace(DEFAULT, timeout=3.0)
    isolation = choose_isolation(mode == "sandbox", allow_root=True)
    with tempfile.TemporaryDirectory(prefix="normlab-fork-") as home:
        server = None
        if mode == "processes":
            server = ForkServer(
                fork_server_environment(home), Reaper(), DEFAULT.fork_server_wait, torch=True
            )
        try:
            with ChildSubmission(cells, limits, isolation, server, torch=True) as submission:
                with pytest.raises(core.ProcessTimedOut, match="timed out while running"):
                    submission.has("answer")
                assert submission.process is None  # killed, not left to spin
                with pytest.raises(core.ProcessFailed, match="time budget is used up"):
                    submission.has("answer")  # and not restarted on a budget that is spent
        finally:
            if server is not None:
                server.close()


@pytest.mark.parametrize("mode", MODES)
def test_classmates_graded_beside_a_killer_keep_their_marks(tmp_path, mode):
    """Eight classmates graded at the same time as a notebook that, ignoring its alarm, spends
    10 s SIGKILLing every process of its user outside its own session that it can see: it sees
    none (its own PID namespace), and every classmate keeps full marks. The grader is a process
    of its own here: without the namespace, the killer would reach it."""
    killer = KILL_CLASSMATES.replace("time.monotonic() + 3", "time.monotonic() + 10")
    notebook = nbformat.read(SOLUTION, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(killer))
    nbformat.write(notebook, tmp_path / "03_layernorm_a_killer.ipynb")
    for index in range(8):
        shutil.copy(SOLUTION, tmp_path / f"03_layernorm_classmate_{index}.ipynb")
    command = grade_command(tmp_path, mode, "--jobs", "9", *grading_budget())
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    results = {Path(s["path"]).name: s for s in json.loads(done.stdout)["submissions"]}
    assert len(results) == 9
    killer_result = results.pop("03_layernorm_a_killer.ipynb")
    assert "killed 0 processes" in (killer_result["error"] or ""), killer_result["error"]
    assert {name: r["score"] for name, r in results.items()} == {name: FULL for name in results}


# One mark per mode, as below: each mode's run finds its own spinners.
SPINNER_MARKS = {"processes": "4242.0616161", "sandbox": "4242.0616162"}


def _cpu_cgroup(pid: int) -> str | None:
    """The cpu controller's cgroup of a process (cgroup v1's ``cpu`` line, or v2's)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    paths = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        paths[controllers] = path
    found = [path for names, path in paths.items() if "cpu" in names.split(",")]
    return found[0] if found else paths.get("")


@pytest.mark.skipif(cgroup.cpu_available() is None, reason="no cpu cgroup can be made here")
@pytest.mark.parametrize("mode", MODES)
def test_classmates_graded_beside_setsid_spinners_keep_their_marks(tmp_path, mode):
    """Three classmates graded at the same time as a notebook that forks 240 processes that
    spin forever, each after ``setsid()``, and ignores its alarm. Each session used to be a
    scheduling group of its own (the kernel's autogroup): 240 shares of the machine against a
    classmate's one, and a classmate beside it scored 9/24 and lost points to "did not finish
    in time" (its loss then cached). Now the submission's processes, in whatever sessions,
    share one CPU share (a cgroup of their own): every spinner seen is in one cgroup, of the
    grader's making, which no classmate's process is in; every classmate keeps full marks, and
    is cached (nothing of it was the machine's). The spinning notebook is stopped, as its own
    doing, when all its processes together have used its 10 s budget of CPU time (one core's
    worth at most: ``Limits.cpus``), and then earns nothing. In those 10 s, 112 spinners started
    in the processes mode and 158 in the sandbox (the forking parent shares the one core's worth
    with every spinner it started), each a session more than a classmate has; a budget of 20 s
    burnt twice the CPU time for the same verdicts."""
    mark = SPINNER_MARKS[mode]
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(SETSID_SPINNERS.format(count=240, mark=mark))]
    nbformat.write(notebook, tmp_path / "03_layernorm_a_spinner.ipynb")
    for index in range(3):
        shutil.copy(SOLUTION, tmp_path / f"03_layernorm_classmate_{index}.ipynb")
    cache = tmp_path / "grades.cache.json"
    extra = ["--jobs", "4", "--timeout", "10", "--cache", str(cache), MAKE_TEST_BACKSTOP]
    grader = subprocess.Popen(
        grade_command(tmp_path, mode, *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    spinners: dict[int, tuple[str | None, int]] = {}
    while grader.poll() is None:
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in spinners:
                try:
                    if mark.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                        spinners[int(name)] = (_cpu_cgroup(int(name)), os.getsid(int(name)))
                except OSError:
                    continue
        time.sleep(0.2)
    stdout, stderr = grader.communicate(timeout=600)
    assert grader.returncode == 0, stderr.decode()[-2000:]
    results = {Path(r["path"]).name: r for r in json.loads(stdout)["submissions"]}
    spinner = results.pop("03_layernorm_a_spinner.ipynb")
    assert spinner["score"] == 0
    assert "timed out while running the notebook's cells" in spinner["error"], spinner["error"]
    assert {name: (r["score"], r["error"]) for name, r in results.items()} == {
        name: (FULL, None) for name in results
    }
    assert "one CPU share per submission" in spinner["isolation"]
    assert len(spinners) > 60, len(spinners)  # each spins until the grader ends it: all seen
    groups = {group for group, _ in spinners.values()}
    assert len(groups) == 1 and "/normlab-" in next(iter(groups)), groups
    assert len({session for _, session in spinners.values()}) > 60  # each in its own session
    again = grade_here(tmp_path, mode, *extra)  # in this process: no second import of PyTorch
    assert "reused 4 unchanged" in again.stderr, again.stderr[-2000:]


# A cell that needs 1 s of its process's CPU time, and one that sleeps forever.
NEEDS_ONE_CPU_SECOND = (
    "import time\nstart = time.process_time()\nwhile time.process_time() - start < 1.0:\n    pass"
)
SLEEPS_FOREVER = "import time\ntime.sleep(100_000)"
# The solution's forward pass, whose first call first needs 1 s of its process's CPU time.
SLOW_FIRST_CALL = (
    "import time\n_solution_forward, _first = layernorm_forward, [True]\n"
    "def layernorm_forward(*args, **kwargs):\n"
    "    if _first.pop() if _first else False:\n"
    "        start = time.process_time()\n"
    "        while time.process_time() - start < 1.0:\n"
    "            pass\n"
    "    return _solution_forward(*args, **kwargs)"
)
# Each cell's and call's budget 2.5 s of the submission's own time, its wall-time backstop four
# times that: 10 s, in which a twentieth of a core (``cpus=0.05``) runs 0.5 s of CPU at most.
# (Every figure here is half what it was, the margins the same: cells and calls of 2 s of CPU,
# budgets of 5 s and a backstop of 20 s proved the same in twice the time.)
SHORT_BACKSTOP = [
    "--limit=cell_timeout_share=0.001",
    "--limit=min_cell_timeout=2.5",
    "--limit=wall_backstop=4",
    "--limit=call_timeout=2.5",
]
# ... and on a whole core, a backstop that no load reaches before the budget
GENEROUS_BACKSTOP = [*SHORT_BACKSTOP, "--limit=wall_backstop=100"]


@pytest.mark.skipif(cgroup.cpu_available() is None, reason="no cpu cgroup can be made here")
@pytest.mark.parametrize("mode", MODES)
def test_a_cell_kept_waiting_for_a_cpu_is_the_machines_and_a_sleep_is_the_students(tmp_path, mode):
    """Three notebooks, the solution plus one cell each, graded with each cell's and call's
    budget 2.5 s of the submission's own time and a wall-time backstop of four times that, on a
    machine so busy that the submission gets a twentieth of a core at most (its CPU quota,
    ``cpus=0.05``: its processes wait for a CPU 95% of the time). A cell that needs 1 s of CPU
    (20 s of wall time there, at least) reaches its 10 s backstop with 0.5 s of its own time
    used at most: stopped as the machine being too busy, never put on the student's code, and
    not cached, so the next run grades it again. A cell that sleeps forever uses no CPU, yet its
    own wall time runs on (a sleep is not a wait for a CPU): at 2.5 s it is the student's ("ran
    out of time"), whatever the machine's load, and cached. A forward pass whose first call
    needs 1 s of CPU is stopped at that call's backstop as the machine's too: that one check
    fails with the machine named, the others pass, and it is not cached. Given a whole core
    (and a backstop no load reaches first), neither the cell nor the call is any problem: full
    marks, no error."""
    folder = tmp_path / "class"
    folder.mkdir()
    cells = {"slowed": NEEDS_ONE_CPU_SECOND, "sleeper": SLEEPS_FOREVER, "call": SLOW_FIRST_CALL}
    for name, cell in cells.items():
        notebook = nbformat.read(SOLUTION, as_version=4)
        notebook.cells.append(nbformat.v4.new_code_cell(cell))
        nbformat.write(notebook, folder / f"03_layernorm_{name}.ipynb")
    cache = ["--cache", str(tmp_path / "cache.json"), "--jobs", "2"]
    busy = [*SHORT_BACKSTOP, "--limit=cpus=0.05", *cache]
    first = grade_here(folder, mode, *busy)
    results = {Path(r["path"]).name: r for r in json.loads(first.stdout)["submissions"]}
    slowed, sleeper = results["03_layernorm_slowed.ipynb"], results["03_layernorm_sleeper.ipynb"]
    assert (slowed["score"], slowed["error"]) == (FULL, grade.BUSY_ERROR)
    assert sleeper["score"] == FULL
    assert sleeper["error"].endswith("raised Timeout: ran out of time."), sleeper["error"]
    call = results["03_layernorm_call.ipynb"]
    failed = [c for c in call["checks"] if not c["passed"]]
    assert (call["error"], [c["message"] for c in failed]) == (
        grade.BUSY_ERROR,
        [str(core.error_from_reply("layernorm_forward", {"error_type": "Busy"}))],
    )
    assert call["score"] == FULL - failed[0]["max_points"]
    again = grade_here(folder, mode, *busy)
    assert "graded 2 notebook(s), reused 1 unchanged" in again.stderr, again.stderr[-2000:]
    again_results = {Path(r["path"]).name: r for r in json.loads(again.stdout)["submissions"]}
    assert again_results["03_layernorm_slowed.ipynb"]["error"] == grade.BUSY_ERROR
    assert again_results["03_layernorm_sleeper.ipynb"]["error"] == sleeper["error"]
    (folder / "03_layernorm_sleeper.ipynb").unlink()
    whole_core = grade_here(folder, mode, *GENEROUS_BACKSTOP, "--cache", str(tmp_path / "c2.json"))
    for alone in json.loads(whole_core.stdout)["submissions"]:
        assert (alone["score"], alone["error"]) == (FULL, None), alone


# One mark per run of the test below: under `make test` the two modes' runs are on two workers
# at the same time (and under `pytest -n` any two may be), and each must find and kill its own
# notebook's process, not another's.
KILL_ME_MARKS = {
    ("processes", "once"): "4242.0515151",
    ("sandbox", "once"): "4242.0515152",
    ("processes", "always"): "4242.0515153",
    ("sandbox", "always"): "4242.0515154",
}


@pytest.mark.parametrize("kills", ["once", "always"])
@pytest.mark.parametrize("mode", MODES)
def test_a_result_killed_from_outside_is_never_cached(tmp_path, mode, kills):
    """A notebook whose process is SIGKILLed by someone else (here, this test) is not the
    student's doing. The notebook waits for a child that carries a mark; the test kills the
    notebook's process, found as that child's parent. Killed once, the submission is graded
    again, afresh, in the same run: full marks, cached (a second run reuses it). Killed every
    time (each process of both gradings): its result says so, is not cached, and the next run,
    where nobody kills it, grades it again: the wait ends at the cell's alarm and the notebook
    earns full marks, which a third run reuses."""
    mark = KILL_ME_MARKS[mode, kills]
    wait = (
        "import os\n"
        f"child = os.fork()\nif child == 0:\n    os.execv('/bin/sleep', ['sleep', '{mark}'])\n"
        "os.waitpid(child, 0)"
    )
    notebook = nbformat.read(SOLUTION, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(wait))
    folder = tmp_path / "class"
    folder.mkdir()
    nbformat.write(notebook, folder / "03_layernorm.ipynb")
    # A run that is not killed waits for the marked child, to the cell's alarm: 10 s, twice the
    # grader's least cell time, so that on a loaded core the solution's own cells never come
    # near it; the checks then have the hang guard's budget, so that none uses it up and is
    # reported last instead of the kill.
    extra = [*grading_budget(cell_s=10), "--cache", str(tmp_path / "cache.json")]
    grader = subprocess.Popen(
        grade_command(folder, mode, *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    killed: set[int] = set()  # the notebook processes killed, by pid
    while grader.poll() is None and not (kills == "once" and killed):
        for name in os.listdir("/proc"):
            try:
                if mark.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                    stat = Path(f"/proc/{name}/stat").read_text()
                    parent = int(stat.rsplit(")", 1)[1].split()[1])
                    if parent not in killed:
                        os.kill(parent, 9)
                        killed.add(parent)
                        break
            except (OSError, ValueError):
                continue
        time.sleep(0.05)
    stdout, stderr = grader.communicate(timeout=600)
    assert killed and grader.returncode == 0, stderr.decode()[-2000:]
    (first,) = json.loads(stdout)["submissions"]
    if kills == "once":
        # graded again: its wait ended at the cell's alarm (the notebook's own doing)
        assert first["score"] == FULL, first
        assert "sent by neither" not in first["error"] and "Timeout" in first["error"], first
    else:
        # every process of both gradings: the first process and its restarts, twice
        assert len(killed) >= 2, killed
        assert "sent by neither the grader nor a limit" in first["error"], first["error"]
        assert first["score"] < FULL
        # the next run in this process (a new one would import PyTorch again for nothing)
        second = grade_here(folder, mode, *extra)
        assert "reused 0 unchanged" in second.stderr, second.stderr[-2000:]
        assert json.loads(second.stdout)["submissions"][0]["score"] == FULL
    again = grade_here(folder, mode, *extra)
    assert "reused 1 unchanged" in again.stderr, again.stderr[-2000:]


@pytest.mark.parametrize("limit", ["max_cell_tokens=20", "max_code_tokens=30"])
def test_the_parse_bounds_of_limit_are_the_ones_used(tmp_path, limit):
    """``--limit max_cell_tokens=`` / ``max_code_tokens=`` bound what the grader parses: the
    solution, whose function cells have more tokens than that, is then not analysed (a
    finding), and its checks with a from-scratch rule earn nothing. With the default bounds the
    same notebook earns full marks
    (test_every_solution_full_and_every_fresh_lab_zero_slowed_thirtyfold)."""
    from corpus import _points_without_a_from_scratch_rule

    shutil.copy(SOLUTION, tmp_path / "03_layernorm.ipynb")
    done = grade_here(tmp_path, "processes", f"--limit={limit}", "--timeout", "60")
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = json.loads(done.stdout)["submissions"]
    assert result["score"] == _points_without_a_from_scratch_rule() < FULL, result["checks"]
    assert any("a cell too large or deep" in f for f in result["findings"]), result["findings"]


@pytest.mark.parametrize("mode", MODES)
def test_a_function_that_hung_in_a_cell_stays_stopped_after_a_restart(mode):
    """A function that ran out of time in a cell is not run again by the cells after it, nor
    by a restarted child's run of the same cells: there its first caller stops at once
    (``NotRunAgain``) instead of running out of time a second time."""
    import dataclasses

    from normlab.grader import core
    from normlab.grader.isolation.limits import DEFAULT
    from normlab.grader.isolation.sandbox import ChildSubmission, choose_isolation

    cells = [
        "import os\ndef spin(x):\n    while True:\n        pass\ndef leave(x):\n    os._exit(3)\n",
        "first = spin(1)",
        "second = spin(2)",
        "answer = 42",
    ]
    # The spinning cell stops at its alarm: 3 s (5 % of the 60 s budget), not the default 15 s.
    # The test waits that out once per mode; the other cells take milliseconds.
    limits = dataclasses.replace(
        DEFAULT, timeout=60.0, cell_timeout_share=0.05, min_cell_timeout=2.0
    )
    isolation = choose_isolation(mode == "sandbox", allow_root=True)
    with ChildSubmission(cells, limits, isolation, torch=True) as submission:
        assert submission.has("answer")
        assert submission.hung == {"spin": 1}
        kinds = [(e.cell, e.error_type) for e in submission.cell_errors]
        assert kinds == [(1, "Timeout"), (2, "NotRunAgain")]
        stopped = "when the cell that starts `first = spin(1)` called it; not run again"
        with pytest.raises(core.RaisedError, match=re.escape(stopped)):
            submission.call("spin", 1)
        with pytest.raises(core.ProcessFailed, match="exited with code 3"):
            submission.call("leave", 1)
        assert submission.has("answer")  # a new child ran the cells again
        assert submission.restarts == 1
        kinds = [(e.cell, e.error_type) for e in submission.cell_errors]
        assert kinds == [(1, "NotRunAgain"), (2, "NotRunAgain")]


@pytest.mark.isolation
def test_a_lab_gives_the_functions_it_names_a_longer_call_budget():
    """``Lab.call_timeouts``: a call that takes 6.5 s (a Numba kernel compiling on a busy
    machine) finishes where the lab allows 15 s; the same call of a function the lab does not
    name stops at the default 5 s, and is not called again."""
    import dataclasses

    from normlab.grader import core
    from normlab.grader.isolation.limits import DEFAULT
    from normlab.grader.isolation.sandbox import ChildSubmission, choose_isolation

    cells = [
        "import time\nimport numpy as np\n"
        "def compiling(x):\n    time.sleep(6.5)\n    return x + 1\n"
        "def plain(x):\n    time.sleep(6.5)\n    return x + 1\n"
    ]
    limits = dataclasses.replace(DEFAULT, timeout=40.0)
    isolation = choose_isolation(False, allow_root=True)
    budgets = {"compiling": 15.0}
    with ChildSubmission(cells, limits, isolation, call_timeouts=budgets, torch=True) as submission:
        output = submission.call("compiling", np.zeros(2))
        assert output.items[0].array.tolist() == [1.0, 1.0]
        with pytest.raises(core.RaisedError, match="did not finish in time .an endless loop"):
            submission.call("plain", np.zeros(2))
        with pytest.raises(core.RaisedError, match="did not finish in time on an earlier input"):
            submission.call("plain", np.zeros(2))


def test_grading_lab_07_gives_its_kernels_their_call_budget(monkeypatch):
    """``normlab grade`` hands the lab's ``call_timeouts`` to the notebook's process."""
    from normlab.grader import grade
    from normlab.grader.isolation.sandbox import choose_isolation
    from normlab.grader.registry import get_lab

    given = {}

    class Recorder:
        def __init__(self, *args, **kwargs):
            given.update(kwargs)
            raise RuntimeError("recorded")

    monkeypatch.setattr(grade, "ChildSubmission", Recorder)
    raw = (ROOT / "labs" / "07_cost.ipynb").read_bytes()
    with pytest.raises(RuntimeError, match="recorded"):
        grade.grade_bytes(
            raw, Path("07_cost.ipynb"), grade.Settings(), choose_isolation(False, True)
        )
    assert given["call_timeouts"] == get_lab("07_cost").call_timeouts
    assert set(given["call_timeouts"]) == {"rmsnorm_fused", "layernorm_fused"}


CLASSMATE_SOCKET = "\0normlab-a-classmates-socket"
#: the first classmate: it writes a file in its folder and listens on an abstract Unix socket
LISTENS = (
    "import os, socket, sys\n"
    "import numpy as np\n"
    "forked = 'matplotlib.pyplot' in sys.modules\n"
    "empty = os.listdir('.') == []\n"
    "open('classmates-answers.txt', 'w').write('42')\n"
    "listener = socket.socket(socket.AF_UNIX)\n"
    f"listener.bind({CLASSMATE_SOCKET!r})\n"
    "listener.listen()\n"
    "seen = np.array([forked, empty, True], dtype=float)"
)
#: the second, graded while the first is alive: what of the first can it reach?
LOOKS = (
    "import os, socket, sys\n"
    "import numpy as np\n"
    "forked = 'matplotlib.pyplot' in sys.modules\n"
    "empty = os.listdir('.') == []\n"
    "pids = sorted(int(name) for name in os.listdir('/proc') if name.isdigit())\n"
    "alone = pids == [1, os.getpid()]\n"
    "talker = socket.socket(socket.AF_UNIX)\n"
    "try:\n"
    f"    talker.connect({CLASSMATE_SOCKET!r})\n"
    "    reached = True\n"
    "except OSError:\n"
    "    reached = False\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
    "except OSError as error:\n"
    "    unreachable = error.errno == 101\n"
    "seen = np.array([forked, empty, alone, not reached, unreachable], dtype=float)"
)


@pytest.mark.isolation
@pytest.mark.skipif(not SANDBOX or os.geteuid() != 0, reason="the sandbox's fork server: as root")
@pytest.mark.parametrize("torch", [False, True], ids=["numpy-lab", "torch-lab"])
def test_children_of_the_sandboxs_fork_server_share_nothing_but_its_imports(torch):
    """A class graded under the sandbox as root starts its submissions from a fork server that
    runs in a sandbox of its own (``sandbox.fork_servers``): each child must then have what a
    sandbox of its own gave it. Two classmates of one server, the first alive while the second
    runs: the second sees an empty folder of its own (not the first's file), a ``/proc`` with
    only its own processes, no socket of the first's (an abstract Unix socket, which a shared
    network namespace would let it reach) and no network at all; both were forked from the
    server (it was told to import Matplotlib, which neither notebook does), and each is in its own
    cgroup (the server, in its sandbox, has no ``/sys``: the grader opens the cgroup's file)."""
    import tempfile

    from normlab.grader.isolation.processes import Reaper
    from normlab.grader.isolation.sandbox import ChildSubmission, choose_isolation, fork_servers

    isolation = choose_isolation(True, allow_root=True)
    with tempfile.TemporaryDirectory(prefix="normlab-fork-") as home:
        # Matplotlib, which neither notebook imports: what shows that each child was forked
        plotting = {True: ("matplotlib.pyplot",), False: ("matplotlib.pyplot",)}
        servers = fork_servers(isolation, DEFAULT, home, Reaper(), plotting)
        try:
            with ChildSubmission([LISTENS], DEFAULT, isolation, servers, torch=torch) as first:
                assert first.has("seen"), (first.cell_errors, first.output_tail(2000))
                assert first.get("seen").items[0].array.tolist() == [1.0, 1.0, 1.0]
                with ChildSubmission([LOOKS], DEFAULT, isolation, servers, torch=torch) as second:
                    assert second.has("seen"), (second.cell_errors, second.output_tail(2000))
                    seen = second.get("seen").items[0].array.tolist()
                    assert seen == [1.0, 1.0, 1.0, 1.0, 1.0], seen
                    if second.memory_group is not None:  # joined by the file the grader opened
                        assert second.process.pid in second.memory_group.members()
        finally:
            servers.close()
