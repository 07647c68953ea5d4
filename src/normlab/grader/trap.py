"""From scratch means from scratch: find library norms in a learner's function.

Two detectors, because each misses what the other sees:

* ``scan_source`` reads the code (AST) of the graded function and of every notebook function it
  calls, and reports uses such as ``F.layer_norm(...)`` or ``nn.LayerNorm(d)``. It never runs the
  code, so the grader can use it on a submission it does not trust.
* ``forbidden_calls`` is a run-time trap: while the learner's function runs, the library
  functions are wrapped so that any call is recorded (``getattr`` tricks included).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import sys
from collections.abc import Iterable


def _last(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _top_level_functions(sources: Iterable[str]) -> dict[str, ast.AST]:
    """name -> the last top-level ``def`` of that name (cells run in order, later wins)."""
    functions: dict[str, ast.AST] = {}
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                functions[node.name] = node
    return functions


def _imported_aliases(sources: Iterable[str], suffixes: set[str]) -> set[str]:
    """Local names bound by ``from torch... import layer_norm [as ln]`` to a forbidden name."""
    aliases = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name in suffixes:
                        aliases.add(alias.asname or alias.name)
    return aliases


def scan_source(sources: list[str], function_name: str, forbidden: list[str]) -> list[str]:
    """Library calls from ``forbidden`` reachable from ``function_name`` in the notebook's code.

    Args:
        sources: the notebook's code cells, in order.
        function_name: the graded function.
        forbidden: dotted names (``"torch.nn.functional.layer_norm"``); matched on their last part.

    Returns:
        The offending expressions as written (``["F.layer_norm"]``), in order found, no repeats.
    """
    if not forbidden:
        return []
    suffixes = {_last(name) for name in forbidden}
    functions = _top_level_functions(sources)
    aliases = _imported_aliases(sources, suffixes)
    found: list[str] = []
    seen_functions: set[str] = set()
    pending = [function_name]
    while pending:
        name = pending.pop()
        if name in seen_functions or name not in functions:
            continue
        seen_functions.add(name)
        for node in ast.walk(functions[name]):
            hit = None
            if isinstance(node, ast.Attribute) and node.attr in suffixes:
                hit = ast.unparse(node)
            elif isinstance(node, ast.Name):
                if node.id in aliases:
                    hit = node.id
                elif node.id in functions:
                    pending.append(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if _last(alias.name) in suffixes:
                        hit = alias.name
            if hit and hit not in found:
                found.append(hit)
    return found


def _resolve(dotted: str):
    """(owner object, attribute name) for a dotted name whose module is already imported."""
    parts = dotted.split(".")
    if parts[0] not in sys.modules:  # never import torch just to trap it
        return None
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            owner = importlib.import_module(module_name)
        except ImportError:
            continue
        try:
            for attribute in parts[split:-1]:
                owner = getattr(owner, attribute)
            getattr(owner, parts[-1])
        except AttributeError:
            return None
        return owner, parts[-1]
    return None


@contextlib.contextmanager
def forbidden_calls(forbidden: list[str], hits: list[str]):
    """While active, calling any of ``forbidden`` appends its name to ``hits`` (and still works).

    Classes are trapped through their ``forward`` method, so an instance created earlier is
    caught too.
    """
    restore = []
    for dotted in forbidden:
        target = _resolve(dotted)
        if target is None:
            continue
        owner, attribute = target
        original = getattr(owner, attribute)
        if isinstance(original, type) and hasattr(original, "forward"):
            owner, attribute = original, "forward"
            original = original.forward
        # Inherited (e.g. BatchNorm1d.forward lives on _BatchNorm): delete ours afterwards.
        inherited = attribute not in vars(owner)

        def wrapper(*args, __original=original, __name=dotted, **kwargs):
            if __name not in hits:
                hits.append(__name)
            return __original(*args, **kwargs)

        try:
            setattr(owner, attribute, wrapper)
        except (AttributeError, TypeError):
            continue
        restore.append((owner, attribute, original, inherited))
    try:
        yield hits
    finally:
        for owner, attribute, original, inherited in reversed(restore):
            if inherited:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, original)
