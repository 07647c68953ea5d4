"""Checks for lab 12, a small language model with the learner's norms inside.

The learner writes, in PyTorch::

    RMSNormFunction, LayerNormFunction        # torch.autograd.Functions, backward by hand
    lm_attention(x, p, qk_norm, n_heads)      # causal attention, QK-norm over head_dim
    lm_block(x, p, placement, qk_norm, n_heads)   # "post", "pre", "peri" or "dyt"
    lm_final_norm(x, p, placement)            # the norm after the last block, where needed
    lm_warmup_lr(step, base_lr, warmup_steps) # linear warmup from step 0, then constant
    LM_LOGIT_ANSWER, LM_GRAD_SUM_ANSWER, LM_PERI_ANSWER   # the measurement, practice problems

The grader reaches them through the lab's adapters, whose arguments are arrays (sent as float64
tensors), strings, booleans and numbers: ``lm_rmsnorm_call`` and ``lm_layernorm_call`` run a
Function's ``forward`` and then its ``backward`` directly, with a plain context object and no
autograd (so autograd is forbidden there: the backward's arithmetic is the learner's own);
``lm_block_output`` and ``lm_final_output`` build the parameter dictionary and call the block
or the final norm. The oracle is PyTorch in float64 (``F.rms_norm``, ``F.layer_norm``,
``F.scaled_dot_product_attention``, autograd), written here independently of the lab's code.
"""

from __future__ import annotations

import numpy as np

from normlab.grader.cases import (
    Args,
    Graded,
    backward,
    graded_per_case,
    probe_table,
    tensor64,
    warmup_rate,
)
from normlab.grader.core import AsTorch, CheckFailed, Lab
from normlab.grader.forbidden import AUTOGRAD, from_scratch
from normlab.grader.probes import Probe, choice, eps_ignored

LAB = Lab(
    stem="12_language_model",
    title="A small language model with your norms",
    torch=True,  # written in PyTorch: the sandbox does not hide it
    forbidden=from_scratch(
        "lm_block_output",
        "lm_final_output",
        lm_rmsnorm_call=AUTOGRAD,
        lm_layernorm_call=AUTOGRAD,
    ),
)

EPS = 1e-5  # the model's eps; the norm checks pass their own
TENSOR = ("tensor",)
D_MODEL, N_HEADS, D_FF = 8, 2, 16
HEAD_DIM = D_MODEL // N_HEADS

_t = tensor64  # a float64 tensor; a tensor stays itself (it may be a leaf that autograd tracks)


# ----------------------------------------------------------------------------- the norms


def _autograd(forward, inputs, dy):
    """(y, then the gradient of sum(dy * y) for each of ``inputs``), by autograd in float64."""
    leaves = [_t(a, requires_grad=True) for a in inputs]
    y = forward(*leaves)
    backward(y, dy)
    grads = (np.zeros(leaf.shape) if leaf.grad is None else leaf.grad.numpy() for leaf in leaves)
    return (y.detach().numpy(), *grads)


def oracle_rmsnorm_call(x, weight, dy, eps):
    import torch.nn.functional as F

    return _autograd(lambda xt, wt: F.rms_norm(xt, (xt.shape[-1],), wt, eps), (x, weight), dy)


def _rms_variant(eps_where="inside", centre=False, reduce="mean", gain=True):
    """(y, dx, dweight) of an RMSNorm whose forward has a bug, differentiated by autograd. (The
    forward lives inside: a module-level RMSNorm would be an answer the edition ships.)"""

    def forward(x, weight, eps):
        if centre:
            x = x - x.mean(-1, keepdim=True)
        square = x.pow(2).mean(-1, keepdim=True) if reduce == "mean" else x.pow(2).sum(-1, True)
        rms = (square + eps).sqrt() if eps_where == "inside" else square.sqrt() + eps
        return x / rms * weight if gain else x / rms

    def call(x, weight, dy, eps):
        return _autograd(lambda xt, wt: forward(xt, wt, eps), (x, weight), dy)

    return call


def _rms_by_hand(projection="g", dx_gain=True, dweight_of="x_hat", rstd_in_dx=True):
    """(y, dx, dweight) with the right forward and a backward written with one term wrong."""

    def call(x, weight, dy, eps):
        x, weight, dy = _t(x), _t(weight), _t(dy)
        rstd = (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt()
        x_hat = x * rstd
        g = dy * weight if dx_gain else dy
        inner = {"g": g, "dy": dy}.get(projection)
        dx = g if inner is None else g - x_hat * (inner * x_hat).mean(-1, keepdim=True)
        dx = dx * rstd if rstd_in_dx else dx
        by = {"x_hat": x_hat, "x": x, "none": 1.0}[dweight_of]
        dweight = (dy * by).reshape(-1, x.shape[-1]).sum(0)
        return (x_hat * weight).numpy(), dx.numpy(), dweight.numpy()

    return call


RMS_PROBES = [
    Probe(
        "eps outside the root",
        "This matches x / (sqrt(mean(x**2)) + eps) and its gradients: put eps inside the "
        "root, x / sqrt(mean(x**2) + eps), in forward and in what backward reuses.",
        _rms_variant(eps_where="outside"),
    ),
    Probe(
        "subtracts the mean",
        "This subtracts the mean first, like LayerNorm. RMSNorm does not re-centre: divide x "
        "itself by sqrt(mean(x**2) + eps).",
        _rms_variant(centre=True),
    ),
    Probe(
        "sum instead of mean",
        "This matches sqrt(sum(x**2) + eps): the RMS averages the squares over the d features.",
        _rms_variant(reduce="sum"),
    ),
    Probe(
        "weight missing",
        "This matches x / rms without the gain: multiply by weight, and give weight its gradient.",
        _rms_variant(gain=False),
    ),
    *eps_ignored(_rms_variant(), "RMSNorm"),
    Probe(
        "backward without the projection term",
        "dx matches rstd * g with g = dy * weight: the term that comes from rstd depending on x "
        "is missing. Differentiating 1/rms(x) gives dx = rstd * (g - x_hat * mean(g * x_hat)), "
        "the mean taken over the last dimension.",
        _rms_by_hand(projection=None),
    ),
    Probe(
        "projection term without the weight",
        "dx matches rstd * (g - x_hat * mean(dy * x_hat)): the projection must use the same "
        "g = dy * weight as the first term, since y depends on x_hat through weight * x_hat.",
        _rms_by_hand(projection="dy"),
    ),
    Probe(
        "dx without the weight",
        "dx matches the gradient with weight = 1: the chain rule goes through y = weight * "
        "x_hat first, so start from g = dy * weight.",
        _rms_by_hand(dx_gain=False, projection="dy"),
    ),
    Probe(
        "dx without rstd",
        "dx matches g - x_hat * mean(g * x_hat) without the factor rstd = 1 / sqrt(mean(x**2) "
        "+ eps): multiply by rstd, the derivative of x * rstd with respect to x.",
        _rms_by_hand(rstd_in_dx=False),
    ),
    Probe(
        "dweight from x instead of x_hat",
        "dweight matches sum(dy * x): y = weight * x_hat, so dweight sums dy * x_hat over every "
        "row (every dimension but the last).",
        _rms_by_hand(dweight_of="x"),
    ),
    Probe(
        "dweight as dbias",
        "dweight matches sum(dy), the gradient of a bias: weight multiplies x_hat, so dweight "
        "sums dy * x_hat.",
        _rms_by_hand(dweight_of="none"),
    ),
]


def oracle_layernorm_call(x, weight, bias, dy, eps):
    import torch.nn.functional as F

    def forward(xt, wt, bt):
        return F.layer_norm(xt, (xt.shape[-1],), wt, bt, eps)

    return _autograd(forward, (x, weight, bias), dy)


def _ln_variant(ddof=0, eps_where="inside", swapped=False):
    """(y, dx, dweight, dbias) of a LayerNorm whose forward has a bug, by autograd."""

    def forward(x, weight, bias, eps):
        centred = x - x.mean(-1, keepdim=True)
        var = centred.pow(2).sum(-1, keepdim=True) / (x.shape[-1] - ddof)
        x_hat = centred / ((var + eps).sqrt() if eps_where == "inside" else var.sqrt() + eps)
        return x_hat * bias + weight if swapped else x_hat * weight + bias

    def call(x, weight, bias, dy, eps):
        return _autograd(lambda xt, wt, bt: forward(xt, wt, bt, eps), (x, weight, bias), dy)

    return call


def _ln_by_hand(mean_term=True, projection=True, dx_gain=True, swap_grads=False):
    """(y, dx, dweight, dbias) with the right forward and a backward with one term wrong."""

    def call(x, weight, bias, dy, eps):
        x, weight, bias, dy = _t(x), _t(weight), _t(bias), _t(dy)
        centred = x - x.mean(-1, keepdim=True)
        rstd = (centred.pow(2).mean(-1, keepdim=True) + eps).rsqrt()
        x_hat = centred * rstd
        g = dy * weight if dx_gain else dy
        dx = g
        if mean_term:
            dx = dx - g.mean(-1, keepdim=True)
        if projection:
            dx = dx - x_hat * (g * x_hat).mean(-1, keepdim=True)
        d = x.shape[-1]
        dweight = (dy * x_hat).reshape(-1, d).sum(0)
        dbias = dy.reshape(-1, d).sum(0)
        if swap_grads:
            dweight, dbias = dbias, dweight
        y = x_hat * weight + bias
        return y.numpy(), (rstd * dx).numpy(), dweight.numpy(), dbias.numpy()

    return call


LN_PROBES = [
    Probe(
        "unbiased variance",
        "This matches the unbiased variance: torch's x.var() divides by d - 1 by default. "
        "LayerNorm divides by d: x.var(dim=-1, unbiased=False, keepdim=True) or the mean of "
        "the squared deviations.",
        _ln_variant(ddof=1),
    ),
    Probe(
        "eps outside the root",
        "This matches (x - mean) / (sqrt(var) + eps) and its gradients: put eps inside the "
        "root, sqrt(var + eps).",
        _ln_variant(eps_where="outside"),
    ),
    Probe(
        "weight and bias swapped",
        "This matches x_hat * bias + weight: weight scales, bias shifts.",
        _ln_variant(swapped=True),
    ),
    *eps_ignored(_ln_variant(), "LayerNorm"),
    Probe(
        "backward without the mean term",
        "dx matches rstd * (g - x_hat * mean(g * x_hat)): the term - mean(g), which comes from "
        "the mean depending on every x, is missing. dx = rstd * (g - mean(g) - x_hat * "
        "mean(g * x_hat)), with g = dy * weight.",
        _ln_by_hand(mean_term=False),
    ),
    Probe(
        "backward without the mean of x_hat * g term",
        "dx matches rstd * (g - mean(g)): the term - x_hat * mean(g * x_hat), which comes from "
        "the variance depending on x, is missing. dx = rstd * (g - mean(g) - x_hat * "
        "mean(g * x_hat)).",
        _ln_by_hand(projection=False),
    ),
    Probe(
        "backward with neither mean term",
        "dx matches rstd * g: as if the mean and the variance were constants. Both depend on "
        "x: dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)).",
        _ln_by_hand(mean_term=False, projection=False),
    ),
    Probe(
        "dx without the weight",
        "dx matches the gradient with weight = 1: start from g = dy * weight, since y = "
        "weight * x_hat + bias.",
        _ln_by_hand(dx_gain=False),
    ),
    Probe(
        "dweight and dbias swapped",
        "dweight matches sum(dy) and dbias sum(dy * x_hat): the gain's gradient is sum(dy * "
        "x_hat), the shift's sum(dy).",
        _ln_by_hand(swap_grads=True),
    ),
]


# ----------------------------------------------------------------------------- the block


def _rms(x, gain, over):
    """RMSNorm (eps EPS) of x; for (B, H, L, hd) heads, over "head_dim", "heads", "sequence"
    or "d_model" (every head of a token together); the gain multiplies the last dimension."""
    import torch.nn.functional as F

    if over == "head_dim":
        return F.rms_norm(x, (x.shape[-1],), gain, EPS)
    if over == "d_model":
        moved = x.transpose(1, 2)  # (B, L, H, hd)
        return F.rms_norm(moved, tuple(moved.shape[-2:]), eps=EPS).transpose(1, 2) * gain
    dim = {"heads": 1, "sequence": 2}[over]
    return F.rms_norm(x.transpose(dim, -1), (x.shape[dim],), eps=EPS).transpose(dim, -1) * gain


def _attention(x, p, qk, n_heads=N_HEADS):
    """Causal attention; ``qk``: None, or (over, which): the axis and which of q, k to normalize."""
    import torch.nn.functional as F

    batch, length, d_model = x.shape
    heads = [
        t.reshape(batch, length, n_heads, d_model // n_heads).transpose(1, 2)
        for t in (x @ p["w_qkv"]).split(d_model, dim=-1)
    ]
    q, k, v = heads
    if qk is not None:
        over, which = qk
        q = _rms(q, p["q_norm"], over) if "q" in which else q
        k = _rms(k, p["k_norm"], over) if "k" in which else k
    mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return mixed.transpose(1, 2).reshape(batch, length, d_model) @ p["w_out"]


def _mlp(x, p):
    return (x @ p["w_up"]).relu() @ p["w_down"]


def _dyt(x, alpha, gain, beta, shift=True, alpha_inside=True):
    import torch

    squashed = torch.tanh(alpha * x) if alpha_inside else alpha * torch.tanh(x)
    return gain * squashed + beta if shift else gain * squashed


# One residual sub-layer: (x, G, N_in, N_out, D) -> new x, where N_in and N_out are the
# sub-layer's two RMSNorms and D its DyT. The right rules, then the wrong ones.
RULES = {
    "post": lambda x, G, Ni, No, D: Ni(x + G(x)),
    "pre": lambda x, G, Ni, No, D: x + G(Ni(x)),
    "peri": lambda x, G, Ni, No, D: x + No(G(Ni(x))),
    "dyt": lambda x, G, Ni, No, D: x + G(D(x)),
    "norm inside the residual": lambda x, G, Ni, No, D: x + Ni(G(x)),
    "pre, norm on the output too": lambda x, G, Ni, No, D: Ni(x + G(Ni(x))),
    "residual from the normalized input": lambda x, G, Ni, No, D: Ni(x) + G(Ni(x)),
    "peri, output norm after the addition": lambda x, G, Ni, No, D: No(x + G(Ni(x))),
    "peri, input norm missing": lambda x, G, Ni, No, D: x + No(G(x)),
    "peri, norms swapped": lambda x, G, Ni, No, D: x + Ni(G(No(x))),
    "dyt on the output": lambda x, G, Ni, No, D: x + D(G(x)),
}


def _params(w_qkv, w_out, w_up, w_down, norm, norm_out, q_norm, k_norm, dyt_alpha, dyt_beta):
    names = ("w_qkv", "w_out", "w_up", "w_down", "norm", "norm_out", "q_norm", "k_norm",
             "dyt_alpha", "dyt_beta")  # fmt: skip
    values = (w_qkv, w_out, w_up, w_down, norm, norm_out, q_norm, k_norm, dyt_alpha, dyt_beta)
    return {name: _t(value) for name, value in zip(names, values, strict=True)}


def block_oracle(rule, qk, x, params, dyt_options=None):
    """One block in float64: attention then MLP, each combined by ``RULES[rule]``."""
    p = params
    x = _t(x)
    sublayers = [lambda h: _attention(h, p, qk), lambda h: _mlp(h, p)]
    for i, sublayer in enumerate(sublayers):
        x = RULES[rule](
            x,
            sublayer,
            lambda h, i=i: _rms(h, p["norm"][i], "head_dim"),
            lambda h, i=i: _rms(h, p["norm_out"][i], "head_dim"),
            lambda h, i=i: _dyt(
                h, p["dyt_alpha"][i], p["norm"][i], p["dyt_beta"][i], **(dyt_options or {})
            ),  # fmt: skip
        )
    return x.numpy()


# Swapping q_norm and k_norm is no mistake here: without a rotary embedding between the norm and
# the scores, q_hat . k_hat sums gain_q * gain_k * q * k either way.
RIGHT_QK = ("head_dim", "qk")


def oracle_block_output(placement, qk_norm, x, *weights):
    return block_oracle(placement, RIGHT_QK if qk_norm else None, x, _params(*weights))


def _block_probe(name, hint, rule=None, qk="asked", dyt_options=None):
    """A probe: the block with ``rule`` for the asked placement (None: the asked one) and the
    QK-norm ``qk`` ("asked": as asked; "never"; "always"; or an (over, which))."""

    def compute(placement, qk_norm, x, *weights):
        chosen = {"asked": RIGHT_QK if qk_norm else None, "never": None, "always": RIGHT_QK}
        qk_used = chosen.get(qk, qk) if isinstance(qk, str) else (qk if qk_norm else None)
        return block_oracle(rule or placement, qk_used, x, _params(*weights), dyt_options)

    return Probe(name, hint, compute)


BLOCK_PROBES = [
    _block_probe(
        "post: pre instead",
        "This is the Pre-LN block, x + G(N(x)). Post-LN (Vaswani et al. 2017, §3.1) normalizes "
        "after the residual addition: x = N(x + G(x)).",
        "pre",
    ),
    _block_probe(
        "post: norm inside the residual",
        "This matches x + N(G(x)): the norm was applied to the sub-layer's output only. In "
        "Post-LN it normalizes the sum: N(x + G(x)).",
        "norm inside the residual",
    ),
    _block_probe(
        "pre: post instead",
        "This is the Post-LN block, N(x + G(x)). Pre-LN normalizes only the sub-layer's input "
        "and adds the untouched x: x = x + G(N(x)).",
        "post",
    ),
    _block_probe(
        "pre: norm on the output too",
        "This matches N(x + G(N(x))): the sum is normalized again. In Pre-LN nothing "
        "normalizes the residual stream inside the block; the model's final norm does, once.",
        "pre, norm on the output too",
    ),
    _block_probe(
        "pre: residual from the normalized input",
        "This matches N(x) + G(N(x)): the residual was taken after the norm. The skip path "
        "carries x itself: x + G(N(x)).",
        "residual from the normalized input",
    ),
    _block_probe(
        "peri: output norm missing",
        "This is Pre-LN, x + G(N_in(x)). Peri-LN (Kim et al. 2025) also normalizes the "
        "sub-layer's output before adding it: x + N_out(G(N_in(x))), with p['norm_out'].",
        "pre",
    ),
    _block_probe(
        "peri: output norm after the addition",
        "This matches N_out(x + G(N_in(x))): the sum was normalized, which puts a norm on the "
        "residual stream itself. Peri-LN normalizes the branch only: x + N_out(G(N_in(x))).",
        "peri, output norm after the addition",
    ),
    _block_probe(
        "peri: input norm missing",
        "This matches x + N_out(G(x)): Peri-LN normalizes the sub-layer's input too: "
        "x + N_out(G(N_in(x))).",
        "peri, input norm missing",
    ),
    _block_probe(
        "peri: norms swapped",
        "This matches x + N_in(G(N_out(x))): p['norm'][i] is the input norm's gain and "
        "p['norm_out'][i] the output norm's.",
        "peri, norms swapped",
    ),
    _block_probe(
        "dyt: a norm instead",
        "This is the Pre-LN block with RMSNorm. With placement 'dyt' the norm is replaced by "
        "DyT (Zhu et al. 2025): x + G(gain * tanh(alpha * x) + beta).",
        "pre",
    ),
    _block_probe(
        "dyt: on the output",
        "This matches x + DyT(G(x)): DyT takes the norm's place at the sub-layer's input, "
        "x + G(DyT(x)).",
        "dyt on the output",
    ),
    _block_probe(
        "dyt: shift missing",
        "This matches gain * tanh(alpha * x) without the shift: DyT adds beta, p['dyt_beta'][i].",
        dyt_options={"shift": False},
    ),
    _block_probe(
        "dyt: alpha outside tanh",
        "This matches gain * alpha * tanh(x) + beta: alpha scales the input of tanh, "
        "tanh(alpha * x), which sets where it saturates.",
        dyt_options={"alpha_inside": False},
    ),
    _block_probe(
        "qk: missing",
        "This matches attention without QK-norm: with qk_norm=True, normalize each head's "
        "queries and keys, rms_norm(q, p['q_norm']) and rms_norm(k, p['k_norm']), before the "
        "scores.",
        qk="never",
    ),
    _block_probe(
        "qk: applied when not asked",
        "This matches QK-norm applied with qk_norm=False: normalize q and k only when asked.",
        qk="always",
    ),
    _block_probe(
        "qk: over d_model",
        "This matches q and k normalized over all heads of a token together (d_model "
        "coordinates): QK-norm normalizes each head on its own, over its head_dim "
        "coordinates, after the split into heads.",
        qk=("d_model", "qk"),
    ),
    _block_probe(
        "qk: over the sequence",
        "This matches q and k normalized over the positions (the L dimension): after "
        ".transpose(1, 2) the heads are (B, H, L, head_dim) and QK-norm runs over the last "
        "dimension, head_dim.",
        qk=("sequence", "qk"),
    ),
    _block_probe(
        "qk: over the heads",
        "This matches q and k normalized over the heads dimension: normalize over head_dim, "
        "the last dimension of (B, H, L, head_dim).",
        qk=("heads", "qk"),
    ),
    _block_probe(
        "qk: queries only",
        "This matches QK-norm on the queries only: normalize the keys too, with p['k_norm'].",
        qk=("head_dim", "q"),
    ),
]


def oracle_final_output(placement, x, final_norm, final_alpha, final_beta):
    x = _t(x)
    if placement in ("pre", "peri"):
        return _rms(x, _t(final_norm), "head_dim").numpy()
    if placement == "dyt":
        return _dyt(x, float(final_alpha), _t(final_norm), _t(final_beta)).numpy()
    return x.numpy()


def _final_probe(name, hint, kind):
    def compute(placement, x, final_norm, final_alpha, final_beta):
        x = _t(x)
        if kind == "none":
            return x.numpy()
        return _rms(x, _t(final_norm), "head_dim").numpy()

    return Probe(name, hint, compute)


FINAL_PROBES = [
    _final_probe(
        "final norm missing",
        "This returns the stream unnormalized. In Pre-LN and Peri-LN nothing normalizes the "
        "residual stream itself, which grows with depth; GPT-2 (§2.3) adds a final norm after "
        "the last block: rms_norm(x, p['final_norm']). A model with DyT ends with a DyT.",
        "none",
    ),
    _final_probe(
        "final norm on the wrong placement",
        "This applies RMSNorm where the placement needs none or another: a Post-LN block "
        "already ends with a norm, so its model adds none; a DyT model ends with a DyT "
        "(p['final_norm'] * tanh(p['final_alpha'] * x) + p['final_beta']), not a norm.",
        "rms",
    ),
]


# ----------------------------------------------------------------------------- warmup


def _number(sub, *args) -> float:
    return warmup_rate(sub, "lm_warmup_lr", *args)


def _capped(values):
    return np.minimum(1.0, values)


WARMUP_PROBES = [
    Probe(
        "off by one step",
        "This matches base_lr * step / warmup_steps: step 0 gets a learning rate of 0 (a "
        "wasted step) and the rate reaches base_lr one step late. Steps count from 0, so "
        "step s is the (s + 1)-th: base_lr * (step + 1) / warmup_steps.",
        lambda steps, base, w: base * _capped(steps / w),
    ),
    Probe(
        "peak one step early",
        "This matches base_lr * (step + 2) / warmup_steps: the rate reaches base_lr one step "
        "early. Step s is the (s + 1)-th step: base_lr * (step + 1) / warmup_steps.",
        lambda steps, base, w: base * _capped((steps + 2) / w),
    ),
    Probe(
        "divided by warmup_steps + 1",
        "This matches base_lr * (step + 1) / (warmup_steps + 1): the rate must reach base_lr "
        "exactly at step warmup_steps - 1, the last warmup step.",
        lambda steps, base, w: base * _capped((steps + 1) / (w + 1)),
    ),
    Probe(
        "never stops rising",
        "This keeps rising after the warmup: from step warmup_steps on, the rate is base_lr.",
        lambda steps, base, w: base * (steps + 1) / w,
    ),
    Probe(
        "decays instead",
        "This falls from base_lr towards 0: warmup RISES from base_lr / warmup_steps to base_lr.",
        lambda steps, base, w: base * np.maximum(0.0, 1 - steps / w),
    ),
]


# ----------------------------------------------------------------------------- graded functions


def torch_args(*args, **kwargs):
    """``Args`` whose arrays reach the learner as float64 tensors (the oracle and the probes get
    the arrays); strings, booleans and numbers stay as they are."""
    tensors = [AsTorch(np.asarray(a, np.float64)) if isinstance(a, np.ndarray) else a for a in args]
    return Args(*tensors, **kwargs)


RMSNORM = Graded(
    "lm_rmsnorm_call",
    oracle_rmsnorm_call,
    RMS_PROBES,
    items=("y", "dx", "dweight"),
    options={"kinds": TENSOR},
)
LAYERNORM = Graded(
    "lm_layernorm_call",
    oracle_layernorm_call,
    LN_PROBES,
    items=("y", "dx", "dweight", "dbias"),
    options={"kinds": TENSOR},
)
BLOCK = graded_per_case(
    "lm_block_output",
    oracle_block_output,
    BLOCK_PROBES,
    ("post", "pre", "peri", "dyt", "qk"),
    prefix=False,
    options={"kinds": TENSOR},
)
FINAL = Graded(
    "lm_final_output",
    oracle_final_output,
    FINAL_PROBES,
    prefix=False,
    options={"kinds": TENSOR},
)

PROBES = probe_table(RMSNORM, LAYERNORM, FINAL, lm_block_output=BLOCK_PROBES,
                     lm_warmup_lr=WARMUP_PROBES)  # fmt: skip


# ----------------------------------------------------------------------------- inputs


def norm_rows(rng, shape):
    """(B, L, d) rows whose scales span 0.01 to 10 and whose offsets span -3 to 3."""
    rows = int(np.prod(shape[:-1]))
    scale = np.geomspace(0.01, 10.0, rows).reshape(shape[:-1] + (1,))
    rng.shuffle(scale.reshape(-1))
    offset = rng.uniform(-3, 3, size=shape[:-1] + (1,))
    return rng.normal(size=shape) * scale + offset * scale


def block_weights(rng, d_model=D_MODEL, d_ff=D_FF):
    """The block's parameters, in lm_block_output's order, each with distinct entries."""

    def matrix(n_in, n_out):
        return rng.normal(0.0, 1.0 / np.sqrt(n_in), size=(n_in, n_out))

    return (
        matrix(d_model, 3 * d_model),
        matrix(d_model, d_model),
        matrix(d_model, d_ff),
        matrix(d_ff, d_model),
        rng.normal(1.0, 0.3, size=(2, d_model)),  # norm
        rng.normal(1.0, 0.3, size=(2, d_model)),  # norm_out
        rng.normal(1.0, 0.3, size=HEAD_DIM),  # q_norm
        rng.normal(1.0, 0.3, size=HEAD_DIM),  # k_norm
        rng.uniform(0.3, 0.9, size=2),  # dyt_alpha
        rng.normal(0.0, 0.3, size=(2, d_model)),  # dyt_beta
    )


# ----------------------------------------------------------------------------- norm checks


def _norm_cases(rng):
    """(x, what, eps): (B, L, d) rows of varied scale, then a (N, d) case with eps = 1e-3."""
    yield norm_rows(rng, (2, 5, 8)), "x of shape (2, 5, 8)", 1e-5
    yield norm_rows(rng, (6, 16)), "x of shape (6, 16), eps = 1e-3", 1e-3


@LAB.check(points=2, uses=["lm_rmsnorm_call"], seed=120)
def rmsnorm_forward(sub, rng):
    """RMSNormFunction.forward matches F.rms_norm"""
    for x, what, eps in _norm_cases(rng):
        weight, dy = rng.normal(1, 0.5, size=x.shape[-1]), rng.normal(size=x.shape)
        RMSNORM.expect(sub, torch_args(x, weight, dy, eps=eps), what=what, indices=[0])


@LAB.check(points=3, uses=["lm_rmsnorm_call"], seed=121)
def rmsnorm_backward(sub, rng):
    """RMSNormFunction.backward: dx and dweight match autograd through F.rms_norm"""
    for x, what, eps in _norm_cases(rng):
        weight, dy = rng.normal(1, 0.5, size=x.shape[-1]), rng.normal(size=x.shape)
        RMSNORM.expect(sub, torch_args(x, weight, dy, eps=eps), what=what, indices=[1, 2])


@LAB.check(points=2, uses=["lm_layernorm_call"], seed=122)
def layernorm_forward(sub, rng):
    """LayerNormFunction.forward matches F.layer_norm"""
    for x, what, eps in _norm_cases(rng):
        d = x.shape[-1]
        weight, bias = rng.normal(1, 0.5, size=d), rng.normal(0, 0.5, size=d)
        args = torch_args(x, weight, bias, rng.normal(size=x.shape), eps=eps)
        LAYERNORM.expect(sub, args, what=what, indices=[0])


@LAB.check(points=3, uses=["lm_layernorm_call"], seed=123)
def layernorm_backward(sub, rng):
    """LayerNormFunction.backward: dx, dweight and dbias match autograd through F.layer_norm"""
    for x, what, eps in _norm_cases(rng):
        d = x.shape[-1]
        weight, bias = rng.normal(1, 0.5, size=d), rng.normal(0, 0.5, size=d)
        args = torch_args(x, weight, bias, rng.normal(size=x.shape), eps=eps)
        LAYERNORM.expect(sub, args, what=what, indices=[1, 2, 3])


# ----------------------------------------------------------------------------- block checks


def _block_case(sub, placement, qk_norm, seed, graded):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, 5, D_MODEL)) * np.geomspace(0.3, 3.0, 5)[:, None] + 0.5
    args = torch_args(placement, qk_norm, x, *block_weights(rng))
    what = f"lm_block_output('{placement}', qk_norm={qk_norm}), x of shape (2, 5, {D_MODEL})"
    BLOCK[graded].expect(sub, args, what=what)


NEEDS_NORM = ["lm_rmsnorm_call"]


@LAB.check(points=1, uses=["lm_block_output"], needs=NEEDS_NORM)
def block_post(sub):
    """lm_block, Post-LN: x = N(x + G(x)) for each sub-layer"""
    _block_case(sub, "post", False, 124, "post")


@LAB.check(points=1, uses=["lm_block_output"], needs=NEEDS_NORM)
def block_pre(sub):
    """lm_block, Pre-LN: x = x + G(N(x)) for each sub-layer"""
    _block_case(sub, "pre", False, 125, "pre")


@LAB.check(points=2, uses=["lm_block_output"], needs=NEEDS_NORM)
def block_peri(sub):
    """lm_block, Peri-LN: x = x + N_out(G(N_in(x))) for each sub-layer"""
    _block_case(sub, "peri", False, 126, "peri")


@LAB.check(points=2, uses=["lm_block_output"])
def block_dyt(sub):
    """lm_block, no norm: DyT at each sub-layer's input, x + G(gain * tanh(alpha x) + beta)"""
    _block_case(sub, "dyt", False, 127, "dyt")


@LAB.check(points=2, uses=["lm_block_output"], needs=NEEDS_NORM)
def block_qk_norm(sub):
    """lm_attention: QK-norm over each head's head_dim, only when qk_norm is true"""
    _block_case(sub, "pre", True, 128, "qk")
    _block_case(sub, "peri", True, 129, "qk")
    _block_case(sub, "pre", False, 130, "qk")


@LAB.check(points=2, uses=["lm_final_output"], seed=131, needs=NEEDS_NORM)
def final_norm(sub, rng):
    """lm_final_norm: RMSNorm after Pre-LN and Peri-LN, DyT after DyT, nothing after Post-LN"""
    for placement in ("pre", "post", "peri", "dyt"):
        x = rng.normal(size=(2, 5, D_MODEL)) * 3 + 1
        gain, beta = rng.normal(1, 0.3, size=D_MODEL), rng.normal(0, 0.3, size=D_MODEL)
        args = torch_args(placement, x, gain, 0.7, beta)
        FINAL.expect(sub, args, what=f"lm_final_output('{placement}'), x of shape (2, 5, 8)")


# ----------------------------------------------------------------------------- warmup check


@LAB.check(points=2, uses=["lm_warmup_lr"])
def warmup(sub):
    """lm_warmup_lr: base_lr * (step + 1) / warmup_steps from step 0, then base_lr"""
    for base_lr, warmup_steps in [(1e-3, 5), (0.5, 1), (3e-4, 50)]:
        steps = np.array(sorted({0, 1, 2, warmup_steps - 2, warmup_steps - 1, warmup_steps,
                                 warmup_steps + 1, 3 * warmup_steps + 7} - {-1}))  # fmt: skip
        got = np.array([_number(sub, int(s), base_lr, warmup_steps) for s in steps])
        expected = base_lr * np.minimum(1.0, (steps + 1) / warmup_steps)
        candidates = [(p, p.compute(steps, base_lr, warmup_steps)) for p in WARMUP_PROBES]
        probe = next(
            (p for p, wrong in candidates if np.allclose(got, wrong, rtol=1e-6, atol=0)), None
        )
        if not np.allclose(got, expected, rtol=1e-6, atol=1e-15):
            worst = int(np.argmax(np.abs(got - expected)))
            raise CheckFailed(
                f"lm_warmup_lr with base_lr={base_lr} and warmup_steps={warmup_steps}: at step "
                f"{steps[worst]} got {got[worst]:.6g}, expected {expected[worst]:.6g}"
                + (f"\nWhy: {probe.hint}" if probe else ""),
                [probe.name] if probe else [],
            )
    for step in (0, 7, 1000):
        got = _number(sub, step, 2e-3, 0)
        if not np.isclose(got, 2e-3, rtol=1e-6, atol=0):
            raise CheckFailed(
                f"lm_warmup_lr({step}, 0.002, 0): got {got:.6g}, expected 0.002 — "
                "warmup_steps = 0 means no warmup."
            )


# ----------------------------------------------------------------------------- the measurement

LM_LOGIT_WHY = {
    "b": "Read the two columns again: the runs without QK-norm reached tens, those with QK-norm "
    "stayed within a few units of where they started, and the final losses were close.",
    "c": "The gains q_norm and k_norm can grow, but 40 steps barely move them: with QK-norm each "
    "head's q and k keep a length near sqrt(head_dim), so the logit stays near its bound.",
    "d": "No run diverged: every loss fell to about 2.6. What grew without QK-norm was the "
    "largest logit, from about 4 to tens.",
}

choice(
    LAB,
    "Part 4: what QK-norm did to the largest attention logit (multiple choice)",
    points=1,
    name="LM_LOGIT_ANSWER",
    key="a",
    hint="Compare the largest logit over training with and without QK-norm in your printed "
    "runs, and the losses at the end.",
    why=LM_LOGIT_WHY,
)


# ----------------------------------------------------------------------------- practice problems

LM_GRAD_SUM_WHY = {
    "a": "The other way round: adding a constant c to every entry of x leaves LayerNorm's output "
    "unchanged for any gain and eps, so dx has no component along (1, ..., 1). Scaling x leaves "
    "it unchanged only when eps = 0.",
    "b": "The gain multiplies dy before anything else (g = w * dy); the properties come from the "
    "normalization, which is the same whatever w is.",
    "c": "x . dx = 0 would need the output to be unchanged when x is scaled, which holds only for "
    "eps = 0: with eps > 0, scaling a row of small variance changes its output.",
}

choice(
    LAB,
    "problem 1: which sums of LayerNorm's dx are zero (multiple choice)",
    points=1,
    name="LM_GRAD_SUM_ANSWER",
    key="d",
    hint="A direction in which moving x does not change y gets no gradient: which changes of x "
    "leave LayerNorm's output exactly unchanged when eps > 0?",
    why=LM_GRAD_SUM_WHY,
)

LM_PERI_WHY = {
    "a": "That is Pre-LN, x + G(N(x)): there nothing normalizes what G returns. Peri-LN's output "
    "norm sits after w_down.",
    "b": "The output norm divides the branch by its own RMS, which already includes the factor of "
    "10: the result has RMS about 1, not 1/10.",
    "d": "The two norms act on different tensors (the branch's input and its output); neither "
    "undoes the other, and the branch's output is normalized to RMS about 1, not 0.",
}

choice(
    LAB,
    "problem 2: Peri-LN's branch when w_down grows tenfold (multiple choice)",
    points=1,
    name="LM_PERI_ANSWER",
    key="c",
    hint="Write the sub-layer's update, x + N_out(G(N(x))), and ask what N_out returns when its "
    "input is multiplied by 10.",
    why=LM_PERI_WHY,
)
