"""The RMSNorm lab's checks: right code passes; each known bug fails WITH its hint."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from conftest import hints, lab_results, messages, told

from normlab.grader.checks import rmsnorm as rn

FORWARD_HINTS = hints(rn.FORWARD_PROBES)
BACKWARD_HINTS = hints(rn.BACKWARD_PROBES)
LAYER_JACOBIAN_HINTS = hints(rn.LAYER_JACOBIAN_PROBES)
RMS_JACOBIAN_HINTS = hints(rn.RMS_JACOBIAN_PROBES)


run = functools.partial(lab_results, "04_rmsnorm")


# ----------------------------------------------------------------------------- references
# Written here, independently of the solution notebook, as the tests' own right answers.


def forward(x, gamma, eps=1e-6):
    return gamma * x / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + eps)


def backward(dy, x, gamma, eps=1e-6):
    d = x.shape[-1]
    rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    g = dy * gamma
    dx = g / rms - x * np.sum(g * x, axis=-1, keepdims=True) / (d * rms**3)
    return dx, np.sum(dy * x / rms, axis=tuple(range(x.ndim - 1)))


def layer_jacobian(x, gamma, eps):
    # Entry by entry from y_i = gamma_i (x_i - mu) / sigma, sigma = sqrt(var + eps).
    d = len(x)
    mu = sum(x) / d
    sigma = np.sqrt(sum((v - mu) ** 2 for v in x) / d + eps)
    J = np.empty((d, d))
    for i in range(d):
        for j in range(d):
            dcentred = (i == j) - 1 / d  # d(x_i - mu)/dx_j
            dsigma = (x[j] - mu) / (d * sigma)  # d sigma/dx_j
            J[i, j] = gamma[i] * (dcentred * sigma - (x[i] - mu) * dsigma) / sigma**2
    return J


def rms_jacobian(x, gamma, eps):
    d = len(x)
    rms = np.sqrt(np.dot(x, x) / d + eps)
    return np.diag(gamma / rms) - np.outer(gamma * x, x) / (d * rms**3)


RIGHT = {
    "rmsnorm_forward": forward,
    "rmsnorm_backward": backward,
    "layernorm_jacobian": layer_jacobian,
    "rmsnorm_jacobian": rms_jacobian,
    "JACOBIAN_ANSWER": "b",
}


def test_right_answers_get_full_marks():
    results = run(**RIGHT)
    assert [r.message for r in results if not r.passed] == []
    assert sum(r.points for r in results) == 18 == rn.LAB.max_score


# ----------------------------------------------------------------------------- forward bugs


def _ms(x, axis=-1):
    return np.mean(x**2, axis=axis, keepdims=True)


def subtracts_mean(x, gamma, eps=1e-6):
    centred = x - x.mean(-1, keepdims=True)
    return gamma * centred / np.sqrt(_ms(centred) + eps)


def standard_deviation(x, gamma, eps=1e-6):
    return gamma * x / np.sqrt(x.var(-1, keepdims=True) + eps)


def eps_outside(x, gamma, eps=1e-6):
    return gamma * x / (np.sqrt(_ms(x)) + eps)


def no_eps(x, gamma, eps=1e-6):
    with np.errstate(invalid="ignore"):
        return gamma * x / np.sqrt(_ms(x))


def sum_of_squares(x, gamma, eps=1e-6):
    return gamma * x / np.sqrt(np.sum(x**2, axis=-1, keepdims=True) + eps)


def no_root(x, gamma, eps=1e-6):
    return gamma * x / (_ms(x) + eps)


def no_gamma(x, gamma, eps=1e-6):
    return x / np.sqrt(_ms(x) + eps)


def batch_axis(x, gamma, eps=1e-6):
    return gamma * x / np.sqrt(_ms(x, axis=0) + eps)


def no_keepdims(x, gamma, eps=1e-6):
    return gamma * x / np.sqrt(np.mean(x**2, axis=-1) + eps)


def float64_always(x, gamma, eps=1e-6):
    return forward(x.astype(np.float64), gamma.astype(np.float64), eps)


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (subtracts_mean, "subtracts the mean"),
        (standard_deviation, "standard deviation instead of RMS"),
        (eps_outside, "eps outside the root"),
        (no_eps, "no eps"),
        (sum_of_squares, "sum of squares instead of mean"),
        (no_root, "square root missing"),
        (no_gamma, "gamma missing"),
        (batch_axis, "wrong axis"),
        (no_keepdims, "statistics without keepdims"),
    ],
)
def test_forward_bug_is_caught_with_its_hint(buggy, probe):
    results = run(rmsnorm_forward=buggy)
    assert not all(r.passed for r in results)
    assert FORWARD_HINTS[probe] in messages(results)


def test_eps_outside_fails_only_where_the_rms_is_small():
    failed = [r.name for r in run(rmsnorm_forward=eps_outside) if not r.passed]
    assert "forward stays finite as the RMS goes to 0" in failed
    assert "forward keeps float32 as float32" not in failed


def test_no_eps_gives_nan_for_a_row_of_zeros_and_says_so():
    (result,) = [r for r in run(rmsnorm_forward=no_eps) if "finite" in r.name]
    assert not result.passed and "non-finite" in result.message


def test_no_keepdims_on_non_square_input_explains_broadcasting():
    results = run(rmsnorm_forward=no_keepdims)
    assert "keepdims=True" in messages(results)
    assert "could not be broadcast" in messages(results)


def test_float32_in_float64_out_is_reported():
    failed = [r for r in run(rmsnorm_forward=float64_always) if not r.passed]
    assert len(failed) == 1 and "dtype is float64 but the input was float32" in failed[0].message


def test_failure_message_says_where():
    message = messages(run(rmsnorm_forward=standard_deviation))
    assert "max abs error" in message and "worst at index" in message and "x of shape" in message


def test_d1_layernorm_output_is_not_rmsnorm():
    results = run(rmsnorm_forward=subtracts_mean)
    (result,) = [r for r in results if "d = 1" in r.name]
    assert not result.passed and FORWARD_HINTS["subtracts the mean"] in told(results, result.name)


# ----------------------------------------------------------------------------- backward bugs


def _backward_with(**changes):
    def buggy(dy, x, gamma, eps=1e-6):
        d = x.shape[-1]
        rms = np.sqrt(_ms(x) + eps)
        x_hat = x / rms
        g = dy if changes.get("no_gamma") else dy * gamma
        outer = (g * x_hat).sum(-1, keepdims=True) / (1 if changes.get("no_1_over_d") else d)
        projection = x_hat * outer
        if changes.get("no_rms2"):
            projection = x * (g * x).mean(-1, keepdims=True)
        dx = g - projection
        if changes.get("mean_term"):
            dx = dx - g.mean(-1, keepdims=True)
        if changes.get("constant"):
            dx = g
        dx = dx / rms
        axes = changes.get("axes", tuple(range(x.ndim - 1)))
        dgamma = (dy * (x if changes.get("from_x") else x_hat)).sum(
            axes, keepdims=changes.get("keepdims", False)
        )
        return dx, dgamma

    return buggy


@pytest.mark.parametrize(
    "changes, probe",
    [
        ({"constant": True}, "RMS treated as a constant"),
        ({"mean_term": True}, "LayerNorm's mean term"),
        ({"no_1_over_d": True}, "1/d missing in the x x^T term"),
        ({"no_rms2": True}, "1/RMS**2 missing in the x x^T term"),
        ({"no_gamma": True}, "gamma missing in dx"),
        ({"from_x": True}, "dgamma from x"),
        ({"axes": -1}, "summed over the features"),
        ({"axes": 0}, "summed over the first axis only"),
    ],
)
def test_backward_bug_is_caught_with_its_hint(changes, probe):
    results = run(rmsnorm_backward=_backward_with(**changes))
    assert not all(r.passed for r in results)
    assert BACKWARD_HINTS[probe] in messages(results)


def test_dgamma_of_shape_1_d_does_not_pass_silently():
    results = run(rmsnorm_backward=_backward_with(keepdims=True))
    assert "shape is (1, 6) but should be (6,)" in messages(results)
    assert "shape is (1, 1, 5) but should be (5,)" in messages(results)


def test_backward_returning_three_values_is_explained():
    def three(dy, x, gamma, eps=1e-6):
        return (*backward(dy, x, gamma, eps), np.zeros(x.shape[-1]))

    results = run(rmsnorm_backward=three)
    assert "returned a tuple of 3 but a tuple of 2 was expected" in messages(results)


def test_backward_is_finite_for_a_row_of_zeros():
    def nan_for_zero_rows(dy, x, gamma, eps=1e-6):
        dx, dgamma = backward(dy, x, gamma, eps)
        dx[np.all(x == 0, axis=-1)] = np.nan
        return dx, dgamma

    results = run(rmsnorm_backward=nan_for_zero_rows)
    assert "non-finite" in messages(results)
    assert "they are all in row 0 (the other 3 rows are finite), where every value of x is 0" in (
        messages(results)
    )


# ----------------------------------------------------------------------------- Jacobian bugs


def _layer_jacobian_with(**changes):
    def buggy(x, gamma, eps):
        d = x.shape[0]
        centred = x - x.mean()
        var = centred @ centred / d
        sigma = np.sqrt(var + (0 if changes.get("sigma_no_eps") else eps))
        x_hat = centred / np.sqrt(var + (0 if changes.get("x_hat_no_eps") else eps))
        inner = np.identity(d)
        if not changes.get("no_mean"):
            inner = inner - np.full((d, d), 1 / d)
        if not changes.get("no_outer"):
            inner = inner - x_hat[:, None] * x_hat[None, :] / (1 if changes.get("outer_d") else d)
        J = np.diag(gamma / sigma) @ inner
        return J.T if changes.get("transpose") else J

    return buggy


@pytest.mark.parametrize(
    "changes, probe",
    [
        ({"no_mean": True}, "1/d term missing"),
        ({"no_outer": True}, "x_hat x_hat^T term missing"),
        ({"outer_d": True}, "x_hat x_hat^T without 1/d"),
        ({"x_hat_no_eps": True}, "eps missing in x_hat"),
        ({"sigma_no_eps": True}, "eps missing in sigma"),
        ({"transpose": True}, "transposed"),
    ],
)
def test_layernorm_jacobian_bug_is_caught_with_its_hint(changes, probe):
    results = run(layernorm_jacobian=_layer_jacobian_with(**changes))
    assert not all(r.passed for r in results)
    assert LAYER_JACOBIAN_HINTS[probe] in messages(results)


def _rms_jacobian_with(**changes):
    def buggy(x, gamma, eps):
        d = x.shape[0]
        mean_square = x @ x / d
        rms = np.sqrt(mean_square + (0 if changes.get("prefactor_no_eps") else eps))
        rms_outer = np.sqrt(mean_square + (0 if changes.get("outer_no_eps") else eps))
        inner = np.identity(d)
        if changes.get("mean_term"):
            inner = inner - 1 / d
        if not changes.get("no_outer"):
            scale = (1 if changes.get("no_d") else d) * (
                1 if changes.get("no_rms2") else rms_outer**2
            )
            inner = inner - np.outer(x, x) / scale
        J = gamma[:, None] * inner / rms
        return J.T if changes.get("transpose") else J

    return buggy


@pytest.mark.parametrize(
    "changes, probe",
    [
        ({"no_outer": True}, "x x^T term missing"),
        ({"mean_term": True}, "LayerNorm's 1/d term"),
        ({"no_d": True}, "1/d missing in the x x^T term"),
        ({"no_rms2": True}, "1/RMS**2 missing in the x x^T term"),
        ({"outer_no_eps": True}, "eps missing in the x x^T term"),
        ({"prefactor_no_eps": True}, "eps missing in the prefactor"),
        ({"transpose": True}, "transposed"),
    ],
)
def test_rmsnorm_jacobian_bug_is_caught_with_its_hint(changes, probe):
    results = run(rmsnorm_jacobian=_rms_jacobian_with(**changes))
    assert not all(r.passed for r in results)
    assert RMS_JACOBIAN_HINTS[probe] in messages(results)


def test_jacobians_are_not_interchangeable():
    assert not any(r.passed for r in run(rmsnorm_jacobian=layer_jacobian))
    assert not any(r.passed for r in run(layernorm_jacobian=rms_jacobian))


def test_jacobian_of_wrong_shape_is_reported():
    results = run(rmsnorm_jacobian=lambda x, gamma, eps: np.diag(rms_jacobian(x, gamma, eps)))
    assert "shape is (6,) but should be (6, 6)" in messages(results)


def test_a_jacobian_off_by_rounding_level_passes_and_off_by_1e_8_fails():
    def nudged(size):
        return lambda x, gamma, eps: rms_jacobian(x, gamma, eps) * (1 + size)

    assert all(r.passed for r in run(rmsnorm_jacobian=nudged(1e-13)))
    assert not any(r.passed for r in run(rmsnorm_jacobian=nudged(1e-8)))


@pytest.mark.parametrize("answer", ["a", "c", "d", "", None, 2, "dense"])
def test_wrong_or_missing_multiple_choice_answers_fail(answer):
    (result,) = run(JACOBIAN_ANSWER=answer)
    assert not result.passed


@pytest.mark.parametrize("answer", ["b", "B", " (b) "])
def test_multiple_choice_accepts_the_letter_in_any_usual_form(answer):
    (result,) = run(JACOBIAN_ANSWER=answer)
    assert result.passed


# ----------------------------------------------------------------------------- from scratch


def test_library_rmsnorm_earns_nothing():
    import torch
    import torch.nn.functional as F

    def uses_torch(x, gamma, eps=1e-6):
        return F.rms_norm(torch.from_numpy(x), (x.shape[-1],), torch.from_numpy(gamma), eps).numpy()

    results = run(rmsnorm_forward=uses_torch)
    assert all(not r.passed for r in results)
    assert "uses F.rms_norm" in messages(results) and "from scratch" in messages(results)


def test_library_rmsnorm_hidden_behind_getattr_is_trapped_at_run_time():
    import torch

    def sneaky(x, gamma, eps=1e-6):
        norm = getattr(torch.nn.functional, "rms" + "_norm")
        return norm(torch.from_numpy(x), (x.shape[-1],), torch.from_numpy(gamma), eps).numpy()

    results = run(rmsnorm_forward=sneaky)
    assert all(not r.passed for r in results)
    assert "torch.nn.functional.rms_norm" in messages(results)


def test_autograd_in_backward_earns_nothing():
    import torch

    def autograd_backward(dy, x, gamma, eps=1e-6):
        xt = torch.tensor(x, requires_grad=True)
        gt = torch.tensor(gamma, requires_grad=True)
        y = gt * xt / torch.sqrt((xt**2).mean(-1, keepdim=True) + eps)
        y.backward(torch.from_numpy(dy))
        return xt.grad.numpy(), gt.grad.numpy()

    results = run(rmsnorm_backward=autograd_backward)
    assert all(not r.passed for r in results)
    assert "y.backward" in messages(results)


def test_autograd_jacobian_earns_nothing():
    import torch

    def autograd_jacobian(x, gamma, eps):
        def f(v):
            return torch.from_numpy(gamma) * v / torch.sqrt((v**2).mean() + eps)

        return torch.autograd.functional.jacobian(f, torch.from_numpy(x)).numpy()

    results = run(rmsnorm_jacobian=autograd_jacobian)
    assert all(not r.passed for r in results)
    assert "torch.autograd.functional.jacobian" in messages(results)


def test_stub_reports_not_implemented_and_does_not_raise():
    def stub(x, gamma, eps):
        raise NotImplementedError

    results = run(layernorm_jacobian=stub, rmsnorm_jacobian=stub)
    assert len(results) == 4 and all("not implemented yet" in r.message for r in results)


# ----------------------------------------------------------------------------- real-world code
# Implementations in the styles public code uses, each with a slip that real code has.


class LlamaRMSNorm:
    """LLaMA's RMSNorm module, in NumPy: eps fixed when the module is built (1e-6 there).

    ``float32=True`` also copies its ``self._norm(x.float()).type_as(x)``: the normalization
    runs in float32 whatever the input's dtype.
    """

    def __init__(self, dim, eps=1e-6, float32=False):
        self.eps, self.weight, self.float32 = eps, np.ones(dim), float32

    def _norm(self, x):
        return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + self.eps)

    def __call__(self, x):
        if self.float32:
            return self._norm(x.astype(np.float32)).astype(x.dtype) * self.weight
        return self._norm(x) * self.weight


def llama_forward(eps_from_argument=False, float32=False):
    def rmsnorm_forward(x, gamma, eps=1e-6):
        if eps_from_argument:
            norm = LlamaRMSNorm(x.shape[-1], eps, float32)
        else:
            norm = LlamaRMSNorm(x.shape[-1], float32=float32)  # eps left at its default
        norm.weight = gamma
        return norm(x)

    return rmsnorm_forward


def test_llama_rmsnorm_with_its_eps_hard_coded_is_named():
    results = run(rmsnorm_forward=llama_forward())
    failed = [r for r in results if not r.passed]
    assert [r.name for r in failed] == ["forward matches torch on random (N, d) inputs"]
    assert "eps = 1e-3" in failed[0].message
    assert FORWARD_HINTS["eps ignored (1e-6 hard-coded)"] in failed[0].message


def test_llama_rmsnorm_in_float32_is_called_a_precision_problem():
    results = run(rmsnorm_forward=llama_forward(eps_from_argument=True, float32=True))
    message = messages(results)
    # gamma multiplies after the cast back, so the values are not float32 numbers: the error's
    # size alone says it
    assert "Why: most likely precision, not the formula" in message
    assert not any(hint in message for hint in FORWARD_HINTS.values())


def test_llama_rmsnorm_given_the_eps_gets_full_marks():
    results = run(rmsnorm_forward=llama_forward(eps_from_argument=True))
    assert [r.message for r in results if not r.passed] == []


@pytest.mark.parametrize("value, text", [(1e-5, "1e-5"), (1e-6, "1e-6"), (1e-8, "1e-8")])
def test_backward_with_eps_ignored_is_named(value, text):
    def rmsnorm_backward(dy, x, gamma, eps=1e-6):
        return backward(dy, x, gamma, value)

    message = messages(run(rmsnorm_backward=rmsnorm_backward))
    assert BACKWARD_HINTS[f"eps ignored ({text} hard-coded)"] in message


class CopiedLayerNormBackward:
    """An RMSNorm module in llm.c's style (forward caches, backward reads the cache) whose
    backward was adapted from LayerNorm's and keeps its mean terms; ``fixed`` removes them."""

    def __init__(self, fixed=False):
        self.fixed = fixed

    def forward(self, x, w, eps=1e-6):
        rstd = 1.0 / np.sqrt((x**2).mean(-1, keepdims=True) + eps)
        mean = 0.0 if self.fixed else x.mean(-1, keepdims=True)
        if not self.fixed:  # LayerNorm's cache: statistics of the centred row
            rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
        return x * rstd * w, (x, w, mean, rstd)

    def backward_pass(self, dout, cache):
        x, w, mean, rstd = cache
        norm = (x - mean) * rstd
        dw = (dout * norm).sum(tuple(range(x.ndim - 1)))
        dnorm = dout * w
        dx = dnorm - (dnorm * norm).mean(-1, keepdims=True) * norm
        if not self.fixed:
            dx = dx - dnorm.mean(-1, keepdims=True)
        return dx * rstd, dw


def copied_backward(fixed=False):
    layer = CopiedLayerNormBackward(fixed)

    def rmsnorm_backward(dy, x, gamma, eps=1e-6):
        return layer.backward_pass(dy, layer.forward(x, gamma, eps)[1])

    return rmsnorm_backward


def test_rmsnorm_backward_with_layernorm_mean_terms_is_named():
    results = run(rmsnorm_backward=copied_backward())
    failed = {r.name: r.message for r in results if not r.passed}
    assert sorted(failed) == sorted(r.name for r in results)  # 0 of 4 points, as before
    for name in failed:
        assert BACKWARD_HINTS["LayerNorm's backward pass"] in told(results, name)


def test_rmsnorm_backward_without_the_mean_terms_gets_full_marks():
    results = run(rmsnorm_backward=copied_backward(fixed=True))
    assert [r.message for r in results if not r.passed] == []
