"""The Gradescope bundle end to end: built by `normlab export gradescope`, its run_autograder run
in a local copy of the /autograder layout, its results.json read as Gradescope reads it."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, run_cli_process

from normlab.grader.registry import all_labs
from normlab.instructor import gradescope

SOLUTION = ROOT / "solutions" / "03_layernorm.ipynb"
LAB = ROOT / "labs" / "03_layernorm.ipynb"
FULL, FORWARD = 16, 7  # lab 03: the solution's points, and those of the forward checks
EXTRA_POINTS = 2
MARKER = "SECRET_CHECK_SOURCE_4711"
EXTRA = f"""
import numpy as np
from normlab.grader.core import CheckFailed
from normlab.grader.registry import get_lab

@get_lab("03_layernorm").check("hidden: wide rows", points={EXTRA_POINTS}, uses=["layernorm_forward"])
def wide_rows(sub):
    {MARKER} = np.arange(4096)
    x = np.ones((2, 4096)) * {MARKER}
    y = sub.call("layernorm_forward", x, np.ones(4096), np.zeros(4096)).items[0].array
    if not np.allclose(y.mean(-1), 0, atol=1e-9):
        raise CheckFailed("rows of 4096 features should have mean 0")
"""


def export(out: Path, *options, check=True) -> subprocess.CompletedProcess:
    done = run_cli_process(["export", "gradescope", out, "--lab", "03_layernorm", *options])
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A bundle with the instructor's hidden checks (default visibility: after the due date)."""
    folder = tmp_path_factory.mktemp("gradescope")
    (folder / "hidden_checks.py").write_text(EXTRA)
    export(folder / "bundle", "--extra-checks", folder / "hidden_checks.py")
    return folder / "bundle"


def autograde(bundle: Path, root: Path, files: dict, path: str | None = None):
    """run_autograder on a copy of ``bundle`` in ``root`` (shaped like /autograder) with the
    student's ``files`` (name -> source notebook, or text): (results.json, its stdout)."""
    shutil.copytree(bundle, root / "source")
    (root / "submission").mkdir(parents=True)
    for name, source in files.items():
        target = root / "submission" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, Path):
            shutil.copy(source, target)
        else:
            target.write_text(source)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "NORMLAB_PYTHON": sys.executable}
    if path is not None:
        env["PATH"] = path
    done = subprocess.run(
        ["bash", str(root / "source" / "run_autograder")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    return json.loads((root / "results" / "results.json").read_text()), done.stdout


def visible_text(results: dict) -> str:
    """Everything a student can ever read of a results.json (tests not ``hidden``)."""
    shown = [results["output"]] + [
        f"{t['name']}\n{t['output']}" for t in results["tests"] if t["visibility"] != "hidden"
    ]
    return "\n".join(shown)


def notebook_with(cells_before=(), cells_after=(), forward: str | None = None) -> str:
    notebook = nbformat.read(SOLUTION, as_version=4)
    if forward is not None:
        for cell in notebook.cells:
            if cell.source.startswith("def layernorm_forward("):
                cell.source = forward
    notebook.cells = (
        [nbformat.v4.new_code_cell(s) for s in cells_before]
        + notebook.cells
        + [nbformat.v4.new_code_cell(s) for s in cells_after]
    )
    return nbformat.writes(notebook)


# ----------------------------------------------------------------------------- the bundle


def test_the_hidden_checks_are_root_only_in_the_bundle(bundle):
    hidden = bundle / "hidden"
    assert stat.S_IMODE(hidden.stat().st_mode) == 0o700
    assert MARKER in (hidden / "extra_checks.py").read_text()
    for file in hidden.iterdir():
        assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert not (bundle / "extra_checks.py").exists()
    config = json.loads((hidden / "bundle.json").read_text())
    assert config == {
        "lab": "03_layernorm",
        "extra_checks": ["hidden: wide rows"],
        "extra_visibility": "after_due_date",
    }
    # setup.sh makes them root's after Gradescope unzips the bundle (a zip keeps no owner)
    assert (
        "chown -R 0:0 hidden && chmod 0700 hidden && chmod 0600 hidden/*"
        in (bundle / "setup.sh").read_text()
    )


def test_export_refuses_a_checks_file_that_does_not_load(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text(EXTRA.replace("import numpy as np", "import numpy as np\nundefined_name"))
    done = export(tmp_path / "out", "--extra-checks", broken, check=False)
    assert done.returncode == 2
    assert "does not load" in done.stderr and "NameError" in done.stderr
    assert not (tmp_path / "out").exists()
    other_lab = tmp_path / "other.py"
    other_lab.write_text(EXTRA.replace('get_lab("03_layernorm")', 'get_lab("04_rmsnorm")'))
    done = export(tmp_path / "out", "--extra-checks", other_lab, check=False)
    assert done.returncode == 2 and "adds checks to 04_rmsnorm" in done.stderr


def test_setup_refuses_a_python_older_than_3_10_and_names_the_images(tmp_path):
    """setup.sh run with a stand-in apt-get and an image's python3 3.8 (Ubuntu 20.04's)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "apt-get").write_text("#!/bin/sh\nexit 0\n")
    # Ubuntu 20.04's python3: 3.8, so the version test in setup.sh exits 1
    (folder / "python3").write_text(
        '#!/bin/sh\nif [ "$1" = --version ]; then echo "Python 3.8.10"; fi\nexit 1\n'
    )
    for tool in ("apt-get", "python3"):
        (folder / tool).chmod(0o755)
    out = tmp_path / "bundle"
    export(out)
    done = subprocess.run(
        ["bash", str(out / "setup.sh")],
        env={**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "Python 3.10 or newer" in done.stderr and "Python 3.8.10" in done.stderr
    assert "Ubuntu 22.04 or 24.04" in done.stderr


def _imported(source: str) -> set[str]:
    """Every module ``source`` imports (``a.b`` and, for ``from a import b``, ``a.b`` too);
    IPython's ``%`` and ``!`` lines left out."""
    import ast

    kept = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    found = set()
    for node in ast.walk(ast.parse("\n".join(kept))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _module_level_imports(path: Path) -> set[str]:
    """What a module of the course imports when it is imported (not inside a function: an
    optional dependency such as torchvision is imported where it is used, and says so)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = [node for node in tree.body if not isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    return _imported("\n".join(ast.unparse(node) for node in top))


def _third_party(notebook: Path) -> set[str]:
    """The top-level modules outside the standard library that ``notebook`` imports, itself or
    through the modules of normlab it imports."""
    cells = nbformat.read(notebook, as_version=4).cells
    todo = list(_imported("\n".join(c.source for c in cells if c.cell_type == "code")))
    seen, found = set(), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        top = name.split(".")[0]
        if top == "normlab":
            path = ROOT / "src" / Path(*name.split("."))
            for candidate in (path / "__init__.py", path.with_suffix(".py")):
                if candidate.is_file():
                    todo += _module_level_imports(candidate)
        elif top not in sys.stdlib_module_names:
            found.add(top)
    return found


def _course_environment() -> list[str]:
    """pyproject.toml's dependencies, read from the file itself."""
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """A bundle for each lab (no hidden checks)."""
    folder = tmp_path_factory.mktemp("bundles")
    for stem in all_labs():
        gradescope.write_bundle(folder / stem, stem)
    return {stem: folder / stem for stem in all_labs()}


def test_each_bundle_installs_the_course_environment_and_what_its_lab_imports(bundles):
    """requirements.txt holds every dependency of pyproject.toml as it states it (PyTorch,
    which setup.sh installs from its CPU index, aside), and every module that the lab's starter
    (English and Spanish) or its solution imports, itself or through normlab, comes with it:
    from the standard library, PyTorch, normlab, or a distribution the requirements install."""
    import importlib.metadata

    environment = [r for r in _course_environment() if not r.startswith("torch")]
    modules_of = importlib.metadata.packages_distributions()
    setup = (next(iter(bundles.values())) / "setup.sh").read_text()
    assert f"'{gradescope.pinned('torch')}'" in setup and "download.pytorch.org/whl/cpu" in setup
    for stem, bundle in bundles.items():
        wanted = (bundle / "requirements.txt").read_text().split("\n")[:-1]
        assert wanted[: len(environment)] == environment, stem
        installed = _distributions([*wanted, "torch"])
        notebooks = [ROOT / folder / f"{stem}.ipynb" for folder in ("labs", "es/labs", "solutions")]
        for notebook in notebooks:
            for module in _third_party(notebook):
                if module == "torchvision":  # imported only where Fashion-MNIST is asked for
                    continue
                names = {d.lower().replace("_", "-") for d in modules_of.get(module, [module])}
                assert names & installed, (notebook, module)
    assert "triton>=3.9" in (bundles["11_triton_kernels"] / "requirements.txt").read_text()
    assert "triton" not in (bundles["03_layernorm"] / "requirements.txt").read_text()


def _an_import_of_each(requirements: list[str]) -> list[str]:
    """One ``import`` line per distribution of ``requirements`` (its own top-level module)."""
    import importlib.metadata

    provides: dict[str, list[str]] = {}
    for module, names in importlib.metadata.packages_distributions().items():
        for name in names:
            provides.setdefault(name.lower().replace("_", "-"), []).append(module)
    lines = []
    for requirement in requirements:
        name = re.split(r"[ ;<>=!~\[(]", requirement)[0].lower().replace("_", "-")
        modules = sorted(m for m in provides[name] if not m.startswith("_") and "launcher" not in m)
        same = [m for m in modules if m.lower() == name.replace("-", "_")]
        lines.append(f"import {(same or sorted(modules, key=len))[0]}")
    return lines


# ----------------------------------------------------------------------------- results.json


@pytest.mark.isolation
def test_every_upload_is_graded_and_the_best_counts(bundle, tmp_path):
    """A blank 03_layernorm.ipynb beside 03_layernorm_final.ipynb: the final one counts (by
    name the blank one came first, and scored 0/16)."""
    results, stdout = autograde(
        bundle,
        tmp_path / "autograder",
        {"03_layernorm.ipynb": LAB, "03_layernorm_final.ipynb": SOLUTION},
    )
    assert results["score"] == FULL + EXTRA_POINTS
    assert results["output"].startswith(
        f"03_layernorm: {FULL} / {FULL} points in the checks shown now; the instructor's "
        "further checks are shown after the due date. You uploaded 2 notebooks; each was "
        "graded and the best counts: 03_layernorm_final.ipynb."
    )
    assert results["extra_data"]["scores"] == {
        "03_layernorm.ipynb": [0, FULL + EXTRA_POINTS],
        "03_layernorm_final.ipynb": [FULL + EXTRA_POINTS, FULL + EXTRA_POINTS],
    }
    graded = [t for t in results["tests"] if t["max_score"] > 0]
    assert sum(t["max_score"] for t in graded) == FULL + EXTRA_POINTS
    assert [t["visibility"] for t in graded if t["name"] == "hidden: wide rows"] == [
        "after_due_date"
    ]
    assert {t["visibility"] for t in graded if t["name"] != "hidden: wide rows"} == {"visible"}
    assert all(t["status"] == "passed" for t in graded)
    # the grader's own messages reach the instructor: in stdout and in a hidden test
    assert "normlab grade: isolation:" in stdout
    (log,) = [t for t in results["tests"] if t["name"] == "For the instructor: the grader's log"]
    assert log["visibility"] == "hidden" and "graded 2 notebook(s)" in log["output"]
    assert MARKER not in json.dumps(results)


def test_the_visibility_of_the_hidden_checks_is_the_instructors_choice():
    graded = {
        "submissions": [
            {
                "path": "/w/1/03_layernorm.ipynb",
                "score": 3,
                "max_score": 4,
                "error": None,
                "findings": [],
                "isolation": "sandbox",
                "lang": "en",
                "checks": [
                    {"name": "a", "points": 2, "max_points": 2, "passed": True, "message": ""},
                    {"name": "h", "points": 1, "max_points": 2, "passed": False, "message": "no"},
                ],
            }
        ]
    }
    for visibility in gradescope.VISIBILITIES:
        config = {"extra_checks": ["h"], "extra_visibility": visibility}
        out = gradescope.results(graded, "03_layernorm", ["a.ipynb"], config)
        assert [t["visibility"] for t in out["tests"]] == ["visible", visibility]
        assert out["score"] == 3
        shown = "2 / 2" if visibility != "visible" else "3 / 4"
        assert out["output"].startswith(f"03_layernorm: {shown} points")
    # a student's file name is shown as text: no control or bidi character reaches the page
    out = gradescope.results(graded, "03_layernorm", ["a\u202eb\x1b]52;c;x\x07.ipynb"], {})
    assert out["output"].endswith("Graded: a?b?]52;c;x?.ipynb.")


@pytest.mark.isolation
def test_hidden_checks_and_findings_stay_out_of_the_students_view(bundle, tmp_path):
    """A student who read this code: reads the hidden checks by their fixed path (and through
    a link uploaded beside the notebook), looks for the grader's command line and the earlier
    results, and passes the forward pass by a library norm as a default argument, hidden in
    exec(base64). None of it is shown to the student; the finding reaches the instructor."""
    root = tmp_path / "autograder"
    hidden = root / "source" / "hidden" / "extra_checks.py"
    steal = (
        "import glob, os\n"
        "found = []\n"
        f"for path in [{str(hidden)!r}, {str(root / 'submission_metadata.json')!r}]"
        " + glob.glob('/proc/[0-9]*/cmdline'):\n"
        "    try:\n"
        "        found.append(open(path, 'rb').read().decode('utf-8', 'replace'))\n"
        "    except OSError as error:\n"
        "        pass\n"
        "raise RuntimeError('STOLEN:' + ' '.join(found))"
    )
    forward = (
        "def layernorm_forward(x, gamma, beta, eps=1e-5, norm=torch.nn.functional.layer_norm):\n"
        "    return norm(torch.from_numpy(x), x.shape[-1:], torch.from_numpy(gamma),"
        " torch.from_numpy(beta), eps).numpy()\n"
    )
    blob = base64.b64encode(forward.encode()).decode()
    encoded = f"import base64, torch\nexec(base64.b64decode({blob!r}).decode())"
    (root / "submission_metadata.json").parent.mkdir(parents=True)
    (root / "submission_metadata.json").write_text(json.dumps({"previous": MARKER}))
    results, stdout = autograde(
        bundle,
        root,
        {
            "03_layernorm.ipynb": notebook_with(cells_after=[steal, encoded]),
        },
    )
    assert "STOLEN:" in results["output"]  # the stealing cell ran, and found nothing secret
    assert MARKER not in json.dumps(results) and MARKER not in stdout
    # a library norm in the graded function earns nothing; the finding is the instructor's
    assert results["score"] == FULL - FORWARD
    (findings,) = [t for t in results["tests"] if t["name"].startswith("For the instructor: find")]
    assert findings["visibility"] == "hidden" and findings["max_score"] == 0
    assert "exec" in findings["output"]
    found = results["extra_data"]["findings"]["03_layernorm.ipynb"]
    assert found and all(f not in visible_text(results) for f in found)


@pytest.mark.isolation
def test_a_link_in_the_upload_is_never_followed(bundle, tmp_path):
    """A link to the hidden checks uploaded as a notebook beside the real one is not an upload:
    root's copy would have handed the checks' text to the grader as a notebook."""
    root = tmp_path / "autograder"
    shutil.copytree(bundle, root / "source")
    (root / "submission").mkdir()
    shutil.copy(SOLUTION, root / "submission" / "03_layernorm.ipynb")
    (root / "submission" / "00.ipynb").symlink_to(root / "source" / "hidden" / "extra_checks.py")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "NORMLAB_PYTHON": sys.executable}
    subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, check=True)
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["extra_data"]["uploads"] == ["03_layernorm.ipynb"]
    assert results["score"] == FULL + EXTRA_POINTS
    assert MARKER not in json.dumps(results)


@pytest.mark.skipif(os.geteuid() != 0, reason="the notebook runs as nobody when graded as root")
def test_after_a_run_nobody_can_read_the_hidden_checks_or_earlier_results(bundle, tmp_path):
    """Outside the sandbox the notebook's process runs as nobody: what keeps the hidden checks
    from it is that only root can read them (whatever modes the unzipped files had)."""
    top = Path(tempfile.mkdtemp(prefix="normlab-autograder-"))
    try:
        top.chmod(0o755)  # nobody may walk down to the files (pytest's own folder is root's)
        root = top / "autograder"
        shutil.copytree(bundle, root / "source")
        hidden = root / "source" / "hidden"
        hidden.chmod(0o777)  # as an unzip might leave them
        for path in hidden.iterdir():
            path.chmod(0o644)
        (root / "submission").mkdir()
        (root / "submission_metadata.json").write_text(json.dumps({"previous": MARKER}))
        (root / "submission_metadata.json").chmod(0o644)
        secrets = [hidden / "extra_checks.py", root / "submission_metadata.json"]
        assert [read_as_nobody(path) for path in secrets] == [None, None]  # readable, before
        env = {**os.environ, "AUTOGRADER_ROOT": str(root), "NORMLAB_PYTHON": sys.executable}
        subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, check=True)
        assert [read_as_nobody(path) for path in secrets] == ["PermissionError"] * 2
    finally:
        shutil.rmtree(top)


def read_as_nobody(path: Path) -> str | None:
    """ "PermissionError" when the user nobody cannot read ``path``, else None (read with
    ``cat``: the course's interpreter may live where nobody cannot run it)."""
    done = subprocess.run(
        ["cat", str(path)],
        user=65534,
        group=65534,
        extra_groups=[],
        capture_output=True,
        text=True,
        cwd="/",
    )
    if done.returncode == 0:
        return None
    return "PermissionError" if "Permission denied" in done.stderr else done.stderr.strip()


@pytest.mark.isolation
def test_a_grader_that_cannot_run_tells_the_student_and_shows_the_instructor_why(bundle, tmp_path):
    """An extra-checks file broken after export (edited in the bundle): the student reads that
    the grader could not run, the instructor the error, in the autograder's output and in a
    hidden test (before, run_autograder deleted it)."""
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    (copy / "hidden" / "extra_checks.py").write_text("raise ValueError('the broken line')\n")
    results, stdout = autograde(copy, tmp_path / "autograder", {"lab.ipynb": SOLUTION})
    assert results["score"] == 0
    assert results["output"] == "The grader could not run; please tell your instructor."
    assert "ValueError: the broken line" in stdout
    (log,) = results["tests"]
    assert log["visibility"] == "hidden" and "ValueError: the broken line" in log["output"]


def _distributions(names) -> set[str]:
    """``names`` and everything they require (no extras), as installed here."""
    import importlib.metadata

    seen, todo = set(), list(names)
    while todo:
        name = re.split(r"[ ;<>=!~\[(]", todo.pop())[0].lower().replace("_", "-")
        if name in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        seen.add(name)
        todo += [r for r in dist.requires or [] if "extra ==" not in r]
    return seen


@pytest.mark.isolation
def test_the_bundle_grades_with_only_what_setup_installs(bundle, tmp_path):
    """A virtual environment holding only PyTorch, the bundle's requirements.txt (and what they
    require) and the bundle's own copy of normlab, as setup.sh installs them: a solution that
    imports the whole course environment gets every point, as ``normlab grade`` gives it."""
    import importlib.metadata

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(
        subprocess.run([python, "-c", purelib], capture_output=True, text=True).stdout.strip()
    )
    wanted = ["torch", *(bundle / "requirements.txt").read_text().split()]
    for name in _distributions(wanted):
        dist = importlib.metadata.distribution(name)
        for file in dist.files or []:
            real = Path(dist.locate_file(file)).resolve()
            if file.parts[0] != ".." and real.is_file():
                (site / file).parent.mkdir(parents=True, exist_ok=True)
                os.link(real, site / file)  # a hard link: PyTorch's 700 MB are not copied
    shutil.copytree(bundle / "normlab" / "src" / "normlab", site / "normlab")
    assert subprocess.run([python, "-c", "import sphinx"], capture_output=True).returncode
    root = tmp_path / "autograder"
    shutil.copytree(bundle, root / "source")
    (root / "submission").mkdir()
    # the solution, whose first cell imports Matplotlib's pyplot and one module of every
    # distribution the bundle installs (a bundle of NumPy alone gave it 3/16)
    first = ["import matplotlib.pyplot as plt", "import torch", *_an_import_of_each(wanted[1:])]
    assert len(first) == len(wanted) + 1 and "import sklearn" in first and "import yaml" in first
    notebook = notebook_with(cells_before=["\n".join(first)])
    (root / "submission" / "03_layernorm.ipynb").write_text(notebook)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "NORMLAB_PYTHON": str(python)}
    done = subprocess.run(
        ["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True
    )
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == FULL + EXTRA_POINTS, (results["output"], done.stdout)
    assert "Error" not in results["output"], results["output"]
