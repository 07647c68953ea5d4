"""The GroupNorm/InstanceNorm/DyT lab's checks: right code passes; each known bug fails WITH its hint.

Also the chapter's claim that one function covers them all: ``normalize_over`` (written here)
equals ``F.batch_norm`` (training mode), ``F.layer_norm``, ``F.instance_norm`` and
``F.group_norm`` in float64.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import caught, lab_results, messages

from normlab.grader.checks import group_instance as gi

PROBES = (
    gi.NORMALIZE_PROBES
    + gi.GROUP_NORM_PROBES
    + gi.GROUP_BACKWARD_PROBES
    + gi.DYT_PROBES
    + gi.DYT_BACKWARD_PROBES
    + gi.STAT_GRADS_PROBES
)


run = functools.partial(lab_results, "05_group_instance")


# ----------------------------------------------------------------------------- references
# Written here, independently of the solution notebook, as the tests' own right answers.


def normalize_over(x, axes, eps=1e-5):
    axes = tuple(int(a) % x.ndim for a in np.atleast_1d(axes))
    mu = np.mean(x, axis=axes, keepdims=True)
    var = np.var(x, axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def _per_channel(p, x):
    return p.reshape([1, -1] + [1] * (x.ndim - 2))


def group_norm_forward(x, num_groups, gamma, beta, eps=1e-5):
    n, c = x.shape[0], x.shape[1]
    blocks = x.reshape(n, num_groups, c // num_groups, -1)
    x_hat = normalize_over(blocks, (2, 3), eps).reshape(x.shape)
    return _per_channel(gamma, x) * x_hat + _per_channel(beta, x)


def group_norm_backward(dy, x, num_groups, gamma, eps=1e-5):
    n = x.shape[0]
    m = x[0].size // num_groups  # values per group
    xg = x.reshape(n, num_groups, m)
    sigma = np.sqrt(xg.var(-1, keepdims=True) + eps)
    x_hat = (xg - xg.mean(-1, keepdims=True)) / sigma
    g = (dy * _per_channel(gamma, x)).reshape(n, num_groups, m)
    dx = (m * g - g.sum(-1, keepdims=True) - x_hat * (g * x_hat).sum(-1, keepdims=True)) / (
        m * sigma
    )
    others = tuple(a for a in range(x.ndim) if a != 1)
    return dx.reshape(x.shape), (dy * x_hat.reshape(x.shape)).sum(others), dy.sum(others)


def dyt_forward(x, alpha, gamma, beta):
    return np.tanh(alpha * x) * gamma + beta


def dyt_backward(dy, x, alpha, gamma):
    sech2 = 1.0 / np.cosh(alpha * x) ** 2
    lead = tuple(range(x.ndim - 1))
    upstream = dy * gamma * sech2
    return (
        upstream * alpha,
        np.asarray(np.sum(upstream * x)),
        np.sum(dy * np.tanh(alpha * x), axis=lead),
        np.sum(dy, axis=lead),
    )


def group_stat_grads(dy, x, num_groups, gamma, eps=1e-5):
    n = x.shape[0]
    xg = x.reshape(n, num_groups, -1)
    centred = xg - xg.mean(-1, keepdims=True)
    s = np.sqrt((centred**2).mean(-1) + eps)
    g = (dy * _per_channel(gamma, x)).reshape(n, num_groups, -1)
    return -g.sum(-1) / s, -0.5 * (g * centred).sum(-1) / s**3


def gn1_as_layernorm_params(gamma, beta, height, width):
    ones = np.ones((1, height, width))
    return gamma[:, None, None] * ones, beta[:, None, None] * ones


RIGHT = {
    "normalize_over": normalize_over,
    "group_norm_forward": group_norm_forward,
    "group_norm_backward": group_norm_backward,
    "dyt_forward": dyt_forward,
    "dyt_backward": dyt_backward,
    "gn1_as_layernorm_params": gn1_as_layernorm_params,
    "group_stat_grads": group_stat_grads,
    "BN_AXES": (0, 2, 3),
    "LN_AXES": [1, 2, 3],
    "IN_AXES": (-2, -1),
    "GN_LN_ANSWER": "(b)",
    "DYT_ANSWER": " C ",
}


def test_right_answers_get_full_marks():
    results = run(**RIGHT)
    assert [r.message for r in results if not r.passed] == []
    assert sum(r.points for r in results) == gi.LAB.max_score == 29


# ----------------------------------------------------------------------------- one function, four norms


def test_normalize_over_equals_the_four_torch_norms_in_float64():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 8, 5, 3)) * 2 + 1
    t = torch.from_numpy(x)
    cases = {
        (0, 2, 3): F.batch_norm(t, None, None, training=True),
        (1, 2, 3): F.layer_norm(t, (8, 5, 3)),
        (2, 3): F.instance_norm(t),
    }
    for axes, expected in cases.items():
        assert np.abs(normalize_over(x, axes) - expected.numpy()).max() < 1e-12
    grouped = normalize_over(x.reshape(4, 2, -1), (2,)).reshape(x.shape)
    assert np.abs(grouped - F.group_norm(t, 2).numpy()).max() < 1e-12


def test_group_norm_with_one_group_is_layer_norm_and_with_c_groups_is_instance_norm():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 6, 4, 4))
    t = torch.from_numpy(x)
    assert torch.allclose(F.group_norm(t, 1), F.layer_norm(t, (6, 4, 4)), atol=1e-12)
    assert torch.allclose(F.group_norm(t, 6), F.instance_norm(t), atol=1e-12)


def test_statistics_keep_the_axes_not_reduced_as_size_one():
    x = np.zeros((2, 3, 4, 5))
    assert x.mean(axis=(0, 2, 3), keepdims=True).shape == (1, 3, 1, 1)
    assert x.mean(axis=(2, 3), keepdims=True).shape == (2, 3, 1, 1)
    assert x.reshape(2, 3, -1).mean(axis=2, keepdims=True).shape == (2, 3, 1)


# ----------------------------------------------------------------------------- normalize_over bugs


def _normalize_with(ddof=0, eps_where="inside", axes_rule=None):
    def buggy(x, axes, eps=1e-5):
        axes = tuple(int(a) % x.ndim for a in np.atleast_1d(axes))
        if axes_rule == "complement":
            axes = tuple(a for a in range(x.ndim) if a not in axes)
        elif axes_rule == "first":
            axes = axes[:1]
        elif axes_rule == "last":
            axes = (-1,)
        elif axes_rule == "batch":
            axes = tuple(sorted(set(axes) | {0}))
        mu = x.mean(axis=axes, keepdims=True)
        var = x.var(axis=axes, ddof=ddof, keepdims=True)
        if eps_where == "outside":
            return (x - mu) / (np.sqrt(var) + eps)
        if eps_where == "none":
            return (x - mu) / np.sqrt(var)
        return (x - mu) / np.sqrt(var + eps)

    return buggy


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (_normalize_with(ddof=1), "unbiased variance"),
        (_normalize_with(eps_where="outside"), "eps outside the root"),
        (_normalize_with(eps_where="none"), "no eps"),
        (_normalize_with(axes_rule="complement"), "complementary axes"),
        (_normalize_with(axes_rule="first"), "first axis only"),
        (_normalize_with(axes_rule="last"), "last axis only"),
        (_normalize_with(axes_rule="batch"), "batch axis included"),
    ],
)
def test_normalize_over_bug_is_caught_with_its_hint(buggy, probe):
    assert caught(run(normalize_over=buggy), PROBES, probe)


def test_instance_norm_over_the_batch_too_is_named():
    """InstanceNorm that includes the batch axis: axes (2, 3) answered as BatchNorm."""
    results = run(normalize_over=_normalize_with(axes_rule="batch"))
    failed = [r for r in results if not r.passed]
    assert any("axes (2, 3)" in r.message and "batch axis 0" in r.message for r in failed)


def test_normalize_over_float64_for_float32_is_reported():
    def float64_always(x, axes, eps=1e-5):
        return normalize_over(x.astype(np.float64), axes, eps)

    results = run(normalize_over=float64_always)
    assert "dtype is float64 but the input was float32" in messages(results)


def test_normalize_over_that_drops_keepdims_fails():
    def no_keepdims(x, axes, eps=1e-5):
        axes = tuple(int(a) % x.ndim for a in np.atleast_1d(axes))
        return (x - x.mean(axis=axes)) / np.sqrt(x.var(axis=axes) + eps)

    results = run(normalize_over=no_keepdims)
    assert not all(r.passed for r in results)


# ----------------------------------------------------------------------------- GroupNorm forward bugs


def _group_norm_with(change):
    def buggy(x, num_groups, gamma, beta, eps=1e-5):
        n, c = x.shape[:2]
        ddof, outside = 0, False
        if change == "strided":
            view, axes = x.reshape((n, c // num_groups, num_groups) + x.shape[2:]), None
            axes = (1,) + tuple(range(3, view.ndim))
        elif change == "raw channels-last":
            view = x.reshape((n,) + x.shape[2:] + (num_groups, c // num_groups))
            axes = tuple(a for a in range(1, view.ndim) if a != view.ndim - 2)
        elif change == "group size":
            view, axes = x.reshape(n, c // num_groups, -1), (2,)
        elif change == "batch":
            view, axes = x.reshape(n, num_groups, -1), (0, 2)
        else:
            view, axes = x.reshape(n, num_groups, -1), (2,)
            ddof = 1 if change == "unbiased" else 0
            outside = change == "outside"
        mu = view.mean(axis=axes, keepdims=True)
        sd = view.std(axis=axes, ddof=ddof, keepdims=True)
        x_hat = ((view - mu) / (sd + eps if outside else np.sqrt(sd**2 + eps))).reshape(x.shape)
        if change == "no affine":
            return x_hat
        if change == "last axis":
            return x_hat * gamma + beta
        if change == "per group":
            gamma = np.repeat(gamma.reshape(num_groups, -1).mean(1), c // num_groups)
            beta = np.repeat(beta.reshape(num_groups, -1).mean(1), c // num_groups)
        return _per_channel(gamma, x) * x_hat + _per_channel(beta, x)

    return buggy


def channels_last_group_norm(x, num_groups, gamma, beta, eps=1e-5):
    """Correct for (N, H, W, C) input; here it receives (N, C, H, W)."""
    c = x.shape[-1]
    view = x.reshape(x.shape[:-1] + (num_groups, c // num_groups))
    axes = tuple(range(1, view.ndim - 2)) + (view.ndim - 1,)
    mu = view.mean(axis=axes, keepdims=True)
    var = view.var(axis=axes, keepdims=True)
    return ((view - mu) / np.sqrt(var + eps)).reshape(x.shape) * gamma + beta


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (_group_norm_with("strided"), "strided groups"),
        (_group_norm_with("raw channels-last"), "channels-last reshape"),
        (channels_last_group_norm, "channels-last confusion"),
        (_group_norm_with("last axis"), "affine along the last axis"),
        (_group_norm_with("group size"), "num_groups read as the group size"),
        (_group_norm_with("batch"), "batch axis included"),
        (_group_norm_with("per group"), "affine per group"),
        (_group_norm_with("unbiased"), "unbiased variance"),
        (_group_norm_with("outside"), "eps outside the root"),
        (_group_norm_with("no affine"), "affine step missing"),
    ],
)
def test_group_norm_forward_bug_is_caught_with_its_hint(buggy, probe):
    assert caught(run(group_norm_forward=buggy), PROBES, probe)


def test_affine_on_the_last_axis_gets_the_channel_hint_when_it_cannot_broadcast():
    results = run(group_norm_forward=_group_norm_with("last axis"))
    assert "could not be broadcast" in messages(results)
    assert "the channels are axis 1" in messages(results)


def test_statistics_over_the_batch_fail_the_batch_independence_check():
    results = run(group_norm_forward=_group_norm_with("batch"))
    independence = next(r for r in results if r.name.startswith("GroupNorm does not depend"))
    assert not independence.passed and "mix examples" in independence.message


def test_right_group_norm_of_the_wrong_layout_is_not_accepted_by_accident():
    """The channels-last version is right for NHWC: it must fail on every NCHW case it runs on."""
    results = run(group_norm_forward=channels_last_group_norm)
    assert sum(r.points for r in results) == 0


# ----------------------------------------------------------------------------- GroupNorm backward bugs


def _group_backward_with(change):
    def buggy(dy, x, num_groups, gamma, eps=1e-5):
        n, c = x.shape[:2]
        groups = c if change == "per channel" else num_groups
        m = x[0].size // groups
        xg = x.reshape(n, groups, m)
        sigma = np.sqrt(xg.var(-1, keepdims=True) + eps)
        x_hat = (xg - xg.mean(-1, keepdims=True)) / sigma
        g = dy if change == "no gamma" else dy * _per_channel(gamma, x)
        g = g.reshape(n, groups, m)
        mean_term = 0 if change in ("constants", "no mean") else g.mean(-1, keepdims=True)
        var_term = (
            0 if change in ("constants", "no var") else x_hat * (g * x_hat).mean(-1, keepdims=True)
        )
        dx = ((g - mean_term - var_term) / sigma).reshape(x.shape)
        right_hat = normalize_over(x.reshape(n, num_groups, -1), (2,), eps).reshape(x.shape)
        axes = (0,) if change == "batch only" else tuple(a for a in range(x.ndim) if a != 1)
        dgamma = (dy * (x if change == "from x" else right_hat)).sum(axes)
        dbeta = dy.sum(axes)
        if change == "swap":
            dgamma, dbeta = dbeta, dgamma
        return dx, dgamma, dbeta

    return buggy


@pytest.mark.parametrize(
    "change, probe",
    [
        ("constants", "statistics treated as constants"),
        ("no mean", "mean term missing"),
        ("no var", "variance term missing"),
        ("no gamma", "gamma missing in dx"),
        ("per channel", "per-channel means in the backward pass"),
        ("batch only", "summed over the batch axis only"),
        ("swap", "dgamma and dbeta swapped"),
        ("from x", "dgamma from x"),
    ],
)
def test_group_norm_backward_bug_is_caught_with_its_hint(change, probe):
    assert caught(run(group_norm_backward=_group_backward_with(change)), PROBES, probe)


def test_autograd_in_group_norm_backward_earns_nothing():
    def autograd_backward(dy, x, num_groups, gamma, eps=1e-5):
        xt = torch.tensor(x, requires_grad=True)
        gt = torch.tensor(gamma, requires_grad=True)
        bt = torch.zeros_like(gt, requires_grad=True)
        F.group_norm(xt, num_groups, gt, bt, eps).backward(torch.from_numpy(dy))
        return xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()

    results = run(group_norm_backward=autograd_backward)
    assert all(not r.passed for r in results)
    assert "F.group_norm" in messages(results) and "from scratch" in messages(results)


def test_library_group_norm_earns_nothing():
    def uses_torch(x, num_groups, gamma, beta, eps=1e-5):
        return torch.nn.functional.group_norm(
            torch.from_numpy(x), num_groups, torch.from_numpy(gamma), torch.from_numpy(beta), eps
        ).numpy()

    results = run(group_norm_forward=uses_torch)
    assert all(not r.passed for r in results)


def test_library_instance_norm_inside_normalize_over_earns_nothing():
    def uses_torch(x, axes, eps=1e-5):
        return F.instance_norm(torch.from_numpy(x), eps=eps).numpy()

    results = run(normalize_over=uses_torch)
    assert all(not r.passed for r in results)
    assert "F.instance_norm" in messages(results)


# ----------------------------------------------------------------------------- DyT forward bugs


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (lambda x, a, g, b: g * a * np.tanh(x) + b, "alpha outside tanh"),
        (lambda x, a, g, b: g * np.tanh(x) + b, "alpha missing"),
        (lambda x, a, g, b: np.tanh(a * g * x) + b, "gamma inside tanh"),
        (lambda x, a, g, b: np.tanh(a * x), "affine step missing"),
        (lambda x, a, g, b: b * np.tanh(a * x) + g, "gamma and beta swapped"),
        (
            lambda x, a, g, b: g * np.tanh(a * normalize_over(x, (-1,))) + b,
            "normalized first",
        ),
        (lambda x, a, g, b: g * np.clip(a * x, -1, 1) + b, "clipped instead of tanh"),
    ],
)
def test_dyt_forward_bug_is_caught_with_its_hint(buggy, probe):
    def dyt(x, alpha, gamma, beta):
        return buggy(x, alpha, gamma, beta)

    assert caught(run(dyt_forward=dyt), PROBES, probe)


def test_dyt_with_a_per_element_alpha_array_fails():
    """alpha made into an array the shape of x (a per-element alpha) must not pass."""

    def per_element_alpha(x, alpha, gamma, beta):
        alphas = np.full(x.shape, alpha) * np.linspace(0.5, 1.5, x.shape[-1])
        return gamma * np.tanh(alphas * x) + beta

    assert not all(r.passed for r in run(dyt_forward=per_element_alpha))


# ----------------------------------------------------------------------------- DyT backward bugs


def _dyt_backward_with(change):
    def buggy(dy, x, alpha, gamma):
        t = np.tanh(alpha * x)
        slope = {"one minus": 1 - t, "sech": 1 / np.cosh(alpha * x)}.get(change, 1 - t * t)
        up = (dy if change == "no gamma" else dy * gamma) * slope
        lead = tuple(range(x.ndim - 1))
        dx = up if change == "no alpha" else up * alpha
        each = up if change == "no x" else up * x
        if change == "not summed":
            dalpha = each
        elif change == "per feature":
            dalpha = each.sum(lead)
        else:
            dalpha = each.sum()
        dgamma = (dy * (x if change == "from x" else t)).sum(lead)
        dbeta = dy.sum(lead)
        if change == "swap":
            dgamma, dbeta = dbeta, dgamma
        return dx, dalpha, dgamma, dbeta

    return buggy


@pytest.mark.parametrize(
    "change, probe",
    [
        ("not summed", "dalpha not summed"),
        ("per feature", "dalpha per feature"),
        ("one minus", "tanh derivative as 1 - tanh"),
        ("sech", "tanh derivative as sech"),
        ("no alpha", "alpha missing in dx"),
        ("no x", "x missing in dalpha"),
        ("no gamma", "gamma missing"),
        ("from x", "dgamma from x"),
        ("swap", "dgamma and dbeta swapped"),
    ],
)
def test_dyt_backward_bug_is_caught_with_its_hint(change, probe):
    assert caught(run(dyt_backward=_dyt_backward_with(change)), PROBES, probe)


def test_dalpha_as_a_python_float_or_a_zero_d_array_is_accepted():
    def python_float(dy, x, alpha, gamma):
        dx, dalpha, dgamma, dbeta = dyt_backward(dy, x, alpha, gamma)
        return dx, float(dalpha), dgamma, dbeta

    assert all(r.passed for r in run(dyt_backward=python_float))


def test_dalpha_of_shape_one_is_reported_as_a_shape_error():
    def shape_one(dy, x, alpha, gamma):
        dx, dalpha, dgamma, dbeta = dyt_backward(dy, x, alpha, gamma)
        return dx, np.reshape(dalpha, (1,)), dgamma, dbeta

    assert "shape is (1,) but should be ()" in messages(run(dyt_backward=shape_one))


# ----------------------------------------------------------------------------- practice problems


@pytest.mark.parametrize(
    "name, answer, expected_text",
    [
        ("BN_AXES", (1, 2, 3), "LayerNorm's axes"),
        ("LN_AXES", (0, 2, 3), "BatchNorm's axes"),
        ("IN_AXES", (0, 2, 3), "BatchNorm's axes"),
        ("IN_AXES", (2,), "not the set of axes"),
        ("LN_AXES", (1, 2, 3, 4), "does not have"),
        ("BN_AXES", None, "no answer yet"),
        ("BN_AXES", "0, 2, 3", "expected a tuple"),
        ("IN_AXES", (2.0, 3.0), "integer axes"),
    ],
)
def test_wrong_axes_answers_are_explained(name, answer, expected_text):
    (result,) = run(**{name: answer})
    assert not result.passed and expected_text in result.message


@pytest.mark.parametrize("answer", [(0, 2, 3), [3, 2, 0], (0, -2, -1), np.array([0, 2, 3])])
def test_bn_axes_in_any_order_or_sign_pass(answer):
    (result,) = run(BN_AXES=answer)
    assert result.passed, result.message


@pytest.mark.parametrize(
    "wrong, expected_text",
    [
        (lambda g, b, h, w: (g, b), "Repeat each channel's gamma"),
        (
            lambda g, b, h, w: (
                np.broadcast_to(g, (len(g), h, w)),
                np.broadcast_to(b, (len(b), h, w)),
            ),
            "along the LAST axis",
        ),
        (lambda g, b, h, w: (np.ones((len(g), h, w)), np.zeros((len(g), h, w))), "for every x"),
        (lambda g, b, h, w: g, "a tuple of 2 was expected"),
    ],
)
def test_gn1_params_mistakes_are_explained(wrong, expected_text):
    (result,) = run(gn1_as_layernorm_params=wrong)
    assert not result.passed and expected_text in result.message


def test_gn1_params_really_turn_layer_norm_into_group_norm():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 4, 3, 5))
    gamma, beta = rng.normal(size=4), rng.normal(size=4)
    gamma_ln, beta_ln = gn1_as_layernorm_params(gamma, beta, 3, 5)
    t = torch.from_numpy
    ln = F.layer_norm(t(x), (4, 3, 5), t(gamma_ln), t(beta_ln))
    gn = F.group_norm(t(x), 1, t(gamma), t(beta))
    assert torch.allclose(ln, gn, atol=1e-12)


@pytest.mark.parametrize(
    "name, right, wrongs",
    [
        ("GN_LN_ANSWER", "b", ["a", "c", "d", "", None, 1]),
        ("DYT_ANSWER", "c", ["a", "b", "d", "tanh", None]),
    ],
)
def test_multiple_choice(name, right, wrongs):
    assert run(**{name: right})[0].passed
    for wrong in wrongs:
        assert not run(**{name: wrong})[0].passed


def test_stubs_report_not_implemented():
    def stub(*args, **kwargs):
        raise NotImplementedError

    names = [n for n in RIGHT if not n.isupper()]
    results = run(**{n: stub for n in names})
    assert all("not implemented yet" in r.message for r in results)


# ----------------------------------------------------------------------------- problem 4


def test_statistics_gradients_reassemble_the_groupnorm_backward():
    """dx = g / s + dvar * 2 (x - mean) / m + dmean / m: the chain rule through the nodes."""
    rng = np.random.default_rng(11)
    x = gi.images(rng, (2, 6, 3, 2))
    gamma, _ = gi.channel_params(rng, 6)
    dy = rng.normal(size=x.shape)
    dmean, dvar = gi.oracle_group_stat_grads(dy, x, 3, gamma)
    xg = x.reshape(2, 3, -1)
    m = xg.shape[-1]
    centred = xg - xg.mean(-1, keepdims=True)
    s = np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5)
    g = (dy * _per_channel(gamma, x)).reshape(2, 3, -1)
    dx = g / s + dvar[..., None] * 2 * centred / m + dmean[..., None] / m
    expected = gi.oracle_group_norm_backward(dy, x, 3, gamma)[0]
    assert np.allclose(dx.reshape(x.shape), expected, rtol=1e-10, atol=1e-12)


def test_the_path_from_the_mean_through_the_variance_contributes_nothing():
    """With var computed from the mean node, dL/dmean is unchanged: -(2/m) sum(x - mean) = 0."""
    rng = np.random.default_rng(12)
    x = gi.images(rng, (3, 4, 5))
    gamma, _ = gi.channel_params(rng, 4)
    dy = rng.normal(size=x.shape)
    xt = torch.from_numpy(x).reshape(3, 2, -1)
    mean = xt.mean(-1).detach().requires_grad_(True)
    var = ((xt - mean[..., None]) ** 2).mean(-1)
    x_hat = (xt - mean[..., None]) / torch.sqrt(var[..., None] + 1e-5)
    y = x_hat.reshape(x.shape) * torch.from_numpy(_per_channel(gamma, x))
    y.backward(torch.from_numpy(dy))
    direct = gi.oracle_group_stat_grads(dy, x, 2, gamma)[0]
    assert np.allclose(mean.grad.numpy(), direct, rtol=1e-10, atol=1e-12)


def _stat_grads_with(change):
    def buggy(dy, x, num_groups, gamma, eps=1e-5):
        n = x.shape[0]
        xg = x.reshape(n, num_groups, -1)
        centred = xg - xg.mean(-1, keepdims=True)
        var = (centred**2).mean(-1)
        s = np.sqrt(var) + eps if change == "eps outside" else np.sqrt(var + eps)
        g = dy if change == "no gamma" else dy * _per_channel(gamma, x)
        g = g.reshape(n, num_groups, -1)
        dmean = -g.mean(-1) / s if change == "mean not sum" else -g.sum(-1) / s
        if change == "sign":
            dmean = -dmean
        weighted = (g * centred).sum(-1)
        dvar = -0.5 * weighted / s**3
        if change == "no half":
            dvar = -weighted / s**3
        if change == "wrt std":
            dvar = -weighted / s**2
        return dmean, dvar

    return buggy


@pytest.mark.parametrize(
    "change, probe",
    [
        ("no gamma", "gamma missing"),
        ("no half", "dvar without the factor 1/2"),
        ("wrt std", "gradient with respect to the standard deviation"),
        ("sign", "dmean with the wrong sign"),
        ("mean not sum", "dmean averaged instead of summed"),
        ("eps outside", "eps outside the root"),
    ],
)
def test_statistics_gradient_bug_is_caught_with_its_hint(change, probe):
    assert caught(run(group_stat_grads=_stat_grads_with(change)), PROBES, probe)


def test_statistics_gradients_per_channel_are_a_shape_error():
    def per_channel(dy, x, num_groups, gamma, eps=1e-5):
        return group_stat_grads(dy, x, x.shape[1], gamma, eps)

    results = run(group_stat_grads=per_channel)
    assert not any(r.passed for r in results) and "shape" in messages(results)


def test_statistics_gradients_returned_in_the_wrong_order_fail():
    def swapped(dy, x, num_groups, gamma, eps=1e-5):
        dmean, dvar = group_stat_grads(dy, x, num_groups, gamma, eps)
        return dvar, dmean

    assert not any(r.passed for r in run(group_stat_grads=swapped))


def test_autograd_in_statistics_gradients_earns_nothing():
    def autograd(dy, x, num_groups, gamma, eps=1e-5):
        xt = torch.from_numpy(x).reshape(x.shape[0], num_groups, -1)
        mean = xt.mean(-1).detach().requires_grad_(True)
        var = xt.var(-1, correction=0).detach().requires_grad_(True)
        x_hat = (xt - mean[..., None]) / torch.sqrt(var[..., None] + eps)
        y = x_hat.reshape(x.shape) * torch.from_numpy(_per_channel(gamma, x))
        y.backward(torch.from_numpy(dy))
        return mean.grad.numpy(), var.grad.numpy()

    results = run(group_stat_grads=autograd)
    assert all(not r.passed for r in results)
    assert "from scratch" in messages(results)


# ----------------------------------------------------------------------------- eps ignored


def _with_eps(function, value):
    """``function`` with its eps argument replaced by a constant: eps accepted but ignored."""

    def ignoring(*args, eps=1e-5):
        return function(*args, eps=value)

    ignoring.__name__ = function.__name__
    return ignoring


@pytest.mark.parametrize("value, text", [(1e-5, "1e-5"), (1e-6, "1e-6"), (1e-8, "1e-8")])
@pytest.mark.parametrize("function", [normalize_over, group_norm_forward, group_norm_backward])
def test_eps_accepted_but_ignored_is_named(function, value, text):
    results = run(**{function.__name__: _with_eps(function, value)})
    assert caught(results, PROBES, f"eps ignored ({text} hard-coded)")
    if value == 1e-5:  # the lab's default: only the case with eps = 1e-3 can tell
        assert "eps = 1e-3" in messages(results)
