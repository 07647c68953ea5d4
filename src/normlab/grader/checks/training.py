"""Checks for lab 08, Train with it: a small network that trains with the learner's own norms.

The learner pastes their BatchNorm (lab 02), LayerNorm (lab 03) and GroupNorm (lab 05) into
lab 08 and writes, in NumPy, a network ``x @ W1 -> norm -> ReLU -> @ W2 + b2 -> softmax cross-entropy``::

    net_forward_backward(x, labels, W1, gamma, beta, W2, b2, norm="batch", groups=4)
        -> (loss, dW1, dgamma, dbeta, dW2, db2)     # x: (N, D); labels: (N,) ints; W1: (D, H)
                                                    # norm: "batch", "layer", "group" or "none"
    net_sgd_step(param, grad, velocity, lr, momentum) -> (new_param, new_velocity)
    net_train(x, labels, W1, gamma, beta, W2, b2, lr, momentum, steps, batch_size)
        -> (losses, running_mean, running_var, W1, gamma, beta, W2, b2)  # trained, SGD+momentum
    net_predict(x, W1, gamma, beta, running_mean, running_var, W2, b2) -> logits  # eval mode
    NET_SCALE_ANSWER, NET_BATCH1_ANSWER = "a" | "b" | "c" | "d"                  # problems 1, 2

Part 0 grades the learner's norms of labs 02, 03 and 05 (pasted, or written here) on the (N, H)
features the network gives them, with those labs' own oracles and probes.

The oracle is the same network in PyTorch float64 (``F.batch_norm``, ``F.layer_norm``,
``F.group_norm``, ``F.cross_entropy``, autograd and ``torch.optim.SGD``) on the same small fixed arrays: the
grader needs no data set, and no check depends on an accuracy or a time.
"""

from __future__ import annotations

import numpy as np

from normlab.grader.cases import Args, Graded, affine_params, probe_table, tensor64
from normlab.grader.checks import batchnorm as lab02
from normlab.grader.checks import group_instance as lab05
from normlab.grader.checks import layernorm as lab03
from normlab.grader.core import CheckFailed, Lab
from normlab.grader.forbidden import AUTOGRAD, from_scratch
from normlab.grader.memo import oracle
from normlab.grader.probes import Probe, array_of, choice

# Part 0: the learner's norms of labs 02, 03 and 05 (pasted, or written here), by net_...'s norm
NORMS = {
    "batch": ("batchnorm_forward", "batchnorm_backward"),
    "layer": ("layernorm_forward", "layernorm_backward"),
    "group": ("group_norm_forward", "group_norm_backward"),
}
PASTED = tuple(name for pair in NORMS.values() for name in pair)

LAB = Lab(
    stem="08_training",
    title="Train with it",
    forbidden=from_scratch(
        "net_predict",
        *PASTED,
        net_forward_backward=AUTOGRAD,
        net_sgd_step=AUTOGRAD,
        net_train=AUTOGRAD,
    ),
    borrowed=PASTED,
    preload=("matplotlib.pyplot",),  # the lab's notebook plots its training curves
)

EPS = 1e-5
BN_MOMENTUM = 0.1  # the running statistics' momentum (PyTorch's default and convention)
GRAD_NAMES = ("loss", "dW1", "dgamma", "dbeta", "dW2", "db2")
TRAIN_NAMES = ("losses", "running_mean", "running_var", "W1", "gamma", "beta", "W2", "b2")
STEP_NAMES = ("new_param", "new_velocity")


# ----------------------------------------------------------------------------- oracle


def _norm(z, gamma, beta, norm, groups=4, constant_statistics=False):
    """The hidden layer's norm in torch: the library's, or by hand with frozen statistics."""
    import torch.nn.functional as F

    if norm not in ("batch", "layer", "group", "none"):
        raise ValueError(f"norm must be 'batch', 'layer', 'group' or 'none', not {norm!r}")
    if norm == "none":  # the network without a norm: gamma and beta are not used
        return z
    if not constant_statistics:
        if norm == "batch":
            return F.batch_norm(z, None, None, gamma, beta, training=True, eps=EPS)
        if norm == "layer":
            return F.layer_norm(z, (z.shape[1],), gamma, beta, eps=EPS)
        return F.group_norm(z, groups, gamma, beta, eps=EPS)
    if norm == "batch":
        rows = z
        axis = 0
    else:
        rows = z.reshape(len(z), 1 if norm == "layer" else groups, -1)
        axis = -1
    mean = rows.mean(axis, keepdim=True).detach()
    var = rows.var(axis, unbiased=False, keepdim=True).detach()
    return gamma * ((rows - mean) / (var + EPS).sqrt()).reshape(z.shape) + beta


def _network(
    x,
    labels,
    W1,
    gamma,
    beta,
    W2,
    b2,
    norm="batch",
    groups=4,
    *,
    reduction="mean",
    frozen=False,
    gate="h",
):
    """(loss, dW1, dgamma, dbeta, dW2, db2) of the network, by autograd in float64.

    Args:
        frozen: treat the norm's mean and variance as constants in the backward pass.
        gate: "h" (right: ReLU's gradient where its input h > 0) or "z" (where z = x @ W1 > 0).
        reduction: "mean" (right) or "sum" of the per-example losses.
    """
    import torch
    import torch.nn.functional as F

    params = [tensor64(p, requires_grad=True) for p in (W1, gamma, beta, W2, b2)]
    w1, g, b, w2, c = params
    z = tensor64(x) @ w1
    h = _norm(z, g, b, norm, groups, constant_statistics=frozen)
    if gate == "z":
        a = h.clamp(min=0).detach() + (h - h.detach()) * (z > 0).to(h.dtype)
    else:
        a = h.clamp(min=0)
    logits = a @ w2 + c
    loss = F.cross_entropy(logits, torch.as_tensor(labels, dtype=torch.long), reduction=reduction)
    loss.backward()
    grads = (torch.zeros_like(p) if p.grad is None else p.grad for p in params)
    return (float(loss.detach()), *(g.numpy() for g in grads))


@oracle
def oracle_grads(x, labels, W1, gamma, beta, W2, b2, norm="batch", groups=4):
    return _network(x, labels, W1, gamma, beta, W2, b2, norm, groups)


@oracle
def oracle_sgd_step(param, grad, velocity, lr, momentum):
    """One step of ``torch.optim.SGD`` from a given momentum buffer: (param, buffer) after it."""
    import torch

    p = tensor64(param, requires_grad=True)
    optimizer = torch.optim.SGD([p], lr=lr, momentum=momentum)
    p.grad = tensor64(grad)
    optimizer.state[p]["momentum_buffer"] = tensor64(velocity).clone()
    optimizer.step()
    return p.detach().numpy(), optimizer.state[p]["momentum_buffer"].numpy()


def _batch(x, labels, step, batch_size, same_batch=False):
    start = 0 if same_batch else step * batch_size
    if start + batch_size > len(x):
        raise ValueError("not enough rows for that many steps")
    return x[start : start + batch_size], labels[start : start + batch_size]


@oracle
def oracle_train(x, labels, W1, gamma, beta, W2, b2, lr, momentum, steps, batch_size):
    """PyTorch trains the BatchNorm network: F.batch_norm keeps the running statistics."""
    import torch
    import torch.nn.functional as F

    params = [tensor64(p, requires_grad=True) for p in (W1, gamma, beta, W2, b2)]
    w1, g, b, w2, c = params
    optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum)
    running_mean = torch.zeros(W1.shape[1], dtype=torch.float64)
    running_var = torch.ones(W1.shape[1], dtype=torch.float64)
    losses = []
    for step in range(steps):
        xb, yb = _batch(x, labels, step, batch_size)
        optimizer.zero_grad()
        h = F.batch_norm(tensor64(xb) @ w1, running_mean, running_var, g, b, True, BN_MOMENTUM, EPS)
        logits = h.clamp(min=0) @ w2 + c
        loss = F.cross_entropy(logits, torch.as_tensor(yb, dtype=torch.long))
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    trained = (p.detach().numpy() for p in params)
    return np.array(losses), running_mean.numpy(), running_var.numpy(), *trained


@oracle
def oracle_predict(x, W1, gamma, beta, running_mean, running_var, W2, b2):
    import torch.nn.functional as F

    z = tensor64(x) @ tensor64(W1)
    h = F.batch_norm(
        z,
        tensor64(running_mean),
        tensor64(running_var),
        tensor64(gamma),
        tensor64(beta),
        training=False,
        eps=EPS,
    )
    return (h.clamp(min=0) @ tensor64(W2) + tensor64(b2)).numpy()


# ----------------------------------------------------------------------------- probes


def _grads_variant(**mistake):
    def compute(x, labels, W1, gamma, beta, W2, b2, norm="batch", groups=4):
        return _network(x, labels, W1, gamma, beta, W2, b2, norm, groups, **mistake)

    return compute


def _unstable_softmax(x, labels, W1, gamma, beta, W2, b2, norm="batch", groups=4):
    """The loss and gradients of exp(logits) / sum(exp(logits)) without subtracting the max."""
    result = _network(x, labels, W1, gamma, beta, W2, b2, norm, groups)
    z = tensor64(x) @ tensor64(W1)
    h = _norm(z, tensor64(gamma), tensor64(beta), norm, groups).clamp(min=0)
    logits = (h @ tensor64(W2) + tensor64(b2)).numpy()
    with np.errstate(all="ignore"):
        overflow = not np.all(np.isfinite(np.exp(logits)))
    if not overflow:
        return result
    nan = float("nan")
    return (nan, *(np.full_like(np.asarray(item), nan) for item in result[1:]))


GRADS_PROBES = [
    Probe(
        "loss summed over the batch",
        "This matches the loss summed over the examples instead of averaged: every gradient is "
        "N times too large. Divide the loss and dlogits by the batch size N.",
        _grads_variant(reduction="sum"),
    ),
    Probe(
        "norm's statistics treated as constants",
        "This matches a backward pass that treats the norm's mean and variance as constants "
        "(dz = dh * gamma / sqrt(var + eps)). They depend on z too: pass dh through your "
        "norm's own backward function.",
        _grads_variant(frozen=True),
    ),
    Probe(
        "ReLU gated on z",
        "This matches a ReLU gradient taken where z = x @ W1 is positive. The ReLU acts on the "
        "norm's output h: its gradient is dh * (h > 0).",
        _grads_variant(gate="z"),
    ),
    Probe(
        "softmax without subtracting the max",
        "This overflows like exp(logits) without first subtracting each row's largest logit: "
        "exp(750) is inf in float64. Subtract logits.max(axis=1, keepdims=True) first; the "
        "softmax does not change.",
        _unstable_softmax,
    ),
]


def _sgd_variant(kind):
    def compute(param, grad, velocity, lr, momentum):
        if kind == "dampened":
            new_velocity = momentum * velocity + (1 - momentum) * grad
            return param - lr * new_velocity, new_velocity
        if kind == "lr inside":
            new_velocity = momentum * velocity + lr * grad
            return param - new_velocity, new_velocity
        if kind == "old velocity":
            return param - lr * velocity, momentum * velocity + grad
        if kind == "negative":
            new_velocity = momentum * velocity - grad
            return param + lr * new_velocity, new_velocity
        raise ValueError(kind)

    return compute


SGD_PROBES = [
    Probe(
        "velocity dampened",
        "This matches velocity = momentum * velocity + (1 - momentum) * grad. PyTorch's SGD "
        "adds the whole gradient: velocity = momentum * velocity + grad.",
        _sgd_variant("dampened"),
    ),
    Probe(
        "learning rate inside the velocity",
        "This matches velocity = momentum * velocity + lr * grad, param - velocity. The lab uses "
        "PyTorch's convention: the velocity holds gradients, and lr multiplies it in the update.",
        _sgd_variant("lr inside"),
    ),
    Probe(
        "update with the old velocity",
        "This steps with the velocity from before this gradient was added. Update the velocity "
        "first, then step with the new one.",
        _sgd_variant("old velocity"),
    ),
    Probe(
        "velocity with the opposite sign",
        "This stores velocity = momentum * velocity - grad and adds it. The step is right, but "
        "the lab asks for PyTorch's velocity, which has the gradient's sign.",
        _sgd_variant("negative"),
    ),
]


def _train_variant(sgd="pytorch", statistics="pytorch", same_batch=False):
    """net_train with one mistake, written with a hand-made update (the oracle uses the optimizer).

    Args:
        sgd: "pytorch" or "no momentum" (plain SGD: momentum ignored).
        statistics: "pytorch", "biased" (running_var averages the biased variance), "none",
            "after step" (the statistics of z = x @ W1 with W1 after the step) or "reversed"
            (running <- momentum * running + (1 - momentum) * batch).
        same_batch: every step trains on the first batch.
    """

    def compute(x, labels, W1, gamma, beta, W2, b2, lr, momentum, steps, batch_size):
        import torch
        import torch.nn.functional as F

        params = [tensor64(p, requires_grad=True) for p in (W1, gamma, beta, W2, b2)]
        w1, g, b, w2, c = params
        velocities = [torch.zeros_like(p) for p in params]
        running_mean, running_var = np.zeros(W1.shape[1]), np.ones(W1.shape[1])
        losses = []
        for step in range(steps):
            xb, yb = _batch(x, labels, step, batch_size, same_batch)
            z = tensor64(xb) @ w1
            h = F.batch_norm(z, None, None, g, b, training=True, eps=EPS)
            loss = F.cross_entropy(h.clamp(min=0) @ w2 + c, torch.as_tensor(yb).long())
            loss.backward()
            mu = 0.0 if sgd == "no momentum" else momentum
            with torch.no_grad():
                for p, v in zip(params, velocities, strict=True):
                    v.mul_(mu).add_(p.grad)
                    p.sub_(lr * v)
                    p.grad = None
            zn = (tensor64(xb) @ w1 if statistics == "after step" else z).detach().numpy()
            ddof = 0 if statistics == "biased" else 1
            new = 1 - BN_MOMENTUM if statistics == "reversed" else BN_MOMENTUM
            if statistics != "none":
                running_mean = (1 - new) * running_mean + new * zn.mean(axis=0)
                running_var = (1 - new) * running_var + new * zn.var(axis=0, ddof=ddof)
            losses.append(float(loss.detach()))
        trained = (p.detach().numpy() for p in params)
        return np.array(losses), running_mean, running_var, *trained

    return compute


TRAIN_PROBES = [
    Probe(
        "momentum ignored",
        "This matches plain SGD (param -= lr * grad): the losses agree on the first two steps, "
        "then part. Keep one velocity per parameter across steps and step with "
        "net_sgd_step(param, grad, velocity, lr, momentum).",
        _train_variant(sgd="no momentum"),
    ),
    Probe(
        "running variance stored biased",
        "running_var matches an average of the biased batch variance. The losses are right; "
        "the running average stores the unbiased variance (divide by n - 1), as your lab 02 "
        "batchnorm_forward does.",
        _train_variant(statistics="biased"),
    ),
    Probe(
        "running statistics never updated",
        "running_mean and running_var are still 0 and 1: the training steps never updated "
        "them. Call batchnorm_forward in training mode and keep the statistics it returns.",
        _train_variant(statistics="none"),
    ),
    Probe(
        "running statistics after the step",
        "The losses and weights are right, but running_mean and running_var match the "
        "statistics of z = x @ W1 computed with W1 after the step: the running averages must "
        "hold the statistics the batch was normalized with during the forward pass. Call "
        "batchnorm_forward on the batch before net_sgd_step changes W1.",
        _train_variant(statistics="after step"),
    ),
    Probe(
        "BatchNorm momentum reversed",
        "running_mean and running_var match running <- 0.1 * running + 0.9 * batch: the "
        "momentum is reversed. In PyTorch's convention momentum = 0.1 is the weight of the NEW "
        "batch statistic: running <- (1 - momentum) * running + momentum * batch (Keras's "
        "momentum = 0.99 weighs the old value).",
        _train_variant(statistics="reversed"),
    ),
    Probe(
        "the same batch every step",
        "These losses match training on the first batch at every step. Step t trains on rows "
        "t * batch_size to (t + 1) * batch_size.",
        _train_variant(same_batch=True),
    ),
]


def _predict_variant(kind):
    def compute(x, W1, gamma, beta, running_mean, running_var, W2, b2):
        import torch.nn.functional as F

        z = tensor64(x) @ tensor64(W1)
        g, b = tensor64(gamma), tensor64(beta)
        if kind == "batch statistics":
            if len(x) < 2:
                raise ValueError("torch refuses batch statistics of one row")
            h = F.batch_norm(z, None, None, g, b, training=True, eps=EPS)
        elif kind == "no square root":
            h = g * (z - tensor64(running_mean)) / (tensor64(running_var) + EPS) + b
        elif kind == "no eps":
            h = g * (z - tensor64(running_mean)) / tensor64(running_var).sqrt() + b
        else:
            raise ValueError(kind)
        return (h.clamp(min=0) @ tensor64(W2) + tensor64(b2)).numpy()

    return compute


PREDICT_PROBES = [
    Probe(
        "eval mode with batch statistics",
        "This matches BatchNorm in training mode: it normalizes with the statistics of the "
        "batch it is given. At prediction time call batchnorm_forward with training=False, so "
        "that it uses running_mean and running_var.",
        _predict_variant("batch statistics"),
    ),
    Probe(
        "running variance without the square root",
        "This divides by running_var + eps instead of sqrt(running_var + eps).",
        _predict_variant("no square root"),
    ),
    Probe(
        "eval mode without eps",
        "This divides by sqrt(running_var) without eps: training normalized with "
        "sqrt(var + eps), so eval mode must use the same eps, sqrt(running_var + eps), or a "
        "feature with a small running variance is scaled differently from how it trained.",
        _predict_variant("no eps"),
    ),
]


# ----------------------------------------------------------------------------- inputs


def network(rng, inputs=12, hidden=8, classes=5, n=24):
    """A small classification problem and a network's parameters, all float64 but the labels.

    Returns:
        (x, labels, W1, gamma, beta, W2, b2): x (n, inputs) with per-feature offsets and scales
        (as pixel intensities have), labels (n,) int64 in [0, classes), W1 (inputs, hidden),
        gamma, beta (hidden,), W2 (hidden, classes), b2 (classes,).
    """
    x = rng.normal(size=(n, inputs)) * rng.uniform(0.5, 3, inputs) + rng.uniform(-2, 2, inputs)
    labels = rng.integers(0, classes, size=n)
    W1 = rng.normal(size=(inputs, hidden)) / np.sqrt(inputs)
    gamma, beta = rng.normal(1.0, 0.3, hidden), rng.normal(0.2, 0.3, hidden)
    W2 = rng.normal(size=(hidden, classes)) / np.sqrt(hidden)
    b2 = rng.normal(0, 0.3, classes)
    return x, labels, W1, gamma, beta, W2, b2


GRADS = Graded(
    "net_forward_backward",
    oracle_grads,
    GRADS_PROBES,
    items=GRAD_NAMES,
    options={"kinds": ("ndarray", "scalar")},
)
SGD = Graded("net_sgd_step", oracle_sgd_step, SGD_PROBES, items=STEP_NAMES)
TRAIN = Graded("net_train", oracle_train, TRAIN_PROBES, items=TRAIN_NAMES)
PREDICT = Graded("net_predict", oracle_predict, PREDICT_PROBES)

PROBES = probe_table(GRADS, SGD, TRAIN, PREDICT)


# ----------------------------------------------------------------------------- checks


def hidden_features(rng, n=10, hidden=8):
    """(n, hidden) values like the network's z = x @ W1: each feature with its own offset and
    scale, as the network hands them to its norm."""
    return rng.normal(size=(n, hidden)) * rng.uniform(0.5, 3, hidden) + rng.uniform(-2, 2, hidden)


# Part 0: the norms as this network uses them, (N, H) features only, with the probes of the
# labs that teach them (their own checks also ask for (N, C, H, W) images).


@LAB.check(points=1, uses=["batchnorm_forward"], seed=87)
def norms_batch_forward(sub, rng):
    """Part 0: your BatchNorm on (N, H) features, training and eval mode"""
    z = hidden_features(rng)
    state = lab02.params(rng, z.shape[1])
    lab02.FORWARD.expect(sub, lab02.train_step(z, state), what="training=True, x of shape (10, 8)")
    args = Args(z, *state, False, momentum=BN_MOMENTUM, eps=EPS)
    lab02.FORWARD.expect(sub, args, what="training=False, x of shape (10, 8)")


@LAB.check(points=1, uses=["batchnorm_backward"], seed=88)
def norms_batch_backward(sub, rng):
    """Part 0: your BatchNorm backward on (N, H) features"""
    z, dy = hidden_features(rng), rng.normal(size=(10, 8))
    gamma = affine_params(rng, z.shape[1])[0]
    lab02.BACKWARD.expect(sub, Args(dy, z, gamma, eps=EPS), what="x of shape (10, 8)", x=z)


@LAB.check(points=1, uses=["layernorm_forward"], seed=89)
def norms_layer_forward(sub, rng):
    """Part 0: your LayerNorm on (N, H) features"""
    z = hidden_features(rng)
    gamma, beta = affine_params(rng, z.shape[1])
    lab03.FORWARD.expect(sub, Args(z, gamma, beta, eps=EPS), what="x of shape (10, 8)")


@LAB.check(points=1, uses=["layernorm_backward"], seed=90)
def norms_layer_backward(sub, rng):
    """Part 0: your LayerNorm backward on (N, H) features"""
    z, dy = hidden_features(rng), rng.normal(size=(10, 8))
    gamma = affine_params(rng, z.shape[1])[0]
    lab03.BACKWARD.expect(sub, Args(dy, z, gamma, eps=EPS), what="x of shape (10, 8)", x=z)


@LAB.check(points=1, uses=["group_norm_forward"], seed=91)
def norms_group_forward(sub, rng):
    """Part 0: your GroupNorm on (N, H) features"""
    z = hidden_features(rng)
    gamma, beta = affine_params(rng, z.shape[1])
    for groups in (4, 2):
        what = f"x of shape (10, 8), num_groups={groups}"
        lab05.GROUP.expect(sub, Args(z, groups, gamma, beta, eps=EPS), what=what)


@LAB.check(points=1, uses=["group_norm_backward"], seed=92)
def norms_group_backward(sub, rng):
    """Part 0: your GroupNorm backward on (N, H) features"""
    z, dy = hidden_features(rng), rng.normal(size=(10, 8))
    gamma = affine_params(rng, z.shape[1])[0]
    for groups in (4, 2):
        args = Args(dy, z, groups, gamma, eps=EPS)
        lab05.GROUP_BACKWARD.expect(sub, args, what=f"x of shape (10, 8), G={groups}", x=z)


@LAB.check(points=3, uses=["net_forward_backward"], seed=80, needs=NORMS["batch"])
def grads_batchnorm(sub, rng):
    """a training step: loss and gradients match autograd, with BatchNorm"""
    for n in (24, 7):
        data = network(rng, n=n)
        GRADS.expect(sub, Args(*data, norm="batch"), what=f"norm='batch', a batch of {n}")


@LAB.check(points=2, uses=["net_forward_backward"], seed=81, needs=NORMS["layer"])
def grads_layernorm(sub, rng):
    """a training step: loss and gradients match autograd, with LayerNorm"""
    data = network(rng, n=10)
    GRADS.expect(sub, Args(*data, norm="layer"), what="norm='layer', a batch of 10")


@LAB.check(points=2, uses=["net_forward_backward"], seed=86, needs=NORMS["group"])
def grads_groupnorm(sub, rng):
    """a training step: loss and gradients match autograd, with GroupNorm"""
    for groups in (4, 2):
        data = network(rng, n=10)
        args = Args(*data, norm="group", groups=groups)
        GRADS.expect(sub, args, what=f"norm='group' with {groups} groups, a batch of 10")


@LAB.check(points=1, uses=["net_forward_backward"], seed=93)
def grads_no_norm(sub, rng):
    """a training step without a norm (norm='none'): gamma and beta unused, their gradients 0"""
    data = network(rng, n=10)
    GRADS.expect(sub, Args(*data, norm="none"), what="norm='none', a batch of 10")


@LAB.check(points=1, uses=["net_forward_backward"], seed=82, needs=NORMS["batch"])
def grads_large_logits(sub, rng):
    """a training step stays finite with large logits"""
    *data, b2 = network(rng, n=12)
    # logits near 750: exp overflows there, while their differences (and the loss) stay small
    args = Args(*data, b2 + 750.0, norm="batch")
    GRADS.expect(sub, args, what="logits near 750 (b2 + 750), a batch of 12")


@LAB.check(points=1, uses=["net_sgd_step"], seed=83)
def sgd_step(sub, rng):
    """SGD with momentum: one step as torch.optim.SGD"""
    param, grad, velocity = rng.normal(size=(3, 4, 5))
    SGD.expect(sub, Args(param, grad, velocity, 0.3, 0.9), what="lr = 0.3 and momentum = 0.9")


@LAB.check(
    points=3,
    uses=["net_train"],
    seed=84,
    needs=["net_forward_backward", "net_sgd_step", "batchnorm_forward"],
)
def train_k_steps(sub, rng):
    """5 training steps: losses, running statistics and weights match PyTorch"""
    for lr, momentum, steps, batch_size in [(0.5, 0.9, 5, 6), (0.2, 0.5, 3, 8)]:
        data = network(rng, n=32)
        args = Args(*data, lr, momentum, steps, batch_size)
        what = f"lr = {lr}, momentum = {momentum}, {steps} steps of batch {batch_size}"
        TRAIN.expect(sub, args, what=what)


@LAB.check(points=2, uses=["net_predict"], seed=85, needs=["batchnorm_forward"])
def predict_eval(sub, rng):
    """eval mode uses the running statistics, also at batch 1"""
    x, _, W1, gamma, beta, W2, b2 = network(rng, n=9)
    running_mean = rng.normal(0, 1, W1.shape[1])
    running_var = rng.uniform(0.2, 3, W1.shape[1])
    stats = (running_mean, running_var)
    PREDICT.expect(sub, Args(x, W1, gamma, beta, *stats, W2, b2), what="a batch of 9")
    one = PREDICT.expect(sub, Args(x[:1], W1, gamma, beta, *stats, W2, b2), what="a batch of 1")
    whole = array_of(sub.call("net_predict", x, W1, gamma, beta, *stats, W2, b2), "net_predict")
    alone = array_of(one, "net_predict")
    if whole.shape[:1] != (9,) or not np.allclose(whole[:1], alone, rtol=1e-9, atol=1e-9):
        raise CheckFailed(
            "net_predict: the logits of row 0 change when the other rows of the batch change. "
            "In eval mode each example's prediction must depend on that example only."
        )


# ----------------------------------------------------------------------------- problems


NET_SCALE_WHY = {
    "a": (
        "Multiply W1 by c and BatchNorm divides z by c again: the loss is unchanged, so its "
        "gradient cannot grow with c. Differentiate L(c W1) = L(W1) with respect to W1."
    ),
    "b": (
        "Scale invariance makes the gradient orthogonal to W1, not zero: W1 keeps learning its "
        "direction, and the digits network trains with its weights."
    ),
    "c": (
        "The loss is unchanged by c, but its gradient is not: differentiating L(c W1) = L(W1) "
        "gives a gradient that scales as 1/c, so the step size does depend on the weights' scale."
    ),
}


choice(
    LAB,
    "problem 1: what BatchNorm's scale invariance does to a step (multiple choice)",
    points=1,
    name="NET_SCALE_ANSWER",
    key="d",
    hint="Write L(c W1) = L(W1) and differentiate both sides with respect to W1.",
    why=NET_SCALE_WHY,
)


NET_BATCH1_WHY = {
    "b": (
        "One value's mean is that value itself, and its variance is 0: the normalized feature "
        "is 0 for every image, whatever the image, so nothing of the running statistics is kept."
    ),
    "c": (
        "The variance is 0, but eps is inside the root: the norm divides 0 by sqrt(eps), which "
        "is finite. The output is finite; it just ignores the image."
    ),
    "d": (
        "Re-estimated statistics can undo a shift when the batch holds many images of the "
        "shifted distribution; one image's own statistics remove the image itself."
    ),
}


choice(
    LAB,
    "problem 2: test-batch statistics with a batch of one (multiple choice)",
    points=1,
    name="NET_BATCH1_ANSWER",
    key="a",
    hint="Compute the mean and the variance of one number, then normalize it.",
    why=NET_BATCH1_WHY,
)
