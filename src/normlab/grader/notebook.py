"""Door 1: ``check(fn)`` in the learner's notebook — advisory, instant, in-process.

The learner's function runs right here (it is their own kernel); the same checks as
``normlab grade`` compare its answers with the oracle and name the likely bug.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import textwrap
import threading
import types
import warnings

from normlab.grader import core, i18n, inert
from normlab.grader.isolation import hidden
from normlab.grader.isolation.wire import encode_result
from normlab.grader.registry import all_labs, get_lab, labs_using
from normlab.grader.results import CheckReport
from normlab.grader.trap import forbidden_calls, scan_source


def _copy(value):
    import numpy as np

    if isinstance(value, core.AsTorch):
        import torch

        return torch.from_numpy(np.array(value.array))
    if isinstance(value, np.ndarray):
        return value.copy()  # the learner's function may modify its input in place
    return value


def _sources_of(function) -> list[str]:
    """Source of ``function`` and of the notebook functions it refers to (for the AST scan)."""
    sources, pending, seen = [], [function], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        try:
            sources.append(textwrap.dedent(inspect.getsource(current)))
        except (OSError, TypeError):
            continue
        globals_ = getattr(current, "__globals__", {})
        for name in getattr(getattr(current, "__code__", None), "co_names", ()):
            other = globals_.get(name)
            if isinstance(other, types.FunctionType) and other.__module__ == current.__module__:
                pending.append(other)
    return sources


@contextlib.contextmanager
def _quiet():
    import numpy as np

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


def _hidden_module(name) -> bool:
    return isinstance(name, str) and name.split(".")[0] in hidden.HIDDEN_MODULES


@contextlib.contextmanager
def _watch_torch(found: list[str]):
    """Record (in ``found``) the first PyTorch function the code inside the block calls.

    ``normlab grade`` runs a NumPy lab's graded functions where PyTorch cannot be used
    (:mod:`normlab.grader.isolation.hidden`): a function that calls it there fails its checks.
    Here, in the learner's kernel, PyTorch works; this watch lets ``check()`` say the same thing
    at the time the learner can fix it. Importing PyTorch, or naming it
    (``isinstance(x, torch.Tensor)``), is not a use, as under the grader.
    """
    importing: set = set()  # module bodies running (an import inside the function)

    def profile(frame, event, arg):
        if found:
            return
        if event == "call" and frame.f_code.co_name == "<module>":
            importing.add(frame)
        elif event == "return" and frame in importing:
            importing.discard(frame)
        elif importing:
            return
        elif event == "call":
            module = frame.f_globals.get("__name__")
            if _hidden_module(module):
                found.append(f"{module}.{frame.f_code.co_name}")
        elif event == "c_call":
            module = getattr(arg, "__module__", None)
            owner = getattr(arg, "__self__", None)
            if _hidden_module(module):
                found.append(f"{module}.{arg.__name__}")
            elif owner is not None and _hidden_module(type(owner).__module__):
                found.append(f"torch.Tensor.{arg.__name__}")

    previous, previous_threads = sys.getprofile(), threading.getprofile()
    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(previous)
        threading.setprofile(previous_threads)


class InProcessSubmission(core.Submission):
    """The learner's own objects, called directly."""

    def __init__(self, objects: dict, forbidden: dict[str, list[str]], torch: bool = True):
        self.objects = objects
        self.forbidden = forbidden
        #: the lab's graded code may use PyTorch (``Lab.torch``); else its use fails, as it
        #: does under ``normlab grade``
        self.torch = torch

    def has(self, name):
        return name in self.objects

    def get(self, name):
        if name not in self.objects:
            raise core.MissingName(f"`{name}` was not given to check()")
        header, arrays = encode_result(self.objects[name])
        return core.Output.from_wire(header, arrays)

    def call(self, name, *args, **kwargs):
        if name not in self.objects:
            raise core.MissingName(f"`{name}` was not given to check()")
        hits: list[str] = []
        read_back: list = []

        def copy(value):
            if isinstance(value, core.ReadBack):
                read_back.append(_copy(value.array))
                return read_back[-1]
            return _copy(value)

        torch_used: list[str] = []
        watch = contextlib.nullcontext() if self.torch else _watch_torch(torch_used)
        try:
            args = [copy(value) for value in args]
            kwargs = {key: copy(value) for key, value in kwargs.items()}
            # The learner sees the report, not NumPy's RuntimeWarnings from our edge cases.
            with forbidden_calls(self.forbidden.get(name, []), hits), _quiet(), watch:
                result = self.objects[name](*args, **kwargs)
        except NotImplementedError:
            raise core.NotImplementedYet(f"`{name}` is not implemented yet") from None
        except Exception as error:
            kind = type(error).__name__
            raise core.RaisedError(
                f"`{name}` raised {inert.clip(kind)}: {inert.clip(error)}", kind
            ) from None
        if torch_used and not hits:  # a library norm is the from-scratch rule's to report
            raise core.RaisedError(
                f"`{name}` raised {hidden.ERROR_TYPE}: "
                + hidden.MESSAGE.format(name=torch_used[0]),
                hidden.ERROR_TYPE,
            )
        header, arrays = encode_result(result, read_back)
        header["forbidden_used"] = hits
        return core.Output.from_wire(header, arrays)

    def static_forbidden(self, name, forbidden):
        function = self.objects.get(name)
        if not callable(function):
            return []
        return scan_source(_sources_of(function), getattr(function, "__name__", name), forbidden)


def _names_for(value, given_name: str | None) -> str:
    if given_name:
        return given_name
    name = getattr(value, "__name__", None)
    if not name:
        raise TypeError(
            i18n.text(
                "check() needs a function (check(layernorm_forward)) or a named answer "
                "(check(D1_ANSWER=D1_ANSWER))"
            )
        )
    return name


def run(*functions, lab: str | None = None, **named) -> tuple[core.Lab, list[core.CheckResult]]:
    """Run the checks for the given functions/answers; return the lab and its results."""
    objects = {_names_for(f, None): f for f in functions}
    objects.update(named)
    if not objects:
        raise TypeError(i18n.text("check() needs at least one function or answer"))
    if lab is not None:
        chosen = get_lab(lab)
    else:
        candidates = {found.stem: found for name in objects for found in labs_using(name)}
        if not candidates:
            known = ", ".join(n for each in all_labs().values() for n in each.names)
            raise ValueError(
                i18n.text(
                    "no lab checks {names}; names the labs check: {known}",
                    names=", ".join(objects),
                    known=known,
                )
            )
        if len(candidates) > 1:
            raise ValueError(
                i18n.text(
                    "{names} belongs to several labs: pass lab=one of {labs}",
                    names=", ".join(objects),
                    labs=list(candidates),
                )
            )
        chosen = next(iter(candidates.values()))
    given = list(objects)
    objects = {**_needed_from_notebook(chosen, objects), **objects}
    return chosen, core.run_checks(chosen, submission_for(chosen, objects), names=given)


def submission_for(lab: core.Lab, objects: dict) -> core.Submission:
    """The learner's objects as ``lab``'s checks call them here (with the lab's companion)."""
    submission = InProcessSubmission(objects, lab.forbidden, torch=lab.torch)
    if lab.companion is None:
        return submission
    companion = InProcessSubmission(lab.companion.objects(objects), {}, torch=True)
    return core.WithCompanion(submission, companion, lab.companion.names)


def _needed_from_notebook(lab: core.Lab, objects: dict) -> dict:
    """The graded functions that the checks of ``objects`` declare they call (``Check.needs``)
    and that were not given, found where the given functions find them: in their notebook's
    namespace. Only their own checks' verdicts use them (``core.name_failing_needs``): the
    report still shows the checks of what was given, and nothing else."""
    needed = {
        name
        for check in lab.checks
        if set(check.uses) & set(objects)
        for name in check.needs
        if name not in objects
    }
    found = {}
    for name in sorted(needed):
        for given in objects.values():
            value = getattr(given, "__globals__", {}).get(name)
            if callable(value):
                found[name] = value
                break
    return found


def check(*functions, lab: str | None = None, **named) -> None:
    """See :func:`normlab.check`."""
    if os.environ.get("NORMLAB_GRADING"):
        return None  # inside `normlab grade` the grader runs the checks itself
    chosen, results = run(*functions, lab=lab, **named)
    shown = CheckReport(chosen.title, results, i18n.current_language())
    try:
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is not None:
            display(shown)
            return None
    except ImportError:
        pass
    print(shown)
    return None
