"""The language-model lab's checks: right code passes; each known bug fails WITH its hint."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from conftest import assert_caught, definition_cells, lab_results, messages, solution_namespace

from normlab.grader.checks import language_model as lab

PROBES = lab.RMS_PROBES + lab.LN_PROBES + lab.BLOCK_PROBES + lab.FINAL_PROBES + lab.WARMUP_PROBES

run = functools.partial(lab_results, "12_language_model")


# ----------------------------------------------------------------------------- references
# Written here, independently of the solution notebook, as the tests' own right answers. Each
# norm is an autograd.Function driven as the lab's adapter drives it: forward, then backward,
# with a plain object for ctx.


class Context:
    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


def drive(function, *inputs, dy):
    ctx = Context()
    y = function.forward(ctx, *inputs)
    grads = function.backward(ctx, dy)
    return (y, *grads[: len(inputs) - 1])


def rms_function(eps_outside=False, centre=False, total=False, gain=True, hard_eps=None,
                 projection="g", dx_gain=True, with_rstd=True, dweight_of="x_hat"):  # fmt: skip
    """An RMSNorm Function, right by default; each option writes one bug."""

    class RMS(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps):
            eps = eps if hard_eps is None else hard_eps
            if centre:
                x = x - x.mean(-1, keepdim=True)
            square = x.square().sum(-1, keepdim=True) / (1 if total else x.shape[-1])
            rms = square.sqrt() + eps if eps_outside else torch.sqrt(square + eps)
            ctx.x, ctx.rms, ctx.weight = x, rms, weight
            return x / rms * weight if gain else x / rms

        @staticmethod
        def backward(ctx, dy):
            x, rms, weight = ctx.x, ctx.rms, ctx.weight
            g = dy * weight if dx_gain else dy
            d = x.shape[-1]
            if projection is None:
                dx = g / rms
            else:
                inner = g if projection == "g" else dy
                # the same projection, written with x and rms**3 rather than x_hat
                dx = g / rms - x * (inner * x).sum(-1, keepdim=True) / (d * rms**3)
            if not with_rstd:
                dx = dx * rms
            by = {"x_hat": x / rms, "x": x, "none": torch.ones_like(x)}[dweight_of]
            dweight = (dy * by).flatten(0, -2).sum(0) if gain else torch.zeros_like(weight)
            return dx, dweight, None

    return lambda x, weight, dy, eps: drive(RMS, x, weight, eps, dy=dy)


def ln_function(unbiased=False, eps_outside=False, swapped=False, hard_eps=None, mean_term=True,
                projection=True, dx_gain=True, swap_grads=False):  # fmt: skip
    """A LayerNorm Function with save_for_backward, right by default; each option one bug."""

    class LN(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias, eps):
            eps = eps if hard_eps is None else hard_eps
            mu = x.mean(-1, keepdim=True)
            var = x.var(-1, keepdim=True, unbiased=unbiased)
            std = var.sqrt() + eps if eps_outside else (var + eps).sqrt()
            x_hat = (x - mu) / std
            ctx.save_for_backward(x_hat, std, weight)
            return x_hat * bias + weight if swapped else weight * x_hat + bias

        @staticmethod
        def backward(ctx, dy):
            x_hat, std, weight = ctx.saved_tensors
            g = dy * weight if dx_gain else dy
            dx = g
            if mean_term:
                dx = dx - g.mean(-1, keepdim=True)
            if projection:
                dx = dx - x_hat * (g * x_hat).mean(-1, keepdim=True)
            rows = dy.reshape(-1, dy.shape[-1])
            dweight = (rows * x_hat.reshape(rows.shape)).sum(0)
            dbias = rows.sum(0)
            if swap_grads:
                dweight, dbias = dbias, dweight
            return dx / std, dweight, dbias, None

    return lambda x, weight, bias, dy, eps: drive(LN, x, weight, bias, eps, dy=dy)


def rms(x, gain, dims=(-1,), eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps) * gain


def attention(x, p, qk_norm, qk_dims=(-1,), qk_which="qk", n_heads=2):
    batch, length, d = x.shape
    size = d // n_heads
    q, k, v = (x @ p["w_qkv"]).chunk(3, dim=-1)
    q, k, v = (t.view(batch, length, n_heads, size).permute(0, 2, 1, 3) for t in (q, k, v))
    if qk_norm:
        q = rms(q, p["q_norm"], qk_dims) if "q" in qk_which else q
        k = rms(k, p["k_norm"], qk_dims) if "k" in qk_which else k
    scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(size)
    mask = torch.tril(torch.ones(length, length, dtype=torch.bool))
    mixed = torch.where(mask, scores, -math.inf).softmax(-1) @ v
    return mixed.permute(0, 2, 1, 3).reshape(batch, length, d) @ p["w_out"]


def dyt(x, alpha, gain, beta, shift=True, inside=True):
    squashed = torch.tanh(alpha * x) if inside else alpha * torch.tanh(x)
    return gain * squashed + (beta if shift else 0)


RIGHT_RULES = {
    "post": lambda x, G, N, No, D: N(x + G(x)),
    "pre": lambda x, G, N, No, D: x + G(N(x)),
    "peri": lambda x, G, N, No, D: x + No(G(N(x))),
    "dyt": lambda x, G, N, No, D: x + G(D(x)),
}


def block_with(rules=None, qk="asked", dyt_options=None, **qk_options):
    """lm_block_output written here; ``rules`` replaces placements, ``qk`` forces QK-norm."""
    rules = {**RIGHT_RULES, **(rules or {})}

    def block_output(placement, qk_norm, x, *weights):
        names = ("w_qkv", "w_out", "w_up", "w_down", "norm", "norm_out", "q_norm", "k_norm",
                 "dyt_alpha", "dyt_beta")  # fmt: skip
        p = dict(zip(names, weights, strict=True))
        use_qk = {"asked": qk_norm, "never": False, "always": True}[qk]
        for i, sublayer in enumerate(
            [
                lambda h: attention(h, p, use_qk, **qk_options),
                lambda h: (h @ p["w_up"]).relu() @ p["w_down"],
            ]  # fmt: skip
        ):
            x = rules[placement](
                x,
                sublayer,
                lambda h, i=i: rms(h, p["norm"][i]),
                lambda h, i=i: rms(h, p["norm_out"][i]),
                lambda h, i=i: dyt(
                    h, p["dyt_alpha"][i], p["norm"][i], p["dyt_beta"][i], **(dyt_options or {})
                ),  # fmt: skip
            )
        return x

    return block_output


def final_with(normed=("pre", "peri"), dyt_for=("dyt",)):
    def final_output(placement, x, gain, alpha, beta):
        if placement in dyt_for:
            return dyt(x, alpha, gain, beta)
        return rms(x, gain) if placement in normed else x

    return final_output


def warmup(step, base_lr, warmup_steps):
    return base_lr * min(1.0, (step + 1) / warmup_steps) if warmup_steps else base_lr


RIGHT_ANSWERS = dict(
    lm_rmsnorm_call=rms_function(),
    lm_layernorm_call=ln_function(),
    lm_block_output=block_with(),
    lm_final_output=final_with(),
    lm_warmup_lr=warmup,
    LM_LOGIT_ANSWER="a",
    LM_GRAD_SUM_ANSWER="(d) the sum is 0",
    LM_PERI_ANSWER="C",
)


def test_right_answers_get_full_marks():
    results = run(**RIGHT_ANSWERS)
    assert [r.message for r in results if not r.passed] == []
    assert sum(r.points for r in results) == lab.LAB.max_score == 25


def test_a_backward_written_with_autograd_earns_nothing():
    class ByAutograd(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps):
            ctx.save_for_backward(x, weight)
            ctx.eps = eps
            return rms(x, weight, eps=eps)

        @staticmethod
        def backward(ctx, dy):
            x, weight = ctx.saved_tensors
            with torch.enable_grad():
                x, weight = x.detach().requires_grad_(), weight.detach().requires_grad_()
                dx, dweight = torch.autograd.grad(rms(x, weight, eps=ctx.eps), (x, weight), dy)
            return dx, dweight, None

    def lm_rmsnorm_call(x, weight, dy, eps):
        return drive(ByAutograd, x, weight, eps, dy=dy)

    results = run(lm_rmsnorm_call=lm_rmsnorm_call)
    assert [r.points for r in results] == [0, 0]
    assert "from scratch" in messages(results)


# ----------------------------------------------------------------------------- norm bugs


@pytest.mark.parametrize(
    "options, probe",
    [
        ({"eps_outside": True}, "eps outside the root"),
        ({"centre": True}, "subtracts the mean"),
        ({"total": True}, "sum instead of mean"),
        ({"gain": False}, "weight missing"),
        ({"hard_eps": 1e-5}, "eps ignored (1e-5 hard-coded)"),
        ({"hard_eps": 1e-6}, "eps ignored (1e-6 hard-coded)"),
        ({"hard_eps": 1e-8}, "eps ignored (1e-8 hard-coded)"),
        ({"projection": None}, "backward without the projection term"),
        ({"projection": "dy"}, "projection term without the weight"),
        ({"dx_gain": False, "projection": "dy"}, "dx without the weight"),
        ({"with_rstd": False}, "dx without rstd"),
        ({"dweight_of": "x"}, "dweight from x instead of x_hat"),
        ({"dweight_of": "none"}, "dweight as dbias"),
    ],
)
def test_rmsnorm_bug_is_caught_with_its_hint(options, probe):
    assert_caught(run(lm_rmsnorm_call=rms_function(**options)), PROBES, probe)


@pytest.mark.parametrize(
    "options, probe",
    [
        ({"unbiased": True}, "unbiased variance"),
        ({"eps_outside": True}, "eps outside the root"),
        ({"swapped": True}, "weight and bias swapped"),
        ({"hard_eps": 1e-5}, "eps ignored (1e-5 hard-coded)"),
        ({"hard_eps": 1e-6}, "eps ignored (1e-6 hard-coded)"),
        ({"hard_eps": 1e-8}, "eps ignored (1e-8 hard-coded)"),
        ({"mean_term": False}, "backward without the mean term"),
        ({"projection": False}, "backward without the mean of x_hat * g term"),
        ({"mean_term": False, "projection": False}, "backward with neither mean term"),
        ({"dx_gain": False}, "dx without the weight"),
        ({"swap_grads": True}, "dweight and dbias swapped"),
    ],
)
def test_layernorm_bug_is_caught_with_its_hint(options, probe):
    assert_caught(run(lm_layernorm_call=ln_function(**options)), PROBES, probe)


def test_a_backward_right_forward_keeps_the_forward_points():
    results = run(lm_layernorm_call=ln_function(mean_term=False))
    assert [r.passed for r in results] == [True, False]


def test_dweight_not_summed_over_the_batch_is_told_its_shape():
    def per_position(x, weight, dy, eps):
        y, dx, dweight = rms_function()(x, weight, dy, eps)
        return y, dx, (dy * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).sum(0)

    assert "shape" in messages(run(lm_rmsnorm_call=per_position))


# ----------------------------------------------------------------------------- block bugs

BLOCK_BUGS = [
    (block_with({"post": RIGHT_RULES["pre"]}), "post: pre instead"),
    (block_with({"post": lambda x, G, N, No, D: x + N(G(x))}), "post: norm inside the residual"),
    (block_with({"pre": RIGHT_RULES["post"]}), "pre: post instead"),
    (block_with({"pre": lambda x, G, N, No, D: N(x + G(N(x)))}), "pre: norm on the output too"),
    (
        block_with({"pre": lambda x, G, N, No, D: N(x) + G(N(x))}),
        "pre: residual from the normalized input",
    ),
    (block_with({"peri": RIGHT_RULES["pre"]}), "peri: output norm missing"),
    (
        block_with({"peri": lambda x, G, N, No, D: No(x + G(N(x)))}),
        "peri: output norm after the addition",
    ),
    (block_with({"peri": lambda x, G, N, No, D: x + No(G(x))}), "peri: input norm missing"),
    (block_with({"peri": lambda x, G, N, No, D: x + N(G(No(x)))}), "peri: norms swapped"),
    (block_with({"dyt": RIGHT_RULES["pre"]}), "dyt: a norm instead"),
    (block_with({"dyt": lambda x, G, N, No, D: x + D(G(x))}), "dyt: on the output"),
    (block_with(dyt_options={"shift": False}), "dyt: shift missing"),
    (block_with(dyt_options={"inside": False}), "dyt: alpha outside tanh"),
    (block_with(qk="never"), "qk: missing"),
    (block_with(qk="always"), "qk: applied when not asked"),
    (block_with(qk_dims=(1, 3)), "qk: over d_model"),
    (block_with(qk_dims=(2,)), "qk: over the sequence"),
    (block_with(qk_dims=(1,)), "qk: over the heads"),
    (block_with(qk_which="q"), "qk: queries only"),
]


@pytest.mark.parametrize("buggy, probe", BLOCK_BUGS, ids=[probe for _, probe in BLOCK_BUGS])
def test_block_bug_is_caught_with_its_hint(buggy, probe):
    assert_caught(run(lm_block_output=buggy), PROBES, probe)


def test_every_block_probe_has_its_bug_here():
    assert {probe for _, probe in BLOCK_BUGS} == {p.name for p in lab.BLOCK_PROBES}


def test_qk_norm_after_the_merge_is_caught():
    """QK-norm written on the (B, L, H, head_dim) view before the transpose is right too; on the
    merged (B, L, d) projections it normalizes all heads together and is caught."""

    def merged(placement, qk_norm, x, *weights):
        names = ("w_qkv", "w_out", "w_up", "w_down", "norm", "norm_out", "q_norm", "k_norm",
                 "dyt_alpha", "dyt_beta")  # fmt: skip
        p = dict(zip(names, weights, strict=True))
        for i in range(2):
            h = rms(x, p["norm"][i])
            if i == 0:
                batch, length, d = h.shape
                q, k, v = (h @ p["w_qkv"]).chunk(3, dim=-1)
                if qk_norm:
                    q, k = rms(q, p["q_norm"].repeat(2)), rms(k, p["k_norm"].repeat(2))
                q, k, v = (t.view(batch, length, 2, d // 2).transpose(1, 2) for t in (q, k, v))
                mixed = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + mixed.transpose(1, 2).reshape(batch, length, d) @ p["w_out"]
            else:
                x = x + (h @ p["w_up"]).relu() @ p["w_down"]
        return x

    assert_caught(run(lm_block_output=merged), PROBES, "qk: over d_model")


# ----------------------------------------------------------------------------- final norm bugs


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (final_with(normed=("peri",)), "final norm missing"),
        (final_with(normed=("pre",)), "final norm missing"),
        (final_with(dyt_for=()), "final norm missing"),
        (final_with(normed=("pre", "peri", "post")), "final norm on the wrong placement"),
        (
            final_with(normed=("pre", "peri", "dyt"), dyt_for=()),
            "final norm on the wrong placement",
        ),
    ],
)
def test_final_norm_bug_is_caught_with_its_hint(buggy, probe):
    assert_caught(run(lm_final_output=buggy), PROBES, probe)


# ----------------------------------------------------------------------------- warmup bugs


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (lambda s, lr, w: lr * min(1.0, s / w) if w else lr, "off by one step"),
        (lambda s, lr, w: lr * min(1.0, (s + 2) / w) if w else lr, "peak one step early"),
        (lambda s, lr, w: lr * min(1.0, (s + 1) / (w + 1)) if w else lr, "divided by warmup_steps + 1"),
        (lambda s, lr, w: lr * (s + 1) / w if w else lr, "never stops rising"),
        (lambda s, lr, w: lr * max(0.0, 1 - s / w) if w else lr, "decays instead"),
    ],
)  # fmt: skip
def test_warmup_bug_is_caught_with_its_hint(buggy, probe):
    assert_caught(run(lm_warmup_lr=buggy), PROBES, probe)


def test_warmup_steps_zero_is_no_warmup():
    def divides(step, base_lr, warmup_steps):
        return base_lr * min(1.0, (step + 1) / warmup_steps)

    assert "warmup_steps = 0 means no warmup" in messages(run(lm_warmup_lr=divides))


# ----------------------------------------------------------------------------- multiple choice


@pytest.mark.parametrize(
    "name, wrong, why",
    [
        ("LM_LOGIT_ANSWER", "d", lab.LM_LOGIT_WHY["d"]),
        ("LM_GRAD_SUM_ANSWER", "c", lab.LM_GRAD_SUM_WHY["c"]),
        ("LM_PERI_ANSWER", "a", lab.LM_PERI_WHY["a"]),
    ],
)
def test_a_wrong_letter_gets_its_misconception(name, wrong, why):
    assert why in messages(run(**{name: wrong}))


def test_two_letters_are_told_so():
    assert "more than one option" in messages(run(LM_PERI_ANSWER="a or c"))


# ----------------------------------------------------------------------------- setup_context
# PyTorch's newer way of writing a Function: forward without ctx, and a setup_context(ctx,
# inputs, output) that saves what backward needs. Written here in that style, each replaces the
# solution's class, and the lab's own adapters (the notebook's code) drive it.

SETUP_CONTEXT_RMS = """
class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(x, weight, eps):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * weight

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, eps = inputs
        ctx.save_for_backward(x, weight)
        ctx.eps = eps

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        rstd = torch.rsqrt(x.square().mean(-1, keepdim=True) + ctx.eps)
        x_hat, g = x * rstd, grad_out * weight
        dx = rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
        return dx, (grad_out * x_hat).flatten(0, -2).sum(0), None
"""

SETUP_CONTEXT_LN = """
class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(x, weight, bias, eps):
        centred = x - x.mean(-1, keepdim=True)
        return centred * torch.rsqrt(centred.square().mean(-1, keepdim=True) + eps) * weight + bias

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias, eps = inputs
        centred = x - x.mean(-1, keepdim=True)
        rstd = torch.rsqrt(centred.square().mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(centred * rstd, rstd, weight)

    @staticmethod
    def backward(ctx, grad_out):
        x_hat, rstd, weight = ctx.saved_tensors
        g = grad_out * weight
        dx = rstd * (g - g.mean(-1, keepdim=True) - x_hat * (g * x_hat).mean(-1, keepdim=True))
        rows = grad_out.flatten(0, -2)
        return dx, (rows * x_hat.flatten(0, -2)).sum(0), rows.sum(0), None
"""
# each mutant: dx without one of its terms, as the probes of the same name describe
SETUP_CONTEXT_MUTANTS = {
    "backward without the projection term": (
        SETUP_CONTEXT_RMS,
        "dx = rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))",
        "dx = rstd * g",
    ),
    "backward without the mean term": (
        SETUP_CONTEXT_LN,
        "g - g.mean(-1, keepdim=True) - x_hat",
        "g - x_hat",
    ),
}


def in_setup_context_style(source: str) -> dict:
    """The solution's namespace with one Function class replaced by ``source``."""
    name = source.split("(")[0].split()[-1]
    (solutions,) = [s for s in definition_cells(STEM) if s.startswith(f"class {name}(")]
    return solution_namespace(STEM, replace=(solutions, source))


STEM = "12_language_model"


def test_functions_in_the_setup_context_style_get_full_marks():
    rms_namespace = in_setup_context_style(SETUP_CONTEXT_RMS)
    ln_namespace = in_setup_context_style(SETUP_CONTEXT_LN)
    # both are right as autograd sees them too, through .apply
    generator = torch.Generator().manual_seed(0)
    x = (3 * torch.randn(2, 3, 8, generator=generator, dtype=torch.float64) + 1).requires_grad_()
    weight = torch.randn(8, generator=generator, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(8, generator=generator, dtype=torch.float64, requires_grad=True)
    rms_class, ln_class = rms_namespace["RMSNormFunction"], ln_namespace["LayerNormFunction"]
    assert torch.autograd.gradcheck(lambda x, w: rms_class.apply(x, w, 1e-5), (x, weight))
    assert torch.autograd.gradcheck(lambda *a: ln_class.apply(*a, 1e-5), (x, weight, bias))

    results = run(
        lm_rmsnorm_call=rms_namespace["lm_rmsnorm_call"],
        lm_layernorm_call=ln_namespace["lm_layernorm_call"],
    )
    assert [r.message for r in results if not r.passed] == []
    assert [r.points for r in results] == [2, 3, 2, 3]


@pytest.mark.parametrize("probe", SETUP_CONTEXT_MUTANTS)
def test_a_setup_context_style_mutant_loses_the_backward_points(probe):
    source, right, wrong = SETUP_CONTEXT_MUTANTS[probe]
    assert right in source
    namespace = in_setup_context_style(source.replace(right, wrong))
    adapter = "lm_rmsnorm_call" if "RMSNorm" in source else "lm_layernorm_call"
    results = run(**{adapter: namespace[adapter]})
    assert [r.points for r in results] == [2, 0]  # the forward keeps its points
    assert_caught(results, PROBES, probe)


# ----------------------------------------------------------------------------- normlab grade

NOTEBOOK_HEAD = """
import torch


class Context:
    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


def lm_rmsnorm_call(x, weight, dy, eps):
    ctx = Context()
    y = RMSNormFunction.forward(ctx, x, weight, eps)
    dx, dweight, _ = RMSNormFunction.backward(ctx, dy)
    return y, dx, dweight


def rms(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
"""

BY_HAND = """
class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.x, ctx.weight, ctx.eps = x, weight, eps
        return rms(x, weight, eps)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.x, ctx.weight
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + ctx.eps)
        g = grad_out * weight
        dx = r * g - x * r**3 * (g * x).mean(-1, keepdim=True)
        return dx, (grad_out * x * r).flatten(0, -2).sum(0), None
"""

BY_AUTOGRAD = """
class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.x, ctx.weight, ctx.eps = x, weight, eps
        return rms(x, weight, eps)

    @staticmethod
    def backward(ctx, grad_out):
        with torch.enable_grad():
            x = ctx.x.detach().requires_grad_()
            weight = ctx.weight.detach().requires_grad_()
            dx, dweight = torch.autograd.grad(rms(x, weight, ctx.eps), (x, weight), grad_out)
        return dx, dweight, None
"""


@pytest.mark.isolation
def test_normlab_grade_refuses_a_backward_by_autograd_from_the_notebooks_source(tmp_path):
    """In `normlab grade` the ban is read from the notebook in the grader's process: the same
    Function earns the norm's 5 points with a backward written by hand, none by autograd."""
    from pathlib import Path

    import nbformat
    from conftest import grade_json

    for name, body in [("by_hand", BY_HAND), ("by_autograd", BY_AUTOGRAD)]:
        cells = [nbformat.v4.new_code_cell(NOTEBOOK_HEAD), nbformat.v4.new_code_cell(body)]
        notebook = nbformat.v4.new_notebook(cells=cells)
        notebook.metadata["normlab"] = {"lab": "12_language_model"}
        nbformat.write(notebook, tmp_path / f"{name}.ipynb")
    code, data, stderr = grade_json(tmp_path)
    assert code == 0, stderr
    scores = {Path(s["path"]).stem: s for s in data["submissions"]}
    norm = {
        s: [c for c in r["checks"] if "RMSNormFunction" in c["name"]] for s, r in scores.items()
    }
    assert [c["passed"] for c in norm["by_hand"]] == [True, True]
    assert [c["passed"] for c in norm["by_autograd"]] == [False, False]
    assert all("from scratch" in c["message"] for c in norm["by_autograd"])


def test_the_demos_hand_written_norms_are_cut_from_the_student_edition():
    """The chapter's demo trains its model with its own RMSNormFunction and LayerNormFunction,
    whose forward and backward are lab 12's answers: the release recognises all four bodies
    (the same statements up to local names) and ships stubs in their place. A demo whose
    Functions drift from the lab's answers would ship them: this fails first."""
    import json

    from conftest import ROOT

    from normlab import release

    index = release.answer_index(ROOT)
    demo = json.loads((ROOT / "notebooks" / "12_language_model.ipynb").read_text())
    sources = ["".join(c["source"]) for c in demo["cells"] if c["cell_type"] == "code"]
    defining = [s for s in sources if "(torch.autograd.Function)" in s]
    assert defining, "the demo defines no autograd.Function: nothing to cut"
    found = [lab for source in defining for _, lab in release.find_answers(source, index)]
    assert found == ["12_language_model"] * 4
