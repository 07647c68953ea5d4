"""Shared fixtures: the repository root and helpers to load a solution's functions."""

from __future__ import annotations

import contextlib
import os
import sys
import types
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


_COMPILED: dict = {}


def _code_key(code: types.CodeType) -> tuple:
    consts = tuple(
        _code_key(c) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c))
        for c in code.co_consts
    )
    return (code.co_code, consts, code.co_names, code.co_varnames)


def _globals_key(function) -> tuple:
    """What a compiled kernel froze of the globals it names (modules by name, others by value)."""
    key = []
    for name in function.__code__.co_names:
        value = function.__globals__.get(name)
        if isinstance(value, types.ModuleType):
            key.append((name, value.__name__))
        elif isinstance(value, (int, float, str, bool, type(None))):
            key.append((name, repr(value)))
        else:
            key.append((name, id(value)))  # another kernel: a new one (mutated) is a new key
    return tuple(key)


@contextlib.contextmanager
def _numba_compiles_once():
    """Reuse the compiled Numba kernel when the same source is executed again.

    The mutation tests execute a solution's cells once per mutant (hundreds of times); a
    ``@njit(parallel=True)`` kernel takes about half a second to compile per argument type.
    A kernel whose code, options and globals are unchanged is the same kernel: compile it once.
    """
    try:
        import numba
    except ImportError:
        yield
        return
    original = numba.njit

    def compile_once(function, options):
        if function.__closure__:
            return original(**options)(function)
        key = (_code_key(function.__code__), _globals_key(function), repr(sorted(options.items())))
        if key not in _COMPILED:
            _COMPILED[key] = original(**options)(function)
        return _COMPILED[key]

    def njit(*args, **options):
        if len(args) == 1 and isinstance(args[0], types.FunctionType):
            return compile_once(args[0], options)
        if not args:
            return lambda function: compile_once(function, options)
        return original(*args, **options)  # explicit signatures: compile as asked

    numba.njit = njit
    try:
        yield
    finally:
        numba.njit = original


def solution_namespace(stem: str, replace: tuple[str, str] | None = None) -> dict:
    """Execute the solution notebook's definition cells (no demos) and return its namespace.

    Only cells that define functions or answers are run, so the tests get the solution's
    functions without its slower demonstration cells. ``replace=(old, new)`` swaps one piece of
    source first (a mutated function or class), so that everything defined after it — a table
    of classes, an adapter — is built from the new version.
    """
    notebook = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    namespace: dict = {"__name__": "solution"}
    os.environ.pop("NORMLAB_GRADING", None)
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        if "runs-learner-code" in cell.metadata.get("tags", []):
            continue
        source = cell.source
        if replace is not None:
            source = source.replace(*replace)
        source = "\n".join(line for line in source.splitlines() if not line.startswith("check("))
        with _numba_compiles_once():
            exec(compile(source, f"<{stem}>", "exec"), namespace)
    return namespace
