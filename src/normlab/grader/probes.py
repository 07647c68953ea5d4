"""Known-wrong variants (misconceptions) and the comparison that names them.

When an answer is wrong, a check computes what each known-wrong variant would have returned on
the same input and asks which one the learner's answer matches. The matching variant's hint
says *why* the answer is wrong, not only *that* it is. Each lab module defines its own probes
next to its checks (one stem, one module); this module holds the machinery they share.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

import numpy as np

from normlab.grader import inert, keys
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


class Deferred:
    """``evaluate(probes, *args, **kwargs)``, run the first time it is iterated, then kept.

    An answer that matches the oracle needs no probe: ``expect_array`` only looks at the
    candidates when it is about to fail, so a passing case never runs them. The arguments must
    not change in between (the learner is called on copies of them).
    """

    def __init__(self, probes: Sequence[Probe], *args, **kwargs):
        self.probes, self.args, self.kwargs = probes, args, kwargs
        self._results: list[tuple[Probe, object]] | None = None

    def _evaluated(self) -> list[tuple[Probe, object]]:
        if self._results is None:
            self._results = evaluate(self.probes, *self.args, **self.kwargs)
        return self._results

    def __iter__(self):
        return iter(self._evaluated())

    def __len__(self) -> int:
        return len(self._evaluated())

    def __getitem__(self, index):
        return self._evaluated()[index]


# Values of eps that implementations hard-code (PyTorch's LayerNorm/BatchNorm default, LLaMA's
# RMSNorm, and the 1e-8 of optimizers and many tutorials).
HARD_CODED_EPS = {1e-5: "1e-5", 1e-6: "1e-6", 1e-8: "1e-8"}


def eps_ignored(right: Callable[..., object], what: str) -> list[Probe]:
    """Probes for an ``eps`` argument that is accepted but ignored (a constant written inside).

    Args:
        right: the right formula, called with the check's arguments; eps is its last one.
        what: what it computes, for the hint, e.g. ``"LayerNorm"``.

    Each probe is the right formula at one hard-coded value. Where the check's eps is that
    value it returns the right answer, which no failing answer matches, so it stays silent
    there: a check must call the function with an eps no one hard-codes, e.g. 1e-3, for these
    probes to speak.
    """

    def at(value: float):
        def compute(*args, **kwargs):
            *rest, _ = (*args, *kwargs.values())
            return right(*rest, value)

        return compute

    return [
        Probe(
            f"eps ignored ({text} hard-coded)",
            f"This matches the right {what} computed with eps = {text} instead of the eps that "
            f"was passed in: the function accepts eps but ignores it (a {text} written inside it, "
            "or a default used instead of the argument). Use the eps argument wherever eps "
            "appears.",
            at(value),
        )
        for value, text in HARD_CODED_EPS.items()
    ]


def both(first: Probe, second: Probe, compute: Callable[..., object]) -> Probe:
    """A probe for two known slips made together; its hint names both, so neither is missed.

    Alone, neither slip's probe matches an answer that has both; this one does.
    """
    return Probe(
        f"{first.name} + {second.name}",
        f"This matches two slips at once: ({first.name}) and ({second.name}). "
        f"1) {first.hint} 2) {second.hint}",
        compute,
    )


def norm_dx(g, x_hat, inv_std, axis, *, mean_term: bool = True, var_term: bool = True):
    """dx of a mean-and-variance norm, ``inv_std * (g - mean(g) - x_hat * mean(g * x_hat))``
    over ``axis``, where ``g = dy * gamma``; the backward probes of labs 02, 03 and 05 drop a
    term (``mean_term=False``: the mean treated as a constant; ``var_term=False``: the
    variance)."""
    dx = g
    if mean_term:
        dx = dx - g.mean(axis=axis, keepdims=True)
    if var_term:
        dx = dx - x_hat * (g * x_hat).mean(axis=axis, keepdims=True)
    return dx * inv_std


def grads_in_order(dx, dgamma, dbeta, swap: bool = False) -> tuple:
    """A backward pass's ``(dx, dgamma, dbeta)``, or with ``swap`` the two parameter gradients
    returned the wrong way round."""
    return (dx, dbeta, dgamma) if swap else (dx, dgamma, dbeta)


def affine_grads(dx, dy, x_hat, axes, swap: bool = False) -> tuple:
    """``(dx, dgamma, dbeta)`` with ``dgamma = sum(dy * x_hat)`` and ``dbeta = sum(dy)`` over
    ``axes`` (a probe passes another ``x_hat`` or ``axes`` for its slip), as ``grads_in_order``
    returns them."""
    dgamma = (dy * x_hat).sum(axis=axes)
    dbeta = dy.sum(axis=axes)
    return grads_in_order(dx, dgamma, dbeta, swap)


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


def named(probes: Sequence[Probe]) -> tuple[str, ...]:
    """The names of the probes ``explain`` states (its ``Why:`` and ``Or:`` lines), as data."""
    return tuple(probe.name for probe in probes[:3])


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


def _slices(a: np.ndarray, axis: int) -> np.ndarray:
    """``a`` as one row per index along ``axis``: row i holds every value with index i there."""
    return np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1)


def _slice_name(index: int, shape, axis: int) -> str:
    if axis == 1 and len(shape) >= 2:
        return f"channel {index}" if len(shape) > 2 else f"column {index}"
    lead = shape[:-1]
    if len(lead) <= 1:
        return f"row {index}"
    return f"row {tuple(int(i) for i in np.unravel_index(index, lead))}"


_ZERO_DIVISION = (
    ": its variance is 0, so a division by it, or by its root, without eps gives 0/0 or 1/0 there"
)


def nonfinite_where(nonfinite: np.ndarray, x: np.ndarray | None = None) -> str:
    """Where the non-finite values of an answer are, and what the input looks like there.

    Args:
        nonfinite: a boolean mask, True where the answer is NaN or inf but should not be.
        x: the input the answer was computed from, of the answer's shape.

    Returns:
        A clause such as "; they are all in row 0 (the other 3 rows are finite), where every
        value of x is 0: ..." or "" when nothing useful can be said. Rows are slices along the
        last axis; when the values line up with the columns (channels) instead, those are named.
    """
    if nonfinite.ndim == 0 or not nonfinite.any():
        return ""
    x = None if x is None or np.shape(x) != nonfinite.shape else np.asarray(x, np.float64)
    if x is not None and x.shape[-1] == 1 and nonfinite.ndim >= 2:
        return (
            "; x has d = 1 feature per row: the variance of a single value is 0 (and an unbiased "
            "variance divides by d - 1 = 0), so look for a division by it, or by its root, "
            "without eps"
        )
    # rows: slices along the last axis (LayerNorm, RMSNorm); columns/channels: axis 1 (BatchNorm)
    layouts = [(-1, np.moveaxis(nonfinite, -1, 0).reshape(nonfinite.shape[-1], -1).T)]
    if nonfinite.ndim >= 2:
        layouts.append((1, _slices(nonfinite, 1)))
    for axis, groups in layouts:
        bad = [int(i) for i in np.flatnonzero(groups.any(axis=1))]
        if len(bad) == len(groups):
            continue
        what = (
            "channels" if axis == 1 and nonfinite.ndim > 2 else "columns" if axis == 1 else "rows"
        )
        names = ", ".join(_slice_name(i, nonfinite.shape, axis) for i in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        text = f"; they are all in {names}{more} (the other {len(groups) - len(bad)} {what} are finite)"
        if x is not None:
            values = (
                np.moveaxis(x, -1, 0).reshape(x.shape[-1], -1).T if axis == -1 else _slices(x, 1)
            )[bad]
            if np.all(values == 0):
                text += ", where every value of x is 0" + _ZERO_DIVISION
            elif np.all(values == values[:, :1]):
                text += f", where x is constant along the {what[:-1]}" + _ZERO_DIVISION
        return text
    return ""


def float32_precision(got: np.ndarray, expected: np.ndarray, rtol: float) -> str:
    """Say so when a float64 answer is wrong only at float32's precision (about 1e-7).

    A right formula computed in float32 and converted to float64 at the end misses a float64
    tolerance by a few float32 rounding steps: every value it returns is a float32 number, and
    its error relative to the answer's size is ~1e-7. Tell the learner that the precision, not
    the formula, is the problem. Returns "" when the error looks like anything else.
    """
    if rtol > 1e-5 or expected.dtype != np.float64 or not np.issubdtype(got.dtype, np.floating):
        return ""
    got64 = got.astype(np.float64)
    finite = np.isfinite(expected) & np.isfinite(got64)
    if not finite.any():
        return ""
    scale = float(np.abs(expected[finite]).max())
    if scale == 0.0:
        return ""
    error = float(np.abs(got64[finite] - expected[finite]).max()) / scale
    in_float32 = np.finfo(got.dtype).bits <= 32 or bool(
        np.all(got64[finite].astype(np.float32).astype(np.float64) == got64[finite])
    )
    exact_in_float32 = bool(
        np.all(expected[finite].astype(np.float32).astype(np.float64) == expected[finite])
    )
    if in_float32 and not exact_in_float32 and error <= 1e-4:
        return (
            f"\nWhy: precision, not the formula. Every value returned is a float32 number, and "
            f"the answer agrees with the right one to {error:.1g} of its largest value: that is "
            "float32's rounding (a relative step of 1e-7, grown by the subtractions inside the "
            "formula). The formula looks right, but it was computed in float32 (a float32 array "
            "or tensor, an np.float32 constant, torch's default dtype) and converted at the end. "
            "Keep the input's dtype, float64 here, throughout."
        )
    if error <= 1e-6:
        return (
            f"\nWhy: most likely precision, not the formula: the answer agrees with the right "
            f"one to {error:.1g} of its largest value, near float32's rounding (a relative step "
            "of 1e-7), where a wrong formula is usually off by far more. Look for a step computed "
            "in float32 (a float32 array or tensor, an np.float32 constant) and keep float64 "
            "throughout."
        )
    return ""


def float32_slips(got: np.ndarray, expected: np.ndarray, candidates, index, rtol: float) -> str:
    """Probes that a float32-valued answer matches up to float32 rounding, with both reasons
    ("" unless ``float32_matches`` finds some)."""
    found = float32_matches(got, expected, candidates, index, rtol)
    if not found:
        return ""
    return explain(found) + (
        "\nAnd: every value returned is a float32 number, so it matches that slip only up to "
        "float32's rounding: the computation also runs in float32. Keep the input's dtype, "
        "float64 here, throughout."
    )


def float32_matches(
    got: np.ndarray, expected: np.ndarray, candidates, index, rtol: float
) -> list[Probe]:
    """Probes that a float32-valued answer matches up to float32 rounding.

    Code that computes in float32 AND has a known slip (llm.c's float32 LayerNorm with a
    hard-coded eps) matches neither the right answer nor the slip's probe at a float64
    tolerance; at float32's it matches the probe. Empty unless that is the case.
    """
    if rtol > 1e-5 or not np.issubdtype(got.dtype, np.floating):
        return []
    got64 = got.astype(np.float64)
    finite = np.isfinite(got64)
    if not finite.any() or not np.all(
        got64[finite].astype(np.float32).astype(np.float64) == got64[finite]
    ):
        return []
    rtol32, atol32 = 1e-4, 1e-4 * float(np.abs(got64[finite]).max())
    # only probes that differ from the right answer by more than float32's rounding
    telling = []
    for probe, wrong in candidates:
        picked = _pick(wrong, index)
        if picked is None:
            continue
        picked = np.asarray(picked, dtype=np.float64)
        if not _close(picked, expected.astype(np.float64), rtol32, atol32):
            telling.append((probe, wrong))
    return matching_probes(got64, telling, index, rtol32, atol32)


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
    x: np.ndarray | None = None,
) -> None:
    """Fail with a where-and-why message unless the returned array matches ``expected``.

    Args:
        out: what the learner's function returned.
        expected: the oracle's answer (float64 unless stated).
        what: names the value and the input, e.g. ``"output for x of shape (4, 8)"``.
        rtol, atol: tolerances of ``np.allclose``.
        index, count: compare item ``index`` of a returned tuple of ``count``.
        candidates: ``probes.evaluate(...)`` results on the same input, or a ``Deferred``
            evaluation of them; looked at only when the answer is wrong.
        dtype: the dtype the answer must keep (e.g. float32 in, float32 out).
        kinds: accepted kinds of return value (``"ndarray"``, ``"tensor"``).
        hint: said when the answer is wrong and no probe explains it.
        x: the input, when its rows line up with the answer's (``x`` of shape (..., d) for an
            answer of shape (..., k)): a NaN or inf is then placed ("row 0, where x is 0").
    """
    got = array_of(out, what, index=index, count=count, kinds=kinds)
    got64 = got.astype(np.float64)
    expected = np.asarray(expected, dtype=np.float64)

    # The probes are matched only for a message: a passing answer never pays for them.
    def matched() -> list[Probe]:
        return matching_probes(got64, candidates, index, rtol, atol)

    if got.shape != expected.shape:
        found = matched()
        raise CheckFailed(
            f"{what}: shape is {fmt_shape(got.shape)} but should be {fmt_shape(expected.shape)}"
            + explain(found, hint),
            named(found),
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
        found = matched()
        raise CheckFailed(
            f"{what}: contains {int(nonfinite.sum())} non-finite value(s) (NaN or inf), first at "
            f"index {where} where {float(expected[where]):.6g} was expected"
            + nonfinite_where(nonfinite, x)
            + explain(found, hint),
            named(found),
        )
    # An answer asked for in float32 (or narrower) is float32 by design, not by a slip.
    narrow = (
        dtype is not None
        and np.issubdtype(np.dtype(dtype), np.floating)
        and np.finfo(np.dtype(dtype)).bits <= 32
    )
    _expect_close(
        got, got64, expected, bad_expected, what, rtol, atol, candidates, index, hint, narrow
    )


def _expect_close(
    got, got64, expected, bad_expected, what, rtol, atol, candidates, index, hint, narrow=False
):
    """``expect_array``'s last test: every finite value within ``atol + rtol * |expected|``;
    else fail with the worst element, the errors and the probe (or float32 slip) it matches.
    ``narrow``: the answer is asked for in float32 or narrower, so that its being float32 says
    nothing (no float32 slip is looked for)."""
    with np.errstate(all="ignore"):
        abs_error = np.where(bad_expected, 0.0, np.abs(got64 - expected))
        allowed = atol + rtol * np.abs(expected)
        excess = np.where(bad_expected, 0.0, abs_error / allowed)
    if excess.size == 0 or float(excess.max()) <= 1.0:
        return
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    worst_index = tuple(int(i) for i in worst)
    rel = abs_error / np.maximum(np.abs(expected), np.finfo(np.float64).tiny)
    found = matching_probes(got64, candidates, index, rtol, atol)
    why = explain(found, hint)
    if not found and not narrow:
        found = float32_matches(got, expected, candidates, index, rtol)
        why = (
            float32_slips(got, expected, candidates, index, rtol)
            or float32_precision(got, expected, rtol)
            or why
        )
    raise CheckFailed(
        f"{what}: max abs error {float(abs_error.max()):.3g}, worst at index {worst_index} "
        f"(got {float(got64[worst]):.6g}, expected {float(expected[worst]):.6g}); "
        f"max rel error {float(rel.max()):.3g} (allowed: atol {atol:g}, rtol {rtol:g})" + why,
        named(found),
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
    ``options`` go to ``expect_array`` (tolerances, candidates, kinds). Each message names the
    function and the item, then ``what`` (left out when empty): "f dgamma, x of shape (4, 8)".
    """
    for index in indices:
        expect_array(
            out,
            expected[index],
            what=f"{function} {names[index]}" + (f", {what}" if what else ""),
            index=index,
            count=len(names),
            **options,
        )


# A leading option token: an optional "option"/"answer"/"choice" word, then one letter a-h, bare
# or in parentheses, followed by the end or a delimiter ("b", "b.", "B)", "(b) because ...").
# A letter followed by another letter ("because", "bc") is not a token.
_OPTION_TOKEN = re.compile(
    r"^(?:(?:option|answer|choice)\s*[:=]?\s*)?"
    r"(?:\((?P<paren>[a-h])\)|(?P<bare>[a-h])(?![a-z0-9]))"
)
# What after the first token would name a second option: "b, c", "b and c", "b/c", "(b)(c)".
_SECOND_TOKEN = re.compile(
    r"^\s*(?:[.)]\s*)?(?:,|/|&|\+|;|\band\b|\bor\b)?\s*\(?[a-h]\)?(?=[\s.,;:)/&+]|$)"
)


def quoted(answer: object) -> str:
    """An answer as a message quotes it: a string as Python writes it, anything else by its
    ``repr``; at most ``Limits.shown_output_chars`` characters of it (``inert.clip``)."""
    return inert.clip(answer, quote=True) if isinstance(answer, str) else inert.clip(repr(answer))


class ChoiceError(ValueError):
    """A multiple-choice answer that names no option letter, or more than one."""


def parse_choice(answer) -> str:
    """The one option letter a multiple-choice answer gives, lower case.

    Accepted: ``"b"``, ``"B"``, ``"b."``, ``"B)"``, ``"(b)"``, ``"option b"``, ``"answer: (B)"``,
    ``"(b) because ..."``, ``"b - the running averages"``. Only the *leading* token counts, so an
    explanation after it may contain any words. Raises ``ChoiceError`` (with the message the
    learner reads) when the answer names no letter, or two (``"bc"``, ``"b, c"``, ``"b or c"``).
    """
    if not isinstance(answer, str):
        raise ChoiceError(
            f'expected a string with one option letter, e.g. "b", found {quoted(answer)}'
        )
    text = answer.strip().lower()
    if re.fullmatch(r"[a-h]{2,6}", text) and len(set(text)) == len(text):
        letters = ", ".join(text)
        raise ChoiceError(
            f'{quoted(answer)} names several options ({letters}); give exactly one letter, e.g. "b"'
        )
    match = _OPTION_TOKEN.match(text)
    if match is None:
        raise ChoiceError(
            f'{quoted(answer)} does not start with an option letter; write one letter, e.g. "b" '
            'or "(b) because ..."'
        )
    rest = text[match.end() :]
    if _SECOND_TOKEN.match(rest) and not re.match(r"^\s*[.)]?\s*[a-z]\s+[a-z]{2,}", rest):
        raise ChoiceError(
            f'{quoted(answer)} names more than one option; give exactly one letter, e.g. "b"'
        )
    return match.group("paren") or match.group("bare")


def expect_choice(
    out: Output, letter: str, *, what: str, hint: str, why: dict[str, str] | None = None
) -> None:
    """Fail unless a multiple-choice answer is ``letter`` (in any form ``parse_choice`` reads).

    An answer that names no letter, or several, fails with a message saying so, not "wrong".
    ``why`` maps a wrong letter to the misconception it stands for; the message says it.
    """
    item = item_of(out, None, what)
    if item.kind == "none":
        raise CheckFailed(f"{what}: no answer yet (it is None)")
    if item.array is None or item.kind != "str":
        raise CheckFailed(
            f'{what}: expected a string with one option letter, e.g. "b"; found '
            f"{describe_item(item)}"
        )
    answer = item.array.item()
    try:
        given = parse_choice(answer)
    except ChoiceError as error:
        raise CheckFailed(f"{what}: {error}") from None
    if not keys.matches(given, letter):
        # The student edition stores the letters of ``why`` hashed, like the key.
        reason = next((text for key, text in (why or {}).items() if keys.matches(given, key)), None)
        because = f"\nWhy: {reason}" if reason else ""
        raise CheckFailed(f"{what}: ({given}) is not right. {hint}{because}")


def choice(
    lab,
    title: str,
    *,
    points: int,
    name: str,
    key: str,
    hint: str,
    why: dict[str, str] | None = None,
) -> None:
    """Declare a multiple-choice question of ``lab``: the check ``title`` (worth ``points``)
    passes when the learner's string ``name`` names the option ``key``; it fails as
    :func:`expect_choice` says, with ``hint``, and ``why``'s misconception for a wrong letter.

    ``key`` must be a literal letter: ``normlab release`` hashes it in the student edition
    (``release.hide_keys``), and ``tests/test_practice_problems.py`` reads it. One declaration
    is the whole check::

        choice(LAB, "problem 1: ... (multiple choice)", points=1, name="D1_ANSWER", key="b",
               hint="...", why=D1_WHY)

    A check written out as ``expect_choice(sub.get("D1_ANSWER"), "b", what="D1_ANSWER", ...)``
    in a function of ``@LAB.check`` means the same, and both tools read that form too.
    """

    def check(sub) -> None:
        expect_choice(sub.get(name), key, what=name, hint=hint, why=why)

    check.__name__ = check.__qualname__ = f"choice_{name.lower()}"
    lab.check(title, points=points, uses=[name])(check)


def expect_value(out: Output, accepted: Callable[[object], bool], *, what: str, hint: str) -> None:
    """Fail unless a returned plain value (string or number) is accepted."""
    item = item_of(out, None, what)
    if item.kind in ("none",):
        raise CheckFailed(f"{what}: no answer yet (it is None)")
    if item.array is None or item.kind not in ("str", "scalar"):
        raise CheckFailed(f"{what}: expected a string or a number, found {describe_item(item)}")
    if not accepted(item.array.item()):
        raise CheckFailed(f"{what}: {quoted(item.array.item())} is not right. {hint}")


# ----------------------------------------------------------------------------- keyed numbers


@dataclasses.dataclass(frozen=True)
class Slip:
    """A known-wrong number stored only as its key: for answers that are the problem itself
    (a count, a formula's value on fixed inputs), where a probe's ``compute`` would have to hold
    the right answer to derive the wrong one."""

    name: str
    hint: str


def number_key(function: str, args: tuple, slip: str, value) -> str:
    """The key of ``value`` as ``function(*args)`` (``slip``: "" for the right answer, else the
    slip's name): a truncated SHA-256 of the number written with 12 significant digits, salted
    with the case, so that equal numbers of different cases or slips have different keys."""
    return keys.digest(format(float(value), ".12g"), f"{function}{args!r}:{slip}")[:16]


def expect_keyed(
    out: Output,
    function: str,
    args: tuple,
    keyring: frozenset[str],
    slips: Sequence[Slip],
    *,
    what: str,
    hint: str,
) -> None:
    """Fail unless the returned number's key for this case is the right answer's in ``keyring``.

    The message never states the right number (the module does not know it); a slip whose key
    matches says why the answer is wrong, else ``hint`` says how to get it. A number or a 0-d
    array is accepted.
    """
    got = array_of(out, what, kinds=("scalar", "ndarray"))
    if got.shape != ():
        raise CheckFailed(f"{what}: shape is {fmt_shape(got.shape)} but should be ()")
    value = got.item()
    if number_key(function, args, "", value) in keyring:
        return
    found = [slip for slip in slips if number_key(function, args, slip.name, value) in keyring]
    others = "".join(f"\nOr: {slip.hint}" for slip in found[1:3])
    raise CheckFailed(
        f"{what}: {value!r} is not right. {found[0].hint if found else hint}" + others,
        tuple(slip.name for slip in found[:3]),
    )
