"""Every probe of every lab fires, with its hint, on an implementation that has its bug.

A probe is a known-wrong variant: its ``compute`` returns what code with that bug returns. A
check module lists its probes in ``PROBES``, by the learner's function whose arguments each
``compute`` takes; handed to the lab as that function, the probe's computation must fail a
check and that check's message must carry the probe's hint. A probe that never speaks (shadowed
by another with the same output, or run only on inputs where it equals the right answer) fails
here.

Where the learner's function has another form than "return what ``compute`` returns" (a norm
kernel keeps x's dtype and fills the ``out`` it is given; a function of tensors returns a
tensor), ``LEARNER_FORM`` says how a probe becomes that function. Probe lists that cannot stand
in for the learner's function (a Transformer block's probes run the oracle's blocks, built on
library norms the lab forbids) are proven by the lab's own test, named in ``PROVEN_ELSEWHERE``;
this file checks that the named test exists and is parametrized over every probe of the list.

Two more guarantees: every module-level probe list is covered one way or the other, and every
probe a check compares answers with while grading the worked solution is one of the listed ones
(so a probe built on the fly by a factory cannot escape the proof).
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from conftest import (
    as_learner_function,
    check_modules,
    check_results,
    probe_lists,
    solution_namespace,
)

from normlab.grader import notebook, probes
from normlab.grader.probes import Probe

MODULES = check_modules()


# Probe lists that a lab's own test proves, probe by probe: (test file, test function).
# Probe lists that a lab's own test proves, probe by probe: (test file, test function). The
# block and stack probes compute with the oracle's blocks, whose norms are the library's: handed
# to the lab as the learner's function, they would be refused as library code.
PROVEN_ELSEWHERE = {
    # recognised from the pattern of a Triton kernel's errors: each bug is written as a kernel
    ("11_triton_kernels", "DIAGNOSES"): (
        "test_triton_kernels_checks",
        "test_bug_is_caught_with_its_hint",
    ),
    ("06_pre_post_ln", "POST_BLOCK_PROBES"): (
        "test_pre_post_ln_checks",
        "test_block_bug_is_caught_with_its_hint",
    ),
    ("06_pre_post_ln", "PRE_BLOCK_PROBES"): (
        "test_pre_post_ln_checks",
        "test_block_bug_is_caught_with_its_hint",
    ),
    ("06_pre_post_ln", "STACK_PROBES"): (
        "test_pre_post_ln_checks",
        "test_stack_bug_is_caught_with_its_hint",
    ),
}


def driven_cases():
    """(stem, function, probe) for every probe a module lists in ``PROBES``."""
    cases = []
    for stem, module in MODULES.items():
        for function, listed in getattr(module, "PROBES", {}).items():
            for probe in listed:
                cases.append(pytest.param(stem, function, probe, id=f"{stem}-{probe.name}"))
    return cases


def as_kernel(probe: Probe):
    """A norm kernel with the probe's bug: the probe's result in x's dtype, written into ``out``
    when one is given (a probe computes in float64 and ignores ``out``; a kernel does not)."""

    def buggy(x, *args, out=None, **kwargs):
        y = np.asarray(probe.compute(x, *args, **kwargs))
        if out is None:
            return y.astype(np.asarray(x).dtype)
        out[...] = y
        return out

    return buggy


def as_tensor_function(probe: Probe):
    """A function of tensors with the probe's bug: what the probe computes, as tensors."""
    import torch

    def tensor(value):
        return torch.as_tensor(np.asarray(value, dtype=np.float64))

    def buggy(*args, **kwargs):
        result = probe.compute(*args, **kwargs)
        if isinstance(result, tuple):
            return tuple(tensor(item) for item in result)
        return tensor(result)

    return buggy


# The learner's functions whose form is not "return what compute returns": how a probe becomes
# one of them, by (stem, function).
LEARNER_FORM = {
    **{
        ("06_pre_post_ln", function): as_tensor_function
        for function in (
            "scratch_layernorm",
            "scratch_layernorm_grads",
            "scratch_rmsnorm",
        )
    },
    **{
        ("09_modern_norms", function): as_tensor_function
        for function in (
            "qknorm_attention",
            "qknorm_grads",
            "policy_rmsnorm_bf16",
            "sublayer_output",
        )
    },
    **{
        ("12_language_model", function): as_tensor_function
        for function in (
            "lm_rmsnorm_call",
            "lm_layernorm_call",
            "lm_block_output",
            "lm_final_output",
        )
    },
    **{
        ("07_cost", function): as_kernel
        for function in (
            "rmsnorm_two_pass",
            "layernorm_two_pass",
            "rmsnorm_fused",
            "layernorm_fused",
        )
    },
}


@pytest.mark.parametrize("stem, function, probe", driven_cases())
def test_probe_fires_with_its_hint_on_code_with_its_bug(stem, function, probe):
    learner = LEARNER_FORM.get((stem, function), as_learner_function)(probe)
    # The lab's ban on library norms is lifted: a probe may be built on the library's answer
    # (it is compared with the learner's output, never graded), and what is proven here is
    # that its value draws its hint, not what the ban makes of the code that computes it.
    objects = {function: learner}
    # The checks run only until one fails with the hint; all of them only to explain a failure.
    if any(
        not r.passed and probe.hint in r.message
        for r in check_results(stem, objects, first=function, from_scratch=False)
    ):
        return
    results = list(check_results(stem, objects, from_scratch=False))
    failed = [r for r in results if not r.passed]
    assert failed, f"{function} with the bug {probe.name!r} passes every check"
    assert any(probe.hint in r.message for r in failed), (
        f"{function} with the bug {probe.name!r} fails without its hint:\n"
        + "\n".join(r.message for r in failed)
    )


@pytest.mark.parametrize("stem", sorted(MODULES))
def test_every_probe_list_is_proven(stem):
    module = MODULES[stem]
    listed = {id(value) for value in getattr(module, "PROBES", {}).values()}
    for name, value in probe_lists(module).items():
        if id(value) in listed:
            continue
        assert (stem, name) in PROVEN_ELSEWHERE, (
            f"{stem}: {name} is neither in the module's PROBES nor proven elsewhere"
        )


def _parametrized_strings(test) -> set[str]:
    found = set()
    for mark in getattr(test, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        for values in mark.args[1]:
            for value in values if isinstance(values, (tuple, list)) else (values,):
                if isinstance(value, str):
                    found.add(value)
    return found


@pytest.mark.parametrize("stem, name", sorted(PROVEN_ELSEWHERE))
def test_probes_proven_elsewhere_are_each_parametrized_there(stem, name):
    file, function = PROVEN_ELSEWHERE[stem, name]
    test = getattr(importlib.import_module(file), function)
    covered = _parametrized_strings(test)
    missing = [p.name for p in getattr(MODULES[stem], name) if p.name not in covered]
    assert not missing, f"{file}::{function} does not prove {missing}"


@pytest.mark.parametrize("stem", sorted(MODULES))
def test_every_probe_used_in_grading_is_listed(stem, monkeypatch):
    """Grade the worked solution and record each probe the checks compare answers with."""
    seen: dict[tuple[str, str], Probe] = {}
    original = probes.matching_probes

    def recording(got, candidates, *args, **kwargs):
        for probe, _ in candidates:
            seen[probe.name, probe.hint] = probe
        return original(got, candidates, *args, **kwargs)

    monkeypatch.setattr(probes, "matching_probes", recording)
    module = MODULES[stem]
    # Lab 07's Numba kernels run as Python (conftest._numba_compiles_once): the same checks and
    # probes, without some 6 s of compiling (test_cost_checks grades a compiled kernel).
    namespace = solution_namespace(stem, jit=False)
    given = {name: namespace[name] for name in module.LAB.names if name in namespace}
    _, results = notebook.run(lab=stem, **given)
    assert all(r.passed for r in results)
    listed = {(p.name, p.hint) for value in probe_lists(module).values() for p in value}
    unlisted = sorted(name for name, hint in seen if (name, hint) not in listed)
    assert not unlisted, f"{stem}: probes built outside any module-level list: {unlisted}"


# ----------------------------------------------------------------------------- the class report


def _said(module) -> set[tuple[str, str]]:
    """(name, hint) of every probe the module lists and of every slip an exception reveals:
    the reasons a check's message may give under a name."""
    from normlab.grader import core

    pairs = {(name, hint) for _, name, hint in core.EXCEPTION_HINTS}
    for listed in [*probe_lists(module).values(), *getattr(module, "PROBES", {}).values()]:
        pairs |= {(probe.name, probe.hint) for probe in listed}
    return pairs


def _reasons(message: str) -> list[str]:
    """The reasons a message gives: its ``Why:`` and ``Or:`` lines, in order."""
    return [
        line.split(": ", 1)[1]
        for line in message.splitlines()
        if line.startswith(("Why: ", "Or: "))
    ]


@pytest.mark.parametrize("stem", [s for s in MODULES if getattr(MODULES[s], "PROBES", None)])
def test_the_class_report_counts_every_reason_the_feedback_gives_and_nothing_else(stem):
    """A class of one student per probe of the lab (the function with that bug, every check
    that uses it): each check's recorded probes are the names of the reasons its message gives,
    line for line, and the class report counts, per name, the students whose feedback gives it."""
    from normlab.grader.results import SubmissionResult
    from normlab.instructor import classreport

    module, said = MODULES[stem], _said(MODULES[stem])
    results, told = [], {}
    for number, (function, probe) in enumerate(
        (function, probe) for function, listed in module.PROBES.items() for probe in listed
    ):
        learner = LEARNER_FORM.get((stem, function), as_learner_function)(probe)
        checks = list(check_results(stem, {function: learner}, from_scratch=False))
        student = f"s{number}"
        for check in checks:
            reasons = _reasons(check.message)
            where = f"{function} with {probe.name!r}, {check.name!r}"
            assert len(check.probes) == len(reasons), (where, check.probes, reasons)
            for name, reason in zip(check.probes, reasons, strict=True):
                assert (name, reason) in said, (where, name, reason)
                told.setdefault(name, set()).add(student)
        score, most = sum(c.points for c in checks), sum(c.max_points for c in checks)
        results.append(
            SubmissionResult(f"{student}.ipynb", stem, score, most, None, checks, student)
        )
    (lab,) = classreport.summarise(results)["labs"]
    assert {p["name"]: p["students"] for p in lab["probes"]} == {
        name: len(students) for name, students in told.items()
    }
