"""The checks are sharp: single-point bugs injected into every answer region lose points.

For each solution notebook, every function (or class method) whose body holds a
``### BEGIN SOLUTION`` region is mutated one change at a time (see ``mutants.py``); each mutant is
run through the lab's checks in-process, until one fails. At least 90% of the mutants must fail a
check. Survivors are printed, so a weak check is easy to find.
"""

from __future__ import annotations

import ast

import nbformat
import pytest
from conftest import ROOT, check_results, solution_namespace
from mutants import mutants

from normlab.grader.registry import all_labs

KILL_RATE = 0.90


def answer_units(stem: str):
    """(kind, name, source, region line range) for each answer region inside a def or a class.

    ``kind`` is "function" for a top-level function and "class" for a class whose method holds
    the region (a Transformer block's ``forward``, say).
    """
    solution = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    for cell in solution.cells:
        if cell.cell_type != "code" or "### BEGIN SOLUTION" not in cell.source:
            continue
        lines = cell.source.splitlines()
        begins = [i + 1 for i, line in enumerate(lines) if "### BEGIN SOLUTION" in line]
        ends = [i + 1 for i, line in enumerate(lines) if "### END SOLUTION" in line]
        tree = ast.parse(cell.source)
        for begin, end in zip(begins, ends, strict=True):
            for node in tree.body:
                if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    continue
                if node.lineno < begin <= node.end_lineno:
                    source = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                    offset = node.lineno - 1
                    kind = "function" if isinstance(node, ast.FunctionDef) else "class"
                    yield kind, node.name, source, range(begin - offset, end - offset)


def run_mutant(stem: str, lab, unit: str, original: str, mutated: str) -> bool | None:
    """True when every check of the lab passes with ``mutated`` in place of ``original``.

    The solution's definitions are executed afresh with the one unit swapped, so whatever uses
    it (a table of block classes, the lab's adapter functions) uses the mutant. None: the
    mutant does not even run.
    """
    try:
        # A Numba kernel runs as Python: compiling each mutant would cost about 100 s for lab
        # 07 alone, and changes no mutant's outcome (see conftest). The unmutated solution runs
        # as they do, so that its passing is the baseline they are killed against.
        namespace = solution_namespace(stem, replace=(original, mutated), jit=False)
    except Exception:
        return None
    given = {name: namespace[name] for name in lab.names if name in namespace}
    # Only whether a check fails matters: stop at the first that does, trying first the checks
    # of the mutated unit (the ones most mutants fail).
    first = KERNEL_CALLERS.get(unit, unit)
    return all(result.passed for result in check_results(stem, given, first=first))


# Labs whose mutants can crash the interpreter: a Triton kernel run by its interpreter reads and
# writes the tensors' memory directly, so a mutated mask or offset can corrupt the heap. Each of
# their mutants runs in a forked child; one that dies has lost its points (the grader's own
# process for the submission would have died the same way).
FORKED = {"11_triton_kernels"}
# A kernel is graded through the wrapper that launches it: its checks run first.
KERNEL_CALLERS = {
    "_rms_fwd_kernel": "tri_rmsnorm_forward",
    "_rms_bwd_dx_kernel": "tri_rmsnorm_backward",
    "_rms_bwd_dw_kernel": "tri_rmsnorm_backward",
    "_sum_rows_kernel": "tri_rmsnorm_backward",
    "_ln_fwd_kernel": "tri_layernorm_forward",
    "_ln_bwd_dx_kernel": "tri_layernorm_backward",
    "_ln_bwd_dwdb_kernel": "tri_layernorm_backward",
}


def run_forked(*args) -> bool | None:
    import faulthandler
    import os

    pid = os.fork()
    if pid == 0:  # the child: exit 0 when every check passed, 1 when one failed
        # a mutant that corrupts the heap dies here by design: its death is the outcome, and
        # pytest's fault handler would only print the interpreter's stack into the log
        faulthandler.disable()
        try:
            os._exit(0 if run_mutant(*args) else 1)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


# Labs whose every mutant costs a run of Triton's interpreter in a child of its own (about
# 0.28 CPU s each, 450 mutants): their figure is measured on every SAMPLE_EVERY-th mutant of
# each answer unit, in the order mutants() yields them, so each unit and each kind of change
# is still sampled and the sample is the same on every run (every fifth: 86/95 killed, 90.5%;
# every third, 150 of them, cost the suite 46 s of CPU). The full set, measured once:
# 408/450 killed (90.7%), most survivors equivalent (an `other=` value on a load whose masked
# lanes reach only masked stores).
SAMPLE_EVERY = {"11_triton_kernels": 5}


@pytest.mark.parametrize("stem", sorted(all_labs()))
def test_single_point_bugs_lose_points(stem):
    lab = all_labs()[stem]
    total, survivors = 0, []
    every = SAMPLE_EVERY.get(stem, 1)
    units = list(answer_units(stem))
    # the unmutated solution is the same whichever unit is named: it must pass, checked once
    _, name, source, _ = units[0]
    assert run_mutant(stem, lab, name, source, source), "the unmutated solution must pass"
    for _, name, source, region in units:
        for index, (described, mutated) in enumerate(mutants(source, region)):
            if index % every:
                continue
            total += 1
            run = run_forked if stem in FORKED else run_mutant
            if run(stem, lab, name, source, mutated):
                survivors.append(f"{name} {described}")
    assert total >= 20, f"too few mutants to measure ({total})"
    rate = 1 - len(survivors) / total
    print(f"{stem}: {total - len(survivors)}/{total} mutants killed ({rate:.1%})")
    assert rate >= KILL_RATE, f"{lab.title}: only {rate:.1%} killed; survivors:\n" + "\n".join(
        survivors
    )
