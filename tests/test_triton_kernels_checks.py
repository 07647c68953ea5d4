"""Lab 11's checks: right Triton kernels pass in two styles; each known bug fails WITH its hint.

The kernels run under Triton's interpreter (``TRITON_INTERPRET=1``, on CPU tensors). Each bug is
written here as a one-place change to the solution's source; the namespace is built from the
changed solution, so every wrapper and adapter after it uses the buggy kernel. Without Triton
(the optional extra, ``make kernels``) the whole file is skipped, and says why.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, missing_extra, solution_namespace

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
    assert untranslated([r.message for r in failing]) == []


def untranslated(messages) -> list[str]:
    """The lines of ``messages`` that the Spanish catalog leaves in English."""
    from normlab.grader import i18n

    book = i18n.catalog("es")
    return [line for m in messages for line in i18n.translation(m, book)[1]]


def _all_sources():
    from conftest import definition_cells

    return definition_cells(STEM)


def test_a_layernorm_block_narrower_than_the_row_is_named_everywhere_and_quietly():
    """The wrapper launches the (right) kernel with half the block and leaves y's other columns
    as torch.empty left them (garbage, signalling NaNs among it): every forward check and the
    autograd Function say why, and the grader's own arithmetic on that garbage prints nothing."""
    import warnings

    from normlab.grader import core

    old = "_ln_fwd_kernel[(M,)](x, weight, bias, y, mean, rstd, N, eps, BLOCK=triton.next_power_of_2(N))"
    # what torch.empty left in y, made deterministic: signalling NaNs (float32 0x7FA00001,
    # bfloat16 0x7FA0), whose conversion to float64 is NumPy's "invalid value ... in cast"
    garbage = (
        "(y.view(torch.int16).fill_(0x7FA0) if y.element_size() == 2 "
        "else y.view(torch.int32).fill_(0x7FA00001))\n    "
    )
    new = garbage + old.replace(
        "BLOCK=triton.next_power_of_2(N)", "BLOCK=max(1, triton.next_power_of_2(N) // 2)"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = core.say_reasons_once(
            results(replace=(old, new), names=["LayerNorm forward kernel", "TriLayerNorm"])
        )
    assert [w.message for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert len(res) == 4 and not any(r.passed for r in res)
    assert all("block smaller than the row" in r.probes for r in res), [r.message for r in res]
    autograd = next(r for r in res if r.name.startswith("TriLayerNorm"))
    assert autograd.message.startswith(
        "fix `tri_layernorm_forward` first: it fails its own check\n"
    )
    assert untranslated([r.message for r in res]) == []


def test_a_copy_made_with_the_earlier_adapter_still_gets_full_marks():
    """Learners' copies made before the checks launched the kernels have the earlier tri_call,
    which returned a launch count before the dtypes: it is passed over, and decides nothing."""
    old = _solution_cell("def tri_call(")
    new = old.replace(
        "    return (*(o.cpu() if isinstance(o, torch.Tensor) else o for o in outputs), dtypes)",
        "    return (*(o.cpu() if isinstance(o, torch.Tensor) else o for o in outputs), 0, dtypes)",
    )
    assert new != old
    res = results(replace=(old, new))
    assert all(r.passed for r in res), [r.message for r in failed(res)]


# ----------------------------------------------------------------------------- forgeries

# Wrappers that compute the answer with torch operations (what a forgery needs for its wrappers).
TORCH_WRAPPERS = """
def tri_rmsnorm_forward(x, weight, eps):
    LAUNCH_RMS
    xf = x.float()
    rstd = (xf.pow(2).mean(-1) + eps).rsqrt()
    return (xf * rstd[:, None] * weight).to(x.dtype), rstd


def tri_rmsnorm_backward(dy, x, weight, rstd):
    xf, g = x.float(), dy.float() * weight
    xhat = xf * rstd[:, None]
    dx = rstd[:, None] * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx.to(x.dtype), (dy.float() * xhat).sum(0)


def tri_layernorm_forward(x, weight, bias, eps):
    xf = x.float()
    mean = xf.mean(-1)
    rstd = (((xf - mean[:, None]) ** 2).mean(-1) + eps).rsqrt()
    return ((xf - mean[:, None]) * rstd[:, None] * weight + bias).to(x.dtype), mean, rstd


def tri_layernorm_backward(dy, x, weight, mean, rstd):
    xf, g = x.float(), dy.float() * weight
    xhat = (xf - mean[:, None]) * rstd[:, None]
    dx = rstd[:, None] * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx.to(x.dtype), (dy.float() * xhat).sum(0), dy.float().sum(0)
"""
# The forgery: every Triton launch raises, and the old adapter's launch count is forged.
FORGED_LAUNCHES = """
from triton.runtime import interpreter, jit


def _refuse(self, *args, **kwargs):
    raise RuntimeError("no launches here")


interpreter.InterpretedFunction.run = jit.JITFunction.run = _refuse
_old_tri_call = tri_call


def tri_call(name, dtype, *args):
    *outputs, dtypes = _old_tri_call(name, dtype, *args)
    return (*outputs, max(0, 1), dtypes)  # the count the old grader trusted
"""
NOOP_LAUNCH = "_rms_fwd_kernel[(x.shape[0],)](x, weight, x, weight, 1, eps, BLOCK=1)"
# A kernel that computes through the interpreter's NumPy data instead of Triton's language.
ESCAPING_RMS = """@triton.jit
def _rms_fwd_kernel(X, W, Y, RSTD, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * N + cols, mask=cols < N, other=0.0)
    data = x.handle.data
    tl.store(RSTD + row, 1.0 / (data * data).mean() ** 0.5)"""


def _kernels_emptied(source: str) -> str:
    """Every @triton.jit function of a cell with its body replaced by `pass`."""
    kernels = [i for i in range(len(source)) if source.startswith("@triton.jit\ndef ", i)]
    for begin in reversed(kernels):
        start = source.index("    ### BEGIN SOLUTION", begin)
        end = source.index("### END SOLUTION", start) + len("### END SOLUTION")
        source = source[:start] + "    pass  # emptied" + source[end:]
    return source


FORGERIES = {
    # no kernel computes; wrappers in torch; every launch refused; the launch count forged
    "forged": (True, TORCH_WRAPPERS.replace("LAUNCH_RMS", "pass") + FORGED_LAUNCHES),
    # the lab's tri_call; each wrapper launches an empty kernel, then computes with torch
    "noop": (True, TORCH_WRAPPERS.replace("LAUNCH_RMS", NOOP_LAUNCH)),
    # the worked solution, but the RMSNorm forward kernel computes with the interpreter's NumPy
    "escape": (False, None),
    # not a forgery: the LayerNorm forward kernel without a mask on any load or store,
    # which killed the notebook's kernel ("corrupted size vs. prev_size")
    "unmasked": (False, None),
}
#: (kernel points, total) each forgery scores: the 15 kernel points are the 11 checks that
#: launch kernels; the bytes (4) and multiple-choice (2) answers are the solution's
KERNEL_CHECKS = {c.name for c in lab.LAB.checks if not c.name.startswith(("bytes", "problem"))}
EXPECTED = {
    "forged": (0, 6),
    "noop": (0, 6),
    "escape": (11, 17),
    "unmasked": (10, 16),
}
# The worked solution earns all 15 kernel points (21 in all) under `normlab grade` in both modes:
# test_adversarial's graded solutions. Here the forgeries that keep some right kernels (escape,
# unmasked) show that kernels do launch and earn in the same run, so that a forgery's 0 is the
# forgery's; grading the solution here as well cost some 8 s of the suite's CPU.
UNMASKED_SAYS = "`_ln_fwd_kernel`, program 0: a `tl.load` of `X` reaches past its rows"


def forgery_cells(kind: str) -> list[str]:
    """The solution's code cells (check cells included), changed into the forgery ``kind``."""
    notebook = nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)
    cells = [c.source for c in notebook.cells if c.cell_type == "code"]
    empty, last = FORGERIES[kind]
    if empty:
        cells = [_kernels_emptied(c) for c in cells]
    if kind == "escape":
        original = _kernel_source("_rms_fwd_kernel")
        cells = [c.replace(original, ESCAPING_RMS) for c in cells]
        assert any(ESCAPING_RMS in c for c in cells)
    if kind == "unmasked":
        original = _kernel_source("_ln_fwd_kernel")
        unmasked = original.replace(", mask=inside, other=0.0", "").replace(", mask=inside", "")
        assert "mask=" not in unmasked
        cells = [c.replace(original, unmasked) for c in cells]
    return cells + ([last] if last else [])


def test_the_forgeries_are_what_they_say():
    for kind in ("forged", "noop"):
        cells = forgery_cells(kind)
        assert sum(c.count("pass  # emptied") for c in cells) == 7, kind
        assert "### BEGIN SOLUTION\n    row = tl.program_id(0)" not in "".join(cells)


def _namespace(cells: list[str]) -> dict:
    """The cells run as a notebook runs them (their sources in linecache, as in Jupyter), with
    check() calls left out."""
    import linecache

    namespace: dict = {"__name__": "__main__"}
    os.environ.pop("NORMLAB_GRADING", None)
    for index, source in enumerate(c for c in cells if not c.startswith("check(")):
        source = "\n".join(line for line in source.splitlines() if not line.startswith("check("))
        filename = f"<forgery cell {index}>"
        text = source + "\n"
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        exec(compile(source, filename, "exec"), namespace)
    return namespace


def _scores(results) -> tuple[int, int]:
    kernel = sum(r.points for r in results if r.name in KERNEL_CHECKS)
    return kernel, sum(r.points for r in results)


@pytest.mark.parametrize("kind", ["noop", "escape", "unmasked"])
def test_a_forgery_earns_no_kernel_point_in_check(kind):
    """Door 1: check() launches the kernels itself, in the learner's kernel."""
    from normlab.grader import core, notebook

    namespace = _namespace(forgery_cells(kind))
    objects = GRADED(namespace)
    guarded = core.ForbiddenGuard(notebook.submission_for(lab.LAB, objects), lab.LAB)
    res = [core.run_check(check, guarded) for check in lab.LAB.checks]
    assert _scores(res) == EXPECTED[kind], [(r.name, r.message[:200]) for r in failed(res)]
    first = next(r for r in res if r.name.startswith("RMSNorm forward kernel"))
    if kind == "noop":
        assert "output left unwritten" in first.probes, first.message
    elif kind == "unmasked":
        failing = next(r for r in res if r.name.startswith("LayerNorm forward kernel, float32"))
        assert UNMASKED_SAYS in failing.message and "missing mask" in failing.probes
    else:
        assert "`_rms_fwd_kernel` uses `.handle`, which is not part of Triton's language" in (
            first.message
        )


MODES = ["processes", "sandbox"]


@pytest.fixture(scope="module", params=MODES)
def graded_forgeries(request, tmp_path_factory):
    """`normlab grade` of the four forgeries, in one isolation mode."""
    from conftest import grade_json

    from normlab.grader.isolation.sandbox import bwrap_available

    mode = request.param
    if mode == "sandbox" and not bwrap_available():
        pytest.skip("bubblewrap is not available here")
    folder = tmp_path_factory.mktemp(f"forgeries-{mode}")
    template = nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)
    for kind in EXPECTED:
        notebook = nbformat.v4.new_notebook(metadata=template.metadata)
        notebook.cells = [nbformat.v4.new_code_cell(c) for c in forgery_cells(kind)]
        nbformat.write(notebook, folder / f"{STEM}_{kind}.ipynb")
    extra = ["--sandbox"] if mode == "sandbox" else ["--no-sandbox"]
    if mode == "processes" and os.geteuid() == 0:
        extra.append("--allow-root")
    code, data, stderr = grade_json(folder, extra=extra)
    assert code == 0, stderr
    return {Path(s["path"]).stem.rsplit("_", 1)[-1]: s for s in data["submissions"]}


@pytest.mark.isolation
@pytest.mark.parametrize("kind", list(EXPECTED))
def test_a_forgery_earns_no_kernel_point_in_grade(graded_forgeries, kind):
    """Door 2: the kernels are launched in a process where none of the notebook's cells ran;
    what the notebook does to Triton, or says about its launches, decides nothing."""
    submission = graded_forgeries[kind]
    checks = submission["checks"]
    kernel = sum(c["points"] for c in checks if c["name"] in KERNEL_CHECKS)
    got = (kernel, submission["score"])
    assert got == EXPECTED[kind], [
        (c["name"], c["message"][:200]) for c in checks if not c["passed"]
    ]
    assert submission["error"] is None  # no process died, whatever the kernels did
    if kind == "unmasked":
        failing = next(c for c in checks if c["name"].startswith("LayerNorm forward kernel, f"))
        assert UNMASKED_SAYS in failing["message"]


# ----------------------------------------------------------------------------- the launcher itself

ROW = "    row = tl.program_id(0)\n    cols = tl.arange(0, BLOCK)\n"
# kernel body -> the reason the launch stops (the launcher's own words, checked in Spanish too)
REFUSED = {
    "    import numpy\n": "`k` imports a module",
    "    global Z\n": "`k` declares a global",
    "    f = lambda v: v\n": "`k` uses a comprehension or lambda",
    "    def f():\n        pass\n": "`k` defines a function or class inside the kernel",
    "    with tl:\n        pass\n": "`k` uses Python that Triton does not compile (With)",
    "    x = np.zeros(3)\n": (
        "`k` uses `np`, which is not one of its parameters: pass it as an argument (a "
        "`tl.constexpr` for a constant)"
    ),
    "    x = X.__class__\n": "`k` reads the private attribute `__class__`",
    "    x = tl.load(X).handle\n": "`k` uses `.handle`, which is not part of Triton's language",
    "    x = tl.core.builtins\n": "`k` uses `tl.core`, which is not part of Triton's language",
    "    tl = 1\n": "`k` assigns to `tl`, a name of the language",
    ROW + "    tl.store(X + row * 7 + cols, 1.0)\n": (
        "`k`, program 0: a `tl.store` of `X` reaches past its rows (row 1, column 0; this "
        "program owns rows 0 to 0): mask it with `mask=cols < N` (and `other=0.0` on a load)"
    ),
    ROW + "    tl.store(X + row * 7 + cols - 1, 1.0, mask=cols < N)\n": (
        "`k`, program 0: a `tl.store` reaches outside every tensor the kernel was given: mask "
        "it with `mask=cols < N` (and `other=0.0` on a load)"
    ),
    ROW + "    x = tl.load(X + 14 + row * 7 + cols, mask=cols < N)\n": (
        "`k`, program 0: a `tl.load` reaches index 14 of `X`, past its end (its size is 14), "
        "outside every tensor the kernel was given: mask it with `mask=cols < N` (and "
        "`other=0.0` on a load)"
    ),
}


@pytest.mark.parametrize("body", list(REFUSED))
def test_the_launcher_refuses_or_stops_with_a_reason(body):
    import torch

    from normlab.grader import kernel_launch

    launcher = kernel_launch.Launcher({"k": "def k(X, N, BLOCK: tl.constexpr):\n" + body})
    x = torch.zeros((2, 7))
    with pytest.raises((kernel_launch.KernelRefused, kernel_launch.OutOfBounds)) as caught:
        launcher.launch("k", (2,), ("in:rows:1", "value"), x, 7, BLOCK=8)
    assert str(caught.value) == REFUSED[body]
    assert untranslated([f"`k`, x float32 (2, 7), grid (2,), BLOCK=8: {caught.value}"]) == []


def test_a_stopped_load_never_touched_memory():
    """The guard checks a load's addresses before the interpreter reads them: a load far past
    the tensor (which would read unmapped memory and kill the process) is stopped."""
    import torch

    from normlab.grader import kernel_launch

    far = (
        "def k(X, N, BLOCK: tl.constexpr):\n    x = tl.load(X + (1 << 40) + tl.arange(0, BLOCK))\n"
    )
    with pytest.raises(kernel_launch.OutOfBounds):
        kernel_launch.Launcher({"k": far}).launch(
            "k", (1,), ("in", "value"), torch.zeros(8), 8, BLOCK=8
        )


def test_the_guard_stops_the_learners_own_launch():
    """The lab's first cell turns the guard on for the notebook's own launches (its wrappers):
    an unmasked store past the tensor raises OutOfBounds in the learner's call, instead of
    corrupting the heap."""
    import torch
    import triton
    import triton.language as tl

    from normlab.grader import kernel_launch

    kernel_launch.guard_launches()

    @triton.jit
    def unmasked(X, BLOCK: tl.constexpr):
        tl.store(X + tl.arange(0, BLOCK), 1.0)

    x = torch.zeros(5)
    with pytest.raises(kernel_launch.OutOfBounds, match="past its end"):
        unmasked[(1,)](x, BLOCK=8)
    unmasked[(1,)](torch.zeros(8), BLOCK=8)  # in bounds: runs
    # a strided view spans more than its numel elements: its last element is in bounds
    strided = torch.zeros(8, 2)[:, 0]

    @triton.jit
    def last(X, S, N):
        tl.store(X + (N - 1) * S, 2.0)

    last[(1,)](strided, strided.stride(0), 8)
    assert strided[-1] == 2.0


def test_a_launch_patches_the_language_once_and_computes_the_same(monkeypatch):
    """Under the guard, the interpreter's patching of ``triton.language`` runs once per launch
    and per set of modules, not again at every ``tl.sum`` of every program: 40 programs, each
    calling ``tl.sum`` and ``tl.max``, walk the language's members a handful of times, where
    each program's calls walked them again. The sums are the same."""
    import torch
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    from normlab.grader import kernel_launch

    kernel_launch.guard_launches()
    walks = []
    walk = interpreter._patch_builtin
    monkeypatch.setattr(
        interpreter, "_patch_builtin", lambda *a, **k: walks.append(1) or walk(*a, **k)
    )

    @triton.jit
    def row_stats(X, S, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(X + row * N + cols, mask=cols < N, other=0.0)
        tl.store(S + row, tl.sum(x, axis=0) + tl.max(x, axis=0))

    x = torch.randn(40, 7)
    out = torch.empty(40)
    for _ in range(2):  # a second launch patches (and restores) as the first did
        walks.clear()
        row_stats[(40,)](x, out, 7, BLOCK=8)
        torch.testing.assert_close(out, x.sum(1) + x.max(1).values)
        assert 0 < len(walks) <= 20, len(walks)  # each program's calls walked 12 more


# ----------------------------------------------------------------------------- bytes moved

# The tensors each kernel loads or stores, counted here from the lab's kernels: (M x N
# activations of `elem` bytes, float32 vectors of N, float32 vectors of M).
TENSORS_MOVED = {
    "tri_rmsnorm_forward_bytes": (2, 1, 1),  # x, y; weight; rstd
    "tri_rmsnorm_backward_bytes": (3, 2, 1),  # dy, x, dx; weight, dweight; rstd
    "tri_layernorm_forward_bytes": (2, 2, 2),  # x, y; weight, bias; mean, rstd
    "tri_layernorm_backward_bytes": (3, 3, 2),  # dy, x, dx; weight, dweight, dbias; mean, rstd
}


def bytes_moved(name, m, n, elem):
    activations, columns, rows = TENSORS_MOVED[name]
    return activations * m * n * elem + 4 * columns * n + 4 * rows * m


def test_the_keyring_holds_the_tests_own_counts():
    from normlab.grader.probes import number_key

    expected = {
        number_key(name, args, "", bytes_moved(name, *args))
        for name in TENSORS_MOVED
        for args in lab.BYTES_CASES
    }
    keys = sorted(expected)
    ring = "\n".join(" ".join(keys[i : i + 4]) for i in range(0, len(keys), 4))
    assert lab.BYTES_KEYRING == expected, f"the keys of this file's counts:\n{ring}"


def _bytes_results(functions):
    from normlab.grader import notebook

    _, res = notebook.run(lab=STEM, **functions)
    return res


def test_right_byte_counts_pass_as_int_or_float():
    def counting(name, cast):
        return lambda m, n, e: cast(bytes_moved(name, m, n, e))

    for cast in (int, float):
        res = _bytes_results({name: counting(name, cast) for name in TENSORS_MOVED})
        assert [r.passed for r in res] == [True] * 4, [r.message for r in res]


def test_a_wrong_byte_count_fails_with_the_hint():
    # the statistics forgotten: the activations and weight only
    res = _bytes_results({"tri_rmsnorm_forward_bytes": lambda m, n, e: 2 * m * n * e + 4 * n})
    assert len(res) == 1 and not res[0].passed
    assert res[0].message.startswith("tri_rmsnorm_forward_bytes(3, 5, 4): 140 is not")
    assert lab.BYTES_HINT in res[0].message
    assert untranslated([res[0].message]) == []
