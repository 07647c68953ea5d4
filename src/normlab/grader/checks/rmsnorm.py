"""Checks for lab 04, RMSNorm: forward, backward, and the practice problem on Jacobians.

The learner writes, in NumPy::

    rmsnorm_forward(x, gamma, eps=1e-6) -> y                  # x: (..., d); gamma: (d,)
    rmsnorm_backward(dy, x, gamma, eps=1e-6) -> (dx, dgamma)
    layernorm_jacobian(x, gamma, eps) -> J                     # x: (d,); J: (d, d), J[i, j] = dy_i/dx_j
    rmsnorm_jacobian(x, gamma, eps) -> J
    JACOBIAN_ANSWER = "a" | "b" | "c" | "d"                    # how the two Jacobians compare

RMS(x) = sqrt(mean(x**2) + eps) over the last axis, y = gamma * x / RMS(x): eps inside the root,
as in ``torch.nn.functional.rms_norm``. The oracle is PyTorch in float64 (``F.rms_norm``,
``F.layer_norm`` and autograd, including ``torch.autograd.functional.jacobian``) plus invariants;
the probes are known-wrong variants, each with the hint that explains it.
"""

from __future__ import annotations

import numpy as np

from normlab.grader.cases import F32, Args, Graded, backward, gain, probe_table, tensor64
from normlab.grader.core import CheckFailed, Lab
from normlab.grader.forbidden import AUTOGRAD, from_scratch
from normlab.grader.memo import oracle
from normlab.grader.probes import Probe, choice, eps_ignored

LAB = Lab(
    stem="04_rmsnorm",
    title="RMSNorm",
    forbidden=from_scratch(
        "rmsnorm_forward",
        rmsnorm_backward=AUTOGRAD,
        layernorm_jacobian=AUTOGRAD,
        rmsnorm_jacobian=AUTOGRAD,
    ),
)

EPS = 1e-6
JACOBIAN_TOL = {"rtol": 1e-10, "atol": 1e-10}  # closed form vs autograd, float64


# ----------------------------------------------------------------------------- oracle


@oracle
def oracle_forward(x, gamma, eps=EPS):
    import torch.nn.functional as F

    return F.rms_norm(tensor64(x), (x.shape[-1],), tensor64(gamma), eps).numpy()


@oracle
def oracle_backward(dy, x, gamma, eps=EPS):
    import torch.nn.functional as F

    xt, gt = tensor64(x, True), tensor64(gamma, True)
    backward(F.rms_norm(xt, (x.shape[-1],), gt, eps), dy)
    return xt.grad.numpy(), gt.grad.numpy()


@oracle
def oracle_jacobian(norm, x, gamma, eps):
    """J[i, j] = dy_i/dx_j of LayerNorm (``norm="layer"``) or RMSNorm for one vector x: (d,)."""
    import torch.nn.functional as F
    from torch.autograd.functional import jacobian

    d, gt = x.shape[-1], tensor64(gamma)
    if norm == "layer":
        return jacobian(lambda v: F.layer_norm(v, (d,), gt, None, eps), tensor64(x)).numpy()
    return jacobian(lambda v: F.rms_norm(v, (d,), gt, eps), tensor64(x)).numpy()


# ----------------------------------------------------------------------------- forward probes


def _mean_square(x, axis=-1):
    return (x**2).mean(axis=axis, keepdims=True)


def _forward_variant(denominator, numerator="x", use_gamma=True):
    def forward(x, gamma, eps):
        x = np.asarray(x, np.float64)
        top = x - x.mean(axis=-1, keepdims=True) if numerator == "centred" else x
        y = top / denominator(x, eps)
        return y * gamma if use_gamma else y

    return forward


def _square_without_keepdims(x, gamma, eps):
    if x.ndim != 2 or x.shape[0] != x.shape[1]:
        raise ValueError("only a square input broadcasts silently")
    return x / np.sqrt((x**2).mean(axis=-1) + eps) * gamma  # row j's RMS divides column j


def _rms(x, eps):
    return np.sqrt(_mean_square(x) + eps)


FORWARD_PROBES = [
    Probe(
        "subtracts the mean",
        "This matches LayerNorm: (x - mean) / sqrt(var + eps). RMSNorm does not re-centre: "
        "divide x itself (not x - mean) by RMS(x) = sqrt(mean(x**2) + eps).",
        _forward_variant(lambda x, eps: np.sqrt(x.var(axis=-1, keepdims=True) + eps), "centred"),
    ),
    Probe(
        "standard deviation instead of RMS",
        "This matches x / sqrt(var + eps): the standard deviation measures the spread around "
        "the mean. RMSNorm divides by the root of the mean of the squares, mean(x**2), which "
        "also counts the mean: RMS**2 = var + mean**2.",
        _forward_variant(lambda x, eps: np.sqrt(x.var(axis=-1, keepdims=True) + eps)),
    ),
    Probe(
        "eps outside the root",
        "This matches x / (sqrt(mean(x**2)) + eps). Put eps inside the root, "
        "sqrt(mean(x**2) + eps), as torch.nn.functional.rms_norm does; the two differ for rows "
        "whose RMS is near or below sqrt(eps).",
        _forward_variant(lambda x, eps: np.sqrt(_mean_square(x)) + eps),
    ),
    Probe(
        "no eps",
        "This matches x / sqrt(mean(x**2)) with no eps: a row of zeros gives 0/0 = NaN and a "
        "tiny row is blown up to RMS 1. Add eps inside the root.",
        _forward_variant(lambda x, eps: np.sqrt(_mean_square(x))),
    ),
    Probe(
        "sum of squares instead of mean",
        "This matches sqrt(sum(x**2) + eps): the sum grows with d. RMS is the root of the "
        "*mean* square, mean(x**2) = sum(x**2) / d.",
        _forward_variant(lambda x, eps: np.sqrt((x**2).sum(axis=-1, keepdims=True) + eps)),
    ),
    Probe(
        "square root missing",
        "This matches x / (mean(x**2) + eps): the mean square is a squared quantity. Divide by "
        "its square root, sqrt(mean(x**2) + eps).",
        _forward_variant(lambda x, eps: _mean_square(x) + eps),
    ),
    Probe(
        "gamma missing",
        "This matches x / RMS(x) without the gain. Finish with gamma * x / RMS(x).",
        _forward_variant(_rms, use_gamma=False),
    ),
    Probe(
        "wrong axis",
        "This matches a mean square taken over the batch axis (axis=0). RMSNorm averages over "
        "the features of each row: axis=-1.",
        _forward_variant(lambda x, eps: np.sqrt(_mean_square(x, axis=0) + eps)),
    ),
    Probe(
        "statistics without keepdims",
        "This matches a mean square of shape (N,) broadcast along the features: with a square "
        "input, row j's RMS divides column j without any error. Use keepdims=True.",
        _square_without_keepdims,
    ),
    *eps_ignored(_forward_variant(_rms), "RMSNorm"),
]


# ----------------------------------------------------------------------------- backward probes


def _backward_variant(
    projection="right",
    use_gamma=True,
    mean_term=False,
    dgamma_from_x=False,
    dgamma_axes="leading",
):
    def backward(dy, x, gamma, eps):
        x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
        rms = _rms(x, eps)
        x_hat = x / rms
        g = dy * gamma if use_gamma else dy
        dx = g
        if mean_term:
            dx = dx - g.mean(axis=-1, keepdims=True)
        if projection == "right":
            dx = dx - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)
        elif projection == "no 1/d":
            dx = dx - x_hat * (g * x_hat).sum(axis=-1, keepdims=True)
        elif projection == "no 1/rms^2":
            dx = dx - x * (g * x).mean(axis=-1, keepdims=True)
        dx = dx / rms
        lead = tuple(range(x.ndim - 1))
        axes = {"leading": lead, "last": -1, "first": 0}[dgamma_axes]
        dgamma = (dy * (x if dgamma_from_x else x_hat)).sum(axis=axes)
        return dx, dgamma

    return backward


def _layernorm_backward(dy, x, gamma, eps):
    """LayerNorm's whole backward pass, written for RMSNorm by mistake: (dx, dgamma)."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    centred = x - x.mean(axis=-1, keepdims=True)
    sigma = np.sqrt((centred**2).mean(axis=-1, keepdims=True) + eps)
    x_hat = centred / sigma
    g = dy * gamma
    dx = g - g.mean(axis=-1, keepdims=True) - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)
    return dx / sigma, (dy * x_hat).sum(axis=tuple(range(x.ndim - 1)))


BACKWARD_PROBES = [
    Probe(
        "RMS treated as a constant",
        "This matches dx = dy * gamma / RMS: it treats RMS(x) as a constant. RMS depends on "
        "every x_j of the row, which adds the x x^T term: subtract x_hat * mean(g * x_hat) "
        "(g = dy * gamma, x_hat = x / RMS, mean over the features) before dividing by RMS.",
        _backward_variant(projection="none"),
    ),
    Probe(
        "LayerNorm's mean term",
        "This has an extra - mean(g) term: that term comes from LayerNorm's mean, and RMSNorm "
        "has no mean. dx = (g - x_hat * mean(g * x_hat)) / RMS.",
        _backward_variant(mean_term=True),
    ),
    Probe(
        "1/d missing in the x x^T term",
        "This matches x_hat * sum(g * x_hat): d RMS**2 / d x_j = 2 x_j / d, so the x x^T term "
        "carries a 1/d. Use the mean over the features, not the sum.",
        _backward_variant(projection="no 1/d"),
    ),
    Probe(
        "1/RMS**2 missing in the x x^T term",
        "This matches x * mean(g * x): the x x^T term is x x^T / (d RMS**2), i.e. it uses "
        "x_hat = x / RMS on both sides: x_hat * mean(g * x_hat).",
        _backward_variant(projection="no 1/rms^2"),
    ),
    Probe(
        "gamma missing in dx",
        "This matches a dx that ignores gamma: the gradient flowing into x_hat is g = dy * gamma.",
        _backward_variant(use_gamma=False),
    ),
    Probe(
        "dgamma from x",
        "This matches dgamma = sum(dy * x). gamma multiplies x_hat = x / RMS, so "
        "dgamma = sum(dy * x_hat).",
        _backward_variant(dgamma_from_x=True),
    ),
    Probe(
        "summed over the features",
        "dgamma was summed over the feature axis. gamma has one entry per feature: sum over "
        "every other axis (all leading axes), leaving shape (d,).",
        _backward_variant(dgamma_axes="last"),
    ),
    Probe(
        "summed over the first axis only",
        "dgamma was summed over axis 0 only. For x of shape (B, L, d) sum over B and L: "
        "axis=tuple(range(x.ndim - 1)), leaving shape (d,).",
        _backward_variant(dgamma_axes="first"),
    ),
    Probe(
        "LayerNorm's backward pass",
        "This matches LayerNorm's backward pass: x_hat = (x - mean) / sqrt(var + eps), a "
        "- mean(g) term in dx, and dgamma = sum(dy * x_hat) with that x_hat. RMSNorm has no "
        "mean: x_hat = x / RMS with RMS = sqrt(mean(x**2) + eps), "
        "dx = (g - x_hat * mean(g * x_hat)) / RMS and dgamma = sum(dy * x_hat).",
        _layernorm_backward,
    ),
    *eps_ignored(_backward_variant(), "RMSNorm backward pass"),
]


# ----------------------------------------------------------------------------- Jacobian probes


def _layer_jacobian(
    mean_term=True, outer_term=True, outer_over_d=True, eps_in_sigma=True, eps_in_x_hat=True
):
    def jacobian(x, gamma, eps):
        x = np.asarray(x, np.float64)
        d, centred = x.shape[-1], x - x.mean()
        var = (centred**2).mean()
        sigma = np.sqrt(var + eps) if eps_in_sigma else np.sqrt(var)
        x_hat = centred / (np.sqrt(var + eps) if eps_in_x_hat else np.sqrt(var))
        inner = np.eye(d)
        if mean_term:
            inner = inner - 1.0 / d
        if outer_term:
            inner = inner - np.outer(x_hat, x_hat) / (d if outer_over_d else 1)
        return gamma[:, None] * inner / sigma

    return jacobian


def _rms_jacobian(mean_term=False, outer_term=True, over_d=True, over_rms2=True, eps_in="both"):
    def jacobian(x, gamma, eps):
        x = np.asarray(x, np.float64)
        d, mean_square = x.shape[-1], (x**2).mean()
        rms_prefactor = np.sqrt(mean_square + (eps if eps_in in ("both", "prefactor") else 0.0))
        rms_outer = np.sqrt(mean_square + (eps if eps_in in ("both", "outer") else 0.0))
        inner = np.eye(d)
        if mean_term:
            inner = inner - 1.0 / d
        if outer_term:
            inner = inner - np.outer(x, x) / (
                (d if over_d else 1) * (rms_outer**2 if over_rms2 else 1)
            )
        return gamma[:, None] * inner / rms_prefactor

    return jacobian


def _transposed(jacobian):
    return lambda x, gamma, eps: jacobian(x, gamma, eps).T


TRANSPOSED_HINT = (
    "This matches the transpose of the Jacobian. Row i is output y_i, column j is input x_j: "
    "J[i, j] = dy_i/dx_j, so gamma_i scales row i (gamma[:, None] * ..., not gamma[None, :])."
)

LAYER_JACOBIAN_PROBES = [
    Probe(
        "1/d term missing",
        "This matches (gamma_i / sigma)(delta_ij - x_hat_i x_hat_j / d): the -1/d term is "
        "missing. It is the path through the mean: d mu / d x_j = 1/d for every j.",
        _layer_jacobian(mean_term=False),
    ),
    Probe(
        "x_hat x_hat^T term missing",
        "This matches (gamma_i / sigma)(delta_ij - 1/d): the -x_hat_i x_hat_j / d term is "
        "missing. It is the path through sigma: d sigma / d x_j = x_hat_j / d.",
        _layer_jacobian(outer_term=False),
    ),
    Probe(
        "x_hat x_hat^T without 1/d",
        "This matches (gamma_i / sigma)(delta_ij - 1/d - x_hat_i x_hat_j): the outer-product "
        "term needs a 1/d too, because d sigma / d x_j = x_hat_j / d.",
        _layer_jacobian(outer_over_d=False),
    ),
    Probe(
        "eps missing in x_hat",
        "This uses eps in sigma but computes x_hat = (x - mean) / sqrt(var) without it. Use one "
        "sigma = sqrt(var + eps) everywhere: x_hat = (x - mean) / sigma.",
        _layer_jacobian(eps_in_x_hat=False),
    ),
    Probe(
        "eps missing in sigma",
        "This computes x_hat with eps but divides by sqrt(var) without it. Use one "
        "sigma = sqrt(var + eps) everywhere.",
        _layer_jacobian(eps_in_sigma=False),
    ),
    Probe("transposed", TRANSPOSED_HINT, _transposed(_layer_jacobian())),
]

RMS_JACOBIAN_PROBES = [
    Probe(
        "x x^T term missing",
        "This matches diag(gamma) / RMS: RMS(x) was treated as a constant. It depends on every "
        "x_j (d RMS / d x_j = x_j / (d RMS)), which gives the term -x_i x_j / (d RMS**2).",
        _rms_jacobian(outer_term=False),
    ),
    Probe(
        "LayerNorm's 1/d term",
        "This has LayerNorm's -1/d term, which comes from the mean. RMSNorm has no mean: "
        "J = (gamma_i / RMS)(delta_ij - x_i x_j / (d RMS**2)).",
        _rms_jacobian(mean_term=True),
    ),
    Probe(
        "1/d missing in the x x^T term",
        "This matches -x_i x_j / RMS**2 without the 1/d: RMS**2 is a *mean* of squares, so "
        "d RMS**2 / d x_j = 2 x_j / d.",
        _rms_jacobian(over_d=False),
    ),
    Probe(
        "1/RMS**2 missing in the x x^T term",
        "This matches -x_i x_j / d without dividing by RMS**2: the outer-product term is "
        "x_i x_j / (d RMS**2) = x_hat_i x_hat_j / d.",
        _rms_jacobian(over_rms2=False),
    ),
    Probe(
        "eps missing in the x x^T term",
        "This uses RMS with eps in the prefactor but without eps in the x x^T term. Use one "
        "RMS = sqrt(mean(x**2) + eps) everywhere.",
        _rms_jacobian(eps_in="prefactor"),
    ),
    Probe(
        "eps missing in the prefactor",
        "This uses RMS with eps in the x x^T term but divides by sqrt(mean(x**2)) without it. Use "
        "one RMS = sqrt(mean(x**2) + eps) everywhere.",
        _rms_jacobian(eps_in="outer"),
    ),
    Probe("transposed", TRANSPOSED_HINT, _transposed(_rms_jacobian())),
]


# ----------------------------------------------------------------------------- inputs


def rows_of_varied_size(rng, shape):
    """Rows whose RMS spans 1e-4..10 (eps placement shows) with offsets (the mean matters)."""
    n_rows = int(np.prod(shape[:-1]))
    scales = np.geomspace(1e-4, 10, n_rows).reshape(shape[:-1] + (1,))
    offsets = rng.uniform(-2, 2, size=shape[:-1] + (1,))
    return (rng.normal(size=shape) + offsets) * scales


FORWARD = Graded("rmsnorm_forward", oracle_forward, FORWARD_PROBES)
BACKWARD = Graded("rmsnorm_backward", oracle_backward, BACKWARD_PROBES, items=("dx", "dgamma"))

PROBES = probe_table(
    FORWARD,
    BACKWARD,
    layernorm_jacobian=LAYER_JACOBIAN_PROBES,
    rmsnorm_jacobian=RMS_JACOBIAN_PROBES,
)
JACOBIAN_HINT = (
    "Row i is output y_i, column j is input x_j; compare your matrix with the closed "
    "form entry by entry for a small d (d = 2 or 3)."
)
JACOBIANS = {
    "layer": Graded(
        "layernorm_jacobian",
        lambda x, gamma, eps: oracle_jacobian("layer", x, gamma, eps),
        LAYER_JACOBIAN_PROBES,
        tol=JACOBIAN_TOL,
        options={"hint": JACOBIAN_HINT},
    ),
    "rms": Graded(
        "rmsnorm_jacobian",
        lambda x, gamma, eps: oracle_jacobian("rms", x, gamma, eps),
        RMS_JACOBIAN_PROBES,
        tol=JACOBIAN_TOL,
        options={"hint": JACOBIAN_HINT},
    ),
}


# ----------------------------------------------------------------------------- forward checks


@LAB.check(points=2, uses=["rmsnorm_forward"], seed=60)
def forward_random(sub, rng):
    """forward matches torch on random (N, d) inputs"""
    for shape in [(8, 8), (6, 8), (1, 16)]:  # square first: exposes missing keepdims
        x = rows_of_varied_size(rng, shape)
        FORWARD.expect(sub, Args(x, gain(rng, shape[-1]), eps=EPS), what=f"x of shape {shape}")
    # an eps that nobody hard-codes: an eps accepted but ignored shows
    x = rows_of_varied_size(rng, (6, 8))
    FORWARD.expect(sub, Args(x, gain(rng, 8), eps=1e-3), what="x of shape (6, 8), eps = 1e-3")


@LAB.check(points=1, uses=["rmsnorm_forward"], seed=61)
def forward_3d(sub, rng):
    """forward handles (B, L, d) and non-contiguous input"""
    gamma = gain(rng, 8)
    x = rows_of_varied_size(rng, (2, 3, 8))
    FORWARD.expect(sub, Args(x, gamma, eps=EPS), what="x of shape (2, 3, 8)")
    wide = rows_of_varied_size(rng, (5, 16))
    FORWARD.expect(
        sub,
        Args(wide[:, ::2], gamma, eps=EPS),
        what="a non-contiguous view x[:, ::2] of shape (5, 8)",
    )


@LAB.check(points=1, uses=["rmsnorm_forward"], seed=62)
def forward_small_rms(sub, rng):
    """forward stays finite as the RMS goes to 0"""
    x = np.empty((4, 8))
    x[0] = 0.0  # a row of zeros: RMS exactly 0 without eps
    x[1] = 1e-4 * rng.normal(size=8)  # RMS ~1e-4, below sqrt(eps) = 1e-3
    x[2] = 1e-3 * rng.normal(size=8)  # RMS ~ sqrt(eps): inside vs outside differ most
    x[3] = rng.normal(size=8)
    FORWARD.expect(
        sub, Args(x, gain(rng, 8), eps=EPS), what="rows of zeros and of RMS 1e-4 and 1e-3"
    )


@LAB.check(points=1, uses=["rmsnorm_forward"], seed=63)
def forward_float32(sub, rng):
    """forward keeps float32 as float32"""
    x = (rng.normal(size=(6, 64)) * 3 + 1).astype(np.float32)
    FORWARD.expect(
        sub,
        Args(x, gain(rng, 64, np.float32), eps=EPS),
        what="float32 x of shape (6, 64)",
        tol=F32,
        dtype=np.float32,
    )


@LAB.check(points=1, uses=["rmsnorm_forward"], seed=64)
def forward_d1(sub, rng):
    """forward with d = 1 keeps the sign"""
    x = rng.normal(size=(5, 1)) * 10
    x[0, 0] = 1e-3  # |x| ~ sqrt(eps): not exactly +-gamma
    FORWARD.expect(sub, Args(x, np.array([2.0]), eps=EPS), what="d = 1, x of shape (5, 1)")


@LAB.check(points=1, uses=["rmsnorm_forward"], seed=65)
def forward_invariants(sub, rng):
    """forward output: mean square 1 per row, scale invariant"""
    x = rng.normal(size=(4, 32)) * 5 + 2
    ones = np.ones(32)
    out = sub.call("rmsnorm_forward", x, ones, eps=EPS)
    item = out.items[0]
    if out.is_tuple or item.array is None or item.array.shape != x.shape:
        raise CheckFailed(f"rmsnorm_forward returned {out.describe()}, expected shape (4, 32)")
    y = item.array.astype(np.float64)
    mean_squares = (y**2).mean(axis=-1)
    row = int(np.argmax(np.abs(mean_squares - 1)))
    if abs(mean_squares[row] - 1) > 1e-4:
        raise CheckFailed(
            f"with gamma = 1 every row of the output should have mean square ~1; row {row} has "
            f"{mean_squares[row]:.4g}. Divide each row by its own RMS, sqrt(mean(x**2) + eps)."
        )
    scaled = sub.call("rmsnorm_forward", 3.0 * x, ones, eps=EPS).items[0]
    if scaled.array is None or not np.allclose(scaled.array, y, rtol=1e-6, atol=1e-8):
        raise CheckFailed(
            "RMSNorm(3 x) should equal RMSNorm(x) (scale invariance), but it does not: the RMS "
            "must be recomputed from the input itself, not fixed or cached."
        )


# ----------------------------------------------------------------------------- backward checks


@LAB.check(points=2, uses=["rmsnorm_backward"], seed=70)
def backward_dx(sub, rng):
    """backward: dx matches autograd"""
    for shape in [(4, 6), (3, 16)]:
        x = rows_of_varied_size(rng, shape)
        x[0] = 0.0  # a row of zeros: the gradient is finite, dy * gamma / sqrt(eps)
        args = Args(rng.normal(size=shape), x, gain(rng, shape[-1]), eps=EPS)
        BACKWARD.expect(sub, args, what=f"x of {shape}", indices=[0], x=x)
    # an eps that nobody hard-codes: an eps accepted but ignored shows
    x = rows_of_varied_size(rng, (4, 6))
    dy = rng.normal(size=(4, 6))
    args = Args(dy, x, gain(rng, 6), eps=1e-3)
    BACKWARD.expect(sub, args, what="x of (4, 6), eps = 1e-3", indices=[0], x=x)


@LAB.check(points=1, uses=["rmsnorm_backward"], seed=71)
def backward_dgamma(sub, rng):
    """backward: dgamma matches autograd"""
    x = rows_of_varied_size(rng, (5, 6))
    args = Args(rng.normal(size=(5, 6)), x, gain(rng, 6), eps=EPS)
    BACKWARD.expect(sub, args, what="x of shape (5, 6)", indices=[1], x=x)


@LAB.check(points=1, uses=["rmsnorm_backward"], seed=72)
def backward_3d(sub, rng):
    """backward on (B, L, d): both gradients right, dgamma of shape (d,)"""
    x = rows_of_varied_size(rng, (2, 3, 5))
    dy = rng.normal(size=(2, 3, 5))
    BACKWARD.expect(sub, Args(dy, x, gain(rng, 5), eps=EPS), what="x of shape (2, 3, 5)", x=x)


# ----------------------------------------------------------------------------- practice problem


def _jacobian_random(sub, norm, seed):
    rng = np.random.default_rng(seed)
    for d, offset in [(6, 1.5), (9, -0.7)]:
        x = rng.normal(size=d) * 2 + offset  # an offset: the mean matters
        JACOBIANS[norm].expect(
            sub, Args(x, gain(rng, d), 1e-5), what=f"x of shape ({d},), eps = 1e-5"
        )


def _jacobian_eps(sub, norm, seed):
    rng = np.random.default_rng(seed)
    x = 0.01 * rng.normal(size=5)  # variance ~1e-4, comparable to eps: eps must be consistent
    graded = JACOBIANS[norm]
    graded.expect(sub, Args(x, gain(rng, 5), 1e-4), what="small x of shape (5,), eps = 1e-4")
    graded.expect(sub, Args(np.array([0.8]), np.array([1.7]), 0.25), what="d = 1, eps = 0.25")


@LAB.check(points=2, uses=["layernorm_jacobian"])
def problem_layernorm_jacobian(sub):
    """problem 1: layernorm_jacobian matches autograd"""
    _jacobian_random(sub, "layer", 80)


@LAB.check(points=1, uses=["layernorm_jacobian"])
def problem_layernorm_jacobian_eps(sub):
    """problem 1: layernorm_jacobian with eps comparable to the variance, and d = 1"""
    _jacobian_eps(sub, "layer", 81)


@LAB.check(points=2, uses=["rmsnorm_jacobian"])
def problem_rmsnorm_jacobian(sub):
    """problem 1: rmsnorm_jacobian matches autograd"""
    _jacobian_random(sub, "rms", 82)


@LAB.check(points=1, uses=["rmsnorm_jacobian"])
def problem_rmsnorm_jacobian_eps(sub):
    """problem 1: rmsnorm_jacobian with eps comparable to the mean square, and d = 1"""
    _jacobian_eps(sub, "rms", 83)


JACOBIAN_WHY = {
    "a": (
        "Removing the mean removes the -1/d term, not the coupling: the RMS depends on every "
        "feature, which gives -x_i x_j / (d r**2) off the diagonal."
    ),
    "c": (
        "gamma only scales rows and beta does not enter the Jacobian; the coupling terms "
        "through mu and sigma remain."
    ),
    "d": (
        "gamma_i multiplies row i, so for a non-constant gamma J.T != J, and a backward pass "
        "computing J @ dy instead of J.T @ dy is wrong."
    ),
}


choice(
    LAB,
    "problem 1: how the two Jacobians compare (multiple choice)",
    points=1,
    name="JACOBIAN_ANSWER",
    key="b",
    hint="Look at which entries of your two Jacobians are zero, and count the terms that "
    "are subtracted from delta_ij in each.",
    why=JACOBIAN_WHY,
)
