"""The why-normalize lab's checks: right code passes; each known bug fails WITH its hint."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from conftest import lab_results, messages

from normlab.grader.checks import why_normalize as wn

HINTS = {
    probe.name: probe.hint
    for probe in wn.STANDARDIZE_PROBES
    + wn.FORWARD_PROBES
    + wn.BACKWARD_PROBES
    + wn.FEATURE_SCALING_PROBES
}


run = functools.partial(lab_results, "01_why_normalize")


# ----------------------------------------------------------------------------- references
# Written here, independently of the solution notebook, as the tests' own right answers.


def standardize(x, axis=-1, eps=1e-5):
    mu = np.mean(x, axis=axis, keepdims=True)
    return (x - mu) / np.sqrt(np.var(x, axis=axis, keepdims=True) + eps)


def phi(z, activation):
    if activation == "tanh":
        return np.tanh(z)
    if activation == "relu":
        return np.where(z > 0, z, 0.0)
    return z


def phi_prime(z, activation):
    if activation == "tanh":
        return 1.0 / np.cosh(z) ** 2
    if activation == "relu":
        return np.where(z > 0, 1.0, 0.0)
    return np.ones_like(z)


def forward_stats(x, weights, activation, normalize=False):
    out = []
    for w in weights:
        z = x @ w
        x = phi(standardize(z) if normalize else z, activation)
        out.append(np.std(x))
    return np.array(out)


def backward_norms(x, weights, upstream, activation):
    layer_in, zs = [], []
    for w in weights:
        layer_in.append(x)
        zs.append(x @ w)
        x = phi(zs[-1], activation)
    g = upstream
    in_norms, w_norms = [], []
    for h, z, w in zip(layer_in[::-1], zs[::-1], weights[::-1], strict=True):
        gz = g * phi_prime(z, activation)
        w_norms.append(np.sqrt(np.sum((h.T @ gz) ** 2)))
        g = gz @ w.T
        in_norms.append(np.sqrt(np.sum(g**2)))
    return np.array(in_norms[::-1]), np.array(w_norms[::-1])


def init_std(fan_in, activation):
    return (2.0 / fan_in) ** 0.5 if activation == "relu" else fan_in**-0.5


def scale_with_train_stats(train, test, eps=1e-5):
    return (test - train.mean(0)) / np.sqrt(train.var(0) + eps)


RIGHT = {
    "standardize": standardize,
    "mlp_forward_stats": forward_stats,
    "mlp_backward_grad_norms": backward_norms,
    "init_std": init_std,
    "scale_with_train_stats": scale_with_train_stats,
    "BACKWARD_ANSWER": "b",
    "WEIGHT_GRAD_ANSWER": "(C)",
    "ICS_ANSWER": " c ",
}


def test_right_answers_get_full_marks():
    results = run(**RIGHT)
    assert [r.message for r in results if not r.passed] == []
    assert sum(r.points for r in results) == wn.LAB.max_score == 21


def test_torch_tensors_fail_the_forward_checks_as_they_do_under_the_grader():
    import torch

    def torch_forward(x, weights, activation, normalize=False):
        h = torch.from_numpy(x)
        out = []
        for w in torch.from_numpy(weights):
            z = h @ w
            if normalize:
                z = (z - z.mean(-1, keepdim=True)) / (
                    z.var(-1, unbiased=False, keepdim=True) + 1e-5
                ).sqrt()
            h = {"tanh": torch.tanh, "relu": torch.relu}.get(activation, lambda t: t)(z)
            out.append(h.std(correction=0))
        return torch.stack(out).numpy()

    results = run(mlp_forward_stats=torch_forward)
    assert results and not any(r.passed for r in results), messages(results)
    assert all("raised TorchHiddenError" in r.message for r in results), messages(results)


# ----------------------------------------------------------------------------- standardize bugs


def _standardize_with(ddof=0, eps_where="inside", centre=True, by_var=False, axis_fn=None):
    def buggy(x, axis=-1, eps=1e-5):
        axis = axis_fn(x, axis) if axis_fn else axis
        mu = x.mean(axis=axis, keepdims=True) if centre else 0.0
        var = (
            x.var(axis=axis, ddof=ddof, keepdims=True)
            if centre
            else (x**2).mean(axis=axis, keepdims=True)
        )
        if by_var:
            return (x - mu) / (var + eps)
        if eps_where == "outside":
            return (x - mu) / (np.sqrt(var) + eps)
        if eps_where == "none":
            return (x - mu) / np.sqrt(var)
        return (x - mu) / np.sqrt(var + eps)

    return buggy


def no_keepdims(x, axis=-1, eps=1e-5):
    mu = x.mean(axis=axis)
    return (x - mu) / np.sqrt(x.var(axis=axis) + eps)


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (_standardize_with(ddof=1), "unbiased variance"),
        (_standardize_with(eps_where="outside"), "eps outside the root"),
        (_standardize_with(eps_where="none"), "no eps"),
        (_standardize_with(by_var=True), "divided by the variance"),
        (_standardize_with(centre=False), "mean not subtracted"),
        (_standardize_with(axis_fn=lambda x, axis: 0 if axis in (-1, 1) else -1), "wrong axis"),
        (_standardize_with(axis_fn=lambda x, axis: -1), "axis ignored"),
        (_standardize_with(axis_fn=lambda x, axis: None), "statistics over the whole array"),
        (no_keepdims, "statistics without keepdims"),
    ],
)
def test_standardize_bug_is_caught_with_its_hint(buggy, probe):
    results = run(standardize=buggy)
    assert not all(r.passed for r in results)
    assert HINTS[probe] in messages(results)


def test_standardize_returning_float64_for_float32_input_is_reported():
    def upcast(x, axis=-1, eps=1e-5):
        return standardize(x.astype(np.float64), axis, eps)

    results = run(standardize=upcast)
    failed = [r for r in results if not r.passed]
    assert len(failed) == 1 and "dtype is float64 but the input was float32" in failed[0].message


def test_standardize_failure_message_says_where():
    message = messages(run(standardize=_standardize_with(ddof=1)))
    assert "max abs error" in message and "worst at index" in message and "x of shape" in message


# ----------------------------------------------------------------------------- forward bugs


def _forward_with(**bug):
    def buggy(x, weights, activation, normalize=False):
        h, out = x, []
        if bug.get("shift"):
            out.append(np.std(x))
        for w in weights:
            z = x_at = h @ (w.T if bug.get("transpose") else w)
            if normalize and not bug.get("ignore_norm") and not bug.get("norm_after"):
                z = standardize(z, axis=0 if bug.get("batch_axis") else -1)
            h = z if bug.get("no_activation") else phi(z, activation)
            if normalize and bug.get("norm_after"):
                h = standardize(h)
            measured = x_at if bug.get("before") else h
            statistic = bug.get("statistic", np.std)
            out.append(statistic(measured))
        out = out[:-1] if bug.get("shift") else out
        return np.array(out[::-1] if bug.get("reverse") else out)

    return buggy


@pytest.mark.parametrize(
    "bug, probe",
    [
        ({"statistic": lambda h: np.std(h, ddof=1)}, "unbiased std"),
        ({"statistic": lambda h: np.mean(np.std(h, axis=1))}, "std per example, averaged"),
        ({"statistic": lambda h: np.mean(np.std(h, axis=0))}, "std per feature, averaged"),
        ({"statistic": lambda h: np.sqrt(np.mean(h**2))}, "root mean square"),
        ({"statistic": np.var}, "variance"),
        ({"before": True}, "measured before the activation"),
        ({"no_activation": True}, "activation never applied"),
        ({"transpose": True}, "weights transposed"),
        ({"shift": True}, "input included, last layer missing"),
        ({"reverse": True}, "layers in reverse order"),
        ({"ignore_norm": True}, "normalize ignored"),
        ({"norm_after": True}, "normalized after the activation"),
        ({"batch_axis": True}, "normalized over the batch"),
    ],
)
def test_forward_bug_is_caught_with_its_hint(bug, probe):
    results = run(mlp_forward_stats=_forward_with(**bug), standardize=standardize)
    assert not all(r.passed for r in results)
    assert HINTS[probe] in messages(results)


def test_forward_returning_a_list_is_explained():
    results = run(
        mlp_forward_stats=lambda *args, **kwargs: list(forward_stats(*args, **kwargs)),
        standardize=standardize,
    )
    assert "returned a list, expected a NumPy array" in messages(results)


def test_normalized_forward_uses_the_learners_standardize():
    # A correct network built on a buggy standardize fails the normalize check and only that
    # one of the forward checks.
    namespace = {"np": np, "phi": phi, "standardize": _standardize_with(ddof=1)}
    exec(
        "def mlp_forward_stats(x, weights, activation, normalize=False):\n"
        "    out = []\n"
        "    for w in weights:\n"
        "        z = x @ w\n"
        "        x = phi(standardize(z) if normalize else z, activation)\n"
        "        out.append(x.std())\n"
        "    return np.array(out)\n",
        namespace,
    )
    results = run(mlp_forward_stats=namespace["mlp_forward_stats"])
    assert [r.name for r in results if not r.passed] == [
        "forward stds with standardize after every layer"
    ]


# ----------------------------------------------------------------------------- backward bugs


def _backward_with(**bug):
    def buggy(x, weights, upstream, activation):
        layer_in, zs = [], []
        for w in weights:
            layer_in.append(x)
            zs.append(x @ w)
            x = phi(zs[-1], activation)
        g = upstream
        in_norms, out_norms, w_norms = [], [], []
        for layer in reversed(range(len(weights))):
            out_norms.append(np.linalg.norm(g))
            z = zs[layer]
            if bug.get("no_derivative"):
                gz = g
            elif bug.get("at_z") and activation == "tanh":
                gz = g * (1 - z**2)
            else:
                gz = g * phi_prime(z, activation)
            source = phi(z, activation) if bug.get("dw_output") else layer_in[layer]
            dw = source.T @ (g if bug.get("dw_before") else gz)
            w_norms.append(np.linalg.norm(dw) ** (2 if bug.get("squared") else 1))
            g = gz @ (weights[layer] if bug.get("use_w") else weights[layer].T)
            in_norms.append(np.linalg.norm(g) ** (2 if bug.get("squared") else 1))
        first = out_norms if bug.get("shift") else in_norms
        if bug.get("reverse"):
            return np.array(first), np.array(w_norms)
        return np.array(first[::-1]), np.array(w_norms[::-1])

    return buggy


@pytest.mark.parametrize(
    "bug, probe",
    [
        ({"no_derivative": True}, "activation derivative forgotten"),
        ({"at_z": True}, "tanh derivative at the wrong point"),
        ({"use_w": True}, "multiplied by W instead of W.T"),
        ({"shift": True}, "gradient at the layer's output"),
        ({"reverse": True}, "layers in backward order"),
        ({"squared": True}, "squared norms"),
        ({"dw_output": True}, "weight gradient from the layer's output"),
        ({"dw_before": True}, "weight gradient before the activation derivative"),
    ],
)
def test_backward_bug_is_caught_with_its_hint(bug, probe):
    results = run(mlp_backward_grad_norms=_backward_with(**bug))
    assert not all(r.passed for r in results)
    assert HINTS[probe] in messages(results)


def test_backward_returning_one_array_is_explained():
    results = run(mlp_backward_grad_norms=lambda *args: backward_norms(*args)[0])
    assert "but a tuple of 2 was expected" in messages(results)


def test_autograd_in_backward_earns_nothing():
    import torch

    def autograd_norms(x, weights, upstream, activation):
        hs = [torch.tensor(x, requires_grad=True)]
        ws = [torch.tensor(w, requires_grad=True) for w in weights]
        for w in ws:
            z = hs[-1] @ w
            h = {"tanh": torch.tanh, "relu": torch.relu}.get(activation, lambda t: t)(z)
            h.retain_grad()
            hs.append(h)
        (hs[-1] * torch.from_numpy(upstream)).sum().backward()
        return (
            np.array([t.grad.norm().item() for t in hs[:-1]]),
            np.array([w.grad.norm().item() for w in ws]),
        )

    results = run(mlp_backward_grad_norms=autograd_norms)
    assert all(not r.passed for r in results)
    assert "from scratch" in messages(results)


def test_library_layer_norm_in_standardize_earns_nothing():
    import torch
    import torch.nn.functional as F

    def uses_torch(x, axis=-1, eps=1e-5):
        t = torch.movedim(torch.from_numpy(x), axis, -1)
        return torch.movedim(F.layer_norm(t, (t.shape[-1],), eps=eps), -1, axis).numpy()

    results = run(standardize=uses_torch)
    assert all(not r.passed for r in results)
    assert "uses F.layer_norm" in messages(results)


# ----------------------------------------------------------------------------- practice problems


@pytest.mark.parametrize(
    "wrong, probe_text",
    [
        (
            lambda fan_in, activation: 2.0 / fan_in if activation == "relu" else 1.0 / fan_in,
            "VARIANCE",
        ),
        (lambda fan_in, activation: fan_in**-0.5, "ReLU zeroes half"),
        (lambda fan_in, activation: (2.0 / fan_in) ** 0.5, "The factor 2 is ReLU's"),
        (lambda fan_in, activation: (2.0 * fan_in) ** 0.5, "SMALLER"),
        (lambda fan_in, activation: 0.01, "Var(z) = fan_in * Var(w)"),
        (lambda fan_in, activation: "sqrt(2/n)", "returned a string"),
    ],
)
def test_init_std_mistakes_are_explained(wrong, probe_text):
    (result,) = run(init_std=wrong)
    assert not result.passed and probe_text in result.message


def test_init_std_may_return_a_numpy_scalar_or_a_0d_array():
    for answer in (np.float64, np.asarray):
        (result,) = run(
            init_std=lambda fan_in, activation, wrap=answer: wrap(init_std(fan_in, activation))
        )
        assert result.passed, result.message


def _scaling_with(source="train", ddof=0, per_example=False):
    def buggy(train, test, eps=1e-5):
        if per_example:
            return standardize(test, axis=-1, eps=eps)
        stats = {"train": train, "test": test, "both": np.vstack([train, test])}[source]
        return (test - stats.mean(0)) / np.sqrt(stats.var(0, ddof=ddof) + eps)

    return buggy


@pytest.mark.parametrize(
    "buggy, probe",
    [
        (_scaling_with("test"), "test statistics"),
        (_scaling_with("both"), "train and test pooled"),
        (_scaling_with(ddof=1), "unbiased variance of the training set"),
        (_scaling_with(per_example=True), "per example"),
    ],
)
def test_feature_scaling_bug_is_caught_with_its_hint(buggy, probe):
    (result,) = run(scale_with_train_stats=buggy)
    hint = next(p.hint for p in wn.FEATURE_SCALING_PROBES if p.name == probe)
    assert not result.passed and hint in result.message


def test_scaling_the_training_set_instead_is_a_shape_error():
    (result,) = run(scale_with_train_stats=lambda train, test, eps=1e-5: standardize(train, axis=0))
    assert "shape is (40, 4) but should be (4, 4)" in result.message


@pytest.mark.parametrize("name", ["BACKWARD_ANSWER", "WEIGHT_GRAD_ANSWER", "ICS_ANSWER"])
@pytest.mark.parametrize("answer", ["a", "d", "", None, 3, "because"])
def test_wrong_or_missing_multiple_choice_answers_fail(name, answer):
    if answer == {"BACKWARD_ANSWER": "b"}.get(name):
        return
    (result,) = run(**{name: answer})
    assert not result.passed


@pytest.mark.parametrize(
    "name, wrong", [("BACKWARD_ANSWER", "c"), ("WEIGHT_GRAD_ANSWER", "b"), ("ICS_ANSWER", "b")]
)
def test_each_multiple_choice_has_one_right_letter(name, wrong):
    (result,) = run(**{name: wrong})
    assert not result.passed


def test_stubs_report_not_implemented_and_do_not_raise():
    def stub(*args, **kwargs):
        raise NotImplementedError

    results = run(
        standardize=stub,
        mlp_forward_stats=stub,
        mlp_backward_grad_norms=stub,
        init_std=stub,
        scale_with_train_stats=stub,
    )
    assert len(results) == 13 and all("not implemented yet" in r.message for r in results)


@pytest.mark.parametrize("value, text", [(1e-5, "1e-5"), (1e-6, "1e-6"), (1e-8, "1e-8")])
def test_standardize_with_eps_accepted_but_ignored_is_named(value, text):
    def hard_coded(x, axis=-1, eps=1e-5):
        return standardize(x, axis, value)

    results = run(standardize=hard_coded)
    assert HINTS[f"eps ignored ({text} hard-coded)"] in messages(results)
    if value == 1e-5:  # the lab's default: only the case with eps = 1e-3 can tell
        failed = [r.name for r in results if not r.passed]
        assert failed == ["standardize over the last axis matches torch"]
