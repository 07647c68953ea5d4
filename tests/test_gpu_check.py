"""benchmarks/gpu_check.py (`make gpu-check`) on a CPU: without a GPU it runs nothing, says so
plainly and exits with its own status (3); with --interpret it runs a notebook's check cells and
the Triton benchmark under the interpreter and writes the documented results file, whose verdict
follows the scores the check cells print. The notebooks here are stand-ins (their ``check``
prints a score line), not lab 11: the script's reading of them is what is tested."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import nbformat
import pytest
import torch
from conftest import ROOT, VENV, missing_extra
from nbformat.v4 import new_code_cell, new_notebook

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"

SETUP = """\
import os
import torch
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
import triton
import triton.language as tl
import torch.nn.functional as F
print("interpreter:", os.environ.get("TRITON_INTERPRET"))


@triton.jit
def copy_kernel(source, target, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(target + offsets, tl.load(source + offsets, mask=offsets < n), mask=offsets < n)


def through_triton(t):
    out = torch.empty_like(t)
    copy_kernel[(triton.cdiv(t.numel(), 128),)](t, out, t.numel(), BLOCK=128)
    return out


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
    return through_triton(y.to(x.dtype)), x.float().mean(-1), rstd


def tri_layernorm_backward(dy, x, weight, mean, rstd):
    leaf = x.float().requires_grad_()
    w, b = weight.clone().requires_grad_(), torch.zeros_like(weight).requires_grad_()
    y = F.layer_norm(leaf, (x.shape[1],), w, b, 1e-5)
    dx, dw, db = torch.autograd.grad(y, (leaf, w, b), dy.float())
    return dx.to(x.dtype), dw, db


def check(**functions):  # a stand-in for normlab's: prints a score line as it does
    for name in functions:
        print(f"{name}: {SCORES.get(name, 5)}/5 points")
"""


def notebook(path, scores="{}", extra=None):
    checks = [
        new_code_cell("check(tri_rmsnorm_forward=tri_rmsnorm_forward)"),
        new_code_cell("check(tri_layernorm_forward=tri_layernorm_forward)"),
    ]
    for cell in checks:
        cell.metadata["tags"] = ["runs-learner-code"]  # the benchmark skips them, as in lab 11
    cells = [new_code_cell(SETUP), new_code_cell(f"SCORES = {scores}"), *checks]
    if extra:  # a check cell that raises (the benchmark skips it, as it skips the others)
        cells.append(new_code_cell(extra, metadata={"tags": ["runs-learner-code"]}))
    nbformat.write(new_notebook(cells=cells), path)
    return path


def run(*arguments, timeout=600):
    return subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout, check=False)  # fmt: skip


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_without_a_gpu_it_says_so_runs_nothing_and_exits_3(tmp_path):
    results = set((ROOT / "benchmarks" / "results").iterdir())
    done = run("--notebook", str(notebook(tmp_path / "nb.ipynb")))
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("no CUDA GPU on this machine: nothing was run"), done.stdout
    assert set((ROOT / "benchmarks" / "results").iterdir()) == results


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_make_gpu_check_stops_with_the_scripts_message(tmp_path):
    done = subprocess.run(
        ["make", f"VENV={VENV}", "-o", f"{VENV}/.installed", "gpu-check",
         f"GPU_CHECK_FLAGS=--notebook {notebook(tmp_path / 'nb.ipynb')}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if "Triton is not installed" in done.stdout:
        pytest.skip(missing_extra("11_triton_kernels"))
    assert done.returncode != 0
    assert "no CUDA GPU on this machine: nothing was run" in done.stdout, done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scores", "extra", "status", "verdict", "line"),
    [
        ("{}", None, 0, "full marks", "ok   tri_layernorm_forward: 5/5 points"),
        ("{'tri_layernorm_forward': 3}", None, 1, "a check fell short",
         "FAIL tri_layernorm_forward: 3/5 points"),
        ("{}", "raise ValueError('a broken cell')", 1, "a check fell short or a cell raised",
         "ERROR ValueError: a broken cell"),
    ],
    ids=["full-marks", "short", "raises"],
)  # fmt: skip
def test_interpret_runs_the_checks_and_the_benchmark_into_the_results_file(
    tmp_path, monkeypatch, scores, extra, status, verdict, line
):
    """The full-marks notebook goes through the script as `make gpu-check --interpret` runs it,
    in a process of its own, the benchmark included. The two that fall short go through the
    script's ``main`` in this process with the benchmark left out (its table is the full-marks
    run's to show; what differs here is how the check cells' scores and errors are read): the
    benchmark's run under the interpreter cost each some 5 s of CPU."""
    pytest.importorskip("triton", reason=missing_extra("11_triton_kernels"))
    out = tmp_path / "results.txt"
    arguments = ["--interpret", "--notebook", str(notebook(tmp_path / "nb.ipynb", scores, extra)),
                 "--out", str(out)]  # fmt: skip
    benchmarked = status == 0
    if benchmarked:
        done = run(*arguments)
        assert done.returncode == status, done.stdout[-3000:] + done.stderr[-3000:]
    else:
        spec = importlib.util.spec_from_file_location("gpu_check_under_test", SCRIPT)
        script = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(script)
        monkeypatch.setattr(script, "run_benchmark", lambda *_: ("(not run here)", True))
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # main sets it; put back afterwards
        assert script.main(arguments) == status
    text = out.read_text(encoding="utf-8")
    header, _, body = text.partition("\n\n")
    keys = {entry.split(": ", 1)[0] for entry in header.splitlines()}
    assert {"date (UTC)", "mode", "device", "Python", "torch", "triton", "numpy"} <= keys, header
    assert "mode: interpreter (TRITON_INTERPRET=1, CPU)" in header
    assert f"## lab 11's checks ({verdict}" in body
    assert any(entry.startswith(line) for entry in body.splitlines()), body
    assert "ok   tri_rmsnorm_forward: 5/5 points" in body.splitlines()
    # each check cell's own line, then the whole lab's (every graded name the notebook defines)
    whole = body.split("### the whole lab, checked once after the notebook ran\n", 1)[1]
    assert "tri_rmsnorm_backward: 5/5 points" in whole and "tri_call" not in whole
    # the benchmark ran on the same kernels and its table is in the file
    table = body.split("## benchmarks/triton_norms.py\n", 1)[1]
    if benchmarked:
        assert "tri_rmsnorm_forward" in table and "copy" in table, table
