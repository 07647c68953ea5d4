"""`normlab labs`: solutions -> labs, and the staleness check."""

from __future__ import annotations

import nbformat
import pytest
from conftest import ROOT

from normlab.build import BuildError, build_all, make_lab, strip_code, strip_markdown


def test_region_inside_function_becomes_a_stub_keeping_signature_and_docstring():
    source = 'def f(x):\n    """Doc."""\n    # why\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION'
    out = strip_code(source, "t")
    assert out.startswith('def f(x):\n    """Doc."""\n    # why\n')
    assert "return x + 1" not in out and "    raise NotImplementedError(" in out
    namespace = {}
    exec(out, namespace)
    with pytest.raises(NotImplementedError):
        namespace["f"](1)


def test_top_level_answers_become_none():
    out = strip_code(
        '### BEGIN SOLUTION\nANSWER = "b"\nOTHER = 3\n### END SOLUTION\ncheck(ANSWER=ANSWER)', "t"
    )
    assert out.splitlines() == [
        "ANSWER = None  # YOUR ANSWER HERE",
        "OTHER = None  # YOUR ANSWER HERE",
        "check(ANSWER=ANSWER)",
    ]


@pytest.mark.parametrize(
    "source",
    [
        "### BEGIN SOLUTION\nx = 1",
        "x = 1\n### END SOLUTION",
        "def f():\n    ### BEGIN SOLUTION\n    ### BEGIN SOLUTION\n    ### END SOLUTION",
        "### BEGIN SOLUTION\nprint('code at top level')\n### END SOLUTION",
    ],
)
def test_malformed_regions_are_refused(source):
    with pytest.raises(BuildError):
        strip_code(source, "t")


def test_markdown_answer_is_hidden():
    out = strip_markdown("Answer:\n### BEGIN SOLUTION\nbecause x - mu = 0\n### END SOLUTION", "t")
    assert out == "Answer:\n*YOUR ANSWER HERE*"


def test_tags_outputs_and_metadata():
    solution = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("secret = 1", metadata={"tags": ["solution-only"]}),
            nbformat.v4.new_code_cell(
                "f(1)", metadata={"tags": ["runs-learner-code"]}, outputs=[], execution_count=3
            ),
        ]
    )
    lab = make_lab(solution, "99_demo")
    assert [c.source for c in lab.cells] == ["f(1)"]
    assert lab.cells[0].metadata["tags"] == ["raises-exception"]
    assert lab.cells[0].execution_count is None
    assert lab.metadata["normlab"]["lab"] == "99_demo"


def test_committed_labs_are_up_to_date():
    assert build_all(ROOT, check=True) == 0


def test_labs_hold_no_solution_text():
    for lab in (ROOT / "labs").glob("*.ipynb"):
        text = lab.read_text()
        assert "BEGIN SOLUTION" not in text and '"outputs": []' in text


def test_staleness_is_detected(tmp_path):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "labs").mkdir()
    source = ROOT / "solutions" / "03_layernorm.ipynb"
    (tmp_path / "solutions" / source.name).write_text(source.read_text())
    assert build_all(tmp_path, check=True) == 1  # missing
    assert build_all(tmp_path) == 0
    assert build_all(tmp_path, check=True) == 0
    (tmp_path / "solutions" / source.name).write_text(
        source.read_text().replace(
            "LayerNorm over the last axis of x.", "LayerNorm over the features."
        )
    )
    assert build_all(tmp_path, check=True) == 1  # stale
    (tmp_path / "labs" / "42_orphan.ipynb").write_text("{}")
    assert build_all(tmp_path) == 0 and build_all(tmp_path, check=True) == 1  # orphan


def test_one_lab_can_be_built_alone(tmp_path):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "labs").mkdir()
    source = ROOT / "solutions" / "03_layernorm.ipynb"
    (tmp_path / "solutions" / source.name).write_text(source.read_text())
    (tmp_path / "solutions" / "04_other.ipynb").write_text(source.read_text())
    assert build_all(tmp_path, stems=["03_layernorm"]) == 0
    assert sorted(p.name for p in (tmp_path / "labs").iterdir()) == ["03_layernorm.ipynb"]
    assert build_all(tmp_path, check=True, stems=["03_layernorm"]) == 0
    assert build_all(tmp_path, stems=["99_missing"]) == 2


def test_a_fresh_copy_of_a_lab_already_says_what_its_kernel_will(tmp_path):
    """JupyterLab, on starting a notebook's kernel, writes the kernel's ``kernelspec`` and
    ``language_info`` into the notebook (``NotebookPanel._updateSpec`` / ``_updateLanguage``)
    and marks it modified unless they are equal (``JSONExt.deepEqual``). A copy that
    ``normlab work`` just made holds what a real kernel of this environment reports, so the
    learner's lab opens unmodified (labs once said "Python 3" and ``{"name": "python"}``)."""
    import json
    import shutil

    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import start_new_kernel

    from normlab.build import copy_missing_labs

    course = tmp_path / "course"
    (course / "labs").mkdir(parents=True)
    shutil.copy2(ROOT / "labs" / "03_layernorm.ipynb", course / "labs")
    assert copy_missing_labs(course, "work", quiet=True) == 0
    metadata = json.loads((course / "work" / "03_layernorm.ipynb").read_text())["metadata"]

    name = metadata["kernelspec"]["name"]
    spec = KernelSpecManager().get_kernel_spec(name)
    manager, client = start_new_kernel(kernel_name=name)
    try:
        reply = client.kernel_info(reply=True, timeout=60)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    # what JupyterLab writes: kernelspec {name, display_name, language}, and language_info as
    # the kernel_info reply gives it
    assert metadata["kernelspec"] == {
        "name": name, "display_name": spec.display_name, "language": spec.language,
    }  # fmt: skip
    assert metadata["language_info"] == reply["content"]["language_info"]
    # the lab's answers and cells are the lab's: only the metadata is the copy's own
    copy = nbformat.read(course / "work" / "03_layernorm.ipynb", as_version=4)
    lab = nbformat.read(ROOT / "labs" / "03_layernorm.ipynb", as_version=4)
    assert copy.cells == lab.cells
