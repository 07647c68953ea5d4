"""Small parts of the package: wire protocol, the from-scratch detectors, gradient check, lab names."""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from normlab.gradcheck import numeric_gradient, relative_error
from normlab.grader.isolation import wire as protocol
from normlab.grader.isolation.wire import encode_result
from normlab.grader.isolation.worker import strip_magics
from normlab.grader.registry import lab_for_path
from normlab.grader.trap import forbidden_calls, scan_source

NORMS = ["torch.nn.functional.layer_norm", "torch.nn.LayerNorm"]


def roundtrip(header, arrays):
    read, write = os.pipe()
    protocol.send(write, header, arrays)
    os.close(write)
    try:
        return protocol.recv(protocol.blocking_reader(read))
    finally:
        os.close(read)


def test_protocol_roundtrip_keeps_dtype_and_shape():
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array("b")]
    header, back = roundtrip({"ok": True}, arrays)
    assert header["ok"] and back[0].dtype == np.float32 and back[0].shape == (2, 3)
    assert back[1].item() == "b"


def test_object_arrays_never_cross():
    with pytest.raises(ValueError):
        protocol.encode_array(np.array([object()], dtype=object))
    header, _ = encode_result(np.array([{"a": 1}], dtype=object))
    assert header["items"][0]["unsendable"] == "an array of Python objects"


def test_oversized_header_is_refused():
    data = struct.pack("<I", protocol.DEFAULT.max_header_bytes + 1)
    with pytest.raises(protocol.ProtocolError):
        protocol.recv(lambda n, buf=[data]: buf.pop(0)[:n])


def test_pickled_npy_is_refused():
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(protocol.ProtocolError):
        protocol.decode_array(buffer.getvalue())


def test_scan_finds_direct_aliased_and_helper_uses():
    cells = [
        "import torch.nn.functional as F\nfrom torch.nn.functional import layer_norm as ln",
        "def helper(x):\n    return ln(x, (4,))",
        "def f(x, g, b):\n    return helper(x)",
        "def g(x):\n    return F.layer_norm(x, (4,))",
        "def clean(x):\n    return (x - x.mean()) / x.std()",
        "def h(x):\n    m = torch.nn.LayerNorm(4)\n    return m(x)",
    ]
    assert scan_source(cells, "f", NORMS) == ["ln"]
    assert scan_source(cells, "g", NORMS) == ["F.layer_norm"]
    assert scan_source(cells, "clean", NORMS) == []
    assert scan_source(cells, "h", NORMS) == ["torch.nn.LayerNorm"]
    assert scan_source(["def broken(:"], "broken", NORMS) == []


def test_a_notebooks_bindings_are_built_once_for_all_its_scans(monkeypatch):
    """Each graded function's scan reads the notebook's name bindings (imports, aliases): they
    are built once per notebook, not once per scan (``trap.bindings_of``), and a changed
    notebook gets its own."""
    from normlab.grader import trap

    built = []
    real = trap._Bindings
    monkeypatch.setattr(trap, "_Bindings", lambda trees: built.append(1) or real(trees))
    trap._bindings_of.cache_clear()
    cells = ["import torch.nn.functional as fn", "def g(x):\n    return fn.layer_norm(x, (4,))"]
    for name in ("g", "g", "other"):
        assert scan_source(cells, name, NORMS) == (["fn.layer_norm"] if name == "g" else [])
    assert trap.notebook_findings(cells, NORMS) is not None
    assert len(built) == 1
    assert scan_source(["fn = object()", cells[1]], "g", NORMS) == []
    assert len(built) == 2


def test_runtime_trap_records_and_restores():
    import torch
    import torch.nn.functional as F

    original = F.layer_norm
    hits = []
    with forbidden_calls(NORMS, hits):
        torch.nn.LayerNorm(3)(torch.ones(2, 3))
    assert F.layer_norm is original and "torch.nn.LayerNorm" in hits


def test_the_trap_resolves_a_name_once_while_its_module_is_the_one_imported(monkeypatch):
    """``forbidden_calls`` resolves each library name once (``trap._resolve`` remembers the
    owner), and again once the library's root module is another object (a reload): the trap
    is then set on the module that is imported, not on a module nothing uses."""
    import importlib
    import types

    from normlab.grader import trap

    def package():
        root, sub = types.ModuleType("nl_fake_root"), types.ModuleType("nl_fake_root.sub")
        sub.norm = lambda x: x
        root.sub = sub
        monkeypatch.setitem(sys.modules, "nl_fake_root", root)
        monkeypatch.setitem(sys.modules, "nl_fake_root.sub", sub)
        return sub

    imports = []
    real_import = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda n: imports.append(n) or real_import(n))
    first = package()
    assert trap._resolve("nl_fake_root.sub.norm") == (first, "norm")
    assert imports == ["nl_fake_root.sub"]
    assert trap._resolve("nl_fake_root.sub.norm") == (first, "norm")
    assert imports == ["nl_fake_root.sub"]  # remembered
    second = package()  # the library imported anew
    hits: list[str] = []
    with trap.forbidden_calls(["nl_fake_root.sub.norm"], hits):
        second.norm(1)
    assert hits == ["nl_fake_root.sub.norm"] and first.norm is not second.norm


def test_magics_become_pass():
    assert strip_magics("%matplotlib inline\n  !pip install x\nx = 1") == (
        "pass  # %matplotlib inline\n  pass  # !pip install x\nx = 1"
    )


def test_numeric_gradient_of_a_known_function():
    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    upstream = np.array([[1.0, 2.0], [-1.0, 0.5]])
    grad = numeric_gradient(lambda v: v**3, x.copy(), upstream)
    assert relative_error(grad, 3 * x**2 * upstream) < 1e-8
    with pytest.raises(TypeError):
        numeric_gradient(lambda v: v, x.astype(np.float32), upstream)


def test_relative_error_detects_a_wrong_gradient():
    assert relative_error(np.array([1.0, 2.0]), np.array([1.0, 2.2])) > 0.04


@pytest.mark.parametrize(
    "name, expected",
    [
        ("03_layernorm.ipynb", "03_layernorm"),
        ("alice_03_layernorm.ipynb", "03_layernorm"),
        ("03_layernorm-bob.ipynb", "03_layernorm"),
        ("03-carol.ipynb", "03_layernorm"),
        ("Alice Smith - 03_LayerNorm (1).ipynb", "03_layernorm"),
        ("notes.ipynb", None),
    ],
)
def test_lab_is_recognised_from_the_file_name(name, expected):
    lab = lab_for_path(Path(name))
    assert (lab.stem if lab else None) == expected


def test_metadata_wins_over_the_file_name():
    assert (
        lab_for_path(Path("notes.ipynb"), {"normlab": {"lab": "03_layernorm"}}).stem
        == "03_layernorm"
    )


def test_trap_leaves_no_residue_on_subclasses():
    import torch

    assert "forward" not in vars(torch.nn.BatchNorm1d)
    hits = []
    with forbidden_calls(["torch.nn.BatchNorm1d"], hits):
        torch.nn.BatchNorm1d(3)(torch.ones(4, 3))
    assert hits == ["torch.nn.BatchNorm1d"]
    assert "forward" not in vars(torch.nn.BatchNorm1d)


def test_sequences_of_scalars_cross_as_tuples():
    from normlab.grader.isolation.wire import decode_args, encode_args

    specs, names, kwarg_specs, arrays = encode_args(((0, 2),), {"axes": [1, 3]})
    assert decode_args(specs, arrays) == [(0, 2)] and decode_args(kwarg_specs, arrays) == [(1, 3)]
    with pytest.raises(TypeError):
        encode_args(([np.zeros(2)],), {})


def test_table_ends_with_the_total_when_several_notebooks_are_graded():
    from normlab.grader.core import CheckResult
    from normlab.grader.results import SubmissionResult
    from normlab.instructor.report import to_table

    ok = CheckResult("a", 2, 2, True, "")
    bad = CheckResult("b", 0, 1, False, "why\nmore")
    results = [
        SubmissionResult("x.ipynb", "03_layernorm", 2, 3, None, [ok, bad]),
        SubmissionResult("y.ipynb", "03_layernorm", 0, 3, "boom", []),
    ]
    table = to_table(results)
    assert table.splitlines()[-1] == "total: 2/6 points in 2 notebooks"
    assert "    ✗ b: why" in table and "ERROR: boom" in table
    assert "total" not in to_table(results[:1])


def test_pytest_loads_the_course_plugin_before_nbformat():
    """pyproject.toml's ``-p normlab.pytest_plugin`` ran before nbval imported nbformat: the IRI
    parser that jsonschema would have built (2 s of CPU per pytest process) was never imported."""
    import sys

    assert "nbformat" in sys.modules and "jsonschema" in sys.modules
    assert "normlab.pytest_plugin" in sys.modules
    assert sys.modules.get("rfc3987_syntax", "absent") is None
