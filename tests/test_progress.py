"""``normlab progress`` (``make grade``): one line per lab the learner started, in its language."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import ROOT, grade_json, grading_budget, run_cli

from normlab import progress
from normlab.grader.grade import Settings, UsageError, grade_paths, parse_limit_overrides


def _course(tmp_path):
    """A course root with the generated labs and a learner's copies of them in work/."""
    course = tmp_path / "course"
    (course / "es").mkdir(parents=True)
    shutil.copytree(ROOT / "labs", course / "labs")
    shutil.copytree(ROOT / "es" / "labs", course / "es" / "labs")
    shutil.copytree(course / "labs", course / "work")
    shutil.copytree(course / "es" / "labs", course / "work" / "es")
    return course


def _add_markdown(path, text):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    notebook["cells"].append({"cell_type": "markdown", "metadata": {}, "source": text})
    path.write_text(json.dumps(notebook), encoding="utf-8")


def test_a_copy_is_started_when_its_code_changes_not_its_notes(tmp_path):
    course = _course(tmp_path)
    _add_markdown(course / "work" / "02_batchnorm.ipynb", "my notes")
    shutil.copy(ROOT / "solutions" / "03_layernorm.ipynb", course / "work" / "03_layernorm.ipynb")
    (course / "work" / "es" / "04_rmsnorm.ipynb").write_text("{ not json", encoding="utf-8")
    found = progress.copies(course, "work")
    started, untouched = found["en"]
    assert [p.name for p in started] == ["03_layernorm.ipynb"]
    assert "02_batchnorm.ipynb" in [p.name for p in untouched]
    started, untouched = found["es"]
    assert [p.name for p in started] == ["04_rmsnorm.ipynb"]  # broken: graded, to say so
    assert len(untouched) == len(list((course / "es" / "labs").glob("*.ipynb"))) - 1


def test_progress_is_a_screenful_in_the_language_of_the_copies_started(tmp_path):
    course = _course(tmp_path)
    shutil.copy(
        ROOT / "solutions" / "03_layernorm.ipynb", course / "work" / "es" / "03_layernorm.ipynb"
    )
    lab = course / "work" / "es" / "04_rmsnorm.ipynb"
    notebook = json.loads(lab.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and "raise NotImplementedError" in source:
            cell["source"] = source.replace("raise NotImplementedError", "return x  # intento", 1)
            break
    lab.write_text(json.dumps(notebook), encoding="utf-8")
    status, out, err = run_cli(["progress", "--root", str(course), "--no-sandbox", "--allow-root"])
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == "Tus laboratorios en work/es/:", out
    assert lines[1].split()[:3] == ["03_layernorm", "16/16", "todas"], out
    assert lines[2].split()[:3] == ["04_rmsnorm", "0/18", "siguiente:"], out
    assert "(faltan " in lines[2] and "forward" not in lines[2], out  # the check's Spanish name
    assert lines[3].startswith("Sin empezar todavía (work/es/): 01_why_normalize, 02_batchnorm"), (
        out
    )
    assert (
        lines[4] == "Todos los mensajes de un laboratorio: normlab grade work/es/03_layernorm.ipynb"
    )
    assert len(lines) == 5 and "work/0" not in out, out  # nothing of the English copies


def test_the_library_grades_as_normlab_grade_prints(tmp_path):
    """``grade_paths``, through which ``normlab progress`` grades: the results ``normlab grade
    --json`` prints, as objects (the JSON adds the language the feedback is shown in)."""
    shutil.copy(ROOT / "solutions" / "03_layernorm.ipynb", tmp_path / "03_layernorm.ipynb")
    shutil.copy(ROOT / "labs" / "04_rmsnorm.ipynb", tmp_path / "04_rmsnorm.ipynb")
    options = grading_budget()
    settings = Settings(
        timeout=float(options[1]),
        sandbox=False,
        allow_root=True,
        overrides=parse_limit_overrides([option.split("=", 1)[1] for option in options[2:]]),
    )
    results = grade_paths([tmp_path], settings)
    code, printed, err = grade_json(tmp_path, extra=("--no-sandbox", "--allow-root"))
    assert code == 0, err
    assert [(r.lab, r.score > 0, r.score == r.max_score) for r in results] == [
        ("03_layernorm", True, True),
        ("04_rmsnorm", False, False),
    ]
    shown = [{k: v for k, v in s.items() if k != "lang"} for s in printed["submissions"]]
    assert [{k: v for k, v in r.as_dict().items() if k != "lang"} for r in results] == shown
    with pytest.raises(UsageError, match="no such file"):
        grade_paths([tmp_path / "05_group_instance.ipynb"], settings)
