"""benchmarks/triton_norms.py on a CPU: it reads the learner's kernels from a notebook the way it
says, refuses to time a wrong kernel, writes the documented table, and without a GPU times
nothing. The kernels here are stand-ins (PyTorch's norms passed through a Triton copy kernel),
not the lab's answers; under the interpreter the times mean nothing and nothing asserts them."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import nbformat
import pytest
import torch
from conftest import ROOT, missing_extra
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

SCRIPT = ROOT / "benchmarks" / "triton_norms.py"

SETUP = """\
import os
import torch
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
import triton
import triton.language as tl
import torch.nn.functional as F


@triton.jit
def copy_kernel(source, target, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(target + offsets, tl.load(source + offsets, mask=offsets < n), mask=offsets < n)


def through_triton(t):
    out = torch.empty_like(t)
    copy_kernel[(triton.cdiv(t.numel(), 128),)](t, out, t.numel(), BLOCK=128)
    return out
"""

# RMSNorm right (PyTorch's, through a Triton copy); LayerNorm's forward scaled by a constant of
# another cell and its backward plainly wrong: the benchmark must time the first, refuse the rest
STAND_INS = """\
def tri_rmsnorm_forward(x, weight, eps):
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + eps)
    return through_triton((x.float() * rstd[:, None] * weight).to(x.dtype)), rstd


def tri_rmsnorm_backward(dy, x, weight, rstd):
    leaf, w = x.float().requires_grad_(), weight.clone().requires_grad_()
    y = F.rms_norm(leaf, (x.shape[1],), w, 1e-5)
    dx, dw = torch.autograd.grad(y, (leaf, w), dy.float())
    return dx.to(x.dtype), dw


def tri_layernorm_forward(x, weight, bias, eps):
    y = F.layer_norm(x.float(), (x.shape[1],), weight, bias, eps)
    rstd = torch.rsqrt(x.float().var(-1, correction=0) + eps)
    return (y * SCALE).to(x.dtype), x.float().mean(-1), rstd


def tri_layernorm_backward(dy, x, weight, mean, rstd):
    return dy.clone(), weight.clone(), weight.clone()
"""


def stand_in_notebook(path, definitions=STAND_INS, setup=SETUP):
    check = new_code_cell("raise RuntimeError('a check cell must not run')")
    check.metadata["tags"] = ["runs-learner-code"]
    cells = [
        new_markdown_cell("# a stand-in"),
        new_code_cell(setup),
        new_code_cell("%matplotlib inline\nSCALE = 2.0"),
        new_code_cell(definitions),
        check,
    ]
    nbformat.write(new_notebook(cells=cells), path)
    return path


def run_script(*arguments):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *arguments],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_under_the_interpreter_it_times_the_right_kernels_and_refuses_the_wrong(tmp_path):
    pytest.importorskip("triton", reason=missing_extra("11_triton_kernels"))
    out = tmp_path / "table.txt"
    done = run_script(
        "--interpret",
        "--notebook",
        str(stand_in_notebook(tmp_path / "nb.ipynb")),
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text(encoding="utf-8")
    header, _, table = text.partition("\n\n")
    keys = {line.split(": ", 1)[0] for line in header.splitlines()}
    assert {"device", "torch", "triton", "date (UTC)", "repeats (median of)"} <= keys
    rows = table.splitlines()[1:]
    named = {(line.split()[2], " ".join(line.split()[3:-4])) for line in rows}
    for dtype in ("float32", "bfloat16"):
        for name in ("copy", "tri_rmsnorm_forward", "tri_rmsnorm_backward", "F.rms_norm"):
            assert (dtype, name) in named, (dtype, name, rows)
        assert (dtype, "tri_layernorm_forward") not in named
        assert (dtype, "tri_layernorm_backward") not in named
        assert f"tri_layernorm_forward at (3, 100) {dtype}: differs from PyTorch" in header
        assert f"tri_layernorm_backward at (3, 100) {dtype}: differs from autograd" in header
    copy_ratios = [float(line.split()[-2]) for line in rows if line.split()[3] == "copy"]
    assert copy_ratios == [1.0, 1.0]


def load_script():
    spec = importlib.util.spec_from_file_location("triton_norms_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_notebook_without_the_kernels_is_refused_with_their_names(tmp_path):
    script = load_script()
    only_one = "def tri_rmsnorm_forward(x, w, e):\n    pass"
    notebook = stand_in_notebook(tmp_path / "nb.ipynb", only_one, setup="import torch")
    with pytest.raises(ValueError, match="tri_rmsnorm_backward, tri_layernorm_forward"):
        script.load_learner_kernels(notebook)


def test_the_result_file_is_named_after_the_device():
    assert load_script().result_path("NVIDIA H200").name == "triton_h200.txt"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the script would time it")
def test_without_a_gpu_nothing_is_timed():
    done = run_script()
    assert done.returncode == 0
    assert "nothing was timed" in done.stdout
