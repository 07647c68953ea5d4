"""Checks for lab 02, BatchNorm: forward with running statistics, eval mode, backward, problems.

The learner writes, in NumPy::

    batchnorm_forward(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5)
        -> (y, new_running_mean, new_running_var)     # x: (B, C) or (B, C, H, W); stats: (C,)
    batchnorm_backward(dy, x, gamma, eps=1e-5) -> (dx, dgamma, dbeta)      # training mode
    eval_affine(gamma, beta, running_mean, running_var, eps=1e-5) -> (scale, shift)  # problem 1
    COMPANIONS_ANSWER = "a" | "b" | "c" | "d"                                        # problem 1
    running_var_after_one_step(x, momentum=0.1) -> (C,)                              # problem 2

Statistics are per channel (axis 1) over every other axis. The function is pure: it returns the
new running statistics instead of changing a module's state, so that it can be called across a
process boundary and compared step by step.

The oracle is PyTorch in float64 (``nn.BatchNorm1d``/``nn.BatchNorm2d`` and autograd) plus
invariants; the probes are known-wrong variants, each with the hint that explains it.
"""

from __future__ import annotations

import numpy as np

from normlab.grader.cases import F64, Args, Graded, backward, probe_table, tensor64
from normlab.grader.core import CheckFailed, Item, Lab, Output
from normlab.grader.forbidden import AUTOGRAD, from_scratch
from normlab.grader.memo import oracle
from normlab.grader.probes import (
    Probe,
    both,
    choice,
    eps_ignored,
    evaluate,
    expect_array,
    grads_in_order,
    norm_dx,
)

LAB = Lab(
    stem="02_batchnorm",
    title="BatchNorm",
    forbidden=from_scratch(
        "batchnorm_forward",
        "eval_affine",
        "running_var_after_one_step",
        batchnorm_backward=AUTOGRAD,
    ),
)

EPS = 1e-5
F32_OFFSET = {"rtol": 1e-3, "atol": 1e-2}  # float32, offset 1e3: a right answer is off by ~1e-4
FORWARD_NAMES = ("y", "new_running_mean", "new_running_var")
BACKWARD_NAMES = ("dx", "dgamma", "dbeta")


# ----------------------------------------------------------------------------- shapes


def reduce_axes(x) -> tuple[int, ...]:
    """Every axis but the channel axis 1: (0,) for (B, C), (0, 2, 3) for (B, C, H, W)."""
    return (0,) + tuple(range(2, np.ndim(x)))


def per_channel(v, x):
    """A (C,) vector reshaped to broadcast along axis 1 of x: (1, C) or (1, C, 1, 1)."""
    shape = [1] * np.ndim(x)
    shape[1] = np.shape(x)[1]
    return np.asarray(v, np.float64).reshape(shape)


# ----------------------------------------------------------------------------- oracle


def _module(channels: int, ndim: int, gamma, beta, running_mean, running_var, momentum, eps):
    import torch

    kind = torch.nn.BatchNorm1d if ndim == 2 else torch.nn.BatchNorm2d
    module = kind(channels, eps=eps, momentum=momentum, dtype=torch.float64)
    with torch.no_grad():
        module.weight.copy_(tensor64(gamma))
        module.bias.copy_(tensor64(beta))
        module.running_mean.copy_(tensor64(running_mean))
        module.running_var.copy_(tensor64(running_var))
    return module


@oracle
def oracle_steps(batches, gamma, beta, running_mean, running_var, momentum=0.1, eps=EPS):
    """Run ``nn.BatchNorm1d/2d`` in train mode on each batch, in order.

    Returns:
        (outputs, running_mean, running_var): the list of train-mode outputs and the buffers
        after the last step, as float64 arrays.
    """
    import torch

    first = batches[0]
    module = _module(
        first.shape[1], first.ndim, gamma, beta, running_mean, running_var, momentum, eps
    )
    module.train()
    outputs = []
    with torch.no_grad():
        for x in batches:
            outputs.append(module(tensor64(x)).numpy())
    return outputs, module.running_mean.numpy().copy(), module.running_var.numpy().copy()


@oracle
def oracle_eval(x, gamma, beta, running_mean, running_var, eps=EPS):
    import torch

    module = _module(x.shape[1], x.ndim, gamma, beta, running_mean, running_var, 0.1, eps)
    module.eval()
    with torch.no_grad():
        return module(tensor64(x)).numpy()


@oracle
def oracle_forward(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=EPS):
    """(y, new_running_mean, new_running_var) of one call, in train or eval mode."""
    if not training:
        return (
            oracle_eval(x, gamma, beta, running_mean, running_var, eps),
            running_mean,
            running_var,
        )
    outputs, new_mean, new_var = oracle_steps(
        [x], gamma, beta, running_mean, running_var, momentum, eps
    )
    return outputs[0], new_mean, new_var


@oracle
def oracle_backward(dy, x, gamma, eps=EPS):
    import torch
    import torch.nn.functional as F

    xt, gt = tensor64(x, requires_grad=True), tensor64(gamma, requires_grad=True)
    bt = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    y = F.batch_norm(xt, None, None, gt, bt, training=True, eps=eps)
    backward(y, dy)
    return xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()


# ----------------------------------------------------------------------------- forward probes


def _forward_variant(
    axes="batch",
    eps_where="inside",
    normalize_ddof=0,
    update="pytorch",
    store_ddof=1,
    bessel_count="all",
    eval_uses="running",
    eval_updates=False,
    affine="channel",
):
    """A forward pass with one deliberate mistake; defaults are the right answer.

    Args:
        axes: "batch" (right), "features" (LayerNorm by mistake), "batch only" (4-D: forgets H, W).
        eps_where: "inside", "outside" or "none".
        normalize_ddof: 0 (right) or 1: the variance used to normalize.
        update: how the running statistics move: "pytorch" (right), "keras" (momentum flipped),
            "none" (never updated), "replace" (momentum ignored: running = batch).
        store_ddof: 1 (right: unbiased) or 0: the variance stored in the running average.
        bessel_count: "all" (right: n = B*H*W) or "batch" (n = B) in the correction n/(n-1).
        eval_uses: "running" (right) or "batch": the statistics eval mode normalizes with.
        eval_updates: True if eval mode wrongly updates the running statistics.
        affine: "channel" (right), "last axis" (gamma broadcast along the last axis), "none".
    """

    def forward(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=EPS):
        x = np.asarray(x, np.float64)
        running_mean = np.asarray(running_mean, np.float64)
        running_var = np.asarray(running_var, np.float64)
        if axes == "features":
            stat_axes = tuple(range(1, x.ndim))
        elif axes == "batch only":
            if x.ndim != 4:
                raise ValueError("only differs on (B, C, H, W)")
            stat_axes = (0,)
        else:
            stat_axes = reduce_axes(x)
        mean = x.mean(axis=stat_axes, keepdims=True)
        biased = ((x - mean) ** 2).mean(axis=stat_axes, keepdims=True)
        count = x.size // mean.size
        new_mean, new_var = running_mean.copy(), running_var.copy()
        if axes != "batch" and training:
            new_mean = new_var = None  # this mistake says nothing about the running statistics
        elif training or eval_updates:
            batch_axes = reduce_axes(x)
            channel_mean = x.mean(axis=batch_axes)
            channel_biased = x.var(axis=batch_axes)
            n = x.shape[0] if bessel_count == "batch" else x.size // x.shape[1]
            stored = channel_biased * n / (n - 1) if store_ddof == 1 else channel_biased
            m = momentum
            if update == "pytorch":
                new_mean = (1 - m) * running_mean + m * channel_mean
                new_var = (1 - m) * running_var + m * stored
            elif update == "keras":
                new_mean = m * running_mean + (1 - m) * channel_mean
                new_var = m * running_var + (1 - m) * stored
            elif update == "replace":
                new_mean, new_var = channel_mean, stored
        if training or eval_uses == "batch":
            var = biased * count / (count - 1) if normalize_ddof == 1 else biased
        else:
            mean, var = per_channel(running_mean, x), per_channel(running_var, x)
        if eps_where == "inside":
            x_hat = (x - mean) / np.sqrt(var + eps)
        elif eps_where == "outside":
            x_hat = (x - mean) / (np.sqrt(var) + eps)
        else:
            x_hat = (x - mean) / np.sqrt(var)
        if affine == "none":
            y = x_hat
        elif affine == "last axis":
            if x.shape[-1] != np.size(gamma) or x.ndim == 2:
                raise ValueError("only broadcasts silently when the last axis has C entries")
            y = x_hat * np.asarray(gamma) + np.asarray(beta)
        else:
            y = x_hat * per_channel(gamma, x) + per_channel(beta, x)
        return y, new_mean, new_var

    return forward


FORWARD_PROBES = [
    Probe(
        "normalized over features",
        "This matches statistics taken over the features of each example (axis=1, or the "
        "(C, H, W) axes): that is LayerNorm. BatchNorm computes one mean and one variance per "
        "feature/channel over the batch: axis=0 for (B, C), axis=(0, 2, 3) for (B, C, H, W).",
        _forward_variant(axes="features"),
    ),
    Probe(
        "statistics over the batch axis only",
        "For (B, C, H, W) this matches statistics over axis 0 only: one mean per (c, h, w) "
        "position. BatchNorm for images shares one mean and variance per channel over the batch "
        "AND every spatial position: axis=(0, 2, 3) (Ioffe & Szegedy 2015, §3.2).",
        _forward_variant(axes="batch only"),
    ),
    Probe(
        "eps outside the root",
        "This matches (x - mean) / (sqrt(var) + eps). Put eps inside the root, sqrt(var + eps): "
        "it is a floor under the variance, so a near-constant channel is not blown up.",
        _forward_variant(eps_where="outside"),
    ),
    Probe(
        "no eps",
        "This matches dividing by sqrt(var) with no eps: a constant channel gives 0/0 = NaN. "
        "Add eps inside the root: sqrt(var + eps).",
        _forward_variant(eps_where="none"),
    ),
    Probe(
        "unbiased variance to normalize",
        "This matches normalizing with the unbiased variance (divide by n - 1). In training, "
        "BatchNorm normalizes with the biased batch variance (divide by n, np.var's default); "
        "the unbiased one is only what goes into running_var.",
        _forward_variant(normalize_ddof=1),
    ),
    Probe(
        "momentum convention flipped",
        "The running statistics match running = momentum * running + (1 - momentum) * batch: "
        "that is the Keras convention (momentum=0.99 there). In PyTorch's convention momentum is "
        "the weight of the NEW batch: running = (1 - momentum) * running + momentum * batch.",
        _forward_variant(update="keras"),
    ),
    Probe(
        "running statistics never updated",
        "The running statistics came back unchanged after a training step. In training mode "
        "return the updated averages: (1 - momentum) * running + momentum * batch statistic.",
        _forward_variant(update="none"),
    ),
    Probe(
        "momentum ignored",
        "The running statistics equal the current batch's statistics: the running average "
        "forgets every earlier batch. Blend them: (1 - momentum) * running + momentum * batch.",
        _forward_variant(update="replace"),
    ),
    Probe(
        "running variance stored biased",
        "running_var matches an average of the BIASED batch variance (divide by n). PyTorch "
        "normalizes with the biased variance but stores the UNBIASED one (divide by n - 1, i.e. "
        "biased * n / (n - 1)) in running_var.",
        _forward_variant(store_ddof=0),
    ),
    Probe(
        "Bessel correction with B instead of B*H*W",
        "running_var matches the correction B / (B - 1). For (B, C, H, W) every channel's "
        "statistics average n = B * H * W values, so the unbiased variance is "
        "biased * n / (n - 1) with that n.",
        _forward_variant(bessel_count="batch"),
    ),
    Probe(
        "eval mode uses batch statistics",
        "In eval mode (training=False) this matches normalizing with the statistics of the "
        "batch itself. Eval mode must use running_mean and running_var, so that an example's "
        "output does not depend on the other examples in the batch.",
        _forward_variant(eval_uses="batch"),
    ),
    Probe(
        "eval mode updates the running statistics",
        "In eval mode the running statistics must come back unchanged: only training steps "
        "update them.",
        _forward_variant(eval_updates=True),
    ),
    Probe(
        "gamma broadcast along the last axis",
        "This matches gamma * x_hat + beta with gamma of shape (C,) broadcast along the LAST "
        "axis (W), which happens silently when W == C. Reshape gamma and beta to (1, C, 1, 1).",
        _forward_variant(affine="last axis"),
    ),
    Probe(
        "affine step missing",
        "This matches x_hat without the affine step. Finish with gamma * x_hat + beta (per "
        "channel).",
        _forward_variant(affine="none"),
    ),
]
_BY_NAME = {probe.name: probe for probe in FORWARD_PROBES}
FORWARD_PROBES += [
    # CS231n's batchnorm_forward: running = momentum * running + (1 - momentum) * batch (with
    # momentum = 0.9 there), and the biased np.var(x, axis=0) stored in running_var.
    both(
        _BY_NAME["momentum convention flipped"],
        _BY_NAME["running variance stored biased"],
        _forward_variant(update="keras", store_ddof=0),
    ),
    *eps_ignored(_forward_variant(), "BatchNorm"),
]
# What the running-statistics check charges, named there once: the k-step check does not
# charge it again.
STORED_VARIANCE_PROBES = (
    "running variance stored biased",
    "Bessel correction with B instead of B*H*W",
)


# ----------------------------------------------------------------------------- backward probes


def _backward_variant(
    mean_term=True,
    var_term=True,
    use_gamma=True,
    param_axes="right",
    keepdims=False,
    swap=False,
    axes="batch",
    with_eps=True,
):
    """A backward pass with one deliberate mistake; defaults are the right answer."""

    def backward(dy, x, gamma, eps=EPS):
        x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
        eps = eps if with_eps else 0.0
        stat_axes = tuple(range(1, x.ndim)) if axes == "features" else reduce_axes(x)
        mean = x.mean(axis=stat_axes, keepdims=True)
        inv_std = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=stat_axes, keepdims=True) + eps)
        x_hat = (x - mean) * inv_std
        g = dy * per_channel(gamma, x) if use_gamma else dy
        dx = norm_dx(g, x_hat, inv_std, stat_axes, mean_term=mean_term, var_term=var_term)
        if param_axes == "none":
            dgamma, dbeta = dy * x_hat, dy
        else:
            sum_axes = (0,) if param_axes == "batch only" else reduce_axes(x)
            if param_axes == "batch only" and x.ndim != 4:
                raise ValueError("only differs on (B, C, H, W)")
            dgamma = (dy * x_hat).sum(axis=sum_axes, keepdims=keepdims)
            dbeta = dy.sum(axis=sum_axes, keepdims=keepdims)
        return grads_in_order(dx, dgamma, dbeta, swap)

    return backward


BACKWARD_PROBES = [
    Probe(
        "mean and variance treated as constants",
        "This matches dx = dy * gamma / sqrt(var + eps): it treats the batch mean and variance "
        "as constants. Both depend on every example of the batch, so dx has two more terms: "
        "subtract mean(g) and x_hat * mean(g * x_hat), with g = dy * gamma and the means taken "
        "over the batch (and H, W) for each channel.",
        _backward_variant(mean_term=False, var_term=False),
    ),
    Probe(
        "mean term missing",
        "This has the variance term but not the mean term: subtract mean(g) over the batch (and "
        "H, W) for each channel, g = dy * gamma — the batch mean depends on every example.",
        _backward_variant(mean_term=False),
    ),
    Probe(
        "variance term missing",
        "This has the mean term but not the variance term: subtract x_hat * mean(g * x_hat) over "
        "the batch (and H, W) — the batch variance depends on every example too.",
        _backward_variant(var_term=False),
    ),
    Probe(
        "gamma missing in dx",
        "This matches a dx that ignores gamma: the gradient flowing into x_hat is dy * gamma.",
        _backward_variant(use_gamma=False),
    ),
    Probe(
        "LayerNorm backward",
        "This matches the backward pass of LayerNorm (statistics over the features of each "
        "example). BatchNorm's statistics, and so the mean terms of dx, run over the batch "
        "axis (and H, W) for each channel.",
        _backward_variant(axes="features"),
    ),
    Probe(
        "dgamma and dbeta not summed",
        "dgamma/dbeta were not summed: gamma and beta are shared by every example (and every "
        "position), so their gradients add up over all of them: sum over axis 0 for (B, C), over "
        "(0, 2, 3) for (B, C, H, W), leaving shape (C,).",
        _backward_variant(param_axes="none"),
    ),
    Probe(
        "dgamma and dbeta summed over the batch only",
        "dgamma/dbeta were summed over the batch axis only. For (B, C, H, W) gamma is shared by "
        "every spatial position too: sum over axis=(0, 2, 3), leaving shape (C,).",
        _backward_variant(param_axes="batch only"),
    ),
    Probe(
        "gradient kept a reduced axis",
        "dgamma/dbeta kept the reduced axes (keepdims=True): shape (1, C) or (1, C, 1, 1) "
        "instead of (C,). Nothing would fail later either: an update gamma - lr * dgamma "
        "silently broadcasts gamma of shape (C,) into (1, C). Return gradients with the "
        "parameters' shape, (C,).",
        _backward_variant(keepdims=True),
    ),
    Probe(
        "dgamma and dbeta swapped",
        "dgamma and dbeta are swapped: dbeta = sum of dy, dgamma = sum of dy * x_hat.",
        _backward_variant(swap=True),
    ),
    Probe(
        "no eps in the backward pass",
        "This matches a backward pass with sqrt(var) instead of sqrt(var + eps): a constant "
        "channel then gives 0/0. Use the forward pass's sqrt(var + eps) throughout.",
        _backward_variant(with_eps=False),
    ),
    *eps_ignored(_backward_variant(), "BatchNorm backward pass"),
]


# ----------------------------------------------------------------------------- inputs


def channels_with_varied_scale(rng, shape):
    """Random input whose channels have scales 0.1..10 and offsets -5..5 (axis 1 is C)."""
    channels = shape[1]
    scales = per_channel(np.geomspace(0.1, 10, channels), np.empty(shape))
    offsets = per_channel(rng.uniform(-5, 5, size=channels), np.empty(shape))
    return rng.normal(size=shape) * scales + offsets


def params(rng, channels, dtype=np.float64):
    """(gamma, beta, running_mean, running_var): random, so that every mistake shows."""
    gamma = rng.normal(1.0, 0.5, size=channels)
    beta = rng.normal(0.0, 0.5, size=channels)
    running_mean = rng.normal(0.0, 1.0, size=channels)
    running_var = rng.uniform(0.5, 2.0, size=channels)
    return tuple(v.astype(dtype) for v in (gamma, beta, running_mean, running_var))


FORWARD = Graded("batchnorm_forward", oracle_forward, FORWARD_PROBES, items=FORWARD_NAMES)
BACKWARD = Graded("batchnorm_backward", oracle_backward, BACKWARD_PROBES, items=BACKWARD_NAMES)


def train_step(x, state, momentum=0.1, eps=EPS):
    """The arguments of one training-mode call: x, the (gamma, beta, running stats) state."""
    return Args(x, *state, True, momentum=momentum, eps=eps)


# ----------------------------------------------------------------------------- forward checks


@LAB.check(points=2, uses=["batchnorm_forward"], seed=20)
def forward_train_2d(sub, rng):
    """train mode: output matches nn.BatchNorm1d on (B, d)"""
    for shape in [(8, 8), (16, 5), (3, 4)]:  # square first: an axis mix-up cannot hide
        x = channels_with_varied_scale(rng, shape)
        state = params(rng, shape[1])
        FORWARD.expect(
            sub, train_step(x, state), what=f"training=True, x of shape {shape}", indices=[0]
        )
    # an eps that nobody hard-codes: an eps accepted but ignored shows
    x = channels_with_varied_scale(rng, (8, 4))
    what = "training=True, x of shape (8, 4), eps = 1e-3"
    FORWARD.expect(sub, train_step(x, params(rng, 4), eps=1e-3), what=what, indices=[0])


@LAB.check(points=2, uses=["batchnorm_forward"], seed=21)
def forward_running_stats(sub, rng):
    """train mode: running statistics updated like PyTorch (momentum, unbiased variance)"""
    for shape, momentum in [((6, 4), 0.1), ((5, 3), 0.25)]:
        x = channels_with_varied_scale(rng, shape)
        state = params(rng, shape[1])
        what = f"training=True, momentum={momentum}, x of shape {shape}"
        FORWARD.expect(sub, train_step(x, state, momentum), what=what, indices=[1, 2])
    # images: every channel averages n = B * H * W values, and the unbiased variance uses that n
    x = channels_with_varied_scale(rng, (2, 3, 2, 2))
    what = "training=True, momentum=0.1, x of shape (2, 3, 2, 2)"
    FORWARD.expect(sub, train_step(x, params(rng, 3)), what=what, indices=[1, 2])


@LAB.check(points=2, uses=["batchnorm_forward"], seed=22)
def forward_eval(sub, rng):
    """eval mode: normalizes with the running statistics and leaves them unchanged"""
    for shape in [(6, 4), (2, 3, 4, 3)]:
        x = channels_with_varied_scale(rng, shape)
        args = Args(x, *params(rng, shape[1]), False, momentum=0.1, eps=EPS)
        FORWARD.expect(sub, args, what=f"training=False, x of shape {shape}")


@LAB.check(points=2, uses=["batchnorm_forward"], seed=23)
def forward_4d(sub, rng):
    """(B, C, H, W): y normalized with one mean and variance per channel over batch and space"""
    # y only: the running statistics of images are the running-statistics check's
    for shape in [(2, 3, 4, 3), (3, 2, 2, 5)]:  # W == C first: gamma on the wrong axis cannot hide
        x = channels_with_varied_scale(rng, shape)
        state = params(rng, shape[1])
        what = f"training=True, x of shape {shape}"
        FORWARD.expect(sub, train_step(x, state), what=what, indices=[0])


@LAB.check(points=2, uses=["batchnorm_forward"], seed=24)
def forward_k_steps(sub, rng):
    """k training steps, then eval: running statistics carried over and used in eval"""
    for shape, momentum, k in [((8, 3), 0.1, 5), ((2, 2, 3, 3), 0.3, 4)]:
        channels = shape[1]
        gamma, beta = params(rng, channels)[:2]
        # a fresh module's buffers, and batches whose statistics drift from step to step
        start_mean, start_var = np.zeros(channels), np.ones(channels)
        batches = [channels_with_varied_scale(rng, shape) + step for step in range(k)]
        _, final_mean, final_var = oracle_steps(
            batches, gamma, beta, start_mean, start_var, momentum
        )
        running_mean, running_var = start_mean, start_var
        for step, x in enumerate(batches):
            out = sub.call(
                "batchnorm_forward",
                x,
                gamma,
                beta,
                running_mean,
                running_var,
                True,
                momentum=momentum,
                eps=EPS,
            )
            if not out.is_tuple or len(out.items) != 3 or any(i.array is None for i in out.items):
                raise CheckFailed(
                    f"batchnorm_forward returned {out.describe()} at step {step + 1}, expected "
                    "(y, new_running_mean, new_running_var)"
                )
            running_mean, running_var = out.items[1].array, out.items[2].array
        what = f"after {k} training steps (momentum={momentum}, x of shape {shape})"
        chained = [
            Probe(p.name, p.hint, _chain(p.compute, batches, momentum)) for p in FORWARD_PROBES
        ]
        candidates = evaluate(chained, gamma, beta, start_mean, start_var)
        # a stored-variance convention is charged by the running-statistics check, once
        for probe, result in candidates:
            if probe.name in STORED_VARIANCE_PROBES and _same(running_var, result[2]):
                final_var = result[2]
        for index, (got, expected) in enumerate(
            [(running_mean, final_mean), (running_var, final_var)], start=1
        ):
            expect_array(
                _as_output(got),
                expected,
                what=f"{FORWARD_NAMES[index]} {what}",
                candidates=[(p, r[index]) for p, r in candidates],
                **F64,
            )
        test = channels_with_varied_scale(rng, shape)
        out = sub.call(
            "batchnorm_forward",
            test,
            gamma,
            beta,
            running_mean,
            running_var,
            False,
            momentum=momentum,
            eps=EPS,
        )
        expect_array(
            out,
            oracle_eval(test, gamma, beta, final_mean, final_var),
            what=f"eval-mode y {what}",
            index=0,
            count=3,
            **F64,
        )


def _same(got, expected) -> bool:
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return got.shape == expected.shape and np.allclose(got, expected, **F64)


def _chain(forward, batches, momentum):
    """A probe that runs ``forward`` over every batch, feeding its running stats back in."""

    def run(gamma, beta, running_mean, running_var):
        y = None
        for x in batches:
            if running_mean is None:
                raise ValueError("this mistake does not produce running statistics")
            y, running_mean, running_var = forward(
                x, gamma, beta, running_mean, running_var, True, momentum, EPS
            )
        return y, running_mean, running_var

    return run


def _as_output(array):
    return Output([Item("ndarray", np.asarray(array))], is_tuple=False)


@LAB.check(points=1, uses=["batchnorm_forward"], seed=25)
def forward_small_variance(sub, rng):
    """train mode stays finite when a channel's variance goes to 0"""
    x = rng.normal(size=(8, 4))
    x[:, 0] = 3.0  # a constant channel: variance exactly 0
    x[:, 1] = -2.0 + 1e-4 * rng.normal(size=8)  # variance ~1e-8, far below eps
    state = params(rng, 4)
    what = "channels with variance 0 and 1e-8"
    FORWARD.expect(sub, train_step(x, state), what=what, indices=[0])


@LAB.check(points=1, uses=["batchnorm_forward"], seed=26)
def forward_float32(sub, rng):
    """float32 input with a large offset (x + 1e3): accurate, stays float32"""
    x = (rng.normal(size=(64, 6)) + 1e3).astype(np.float32)
    state = params(rng, 6, np.float32)
    state = state[:2] + (state[2] + np.float32(1e3), state[3])
    try:
        FORWARD.expect(
            sub,
            train_step(x, state),
            what="float32 x + 1e3 of shape (64, 6)",
            indices=[0],
            tol=F32_OFFSET,
            dtype=np.float32,
        )
    except CheckFailed as failure:
        if "dtype is" in str(failure):
            raise
        raise CheckFailed(
            f"{failure}\nHint: compute the variance as the mean of (x - mean)**2. The one-pass "
            "formula mean(x**2) - mean(x)**2 subtracts two numbers near 1e6 that float32 stores "
            "only to about +-0.06, so the variance it returns is mostly rounding noise.",
            failure.probes,
        ) from None


# ----------------------------------------------------------------------------- backward checks


@LAB.check(points=2, uses=["batchnorm_backward"], seed=40)
def backward_dx(sub, rng):
    """backward: dx matches autograd on (B, d)"""
    # first a constant column (variance 0): a missing eps gives NaN or inf there, and the
    # message then says where
    x = channels_with_varied_scale(rng, (6, 4))
    x[:, 1] = 2.5
    gamma, dy = params(rng, 4)[0], rng.normal(size=(6, 4))
    what = "x of shape (6, 4) whose column 1 is constant"
    BACKWARD.expect(sub, Args(dy, x, gamma, eps=EPS), what=what, indices=[0], x=x)
    for shape in [(6, 6), (8, 3)]:
        x = channels_with_varied_scale(rng, shape)
        gamma = params(rng, shape[1])[0]
        dy = rng.normal(size=shape)
        what = f"x of shape {shape}"
        BACKWARD.expect(sub, Args(dy, x, gamma, eps=EPS), what=what, indices=[0], x=x)
    # an eps that nobody hard-codes: an eps accepted but ignored shows
    x = channels_with_varied_scale(rng, (5, 3))
    gamma, dy = params(rng, 3)[0], rng.normal(size=(5, 3))
    what = "x of shape (5, 3), eps = 1e-3"
    BACKWARD.expect(sub, Args(dy, x, gamma, eps=1e-3), what=what, indices=[0], x=x)


@LAB.check(points=1, uses=["batchnorm_backward"], seed=41)
def backward_params(sub, rng):
    """backward: dgamma and dbeta of shape (d,) match autograd"""
    x = channels_with_varied_scale(rng, (5, 4))
    gamma = params(rng, 4)[0]
    args = Args(rng.normal(size=(5, 4)), x, gamma, eps=EPS)
    BACKWARD.expect(sub, args, what="x of shape (5, 4)", indices=[1, 2], x=x)


@LAB.check(points=2, uses=["batchnorm_backward"], seed=42)
def backward_4d(sub, rng):
    """backward on (B, C, H, W): all gradients right, dgamma/dbeta of shape (C,)"""
    for shape in [(2, 3, 2, 3), (3, 2, 3, 4)]:
        x = channels_with_varied_scale(rng, shape)
        gamma = params(rng, shape[1])[0]
        dy = rng.normal(size=shape)
        BACKWARD.expect(sub, Args(dy, x, gamma, eps=EPS), what=f"x of shape {shape}", x=x)


# ----------------------------------------------------------------------------- problem 1


def _eval_affine_probes():
    def variant(sqrt=True, eps_where="inside", shift="right"):
        def compute(gamma, beta, running_mean, running_var, eps):
            if not sqrt:
                denominator = running_var + eps
            elif eps_where == "outside":
                denominator = np.sqrt(running_var) + eps
            else:
                denominator = np.sqrt(running_var + eps)
            scale = gamma / denominator
            if shift == "forgot scale":
                return scale, beta - running_mean
            if shift == "sign":
                return scale, beta + scale * running_mean
            return scale, beta - scale * running_mean

        return compute

    return [
        Probe(
            "no square root",
            "This divides gamma by running_var + eps: divide by the standard deviation, "
            "sqrt(running_var + eps).",
            variant(sqrt=False),
        ),
        Probe(
            "eps outside the root",
            "This divides by sqrt(running_var) + eps: put eps inside the root, as in the "
            "forward pass.",
            variant(eps_where="outside"),
        ),
        Probe(
            "shift without the scale",
            "shift = beta - running_mean forgets that the mean is multiplied by the scale too: "
            "y = scale * (x - running_mean) + beta, so shift = beta - scale * running_mean.",
            variant(shift="forgot scale"),
        ),
        Probe(
            "sign of the shift",
            "The shift has the wrong sign: y = scale * (x - running_mean) + beta, so "
            "shift = beta - scale * running_mean.",
            variant(shift="sign"),
        ),
    ]


EVAL_AFFINE_PROBES = _eval_affine_probes()


@oracle
def oracle_eval_affine(gamma, beta, running_mean, running_var, eps=EPS):
    """(scale, shift) of eval-mode BatchNorm, read off the module at x = 0 and x = 1."""
    channels = np.shape(gamma)[0]
    zeros, ones = np.zeros((1, channels)), np.ones((1, channels))
    shift = oracle_eval(zeros, gamma, beta, running_mean, running_var, eps)[0]
    scale = oracle_eval(ones, gamma, beta, running_mean, running_var, eps)[0] - shift
    return scale, shift


EVAL_AFFINE = Graded(
    "eval_affine", oracle_eval_affine, EVAL_AFFINE_PROBES, items=("scale", "shift")
)


@LAB.check(points=1, uses=["eval_affine"], seed=50)
def problem_eval_affine(sub, rng):
    """problem 1: eval_affine gives eval-mode BatchNorm as y = scale * x + shift"""
    gamma, beta, running_mean, running_var = params(rng, 5)
    running_mean = running_mean * 3
    EVAL_AFFINE.expect(sub, Args(gamma, beta, running_mean, running_var, eps=EPS), what="")


COMPANIONS_WHY = {
    "a": (
        "BatchNorm's training-mode computation is deterministic: the same batch gives the same "
        "output; the variation comes from the companions."
    ),
    "c": "Eval mode leaves the running statistics unchanged; only training-mode passes move them.",
    "d": (
        "gamma and beta change only when an optimizer steps; the dependence on companions "
        "appears within one forward pass with gamma and beta fixed."
    ),
}


choice(
    LAB,
    "problem 1: why companions matter in train mode only (multiple choice)",
    points=1,
    name="COMPANIONS_ANSWER",
    key="b",
    hint="Ask which numbers the normalization uses in each mode, and who computes them.",
    why=COMPANIONS_WHY,
)


# ----------------------------------------------------------------------------- problem 2


def _one_step_probes():
    """The problem 2 probes: ``compute(x, momentum)``, the arguments of its function."""

    def variant(ddof=1, convention="pytorch"):
        def compute(x, momentum=0.1):
            axes = reduce_axes(x)
            n = x.size // x.shape[1]
            var = x.var(axis=axes) * (n / (n - 1) if ddof == 1 else 1.0)
            if convention == "keras":
                return momentum * 1.0 + (1 - momentum) * var
            if convention == "batch":
                return var
            if convention == "unchanged":
                return np.ones(x.shape[1])
            return (1 - momentum) * 1.0 + momentum * var

        return compute

    return [
        Probe(
            "biased variance",
            "This uses the biased batch variance; running_var averages the unbiased one "
            "(divide by n - 1).",
            variant(ddof=0),
        ),
        Probe(
            "momentum convention flipped",
            "This is momentum * 1 + (1 - momentum) * var (the Keras convention). In PyTorch "
            "momentum weighs the new batch: (1 - momentum) * 1 + momentum * var.",
            variant(convention="keras"),
        ),
        Probe(
            "the batch variance itself",
            "This is the batch variance itself; the running average starts from running_var = 1 "
            "and moves only a fraction momentum towards it.",
            variant(convention="batch"),
        ),
        Probe(
            "unchanged",
            "A fresh module starts at running_var = 1, but one training step moves it.",
            variant(convention="unchanged"),
        ),
    ]


ONE_STEP_PROBES = _one_step_probes()


@oracle
def oracle_one_step(x, momentum):
    """running_var of a fresh ``nn.BatchNorm1d/2d`` after one training-mode call on x."""
    import torch

    kind = torch.nn.BatchNorm1d if x.ndim == 2 else torch.nn.BatchNorm2d
    module = kind(x.shape[1], momentum=momentum, dtype=torch.float64)
    with torch.no_grad():
        module(tensor64(x))
    return module.running_var.numpy()


ONE_STEP = Graded("running_var_after_one_step", oracle_one_step, ONE_STEP_PROBES)

PROBES = probe_table(FORWARD, BACKWARD, EVAL_AFFINE, ONE_STEP)


@LAB.check(points=1, uses=["running_var_after_one_step"], seed=51)
def problem_one_step(sub, rng):
    """problem 2: running_var after one training step from a fresh module"""
    for shape, momentum in [((4, 3), 0.1), ((2, 2, 3, 3), 0.2)]:
        x = channels_with_varied_scale(rng, shape)
        what = f"momentum={momentum}, x of shape {shape}"
        ONE_STEP.expect(sub, Args(x, momentum=momentum), what=what)
