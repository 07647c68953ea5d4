"""Every learner-facing English text the grader can show, gathered for the catalog's tests.

Two kinds: the texts a lab declares (its title, check names, probe hints, multiple-choice
``*_WHY`` lines), and the messages its checks actually emit when grading the fresh lab, the worked
solution, each probe's computation handed to the lab as the learner's function (the corpus of
``test_every_probe_fires.py``), and three more editions that reach the messages no probe explains:
the solution's functions with their answers shifted by 0.5 (the checks' general hints), returning
None, and every wrong or malformed multiple-choice answer.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os

import nbformat
import numpy as np
from conftest import ROOT, as_learner_function, check_modules, probe_lists, solution_namespace

from normlab.grader import notebook
from normlab.grader.probes import Probe

MODULES = check_modules()


def declared_texts(stem: str) -> dict[str, list[str]]:
    """Kind -> the texts lab ``stem`` declares: ``title``, ``check``, ``hint``, ``why``."""
    module = MODULES[stem]
    probes: list[Probe] = [p for value in probe_lists(module).values() for p in value]
    for listed in getattr(module, "PROBES", {}).values():
        probes += listed
    whys = [
        text
        for name, value in vars(module).items()
        if name.endswith("_WHY") and isinstance(value, dict)
        for text in value.values()
    ]
    found = {
        "title": [module.LAB.title],
        "check": [check.name for check in module.LAB.checks],
        "hint": [p.hint for p in probes],
        "why": whys,
    }
    return {kind: list(dict.fromkeys(texts)) for kind, texts in found.items()}


def _needs_sources(stem: str) -> bool:
    """A lab whose checks read the source of the learner's functions (lab 11's kernels)."""
    return MODULES[stem].LAB.companion is not None


def lab_namespace(stem: str) -> dict:
    """The fresh lab's definition cells, executed (stubs and unanswered questions)."""
    namespace: dict = {"__name__": "lab"}
    os.environ.pop("NORMLAB_GRADING", None)
    book = nbformat.read(ROOT / "labs" / f"{stem}.ipynb", as_version=4)
    for index, cell in enumerate(book.cells):
        if cell.cell_type != "code" or "runs-learner-code" in cell.metadata.get("tags", []):
            continue
        source = "\n".join(
            line for line in cell.source.splitlines() if not line.startswith("check(")
        )
        filename = f"<{stem}>"
        if _needs_sources(stem):  # as in Jupyter, where inspect.getsource finds a cell's source
            filename = f"<{stem} lab cell {index}>"
            text = source + "\n"
            linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        try:
            exec(compile(source, filename, "exec"), namespace)
        except Exception:  # a demo cell that needs the learner's code: its stubs raise
            continue
    return namespace


def _messages_of(stem: str, objects: dict) -> list[str]:
    _, results = notebook.run(lab=stem, **objects)
    return [r.message for r in results if r.message]


def _shifted(value):
    """A returned value with every float array moved by 0.5 (right shape, wrong numbers)."""
    if isinstance(value, tuple):
        return tuple(_shifted(v) for v in value)
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
        return value + np.asarray(0.5, value.dtype)
    if isinstance(value, float):
        return value + 0.5
    return value


def _off_by_half(function):
    def shifted(*args, **kwargs):
        return _shifted(function(*args, **kwargs))

    return shifted


def _returns_none(*args, **kwargs):
    return None


# Answers to a multiple-choice question: every letter, none, two, a number, nothing at all.
ANSWERS = ["a", "b", "c", "d", "e", "because", "bc", "b, c", 3, None]


def _editions(namespace: dict, names: list[str]) -> dict[str, list[dict]]:
    """Edition -> the objects to grade, each a dict name -> object."""
    functions = {
        name: namespace[name]
        for name in names
        if inspect.isfunction(namespace.get(name)) and name in namespace
    }
    answers = [name for name in names if name.isupper() and name.endswith("ANSWER")]
    return {
        "shifted": [{name: _off_by_half(f)} for name, f in functions.items()],
        "none": [{name: _returns_none} for name in functions],
        "answers": [{name: answer} for name in answers for answer in ANSWERS],
    }


@functools.cache
def emitted_messages(stem: str) -> dict[str, list[str]]:
    """Case -> the messages grading it emitted, for every edition of lab ``stem``."""
    module = MODULES[stem]
    names = module.LAB.names
    found: dict[str, list[str]] = {}
    # Lab 07's Numba kernels run as the Python they are (conftest._numba_compiles_once): the
    # messages are the same, and compiling them cost each test process some 6 s of CPU.
    solution = solution_namespace(stem, sources=_needs_sources(stem), jit=False)
    for edition, namespace in (("lab", lab_namespace(stem)), ("solution", solution)):
        given = {name: namespace[name] for name in names if name in namespace}
        found[edition] = _messages_of(stem, given)
    for edition, cases in _editions(solution, names).items():
        for index, objects in enumerate(cases):
            found[f"{edition}-{index}"] = _messages_of(stem, objects)
    for function, listed in getattr(module, "PROBES", {}).items():
        for probe in listed:
            messages = _messages_of(stem, {function: as_learner_function(probe)})
            found[f"{function}-{probe.name}"] = messages
    return found
