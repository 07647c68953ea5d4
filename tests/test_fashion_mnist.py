"""The optional Fashion-MNIST path of normlab.digits, without network or torchvision.

A small stand-in of ``torchvision.datasets.FashionMNIST`` (the attributes ``data`` and
``targets`` that the loader reads, uint8 images of 28 x 28) is put in ``sys.modules``, so the
conversion, the split rule and the message without torchvision are all checked here offline.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

from normlab.digits import FASHION_VALID, load_split, to_rows

N_TRAIN, N_TEST = FASHION_VALID + 30, 7


class FakeFashionMNIST:
    """Images whose every pixel is 10 x the label and whose (0, 0) pixel numbers the image."""

    calls: list[tuple[str, bool, bool]] = []

    def __init__(self, root, train=True, download=False):
        FakeFashionMNIST.calls.append((root, train, download))
        n = N_TRAIN if train else N_TEST
        labels = torch.arange(n) % 10
        data = (labels * 10).to(torch.uint8)[:, None, None].repeat(1, 28, 28)
        data[:, 0, 0] = torch.arange(n) % 256  # which image this is
        data[:, 27, 27] = 200 if train else 100  # which set it came from
        self.data, self.targets = data, labels


@pytest.fixture
def fake_torchvision(monkeypatch):
    FakeFashionMNIST.calls = []
    package = types.ModuleType("torchvision")
    datasets = types.ModuleType("torchvision.datasets")
    datasets.FashionMNIST = FakeFashionMNIST
    package.datasets = datasets
    monkeypatch.setitem(sys.modules, "torchvision", package)
    monkeypatch.setitem(sys.modules, "torchvision.datasets", datasets)
    return FakeFashionMNIST


def test_an_all_white_image_becomes_the_padded_block_means():
    # 28 x 28 padded by 2 to 32 x 32, blocks of 4 x 4: an edge block holds 2 of 4 rows (or
    # columns) of the image, a corner block 2 x 2 of its 16 pixels.
    rows = to_rows(np.full((1, 28, 28), 255, dtype=np.uint8))
    assert rows.shape == (1, 64)
    block = rows.reshape(8, 8)
    expected = np.ones((8, 8))
    expected[0, :] = expected[-1, :] = expected[:, 0] = expected[:, -1] = 0.5
    expected[0, 0] = expected[0, -1] = expected[-1, 0] = expected[-1, -1] = 0.25
    np.testing.assert_allclose(block, expected, atol=1e-12)


def test_one_pixel_lands_in_its_block_row_major():
    images = np.zeros((2, 28, 28), dtype=np.uint8)
    images[0, 0, 0] = 255  # padded position (2, 2): block (0, 0)
    images[1, 5, 13] = 255  # padded position (7, 15): block (1, 3)
    rows = to_rows(images)
    assert rows[0, 0] == pytest.approx(1 / 16) and np.count_nonzero(rows[0]) == 1
    assert rows[1, 1 * 8 + 3] == pytest.approx(1 / 16) and np.count_nonzero(rows[1]) == 1


def test_full_resolution_is_every_pixel_over_255():
    images = np.arange(2 * 784).reshape(2, 28, 28) % 256
    rows = to_rows(images, pixels=28)
    assert rows.shape == (2, 784)
    assert rows[1, 28 * 3 + 5] == pytest.approx(images[1, 3, 5] / 255)
    with pytest.raises(ValueError):
        to_rows(images, pixels=16)
    with pytest.raises(ValueError):
        to_rows(np.zeros((2, 8, 8)))


def test_the_split_rule_is_the_digits_and_the_test_set_is_the_official_one(fake_torchvision):
    split = load_split(3, dataset="fashion_mnist", root="somewhere", download=False)
    assert fake_torchvision.calls == [("somewhere", True, False), ("somewhere", False, False)]
    sizes = {name: len(y) for name, (_, y) in split.items()}
    assert sizes == {"train": N_TRAIN - FASHION_VALID, "valid": FASHION_VALID, "test": N_TEST}
    for name, (x, y) in split.items():
        assert x.shape == (len(y), 64) and x.dtype == np.float64
        assert 0 <= x.min() and x.max() <= 1
        # an interior block of an image whose pixels are 10 x label is 10 x label / 255
        np.testing.assert_allclose(x[:, 3 * 8 + 3], 10 * y / 255, atol=1e-12)
        # the corner block: pixels (26..27, 26..27) of the image, 12 of its 16 are padding;
        # pixel (27, 27) says which set the image came from
        source = 200 if name != "test" else 100
        np.testing.assert_allclose(x[:, 63], (3 * 10 * y + source) / 16 / 255, atol=1e-12)
    # the test set is Fashion-MNIST's own, in its order
    np.testing.assert_array_equal(split["test"][1], np.arange(N_TEST) % 10)
    # training and validation: one permutation of seed 3 of the training images, disjoint
    order = np.random.default_rng(3).permutation(N_TRAIN)
    np.testing.assert_array_equal(split["valid"][1], order[-FASHION_VALID:] % 10)
    # block (0, 0) holds pixels (0..1, 0..1): the image's number and 3 pixels of 10 x label
    x_train, y_train = split["train"]
    number = x_train[:, 0] * 16 * 255 - 3 * 10 * y_train
    np.testing.assert_allclose(number, order[:-FASHION_VALID] % 256, atol=1e-9)
    again = load_split(3, dataset="fashion_mnist", root="somewhere", download=False)
    other = load_split(4, dataset="fashion_mnist", root="somewhere", download=False)
    np.testing.assert_array_equal(again["valid"][0], split["valid"][0])
    assert not np.array_equal(other["valid"][1], split["valid"][1])


def test_download_is_asked_for_by_default(fake_torchvision):
    load_split(dataset="fashion_mnist")
    assert fake_torchvision.calls == [("data", True, True), ("data", False, True)]


def test_without_torchvision_the_message_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision -> ImportError
    with pytest.raises(ImportError) as raised:
        load_split(dataset="fashion_mnist")
    message = str(raised.value)
    assert "torchvision==0.29.1" in message and "torch==2.14.1" in message
    assert "network" in message


def test_unknown_datasets_and_options_are_refused():
    with pytest.raises(ValueError):
        load_split(dataset="cifar10")
    with pytest.raises(TypeError):
        load_split(root="data")
