"""The Pre-LN vs Post-LN lab's checks: right code passes; each known bug fails WITH its hint."""

from __future__ import annotations

import functools
import json
import math

import pytest
import torch
from conftest import ROOT, assert_caught, lab_results, messages

from normlab.grader.checks import pre_post_ln as lab

PROBES = (
    lab.LAYERNORM_PROBES
    + lab.GRAD_PROBES
    + lab.RMSNORM_PROBES
    + lab.POST_BLOCK_PROBES
    + lab.PRE_BLOCK_PROBES
    + lab.STACK_PROBES
    + lab.WARMUP_PROBES
)


run = functools.partial(lab_results, "06_pre_post_ln")


# ----------------------------------------------------------------------------- references
# Written here, independently of the solution notebook, as the tests' own right answers.


def layernorm(x, gamma, beta, eps=1e-5, detach_mean=False, detach_var=False):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    mean = mean.detach() if detach_mean else mean
    var = var.detach() if detach_var else var
    return (x - mean) * torch.rsqrt(var + eps) * gamma + beta


def rmsnorm(x, gamma, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma


def grads_with(norm=layernorm, **options):
    def grads(x, gamma, beta, dy):
        leaves = [t.clone().requires_grad_(True) for t in (x, gamma, beta)]
        norm(*leaves, **options).backward(dy)
        return tuple(leaf.grad for leaf in leaves)

    return grads


def attention(x, w_qkv, w_out, n_heads):
    batch, length, d = x.shape
    size = d // n_heads
    q, k, v = (x @ w_qkv).split(d, dim=-1)
    heads = [t.reshape(batch, length, n_heads, size).transpose(1, 2) for t in (q, k, v)]
    scores = heads[0] @ heads[1].transpose(-1, -2) / math.sqrt(size)
    mask = torch.tril(torch.ones(length, length, dtype=torch.bool))
    mixed = torch.where(mask, scores, -math.inf).softmax(-1) @ heads[2]
    return mixed.transpose(1, 2).reshape(batch, length, d) @ w_out


def make_norm(norm, gamma, beta):
    if norm == "rmsnorm":
        return lambda v: rmsnorm(v, gamma)
    return lambda v: layernorm(v, gamma, beta)


RIGHT = {"post": lambda x, g, n: n(x + g(x)), "pre": lambda x, g, n: x + g(n(x))}


def block_with(rules=None, swap=False):
    rules = {**RIGHT, **(rules or {})}

    def block_output(placement, norm, n_heads, x, w_qkv, w_out, w_up, w_down, gammas, betas):
        norms = [make_norm(norm, gammas[i], betas[i]) for i in (0, 1)]
        if swap:
            norms.reverse()
        rule = rules[placement]
        x = rule(x, lambda v: attention(v, w_qkv, w_out, n_heads), norms[0])
        return rule(x, lambda v: torch.relu(v @ w_up) @ w_down, norms[1])

    return block_output


def stack_with(final_for=("pre",)):
    block = block_with()

    def stack_output(placement, n_heads, x, w_qkv, w_out, w_up, w_down, gammas, betas, fg, fb):
        for i in range(len(w_qkv)):
            x = block(
                placement, "layernorm", n_heads, x, w_qkv[i], w_out[i], w_up[i], w_down[i],
                gammas[i], betas[i],
            )  # fmt: skip
        return layernorm(x, fg, fb) if placement in final_for else x

    return stack_output


def stack_grads_with(stack_output=None, detach=False):
    stack_output = stack_output or stack_with()

    def stack_grads(placement, n_heads, x, *weights_and_dy):
        *weights, dy = weights_and_dy
        x = x.clone().requires_grad_(True)
        leaves = [w.clone().requires_grad_(True) for w in weights]
        out = stack_output(placement, n_heads, x, *leaves)
        out.backward(dy)
        norms = sum(
            (leaf.grad.reshape(len(leaf), -1) ** 2).sum(1) for leaf in leaves[:6] if not detach
        )
        return x.grad, torch.sqrt(norms) if not detach else torch.zeros(len(weights[0]))

    return stack_grads


def warmup(step, base_lr, warmup_steps):
    return base_lr if warmup_steps == 0 else base_lr * min(1, step / warmup_steps)


RIGHT_ANSWERS = dict(
    scratch_layernorm=layernorm,
    scratch_layernorm_grads=grads_with(),
    scratch_rmsnorm=rmsnorm,
    block_output=block_with(),
    stack_output=stack_with(),
    stack_grads=stack_grads_with(),
    linear_warmup_lr=warmup,
    POSTLN_FIXES="d, c, b",
)


def test_right_answers_get_full_marks():
    results = run(**RIGHT_ANSWERS)
    assert [r.message for r in results if not r.passed] == []
    assert sum(r.points for r in results) == lab.LAB.max_score == 15


# ----------------------------------------------------------------------------- norm bugs


def ln_variant(ddof=0, eps="inside", dim=-1, affine="normal"):
    def forward(x, gamma, beta, eps_value=1e-5):
        mean = x.mean(dim, keepdim=True)
        var = x.var(dim, correction=ddof, keepdim=True)
        if eps == "inside":
            x_hat = (x - mean) / torch.sqrt(var + eps_value)
        elif eps == "outside":
            x_hat = (x - mean) / (torch.sqrt(var) + eps_value)
        else:
            x_hat = (x - mean) / torch.sqrt(var)
        if affine == "none":
            return x_hat
        return x_hat * beta + gamma if affine == "swapped" else x_hat * gamma + beta

    return lambda x, gamma, beta, eps=1e-5: forward(x, gamma, beta, eps)


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (ln_variant(ddof=1), "unbiased variance"),
        (ln_variant(eps="outside"), "eps outside the root"),
        (ln_variant(eps="none"), "no eps"),
        (ln_variant(dim=0), "wrong dim"),
        (ln_variant(affine="none"), "affine step missing"),
        (ln_variant(affine="swapped"), "gamma and beta swapped"),
    ],
)
def test_layernorm_bug_is_caught_with_its_hint(buggy, probe):
    assert_caught(run(scratch_layernorm=buggy), PROBES, probe)


def test_torch_default_var_is_the_unbiased_trap():
    def default_var(x, gamma, beta, eps=1e-5):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + eps) * gamma + beta

    assert "unbiased=False" in messages(run(scratch_layernorm=default_var))


@pytest.mark.parametrize(
    "options, probe",
    [
        ({"detach_mean": True, "detach_var": True}, "statistics detached"),
        ({"detach_mean": True}, "mean detached"),
        ({"detach_var": True}, "variance detached"),
    ],
)
def test_cut_autograd_graph_is_caught_with_its_hint(options, probe):
    assert_caught(run(scratch_layernorm_grads=grads_with(**options)), PROBES, probe)


def test_statistics_through_numpy_lose_the_gradient():
    def via_numpy(x, gamma, beta, eps=1e-5):
        array = x.detach().numpy()
        mean = torch.from_numpy(array.mean(-1, keepdims=True))
        var = torch.from_numpy(array.var(-1, keepdims=True))
        return (x - mean) / torch.sqrt(var + eps) * gamma + beta

    assert_caught(
        run(scratch_layernorm_grads=grads_with(norm=via_numpy)), PROBES, "statistics detached"
    )


def rms_variant(centre=False, eps="inside", reduce="mean", use_gamma=True):
    def forward(x, gamma, eps_value=1e-6):
        if centre:
            x = x - x.mean(-1, keepdim=True)
        square = x.pow(2).mean(-1, keepdim=True) if reduce == "mean" else x.pow(2).sum(-1, True)
        if eps == "inside":
            y = x / torch.sqrt(square + eps_value)
        elif eps == "outside":
            y = x / (torch.sqrt(square) + eps_value)
        else:
            y = x / (square + eps_value)
        return y * gamma if use_gamma else y

    return lambda x, gamma, eps=1e-6: forward(x, gamma, eps)


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (rms_variant(centre=True), "subtracts the mean"),
        (rms_variant(eps="outside"), "eps outside the root"),
        (rms_variant(eps="noroot"), "square root missing"),
        (rms_variant(reduce="sum"), "sum instead of mean"),
        (rms_variant(use_gamma=False), "gamma missing"),
    ],
)
def test_rmsnorm_bug_is_caught_with_its_hint(buggy, probe):
    assert_caught(run(scratch_rmsnorm=buggy), PROBES, probe)


def test_numpy_result_is_refused_a_tensor_is_expected():
    results = run(
        scratch_layernorm=lambda x, gamma, beta, eps=1e-5: layernorm(x, gamma, beta).numpy()
    )
    assert "expected a tensor" in messages(results)


# ----------------------------------------------------------------------------- block bugs

POST_BUGS = [
    ({"post": RIGHT["pre"]}, False, "pre-LN instead of post-LN"),
    ({"post": lambda x, g, n: x + n(g(x))}, False, "norm inside the residual"),
    ({"post": lambda x, g, n: n(g(x))}, False, "no residual"),
    ({}, True, "norms swapped"),
]
PRE_BUGS = [
    ({"pre": RIGHT["post"]}, False, "post-LN instead of pre-LN"),
    ({"pre": lambda x, g, n: n(x) + g(n(x))}, False, "residual from the normalized input"),
    ({"pre": lambda x, g, n: n(x + g(n(x)))}, False, "norm on the output too"),
    ({"pre": lambda x, g, n: g(n(x))}, False, "no residual"),
    ({}, True, "norms swapped"),
]


@pytest.mark.parametrize("rules, swap, probe", POST_BUGS + PRE_BUGS)
def test_block_bug_is_caught_with_its_hint(rules, swap, probe):
    assert_caught(run(block_output=block_with(rules, swap)), PROBES, probe)


def test_a_post_bug_fails_only_the_post_checks():
    results = run(block_output=block_with({"post": RIGHT["pre"]}))
    failed = [r.name for r in results if not r.passed]
    assert failed == [
        "PostLNBlock: x = LN(x + G(x)) for each sub-layer",
        "both blocks work with scratch_rmsnorm",
    ]


@pytest.mark.parametrize(
    "final_for, probe",
    [
        ((), "final LN missing in the Pre-LN stack"),
        (("pre", "post"), "final LN added to the Post-LN stack"),
    ],
)
def test_stack_bug_is_caught_with_its_hint(final_for, probe):
    assert_caught(run(stack_output=stack_with(final_for)), PROBES, probe)


def test_stack_gradients_must_match_too():
    assert not all(r.passed for r in run(stack_grads=stack_grads_with(detach=True)))
    missing_final = stack_grads_with(stack_with(final_for=()))
    assert "final" not in messages(run(stack_grads=stack_grads_with()))
    assert not all(r.passed for r in run(stack_grads=missing_final))


# ----------------------------------------------------------------------------- from scratch


def test_library_layernorm_earns_nothing():
    def uses_library(x, gamma, beta, eps=1e-5):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps)

    results = run(scratch_layernorm=uses_library)
    assert all(not r.passed for r in results) and "from scratch" in messages(results)


def test_library_layernorm_inside_a_block_is_trapped_at_run_time():
    def library_norm(norm, gamma, beta):
        layer = torch.nn.LayerNorm(len(gamma), dtype=torch.float64)
        with torch.no_grad():
            layer.weight.copy_(gamma)
            layer.bias.copy_(beta)
        return layer

    def block_output(placement, norm, n_heads, x, w_qkv, w_out, w_up, w_down, gammas, betas):
        norms = [library_norm(norm, gammas[i], betas[i]) for i in (0, 1)]
        x = norms[0](x + attention(x, w_qkv, w_out, n_heads))
        return norms[1](x + torch.relu(x @ w_up) @ w_down)

    results = run(block_output=block_output)
    assert all(not r.passed for r in results)
    assert "torch.nn.LayerNorm" in messages(results)


# ----------------------------------------------------------------------------- practice problem


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (lambda s, b, w: b if w == 0 else b * min(1, (s - 1) / w), "counts steps from 0"),
        (lambda s, b, w: b if w == 0 else b * s / w, "never stops rising"),
        (lambda s, b, w: b if w == 0 else b * max(0.0, 1 - s / w), "decays instead"),
        (lambda s, b, w: b if w == 0 else b * min(1, s / (w + 1)), "peak one step late"),
    ],
)
def test_warmup_bug_is_caught_with_its_hint(buggy, probe):
    assert_caught(run(linear_warmup_lr=buggy), PROBES, probe)


def test_warmup_of_zero_steps_must_not_divide_by_zero():
    results = run(linear_warmup_lr=lambda s, b, w: b * min(1, s / w))
    assert "warmup_steps = 0 means no warmup" in messages(results)


def test_warmup_may_return_a_tensor_or_numpy_number():
    results = run(linear_warmup_lr=lambda s, b, w: torch.tensor(warmup(s, b, w)))
    assert all(r.passed for r in results)


@pytest.mark.parametrize("answer", ["bcd", "BCD", "d,c,b", "(b) (c) (d)", "b c d"])
def test_fixes_accepts_the_letters_in_any_usual_form(answer):
    (result,) = run(POSTLN_FIXES=answer)
    assert result.passed


@pytest.mark.parametrize(
    "answer", ["abcd", "bcde", "abcde", "bc", "b", "e", "", None, 4, "bcdz", "all"]
)
def test_wrong_or_missing_fixes_fail(answer):
    (result,) = run(POSTLN_FIXES=answer)
    assert not result.passed


def test_choosing_clipping_gets_the_clipping_hint():
    (result,) = run(POSTLN_FIXES="bcde")
    assert "Clipping rescales the whole gradient" in result.message
    assert "Warmup shrinks" not in result.message


def test_choosing_warmup_gets_the_warmup_hint():
    (result,) = run(POSTLN_FIXES="abcd")
    assert "Warmup shrinks only the first 50 steps" in result.message
    assert "Clipping rescales" not in result.message


def test_the_candidate_options_are_alike_in_length():
    lengths = [len(text) for text in lab.FIX_CANDIDATES.values()]
    assert max(lengths) <= 1.25 * min(lengths)


def test_the_answer_key_is_what_the_demo_measured():
    demo = json.loads((ROOT / "notebooks" / "06_pre_post_ln.ipynb").read_text())
    printed = "".join(
        "".join(output.get("text", ""))
        for cell in demo["cells"]
        if cell["cell_type"] == "code"
        for output in cell.get("outputs", [])
    )
    assert f"answer key: {lab.MEASURED_FIXES}\n" in printed
    for letter, run_name in [("a", "+ warmup"), ("e", "+ clipping")]:
        assert f"({letter})" in printed and run_name in printed


def test_stub_reports_not_implemented_and_does_not_raise():
    def stub(*args, **kwargs):
        raise NotImplementedError

    results = run(**{name: stub for name in lab.LAB.names if name != "POSTLN_FIXES"})
    assert results and all("not implemented yet" in r.message for r in results)
