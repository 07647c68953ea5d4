"""The checks are sharp: single-point bugs injected into every answer region lose points.

For each solution notebook, every function whose body holds a ``### BEGIN SOLUTION`` region is
mutated one change at a time (see ``mutants.py``); each mutant is run through the lab's checks
in-process. At least 90% of the mutants must fail a check. Survivors are printed, so a weak check
is easy to find.
"""

from __future__ import annotations

import ast

import nbformat
import pytest
from conftest import ROOT, solution_namespace
from mutants import mutants

from normlab.grader import notebook
from normlab.grader.registry import all_labs

KILL_RATE = 0.90


def answer_functions(stem: str):
    """(function name, cell source, region line range) for each answer region inside a def."""
    solution = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    for cell in solution.cells:
        if cell.cell_type != "code" or "### BEGIN SOLUTION" not in cell.source:
            continue
        lines = cell.source.splitlines()
        begin = next(i for i, line in enumerate(lines) if "### BEGIN SOLUTION" in line) + 1
        end = next(i for i, line in enumerate(lines) if "### END SOLUTION" in line) + 1
        tree = ast.parse(cell.source)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.lineno < begin <= node.end_lineno:
                source = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                offset = node.lineno - 1
                yield node.name, source, range(begin - offset, end - offset)


@pytest.mark.parametrize("stem", sorted(all_labs()))
def test_single_point_bugs_lose_points(stem):
    lab = all_labs()[stem]
    base = solution_namespace(stem)
    total, survivors = 0, []
    for name, source, region in answer_functions(stem):
        control = dict(base)
        exec(compile(source, f"<control {name}>", "exec"), control)
        _, results = notebook.run(lab=stem, **{name: control[name]})
        assert all(r.passed for r in results), f"the unmutated {name} must pass its checks"
        for described, mutated in mutants(source, region):
            namespace = dict(base)
            try:
                exec(compile(mutated, f"<mutant {name}>", "exec"), namespace)
            except Exception:
                total += 1  # does not even define the function: caught at once
                continue
            total += 1
            _, results = notebook.run(lab=stem, **{name: namespace[name]})
            if all(r.passed for r in results):
                survivors.append(f"{name} {described}")
    assert total >= 20, f"too few mutants to measure ({total})"
    rate = 1 - len(survivors) / total
    print(f"{stem}: {total - len(survivors)}/{total} mutants killed ({rate:.1%})")
    assert rate >= KILL_RATE, f"{lab.title}: only {rate:.1%} killed; survivors:\n" + "\n".join(
        survivors
    )
