"""Checks for lab 10, norms in low precision: bfloat16 rounding, LayerNorm and RMSNorm with
float16 inputs and outputs and float32 statistics, and the parallel merge of two variances.

The learner writes, in NumPy::

    lowp_to_bfloat16(x) -> y                          # x: float32; y: float32 holding bfloat16 values
    lowp_layernorm(x, gamma, beta, eps=1e-5) -> y     # x: (..., d) float16 or float32; y: x's dtype
    lowp_rmsnorm(x, gamma, eps=1e-6) -> y             # x: (..., d) float16 or float32; y: x's dtype
    lowp_rmsnorm_bf16(x, gamma, eps=1e-6) -> y        # x, y: float32 holding bfloat16 values
    lowp_layernorm_bf16(x, gamma, beta, eps=1e-5) -> y  # x, y: float32 holding bfloat16 values
    lowp_merge(count_a, mean_a, m2_a, count_b, mean_b, m2_b) -> (mean, m2)   # float32 (N,)
    LOWP_ONEPASS_ANSWER, LOWP_GAIN_ANSWER = "a" | "b" | "c" | "d"

The oracles are PyTorch: ``torch.Tensor.to(torch.bfloat16)`` for the rounding, ``F.layer_norm``
and ``F.rms_norm`` in float64 on the float16 input converted exactly to float64, and
``torch.var_mean`` in float64 over a data set built to have the two halves' summaries (the merge
is never written here). The tolerances are derived from the formats' spacing, each where it is
defined; the chapter derives them too.
"""

from __future__ import annotations

import numpy as np

from normlab.grader.cases import F32, Args, Graded, probe_table, tensor64
from normlab.grader.core import CheckFailed, Lab
from normlab.grader.forbidden import from_scratch
from normlab.grader.memo import oracle
from normlab.grader.probes import Probe, choice

LAB = Lab(
    stem="10_low_precision",
    title="Norms in low precision",
    forbidden=from_scratch(
        "lowp_layernorm", "lowp_rmsnorm", "lowp_rmsnorm_bf16", "lowp_layernorm_bf16"
    ),
)

LN_EPS = 1e-5
RMS_EPS = 1e-6
D = 4096  # a transformer's width: the rows the kernels of the chapter normalize

# float16 has 10 stored fraction bits: its spacing just above 1 is eps16 = 2**-10, and a value
# y rounded once to float16 is off by at most half a spacing, 2**-11 |y|. Statistics kept in
# float32 (eps32 = 2**-23) move y by about d * 2**-24 * |mean| / sigma at most, under 2**-11 for
# the offsets graded here (|mean| / sigma <= 1e3, pairwise sums: log2(d) roundings, not d).
# So a right answer is within 2**-10 (|y| + 1) of the float64 value; the slips graded here miss
# it by 4 to 100 times that (one-pass variance, statistics rounded to float16).
F16 = {"rtol": 2.0**-10, "atol": 2.0**-10}
# bfloat16 rounding is exact arithmetic on the bits: the answer is the one nearest value, and
# its neighbours are 2**-8 |y| away (7 fraction bits), float32's smallest step 2**-149 ~ 1.4e-45.
# rtol 2**-30 and atol 1e-46 accept only the value itself (0 allowed error would divide by 0).
EXACT = {"rtol": 2.0**-30, "atol": 1e-46}
# The merge in float32: a handful of roundings of half a float32 spacing (2**-24 each) on
# positive terms, so well within 2**-20 relative; atol for a mean near 0, where the term
# delta * n_b / n carries an absolute error of 2**-24 |delta|.
MERGE = {"rtol": 2.0**-20, "atol": 2.0**-20}
# bfloat16 has 7 fraction bits: a float32 result rounded once to bfloat16 is within half a
# spacing, at most 2**-8 |y|, of itself, and the float32 result is within 2**-20 |y| of the
# exact one. Against the exact (unrounded) answer a right output is within 2**-8 + 2**-20
# relative; truncating, or rounding twice, moves some outputs up to a whole spacing, 2**-7.
BF16_ONCE = {"rtol": 2.0**-8 + 2.0**-20, "atol": 2.0**-30}
# LayerNorm in bfloat16: the output rounded once is within half a bfloat16 spacing, at most
# 2**-8 |y|, of the float32 result. The float32 statistics add an absolute error: the mean is
# off by about log2(d) * 2**-24 * |mean| (a pairwise sum), which moves y by |gamma| times that
# over sigma, about 7e-4 at |mean| / sigma = 1e3, under 2**-10; bfloat16 inputs have 8
# significant bits, so their float32 sums of d = 4096 values are often exact and the error is
# smaller still. So a right answer is within 2**-8 |y| + 2**-10 of the exact value. The slips
# graded miss it by far: statistics rounded to bfloat16 put the mean off by up to half a
# spacing (2 near 1000, where bfloat16's spacing is 4), the one-pass variance loses the
# variance near mean(x**2) ~ 1e6 (float32's spacing there is 0.0625).
BF16_LN = {"rtol": 2.0**-8, "atol": 2.0**-10}


# ----------------------------------------------------------------------------- oracles


@oracle
def oracle_to_bfloat16(x):
    import torch

    return torch.from_numpy(np.asarray(x, np.float32)).to(torch.bfloat16).float().numpy()


@oracle
def oracle_layernorm(x, gamma, beta, eps=LN_EPS):
    import torch.nn.functional as F

    d = x.shape[-1]
    return F.layer_norm(tensor64(x), (d,), tensor64(gamma), tensor64(beta), eps).numpy()


@oracle
def oracle_rmsnorm(x, gamma, eps=RMS_EPS):
    import torch.nn.functional as F

    return F.rms_norm(tensor64(x), (x.shape[-1],), tensor64(gamma), eps).numpy()


def _data_with(count, mean, m2):
    """(N, count) float64 rows whose mean is ``mean`` and whose sum of squared deviations is
    ``m2``: half the points at mean + s, half at mean - s (one at the mean when count is odd)."""
    mean, m2 = np.asarray(mean, np.float64), np.asarray(m2, np.float64)
    paired = count - count % 2
    s = np.sqrt(m2 / max(paired, 1))[:, None]
    signs = np.where(np.arange(paired) % 2 == 0, 1.0, -1.0)
    rows = mean[:, None] + s * signs
    if count % 2:
        rows = np.concatenate([rows, mean[:, None]], axis=1)
    return rows


@oracle
def oracle_merge(count_a, mean_a, m2_a, count_b, mean_b, m2_b):
    """The mean and M2 of the union of two data sets with these summaries, by torch.var_mean."""
    import torch

    both = np.concatenate(
        [_data_with(count_a, mean_a, m2_a), _data_with(count_b, mean_b, m2_b)], axis=1
    )
    var, mean = torch.var_mean(torch.from_numpy(both), dim=-1, correction=0)
    return mean.numpy(), var.numpy() * (count_a + count_b)


# ----------------------------------------------------------------------------- bfloat16 probes


def _bits(x):
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def _truncated(x):
    return (_bits(x) & np.uint32(0xFFFF0000)).view(np.float32)


def _ties_away(x):
    return ((_bits(x) + np.uint32(0x8000)) & np.uint32(0xFFFF0000)).view(np.float32)


def _through_float16(x):
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


BFLOAT16_PROBES = [
    Probe(
        "truncated",
        "This matches dropping the low 16 bits (bits & 0xFFFF0000): that rounds toward zero, "
        "and every value moves down in magnitude by up to one bfloat16 spacing. Round to the "
        "nearest: look at bit 15 and the bits below it before dropping them.",
        _truncated,
    ),
    Probe(
        "ties away from zero",
        "This matches adding 0x8000 before dropping the low 16 bits: right except at exact "
        "ties (low 16 bits exactly 0x8000), which it always rounds up in magnitude. "
        "IEEE rounding sends a tie to the even neighbour: add 0x7FFF plus the lowest kept bit.",
        _ties_away,
    ),
    Probe(
        "rounded to float16",
        "This matches x.astype(np.float16): float16 is another format (5 exponent bits, 10 "
        "fraction bits). bfloat16 keeps float32's 8 exponent bits and 7 fraction bits: the top "
        "16 bits of the float32 pattern, rounded.",
        _through_float16,
    ),
]


# ----------------------------------------------------------------------------- norm probes


def _layernorm_variant(stats="float32", variance="two-pass", use_eps=True):
    def layernorm(x, gamma, beta, eps):
        with np.errstate(all="ignore"):
            if stats == "float16":  # no cast at all: every step in the input's dtype
                mean = x.mean(axis=-1, keepdims=True)
                var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
                return (x - mean) / np.sqrt(var + eps) * gamma + beta
            x32 = x.astype(np.float32)
            mean = x32.mean(axis=-1, keepdims=True)
            if variance == "one-pass":
                var = (x32 * x32).mean(axis=-1, keepdims=True) - mean * mean
            else:
                var = ((x32 - mean) ** 2).mean(axis=-1, keepdims=True)
            rstd = 1 / np.sqrt(var + np.float32(eps if use_eps else 0.0))
            if stats == "cast first":  # statistics rounded to x's dtype, then normalized in it
                mean, rstd = mean.astype(x.dtype), rstd.astype(x.dtype)
                return (x - mean) * rstd * gamma + beta
            y = (x32 - mean) * rstd * gamma.astype(np.float32) + beta.astype(np.float32)
            return y.astype(x.dtype)

    return layernorm


def _rmsnorm_variant(squares="float32", centred=False, use_eps=True):
    def rmsnorm(x, gamma, eps):
        with np.errstate(all="ignore"):
            if squares == "float16":
                rms = np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
                return x / rms * gamma
            x32 = x.astype(np.float32)
            if centred:
                x32 = x32 - x32.mean(axis=-1, keepdims=True)
            mean_square = (x32 * x32).mean(axis=-1, keepdims=True)
            rms = np.sqrt(mean_square + np.float32(eps if use_eps else 0.0))
            return (x32 / rms * gamma.astype(np.float32)).astype(x.dtype)

    return rmsnorm


STATS_IN_FLOAT16 = (
    "This matches statistics computed in the input's dtype (no cast to float32): the mean, "
    "rounded to float16, is off by up to half a spacing (0.25 near 1000, where float16's "
    "spacing is 0.5), and a float16 square overflows above 256 (65504 is float16's largest "
    "value). Cast x to float32, compute the statistics and the output there, cast once at the end."
)

LAYERNORM_PROBES = [
    Probe("statistics in float16", STATS_IN_FLOAT16, _layernorm_variant(stats="float16")),
    Probe(
        "one-pass variance",
        "This matches var = mean(x**2) - mean(x)**2 in float32: with an offset c, both terms are "
        "about c**2 and their difference, the variance, is lost in their rounding (float32's "
        "spacing near 1e6 is 0.0625). Subtract the mean first: var = mean((x - mean)**2).",
        _layernorm_variant(variance="one-pass"),
    ),
    Probe(
        "statistics cast before normalizing",
        "This matches mean and 1/sqrt(var + eps) computed in float32 but cast to float16 before "
        "(x - mean) * rstd: the rounded mean is off by up to half a float16 spacing, which near "
        "an offset of 1000 is 0.25, a quarter of a standard deviation. Normalize in float32 and "
        "cast only the output.",
        _layernorm_variant(stats="cast first"),
    ),
    Probe(
        "no eps",
        "This matches (x - mean) / sqrt(var) with no eps: a constant row has variance 0 and "
        "gives 0/0 = NaN. Add eps inside the root, sqrt(var + eps).",
        _layernorm_variant(use_eps=False),
    ),
]

RMSNORM_PROBES = [
    Probe("squares in float16", STATS_IN_FLOAT16, _rmsnorm_variant(squares="float16")),
    Probe(
        "subtracts the mean",
        "This matches LayerNorm without beta: RMSNorm does not re-centre the row.",
        _rmsnorm_variant(centred=True),
    ),
    Probe(
        "no eps",
        "This matches x / sqrt(mean(x**2)) with no eps: a row of zeros gives 0/0 = NaN. Add eps "
        "inside the root, sqrt(mean(x**2) + eps).",
        _rmsnorm_variant(use_eps=False),
    ),
]


def _bf16_truncated(x, gamma, eps):
    x32, gamma32 = np.asarray(x, np.float32), np.asarray(gamma, np.float32)
    rms = np.sqrt((x32 * x32).mean(axis=-1, keepdims=True) + np.float32(eps))
    return _truncated(x32 / rms * gamma32)


def _bf16_rounded_twice(x, gamma, eps):
    x32, gamma32 = np.asarray(x, np.float32), np.asarray(gamma, np.float32)
    rms = np.sqrt((x32 * x32).mean(axis=-1, keepdims=True) + np.float32(eps))
    return oracle_to_bfloat16(oracle_to_bfloat16(x32 / rms) * gamma32)


TRUNCATED_TO_BFLOAT16 = (
    "This matches the float32 result with its low 16 bits dropped: that rounds toward zero, "
    "up to a whole bfloat16 spacing. Round to the nearest value: your lowp_to_bfloat16."
)

RMSNORM_BF16_PROBES = [
    Probe(
        "truncated to bfloat16",
        TRUNCATED_TO_BFLOAT16,
        _bf16_truncated,
    ),
    Probe(
        "rounded twice",
        "This matches x / RMS rounded to bfloat16, then multiplied by gamma and rounded again: "
        "two roundings of up to half a spacing each. Multiply by gamma in float32 and round once.",
        _bf16_rounded_twice,
    ),
]


def _bf16_row_sum(v):
    """The sum over the last axis accumulated in bfloat16: a pairwise tree whose every partial
    sum is rounded to bfloat16, what a reduction whose accumulator has the input's dtype does."""
    v = oracle_to_bfloat16(v)
    while v.shape[-1] > 1:
        if v.shape[-1] % 2:
            v = np.concatenate([v, np.zeros_like(v[..., :1])], axis=-1)
        v = oracle_to_bfloat16(v[..., 0::2] + v[..., 1::2])
    return v


def _bf16_accumulated(x, gamma, beta, eps):
    bf = oracle_to_bfloat16
    x = np.asarray(x, np.float32)
    d = np.float32(x.shape[-1])
    with np.errstate(all="ignore"):
        mean = bf(_bf16_row_sum(x) / d)
        centred = bf(x - mean)
        var = bf(_bf16_row_sum(bf(centred * centred)) / d)
        rstd = bf(1 / np.sqrt(bf(var + np.float32(eps))))
        return bf(bf(bf(centred * rstd) * gamma) + beta)


def _bf16_layernorm_variant(variance="two-pass", rounding="once"):
    def layernorm(x, gamma, beta, eps):
        bf = oracle_to_bfloat16
        x32 = np.asarray(x, np.float32)
        gamma32, beta32 = np.asarray(gamma, np.float32), np.asarray(beta, np.float32)
        with np.errstate(all="ignore"):
            mean = x32.mean(axis=-1, keepdims=True)
            if variance == "one-pass":
                var = (x32 * x32).mean(axis=-1, keepdims=True) - mean * mean
            else:
                var = ((x32 - mean) ** 2).mean(axis=-1, keepdims=True)
            rstd = 1 / np.sqrt(var + np.float32(eps))
            if rounding == "statistics":  # mean and rstd rounded, then normalized in bfloat16
                return bf(bf(bf(bf(x32 - bf(mean)) * bf(rstd)) * gamma32) + beta32)
            if rounding == "twice":  # x_hat rounded, then the affine, rounded again
                return bf(bf((x32 - mean) * rstd) * gamma32 + beta32)
            if rounding == "truncated":
                return _truncated((x32 - mean) * rstd * gamma32 + beta32)
            return bf((x32 - mean) * rstd * gamma32 + beta32)

    return layernorm


LAYERNORM_BF16_PROBES = [
    Probe(
        "truncated to bfloat16",
        TRUNCATED_TO_BFLOAT16,
        _bf16_layernorm_variant(rounding="truncated"),
    ),
    Probe(
        "accumulated in bfloat16",
        "This matches LayerNorm computed in bfloat16 throughout, its sums included: every partial "
        "sum rounded to bfloat16. With 8 significant bits a running sum loses up to half a "
        "spacing at each step (the sum of 4096 values near 1000 is about 4e6, where bfloat16's "
        "spacing is 16384), and the mean and variance come out wrong. Accumulate in float32: "
        "your lowp_layernorm on the float32 values, then one rounding.",
        _bf16_accumulated,
    ),
    Probe(
        "one-pass variance",
        "This matches var = mean(x**2) - mean(x)**2 in float32, rounded once: with an offset c "
        "both terms are about c**2 and their difference, the variance, is lost in their "
        "rounding (float32's spacing near 1e6 is 0.0625). Subtract the mean first: "
        "var = mean((x - mean)**2).",
        _bf16_layernorm_variant(variance="one-pass"),
    ),
    Probe(
        "statistics cast before normalizing",
        "This matches mean and 1/sqrt(var + eps) computed in float32 but rounded to bfloat16 "
        "before (x - mean) * rstd: the rounded mean is off by up to half a bfloat16 spacing, "
        "which near an offset of 1000 (spacing 4) is 2, twice the spread of a row of unit "
        "standard deviation. Normalize in "
        "float32 and round only the output.",
        _bf16_layernorm_variant(rounding="statistics"),
    ),
    Probe(
        "rounded twice",
        "This matches (x - mean) * rstd rounded to bfloat16, then gamma * x_hat + beta rounded "
        "again: two roundings of up to half a spacing each. Apply gamma and beta in float32 "
        "and round once, at the end.",
        _bf16_layernorm_variant(rounding="twice"),
    ),
]


# ----------------------------------------------------------------------------- merge probes


def _merge_variant(mean_weights="right", between=True):
    def merge(count_a, mean_a, m2_a, count_b, mean_b, m2_b):
        count = count_a + count_b
        delta = mean_b - mean_a
        if mean_weights == "equal":
            mean = (mean_a + mean_b) / 2
        elif mean_weights == "swapped":
            mean = mean_a + delta * count_a / count
        else:
            mean = mean_a + delta * count_b / count
        m2 = m2_a + m2_b
        if between == "over count squared":
            m2 = m2 + delta * delta * count_a * count_b / count**2
        elif between:
            m2 = m2 + delta * delta * count_a * count_b / count
        return mean, m2

    return merge


MERGE_PROBES = [
    Probe(
        "means weighted equally",
        "This matches a merged mean (mean_a + mean_b) / 2: that is right only when both halves "
        "hold as many values. Weight each mean by its count: "
        "mean = mean_a + delta * count_b / (count_a + count_b), delta = mean_b - mean_a.",
        _merge_variant(mean_weights="equal"),
    ),
    Probe(
        "weights swapped",
        "This matches mean_a + delta * count_a / (count_a + count_b): the weights are swapped. "
        "The merged mean moves from mean_a toward mean_b by the share of the values that B "
        "holds, count_b / (count_a + count_b).",
        _merge_variant(mean_weights="swapped"),
    ),
    Probe(
        "between-halves term missing",
        "This matches m2 = m2_a + m2_b: each half's M2 measures the spread around its own "
        "mean, and the two means differ. Add the spread between them, "
        "delta**2 * count_a * count_b / (count_a + count_b).",
        _merge_variant(between=False),
    ),
    Probe(
        "between-halves term divided by the count twice",
        "This matches a between-halves term delta**2 * count_a * count_b / (count_a + count_b)**2: "
        "that is its share of the variance, M2 / count, and M2 is a sum of squares, not a mean. "
        "Divide by count_a + count_b once: delta**2 * count_a * count_b / (count_a + count_b).",
        _merge_variant(between="over count squared"),
    ),
]


# Cancellation is chaotic: code that cancels matches no one probe to the digit, so these hints
# are said when an answer is wrong and no probe matches it.
LAYERNORM_HINT = (
    "If only the rows with a large offset fail, the statistics lose digits there: a variance "
    "computed as mean(x**2) - mean(x)**2, or sums in float16, cancel or overflow when the mean "
    "is large. Subtract the mean first, in float32."
)
LAYERNORM_BF16_HINT = (
    "If only the rows with a large offset fail, the statistics lose digits there: bfloat16 "
    "keeps 8 significant bits, so a mean or a sum rounded to bfloat16, or the one-pass "
    "variance, is off when the mean is large. Compute the statistics and the output in float32 "
    "from the float32 values, and round once at the end with your lowp_to_bfloat16."
)
MERGE_HINT = (
    "If only the large offset fails, m2 went back through sums of squares (m2 + count * mean**2 "
    "per half) and subtracted the whole's count * mean**2: the one-pass formula again, which "
    "cancels in float32 when the mean is large. Merge the M2s themselves (Chan et al.): "
    "m2_a + m2_b + delta**2 * count_a * count_b / (count_a + count_b)."
)


def _offset_hint(offset: float, hint: str) -> dict:
    """A case's ``hint=``: a hint about large offsets only where the case has one (a wrong
    answer at offset 0 or 1 has another cause, and the hint would send the learner after it)."""
    return {"hint": hint if offset >= 100 else ""}


# ----------------------------------------------------------------------------- inputs


def activations(rng, n_rows, d, offset, outliers=0, scale=1.0, dtype=np.float16):
    """Rows like a transformer's activations: ``offset`` + N(0, scale), and ``outliers`` channels
    50 times larger than the rest."""
    x = offset + scale * rng.normal(size=(n_rows, d))
    if outliers:
        x[:, :outliers] *= 50.0
    return x.astype(dtype)


def float32_values(rng):
    """float32 values a bfloat16 rounding must get right: random magnitudes, exact ties (low 16
    bits 0x8000 with an even and an odd kept bit), just below a tie, signs, zero, subnormals,
    and values that carry into the next power of two."""
    random = (rng.normal(size=40) * 10.0 ** rng.integers(-30, 30, size=40)).astype(np.float32)
    high = rng.integers(0x0080, 0x7F00, size=12, dtype=np.uint32) << np.uint32(16)
    ties = high | np.uint32(0x8000)
    below = high | np.uint32(0x7FFF)
    special = np.array(
        [0x00000000, 0x80000000, 0x00008000, 0x00018000, 0x3F7FFFFF, 0x3FFF8000, 0x3F808000],
        dtype=np.uint32,
    )
    bits = np.concatenate([ties, ties | np.uint32(0x80000000), below, special])
    return np.concatenate([random, bits.view(np.float32)])


def halves(rng, n_rows, count_a, count_b, offset):
    """Summaries (mean, M2) in float32 of two halves of rows with offset ``offset``."""
    data_a = offset + rng.normal(size=(n_rows, count_a))
    data_b = offset + 0.5 + 2.0 * rng.normal(size=(n_rows, count_b))  # B's mean and spread differ
    summaries = []
    for data in (data_a, data_b):
        mean = data.mean(axis=-1)
        summaries.append(
            (mean.astype(np.float32), ((data - mean[:, None]) ** 2).sum(-1).astype(np.float32))
        )
    (mean_a, m2_a), (mean_b, m2_b) = summaries
    return Args(count_a, mean_a, m2_a, count_b, mean_b, m2_b)


def affine16(rng, d):
    gamma = (1.0 + 0.1 * rng.normal(size=d)).astype(np.float16)
    beta = (0.1 * rng.normal(size=d)).astype(np.float16)
    return gamma, beta


BFLOAT16 = Graded("lowp_to_bfloat16", oracle_to_bfloat16, BFLOAT16_PROBES, tol=EXACT)
LAYERNORM = Graded("lowp_layernorm", oracle_layernorm, LAYERNORM_PROBES, tol=F16)
RMSNORM = Graded("lowp_rmsnorm", oracle_rmsnorm, RMSNORM_PROBES, tol=F16)
RMSNORM_BF16 = Graded("lowp_rmsnorm_bf16", oracle_rmsnorm, RMSNORM_BF16_PROBES, tol=BF16_ONCE)
LAYERNORM_BF16 = Graded(
    "lowp_layernorm_bf16",
    oracle_layernorm,
    LAYERNORM_BF16_PROBES,
    tol=BF16_LN,
)
MERGE_FN = Graded(
    "lowp_merge",
    oracle_merge,
    MERGE_PROBES,
    items=("mean", "m2"),
    tol=MERGE,
)

PROBES = probe_table(BFLOAT16, LAYERNORM, RMSNORM, RMSNORM_BF16, LAYERNORM_BF16, MERGE_FN)


# ----------------------------------------------------------------------------- bfloat16


@LAB.check(points=2, uses=["lowp_to_bfloat16"], seed=100)
def bfloat16_rounding(sub, rng):
    """bfloat16: nearest value, ties to even, float32 kept"""
    x = float32_values(rng)
    BFLOAT16.expect(sub, Args(x), what="float32 values of every size, with ties", dtype=np.float32)
    grid = rng.normal(size=(3, 5)).astype(np.float32)
    BFLOAT16.expect(sub, Args(grid), what="x of shape (3, 5)", dtype=np.float32)


# ----------------------------------------------------------------------------- LayerNorm


@LAB.check(points=3, uses=["lowp_layernorm"], seed=101)
def layernorm_offsets(sub, rng):
    """LayerNorm: float16 rows of d = 4096 with offsets 0 to 1000 and outliers"""
    gamma, beta = affine16(rng, D)
    for offset, outliers in [(0.0, 4), (100.0, 0), (1000.0, 0)]:
        x = activations(rng, 2, D, offset, outliers)
        what = f"float16 x of shape (2, 4096), offset {offset:g}, {outliers} outlier channels"
        LAYERNORM.expect(
            sub,
            Args(x, gamma, beta, eps=LN_EPS),
            what=what,
            dtype=np.float16,
            x=x,
            **_offset_hint(offset, LAYERNORM_HINT),
        )


@LAB.check(points=1, uses=["lowp_layernorm"], seed=102)
def layernorm_small(sub, rng):
    """LayerNorm: (B, L, d) float16, a constant row, eps = 1e-3"""
    gamma, beta = affine16(rng, 64)
    x = activations(rng, 6, 64, 300.0, scale=2.0).reshape(2, 3, 64)
    x[1, 2] = 300.0  # a constant row: variance 0, the output is beta
    args = Args(x, gamma, beta, eps=1e-3)
    hint = _offset_hint(300.0, LAYERNORM_HINT)
    LAYERNORM.expect(sub, args, what="float16 x of shape (2, 3, 64)", dtype=np.float16, x=x, **hint)


@LAB.check(points=1, uses=["lowp_layernorm"], seed=103)
def layernorm_float32(sub, rng):
    """LayerNorm: float32 in, float32 out"""
    x = activations(rng, 4, 256, 10.0, dtype=np.float32)
    gamma, beta = (g.astype(np.float32) for g in affine16(rng, 256))
    args = Args(x, gamma, beta, eps=LN_EPS)
    LAYERNORM.expect(sub, args, what="float32 x of shape (4, 256)", tol=F32, dtype=np.float32)


# ----------------------------------------------------------------------------- RMSNorm


@LAB.check(points=3, uses=["lowp_rmsnorm"], seed=104)
def rmsnorm_outliers(sub, rng):
    """RMSNorm: float16 rows of d = 4096 with outliers, and (B, L, d) with a row of zeros"""
    gamma = affine16(rng, D)[0]
    for offset, outliers, scale in [(0.0, 0, 1.0), (0.0, 4, 3.0), (10.0, 2, 1.0)]:
        x = activations(rng, 2, D, offset, outliers, scale=scale)
        what = f"float16 x of shape (2, 4096), offset {offset:g}, {outliers} outlier channels"
        RMSNORM.expect(sub, Args(x, gamma, eps=RMS_EPS), what=what, dtype=np.float16, x=x)
    x = activations(rng, 6, 64, 0.0, scale=2.0).reshape(3, 2, 64)
    x[1, 0] = 0.0  # RMS 0: the output is 0 with eps, NaN without
    RMSNORM.expect(
        sub,
        Args(x, gamma[:64], eps=RMS_EPS),
        what="float16 x of shape (3, 2, 64) with a row of zeros",
        dtype=np.float16,
        x=x,
    )


@LAB.check(points=1, uses=["lowp_rmsnorm"], seed=105)
def rmsnorm_float32(sub, rng):
    """RMSNorm: float32 in, float32 out"""
    x = activations(rng, 4, 256, 1.0, dtype=np.float32)
    gamma = affine16(rng, 256)[0].astype(np.float32)
    args = Args(x, gamma, eps=RMS_EPS)
    RMSNORM.expect(sub, args, what="float32 x of shape (4, 256)", tol=F32, dtype=np.float32)


@LAB.check(
    points=2, uses=["lowp_rmsnorm_bf16"], seed=107, needs=["lowp_to_bfloat16", "lowp_rmsnorm"]
)
def rmsnorm_bfloat16(sub, rng):
    """RMSNorm in bfloat16: rounded once, every output a bfloat16 value"""
    gamma = oracle_to_bfloat16(affine16(rng, D)[0])
    for outliers, scale in [(0, 1.0), (4, 3.0)]:
        x = oracle_to_bfloat16(activations(rng, 2, D, 0.0, outliers, scale, dtype=np.float32))
        what = f"bfloat16 values x of shape (2, 4096), {outliers} outlier channels"
        out = RMSNORM_BF16.expect(
            sub, Args(x, gamma, eps=RMS_EPS), what=what, dtype=np.float32, x=x
        )
        _expect_on_the_bfloat16_grid("lowp_rmsnorm_bf16", what, out)


def _expect_on_the_bfloat16_grid(function, what, out):
    """Fail unless every value the learner returned is a bfloat16 value (low 16 bits 0)."""
    y = out.items[0].array
    off_grid = int(np.count_nonzero(_bits(y) & np.uint32(0xFFFF)))
    if off_grid:
        raise CheckFailed(
            f"{function}, {what}: {off_grid} of {y.size} outputs are not bfloat16 "
            "values (their low 16 bits are not 0). Round the float32 result once, at the "
            "end, with your lowp_to_bfloat16."
        )


@LAB.check(
    points=2,
    uses=["lowp_layernorm_bf16"],
    seed=108,
    needs=["lowp_to_bfloat16", "lowp_layernorm"],
)
def layernorm_bfloat16(sub, rng):
    """LayerNorm in bfloat16: offsets 0 to 1000 and a constant row, float32 statistics, rounded once"""
    gamma, beta = (oracle_to_bfloat16(g.astype(np.float32)) for g in affine16(rng, D))
    for offset, outliers in [(0.0, 4), (100.0, 0), (1000.0, 0)]:
        x = oracle_to_bfloat16(activations(rng, 2, D, offset, outliers, dtype=np.float32))
        what = (
            f"bfloat16 values x of shape (2, 4096), offset {offset:g}, {outliers} outlier channels"
        )
        out = LAYERNORM_BF16.expect(
            sub,
            Args(x, gamma, beta, eps=LN_EPS),
            what=what,
            dtype=np.float32,
            x=x,
            **_offset_hint(offset, LAYERNORM_BF16_HINT),
        )
        _expect_on_the_bfloat16_grid("lowp_layernorm_bf16", what, out)
    x = oracle_to_bfloat16(activations(rng, 6, 64, 300.0, scale=2.0, dtype=np.float32))
    x = x.reshape(2, 3, 64)
    x[0, 1] = 300.0  # a constant row: variance 0, the output is beta with eps, NaN without
    what = "bfloat16 values x of shape (2, 3, 64) with a constant row"
    args = Args(x, gamma[:64], beta[:64], eps=LN_EPS)
    hint = _offset_hint(300.0, LAYERNORM_BF16_HINT)
    out = LAYERNORM_BF16.expect(sub, args, what=what, dtype=np.float32, x=x, **hint)
    _expect_on_the_bfloat16_grid("lowp_layernorm_bf16", what, out)


# ----------------------------------------------------------------------------- merge


@LAB.check(points=3, uses=["lowp_merge"], seed=106)
def merge_halves(sub, rng):
    """merge: two halves' (mean, M2) of unequal sizes, in float32"""
    for counts, offset in [((3000, 1096), 1.0), ((1024, 3072), 1000.0), ((1, 7), 300.0)]:
        args = halves(rng, 4, *counts, offset)
        what = f"counts {counts[0]} and {counts[1]}, offset {offset:g}"
        MERGE_FN.expect(sub, args, what=what, dtype=np.float32, **_offset_hint(offset, MERGE_HINT))


# ----------------------------------------------------------------------------- practice problems

LOWP_ONEPASS_WHY = {
    "b": (
        "float32 has enough bits for the values themselves; what is lost is the difference of "
        "two numbers near c**2 = 1e8, where float32's spacing is 8, far larger than the "
        "variance 1 being computed."
    ),
    "c": (
        "Welford's update and the two-pass formula never form c**2: they subtract the mean from "
        "each value first, so they keep the variance to within a percent here; only the "
        "one-pass formula loses it entirely."
    ),
    "d": (
        "Rounding errors in the two terms are independent, so their difference can come out "
        "negative or zero as well as too large: the root of a negative number is NaN."
    ),
}

LOWP_GAIN_WHY = {
    "a": (
        "bfloat16's 8 exponent bits give it float32's range, not its precision: the spacing just "
        "above 1 is 2**-7 = 0.0078, so 1 + 1e-3 rounds back to 1 and a gain stored as is never "
        "moves."
    ),
    "b": (
        "The 7 fraction bits are relative to the value: near 1e-3 the spacing is 2**-17, about "
        "8e-6, so the offset w keeps an update of 1e-3; only the gain stored as is loses it."
    ),
    "c": (
        "Rounding 1 + w in the forward pass is another matter: the stored w keeps adding up the "
        "updates, while a stored gain of 1 never moves."
    ),
}


choice(
    LAB,
    "problem 1: the one-pass variance at an offset of 1e4 (multiple choice)",
    points=1,
    name="LOWP_ONEPASS_ANSWER",
    key="a",
    hint="Compare the size of the variance with float32's spacing near mean(x**2).",
    why=LOWP_ONEPASS_WHY,
)


choice(
    LAB,
    "problem 2: a bfloat16 gain near 1 (multiple choice)",
    points=1,
    name="LOWP_GAIN_ANSWER",
    key="d",
    hint="Find bfloat16's spacing near 1 and near 1e-3, and compare each with the update.",
    why=LOWP_GAIN_WHY,
)
