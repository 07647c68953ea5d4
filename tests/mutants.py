"""Single-point bugs, injected into a solution's answer regions, to measure how sharp the checks are.

Each mutant changes ONE thing in ONE function: an arithmetic operator, a comparison, a numeric
constant, an ``axis=``/``keepdims=``/``ddof=`` argument, a reduction (``mean`` <-> ``sum``), or drops
one operand of a ``+``/``-``. A mutant is *killed* when at least one of the lab's checks fails on it.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator

OPERATOR_SWAPS = {
    ast.Add: [ast.Sub],
    ast.Sub: [ast.Add],
    ast.Mult: [ast.Div],
    ast.Div: [ast.Mult],
    ast.Pow: [ast.Mult],
}
REDUCTION_SWAPS = {"mean": "sum", "sum": "mean", "sqrt": "abs", "var": "std", "std": "var"}


def _sites(tree: ast.AST) -> list[tuple[ast.AST, str, object]]:
    """(node, kind, replacement) for every single-point change in the tree."""
    sites = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            for new in OPERATOR_SWAPS.get(type(node.op), []):
                sites.append((node, "op", new))
            if isinstance(node.op, (ast.Add, ast.Sub)):
                sites.append((node, "drop", "right"))
                sites.append((node, "drop", "left"))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, (int, float))
            and not isinstance(node.value, bool)
        ):
            for new in {node.value + 1, node.value - 1, 0, node.value * 2} - {node.value}:
                sites.append((node, "const", new))
        elif isinstance(node, ast.keyword) and node.arg in ("axis", "keepdims", "ddof"):
            sites.append((node, "keyword", "remove"))
        elif isinstance(node, ast.Attribute) and node.attr in REDUCTION_SWAPS:
            sites.append((node, "attr", REDUCTION_SWAPS[node.attr]))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            sites.append((node, "unary", "remove"))
    return sites


class _Apply(ast.NodeTransformer):
    def __init__(self, target_index: int, kind: str, replacement):
        self.target_index, self.kind, self.replacement = target_index, kind, replacement
        self.counter = -1

    def generic_visit(self, node):
        return super().generic_visit(node)

    def visit(self, node):
        self.counter += 1
        if self.counter == self.target_index:
            return self._mutate(node)
        return super().visit(node)

    def _mutate(self, node):
        if self.kind == "op":
            node.op = self.replacement()
        elif self.kind == "drop":
            return node.left if self.replacement == "left" else node.right
        elif self.kind == "const":
            node.value = self.replacement
        elif self.kind == "keyword":
            return None
        elif self.kind == "attr":
            node.attr = self.replacement
        elif self.kind == "unary":
            return node.operand
        return node


def _preorder(tree: ast.AST) -> list[ast.AST]:
    order = []

    def walk(node):
        order.append(node)
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(tree)
    return order


def mutants(function_source: str, body_lines: range) -> Iterator[tuple[str, str]]:
    """Yield (description, mutated source) for each single-point change inside ``body_lines``.

    Args:
        function_source: the source of one function.
        body_lines: the 1-based line numbers of its answer region (only those are mutated).
    """
    tree = ast.parse(function_source)
    order = _preorder(tree)
    position = {id(node): i for i, node in enumerate(order)}
    for node, kind, replacement in _sites(tree):
        line = getattr(node, "lineno", None)
        if line is None or line not in body_lines:
            continue
        mutated = _Apply(position[id(node)], kind, replacement).visit(copy.deepcopy(tree))
        try:
            source = ast.unparse(ast.fix_missing_locations(mutated))
        except Exception:
            continue
        described = f"line {line}: {kind} -> {getattr(replacement, '__name__', replacement)}"
        yield described, source
