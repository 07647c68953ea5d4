"""The LayerNorm lab's checks: right code passes; each known bug fails WITH its hint."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from conftest import hints, lab_results, messages, told

from normlab.grader.checks import layernorm as ln
from normlab.grader.results import CheckReport

HINTS = hints(ln.FORWARD_PROBES + ln.BACKWARD_PROBES)
FORWARD_HINTS = hints(ln.FORWARD_PROBES)
BACKWARD_HINTS = hints(ln.BACKWARD_PROBES)


run = functools.partial(lab_results, "03_layernorm")


# ----------------------------------------------------------------------------- references
# Written here, independently of the solution notebook, as the tests' own right answers.


def forward(x, gamma, beta, eps=1e-5):
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.var(x, axis=-1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta


def backward(dy, x, gamma, eps=1e-5):
    d = x.shape[-1]
    mu = x.mean(-1, keepdims=True)
    sigma = np.sqrt(x.var(-1, keepdims=True) + eps)
    x_hat = (x - mu) / sigma
    lead = tuple(range(x.ndim - 1))
    g = dy * gamma
    dx = (d * g - g.sum(-1, keepdims=True) - x_hat * (g * x_hat).sum(-1, keepdims=True)) / (
        d * sigma
    )
    return dx, (dy * x_hat).sum(lead), dy.sum(lead)


def d2_xhat(x, eps=1e-5):
    # Through the general forward pass: an independent route to the same closed form.
    return forward(x, np.ones(2), np.zeros(2), eps)


def test_right_answers_get_full_marks():
    results = run(
        layernorm_forward=forward,
        layernorm_backward=backward,
        d1_output=lambda x, gamma, beta: np.broadcast_to(beta, x.shape).copy(),
        D1_ANSWER="(B)",
        d2_xhat=d2_xhat,
        D2_ANSWER="a",
        INVARIANCE_ANSWER=" (A) ",
    )
    assert [r.message for r in results if not r.passed] == []
    assert sum(r.points for r in results) == 16


# ----------------------------------------------------------------------------- forward bugs


def eps_outside(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return gamma * (x - mu) / (x.std(-1, keepdims=True) + eps) + beta


def no_eps(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return gamma * (x - mu) / x.std(-1, keepdims=True) + beta


def unbiased(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps) + beta


def batch_axis(x, gamma, beta, eps=1e-5):
    mu = x.mean(0, keepdims=True)
    return gamma * (x - mu) / np.sqrt(x.var(0, keepdims=True) + eps) + beta


def no_affine(x, gamma, beta, eps=1e-5):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)


def swapped(x, gamma, beta, eps=1e-5):
    return beta * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) + gamma


def no_keepdims(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1)
    centred = x - mu
    return gamma * centred / np.sqrt((centred**2).mean(-1) + eps) + beta


def one_pass_variance(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = (x**2).mean(-1, keepdims=True) - mu**2
    return gamma * (x - mu) / np.sqrt(var + eps) + beta


def float64_always(x, gamma, beta, eps=1e-5):
    return forward(x.astype(np.float64), gamma.astype(np.float64), beta.astype(np.float64), eps)


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (eps_outside, "eps outside the root"),
        (no_eps, "no eps"),
        (unbiased, "unbiased variance"),
        (batch_axis, "wrong axis"),
        (no_affine, "affine step missing"),
        (swapped, "gamma and beta swapped"),
        (no_keepdims, "statistics without keepdims"),
    ],
)
def test_forward_bug_is_caught_with_its_hint(buggy, probe):
    results = run(layernorm_forward=buggy)
    assert not all(r.passed for r in results)
    assert HINTS[probe] in messages(results)


@pytest.mark.parametrize(
    "buggy, probe, not_named",
    [(unbiased, "unbiased variance", "no eps"), (no_eps, "no eps", "unbiased variance")],
)
def test_d1_check_names_the_slip_the_other_rows_show(buggy, probe, not_named):
    # At d = 1 both slips give NaN; the d = 1 check must name the one this function has.
    results = run(layernorm_forward=buggy)
    (result,) = [r for r in results if r.name.startswith("forward with d = 1")]
    assert not result.passed
    # the d = 1 check's own reasons, or those of the earlier check it refers to
    why = [
        line
        for line in told(results, result.name).splitlines()
        if line.startswith(("Why:", "Or:")) and not line.endswith("above.")
    ]
    assert why and why[0] == f"Why: {HINTS[probe]}"
    assert not any(HINTS[not_named] in line for line in why), why


def np_var_no_keepdims(x, gamma, beta, eps=1e-5):
    return gamma * (x - x.mean(-1)) / np.sqrt(x.var(-1) + eps) + beta


def test_np_var_without_keepdims_is_explained_on_square_and_d1_inputs():
    results = run(layernorm_forward=np_var_no_keepdims)
    assert HINTS["statistics without keepdims"] in told(
        results, "forward matches torch on random (N, d) inputs"
    )
    assert HINTS["statistics without keepdims"] in told(results, "forward with d = 1 returns beta")


def test_no_keepdims_on_non_square_input_explains_broadcasting():
    results = run(layernorm_forward=no_keepdims)
    assert "keepdims=True" in messages(results)
    assert "could not be broadcast" in messages(results)


def test_one_pass_variance_fails_only_the_offset_check_and_says_why():
    results = run(layernorm_forward=one_pass_variance)
    failed = [r for r in results if not r.passed]
    assert [r.name for r in failed] == [
        "forward is accurate with a large offset (x + 1e4, float32)"
    ]
    assert "mean(x**2) - mean(x)**2" in failed[0].message


def test_float32_in_float64_out_is_reported():
    results = run(layernorm_forward=float64_always)
    failed = [r for r in results if not r.passed]
    assert len(failed) == 1 and "dtype is float64 but the input was float32" in failed[0].message


def test_failure_message_says_where():
    message = messages(run(layernorm_forward=unbiased))
    assert "max abs error" in message and "worst at index" in message and "x of shape" in message


# ----------------------------------------------------------------------------- backward bugs


def _backward_with(**changes):
    def buggy(dy, x, gamma, eps=1e-5):
        d = x.shape[-1]
        mu = x.mean(-1, keepdims=True)
        sigma = np.sqrt(x.var(-1, keepdims=True, ddof=changes.get("ddof", 0)) + eps)
        x_hat = (x - mu) / sigma
        lead = tuple(range(x.ndim - 1))
        g = dy * gamma
        mean_term = 0 if changes.get("no_mean") else g.sum(-1, keepdims=True)
        var_term = 0 if changes.get("no_var") else x_hat * (g * x_hat).sum(-1, keepdims=True)
        dx = (d * g - mean_term - var_term) / (d * sigma)
        if changes.get("constants"):
            dx = g / sigma
        axes = changes.get("axes", lead)
        keep = changes.get("keepdims", False)
        dgamma = (dy * (x if changes.get("from_x") else x_hat)).sum(axes, keepdims=keep)
        dbeta = dy.sum(axes, keepdims=keep)
        if changes.get("swap"):
            dgamma, dbeta = dbeta, dgamma
        return dx, dgamma, dbeta

    return buggy


@pytest.mark.parametrize(
    "changes, probe",
    [
        ({"constants": True}, "mean and variance treated as constants"),
        ({"no_mean": True}, "mean term missing"),
        ({"no_var": True}, "variance term missing"),
        ({"swap": True}, "dgamma and dbeta swapped"),
        ({"from_x": True}, "dgamma from x"),
        ({"axes": -1}, "summed over the features"),
        ({"axes": 0}, "summed over the first axis only"),
        ({"ddof": 1}, "unbiased variance in the backward pass"),
    ],
)
def test_backward_bug_is_caught_with_its_hint(changes, probe):
    results = run(layernorm_backward=_backward_with(**changes))
    assert not all(r.passed for r in results)
    assert HINTS[probe] in messages(results)


def test_gradient_of_shape_1_d_does_not_pass_silently():
    results = run(layernorm_backward=_backward_with(keepdims=True))
    assert "shape is (1, 6) but should be (6,)" in messages(results)


def test_backward_returning_two_values_is_explained():
    results = run(layernorm_backward=lambda dy, x, gamma, eps=1e-5: backward(dy, x, gamma, eps)[:2])
    assert "returned a tuple of 2 but a tuple of 3 was expected" in messages(results)


# ----------------------------------------------------------------------------- from scratch


def test_library_layernorm_earns_nothing():
    import torch
    import torch.nn.functional as F

    def uses_torch(x, gamma, beta, eps=1e-5):
        t = torch.from_numpy(x)
        return F.layer_norm(
            t, (x.shape[-1],), torch.from_numpy(gamma), torch.from_numpy(beta), eps
        ).numpy()

    results = run(layernorm_forward=uses_torch)
    assert all(not r.passed for r in results)
    assert "uses F.layer_norm" in messages(results) and "from scratch" in messages(results)


def test_library_norm_hidden_behind_getattr_is_trapped_at_run_time():
    import torch

    def sneaky(x, gamma, beta, eps=1e-5):
        norm = getattr(torch.nn.functional, "layer" + "_norm")
        t = torch.from_numpy(x)
        return norm(t, (x.shape[-1],), torch.from_numpy(gamma), torch.from_numpy(beta), eps).numpy()

    results = run(layernorm_forward=sneaky)
    assert all(not r.passed for r in results)
    assert "torch.nn.functional.layer_norm" in messages(results)


def test_autograd_in_backward_earns_nothing():
    import torch

    def autograd_backward(dy, x, gamma, eps=1e-5):
        xt = torch.tensor(x, requires_grad=True)
        gt = torch.tensor(gamma, requires_grad=True)
        bt = torch.zeros_like(gt, requires_grad=True)
        mu = xt.mean(-1, keepdim=True)
        y = gt * (xt - mu) / torch.sqrt(xt.var(-1, unbiased=False, keepdim=True) + eps) + bt
        y.backward(torch.from_numpy(dy))
        return xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()

    results = run(layernorm_backward=autograd_backward)
    assert all(not r.passed for r in results)
    assert "y.backward" in messages(results)


# ----------------------------------------------------------------------------- practice problem


@pytest.mark.parametrize(
    "wrong, expected_text",
    [
        (lambda x, gamma, beta: np.broadcast_to(gamma, x.shape).copy(), "gamma cannot appear"),
        (lambda x, gamma, beta: x, "does not depend on x"),
        (lambda x, gamma, beta: np.broadcast_to(gamma + beta, x.shape).copy(), "= beta"),
        (lambda x, gamma, beta: beta, "shape is (1,) but should be (6, 1)"),
    ],
)
def test_d1_output_mistakes_are_explained(wrong, expected_text):
    results = run(d1_output=wrong)
    assert not results[0].passed and expected_text in results[0].message


@pytest.mark.parametrize("answer", ["a", "c", "d", "", None, 2, "because"])
def test_wrong_or_missing_multiple_choice_answers_fail(answer):
    (result,) = run(D1_ANSWER=answer)
    assert not result.passed


@pytest.mark.parametrize("answer", ["b", "B", " (b) "])
def test_multiple_choice_accepts_the_letter_in_any_usual_form(answer):
    (result,) = run(D1_ANSWER=answer)
    assert result.passed


def test_stub_reports_not_implemented_and_does_not_raise():
    def stub(x, gamma, beta, eps=1e-5):
        raise NotImplementedError

    results = run(layernorm_forward=stub)
    assert all("not implemented yet" in r.message for r in results)


def nan_only_at_d1(x, gamma, beta, eps=1e-5):
    y = forward(x, gamma, beta, eps)
    return y if x.shape[-1] > 1 else y * np.nan


def test_two_slips_that_give_the_same_answer_are_both_named():
    # At d = 1, dividing by d - 1 and forgetting eps both produce NaN; when the other rows do
    # not tell them apart (this function is right there), name both.
    (d1,) = [
        r
        for r in run(layernorm_forward=nan_only_at_d1)
        if r.name == "forward with d = 1 returns beta"
    ]
    assert HINTS["no eps"] in d1.message and HINTS["unbiased variance"] in d1.message
    assert "\nOr: " in d1.message


def test_the_report_is_not_cluttered_by_numpy_warnings(recwarn):
    run(layernorm_forward=no_eps)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


# ----------------------------------------------------------------------------- problems 2 and 3


def _d2_sign_only(x, eps=1e-5):
    delta = x[..., :1] - x[..., 1:]
    return np.concatenate([np.sign(delta), -np.sign(delta)], axis=-1)


def _d2_no_half(x, eps=1e-5):
    delta = x[..., :1] - x[..., 1:]
    return np.concatenate([delta, -delta], axis=-1) / np.sqrt(delta**2 + eps)


def _d2_swapped(x, eps=1e-5):
    return -d2_xhat(x, eps)


@pytest.mark.parametrize(
    "wrong, expected_text",
    [
        (_d2_sign_only, "nearly equal features give a smaller x_hat"),
        (_d2_no_half, "x_1 - mu = (x_1 - x_2) / 2"),
        (_d2_swapped, "The signs are swapped"),
    ],
)
def test_d2_mistakes_are_explained(wrong, expected_text):
    (result,) = run(d2_xhat=wrong)
    assert not result.passed and expected_text in result.message


@pytest.mark.parametrize("name", ["D2_ANSWER", "INVARIANCE_ANSWER"])
@pytest.mark.parametrize(
    "answer, passes", [("a", True), ("(A)", True), ("b", False), ("d", False), (None, False)]
)
def test_problem_2_and_3_multiple_choice(name, answer, passes):
    (result,) = run(**{name: answer})
    assert result.passed is passes


# ----------------------------------------------------------------------------- real-world code
# Implementations in the styles public code uses, each with a slip that real code has.


class AnnotatedLayerNorm:
    """The Annotated Transformer's LayerNorm module, in NumPy: a * (x - mean) / (std + eps) + b.

    ``ddof`` is 1 there (torch's std is unbiased by default) and eps sits outside the root.
    """

    def __init__(self, features, eps=1e-6, ddof=1, eps_inside=False):
        self.a_2, self.b_2 = np.ones(features), np.zeros(features)
        self.eps, self.ddof, self.eps_inside = eps, ddof, eps_inside

    def __call__(self, x):
        mean = x.mean(-1, keepdims=True)
        if self.eps_inside:
            std = np.sqrt(x.var(-1, ddof=self.ddof, keepdims=True) + self.eps)
            return self.a_2 * (x - mean) / std + self.b_2
        std = x.std(-1, ddof=self.ddof, keepdims=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


def annotated_module(**options):
    def layernorm_forward(x, gamma, beta, eps=1e-5):
        norm = AnnotatedLayerNorm(x.shape[-1], eps, **options)
        norm.a_2, norm.b_2 = gamma, beta
        return norm(x)

    return layernorm_forward


def test_annotated_transformer_layernorm_names_both_slips():
    message = messages(run(layernorm_forward=annotated_module()))
    both = "This matches two slips at once: (unbiased variance) and (eps outside the root)."
    assert both in message
    assert FORWARD_HINTS["unbiased variance"] in message
    assert FORWARD_HINTS["eps outside the root"] in message


def test_annotated_transformer_module_fixed_gets_full_marks():
    results = run(layernorm_forward=annotated_module(ddof=0, eps_inside=True))
    assert [r.message for r in results if not r.passed] == []


def hard_coded_eps_forward(value):
    def layernorm_forward(x, gamma, beta, eps=1e-5):
        mu = x.mean(-1, keepdims=True)
        return gamma * (x - mu) / np.sqrt(x.var(-1, keepdims=True) + value) + beta

    return layernorm_forward


def hard_coded_eps_backward(value):
    def layernorm_backward(dy, x, gamma, eps=1e-5):
        return backward(dy, x, gamma, value)

    return layernorm_backward


@pytest.mark.parametrize("value, text", [(1e-5, "1e-5"), (1e-6, "1e-6"), (1e-8, "1e-8")])
def test_eps_accepted_but_ignored_is_named(value, text):
    forward_results = run(layernorm_forward=hard_coded_eps_forward(value))
    failed = [r for r in forward_results if not r.passed]
    assert FORWARD_HINTS[f"eps ignored ({text} hard-coded)"] in messages(forward_results)
    if value == 1e-5:  # the lab's default: only the case with another eps can tell
        assert "eps = 1e-3" in messages(forward_results)
        assert [r.name for r in failed] == ["forward matches torch on random (N, d) inputs"]
    backward_results = run(layernorm_backward=hard_coded_eps_backward(value))
    assert BACKWARD_HINTS[f"eps ignored ({text} hard-coded)"] in messages(backward_results)


class LlmcLayerNorm:
    """llm.c's reference LayerNorm (forward, and backward from a cache), in the style of its
    PyTorch original but in NumPy arrays (a NumPy lab's graded code cannot use PyTorch).

    ``dtype=np.float32`` is llm.c's: everything in float32, whatever the input; None keeps
    the input's dtype. ``xp="torch"`` is the original, in PyTorch tensors.
    """

    def __init__(self, dtype=None, xp="numpy"):
        self.dtype = dtype
        self.xp = xp

    def _array(self, value, dtype):
        if self.xp == "torch":
            import torch

            return torch.tensor(value, dtype=dtype)
        return np.array(value, dtype=dtype)

    def forward(self, x, w, b, eps=1e-5):
        if self.xp == "torch":
            import torch

            dtype = self.dtype or torch.from_numpy(np.asarray(x)).dtype
        else:
            dtype = self.dtype or np.asarray(x).dtype
        x, w, b = (self._array(a, dtype) for a in (x, w, b))
        mean = x.sum(-1, keepdims=True) / x.shape[-1]
        xshift = x - mean
        var = (xshift**2).sum(-1, keepdims=True) / x.shape[-1]
        rstd = (var + eps) ** -0.5
        norm = xshift * rstd
        return norm * w + b, (x, w, mean, rstd)

    def backward_pass(self, dout, cache):
        x, w, mean, rstd = cache
        dout = self._array(dout, x.dtype)
        norm = (x - mean) * rstd
        lead = tuple(range(x.ndim - 1))
        db, dw = dout.sum(lead), (dout * norm).sum(lead)
        dnorm = dout * w
        dx = dnorm - dnorm.mean(-1, keepdims=True) - (dnorm * norm).mean(-1, keepdims=True) * norm
        return dx * rstd, dw, db


def _as_numpy(value):
    return value.numpy() if hasattr(value, "numpy") else value


def llmc_functions(dtype=None, xp="numpy"):
    layer = LlmcLayerNorm(dtype, xp)

    def layernorm_forward(x, gamma, beta, eps=1e-5):
        return _as_numpy(layer.forward(x, gamma, beta, eps)[0]).astype(x.dtype)

    def layernorm_backward(dy, x, gamma, eps=1e-5):
        _, cache = layer.forward(x, gamma, np.zeros_like(gamma), eps)
        return tuple(_as_numpy(g).astype(np.float64) for g in layer.backward_pass(dy, cache))

    return {"layernorm_forward": layernorm_forward, "layernorm_backward": layernorm_backward}


def test_float32_inside_float64_outside_is_called_a_precision_problem():
    results = run(**llmc_functions(np.float32))
    failed = {r.name: r.message for r in results if not r.passed}
    precision = "Why: precision, not the formula. Every value returned is a float32 number"
    assert precision in told(results, "forward matches torch on random (N, d) inputs")
    assert precision in told(results, "backward: dx matches autograd")
    assert precision in told(results, "backward: dgamma and dbeta match autograd")
    for message in failed.values():
        assert "matches the unbiased" not in message and "eps outside" not in message


def test_llmc_style_class_in_the_input_dtype_gets_full_marks():
    results = run(**llmc_functions())
    assert [r.message for r in results if not r.passed] == []


def test_llmc_in_pytorch_tensors_is_told_what_the_grader_will_say():
    """A NumPy lab is graded where PyTorch cannot be used: check() says so, check by check,
    instead of a tick that ``normlab grade`` would take back."""
    results = run(**llmc_functions(xp="torch"))
    assert results and all(not r.passed for r in results)
    for result in results:
        assert "raised TorchHiddenError: PyTorch is not available while this NumPy lab" in (
            result.message
        ), result.message


def no_eps_backward(dy, x, gamma, eps=1e-5):
    with np.errstate(all="ignore"):
        return backward(dy, x, gamma, 0.0)


def test_nan_in_backward_says_where_it_appears():
    message = messages(run(layernorm_backward=no_eps_backward))
    assert "they are all in row 0 (the other 3 rows are finite)" in message
    assert "where x is constant along the row" in message
    assert BACKWARD_HINTS["no eps in the backward pass"] in message

    def variance_from_unbiased(dy, x, gamma, eps=1e-5):
        # torch's default var() is unbiased; rescaling it by (d - 1) / d is right for d > 1
        # but 0/0 * 0 = NaN for d = 1
        d = x.shape[-1]
        with np.errstate(all="ignore"):
            var = x.var(-1, ddof=1, keepdims=True) * (d - 1) / d
        sigma = np.sqrt(var + eps)
        x_hat = (x - x.mean(-1, keepdims=True)) / sigma
        g = dy * gamma
        dx = (g - g.mean(-1, keepdims=True) - x_hat * (g * x_hat).mean(-1, keepdims=True)) / sigma
        lead = tuple(range(x.ndim - 1))
        return dx, (dy * x_hat).sum(lead), dy.sum(lead)

    message = messages(run(layernorm_backward=variance_from_unbiased))
    assert "x has d = 1 feature per row" in message


def test_a_reason_is_given_in_full_once_then_referred_to():
    # An unbiased variance fails the six forward checks; its paragraph is said once, by the
    # first, and the others refer to that check (in check()'s report and in Spanish alike).
    results = run(layernorm_forward=unbiased)
    hint = HINTS["unbiased variance"]
    full = [r.name for r in results if f"Why: {hint}" in r.message.splitlines()]
    assert full == ["forward matches torch on random (N, d) inputs"]
    referring = [r for r in results if "Why: as in “forward matches torch" in r.message]
    assert len(referring) >= 3
    assert all(hint in told(results, r.name) for r in referring)
    report = CheckReport("Checks", results, "en")
    # said once on its own (the two-slips line of the float32 check quotes it as one of two)
    assert str(report).count(hint) - str(report).count(f") {hint}") == 1
    spanish = str(CheckReport("Checks", results, "es"))
    assert "Por qué: como en «el pase hacia adelante coincide con torch" in spanish


def test_a_reason_that_was_one_of_several_is_not_referred_to_ambiguously():
    from normlab.grader.core import CheckResult, say_reasons_once

    results = say_reasons_once(
        [
            CheckResult("first", 0, 1, False, "wrong\nWhy: A\nOr: B"),
            CheckResult("second", 0, 1, False, "wrong\nWhy: B"),
            CheckResult("third", 0, 1, False, "wrong again\nWhy: A\nOr: B"),
            CheckResult("fourth", 0, 1, False, "still wrong\nWhy: B"),
        ]
    )
    assert [r.message for r in results] == [
        "wrong\nWhy: A\nOr: B",
        "wrong\nWhy: B",  # "as in “first”" would not say which of its two reasons
        "wrong again\nWhy: as in “first” above.",
        "still wrong\nWhy: as in “second” above.",
    ]
    assert say_reasons_once(results) == results
