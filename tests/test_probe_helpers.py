"""The shared comparison helpers in ``probes.py``: where a NaN sits, precision versus formula,
two slips named together, and an eps that is accepted but ignored."""

from __future__ import annotations

import numpy as np
import pytest

from normlab.grader.core import CheckFailed, Item, Output
from normlab.grader.probes import (
    Probe,
    both,
    eps_ignored,
    evaluate,
    expect_array,
    float32_precision,
    nonfinite_where,
)

F64 = {"rtol": 1e-7, "atol": 1e-9}


def output(array) -> Output:
    return Output([Item("ndarray", np.asarray(array))], is_tuple=False)


def failure(got, expected, **options) -> str:
    with pytest.raises(CheckFailed) as raised:
        expect_array(output(got), expected, what="f, a case", **{**F64, **options})
    return str(raised.value)


def test_nan_in_a_zero_row_is_placed_and_explained():
    x = np.ones((4, 3))
    x[2] = 0.0
    got = np.ones((4, 3))
    got[2] = np.nan
    message = failure(got, np.ones((4, 3)), x=x)
    assert "they are all in row 2 (the other 3 rows are finite), where every value of x is 0" in (
        message
    )


def test_nan_in_a_constant_column_is_placed_and_explained():
    x = np.arange(12.0).reshape(4, 3)
    x[:, 0] = 7.0
    mask = np.zeros((4, 3), bool)
    mask[:, 0] = True
    text = nonfinite_where(mask, x)
    assert "column 0 (the other 2 columns are finite), where x is constant along the column" in text


def test_nan_with_d_equal_to_1_is_explained():
    assert "x has d = 1 feature per row" in nonfinite_where(np.ones((5, 1), bool), np.ones((5, 1)))


def test_nan_everywhere_or_without_x_says_no_more_than_it_knows():
    assert nonfinite_where(np.ones((3, 4), bool), np.ones((3, 4))) == ""
    mask = np.zeros((3, 4), bool)
    mask[1, 2] = True
    text = nonfinite_where(mask)
    assert "row 1" in text and "x is" not in text


def test_float32_inside_is_called_precision():
    rng = np.random.default_rng(0)
    expected = rng.normal(size=(6, 8))
    # a few float32 rounding steps away (one rounding alone stays inside rtol = 1e-7)
    got = (expected.astype(np.float32) * np.float32(1 + 5e-7)).astype(np.float64)
    message = failure(got, expected)
    assert "Why: precision, not the formula. Every value returned is a float32 number" in message


def test_a_small_error_that_is_not_float32_is_only_probably_precision():
    rng = np.random.default_rng(1)
    expected = rng.normal(size=(6, 8))
    message = failure(expected * (1 + 3e-7), expected)
    assert "Why: most likely precision, not the formula" in message


def test_a_wrong_formula_is_not_called_precision():
    rng = np.random.default_rng(2)
    expected = rng.normal(size=(6, 8))
    assert float32_precision(expected * 1.01, expected, 1e-7) == ""
    assert "precision" not in failure(expected * 1.01, expected)
    # a float32 tolerance: float32 rounding is allowed there, so it is never the reason
    assert float32_precision(expected.astype(np.float32), expected, 1e-3) == ""


def test_a_matching_probe_wins_over_the_precision_guess():
    expected = np.linspace(1.0, 2.0, 8)
    wrong = Probe("doubled", "You doubled it.", lambda: (2 * expected).astype(np.float32))
    got = (2 * expected).astype(np.float32).astype(np.float64)
    message = failure(got, expected, candidates=evaluate([wrong]))
    assert "Why: You doubled it." in message and "precision" not in message


def test_both_names_each_slip():
    first = Probe("a", "Hint A.", lambda v: v + 1)
    second = Probe("b", "Hint B.", lambda v: v * 2)
    combined = both(first, second, lambda v: (v + 1) * 2)
    assert combined.name == "a + b"
    assert "Hint A." in combined.hint and "Hint B." in combined.hint
    got = (np.arange(3.0) + 1) * 2
    message = failure(
        got, np.arange(3.0), candidates=evaluate([first, second, combined], np.arange(3.0))
    )
    assert combined.hint in message


def test_eps_ignored_matches_a_hard_coded_value_and_not_the_right_answer():
    def right(x, eps):
        return x / np.sqrt(x**2 + eps)

    probes = eps_ignored(right, "thing")
    assert [p.name for p in probes] == [
        "eps ignored (1e-5 hard-coded)",
        "eps ignored (1e-6 hard-coded)",
        "eps ignored (1e-8 hard-coded)",
    ]
    x = np.array([1e-3, 2e-3, 0.5])
    got = right(x, 1e-6)
    message = failure(got, right(x, 1e-3), candidates=evaluate(probes, x, 1e-3))
    assert probes[1].hint in message and probes[0].hint not in message
    # called by keyword too, as a learner's function is
    assert np.allclose(probes[1].compute(x, eps=1e-3), got)


def test_float32_and_a_slip_together_name_both():
    # llm.c's float32 LayerNorm with eps = 1e-5 written inside, called with eps = 1e-3
    def right(x, eps):
        centred = x - x.mean(-1, keepdims=True)
        return centred / np.sqrt((centred**2).mean(-1, keepdims=True) + eps)

    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 8)) * np.geomspace(0.01, 1, 4)[:, None]
    got = right(x.astype(np.float32), np.float32(1e-5)).astype(np.float64)
    probes = eps_ignored(right, "thing")
    message = failure(got, right(x, 1e-3), candidates=evaluate(probes, x, 1e-3))
    assert f"Why: {probes[0].hint}" in message
    assert "And: every value returned is a float32 number" in message
    # a probe equal to the right answer on this input never "matches" up to float32 rounding
    message = failure(
        (right(x, 1e-3).astype(np.float32) * np.float32(1 + 5e-7)).astype(np.float64),
        right(x, 1e-3),
        candidates=evaluate(probes + [Probe("same", "Same.", right)], x, 1e-3),
    )
    assert "Same." not in message and "Why: precision, not the formula" in message


def test_norm_dx_and_affine_grads_are_layernorms_gradients_and_each_slip_differs():
    import torch

    from normlab.grader.probes import affine_grads, norm_dx

    rng = np.random.default_rng(5)
    x, dy, gamma = rng.normal(size=(4, 6)), rng.normal(size=(4, 6)), rng.normal(size=6)
    eps = 1e-5
    xt, gt = torch.tensor(x, requires_grad=True), torch.tensor(gamma, requires_grad=True)
    bt = torch.zeros(6, dtype=torch.float64, requires_grad=True)
    torch.nn.functional.layer_norm(xt, (6,), gt, bt, eps).backward(torch.tensor(dy))
    inv_std = 1 / np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    x_hat = (x - x.mean(axis=-1, keepdims=True)) * inv_std
    g = dy * gamma
    dx, dgamma, dbeta = affine_grads(norm_dx(g, x_hat, inv_std, -1), dy, x_hat, 0)
    for got, right in [(dx, xt.grad), (dgamma, gt.grad), (dbeta, bt.grad)]:
        np.testing.assert_allclose(got, right.numpy(), rtol=1e-10, atol=1e-12)
    for slip in [{"mean_term": False}, {"var_term": False}]:
        assert not np.allclose(norm_dx(g, x_hat, inv_std, -1, **slip), dx, rtol=1e-3)
    swapped = affine_grads(dx, dy, x_hat, 0, swap=True)
    assert swapped[1] is not None and np.array_equal(swapped[1], dbeta)
