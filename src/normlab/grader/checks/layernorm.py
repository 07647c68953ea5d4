"""Checks for lab 03, LayerNorm: forward, backward, and practice problem 1 (d = 1).

The learner writes, in NumPy::

    layernorm_forward(x, gamma, beta, eps=1e-5) -> y            # x: (..., d); gamma, beta: (d,)
    layernorm_backward(dy, x, gamma, eps=1e-5) -> (dx, dgamma, dbeta)
    d1_output(x, gamma, beta) -> y                               # what LN returns when d = 1
    D1_ANSWER = "a" | "b" | "c" | "d"                            # why d = 1 is useless
    d2_xhat(x, eps=1e-5) -> x_hat                                # problem 2: d = 2 in closed form
    D2_ANSWER, INVARIANCE_ANSWER                                 # problems 2 and 3

The oracle is PyTorch in float64 (``F.layer_norm`` and autograd) plus invariants; the probes
are known-wrong variants, each with the hint that explains it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from normlab.grader.cases import (
    Args,
    Graded,
    affine_params,
    backward,
    probe_table,
    rows_with_varied_scale,
    tensor64,
)
from normlab.grader.core import CheckFailed, Lab
from normlab.grader.forbidden import AUTOGRAD, from_scratch
from normlab.grader.memo import oracle
from normlab.grader.probes import (
    Probe,
    affine_grads,
    array_of,
    both,
    choice,
    eps_ignored,
    norm_dx,
)

LAB = Lab(
    stem="03_layernorm",
    title="LayerNorm",
    forbidden=from_scratch(
        "layernorm_forward", "d1_output", "d2_xhat", layernorm_backward=AUTOGRAD
    ),
)

EPS = 1e-5
F32_OFFSET = {"rtol": 1e-3, "atol": 1e-2}  # float32 with an offset of 1e4: measured error ~2e-3


# ----------------------------------------------------------------------------- oracle


@oracle
def oracle_forward(x, gamma, beta, eps=EPS):
    import torch.nn.functional as F

    d = x.shape[-1]
    return F.layer_norm(tensor64(x), (d,), tensor64(gamma), tensor64(beta), eps).numpy()


@oracle
def oracle_backward(dy, x, gamma, eps=EPS):
    import torch
    import torch.nn.functional as F

    d = x.shape[-1]
    xt, gt = tensor64(x, requires_grad=True), tensor64(gamma, requires_grad=True)
    bt = torch.zeros(d, dtype=torch.float64, requires_grad=True)
    backward(F.layer_norm(xt, (d,), gt, bt, eps), dy)
    return xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()


# ----------------------------------------------------------------------------- probes


def _stats(x, axis=-1, ddof=0):
    mean = x.mean(axis=axis, keepdims=True)
    var = ((x - mean) ** 2).sum(axis=axis, keepdims=True) / (x.shape[axis] - ddof)
    return mean, var


def _without_keepdims(var_of_centred: bool):
    """Statistics of shape (N,) that NumPy broadcasts along the features without complaint.

    That happens when the input is square (N == d) or has d = 1: x - mean then subtracts row
    j's mean from column j (or builds an (N, N) array).
    """

    def forward(x, gamma, beta, eps):
        if x.ndim != 2:
            raise ValueError("a 3-D input raises instead")
        mean = x.mean(axis=-1)
        centred = x - mean
        var = (centred**2).mean(axis=-1) if var_of_centred else x.var(axis=-1)
        return centred / np.sqrt(var + eps) * gamma + beta

    return forward


def _variant(axis=-1, ddof=0, eps_where="inside", affine="normal"):
    def forward(x, gamma, beta, eps):
        x = np.asarray(x, np.float64)
        mean, var = _stats(x, axis, ddof)
        if eps_where == "inside":
            xhat = (x - mean) / np.sqrt(var + eps)
        elif eps_where == "outside":
            xhat = (x - mean) / (np.sqrt(var) + eps)
        else:
            xhat = (x - mean) / np.sqrt(var)
        if affine == "none":
            return xhat
        if affine == "swapped":
            return xhat * beta + gamma
        return xhat * gamma + beta

    return forward


FORWARD_PROBES = [
    Probe(
        "eps outside the root",
        "This matches (x - mean) / (sqrt(var) + eps). Put eps inside the root, "
        "sqrt(var + eps): it is a floor under the variance, which is what keeps a near-constant "
        "row from being blown up.",
        _variant(eps_where="outside"),
    ),
    Probe(
        "no eps",
        "This matches dividing by sqrt(var) with no eps. A constant row then gives 0/0 = NaN; "
        "add eps inside the root: sqrt(var + eps).",
        _variant(eps_where="none"),
    ),
    Probe(
        "unbiased variance",
        "This matches the unbiased variance (dividing by d - 1, ddof=1). LayerNorm uses the "
        "population variance of the row: divide by d (np.var's default, ddof=0).",
        _variant(ddof=1),
    ),
    Probe(
        "wrong axis",
        "This matches statistics taken over the batch axis (axis=0): that is BatchNorm's axis. "
        "LayerNorm averages over the features of each example: axis=-1.",
        _variant(axis=0),
    ),
    Probe(
        "affine step missing",
        "This matches x_hat without the affine step. Finish with gamma * x_hat + beta.",
        _variant(affine="none"),
    ),
    Probe(
        "gamma and beta swapped",
        "This matches x_hat * beta + gamma: gamma scales, beta shifts (gamma * x_hat + beta).",
        _variant(affine="swapped"),
    ),
    *(
        Probe(
            "statistics without keepdims",
            "This matches statistics of shape (N,) broadcast along the features: with a square "
            "input (or d = 1) x - mean subtracts row j's mean from column j without any error. "
            "Use keepdims=True.",
            _without_keepdims(var_of_centred),
        )
        for var_of_centred in (True, False)
    ),
]
_BY_NAME = {probe.name: probe for probe in FORWARD_PROBES}
FORWARD_PROBES += [
    # The Annotated Transformer's LayerNorm: a * (x - mean) / (x.std(-1) + eps) + b, with
    # torch's std unbiased by default.
    both(
        _BY_NAME["unbiased variance"],
        _BY_NAME["eps outside the root"],
        _variant(ddof=1, eps_where="outside"),
    ),
    *eps_ignored(_variant(), "LayerNorm"),
]


def _backward_variant(
    mean_term=True,
    var_term=True,
    use_gamma=True,
    dgamma_axes="leading",
    swap=False,
    dgamma_from_x=False,
    with_eps=True,
    ddof=0,
):
    def backward(dy, x, gamma, eps):
        x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
        eps = eps if with_eps else 0.0
        mean, var = _stats(x, ddof=ddof)
        inv_std = 1.0 / np.sqrt(var + eps)
        xhat = (x - mean) * inv_std
        g = dy * gamma if use_gamma else dy
        dx = norm_dx(g, xhat, inv_std, -1, mean_term=mean_term, var_term=var_term)
        lead = tuple(range(x.ndim - 1))
        axes = {"leading": lead, "last": -1, "first": 0}[dgamma_axes]
        return affine_grads(dx, dy, x if dgamma_from_x else xhat, axes, swap)

    return backward


BACKWARD_PROBES = [
    Probe(
        "mean and variance treated as constants",
        "This matches dx = dy * gamma / sigma: it treats the mean and the variance as constants. "
        "Both depend on every x_j of the row, so dx has two more terms: subtract mean(g) and "
        "x_hat * mean(g * x_hat), where g = dy * gamma (means over the features).",
        _backward_variant(mean_term=False, var_term=False),
    ),
    Probe(
        "mean term missing",
        "This has the variance term but not the mean term: subtract mean(g) over the features "
        "(g = dy * gamma) — the mean depends on every input.",
        _backward_variant(mean_term=False),
    ),
    Probe(
        "variance term missing",
        "This has the mean term but not the variance term: subtract x_hat * mean(g * x_hat) over "
        "the features — sigma depends on every input too.",
        _backward_variant(var_term=False),
    ),
    Probe(
        "gamma missing in dx",
        "This matches a dx that ignores gamma: the gradient flowing into x_hat is dy * gamma.",
        _backward_variant(use_gamma=False),
    ),
    Probe(
        "dgamma and dbeta swapped",
        "dgamma and dbeta are swapped: dbeta = sum of dy, dgamma = sum of dy * x_hat.",
        _backward_variant(swap=True),
    ),
    Probe(
        "dgamma from x",
        "This matches dgamma = sum(dy * x). gamma multiplies x_hat, so dgamma = sum(dy * x_hat).",
        _backward_variant(dgamma_from_x=True),
    ),
    Probe(
        "summed over the features",
        "dgamma/dbeta were summed over the feature axis. gamma has one entry per feature: sum over "
        "every other axis (all leading axes), leaving shape (d,).",
        _backward_variant(dgamma_axes="last"),
    ),
    Probe(
        "summed over the first axis only",
        "dgamma/dbeta were summed over axis 0 only. For x of shape (B, L, d) sum over B and L: "
        "axis=tuple(range(x.ndim - 1)), leaving shape (d,).",
        _backward_variant(dgamma_axes="first"),
    ),
    Probe(
        "no eps in the backward pass",
        "This matches a backward pass with sigma = sqrt(var), without eps: a constant row then "
        "gives 0/0. Use the forward pass's sigma = sqrt(var + eps) throughout.",
        _backward_variant(with_eps=False),
    ),
    Probe(
        "unbiased variance in the backward pass",
        "This matches a backward pass built on the unbiased variance (dividing by d - 1, "
        "ddof=1). The forward pass divides by d (the population variance of the row), and the "
        "backward pass differentiates that forward: compute sigma and x_hat with np.var's "
        "default, ddof=0.",
        _backward_variant(ddof=1),
    ),
    *eps_ignored(_backward_variant(), "LayerNorm backward pass"),
]


# ----------------------------------------------------------------------------- inputs


FORWARD = Graded("layernorm_forward", oracle_forward, FORWARD_PROBES)
BACKWARD = Graded(
    "layernorm_backward", oracle_backward, BACKWARD_PROBES, items=("dx", "dgamma", "dbeta")
)


# ----------------------------------------------------------------------------- forward checks


@LAB.check(points=2, uses=["layernorm_forward"], seed=30)
def forward_random(sub, rng):
    """forward matches torch on random (N, d) inputs"""
    for shape in [(8, 8), (6, 8), (1, 16)]:  # square first: exposes missing keepdims
        x = rows_with_varied_scale(rng, shape)
        gamma, beta = affine_params(rng, shape[-1])
        FORWARD.expect(sub, Args(x, gamma, beta, eps=EPS), what=f"x of shape {shape}")
    # an eps that nobody hard-codes: an eps accepted but ignored shows
    x = rows_with_varied_scale(rng, (6, 8))
    gamma, beta = affine_params(rng, 8)
    FORWARD.expect(sub, Args(x, gamma, beta, eps=1e-3), what="x of shape (6, 8), eps = 1e-3")


@LAB.check(points=1, uses=["layernorm_forward"], seed=31)
def forward_3d(sub, rng):
    """forward handles (B, L, d) and non-contiguous input"""
    x = rows_with_varied_scale(rng, (2, 3, 8))
    gamma, beta = affine_params(rng, 8)
    FORWARD.expect(sub, Args(x, gamma, beta, eps=EPS), what="x of shape (2, 3, 8)")
    wide = rows_with_varied_scale(rng, (5, 16))
    FORWARD.expect(
        sub,
        Args(wide[:, ::2], gamma, beta, eps=EPS),
        what="a non-contiguous view x[:, ::2] of shape (5, 8)",
    )


@LAB.check(points=1, uses=["layernorm_forward"], seed=32)
def forward_small_variance(sub, rng):
    """forward stays finite as the variance goes to 0"""
    x = np.empty((4, 8))
    x[0] = 3.0  # a constant row: variance exactly 0
    x[1] = -1.5
    x[2] = 2.0 + 1e-4 * rng.normal(size=8)  # variance ~1e-8, far below eps
    x[3] = rng.normal(size=8)
    gamma, beta = affine_params(rng, 8)
    FORWARD.expect(sub, Args(x, gamma, beta, eps=EPS), what="rows with variance 0 and 1e-8")


@LAB.check(points=1, uses=["layernorm_forward"], seed=33)
def forward_offset_float32(sub, rng):
    """forward is accurate with a large offset (x + 1e4, float32)"""
    x = (rng.normal(size=(6, 64)) + 1e4).astype(np.float32)
    gamma, beta = affine_params(rng, 64, np.float32)
    FORWARD.expect(
        sub,
        Args(x, gamma, beta, eps=EPS),
        what="float32 x + 1e4 of shape (6, 64)",
        tol=F32_OFFSET,
        dtype=np.float32,
        hint="Compute the variance as the mean of (x - mean)**2. The one-pass formula "
        "mean(x**2) - mean(x)**2 subtracts two numbers near 1e8 that float32 stores only to "
        "about +-8, so the variance it returns is noise (it can even be negative).",
    )


@LAB.check(points=1, uses=["layernorm_forward"], seed=34)
def forward_d1(sub, rng):
    """forward with d = 1 returns beta"""
    x = rng.normal(size=(5, 1)) * 10
    gamma, beta = np.array([2.0]), np.array([0.7])
    args = Args(x, gamma, beta, eps=EPS)
    out = FORWARD.call(sub, args)
    graded = FORWARD
    here = FORWARD.slips(sub, args, out)
    if len(here) > 1:
        # At d = 1 several slips give the same NaN (no eps; an unbiased variance, 0/0): the
        # answer on rows with d = 8 tells them apart, and only the slip it shows is named.
        wide = rows_with_varied_scale(rng, (4, 8))
        elsewhere = FORWARD.slips(sub, Args(wide, *affine_params(rng, 8), eps=EPS))
        told = [probe for probe in here if probe in elsewhere]
        if told:
            graded = dataclasses.replace(FORWARD, probes=told)
    graded.expect(sub, args, what="d = 1, x of shape (5, 1)", out=out)


@LAB.check(points=1, uses=["layernorm_forward"], seed=35)
def forward_invariants(sub, rng):
    """forward output: mean 0, variance 1 per row, scale invariant"""
    x = rng.normal(size=(4, 32)) * 5 + 2
    ones, zeros = np.ones(32), np.zeros(32)
    what = "layernorm_forward with gamma = 1, beta = 0"
    y = array_of(sub.call("layernorm_forward", x, ones, zeros, eps=EPS), what).astype(np.float64)
    if y.shape != x.shape:
        raise CheckFailed(f"{what}: shape is {y.shape} but should be {x.shape}")
    means, variances = y.mean(axis=-1), y.var(axis=-1)
    row = int(np.argmax(np.abs(means)))
    if abs(means[row]) > 1e-6:
        raise CheckFailed(
            f"with gamma = 1 and beta = 0 every row of the output should have mean 0; "
            f"row {row} has mean {means[row]:.4g}. Subtract each row's own mean (axis=-1)."
        )
    row = int(np.argmax(np.abs(variances - 1)))
    if abs(variances[row] - 1) > 1e-4:
        raise CheckFailed(
            f"with gamma = 1 and beta = 0 every row should have variance ~1; row {row} has "
            f"{variances[row]:.4g}. Divide by sqrt(population variance + eps) of that row."
        )
    scaled = array_of(sub.call("layernorm_forward", 3.0 * x, ones, zeros, eps=EPS), what)
    if scaled.shape != y.shape or not np.allclose(scaled, y, rtol=1e-5, atol=1e-6):
        raise CheckFailed(
            "LN(3 x) should equal LN(x) (scale invariance), but it does not: the statistics "
            "must be recomputed from the input itself, not fixed or cached."
        )


# ----------------------------------------------------------------------------- backward checks


@LAB.check(points=2, uses=["layernorm_backward"], seed=40)
def backward_dx(sub, rng):
    """backward: dx matches autograd"""
    # first a constant row (variance 0) and d = 1, where a missing eps or a d - 1 gives NaN
    # or inf: the message then says where
    x = rows_with_varied_scale(rng, (4, 8))
    x[0] = 2.5
    gamma, _ = affine_params(rng, 8)
    dy = rng.normal(size=(4, 8))
    what = "x of shape (4, 8) whose row 0 is constant"
    BACKWARD.expect(sub, Args(dy, x, gamma, eps=EPS), what=what, indices=[0], x=x)
    x = rng.normal(size=(5, 1)) * 3
    args = Args(rng.normal(size=(5, 1)), x, np.array([1.5]), eps=EPS)
    BACKWARD.expect(sub, args, what="d = 1, x of (5, 1)", indices=[0], x=x)
    for shape in [(4, 6), (3, 16)]:
        x = rows_with_varied_scale(rng, shape)
        gamma, _ = affine_params(rng, shape[-1])
        dy = rng.normal(size=shape)
        BACKWARD.expect(
            sub, Args(dy, x, gamma, eps=EPS), what=f"x of shape {shape}", indices=[0], x=x
        )
    # an eps that nobody hard-codes: an eps accepted but ignored shows
    x = rows_with_varied_scale(rng, (4, 6))
    gamma, _ = affine_params(rng, 6)
    dy = rng.normal(size=(4, 6))
    what = "x of shape (4, 6), eps = 1e-3"
    BACKWARD.expect(sub, Args(dy, x, gamma, eps=1e-3), what=what, indices=[0], x=x)


@LAB.check(points=1, uses=["layernorm_backward"], seed=41)
def backward_params(sub, rng):
    """backward: dgamma and dbeta match autograd"""
    x = rows_with_varied_scale(rng, (5, 6))
    gamma, _ = affine_params(rng, 6)
    args = Args(rng.normal(size=(5, 6)), x, gamma, eps=EPS)
    BACKWARD.expect(sub, args, what="x of shape (5, 6)", indices=[1, 2], x=x)


@LAB.check(points=1, uses=["layernorm_backward"], seed=42)
def backward_3d(sub, rng):
    """backward on (B, L, d): all gradients right, dgamma/dbeta of shape (d,)"""
    x = rows_with_varied_scale(rng, (2, 3, 5))
    gamma, _ = affine_params(rng, 5)
    args = Args(rng.normal(size=(2, 3, 5)), x, gamma, eps=EPS)
    BACKWARD.expect(sub, args, what="x of shape (2, 3, 5)", x=x)


# ----------------------------------------------------------------------------- practice problem 1


D1_PROBES = [
    Probe(
        "gamma",
        "gamma multiplies x_hat, and with d = 1 x_hat = 0: gamma cannot appear in the output.",
        lambda x, gamma, beta: np.broadcast_to(gamma, np.shape(x)),
    ),
    Probe(
        "x",
        "The output does not depend on x when d = 1, because x - mean = 0.",
        lambda x, gamma, beta: x,
    ),
    Probe(
        "gamma + beta",
        "x_hat = 0 when d = 1, so gamma * x_hat + beta = beta.",
        lambda x, gamma, beta: np.broadcast_to(gamma + beta, np.shape(x)),
    ),
]


@oracle
def oracle_d1_output(x, gamma, beta):
    """LayerNorm with d = 1, by the library."""
    import torch.nn.functional as F

    return F.layer_norm(tensor64(x), (1,), tensor64(gamma), tensor64(beta), EPS).numpy()


D1 = Graded("d1_output", oracle_d1_output, D1_PROBES)
D1_HINT = "With one feature the mean is the feature itself."


@LAB.check(points=1, uses=["d1_output"], seed=50)
def problem_d1_output(sub, rng):
    """problem 1: d1_output gives LayerNorm's output for d = 1"""
    for shape in [(6, 1), (2, 3, 1)]:
        x = rng.normal(size=shape) * 100
        gamma, beta = np.array([rng.normal()]), np.array([rng.normal()])
        D1.expect(sub, Args(x, gamma, beta), what=f"x of shape {shape}", hint=D1_HINT)


D1_WHY = {
    "a": (
        "x - mu is exactly 0 when d = 1, so x_hat = 0 for ANY eps; eps only keeps 0/0 from "
        "happening."
    ),
    "c": (
        "The population variance (1/d) of one value is 0, perfectly defined; only the unbiased "
        "1/(d-1) version is 0/0, and LayerNorm does not use it."
    ),
    "d": (
        "PyTorch initialises gamma to ones; and gamma multiplies x_hat = 0, so its value does "
        "not matter."
    ),
}


choice(
    LAB,
    "problem 1: why d = 1 is useless (multiple choice)",
    points=1,
    name="D1_ANSWER",
    key="b",
    hint="Compute x - mean for a row with a single value, then read the options again.",
    why=D1_WHY,
)


# ----------------------------------------------------------------------------- practice problem 2


def _d2_probes():
    """The d = 2 probes: ``compute(x, eps)``, the arguments of ``d2_xhat``."""

    def sign_only(x, eps):
        delta = (x[..., :1] - x[..., 1:]) / 2
        return np.concatenate([np.sign(delta), -np.sign(delta)], axis=-1)

    def no_half(x, eps):
        delta = x[..., :1] - x[..., 1:]
        return np.concatenate([delta, -delta], axis=-1) / np.sqrt(delta**2 + eps)

    def swapped(x, eps):
        return -sign_only(x, eps) * np.abs(_variant()(x, np.ones(2), np.zeros(2), eps))

    return [
        Probe(
            "always plus or minus one",
            "This is sign(delta) * [1, -1] whatever the input: "
            "that holds only while delta**2 >> eps. With x_hat = [delta, -delta] / "
            "sqrt(delta**2 + eps), nearly equal features give a smaller x_hat (and [0, 0] "
            "when they are equal).",
            sign_only,
        ),
        Probe(
            "delta without the half",
            "This uses delta = x_1 - x_2. The mean is halfway "
            "between the two features, so x_1 - mu = (x_1 - x_2) / 2.",
            no_half,
        ),
        Probe(
            "features swapped",
            "The signs are swapped: the larger feature gets +1 "
            "(x_1 - mu = delta with delta = (x_1 - x_2) / 2).",
            swapped,
        ),
    ]


D2_PROBES = _d2_probes()


@oracle
def oracle_d2_xhat(x, eps):
    """x_hat of LayerNorm for d = 2 (gamma = 1, beta = 0)."""
    return oracle_forward(x, np.ones(2), np.zeros(2), eps)


D2 = Graded("d2_xhat", oracle_d2_xhat, D2_PROBES)

PROBES = probe_table(FORWARD, BACKWARD, D1, D2)


@LAB.check(points=1, uses=["d2_xhat"], seed=60)
def problem_d2_xhat(sub, rng):
    """problem 2: d2_xhat gives x_hat for d = 2 in closed form"""
    far = rng.normal(size=(5, 2)) * 10
    near = np.array([[3.0, 3.001], [3.0, 3.0], [-1e-3, 1e-3], [0.5, 0.5 + 4e-3]])
    for x, eps, what in [
        (far, EPS, "well-separated pairs"),
        (near, EPS, "nearly equal pairs"),
        (far, 0.0, "eps = 0"),
    ]:
        D2.expect(sub, Args(x, eps=eps), what=what)


D2_WHY = {
    "b": (
        "LayerNorm is shift invariant per token: only delta = (x1 - x2) / 2 enters, wherever "
        "the pair sits relative to 0."
    ),
    "c": (
        "LayerNorm is scale invariant per token: x_hat depends on delta only through its sign "
        "(for delta**2 >> eps); the ratio is lost."
    ),
    "d": (
        "With eps > 0 the magnitude is |delta| / sqrt(delta**2 + eps), visibly below 1 for "
        "nearly equal pairs."
    ),
}


choice(
    LAB,
    "problem 2: when x_hat is not plus or minus [1, -1] (multiple choice)",
    points=1,
    name="D2_ANSWER",
    key="a",
    hint="Compute x_hat for [3, 3.001] with eps = 1e-5, then read the options again.",
    why=D2_WHY,
)


# ----------------------------------------------------------------------------- practice problem 3


INVARIANCE_WHY = {
    "b": "That swaps the two: LN's statistics are per example, BN's per unit over the batch.",
    "c": (
        "Re-centring the data set adds W @ delta, a different number to each unit, which LN's "
        "per-example mean cannot remove."
    ),
    "d": (
        "Each norm removes what is common to the values it shares statistics over: one "
        "example's scale for LN, one unit's offset over the batch for BN."
    ),
}


choice(
    LAB,
    "problem 3: LayerNorm's and BatchNorm's invariances (multiple choice)",
    points=1,
    name="INVARIANCE_ANSWER",
    key="a",
    hint="Ask over which axis each norm takes its statistics: a shift that is the same for "
    "every example, or a factor that is the same for every feature of one example, cancels "
    "only in the statistics over the matching axis.",
    why=INVARIANCE_WHY,
)
