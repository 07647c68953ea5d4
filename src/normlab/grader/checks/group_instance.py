"""Checks for lab 05: one norm over any axes, GroupNorm forward and backward, DyT, problems 1-3.

The learner writes, in NumPy::

    normalize_over(x, axes, eps=1e-5) -> x_hat                    # x: any shape; axes to reduce
    group_norm_forward(x, num_groups, gamma, beta, eps=1e-5) -> y  # x: (N, C, *); gamma: (C,)
    group_norm_backward(dy, x, num_groups, gamma, eps=1e-5) -> (dx, dgamma, dbeta)
    dyt_forward(x, alpha, gamma, beta) -> y                        # x: (..., d); alpha: scalar
    dyt_backward(dy, x, alpha, gamma) -> (dx, dalpha, dgamma, dbeta)   # dalpha: shape ()
    BN_AXES, LN_AXES, IN_AXES                                      # problem 1, for (N, C, H, W)
    gn1_as_layernorm_params(gamma, beta, height, width) -> (gamma_ln, beta_ln)   # problem 2
    GN_LN_ANSWER, DYT_ANSWER = "a" | "b" | "c" | "d"               # problems 2 and 3
    group_stat_grads(dy, x, num_groups, gamma, eps=1e-5) -> (dmean, dvar)   # problem 4: (N, G)

The oracle is PyTorch in float64 (``F.batch_norm`` in training mode, ``F.layer_norm``,
``F.instance_norm``, ``F.group_norm``, ``torch.var_mean`` and autograd); DyT has no library
function, so its oracle is its definition in torch, ``gamma * tanh(alpha * x) + beta``, and
autograd. The probes are known-wrong variants, each with the hint that explains it.

The grader's wire carries arrays and JSON scalars, not tuples, so ``axes`` reaches
``normalize_over`` as a 1-D integer array; the lab's function turns it into a tuple on its first
line (outside the answer region).
"""

from __future__ import annotations

import numpy as np

from normlab.grader.cases import Args, Graded, affine_params, backward, probe_table, tensor64
from normlab.grader.core import CheckFailed, Lab
from normlab.grader.forbidden import AUTOGRAD, from_scratch
from normlab.grader.memo import oracle
from normlab.grader.probes import Probe, affine_grads, choice, eps_ignored, norm_dx

LAB = Lab(
    stem="05_group_instance",
    title="GroupNorm, InstanceNorm and DyT",
    forbidden=from_scratch(
        "normalize_over",
        "group_norm_forward",
        "dyt_forward",
        group_norm_backward=AUTOGRAD,
        dyt_backward=AUTOGRAD,
        group_stat_grads=AUTOGRAD,
    ),
)

EPS = 1e-5
F32_UNIT = {"rtol": 1e-4, "atol": 1e-4}  # float32 of unit scale: measured error ~1e-6

BROADCAST_HINT = (
    "gamma and beta have one entry per CHANNEL, and the channels are axis 1 of x (N, C, *), "
    "not the last axis: reshape them to (1, C, 1, ..., 1), e.g. "
    "gamma.reshape((1, -1) + (1,) * (x.ndim - 2)), before multiplying. (A statistic computed "
    "without keepdims=True gives the same error.)"
)


# ----------------------------------------------------------------------------- oracle


@oracle
def oracle_normalize(x, axes, eps=EPS):
    """x_hat over ``axes`` from torch's population statistics (``correction=0``)."""
    import torch

    xt = tensor64(x)
    var, mean = torch.var_mean(xt, dim=_axes_tuple(axes, xt.ndim), correction=0, keepdim=True)
    return ((xt - mean) / torch.sqrt(var + eps)).numpy()


@oracle
def oracle_batch_norm(x, eps=EPS):
    import torch.nn.functional as F

    return F.batch_norm(tensor64(x), None, None, training=True, eps=eps).numpy()


@oracle
def oracle_layer_norm(x, eps=EPS):
    import torch.nn.functional as F

    return F.layer_norm(tensor64(x), tuple(x.shape[1:]), eps=eps).numpy()


@oracle
def oracle_instance_norm(x, eps=EPS):
    import torch.nn.functional as F

    return F.instance_norm(tensor64(x), eps=eps).numpy()


@oracle
def oracle_group_norm(x, num_groups, gamma, beta, eps=EPS):
    import torch.nn.functional as F

    return F.group_norm(tensor64(x), num_groups, tensor64(gamma), tensor64(beta), eps).numpy()


@oracle
def oracle_group_norm_backward(dy, x, num_groups, gamma, eps=EPS):
    import torch
    import torch.nn.functional as F

    xt = tensor64(x).requires_grad_(True)
    gt = tensor64(gamma).requires_grad_(True)
    bt = torch.zeros_like(gt, requires_grad=True)
    backward(F.group_norm(xt, num_groups, gt, bt, eps), dy)
    return xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()


@oracle
def oracle_group_stat_grads(dy, x, num_groups, gamma, eps=EPS):
    """dL/dmean and dL/dvar of every (example, group), by autograd through the graph
    x -> (mean, var) -> x_hat -> y, with mean and var as the graph's nodes (shape (N, G))."""
    import torch

    xt = tensor64(x)
    n = xt.shape[0]
    grouped = xt.reshape(n, num_groups, -1)
    mean = grouped.mean(dim=2).detach().requires_grad_(True)
    var = grouped.var(dim=2, correction=0).detach().requires_grad_(True)
    x_hat = (grouped - mean[..., None]) / torch.sqrt(var[..., None] + eps)
    y = x_hat.reshape(xt.shape) * tensor64(gamma).reshape(_channel_shape(np.asarray(x)))
    backward(y, dy)
    return mean.grad.numpy(), var.grad.numpy()


@oracle
def oracle_dyt(x, alpha, gamma, beta):
    """DyT by its definition (Zhu et al. 2025): there is no library function to compare with."""
    import torch

    return (tensor64(gamma) * torch.tanh(alpha * tensor64(x)) + tensor64(beta)).numpy()


@oracle
def oracle_dyt_backward(dy, x, alpha, gamma):
    import torch

    xt = tensor64(x).requires_grad_(True)
    at = torch.tensor(float(alpha), dtype=torch.float64, requires_grad=True)
    gt = tensor64(gamma).requires_grad_(True)
    bt = torch.zeros_like(gt, requires_grad=True)
    backward(gt * torch.tanh(at * xt) + bt, dy)
    return xt.grad.numpy(), at.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()


# ----------------------------------------------------------------------------- helpers


def _axes_tuple(axes, ndim):
    return tuple(sorted({int(a) % ndim for a in np.atleast_1d(axes)}))


def _normalize(x, axes, eps=EPS, ddof=0, eps_where="inside"):
    """x_hat over ``axes`` (a tuple); a variant's statistics are chosen by the arguments. The
    right statistics are the library's: F.layer_norm over ``axes`` moved to the end."""
    x = np.asarray(x, np.float64)
    axes = tuple(axes)
    if ddof == 0 and eps_where == "inside":
        import torch
        import torch.nn.functional as F

        t = torch.movedim(tensor64(x), axes, tuple(range(x.ndim - len(axes), x.ndim)))
        size = int(np.prod([x.shape[a] for a in axes]))
        flat = F.layer_norm(t.reshape(*t.shape[: x.ndim - len(axes)], size), (size,), eps=eps)
        moved = flat.reshape(t.shape)
        return torch.movedim(moved, tuple(range(x.ndim - len(axes), x.ndim)), axes).numpy()
    count = int(np.prod([x.shape[a] for a in axes]))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).sum(axis=axes, keepdims=True) / (count - ddof)
    if eps_where == "inside":
        return (x - mean) / np.sqrt(var + eps)
    if eps_where == "outside":
        return (x - mean) / (np.sqrt(var) + eps)
    return (x - mean) / np.sqrt(var)


def _channel_shape(x):
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


# ----------------------------------------------------------------------------- probes: axes


def _normalize_variant(kind):
    def compute(x, axes, eps):
        x = np.asarray(x, np.float64)
        axes = _axes_tuple(axes, x.ndim)
        if kind == "unbiased":
            return _normalize(x, axes, eps, ddof=1)
        if kind in ("outside", "none"):
            return _normalize(x, axes, eps, eps_where=kind)
        if kind == "complement":
            others = tuple(a for a in range(x.ndim) if a not in axes)
            if not others:
                raise ValueError("no complement")
            return _normalize(x, others, eps)
        if kind == "first":
            if len(axes) < 2:
                raise ValueError("same as the right answer")
            return _normalize(x, axes[:1], eps)
        if kind == "last":
            if axes == (x.ndim - 1,):
                raise ValueError("same as the right answer")
            return _normalize(x, (x.ndim - 1,), eps)
        if kind == "plus batch":
            if 0 in axes:
                raise ValueError("already includes the batch axis")
            return _normalize(x, (0,) + axes, eps)
        raise ValueError(kind)

    return compute


NORMALIZE_PROBES = [
    Probe(
        "unbiased variance",
        "This matches the unbiased variance (dividing by m - 1, ddof=1). Every norm in this "
        "chapter divides by the number m of values it averages (np.var's default, ddof=0).",
        _normalize_variant("unbiased"),
    ),
    Probe(
        "eps outside the root",
        "This matches (x - mean) / (sqrt(var) + eps). Put eps inside the root, sqrt(var + eps): "
        "it is a floor under the variance.",
        _normalize_variant("outside"),
    ),
    Probe(
        "no eps",
        "This matches dividing by sqrt(var) with no eps; a constant slice then gives 0/0 = NaN. "
        "Add eps inside the root: sqrt(var + eps).",
        _normalize_variant("none"),
    ),
    Probe(
        "complementary axes",
        "This matches statistics over the axes NOT listed. `axes` are the axes you reduce "
        "(average over); the mean keeps every other axis, with size 1 on the reduced ones.",
        _normalize_variant("complement"),
    ),
    Probe(
        "first axis only",
        "This matches statistics over the first listed axis only. Reduce over all of them at "
        "once: x.mean(axis=axes, keepdims=True) with axes a tuple.",
        _normalize_variant("first"),
    ),
    Probe(
        "last axis only",
        "This matches statistics over the last axis only (LayerNorm's habit, axis=-1). Reduce "
        "over the axes you are given: x.mean(axis=axes, keepdims=True).",
        _normalize_variant("last"),
    ),
    Probe(
        "batch axis included",
        "This matches statistics that also average over the batch axis 0. Then one example's "
        "output depends on the rest of the batch (that is BatchNorm's statistic); reduce over "
        "the given axes only.",
        _normalize_variant("plus batch"),
    ),
    *eps_ignored(
        lambda x, axes, eps: _normalize(x, _axes_tuple(axes, np.ndim(x)), eps), "normalization"
    ),
]


# ----------------------------------------------------------------------------- probes: GroupNorm


def _grouped_normalize(x, num_groups, eps, order="contiguous", ddof=0, eps_where="inside"):
    """x_hat of GroupNorm with a chosen way of forming the groups (right or wrong)."""
    x = np.asarray(x, np.float64)
    n, channels = x.shape[:2]
    if order == "contiguous":
        return _normalize(x.reshape(n, num_groups, -1), (2,), eps, ddof, eps_where).reshape(x.shape)
    if order == "strided":  # channel c lands in group c % G
        grouped = x.reshape((n, channels // num_groups, num_groups) + x.shape[2:])
        axes = (1,) + tuple(range(3, grouped.ndim))
        return _normalize(grouped, axes, eps).reshape(x.shape)
    if order == "channels-last reshape":  # the raw memory reshaped to (N, *spatial, G, C/G)
        if x.ndim < 3:
            raise ValueError("no spatial axes")
        grouped = x.reshape((n,) + x.shape[2:] + (num_groups, channels // num_groups))
        axes = tuple(a for a in range(1, grouped.ndim) if a != grouped.ndim - 2)
        return _normalize(grouped, axes, eps).reshape(x.shape)
    if order == "group size":  # num_groups read as the number of channels per group
        return _normalize(x.reshape(n, channels // num_groups, -1), (2,), eps).reshape(x.shape)
    if order == "batch":
        return _normalize(x.reshape(n, num_groups, -1), (0, 2), eps).reshape(x.shape)
    raise ValueError(order)


def _group_norm_variant(order="contiguous", ddof=0, eps_where="inside", affine="channel"):
    def compute(x, num_groups, gamma, beta, eps):
        x = np.asarray(x, np.float64)
        x_hat = _grouped_normalize(x, num_groups, eps, order, ddof, eps_where)
        gamma, beta = np.asarray(gamma, np.float64), np.asarray(beta, np.float64)
        if affine == "none":
            return x_hat
        if affine == "group":  # one scale and shift per group: the mean over its channels
            gamma = np.repeat(gamma.reshape(num_groups, -1).mean(axis=1), len(gamma) // num_groups)
            beta = np.repeat(beta.reshape(num_groups, -1).mean(axis=1), len(beta) // num_groups)
        if affine == "last axis":
            if x.shape[-1] != len(gamma) or x.ndim < 3:
                raise ValueError("raises a broadcasting error instead")
            return x_hat * gamma + beta
        return x_hat * gamma.reshape(_channel_shape(x)) + beta.reshape(_channel_shape(x))

    return compute


def _channels_last_confusion(x, num_groups, gamma, beta, eps):
    """GroupNorm written for (N, H, W, C) and run on (N, C, H, W): the last axis taken as C."""
    x = np.asarray(x, np.float64)
    if x.ndim < 3 or x.shape[-1] != len(gamma):
        raise ValueError("raises instead")
    grouped = x.reshape(x.shape[:-1] + (num_groups, x.shape[-1] // num_groups))
    axes = tuple(a for a in range(1, grouped.ndim) if a != grouped.ndim - 2)
    return _normalize(grouped, axes, eps).reshape(x.shape) * gamma + beta


GROUP_NORM_PROBES = [
    Probe(
        "strided groups",
        "This matches groups of channels taken with a stride (channel c in group c % G, from a "
        "reshape to (N, C/G, G, ...)). GroupNorm's groups are contiguous blocks: group g holds "
        "channels g*C/G ... (g+1)*C/G - 1, so reshape to (N, G, C/G, ...) or (N, G, -1).",
        _group_norm_variant(order="strided"),
    ),
    Probe(
        "channels-last reshape",
        "This matches reshaping the (N, C, H, W) array straight to (N, H, W, G, C/G). A reshape "
        "does not move data: it re-reads the same memory in the new shape, so those 'groups' "
        "mix channels and positions. x is channels-first: reshape to (N, G, -1).",
        _group_norm_variant(order="channels-last reshape"),
    ),
    Probe(
        "channels-last confusion",
        "This matches GroupNorm written for channels-last (N, H, W, C) input: the groups and "
        "gamma, beta were taken along the LAST axis. Here x is (N, C, H, W): the channels are "
        "axis 1.",
        _channels_last_confusion,
    ),
    Probe(
        "affine along the last axis",
        "The normalization is right but gamma and beta were applied along the last axis "
        "(x_hat * gamma + beta, as in LayerNorm). They belong to the channels, axis 1: "
        "reshape them to (1, C, 1, ..., 1).",
        _group_norm_variant(affine="last axis"),
    ),
    Probe(
        "num_groups read as the group size",
        "This matches groups of num_groups channels each (C / num_groups groups). num_groups "
        "is the number of groups G; each group holds C / G channels.",
        _group_norm_variant(order="group size"),
    ),
    Probe(
        "batch axis included",
        "This matches statistics that also average over the batch axis. GroupNorm never mixes "
        "examples: one mean and variance per (example, group).",
        _group_norm_variant(order="batch"),
    ),
    Probe(
        "affine per group",
        "This matches one scale and shift per group. GroupNorm's gamma and beta are per "
        "CHANNEL (C of each, PyTorch's weight and bias of shape (C,)), even though the "
        "statistics are per group.",
        _group_norm_variant(affine="group"),
    ),
    Probe(
        "unbiased variance",
        "This matches the unbiased variance (ddof=1). GroupNorm divides by the number of values "
        "in the group, (C/G)·H·W (ddof=0).",
        _group_norm_variant(ddof=1),
    ),
    Probe(
        "eps outside the root",
        "This matches (x - mean) / (sqrt(var) + eps): put eps inside the root, sqrt(var + eps).",
        _group_norm_variant(eps_where="outside"),
    ),
    Probe(
        "affine step missing",
        "This matches x_hat without the affine step: finish with gamma * x_hat + beta, per "
        "channel.",
        _group_norm_variant(affine="none"),
    ),
    *eps_ignored(_group_norm_variant(), "GroupNorm"),
]


def _group_backward_variant(
    mean_term=True,
    var_term=True,
    use_gamma=True,
    per_channel=False,
    param_axes="not channels",
    swap=False,
    dgamma_from_x=False,
):
    def compute(dy, x, num_groups, gamma, eps):
        x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
        n, channels = x.shape[:2]
        groups = channels if per_channel else num_groups
        grouped = x.reshape(n, groups, -1)
        mean = grouped.mean(axis=2, keepdims=True)
        inv_std = 1.0 / np.sqrt(((grouped - mean) ** 2).mean(axis=2, keepdims=True) + eps)
        x_hat = (grouped - mean) * inv_std
        gamma = np.asarray(gamma, np.float64)
        g = (dy * gamma.reshape(_channel_shape(x)) if use_gamma else dy).reshape(n, groups, -1)
        dx = norm_dx(g, x_hat, inv_std, 2, mean_term=mean_term, var_term=var_term).reshape(x.shape)
        right_x_hat = _grouped_normalize(x, num_groups, eps)
        axes = {"not channels": (0,) + tuple(range(2, x.ndim)), "batch": (0,)}[param_axes]
        return affine_grads(dx, dy, x if dgamma_from_x else right_x_hat, axes, swap)

    return compute


GROUP_BACKWARD_PROBES = [
    Probe(
        "statistics treated as constants",
        "This matches dx = dy * gamma / sigma: it treats the group's mean and variance as "
        "constants. Both depend on every value of the group, so subtract mean(g) and "
        "x_hat * mean(g * x_hat), with g = dy * gamma and means over each (example, group).",
        _group_backward_variant(mean_term=False, var_term=False),
    ),
    Probe(
        "mean term missing",
        "This has the variance term but not the mean term: subtract mean(g) over each group "
        "(g = dy * gamma).",
        _group_backward_variant(mean_term=False),
    ),
    Probe(
        "variance term missing",
        "This has the mean term but not the variance term: subtract x_hat * mean(g * x_hat) "
        "over each group.",
        _group_backward_variant(var_term=False),
    ),
    Probe(
        "gamma missing in dx",
        "This matches a dx that ignores gamma: the gradient flowing into x_hat is dy * gamma, "
        "with gamma broadcast along the channels (axis 1).",
        _group_backward_variant(use_gamma=False),
    ),
    Probe(
        "per-channel means in the backward pass",
        "This matches a backward pass whose means run over each channel (InstanceNorm's "
        "groups) instead of each group of C/G channels. The means in dx must run over the same "
        "values as the forward statistics: reshape dy * gamma to (N, G, -1).",
        _group_backward_variant(per_channel=True),
    ),
    Probe(
        "summed over the batch axis only",
        "dgamma/dbeta were summed over axis 0 only. gamma has one entry per channel: sum over "
        "every other axis (0, 2, 3, ...), leaving shape (C,).",
        _group_backward_variant(param_axes="batch"),
    ),
    Probe(
        "dgamma and dbeta swapped",
        "dgamma and dbeta are swapped: dbeta = sum of dy, dgamma = sum of dy * x_hat.",
        _group_backward_variant(swap=True),
    ),
    Probe(
        "dgamma from x",
        "This matches dgamma = sum(dy * x). gamma multiplies x_hat: dgamma = sum(dy * x_hat).",
        _group_backward_variant(dgamma_from_x=True),
    ),
    *eps_ignored(_group_backward_variant(), "GroupNorm backward pass"),
]


# ----------------------------------------------------------------------------- probes: problem 4


def _stat_grads_variant(
    use_gamma=True, mean_sign=-1.0, mean_reduce="sum", var_kind="right", eps_where="inside"
):
    def compute(dy, x, num_groups, gamma, eps):
        x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
        n = x.shape[0]
        grouped = x.reshape(n, num_groups, -1)
        centred = grouped - grouped.mean(axis=2, keepdims=True)
        var = (centred**2).mean(axis=2)
        std = np.sqrt(var + eps) if eps_where == "inside" else np.sqrt(var) + eps
        g = dy * np.asarray(gamma, np.float64).reshape(_channel_shape(x)) if use_gamma else dy
        g = g.reshape(n, num_groups, -1)
        reduce = np.sum if mean_reduce == "sum" else np.mean
        dmean = mean_sign * reduce(g, axis=2) / std
        weighted = (g * centred).sum(axis=2)
        dvar = {
            "right": -0.5 * weighted / std**3,
            "no half": -weighted / std**3,
            "wrt std": -weighted / std**2,
        }[var_kind]
        return dmean, dvar

    return compute


STAT_GRADS_PROBES = [
    Probe(
        "gamma missing",
        "This matches gradients computed from dy instead of g = dy * gamma: the loss reaches "
        "x_hat through y = gamma * x_hat + beta, so the gradient flowing into x_hat is "
        "dy * gamma (gamma broadcast along axis 1).",
        _stat_grads_variant(use_gamma=False),
    ),
    Probe(
        "dvar without the factor 1/2",
        "dvar is twice the right value: d/dvar of (var + eps) ** (-1/2) is "
        "-(1/2) * (var + eps) ** (-3/2); the 1/2 of the square root's derivative is missing.",
        _stat_grads_variant(var_kind="no half"),
    ),
    Probe(
        "gradient with respect to the standard deviation",
        "This is dL/ds with s = sqrt(var + eps), i.e. -sum(g * (x - mean)) / s**2. The node is "
        "the variance: by the chain rule dL/dvar = dL/ds * ds/dvar = dL/ds / (2 s).",
        _stat_grads_variant(var_kind="wrt std"),
    ),
    Probe(
        "dmean with the wrong sign",
        "dmean has the wrong sign: x_hat = (x - mean) / s decreases when the mean increases, so "
        "dL/dmean = -sum(g) / s.",
        _stat_grads_variant(mean_sign=1.0),
    ),
    Probe(
        "dmean averaged instead of summed",
        "dmean is 1/m of the right value: the group's mean enters every one of its m values, so "
        "their contributions add up: dL/dmean = -sum(g) / s over the group, not -mean(g) / s.",
        _stat_grads_variant(mean_reduce="mean"),
    ),
    Probe(
        "eps outside the root",
        "These are the gradients of a forward pass with s = sqrt(var) + eps. The forward pass "
        "divides by sqrt(var + eps): use that s.",
        _stat_grads_variant(eps_where="outside"),
    ),
]


# ----------------------------------------------------------------------------- probes: DyT


def _dyt_variant(kind):
    def compute(x, alpha, gamma, beta):
        x = np.asarray(x, np.float64)
        if kind == "alpha outside":
            return gamma * alpha * np.tanh(x) + beta
        if kind == "no alpha":
            return gamma * np.tanh(x) + beta
        if kind == "gamma inside":
            return np.tanh(alpha * gamma * x) + beta
        if kind == "no affine":
            return np.tanh(alpha * x)
        if kind == "swapped":
            return beta * np.tanh(alpha * x) + gamma
        if kind == "normalized first":
            return gamma * np.tanh(alpha * _normalize(x, (x.ndim - 1,))) + beta
        if kind == "clip":
            return gamma * np.clip(alpha * x, -1.0, 1.0) + beta
        raise ValueError(kind)

    return compute


DYT_PROBES = [
    Probe(
        "alpha outside tanh",
        "This matches gamma * alpha * tanh(x) + beta: alpha must scale the INPUT of tanh, "
        "tanh(alpha * x). Outside, it is just another gain and the S-curve's width never "
        "changes.",
        _dyt_variant("alpha outside"),
    ),
    Probe(
        "alpha missing",
        "This matches tanh(x) without alpha: DyT is gamma * tanh(alpha * x) + beta.",
        _dyt_variant("no alpha"),
    ),
    Probe(
        "gamma inside tanh",
        "This matches tanh(alpha * gamma * x) + beta: gamma scales the OUTPUT of tanh, "
        "gamma * tanh(alpha * x) + beta, like the affine step of a norm.",
        _dyt_variant("gamma inside"),
    ),
    Probe(
        "affine step missing",
        "This matches tanh(alpha * x) alone: finish with gamma * ... + beta (per feature).",
        _dyt_variant("no affine"),
    ),
    Probe(
        "gamma and beta swapped",
        "This matches beta * tanh(alpha * x) + gamma: gamma scales, beta shifts.",
        _dyt_variant("swapped"),
    ),
    Probe(
        "normalized first",
        "This matches tanh of a LayerNorm-normalized x. DyT computes no statistics at all: it "
        "replaces the norm, it does not follow it.",
        _dyt_variant("normalized first"),
    ),
    Probe(
        "clipped instead of tanh",
        "This matches clipping alpha * x to [-1, 1]. DyT uses the smooth tanh.",
        _dyt_variant("clip"),
    ),
]


def _dyt_backward_variant(kind=""):
    def compute(dy, x, alpha, gamma):
        x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
        t = np.tanh(alpha * x)
        derivative = {"one minus": 1 - t, "sech": 1 / np.cosh(alpha * x)}.get(kind, 1 - t**2)
        g = dy if kind == "no gamma" else dy * gamma
        local = g * derivative
        dx = local if kind == "no alpha" else alpha * local
        per_element = local * (1.0 if kind == "no x" else x)
        leading = tuple(range(x.ndim - 1))
        if kind == "not summed":
            dalpha = per_element
        elif kind == "per feature":
            dalpha = per_element.sum(axis=leading)
        else:
            dalpha = np.asarray(per_element.sum())
        dgamma = (dy * (x if kind == "dgamma from x" else t)).sum(axis=leading)
        dbeta = dy.sum(axis=leading)
        if kind == "swapped":
            dgamma, dbeta = dbeta, dgamma
        return dx, dalpha, dgamma, dbeta

    return compute


DYT_BACKWARD_PROBES = [
    Probe(
        "dalpha not summed",
        "dalpha has the shape of x: alpha is ONE scalar shared by every element, so its "
        "gradient is the sum over all elements, np.sum(dy * gamma * (1 - t**2) * x), shape ().",
        _dyt_backward_variant("not summed"),
    ),
    Probe(
        "dalpha per feature",
        "dalpha has one entry per feature, as if alpha were a vector like gamma. In DyT alpha is "
        "a single scalar: sum over every axis, leaving shape ().",
        _dyt_backward_variant("per feature"),
    ),
    Probe(
        "tanh derivative as 1 - tanh",
        "This matches tanh'(u) = 1 - tanh(u). The derivative is 1 - tanh(u)**2.",
        _dyt_backward_variant("one minus"),
    ),
    Probe(
        "tanh derivative as sech",
        "This matches tanh'(u) = sech(u) = 1/cosh(u). The derivative is sech(u)**2 = "
        "1 - tanh(u)**2.",
        _dyt_backward_variant("sech"),
    ),
    Probe(
        "alpha missing in dx",
        "This matches a dx without the factor alpha: d tanh(alpha x)/dx = alpha (1 - t**2) "
        "(chain rule).",
        _dyt_backward_variant("no alpha"),
    ),
    Probe(
        "x missing in dalpha",
        "This matches a dalpha without the factor x: d tanh(alpha x)/d alpha = x (1 - t**2).",
        _dyt_backward_variant("no x"),
    ),
    Probe(
        "gamma missing",
        "This matches gradients that ignore gamma: the gradient flowing into tanh is dy * gamma.",
        _dyt_backward_variant("no gamma"),
    ),
    Probe(
        "dgamma from x",
        "This matches dgamma = sum(dy * x). gamma multiplies tanh(alpha x): "
        "dgamma = sum(dy * tanh(alpha * x)) over the leading axes.",
        _dyt_backward_variant("dgamma from x"),
    ),
    Probe(
        "dgamma and dbeta swapped",
        "dgamma and dbeta are swapped: dbeta = sum of dy, dgamma = sum of dy * tanh(alpha x).",
        _dyt_backward_variant("swapped"),
    ),
]


# ----------------------------------------------------------------------------- inputs


def images(rng, shape, spread=True):
    """(N, C, *) activations whose channels have their own offsets and scales (0.05 .. 5)."""
    scales = np.geomspace(0.05, 5.0, shape[1]) if spread else np.ones(shape[1])
    offsets = rng.uniform(-3, 3, size=shape[1])
    rng.shuffle(scales)
    channel = (1, shape[1]) + (1,) * (len(shape) - 2)
    return rng.normal(size=shape) * scales.reshape(channel) + offsets.reshape(channel)


channel_params = affine_params  # (gamma, beta), one entry per channel

ERRORS = {"could not be broadcast": BROADCAST_HINT}
NORMALIZE = Graded("normalize_over", oracle_normalize, NORMALIZE_PROBES, errors=ERRORS)
GROUP = Graded("group_norm_forward", oracle_group_norm, GROUP_NORM_PROBES, errors=ERRORS)
GROUP_BACKWARD = Graded(
    "group_norm_backward",
    oracle_group_norm_backward,
    GROUP_BACKWARD_PROBES,
    items=("dx", "dgamma", "dbeta"),
    errors=ERRORS,
)
DYT = Graded("dyt_forward", oracle_dyt, DYT_PROBES)
DYT_BACKWARD = Graded(
    "dyt_backward",
    oracle_dyt_backward,
    DYT_BACKWARD_PROBES,
    items=("dx", "dalpha", "dgamma", "dbeta"),
    options={"kinds": ("ndarray", "scalar")},
)


def axes_of(*axes):
    """``axes`` as the learner's function receives them: a 1-D integer array."""
    return np.array(axes, dtype=np.int64)


# ----------------------------------------------------------------------------- part 1


@LAB.check(points=3, uses=["normalize_over"], seed=50)
def normalize_special_cases(sub, rng):
    """normalize_over gives BatchNorm, LayerNorm and InstanceNorm (torch, float64)"""
    x = images(rng, (4, 6, 5, 3))
    cases = [
        ((2, 3), oracle_instance_norm(x), "axes (2, 3) of (N, C, H, W) = F.instance_norm"),
        ((0, 2, 3), oracle_batch_norm(x), "axes (0, 2, 3) of (N, C, H, W) = F.batch_norm"),
        ((1, 2, 3), oracle_layer_norm(x), "axes (1, 2, 3) of (N, C, H, W) = F.layer_norm"),
    ]
    for axes, expected, what in cases:
        NORMALIZE.expect(sub, Args(x, axes_of(*axes), eps=EPS), expected=expected, what=what)
    tokens = images(rng, (3, 4, 8))
    NORMALIZE.expect(sub, Args(tokens, axes_of(-1), eps=EPS), what="axes (-1,) of (B, L, d)")


@LAB.check(points=1, uses=["normalize_over"], seed=51)
def normalize_any_axes(sub, rng):
    """normalize_over on any axes: gaps, one axis, 2-D, non-contiguous"""
    x = images(rng, (3, 4, 5))
    NORMALIZE.expect(sub, Args(x, axes_of(0, 2), eps=EPS), what="axes (0, 2) of shape (3, 4, 5)")
    NORMALIZE.expect(sub, Args(x, axes_of(1), eps=EPS), what="axes (1,) of shape (3, 4, 5)")
    flat = images(rng, (6, 5))
    NORMALIZE.expect(sub, Args(flat, axes_of(0), eps=EPS), what="axes (0,) of shape (6, 5)")
    wide = images(rng, (3, 8, 4))[:, ::2]
    NORMALIZE.expect(
        sub, Args(wide, axes_of(1, 2), eps=EPS), what="a non-contiguous view x[:, ::2]"
    )
    # an eps that nobody hard-codes: an eps accepted but ignored shows
    x = images(rng, (3, 4, 5))
    what = "axes (2,) of shape (3, 4, 5), eps = 1e-3"
    NORMALIZE.expect(sub, Args(x, axes_of(2), eps=1e-3), what=what)


@LAB.check(points=1, uses=["normalize_over"], seed=52)
def normalize_edges(sub, rng):
    """normalize_over: a constant slice stays finite; float32 in, float32 out"""
    x = images(rng, (2, 3, 4, 4))
    x[0, 1] = 2.5  # one constant channel of one image: variance exactly 0
    x[1, 2] = 1.0 + 1e-4 * rng.normal(size=(4, 4))  # variance ~1e-8, far below eps
    what = "axes (2, 3), a constant channel (variance 0)"
    NORMALIZE.expect(
        sub, Args(x, axes_of(2, 3), eps=EPS), expected=oracle_instance_norm(x), what=what
    )
    x32 = images(rng, (4, 6, 3), spread=False).astype(np.float32)
    NORMALIZE.expect(
        sub,
        Args(x32, axes_of(0, 2), eps=EPS),
        what="float32 x of shape (4, 6, 3)",
        tol=F32_UNIT,
        dtype=np.float32,
    )


# ----------------------------------------------------------------------------- part 2


@LAB.check(points=2, uses=["group_norm_forward"], seed=60)
def group_forward_random(sub, rng):
    """GroupNorm forward matches F.group_norm on (N, C, H, W)"""
    # W == C in the first case: a channels-last mistake then runs without an error
    for shape, groups in [((2, 6, 3, 6), 2), ((3, 8, 4, 5), 4), ((1, 12, 2, 2), 3)]:
        x = images(rng, shape)
        gamma, beta = channel_params(rng, shape[1])
        what = f"x of shape {shape}, num_groups={groups}"
        GROUP.expect(sub, Args(x, groups, gamma, beta, eps=EPS), what=what)
    # an eps that nobody hard-codes: an eps accepted but ignored shows
    x = images(rng, (2, 4, 3, 3))
    gamma, beta = channel_params(rng, 4)
    what = "x of shape (2, 4, 3, 3), eps = 1e-3"
    GROUP.expect(sub, Args(x, 2, gamma, beta, eps=1e-3), what=what)


@LAB.check(points=1, uses=["group_norm_forward"], seed=61)
def group_forward_extremes(sub, rng):
    """GroupNorm with 1 group, C groups, and (N, C) or (N, C, L) input"""
    x = images(rng, (3, 6, 4, 4))
    gamma, beta = channel_params(rng, 6)
    GROUP.expect(
        sub, Args(x, 1, gamma, beta, eps=EPS), what="num_groups=1 (LayerNorm over (C, H, W))"
    )
    GROUP.expect(sub, Args(x, 6, gamma, beta, eps=EPS), what="num_groups=C=6 (InstanceNorm)")
    sequence = images(rng, (2, 8, 7))
    gamma, beta = channel_params(rng, 8)
    GROUP.expect(
        sub, Args(sequence, 4, gamma, beta, eps=EPS), what="x of shape (2, 8, 7) (N, C, L)"
    )
    flat = images(rng, (5, 8))
    GROUP.expect(sub, Args(flat, 2, gamma, beta, eps=EPS), what="x of shape (5, 8) (N, C)")


@LAB.check(points=1, uses=["group_norm_forward"], seed=62)
def group_forward_edges(sub, rng):
    """GroupNorm: constant group stays finite; float32 keeps its dtype; non-contiguous input"""
    x = images(rng, (2, 4, 3, 3))
    x[1, 2:] = -0.5  # the second group of the second image is constant
    gamma, beta = channel_params(rng, 4)
    GROUP.expect(sub, Args(x, 2, gamma, beta, eps=EPS), what="a constant group (variance 0)")
    x32 = images(rng, (2, 8, 4, 4), spread=False).astype(np.float32)
    args = Args(x32, 4, *channel_params(rng, 8, np.float32), eps=EPS)
    GROUP.expect(sub, args, what="float32 (2, 8, 4, 4)", tol=F32_UNIT, dtype=np.float32)
    view = images(rng, (2, 8, 6, 4))[:, :, ::2]
    gamma, beta = channel_params(rng, 8)
    GROUP.expect(
        sub, Args(view, 2, gamma, beta, eps=EPS), what="a non-contiguous view x[:, :, ::2]"
    )


@LAB.check(points=1, uses=["group_norm_forward"], seed=63)
def group_forward_batch_independent(sub, rng):
    """GroupNorm does not depend on the rest of the batch"""
    x = images(rng, (6, 4, 3, 3))
    gamma, beta = channel_params(rng, 4)
    whole = GROUP.call(sub, Args(x, 2, gamma, beta, eps=EPS)).items[0].array
    alone = GROUP.call(sub, Args(x[:1].copy(), 2, gamma, beta, eps=EPS)).items[0].array
    if whole is None or alone is None or whole.shape != x.shape or alone.shape != (1, 4, 3, 3):
        raise CheckFailed("group_norm_forward should return an array shaped like its input")
    if not np.allclose(whole[:1], alone, rtol=1e-9, atol=1e-10):
        raise CheckFailed(
            "the output for example 0 changed when the other 5 examples were removed from the "
            "batch: your statistics mix examples. GroupNorm takes one mean and variance per "
            "(example, group) and never averages over the batch axis."
        )


# ----------------------------------------------------------------------------- part 3


def _gradient_cases(rng):
    """(shape, G, Args(dy, x, G, gamma, eps)) for random x of shape (2, 6, 3, 3) and (3, 4, 5):
    the cases of GroupNorm's backward and of problem 4's statistics' gradients."""
    for shape, groups in [((2, 6, 3, 3), 3), ((3, 4, 5), 2)]:
        x = images(rng, shape)
        gamma, _ = channel_params(rng, shape[1])
        dy = rng.normal(size=shape)
        yield shape, groups, Args(dy, x, groups, gamma, eps=EPS)


def _extreme_gradient_cases(rng):
    """(G, Args) for 1 and C groups of x of shape (2, 4, 3, 2), then G = 3 of x of shape (4, 6)."""
    x = images(rng, (2, 4, 3, 2))
    gamma, _ = channel_params(rng, 4)
    dy = rng.normal(size=x.shape)
    for groups in (1, 4):
        yield groups, Args(dy, x, groups, gamma, eps=EPS)
    flat = images(rng, (4, 6))
    gamma, _ = channel_params(rng, 6)
    yield 3, Args(rng.normal(size=(4, 6)), flat, 3, gamma, eps=EPS)


@LAB.check(points=2, uses=["group_norm_backward"], seed=70)
def group_backward_dx(sub, rng):
    """GroupNorm backward: dx matches autograd"""
    for shape, groups, args in _gradient_cases(rng):
        what = f"x of shape {shape}, G={groups}"
        GROUP_BACKWARD.expect(sub, args, what=what, indices=[0], x=args.args[1])
    # an eps that nobody hard-codes: an eps accepted but ignored shows
    x = images(rng, (2, 4, 3))
    gamma, _ = channel_params(rng, 4)
    dy = rng.normal(size=x.shape)
    what = "x of shape (2, 4, 3), eps = 1e-3"
    GROUP_BACKWARD.expect(sub, Args(dy, x, 2, gamma, eps=1e-3), what=what, indices=[0], x=x)


@LAB.check(points=1, uses=["group_norm_backward"], seed=71)
def group_backward_params(sub, rng):
    """GroupNorm backward: dgamma and dbeta match autograd, shape (C,)"""
    x = images(rng, (3, 4, 2, 3))
    gamma, _ = channel_params(rng, 4)
    dy = rng.normal(size=x.shape)
    args = Args(dy, x, 2, gamma, eps=EPS)
    GROUP_BACKWARD.expect(sub, args, what="x of shape (3, 4, 2, 3)", indices=[1, 2], x=x)


@LAB.check(points=1, uses=["group_norm_backward"], seed=72)
def group_backward_extremes(sub, rng):
    """GroupNorm backward with 1 group, C groups and (N, C) input"""
    for groups, args in _extreme_gradient_cases(rng):
        x = args.args[1]
        if x.ndim == 2:
            GROUP_BACKWARD.expect(sub, args, what="x of shape (4, 6)", indices=[0], x=x)
        else:
            GROUP_BACKWARD.expect(sub, args, what=f"num_groups={groups}", x=x)


# ----------------------------------------------------------------------------- part 4


@LAB.check(points=2, uses=["dyt_forward"], seed=80)
def dyt_forward_random(sub, rng):
    """DyT forward matches its definition"""
    for shape, alpha in [((6, 8), 0.5), ((2, 3, 8), 1.7), ((4, 4), 0.2)]:
        x = rng.normal(size=shape) * 3 + rng.uniform(-2, 2, size=shape[-1])
        gamma, beta = channel_params(rng, shape[-1])
        DYT.expect(sub, Args(x, alpha, gamma, beta), what=f"x of shape {shape}, alpha={alpha}")


@LAB.check(points=1, uses=["dyt_forward"], seed=81)
def dyt_forward_edges(sub, rng):
    """DyT forward: saturation, float32 keeps its dtype"""
    x = rng.standard_t(df=2, size=(5, 6)) * 20  # heavy tails: tanh saturates
    gamma, beta = channel_params(rng, 6)
    DYT.expect(sub, Args(x, 0.5, gamma, beta), what="heavy-tailed x up to |x| ~ 1e3")
    x32 = rng.normal(size=(3, 4, 8)).astype(np.float32)
    args = Args(x32, 0.8, *channel_params(rng, 8, np.float32))
    DYT.expect(sub, args, what="float32 (3, 4, 8)", tol=F32_UNIT, dtype=np.float32)


# ----------------------------------------------------------------------------- part 5


@LAB.check(points=1, uses=["dyt_backward"], seed=90)
def dyt_backward_dx(sub, rng):
    """DyT backward: dx matches autograd"""
    x = rng.normal(size=(4, 6)) * 2
    gamma, _ = channel_params(rng, 6)
    args = Args(rng.normal(size=(4, 6)), x, 0.7, gamma)
    DYT_BACKWARD.expect(sub, args, what="x of shape (4, 6)", indices=[0])


@LAB.check(points=1, uses=["dyt_backward"], seed=91)
def dyt_backward_alpha(sub, rng):
    """DyT backward: dalpha is one number, summed over every element"""
    for shape, alpha in [((5, 6), 0.5), ((2, 3, 6), 1.3)]:
        x = rng.normal(size=shape) * 2
        gamma, _ = channel_params(rng, 6)
        dy = rng.normal(size=shape)
        DYT_BACKWARD.expect(sub, Args(dy, x, alpha, gamma), what=f"x of shape {shape}", indices=[1])


@LAB.check(points=1, uses=["dyt_backward"], seed=92)
def dyt_backward_params(sub, rng):
    """DyT backward: dgamma and dbeta (shape (d,)) on (B, L, d)"""
    x = rng.normal(size=(2, 3, 5)) * 2
    gamma, _ = channel_params(rng, 5)
    dy = rng.normal(size=(2, 3, 5))
    DYT_BACKWARD.expect(sub, Args(dy, x, 0.9, gamma), what="x of shape (2, 3, 5)")


# ----------------------------------------------------------------------------- problem 1

# For x of shape (N, C, H, W): the axes each norm reduces, and the norms for the messages.
AXES_OF = {
    "BatchNorm": {0, 2, 3},
    "LayerNorm": {1, 2, 3},
    "InstanceNorm": {2, 3},
    "GroupNorm's grouped view": {2},
}


def _read_axes(sub, name):
    """The learner's answer as a set of axes in 0..3, or a CheckFailed that says what it was."""
    out = sub.get(name)
    if out.is_tuple:
        items = out.items
    elif out.items[0].kind in ("list", "ndarray", "scalar"):
        items = [out.items[0]]
    else:
        if out.items[0].kind == "none":
            raise CheckFailed(f"{name}: no answer yet (it is None)")
        raise CheckFailed(
            f"{name}: expected a tuple of axes such as (0, 1), found {out.describe()}"
        )
    values = []
    for item in items:
        if item.array is None or not np.issubdtype(item.array.dtype, np.integer):
            raise CheckFailed(f"{name}: expected a tuple of integer axes such as (0, 1)")
        values += [int(v) for v in np.ravel(item.array)]
    if any(not -4 <= v < 4 for v in values):
        raise CheckFailed(f"{name}: {tuple(values)} names an axis that (N, C, H, W) does not have")
    return {v % 4 for v in values}


def _axes_check(sub, name, norm):
    got = _read_axes(sub, name)
    if got == AXES_OF[norm]:
        return
    others = [other for other, axes in AXES_OF.items() if axes == got and other != norm]
    why = f" Those are {others[0]}'s axes." if others else ""
    raise CheckFailed(
        f"{name}: {tuple(sorted(got))} is not the set of axes {norm} averages over for "
        f"x of shape (N, C, H, W).{why} Ask: over which axes does ONE mean run? The mean keeps "
        "the others."
    )


@LAB.check(points=1, uses=["BN_AXES"])
def problem_bn_axes(sub):
    """problem 1: BatchNorm's axes"""
    _axes_check(sub, "BN_AXES", "BatchNorm")


@LAB.check(points=1, uses=["LN_AXES"])
def problem_ln_axes(sub):
    """problem 1: LayerNorm's axes"""
    _axes_check(sub, "LN_AXES", "LayerNorm")


@LAB.check(points=1, uses=["IN_AXES"])
def problem_in_axes(sub):
    """problem 1: InstanceNorm's axes"""
    _axes_check(sub, "IN_AXES", "InstanceNorm")


# ----------------------------------------------------------------------------- problem 2


def _along_last_axis(gamma, beta, height, width):
    if width != len(gamma):
        raise ValueError("raises a broadcasting error instead")
    return tuple(np.broadcast_to(p, (len(gamma), height, width)) for p in (gamma, beta))


GN1_PROBES = [
    Probe(
        "per-channel vectors",
        "F.layer_norm over (C, H, W) needs weights of shape (C, H, W): one per element. "
        "Repeat each channel's gamma over its H x W positions.",
        lambda gamma, beta, height, width: (gamma, beta),
    ),
    Probe(
        "broadcast along the last axis",
        "This puts gamma[c] along the LAST axis (width). Channel c's value belongs to every "
        "position of channel c: gamma[:, None, None] broadcast to (C, H, W).",
        _along_last_axis,
    ),
]


@oracle
def oracle_gn1_params(gamma, beta, height, width):
    """LayerNorm weights of shape (C, H, W), read off the library's GroupNorm with one group.

    Its output is x_hat * gamma_ln + beta_ln position by position: for an input of values +1
    and -1 (x_hat is never 0), gamma_ln is the output without beta divided by the output with
    unit weights, and beta_ln is the output for a constant input (x_hat = 0 everywhere).
    """
    import torch
    import torch.nn.functional as F

    channels = len(gamma)
    signs = (-1.0) ** np.arange(channels * height * width)
    x = torch.from_numpy(signs.reshape(1, channels, height, width))
    weight, bias = tensor64(gamma), tensor64(beta)
    ones, zeros = torch.ones_like(weight), torch.zeros_like(bias)
    gamma_ln = F.group_norm(x, 1, weight, zeros) / F.group_norm(x, 1, ones, zeros)
    beta_ln = F.group_norm(torch.zeros_like(x), 1, weight, bias)
    return [gamma_ln[0].numpy(), beta_ln[0].numpy()]


GN1 = Graded(
    "gn1_as_layernorm_params",
    oracle=oracle_gn1_params,
    probes=GN1_PROBES,
    items=("gamma_ln", "beta_ln"),
    options={
        "hint": "With these weights F.layer_norm(x, (C, H, W), gamma_ln, beta_ln) must "
        "equal F.group_norm(x, 1, gamma, beta) for every x."
    },
)


@LAB.check(points=1, uses=["gn1_as_layernorm_params"], seed=100)
def problem_gn1_params(sub, rng):
    """problem 2: LayerNorm parameters that reproduce GroupNorm with one group"""
    for channels, height, width in [(4, 3, 4), (6, 2, 5)]:
        gamma, beta = channel_params(rng, channels)
        args = Args(gamma, beta, height, width)
        GN1.expect(sub, args, what=f"C={channels}, H={height}, W={width}")


GN_LN_WHY = {
    "a": (
        "The parameter shapes differ: (C,) for GroupNorm, (C, H, W) for this LayerNorm, so not "
        "every setting of one exists in the other."
    ),
    "c": "No norm of the GroupNorm family reduces axis 0: a group is one example's channels.",
    "d": "Both use the population variance (1/m).",
}


choice(
    LAB,
    "problem 2: is GroupNorm(1, C) the same module as LayerNorm? (multiple choice)",
    points=1,
    name="GN_LN_ANSWER",
    key="b",
    hint="Compare the statistics first, then count the affine parameters of each module.",
    why=GN_LN_WHY,
)


# ----------------------------------------------------------------------------- problem 3


DYT_WHY = {
    "a": (
        "alpha is a learned constant, not computed from the token, and nothing subtracts the mean."
    ),
    "b": (
        "Saturation makes very large inputs look alike, but scaling the input changes DyT's "
        "output everywhere else."
    ),
    "d": (
        "alpha is one scalar per layer, not a statistic of each token; and tanh is not linear, "
        "so no alpha turns DyT into LayerNorm."
    ),
}


choice(
    LAB,
    "problem 3: what DyT does and does not replace (multiple choice)",
    points=1,
    name="DYT_ANSWER",
    key="c",
    hint="Feed DyT 10 x instead of x, and compute what one output element depends on.",
    why=DYT_WHY,
)


# ----------------------------------------------------------------------------- problem 4


STAT_GRADS = Graded(
    "group_stat_grads",
    oracle_group_stat_grads,
    STAT_GRADS_PROBES,
    items=("dmean", "dvar"),
    errors=ERRORS,
)

PROBES = probe_table(NORMALIZE, GROUP, GROUP_BACKWARD, DYT, DYT_BACKWARD, GN1, STAT_GRADS)


def _stat_grads_case(sub, args, what):
    STAT_GRADS.expect(sub, args, what=what + " (both of shape (N, G))")


@LAB.check(points=2, uses=["group_stat_grads"], seed=90)
def problem_stat_grads(sub, rng):
    """problem 4: dL/dmean and dL/dvar of each group match autograd"""
    for shape, groups, args in _gradient_cases(rng):
        _stat_grads_case(sub, args, f"x of shape {shape}, G={groups}")


@LAB.check(points=1, uses=["group_stat_grads"], seed=91)
def problem_stat_grads_extremes(sub, rng):
    """problem 4: one group, C groups and (N, C) input"""
    for groups, args in _extreme_gradient_cases(rng):
        shape = args.args[1].shape
        _stat_grads_case(sub, args, f"x of shape {shape}, G={groups}")
