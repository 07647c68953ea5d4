"""The oracle's memo (``normlab.grader.memo``): right, complete, exact, and never needed.

- every stored entry is what PyTorch computes now (``python -m normlab.oracles --check``), and an
  entry altered in any way (its answer, its inputs, its oracle's code) is caught;
- grading each NumPy lab's solution with ``normlab grade`` asks the memo only questions it
  holds: the grader never imports PyTorch, and the solution earns every point;
- a question the memo does not hold (any other input, however close) is computed with PyTorch,
  and grades exactly as the memo's answer would: a notebook is graded the same with and without
  the memo, right or wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, grading_budget

from normlab import oracles
from normlab.grader import memo
from normlab.grader.checks import layernorm
from normlab.grader.registry import all_labs

pytestmark = pytest.mark.isolation

#: ``normlab grade --json`` in a fresh interpreter, then whether it imported PyTorch and which
#: oracles missed; ``MEMO`` (a folder) replaces the memo's when given
GRADE_AND_REPORT = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from pathlib import Path
    from normlab.grader import memo
    if {memo_dir!r}:
        memo.MEMO_DIR = Path({memo_dir!r})
    from normlab.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main({arguments!r})
    print(json.dumps({{"code": code, "grade": json.loads(out.getvalue()),
                      "torch": "torch" in sys.modules, "misses": memo.misses}}))
    """
)


def grade_fresh(notebook: Path, memo_dir: Path | None = None) -> dict:
    """Grade one notebook as ``normlab grade --json`` does, in an interpreter of its own (this
    one imported PyTorch long ago), as the grading user: processes where it runs as root."""
    arguments = ["grade", str(notebook), "--json", "--no-sandbox", *grading_budget()]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        arguments.append("--allow-root")
    code = GRADE_AND_REPORT.format(memo_dir=str(memo_dir or ""), arguments=arguments)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


NUMPY_LABS = oracles.numpy_labs()


# ----------------------------------------------------------------------------- right


def test_every_entry_is_what_torch_computes():
    assert sorted(p.stem for p in memo.MEMO_DIR.glob("*.npz")), "no memo files"
    assert oracles.check_all() == []


def _altered_copy(tmp_path: Path, change) -> Path:
    """layernorm.npz with ``change(index, arrays)`` applied to its index and arrays."""
    with np.load(memo.MEMO_DIR / "layernorm.npz", allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    index = json.loads(str(arrays.pop("index")[()]))
    change(index, arrays)
    path = tmp_path / "layernorm.npz"
    np.savez_compressed(path, index=np.array(json.dumps(index)), **arrays)
    return path


def _first(index: dict, oracle_name: str) -> str:
    return next(k for k, e in index["entries"].items() if f":{oracle_name}:" in e["oracle"])


def test_an_answer_off_by_a_billionth_is_caught(tmp_path):
    def nudge(index, arrays):
        key = _first(index, "oracle_forward")
        arrays[f"{key}.out0"] = arrays[f"{key}.out0"] * (1 + 1e-9)

    problems = memo.verify(_altered_copy(tmp_path, nudge))
    assert len(problems) == 1
    assert "oracle_forward" in problems[0] and "stored and computed differ by up to" in problems[0]


def test_an_answer_moved_to_another_entry_is_caught(tmp_path):
    """Two entries' answers swapped (a table whose answers are right, under the wrong keys)."""

    def swap(index, arrays):
        entries = index["entries"].items()
        first, second = [k for k, e in entries if ":oracle_forward:" in e["oracle"]][:2]
        a, b = arrays[f"{first}.out0"], arrays[f"{second}.out0"]
        arrays[f"{first}.out0"], arrays[f"{second}.out0"] = b, a

    problems = memo.verify(_altered_copy(tmp_path, swap))
    assert len(problems) == 2, problems


def test_an_input_altered_is_caught(tmp_path):
    def nudge(index, arrays):
        key = _first(index, "oracle_backward")
        arrays[f"{key}.in0"] = arrays[f"{key}.in0"] + 1.0

    (problem,) = memo.verify(_altered_copy(tmp_path, nudge))
    assert "its key is not that of its inputs" in problem


def test_an_entry_of_an_oracle_whose_code_changed_is_caught(tmp_path):
    def rename(index, arrays):
        """The entry as an earlier version of the oracle recorded it, under its own key."""
        key = _first(index, "oracle_d2_xhat")
        entry = index["entries"].pop(key)
        entry["oracle"] = entry["oracle"].rsplit(":", 1)[0] + ":0123456789abcdef"
        count = memo._count(entry["call"], "array", "scalar")
        inputs = [arrays[f"{key}.in{i}"] for i in range(count)]
        moved = memo.digest(entry["oracle"], entry["call"], inputs)
        index["entries"][moved] = entry
        for name in [name for name in arrays if name.startswith(key)]:
            arrays[moved + name[len(key) :]] = arrays.pop(name)

    (problem,) = memo.verify(_altered_copy(tmp_path, rename))
    assert "no such oracle now (its code changed): rebuild" in problem


def test_an_oracle_that_changes_its_arguments_is_refused():
    @memo.oracle(name="test_changes_its_argument")
    def changes(x):
        x += 1.0
        return x * 2

    with memo.recording(), pytest.raises(ValueError, match="changed its arguments"):
        changes(np.zeros(3))


def test_the_fingerprint_follows_the_code_and_the_closure():
    def make(axis):
        def forward(x):
            return x.mean(axis=axis)

        return forward

    assert memo.fingerprint(make(0)) == memo.fingerprint(make(0))
    assert memo.fingerprint(make(0)) != memo.fingerprint(make(-1))

    def other(x):
        return x.mean(axis=1)

    assert memo.fingerprint(make(1)) != memo.fingerprint(other)


# ----------------------------------------------------------------------------- exact


def _stored_call(oracle_name: str):
    """A call the memo holds: (args, kwargs) of layernorm's first entry of that oracle."""
    with np.load(memo.MEMO_DIR / "layernorm.npz", allow_pickle=False) as archive:
        index = json.loads(str(archive["index"][()]))
        key = _first(index, oracle_name)
        entry = index["entries"][key]
        inputs = [
            archive[f"{key}.in{i}"] for i in range(memo._count(entry["call"], "array", "scalar"))
        ]
    args, kwargs = (memo.decode(part, lambda i: inputs[i].copy()) for part in entry["call"])
    return args, kwargs


def test_a_hit_is_the_exact_call_only():
    args, kwargs = _stored_call("oracle_forward")
    memo.misses.clear()
    hit = layernorm.oracle_forward(*args, **kwargs)
    assert memo.misses == []
    computed = layernorm.oracle_forward.__wrapped__(*args, **kwargs)
    np.testing.assert_allclose(hit, computed, rtol=1e-14, atol=1e-14)

    x = args[0]
    one_ulp = x.copy()
    one_ulp.flat[0] = np.nextafter(one_ulp.flat[0], np.inf)
    variants = [
        ((one_ulp, *args[1:]), kwargs),  # one bit of one input
        ((x.astype(np.float32), *args[1:]), kwargs),  # the same values, another dtype
        ((x.reshape(1, *x.shape), *args[1:]), kwargs),  # the same bytes, another shape
        (args, {**kwargs, "eps": float(np.nextafter(kwargs.get("eps", 1e-5), 1))}),
    ]
    for variant_args, variant_kwargs in variants:
        memo.misses.clear()
        answer = layernorm.oracle_forward(*variant_args, **variant_kwargs)
        assert memo.misses == [layernorm.oracle_forward.memo_identity]
        np.testing.assert_array_equal(
            answer, layernorm.oracle_forward.__wrapped__(*variant_args, **variant_kwargs)
        )


def test_an_argument_the_key_cannot_describe_is_a_miss():
    import torch

    args, kwargs = _stored_call("oracle_forward")
    memo.misses.clear()
    layernorm.oracle_forward(torch.tensor(args[0]), *args[1:], **kwargs)
    assert memo.misses == [layernorm.oracle_forward.memo_identity]


# ----------------------------------------------------------------------------- complete


@pytest.mark.parametrize("stem", NUMPY_LABS)
def test_a_numpy_labs_solution_is_graded_without_torch(stem):
    run = grade_fresh(ROOT / "solutions" / f"{stem}.ipynb")
    (submission,) = run["grade"]["submissions"]
    assert (submission["score"], submission["error"]) == (submission["max_score"], None)
    assert run["misses"] == [], f"rebuild the memo: python -m normlab.oracles ({run['misses']})"
    assert run["torch"] is False


def test_the_labs_without_a_memo_are_those_written_in_pytorch():
    assert set(all_labs()) - set(NUMPY_LABS) == {
        stem for stem, lab in all_labs().items() if lab.torch
    }


# ----------------------------------------------------------------------------- never needed


UNBIASED = (
    "var = (centred**2).mean(axis=-1, keepdims=True)",
    "var = (centred**2).sum(axis=-1, keepdims=True) / (x.shape[-1] - 1)",
)


@pytest.mark.parametrize("bug", [None, UNBIASED], ids=["solution", "unbiased variance"])
def test_graded_the_same_without_the_memo(tmp_path, bug):
    """The solution, and the solution with an unbiased variance: the same JSON with the memo
    and with none (every oracle computed with PyTorch, which the grader then imports)."""
    notebook = tmp_path / "03_layernorm.ipynb"
    shutil.copy(ROOT / "solutions" / "03_layernorm.ipynb", notebook)
    if bug is not None:
        text = notebook.read_text(encoding="utf-8")
        assert bug[0] in text
        notebook.write_text(text.replace(bug[0], bug[1], 1), encoding="utf-8")
    with_memo = grade_fresh(notebook)
    empty = tmp_path / "no-memo"
    empty.mkdir()
    without = grade_fresh(notebook, empty)
    assert without["torch"] is True and len(without["misses"]) > 0
    assert with_memo["grade"] == without["grade"]
    if bug is not None:
        assert with_memo["grade"]["submissions"][0]["score"] < 16


def test_without_the_memo_a_numpy_lab_imports_pytorch_beside_its_child(tmp_path, monkeypatch):
    """The student edition ships no memo: there ``normlab grade`` imports PyTorch in the
    background for a NumPy lab too, beside the child's start-up, as before the memo, rather
    than at the oracle's first miss, after the cells."""
    from types import SimpleNamespace

    from normlab import cli
    from normlab.grader import memo

    entries = [SimpleNamespace(identity=SimpleNamespace(lab="03_layernorm"))] * 3
    assert memo.shipped() and not cli._oracle_may_need_torch(entries)
    monkeypatch.setattr(memo, "MEMO_DIR", tmp_path)
    assert not memo.shipped() and cli._oracle_may_need_torch(entries)


def test_an_integer_too_long_to_write_is_a_miss_not_an_error():
    """An argument the key cannot write (an int of 5,000 digits: ``str`` refuses it) is a miss,
    computed as without a memo, never an error of the grader's."""
    from normlab.grader import memo

    @memo.oracle(name="test_an_integer_too_long_to_write")
    def plus_one(n):
        return n + 1

    huge = 10**5000
    assert plus_one(huge) == huge + 1
    assert plus_one(41) == 42
