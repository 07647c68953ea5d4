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

The checks launch the learner's kernels themselves (``kernel_launch``: from each kernel's
source, with their own grid, constexprs and buffers, the outputs filled with a NaN no arithmetic
makes; in ``normlab grade`` in a companion process where no cell of the notebook ran), and grade
what the kernel stored: the kernel points are earned there. Each check then calls the learner's
wrappers on the same cases through the lab's adapter ``tri_call(name, dtype, *arrays, eps)``,
which casts the activations (x, dy) to ``dtype`` and returns the function's outputs followed by
their dtypes. On a CPU the kernels run under Triton's interpreter (``TRITON_INTERPRET=1``, set
by the lab's first cell and by ``normlab grade`` for the child itself), every load and store
checked before it touches memory.

The oracle is PyTorch in float64 (``F.rms_norm``, ``F.layer_norm`` and autograd through them),
on the very values the learner's kernel receives (bfloat16 inputs are rounded first). Known
mistakes are recognised from the outputs (which rows, columns or statistics are off, and how)
rather than by recomputing each buggy kernel: a Triton kernel's float32 sums run in an order of
its own, so a bug's exact output cannot be reproduced here, but its pattern can.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from normlab.grader import inert, kernel_launch
from normlab.grader.core import AsTorch, CheckFailed, Companion, Lab, NotImplementedYet, RaisedError
from normlab.grader.forbidden import from_scratch
from normlab.grader.kernel_launch import LAUNCH
from normlab.grader.probes import Probe, choice, expect_keyed, item_of

LAB = Lab(
    stem="11_triton_kernels",
    title="11. A fused norm as a GPU kernel (Triton), graded on a CPU",
    torch=True,  # the kernels' wrappers take and return tensors: the sandbox does not hide it
    forbidden=from_scratch("tri_call"),
    # The interpreter runs each program instance in NumPy, and the first launch of each kernel
    # traces it: a few CPU seconds on a busy machine.
    call_timeouts={"tri_call": 60.0, LAUNCH: 60.0},
    extra=("triton", "make kernels"),
    # The child runs the kernels under Triton's interpreter whatever the notebook says, and
    # Triton's cache and home are in the submission's own folder (counted against its limits).
    environment={
        "TRITON_INTERPRET": "1",
        "TRITON_HOME": "{home}",
        "TRITON_CACHE_DIR": "{home}/.triton/cache",
    },
    # The checks launch the notebook's kernels themselves, from their source, in a process
    # where none of the notebook's cells ran (``kernel_launch``): the kernel points are earned
    # by what the kernels write, never by what the notebook says about its launches.
    adapters=("tri_call",),
    companion=Companion((LAUNCH,), kernel_launch.companion_cells, kernel_launch.companion_objects),
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


# ----------------------------------------------------------------------------- the kernels
#
# The lab's contract: each kernel has this signature (the lab states it; its wrappers launch
# the kernels so). The checks launch them themselves, with their own grid and constexprs, on
# buffers of their own: the outputs are filled with NaN, which a kernel must overwrite. A
# spec entry "in"/"out" is a tensor (":rows:K": each program owns K of its rows; ":bfloat16":
# converted first), "value" a number (see ``kernel_launch.Launcher``).

ROWS_PER_BLOCK = 8  # the rows of one program of the dweight partial sums (the ROWS constexpr)
REDUCE_BLOCK = 64  # the columns of one program of the second reduction (BLOCK_N)


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _blocks(m: int) -> int:
    return -(-m // ROWS_PER_BLOCK)


_SAID = re.compile(r"^`[^`]*` raised \w+: ")


def _launch(sub, what, kernel, grid, spec, *args, **constexprs) -> list[np.ndarray]:
    """Launch the learner's ``kernel`` on the check's buffers; the "out" buffers as it left
    them (float64), or CheckFailed saying why the launch failed."""
    try:
        out = sub.call(LAUNCH, kernel, list(grid), list(spec), *args, **constexprs)
    except RaisedError as error:
        said = _SAID.sub("", str(error).split("\n")[0])
        if error.error_type == "KernelNotImplemented":
            raise NotImplementedYet(f"`{kernel}` is not implemented yet") from None
        if error.error_type == "OutOfBounds":
            _fail(what, said, [("missing mask", MASK_HINT)])
        if error.error_type == "KernelRefused":
            _fail(what, said, [])
        _fail(what, f"launching `{kernel}` raised {error.error_type}: {said}", [])
    count = sum(1 for s in spec if s.startswith("out"))
    if not out.is_tuple or len(out.items) != count or any(i.array is None for i in out.items):
        raise CheckFailed(f"{what}: the launch of `{kernel}` returned no buffers")
    return [_Buffer(item.array) for item in out.items]


class _Buffer(np.ndarray):
    """An output buffer as a kernel left it (float64), with ``unwritten``: where it still holds
    the grader's filling (``kernel_launch.UNWRITTEN_BITS``): entries the kernel never stored."""

    def __new__(cls, returned):
        buffer = _float64(returned).view(cls)
        buffer.unwritten = kernel_launch.unwritten(returned)
        return buffer

    def __array_finalize__(self, obj):
        self.unwritten = getattr(obj, "unwritten", None)


def _nan(shape) -> AsTorch:
    return AsTorch(np.full(shape, np.nan, np.float32))


def _act(dtype: str) -> str:
    return ":bfloat16" if dtype == "bfloat16" else ""


# ----------------------------------------------------------------------------- diagnosis

MASK_HINT = (
    "A block is a power of two wide (`triton.next_power_of_2(N)`), wider than the row: its "
    "columns past N are the next row's elements, or memory past the tensor's end. Mask every "
    "load and store of the row with `mask=cols < N` (a load with `other=0.0`): unmasked, a "
    "load reads the next row into this row's sums and a store writes past the row (on a CPU, "
    "into memory that is not the tensor's, which can kill the notebook's kernel)."
)
BLOCK_HINT = (
    "The statistics are those of the first columns of each row alone: the block your "
    "wrapper launches the kernel with is narrower than the row, so one program sees only part "
    "of it. Launch it with a block of `triton.next_power_of_2(N)` columns (or loop over the "
    "row in blocks, for both the statistics and the output)."
)
ZEROED_HINT = (
    "The variance counts the masked columns: they are loaded as 0, so x - mean is -mean "
    "there and adds mean^2 to the sum for each of them. Set them to 0 after subtracting the "
    "mean, `centred = tl.where(cols < N, x - mean, 0.0)`, before squaring."
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
UNWRITTEN_HINT = (
    "The kernel left entries of its output as they were (the grader fills each output with "
    "a NaN of its own before the launch, shown as nan): every program must `tl.store` each "
    "element it owns, for every output (y and the statistics; dx; each block's partial sums)."
)
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
    Probe("masked lanes not zeroed", ZEROED_HINT, _read_from_the_pattern),
    Probe("statistics in the input dtype", DTYPE_HINT, _read_from_the_pattern),
    Probe("E[x^2] - E[x]^2 shortcut", SHORTCUT_HINT, _read_from_the_pattern),
    Probe("eps misplaced", EPS_HINT, _read_from_the_pattern),
    Probe("unbiased variance", UNBIASED_HINT, _read_from_the_pattern),
    Probe("weight or bias missing", WEIGHT_HINT, _read_from_the_pattern),
    Probe("output left unwritten", UNWRITTEN_HINT, _read_from_the_pattern),
    Probe("dweight over the wrong axis", DW_AXIS_HINT, _read_from_the_pattern),
    Probe("dweight from one block of rows", DW_PARTIAL_HINT, _read_from_the_pattern),
    Probe("dx misses a term", DX_HINT, _read_from_the_pattern),
]
PROBE_NAMES = tuple(p.name for p in DIAGNOSES)


def _quietly(check):
    """A check whose NumPy arithmetic on returned values (NaN, garbage an unwritten output
    holds) prints no RuntimeWarning into the learner's report."""

    @functools.wraps(check)
    def quiet(sub):
        with np.errstate(all="ignore"):
            return check(sub)

    return quiet


def _float64(values) -> np.ndarray:
    """A returned array as float64, quietly: an output a kernel never wrote (``torch.empty``)
    may hold signalling NaNs, whose conversion would print NumPy's "invalid value encountered
    in cast" into the learner's report."""
    with np.errstate(all="ignore"):
        return np.asarray(values, np.float64)


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
    got = _float64(item.array)
    if got.shape != tuple(shape):
        _fail(what, f"{name} has shape {got.shape}, expected {tuple(shape)}", [])
    return got


def _expect_count(out, count: int, what: str):
    """tri_call returns the function's outputs, then their dtypes. The lab's earlier adapter
    put a launch count between them: a learner's copy made before may still have it, and it
    is passed over (it decides nothing)."""
    earlier = (
        out.is_tuple
        and len(out.items) == count + 2
        and out.items[count].kind == "scalar"
        and out.items[-1].kind == "str"
    )
    if not out.is_tuple or (len(out.items) != count + 1 and not earlier):
        found = len(out.items) - 1 if out.is_tuple and len(out.items) >= 1 else 0
        raise CheckFailed(f"{what}: expected a tuple of {count} tensors, found {found}")


def _dtypes(out, index: int) -> list[str]:
    """The outputs' dtypes: the adapter's last item (``index``: where it is with no count)."""
    item = out.items[-1] if out.items[-1].kind == "str" else out.items[index]
    return str(item.array.item()).split(",") if item.array is not None else []


def _unwritten(got) -> list[tuple[str, str]]:
    """The grader's NaN still in a kernel's output: entries the kernel never stored."""
    marks = getattr(got, "unwritten", None)
    if marks is None or np.shape(marks) != np.shape(got) or not np.any(marks):
        return []
    return [("output left unwritten", UNWRITTEN_HINT)]


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


def _block_hints(stat, got, x, eps, kind):
    """A statistic of a program that saw only the first B columns (B a power of two below N):
    a wrapper that launches the kernel with a block narrower than the row."""
    x64 = np.asarray(x, np.float64)
    n = x64.shape[-1]
    width = 1
    while width < n:
        part = x64[:, :width]
        if stat == "mean":
            candidate = part.sum(-1) / n
        else:
            candidate = 1 / np.sqrt(_spread(part, n, kind) + eps)
        if np.allclose(got, candidate, rtol=2.0**-14, atol=2.0**-20):
            return [("block smaller than the row", BLOCK_HINT)]
        width *= 2
    return []


def _zeroed_hints(got_rstd, x, eps):
    """LayerNorm's rstd with the masked lanes (loaded as 0) left at -mean in the variance."""
    x64 = np.asarray(x, np.float64)
    n = x64.shape[-1]
    masked = _next_power_of_2(n) - n
    if not masked:
        return []
    mean = x64.mean(-1)
    var = (((x64 - mean[:, None]) ** 2).sum(-1) + masked * mean**2) / n
    if np.allclose(got_rstd, 1 / np.sqrt(var + eps), rtol=2.0**-14, atol=0):
        return [("masked lanes not zeroed", ZEROED_HINT)]
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


def _forward_case(kind, m, n, dtype, seed, offset=0.0):
    x = rows(m, n, seed, offset)
    if dtype == "bfloat16":
        x = bf16_values(x)
    weight, bias = params(n, seed + 1)
    if kind == "rms":
        y, rstd = oracle_rms(x, weight, EPS)
        stats = {"rstd": rstd}
    else:
        y, mean, rstd = oracle_ln(x, weight, bias, EPS)
        stats = {"mean": mean, "rstd": rstd}
    return x, weight, bias, y, stats


def _grade_forward(what, kind, x, dtype, offset, got_y, got_stats, y, stats, wrapper):
    """The outputs of a forward kernel (or of its wrapper, ``wrapper``) against the oracle."""
    tol = BF16_TOL if dtype == "bfloat16" else F32_TOL
    for stat, right in stats.items():
        got = got_stats[stat]
        if _close(got, right, F32_TOL).all():
            continue
        hints = [] if wrapper else _unwritten(got)
        if wrapper and not hints:
            hints = _block_hints(stat, got, x, EPS, kind)
        if stat == "rstd" and not hints:
            hints = _norm_hints(got, x, EPS, kind)
            if kind == "ln" and not hints:
                hints = _zeroed_hints(got, x, EPS)
        if dtype == "bfloat16" and not hints:
            hints.append(("statistics in the input dtype", DTYPE_HINT))
        if kind == "ln" and stat == "rstd" and offset and not hints:
            centred = np.abs(x.astype(np.float64).mean(-1)) < 10
            if centred.any() and _close(got[centred], right[centred], F32_TOL).all():
                hints.append(("E[x^2] - E[x]^2 shortcut", SHORTCUT_HINT))
        _check_rows(got, right, what, stat, F32_TOL, hints)
    hints = [] if wrapper else _unwritten(got_y)
    if not hints and not _close(got_y, y, tol).all():
        hints.append(("weight or bias missing", WEIGHT_HINT))
    _check_rows(got_y, y, what, "y", tol, hints)


def _forward_kernel(sub, kind, m, n, dtype, seed, offset=0.0):
    """The learner's forward kernel, launched by the grader: one program per row."""
    x, weight, bias, y, stats = _forward_case(kind, m, n, dtype, seed, offset)
    act, row = _act(dtype), ":rows:1"
    block = _next_power_of_2(n)
    if kind == "rms":
        kernel = "_rms_fwd_kernel"
        spec = ["in" + act + row, "in", "out" + act + row, "out" + row, "value", "value"]
        args = [AsTorch(x), AsTorch(weight), _nan((m, n)), _nan((m,)), n, EPS]
    else:
        kernel = "_ln_fwd_kernel"
        spec = ["in" + act + row, "in", "in", "out" + act + row]
        spec += ["out" + row, "out" + row, "value", "value"]
        args = [AsTorch(x), AsTorch(weight), AsTorch(bias), _nan((m, n)), _nan((m,))]
        args += [_nan((m,)), n, EPS]
    what = f"`{kernel}`, x {dtype} ({m}, {n}), grid ({m},), BLOCK={block}"
    got = _launch(sub, what, kernel, (m,), spec, *args, BLOCK=block)
    got_stats = dict(zip(stats, got[1:], strict=True))
    _grade_forward(what, kind, x, dtype, offset, got[0], got_stats, y, stats, wrapper=False)


def _forward_wrapper(sub, kind, m, n, dtype, seed, offset=0.0):
    """The learner's wrapper (through ``tri_call``), once its kernel passed."""
    x, weight, bias, y, stats = _forward_case(kind, m, n, dtype, seed, offset)
    name = "tri_rmsnorm_forward" if kind == "rms" else "tri_layernorm_forward"
    what = f"{name}, x {dtype} ({m}, {n})"
    if kind == "rms":
        out = sub.call("tri_call", name, dtype, AsTorch(x), AsTorch(weight), EPS)
    else:
        out = sub.call("tri_call", name, dtype, AsTorch(x), AsTorch(weight), AsTorch(bias), EPS)
    count = 1 + len(stats)
    _expect_count(out, count, what)
    got_y = _array(out, 0, what, (m, n), "y")
    dtypes = _dtypes(out, count)
    if dtypes and dtypes[0] != f"torch.{dtype}":
        raise CheckFailed(
            f"{what}: y is {inert.clip(dtypes[0])}; it should have x's dtype, torch.{dtype}"
        )
    for stat, dt in zip(stats, dtypes[1:], strict=False):
        if dt != "torch.float32":
            raise CheckFailed(f"{what}: {stat} is {inert.clip(dt)}; statistics are float32")
    got_stats = {s: _array(out, 1 + i, what, (m,), s) for i, s in enumerate(stats)}
    _grade_forward(what, kind, x, dtype, offset, got_y, got_stats, y, stats, wrapper=True)


def _forward(sub, kind, cases, dtype):
    """Every case's kernel launched by the grader first (the kernel points), then the same
    cases through the learner's wrapper."""
    for m, n, seed in cases:
        _forward_kernel(sub, kind, m, n, dtype, seed)
    for m, n, seed in cases:
        _forward_wrapper(sub, kind, m, n, dtype, seed)


def _f32_cases(step):
    return [(m, n, step * i + m) for i, n in enumerate(WIDTHS) for m in ROWS]


@LAB.check(points=2, uses=["tri_rmsnorm_forward", "tri_call"])
@_quietly
def rms_forward_f32(sub):
    """RMSNorm forward kernel, float32, widths 1, 7, 100, 257"""
    _forward(sub, "rms", _f32_cases(10), "float32")


@LAB.check(points=1, uses=["tri_rmsnorm_forward", "tri_call"])
@_quietly
def rms_forward_bf16(sub):
    """RMSNorm forward kernel, bfloat16 input, float32 statistics"""
    _forward(sub, "rms", [(5, n, 100 + i) for i, n in enumerate((7, 257))], "bfloat16")


@LAB.check(points=2, uses=["tri_layernorm_forward", "tri_call"])
@_quietly
def ln_forward_f32(sub):
    """LayerNorm forward kernel, float32, widths 1, 7, 100, 257"""
    _forward(sub, "ln", _f32_cases(20), "float32")


def _offset_rows():
    # rows 0-2 centred near 0, rows 3-5 with a mean of 300: E[x^2] - E[x]^2 in float32 loses
    # log2(300^2) ~ 16 of float32's 24 bits there, far outside F32_TOL.
    return np.concatenate([rows(3, 100, 7), rows(3, 100, 8, offset=300.0)])


@LAB.check(points=1, uses=["tri_layernorm_forward", "tri_call"])
@_quietly
def ln_forward_offset(sub):
    """LayerNorm forward kernel, rows far from 0 (mean 300 x std)"""
    x = _offset_rows()
    weight, bias = params(100, 9)
    y, mean, rstd = oracle_ln(x, weight, bias, EPS)
    what = "`_ln_fwd_kernel`, x float32 (6, 100), three rows with mean 300"
    spec = ["in:rows:1", "in", "in", "out:rows:1", "out:rows:1", "out:rows:1", "value", "value"]
    args = [AsTorch(x), AsTorch(weight), AsTorch(bias), _nan((6, 100)), _nan((6,)), _nan((6,))]
    got_y, _, got_rstd = _launch(
        sub, what, "_ln_fwd_kernel", (6,), spec, *args, 100, EPS, BLOCK=128
    )
    hints = _unwritten(got_rstd)
    if not hints and not _close(got_rstd, rstd, F32_TOL).all():
        if _close(got_rstd[:3], rstd[:3], F32_TOL).all():
            hints.append(("E[x^2] - E[x]^2 shortcut", SHORTCUT_HINT))
    _check_rows(got_rstd, rstd, what, "rstd", F32_TOL, hints)
    _check_rows(got_y, y, what, "y", F32_TOL, _unwritten(got_y))
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
    got_stats = {
        "mean": _array(out, 1, what, (6,), "mean"),
        "rstd": _array(out, 2, what, (6,), "rstd"),
    }
    got_y = _array(out, 0, what, (6, 100), "y")
    stats = {"mean": mean, "rstd": rstd}
    _grade_forward(what, "ln", x, "float32", 0.0, got_y, got_stats, y, stats, wrapper=True)


@LAB.check(points=1, uses=["tri_layernorm_forward", "tri_call"])
@_quietly
def ln_forward_bf16(sub):
    """LayerNorm forward kernel, bfloat16 input, float32 statistics"""
    _forward(sub, "ln", [(5, n, 200 + i) for i, n in enumerate((7, 257))], "bfloat16")


# ----------------------------------------------------------------------------- backward checks


def _backward_case(kind, m, n, dtype, seed):
    x = rows(m, n, seed)
    dy = rows(m, n, seed + 50)
    if dtype == "bfloat16":
        x, dy = bf16_values(x), bf16_values(dy)
    weight, bias = params(n, seed + 1)
    if kind == "rms":
        _, rstd = oracle_rms(x, weight, EPS)
        mean = None
        expected = oracle_rms_grads(dy, x, weight, EPS)
    else:
        _, mean, rstd = oracle_ln(x, weight, bias, EPS)
        mean = mean.astype(np.float32)
        expected = oracle_ln_grads(dy, x, weight, bias, EPS)
    return x, dy, weight, bias, mean, rstd.astype(np.float32), expected


def _dx_tol(dtype):
    # dx of bfloat16 x: one conversion (one spacing under the interpreter, see BF16_TOL) of a
    # float32 value; atol for entries that cancel to near 0
    return {"rtol": 2.0**-7 + 2.0**-14, "atol": 2.0**-12} if dtype == "bfloat16" else GRAD_TOL


def _backward_kernels(sub, kind, m, n, dtype, seed):
    """The learner's backward kernels, launched by the grader: dx (a program per row), the
    partial sums (a program per block of ROWS_PER_BLOCK rows), the second reduction."""
    x, dy, weight, bias, mean, rstd, expected = _backward_case(kind, m, n, dtype, seed)
    act, row, block = _act(dtype), ":rows:1", _next_power_of_2(n)
    shape = f"x {dtype} ({m}, {n})"
    # dx
    if kind == "rms":
        kernel = "_rms_bwd_dx_kernel"
        spec = ["in" + act + row, "in" + act + row, "in", "in" + row, "out" + act + row, "value"]
        args = [AsTorch(dy), AsTorch(x), AsTorch(weight), AsTorch(rstd), _nan((m, n)), n]
    else:
        kernel = "_ln_bwd_dx_kernel"
        spec = ["in" + act + row, "in" + act + row, "in", "in" + row, "in" + row]
        spec += ["out" + act + row, "value"]
        args = [AsTorch(dy), AsTorch(x), AsTorch(weight), AsTorch(mean), AsTorch(rstd)]
        args += [_nan((m, n)), n]
    what = f"`{kernel}`, {shape}, grid ({m},), BLOCK={block}"
    (got_dx,) = _launch(sub, what, kernel, (m,), spec, *args, BLOCK=block)
    hints = _unwritten(got_dx)
    tol = _dx_tol(dtype)
    if not hints and not _close(got_dx, expected[0], tol).all():
        hints = _dx_hints(got_dx, dy, x, weight, rstd, mean, kind)
    _check_rows(got_dx, expected[0], what, "dx", tol, hints)
    # the partial sums of each block of rows
    g = _blocks(m)
    x64, dy64, r = x.astype(np.float64), dy.astype(np.float64), rstd.astype(np.float64)
    xhat = (x64 - (0.0 if mean is None else mean.astype(np.float64)[:, None])) * r[:, None]
    contributions = [dy64 * xhat] + ([dy64] if kind == "ln" else [])
    rights = [np.add.reduceat(c, np.arange(0, m, ROWS_PER_BLOCK), axis=0) for c in contributions]
    blocks = f":rows:{ROWS_PER_BLOCK}"
    if kind == "rms":
        kernel = "_rms_bwd_dw_kernel"
        spec = ["in" + act + blocks, "in" + act + blocks, "in" + blocks, "out" + row]
        args = [AsTorch(dy), AsTorch(x), AsTorch(rstd), _nan((g, n))]
        labels = ("PARTIAL",)
    else:
        kernel = "_ln_bwd_dwdb_kernel"
        spec = ["in" + act + blocks, "in" + act + blocks, "in" + blocks, "in" + blocks]
        spec += ["out" + row, "out" + row]
        args = [AsTorch(dy), AsTorch(x), AsTorch(mean), AsTorch(rstd), _nan((g, n)), _nan((g, n))]
        labels = ("PW", "PB")
    what = f"`{kernel}`, {shape}, grid ({g},), ROWS={ROWS_PER_BLOCK}, BLOCK={block}"
    got = _launch(
        sub,
        what,
        kernel,
        (g,),
        spec + ["value", "value"],
        *args,
        m,
        n,
        ROWS=ROWS_PER_BLOCK,
        BLOCK=block,
    )
    for label, value, right in zip(labels, got, rights, strict=True):
        _check_rows(value, right, what, label, GRAD_TOL, _unwritten(value))
    # the second reduction, on partial sums of the grader's
    partial = rows(g, n, seed + 70)
    what = f"`_sum_rows_kernel`, partial sums ({g}, {n}), grid ({-(-n // REDUCE_BLOCK)},), BLOCK_N={REDUCE_BLOCK}"
    (got_sum,) = _launch(
        sub,
        what,
        "_sum_rows_kernel",
        (-(-n // REDUCE_BLOCK),),
        ["in", "out", "value", "value"],
        AsTorch(partial),
        _nan((n,)),
        g,
        n,
        BLOCK_N=REDUCE_BLOCK,
    )
    _check_rows(
        got_sum, partial.astype(np.float64).sum(0), what, "OUT", GRAD_TOL, _unwritten(got_sum)
    )


def _backward_wrapper(sub, kind, m, n, dtype, seed):
    x, dy, weight, bias, mean, rstd, expected = _backward_case(kind, m, n, dtype, seed)
    name = "tri_rmsnorm_backward" if kind == "rms" else "tri_layernorm_backward"
    what = f"{name}, x {dtype} ({m}, {n})"
    if kind == "rms":
        out = sub.call(
            "tri_call", name, dtype, AsTorch(dy), AsTorch(x), AsTorch(weight), AsTorch(rstd)
        )
        names = ("dx", "dweight")
    else:
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
        names = ("dx", "dweight", "dbias")
    count = len(names)
    _expect_count(out, count, what)
    dtypes = _dtypes(out, count)
    if dtypes and dtypes[0] != f"torch.{dtype}":
        raise CheckFailed(
            f"{what}: dx is {inert.clip(dtypes[0])}; it should have x's dtype, torch.{dtype}"
        )
    dx_tol = _dx_tol(dtype)
    for i, (label, right) in enumerate(zip(names, expected, strict=True)):
        shape = (m, n) if label == "dx" else (n,)
        item = item_of(out, i, what)
        got = _float64(item.array) if item.array is not None else None
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
        if label != "dx" and not _close(got, right, tol).all():
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


def _backward(sub, kind, cases, dtype):
    for m, n, seed in cases:
        _backward_kernels(sub, kind, m, n, dtype, seed)
    for m, n, seed in cases:
        _backward_wrapper(sub, kind, m, n, dtype, seed)


def _bwd_cases(base):
    return [
        c
        for i, n in enumerate((1, 7, 257))
        for c in ((1, n, base + i), (BWD_ROWS, n, base + 10 + i))
    ]


@LAB.check(points=2, uses=["tri_rmsnorm_backward", "tri_call"])
@_quietly
def rms_backward_f32(sub):
    """RMSNorm backward kernels: dx per row, dweight by partial sums (float32)"""
    _backward(sub, "rms", _bwd_cases(300), "float32")


@LAB.check(points=1, uses=["tri_rmsnorm_backward", "tri_call"])
@_quietly
def rms_backward_bf16(sub):
    """RMSNorm backward kernels, bfloat16 input"""
    _backward(sub, "rms", [(BWD_ROWS, 100, 320)], "bfloat16")


@LAB.check(points=2, uses=["tri_layernorm_backward", "tri_call"])
@_quietly
def ln_backward_f32(sub):
    """LayerNorm backward kernels: dx per row, dweight and dbias by partial sums (float32)"""
    _backward(sub, "ln", _bwd_cases(400), "float32")


@LAB.check(points=1, uses=["tri_layernorm_backward", "tri_call"])
@_quietly
def ln_backward_bf16(sub):
    """LayerNorm backward kernels, bfloat16 input"""
    _backward(sub, "ln", [(BWD_ROWS, 100, 420)], "bfloat16")


# ----------------------------------------------------------------------------- autograd


def _autograd(sub, kind):
    m, n = 9, 100
    # the kernels it runs, launched by the grader first: the points are the kernels'
    _forward_kernel(sub, kind, m, n, "float32", 510)
    _backward_kernels(sub, kind, m, n, "float32", 520)
    # then the wrappers it calls: a failure there is named as theirs
    for grade, wrapper in (
        (_forward_wrapper, "tri_rmsnorm_forward" if kind == "rms" else "tri_layernorm_forward"),
        (_backward_wrapper, "tri_rmsnorm_backward" if kind == "rms" else "tri_layernorm_backward"),
    ):
        try:
            grade(sub, kind, m, n, "float32", 530)
        except CheckFailed as failure:
            raise CheckFailed(
                f"fix `{wrapper}` first: it fails its own check\n{failure}", failure.probes
            ) from None
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
    for i, (label, right) in enumerate(zip(labels, (y, *grads), strict=True)):
        item = item_of(out, i, what)
        if item.array is None:
            raise CheckFailed(
                f"{what}: {label} is missing (None): backward must return a gradient for x, "
                "weight (and bias), and None for eps"
            )
        got = _float64(item.array)
        if got.shape != right.shape:
            raise CheckFailed(f"{what}: {label} has shape {got.shape}, expected {right.shape}")
        _check_rows(got, right, what, label, F32_TOL if label == "y" else GRAD_TOL, [])


@LAB.check(points=1, uses=["TriRMSNorm", "tri_call"])
@_quietly
def rms_autograd(sub):
    """TriRMSNorm: an autograd.Function over the two kernels"""
    _autograd(sub, "rms")


@LAB.check(points=1, uses=["TriLayerNorm", "tri_call"])
@_quietly
def ln_autograd(sub):
    """TriLayerNorm: an autograd.Function over the two kernels"""
    _autograd(sub, "ln")


# ----------------------------------------------------------------------------- bytes moved

# The bytes each kernel reads and writes in DRAM, for x of M rows and N columns of ``elem``
# bytes, float32 weight, bias and statistics; the (few) partial sums of the dweight reduction
# are left out (blocks x N floats, with blocks << M). The answers are the problem itself: code
# that computed them would be the learner's answer, shipped with the student edition. So the
# module holds only their keys (probes.number_key, salted with the function and the case), as
# lab 07 does; tests/test_triton_kernels_checks.py derives them from its own count of the
# kernels' loads and stores and fails, printing the new ring, when they differ.
# The smallest case first: a learner can count it by hand from the message, and a function that
# is not a byte count at all (it builds arrays of the sizes it is given) fails there, before it
# is handed 8192 x 4096.
BYTES_CASES = ((3, 5, 4), (4096, 4096, 4), (8192, 4096, 2))
BYTES_KEYRING = frozenset(
    """
    059f0e9eaeb6022f 07c8a30484614313 15da232d6bab598f 2bcd6ccb6b30199b
    3c7132c3cfdff989 4e1f77c8010ac99a 5739f0cf53484d39 6321de325e9573fd
    65e25c00e9f6f743 8150bf8781b2a811 9ca20ffeef108e66 c1379a8d2154d178
    """.split()
)
BYTES_HINT = (
    "Count every tensor the kernel loads or stores once, in bytes: the (M, N) activations at "
    "`elem` bytes each, weight/bias and the per-row statistics at 4 bytes (float32)."
)


def _bytes_check(name):
    def check(sub):
        for args in BYTES_CASES:
            out = sub.call(name, *args)
            what = f"{name}({', '.join(map(str, args))})"
            expect_keyed(out, name, args, BYTES_KEYRING, (), what=what, hint=BYTES_HINT)

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
