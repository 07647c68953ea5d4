"""Checks for lab 13, the norms of other architectures: adaLN-Zero, gated RMSNorm, GRN, BatchNorm
folding, Derf and QK-Clip.

The learner writes, in NumPy::

    adaln_zero_block(x, c, modulation_weight, modulation_bias, sublayer_weight, eps=1e-6) -> x
        # x: (N, L, d); c: (N, d_c); modulation_weight: (d_c, 3d); modulation_bias: (3d,)
    adaln_zero_init(modulation_weight, modulation_bias) -> (weight, bias)   # the gate zeroed
    gated_rmsnorm(x, z, weight, eps=1e-5, group_size=None, norm_before_gate=True) -> y
    grn_forward(x, gamma, beta, eps=1e-6) -> y                # x: (N, H, W, C), channels last
    conv_bn_eval(x, weight, bias, gamma, beta, running_mean, running_var, eps=1e-5) -> y
    fold_batchnorm(weight, bias, gamma, beta, running_mean, running_var, eps=1e-5) -> (w, b)
    derf_forward(x, alpha, shift, weight, bias) -> y           # alpha, shift: scalars
    qk_max_logits(q, k) -> (H,)                                # q, k: (B, H, L, head_dim)
    qk_clip(w_q, w_k, w_v, max_logits, tau) -> (w_q, w_k, w_v) # w_*: (d, H * head_dim)
    ADALN_GRAD_ANSWER, FOLD_ANSWER, QK_CLIP_ANSWER             # practice problems 1-3

The semantics are those of the models' own code: DiT's ``modulate`` and ``DiTBlock`` (shift,
scale, gate in that order, from ``SiLU(c)``; LayerNorm without affine, eps 1e-6), Mamba-2's
``rms_norm_ref`` (``norm_before_gate``, groups of ``group_size`` consecutive channels, the gate
``silu(z)``), ConvNeXt V2's ``GRN`` (L2 norm over the spatial axes, divided by its mean over the
channels plus 1e-6), ``torch.nn.utils.fusion.fuse_conv_bn_weights``, the Derf authors'
``Dynamic_erf`` (``weight * erf(alpha * x + shift) + bias``) and Kimi K2's QK-Clip (per head,
gamma = tau / S_max when S_max > tau, W_q and W_k each times sqrt(gamma)). The oracle is PyTorch
in float64 (``F.layer_norm``, ``F.rms_norm``, ``F.conv2d``, ``F.batch_norm``, ``torch.erf``,
``fuse_conv_bn_weights``); the probes are known-wrong variants, each with the hint that
explains it.
"""

from __future__ import annotations

import math

import numpy as np

from normlab.grader.cases import Args, Graded, probe_table, tensor64
from normlab.grader.core import CheckFailed, Lab
from normlab.grader.forbidden import from_scratch
from normlab.grader.memo import oracle
from normlab.grader.probes import Probe, array_of, choice

LAB = Lab(
    stem="13_other_architectures",
    title="The norms of other architectures",
    forbidden=from_scratch(
        "adaln_zero_block",
        "gated_rmsnorm",
        "grn_forward",
        "conv_bn_eval",
        "fold_batchnorm",
        "derf_forward",
    ),
)

ADALN_EPS = 1e-6  # DiT's norm1 and norm2: nn.LayerNorm(..., elementwise_affine=False, eps=1e-6)
GATED_EPS = 1e-5  # Mamba-2 builds its RMSNormGated with eps=1e-5
GRN_EPS = 1e-6  # ConvNeXt V2's GRN: Gx / (Gx.mean(dim=-1, keepdim=True) + 1e-6)
BN_EPS = 1e-5  # nn.BatchNorm2d's default


def _t(a):
    return tensor64(a)


# ----------------------------------------------------------------------------- adaLN-Zero


def _adaln_variant(
    silu=True, one_plus=True, order=("shift", "scale", "gate"), gate="branch", norm="layer",
    modulate_first=False,
):  # fmt: skip
    """adaLN(-Zero) block x + gate * G(modulate(norm(x), shift, scale)), G(h) = tanh(h @ W),
    with optional bugs. gate: "branch" (right), "none", "everything" (gate * (x + branch))."""

    def block(x, c, modulation_weight, modulation_bias, sublayer_weight, eps=ADALN_EPS):
        import torch
        import torch.nn.functional as F

        x, c, w, b, w_out = map(_t, (x, c, modulation_weight, modulation_bias, sublayer_weight))
        d = x.shape[-1]
        if w.shape[-1] != 3 * d:
            raise ValueError("the modulation does not hold 3 * d values")
        conditioning = F.silu(c) if silu else c
        chunks = dict(zip(order, (conditioning @ w + b).chunk(3, dim=-1), strict=True))
        shift, scale, gain = (chunks[name].unsqueeze(1) for name in ("shift", "scale", "gate"))
        factor = 1 + scale if one_plus else scale

        def normalize(v):
            if norm == "rms":
                return F.rms_norm(v, (d,), eps=eps)
            return F.layer_norm(v, (d,), eps=eps)

        if modulate_first:
            h = normalize(x * factor + shift)
        else:
            h = normalize(x) * factor + shift
        branch = torch.tanh(h @ w_out)
        if gate == "none":
            return (x + branch).numpy()
        if gate == "everything":
            return (gain * (x + branch)).numpy()
        return (x + gain * branch).numpy()

    return block


oracle_adaln_zero_block = oracle(_adaln_variant(), name="oracle_adaln_zero_block")

ADALN_PROBES = [
    Probe(
        "no SiLU on the conditioning",
        "This matches a modulation computed from c itself: DiT's adaLN_modulation is "
        "nn.Sequential(nn.SiLU(), nn.Linear(...)), so apply SiLU, c * sigmoid(c), to the "
        "conditioning before the linear layer.",
        _adaln_variant(silu=False),
    ),
    Probe(
        "scale without the 1 +",
        "This matches norm(x) * scale + shift: DiT's modulate multiplies by (1 + scale), so that "
        "a scale of 0 leaves the normalized x as it is. Without the 1, a zero-initialised "
        "modulation would wipe the sub-layer's input out.",
        _adaln_variant(one_plus=False),
    ),
    Probe(
        "shift and scale swapped",
        "This matches the first third of the modulation used as the scale and the second as the "
        "shift. DiT chunks it in the order shift, scale, gate: the first d values are the shift.",
        _adaln_variant(order=("scale", "shift", "gate")),
    ),
    Probe(
        "gate taken first",
        "This matches the first third of the modulation used as the gate. DiT's order is shift, "
        "scale, gate: the gate is the last d values.",
        _adaln_variant(order=("gate", "shift", "scale")),
    ),
    Probe(
        "no gate",
        "This matches x + G(modulate(norm(x))) without the gate: adaLN-Zero multiplies the "
        "sub-layer's output by the regressed gate before adding it to x (the gate that starts at "
        "0 and makes the block the identity).",
        _adaln_variant(gate="none"),
    ),
    Probe(
        "gate on the residual too",
        "This matches gate * (x + G(...)): the gate scales the sub-layer's output only; x is "
        "added untouched, so that a gate of 0 gives x back.",
        _adaln_variant(gate="everything"),
    ),
    Probe(
        "modulated before the norm",
        "This matches norm(x * (1 + scale) + shift): a norm after the modulation removes most of "
        "it. DiT normalizes first and modulates the normalized x: modulate(norm1(x), shift, "
        "scale).",
        _adaln_variant(modulate_first=True),
    ),
    Probe(
        "RMSNorm instead of LayerNorm",
        "This matches an RMSNorm of x (no mean subtracted): DiT's norm1 and norm2 are LayerNorm "
        "without affine parameters; subtract each token's mean before dividing by its standard "
        "deviation.",
        _adaln_variant(norm="rms"),
    ),
]


def _init_variant(zero=("gate",), parts=("weight", "bias"), rows=False):
    """adaLN-Zero's initialisation: the chunks in ``zero`` of the weight and bias set to 0."""

    def init(modulation_weight, modulation_bias):
        weight, bias = _t(modulation_weight).clone(), _t(modulation_bias).clone()
        d = bias.shape[-1] // 3
        where = {"shift": slice(0, d), "scale": slice(d, 2 * d), "gate": slice(2 * d, 3 * d)}
        for name in zero:
            if "weight" in parts:
                if rows:
                    if weight.shape[0] < d:
                        raise ValueError("fewer rows than d")
                    weight[-d:, :] = 0.0
                else:
                    weight[:, where[name]] = 0.0
            if "bias" in parts:
                bias[where[name]] = 0.0
        return weight.numpy(), bias.numpy()

    return init


oracle_adaln_zero_init = oracle(_init_variant(), name="oracle_adaln_zero_init")

INIT_PROBES = [
    Probe(
        "gate not zeroed",
        "This matches the default initialisation returned unchanged: adaLN-Zero sets the "
        "gate's part of the modulation layer (its last d columns and last d biases) to 0, so "
        "that every block starts as the identity.",
        _init_variant(zero=()),
    ),
    Probe(
        "shift zeroed instead of the gate",
        "This zeroes the first d columns, the shift: the modulation is chunked as shift, "
        "scale, gate, so the gate is the LAST d columns and biases.",
        _init_variant(zero=("shift",)),
    ),
    Probe(
        "scale zeroed instead of the gate",
        "This zeroes the middle d columns, the scale: the gate is the last d columns and "
        "biases of the modulation layer.",
        _init_variant(zero=("scale",)),
    ),
    Probe(
        "only the bias zeroed",
        "This zeroes the gate's biases but not its weights: the gate is then silu(c) @ W_gate, "
        "not 0, and the block is not the identity. Zero both.",
        _init_variant(parts=("bias",)),
    ),
    Probe(
        "only the weight zeroed",
        "This zeroes the gate's weights but not its biases: the gate is then the bias, not 0. "
        "Zero both.",
        _init_variant(parts=("weight",)),
    ),
    Probe(
        "rows zeroed instead of columns",
        "This zeroes the last d ROWS of the weight: with the layout c @ W, W is (d_c, 3d) and "
        "the gate's outputs are its last d COLUMNS.",
        _init_variant(rows=True),
    ),
]


# ----------------------------------------------------------------------------- gated RMSNorm


def _gated_variant(order="asked", groups="asked", gate="silu", eps_outside=False):
    """Mamba-2's rms_norm_ref with optional bugs. order: "asked", "after" (always gate after the
    norm), "before" (always before); groups: "asked", "ignored", "interleaved"."""

    def norm(x, z, weight, eps=GATED_EPS, group_size=None, norm_before_gate=True):
        import torch
        import torch.nn.functional as F

        x, z, weight = _t(x), _t(z), _t(weight)
        gated = {"silu": F.silu, "sigmoid": torch.sigmoid, "z": lambda v: v}[gate](z)
        before = {"asked": norm_before_gate, "after": True, "before": False}[order]
        if not before:
            x = x * gated
        d = x.shape[-1]
        size = d if group_size is None or groups == "ignored" else group_size
        if d % size:
            raise ValueError("group_size does not divide d")
        if groups == "interleaved":
            grouped = x.reshape(*x.shape[:-1], size, d // size).transpose(-1, -2)
        else:
            grouped = x.reshape(*x.shape[:-1], d // size, size)
        if eps_outside:
            rms = grouped.pow(2).mean(-1, keepdim=True).sqrt()
            normed = grouped / (rms + eps)
        else:
            normed = F.rms_norm(grouped, (size,), eps=eps)
        if groups == "interleaved":
            normed = normed.transpose(-1, -2)
        out = normed.reshape(x.shape) * weight
        if before:
            out = out * gated
        return out.numpy()

    return norm


oracle_gated_rmsnorm = oracle(_gated_variant(), name="oracle_gated_rmsnorm")

GATED_PROBES = [
    Probe(
        "norm_before_gate ignored: gated after the norm",
        "This matches norm(x) * silu(z) where norm_before_gate=False asks for norm(x * silu(z)): "
        "Mamba-2 (norm_before_gate=False) gates first, so the norm sees the gated x.",
        _gated_variant(order="after"),
    ),
    Probe(
        "norm_before_gate ignored: gated before the norm",
        "This matches norm(x * silu(z)) where norm_before_gate=True asks for norm(x) * "
        "silu(z): normalize x first, then multiply by the gate.",
        _gated_variant(order="before"),
    ),
    Probe(
        "group size ignored",
        "This matches one RMS over the whole last axis: with group_size set, each group of "
        "group_size consecutive channels gets its own RMS (Mamba-2 uses d_ssm // ngroups), "
        "which keeps the norm local to a tensor-parallel shard.",
        _gated_variant(groups="ignored"),
    ),
    Probe(
        "groups interleaved",
        "This matches groups made of every (d // group_size)-th channel (a reshape to "
        "(..., group_size, d // group_size)). Mamba-2's groups are consecutive channels, "
        "'... (g d) -> ... g d' with d = group_size: reshape to (..., d // group_size, "
        "group_size).",
        _gated_variant(groups="interleaved"),
    ),
    Probe(
        "sigmoid gate",
        "This matches a gate sigmoid(z): Mamba-2's gate is silu(z) = z * sigmoid(z).",
        _gated_variant(gate="sigmoid"),
    ),
    Probe(
        "gate without SiLU",
        "This matches a gate z itself: multiply by silu(z) = z * sigmoid(z).",
        _gated_variant(gate="z"),
    ),
    Probe(
        "eps outside the root",
        "This matches x / (RMS(x) + eps): eps goes inside the square root, "
        "x / sqrt(mean(x**2) + eps), as in Mamba-2's rms_norm_ref.",
        _gated_variant(eps_outside=True),
    ),
]


# ----------------------------------------------------------------------------- GRN


def _grn_variant(space=(1, 2), divide_by="mean", power=1, residual=True):
    def grn(x, gamma, beta, eps=GRN_EPS):
        import torch

        x, gamma, beta = _t(x), _t(gamma), _t(beta)
        if power == 2:
            global_response = x.pow(2).sum(dim=space, keepdim=True)
        else:
            global_response = torch.linalg.vector_norm(x, dim=space, keepdim=True)
        if divide_by == "sum":
            total = global_response.sum(dim=-1, keepdim=True)
        else:
            total = global_response.mean(dim=-1, keepdim=True)
        normalized = global_response / (total + eps)
        y = gamma * (x * normalized) + beta
        return (y + x if residual else y).numpy()

    return grn


oracle_grn_forward = oracle(_grn_variant(), name="oracle_grn_forward")

GRN_PROBES = [
    Probe(
        "norm over the channels",
        "This matches an L2 norm over the last axis, the channels: GRN aggregates each channel "
        "over SPACE, ||x[n, :, :, c]||, the axes (1, 2) of the channels-last x (N, H, W, C).",
        _grn_variant(space=(3,)),
    ),
    Probe(
        "channels-first axes",
        "This matches a norm over the axes (2, 3), which are (H, W) in the channels-first "
        "layout (N, C, H, W). ConvNeXt V2's GRN runs on channels-last x (N, H, W, C): the "
        "spatial axes are (1, 2).",
        _grn_variant(space=(2, 3)),
    ),
    Probe(
        "squared norm",
        "This matches the sum of squares over space without the square root: the global "
        "response is the L2 norm, sqrt(sum(x**2)).",
        _grn_variant(power=2),
    ),
    Probe(
        "divided by the sum over channels",
        "This matches a division by the SUM of the channels' norms: GRN divides by their MEAN "
        "(plus eps), so that a channel of average response gets 1.",
        _grn_variant(divide_by="sum"),
    ),
    Probe(
        "no residual",
        "This matches gamma * (x * N(x)) + beta without + x: ConvNeXt V2's GRN adds the input "
        "back, so that with gamma = beta = 0 (their initial values) the layer is the identity.",
        _grn_variant(residual=False),
    ),
]


# ----------------------------------------------------------------------------- BatchNorm folding


def _bn_args(gamma, beta, running_mean, running_var):
    return _t(running_mean), _t(running_var), _t(gamma), _t(beta)


def _conv_bn_variant(batch_stats=False, conv_bias=True, eps_outside=False):
    def conv_bn(x, weight, bias, gamma, beta, running_mean, running_var, eps=BN_EPS):
        import torch.nn.functional as F

        has_bias = bias is not None and conv_bias
        y = F.conv2d(_t(x), _t(weight), _t(bias) if has_bias else None)
        mean, var, g, b = _bn_args(gamma, beta, running_mean, running_var)
        if batch_stats:
            return F.batch_norm(y, None, None, g, b, training=True, eps=eps).numpy()
        if eps_outside:
            shape = (1, -1, 1, 1)
            normed = (y - mean.reshape(shape)) / (var.sqrt().reshape(shape) + eps)
            return (normed * g.reshape(shape) + b.reshape(shape)).numpy()
        return F.batch_norm(y, mean, var, g, b, training=False, eps=eps).numpy()

    return conv_bn


oracle_conv_bn_eval = oracle(_conv_bn_variant(), name="oracle_conv_bn_eval")

CONV_BN_PROBES = [
    Probe(
        "batch statistics",
        "This matches BatchNorm in training mode, normalized with this batch's mean and "
        "variance: a deployed (eval-mode) BatchNorm uses running_mean and running_var, "
        "whatever the batch. That is also what makes it a fixed affine map that can be folded.",
        _conv_bn_variant(batch_stats=True),
    ),
    Probe(
        "conv bias forgotten",
        "This matches the convolution without its bias: when bias is not None, add it to each "
        "output channel before the BatchNorm.",
        _conv_bn_variant(conv_bias=False),
    ),
    Probe(
        "eps outside the root",
        "This matches (y - mean) / (sqrt(var) + eps): BatchNorm divides by sqrt(var + eps).",
        _conv_bn_variant(eps_outside=True),
    ),
]


def _fold_variant(
    conv_bias=True, mean=True, scale_bias=True, sqrt=True, eps_outside=False, axis=0
):  # fmt: skip
    def fold(weight, bias, gamma, beta, running_mean, running_var, eps=BN_EPS):
        from torch.nn.utils.fusion import fuse_conv_bn_weights

        w = _t(weight)
        rm, rv, g, b = _bn_args(gamma, beta, running_mean, running_var)
        has_bias = bias is not None and conv_bias
        conv_b = _t(bias) if has_bias else None
        if conv_bias and mean and scale_bias and sqrt and not eps_outside and axis == 0:
            fused_w, fused_b = fuse_conv_bn_weights(w, conv_b, rm, rv, eps, g, b)
            return fused_w.detach().numpy(), fused_b.detach().numpy()
        std = rv.sqrt() + eps if eps_outside else (rv + eps if not sqrt else (rv + eps).sqrt())
        factor = g / std
        shape = [1] * w.dim()
        shape[axis] = -1
        if w.shape[axis] != factor.shape[0]:
            raise ValueError("the factor does not fit that axis")
        fused_w = w * factor.reshape(shape)
        conv_b = conv_b if conv_b is not None else w.new_zeros(w.shape[0])
        centred = conv_b - rm if mean else conv_b
        fused_b = b + (centred * factor if scale_bias else centred)
        return fused_w.numpy(), fused_b.numpy()

    return fold


oracle_fold_batchnorm = oracle(_fold_variant(), name="oracle_fold_batchnorm")

FOLD_PROBES = [
    Probe(
        "conv bias forgotten",
        "The bias matches beta - gamma * mean / sqrt(var + eps): the convolution's own bias b "
        "passes through the BatchNorm too, so the folded bias is "
        "beta + gamma * (b - mean) / sqrt(var + eps).",
        _fold_variant(conv_bias=False),
    ),
    Probe(
        "running mean forgotten",
        "The bias matches beta + gamma * b / sqrt(var + eps): the BatchNorm subtracts "
        "running_mean before scaling, so the folded bias is "
        "beta + gamma * (b - mean) / sqrt(var + eps).",
        _fold_variant(mean=False),
    ),
    Probe(
        "bias not scaled",
        "The bias matches beta + (b - mean): the centred bias is scaled by gamma / sqrt(var + "
        "eps) like everything else that passes through the BatchNorm.",
        _fold_variant(scale_bias=False),
    ),
    Probe(
        "no square root",
        "This matches a factor gamma / (var + eps): BatchNorm divides by the standard "
        "deviation, sqrt(var + eps).",
        _fold_variant(sqrt=False),
    ),
    Probe(
        "eps outside the root",
        "This matches a factor gamma / (sqrt(var) + eps): eps goes inside the square root, "
        "gamma / sqrt(var + eps), as in BatchNorm itself.",
        _fold_variant(eps_outside=True),
    ),
    Probe(
        "scaled along the input channels",
        "This matches the weight scaled along axis 1, its input channels: the BatchNorm "
        "normalizes the convolution's OUTPUT channels, so output channel o of the weight, "
        "weight[o], is multiplied by gamma[o] / sqrt(var[o] + eps).",
        _fold_variant(axis=1),
    ),
]


# ----------------------------------------------------------------------------- Derf


def _derf_variant(function="erf", shift_inside=True, shift_scaled=False, affine=True):
    def derf(x, alpha, shift, weight, bias):
        import torch

        x, weight, bias = _t(x), _t(weight), _t(bias)
        argument = alpha * (x + shift) if shift_scaled else alpha * x
        if shift_inside and not shift_scaled:
            argument = argument + shift
        if function == "tanh":
            value = torch.tanh(argument)
        elif function == "cdf":
            value = 0.5 * (1 + torch.erf(argument / math.sqrt(2.0)))
        else:
            value = torch.erf(argument)
        if not shift_inside:
            value = value + shift
        return (weight * value + bias if affine else value).numpy()

    return derf


oracle_derf_forward = oracle(_derf_variant(), name="oracle_derf_forward")

DERF_PROBES = [
    Probe(
        "tanh instead of erf",
        "This matches weight * tanh(alpha * x + shift) + bias, DyT's function with a shift: "
        "Derf uses the error function, erf(z) = 2 / sqrt(pi) * integral of exp(-t**2) from 0 "
        "to z (math.erf, the lab's erf).",
        _derf_variant(function="tanh"),
    ),
    Probe(
        "Gaussian CDF instead of erf",
        "This matches the Gaussian CDF, (1 + erf(z / sqrt(2))) / 2, which runs from 0 to 1: "
        "Derf uses erf itself, the CDF rescaled to run from -1 to 1, which is zero-centred.",
        _derf_variant(function="cdf"),
    ),
    Probe(
        "shift outside erf",
        "This matches erf(alpha * x) + shift: the shift moves erf's input, "
        "erf(alpha * x + shift), as in the authors' Dynamic_erf.",
        _derf_variant(shift_inside=False),
    ),
    Probe(
        "shift scaled by alpha",
        "This matches erf(alpha * (x + shift)): the shift is added after the scaling, "
        "erf(alpha * x + shift).",
        _derf_variant(shift_scaled=True),
    ),
    Probe(
        "no affine",
        "This matches erf(alpha * x + shift) without weight and bias: Derf keeps a per-channel "
        "affine step like the norm it replaces, weight * erf(...) + bias.",
        _derf_variant(affine=False),
    ),
]


# ----------------------------------------------------------------------------- QK-Clip


def _max_logits_variant(scaled=True, causal=True, absolute=False):
    def max_logits(q, k):
        import torch

        q, k = _t(q), _t(k)
        scores = q @ k.transpose(-1, -2)
        if scaled:
            scores = scores / math.sqrt(q.shape[-1])
        if absolute:
            scores = scores.abs()
        if causal:
            length = q.shape[-2]
            future = torch.ones(length, length, dtype=torch.bool).triu(diagonal=1)
            scores = scores.masked_fill(future, float("-inf"))
        return scores.amax(dim=(0, 2, 3)).numpy()

    return max_logits


oracle_qk_max_logits = oracle(_max_logits_variant(), name="oracle_qk_max_logits")

MAX_LOGIT_PROBES = [
    Probe(
        "no 1/sqrt(head_dim)",
        "This matches the largest q . k without the 1/sqrt(head_dim) factor: S_max is the "
        "largest logit the softmax sees, q_i . k_j / sqrt(head_dim).",
        _max_logits_variant(scaled=False),
    ),
    Probe(
        "not causal",
        "This matches the largest logit over every pair (i, j), the future included: in a "
        "causal model query i only sees keys j <= i, and the masked logits never reach the "
        "softmax.",
        _max_logits_variant(causal=False),
    ),
    Probe(
        "largest absolute logit",
        "This matches the largest |logit|: S_max is the largest logit itself. A very negative "
        "logit only takes weight away from its key; what concentrates the softmax is a large "
        "positive one.",
        _max_logits_variant(absolute=True),
    ),
]


def _clip_variant(
    exponent=0.5, split="both", heads="over", values=False, layout="heads", inverted=False
):  # fmt: skip
    """QK-Clip with optional bugs. split: "both" (each sqrt), "q" (all on W_q);
    heads: "over" (only heads above tau), "all" (every head by tau / S), "global" (every head
    by the factor of the largest S); layout: "heads" (columns h * hd ... ) or "interleaved"."""

    def clip(w_q, w_k, w_v, max_logits, tau):
        import torch

        w_q, w_k, w_v, s_max = map(_t, (w_q, w_k, w_v, max_logits))
        n_heads = s_max.shape[0]
        if heads == "global":
            ratio = (tau / s_max.max()).clamp(max=1.0).expand(n_heads)
        elif heads == "all":
            ratio = tau / s_max
        else:
            ratio = torch.where(s_max > tau, tau / s_max, torch.ones_like(s_max))
        if inverted:
            ratio = 1 / ratio

        def scaled(w, power):
            d, width = w.shape
            if width % n_heads:
                raise ValueError("the heads do not divide the width")
            head_dim = width // n_heads
            factor = ratio**power
            if layout == "interleaved":
                return (w.reshape(d, head_dim, n_heads) * factor).reshape(d, width)
            return (w.reshape(d, n_heads, head_dim) * factor[:, None]).reshape(d, width)

        if split == "q":
            new_q, new_k = scaled(w_q, 1.0), w_k
        else:
            new_q, new_k = scaled(w_q, exponent), scaled(w_k, exponent)
        new_v = scaled(w_v, exponent) if values else w_v
        return new_q.numpy(), new_k.numpy(), new_v.numpy()

    return clip


oracle_qk_clip = oracle(_clip_variant(), name="oracle_qk_clip")

CLIP_PROBES = [
    Probe(
        "V clipped too",
        "w_v matches W_v scaled like W_q and W_k: QK-Clip rescales only the query and key "
        "projections, which set the logits; W_v sets what the attention returns and is left "
        "untouched.",
        _clip_variant(values=True),
    ),
    Probe(
        "every head by the largest logit's factor",
        "This matches every head scaled by tau / max over heads of S_max, a clip per layer: "
        "QK-Clip is per head (a clip per layer also shrinks the heads whose logits were not "
        "growing, see the chapter). A head whose S_max is at most tau keeps its weights, and "
        "each head above tau gets its own factor tau / S_max^h.",
        _clip_variant(heads="global"),
    ),
    Probe(
        "heads below tau rescaled",
        "This matches every head multiplied by sqrt(tau / S_max^h), the heads below tau too "
        "(whose weights then GROW): gamma_h = min(1, tau / S_max^h), so only heads above tau "
        "change.",
        _clip_variant(heads="all"),
    ),
    Probe(
        "all on W_q",
        "This matches W_q multiplied by the whole factor tau / S_max and W_k unchanged: the "
        "logit is then capped all the same, but Kimi K2 splits the factor, sqrt(tau / S_max) "
        "on each of W_q and W_k, so that neither projection alone shrinks by the full factor.",
        _clip_variant(split="q"),
    ),
    Probe(
        "sqrt missed",
        "This matches W_q and W_k each multiplied by tau / S_max: the logit is a product of q "
        "and k, so it shrinks by (tau / S_max)**2. Multiply each by sqrt(tau / S_max).",
        _clip_variant(exponent=1.0),
    ),
    Probe(
        "factor inverted",
        "This matches a factor sqrt(S_max / tau), which makes the clipped heads' weights "
        "larger: multiply by sqrt(tau / S_max), below 1 for a head above tau.",
        _clip_variant(inverted=True),
    ),
    Probe(
        "heads interleaved",
        "This matches heads made of every H-th column (a reshape to (d, head_dim, H)): head h "
        "owns the consecutive columns h * head_dim to (h + 1) * head_dim, the layout "
        "x @ W_q reshaped to (..., H, head_dim) gives.",
        _clip_variant(layout="interleaved"),
    ),
]


ADALN = Graded("adaln_zero_block", oracle_adaln_zero_block, ADALN_PROBES)
INIT = Graded("adaln_zero_init", oracle_adaln_zero_init, INIT_PROBES, items=("weight", "bias"))
GATED = Graded("gated_rmsnorm", oracle_gated_rmsnorm, GATED_PROBES)
GRN = Graded("grn_forward", oracle_grn_forward, GRN_PROBES)
CONV_BN = Graded("conv_bn_eval", oracle_conv_bn_eval, CONV_BN_PROBES)
FOLD = Graded("fold_batchnorm", oracle_fold_batchnorm, FOLD_PROBES, items=("weight", "bias"))
DERF = Graded("derf_forward", oracle_derf_forward, DERF_PROBES)
MAX_LOGITS = Graded("qk_max_logits", oracle_qk_max_logits, MAX_LOGIT_PROBES)
CLIP = Graded("qk_clip", oracle_qk_clip, CLIP_PROBES, items=("w_q", "w_k", "w_v"))

PROBES = probe_table(ADALN, INIT, GATED, GRN, CONV_BN, FOLD, DERF, MAX_LOGITS, CLIP)


# ----------------------------------------------------------------------------- inputs


def adaln_inputs(rng, batch=2, length=5, d=4, cond_dim=6):
    """x (N, L, d) with offsets, c (N, d_c), a modulation layer (d_c, 3d) + (3d,), W (d, d)."""
    x = rng.normal(size=(batch, length, d)) * 2.0 + rng.uniform(-3, 3, size=(batch, length, 1))
    c = rng.normal(size=(batch, cond_dim))
    weight = rng.normal(0.0, 0.6, size=(cond_dim, 3 * d))
    bias = rng.normal(0.0, 0.3, size=3 * d)
    sublayer_weight = rng.normal(0.0, 1.0 / np.sqrt(d), size=(d, d))
    return x, c, weight, bias, sublayer_weight


def gated_inputs(rng, rows=6, d=8):
    """x with rows of scales 1e-4 to 10 (eps placement shows), a gate z, a gain."""
    scales = np.geomspace(1e-4, 10.0, rows)[:, None]
    x = rng.normal(size=(rows, d)) * scales
    z = rng.normal(0.0, 1.5, size=(rows, d))
    return x, z, rng.normal(1.0, 0.4, size=d)


def grn_inputs(rng, shape=(2, 3, 4, 5)):
    """channels-last x (N, H, W, C) whose channels have different sizes, gamma and beta."""
    channels = shape[-1]
    x = rng.normal(size=shape) * np.geomspace(0.2, 5.0, channels)
    return x, rng.normal(0.0, 0.7, size=channels), rng.normal(0.0, 0.3, size=channels)


def conv_bn_inputs(rng, out_channels=4, in_channels=4, kernel=3):
    """A convolution's weight and bias, a BatchNorm's parameters and running statistics whose
    mean and variance are far from the batch's, so that using the batch's shows."""
    weight = rng.normal(0.0, 0.5, size=(out_channels, in_channels, kernel, kernel))
    bias = rng.normal(0.0, 0.5, size=out_channels)
    gamma, beta = rng.normal(1.0, 0.4, size=out_channels), rng.normal(0.0, 0.5, size=out_channels)
    running_mean = rng.normal(0.0, 1.0, size=out_channels)
    running_var = rng.uniform(0.5, 4.0, size=out_channels)
    running_var[0] = 3e-5  # a nearly dead channel: eps's place shows
    return weight, bias, gamma, beta, running_mean, running_var


def qk_inputs(rng, batch=2, heads=3, length=5, head_dim=4):
    """q, k (B, H, L, head_dim) whose heads differ in size, with one large logit in the future
    of its query and one very negative logit, so that each slip shows."""
    sizes = np.array([0.5, 2.0, 4.0])[:heads].reshape(1, heads, 1, 1)
    q = rng.normal(size=(batch, heads, length, head_dim)) * sizes
    k = rng.normal(size=(batch, heads, length, head_dim)) * sizes
    k[0, :, -1] = 3.0 * q[0, :, 0]  # key 4 aligned with query 0: a logit only the future has
    k[1, :, 0] = -4.0 * q[1, :, -1]  # a very negative logit that a causal query does see
    return q, k


def clip_inputs(rng, d=6, heads=3, head_dim=4):
    """W_q, W_k, W_v (d, H * head_dim), and per-head max logits, some above tau = 10."""
    width = heads * head_dim
    w_q, w_k, w_v = (rng.normal(size=(d, width)) for _ in range(3))
    return w_q, w_k, w_v, np.array([40.0, 6.0, 12.5])[:heads]


# ----------------------------------------------------------------------------- adaLN checks


@LAB.check(points=2, uses=["adaln_zero_block"], seed=130)
def adaln_block(sub, rng):
    """adaLN-Zero block: x + gate * G(norm(x) * (1 + scale) + shift), as DiT's block"""
    for batch, length in [(2, 5), (3, 2)]:
        args = Args(*adaln_inputs(rng, batch, length), eps=ADALN_EPS)
        ADALN.expect(sub, args, what=f"x of shape ({batch}, {length}, 4)")


@LAB.check(points=1, uses=["adaln_zero_block"], seed=131)
def adaln_block_identity(sub, rng):
    """adaLN-Zero block with a zero modulation layer returns x (the identity at init)"""
    x, c, weight, bias, sublayer_weight = adaln_inputs(rng)
    args = Args(x, c, np.zeros_like(weight), np.zeros_like(bias), sublayer_weight, eps=ADALN_EPS)
    ADALN.expect(sub, args, what="a zero modulation layer", expected=x)


@LAB.check(points=2, uses=["adaln_zero_init"], seed=132)
def adaln_init(sub, rng):
    """adaLN-Zero initialisation: the gate's columns and biases zeroed (DiT: all of them)"""
    _, _, weight, bias, _ = adaln_inputs(rng, d=4, cond_dim=6)
    args = Args(weight, bias)
    what = "a modulation layer (6, 12)"
    out = INIT.call(sub, args)
    if out.is_tuple and len(out.items) == 2:
        try:
            got = [array_of(out, what, index=i, count=2) for i in range(2)]
        except CheckFailed:
            got = None
        # DiT's own code zeroes the whole modulation layer: also right.
        if got is not None and all(
            g.shape == e.shape for g, e in zip(got, (weight, bias), strict=True)
        ):
            if all(np.all(g == 0) for g in got):
                return
    INIT.expect(sub, args, what=what, out=out)


# ----------------------------------------------------------------------------- gated RMSNorm checks


def _groups(group_size, d):
    """A case's groups in words: "one group of 8", "groups of 4"."""
    return f"one group of {d}" if group_size is None else f"groups of {group_size}"


@LAB.check(points=2, uses=["gated_rmsnorm"], seed=133)
def gated_norm_after(sub, rng):
    """gated RMSNorm, norm_before_gate=True: norm(x) * silu(z), whole rows and groups"""
    for group_size in [None, 4]:
        args = Args(*gated_inputs(rng), eps=GATED_EPS, group_size=group_size,
                    norm_before_gate=True)  # fmt: skip
        GATED.expect(sub, args, what=f"norm_before_gate=True, {_groups(group_size, 8)}")


@LAB.check(points=2, uses=["gated_rmsnorm"], seed=134)
def gated_norm_before(sub, rng):
    """gated RMSNorm, norm_before_gate=False (Mamba-2): norm(x * silu(z)), whole rows and groups"""
    for group_size in [None, 2]:
        args = Args(*gated_inputs(rng), eps=GATED_EPS, group_size=group_size,
                    norm_before_gate=False)  # fmt: skip
        GATED.expect(sub, args, what=f"norm_before_gate=False, {_groups(group_size, 8)}")


@LAB.check(points=1, uses=["gated_rmsnorm"], seed=135)
def gated_norm_batched(sub, rng):
    """gated RMSNorm on (B, L, d) input with groups of 4"""
    x, z, weight = gated_inputs(rng, rows=6, d=12)
    args = Args(x.reshape(2, 3, 12), z.reshape(2, 3, 12), weight, eps=GATED_EPS, group_size=4,
                norm_before_gate=False)  # fmt: skip
    GATED.expect(sub, args, what="x of shape (2, 3, 12), groups of 4")


# ----------------------------------------------------------------------------- GRN checks


@LAB.check(points=2, uses=["grn_forward"], seed=136)
def grn(sub, rng):
    """GRN: gamma * (x * N(x)) + beta + x, N = spatial L2 norm over its mean over channels"""
    for shape in [(2, 3, 4, 5), (1, 5, 2, 3)]:
        args = Args(*grn_inputs(rng, shape), eps=GRN_EPS)
        GRN.expect(sub, args, what=f"channels-last x of shape {shape}")


# ----------------------------------------------------------------------------- folding checks


@LAB.check(points=1, uses=["conv_bn_eval"], seed=137)
def conv_bn(sub, rng):
    """convolution then eval-mode BatchNorm, with the running statistics"""
    weight, bias, gamma, beta, mean, var = conv_bn_inputs(rng)
    x = rng.normal(2.0, 3.0, size=(2, 4, 6, 6))
    args = Args(x, weight, bias, gamma, beta, mean, var, eps=BN_EPS)
    CONV_BN.expect(
        sub, args, what="x of shape (2, 4, 6, 6), a convolution (4, 4, 3, 3) with a bias"
    )
    args = Args(x[:1, :3], weight[:, :3, :1, :1], None, gamma, beta, mean, var, eps=BN_EPS)
    CONV_BN.expect(
        sub, args, what="x of shape (1, 3, 6, 6), a convolution (4, 3, 1, 1) without a bias"
    )


@LAB.check(points=2, uses=["fold_batchnorm"], seed=138)
def fold_with_bias(sub, rng):
    """BatchNorm folded into a convolution with a bias"""
    args = Args(*conv_bn_inputs(rng), eps=BN_EPS)
    FOLD.expect(sub, args, what="a convolution (4, 4, 3, 3) with a bias")


@LAB.check(points=1, uses=["fold_batchnorm"], seed=139)
def fold_without_bias(sub, rng):
    """BatchNorm folded into a convolution without a bias (bias=None, as before a BatchNorm)"""
    weight, _, gamma, beta, mean, var = conv_bn_inputs(rng, out_channels=5, in_channels=3)
    args = Args(weight, None, gamma, beta, mean, var, eps=BN_EPS)
    FOLD.expect(sub, args, what="a convolution (5, 3, 3, 3) without a bias")


# ----------------------------------------------------------------------------- Derf checks


@LAB.check(points=2, uses=["derf_forward"], seed=140)
def derf(sub, rng):
    """Derf: weight * erf(alpha * x + shift) + bias, alpha and shift scalars"""
    for shape, alpha, shift in [((4, 6), 0.5, 0.3), ((2, 3, 5), 1.7, -0.8)]:
        x = rng.normal(size=shape) * 2.0
        weight, bias = rng.normal(1.0, 0.4, size=shape[-1]), rng.normal(0.0, 0.3, size=shape[-1])
        args = Args(x, alpha, shift, weight, bias)
        DERF.expect(sub, args, what=f"x of shape {shape}, alpha = {alpha} and shift = {shift}")


# ----------------------------------------------------------------------------- QK-Clip checks


@LAB.check(points=2, uses=["qk_max_logits"], seed=141)
def max_logits(sub, rng):
    """QK-Clip's S_max: the largest causal logit q . k / sqrt(head_dim) of each head"""
    q, k = qk_inputs(rng)
    MAX_LOGITS.expect(sub, Args(q, k), what="q, k of shape (2, 3, 5, 4)")


@LAB.check(points=3, uses=["qk_clip"], seed=142)
def clip(sub, rng):
    """QK-Clip: W_q and W_k of each head above tau times sqrt(tau / S_max); W_v untouched"""
    args = Args(*clip_inputs(rng), 10.0)
    CLIP.expect(sub, args, what="3 heads of 4 with S_max 40, 6 and 12.5 and tau = 10")


@LAB.check(points=1, uses=["qk_clip"], seed=143)
def clip_caps(sub, rng):
    """QK-Clip caps each head's largest logit at tau"""
    heads, head_dim, d = 3, 4, 6
    w_q, w_k, w_v, _ = clip_inputs(rng, d, heads, head_dim)
    x = rng.normal(size=(2, 5, d)) * 3.0

    def per_head(w):
        return (x @ w).reshape(2, 5, heads, head_dim).transpose(0, 2, 1, 3)

    s_max = oracle_qk_max_logits(per_head(w_q), per_head(w_k))
    tau = float(np.median(s_max))
    what = f"3 heads whose S_max reach {s_max.max():.4g}, tau = {tau:.4g} (their median)"
    out = CLIP.expect(sub, Args(w_q, w_k, w_v, s_max, tau), what=what)
    new_q, new_k = (np.asarray(out.items[i].array, np.float64) for i in range(2))
    after = oracle_qk_max_logits(per_head(new_q), per_head(new_k))
    if not np.all(after <= tau * (1 + 1e-9)):
        raise CheckFailed(f"qk_clip, {what}: a head's largest logit is still above tau")


# ----------------------------------------------------------------------------- practice problems

ADALN_GRAD_WHY = {
    "a": "The sub-layer's weights get gate * (...) as their gradient, and the gate is 0 at "
    "initialisation: they receive nothing until the gate has moved.",
    "c": "The shift and the scale reach the output only through gate * G(...): with the gate "
    "at 0 their gradient is 0 too.",
    "d": "The output is x + gate * G(h) and its derivative with respect to the gate is G(h), "
    "which is not 0: the gate's part of the modulation layer does receive a gradient.",
}

choice(
    LAB,
    "problem 1: what learns first in an adaLN-Zero block (multiple choice)",
    points=1,
    name="ADALN_GRAD_ANSWER",
    key="b",
    hint="Differentiate x + gate * G(norm(x) * (1 + scale) + shift) with respect to each "
    "parameter and set the modulation (shift, scale, gate) to 0.",
    why=ADALN_GRAD_WHY,
)

FOLD_WHY = {
    "a": "This bias forgets the convolution's own bias b: it passes through the BatchNorm too, "
    "(b - mean) * gamma / sqrt(var) + beta.",
    "b": "This factor is gamma / var: BatchNorm divides by the standard deviation, "
    "sqrt(16) = 4, not by the variance.",
    "c": "This bias was not scaled: b - mean is multiplied by gamma / sqrt(var) = 0.5 before "
    "beta is added.",
}

choice(
    LAB,
    "problem 2: the folded weight and bias of one channel (multiple choice)",
    points=1,
    name="FOLD_ANSWER",
    key="d",
    hint="Write BN(conv(x)) = gamma * (W x + b - mean) / sqrt(var) + beta as W' x + b' and "
    "read off W' and b'.",
    why=FOLD_WHY,
)

QK_CLIP_WHY = {
    "b": "Multiplying W_q and W_k by tau / S_max each shrinks the logit, a product of q and k, "
    "by (tau / S_max)**2 = 1/16: the head would be capped at 25, far below tau.",
    "c": "W_v does not enter the logits: QK-Clip leaves it alone, and scaling it would change "
    "what the head returns, not its softmax.",
    "d": "This caps the logit too, but puts the whole factor on W_q: Kimi K2 splits it, "
    "sqrt(tau / S_max) on each of W_q and W_k.",
}

choice(
    LAB,
    "problem 3: how QK-Clip rescales a head whose largest logit is 400 (multiple choice)",
    points=1,
    name="QK_CLIP_ANSWER",
    key="a",
    hint="The logit is (x W_q) . (x W_k) / sqrt(head_dim): find the factor on the logit that "
    "brings 400 down to tau = 100, then split it between the two matrices as Kimi K2 does.",
    why=QK_CLIP_WHY,
)
