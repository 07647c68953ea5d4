"""benchmarks/suite_cpu.py: the suite's units, as the scheduler forms them, and its report."""

from __future__ import annotations

import json
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import suite_cpu  # noqa: E402

ADVERSARIAL = "tests/test_adversarial.py"


def test_units_are_the_schedulers():
    assert suite_cpu.unit("tests/test_grade.py::test_x[a-b]") == "tests/test_grade.py"
    assert suite_cpu.unit("notebooks/06_pre_post_ln.ipynb::Cell 3") == (
        "notebooks/06_pre_post_ln.ipynb"
    )
    # test_adversarial.py: per mode, its waiting tests and the rest (conftest.WAITING)
    assert suite_cpu.unit(f"{ADVERSARIAL}::test_corpus_has_every_kind[sandbox]") == ADVERSARIAL
    assert suite_cpu.unit(f"{ADVERSARIAL}::test_corpus_has_every_kind[processes]") == (
        f"{ADVERSARIAL}[processes]"
    )
    waiting = f"{ADVERSARIAL}::test_a_result_killed_from_outside_is_never_cached"
    assert suite_cpu.unit(f"{waiting}[processes-once]") == f"{ADVERSARIAL}[processes][waits]"
    assert suite_cpu.unit(f"{waiting}[sandbox-always]") == f"{ADVERSARIAL}[waits]"


def test_report_sums_each_units_tests_largest_first(tmp_path):
    def record(nodeid, worker, start, wall, cpu):
        return {"id": nodeid, "worker": worker, "start": start, "wall": wall, "cpu": cpu,
                "counted": "cgroup"}  # fmt: skip

    rows = {
        "gw0": [
            record("tests/test_a.py::one", "gw0", 100.0, 2.0, 1.5),
            record("tests/test_a.py::two", "gw0", 102.0, 3.0, 2.5),
        ],
        "gw1": [record("tests/test_b.py::one", "gw1", 101.0, 10.0, 6.0)],
    }
    for worker, records in rows.items():
        text = "".join(json.dumps(r) + "\n" for r in records)
        (tmp_path / f"{worker}.jsonl").write_text(text)
    lines = suite_cpu.report(tmp_path, wall=20.0, machine=12.0).splitlines()
    assert "CPU time counted to the tests: 10 s" in lines
    units = [line.split() for line in lines if line.startswith("tests/")]
    # unit, worker, start, end, wall, CPU s, share: test_b first (6.0 CPU s), then test_a (4.0)
    assert units == [
        ["tests/test_b.py", "gw1", "1", "11", "10", "6.0", "60.0%"],
        ["tests/test_a.py", "gw0", "0", "5", "5", "4.0", "40.0%"],
    ]
