"""What every chapter's checks share: one argument list per case, the tolerances, the inputs.

A check module is an oracle, inputs and probes. The step in between, "call the learner's
function, call the oracle, run the probes, compare", is written once here:

    FORWARD = Graded("rmsnorm_forward", oracle=oracle_forward, probes=FORWARD_PROBES)
    ...
    FORWARD.expect(sub, Args(x, gamma, eps=1e-3), what="x of shape (6, 8), eps = 1e-3")

``Args`` is the one argument list of a case: the learner's function, the oracle and every probe
receive it alike (positional arguments positionally, keyword arguments by keyword), so an
argument cannot reach one of them and miss another.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from normlab.grader import inert
from normlab.grader.core import (
    AsTorch,
    CheckFailed,
    Output,
    RaisedError,
    ReadBack,
    Submission,
    SubmissionError,
)
from normlab.grader.probes import (
    Deferred,
    Probe,
    array_of,
    evaluate,
    expect_array,
    expect_items,
    item_of,
    matching_probes,
)

# ----------------------------------------------------------------------------- tolerances

F64 = {"rtol": 1e-7, "atol": 1e-9}  # float64 answers agree with a float64 oracle to ~1e-14
F32 = {"rtol": 1e-4, "atol": 1e-5}  # float32 answers of unit scale: rounding ~1e-7 relative


# ----------------------------------------------------------------------------- one case


def _plain(value):
    """An argument as the oracle and the probes see it: the array inside a wrapper."""
    return value.array if isinstance(value, (AsTorch, ReadBack)) else value


class Args:
    """The arguments of one case, given once.

    ``Args(x, gamma, eps=1e-3)`` calls the learner's function as ``f(x, gamma, eps=1e-3)``, and
    the oracle and each probe's ``compute`` the same way. A learner argument wrapped in
    ``AsTorch`` or ``ReadBack`` (a tensor, an ``out=`` buffer) reaches the oracle and the probes
    as the plain array inside it.
    """

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs

    def plain(self) -> Args:
        return Args(
            *(_plain(a) for a in self.args), **{k: _plain(v) for k, v in self.kwargs.items()}
        )

    def apply(self, function: Callable[..., object]):
        """``function`` called with these arguments, unwrapped."""
        plain = self.plain()
        return function(*plain.args, **plain.kwargs)

    def call(self, sub: Submission, name: str) -> Output:
        """The learner's function ``name`` called with these arguments, as given."""
        return sub.call(name, *self.args, **self.kwargs)

    def evaluate(self, probes: Sequence[Probe]) -> list[tuple[Probe, object]]:
        """What each probe returns for these arguments (``probes.evaluate``)."""
        plain = self.plain()
        return evaluate(probes, *plain.args, **plain.kwargs)

    def deferred(self, probes: Sequence[Probe]) -> Deferred:
        """``evaluate(probes)``, run only if something asks for it (a failing answer)."""
        plain = self.plain()
        return Deferred(probes, *plain.args, **plain.kwargs)

    def __repr__(self) -> str:
        shown = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"Args({', '.join(shown)})"


@dataclasses.dataclass(frozen=True)
class Graded:
    """A learner's function and what grades it.

    Attributes:
        name: the learner's function.
        oracle: the right answer, called with a case's arguments; None when each case gives
            its own ``expected``.
        probes: the known-wrong variants, called with the same arguments (a module-level
            list, one of the module's ``PROBES``).
        items: for a function returning a tuple, the names of its items (``("dx", "dgamma")``);
            a case then compares the items it names by index.
        tol: the tolerances (``rtol``, ``atol``) a case uses unless it gives its own.
        prefix: whether the message starts with the function's name (``"name, what: ..."``).
        label: the function's name in messages, when it says more than ``name``
            (``"stack_grads('pre')"``).
        options: ``expect_array`` options every case uses (``kinds``, ``hint``);
            a case's own options win.
        errors: the learner's exception explained: when its message contains a key, the
            check fails with that message and ``"Why: "`` the value (a lab's usual slip that
            raises, such as a broadcasting error, gets its hint).
    """

    name: str
    oracle: Callable[..., object] | None = None
    probes: Sequence[Probe] = ()
    items: tuple[str, ...] = ()
    tol: dict = dataclasses.field(default_factory=lambda: dict(F64))
    prefix: bool = True
    label: str = ""
    options: dict = dataclasses.field(default_factory=dict)
    errors: dict[str, str] = dataclasses.field(default_factory=dict)

    def call(self, sub: Submission, args: Args) -> Output:
        """The learner's function called with ``args``; its exception explained by ``errors``."""
        try:
            return args.call(sub, self.name)
        except RaisedError as error:
            for text, why in self.errors.items():
                if text in str(error):
                    raise CheckFailed(f"{error}\nWhy: {why}") from None
            raise

    def slips(self, sub: Submission, args: Args, out: Output | None = None) -> list[Probe]:
        """The probes whose output the learner's answer for ``args`` matches, in order.

        Empty when the answer is right, is not an array, or the call raises. For a function
        returning one array (no ``items``); ``out``: the answer, when the check has it already.
        """
        try:
            out = self.call(sub, args) if out is None else out
            got = array_of(out, self.name).astype(np.float64)
        except (SubmissionError, CheckFailed):
            return []
        expected = np.asarray(args.apply(self.oracle), dtype=np.float64)
        with np.errstate(all="ignore"):
            if got.shape == expected.shape and np.allclose(got, expected, **self.tol):
                return []
        return matching_probes(got, args.evaluate(self.probes), None, **self.tol)

    def expect(
        self,
        sub: Submission,
        args: Args,
        *,
        what: str,
        indices: Sequence[int] | None = None,
        expected=None,
        tol: dict | None = None,
        out: Output | None = None,
        **options,
    ) -> Output:
        """Grade one case: call the learner with ``args``, the oracle and the probes too, compare.

        Args:
            sub: the submission.
            args: the case's arguments, for the learner, the oracle and the probes.
            what: the case, in the message (``"x of shape (4, 8)"``).
            indices: which items of a returned tuple to compare (all of ``items`` by default).
            expected: the right answer, instead of the oracle's.
            tol: tolerances instead of the function's own.
            out: what the learner returned, when the check has called it already.
            options: for ``expect_array`` (``dtype``, ``x``, ``kinds``, ``hint``, ``index``,
                ``count``).

        Returns:
            What the learner's function returned.
        """
        if out is None:
            out = self.call(sub, args)
        if expected is None:
            expected = args.apply(self.oracle)
        candidates = args.deferred(self.probes)
        tolerances = self.tol if tol is None else tol
        options = {**self.options, **options}
        if self.items:
            expect_items(
                out,
                expected,
                self.items,
                range(len(self.items)) if indices is None else indices,
                function=self.label or self.name,
                what=what,
                candidates=candidates,
                **tolerances,
                **options,
            )
        else:
            expect_array(
                out,
                expected,
                what=f"{self.label or self.name}, {what}" if self.prefix else what,
                candidates=candidates,
                **tolerances,
                **options,
            )
        return out


def graded_per_case(
    name: str, oracle: Callable[..., object], probes: Sequence[Probe], cases: Sequence[str], **how
) -> dict[str, Graded]:
    """One :class:`Graded` of ``name`` per case of its argument (a block's placements), each
    with only the probes named ``"case: ..."``: a probe of one case is never matched to
    another's answer. ``how``: the other fields of each ``Graded`` (``prefix``, ``options``)."""
    return {
        case: Graded(name, oracle, [p for p in probes if p.name.startswith(case + ":")], **how)
        for case in cases
    }


def probe_table(*graded: Graded, **more: Sequence[Probe]) -> dict[str, Sequence[Probe]]:
    """A check module's ``PROBES``, every probe of the lab by the learner's function whose
    arguments its compute takes: each ``Graded``'s probes under its own name, then ``more``
    (the probes of a function that a ``Graded`` does not grade) under theirs."""
    return {g.name: g.probes for g in graded} | more


# ----------------------------------------------------------------------------- inputs


def rows_with_varied_scale(
    rng: np.random.Generator,
    shape: tuple[int, ...],
    *,
    scales: tuple[float, float] = (0.01, 10.0),
    offset: float = 5.0,
    axis: int = -1,
    offsets_first: bool = True,
) -> np.ndarray:
    """Random values whose slices along ``axis`` each get a scale and an offset of their own.

    The scales span ``scales`` geometrically (eps placement shows on the small ones), the
    offsets are uniform in (-offset, offset) (a forgotten mean shows). ``offsets_first``: the
    offsets are drawn before the values (False: after them), which fixes the generator's stream.

    Args:
        rng: the check's generator.
        shape: the shape of the result.
        axis: the axis along which a slice ("row") runs; by default the last.
    """
    moved = list(shape)
    moved.append(moved.pop(axis))
    lead = moved[:-1] + [1]
    scale = np.geomspace(scales[0], scales[1], int(np.prod(moved[:-1]))).reshape(lead)
    if offsets_first:
        offsets = rng.uniform(-offset, offset, size=lead)
        values = rng.normal(size=moved)
    else:
        values = rng.normal(size=moved)
        offsets = rng.uniform(-offset, offset, size=lead)
    return np.moveaxis(values * scale + offsets, -1, axis)


def gain(rng: np.random.Generator, d: int, dtype=np.float64) -> np.ndarray:
    """A gain with distinct entries around 1 (a transposed or missing gamma shows)."""
    return rng.normal(1.0, 0.5, size=d).astype(dtype)


def affine_params(rng: np.random.Generator, d: int, dtype=np.float64):
    """(gamma, beta) of shape (d,): a gain around 1 and a shift around 0, distinct entries."""
    return gain(rng, d, dtype), rng.normal(0.0, 0.5, size=d).astype(dtype)


def tensor64(a, requires_grad: bool = False):
    """``a`` as a float64 torch tensor, for an oracle; a tensor without a gradient to track
    stays itself (it may be a leaf that autograd follows)."""
    import torch

    if isinstance(a, torch.Tensor) and not requires_grad:
        return a
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def backward(output, gradient) -> None:
    """``output.backward(gradient)`` for an oracle, as ``(output * gradient).sum().backward()``.

    The same gradients, bit for bit: the sum passes 1.0 back, and 1.0 * g is g. An explicit
    ``gradient`` makes PyTorch's first backward in a process import its symbolic shapes and
    SymPy (to compare the shapes), which costs the grader's start-up 0.3 s of CPU (torch 2.13);
    a scalar's backward does not. ``gradient`` must have ``output``'s shape, as there."""
    gradient = tensor64(gradient)
    if tuple(gradient.shape) != tuple(output.shape):
        raise ValueError(
            f"a gradient of shape {tuple(gradient.shape)} for an output of shape "
            f"{tuple(output.shape)}"
        )
    (output * gradient).sum().backward()


def warmup_rate(sub: Submission, name: str, *args) -> float:
    """The learning rate ``name(*args)`` returns, as one float: a warmup schedule's answer (labs
    06 and 12). A division by zero at ``warmup_steps = 0`` is named as the case it is."""
    what = f"{name}{args}"
    try:
        item = item_of(sub.call(name, *args), None, what)
    except SubmissionError as error:
        if "ZeroDivisionError" in str(error):
            raise CheckFailed(
                f"{what}: {error}. warmup_steps = 0 means no warmup: return base_lr at every "
                "step (test for it before dividing)."
            ) from None
        raise
    if (
        item.array is None
        or item.array.size != 1
        or item.kind not in ("scalar", "ndarray", "tensor")
    ):
        raise CheckFailed(f"{what}: returned {inert.clip(item.kind)}, expected a number")
    return float(item.array.reshape(()))
