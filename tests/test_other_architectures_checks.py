"""Lab 13, the norms of other architectures: right code passes; each known bug fails WITH its hint."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from conftest import assert_caught, lab_results, messages

from normlab.grader.checks import other_architectures as lab

run = functools.partial(lab_results, "13_other_architectures")

erf = np.vectorize(math.erf, otypes=[float])


# ----------------------------------------------------------------------------- references
# Written here, independently of the solution notebook, as the tests' own right answers; each
# takes keyword flags that put one known bug in.


def silu(v):
    return v / (1.0 + np.exp(-v))


def layer_norm(v, eps, subtract_mean=True):
    centred = v - v.mean(-1, keepdims=True) if subtract_mean else v
    return centred / np.sqrt((centred**2).mean(-1, keepdims=True) + eps)


def adaln(no_silu=False, no_one=False, order="shift scale gate", gate="branch",
          modulate_first=False, rms=False):  # fmt: skip
    def block(x, c, modulation_weight, modulation_bias, sublayer_weight, eps=1e-6):
        conditioning = c if no_silu else silu(c)
        parts = np.split(conditioning @ modulation_weight + modulation_bias, 3, axis=-1)
        named = dict(zip(order.split(), parts, strict=True))
        shift, scale, g = (named[k][:, None, :] for k in ("shift", "scale", "gate"))
        factor = scale if no_one else 1.0 + scale
        if modulate_first:
            h = layer_norm(x * factor + shift, eps, not rms)
        else:
            h = layer_norm(x, eps, not rms) * factor + shift
        branch = np.tanh(h @ sublayer_weight)
        if gate == "none":
            return x + branch
        if gate == "everything":
            return g * (x + branch)
        return x + g * branch

    return block


def adaln_init(which=(2,), weight_too=True, bias_too=True, rows=False, everything=False):
    def init(modulation_weight, modulation_bias):
        weight, bias = modulation_weight.copy(), modulation_bias.copy()
        if everything:
            return np.zeros_like(weight), np.zeros_like(bias)
        d = bias.size // 3
        for chunk in which:
            if weight_too:
                if rows:
                    weight[-d:] = 0
                else:
                    weight[:, chunk * d : (chunk + 1) * d] = 0
            if bias_too:
                bias[chunk * d : (chunk + 1) * d] = 0
        return weight, bias

    return init


def gated(order=None, groups="consecutive", gate="silu", eps_outside=False):
    def norm(x, z, weight, eps=1e-5, group_size=None, norm_before_gate=True):
        g = {"silu": z / (1 + np.exp(-z)), "sigmoid": 1 / (1 + np.exp(-z)), "z": z}[gate]
        before = norm_before_gate if order is None else order == "after"
        if not before:
            x = x * g
        d = x.shape[-1]
        size = d if group_size is None or groups == "whole" else group_size
        if groups == "interleaved":
            grouped = np.swapaxes(x.reshape(*x.shape[:-1], size, d // size), -1, -2)
        else:
            grouped = x.reshape(*x.shape[:-1], d // size, size)
        mean_square = np.mean(grouped**2, axis=-1, keepdims=True)
        if eps_outside:
            normed = grouped / (np.sqrt(mean_square) + eps)
        else:
            normed = grouped / np.sqrt(mean_square + eps)
        if groups == "interleaved":
            normed = np.swapaxes(normed, -1, -2)
        y = normed.reshape(x.shape) * weight
        return y * g if before else y

    return norm


def grn(axes=(1, 2), squared=False, total="mean", residual=True):
    def forward(x, gamma, beta, eps=1e-6):
        if squared:
            response = np.sum(x * x, axis=axes, keepdims=True)
        else:
            response = np.linalg.norm(x, axis=axes, keepdims=True)
        divisor = (
            response.sum(-1, keepdims=True) if total == "sum" else response.mean(-1, keepdims=True)
        )
        y = gamma * (x * (response / (divisor + eps))) + beta
        return y + x if residual else y

    return forward


def conv2d(x, weight, bias=None):
    windows = np.lib.stride_tricks.sliding_window_view(x, weight.shape[-2:], axis=(2, 3))
    y = np.einsum("nchwij,ocij->nohw", windows, weight)
    return y if bias is None else y + bias[None, :, None, None]


def conv_bn(batch_stats=False, no_bias=False, eps_outside=False):
    def forward(x, weight, bias, gamma, beta, running_mean, running_var, eps=1e-5):
        y = conv2d(x, weight, None if no_bias else bias)
        mean, var = running_mean, running_var
        if batch_stats:
            mean, var = y.mean(axis=(0, 2, 3)), y.var(axis=(0, 2, 3))
        std = np.sqrt(var) + eps if eps_outside else np.sqrt(var + eps)
        shape = (1, -1, 1, 1)
        return (y - mean.reshape(shape)) / std.reshape(shape) * gamma.reshape(shape) + beta.reshape(
            shape
        )

    return forward


def fold(no_conv_bias=False, no_mean=False, unscaled=False, no_sqrt=False, eps_outside=False,
         input_axis=False):  # fmt: skip
    def folded(weight, bias, gamma, beta, running_mean, running_var, eps=1e-5):
        if no_sqrt:
            factor = gamma / (running_var + eps)
        elif eps_outside:
            factor = gamma / (np.sqrt(running_var) + eps)
        else:
            factor = gamma / np.sqrt(running_var + eps)
        if input_axis:
            new_weight = weight * factor[None, :, None, None]
        else:
            new_weight = weight * factor[:, None, None, None]
        b = np.zeros_like(gamma) if bias is None or no_conv_bias else bias
        centred = b if no_mean else b - running_mean
        new_bias = beta + (centred if unscaled else centred * factor)
        return new_weight, new_bias

    return folded


def derf(kind="erf", shift_outside=False, shift_scaled=False, affine=True):
    def forward(x, alpha, shift, weight, bias):
        z = alpha * (x + shift) if shift_scaled else alpha * x + (0 if shift_outside else shift)
        value = {
            "erf": erf(z),
            "tanh": np.tanh(z),
            "cdf": 0.5 * (1 + erf(z / np.sqrt(2))),
        }[kind]
        if shift_outside:
            value = value + shift
        return weight * value + bias if affine else value

    return forward


def max_logits(scaled=True, causal=True, absolute=False):
    def forward(q, k):
        logits = np.einsum("bhid,bhjd->bhij", q, k)
        if scaled:
            logits = logits / np.sqrt(q.shape[-1])
        if absolute:
            logits = np.abs(logits)
        if causal:
            length = q.shape[2]
            logits = np.where(np.tril(np.ones((length, length), bool)), logits, -np.inf)
        return logits.max(axis=(0, 2, 3))

    return forward


def qk_clip(power=0.5, only_q=False, heads="above", values=False, inverted=False,
            interleaved=False):  # fmt: skip
    def clip(w_q, w_k, w_v, max_logits, tau):
        n_heads = len(max_logits)
        if heads == "largest":
            gamma = np.full(n_heads, min(1.0, tau / max(max_logits)))
        elif heads == "all":
            gamma = tau / max_logits
        else:
            gamma = np.minimum(1.0, tau / max_logits)
        if inverted:
            gamma = 1 / gamma

        def scale(w, factor):
            if interleaved:
                return w * np.tile(factor, w.shape[1] // n_heads)
            return w * np.repeat(factor, w.shape[1] // n_heads)

        if only_q:
            return scale(w_q, gamma), w_k.copy(), w_v.copy()
        new_v = scale(w_v, gamma**power) if values else w_v.copy()
        return scale(w_q, gamma**power), scale(w_k, gamma**power), new_v

    return clip


RIGHT = {
    "adaln_zero_block": adaln(),
    "adaln_zero_init": adaln_init(),
    "gated_rmsnorm": gated(),
    "grn_forward": grn(),
    "conv_bn_eval": conv_bn(),
    "fold_batchnorm": fold(),
    "derf_forward": derf(),
    "qk_max_logits": max_logits(),
    "qk_clip": qk_clip(),
    "ADALN_GRAD_ANSWER": "b",
    "FOLD_ANSWER": "(d)",
    "QK_CLIP_ANSWER": "A",
}


def test_right_answers_get_full_marks():
    results = run(**RIGHT)
    assert set(RIGHT) == set(lab.LAB.names)
    assert messages(results) == ""
    assert sum(r.points for r in results) == lab.LAB.max_score


# ----------------------------------------------------------------------------- other right styles


class Modulated:
    """adaLN-Zero written as a small module with its steps as methods."""

    def __call__(self, x, c, modulation_weight, modulation_bias, sublayer_weight, eps=1e-6):
        d = x.shape[-1]
        mod = (c * (1 / (1 + np.exp(-c)))) @ modulation_weight + modulation_bias
        shift, scale, gate = mod[:, None, :d], mod[:, None, d : 2 * d], mod[:, None, 2 * d :]
        mean = np.mean(x, axis=-1, keepdims=True)
        var = np.var(x, axis=-1, keepdims=True)
        h = (x - mean) / np.sqrt(var + eps)
        return x + gate * np.tanh((h + h * scale + shift) @ sublayer_weight)


def gated_by_loop(x, z, weight, eps=1e-5, group_size=None, norm_before_gate=True):
    """Gated RMSNorm group by group, with np.split."""
    gate = z * (1 / (1 + np.exp(-z)))
    if not norm_before_gate:
        x = x * gate
    count = 1 if group_size is None else x.shape[-1] // group_size
    pieces = [
        p / np.sqrt(np.mean(np.square(p), axis=-1, keepdims=True) + eps)
        for p in np.split(x, count, axis=-1)
    ]
    y = np.concatenate(pieces, axis=-1) * weight
    return y * gate if norm_before_gate else y


def fold_by_channel(weight, bias, gamma, beta, running_mean, running_var, eps=1e-5):
    """The fold one output channel at a time, a float32 weight kept float64 inside."""
    new_weight = np.empty_like(weight)
    new_bias = np.empty_like(gamma)
    for o in range(weight.shape[0]):
        inverse_std = 1.0 / math.sqrt(running_var[o] + eps)
        new_weight[o] = weight[o] * gamma[o] * inverse_std
        b = 0.0 if bias is None else bias[o]
        new_bias[o] = (b - running_mean[o]) * gamma[o] * inverse_std + beta[o]
    return new_weight, new_bias


def clip_with_reshape(w_q, w_k, w_v, max_logits, tau):
    """QK-Clip on the (d, H, head_dim) view, heads above tau found with a mask."""
    d, width = w_q.shape
    heads = len(max_logits)
    factor = np.where(max_logits > tau, np.sqrt(tau / max_logits), 1.0)[None, :, None]
    new_q = (w_q.reshape(d, heads, -1) * factor).reshape(d, width)
    new_k = (w_k.reshape(d, heads, -1) * factor).reshape(d, width)
    return new_q, new_k, w_v


def test_right_answers_in_other_styles_get_full_marks():
    others = {
        **RIGHT,
        "adaln_zero_block": Modulated(),
        "adaln_zero_init": adaln_init(everything=True),  # DiT's own code zeroes all of it
        "gated_rmsnorm": gated_by_loop,
        "fold_batchnorm": fold_by_channel,
        "qk_clip": clip_with_reshape,
    }
    results = run(**others)
    assert messages(results) == ""


def test_the_block_at_init_is_the_identity_with_the_oracles_own_init():
    """The two adaLN-Zero checks agree: a block run on the initialisation's weights is x."""
    rng = np.random.default_rng(0)
    x, c, weight, bias, sublayer_weight = lab.adaln_inputs(rng)
    zeroed = adaln_init()(weight, bias)
    assert np.allclose(adaln()(x, c, *zeroed, sublayer_weight), x, rtol=0, atol=1e-15)
    assert not np.allclose(adaln()(x, c, weight, bias, sublayer_weight), x)


def test_qk_clip_caps_the_largest_logit_at_tau_on_the_checks_input():
    """The property the lab teaches, measured with the test's own functions: after the clip,
    no head's logit exceeds tau, and the heads at or below tau are untouched."""
    rng = np.random.default_rng(1)
    w_q, w_k, w_v, _ = lab.clip_inputs(rng)
    x = rng.normal(size=(2, 5, 6)) * 3.0

    def heads(w):
        return (x @ w).reshape(2, 5, 3, 4).transpose(0, 2, 1, 3)

    before = max_logits()(heads(w_q), heads(w_k))
    tau = float(np.median(before))
    new_q, new_k, _ = qk_clip()(w_q, w_k, w_v, before, tau)
    after = max_logits()(heads(new_q), heads(new_k))
    assert np.allclose(after[before > tau], tau)
    assert np.array_equal(after[before <= tau], before[before <= tau])


# ----------------------------------------------------------------------------- each bug caught

BUGS = {
    ("adaln_zero_block", "no SiLU on the conditioning"): adaln(no_silu=True),
    ("adaln_zero_block", "scale without the 1 +"): adaln(no_one=True),
    ("adaln_zero_block", "shift and scale swapped"): adaln(order="scale shift gate"),
    ("adaln_zero_block", "gate taken first"): adaln(order="gate shift scale"),
    ("adaln_zero_block", "no gate"): adaln(gate="none"),
    ("adaln_zero_block", "gate on the residual too"): adaln(gate="everything"),
    ("adaln_zero_block", "modulated before the norm"): adaln(modulate_first=True),
    ("adaln_zero_block", "RMSNorm instead of LayerNorm"): adaln(rms=True),
    ("adaln_zero_init", "gate not zeroed"): adaln_init(which=()),
    ("adaln_zero_init", "shift zeroed instead of the gate"): adaln_init(which=(0,)),
    ("adaln_zero_init", "scale zeroed instead of the gate"): adaln_init(which=(1,)),
    ("adaln_zero_init", "only the bias zeroed"): adaln_init(weight_too=False),
    ("adaln_zero_init", "only the weight zeroed"): adaln_init(bias_too=False),
    ("adaln_zero_init", "rows zeroed instead of columns"): adaln_init(rows=True),
    ("gated_rmsnorm", "norm_before_gate ignored: gated after the norm"): gated(order="after"),
    ("gated_rmsnorm", "norm_before_gate ignored: gated before the norm"): gated(order="before"),
    ("gated_rmsnorm", "group size ignored"): gated(groups="whole"),
    ("gated_rmsnorm", "groups interleaved"): gated(groups="interleaved"),
    ("gated_rmsnorm", "sigmoid gate"): gated(gate="sigmoid"),
    ("gated_rmsnorm", "gate without SiLU"): gated(gate="z"),
    ("gated_rmsnorm", "eps outside the root"): gated(eps_outside=True),
    ("grn_forward", "norm over the channels"): grn(axes=(3,)),
    ("grn_forward", "channels-first axes"): grn(axes=(2, 3)),
    ("grn_forward", "squared norm"): grn(squared=True),
    ("grn_forward", "divided by the sum over channels"): grn(total="sum"),
    ("grn_forward", "no residual"): grn(residual=False),
    ("conv_bn_eval", "batch statistics"): conv_bn(batch_stats=True),
    ("conv_bn_eval", "conv bias forgotten"): conv_bn(no_bias=True),
    ("conv_bn_eval", "eps outside the root"): conv_bn(eps_outside=True),
    ("fold_batchnorm", "conv bias forgotten"): fold(no_conv_bias=True),
    ("fold_batchnorm", "running mean forgotten"): fold(no_mean=True),
    ("fold_batchnorm", "bias not scaled"): fold(unscaled=True),
    ("fold_batchnorm", "no square root"): fold(no_sqrt=True),
    ("fold_batchnorm", "eps outside the root"): fold(eps_outside=True),
    ("fold_batchnorm", "scaled along the input channels"): fold(input_axis=True),
    ("derf_forward", "tanh instead of erf"): derf(kind="tanh"),
    ("derf_forward", "Gaussian CDF instead of erf"): derf(kind="cdf"),
    ("derf_forward", "shift outside erf"): derf(shift_outside=True),
    ("derf_forward", "shift scaled by alpha"): derf(shift_scaled=True),
    ("derf_forward", "no affine"): derf(affine=False),
    ("qk_max_logits", "no 1/sqrt(head_dim)"): max_logits(scaled=False),
    ("qk_max_logits", "not causal"): max_logits(causal=False),
    ("qk_max_logits", "largest absolute logit"): max_logits(absolute=True),
    ("qk_clip", "V clipped too"): qk_clip(values=True),
    ("qk_clip", "every head by the largest logit's factor"): qk_clip(heads="largest"),
    ("qk_clip", "heads below tau rescaled"): qk_clip(heads="all"),
    ("qk_clip", "all on W_q"): qk_clip(only_q=True),
    ("qk_clip", "sqrt missed"): qk_clip(power=1.0),
    ("qk_clip", "factor inverted"): qk_clip(inverted=True),
    ("qk_clip", "heads interleaved"): qk_clip(interleaved=True),
}


def test_every_probe_has_a_bug_written_here():
    named = {(function, probe.name) for function, probes in lab.PROBES.items() for probe in probes}
    assert named == set(BUGS)


@pytest.mark.parametrize("function, probe", sorted(BUGS), ids="/".join)
def test_each_bug_is_caught_with_its_hint(function, probe):
    assert_caught(run(**{function: BUGS[function, probe]}), lab.PROBES[function], probe)


def test_a_bug_no_probe_names_still_fails():
    def off_by_a_little(x, alpha, shift, weight, bias):
        return derf()(x, alpha, shift, weight, bias) * 1.001

    results = run(derf_forward=off_by_a_little)
    assert sum(r.points for r in results) == 0


# ----------------------------------------------------------------------------- multiple choice


@pytest.mark.parametrize(
    "name, wrong",
    [("ADALN_GRAD_ANSWER", "a"), ("ADALN_GRAD_ANSWER", "d"), ("FOLD_ANSWER", "b"),
     ("QK_CLIP_ANSWER", "b"), ("QK_CLIP_ANSWER", "d")],
)  # fmt: skip
def test_a_wrong_letter_gets_its_misconception(name, wrong):
    why = getattr(lab, name.replace("_ANSWER", "_WHY"))
    text = messages(run(**{name: wrong}))
    assert why[wrong] in text


def test_two_letters_are_told_so():
    text = messages(run(FOLD_ANSWER="d or c"))
    assert text and "d" in text
