"""scikit-learn's bundled handwritten digits, split as chapter 08 splits them.

1,797 images of 8 x 8 pixels (counts 0 to 16) ship inside scikit-learn: no download. One
permutation with a fixed seed splits them into 1,197 training, 300 validation and 300 test
images, the split of the demo's section "The data". scikit-learn is imported on the first call,
so that importing normlab (and grading, which never calls this) does not need it.
"""

from __future__ import annotations

import numpy as np

SIZES = {"train": 1197, "valid": 300, "test": 300}


def load_split(seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The digits, pixels scaled to [0, 1], split by one permutation of ``seed``.

    Returns:
        {"train": (x, y), "valid": (x, y), "test": (x, y)}: x of shape (n, 64), float64;
        y of shape (n,), the digits 0-9.
    """
    from sklearn.datasets import load_digits

    images, digits = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(images))
    split, start = {}, 0
    for name, size in SIZES.items():
        rows = order[start : start + size]
        split[name] = (images[rows] / 16, digits[rows])
        start += size
    return split
