"""Checks for lab 06, Pre-LN vs Post-LN: the norms in torch, the two blocks, the stack, warmup.

The learner writes, in PyTorch, differentiable by autograd::

    scratch_layernorm(x, gamma, beta, eps=1e-5) -> y        # x: (..., d) tensor
    scratch_rmsnorm(x, gamma, eps=1e-6) -> y
    PostLNBlock.forward, PreLNBlock.forward, BlockStack.forward   # nn.Modules
    linear_warmup_lr(step, base_lr, warmup_steps) -> lr        # practice problem 1
    POSTLN_FIXES = "..."                                       # practice problem 1

The grader talks to modules only through the lab's adapter functions, whose arguments are arrays
(sent as tensors), strings and ints: ``scratch_layernorm_grads``, ``block_output``,
``stack_output`` and ``stack_grads`` build the learner's modules, load the given weights and
return outputs or gradients. The oracle is PyTorch in float64 (``F.layer_norm``, ``F.rms_norm``,
``F.scaled_dot_product_attention``, autograd), written here independently of the lab's code.
Weight matrices are in "math" layout, ``y = x @ w``.
"""

from __future__ import annotations

import re

import numpy as np

from normlab.grader import keys
from normlab.grader.cases import (
    Args,
    Graded,
    backward,
    probe_table,
    tensor64,
    warmup_rate,
)
from normlab.grader.cases import rows_with_varied_scale as _rows_with_varied_scale
from normlab.grader.core import AsTorch, CheckFailed, Lab
from normlab.grader.forbidden import from_scratch
from normlab.grader.probes import Probe, expect_value, item_of

LIBRARY_BLOCKS = ["torch.nn.TransformerEncoderLayer", "torch.nn.TransformerDecoderLayer"]

LAB = Lab(
    stem="06_pre_post_ln",
    title="Pre-LN vs Post-LN",
    torch=True,  # written in PyTorch: the sandbox does not hide it
    forbidden=from_scratch(
        "scratch_layernorm",
        "scratch_layernorm_grads",
        "scratch_rmsnorm",
        block_output=LIBRARY_BLOCKS,
        stack_output=LIBRARY_BLOCKS,
        stack_grads=LIBRARY_BLOCKS,
    ),
)

LN_EPS, RMS_EPS = 1e-5, 1e-6
TENSOR = ("tensor",)
D_MODEL, N_HEADS, D_FF = 8, 2, 16

# What the chapter's demo measured (notebooks/06_pre_post_ln.ipynb, sections (d)-(e)): the
# candidate single changes, by letter, that brought the 12-block Post-LN run below loss 0.5 by
# step 200 on every seed. Warmup and clipping left every seed above 1.0.
FIX_CANDIDATES = {
    "a": "warmup: the learning rate rises linearly from 0 over the first 50 steps",
    "b": "Pre-LN: each sub-layer normalizes its input; one more LN after the last block",
    "c": "DeepNorm: the skip path weighted by alpha, branch weights initialized smaller",
    "d": "small init: each branch's output projection divided by sqrt(2N) at the start",
    "e": "clipping: the gradient's global norm capped at 1.0 before each Adam step",
}
MEASURED_FIXES = "bcd"


def _torch():
    import torch

    return torch


_t = tensor64  # a float64 tensor; a tensor stays itself (it may be a leaf that autograd tracks)


def _as_array(oracle):
    """``oracle``, returning a NumPy array instead of a tensor."""
    return lambda *args, **kwargs: oracle(*args, **kwargs).numpy()


# ----------------------------------------------------------------------------- oracle: norms


def oracle_layernorm(x, gamma, beta, eps=LN_EPS):
    import torch.nn.functional as F

    x = _t(x)
    return F.layer_norm(x, (x.shape[-1],), _t(gamma), _t(beta), eps)


def oracle_rmsnorm(x, gamma, eps=RMS_EPS):
    import torch.nn.functional as F

    x = _t(x)
    return F.rms_norm(x, (x.shape[-1],), _t(gamma), eps)


def oracle_layernorm_grads(x, gamma, beta, dy):
    leaves = [_t(a).requires_grad_(True) for a in (x, gamma, beta)]
    backward(oracle_layernorm(*leaves), dy)
    return tuple(leaf.grad.numpy() for leaf in leaves)


# ----------------------------------------------------------------------------- probes: norms


def _ln_variant(ddof=0, eps_where="inside", dim=-1, affine="normal"):
    def forward(x, gamma, beta, eps=LN_EPS):
        x = _t(x)
        mean = x.mean(dim=dim, keepdim=True)
        var = ((x - mean) ** 2).sum(dim=dim, keepdim=True) / (x.shape[dim] - ddof)
        if eps_where == "inside":
            x_hat = (x - mean) / (var + eps).sqrt()
        elif eps_where == "outside":
            x_hat = (x - mean) / (var.sqrt() + eps)
        else:
            x_hat = (x - mean) / var.sqrt()
        if affine == "none":
            return x_hat
        if affine == "swapped":
            return x_hat * _t(beta) + _t(gamma)
        return x_hat * _t(gamma) + _t(beta)

    return forward


LAYERNORM_PROBES = [
    Probe(
        "unbiased variance",
        "This matches the unbiased variance: torch's x.var() and x.std() divide by d - 1 by "
        "default. LayerNorm divides by d: use x.var(dim=-1, unbiased=False, keepdim=True) or "
        "((x - mean)**2).mean(dim=-1, keepdim=True).",
        _ln_variant(ddof=1),
    ),
    Probe(
        "eps outside the root",
        "This matches (x - mean) / (sqrt(var) + eps). Put eps inside the root: sqrt(var + eps).",
        _ln_variant(eps_where="outside"),
    ),
    Probe(
        "no eps",
        "This matches dividing by sqrt(var) with no eps: a constant row gives 0/0 = NaN.",
        _ln_variant(eps_where="none"),
    ),
    Probe(
        "wrong dim",
        "This matches statistics over dim=0 (the batch): LayerNorm normalizes each row over its "
        "features, dim=-1.",
        _ln_variant(dim=0),
    ),
    Probe(
        "affine step missing",
        "This matches x_hat without the affine step: finish with gamma * x_hat + beta.",
        _ln_variant(affine="none"),
    ),
    Probe(
        "gamma and beta swapped",
        "This matches x_hat * beta + gamma: gamma scales, beta shifts.",
        _ln_variant(affine="swapped"),
    ),
]


def _detached_grads(detach_mean, detach_var):
    def grads(x, gamma, beta, dy):
        leaves = [_t(a).requires_grad_(True) for a in (x, gamma, beta)]
        xt, gt, bt = leaves
        mean = xt.mean(dim=-1, keepdim=True)
        var = ((xt - mean) ** 2).mean(dim=-1, keepdim=True)
        if detach_mean:
            mean = mean.detach()
        if detach_var:
            var = var.detach()
        backward(gt * (xt - mean) / (var + LN_EPS).sqrt() + bt, dy)
        return tuple(leaf.grad.numpy() for leaf in leaves)

    return grads


GRAD_PROBES = [
    Probe(
        "statistics detached",
        "dx matches a LayerNorm whose mean and variance were cut off from autograd (.detach(), "
        ".item(), .numpy() or torch.no_grad() around them). Both depend on every input, so "
        "gradients must flow through them: compute them with torch operations on x itself.",
        _detached_grads(True, True),
    ),
    Probe(
        "mean detached",
        "dx matches a LayerNorm whose mean was cut off from autograd. Keep the mean a torch "
        "expression of x (no .detach(), .item() or NumPy).",
        _detached_grads(True, False),
    ),
    Probe(
        "variance detached",
        "dx matches a LayerNorm whose variance was cut off from autograd. Keep the variance a "
        "torch expression of x (no .detach(), .item() or NumPy).",
        _detached_grads(False, True),
    ),
]


def _rms_variant(centre=False, eps_where="inside", reduce="mean", use_gamma=True):
    def forward(x, gamma, eps=RMS_EPS):
        x = _t(x)
        if centre:
            x = x - x.mean(dim=-1, keepdim=True)
        square = (x**2).mean(dim=-1, keepdim=True) if reduce == "mean" else (x**2).sum(-1, True)
        if eps_where == "inside":
            y = x / (square + eps).sqrt()
        elif eps_where == "outside":
            y = x / (square.sqrt() + eps)
        else:
            y = x / (square + eps)
        return y * _t(gamma) if use_gamma else y

    return forward


RMSNORM_PROBES = [
    Probe(
        "subtracts the mean",
        "This subtracts the mean first, like LayerNorm. RMSNorm does not re-centre: divide x "
        "itself by sqrt(mean(x**2) + eps).",
        _rms_variant(centre=True),
    ),
    Probe(
        "eps outside the root",
        "This matches x / (sqrt(mean(x**2)) + eps): put eps inside the root.",
        _rms_variant(eps_where="outside"),
    ),
    Probe(
        "square root missing",
        "This divides by mean(x**2) + eps without the square root: the RMS is the ROOT of the "
        "mean square.",
        _rms_variant(eps_where="noroot"),
    ),
    Probe(
        "sum instead of mean",
        "This matches sqrt(sum(x**2)): the RMS averages the squares over the d features.",
        _rms_variant(reduce="sum"),
    ),
    Probe(
        "gamma missing",
        "This matches the normalized x without gamma: finish with gamma * x / rms.",
        _rms_variant(use_gamma=False),
    ),
]


# ----------------------------------------------------------------------------- oracle: blocks


def oracle_attention(x, w_qkv, w_out, n_heads):
    """Causal multi-head self-attention, heads taken as consecutive slices of d."""
    import torch.nn.functional as F

    batch, length, d_model = x.shape
    qkv = (x @ w_qkv).view(batch, length, 3, n_heads, d_model // n_heads)
    q, k, v = qkv.permute(2, 0, 3, 1, 4)
    mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return mixed.transpose(1, 2).reshape(batch, length, d_model) @ w_out


def oracle_feed_forward(x, w_up, w_down):
    return (x @ w_up).relu() @ w_down


def _norm_fn(norm, gamma, beta):
    if norm == "rmsnorm":
        return lambda v: oracle_rmsnorm(v, gamma)
    return lambda v: oracle_layernorm(v, gamma, beta)


# One residual sub-layer: (x, G, N) -> new x. The right rules and the known-wrong ones.
RULES = {
    "post": lambda x, G, N: N(x + G(x)),
    "pre": lambda x, G, N: x + G(N(x)),
    "post, norm inside the residual": lambda x, G, N: x + N(G(x)),
    "no residual": lambda x, G, N: N(G(x)),
    "pre, no residual": lambda x, G, N: G(N(x)),
    "residual from the normalized input": lambda x, G, N: N(x) + G(N(x)),
    "pre, norm on the output too": lambda x, G, N: N(x + G(N(x))),
}


def oracle_block(rule, norm, n_heads, x, w_qkv, w_out, w_up, w_down, gammas, betas, swap=False):
    """One block: attention then FFN sub-layer, each combined by ``RULES[rule]``."""
    norms = [_norm_fn(norm, gammas[i], betas[i]) for i in (0, 1)]
    if swap:
        norms.reverse()
    x = _t(x)
    x = RULES[rule](x, lambda v: oracle_attention(v, _t(w_qkv), _t(w_out), n_heads), norms[0])
    return RULES[rule](x, lambda v: oracle_feed_forward(v, _t(w_up), _t(w_down)), norms[1])


def oracle_stack(placement, n_heads, x, w_qkv, w_out, w_up, w_down, gammas, betas, fg, fb, final):
    """``depth`` blocks (weights stacked on axis 0); then a final LN when ``final`` is true."""
    for i in range(len(w_qkv)):
        x = oracle_block(
            placement, "layernorm", n_heads, x, w_qkv[i], w_out[i], w_up[i], w_down[i],
            gammas[i], betas[i],
        )  # fmt: skip
    return oracle_layernorm(x, fg, fb) if final else _t(x)


def _block_probe(name, hint, rule, swap=False):
    def compute(placement, norm, n_heads, x, *weights):
        return oracle_block(rule, norm, n_heads, x, *weights, swap=swap).numpy()

    return Probe(name, hint, compute)


POST_BLOCK_PROBES = [
    _block_probe(
        "pre-LN instead of post-LN",
        "This is the Pre-LN block, x + G(LN(x)). Post-LN (Vaswani et al. 2017, §3.1) normalizes "
        "AFTER the residual addition: x = LN(x + G(x)).",
        "pre",
    ),
    _block_probe(
        "norm inside the residual",
        "This matches x + LN(G(x)): the norm was applied to the sub-layer's output only. In "
        "Post-LN the norm comes after the addition, so it normalizes the sum: LN(x + G(x)).",
        "post, norm inside the residual",
    ),
    _block_probe(
        "no residual",
        "This matches LN(G(x)): the residual connection is missing. Add x before normalizing.",
        "no residual",
    ),
    _block_probe(
        "norms swapped",
        "This uses norm2 around the attention and norm1 around the feed-forward: norm1 belongs "
        "to the attention sub-layer, norm2 to the FFN.",
        "post",
        swap=True,
    ),
]

PRE_BLOCK_PROBES = [
    _block_probe(
        "post-LN instead of pre-LN",
        "This is the Post-LN block, LN(x + G(x)). Pre-LN normalizes only the sub-layer's INPUT "
        "and adds the untouched x: x = x + G(LN(x)).",
        "post",
    ),
    _block_probe(
        "residual from the normalized input",
        "This matches LN(x) + G(LN(x)): the residual was taken after the norm. The skip path "
        "must carry x itself, untouched (that is the identity highway): x + G(LN(x)).",
        "residual from the normalized input",
    ),
    _block_probe(
        "norm on the output too",
        "This matches LN(x + G(LN(x))): the sum is normalized again. In Pre-LN nothing "
        "normalizes the residual stream inside the block; that is what the final LN is for.",
        "pre, norm on the output too",
    ),
    _block_probe(
        "no residual",
        "This matches G(LN(x)) with no residual: add x back.",
        "pre, no residual",
    ),
    _block_probe(
        "norms swapped",
        "This uses norm2 before the attention and norm1 before the feed-forward: norm1 belongs "
        "to the attention sub-layer, norm2 to the FFN.",
        "pre",
        swap=True,
    ),
]


def _stack_probe(name, hint, final_for):
    def compute(placement, n_heads, x, *weights):
        return oracle_stack(placement, n_heads, x, *weights, final=placement in final_for).numpy()

    return Probe(name, hint, compute)


STACK_PROBES = [
    _stack_probe(
        "final LN missing in the Pre-LN stack",
        "This matches the Pre-LN stack without its final norm. In Pre-LN nothing normalizes "
        "the residual stream, which grows with depth; GPT-2 (§2.3) adds one LN after the last "
        "block: apply self.final_norm when placement == 'pre'.",
        final_for=(),
    ),
    _stack_probe(
        "final LN added to the Post-LN stack",
        "This applies the final norm to the Post-LN stack too. A Post-LN block already ends "
        "with a norm; the final LN belongs to Pre-LN only.",
        final_for=("pre", "post"),
    ),
]


# ----------------------------------------------------------------------------- inputs


def rows_with_varied_scale(rng, shape):
    """Rows whose scales span 0.01..10 and offsets -5..5."""
    return _rows_with_varied_scale(rng, shape, offsets_first=False)


def block_weights(rng, depth=None, d_model=D_MODEL, d_ff=D_FF):
    """(w_qkv, w_out, w_up, w_down, gammas, betas), with a leading depth axis if given."""
    lead = () if depth is None else (depth,)

    def matrix(n_in, n_out):
        return rng.normal(0.0, 1.0 / np.sqrt(n_in), size=lead + (n_in, n_out))

    return (
        matrix(d_model, 3 * d_model),
        matrix(d_model, d_model),
        matrix(d_model, d_ff),
        matrix(d_ff, d_model),
        rng.normal(1.0, 0.3, size=lead + (2, d_model)),
        rng.normal(0.0, 0.3, size=lead + (2, d_model)),
    )


def torch_args(*args, **kwargs):
    """``Args`` whose arrays reach the learner as float64 tensors (the oracle and the probes get
    the arrays); strings and numbers stay as they are."""
    tensors = [AsTorch(np.asarray(a, np.float64)) if isinstance(a, np.ndarray) else a for a in args]
    return Args(*tensors, **kwargs)


LAYERNORM = Graded(
    "scratch_layernorm", _as_array(oracle_layernorm), LAYERNORM_PROBES, options={"kinds": TENSOR}
)
LAYERNORM_GRADS = Graded(
    "scratch_layernorm_grads",
    oracle=oracle_layernorm_grads,
    probes=GRAD_PROBES,
    prefix=False,
    options={
        "kinds": TENSOR,
        "hint": "The lab's adapter back-propagates through your scratch_layernorm; build it "
        "from torch operations on x so that autograd sees every dependence.",
    },
)
RMSNORM = Graded(
    "scratch_rmsnorm", _as_array(oracle_rmsnorm), RMSNORM_PROBES, options={"kinds": TENSOR}
)
BLOCKS = {
    placement: Graded(
        "block_output", _as_array(oracle_block), probes, prefix=False, options={"kinds": TENSOR}
    )
    for placement, probes in [("post", POST_BLOCK_PROBES), ("pre", PRE_BLOCK_PROBES)]
}


def oracle_stack_output(placement, n_heads, x, *weights):
    return oracle_stack(placement, n_heads, x, *weights, final=placement == "pre").numpy()


STACK = Graded(
    "stack_output", oracle_stack_output, STACK_PROBES, prefix=False, options={"kinds": TENSOR}
)


# ----------------------------------------------------------------------------- norm checks


@LAB.check(points=2, uses=["scratch_layernorm"], seed=60)
def layernorm_forward(sub, rng):
    """scratch_layernorm matches F.layer_norm"""
    for shape in [(6, 8), (2, 3, 8)]:
        x = rows_with_varied_scale(rng, shape)
        gamma, beta = rng.normal(1, 0.5, size=8), rng.normal(0, 0.5, size=8)
        LAYERNORM.expect(sub, torch_args(x, gamma, beta, eps=LN_EPS), what=f"x of shape {shape}")
    x = rng.normal(size=(3, 8))
    x[0] = 2.5  # a constant row: variance exactly 0
    args = torch_args(x, rng.normal(1, 0.5, size=8), rng.normal(size=8), eps=LN_EPS)
    LAYERNORM.expect(sub, args, what="a constant row")


@LAB.check(points=1, uses=["scratch_layernorm_grads"], seed=61)
def layernorm_autograd(sub, rng):
    """gradients flow through scratch_layernorm (autograd)"""
    x = rows_with_varied_scale(rng, (4, 6))
    gamma, beta, dy = rng.normal(1, 0.5, size=6), rng.normal(size=6), rng.normal(size=(4, 6))
    args = torch_args(x, gamma, beta, dy)
    expected = args.apply(oracle_layernorm_grads)
    out = None
    for index, name in enumerate(("dx", "dgamma", "dbeta")):
        out = LAYERNORM_GRADS.expect(
            sub,
            args,
            what=f"{name} from scratch_layernorm_grads, x of shape (4, 6)",
            expected=expected[index],
            index=index,
            count=3,
            out=out,
        )


@LAB.check(points=1, uses=["scratch_rmsnorm"], seed=62)
def rmsnorm_forward(sub, rng):
    """scratch_rmsnorm matches F.rms_norm"""
    for shape in [(5, 8), (2, 3, 8)]:
        x = rows_with_varied_scale(rng, shape)
        gamma = rng.normal(1, 0.5, size=8)
        RMSNORM.expect(sub, torch_args(x, gamma, eps=RMS_EPS), what=f"x of shape {shape}")


# ----------------------------------------------------------------------------- block checks


def _block_case(sub, placement, norm, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, 5, D_MODEL)) * 2 + 0.5
    args = torch_args(placement, norm, N_HEADS, x, *block_weights(rng))
    what = f"block_output('{placement}', '{norm}'), x of shape (2, 5, {D_MODEL})"
    BLOCKS[placement].expect(sub, args, what=what)


@LAB.check(points=2, uses=["block_output"])
def post_block(sub):
    """PostLNBlock: x = LN(x + G(x)) for each sub-layer"""
    _block_case(sub, "post", "layernorm", seed=70)


@LAB.check(points=2, uses=["block_output"])
def pre_block(sub):
    """PreLNBlock: x = x + G(LN(x)) for each sub-layer"""
    _block_case(sub, "pre", "layernorm", seed=71)


@LAB.check(points=1, uses=["block_output"])
def rms_blocks(sub):
    """both blocks work with scratch_rmsnorm"""
    _block_case(sub, "post", "rmsnorm", seed=72)
    _block_case(sub, "pre", "rmsnorm", seed=73)


# ----------------------------------------------------------------------------- stack checks


def _stack_inputs(seed, depth):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, 4, D_MODEL))
    weights = block_weights(rng, depth)
    final_gamma, final_beta = rng.normal(1, 0.3, size=D_MODEL), rng.normal(0, 0.3, size=D_MODEL)
    return x, (*weights, final_gamma, final_beta)


@LAB.check(points=2, uses=["stack_output"])
def stack(sub):
    """BlockStack: a final LN after Pre-LN blocks only"""
    for seed, placement in [(80, "pre"), (81, "post")]:
        x, weights = _stack_inputs(seed, depth=3)
        args = torch_args(placement, N_HEADS, x, *weights)
        what = f"stack_output('{placement}'), 3 blocks, x of shape (2, 4, {D_MODEL})"
        STACK.expect(sub, args, what=what)


def oracle_stack_grads(placement, x, weights, dy):
    """dx and each block's gradient norm (over all its weights) for loss = sum(dy * output)."""
    torch = _torch()
    x_leaf = _t(x).requires_grad_(True)
    leaves = [_t(w).requires_grad_(True) for w in weights]
    out = oracle_stack(placement, N_HEADS, x_leaf, *leaves, final=placement == "pre")
    backward(out, dy)
    per_block = sum((leaf.grad.reshape(len(leaf), -1) ** 2).sum(dim=1) for leaf in leaves[:6])
    return x_leaf.grad.numpy(), torch.sqrt(per_block).numpy()


def oracle_stack_grads_of(placement, n_heads, x, *weights_and_dy):
    """``oracle_stack_grads`` called with stack_grads's arguments (..., *weights, dy)."""
    *weights, dy = weights_and_dy
    return oracle_stack_grads(placement, x, weights, dy)


STACK_GRADS = {
    placement: Graded(
        "stack_grads",
        oracle=oracle_stack_grads_of,
        items=("dx", "per-block gradient norms"),
        label=f"stack_grads('{placement}')",
        options={
            "kinds": TENSOR,
            "hint": "stack_output must already pass; then every block's weights must take "
            "part in the graph (no .detach(), no torch.no_grad()).",
        },
    )
    for placement in ("post", "pre")
}


@LAB.check(points=1, uses=["stack_grads"])
def stack_gradients(sub):
    """stack gradients at initialization (dx, per-block gradient norms)"""
    for seed, placement in [(90, "post"), (91, "pre")]:
        x, weights = _stack_inputs(seed, depth=4)
        dy = np.random.default_rng(seed + 100).normal(size=x.shape)
        args = torch_args(placement, N_HEADS, x, *weights, dy)
        STACK_GRADS[placement].expect(sub, args, what="4 blocks")


# ----------------------------------------------------------------------------- problem 1


def _number(sub, *args) -> float:
    return warmup_rate(sub, "linear_warmup_lr", *args)


WARMUP_PROBES = [
    Probe(
        "counts steps from 0",
        "This matches base_lr * (step - 1) / warmup_steps: the first step (step = 1) gets a "
        "learning rate of 0 and the peak comes one step late. Steps count from 1: the rate is "
        "base_lr * step / warmup_steps until step = warmup_steps.",
        lambda steps, base, w: base * np.minimum(1.0, (steps - 1) / w),
    ),
    Probe(
        "never stops rising",
        "This keeps rising after the warmup: cap it, base_lr * min(1, step / warmup_steps).",
        lambda steps, base, w: base * steps / w,
    ),
    Probe(
        "decays instead",
        "This falls from base_lr towards 0: warmup RISES from near 0 to base_lr.",
        lambda steps, base, w: base * np.maximum(0.0, 1 - steps / w),
    ),
    Probe(
        "peak one step late",
        "This matches base_lr * step / (warmup_steps + 1): the rate must reach base_lr exactly "
        "at step = warmup_steps.",
        lambda steps, base, w: base * np.minimum(1.0, steps / (w + 1)),
    ),
]


# Every probe of the lab whose compute is the learner's function with its bug, by that function.
# The block and stack probes are not: they run the oracle's blocks, whose norms are the library's
# (forbidden to the learner), and tests/test_pre_post_ln_checks.py proves them one by one.
PROBES = probe_table(LAYERNORM, LAYERNORM_GRADS, RMSNORM, linear_warmup_lr=WARMUP_PROBES)


@LAB.check(points=2, uses=["linear_warmup_lr"])
def warmup(sub):
    """problem 1: linear_warmup_lr rises linearly, then stays at base_lr"""
    for base_lr, warmup_steps in [(1e-3, 5), (0.5, 1), (3e-4, 50)]:
        steps = np.array(sorted({1, 2, 3, warmup_steps - 1, warmup_steps, warmup_steps + 1,
                                 2 * warmup_steps, 3 * warmup_steps + 7} - {0}))  # fmt: skip
        got = np.array([_number(sub, int(s), base_lr, warmup_steps) for s in steps])
        expected = base_lr * np.minimum(1.0, steps / warmup_steps)
        candidates = [(p, p.compute(steps, base_lr, warmup_steps)) for p in WARMUP_PROBES]
        probe = next(
            (p for p, wrong in candidates if np.allclose(got, wrong, rtol=1e-6, atol=0)), None
        )
        if not np.allclose(got, expected, rtol=1e-6, atol=1e-15):
            worst = int(np.argmax(np.abs(got - expected)))
            raise CheckFailed(
                f"linear_warmup_lr with base_lr={base_lr}, warmup_steps={warmup_steps}: at step "
                f"{steps[worst]} got {got[worst]:.6g}, expected {expected[worst]:.6g}"
                + (f"\nWhy: {probe.hint}" if probe else ""),
                [probe.name] if probe else [],
            )
    for step in (1, 7, 1000):
        got = _number(sub, step, 2e-3, 0)
        if not np.isclose(got, 2e-3, rtol=1e-6, atol=0):
            raise CheckFailed(
                f"linear_warmup_lr({step}, 0.002, 0): got {got:.6g}, expected 0.002 — "
                "warmup_steps = 0 means no warmup."
            )


def _letters(answer) -> str | None:
    if not isinstance(answer, str):
        return None
    letters = re.sub(r"[\s,;()\[\]{}'\"]", "", answer.lower())
    if not letters or not set(letters) <= set(FIX_CANDIDATES):
        return None
    return "".join(sorted(set(letters)))


def _fixes_right(answer) -> bool:
    return keys.matches(_letters(answer), MEASURED_FIXES)


@LAB.check(points=1, uses=["POSTLN_FIXES"])
def fixes(sub):
    """problem 1: which single changes fixed the stalled Post-LN run"""
    out = sub.get("POSTLN_FIXES")
    item = item_of(out, None, "POSTLN_FIXES")
    answer = item.array.item() if item.kind == "str" and item.array is not None else None
    letters = _letters(answer)
    hint = (
        "Give every letter that worked on every seed in the demo's section (e) as one string, "
        'e.g. "ab"; predict from section (c) first: which changes shrink how far one Adam step '
        "moves the output, and which leave it as it was?"
    )
    if letters is not None and "e" in letters:
        hint = (
            "Clipping rescales the whole gradient, but Adam divides each update by the running "
            "size of that same gradient, so its steps barely change: in the demo the output "
            "moves as much after a clipped step as after an unclipped one. " + hint
        )
    if letters is not None and "a" in letters:
        hint = (
            "Warmup shrinks only the first 50 steps; after it each step again moves every "
            "parameter by about the learning rate, and in the demo the warmed-up run was still "
            "above loss 1.0 at step 200 on every seed: it helps, but does not fix it here. " + hint
        )
    expect_value(out, _fixes_right, what="POSTLN_FIXES", hint=hint)
