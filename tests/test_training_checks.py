"""The training lab's checks: right code passes; each known bug fails WITH its hint."""

from __future__ import annotations

import functools

import nbformat
import numpy as np
import pytest
from conftest import ROOT, lab_results, messages, solution_namespace, told

from normlab.grader import i18n, notebook
from normlab.grader.checks import training as tr
from normlab.grader.registry import labs_using

HINTS = {
    probe.name: probe.hint
    for probes in (tr.GRADS_PROBES, tr.SGD_PROBES, tr.TRAIN_PROBES, tr.PREDICT_PROBES)
    for probe in probes
}


run = functools.partial(lab_results, "08_training")


def failed(results) -> list[str]:
    return [r.name for r in results if not r.passed]


# ----------------------------------------------------------------------------- a model
# Written here, independently of the solution notebook and of the checks' torch oracle: a
# network whose every known bug is a switch, all off for the right answer.


def make_model(**bugs):
    bug = {name: bugs.get(name, False) for name in (*BUGS, *UNNAMED_BUGS)}
    unknown = set(bugs) - set(bug)
    assert not unknown, unknown

    def as_rows(z, norm, groups):
        # the values each statistic averages, along the last axis: (C, N) for BatchNorm,
        # (N, G, C / G) for GroupNorm, (N, 1, C) for LayerNorm
        if norm == "batch":
            return z.T
        if norm == "group" and bug["interleaved_groups"]:  # channel c in group c % groups
            return z.reshape(z.shape[0], -1, groups).transpose(0, 2, 1)
        return z.reshape(z.shape[0], 1 if norm == "layer" else groups, -1)

    def from_rows(rows, z, norm):
        if norm == "batch":
            return rows.T
        if norm == "group" and bug["interleaved_groups"]:
            return rows.transpose(0, 2, 1).reshape(z.shape)
        return rows.reshape(z.shape)

    def norm_forward(z, gamma, beta, norm, groups, eps=1e-5):
        rows = as_rows(z, norm, groups)
        mu = np.mean(rows, axis=-1, keepdims=True)
        sigma = np.sqrt(np.mean((rows - mu) ** 2, axis=-1, keepdims=True) + eps)
        z_hat = (rows - mu) / sigma
        return gamma * from_rows(z_hat, z, norm) + beta, z_hat, sigma

    def norm_backward(dh, z, z_hat, sigma, gamma, norm, groups):
        dgamma = np.sum(dh * from_rows(z_hat, z, norm), axis=0)
        dbeta = np.sum(dh, axis=0)
        dz_hat = as_rows(dh * gamma, norm, groups)
        if bug["frozen"]:
            return from_rows(dz_hat / sigma, z, norm), dgamma, dbeta
        m = z_hat.shape[-1]
        dz = (
            m * dz_hat
            - np.sum(dz_hat, axis=-1, keepdims=True)
            - z_hat * np.sum(dz_hat * z_hat, axis=-1, keepdims=True)
        ) / (m * sigma)
        return from_rows(dz, z, norm), dgamma, dbeta

    def forward_backward(x, labels, W1, gamma, beta, W2, b2, norm="batch", groups=4):
        if norm not in ("batch", "layer", "group", "none"):
            raise ValueError(norm)
        n = x.shape[0]
        z = x @ W1
        if norm == "none":
            h = z
        else:
            h, z_hat, sigma = norm_forward(z, gamma, beta, norm, groups)
        a = h * (h > 0)
        s = a @ W2 + b2
        if not bug["unstable"]:
            s = s - np.max(s, axis=1, keepdims=True)
        with np.errstate(all="ignore"):
            e = np.exp(s)
            p = e / np.sum(e, axis=1, keepdims=True)
            losses = -np.log(p[np.arange(n), labels])
        one_hot = np.eye(W2.shape[1])[labels]
        scale = 1.0 if bug["summed"] else 1.0 / n
        ds = (p - one_hot) * scale
        gate = z > 0 if bug["gate_z"] else h > 0
        da = ds @ W2.T
        if norm == "none":
            dz, dgamma, dbeta = da * gate, np.zeros_like(gamma), np.zeros_like(beta)
        else:
            dz, dgamma, dbeta = norm_backward(da * gate, z, z_hat, sigma, gamma, norm, groups)
        loss = np.sum(losses) * scale
        return loss, x.T @ dz, dgamma, dbeta, a.T @ ds, np.sum(ds, axis=0)

    def sgd_step(param, grad, velocity, lr, momentum):
        if bug["dampened"]:
            v = momentum * velocity + (1 - momentum) * grad
            return param - lr * v, v
        if bug["lr_inside"]:
            v = momentum * velocity + lr * grad
            return param - v, v
        if bug["old_velocity"]:
            return param - lr * velocity, momentum * velocity + grad
        if bug["negative"]:
            v = momentum * velocity - grad
            return param + lr * v, v
        v = momentum * velocity + grad
        return param - lr * v, v

    def train(x, labels, W1, gamma, beta, W2, b2, lr, momentum, steps, batch_size):
        params = [np.array(p, dtype=float) for p in (W1, gamma, beta, W2, b2)]
        velocity = [np.zeros_like(p) for p in params]
        hidden = W1.shape[1]
        mean, var = np.zeros(hidden), np.ones(hidden)
        losses = np.zeros(steps)
        mu = 0.0 if bug["no_momentum"] else momentum
        for t in range(steps):
            first = 0 if bug["same_batch"] else t * batch_size
            xb, yb = x[first : first + batch_size], labels[first : first + batch_size]
            z = xb @ params[0]
            if not bug["stats_frozen"]:
                ddof = 0 if bug["stats_biased"] else 1
                mean = 0.9 * mean + 0.1 * z.mean(axis=0)
                var = 0.9 * var + 0.1 * z.var(axis=0, ddof=ddof)
            losses[t], *grads = forward_backward(xb, yb, *params)
            for i in range(len(params)):
                params[i], velocity[i] = sgd_step(params[i], grads[i], velocity[i], lr, mu)
        return (losses, mean, var, *params)

    def predict(x, W1, gamma, beta, running_mean, running_var, W2, b2):
        z = x @ W1
        if bug["eval_batch_stats"]:
            h = norm_forward(z, gamma, beta, "batch", 1)[0]
        elif bug["eval_no_root"]:
            h = gamma * (z - running_mean) / (running_var + 1e-5) + beta
        else:
            h = gamma * (z - running_mean) / np.sqrt(running_var + 1e-5) + beta
        return np.maximum(h, 0) @ W2 + b2

    def batchnorm_forward(
        x, gamma, beta, running_mean, running_var, training, momentum=0.1, eps=1e-5
    ):
        if not training:
            y = gamma * (x - running_mean) / np.sqrt(running_var + eps) + beta
            return y, running_mean, running_var
        mean = (1 - momentum) * running_mean + momentum * x.mean(axis=0)
        var = (1 - momentum) * running_var + momentum * x.var(axis=0, ddof=1)
        return norm_forward(x, gamma, beta, "batch", 1, eps)[0], mean, var

    def backward_of(norm):
        def backward(dy, x, *groups_and_gamma, eps=1e-5):
            groups, gamma = groups_and_gamma if norm == "group" else (1, *groups_and_gamma)
            _, z_hat, sigma = norm_forward(x, gamma, 0.0, norm, groups, eps)
            return norm_backward(dy, x, z_hat, sigma, gamma, norm, groups)

        return backward

    return {
        "batchnorm_forward": batchnorm_forward,
        "batchnorm_backward": backward_of("batch"),
        "layernorm_forward": lambda x, gamma, beta, eps=1e-5: norm_forward(
            x, gamma, beta, "layer", 1, eps
        )[0],
        "layernorm_backward": backward_of("layer"),
        "group_norm_forward": lambda x, groups, gamma, beta, eps=1e-5: norm_forward(
            x, gamma, beta, "group", groups, eps
        )[0],
        "group_norm_backward": backward_of("group"),
        "net_forward_backward": forward_backward,
        "net_sgd_step": sgd_step,
        "net_train": train,
        "net_predict": predict,
        "NET_SCALE_ANSWER": "d",
        "NET_BATCH1_ANSWER": "(a) the norm outputs beta",
    }


BUGS = {
    "summed": "loss summed over the batch",
    "frozen": "norm's statistics treated as constants",
    "gate_z": "ReLU gated on z",
    "unstable": "softmax without subtracting the max",
    "dampened": "velocity dampened",
    "lr_inside": "learning rate inside the velocity",
    "old_velocity": "update with the old velocity",
    "negative": "velocity with the opposite sign",
    "no_momentum": "momentum ignored",
    "stats_biased": "running variance stored biased",
    "stats_frozen": "running statistics never updated",
    "same_batch": "the same batch every step",
    "eval_batch_stats": "eval mode with batch statistics",
    "eval_no_root": "running variance without the square root",
}


# bugs that no probe names: they must still fail
UNNAMED_BUGS = {"interleaved_groups": "GroupNorm's groups taken as every G-th channel"}


def test_right_answers_get_full_marks():
    results = run(**make_model())
    assert failed(results) == []
    assert sum(r.points for r in results) == 23 == tr.LAB.max_score


def test_an_optimizer_written_as_a_class_also_passes():
    # another style: the model's functions called through a class, parameters as a list
    class Net:
        def __init__(self):
            self.model = make_model()

        def step(self, *args):
            return self.model["net_sgd_step"](*args)

    net = Net()
    given = dict(make_model(), net_sgd_step=net.step)
    assert failed(run(**given)) == []


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_each_bug_fails_with_its_probe_hint(bug):
    results = run(**make_model(**{bug: True}))
    bad = [r for r in results if not r.passed]
    assert bad, f"{bug}: every check passed"
    assert any(HINTS[BUGS[bug]] in told(results, r.name) for r in bad), [r.message for r in bad]


def test_every_probe_has_a_bug_here():
    assert set(BUGS.values()) | set(SOLUTION_MISTAKES) == set(HINTS)


def test_a_bug_no_probe_names_still_fails():
    model = make_model()
    right = model["net_forward_backward"]

    def no_bias_gradient(*args, **kwargs):
        loss, dW1, dgamma, dbeta, dW2, db2 = right(*args, **kwargs)
        return loss, dW1, dgamma, dbeta, dW2, np.zeros_like(db2)

    assert "a training step: loss and gradients match autograd, with BatchNorm" in failed(
        run(**dict(model, net_forward_backward=no_bias_gradient))
    )


def test_groups_of_interleaved_channels_fail_the_groupnorm_check_only():
    results = run(**make_model(interleaved_groups=True))
    assert failed(results) == [
        "Part 0: your GroupNorm on (N, H) features",
        "Part 0: your GroupNorm backward on (N, H) features",
        "a training step: loss and gradients match autograd, with GroupNorm",
    ]


def test_eval_mode_that_depends_on_the_batch_fails_the_batch_of_one_case():
    model = make_model()
    right = model["net_predict"]

    def centred_logits(x, *params):
        logits = right(x, *params)
        return logits - logits.mean(axis=0)  # one row's logits depend on the others

    results = run(**dict(model, net_predict=centred_logits))
    assert failed(results) == ["eval mode uses the running statistics, also at batch 1"]


@pytest.mark.parametrize(
    "name, answer, why",
    [
        ("NET_SCALE_ANSWER", "a", tr.NET_SCALE_WHY["a"]),
        ("NET_SCALE_ANSWER", "b", tr.NET_SCALE_WHY["b"]),
        ("NET_BATCH1_ANSWER", "c", tr.NET_BATCH1_WHY["c"]),
        ("NET_BATCH1_ANSWER", "d", tr.NET_BATCH1_WHY["d"]),
    ],
)
def test_a_wrong_letter_gets_its_misconception(name, answer, why):
    results = run(**{name: answer})
    (result,) = results
    assert not result.passed and why in result.message


def test_two_letters_are_told_so():
    (result,) = run(NET_BATCH1_ANSWER="a or b")
    assert not result.passed and "one letter" in result.message


def test_the_digits_split_is_fixed_and_uses_every_image_once():
    from sklearn.datasets import load_digits

    from normlab.digits import load_split

    split, again = load_split(0), load_split(0)
    assert {name: len(y) for name, (_, y) in split.items()} == {
        "train": 1197,
        "valid": 300,
        "test": 300,
    }
    for name in split:
        assert np.array_equal(split[name][0], again[name][0])
    images = load_digits().data / 16
    pooled = np.concatenate([x for x, _ in split.values()])
    assert sorted(map(bytes, pooled)) == sorted(map(bytes, images))  # a permutation of all
    assert pooled.min() == 0 and pooled.max() == 1
    assert not np.array_equal(load_split(1)["test"][0], split["test"][0])


# Read in a fresh interpreter: whether scikit-learn was imported is the point.
READ_DIGITS = """
import sys
import numpy as np
from normlab.digits import load_digits
images, digits = load_digits()
imported = "sklearn" in sys.modules
from sklearn.datasets import load_digits as theirs
want_images, want_digits = theirs(return_X_y=True)
same = [(a.dtype, a.shape) == (b.dtype, b.shape) and np.array_equal(a, b)
        for a, b in ((images, want_images), (digits, want_digits))]
print(imported, same)
"""


def test_the_digits_are_scikit_learns_read_without_importing_it():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", READ_DIGITS], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "False [True, True]"


def test_the_digits_come_through_load_digits_where_its_file_is_not_found(monkeypatch):
    import importlib.util

    from sklearn.datasets import load_digits as theirs

    from normlab import digits

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    images, labels = digits.load_digits()
    want_images, want_labels = theirs(return_X_y=True)
    assert np.array_equal(images, want_images) and np.array_equal(labels, want_labels)


# ----------------------------------------------------------------------------- the solution, changed
# Each mistake written as a change of the solution notebook's own code, checked as the lab's
# check cell checks it: check(function), that function's checks only.

STEP_FIRST = """        _, running_mean, running_var = batchnorm_forward(
            xb @ params[0], params[1], params[2], running_mean, running_var, True
        )
        loss, *grads = net_forward_backward(xb, yb, *params, norm="batch")
        for i, grad in enumerate(grads):
            params[i], velocities[i] = net_sgd_step(params[i], grad, velocities[i], lr, momentum)
"""
STATISTICS_AFTER = """        loss, *grads = net_forward_backward(xb, yb, *params, norm="batch")
        for i, grad in enumerate(grads):
            params[i], velocities[i] = net_sgd_step(params[i], grad, velocities[i], lr, momentum)
        _, running_mean, running_var = batchnorm_forward(
            xb @ params[0], params[1], params[2], running_mean, running_var, True
        )
"""

SOLUTION_MISTAKES = {
    "running statistics after the step": ("net_train", (STEP_FIRST, STATISTICS_AFTER)),
    "BatchNorm momentum reversed": (
        "net_train",
        (
            "running_mean, running_var, True\n        )",
            "running_mean, running_var, True, momentum=0.9\n        )",
        ),
    ),
    "eval mode without eps": (
        "net_predict",
        ("running_mean, running_var, False)[0]", "running_mean, running_var, False, eps=0.0)[0]"),
    ),
}


@pytest.mark.parametrize("probe", sorted(SOLUTION_MISTAKES))
def test_a_mistake_in_the_solution_gets_its_why_in_both_languages(probe):
    function, change = SOLUTION_MISTAKES[probe]
    namespace = solution_namespace("08_training", replace=change)
    results = run(**{function: namespace[function]})
    assert all(function in check.uses for check in tr.LAB.checks if check.name in names(results))
    bad = [r for r in results if not r.passed]
    assert bad and all(HINTS[probe] in told(results, r.name) for r in bad), messages(results)
    for result in bad:
        assert i18n.translation(result.message, i18n.catalog("es"))[1] == []


def test_net_train_with_a_wrong_sgd_step_names_it_first():
    # net_train is right; the net_sgd_step it calls dampens the velocity. check(net_train) shows
    # net_train's check only, and its first line sends the learner to net_sgd_step.
    change = (
        "new_velocity = momentum * velocity + grad",
        "new_velocity = momentum * velocity + (1 - momentum) * grad",
    )
    namespace = solution_namespace("08_training", replace=change)
    (result,) = run(net_train=namespace["net_train"])
    assert not result.passed
    first = result.message.split("\n")[0]
    assert first == (
        "Fix `net_sgd_step` first: it fails its own check, "
        "“SGD with momentum: one step as torch.optim.SGD”."
    )
    spanish = i18n.translation(result.message, i18n.catalog("es"))
    assert spanish[1] == [] and spanish[0].startswith("Corrige primero `net_sgd_step`")


def test_net_train_wrong_on_its_own_names_no_other_function():
    results = run(**make_model(same_batch=True))
    (train,) = [r for r in results if not r.passed]
    assert "Fix `" not in train.message and HINTS["the same batch every step"] in train.message


def names(results) -> list[str]:
    return [r.name for r in results]


def test_part_0_checks_the_norms_as_the_network_uses_them():
    # the solution's own norms handle (N, H) only: lab 08 checks them there, and passes them;
    # check(batchnorm_forward) without lab= still finds lab 02, the lab that owns the name
    namespace = solution_namespace("08_training")
    given = {name: namespace[name] for name in tr.PASTED}
    results = run(**given)
    assert [r.name for r in results] == [c.name for c in tr.LAB.checks[: len(tr.PASTED)]]
    assert all(r.passed for r in results) and sum(r.points for r in results) == 6
    for name in tr.PASTED:
        assert [lab.stem for lab in labs_using(name)] != ["08_training"]
    chosen, _ = notebook.run(batchnorm_forward=namespace["batchnorm_forward"])
    assert chosen.stem == "02_batchnorm"


def test_a_wrong_pasted_norm_is_named_before_the_network_and_gets_its_labs_why():
    # the BatchNorm backward without the mean term (lab 02's probe), as a change of the solution
    change = (
        "dx = inv_std * (g - g.mean(axis=0) - x_hat * (g * x_hat).mean(axis=0))",
        "dx = inv_std * (g - x_hat * (g * x_hat).mean(axis=0))",
    )
    namespace = solution_namespace("08_training", replace=change)
    (own,) = run(batchnorm_backward=namespace["batchnorm_backward"])
    assert not own.passed and "but not the mean term" in own.message
    results = run(net_forward_backward=namespace["net_forward_backward"])
    by_name = {r.name: r for r in results}
    batch = by_name["a training step: loss and gradients match autograd, with BatchNorm"]
    assert batch.message.startswith(
        f"Fix `batchnorm_backward` first: it fails its own check, “{own.name}”."
    )
    assert by_name["a training step: loss and gradients match autograd, with LayerNorm"].passed
    assert i18n.translation(batch.message, i18n.catalog("es"))[1] == []


def _digits_cell(namespace):
    """Run the solution's cell that trains on the digits, in ``namespace``."""
    notebook_cells = nbformat.read(ROOT / "solutions" / "08_training.ipynb", as_version=4).cells
    (source,) = [cell.source for cell in notebook_cells if cell.id == "69ca6303"]
    exec(compile(source, "<digits>", "exec"), namespace)


def test_the_digits_cell_catches_batch_statistics_at_test_time():
    # net_predict normalizing with the batch's own statistics (a change of the solution): one
    # batch of all 300 validation images hid it; batches of 2 show it
    namespace = solution_namespace(
        "08_training",
        replace=(
            "running_mean, running_var, False)[0]\n",
            "running_mean, running_var, True)[0]\n",
        ),
    )
    with pytest.raises(AssertionError, match="net_predict after net_train, on batches of 2"):
        _digits_cell(namespace)
    right = solution_namespace("08_training")
    _digits_cell(right)
    assert right["accuracy"]["eval mode"] - right["accuracy"]["train mode"] > 0.2


def test_a_function_not_written_yet_sends_the_learner_nowhere_else():
    def not_yet(*args, **kwargs):
        raise NotImplementedError

    results = run(**dict(make_model(dampened=True), net_train=not_yet))
    (train,) = [r for r in results if r.name.startswith("5 training steps")]
    assert train.message == "`net_train` is not implemented yet"
