"""Numerical gradient checking, shared by the labs and the checks.

Central differences: df/dx_i ~ (f(x + h e_i) - f(x - h e_i)) / (2h), error O(h^2). Use float64:
in float32 the rounding error (~1e-7 / h) swamps the truncation error for any useful h.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def numeric_gradient(
    f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, upstream: np.ndarray, h: float = 1e-6
) -> np.ndarray:
    """Gradient of ``sum(f(x) * upstream)`` with respect to ``x`` by central differences.

    Args:
        f: a function of one array; may return any shape.
        x: the point, float64, any shape. It is modified during the call and restored.
        upstream: the gradient flowing into ``f``'s output (same shape as ``f(x)``).
        h: the step.

    Returns:
        An array shaped like ``x``.
    """
    if x.dtype != np.float64:
        raise TypeError(f"use float64 for a gradient check, not {x.dtype}")
    grad = np.zeros_like(x)
    flat, grad_flat = x.reshape(-1), grad.reshape(-1)
    if not np.shares_memory(flat, x):
        raise ValueError("x must be contiguous (use np.ascontiguousarray)")
    for i in range(flat.size):
        saved = flat[i]
        flat[i] = saved + h
        plus = np.sum(f(x) * upstream)
        flat[i] = saved - h
        minus = np.sum(f(x) * upstream)
        flat[i] = saved
        grad_flat[i] = (plus - minus) / (2 * h)
    return grad


def relative_error(a: np.ndarray, b: np.ndarray, floor: float = 1e-12) -> float:
    """max |a - b| / max(|a| + |b|, floor): below ~1e-7 a float64 gradient is right."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(a) + np.abs(b), floor)))
