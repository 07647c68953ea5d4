"""The knobs of the demo notebooks, driven without a browser: each ``update`` is compared with
PyTorch's norms or with the closed form the chapter states, and the sliders are wired to it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from normlab.widgets import AffineKnobs, BatchNoiseKnobs, EpsilonKnobs, SphereKnobs

PNG = b"\x89PNG\r\n\x1a\n"


def torch_layer_norm(x, eps=0.0, gamma=1.0, beta=0.0):
    x = torch.as_tensor(np.asarray(x, dtype=np.float64))
    d = x.shape[-1]
    weight = torch.full((d,), float(gamma), dtype=torch.float64)
    bias = torch.full((d,), float(beta), dtype=torch.float64)
    return F.layer_norm(x, (d,), weight, bias, eps=eps).numpy()


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("seed", range(5))
def test_sphere_projections_match_torch_and_lie_on_the_spheres(d, seed):
    x = np.random.default_rng(seed).uniform(-3, 3, size=d)
    knobs = SphereKnobs(d)
    shown = knobs.update(**{f"x{i + 1}": value for i, value in enumerate(x)})
    layernorm, rmsnorm = shown["layernorm"], shown["rmsnorm"]
    np.testing.assert_allclose(layernorm, torch_layer_norm(x), atol=1e-9)
    expected_rms = F.rms_norm(torch.as_tensor(x), (d,), eps=0.0).numpy()
    np.testing.assert_allclose(rmsnorm, expected_rms, atol=1e-12)
    # LayerNorm: the sphere of radius √d inside the plane Σz = 0; RMSNorm: the whole sphere,
    # in the direction of x.
    assert np.linalg.norm(layernorm) == pytest.approx(np.sqrt(d), abs=1e-9)
    assert layernorm.sum() == pytest.approx(0.0, abs=1e-9)
    assert np.linalg.norm(rmsnorm) == pytest.approx(np.sqrt(d))
    assert rmsnorm @ x == pytest.approx(np.linalg.norm(rmsnorm) * np.linalg.norm(x))


@pytest.mark.parametrize(
    ("knobs", "settings"),
    [
        (SphereKnobs(2), {"x1": 1.0, "x2": -0.5}),
        (SphereKnobs(3), {"x1": 1.0, "x2": -0.5, "x3": 2.0}),
        (AffineKnobs(), {"gamma": 1.0, "beta": 0.5, "log10_eps": -5}),
        (BatchNoiseKnobs(), {"batch_size": 16}),
        (EpsilonKnobs(), {"log10_eps": -5, "log10_sigma": -3}),
    ],
    ids=["sphere2", "sphere3", "affine", "batch", "epsilon"],
)
def test_every_knob_draws_its_picture(knobs, settings):
    knobs.update(**settings)
    picture = knobs.png()
    assert picture.startswith(PNG) and len(picture) > 10_000
    assert knobs.figure.axes, "nothing was drawn"


def test_sphere_for_d_2_lands_on_two_points():
    # [2, 4] and [20, 40] both normalize to [-1, 1] (chapter 03's first example).
    knobs = SphereKnobs(2)
    for x1, x2 in [(2.0, 4.0), (20.0, 40.0), (-1.0, 2.5)]:
        np.testing.assert_allclose(knobs.update(x1=x1, x2=x2)["layernorm"], [-1, 1], atol=1e-9)
    with pytest.raises(ValueError):
        SphereKnobs(4)


@pytest.mark.parametrize(
    ("gamma", "beta", "log10_eps"), [(1, 0, -5), (2.5, -1.5, -5), (0.5, 2, 0.5)]
)
def test_affine_knobs_match_torch_layer_norm(gamma, beta, log10_eps):
    knobs = AffineKnobs()
    shown = knobs.update(gamma=gamma, beta=beta, log10_eps=log10_eps)
    expected = torch_layer_norm(knobs.x, 10.0**log10_eps, gamma, beta)
    np.testing.assert_allclose(shown["y"], expected, atol=1e-9)
    assert shown["mean"] == pytest.approx(beta, abs=1e-9)  # every token's x̂ has mean 0
    assert shown["std"] == pytest.approx(expected.std())


def test_a_large_epsilon_shrinks_the_quiet_tokens():
    knobs = AffineKnobs()
    sigma = knobs.x.std(axis=-1)
    shown = knobs.update(gamma=1.0, beta=0.0, log10_eps=0.0)  # ε = 1
    np.testing.assert_allclose(shown["token_std"], sigma / np.sqrt(sigma**2 + 1.0), rtol=1e-9)
    quiet = sigma < 0.1
    assert quiet.any() and (shown["token_std"][quiet] < 0.1).all()


@pytest.mark.parametrize("batch_size", [2, 8, 64])
def test_batch_noise_normalizes_x0_as_batchnorm_does_in_training(batch_size):
    knobs = BatchNoiseKnobs()
    shown = knobs.update(batch_size=batch_size)
    rng = np.random.default_rng(knobs.seed)
    draws = rng.normal(3.0, 2.0, size=(knobs.batches, batch_size))
    draws[:, 0] = 5.0
    # Each row is one batch of one feature: (B, C=1) for F.batch_norm.
    expected = [
        F.batch_norm(torch.as_tensor(row)[:, None], None, None, training=True, eps=1e-5)[0, 0]
        for row in draws
    ]
    np.testing.assert_allclose(shown["normalized_example"], expected, atol=1e-9)
    np.testing.assert_allclose(shown["batch_mean"], draws.mean(axis=1))


def test_batch_statistics_jitter_less_in_larger_batches():
    knobs = BatchNoiseKnobs(batches=2000)
    spreads = {}
    for batch_size in (4, 16, 64, 256):
        shown = knobs.update(batch_size=batch_size)
        # x₀ is fixed, the other B - 1 members are random: std of the mean = σ √(B - 1) / B.
        expected = 2.0 * np.sqrt(batch_size - 1) / batch_size
        assert shown["spread_of_mean"] == pytest.approx(expected, rel=0.08)
        spreads[batch_size] = shown["spread_of_output"]
    assert spreads[4] > spreads[16] > spreads[64] > spreads[256]


@pytest.mark.parametrize(("log10_eps", "log10_sigma"), [(-5, -3), (-2, -3), (-2, 1), (-8, -6)])
def test_epsilon_inside_and_outside_the_root(log10_eps, log10_sigma):
    knobs = EpsilonKnobs()
    shown = knobs.update(log10_eps=log10_eps, log10_sigma=log10_sigma)
    eps, sigma = 10.0**log10_eps, 10.0**log10_sigma
    row = 3.0 + sigma * knobs.pattern
    assert shown["std_inside"] == pytest.approx(torch_layer_norm(row, eps).std(), rel=1e-6)
    assert shown["std_inside"] == pytest.approx(sigma / np.sqrt(sigma**2 + eps), rel=1e-6)
    assert shown["std_outside"] == pytest.approx(sigma / (sigma + eps), rel=1e-6)


def test_epsilon_floors_differ():
    # Inside the root x̂ keeps unit size down to σ ≈ √ε; outside, down to σ ≈ ε.
    shown = EpsilonKnobs().update(log10_eps=-4, log10_sigma=-3)  # √ε = 1e-2 > σ > ε
    assert shown["std_inside"] < 0.2 and shown["std_outside"] > 0.9


@pytest.mark.parametrize(
    ("make", "control", "value"),
    [
        (lambda: SphereKnobs(3), "x1", -2.5),
        (lambda: SphereKnobs(2), "x2", 1.5),
        (AffineKnobs, "gamma", 2.0),
        (BatchNoiseKnobs, "batch_size", 128),
        (EpsilonKnobs, "log10_eps", -1.0),
    ],
    ids=["sphere3", "sphere2", "affine", "batch", "epsilon"],
)
def test_moving_a_slider_redraws_the_picture(make, control, value):
    pytest.importorskip("ipywidgets")
    knobs = make()
    box = knobs.widget()
    before = bytes(knobs.image.value)
    assert before.startswith(PNG) and knobs.image in box.children
    knobs.sliders[control].value = value  # what dragging the slider does
    after = bytes(knobs.image.value)
    assert after != before and after.startswith(PNG)
    settings = {name: slider.value for name, slider in knobs.sliders.items()}
    assert settings[control] == value
    expected = make().update(**settings)
    for key, number in expected.items():
        np.testing.assert_allclose(knobs.last[key], number)
