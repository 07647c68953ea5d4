"""Checks for lab 11, a fused norm as a GPU kernel (Triton), graded on a CPU.

The learner writes, with their own ``@triton.jit`` kernels (one program per row; dweight and
dbias by partial sums over blocks of rows, then a second reduction)::

    tri_rmsnorm_forward(x, weight, eps) -> (y, rstd)
    tri_rmsnorm_backward(dy, x, weight, rstd) -> (dx, dweight)
    tri_layernorm_forward(x, weight, bias, eps) -> (y, mean, rstd)
    tri_layernorm_backward(dy, x, weight, mean, rstd) -> (dx, dweight, dbias)
    TriRMSNorm.apply(x, weight, eps), TriLayerNorm.apply(x, weight, bias, eps)
    tri_rmsnorm_forward_bytes(M, N, elem), ... (the bytes each kernel moves)
    TRI_INTENSITY_ANSWER, TRI_SMALL_D_ANSWER (practice problems)

x is (M, N), float32 or bfloat16; weight and bias float32 (N,); statistics float32.

The grader reaches the kernels through the lab's adapter ``tri_call(name, dtype, *arrays,
eps)``: it casts the activations (x, dy) to ``dtype``, counts the Triton kernels launched
during the call, and returns the function's outputs followed by that count and the outputs'
dtypes. On a CPU the kernels run under Triton's interpreter (``TRITON_INTERPRET=1``, set by the
lab's first cell and by ``normlab grade`` for the child itself).

The oracle is PyTorch in float64 (``F.rms_norm``, ``F.layer_norm`` and autograd through them),
on the very values the learner's kernel receives (bfloat16 inputs are rounded first). Known
mistakes are recognised from the outputs (which rows, columns or statistics are off, and how)
rather than by recomputing each buggy kernel: a Triton kernel's float32 sums run in an order of
its own, so a bug's exact output cannot be reproduced here, but its pattern can.
"""

from __future__ import annotations

import numpy as np

from normlab.grader import inert
from normlab.grader.core import AsTorch, CheckFailed, Lab
from normlab.grader.forbidden import from_scratch
from normlab.grader.probes import Probe, choice, expect_value, item_of

LAB = Lab(
    stem="11_triton_kernels",
    title="11. A fused norm as a GPU kernel (Triton), graded on a CPU",
    torch=True,  # the kernels' wrappers take and return tensors: the sandbox does not hide it
    forbidden=from_scratch("tri_call"),
    # The interpreter runs each program instance in NumPy, and the first launch of each kernel
    # traces it: a few CPU seconds on a busy machine.
    call_timeouts={"tri_call": 60.0},
    extra=("triton", "make kernels"),
    # The child runs the kernels under Triton's interpreter whatever the notebook says, and
    # Triton's cache and home are in the submission's own folder (counted against its limits).
    environment={
        "TRITON_INTERPRET": "1",
        "TRITON_HOME": "{home}",
        "TRITON_CACHE_DIR": "{home}/.triton/cache",
    },
)

EPS = 1e-5
WIDTHS = (1, 7, 100, 257)  # not powers of two (but 1): the masked tail of a block is graded
# several rows, then one (a program per row). Several first: there a load without its mask reads
# the next row's elements, a pattern the checks can name; past a single row's end it reads
# whatever memory follows the tensor, which differs from run to run and names nothing.
ROWS = (5, 1)
BWD_ROWS = 37  # more rows than one block of the dweight partial sums, and not a multiple of it

# float32 spacing just above 1 is 2**-23; an output y = (x - mean) * rstd * w rounded a handful
# of times is within a few 2**-24 |y| of exact. The statistics are sums of N terms: a tree sum
# (tl.sum) loses log2(N) half-spacings, a loop over blocks of the row up to N / BLOCK more, so
# for N <= 257 everything right is within 2**-16 (1.5e-5) relative; atol for outputs near 0.
F32_TOL = {"rtol": 2.0**-16, "atol": 2.0**-16}
# A bfloat16 output is a float32 result converted once. On a GPU the conversion rounds to
# nearest (within half a spacing, 2**-8 |y|); Triton 3.9's interpreter truncates (measured
# here: values one whole spacing below the float32 result), so a right answer is within one
# spacing, 2**-7 |y|, plus the float32 error above. Statistics stay float32: the F32_TOL bound
# holds for rstd and mean even with bfloat16 x (the input values are exact in float32).
BF16_TOL = {"rtol": 2.0**-7 + 2.0**-16, "atol": 2.0**-16}
# Gradients: dx of a bfloat16 x is rounded once as well; dweight and dbias are float32 sums over
# M rows (partial sums per block, then a second reduction): within 2**-14 relative of the
# float64 sum for M <= 64 rows, atol for entries that cancel to near 0.
GRAD_TOL = {"rtol": 2.0**-14, "atol": 2.0**-14}


# ----------------------------------------------------------------------------- oracles


def _t(a):
    import torch

    return torch.as_tensor(np.asarray(a, np.float64))


def bf16_values(a):
    """a rounded to bfloat16, held as float32 (every bfloat16 value is a float32 value)."""
    import torch

    return torch.as_tensor(np.asarray(a, np.float32)).bfloat16().float().numpy()


def oracle_rms(x, weight, eps):
    import torch.nn.functional as F

    x64 = _t(x)
    y = F.rms_norm(x64, (x64.shape[-1],), _t(weight), eps)
    rstd = 1.0 / (x64.pow(2).mean(-1) + eps).sqrt()
    return y.numpy(), rstd.numpy()


def oracle_ln(x, weight, bias, eps):
    import torch.nn.functional as F

    x64 = _t(x)
    y = F.layer_norm(x64, (x64.shape[-1],), _t(weight), _t(bias), eps)
    mean = x64.mean(-1)
    rstd = 1.0 / (x64.var(-1, correction=0) + eps).sqrt()
    return y.numpy(), mean.numpy(), rstd.numpy()


def oracle_rms_grads(dy, x, weight, eps):
    import torch
    import torch.nn.functional as F

    x64, w64 = _t(x).requires_grad_(), _t(weight).requires_grad_()
    y = F.rms_norm(x64, (x64.shape[-1],), w64, eps)
    dx, dw = torch.autograd.grad(y, (x64, w64), _t(dy))
    return dx.numpy(), dw.numpy()


def oracle_ln_grads(dy, x, weight, bias, eps):
    import torch
    import torch.nn.functional as F

    x64 = _t(x).requires_grad_()
    w64, b64 = _t(weight).requires_grad_(), _t(bias).requires_grad_()
    y = F.layer_norm(x64, (x64.shape[-1],), w64, b64, eps)
    dx, dw, db = torch.autograd.grad(y, (x64, w64, b64), _t(dy))
    return dx.numpy(), dw.numpy(), db.numpy()


# ----------------------------------------------------------------------------- inputs


def rows(m: int, n: int, seed: int, offset: float = 0.0) -> np.ndarray:
    """(m, n) float32 rows of varied scale; ``offset``: a common mean far from 0 (LayerNorm)."""
    rng = np.random.default_rng(seed)
    scale = np.exp(rng.uniform(-1.0, 1.0, (m, 1)))
    return (offset + scale * rng.standard_normal((m, n))).astype(np.float32)


def params(n: int, seed: int):
    rng = np.random.default_rng(seed)
    weight = (1.0 + 0.5 * rng.standard_normal(n)).astype(np.float32)
    bias = (0.5 * rng.standard_normal(n)).astype(np.float32)
    return weight, bias


# ----------------------------------------------------------------------------- diagnosis

MASK_HINT = (
    "Each row's statistics include the first elements of the next row: a load without `mask=cols < N` (and `other=0.0`) reads the next row's "
    "elements into this row's sums, and a store without the mask writes past the row. A block "
    "is a power of two wide (`triton.next_power_of_2(N)`); mask every load and store."
)
BLOCK_HINT = (
    "The statistics are those of the first columns of each row alone: the block is "
    "narrower than the row, so one program sees only part of it. Use a block of "
    "`triton.next_power_of_2(N)` columns, or loop over the row in blocks for both the "
    "statistics and the output."
)
DTYPE_HINT = (
    "The float32 statistics are wrong for a bfloat16 x (and right for float32): "
    "they were computed in the input's dtype. On a GPU that costs about one bfloat16 spacing; "
    "Triton 3.9's interpreter does not even compute bfloat16 arithmetic right. Convert the loaded row with "
    "`.to(tl.float32)` before the sums, and cast only the stored y back to x's dtype."
)
SHORTCUT_HINT = (
    "The variance is right for rows centred near 0 and wrong for rows with a large mean: "
    "E[x^2] - E[x]^2 cancels catastrophically in float32 when |mean| >> std. Subtract the mean "
    "first, var = sum((x - mean)^2) / N (the row is in registers: the second pass is free)."
)
EPS_HINT = (
    "eps is not where it belongs: rstd = 1 / sqrt(mean(x^2) + eps) for RMSNorm and "
    "1 / sqrt(var + eps) for LayerNorm, with eps inside the root."
)
UNBIASED_HINT = "The variance is the biased one: divide by N, not N - 1."
WEIGHT_HINT = "y is the normalized row times weight (plus bias for LayerNorm): check both."
DW_AXIS_HINT = (
    "dweight (or dbias) is a sum over the rows (axis 0, the M rows), one value per column: "
    "shape (N,). A sum over each row's columns gives one value per row instead."
)
DW_PARTIAL_HINT = (
    "dweight (or dbias) holds only part of the rows' sum: the partial sums of the row blocks "
    "must all be added in the second reduction (one partial per block of rows, summed over "
    "the blocks)."
)
DX_HINT = (
    "dx misses a term: for RMSNorm dx = rstd * (w*dy - xhat * mean(w*dy * xhat)), for "
    "LayerNorm dx = rstd * (w*dy - mean(w*dy) - xhat * mean(w*dy * xhat)), with xhat the "
    "normalized row, all in float32."
)


def _read_from_the_pattern(*args, **kwargs):
    """These mistakes are recognised from the pattern of an answer's errors (see the module's
    docstring), never recomputed: a Triton kernel's sums run in an order of its own."""
    raise ValueError("recognised from the answer's pattern, not recomputed")


#: The known mistakes the checks name; each is proven by tests/test_triton_kernels_checks.py
#: with the bug written as a change of the solution's kernels.
DIAGNOSES = [
    Probe("missing mask", MASK_HINT, _read_from_the_pattern),
    Probe("block smaller than the row", BLOCK_HINT, _read_from_the_pattern),
    Probe("statistics in the input dtype", DTYPE_HINT, _read_from_the_pattern),
    Probe("E[x^2] - E[x]^2 shortcut", SHORTCUT_HINT, _read_from_the_pattern),
    Probe("eps misplaced", EPS_HINT, _read_from_the_pattern),
    Probe("unbiased variance", UNBIASED_HINT, _read_from_the_pattern),
    Probe("weight or bias missing", WEIGHT_HINT, _read_from_the_pattern),
    Probe("dweight over the wrong axis", DW_AXIS_HINT, _read_from_the_pattern),
    Probe("dweight from one block of rows", DW_PARTIAL_HINT, _read_from_the_pattern),
    Probe("dx misses a term", DX_HINT, _read_from_the_pattern),
]
PROBE_NAMES = tuple(p.name for p in DIAGNOSES)


def _close(got, expected, tol) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.isclose(got, expected, **tol) & np.isfinite(got)


def _fail(what: str, detail: str, hints: list[tuple[str, str]]):
    lines = [f"{what}: {detail}"]
    for i, (_, hint) in enumerate(hints):
        lines.append(("Why: " if i == 0 else "Or: ") + hint)
    raise CheckFailed("\n".join(lines), probes=[name for name, _ in hints])


def _array(out, index: int, what: str, shape, name: str) -> np.ndarray:
    item = item_of(out, index, what)
    if item.array is None or item.kind not in ("tensor", "ndarray"):
        raise CheckFailed(f"{what}: {name} should be a tensor; found {inert.clip(item.kind)}")
    got = np.asarray(item.array, np.float64)
    if got.shape != tuple(shape):
        _fail(what, f"{name} has shape {got.shape}, expected {tuple(shape)}", [])
    return got


def _expect_count(out, count: int, what: str):
    """tri_call returns the function's outputs, the launch count and the dtypes."""
    if not out.is_tuple or len(out.items) != count + 2:
        found = len(out.items) - 2 if out.is_tuple and len(out.items) >= 2 else 0
        raise CheckFailed(f"{what}: expected a tuple of {count} tensors, found {found}")


def _launched(out, count: int, what: str):
    launches = out.items[count].array
    if launches is None or int(np.asarray(launches)) < 1:
        raise CheckFailed(
            f"{what}: no @triton.jit kernel was launched during the call. This lab grades "
            "your own Triton kernels; a wrapper computing with torch operations earns no "
            "points here."
        )


def _dtypes(out, index: int) -> list[str]:
    item = out.items[index]
    return str(item.array.item()).split(",") if item.array is not None else []


def _dx_hints(got, dy, x, weight, rstd, mean, kind):
    """dx without one of its terms (the mean of w*dy, or the projection on xhat)."""
    x64, g = np.asarray(x, np.float64), np.asarray(dy, np.float64) * np.asarray(weight, np.float64)
    r = np.asarray(rstd, np.float64)[:, None]
    xhat = (x64 - (0.0 if mean is None else np.asarray(mean, np.float64)[:, None])) * r
    projection = xhat * (g * xhat).mean(-1, keepdims=True)
    centre = g.mean(-1, keepdims=True) if kind == "ln" else 0.0
    variants = [r * (g - projection), r * (g - centre)] if kind == "ln" else [r * g]
    for variant in variants:
        if np.allclose(got, variant, rtol=2.0**-10, atol=2.0**-10):
            return [("dx misses a term", DX_HINT)]
    return []


def _check_rows(got, expected, what, name, tol, hints):
    bad = ~_close(got, expected, tol)
    if bad.any():
        r, c = np.argwhere(bad)[0] if got.ndim == 2 else (np.argwhere(bad)[0][0], None)
        where = f"row {r}, column {c}" if c is not None else f"index {r}"
        value = got[(r, c)] if c is not None else got[r]
        right = expected[(r, c)] if c is not None else expected[r]
        detail = (
            f"{name} is wrong at {int(bad.sum())} of {bad.size} entries (first at {where}: "
            f"{value:.7g}, expected {right:.7g})"
        )
        _fail(what, detail, hints)


def _spread(part, n, kind):
    """The row statistic the kernel divides by N: mean square (RMSNorm) or variance."""
    if kind == "rms":
        return (part**2).sum(-1) / n
    mean = part.sum(-1, keepdims=True) / n
    return ((part - mean) ** 2).sum(-1) / n


def _block_hints(got_rstd, x, eps, kind):
    """rstd of a program that saw the wrong columns: only the first B (a power of two below N:
    a short block), or B columns from the row's start running into the next row (no mask)."""
    x64 = np.asarray(x, np.float64)
    m, n = x64.shape
    close = lambda a, b: np.allclose(a, b, rtol=2.0**-14, atol=0)  # noqa: E731
    width = 1
    while width < n:
        if close(got_rstd, 1 / np.sqrt(_spread(x64[:, :width], n, kind) + eps)):
            return [("block smaller than the row", BLOCK_HINT)]
        width *= 2
    if width > n and m > 1:  # the last row reads past the tensor: compare the rows before it
        flat = np.concatenate([x64.ravel(), np.zeros(width)])
        spilled = np.stack([flat[r * n : r * n + width] for r in range(m - 1)])
        if close(got_rstd[:-1], 1 / np.sqrt(_spread(spilled, n, kind) + eps)):
            return [("missing mask", MASK_HINT)]
    return []


def _norm_hints(got_rstd, x, eps, kind):
    """eps outside the root or ignored, the unbiased variance: recognised from rstd itself."""
    x64 = np.asarray(x, np.float64)
    n = x64.shape[-1]
    if kind == "rms":
        ms = (x64**2).mean(-1)
        variants = {
            "eps misplaced": [1 / (np.sqrt(ms) + eps), 1 / np.sqrt(ms)],
        }
    else:
        var = x64.var(-1)
        variants = {
            "eps misplaced": [1 / (np.sqrt(var) + eps), 1 / np.sqrt(var)],
            "unbiased variance": [1 / np.sqrt(var * n / max(n - 1, 1) + eps)] if n > 1 else [],
        }
    hints = {"eps misplaced": EPS_HINT, "unbiased variance": UNBIASED_HINT}
    found = []
    for name, candidates in variants.items():
        if any(np.allclose(got_rstd, c, rtol=2.0**-14, atol=0) for c in candidates):
            found.append((name, hints[name]))
    return found


# ----------------------------------------------------------------------------- forward checks


def _forward(sub, kind, m, n, dtype, seed, offset=0.0):
    x = rows(m, n, seed, offset)
    if dtype == "bfloat16":
        x = bf16_values(x)
    weight, bias = params(n, seed + 1)
    what = f"tri_{'rmsnorm' if kind == 'rms' else 'layernorm'}_forward, x {dtype} ({m}, {n})"
    name = "tri_rmsnorm_forward" if kind == "rms" else "tri_layernorm_forward"
    if kind == "rms":
        out = sub.call("tri_call", name, dtype, AsTorch(x), AsTorch(weight), EPS)
        y, rstd = oracle_rms(x, weight, EPS)
        stats = {"rstd": (1, rstd)}
        count = 2
    else:
        out = sub.call("tri_call", name, dtype, AsTorch(x), AsTorch(weight), AsTorch(bias), EPS)
        y, mean, rstd = oracle_ln(x, weight, bias, EPS)
        stats = {"mean": (1, mean), "rstd": (2, rstd)}
        count = 3
    _expect_count(out, count, what)
    _launched(out, count, what)
    got_y = _array(out, 0, what, (m, n), "y")
    dtypes = _dtypes(out, count + 1)
    if dtypes and dtypes[0] != f"torch.{dtype}":
        raise CheckFailed(
            f"{what}: y is {inert.clip(dtypes[0])}; it should have x's dtype, torch.{dtype}"
        )
    for stat, dt in zip(stats, dtypes[1:], strict=False):
        if dt != "torch.float32":
            raise CheckFailed(f"{what}: {stat} is {inert.clip(dt)}; statistics are float32")
    got_stats = {s: _array(out, i, what, (m,), s) for s, (i, _) in stats.items()}
    tol = BF16_TOL if dtype == "bfloat16" else F32_TOL
    hints = []
    for stat, (_, right) in stats.items():
        got = got_stats[stat]
        if hints:
            break
        if _close(got, right, F32_TOL).all():
            continue
        if stat == "rstd":
            hints += _block_hints(got, x, EPS, kind) + _norm_hints(got, x, EPS, kind)
        if dtype == "bfloat16" and not hints:
            hints.append(("statistics in the input dtype", DTYPE_HINT))
        if kind == "ln" and stat == "rstd" and offset:
            centred = np.abs(x.astype(np.float64).mean(-1)) < 10
            if centred.any() and _close(got[centred], right[centred], F32_TOL).all():
                hints.append(("E[x^2] - E[x]^2 shortcut", SHORTCUT_HINT))
        _check_rows(got, right, what, stat, F32_TOL, hints)
    if not hints and not _close(got_y, y, tol).all():
        hints.append(("weight or bias missing", WEIGHT_HINT))
    _check_rows(got_y, y, what, "y", tol, hints)


@LAB.check(points=2, uses=["tri_rmsnorm_forward", "tri_call"])
def rms_forward_f32(sub):
    """RMSNorm forward kernel, float32, widths 1, 7, 100, 257"""
    for i, n in enumerate(WIDTHS):
        for m in ROWS:
            _forward(sub, "rms", m, n, "float32", 10 * i + m)


@LAB.check(points=1, uses=["tri_rmsnorm_forward", "tri_call"])
def rms_forward_bf16(sub):
    """RMSNorm forward kernel, bfloat16 input, float32 statistics"""
    for i, n in enumerate((7, 257)):
        _forward(sub, "rms", 5, n, "bfloat16", 100 + i)


@LAB.check(points=2, uses=["tri_layernorm_forward", "tri_call"])
def ln_forward_f32(sub):
    """LayerNorm forward kernel, float32, widths 1, 7, 100, 257"""
    for i, n in enumerate(WIDTHS):
        for m in ROWS:
            _forward(sub, "ln", m, n, "float32", 20 * i + m)


@LAB.check(points=1, uses=["tri_layernorm_forward", "tri_call"])
def ln_forward_offset(sub):
    """LayerNorm forward kernel, rows far from 0 (mean 300 x std)"""
    # rows 0-2 centred near 0, rows 3-5 with a mean of 300: E[x^2] - E[x]^2 in float32 loses
    # log2(300^2) ~ 16 of float32's 24 bits there, far outside F32_TOL.
    x = np.concatenate([rows(3, 100, 7), rows(3, 100, 8, offset=300.0)])
    weight, bias = params(100, 9)
    what = "tri_layernorm_forward, x float32 (6, 100), three rows with mean 300"
    out = sub.call(
        "tri_call",
        "tri_layernorm_forward",
        "float32",
        AsTorch(x),
        AsTorch(weight),
        AsTorch(bias),
        EPS,
    )
    _expect_count(out, 3, what)
    _launched(out, 3, what)
    y, mean, rstd = oracle_ln(x, weight, bias, EPS)
    got_rstd = _array(out, 2, what, (6,), "rstd")
    hints = []
    if not _close(got_rstd, rstd, F32_TOL).all() and _close(got_rstd[:3], rstd[:3], F32_TOL).all():
        hints.append(("E[x^2] - E[x]^2 shortcut", SHORTCUT_HINT))
    _check_rows(got_rstd, rstd, what, "rstd", F32_TOL, hints)
    _check_rows(_array(out, 0, what, (6, 100), "y"), y, what, "y", F32_TOL, [])


@LAB.check(points=1, uses=["tri_layernorm_forward", "tri_call"])
def ln_forward_bf16(sub):
    """LayerNorm forward kernel, bfloat16 input, float32 statistics"""
    for i, n in enumerate((7, 257)):
        _forward(sub, "ln", 5, n, "bfloat16", 200 + i)


# ----------------------------------------------------------------------------- backward checks


def _backward(sub, kind, m, n, dtype, seed):
    x = rows(m, n, seed)
    dy = rows(m, n, seed + 50)
    if dtype == "bfloat16":
        x, dy = bf16_values(x), bf16_values(dy)
    weight, bias = params(n, seed + 1)
    name = "tri_rmsnorm_backward" if kind == "rms" else "tri_layernorm_backward"
    what = f"{name}, x {dtype} ({m}, {n})"
    if kind == "rms":
        _, rstd = oracle_rms(x, weight, EPS)
        rstd = rstd.astype(np.float32)
        out = sub.call(
            "tri_call", name, dtype, AsTorch(dy), AsTorch(x), AsTorch(weight), AsTorch(rstd)
        )
        expected = oracle_rms_grads(dy, x, weight, EPS)
        names = ("dx", "dweight")
    else:
        _, mean, rstd = oracle_ln(x, weight, bias, EPS)
        mean, rstd = mean.astype(np.float32), rstd.astype(np.float32)
        out = sub.call(
            "tri_call",
            name,
            dtype,
            AsTorch(dy),
            AsTorch(x),
            AsTorch(weight),
            AsTorch(mean),
            AsTorch(rstd),
        )
        expected = oracle_ln_grads(dy, x, weight, bias, EPS)
        names = ("dx", "dweight", "dbias")
    count = len(names)
    _expect_count(out, count, what)
    _launched(out, count, what)
    dtypes = _dtypes(out, count + 1)
    if dtypes and dtypes[0] != f"torch.{dtype}":
        raise CheckFailed(f"{what}: dx is {dtypes[0]}; it should have x's dtype, torch.{dtype}")
    # dx of bfloat16 x: one conversion (one spacing under the interpreter, see BF16_TOL) of a
    # float32 value; atol for entries that cancel to near 0
    dx_tol = {"rtol": 2.0**-7 + 2.0**-14, "atol": 2.0**-12} if dtype == "bfloat16" else GRAD_TOL
    for i, (label, right) in enumerate(zip(names, expected, strict=True)):
        shape = (m, n) if label == "dx" else (n,)
        item = item_of(out, i, what)
        got = np.asarray(item.array, np.float64) if item.array is not None else None
        if got is None or got.shape != shape:
            hints = []
            if label != "dx" and got is not None and got.shape == (m,):
                hints = [("dweight over the wrong axis", DW_AXIS_HINT)]
            if got is None:
                raise CheckFailed(
                    f"{what}: {label} should be a tensor; found {inert.clip(item.kind)}"
                )
            _fail(what, f"{label} has shape {got.shape}, expected {shape}", hints)
        tol = dx_tol if label == "dx" else GRAD_TOL
        hints = []
        if label == "dx":
            if not _close(got, right, tol).all():
                hints = _dx_hints(got, dy, x, weight, rstd, mean if kind == "ln" else None, kind)
        elif not _close(got, right, tol).all():
            # the sum of the first rows only (one block's partial sums, never reduced further)
            x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
            if label == "dbias":
                contrib = dy64
            elif kind == "rms":
                contrib = dy64 * x64 * rstd[:, None]
            else:
                contrib = dy64 * (x64 - mean[:, None]) * rstd[:, None]
            for block in range(1, m):
                if np.allclose(got, contrib[:block].sum(0), rtol=2.0**-12, atol=2.0**-12):
                    hints = [("dweight from one block of rows", DW_PARTIAL_HINT)]
                    break
        _check_rows(got, right, what, label, tol, hints)


@LAB.check(points=2, uses=["tri_rmsnorm_backward", "tri_call"])
def rms_backward_f32(sub):
    """RMSNorm backward kernels: dx per row, dweight by partial sums (float32)"""
    for i, n in enumerate((1, 7, 257)):
        _backward(sub, "rms", 1, n, "float32", 300 + i)
        _backward(sub, "rms", BWD_ROWS, n, "float32", 310 + i)


@LAB.check(points=1, uses=["tri_rmsnorm_backward", "tri_call"])
def rms_backward_bf16(sub):
    """RMSNorm backward kernels, bfloat16 input"""
    _backward(sub, "rms", BWD_ROWS, 100, "bfloat16", 320)


@LAB.check(points=2, uses=["tri_layernorm_backward", "tri_call"])
def ln_backward_f32(sub):
    """LayerNorm backward kernels: dx per row, dweight and dbias by partial sums (float32)"""
    for i, n in enumerate((1, 7, 257)):
        _backward(sub, "ln", 1, n, "float32", 400 + i)
        _backward(sub, "ln", BWD_ROWS, n, "float32", 410 + i)


@LAB.check(points=1, uses=["tri_layernorm_backward", "tri_call"])
def ln_backward_bf16(sub):
    """LayerNorm backward kernels, bfloat16 input"""
    _backward(sub, "ln", BWD_ROWS, 100, "bfloat16", 420)


# ----------------------------------------------------------------------------- autograd


def _autograd(sub, kind):
    m, n = 9, 100
    x, dy = rows(m, n, 500), rows(m, n, 501)
    weight, bias = params(n, 502)
    name = "TriRMSNorm" if kind == "rms" else "TriLayerNorm"
    what = f"{name}.apply, then backward, x float32 ({m}, {n})"
    if kind == "rms":
        out = sub.call("tri_call", name, "float32", AsTorch(x), AsTorch(weight), AsTorch(dy), EPS)
        y = oracle_rms(x, weight, EPS)[0]
        grads = oracle_rms_grads(dy, x, weight, EPS)
        labels = ("y", "dx", "dweight")
    else:
        out = sub.call(
            "tri_call",
            name,
            "float32",
            AsTorch(x),
            AsTorch(weight),
            AsTorch(bias),
            AsTorch(dy),
            EPS,
        )
        y = oracle_ln(x, weight, bias, EPS)[0]
        grads = oracle_ln_grads(dy, x, weight, bias, EPS)
        labels = ("y", "dx", "dweight", "dbias")
    count = len(labels)
    _expect_count(out, count, what)
    _launched(out, count, what)
    for i, (label, right) in enumerate(zip(labels, (y, *grads), strict=True)):
        item = item_of(out, i, what)
        if item.array is None:
            raise CheckFailed(
                f"{what}: {label} is missing (None): backward must return a gradient for x, "
                "weight (and bias), and None for eps"
            )
        got = np.asarray(item.array, np.float64)
        if got.shape != right.shape:
            raise CheckFailed(f"{what}: {label} has shape {got.shape}, expected {right.shape}")
        _check_rows(got, right, what, label, F32_TOL if label == "y" else GRAD_TOL, [])


@LAB.check(points=1, uses=["TriRMSNorm", "tri_call"])
def rms_autograd(sub):
    """TriRMSNorm: an autograd.Function over the two kernels"""
    _autograd(sub, "rms")


@LAB.check(points=1, uses=["TriLayerNorm", "tri_call"])
def ln_autograd(sub):
    """TriLayerNorm: an autograd.Function over the two kernels"""
    _autograd(sub, "ln")


# ----------------------------------------------------------------------------- bytes moved

# The bytes each kernel reads and writes in DRAM, for x of M rows and N columns of ``elem``
# bytes, float32 weight, bias and statistics; the (few) partial sums of the dweight reduction
# are left out (blocks x N floats, with blocks << M). Written from the kernels' loads and stores.
BYTES = {
    # reads x and weight, writes y and rstd
    "tri_rmsnorm_forward_bytes": lambda m, n, e: 2 * m * n * e + 4 * n + 4 * m,
    # reads dy, x, weight, rstd; writes dx and dweight
    "tri_rmsnorm_backward_bytes": lambda m, n, e: 3 * m * n * e + 4 * n + 4 * m + 4 * n,
    # reads x, weight, bias; writes y, mean, rstd
    "tri_layernorm_forward_bytes": lambda m, n, e: 2 * m * n * e + 8 * n + 8 * m,
    # reads dy, x, weight, mean, rstd; writes dx, dweight, dbias
    "tri_layernorm_backward_bytes": lambda m, n, e: 3 * m * n * e + 4 * n + 8 * m + 8 * n,
}
BYTES_CASES = ((8192, 4096, 2), (4096, 4096, 4), (3, 5, 4))


def _bytes_check(name):
    def check(sub):
        for m, n, e in BYTES_CASES:
            right = BYTES[name](m, n, e)
            out = sub.call(name, m, n, e)
            expect_value(
                out,
                lambda v, r=right: isinstance(v, (int, float)) and abs(v - r) <= 1e-9 * r,
                what=f"{name}({m}, {n}, {e})",
                hint=(
                    "Count every tensor the kernel loads or stores once, in bytes: the (M, N) "
                    "activations at `elem` bytes each, weight/bias and the per-row statistics "
                    "at 4 bytes (float32)."
                ),
            )

    check.__name__ = check.__qualname__ = f"check_{name}"
    return check


for _name, _title in (
    ("tri_rmsnorm_forward_bytes", "bytes moved: RMSNorm forward"),
    ("tri_rmsnorm_backward_bytes", "bytes moved: RMSNorm backward"),
    ("tri_layernorm_forward_bytes", "bytes moved: LayerNorm forward"),
    ("tri_layernorm_backward_bytes", "bytes moved: LayerNorm backward"),
):
    LAB.check(_title, points=1, uses=[_name])(_bytes_check(_name))


# ----------------------------------------------------------------------------- practice problems

TRI_INTENSITY_WHY = {
    "a": "The backward does a few multiply-adds per element (about 10 flops) for 3 x 4 bytes "
    "moved per float32 element: under 1 flop per byte, far below the ridge.",
    "c": "Fusing dx and dweight in one kernel saves a pass over memory but changes the flops "
    "per byte little: it stays near 1, far below the ridge of about 13 flop/byte.",
    "d": "The dweight reduction is over a few blocks of partial sums (blocks x N floats), a "
    "small fraction of the 3 M N elements that dominate the bytes.",
}
choice(
    LAB,
    "problem 1: the arithmetic intensity of the RMSNorm backward (multiple choice)",
    points=1,
    name="TRI_INTENSITY_ANSWER",
    key="b",
    hint="Count flops per element (about 10) against bytes per element (3 tensors x 4 bytes) "
    "and compare with the ridge point of the quoted H200 run (50651 GFLOP/s / 3861 GB/s).",
    why=TRI_INTENSITY_WHY,
)

TRI_SMALL_D_WHY = {
    "a": "The interpreter's speed is not what limits a GPU; on a GPU each program is a block "
    "of threads, and the question is how busy they are.",
    "b": "A narrow row needs fewer registers, not more: a small block fits easily.",
    "d": "Masked lanes cost nothing in DRAM traffic; the problem is the work per program, "
    "which shrinks with d, while each launch and program start costs a fixed time.",
}
choice(
    LAB,
    "problem 2: why one program per row stops scaling at small d (multiple choice)",
    points=1,
    name="TRI_SMALL_D_ANSWER",
    key="c",
    hint="Think of what one program does with a row of d = 64 floats (256 bytes) and what it "
    "costs to start a program and reduce over its lanes.",
    why=TRI_SMALL_D_WHY,
)
