"""Checks for lab 07, the cost of normalization: fused-friendly norms and the counting behind them.

The learner writes, in NumPy::

    rmsnorm_two_pass(x, gamma, eps=1e-5, out=None) -> y             # x: (..., d); gamma: (d,)
    layernorm_two_pass(x, gamma, beta, eps=1e-5, out=None) -> y
    rmsnorm_fused(x, gamma, eps=1e-5, out=None) -> y                 # one read, one write (Numba)
    layernorm_fused(x, gamma, beta, eps=1e-5, out=None) -> y
    bytes_moved(norm, implementation, n_rows, d, itemsize) -> int   # bytes to and from memory
    arithmetic_intensity(norm, implementation, itemsize) -> float   # FLOPs per byte
    roofline_time(flops, bytes_moved, peak_flops, bandwidth) -> float  # seconds
    COST_ANSWER = "a" | "b" | "c" | "d"                              # what the benchmark shows

``norm`` is ``"layernorm"`` or ``"rmsnorm"``; ``implementation`` is ``"naive"`` (the textbook code
the lab lists, one whole-array NumPy operation at a time) or ``"fused"`` (read x once, write y
once). The counting rule, stated in the lab: every whole-array operation reads each full-size
(n_rows, d) operand once and writes its full-size result once; arrays of n_rows or d entries
(statistics, gamma, beta) are not counted. FLOPs: one per element for each elementwise add,
subtract, multiply, divide or square of a full-size array, and one per element for a reduction
(a sum or mean adds each element once). Timings are never graded: they depend on the machine.

The counts and the roofline bound are the problems' answers, so this module holds no code that
computes them: each graded case is compared by key (``probes.expect_keyed``) with the right
number and with each known slip's number, keyed by ``tests/test_cost_checks.py`` from its own
counting of the lab's code. A wrong number is told why (the slip it matches) or how to count,
never what the right number is.

The fused norms are graded on what they compute and on where they write, not on how fast they
run or which tool compiled them: any implementation that returns the right values and fills the
``out`` it is given passes. Their probes add the slips of Welford's one-pass update and the
cancellation of E[x^2] - E[x]^2 in a single sweep, at an offset where it loses every digit
(float32 x = 1e4 + noise, and float64 x = 1e8 + noise for code that accumulates in float64).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from normlab.grader.cases import F32, Args, Graded, affine_params, tensor64
from normlab.grader.core import CheckFailed, Lab, ReadBack
from normlab.grader.forbidden import from_scratch
from normlab.grader.memo import oracle
from normlab.grader.probes import Probe, Slip, choice, expect_array, expect_keyed

LAB = Lab(
    stem="07_cost",
    title="The cost of normalization",
    forbidden=from_scratch(
        "rmsnorm_two_pass", "layernorm_two_pass", "rmsnorm_fused", "layernorm_fused"
    ),
    # The fused kernels are Numba's: each compiles on its first call with each kind of input,
    # about 1 s of CPU every time, which a busy machine can stretch past the default 5 s.
    call_timeouts={"rmsnorm_fused": 20.0, "layernorm_fused": 20.0},
)

EPS = 1e-5
# F32 (cases.py): float32 accumulation over d <= 768 errs by ~1e-6 relative
# float32 x = 1e4 + noise: x itself is rounded to ~5e-4, so any float32 centring errs by ~1e-3;
# the one-pass variance errs by O(1) and is still far outside.
OFFSET = {"rtol": 1e-3, "atol": 1e-2}
# float64 x = 1e8 + noise: x carries ~8 digits of its noise, so a right answer errs by ~1e-7;
# E[x^2] - E[x]^2 in float64 errs by O(1) there.
OFFSET64 = {"rtol": 1e-5, "atol": 1e-5}

CASES = [(norm, impl) for norm in ("layernorm", "rmsnorm") for impl in ("naive", "fused")]
BYTES_CASES = [
    (norm, impl, n_rows, d, itemsize)
    for norm, impl in CASES
    for n_rows, d, itemsize in [(32768, 768, 4), (10, 3, 2)]
]
INTENSITY_CASES = [(norm, impl, itemsize) for norm, impl in CASES for itemsize in (4, 2)]
ROOFLINE_CASES = [
    (1.0e8, 2.0e8, 6.7e13, 4.8e12),  # a norm on an H200: memory-bound
    (1.0e12, 1.0e8, 6.7e13, 4.8e12),  # a large matrix product: compute-bound
    (3.0e9, 1.5e9, 1.0e11, 2.0e10),  # a CPU
]


# ----------------------------------------------------------------------------- oracle


@oracle
def oracle_rms(x, gamma, eps, out=None):
    import torch.nn.functional as F

    return F.rms_norm(tensor64(x), (x.shape[-1],), tensor64(gamma), eps).numpy()


@oracle
def oracle_layer(x, gamma, beta, eps, out=None):
    import torch.nn.functional as F

    d = x.shape[-1]
    return F.layer_norm(tensor64(x), (d,), tensor64(gamma), tensor64(beta), eps).numpy()


# ----------------------------------------------------------------------------- norm probes


def _rms_variant(denominator, use_gamma=True):
    def forward(x, gamma, eps, out=None):
        x = np.asarray(x, np.float64)
        y = x / denominator(x, eps)
        return y * gamma if use_gamma else y

    return forward


RMS_PROBES = [
    Probe(
        "eps outside the root",
        "This matches x / (sqrt(mean(x**2)) + eps). Keep eps inside the root, as "
        "F.rms_norm does: 1 / sqrt(mean(x**2) + eps).",
        _rms_variant(lambda x, eps: np.sqrt((x**2).mean(-1, keepdims=True)) + eps),
    ),
    Probe(
        "sum of squares instead of mean",
        "This matches sqrt(sum(x**2) + eps): a dot product of a row with itself (einsum "
        "'...i,...i->...') is a *sum*; divide it by d to get the mean square.",
        _rms_variant(lambda x, eps: np.sqrt((x**2).sum(-1, keepdims=True) + eps)),
    ),
    Probe(
        "subtracts the mean",
        "This matches LayerNorm without beta: RMSNorm does not re-centre the row.",
        lambda x, gamma, eps, out=None: (
            gamma * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
        ),
    ),
    Probe(
        "gamma missing",
        "This matches x / RMS(x) without the gain: multiply by gamma in the same pass that "
        "writes the output.",
        _rms_variant(lambda x, eps: np.sqrt((x**2).mean(-1, keepdims=True) + eps), False),
    ),
    Probe(
        "square root missing",
        "This matches x / (mean(x**2) + eps): scale by 1 / sqrt(mean(x**2) + eps).",
        _rms_variant(lambda x, eps: (x**2).mean(-1, keepdims=True) + eps),
    ),
]


def _layer_variant(variance="two-pass", eps_inside=True, use_beta=True, use_gamma=True):
    def forward(x, gamma, beta, eps, out=None):
        x = np.asarray(x)
        mean = x.mean(-1, keepdims=True)
        if variance == "one-pass":  # E[x^2] - E[x]^2 in the input's precision
            var = (x * x).mean(-1, keepdims=True) - mean * mean
        elif variance == "mean square":
            var = (x * x).mean(-1, keepdims=True)
        else:
            var = ((x - mean) ** 2).mean(-1, keepdims=True)
        var = np.asarray(var, np.float64)
        denominator = np.sqrt(var + eps) if eps_inside else np.sqrt(var) + eps
        y = (np.asarray(x, np.float64) - mean) / denominator
        y = y * gamma if use_gamma else y
        return y + beta if use_beta else y

    return forward


LAYER_PROBES = [
    Probe(
        "eps outside the root",
        "This matches (x - mean) / (sqrt(var) + eps). Keep eps inside the root: "
        "1 / sqrt(var + eps).",
        _layer_variant(eps_inside=False),
    ),
    Probe(
        "one-pass variance in float32",
        "This matches var = mean(x**2) - mean(x)**2 computed in float32: with a large offset "
        "(x ~ 1e4 + noise) both terms are ~1e8 and their difference loses every digit "
        "(catastrophic cancellation). Keep the two passes: first the mean, then the mean of "
        "(x - mean)**2 — or accumulate in float64.",
        _layer_variant(variance="one-pass"),
    ),
    Probe(
        "mean square instead of variance",
        "This divides by sqrt(mean(x**2) + eps), RMSNorm's statistic. LayerNorm divides the "
        "centred row by its standard deviation: sqrt(mean((x - mean)**2) + eps).",
        _layer_variant(variance="mean square"),
    ),
    Probe(
        "beta missing",
        "This matches the output without the bias: finish with + beta.",
        _layer_variant(use_beta=False),
    ),
    Probe(
        "gamma missing",
        "This matches the output without the gain: multiply by gamma before adding beta.",
        _layer_variant(use_gamma=False),
    ),
]


# ----------------------------------------------------------------------------- fused probes


def _welford(x, slip=""):
    """Mean and biased variance of each row by Welford's update, left to right, in float64.

    ``slip`` names a known mistake in the update (see WELFORD_PROBES).
    """
    x = np.asarray(x, np.float64)
    d = x.shape[-1]
    mean = np.zeros(x.shape[:-1])
    m2 = np.zeros(x.shape[:-1])
    for k in range(d):
        value = x[..., k]
        delta = value - mean
        count = {"count off by one": k + 2, "divides by d": d}.get(slip, k + 1)
        mean = mean + delta / count
        if slip == "old mean twice":
            m2 = m2 + delta * delta
        elif slip == "new mean twice":
            m2 = m2 + (value - mean) ** 2
        else:
            m2 = m2 + delta * (value - mean)
    variance = m2 / (d - 1) if slip == "unbiased" else m2 / d
    return mean[..., None], variance[..., None]


def _welford_variant(slip):
    def forward(x, gamma, beta, eps, out=None):
        mean, variance = _welford(x, slip)
        return (np.asarray(x, np.float64) - mean) / np.sqrt(variance + eps) * gamma + beta

    return forward


def _one_sweep(accumulator):
    """E[x^2] - E[x]^2 from a sum and a sum of squares taken in one left-to-right sweep.

    The products x * x are formed in x's dtype and added into ``accumulator`` (what a loop with
    ``total = 0.0`` does in Numba, or ``np.float32(0)``).
    """

    def forward(x, gamma, beta, eps, out=None):
        x = np.asarray(x)
        total = np.zeros(x.shape[:-1], accumulator)
        total_squares = np.zeros(x.shape[:-1], accumulator)
        for k in range(x.shape[-1]):
            value = x[..., k]
            total = total + value.astype(accumulator)
            total_squares = total_squares + (value * value).astype(accumulator)
        d = x.shape[-1]
        mean = (total / d).astype(np.float64)[..., None]
        variance = (total_squares / d).astype(np.float64)[..., None] - mean * mean
        return (np.asarray(x, np.float64) - mean) / np.sqrt(variance + eps) * gamma + beta

    return forward


CANCELLATION_HINT = (
    "This matches variance = E[x**2] - E[x]**2 from a sum and a sum of squares taken in one "
    "sweep. With a large offset (float32 x ~ 1e4 + noise, or float64 x ~ 1e8 + noise) both "
    "terms are huge and nearly equal, and their difference keeps none of the digits that "
    "matter (catastrophic cancellation). Use Welford's update (delta = x - mean; mean += "
    "delta / k; m2 += delta * (x - mean)) or two passes over the row while it is in cache: "
    "first the mean, then the sum of (x - mean)**2."
)

FUSED_LAYER_PROBES = [
    Probe(
        "Welford: old mean in both factors",
        "This matches Welford's update with m2 += delta * delta, where delta = x - (the mean "
        "before the update). The second factor must use the mean *after* the update: "
        "m2 += delta * (x - mean_new).",
        _welford_variant("old mean twice"),
    ),
    Probe(
        "Welford: new mean in both factors",
        "This matches Welford's update with m2 += (x - mean_new)**2. One factor uses the mean "
        "before the update, the other the mean after it: m2 += (x - mean_old) * (x - mean_new).",
        _welford_variant("new mean twice"),
    ),
    Probe(
        "Welford: count off by one",
        "This matches mean += delta / (k + 1) for the k-th element counted from 1: the update "
        "divides by the number of elements seen *including* the current one (1 for the first, "
        "which makes the mean equal to the first element).",
        _welford_variant("count off by one"),
    ),
    Probe(
        "Welford: divides by d at every step",
        "This matches mean += delta / d at every step. Welford's running mean divides by the "
        "number of elements seen so far (1, 2, ..., d), not by the row's length.",
        _welford_variant("divides by d"),
    ),
    Probe(
        "unbiased variance",
        "This matches m2 / (d - 1), the unbiased variance. LayerNorm divides by d (biased), as "
        "F.layer_norm does.",
        _welford_variant("unbiased"),
    ),
    Probe("one-sweep variance (float64 sums)", CANCELLATION_HINT, _one_sweep(np.float64)),
    Probe("one-sweep variance (float32 sums)", CANCELLATION_HINT, _one_sweep(np.float32)),
    *LAYER_PROBES,
]


# ----------------------------------------------------------------------------- counting slips

# Problems 1 and 2 are answered by numbers: the counts of the code the lab lists, and the
# roofline's bound on fixed inputs. Code that computed them (a table of passes, the formula)
# would be the learner's answer, shipped with the student edition; so the module holds only
# the keys (probes.number_key) of the right number and of each slip's number for every graded
# case. tests/test_cost_checks.py derives them from its own counting of the lab's code and
# fails, printing the new ring, when they differ.

BYTES_SLIPS = [
    Slip(
        "reads only",
        "This matches counting only the reads. Every operation that produces a full-size array "
        "also writes it to memory: a write costs bandwidth like a read (a copy of x moves "
        "2 * x.nbytes).",
    ),
    Slip(
        "elements, not bytes",
        "This matches a count of elements. Multiply by the item size (4 bytes for float32, 2 "
        "for bfloat16).",
    ),
    Slip("bits, not bytes", "This is 8 times the right count: itemsize is already in bytes."),
    Slip(
        "reductions counted as read + write",
        "This counts a mean over the last axis as a full-size read AND write. A reduction reads "
        "its (n_rows, d) input once and writes only n_rows numbers, which the rule ignores.",
    ),
    Slip(
        "naive and fused swapped",
        "This is the other implementation's count: the naive code makes many full passes, a "
        "fused kernel exactly two (read x, write y).",
    ),
]
BYTES_HINT = (
    "Go through the code the lab lists one operation at a time: count the full-size arrays "
    "each operation reads and the full-size array it writes (a reduction writes nothing of "
    "full size), then multiply the passes by n_rows * d * itemsize."
)

INTENSITY_SLIPS = [
    Slip(
        "bytes per FLOP",
        "This is bytes / FLOPs, the inverse. Arithmetic intensity is FLOPs per byte moved.",
    ),
    Slip(
        "FLOPs per element",
        "This is the number of FLOPs per element. Divide by the bytes moved per element "
        "(passes * itemsize).",
    ),
    Slip(
        "fused bytes for every implementation",
        "This divides by the bytes of a fused kernel (2 * itemsize per element) for the naive "
        "code too: the naive code does the same FLOPs but moves more bytes, so its intensity is "
        "lower.",
    ),
    Slip(
        "one pass only",
        "This divides by itemsize alone (one pass). Count every full-size read and write.",
    ),
]
INTENSITY_HINT = (
    "Count the FLOPs per element of the code the lab lists (one per elementwise operation and "
    "one per reduction) and divide by the bytes it moves per element (its full-size passes "
    "times itemsize)."
)

ROOFLINE_SLIPS = [
    Slip(
        "sum of the two times",
        "This adds compute time and memory time. On the roofline model the two overlap: the "
        "time is the larger of the two, max(flops / peak_flops, bytes / bandwidth).",
    ),
    Slip(
        "smaller of the two times",
        "This is the smaller of the two times; the slower resource sets the pace: take the max.",
    ),
    Slip(
        "memory time only",
        "This ignores the compute bound: the time is max(flops / peak_flops, bytes / bandwidth); "
        "a compute-heavy operation can be limited by arithmetic.",
    ),
    Slip(
        "compute time only",
        "This ignores memory: the time is max(flops / peak_flops, bytes / bandwidth), and a "
        "normalization layer is limited by bandwidth.",
    ),
]
ROOFLINE_HINT = (
    "Compute the time the arithmetic takes at peak_flops and the time the bytes take at "
    "bandwidth; the two overlap, so the slower of them sets the bound."
)

SLIPS = {
    "bytes_moved": BYTES_SLIPS,
    "arithmetic_intensity": INTENSITY_SLIPS,
    "roofline_time": ROOFLINE_SLIPS,
}
KEYRING = frozenset(
    """
    00005b2f071bbddf 042e5c96d45b9a94 049d13fe41bfb951 05a367fcbcb3dd4f 07ad5d58b6dc8509
    07dd5dbe19a006a2 0d962e1781219dda 1279878d1d32ab55 12da5818fd10079e 1443451373990d4d
    16a9d88d03784030 185dc8875028a81f 18e99a7716146aa8 1acf684e9c6411b0 1b970d361fd96b6a
    1bc14857117fb253 1fbaadf0f00fe531 20393d118a0b48c2 22c76686353bf276 2560974dce629b02
    279aa838370ea97c 2c3168ea2ae13239 2d9349d590fb9ee9 31cc130addbcccc8 3352ee08094a4221
    33f09585e740ff6e 35ba9d7600f0e1d3 36e50518f6f15c09 3998fe2af6b45d49 39a3f8dff50e7d7d
    3a7110227829f918 3b26c7de2343adbb 3f75cfd6b148a058 40a6e4129d0afe54 453138e8e753ac8b
    456288acb7cfd3aa 47b7b50c6b384eda 4902c8dc9da4b00f 49b9423cc154c561 4d94ff6b0c560377
    4dce8a82758069bc 4e0356d91311bc75 4fc83c4fca0254f1 501e3dc63f035b84 52e4f158f1881dcd
    53a94c6b4822c797 549ac5fd3f7e4a82 57173dd6ff946035 58be215a49e1cdbb 5b047e3b964569f0
    5e127e1529cd8d4a 61179e7e97bc630a 64259f5b58432b21 653fda6ac021e8da 666064d4e0aa05ca
    6732ac8c76e514d4 68e0a20af1f50ac0 6bbfab231803db4d 6cd53dd38cde965b 6d5c46edc8abbe23
    6e57dbbae8dc633c 705143ff535e336b 79ed4210ddbdd94f 7d880b31f6983877 7d8f4ac0646f6257
    854ae57931f2a361 86d8553bb0b5bafb 8964f2e8e44984e2 8e3a219c52484f0e 8fe5810dc92cd640
    97e0a69120057cf2 9bf47b713d380822 9e59f471c330db3f a07d9bcf4402be25 a741d7a90acf68a4
    aba21d471c3b385a b66b4c4906d90bf1 b967c4e77414f5e0 ba94ff3c3c2fa634 bb4b3803351dbd16
    bb846b36060a783b bc715601c00ada36 bdd69ebb3e807a71 bfce3cc394602e8f c0ce473d67efc85e
    c209d36424cdb764 c947f0a461d33b4b c999d6ad6a92305d cf73baf0f8177a20 d77c8fe8cbaa6c67
    d8941462975c9dac dbc9d2b6b32525f7 e3d7cf37a689defe e59f2e06ed7fc4f9 e98d86d4c0759235
    e99e3bd0bdc0629d e9a1673fad3083f2 f0403e86c1aad23f f624ca77efa6bcd6 f7685f9e88a0bc6e
    f969ecd57dc57cf7 f9d213d92009bdee fda996401a763560
    """.split()
)


# ----------------------------------------------------------------------------- inputs


def rows(rng, shape, offset_scale=2.0):
    """Rows with different offsets and scales (the mean and the RMS both matter)."""
    lead = shape[:-1] + (1,)
    scales = rng.uniform(0.5, 3.0, size=lead)
    return (rng.normal(size=shape) + rng.uniform(-offset_scale, offset_scale, size=lead)) * scales


params = affine_params  # (gamma, beta) of shape (d,)

TWO_PASS = {
    "rmsnorm": Graded("rmsnorm_two_pass", oracle_rms, RMS_PROBES),
    "layernorm": Graded("layernorm_two_pass", oracle_layer, LAYER_PROBES),
}
FUSED = {
    "rmsnorm": Graded("rmsnorm_fused", oracle_rms, RMS_PROBES),
    "layernorm": Graded("layernorm_fused", oracle_layer, FUSED_LAYER_PROBES),
}
# Every probe of the lab, by the learner's function whose arguments its compute takes.
PROBES = {
    "rmsnorm_two_pass": RMS_PROBES,
    "layernorm_two_pass": LAYER_PROBES,
    "rmsnorm_fused": RMS_PROBES,
    "layernorm_fused": FUSED_LAYER_PROBES,
}


# ----------------------------------------------------------------------------- norm checks


def _norm_args(norm, x, gamma, beta, **out):
    """A kernel's arguments: x, gamma (and beta, for LayerNorm), eps, and ``out=`` if given."""
    shifts = () if norm == "rmsnorm" else (beta,)
    return Args(x, gamma, *shifts, eps=EPS, **out)


def _expect_shapes(sub, graded, norm, rng, **out):
    """Random x of shapes (6, 8) and (2, 3, 16), with gamma (and beta) drawn first."""
    for shape in [(6, 8), (2, 3, 16)]:
        gamma, beta = params(rng, shape[-1])
        args = _norm_args(norm, rows(rng, shape), gamma, beta, **out)
        graded.expect(sub, args, what=f"x of shape {shape}")


def _expect_float32(sub, graded, norm, rng, **out):
    """float32 x of shape (5, 64) stays float32 and is right to float32's tolerance."""
    gamma, beta = params(rng, 64, np.float32)
    x32 = rows(rng, (5, 64)).astype(np.float32)
    args = _norm_args(norm, x32, gamma, beta, **out)
    graded.expect(sub, args, what="float32 x of shape (5, 64)", tol=F32, dtype=np.float32)


def _expect_layer_offset(sub, graded, rng, **out):
    """LayerNorm of float32 x = 1e4 + noise: a two-pass or fused kernel does not cancel."""
    gamma, beta = params(rng, 64, np.float32)
    x = (1e4 + rng.normal(size=(4, 64))).astype(np.float32)
    graded.expect(
        sub,
        Args(x, gamma, beta, eps=EPS, **out),
        what="float32 x = 1e4 + noise, shape (4, 64)",
        tol=OFFSET,
        dtype=np.float32,
    )


def _expect_layer_edges(sub, graded, rng, **out):
    """LayerNorm of a constant row, of d = 1 and of a non-contiguous view; (gamma, beta) of d = 8."""
    x = rows(rng, (4, 8))
    x[0] = 3.0  # variance exactly 0: the output is beta
    x[1] = 3.0 + 1e-3 * rng.normal(size=8)  # variance ~1e-6, below eps
    gamma, beta = params(rng, 8)
    args = Args(x, gamma, beta, eps=EPS, **out)
    graded.expect(sub, args, what="a constant row and a row of variance ~1e-6")
    args = Args(rows(rng, (5, 1)), gamma[:1], beta[:1], eps=EPS, **out)
    graded.expect(sub, args, what="d = 1")
    view = rows(rng, (3, 16))[:, ::2]
    graded.expect(
        sub, Args(view, gamma, beta, eps=EPS, **out), what="a non-contiguous view x[:, ::2]"
    )
    return gamma, beta


@LAB.check(points=2, uses=["rmsnorm_two_pass"], seed=700)
def rms_random(sub, rng):
    """RMSNorm two-pass matches torch, (N, d) and (B, L, d)"""
    _expect_shapes(sub, TWO_PASS["rmsnorm"], "rmsnorm", rng, out=None)


@LAB.check(points=1, uses=["rmsnorm_two_pass"], seed=701)
def rms_edges(sub, rng):
    """RMSNorm two-pass: float32 stays float32, a zero row, a non-contiguous view"""
    two_pass = TWO_PASS["rmsnorm"]
    _expect_float32(sub, two_pass, "rmsnorm", rng, out=None)
    x = rows(rng, (4, 16))
    x[0] = 0.0
    x[1] *= 1e-3  # RMS ~ sqrt(eps): inside vs outside the root differ most
    args = Args(x, params(rng, 16)[0], eps=EPS, out=None)
    two_pass.expect(sub, args, what="rows of zeros and of RMS ~3e-3")
    wide = rows(rng, (4, 32))
    args = Args(wide[:, ::2], params(rng, 16)[0], eps=EPS, out=None)
    two_pass.expect(sub, args, what="a non-contiguous view x[:, ::2]")


@LAB.check(points=1, uses=["rmsnorm_two_pass"], seed=702)
def rms_out(sub, rng):
    """RMSNorm two-pass writes into a given out and returns it"""
    x = rows(rng, (3, 4, 8))
    args = Args(x, params(rng, 8)[0], eps=EPS, out=np.ones_like(x))
    TWO_PASS["rmsnorm"].expect(sub, args, what="with out= a preallocated array")


@LAB.check(points=2, uses=["layernorm_two_pass"], seed=710)
def layer_random(sub, rng):
    """LayerNorm two-pass matches torch, (N, d) and (B, L, d)"""
    _expect_shapes(sub, TWO_PASS["layernorm"], "layernorm", rng, out=None)


@LAB.check(points=2, uses=["layernorm_two_pass"], seed=711)
def layer_offset(sub, rng):
    """LayerNorm two-pass in float32 with an offset of 1e4 (no cancellation)"""
    _expect_layer_offset(sub, TWO_PASS["layernorm"], rng, out=None)


@LAB.check(points=1, uses=["layernorm_two_pass"], seed=712)
def layer_edges(sub, rng):
    """LayerNorm two-pass: a constant row, d = 1, a non-contiguous view, out="""
    two_pass = TWO_PASS["layernorm"]
    gamma, beta = _expect_layer_edges(sub, two_pass, rng, out=None)
    x = rows(rng, (2, 3, 8))
    args = Args(x, gamma, beta, eps=EPS, out=np.ones_like(x))
    two_pass.expect(sub, args, what="with out= a preallocated array")


# ----------------------------------------------------------------------------- fused checks

NOT_INTO_OUT = (
    "{what}: the array you returned is right, but the `out` array passed in was not filled "
    "(it still holds {left}). A kernel that writes into a preallocated output must write into "
    "*that* array: out[row, j] = ..., and return out. Rebinding the name (out = "
    "np.empty_like(x)), or handing the kernel a copy (np.ascontiguousarray(out), out.astype), "
    "writes somewhere else."
)


def _into_out(sub, graded, x, *rest, what):
    """Call with out= a NaN-filled buffer; both the return and the buffer must hold the answer."""
    args = Args(x, *rest, eps=EPS, out=ReadBack(np.full_like(x, np.nan)))
    expected = args.apply(graded.oracle)
    what = f"{what}, with out= a preallocated array"
    result = graded.expect(sub, args, what=what, expected=expected)
    what = f"{graded.name}, {what}"
    if len(result.read_back) != 1:
        raise CheckFailed(f"{what}: the `out` array did not come back from the call")
    filled = result.read_back[0]
    if filled.array is not None and filled.array.shape == expected.shape:
        left = "NaN, as before the call" if np.isnan(filled.array).all() else "other values"
    else:
        left = "something else"
    try:
        expect_array(
            dataclasses.replace(result, items=[filled], is_tuple=False),
            expected,
            what=f"{what} (the `out` array after the call)",
            **graded.tol,
        )
    except CheckFailed:
        raise CheckFailed(NOT_INTO_OUT.format(what=what, left=left)) from None


@LAB.check(points=2, uses=["rmsnorm_fused"], seed=720)
def rms_fused_random(sub, rng):
    """RMSNorm fused matches torch: float64 and float32, (N, d) and (B, L, d)"""
    _expect_shapes(sub, FUSED["rmsnorm"], "rmsnorm", rng)
    _expect_float32(sub, FUSED["rmsnorm"], "rmsnorm", rng)


@LAB.check(points=1, uses=["rmsnorm_fused"], seed=721)
def rms_fused_edges(sub, rng):
    """RMSNorm fused: a zero row, a non-contiguous view, and it fills the out it is given"""
    fused = FUSED["rmsnorm"]
    x = rows(rng, (4, 16))
    x[0] = 0.0
    x[1] *= 1e-3
    gamma = params(rng, 16)[0]
    fused.expect(sub, Args(x, gamma, eps=EPS), what="rows of RMS 0 and ~3e-3")
    wide = rows(rng, (4, 32))[:, ::2]
    fused.expect(sub, Args(wide, gamma, eps=EPS), what="a non-contiguous view x[:, ::2]")
    x = rows(rng, (3, 4, 8))
    _into_out(sub, fused, x, params(rng, 8)[0], what="x of shape (3, 4, 8)")


@LAB.check(points=2, uses=["layernorm_fused"], seed=730)
def layer_fused_random(sub, rng):
    """LayerNorm fused matches torch: float64 and float32, (N, d) and (B, L, d)"""
    _expect_shapes(sub, FUSED["layernorm"], "layernorm", rng)
    _expect_float32(sub, FUSED["layernorm"], "layernorm", rng)


@LAB.check(points=2, uses=["layernorm_fused"], seed=731)
def layer_fused_offset(sub, rng):
    """LayerNorm fused at an offset: float32 x = 1e4 + noise, float64 x = 1e8 + noise"""
    fused = FUSED["layernorm"]
    _expect_layer_offset(sub, fused, rng)
    gamma, beta = params(rng, 64)
    x64 = 1e8 + rng.normal(size=(4, 64))
    args = Args(x64, gamma, beta, eps=EPS)
    fused.expect(sub, args, what="float64 x = 1e8 + noise, shape (4, 64)", tol=OFFSET64)


@LAB.check(points=1, uses=["layernorm_fused"], seed=732)
def layer_fused_edges(sub, rng):
    """LayerNorm fused: a constant row, d = 1, a non-contiguous view, and it fills the out it is
    given
    """
    fused = FUSED["layernorm"]
    gamma, beta = _expect_layer_edges(sub, fused, rng)
    x = rows(rng, (2, 3, 8))
    _into_out(sub, fused, x, gamma, beta, what="x of shape (2, 3, 8)")


# ----------------------------------------------------------------------------- counting checks


def _expect_count(sub, function, args, *, what, hint):
    out = sub.call(function, *args)
    expect_keyed(out, function, args, KEYRING, SLIPS[function], what=what, hint=hint)


@LAB.check(points=2, uses=["bytes_moved"])
def bytes_cases(sub):
    """bytes_moved: naive and fused, LayerNorm and RMSNorm"""
    for args in BYTES_CASES:
        _expect_count(sub, "bytes_moved", args, what=f"bytes_moved{args}", hint=BYTES_HINT)


@LAB.check(points=2, uses=["arithmetic_intensity"])
def intensity_cases(sub):
    """arithmetic_intensity in FLOPs per byte"""
    for args in INTENSITY_CASES:
        what = f"arithmetic_intensity{args}"
        _expect_count(sub, "arithmetic_intensity", args, what=what, hint=INTENSITY_HINT)


@LAB.check(points=2, uses=["roofline_time"])
def roofline_cases(sub):
    """roofline_time: the larger of compute and memory time"""
    for args in ROOFLINE_CASES:
        what = (
            "roofline_time(flops={:g}, bytes_moved={:g}, peak_flops={:g}, bandwidth={:g})".format(
                *args
            )
        )
        _expect_count(sub, "roofline_time", args, what=what, hint=ROOFLINE_HINT)


# The misconception each wrong option stands for (the worked solution explains each).
COST_WHY = {
    "a": "time does not follow FLOPs here: the norms lie far below the CPU's ridge point, so "
    "they wait on memory, and the measured RMSNorm/LayerNorm ratios differ by implementation.",
    "b": "a fresh output moves the same bytes, but the operating system must first map each of "
    "its pages (a page fault per 4 KB): the fresh-output rows cost several copies.",
    "c": "Welford's update reads the row once, but its division per element and its serial "
    "dependence make it compute-bound: it is the slowest fused row, not the fastest.",
}


choice(
    LAB,
    "problem 3: what the benchmark shows (multiple choice)",
    points=1,
    name="COST_ANSWER",
    key="d",
    hint="Compare each statement with the measured table in the chapter: the naive rows "
    "against their pass counts, the two fused rows against each other and the copy, the "
    "fresh-output rows, and the Welford row.",
    why=COST_WHY,
)
