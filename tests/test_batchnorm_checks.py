"""The BatchNorm lab's checks: right code passes; each known bug fails WITH its hint."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from conftest import hints, lab_results, messages, told

from normlab.grader.checks import batchnorm as bn

HINTS = hints(bn.FORWARD_PROBES + bn.BACKWARD_PROBES)


run = functools.partial(lab_results, "02_batchnorm")


# ----------------------------------------------------------------------------- references
# Written here, independently of the solution notebook, as the tests' own right answers. They
# move the channel axis last and flatten everything else, so that statistics run over axis 0.


def to_rows(a):
    """(B, C, ...) -> (n, C) with n = B * H * W, and the function that undoes it."""
    moved = np.moveaxis(a, 1, -1)
    return moved.reshape(-1, a.shape[1]), lambda r: np.moveaxis(r.reshape(moved.shape), -1, 1)


def make_forward(
    keras=False,
    never=False,
    biased_store=False,
    eval_batch=False,
    eps_out=False,
    layer=False,
    batch_count=False,
    unbiased_norm=False,
    affine_last=False,
):
    def forward(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        rows, back = to_rows(x)
        n = rows.shape[0]
        if layer:  # statistics over the features of each example
            flat = x.reshape(x.shape[0], -1)
            mu = flat.mean(1, keepdims=True)
            var = flat.var(1, keepdims=True)
            y = ((flat - mu) / np.sqrt(var + eps)).reshape(x.shape)
            shape = (1, -1) + (1,) * (x.ndim - 2)
            return y * gamma.reshape(shape) + beta.reshape(shape), running_mean, running_var
        if training or eval_batch:
            mu, var = rows.mean(0), rows.var(0)
            norm_var = var * n / (n - 1) if unbiased_norm else var
        else:
            mu, norm_var = running_mean, running_var
        denominator = np.sqrt(norm_var) + eps if eps_out else np.sqrt(norm_var + eps)
        if affine_last:
            y = back((rows - mu) / denominator) * gamma + beta
        else:
            y = back((rows - mu) / denominator * gamma + beta)
        if not training or never:
            return y, running_mean.copy(), running_var.copy()
        count = x.shape[0] if batch_count else n
        stored = rows.var(0) if biased_store else rows.var(0) * count / (count - 1)
        keep = momentum if keras else 1 - momentum
        new_mean = keep * running_mean + (1 - keep) * rows.mean(0)
        new_var = keep * running_var + (1 - keep) * stored
        return y, new_mean, new_var

    return forward


def make_backward(
    constants=False,
    no_mean=False,
    no_var=False,
    unsummed=False,
    batch_only=False,
    keepdims=False,
    swap=False,
    layer=False,
):
    def backward(dy, x, gamma, eps=1e-5):
        if layer:
            flat, dflat = x.reshape(x.shape[0], -1), dy.reshape(x.shape[0], -1)
            shape = (1, -1) + (1,) * (x.ndim - 2)
            g = (dy * gamma.reshape(shape)).reshape(flat.shape)
            s = np.sqrt(flat.var(1, keepdims=True) + eps)
            xh = (flat - flat.mean(1, keepdims=True)) / s
            dx = (g - g.mean(1, keepdims=True) - xh * (g * xh).mean(1, keepdims=True)) / s
            axes = (0,) + tuple(range(2, x.ndim))
            dgamma = (dy * xh.reshape(x.shape)).sum(axes)
            return dx.reshape(x.shape), dgamma, dflat.reshape(x.shape).sum(axes)
        rows, back = to_rows(x)
        drows, _ = to_rows(dy)
        n = rows.shape[0]
        s = np.sqrt(rows.var(0) + eps)
        xh = (rows - rows.mean(0)) / s
        g = drows * gamma
        mean_part = 0 if (constants or no_mean) else g.sum(0)
        var_part = 0 if (constants or no_var) else xh * (g * xh).sum(0)
        dx = back((n * g - mean_part - var_part) / (n * s))
        if unsummed:
            return dx, back(drows * xh), dy
        if batch_only:
            return dx, (dy * back(xh)).sum(0), dy.sum(0)
        dgamma, dbeta = (drows * xh).sum(0), drows.sum(0)
        if keepdims:
            shape = (1, -1) + (1,) * (x.ndim - 2)
            dgamma, dbeta = dgamma.reshape(shape), dbeta.reshape(shape)
        return (dx, dbeta, dgamma) if swap else (dx, dgamma, dbeta)

    return backward


def eval_affine(gamma, beta, running_mean, running_var, eps=1e-5):
    scale = gamma / np.sqrt(running_var + eps)
    return scale, beta - running_mean * scale


def one_step(x, momentum=0.1):
    rows, _ = to_rows(x)
    return (1 - momentum) + momentum * rows.var(0, ddof=1)


def test_right_answers_get_full_marks():
    results = run(
        batchnorm_forward=make_forward(),
        batchnorm_backward=make_backward(),
        eval_affine=eval_affine,
        COMPANIONS_ANSWER=" (B) ",
        running_var_after_one_step=one_step,
    )
    assert [r.message for r in results if not r.passed] == []
    assert sum(r.points for r in results) == bn.LAB.max_score == 20


# ----------------------------------------------------------------------------- forward bugs


@pytest.mark.parametrize(
    "changes, probe",
    [
        ({"layer": True}, "normalized over features"),
        ({"keras": True}, "momentum convention flipped"),
        ({"never": True}, "running statistics never updated"),
        ({"biased_store": True}, "running variance stored biased"),
        ({"eval_batch": True}, "eval mode uses batch statistics"),
        ({"eps_out": True}, "eps outside the root"),
        ({"batch_count": True}, "Bessel correction with B instead of B*H*W"),
        ({"unbiased_norm": True}, "unbiased variance to normalize"),
        ({"affine_last": True}, "gamma broadcast along the last axis"),
    ],
)
def test_forward_bug_is_caught_with_its_hint(changes, probe):
    results = run(batchnorm_forward=make_forward(**changes))
    assert not all(r.passed for r in results)
    assert HINTS[probe] in messages(results)


def test_momentum_ignored_is_named():
    def replace(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        return make_forward()(x, gamma, beta, running_mean, running_var, training, 1.0, eps)

    assert HINTS["momentum ignored"] in messages(run(batchnorm_forward=replace))


def test_eval_mode_that_updates_the_running_statistics_is_named():
    right = make_forward()

    def updates(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        y = right(x, gamma, beta, running_mean, running_var, training, momentum, eps)[0]
        _, m, v = right(x, gamma, beta, running_mean, running_var, True, momentum, eps)
        return y, m, v

    results = run(batchnorm_forward=updates)
    assert HINTS["eval mode updates the running statistics"] in messages(results)
    failed = {r.name for r in results if not r.passed}
    assert any(name.startswith("eval mode") for name in failed)


def test_statistics_over_batch_axis_only_on_images_is_named():
    right = make_forward()

    def batch_only(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        y, new_mean, new_var = right(x, gamma, beta, running_mean, running_var, training, momentum)
        if x.ndim == 4 and training:  # one mean per (c, h, w) position
            mu, var = x.mean(0, keepdims=True), x.var(0, keepdims=True)
            y = (x - mu) / np.sqrt(var + eps) * gamma[:, None, None] + beta[:, None, None]
        return y, new_mean, new_var

    results = run(batchnorm_forward=batch_only)
    assert HINTS["statistics over the batch axis only"] in messages(results)


def test_no_eps_and_no_affine_are_named():
    def no_eps(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        with np.errstate(all="ignore"):  # 0/0 on the constant channel is the point
            return make_forward()(x, gamma, beta, running_mean, running_var, training, momentum, 0)

    assert HINTS["no eps"] in messages(run(batchnorm_forward=no_eps))

    def no_affine(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        ones, zeros = np.ones_like(gamma), np.zeros_like(beta)
        return make_forward()(x, ones, zeros, running_mean, running_var, training, momentum, eps)

    assert HINTS["affine step missing"] in messages(run(batchnorm_forward=no_affine))


def test_only_y_returned_is_explained():
    def only_y(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        return make_forward()(x, gamma, beta, running_mean, running_var, training, momentum)[0]

    assert "but a tuple of 3 was expected" in messages(run(batchnorm_forward=only_y))


def test_keras_convention_is_named_after_k_steps_too():
    results = run(batchnorm_forward=make_forward(keras=True))
    k_steps = next(r for r in results if r.name.startswith("k training steps"))
    assert not k_steps.passed
    assert HINTS["momentum convention flipped"] in told(results, k_steps.name)


def test_one_pass_variance_fails_the_float32_check_and_says_why():
    right = make_forward()

    def one_pass(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        if not training or x.ndim != 2:
            return right(x, gamma, beta, running_mean, running_var, training, momentum, eps)
        mu = x.mean(0)
        var = (x * x).mean(0) - mu * mu
        y = (x - mu) / np.sqrt(var + np.float32(eps)) * gamma + beta
        return (y, *right(x, gamma, beta, running_mean, running_var, True, momentum, eps)[1:])

    results = run(batchnorm_forward=one_pass)
    failed = [r for r in results if not r.passed]
    assert [r.name for r in failed] == [
        "float32 input with a large offset (x + 1e3): accurate, stays float32"
    ]
    assert "mean(x**2) - mean(x)**2" in failed[0].message


def test_float32_in_float64_out_is_reported():
    right = make_forward()

    def upcast(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        args = (x, gamma, beta, running_mean, running_var)
        return right(*(a.astype(np.float64) for a in args), training, momentum, eps)

    failed = [r for r in run(batchnorm_forward=upcast) if not r.passed]
    assert len(failed) == 1 and "dtype is float64 but the input was float32" in failed[0].message


def test_failure_message_says_where():
    message = messages(run(batchnorm_forward=make_forward(biased_store=True)))
    assert "max abs error" in message and "worst at index" in message and "momentum=" in message


# ----------------------------------------------------------------------------- backward bugs


@pytest.mark.parametrize(
    "changes, probe",
    [
        ({"constants": True}, "mean and variance treated as constants"),
        ({"no_mean": True}, "mean term missing"),
        ({"no_var": True}, "variance term missing"),
        ({"unsummed": True}, "dgamma and dbeta not summed"),
        ({"batch_only": True}, "dgamma and dbeta summed over the batch only"),
        ({"keepdims": True}, "gradient kept a reduced axis"),
        ({"swap": True}, "dgamma and dbeta swapped"),
        ({"layer": True}, "LayerNorm backward"),
    ],
)
def test_backward_bug_is_caught_with_its_hint(changes, probe):
    results = run(batchnorm_backward=make_backward(**changes))
    assert not all(r.passed for r in results)
    assert HINTS[probe] in messages(results)


def test_gradient_of_shape_1_d_does_not_pass_silently():
    message = messages(run(batchnorm_backward=make_backward(keepdims=True)))
    assert "shape is (1, 4) but should be (4,)" in message
    assert "shape is (1, 3, 1, 1) but should be (3,)" in message


def test_gamma_missing_in_dx_is_named():
    def no_gamma(dy, x, gamma, eps=1e-5):
        dx = make_backward()(dy, x, np.ones_like(gamma), eps)[0]
        return (dx, *make_backward()(dy, x, gamma, eps)[1:])

    assert HINTS["gamma missing in dx"] in messages(run(batchnorm_backward=no_gamma))


# ----------------------------------------------------------------------------- from scratch


def test_library_batchnorm_earns_nothing():
    import torch
    import torch.nn.functional as F

    def uses_torch(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        mean, var = torch.from_numpy(running_mean.copy()), torch.from_numpy(running_var.copy())
        y = F.batch_norm(
            torch.from_numpy(x),
            mean,
            var,
            torch.from_numpy(gamma),
            torch.from_numpy(beta),
            training,
            momentum,
            eps,
        )
        return y.numpy(), mean.numpy(), var.numpy()

    results = run(batchnorm_forward=uses_torch)
    assert all(not r.passed for r in results)
    assert "uses F.batch_norm" in messages(results) and "from scratch" in messages(results)


def test_library_module_hidden_behind_getattr_is_trapped_at_run_time():
    import torch

    def sneaky(x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5):
        kind = getattr(torch.nn, "BatchNorm" + ("1d" if x.ndim == 2 else "2d"))
        module = kind(x.shape[1], eps=eps, momentum=momentum, dtype=torch.float64)
        module.train(training)
        with torch.no_grad():
            module.weight.copy_(torch.from_numpy(gamma))
            module.bias.copy_(torch.from_numpy(beta))
            module.running_mean.copy_(torch.from_numpy(running_mean))
            module.running_var.copy_(torch.from_numpy(running_var))
            y = module(torch.from_numpy(x)).numpy()
        return y, module.running_mean.numpy(), module.running_var.numpy()

    results = run(batchnorm_forward=sneaky)
    assert all(not r.passed for r in results)
    assert "torch.nn.BatchNorm" in messages(results)


def test_autograd_in_backward_earns_nothing():
    import torch

    def autograd_backward(dy, x, gamma, eps=1e-5):
        xt = torch.tensor(x, requires_grad=True)
        gt = torch.tensor(gamma, requires_grad=True)
        axes = (0,) + tuple(range(2, x.ndim))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        mu = xt.mean(axes, keepdim=True)
        var = xt.var(axes, unbiased=False, keepdim=True)
        y = gt.reshape(shape) * (xt - mu) / torch.sqrt(var + eps)
        y.backward(torch.from_numpy(dy))
        return xt.grad.numpy(), gt.grad.numpy(), dy.sum(axes)

    results = run(batchnorm_backward=autograd_backward)
    assert all(not r.passed for r in results)
    assert "y.backward" in messages(results)


# ----------------------------------------------------------------------------- practice problems


@pytest.mark.parametrize(
    "wrong, expected_text",
    [
        (lambda g, b, m, v, eps=1e-5: (g / (v + eps), b - m * g / (v + eps)), "sqrt(running_var"),
        (
            lambda g, b, m, v, eps=1e-5: (g / (np.sqrt(v) + eps), b - m * g / (np.sqrt(v) + eps)),
            "inside the root",
        ),
        (lambda g, b, m, v, eps=1e-5: (g / np.sqrt(v + eps), b - m), "multiplied by the scale"),
        (
            lambda g, b, m, v, eps=1e-5: (g / np.sqrt(v + eps), b + m * g / np.sqrt(v + eps)),
            "wrong sign",
        ),
        (lambda g, b, m, v, eps=1e-5: g / np.sqrt(v + eps), "a tuple of 2 was expected"),
    ],
)
def test_eval_affine_mistakes_are_explained(wrong, expected_text):
    (result,) = run(eval_affine=wrong)
    assert not result.passed and expected_text in result.message


def test_eval_affine_reproduces_eval_mode_forward():
    rng = np.random.default_rng(0)
    gamma, beta, mean, var = (
        rng.normal(size=4),
        rng.normal(size=4),
        rng.normal(size=4),
        rng.uniform(1, 2, 4),
    )
    x = rng.normal(size=(7, 4))
    scale, shift = eval_affine(gamma, beta, mean, var)
    y = make_forward()(x, gamma, beta, mean, var, False)[0]
    assert np.allclose(scale * x + shift, y, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("answer", ["a", "c", "d", "", None, 2, "because"])
def test_wrong_or_missing_multiple_choice_answers_fail(answer):
    (result,) = run(COMPANIONS_ANSWER=answer)
    assert not result.passed


@pytest.mark.parametrize("answer", ["b", "B", " (b) "])
def test_multiple_choice_accepts_the_letter_in_any_usual_form(answer):
    (result,) = run(COMPANIONS_ANSWER=answer)
    assert result.passed


@pytest.mark.parametrize(
    "wrong, expected_text",
    [
        (lambda x, momentum=0.1: (1 - momentum) + momentum * to_rows(x)[0].var(0), "biased"),
        (lambda x, momentum=0.1: momentum + (1 - momentum) * to_rows(x)[0].var(0, ddof=1), "Keras"),
        (lambda x, momentum=0.1: to_rows(x)[0].var(0, ddof=1), "batch variance itself"),
        (lambda x, momentum=0.1: np.ones(x.shape[1]), "one training step moves it"),
    ],
)
def test_one_step_mistakes_are_explained(wrong, expected_text):
    (result,) = run(running_var_after_one_step=wrong)
    assert not result.passed and expected_text in result.message


def test_one_step_value_by_hand():
    # x = [0, 2] in one channel: unbiased variance 2, so 0.9 * 1 + 0.1 * 2 = 1.1
    assert np.isclose(one_step(np.array([[0.0], [2.0]]))[0], 1.1)


def test_stub_reports_not_implemented_and_does_not_raise():
    def stub(*args, **kwargs):
        raise NotImplementedError

    results = run(batchnorm_forward=stub, batchnorm_backward=stub)
    assert results and all("not implemented yet" in r.message for r in results)


# ----------------------------------------------------------------------------- real-world code
# Implementations in the styles public code uses, each with a slip that real code has.


def cs231n_forward(store="biased", keep_momentum=False, hard_coded_eps=None):
    """CS231n's batchnorm_forward (a cache, bn_param-style running statistics), fitted to this
    lab's signature. CS231n stores the biased np.var(x, axis=0) in running_var and uses
    momentum as the weight of the OLD average (0.9 there)."""

    def batchnorm_forward(
        x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5
    ):
        eps = hard_coded_eps or eps
        bn_param = {"running_mean": running_mean.copy(), "running_var": running_var.copy()}
        shape = (1, -1) + (1,) * (x.ndim - 2)
        axes = (0,) + tuple(range(2, x.ndim))
        if training:
            sample_mean = x.mean(axis=axes)
            sample_var = x.var(axis=axes)
            x_hat = (x - sample_mean.reshape(shape)) / np.sqrt(sample_var.reshape(shape) + eps)
            out = gamma.reshape(shape) * x_hat + beta.reshape(shape)
            n = x.size // x.shape[1]
            stored = sample_var if store == "biased" else sample_var * n / (n - 1)
            old = momentum if keep_momentum else 1 - momentum
            bn_param["running_mean"] = old * bn_param["running_mean"] + (1 - old) * sample_mean
            bn_param["running_var"] = old * bn_param["running_var"] + (1 - old) * stored
        else:
            mean, var = running_mean.reshape(shape), running_var.reshape(shape)
            out = gamma.reshape(shape) * (x - mean) / np.sqrt(var + eps) + beta.reshape(shape)
        return out, bn_param["running_mean"], bn_param["running_var"]

    return batchnorm_forward


def test_cs231n_biased_running_variance_costs_one_check_and_is_named_once():
    results = run(batchnorm_forward=cs231n_forward())
    failed = [r for r in results if not r.passed]
    assert [r.name for r in failed] == [
        "train mode: running statistics updated like PyTorch (momentum, unbiased variance)"
    ]
    hint = HINTS["running variance stored biased"]
    assert sum(r.message.count(hint) for r in results) == 1
    assert sum(r.max_points - r.points for r in results) == 2


def test_cs231n_momentum_and_biased_variance_together_name_both():
    message = messages(run(batchnorm_forward=cs231n_forward(keep_momentum=True)))
    assert "(momentum convention flipped) and (running variance stored biased)" in message
    assert HINTS["momentum convention flipped"] in message
    assert HINTS["running variance stored biased"] in message


def test_cs231n_style_with_the_unbiased_running_variance_gets_full_marks():
    results = run(batchnorm_forward=cs231n_forward(store="unbiased"))
    assert [r.message for r in results if not r.passed] == []


FORWARD_HINTS = hints(bn.FORWARD_PROBES)
BACKWARD_HINTS = hints(bn.BACKWARD_PROBES)


@pytest.mark.parametrize("value, text", [(1e-5, "1e-5"), (1e-6, "1e-6"), (1e-8, "1e-8")])
def test_eps_accepted_but_ignored_is_named(value, text):
    message = messages(run(batchnorm_forward=cs231n_forward("unbiased", hard_coded_eps=value)))
    assert FORWARD_HINTS[f"eps ignored ({text} hard-coded)"] in message

    def batchnorm_backward(dy, x, gamma, eps=1e-5):
        return make_backward()(dy, x, gamma, value)

    message = messages(run(batchnorm_backward=batchnorm_backward))
    assert BACKWARD_HINTS[f"eps ignored ({text} hard-coded)"] in message


def test_nan_in_backward_names_the_constant_column():
    def no_eps(dy, x, gamma, eps=1e-5):
        with np.errstate(all="ignore"):
            return make_backward()(dy, x, gamma, 0.0)

    message = messages(run(batchnorm_backward=no_eps))
    assert "they are all in column 1 (the other 3 columns are finite)" in message
    assert "where x is constant along the column" in message
    assert BACKWARD_HINTS["no eps in the backward pass"] in message
