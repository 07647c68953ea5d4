"""The lab on current transformers' norms: right code passes; each known bug fails WITH its hint."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from conftest import assert_caught, lab_results, messages, solution_namespace

from normlab.grader import i18n
from normlab.grader.checks import modern_norms as lab

PROBES = lab.QK_PROBES + lab.QK_GRAD_PROBES + lab.POLICY_PROBES + lab.SUBLAYER_PROBES


run = functools.partial(lab_results, "09_modern_norms")


# ----------------------------------------------------------------------------- references
# Written here, independently of the solution notebook, as the tests' own right answers.


def rope(x, cos, sin):
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


def rms_over(x, dims, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps)


def qk_attention(over=-1, shared=False, rope_first=False, norm=True, scale=True, mask=True):
    def attention(q, k, v, gamma_q, gamma_k, cos, sin, eps=1e-6):
        gamma_k = gamma_q if shared else gamma_k
        if rope_first:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        if norm:
            q, k = rms_over(q, over, eps) * gamma_q, rms_over(k, over, eps) * gamma_k
        if not rope_first:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        scores = torch.einsum("bhid,bhjd->bhij", q, k)
        if scale:
            scores = scores * q.shape[-1] ** -0.5
        if mask:
            length = q.shape[-2]
            allowed = torch.tril(torch.ones(length, length, dtype=torch.bool))
            scores = torch.where(allowed, scores, -math.inf)
        return torch.softmax(scores, dim=-1) @ v

    return attention


def qk_grads(attention=None, detach=False):
    def norm(x, gamma):
        rms = x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
        return x / (rms.detach() if detach else rms) * gamma

    def attention_with_norm(q, k, v, gamma_q, gamma_k, cos, sin):
        q, k = rope(norm(q, gamma_q), cos, sin), rope(norm(k, gamma_k), cos, sin)
        return qk_attention(norm=False)(q, k, v, None, None, torch.ones(1), torch.zeros(1))

    forward = attention or attention_with_norm

    def grads(q, k, v, gamma_q, gamma_k, cos, sin, dy):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v, gamma_q, gamma_k)]
        forward(*leaves, cos, sin).backward(dy)
        return tuple(leaf.grad for leaf in leaves)

    return grads


def policy(offset_add=1.0, use_offset=None, swap=False, upcast=True, cast_back=True):
    """policy_rmsnorm_bf16 written here, with optional bugs."""

    def norm(x, weight, eps=1e-6, offset=False, multiply_in_float32=True):
        x, weight = x.to(torch.bfloat16), weight.to(torch.bfloat16)
        with_offset = offset if use_offset is None else use_offset
        in_float32 = multiply_in_float32 != swap
        if not upcast:
            # the usual code, run on bfloat16 tensors: every step rounds to bfloat16
            normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
            return (normed * ((offset_add + weight) if with_offset else weight)).float()
        wide = x.float()
        normed = wide / torch.sqrt((wide * wide).sum(-1, keepdim=True) / wide.shape[-1] + eps)
        if in_float32:
            gain = weight.float() + offset_add if with_offset else weight.float()
            y = normed * gain
            return (y.to(torch.bfloat16) if cast_back else y).float()
        gain = weight + offset_add if with_offset else weight
        return (normed.to(torch.bfloat16) * gain).float()

    return norm


def rms64(x, gamma):
    return x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * gamma


RULES = {
    "pre": lambda x, G, Ni, No, n: x + G(Ni(x)),
    "post": lambda x, G, Ni, No, n: No(x + G(x)),
    "peri": lambda x, G, Ni, No, n: x + No(G(Ni(x))),
    "olmo2": lambda x, G, Ni, No, n: x + No(G(x)),
    "scaled": lambda x, G, Ni, No, n: x + G(Ni(x) * n**-0.5),
}


def sublayer_with(**bugs):
    rules = {**RULES, **bugs}

    def output(placement, layer, x, w_up, w_down, gamma_in, gamma_out):
        return rules[placement](
            x,
            lambda v: (v @ w_up) / (1 + torch.exp(-(v @ w_up))) @ w_down,
            lambda v: rms64(v, gamma_in),
            lambda v: rms64(v, gamma_out),
            layer,
        )

    return output


RIGHT = {
    "qknorm_attention": qk_attention(),
    "qknorm_grads": qk_grads(),
    "policy_rmsnorm_bf16": policy(),
    "sublayer_output": sublayer_with(),
    "QK_BOUND_ANSWER": "a",
    "DECAY_ANSWER": "(c) towards 0 and towards 1",
    "NGPT_ANSWER": "D",
}


def test_right_answers_get_full_marks():
    results = run(**RIGHT)
    assert set(RIGHT) == set(lab.LAB.names)
    assert messages(results) == ""
    assert sum(r.points for r in results) == lab.LAB.max_score


def test_a_right_attention_through_autograd_of_the_learners_function_passes():
    results = run(qknorm_grads=qk_grads(attention=qk_attention()))
    assert messages(results) == ""


# ----------------------------------------------------------------------------- QK-norm bugs


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (qk_attention(over=1), "normalized over the heads"),
        (qk_attention(over=(1, 3)), "normalized over all heads together"),
        (qk_attention(shared=True), "one gamma shared by q and k"),
        (
            lambda q, k, v, gq, gk, cos, sin, eps=1e-6: qk_attention()(q, k, v, gk, gq, cos, sin),
            "gammas swapped",
        ),
        (qk_attention(rope_first=True), "rotary embedding before the norm"),
        (qk_attention(norm=False), "no QK-norm"),
        (qk_attention(scale=False), "no 1/sqrt(head_dim)"),
        (qk_attention(mask=False), "not causal"),
    ],
)
def test_qknorm_bug_is_caught_with_its_hint(buggy, probe):
    assert_caught(run(qknorm_attention=buggy), PROBES, probe)


def test_detached_rms_is_caught_with_its_hint():
    assert_caught(run(qknorm_grads=qk_grads(detach=True)), PROBES, "RMS detached")


def test_rotary_before_the_norm_passes_when_the_gains_are_constant():
    # why the check uses gains that are not constant: a rotation keeps each vector's RMS
    rng = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=rng, dtype=torch.float64) for _ in range(3))
    cos, sin = (torch.as_tensor(t) for t in lab.rotary_tables(5, 8))
    ones = torch.full((8,), 1.7, dtype=torch.float64)
    first = qk_attention(rope_first=True)(q, k, v, ones, ones, cos, sin)
    assert torch.allclose(first, qk_attention()(q, k, v, ones, ones, cos, sin), atol=1e-12)


# ----------------------------------------------------------------------------- policy bugs


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (policy(offset_add=2.0), "offset applied twice"),
        (policy(use_offset=False), "offset ignored"),
        (policy(use_offset=True), "offset always applied"),
        (policy(swap=True), "wrong cast order"),
        (policy(upcast=False), "no float32 stage"),
        (policy(cast_back=False), "not cast back"),
    ],
)
def test_policy_bug_is_caught_with_its_hint(buggy, probe):
    assert_caught(run(policy_rmsnorm_bf16=buggy), PROBES, probe)


def test_the_two_cast_orders_differ_in_many_values_and_a_right_answer_in_none():
    # the margin the bfloat16 comparison relies on, measured on the checks' own inputs
    import numpy as np

    rng = np.random.default_rng(94)
    x, weight = lab._policy_case(rng, 32, 64, offset=True)
    gemma = lab.oracle_policy_rmsnorm(x, weight, offset=True, multiply_in_float32=True)
    llama = lab.oracle_policy_rmsnorm(x, weight, offset=True, multiply_in_float32=False)
    ours = policy()(torch.as_tensor(x), torch.as_tensor(weight), offset=True).numpy()
    assert np.mean(lab.bf16_ulps(llama, gemma) >= lab.BF16_SAME) > 5 * lab.BF16_OFF_FRACTION
    assert np.mean(lab.bf16_ulps(ours, gemma) >= lab.BF16_SAME) <= lab.BF16_OFF_FRACTION


# ----------------------------------------------------------------------------- placement bugs


@pytest.mark.parametrize(
    "bugs, probe",
    [
        ({"peri": RULES["pre"]}, "peri: output norm missing"),
        (
            {"peri": lambda x, G, Ni, No, n: No(x + G(Ni(x)))},
            "peri: output norm after the addition",
        ),
        ({"peri": RULES["olmo2"]}, "peri: input norm missing"),
        ({"olmo2": RULES["peri"]}, "olmo2: input norm added"),
        ({"olmo2": RULES["post"]}, "olmo2: norm after the addition"),
        ({"olmo2": lambda x, G, Ni, No, n: x + G(x)}, "olmo2: no norm"),
        ({"scaled": lambda x, G, Ni, No, n: x + G(Ni(x) / n)}, "scaled: by 1/layer"),
        ({"scaled": lambda x, G, Ni, No, n: x + G(Ni(x) * math.sqrt(n))}, "scaled: by sqrt(layer)"),
        (
            {"scaled": lambda x, G, Ni, No, n: x + G(Ni(x)) / math.sqrt(n)},
            "scaled: the sub-layer's output",
        ),
        ({"scaled": RULES["pre"]}, "scaled: no scaling"),
        ({"pre": RULES["post"]}, "pre: post instead"),
        ({"post": RULES["pre"]}, "post: pre instead"),
    ],
)
def test_placement_bug_is_caught_with_its_hint(bugs, probe):
    assert_caught(run(sublayer_output=sublayer_with(**bugs)), PROBES, probe)


def test_a_peri_bug_fails_only_the_peri_check():
    results = run(sublayer_output=sublayer_with(peri=RULES["pre"]))
    assert [r.name for r in results if not r.passed] == [
        "residual_sublayer: Peri-LN, x + N_out(G(N_in(x)))"
    ]


# ----------------------------------------------------------------------------- practice problems


@pytest.mark.parametrize(
    "name, wrong, why",
    [
        ("QK_BOUND_ANSWER", "c", lab.QK_BOUND_WHY["c"]),
        ("DECAY_ANSWER", "b", lab.DECAY_WHY["b"]),
        ("NGPT_ANSWER", "(b)", lab.NGPT_WHY["b"]),
    ],
)
def test_a_wrong_letter_gets_its_misconception(name, wrong, why):
    assert why in messages(run(**{name: wrong}))


def test_two_letters_are_told_so():
    assert "several" in messages(run(QK_BOUND_ANSWER="a or b")) or "one letter" in messages(
        run(QK_BOUND_ANSWER="a or b")
    )


# ----------------------------------------------------------------------------- the solution, changed
# Each mistake written as a change of the solution notebook's own code, checked as the lab's
# check cell checks it: check(function), that function's checks only.


def test_one_plus_weight_rounded_to_bfloat16_gets_the_chapters_why():
    change = (
        "        gain = weight.to(wide.dtype)\n        if offset:\n            gain = 1.0 + gain\n",
        "        gain = (1.0 + weight if offset else weight).to(wide.dtype)\n",
    )
    namespace = solution_namespace("09_modern_norms", replace=change)
    results = run(policy_rmsnorm_bf16=namespace["policy_rmsnorm_bf16"])
    assert_caught(results, PROBES, "1 + weight rounded to bfloat16")
    (bad,) = [r for r in results if not r.passed]  # Gemma's order: the only one it changes
    assert "offset=True, multiply_in_float32=True" in bad.message
    assert i18n.translation(bad.message, i18n.catalog("es"))[1] == []


def test_qknorm_grads_on_a_wrong_attention_names_the_attention_first():
    # the adapter is right; the attention it differentiates scales k by gamma_q
    change = ("+ eps) * gamma_k", "+ eps) * gamma_q")
    namespace = solution_namespace("09_modern_norms", replace=change)
    (result,) = run(qknorm_grads=namespace["qknorm_grads"])
    assert result.message.split("\n")[0] == (
        "Fix `qknorm_attention` first: it fails its own check, “QK-norm attention: RMSNorm of "
        "each head over head_dim, then rotary, then causal softmax”."
    )
    assert i18n.translation(result.message, i18n.catalog("es"))[1] == []
    (right,) = run(qknorm_grads=solution_namespace("09_modern_norms")["qknorm_grads"])
    assert right.passed
