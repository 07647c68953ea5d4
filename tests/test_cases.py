"""The shared case helper in ``cases.py``: one argument list reaches the learner, the oracle and
the probes alike; each way of comparing fails on a wrong answer, with the probe's hint; the
shared input makers draw what they say."""

from __future__ import annotations

import numpy as np
import pytest

from normlab.grader.cases import (
    F32,
    F64,
    Args,
    Graded,
    affine_params,
    backward,
    gain,
    rows_with_varied_scale,
    tensor64,
)
from normlab.grader.core import AsTorch, CheckFailed, ReadBack
from normlab.grader.notebook import InProcessSubmission
from normlab.grader.probes import Probe


def submission(**functions):
    return InProcessSubmission(functions, {})


def scale(x, factor, *, shift=0.0):
    return x * factor + shift


SLIP = Probe(
    "factor twice",
    "This matches x * factor**2.",
    lambda x, factor, *, shift=0.0: x * factor**2 + shift,
)
SCALE = Graded("scale", oracle=scale, probes=[SLIP])
X = np.arange(6.0).reshape(2, 3) + 1.0


def failure(graded, learner, args, **options) -> str:
    with pytest.raises(CheckFailed) as raised:
        graded.expect(submission(**{graded.name: learner}), args, what="a case", **options)
    return str(raised.value)


# ----------------------------------------------------------------------------- one argument list


def test_the_same_arguments_reach_the_learner_the_oracle_and_the_probes():
    seen = []

    def recorder(tag, result):
        def record(*args, **kwargs):
            seen.append((tag, len(args), sorted(kwargs)))
            return result(*args, **kwargs)

        return record

    graded = Graded(
        "scale",
        oracle=recorder("oracle", scale),
        probes=[Probe("p", "h", recorder("probe", SLIP.compute))],
    )
    learner = recorder("learner", SLIP.compute)  # wrong: the probes are asked what it did
    with pytest.raises(CheckFailed, match="Why: h"):
        graded.expect(submission(scale=learner), Args(X, 3.0, shift=1.0), what="c")
    assert seen == [("learner", 2, ["shift"]), ("oracle", 2, ["shift"]), ("probe", 2, ["shift"])]


def test_a_right_answer_runs_no_probe_and_a_wrong_one_runs_each_once():
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return SLIP.compute(*args, **kwargs)

    def twice(function):
        return lambda *args, **kwargs: (function(*args, **kwargs),) * 2

    graded = Graded(
        "scale",
        oracle=twice(scale),
        probes=[Probe("p", "h", twice(counted))],
        items=("y", "y again"),
    )
    right = submission(scale=lambda x, factor, shift=0.0: (scale(x, factor, shift=shift),) * 2)
    graded.expect(right, Args(X, 3.0), what="c")
    assert calls == []
    wrong = submission(scale=lambda x, factor, shift=0.0: (x * factor**2 + shift,) * 2)
    with pytest.raises(CheckFailed, match="Why: h"):
        graded.expect(wrong, Args(X, 3.0), what="c")
    assert calls == [1]  # evaluated once, for the first item that failed


def test_a_right_answer_passes_and_the_output_comes_back():
    out = SCALE.expect(submission(scale=scale), Args(X, 3.0, shift=1.0), what="a case")
    np.testing.assert_array_equal(out.items[0].array, X * 3.0 + 1.0)


def test_a_wrong_answer_fails_with_the_name_and_the_matching_probes_hint():
    message = failure(SCALE, lambda x, factor, shift=0.0: x * factor**2 + shift, Args(X, 3.0))
    assert message.startswith("scale, a case: max abs error")
    assert "Why: This matches x * factor**2." in message


def test_a_keyword_argument_the_learner_ignores_is_caught():
    # the oracle gets shift=1 too, so a learner that drops it is wrong
    message = failure(SCALE, lambda x, factor, shift=0.0: x * factor, Args(X, 3.0, shift=1.0))
    assert "max abs error 1" in message


def test_without_prefix_the_message_starts_with_the_case():
    graded = Graded("scale", oracle=scale, prefix=False)
    assert failure(graded, lambda x, factor: x, Args(X, 3.0)).startswith("a case: ")


def test_expected_replaces_the_oracle():
    graded = Graded("scale")
    graded.expect(submission(scale=scale), Args(X, 2.0), what="c", expected=X * 2.0)
    assert "max abs error" in failure(graded, scale, Args(X, 2.0), expected=X * 3.0)


def test_the_function_tolerance_and_a_case_tolerance():
    nudged = lambda x, factor: x * factor * (1 + 1e-5)  # noqa: E731
    assert "rtol 1e-07" in failure(SCALE, nudged, Args(X, 2.0))  # F64 by default
    SCALE.expect(submission(scale=nudged), Args(X, 2.0), what="c", tol=F32)
    loose = Graded("scale", oracle=scale, tol=F32)
    loose.expect(submission(scale=nudged), Args(X, 2.0), what="c")
    assert "rtol 1e-07" in failure(loose, nudged, Args(X, 2.0), tol=F64)


def test_options_reach_expect_array():
    as32 = lambda x, factor: (x * factor).astype(np.float32)  # noqa: E731
    assert "dtype is float32" in failure(SCALE, as32, Args(X, 2.0), dtype=np.float64)
    assert "Hint: look at the factor" in failure(
        SCALE, lambda x, factor: x, Args(X, 2.0), hint="look at the factor"
    )


def test_an_answer_given_in_out_is_not_called_again():
    calls = []

    def learner(x, factor):
        calls.append(1)
        return x * factor

    sub = submission(scale=learner)
    out = Args(X, 2.0).call(sub, "scale")
    SCALE.expect(sub, Args(X, 2.0), what="c", out=out)
    assert len(calls) == 1
    with pytest.raises(CheckFailed):
        SCALE.expect(sub, Args(X, 3.0), what="c", out=out)  # the output of another case


# ----------------------------------------------------------------------------- tuples


def pair(x, factor):
    return x * factor, x + factor


PAIR_SLIP = Probe(
    "sum swapped", "This matches x - factor.", lambda x, factor: (x * factor, x - factor)
)
PAIR = Graded("pair", oracle=pair, probes=[PAIR_SLIP], items=("prod", "total"))


def test_every_item_is_compared_by_default():
    PAIR.expect(submission(pair=pair), Args(X, 2.0), what="a case")
    message = failure(PAIR, lambda x, factor: (x * factor, x - factor), Args(X, 2.0))
    assert message.startswith("pair total, a case:")
    assert "Why: This matches x - factor." in message
    assert failure(PAIR, lambda x, factor: (x, x + factor), Args(X, 2.0)).startswith(
        "pair prod, a case:"
    )


def test_only_the_items_named_are_compared():
    wrong_total = lambda x, factor: (x * factor, x - factor)  # noqa: E731
    PAIR.expect(submission(pair=wrong_total), Args(X, 2.0), what="c", indices=[0])
    assert "pair total" in failure(PAIR, wrong_total, Args(X, 2.0), indices=[1])


def test_a_tuple_of_the_wrong_length_fails():
    message = failure(PAIR, lambda x, factor: (x * factor,), Args(X, 2.0))
    assert "but a tuple of 2 was expected" in message


# ----------------------------------------------------------------------------- wrapped arguments


def test_wrapped_arguments_reach_the_oracle_and_the_probes_unwrapped():
    seen = []

    def oracle(x, factor):
        seen.append(type(x))
        return x * factor

    graded = Graded(
        "scale", oracle=oracle, probes=[Probe("p", "h", lambda x, factor: oracle(x, 2))]
    )
    with pytest.raises(CheckFailed, match="Why: h"):  # wrong, so that the probe runs too
        graded.expect(
            submission(scale=lambda x, factor: np.asarray(x) * 2),
            Args(AsTorch(X), 3.0),
            what="c",
        )
    assert seen == [np.ndarray, np.ndarray]
    assert Args(ReadBack(X), out=AsTorch(X)).plain().args[0] is X
    assert Args(ReadBack(X), out=AsTorch(X)).plain().kwargs["out"] is X


def test_the_learner_gets_the_wrapped_argument():
    import torch

    kinds = []

    def learner(x, factor):
        kinds.append(type(x))
        return x.numpy() * factor

    SCALE.expect(submission(scale=learner), Args(AsTorch(X), 2.0), what="c")
    assert kinds == [torch.Tensor]


# ----------------------------------------------------------------------------- inputs


def test_rows_with_varied_scale_spans_its_scales_and_offsets():
    x = rows_with_varied_scale(np.random.default_rng(0), (40, 50))
    spreads = x.std(axis=-1)
    assert spreads[0] < 0.05 and spreads[-1] > 5  # geometric 0.01 .. 10
    assert np.all(np.abs(x.mean(axis=-1)) < 5 + 3 * spreads)
    assert np.ptp(x.mean(axis=-1)[:10]) > 2  # offsets differ between rows


def test_rows_with_varied_scale_along_another_axis():
    x = rows_with_varied_scale(np.random.default_rng(0), (30, 4), scales=(1e-3, 1.0), axis=0)
    spreads = x.std(axis=0)
    assert x.shape == (30, 4)
    assert spreads[0] < 0.01 and spreads[-1] > 0.3


def test_the_order_of_the_draws_is_a_choice():
    first = rows_with_varied_scale(np.random.default_rng(1), (3, 4))
    after = rows_with_varied_scale(np.random.default_rng(1), (3, 4), offsets_first=False)
    rng = np.random.default_rng(1)
    offsets = rng.uniform(-5, 5, size=(3, 1))
    expected = rng.normal(size=(3, 4)) * np.geomspace(0.01, 10, 3).reshape(3, 1) + offsets
    np.testing.assert_array_equal(first, expected)
    assert not np.allclose(first, after)


def test_affine_params_and_gain():
    gamma, beta = affine_params(np.random.default_rng(2), 500, np.float32)
    assert gamma.dtype == beta.dtype == np.float32 and gamma.shape == beta.shape == (500,)
    assert abs(gamma.mean() - 1) < 0.1 and abs(beta.mean()) < 0.1
    np.testing.assert_array_equal(gain(np.random.default_rng(2), 500, np.float32), gamma)


def test_tensor64():
    import torch

    t = tensor64(np.arange(3, dtype=np.float32))
    assert t.dtype == torch.float64 and not t.requires_grad
    assert tensor64(t) is t
    leaf = tensor64(t, requires_grad=True)
    assert leaf.requires_grad and leaf is not t


# ----------------------------------------------------------------------------- errors and options


def test_a_known_error_gets_its_hint_and_others_pass_through():
    from normlab.grader.core import RaisedError

    graded = Graded("scale", oracle=scale, errors={"could not be broadcast": "Reshape gamma."})

    def broadcasting(x, factor):
        return x + np.ones(7)

    message = failure(graded, broadcasting, Args(X, 2.0))
    assert "could not be broadcast" in message and message.endswith("\nWhy: Reshape gamma.")
    with pytest.raises(RaisedError):
        graded.expect(submission(scale=lambda x, factor: 1 / 0), Args(X, 2.0), what="c")
    with pytest.raises(CheckFailed, match="Why: Reshape gamma."):
        graded.call(submission(scale=broadcasting), Args(X, 2.0))


def test_default_options_apply_to_every_case_and_a_case_overrides_them():
    graded = Graded("scale", oracle=scale, options={"hint": "the default hint"})
    assert "Hint: the default hint" in failure(graded, lambda x, factor: x, Args(X, 2.0))
    message = failure(graded, lambda x, factor: x, Args(X, 2.0), hint="this case's")
    assert "Hint: this case's" in message and "default" not in message
    scalar = Graded(
        "scale", oracle=lambda x, factor: np.asarray(3.0), options={"kinds": ("scalar",)}
    )
    scalar.expect(submission(scale=lambda x, factor: 3.0), Args(X, 2.0), what="c")
    assert "expected a scalar" in failure(scalar, lambda x, factor: np.ones(1), Args(X, 2.0))


def test_a_label_names_the_function_in_messages():
    labelled = Graded("scale", oracle=scale, label="scale('pre')")
    assert failure(labelled, lambda x, factor: x, Args(X, 2.0)).startswith("scale('pre'), a case:")
    pairs = Graded("pair", oracle=pair, items=("prod", "total"), label="pair('pre')")
    message = failure(pairs, lambda x, factor: (x, x + factor), Args(X, 2.0))
    assert message.startswith("pair('pre') prod, a case:")


# ----------------------------------------------------------------------------- declarations


def test_a_check_is_named_by_its_docstring_and_given_its_seeds_generator():
    from normlab.grader.core import Lab, run_check

    lab = Lab(stem="99_demo", title="Demo")
    drawn = []

    @lab.check(points=2, uses=["scale"], seed=7)
    def draws(sub, rng):
        """scale matches: a row of
        draws from the seed"""
        drawn.append(rng.normal(size=3))

    @lab.check("named here", points=1, uses=["scale"])
    def plain(sub):
        """not the name"""

    assert [(c.name, c.points, c.uses, c.seed) for c in lab.checks] == [
        ("scale matches: a row of draws from the seed", 2, ("scale",), 7),
        ("named here", 1, ("scale",), None),
    ]
    for _ in range(2):  # a fresh generator on every run: the same draws twice
        assert run_check(lab.checks[0], submission(scale=scale)).passed
    np.testing.assert_array_equal(drawn[0], np.random.default_rng(7).normal(size=3))
    np.testing.assert_array_equal(drawn[0], drawn[1])
    assert lab.checks[0].function.__module__ == __name__  # the class report finds its module
    with pytest.raises(ValueError, match="has no title"):
        lab.check(points=1, uses=["scale"])(lambda sub: None)


def test_probe_table_keys_each_graded_by_its_own_name():
    from normlab.grader.cases import probe_table

    other = [SLIP]
    table = probe_table(SCALE, scale_grads=other)
    assert list(table) == ["scale", "scale_grads"]
    assert table["scale"] is SCALE.probes and table["scale_grads"] is other


def test_from_scratch_adds_a_keywords_list_to_the_library_norms():
    from normlab.grader.forbidden import AUTOGRAD, LIBRARY_NORMS, from_scratch

    table = from_scratch("f", g=AUTOGRAD)
    assert table == {"f": LIBRARY_NORMS, "g": LIBRARY_NORMS + AUTOGRAD}


def _graphs(rng):
    """Graphs that the oracles differentiate, each as (output, leaves), built anew per call."""
    import torch
    import torch.nn.functional as F

    x, gamma = rng.normal(size=(5, 6)), rng.normal(1.0, 0.5, size=6)
    images = rng.normal(size=(3, 4, 2, 2))

    def leaves(*arrays):
        return [tensor64(a, requires_grad=True) for a in arrays]

    def layer_norm():
        xt, gt, bt = leaves(x, gamma, 0 * gamma)
        return F.layer_norm(xt, (6,), gt, bt, 1e-5), [xt, gt, bt]

    def batch_norm():
        xt, gt, bt = leaves(x, gamma, 0 * gamma)
        return F.batch_norm(xt, None, None, gt, bt, training=True, eps=1e-5), [xt, gt, bt]

    def group_norm():
        xt, gt, bt = leaves(images, gamma[:4], 0 * gamma[:4])
        return F.group_norm(xt, 2, gt, bt, 1e-5), [xt, gt, bt]

    def rms_norm():
        xt, gt = leaves(x, gamma)
        return F.rms_norm(xt, (6,), gt, 1e-6), [xt, gt]

    def dyt():
        xt, gt, bt = leaves(x, gamma, 0 * gamma)
        at = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
        return gt * torch.tanh(at * xt) + bt, [xt, at, gt, bt]

    qkv = rng.normal(size=(3, 2, 3, 4, 8))

    def attention():
        qt, kt, vt = leaves(*qkv)
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True), [qt, kt, vt]

    return [layer_norm, batch_norm, group_norm, rms_norm, dyt, attention]


def test_backward_gives_the_gradients_of_backward_with_a_gradient_bit_for_bit():
    rng = np.random.default_rng(0)
    for graph in _graphs(rng):
        output, leaves = graph()
        dy = rng.normal(size=tuple(output.shape)) * 10.0 ** rng.integers(-3, 4)
        output.backward(tensor64(dy))
        expected = [leaf.grad.numpy().copy() for leaf in leaves]
        output, leaves = graph()
        backward(output, dy)
        for want, leaf in zip(expected, leaves, strict=True):
            got = leaf.grad.numpy()
            assert got.dtype == want.dtype and got.shape == want.shape, graph.__name__
            assert np.array_equal(got, want), graph.__name__  # bit for bit, not within a tolerance


def test_backward_refuses_a_gradient_of_another_shape():
    output, _ = _graphs(np.random.default_rng(1))[0]()
    with pytest.raises(ValueError, match=r"shape \(6,\) for an output of shape \(5, 6\)"):
        backward(output, np.ones(6))  # it would broadcast in the product


def test_backward_does_not_import_sympy():
    """Its reason to exist: an explicit gradient imports SymPy (0.3 s of the grader's start-up)."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, torch\n"
        "from normlab.grader.cases import backward, tensor64\n"
        "x = tensor64(np.ones((2, 3)) + np.arange(3), requires_grad=True)\n"
        "backward(torch.nn.functional.layer_norm(x, (3,)), np.arange(6.0).reshape(2, 3))\n"
        "assert x.grad is not None\n"
        "print('sympy' in sys.modules)\n"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "False"
