"""Lab 11's checks: right Triton kernels pass in two styles; each known bug fails WITH its hint.

The kernels run under Triton's interpreter (``TRITON_INTERPRET=1``, on CPU tensors). Each bug is
written here as a one-place change to the solution's source; the namespace is built from the
changed solution, so every wrapper and adapter after it uses the buggy kernel. Without Triton
(the optional extra, ``make kernels``) the whole file is skipped, and says why.
"""

from __future__ import annotations

import os

import pytest
from conftest import missing_extra, solution_namespace

if not os.environ.get("CUDA_VISIBLE_DEVICES_FOR_TESTS"):
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton", reason=missing_extra("11_triton_kernels"))


from normlab.grader.checks import triton_kernels as lab  # noqa: E402

STEM = "11_triton_kernels"
GRADED = lambda ns: {k: v for k, v in ns.items() if k.startswith(("tri_", "Tri", "TRI_"))}  # noqa: E731


def results(replace=None, names=None):
    """The lab's checks (those whose name contains one of ``names``) of the solution, with
    ``replace=(old, new)`` applied to its source first."""
    from normlab.grader import core, notebook

    objects = GRADED(solution_namespace(STEM, replace=replace, sources=True))
    guarded = core.ForbiddenGuard(notebook.submission_for(lab.LAB, objects), lab.LAB)
    chosen = [c for c in lab.LAB.checks if names is None or any(n in c.name for n in names)]
    return [core.run_check(check, guarded) for check in chosen]


def failed(res):
    return [r for r in res if not r.passed]


def test_the_solution_gets_full_marks():
    res = results()
    assert all(r.passed for r in res), [r.message for r in failed(res)]
    assert sum(r.points for r in res) == lab.LAB.max_score


# A second style: the forward kernels loop over the row in blocks of 32 columns (the form for rows
# too wide for one block), two passes: the statistics, then the output.
LOOPED_RMS = """@triton.jit
def _rms_fwd_kernel(X, W, Y, RSTD, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([32], dtype=tl.float32)
    for start in range(0, N, 32):
        cols = start + tl.arange(0, 32)
        x = tl.load(X + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, 32):
        cols = start + tl.arange(0, 32)
        x = tl.load(X + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=cols < N, other=0.0)
        tl.store(Y + row * N + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=cols < N)
    tl.store(RSTD + row, rstd)


def _unused():"""


def _solution_cell(start):
    from conftest import definition_cells

    for source in definition_cells(STEM):
        if start in source:
            return source
    raise AssertionError(start)


def _kernel_source(name):
    source = _solution_cell(f"def {name}(")
    begin = source.index("@triton.jit\ndef " + name)
    end = source.index("\n\n\n", begin)
    return source[begin:end]


def test_a_looped_forward_kernel_gets_full_marks():
    original = _kernel_source("_rms_fwd_kernel")
    res = results(replace=(original, LOOPED_RMS + "\n    pass"), names=["RMSNorm forward"])
    assert res and all(r.passed for r in res), [r.message for r in failed(res)]


# ----------------------------------------------------------------------------- bugs and hints

BUGS = {
    "missing mask": (
        "x = tl.load(X + row * N + cols, mask=inside, other=0.0).to(tl.float32)\n"
        "    rstd = 1.0 / tl.sqrt(tl.sum(x * x",
        "x = tl.load(X + row * N + cols, mask=cols < 1 << 30, other=0.0).to(tl.float32)\n"
        "    rstd = 1.0 / tl.sqrt(tl.sum(x * x",
        "RMSNorm forward kernel, float32",
    ),
    "statistics in the input dtype": (
        "x = tl.load(X + row * N + cols, mask=inside, other=0.0).to(tl.float32)\n"
        "    rstd = 1.0 / tl.sqrt(tl.sum(x * x",
        "x = tl.load(X + row * N + cols, mask=inside, other=0.0)\n"
        "    rstd = 1.0 / tl.sqrt(tl.sum(x * x",
        "RMSNorm forward kernel, bfloat16",
    ),
    "E[x^2] - E[x]^2 shortcut": (
        "rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / N + eps)",
        "rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N - mean * mean + eps)",
        "rows far from 0",
    ),
    "block smaller than the row": (
        "_rms_fwd_kernel[(M,)](x, weight, y, rstd, N, eps, BLOCK=triton.next_power_of_2(N))",
        "y.zero_()\n    _rms_fwd_kernel[(M,)](x, weight, y, rstd, N, eps, "
        "BLOCK=max(1, triton.next_power_of_2(N) // 2))",
        "RMSNorm forward kernel, float32",
    ),
    "masked lanes not zeroed": (
        "centred = tl.where(inside, x - mean, 0.0)",
        "centred = x - mean",
        "LayerNorm forward kernel, float32",
    ),
    "output left unwritten": (
        "tl.store(Y + row * N + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=inside)\n"
        "    tl.store(RSTD + row, rstd)",
        "tl.store(Y + row * N + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=inside)",
        "RMSNorm forward kernel, float32",
    ),
    "eps misplaced": (
        "rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)",
        "rstd = 1.0 / (tl.sqrt(tl.sum(x * x, axis=0) / N) + eps)",
        "RMSNorm forward kernel, float32",
    ),
    "unbiased variance": (
        "rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / N + eps)",
        "rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / (N - 1 + (N == 1)) + eps)",
        "LayerNorm forward kernel, float32",
    ),
    "weight or bias missing": (
        "(centred * rstd * w + b).to(Y.dtype.element_ty)",
        "(centred * rstd * w).to(Y.dtype.element_ty)",
        "LayerNorm forward kernel, float32",
    ),
    "dweight over the wrong axis": (
        "dweight = torch.empty(N, dtype=torch.float32, device=x.device)\n"
        "    _sum_rows_kernel[(triton.cdiv(N, REDUCE_BLOCK),)](partial, dweight, G, N, BLOCK_N=REDUCE_BLOCK)",
        "dweight = torch.empty(N, dtype=torch.float32, device=x.device)\n"
        "    _sum_rows_kernel[(triton.cdiv(N, REDUCE_BLOCK),)](partial, dweight, G, N, BLOCK_N=REDUCE_BLOCK)\n"
        "    dweight = (dy.float() * x.float() * rstd[:, None]).sum(1)",
        "RMSNorm backward kernels: dx",
    ),
    "dweight from one block of rows": (
        "_sum_rows_kernel[(triton.cdiv(N, REDUCE_BLOCK),)](partial, dweight, G, N, BLOCK_N=REDUCE_BLOCK)",
        "_sum_rows_kernel[(triton.cdiv(N, REDUCE_BLOCK),)](partial, dweight, 1, N, BLOCK_N=REDUCE_BLOCK)",
        "RMSNorm backward kernels: dx",
    ),
    "dx misses a term": (
        "dx = rstd * (g - tl.sum(g, axis=0) / N - xhat * (tl.sum(g * xhat, axis=0) / N))",
        "dx = rstd * (g - xhat * (tl.sum(g * xhat, axis=0) / N))",
        "LayerNorm backward kernels: dx",
    ),
}


def test_every_diagnosis_has_a_bug_here():
    assert set(BUGS) == set(lab.PROBE_NAMES)


@pytest.mark.parametrize("probe", [p.name for p in lab.DIAGNOSES])
def test_bug_is_caught_with_its_hint(probe):
    old, new, check_name = BUGS[probe]
    assert any(old in source for source in _all_sources()), f"{probe}: {old!r} not in solution"
    res = results(replace=(old, new), names=[check_name])
    assert res, check_name
    failing = failed(res)
    assert failing, f"{probe}: the bug passed {check_name}"
    assert any(probe in r.probes for r in failing), [(r.message, r.probes) for r in failing]


def _all_sources():
    from conftest import definition_cells

    return definition_cells(STEM)


def test_a_wrapper_of_torch_operations_earns_no_kernel_points():
    old = _solution_cell("def tri_rmsnorm_forward(")
    wrapper = """
def tri_rmsnorm_forward(x, weight, eps):
    xf = x.float()
    rstd = 1.0 / (xf.pow(2).mean(-1) + eps).sqrt()
    return (xf * rstd[:, None] * weight).to(x.dtype), rstd
"""
    start = old.index("def tri_rmsnorm_forward(")
    end = old.index("### END SOLUTION", start) + len("### END SOLUTION")
    res = results(replace=(old[start:end], wrapper.strip()), names=["RMSNorm forward kernel"])
    assert res and not any(r.passed for r in res)
    assert all("no @triton.jit kernel was launched" in r.message for r in res)
