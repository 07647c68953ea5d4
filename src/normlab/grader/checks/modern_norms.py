"""Checks for lab 09, the norms of current transformers: QK-norm, (1 + gamma) and casts, placements.

The learner writes, in PyTorch::

    qknorm_attention(q, k, v, gamma_q, gamma_k, cos, sin, eps=1e-6) -> out   # (B, H, L, hd)
    policy_rmsnorm(x, weight, eps=1e-6, offset=False, multiply_in_float32=True) -> y
    residual_sublayer(placement, x, sublayer, norm_in, norm_out, layer) -> new x
    QK_BOUND_ANSWER, DECAY_ANSWER, NGPT_ANSWER                               # practice problems

The grader reaches them through the lab's adapters, whose arguments are arrays (sent as
tensors), strings and numbers: ``qknorm_attention`` itself, ``qknorm_grads`` (autograd through
it), ``policy_rmsnorm_bf16`` (bfloat16 in, the bfloat16 result back as float32) and
``sublayer_output`` (one residual sub-layer with weights the grader chose). The oracle is
PyTorch (``F.rms_norm``, ``F.scaled_dot_product_attention``, autograd), written here
independently of the lab's code; float64 except where bfloat16 is the point.
"""

from __future__ import annotations

import numpy as np

from normlab.grader.cases import Args, Graded, backward, graded_per_case, probe_table, tensor64
from normlab.grader.core import AsTorch, CheckFailed, Lab
from normlab.grader.forbidden import from_scratch
from normlab.grader.probes import Probe, array_of, choice

LAB = Lab(
    stem="09_modern_norms",
    title="The norms of current transformers",
    torch=True,  # written in PyTorch: the sandbox does not hide it
    forbidden=from_scratch(
        "qknorm_attention", "qknorm_grads", "policy_rmsnorm_bf16", "sublayer_output"
    ),
)

EPS = 1e-6
TENSOR = ("tensor",)
# A bfloat16 answer may differ from the oracle's by one unit in the last place (ulp) in a few
# values: the float32 stage before the one rounding differs by ~1e-7 between right programs
# (mean or sum / d, rsqrt or 1 / sqrt), which can move a value across a bfloat16 rounding
# boundary. The two cast orders differ far more: casting first leaves 26% to 36% of the values
# off the correctly rounded one (notebooks/09_modern_norms.ipynb, section 2), and
# tests/test_modern_norms_checks.py asserts the margin on the checks' own inputs.
BF16_MAX_ULPS = 1.0
BF16_OFF_FRACTION = 0.01
BF16_SAME = 0.01  # ulps: closer than this counts as the same value


def _t(a):
    return tensor64(a)


# ----------------------------------------------------------------------------- QK-norm oracle


def _rotate_half(x):
    torch = _torch()
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _torch():
    import torch

    return torch


def _rope(x, cos, sin):
    return x * cos + _rotate_half(x) * sin


def _rms(x, gamma, over):
    """RMSNorm of x (B, H, L, hd) over ``over`` ("head_dim", "heads" or "all"), then * gamma."""
    import torch.nn.functional as F

    if over == "head_dim":
        normed = F.rms_norm(x, (x.shape[-1],), eps=EPS)
    elif over == "heads":
        normed = F.rms_norm(x.transpose(1, -1), (x.shape[1],), eps=EPS).transpose(1, -1)
    else:  # every head of a token together, as OLMo 2's q_norm does over num_heads * head_dim
        moved = x.transpose(1, 2)
        normed = F.rms_norm(moved, tuple(moved.shape[-2:]), eps=EPS).transpose(1, 2)
    return normed * gamma


def _qk_variant(over="head_dim", shared=False, rope_first=False, qk_norm=True, scaled=True,
                causal=True, swapped=False):  # fmt: skip
    def attention(q, k, v, gamma_q, gamma_k, cos, sin, eps=EPS):
        import torch.nn.functional as F

        q, k, v, gamma_q, gamma_k, cos, sin = map(_t, (q, k, v, gamma_q, gamma_k, cos, sin))
        if shared:
            gamma_k = gamma_q
        if swapped:
            gamma_q, gamma_k = gamma_k, gamma_q
        if rope_first:
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        if qk_norm:
            q, k = _rms(q, gamma_q, over), _rms(k, gamma_k, over)
        if not rope_first:
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        scale = None if scaled else 1.0
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale).numpy()

    return attention


oracle_qknorm_attention = _qk_variant()

QK_PROBES = [
    Probe(
        "normalized over the heads",
        "This matches an RMSNorm over dim=1, the heads: each head_dim coordinate was divided by "
        "its RMS across heads. QK-norm normalizes each head's query and key vector over its own "
        "head_dim (the last dimension), as Qwen3's q_norm and k_norm do.",
        _qk_variant(over="heads"),
    ),
    Probe(
        "normalized over all heads together",
        "This matches one RMSNorm over every head of a token at once (heads and head_dim "
        "together). OLMo 2 normalizes that way, with a gain of size heads * head_dim; this "
        "function normalizes each head on its own, over head_dim only.",
        _qk_variant(over="all"),
    ),
    Probe(
        "one gamma shared by q and k",
        "This matches the key normalized with gamma_q: the model has two gains, q_norm's and "
        "k_norm's. Multiply the normalized keys by gamma_k.",
        _qk_variant(shared=True),
    ),
    Probe(
        "gammas swapped",
        "This matches q scaled by gamma_k and k by gamma_q: gamma_q belongs to the queries.",
        _qk_variant(swapped=True),
    ),
    Probe(
        "rotary embedding before the norm",
        "This matches rotating q and k first and normalizing after. The cited models normalize "
        "first (q_norm, k_norm on the projected heads) and rotate after; with a gain that is "
        "not constant the two orders differ. Normalize, then apply the rotary embedding.",
        _qk_variant(rope_first=True),
    ),
    Probe(
        "no QK-norm",
        "This matches plain attention with the rotary embedding but without normalizing q and "
        "k: apply the RMSNorm (with gamma_q, gamma_k) to each head's q and k first.",
        _qk_variant(qk_norm=False),
    ),
    Probe(
        "no 1/sqrt(head_dim)",
        "This matches scores q k^T without the 1/sqrt(head_dim) factor: QK-norm does not "
        "replace the scaling; divide the scores by sqrt(head_dim).",
        _qk_variant(scaled=False),
    ),
    Probe(
        "not causal",
        "This matches attention without the causal mask: position i may attend only to "
        "positions 0..i (mask the future with -inf before the softmax).",
        _qk_variant(causal=False),
    ),
]


def _qk_grads_variant(detached):
    def grads(q, k, v, gamma_q, gamma_k, cos, sin, dy):
        import torch.nn.functional as F

        leaves = [_t(a).requires_grad_(True) for a in (q, k, v, gamma_q, gamma_k)]
        qt, kt, vt, gq, gk = leaves
        cos, sin = _t(cos), _t(sin)

        def norm(x, gamma):
            rms = (x.pow(2).mean(-1, keepdim=True) + EPS).sqrt()
            return x / (rms.detach() if detached else rms) * gamma

        qn, kn = _rope(norm(qt, gq), cos, sin), _rope(norm(kt, gk), cos, sin)
        backward(F.scaled_dot_product_attention(qn, kn, vt, is_causal=True), dy)
        return tuple(leaf.grad.numpy() for leaf in leaves)

    return grads


oracle_qknorm_grads = _qk_grads_variant(detached=False)

QK_GRAD_PROBES = [
    Probe(
        "RMS detached",
        "dq matches a QK-norm whose RMS was cut off from autograd (.detach(), .item() or "
        "torch.no_grad() around it). The RMS depends on every coordinate of q, so the gradient "
        "must flow through it: compute it with torch operations on q itself.",
        _qk_grads_variant(detached=True),
    ),
]


# ----------------------------------------------------------------------------- (1 + gamma), casts


def bf16_values(a):
    """a rounded to bfloat16, as float32 (every bfloat16 value is a float32 value)."""
    torch = _torch()
    return torch.as_tensor(np.asarray(a, np.float32)).bfloat16().float().numpy()


def _policy_variant(offset_as="asked", order="asked", upcast=True, cast_back=True):
    """The RMSNorm of bfloat16 x and weight under a convention and a cast order.

    offset_as: "asked", "twice" (2 + w), "never", "always" or "rounded" (1 + w computed in
    bfloat16, then widened for the float32 multiply); order: "asked" or "swapped"."""

    def norm(x, weight, eps=EPS, offset=False, multiply_in_float32=True):
        import torch.nn.functional as F

        torch = _torch()
        x = torch.as_tensor(np.asarray(x, np.float32)).bfloat16()
        weight = torch.as_tensor(np.asarray(weight, np.float32)).bfloat16()
        use_offset = {"asked": offset, "never": False, "always": True, "twice": offset,
                      "rounded": offset}[offset_as]  # fmt: skip
        add = 2.0 if (offset_as == "twice" and offset) else 1.0
        in_float32 = multiply_in_float32 if order == "asked" else not multiply_in_float32
        if not upcast:
            normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
            gain = add + weight if use_offset else weight
            return (normed * gain).float().numpy()
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=eps)
        if in_float32:
            gain = add + weight.float() if use_offset else weight.float()
            if offset_as == "rounded" and use_offset:
                gain = (add + weight).float()  # 1 + w rounded to bfloat16 first
            y = normed * gain
            return (y.bfloat16() if cast_back else y).float().numpy()
        gain = add + weight if use_offset else weight  # bfloat16 arithmetic, one rounding
        return (gain * normed.bfloat16()).float().numpy()

    return norm


oracle_policy_rmsnorm = _policy_variant()

POLICY_PROBES = [
    Probe(
        "offset applied twice",
        "This matches a gain of 2 + weight: the offset was added twice (weight already stored "
        "as 1 + offset, or 1 added in two places). With offset=True the stored weight is the "
        "offset from 1, so the gain is 1 + weight, once.",
        _policy_variant(offset_as="twice"),
    ),
    Probe(
        "offset ignored",
        "This matches a gain of weight where offset=True asks for 1 + weight: Gemma's weight "
        "starts at 0 and stores the gain's offset from 1.",
        _policy_variant(offset_as="never"),
    ),
    Probe(
        "offset always applied",
        "This matches a gain of 1 + weight where offset=False asks for weight itself (Llama's "
        "convention: the weight starts at 1 and is the gain).",
        _policy_variant(offset_as="always"),
    ),
    Probe(
        "1 + weight rounded to bfloat16",
        "This matches a gain 1 + weight computed in bfloat16 and only then widened for the "
        "float32 multiply: near 1 bfloat16's spacing is 2**-7 = 0.0078, so 1 + weight loses "
        "most of a small weight's digits, the very loss that storing the offset avoids. Widen "
        "weight to float32 first, then add 1: 1.0 + weight.float().",
        _policy_variant(offset_as="rounded"),
    ),
    Probe(
        "wrong cast order",
        "This matches the other cast order. multiply_in_float32=True (Gemma): multiply the "
        "float32 normalized x by the float32 gain, then cast once to x's dtype. False (Llama): "
        "cast the normalized x to x's dtype first, then multiply by the gain in that dtype.",
        _policy_variant(order="swapped"),
    ),
    Probe(
        "no float32 stage",
        "This matches an RMSNorm computed entirely in bfloat16: the mean of squares and the "
        "division lose precision there. Convert x to float32 (or wider) before the norm.",
        _policy_variant(upcast=False),
    ),
    Probe(
        "not cast back",
        "This matches the float32 result returned as it is: cast the output back to x's dtype "
        "(the model's activations stay in bfloat16).",
        _policy_variant(cast_back=False),
    ),
]


def bf16_ulps(got, expected):
    """|got - expected| in units in the last place of bfloat16 at expected's magnitude."""
    expected = np.asarray(expected, np.float64)
    exponent = np.floor(np.log2(np.maximum(np.abs(expected), np.finfo(np.float32).tiny)))
    return np.abs(np.asarray(got, np.float64) - expected) / 2.0 ** (exponent - 7)


def bf16_close(got, expected) -> bool:
    distance = bf16_ulps(got, expected)
    return bool(
        np.all(np.isfinite(got))
        and distance.max() <= BF16_MAX_ULPS
        and np.mean(distance >= BF16_SAME) <= BF16_OFF_FRACTION
    )


def _expect_bf16(sub, args, what):
    out = args.call(sub, "policy_rmsnorm_bf16")
    got = array_of(out, what, kinds=TENSOR)
    expected = args.apply(oracle_policy_rmsnorm)
    if got.shape != expected.shape:
        raise CheckFailed(f"{what}: shape is {got.shape} but should be {expected.shape}")
    if bf16_close(got, expected):
        return
    distance = bf16_ulps(got, expected)
    off = int(np.sum(distance >= BF16_SAME))
    message = (
        f"{what}: {off} of {got.size} values differ from the reference, by up to "
        f"{float(np.nanmax(distance)):.3g} units in the last place of bfloat16"
    )
    told = [p for p, wrong in args.evaluate(POLICY_PROBES) if bf16_close(got, wrong)]
    if told:
        message += f"\nWhy: {told[0].hint}"
    raise CheckFailed(message, [p.name for p in told[:1]])


# ----------------------------------------------------------------------------- placements


def oracle_rmsnorm(x, gamma):
    import torch.nn.functional as F

    return F.rms_norm(x, (x.shape[-1],), gamma, EPS)


# One residual sub-layer: (x, G, N_in, N_out, layer) -> new x. The right rules, then the wrong.
RULES = {
    "pre": lambda x, G, Ni, No, n: x + G(Ni(x)),
    "post": lambda x, G, Ni, No, n: No(x + G(x)),
    "peri": lambda x, G, Ni, No, n: x + No(G(Ni(x))),
    "olmo2": lambda x, G, Ni, No, n: x + No(G(x)),
    "scaled": lambda x, G, Ni, No, n: x + G(Ni(x) / n**0.5),
    "peri, output norm after the addition": lambda x, G, Ni, No, n: No(x + G(Ni(x))),
    "no norm": lambda x, G, Ni, No, n: x + G(x),
    "scaled by 1/layer": lambda x, G, Ni, No, n: x + G(Ni(x) / n),
    "scaled by sqrt(layer)": lambda x, G, Ni, No, n: x + G(Ni(x) * n**0.5),
    "scaled output": lambda x, G, Ni, No, n: x + G(Ni(x)) / n**0.5,
}


def oracle_sublayer(rule, layer, x, w_up, w_down, gamma_in, gamma_out):
    import torch.nn.functional as F

    x, w_up, w_down, gamma_in, gamma_out = map(_t, (x, w_up, w_down, gamma_in, gamma_out))
    return RULES[rule](
        x,
        lambda v: F.silu(v @ w_up) @ w_down,  # not homogeneous, unlike ReLU: scaling shows
        lambda v: oracle_rmsnorm(v, gamma_in),
        lambda v: oracle_rmsnorm(v, gamma_out),
        layer,
    ).numpy()


def oracle_sublayer_output(placement, layer, x, w_up, w_down, gamma_in, gamma_out):
    return oracle_sublayer(placement, layer, x, w_up, w_down, gamma_in, gamma_out)


def _step_probe(name, hint, rule):
    def compute(placement, layer, x, w_up, w_down, gamma_in, gamma_out):
        return oracle_sublayer(rule, layer, x, w_up, w_down, gamma_in, gamma_out)

    return Probe(name, hint, compute)


SUBLAYER_PROBES = [
    _step_probe(
        "peri: output norm missing",
        "This is Pre-LN, x + G(N_in(x)). Peri-LN (Kim et al. 2025) also normalizes the "
        "sub-layer's output before adding it: x + N_out(G(N_in(x))).",
        "pre",
    ),
    _step_probe(
        "peri: output norm after the addition",
        "This matches N_out(x + G(N_in(x))): the sum was normalized, which puts a norm on the "
        "residual stream itself. Peri-LN normalizes the branch only: x + N_out(G(N_in(x))).",
        "peri, output norm after the addition",
    ),
    _step_probe(
        "peri: input norm missing",
        "This matches x + N_out(G(x)), OLMo 2's placement. Peri-LN normalizes the input too: "
        "x + N_out(G(N_in(x))).",
        "olmo2",
    ),
    _step_probe(
        "olmo2: input norm added",
        "This matches x + N_out(G(N_in(x))), Peri-LN. OLMo 2's decoder layer feeds the "
        "sub-layer the raw stream and normalizes only its output: x + N_out(G(x)).",
        "peri",
    ),
    _step_probe(
        "olmo2: norm after the addition",
        "This matches N_out(x + G(x)), Post-LN. OLMo 2 normalizes the sub-layer's output "
        "before the addition, so the residual stream itself is never normalized: "
        "x + N_out(G(x)).",
        "post",
    ),
    _step_probe(
        "olmo2: no norm",
        "This matches x + G(x) with no norm at all: normalize the sub-layer's output with "
        "N_out before adding it.",
        "no norm",
    ),
    _step_probe(
        "scaled: by 1/layer",
        "This divides the norm's output by the layer index itself: LayerNorm scaling divides "
        "by the square root of the layer index, N_in(x) / sqrt(layer).",
        "scaled by 1/layer",
    ),
    _step_probe(
        "scaled: by sqrt(layer)",
        "This multiplies by sqrt(layer): deeper layers should get a SMALLER normalized input, "
        "N_in(x) / sqrt(layer).",
        "scaled by sqrt(layer)",
    ),
    _step_probe(
        "scaled: the sub-layer's output",
        "This matches x + G(N_in(x)) / sqrt(layer): the scaling belongs to the norm's output, "
        "inside the sub-layer's input: x + G(N_in(x) / sqrt(layer)).",
        "scaled output",
    ),
    _step_probe(
        "scaled: no scaling",
        "This is plain Pre-LN: divide the norm's output by sqrt(layer) before the sub-layer.",
        "pre",
    ),
    _step_probe(
        "pre: post instead",
        "This matches Post-LN, N_out(x + G(x)). Pre-LN normalizes only the sub-layer's input "
        "and adds the untouched x: x + G(N_in(x)).",
        "post",
    ),
    _step_probe(
        "post: pre instead",
        "This matches Pre-LN, x + G(N_in(x)). Post-LN normalizes after the addition, with "
        "N_out: N_out(x + G(x)).",
        "pre",
    ),
]


def torch_args(*args, **kwargs):
    """``Args`` whose arrays reach the learner as float64 tensors (the oracle and the probes get
    the arrays); strings and numbers stay as they are."""
    tensors = [AsTorch(np.asarray(a, np.float64)) if isinstance(a, np.ndarray) else a for a in args]
    return Args(*tensors, **kwargs)


def float32_args(*args, **kwargs):
    """``Args`` whose arrays reach the learner as float32 tensors (holding bfloat16 values)."""
    tensors = [AsTorch(np.asarray(a, np.float32)) if isinstance(a, np.ndarray) else a for a in args]
    return Args(*tensors, **kwargs)


QKNORM = Graded("qknorm_attention", oracle_qknorm_attention, QK_PROBES, options={"kinds": TENSOR})
QK_GRADS = Graded(
    "qknorm_grads",
    oracle=oracle_qknorm_grads,
    probes=QK_GRAD_PROBES,
    items=("dq", "dk", "dv", "dgamma_q", "dgamma_k"),
    options={
        "kinds": TENSOR,
        "hint": "Build every step from torch operations on q, k and the gains so that "
        "autograd sees each dependence.",
    },
)
SUBLAYER = graded_per_case(
    "sublayer_output",
    oracle_sublayer_output,
    SUBLAYER_PROBES,
    ("pre", "post", "peri", "olmo2", "scaled"),
    prefix=False,
    options={"kinds": TENSOR},
)

PROBES = probe_table(
    QKNORM, QK_GRADS, policy_rmsnorm_bf16=POLICY_PROBES, sublayer_output=SUBLAYER_PROBES
)


# ----------------------------------------------------------------------------- inputs


def rotary_tables(length, head_dim, base=10000.0):
    """cos, sin: (length, head_dim), the rotary tables of Llama-style code (halves repeated)."""
    inv_freq = 1.0 / base ** (np.arange(0, head_dim, 2) / head_dim)
    angles = np.outer(np.arange(length), inv_freq)
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles), np.sin(angles)


def qk_inputs(rng, batch=2, heads=3, length=5, head_dim=8):
    """q, k, v of shape (B, H, L, hd) with rows of varied scale, two gains, the rotary tables."""
    shape = (batch, heads, length, head_dim)
    scales = np.exp(rng.uniform(np.log(0.1), np.log(20.0), size=shape[:-1] + (1,)))
    q, k = rng.normal(size=shape) * scales, rng.normal(size=shape) * scales[:, ::-1]
    v = rng.normal(size=shape)
    gamma_q, gamma_k = rng.normal(1.0, 0.4, size=head_dim), rng.normal(1.0, 0.4, size=head_dim)
    return (q, k, v, gamma_q, gamma_k, *rotary_tables(length, head_dim))


# ----------------------------------------------------------------------------- QK-norm checks


@LAB.check(points=3, uses=["qknorm_attention"], seed=90)
def qknorm_forward(sub, rng):
    """QK-norm attention: RMSNorm of each head over head_dim, then rotary, then causal softmax"""
    for shape in [(2, 3, 5, 8), (1, 4, 6, 4)]:
        batch, heads, length, head_dim = shape
        args = torch_args(*qk_inputs(rng, batch, heads, length, head_dim), eps=EPS)
        QKNORM.expect(sub, args, what=f"q, k, v of shape {shape}")


@LAB.check(points=1, uses=["qknorm_attention"], seed=91)
def qknorm_scale_invariance(sub, rng):
    """QK-norm attention: the output does not change when q and k are scaled"""
    q, k, *rest = qk_inputs(rng)
    args = torch_args(q * 1000.0, k * 0.001, *rest, eps=EPS)
    QKNORM.expect(sub, args, what="q scaled by 1000 and k by 0.001")


@LAB.check(points=2, uses=["qknorm_grads"], seed=92, needs=["qknorm_attention"])
def qknorm_backward(sub, rng):
    """gradients flow through QK-norm (dq, dk, dv, dgamma_q, dgamma_k)"""
    inputs = qk_inputs(rng)
    dy = rng.normal(size=inputs[0].shape)
    QK_GRADS.expect(sub, torch_args(*inputs, dy), what="q, k, v of shape (2, 3, 5, 8)")


# ----------------------------------------------------------------------------- policy checks


def _policy_case(rng, rows, d, offset):
    x = bf16_values(rng.normal(size=(rows, d)) * np.exp(rng.uniform(-3, 3, size=(rows, 1))))
    weight = rng.normal(0.0, 0.05, size=d) if offset else rng.normal(1.0, 0.3, size=d)
    return x, bf16_values(weight)


def _expect_policy(sub, rng, *, offset, in_float32, eps=EPS):
    """policy_rmsnorm_bf16 on bfloat16 x of shape (32, 64), in one convention and cast order."""
    x, weight = _policy_case(rng, 32, 64, offset=offset)
    args = float32_args(x, weight, eps=eps, offset=offset, multiply_in_float32=in_float32)
    shown_eps = "" if eps == EPS else f"eps={eps:g}, "
    _expect_bf16(
        sub,
        args,
        f"bfloat16 x (32, 64), {shown_eps}offset={offset}, multiply_in_float32={in_float32}",
    )


@LAB.check(points=1, uses=["policy_rmsnorm_bf16"], seed=93)
def policy_llama(sub, rng):
    """policy_rmsnorm, Llama's convention: gain = weight, cast before the multiply"""
    _expect_policy(sub, rng, offset=False, in_float32=False)


@LAB.check(points=2, uses=["policy_rmsnorm_bf16"], seed=94)
def policy_gemma(sub, rng):
    """policy_rmsnorm, Gemma's convention: gain = 1 + weight, multiplied in float32"""
    _expect_policy(sub, rng, offset=True, in_float32=True)


@LAB.check(points=1, uses=["policy_rmsnorm_bf16"], seed=95)
def policy_mixed(sub, rng):
    """policy_rmsnorm: the other two combinations of convention and cast order"""
    for offset, in_float32 in [(True, False), (False, True)]:
        _expect_policy(sub, rng, offset=offset, in_float32=in_float32, eps=1e-3)


# ----------------------------------------------------------------------------- placement checks


def _sublayer_case(sub, placement, layer, seed):
    rng = np.random.default_rng(seed)
    d, d_ff = 8, 16
    x = rng.normal(size=(2, 5, d)) * 2 + 0.5
    w_up = rng.normal(0, 1 / np.sqrt(d), size=(d, d_ff))
    w_down = rng.normal(0, 1 / np.sqrt(d_ff), size=(d_ff, d))
    gamma_in, gamma_out = rng.normal(1, 0.3, size=d), rng.normal(1, 0.3, size=d)
    args = torch_args(placement, layer, x, w_up, w_down, gamma_in, gamma_out)
    what = f"sublayer_output('{placement}', layer={layer}), x of shape (2, 5, {d})"
    SUBLAYER[placement].expect(sub, args, what=what)


@LAB.check(points=1, uses=["sublayer_output"])
def sublayer_pre_post(sub):
    """residual_sublayer: Pre-LN and Post-LN as in chapter 06"""
    _sublayer_case(sub, "pre", 1, seed=96)
    _sublayer_case(sub, "post", 1, seed=97)


@LAB.check(points=2, uses=["sublayer_output"])
def sublayer_peri(sub):
    """residual_sublayer: Peri-LN, x + N_out(G(N_in(x)))"""
    _sublayer_case(sub, "peri", 1, seed=98)


@LAB.check(points=2, uses=["sublayer_output"])
def sublayer_olmo2(sub):
    """residual_sublayer: OLMo 2's placement, x + N_out(G(x))"""
    _sublayer_case(sub, "olmo2", 1, seed=99)


@LAB.check(points=2, uses=["sublayer_output"])
def sublayer_scaled(sub):
    """residual_sublayer: LayerNorm scaling, x + G(N_in(x) / sqrt(layer))"""
    for layer, seed in [(4, 100), (9, 101)]:
        _sublayer_case(sub, "scaled", layer, seed=seed)


# ----------------------------------------------------------------------------- practice problems

QK_BOUND_WHY = {
    "b": "1 would hold if q and k were unit vectors and there were no 1/sqrt(head_dim): RMSNorm "
    "gives each vector length sqrt(head_dim), not 1.",
    "c": "64 is q_hat . k_hat before the division: the scores are divided by sqrt(head_dim) = 8.",
    "d": "The norm fixes each vector's length whatever q and k were, so the score cannot grow "
    "with them; only the gains can make it larger.",
}


choice(
    LAB,
    "problem 1: the largest attention logit under QK-norm (multiple choice)",
    points=1,
    name="QK_BOUND_ANSWER",
    key="a",
    hint="Find the length of an RMS-normalized vector of head_dim coordinates, then bound "
    "the dot product of two of them (Cauchy-Schwarz) and divide by sqrt(head_dim).",
    why=QK_BOUND_WHY,
)


DECAY_WHY = {
    "a": "Decay shrinks the stored parameter towards 0 in both models; what differs is the gain "
    "that parameter stands for.",
    "b": "This is the other way round: Llama's stored weight IS the gain, so decaying it "
    "shrinks the gain towards 0; Gemma's stored offset decays towards 0, the gain towards 1.",
    "d": "Weight decay multiplies the stored parameter by (1 - lr * decay) each step whatever "
    "it means, so it does act on both gains.",
}


choice(
    LAB,
    "problem 2: what weight decay does to weight and to 1 + weight (multiple choice)",
    points=1,
    name="DECAY_ANSWER",
    key="c",
    hint="Decay pulls the STORED parameter towards 0. Work out the gain each model "
    "computes from a stored parameter of 0.",
    why=DECAY_WHY,
)


NGPT_WHY = {
    "a": "nGPT has no LayerNorm or RMSNorm layers: it normalizes the vectors themselves, the "
    "hidden states and the rows of the weight matrices, to length 1.",
    "b": "nGPT's hidden state is renormalized after every update, so its length stays 1 "
    "through depth instead of growing like a Pre-LN residual stream.",
    "c": "The weights are normalized too, not only the hidden states: every embedding and every "
    "row of the attention and MLP matrices lies on the unit sphere.",
}


choice(
    LAB,
    "problem 3: what the normalized transformer keeps on the unit sphere (multiple choice)",
    points=1,
    name="NGPT_ANSWER",
    key="d",
    hint="Reread the chapter's section on nGPT: which vectors does it normalize, and after "
    "which step?",
    why=NGPT_WHY,
)
