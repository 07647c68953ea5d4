"""Checks for lab 01, why normalize: instrument a deep MLP, and a first ``standardize``.

The learner writes, in NumPy::

    standardize(x, axis=-1, eps=1e-5) -> x_hat                  # zero mean, unit variance on axis
    mlp_forward_stats(x, weights, activation, normalize=False) -> stds          # (L,)
    mlp_backward_grad_norms(x, weights, upstream, activation)
        -> (input_grad_norms, weight_grad_norms)                                 # (L,), (L,)
    init_std(fan_in, activation) -> float                        # practice problem 2
    scale_with_train_stats(train, test, eps=1e-5) -> test_hat    # practice problem 3
    BACKWARD_ANSWER, WEIGHT_GRAD_ANSWER, ICS_ANSWER = "a" | "b" | "c" | "d"

The network: ``x`` of shape (B, d), ``weights`` of shape (L, d, d); layer l = 1..L computes
``z_l = h_{l-1} @ weights[l-1]``, optionally ``z_l = standardize(z_l, axis=-1)``, then
``h_l = phi(z_l)`` with ``phi`` one of ``"linear"``, ``"tanh"``, ``"relu"``; ``h_0 = x``. The loss
of the backward pass is ``sum(upstream * h_L)``.

The oracle is PyTorch in float64 (``F.layer_norm`` for the standardization, autograd for the
gradients); the probes are known-wrong variants, each with the hint that explains it.
"""

from __future__ import annotations

import functools

import numpy as np

from normlab.grader.cases import Args, Graded, probe_table, tensor64
from normlab.grader.cases import rows_with_varied_scale as _rows_with_varied_scale
from normlab.grader.core import CheckFailed, Lab
from normlab.grader.forbidden import AUTOGRAD, from_scratch
from normlab.grader.memo import oracle
from normlab.grader.probes import Probe, choice, eps_ignored

LAB = Lab(
    stem="01_why_normalize",
    title="Why normalize",
    forbidden=from_scratch(
        "standardize",
        "mlp_forward_stats",
        "scale_with_train_stats",
        mlp_backward_grad_norms=AUTOGRAD,
    ),
)

EPS = 1e-5
# This lab's own tolerances, not the shared ``cases.F64``/``cases.F32``: its float64 answers
# (standardized values, activation statistics, gradient norms, an init scale) are compared
# with a tighter absolute floor, and its float32 standardization with a looser one.
F64_TIGHT = {"rtol": 1e-7, "atol": 1e-12}  # float64 answers agree with the oracle to ~1e-14
F32_LOOSE = {"rtol": 1e-4, "atol": 1e-4}  # float32 output of unit scale: rounding ~1e-7


# ----------------------------------------------------------------------------- helpers


def _phi(activation: str):
    return {
        "linear": lambda z: z,
        "tanh": np.tanh,
        "relu": lambda z: np.maximum(z, 0.0),
    }[activation]


def _phi_derivative(activation: str, z: np.ndarray) -> np.ndarray:
    if activation == "tanh":
        return 1.0 - np.tanh(z) ** 2
    if activation == "relu":
        return (z > 0).astype(np.float64)
    return np.ones_like(z)


def _standardized(z, axis=-1, eps=EPS):
    """z standardized along ``axis`` by the library (F.layer_norm over that axis, no affine)."""
    import torch
    import torch.nn.functional as F

    t = torch.movedim(tensor64(z), axis, -1)
    return torch.movedim(F.layer_norm(t, (t.shape[-1],), eps=eps), -1, axis).numpy()


def random_weights(rng, depth, width, gain):
    """(depth, width, width) weights with entries N(0, gain**2 / width): per-layer gain ~ gain."""
    return rng.normal(0.0, gain / np.sqrt(width), size=(depth, width, width))


# ----------------------------------------------------------------------------- oracles


@oracle
def oracle_standardize(x, axis, eps=EPS):
    import torch
    import torch.nn.functional as F

    t = torch.movedim(tensor64(x), axis, -1)
    return torch.movedim(F.layer_norm(t, (t.shape[-1],), eps=eps), -1, axis).numpy()


def _torch_phi(activation, z):
    import torch

    return {"linear": z, "tanh": torch.tanh(z), "relu": torch.relu(z)}[activation]


@oracle
def oracle_forward_stats(x, weights, activation, normalize=False):
    import torch
    import torch.nn.functional as F

    h = torch.tensor(x, dtype=torch.float64)
    stds = []
    for weight in torch.tensor(weights, dtype=torch.float64):
        z = h @ weight
        if normalize:
            z = F.layer_norm(z, (z.shape[-1],), eps=EPS)
        h = _torch_phi(activation, z)
        stds.append(h.std(correction=0).item())
    return np.array(stds)


@oracle
def oracle_backward(x, weights, upstream, activation):
    import torch

    h = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    layer_weights = [torch.tensor(w, dtype=torch.float64, requires_grad=True) for w in weights]
    layer_inputs = []
    for weight in layer_weights:
        if h.grad_fn is not None:
            h.retain_grad()
        layer_inputs.append(h)
        h = _torch_phi(activation, h @ weight)
    (h * torch.tensor(upstream, dtype=torch.float64)).sum().backward()
    input_norms = np.array([t.grad.norm().item() for t in layer_inputs])
    weight_norms = np.array([w.grad.norm().item() for w in layer_weights])
    return input_norms, weight_norms


# ----------------------------------------------------------------------------- standardize probes


def _standardize_variant(ddof=0, eps_where="inside", centre=True, divide="std", axis_rule="given"):
    def variant(x, axis, eps):
        x = np.asarray(x, np.float64)
        if axis_rule == "other":
            if x.ndim != 2:
                raise ValueError("the 'other axis' bug is defined for 2-D input")
            axis = 1 - (axis % 2)
        elif axis_rule == "last":
            axis = -1
        elif axis_rule == "all":
            axis = None
        mean = x.mean(axis=axis, keepdims=True)
        count = x.size if axis is None else x.shape[axis]
        var = ((x - mean) ** 2).sum(axis=axis, keepdims=True) / (count - ddof)
        numerator = x - mean if centre else x
        if not centre:
            var = (x**2).mean(axis=axis, keepdims=True)
        if divide == "var":
            return numerator / (var + eps)
        if eps_where == "outside":
            return numerator / (np.sqrt(var) + eps)
        if eps_where == "none":
            return numerator / np.sqrt(var)
        return numerator / np.sqrt(var + eps)

    return variant


def _standardize_without_keepdims(x, axis, eps):
    x = np.asarray(x, np.float64)
    if x.ndim != 2 or x.shape[0] != x.shape[1] or axis % 2 != 1:
        raise ValueError("only a square input broadcasts silently")
    # statistics of shape (N,): row j's mean and variance land on column j
    return (x - x.mean(axis=axis)) / np.sqrt(x.var(axis=axis) + eps)


STANDARDIZE_PROBES = [
    Probe(
        "unbiased variance",
        "This matches the unbiased variance (dividing by n - 1, ddof=1). Standardizing divides by "
        "the population standard deviation of the values it normalizes: divide by n (np.var's "
        "default, ddof=0), so that the result has variance exactly 1 (up to eps).",
        _standardize_variant(ddof=1),
    ),
    Probe(
        "eps outside the root",
        "This matches (x - mean) / (sqrt(var) + eps). Put eps inside the root, sqrt(var + eps): "
        "it is a floor under the variance, and it is the form PyTorch's norms use.",
        _standardize_variant(eps_where="outside"),
    ),
    Probe(
        "no eps",
        "This matches dividing by sqrt(var) with no eps: a constant slice gives 0/0 = NaN. "
        "Add eps inside the root: sqrt(var + eps).",
        _standardize_variant(eps_where="none"),
    ),
    Probe(
        "divided by the variance",
        "This matches dividing by var + eps, not by its square root. Dividing by the variance "
        "leaves a result whose standard deviation is 1/std, not 1.",
        _standardize_variant(divide="var"),
    ),
    Probe(
        "mean not subtracted",
        "This matches x / sqrt(mean(x**2) + eps): the mean was never subtracted. Standardizing "
        "centres first (x - mean), then divides by the standard deviation.",
        _standardize_variant(centre=False),
    ),
    Probe(
        "axis ignored",
        "This matches statistics always taken over the last axis: pass `axis` on to mean and var "
        "(x.mean(axis=axis, keepdims=True)).",
        _standardize_variant(axis_rule="last"),
    ),
    Probe(
        "wrong axis",
        "This matches statistics taken over the other axis. `axis` names the axis the mean and the "
        "variance run over: axis=-1 gives one mean per row (per example), axis=0 one mean per "
        "column (per feature).",
        _standardize_variant(axis_rule="other"),
    ),
    Probe(
        "statistics over the whole array",
        "This matches one mean and one variance for the whole array (no axis given to mean/var). "
        "Pass axis=axis, keepdims=True so that every slice along the other axes gets its own.",
        _standardize_variant(axis_rule="all"),
    ),
    Probe(
        "statistics without keepdims",
        "This matches statistics of shape (N,) broadcast along the wrong axis: with a square "
        "input x - mean subtracts row j's mean from column j without any error. Use "
        "keepdims=True.",
        _standardize_without_keepdims,
    ),
    *eps_ignored(_standardized, "standardization"),
]


# ----------------------------------------------------------------------------- forward probes


def _statistic(kind: str, h: np.ndarray) -> float:
    if kind == "ddof1":
        return float(h.std(ddof=1))
    if kind == "rows":
        return float(h.std(axis=-1).mean())
    if kind == "columns":
        return float(h.std(axis=0).mean())
    if kind == "rms":
        return float(np.sqrt((h**2).mean()))
    if kind == "var":
        return float(h.var())
    return float(h.std())


def _forward_variant(
    statistic="std",
    measure="after",
    transpose=False,
    skip_activation=False,
    shift=False,
    reverse=False,
    norm="before",
    norm_axis=-1,
):
    def stats(x, weights, activation, normalize=False):
        phi = _phi("linear" if skip_activation else activation)
        h = np.asarray(x, np.float64)
        values = [_statistic(statistic, h)] if shift else []
        for weight in np.asarray(weights, np.float64):
            z = h @ (weight.T if transpose else weight)
            if normalize and norm == "before":
                z = _standardized(z, norm_axis)
            h = phi(z)
            if normalize and norm == "after":
                h = _standardized(h, norm_axis)
            values.append(_statistic(statistic, z if measure == "before" else h))
        values = values[:-1] if shift else values
        return np.array(values[::-1] if reverse else values)

    return stats


FORWARD_PROBES = [
    Probe(
        "unbiased std",
        "This matches the standard deviation with ddof=1. Report the population standard "
        "deviation of all B*d activations of the layer: h.std() (ddof=0).",
        _forward_variant(statistic="ddof1"),
    ),
    Probe(
        "std per example, averaged",
        "This matches the average of each example's own std (std over axis=-1, then the mean). "
        "The layer's std is taken over ALL its B*d activations at once: h.std().",
        _forward_variant(statistic="rows"),
    ),
    Probe(
        "std per feature, averaged",
        "This matches the average of each feature's std over the batch (std over axis=0, then "
        "the mean). The layer's std is taken over ALL its B*d activations at once: h.std().",
        _forward_variant(statistic="columns"),
    ),
    Probe(
        "root mean square",
        "This matches sqrt(mean(h**2)), which does not subtract the mean. ReLU outputs are all "
        ">= 0, so their mean is far from 0: use the standard deviation, h.std().",
        _forward_variant(statistic="rms"),
    ),
    Probe(
        "variance",
        "This matches the variance of each layer's activations. Report the standard deviation "
        "(its square root): the chapter's per-layer factor is a factor on the std.",
        _forward_variant(statistic="var"),
    ),
    Probe(
        "measured before the activation",
        "This matches the std of the pre-activations z_l = h_{l-1} @ W_l. Measure h_l = phi(z_l), "
        "the layer's output after the nonlinearity.",
        _forward_variant(measure="before"),
    ),
    Probe(
        "activation never applied",
        "This matches a network with no nonlinearity: apply phi (tanh or ReLU) to every layer's "
        "z before it feeds the next layer.",
        _forward_variant(skip_activation=True),
    ),
    Probe(
        "weights transposed",
        "This matches h @ W.T. The lab's convention is z_l = h_{l-1} @ weights[l-1] "
        "(rows are examples, W maps d_in -> d_out as (d_in, d_out)).",
        _forward_variant(transpose=True),
    ),
    Probe(
        "input included, last layer missing",
        "This matches [std(x), std(h_1), ..., std(h_{L-1})]: one layer too early. Entry l-1 is "
        "the std of h_l, the OUTPUT of layer l, so the last entry is the network's output.",
        _forward_variant(shift=True),
    ),
    Probe(
        "layers in reverse order",
        "This matches the stds in reverse order. Entry 0 is layer 1 (next to the input), the "
        "last entry is layer L.",
        _forward_variant(reverse=True),
    ),
    Probe(
        "normalize ignored",
        "With normalize=True every layer's z must be standardized (over its features, axis=-1, "
        "with standardize) before the activation; this matches the network without it.",
        lambda x, weights, activation, normalize=False: _forward_variant()(
            x, weights, activation, False
        ),
    ),
    Probe(
        "normalized after the activation",
        "This matches standardizing h = phi(z) instead of z. The lab normalizes the "
        "pre-activation: z = standardize(h @ W, axis=-1), then h = phi(z).",
        _forward_variant(norm="after"),
    ),
    Probe(
        "normalized over the batch",
        "This matches standardizing z over the batch (axis=0, BatchNorm's axis). The lab's norm "
        "standardizes each example over its features: axis=-1.",
        _forward_variant(norm_axis=0),
    ),
]


# ----------------------------------------------------------------------------- backward probes


def _backward_variant(
    skip_derivative=False,
    derivative_at_z=False,
    use_weight=False,
    shift=False,
    reverse=False,
    squared=False,
    weight_grad_from_output=False,
    weight_grad_before_derivative=False,
):
    def norm(a):
        value = float((a**2).sum())
        return value if squared else float(np.sqrt(value))

    def grads(x, weights, upstream, activation):
        weights = np.asarray(weights, np.float64)
        hs, zs = [np.asarray(x, np.float64)], []
        for weight in weights:
            zs.append(hs[-1] @ weight)
            hs.append(_phi(activation)(zs[-1]))
        delta_h = np.asarray(upstream, np.float64)
        input_norms, output_norms, weight_norms = [], [], []
        for layer in reversed(range(len(weights))):
            output_norms.append(norm(delta_h))
            if skip_derivative:
                derivative = 1.0
            elif derivative_at_z and activation == "tanh":
                derivative = 1.0 - zs[layer] ** 2
            else:
                derivative = _phi_derivative(activation, zs[layer])
            delta_z = delta_h * derivative
            source = hs[layer + 1] if weight_grad_from_output else hs[layer]
            weight_grad = source.T @ (delta_h if weight_grad_before_derivative else delta_z)
            weight_norms.append(norm(weight_grad))
            delta_h = delta_z @ (weights[layer] if use_weight else weights[layer].T)
            input_norms.append(norm(delta_h))
        first = output_norms if shift else input_norms
        order = slice(None) if reverse else slice(None, None, -1)
        return np.array(first[order]), np.array(weight_norms[order])

    return grads


BACKWARD_PROBES = [
    Probe(
        "activation derivative forgotten",
        "This matches a backward pass without phi'(z): through h = phi(z) the gradient is "
        "dz = dh * phi'(z) (tanh: 1 - tanh(z)**2; ReLU: 1 where z > 0, else 0) before it meets "
        "the weights.",
        _backward_variant(skip_derivative=True),
    ),
    Probe(
        "tanh derivative at the wrong point",
        "This matches tanh'(z) computed as 1 - z**2. The derivative is 1 - tanh(z)**2 "
        "(= 1 - h**2, using the layer's output h).",
        _backward_variant(derivative_at_z=True),
    ),
    Probe(
        "multiplied by W instead of W.T",
        "This matches dh_{l-1} = dz_l @ W_l. Since z = h @ W, the gradient flows back through "
        "the transpose: dh_{l-1} = dz_l @ W_l.T (with square W both run, only one is right).",
        _backward_variant(use_weight=True),
    ),
    Probe(
        "gradient at the layer's output",
        "The first array matches ||dL/dh_l||, the gradient at each layer's OUTPUT (its last "
        "entry is ||upstream||). Entry l-1 should be ||dL/dh_{l-1}||, the gradient at layer l's "
        "INPUT (its first entry is the gradient with respect to x).",
        _backward_variant(shift=True),
    ),
    Probe(
        "layers in backward order",
        "This matches the norms in the order the backward pass visits the layers (L first). "
        "Return them in layer order: entry 0 is layer 1, next to the input.",
        _backward_variant(reverse=True),
    ),
    Probe(
        "squared norms",
        "This matches the squared norm (sum of squares). Take the square root: the Frobenius "
        "norm, np.linalg.norm(g) or np.sqrt((g**2).sum()).",
        _backward_variant(squared=True),
    ),
    Probe(
        "weight gradient from the layer's output",
        "This matches dW_l = h_l.T @ dz_l. W_l multiplies the layer's INPUT, so "
        "dW_l = h_{l-1}.T @ dz_l.",
        _backward_variant(weight_grad_from_output=True),
    ),
    Probe(
        "weight gradient before the activation derivative",
        "This matches dW_l = h_{l-1}.T @ dh_l. W_l produces z_l, not h_l: use "
        "dz_l = dh_l * phi'(z_l), so dW_l = h_{l-1}.T @ dz_l.",
        _backward_variant(weight_grad_before_derivative=True),
    ),
]


# ----------------------------------------------------------------------------- standardize checks


def rows_with_varied_scale(rng, shape, axis=-1):
    """Random values whose slices along ``axis`` get scales 0.05..20 and offsets -5..5."""
    return _rows_with_varied_scale(rng, shape, scales=(0.05, 20.0), axis=axis)


STANDARDIZE = Graded("standardize", oracle_standardize, STANDARDIZE_PROBES, tol=F64_TIGHT)


@LAB.check(points=2, uses=["standardize"], seed=100)
def standardize_last_axis(sub, rng):
    """standardize over the last axis matches torch"""
    for shape in [(6, 6), (5, 9), (1, 12)]:  # square first: exposes missing keepdims
        x = rows_with_varied_scale(rng, shape)
        STANDARDIZE.expect(sub, Args(x, axis=-1, eps=EPS), what=f"x of shape {shape}, axis=-1")
    # an eps that nobody hard-codes: an eps accepted but ignored shows
    x = rows_with_varied_scale(rng, (6, 8))
    what = "x of shape (6, 8), axis=-1, eps = 1e-3"
    STANDARDIZE.expect(sub, Args(x, axis=-1, eps=1e-3), what=what)


@LAB.check(points=1, uses=["standardize"], seed=101)
def standardize_other_axes(sub, rng):
    """standardize over axis 0 and over the middle of a 3-D input"""
    x = rows_with_varied_scale(rng, (9, 4), axis=0)
    STANDARDIZE.expect(sub, Args(x, axis=0, eps=EPS), what="x of shape (9, 4), axis=0")
    x = rows_with_varied_scale(rng, (2, 7, 3), axis=1)
    STANDARDIZE.expect(sub, Args(x, axis=1, eps=EPS), what="x of shape (2, 7, 3), axis=1")


@LAB.check(points=1, uses=["standardize"], seed=102)
def standardize_small_variance(sub, rng):
    """standardize stays finite as the variance goes to 0"""
    x = np.empty((4, 8))
    x[0] = 2.5  # a constant row: variance exactly 0
    x[1] = 1.0 + 1e-4 * rng.normal(size=8)  # variance ~1e-8, far below eps
    x[2] = 3e-3 * rng.normal(size=8)  # variance ~1e-5, comparable with eps
    x[3] = rng.normal(size=8)
    STANDARDIZE.expect(sub, Args(x, axis=-1, eps=EPS), what="rows with variance 0, 1e-8 and 1e-5")


@LAB.check(points=1, uses=["standardize"], seed=103)
def standardize_float32_invariants(sub, rng):
    """standardize keeps float32 and gives mean 0, variance 1"""
    x = (rng.normal(size=(16, 32)) * 4 + 3).astype(np.float32)
    what = "float32 x of shape (16, 32)"
    STANDARDIZE.expect(sub, Args(x, axis=-1, eps=EPS), what=what, tol=F32_LOOSE, dtype=np.float32)
    out = sub.call("standardize", x.astype(np.float64), axis=0, eps=EPS).items[0]
    y = np.asarray(out.array, np.float64)
    if y.shape != x.shape or np.abs(y.mean(axis=0)).max() > 1e-9:
        raise CheckFailed("standardize(x, axis=0): every column should have mean 0")
    if np.abs(y.var(axis=0) - 1).max() > 1e-5:
        raise CheckFailed("standardize(x, axis=0): every column should have variance ~1")


# ----------------------------------------------------------------------------- forward checks


FORWARD = Graded("mlp_forward_stats", oracle_forward_stats, FORWARD_PROBES, tol=F64_TIGHT)


@LAB.check(points=2, uses=["mlp_forward_stats"], seed=110)
def forward_stats_random(sub, rng):
    """forward stds match torch for linear, tanh and ReLU layers"""
    for activation, gain in [("tanh", 1.3), ("relu", 1.1), ("linear", 0.8)]:
        x = rng.normal(size=(6, 8)) + 0.5
        weights = random_weights(rng, 5, 8, gain)
        what = f"{activation}, 5 layers, x of shape (6, 8)"
        FORWARD.expect(sub, Args(x, weights, activation, normalize=False), what=what)


@LAB.check(points=1, uses=["mlp_forward_stats"], seed=111)
def forward_stats_deep(sub, rng):
    """forward stds of a 20-layer net with gain 1.5 and 0.9"""
    for activation, gain in [("linear", 1.5), ("tanh", 0.9), ("relu", 0.9)]:
        x = rng.normal(size=(10, 16))
        weights = random_weights(rng, 20, 16, gain)
        what = f"{activation}, 20 layers, gain {gain}, width 16"
        FORWARD.expect(sub, Args(x, weights, activation, normalize=False), what=what)


@LAB.check(points=1, uses=["mlp_forward_stats"], seed=112)
def forward_stats_edges(sub, rng):
    """forward stds of a single layer and of a batch of one"""
    x = rng.normal(size=(7, 5))
    args = Args(x, random_weights(rng, 1, 5, 1.2), "tanh", normalize=False)
    FORWARD.expect(sub, args, what="a single tanh layer")
    x = rng.normal(size=(1, 9))
    args = Args(x, random_weights(rng, 4, 9, 1.4), "relu", normalize=False)
    FORWARD.expect(sub, args, what="batch of one, 4 ReLU layers")


@LAB.check(points=2, uses=["mlp_forward_stats"], seed=113)
def forward_stats_normalized(sub, rng):
    """forward stds with standardize after every layer"""
    for activation, gain, shape in [
        ("tanh", 1.5, (8, 8)),
        ("relu", 0.9, (6, 10)),
        ("linear", 1.2, (5, 7)),
    ]:
        x = rng.normal(size=shape) * 3 + 1
        weights = random_weights(rng, 6, shape[1], gain)
        FORWARD.expect(
            sub,
            Args(x, weights, activation, normalize=True),
            what=f"{activation}, normalize=True, x of shape {shape}",
            hint="With normalize=True: z = standardize(h @ W, axis=-1) (eps=1e-5), then "
            "h = phi(z). If this check fails but the others pass, check standardize first.",
        )


# ----------------------------------------------------------------------------- backward checks


BACKWARD = Graded(
    "mlp_backward_grad_norms",
    oracle_backward,
    BACKWARD_PROBES,
    items=("input_grad_norms", "weight_grad_norms"),
    tol=F64_TIGHT,
)


def _expect_backward(sub, seed, index):
    """Item ``index`` of the gradient norms of 5-layer tanh, ReLU and linear nets, x (6, 8)."""
    rng = np.random.default_rng(seed)
    for activation, gain in [("tanh", 1.4), ("relu", 1.2), ("linear", 0.9)]:
        x = rng.normal(size=(6, 8))
        weights = random_weights(rng, 5, 8, gain)
        upstream = rng.normal(size=(6, 8))
        args = Args(x, weights, upstream, activation)
        BACKWARD.expect(sub, args, what=f"{activation}, 5 layers", indices=[index])


@LAB.check(points=2, uses=["mlp_backward_grad_norms"])
def backward_input_norms(sub):
    """backward: gradient norms at each layer's input match autograd"""
    _expect_backward(sub, 120, 0)


@LAB.check(points=1, uses=["mlp_backward_grad_norms"])
def backward_weight_norms(sub):
    """backward: weight-gradient norms match autograd"""
    _expect_backward(sub, 121, 1)


@LAB.check(points=1, uses=["mlp_backward_grad_norms"], seed=122)
def backward_deep_and_single(sub, rng):
    """backward: a 20-layer net and a single layer"""
    x = rng.normal(size=(10, 16))
    weights = random_weights(rng, 20, 16, 1.5)
    upstream = rng.normal(size=(10, 16))
    BACKWARD.expect(sub, Args(x, weights, upstream, "tanh"), what="tanh, 20 layers, gain 1.5")
    x = rng.normal(size=(4, 6))
    upstream = rng.normal(size=(4, 6))
    weights = random_weights(rng, 1, 6, 1.0)
    BACKWARD.expect(sub, Args(x, weights, upstream, "relu"), what="a single ReLU layer")


# ----------------------------------------------------------------------------- practice problems


BACKWARD_WHY = {
    "a": (
        "phi' = 1 covers only half of each backward step; the other half multiplies by W_l.T, "
        "whose gain is g."
    ),
    "c": (
        "Backpropagation multiplies by W.T, not by W's inverse: it repeats the forward scaling "
        "instead of undoing it."
    ),
    "d": (
        "The gradient with respect to the input never passes through the forward activations "
        "(dh_{l-1} = dh_l @ W_l.T), so it collects one factor per layer, not two."
    ),
}


choice(
    LAB,
    "problem 1: the gradient reaching the input of a deep linear net (multiple choice)",
    points=1,
    name="BACKWARD_ANSWER",
    key="b",
    hint="The backward pass of z = h @ W multiplies the gradient by W.T at every layer; what "
    "is the gain of W.T when W has entries N(0, g**2 / d)?",
    why=BACKWARD_WHY,
)


WEIGHT_GRAD_WHY = {
    "a": (
        "That is the gradient with respect to the activations. The weight gradient h_{l-1}.T @ "
        "dz_l also multiplies by the forward activation, whose scale moves the other way."
    ),
    "b": "That counts the forward factor g**(l-1) only and forgets the backward factor g**(L-l).",
    "d": (
        "The layers agree with each other, but all of them are off by the same g**(L-1) = "
        "0.9**19 relative to gain 1."
    ),
}


choice(
    LAB,
    "problem 1: weight gradients across the layers (multiple choice)",
    points=1,
    name="WEIGHT_GRAD_ANSWER",
    key="c",
    hint="dW_l = h_{l-1}.T @ dz_l: multiply the size of the activation entering layer l by "
    "the size of the gradient leaving it, and count the factors of g in each.",
    why=WEIGHT_GRAD_WHY,
)


@functools.cache
def _gain(activation):
    """E[phi(z)**2] / E[z**2] for z ~ N(0, 1), measured on samples z and -z: for ReLU one of
    phi(z), phi(-z) is |z| and the other 0, for a linear layer both are, so the ratio is exact."""
    import torch

    z = torch.from_numpy(np.random.default_rng(0).standard_normal(1024))
    kept = _torch_phi(activation, z) ** 2 + _torch_phi(activation, -z) ** 2
    return float(kept.sum() / (2 * (z**2).sum()))


def _double(activation):
    """The factor by which the activation's gain must be made up in the weights' variance."""
    return 1.0 / _gain(activation)


INIT_PROBES = [
    Probe(
        "variance instead of std",
        "This is the VARIANCE of the weights (e.g. 2 / fan_in). The function returns their "
        "standard deviation: take the square root.",
        lambda fan_in, activation: _double(activation) / fan_in,
    ),
    Probe(
        "ReLU factor 2 missing",
        "ReLU zeroes half of its inputs, so E[relu(z)**2] = Var(z) / 2: the weights must make "
        "up a factor 2 in variance, std = sqrt(2 / fan_in) (He et al. 2015, §2.2).",
        lambda fan_in, activation: 1.0 / np.sqrt(fan_in),
    ),
    Probe(
        "factor 2 for a linear layer",
        "The factor 2 is ReLU's: a linear layer keeps all of z, so Var(z) = fan_in * "
        "Var(w) * E[h**2] and std = 1 / sqrt(fan_in).",
        lambda fan_in, activation: np.sqrt(2.0 / fan_in),
    ),
    Probe(
        "grows with the fan-in",
        "The weights must get SMALLER as the fan-in grows: z sums fan_in terms, so its "
        "variance is fan_in * Var(w) * E[h**2]; solve fan_in * Var(w) * c = 1.",
        lambda fan_in, activation: np.sqrt(_double(activation) * fan_in),
    ),
]


@oracle
def oracle_init_std(fan_in, activation):
    """He et al. 2015, §2.2: the std that keeps the scale of z through a layer of the activation,
    from the activation's measured gain."""
    # Var(z_next) = fan_in * std**2 * E[phi(z)**2]: the std that makes it Var(z).
    return np.asarray(np.sqrt(1.0 / (fan_in * _gain(activation))))


INIT_STD = Graded("init_std", oracle_init_std, INIT_PROBES, tol=F64_TIGHT, prefix=False)


@LAB.check(points=1, uses=["init_std"])
def problem_init_std(sub):
    """problem 2: init_std keeps the activation scale constant"""
    for fan_in, activation in [(256, "relu"), (256, "linear"), (1000, "relu"), (64, "linear")]:
        INIT_STD.expect(
            sub,
            Args(fan_in, activation),
            what=f"init_std({fan_in}, {activation!r})",
            kinds=("scalar", "ndarray"),
            hint="Var(z) = fan_in * Var(w) * E[h**2]; pick Var(w) so the scale is kept.",
        )


@oracle
def oracle_scale_with_train_stats(train, test, eps=EPS):
    import torch

    train_t = tensor64(train)
    mean = train_t.mean(dim=0)
    var = train_t.var(dim=0, correction=0)
    return ((tensor64(test) - mean) / torch.sqrt(var + eps)).numpy()


def _feature_scaling_variant(stats_from="train", ddof=0):
    def variant(train, test, eps):
        source = {"train": train, "test": test, "both": np.concatenate([train, test])}[stats_from]
        mean = source.mean(axis=0)
        var = source.var(axis=0, ddof=ddof)
        return (test - mean) / np.sqrt(var + eps)

    return variant


FEATURE_SCALING_PROBES = [
    Probe(
        "test statistics",
        "This matches scaling the test set with its OWN mean and std. Data normalization is "
        "fitted once, on the training set, and then applied unchanged to new data — the test "
        "set plays the role of data you have not seen.",
        _feature_scaling_variant("test"),
    ),
    Probe(
        "train and test pooled",
        "This matches statistics of the training and test sets pooled together: that leaks the "
        "test set into preprocessing. Use the training set's mean and std only.",
        _feature_scaling_variant("both"),
    ),
    Probe(
        "unbiased variance of the training set",
        "This matches the unbiased variance (ddof=1). Use the population variance of the "
        "training set (ddof=0), as standardize does.",
        _feature_scaling_variant(ddof=1),
    ),
    Probe(
        "per example",
        "This matches statistics over each example's features (axis=-1). Feature scaling "
        "gives each FEATURE (column) its own mean and std, taken over the examples (axis=0).",
        lambda train, test, eps: _standardized(test, -1, eps),
    ),
]

FEATURE_SCALING = Graded(
    "scale_with_train_stats", oracle_scale_with_train_stats, FEATURE_SCALING_PROBES, tol=F64_TIGHT
)

PROBES = probe_table(STANDARDIZE, FORWARD, BACKWARD, INIT_STD, FEATURE_SCALING)


@LAB.check(points=2, uses=["scale_with_train_stats"], seed=130)
def problem_feature_scaling(sub, rng):
    """problem 3: scale_with_train_stats uses the training statistics"""
    scales = np.array([1.0, 1000.0, 0.01, 5.0])
    offsets = np.array([0.0, 5000.0, -0.2, 3.0])
    train = rng.normal(size=(40, 4)) * scales + offsets
    test = rng.normal(size=(4, 4)) * scales + offsets + scales * 0.7  # shifted, square
    FEATURE_SCALING.expect(sub, Args(train, test, eps=EPS), what="train (40, 4), test (4, 4)")


ICS_WHY = {
    "a": (
        "Ioffe & Szegedy proposed the explanation; Santurkar et al. (2018) questioned it rather"
        " than confirming it."
    ),
    "b": "Santurkar et al. (2018, §2.2) found no such reduction, sometimes an increase.",
    "d": (
        "That is covariate shift between training and test data; INTERNAL covariate shift is "
        "about the activations inside the network during training."
    ),
}


choice(
    LAB,
    "problem 4: internal covariate shift and what followed (multiple choice)",
    points=1,
    name="ICS_ANSWER",
    key="c",
    hint="Re-read what Santurkar et al. (2018, §2.1) did to the BatchNorm layers' outputs, "
    "and what happened to training.",
    why=ICS_WHY,
)
