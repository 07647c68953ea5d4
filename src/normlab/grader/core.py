"""The grading engine shared by both doors (``check()`` in a notebook and ``normlab grade``).

A *check* is a small function that receives a :class:`Submission` (something that can call the
learner's functions) and raises :class:`CheckFailed` with a teaching message when the answer is
wrong. It never sees where the learner's code runs: in the notebook it is called in-process; in
``normlab grade`` every call crosses a process boundary (see ``isolation/``). Both kinds of
submission return :class:`Output` objects; in ``normlab grade`` the parent builds them from a
reply it has validated field by field (``isolation.wire``), and ``forbidden_used`` is always
empty there: what the child says about itself decides nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Sequence

import numpy as np

from normlab.grader import inert

# ----------------------------------------------------------------------------- what comes back


@dataclasses.dataclass
class Item:
    """One returned value: ``kind`` is ``ndarray``, ``tensor``, ``scalar``, ``str``, ``list``,
    ``none`` or the type name of something that could not be sent; ``array`` holds its data."""

    kind: str
    array: np.ndarray | None = None
    note: str = ""


@dataclasses.dataclass
class Output:
    """What a learner's function returned, and which forbidden library calls it made."""

    items: list[Item]
    is_tuple: bool
    forbidden_used: list[str] = dataclasses.field(default_factory=list)
    # The arguments passed as ReadBack(...), as the function left them (in argument order).
    read_back: list[Item] = dataclasses.field(default_factory=list)

    @classmethod
    def from_wire(cls, header: dict, arrays: list[np.ndarray]) -> Output:
        """For the in-notebook door (a trusted header); the grader parses replies in ``wire``."""

        def items_of(specs) -> list[Item]:
            items = []
            for spec in specs if isinstance(specs, list) else []:
                index = spec.get("array")
                valid = isinstance(index, int) and 0 <= index < len(arrays)
                array = arrays[index] if valid else None
                items.append(Item(str(spec.get("kind")), array, str(spec.get("unsendable", ""))))
            return items

        return cls(
            items_of(header.get("items", [])),
            bool(header.get("tuple")),
            list(header.get("forbidden_used", [])),
            items_of(header.get("read_back", [])),
        )

    def describe(self) -> str:
        if self.is_tuple:
            return f"a tuple of {len(self.items)}"
        return describe_item(self.items[0])


def describe_item(item: Item) -> str:
    if item.note:
        return inert.clip(item.note)
    if item.kind in ("ndarray", "tensor") and item.array is not None:
        return f"a {'NumPy array' if item.kind == 'ndarray' else 'tensor'} of shape {fmt_shape(item.array.shape)}"
    return {"none": "None", "scalar": "a number", "str": "a string", "list": "a list"}.get(
        item.kind, f"a {inert.clip(item.kind)}"
    )


def fmt_shape(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


# ----------------------------------------------------------------------------- errors


class SubmissionError(Exception):
    """Calling the learner's code did not produce an answer. ``str()`` is the learner message."""


class NotImplementedYet(SubmissionError):
    pass


class MissingName(SubmissionError):
    pass


class RaisedError(SubmissionError):
    def __init__(self, message: str, error_type: str = "", detail: str = ""):
        super().__init__(message)
        self.error_type = error_type
        self.detail = detail


class ProcessFailed(SubmissionError):
    """The submission's process died, hung or broke the protocol (grade door only)."""


class ProcessTimedOut(ProcessFailed):
    """The submission's process did not answer in time (grade door only)."""


class CheckFailed(Exception):
    """Raised by a check with the message the learner reads.

    ``probes``: the names of the known-wrong variants the answer matched (the ``Why:``/``Or:``
    lines of the message), kept as data for the class report.
    """

    def __init__(self, message: str = "", probes: Sequence[str] = ()):
        super().__init__(message)
        self.probes = tuple(probes)


# ----------------------------------------------------------------------------- submissions


@dataclasses.dataclass
class AsTorch:
    """Wrap an argument to hand it to the learner's function as a ``torch.Tensor``."""

    array: np.ndarray


@dataclasses.dataclass
class ReadBack:
    """Wrap an array argument (an ``out=`` buffer) to get it back as the function left it.

    The function receives a plain NumPy array; after the call its contents come back in
    ``Output.read_back`` (so a check can tell "wrote into ``out``" from "returned a new array").
    """

    array: np.ndarray


class Submission:
    """Something that runs a learner's code. Subclasses: in-notebook and child process."""

    def has(self, name: str) -> bool:
        raise NotImplementedError

    def call(self, name: str, *args, **kwargs) -> Output:
        raise NotImplementedError

    def get(self, name: str) -> Output:
        raise NotImplementedError

    def static_forbidden(self, name: str, forbidden: list[str]) -> list[str]:
        """Forbidden library uses found in the source of ``name`` (without running it)."""
        return []


def error_from_reply(name: str, reply: dict) -> SubmissionError:
    """Turn the worker's error reply into the right exception with a learner-facing message:
    the exception's type, message and traceback quoted short (``inert.clip``)."""
    error_type = reply.get("error_type", "")
    message = inert.clip(reply.get("message", ""))
    if error_type == "Missing":
        return MissingName(
            f"`{name}` is not defined in the notebook (did its cell run without errors?)"
        )
    if error_type == "NotImplementedError":
        return NotImplementedYet(f"`{name}` is not implemented yet")
    if error_type == "Timeout":
        return RaisedError(f"`{name}` did not finish in time (an endless loop?)", error_type)
    if error_type == "Busy":  # the machine, not the code: see isolation.clock
        return RaisedError(
            f"`{name}` was stopped: the machine was too busy to run it in time (not the "
            "notebook's doing); this result is not cached",
            error_type,
        )
    detail = inert.clip(reply.get("traceback", ""), last=True)
    shown = inert.clip(error_type)
    return RaisedError(f"`{name}` raised {shown}: {message}", error_type, detail)


# ----------------------------------------------------------------------------- checks and labs


@dataclasses.dataclass
class Check:
    name: str
    points: int
    function: Callable[[Submission], None]
    uses: tuple[str, ...]
    #: the seed of the generator the function is given, when it is declared with one
    seed: int | None = None
    #: the lab's other graded names that the checked function itself calls (``net_train`` calls
    #: ``net_sgd_step``): when this check fails and one of them fails its own check, the
    #: message names that one first
    needs: tuple[str, ...] = ()


def _seeded(function, seed: int) -> Callable[[Submission], None]:
    """``function(sub, rng)`` as a check of one argument, with a fresh generator each call."""

    @functools.wraps(function)
    def check(sub) -> None:
        function(sub, np.random.default_rng(seed))

    return check


@dataclasses.dataclass
class CheckResult:
    name: str
    points: int
    max_points: int
    passed: bool
    message: str
    #: the check itself failed (a grader bug), not the answer; not part of the JSON
    internal: bool = dataclasses.field(default=False, compare=False)
    #: no answer to grade: a function the check calls is not written or not defined yet;
    #: not part of the JSON
    unanswered: bool = dataclasses.field(default=False, compare=False)
    #: the names of the probes (known misconceptions) a failed answer matched, in the order of
    #: the message's ``Why:``/``Or:`` lines; empty for a pass or an unexplained failure
    probes: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "points": self.points,
            "max_points": self.max_points,
            "passed": self.passed,
            "message": self.message,
            "probes": list(self.probes),
        }


@dataclasses.dataclass
class Lab:
    """One lab: its stem, the names learners define, what they may not call, and its checks.

    Args:
        stem: the course stem, e.g. ``"03_layernorm"``.
        title: shown in reports.
        forbidden: learner name -> dotted library names it may not use.
        torch: whether the lab's graded code is written in PyTorch. When False (a NumPy lab),
            ``normlab grade`` runs the notebook where PyTorch cannot be imported, under the
            sandbox (``isolation.hidden``); the notebook's own comparisons with PyTorch are
            skipped there, at no cost.
        call_timeouts: learner name -> wall seconds for one call of it, where the default
            (``Limits.call_timeout``) is too short. A Numba kernel compiles on its first call
            with each kind of input (dtype, number of dimensions, memory layout), about 1 s of
            CPU each time, which a busy grading machine stretches past the default.
        environment: variables the grader sets in the submission's process itself (the
            notebook is not trusted to): ``"{home}"`` in a value is the process's private
            working folder. Lab 11 runs Triton's interpreter and keeps its cache there.
        extra: the module of an optional extra the lab needs and the make target that
            installs it; without it ``normlab grade`` says so instead of grading.
    """

    stem: str
    title: str
    forbidden: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    checks: list[Check] = dataclasses.field(default_factory=list)
    torch: bool = False
    call_timeouts: dict[str, float] = dataclasses.field(default_factory=dict)
    environment: dict[str, str] = dataclasses.field(default_factory=dict)
    #: (module, make target): an optional extra the lab's code needs (lab 11: Triton)
    extra: tuple[str, str] | None = None
    #: learner names an earlier lab owns, which this lab grades too on what it uses of them
    #: (lab 08's network calls lab 02's ``batchnorm_forward`` on (N, H) features):
    #: ``check(batchnorm_forward)`` finds the owner, ``check(..., lab="08_training")`` this lab
    borrowed: tuple[str, ...] = ()
    #: the lab's own given code that its checks call beside the learner's functions (lab 11's
    #: ``tri_call``): passed to ``check()`` with them, it selects no check by itself
    adapters: tuple[str, ...] = ()
    #: modules the lab's notebooks import beyond NumPy (and PyTorch): a class's fork server
    #: imports them once for all its children (lab 08: Matplotlib), and only for a run that
    #: grades this lab
    preload: tuple[str, ...] = ()
    #: a second process the checks call into, which runs the grader's code on pieces of the
    #: notebook's source (lab 11: its kernels, launched by the grader): ``Companion``
    companion: Companion | None = None

    def missing_extra(self) -> str:
        """Why this lab cannot be graded here ("" when it can): its optional extra is absent."""
        if self.extra is None:
            return ""
        import importlib.util

        module, target = self.extra
        if importlib.util.find_spec(module) is not None:
            return ""
        return (
            f"this lab needs {module}, an optional extra that is not installed here: run "
            f"`{target}` (Linux x86-64) and grade again"
        )

    def check(
        self,
        name: str | None = None,
        *,
        points: int,
        uses: Sequence[str],
        seed: int | None = None,
        needs: Sequence[str] = (),
    ):
        """Decorator that registers a check function on this lab.

        ``name`` is the title a learner reads in the report; left out, it is the function's
        docstring (white space folded to single spaces), as a Gradescope Python autograder
        names a test. ``uses`` are the learner's names the check calls. ``seed``: the function
        is called as ``function(sub, rng)`` with a new ``np.random.default_rng(seed)`` each
        time, so that a check's inputs are declared in its header and every run draws the same.
        ``needs``: the lab's graded names that the checked function calls in turn (see
        :func:`name_failing_needs`).
        """

        def register(function):
            title = name if name is not None else " ".join((function.__doc__ or "").split())
            if not title:
                raise ValueError(
                    f"check {function.__qualname__} of {self.stem} has no title: pass name= or "
                    "give it a docstring (docstrings are gone under python -OO: run without it)"
                )
            called = function if seed is None else _seeded(function, seed)
            self.checks.append(Check(title, points, called, tuple(uses), seed, tuple(needs)))
            return function

        return register

    @property
    def names(self) -> list[str]:
        """Every name the lab's checks use, in first-use order."""
        seen: list[str] = []
        for check in self.checks:
            seen += [n for n in check.uses if n not in seen]
        return seen

    @property
    def max_score(self) -> int:
        return sum(c.points for c in self.checks)


@dataclasses.dataclass(frozen=True)
class Companion:
    """The grader's own code, run beside a submission on pieces of its source.

    A check calls ``names`` as it calls the learner's functions; they are answered by a
    submission of their own: in ``normlab grade`` a second process, like the notebook's, whose
    cells are ``cells(the notebook's code cells)`` (the grader's code, with the learner's
    source as data), in which no cell of the notebook ran; in ``check()`` the objects
    ``objects(what check() was given)``.
    """

    names: tuple[str, ...]
    cells: Callable[[list[str]], list[str]]
    objects: Callable[[dict], dict]


class WithCompanion(Submission):
    """A submission whose companion's names are answered by the companion."""

    def __init__(self, inner: Submission, companion: Submission, names: Sequence[str]):
        self.inner, self.companion, self.routed = inner, companion, frozenset(names)

    def _for(self, name: str) -> Submission:
        return self.companion if name in self.routed else self.inner

    def has(self, name):
        return self._for(name).has(name)

    def get(self, name):
        return self._for(name).get(name)

    def call(self, name, *args, **kwargs):
        return self._for(name).call(name, *args, **kwargs)

    def static_forbidden(self, name, forbidden):
        return self._for(name).static_forbidden(name, forbidden)


class ForbiddenGuard(Submission):
    """Wraps a submission: a call whose function uses a forbidden library norm fails the check."""

    def __init__(self, inner: Submission, lab: Lab):
        self.inner, self.lab = inner, lab

    def has(self, name):
        return self.inner.has(name)

    def get(self, name):
        return self.inner.get(name)

    def call(self, name, *args, **kwargs):
        forbidden = self.lab.forbidden.get(name, [])
        used = self.inner.static_forbidden(name, forbidden) if forbidden else []
        if not used:
            output = self.inner.call(name, *args, **kwargs)
            used = output.forbidden_used
            if not used:
                return output
        raise CheckFailed(
            f"`{name}` uses {', '.join(used)}. This lab asks you to build it from scratch with "
            "array operations (mean, sum, sqrt, ...), so a library implementation earns no points "
            "here. "
            "You may still use the library to compare with your own result outside the function."
        )


INTERNAL_ERROR = (
    "internal error in the grader (not a problem with your answer; tell your instructor)"
)

# Messages of exceptions that point at a known slip, whatever the lab: (pattern, the slip's
# name, as the labs' probes call it and the class report counts it, the "Why:" it gives).
EXCEPTION_HINTS = [
    (
        re.compile(r"could not be broadcast"),
        "statistics without keepdims",
        "A statistic lost its reduced axis: compute it with keepdims=True (shape (N, 1), not "
        "(N,)) so that it broadcasts against x along the axis it summarises.",
    ),
]


def hint_for_exception(message: str) -> tuple[str, str]:
    """(the slip's name, its hint) that an exception's message points at; ("", "") for none."""
    for pattern, name, hint in EXCEPTION_HINTS:
        if pattern.search(message):
            return name, hint
    return "", ""


def run_check(check: Check, submission: Submission) -> CheckResult:
    """Run one check; any failure becomes a result with a message, never an exception."""
    try:
        check.function(submission)
    except CheckFailed as failure:
        probes = getattr(failure, "probes", ())
        return CheckResult(check.name, 0, check.points, False, str(failure), probes=probes)
    except SubmissionError as failure:
        message = str(failure)
        name, hint = hint_for_exception(message)
        if isinstance(failure, RaisedError) and failure.detail:
            message += "\n" + failure.detail
        if hint:
            message += f"\nWhy: {hint}"
        probes = (name,) if hint else ()
        unanswered = isinstance(failure, (NotImplementedYet, MissingName))
        return CheckResult(
            check.name, 0, check.points, False, message, probes=probes, unanswered=unanswered
        )
    except Exception as error:  # a bug in the check itself: say so, loudly, not "wrong answer"
        return CheckResult(
            check.name,
            0,
            check.points,
            False,
            f"{INTERNAL_ERROR}: {type(error).__name__}: {error}",
            internal=True,
        )
    return CheckResult(check.name, check.points, check.points, True, "")


def run_checks(
    lab: Lab, submission: Submission, names: Sequence[str] | None = None
) -> list[CheckResult]:
    """Run the lab's checks (only those that use ``names``, if given) in order."""
    guarded = ForbiddenGuard(submission, lab)
    chosen = set(names or ()) - set(lab.adapters)
    selected = [c for c in lab.checks if names is None or set(c.uses) & chosen]
    results = [run_check(check, guarded) for check in selected]
    return say_reasons_once(name_failing_needs(lab, guarded, selected, results))


# The first line of a failed check whose function calls another graded function that fails its
# own check: the wrong answer may be that function's, and the learner should fix it first.
FIX_FIRST = "Fix `{name}` first: it fails its own check, “{check}”."


def name_failing_needs(
    lab: Lab, submission: Submission, checks: Sequence[Check], results: list[CheckResult]
) -> list[CheckResult]:
    """The results, each failed one first naming the functions it ``needs`` that fail their own
    checks (``FIX_FIRST``); a check that had no answer to grade (not written yet) names none.

    ``net_train`` that steps with a wrong ``net_sgd_step`` fails with "max abs error 0.622",
    which says nothing of where the error is; its check, declared with
    ``needs=["net_sgd_step"]``, then begins "Fix `net_sgd_step` first: it fails its own check,
    “SGD with momentum: ...”". A needed name's own checks are those of the lab that use it and
    nothing the submission lacks; a result already computed in this run is reused, and the
    others run only when a check that needs them has failed (in ``check(net_train)``, the
    notebook hands the learner's ``net_sgd_step`` over for this alone).
    """
    verdicts = {id(check): result for check, result in zip(checks, results, strict=True)}
    failing: dict[str, Check | None] = {}

    def first_failing(name: str) -> Check | None:
        if name not in failing:
            failing[name] = None
            if submission.has(name):
                for own in lab.checks:
                    if name not in own.uses or not all(submission.has(u) for u in own.uses):
                        continue
                    if id(own) not in verdicts:
                        verdicts[id(own)] = run_check(own, submission)
                    if not verdicts[id(own)].passed:
                        failing[name] = own
                        break
        return failing[name]

    named = []
    for check, result in zip(checks, results, strict=True):
        lines = []
        if not (result.passed or result.internal or result.unanswered):
            for name in check.needs:
                own = first_failing(name)
                if own is not None and own is not check:
                    lines.append(FIX_FIRST.format(name=name, check=own.name))
        if lines:
            result = dataclasses.replace(result, message="\n".join([*lines, result.message]))
        named.append(result)
    return named


# A reason line of a message ("Why: ...", "Or: ...", "Hint: ..."), and what replaces one that an
# earlier check of the same report gave in full.
_REASON = re.compile(r"(?P<prefix>Why|Or|Hint): (?P<reason>.+)")
SAME_REASON = "{prefix}: as in “{check}” above."


def say_reasons_once(results: list[CheckResult]) -> list[CheckResult]:
    """The results with each reason given in full once: by the first check that gives it.

    One slip fails several checks (an unbiased variance fails six of lab 03's), and each would
    repeat the same paragraph. A later check whose reasons are all those of one earlier check
    says "Why: as in “<that check>” above." instead; a single reason that an earlier check gave
    as its only one is referred to the same way. A reference never leaves open which reason it
    means, so a reason that was one of several stays in full otherwise. Results are in the
    order every report shows them; idempotent.
    """
    reasons_of: dict[str, list[str]] = {}  # a check's reasons, in order
    sole: dict[str, str] = {}  # a reason -> the first check that gave it as its only one
    said = []
    for result in results:
        if result.passed or not result.message:
            said.append(result)
            continue
        lines = result.message.split("\n")
        matches = [_REASON.fullmatch(line) for line in lines]
        reasons = [m.group("reason") for m in matches if m]
        same = next((name for name, rs in reasons_of.items() if reasons and rs == reasons), None)
        kept, referred = [], False
        for line, match in zip(lines, matches, strict=True):
            if match and same is not None:
                if not referred:
                    kept.append(SAME_REASON.format(prefix="Why", check=same))
                    referred = True
                continue
            if match and match.group("reason") in sole:
                line = SAME_REASON.format(
                    prefix=match.group("prefix"), check=sole[match.group("reason")]
                )
            kept.append(line)
        if reasons and result.name not in reasons_of:
            reasons_of[result.name] = reasons
            if len(reasons) == 1:
                sole.setdefault(reasons[0], result.name)
        said.append(dataclasses.replace(result, message="\n".join(kept)))
    return said
