"""scikit-learn's bundled handwritten digits, split as chapter 08 splits them.

1,797 images of 8 x 8 pixels (counts 0 to 16) ship inside scikit-learn: no download. One
permutation with a fixed seed splits them into 1,197 training, 300 validation and 300 test
images, the split of the demo's section "The data". The first call reads the table that
scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``) as ``load_digits`` reads it, without
importing scikit-learn, whose import took 0.8 s of CPU against 0.02 s for the read (lab 08 loads
the digits each time its worked solution runs: in every grading of it, under nbval, in the
demos); where that file is not found, through ``load_digits`` itself.

The data are scikit-learn's copy of the test part of the UCI "Optical Recognition of
Handwritten Digits" set: E. Alpaydin and C. Kaynak (1998), UCI Machine Learning Repository,
https://doi.org/10.24432/C50P49, under the Creative Commons Attribution 4.0 licence.

Optionally, where a learner has network and torchvision, ``load_split(dataset="fashion_mnist")``
gives Fashion-MNIST in the same form (never used by CI or the grader): see
``load_fashion_mnist``.
"""

from __future__ import annotations

import numpy as np

SIZES = {"train": 1197, "valid": 300, "test": 300}

# Fashion-MNIST ships a training set of 60,000 images and a test set of 10,000; the
# validation images are the last FASHION_VALID of one permutation of the training set.
FASHION_VALID = 10_000

TORCHVISION_HINT = (
    "Fashion-MNIST needs torchvision, which is not installed. Install a torchvision built for "
    "your torch, e.g. the matching pair\n"
    "    pip install 'torch==2.14.1' 'torchvision==0.29.1' "
    "--index-url https://download.pytorch.org/whl/cpu\n"
    "(a torchvision from PyPI next to the course's CPU torch 2.13 fails to import). The download "
    "needs network; the digits need neither."
)


def load_split(
    seed: int = 0, dataset: str = "digits", **options
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The images as rows of pixels in [0, 1], split by one permutation of ``seed``.

    ``dataset="digits"`` (the default, what the chapter and CI use): scikit-learn's digits.
    ``dataset="fashion_mnist"``: Fashion-MNIST through torchvision, ``options`` passed to
    ``load_fashion_mnist`` (``root``, ``download``, ``pixels``).

    Returns:
        {"train": (x, y), "valid": (x, y), "test": (x, y)}: x of shape (n, 64) for the digits,
        float64; y of shape (n,), the classes 0-9.
    """
    if dataset == "fashion_mnist":
        return load_fashion_mnist(seed=seed, **options)
    if dataset != "digits":
        raise ValueError(f"dataset must be 'digits' or 'fashion_mnist', not {dataset!r}")
    if options:
        raise TypeError(f"the digits take no options: {sorted(options)}")
    images, digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(images))
    split, start = {}, 0
    for name, size in SIZES.items():
        rows = order[start : start + size]
        split[name] = (images[rows] / 16, digits[rows])
        start += size
    return split


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``sklearn.datasets.load_digits(return_X_y=True)`` gives them.

    Returns:
        (images, digits): images (1797, 64) float64, pixel counts 0 to 16; digits (1797,) int.
    """
    import gzip
    import importlib.util
    import os

    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "datasets", "data", "digits.csv.gz")
        if os.path.isfile(path):
            with gzip.open(path, mode="rt", encoding="utf-8") as stream:
                table = np.loadtxt(stream, delimiter=",")
            return table[:, :-1], table[:, -1].astype(int)
    from sklearn.datasets import load_digits as from_scikit_learn

    return from_scikit_learn(return_X_y=True)


def to_rows(images: np.ndarray, pixels: int = 8) -> np.ndarray:
    """Grey 28 x 28 images (0 to 255) as rows of ``pixels`` x ``pixels`` values in [0, 1].

    ``pixels=28``: every pixel divided by 255. ``pixels=8``: much as the digits were made from
    32 x 32 bitmaps counted in blocks of 4 x 4, so that the chapter's network (64 inputs) runs
    unchanged: each image padded with 2 black pixels on every side to 32 x 32, then the mean of
    each block of 4 x 4.
    """
    images = np.asarray(images, dtype=np.float64)
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        raise ValueError(f"expected images of shape (n, 28, 28), not {images.shape}")
    if pixels == 28:
        return images.reshape(len(images), 784) / 255
    if pixels != 8:
        raise ValueError(f"pixels must be 8 or 28, not {pixels}")
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2)))
    blocks = padded.reshape(len(images), 8, 4, 8, 4).mean(axis=(2, 4))
    return blocks.reshape(len(images), 64) / 255


def load_fashion_mnist(
    root: str = "data", seed: int = 0, download: bool = True, pixels: int = 8
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Fashion-MNIST through ``torchvision.datasets.FashionMNIST``, split like the digits.

    The split rule is the digits': one permutation of ``seed`` over the 60,000 training
    images gives 50,000 for training and the last 10,000 for validation; the 10,000 test
    images are Fashion-MNIST's own test set, in its order, to be used once. ``root`` is where
    torchvision stores (and, with ``download``, fetches) the files.
    """
    try:
        from torchvision.datasets import FashionMNIST
    except ImportError as error:  # absent, or built for another torch
        raise ImportError(TORCHVISION_HINT) from error

    def arrays(train: bool) -> tuple[np.ndarray, np.ndarray]:
        source = FashionMNIST(root, train=train, download=download)
        return to_rows(np.asarray(source.data), pixels), np.asarray(source.targets)

    (x, y), test = arrays(True), arrays(False)
    order = np.random.default_rng(seed).permutation(len(x))
    train_rows, valid_rows = order[:-FASHION_VALID], order[-FASHION_VALID:]
    return {
        "train": (x[train_rows], y[train_rows]),
        "valid": (x[valid_rows], y[valid_rows]),
        "test": test,
    }
