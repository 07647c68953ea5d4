"""Known-wrong variants (misconceptions) and the comparison that names them.

When an answer is wrong, a check computes what each known-wrong variant would have returned on
the same input and asks which one the learner's answer matches. The matching variant's hint
says *why* the answer is wrong, not only *that* it is. Each lab module defines its own probes
next to its checks (one stem, one module); this module holds the machinery they share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from normlab.grader import keys
from normlab.grader.core import CheckFailed, Output, describe_item, fmt_shape


@dataclasses.dataclass(frozen=True)
class Probe:
    """A known-wrong variant: ``compute`` returns what that bug would output for the same input."""

    name: str
    hint: str
    compute: Callable[..., object]


def evaluate(probes: Sequence[Probe], *args, **kwargs) -> list[tuple[Probe, object]]:
    """Run every probe on the input; a probe that cannot run on it (e.g. shapes) is skipped."""
    results = []
    with np.errstate(all="ignore"):
        for probe in probes:
            try:
                results.append((probe, probe.compute(*args, **kwargs)))
            except (ValueError, IndexError, ZeroDivisionError, FloatingPointError):
                continue
    return results


def _close(got: np.ndarray, target: np.ndarray, rtol: float, atol: float) -> bool:
    if got.shape != target.shape:
        return False
    with np.errstate(all="ignore"):
        return bool(np.allclose(got, target, rtol=rtol, atol=atol, equal_nan=True))


def _pick(target, index: int | None):
    if index is None:
        return target
    if isinstance(target, (tuple, list)) and index < len(target):
        return target[index]
    return None


def matching_probes(got, candidates, index, rtol, atol) -> list[Probe]:
    """Every probe whose output (item ``index``) the learner's answer matches, in order.

    Several can match one input (at d = 1, dividing by d - 1 and forgetting eps both give NaN):
    the message then names each, so the learner is not sent after the wrong one.
    """
    found = []
    for probe, wrong in candidates:
        wrong = _pick(wrong, index)
        if wrong is None or any(probe.hint == other.hint for other in found):
            continue
        wrong = np.asarray(wrong, dtype=np.float64)
        if _close(got.astype(np.float64), wrong, rtol, atol):
            found.append(probe)
    return found


def explain(probes: list[Probe], hint: str = "") -> str:
    """The "why" part of a message: the matching probes' hints, or the check's general hint."""
    if not probes:
        return f"\nHint: {hint}" if hint else ""
    text = f"\nWhy: {probes[0].hint}"
    for other in probes[1:3]:
        text += f"\nOr: {other.hint}"
    return text


def item_of(out: Output, index: int | None, what: str, count: int | None = None):
    """The returned item to compare: the whole return, or element ``index`` of a tuple."""
    if index is None:
        if out.is_tuple:
            raise CheckFailed(f"{what}: returned {out.describe()} but one array was expected")
        return out.items[0]
    if not out.is_tuple or (count is not None and len(out.items) != count):
        expected = f"a tuple of {count}" if count else "a tuple"
        raise CheckFailed(f"{what}: returned {out.describe()} but {expected} was expected")
    return out.items[index]


def array_of(
    out: Output,
    what: str,
    *,
    index: int | None = None,
    count: int | None = None,
    kinds: Sequence[str] = ("ndarray",),
) -> np.ndarray:
    """The returned array (item ``index`` of a tuple), or CheckFailed saying what came instead."""
    item = item_of(out, index, what, count)
    if item.kind not in kinds or item.array is None:
        wanted = " or ".join("a NumPy array" if k == "ndarray" else f"a {k}" for k in kinds)
        raise CheckFailed(f"{what}: returned {describe_item(item)}, expected {wanted}")
    got = item.array
    if not np.issubdtype(got.dtype, np.number) or np.issubdtype(got.dtype, np.complexfloating):
        raise CheckFailed(f"{what}: returned an array of dtype {got.dtype}, expected real numbers")
    return got


def expect_array(
    out: Output,
    expected: np.ndarray,
    *,
    what: str,
    rtol: float,
    atol: float,
    index: int | None = None,
    count: int | None = None,
    candidates: Sequence[tuple[Probe, object]] = (),
    dtype=None,
    kinds: Sequence[str] = ("ndarray",),
    hint: str = "",
) -> None:
    """Fail with a where-and-why message unless the returned array matches ``expected``.

    Args:
        out: what the learner's function returned.
        expected: the oracle's answer (float64 unless stated).
        what: names the value and the input, e.g. ``"output for x of shape (4, 8)"``.
        rtol, atol: tolerances of ``np.allclose``.
        index, count: compare item ``index`` of a returned tuple of ``count``.
        candidates: ``probes.evaluate(...)`` results on the same input.
        dtype: the dtype the answer must keep (e.g. float32 in, float32 out).
        kinds: accepted kinds of return value (``"ndarray"``, ``"tensor"``).
        hint: said when the answer is wrong and no probe explains it.
    """
    got = array_of(out, what, index=index, count=count, kinds=kinds)
    got64 = got.astype(np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    why = explain(matching_probes(got64, candidates, index, rtol, atol), hint)

    if got.shape != expected.shape:
        raise CheckFailed(
            f"{what}: shape is {fmt_shape(got.shape)} but should be {fmt_shape(expected.shape)}"
            + why
        )
    if dtype is not None and got.dtype != np.dtype(dtype):
        raise CheckFailed(
            f"{what}: dtype is {got.dtype} but the input was {np.dtype(dtype)}; keep the input's "
            "dtype (NumPy keeps it if every operand is of that dtype or a Python number)"
        )
    bad_expected = ~np.isfinite(expected)
    nonfinite = ~np.isfinite(got64) & ~bad_expected
    if nonfinite.any():
        where = tuple(int(i) for i in np.argwhere(nonfinite)[0])
        raise CheckFailed(
            f"{what}: contains {int(nonfinite.sum())} non-finite value(s) (NaN or inf), first at "
            f"index {where} where {float(expected[where]):.6g} was expected" + why
        )
    with np.errstate(all="ignore"):
        abs_error = np.where(bad_expected, 0.0, np.abs(got64 - expected))
        allowed = atol + rtol * np.abs(expected)
        excess = np.where(bad_expected, 0.0, abs_error / allowed)
    if excess.size == 0 or float(excess.max()) <= 1.0:
        return
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    worst_index = tuple(int(i) for i in worst)
    rel = abs_error / np.maximum(np.abs(expected), np.finfo(np.float64).tiny)
    raise CheckFailed(
        f"{what}: max abs error {float(abs_error.max()):.3g}, worst at index {worst_index} "
        f"(got {float(got64[worst]):.6g}, expected {float(expected[worst]):.6g}); "
        f"max rel error {float(rel.max()):.3g} (allowed: atol {atol:g}, rtol {rtol:g})" + why
    )


def expect_items(
    out: Output,
    expected,
    names: Sequence[str],
    indices: Sequence[int],
    *,
    function: str,
    what: str,
    **options,
) -> None:
    """``expect_array`` on items ``indices`` of a returned tuple whose items are ``names``.

    E.g. a backward pass returning ``(dx, dgamma, dbeta)``: ``expected`` is the oracle's tuple;
    ``options`` go to ``expect_array`` (tolerances, candidates, kinds).
    """
    for index in indices:
        expect_array(
            out,
            expected[index],
            what=f"{function} {names[index]}, {what}",
            index=index,
            count=len(names),
            **options,
        )


def letter_of(answer) -> str | None:
    """A multiple-choice answer as a lower-case letter: ``"b"``, ``" (B) "``, ``"b)"`` -> ``"b"``."""
    if not isinstance(answer, str):
        return None
    return answer.strip().strip("()").strip().lower() or None


def expect_choice(out: Output, letter: str, *, what: str, hint: str) -> None:
    """Fail unless a multiple-choice answer is ``letter`` (case, spaces, parentheses ignored)."""
    expect_value(out, lambda answer: keys.matches(letter_of(answer), letter), what=what, hint=hint)


def expect_value(out: Output, accepted: Callable[[object], bool], *, what: str, hint: str) -> None:
    """Fail unless a returned plain value (string or number) is accepted."""
    item = item_of(out, None, what)
    if item.kind in ("none",):
        raise CheckFailed(f"{what}: no answer yet (it is None)")
    if item.array is None or item.kind not in ("str", "scalar"):
        raise CheckFailed(f"{what}: expected a string or a number, found {describe_item(item)}")
    if not accepted(item.array.item()):
        raise CheckFailed(f"{what}: {item.array.item()!r} is not right. {hint}")
