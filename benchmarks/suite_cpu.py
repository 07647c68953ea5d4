"""Where `make test`'s time goes: the CPU time of each unit of the suite, every process counted.

    python benchmarks/suite_cpu.py                  # runs `make test`, then writes the report
    python benchmarks/suite_cpu.py --report-only    # the report of the last run's records

`time make test` and pytest's durations miss most of it: a test's graders, fork servers,
sandboxes, Jupyter kernels and browsers are processes that the test's own process never waits
for (a subreaper adopts them, a sandbox's init reaps them), so their CPU time reaches no
rusage. Here each pytest-xdist worker, as it starts, moves itself into a CPU-accounting cgroup
of its own (cgroup v1's ``cpuacct``: a child group counts towards its parent, so the graders'
own per-submission groups below it are counted too), and the CPU time of that group is read
before and after each test: every process a test starts, in whatever session or namespace, is
counted to that test. With no such cgroup (cgroup v2 only, or not root), the report says so and
counts what rusage sees: the worker and the children it waited for.

The report (benchmarks/results/suite_cpu.txt, ``--out`` to change) has the run's wall time, the
machine's CPU time over the run (``/proc/stat``), the CPU time the groups counted, and a line per
unit as the suite hands them out (a test file; tests/test_adversarial.py in four: conftest's
SPLIT_BY_MODE and WAITING), largest first: its worker, when it started and ended, its wall time
and its CPU time. The same workers take the same units on every run only on the same machine:
the figures are this machine's, and a change's effect is the difference of two such reports.

Used as a pytest plugin by the script (``-p suite_cpu`` with this folder on ``PYTHONPATH``,
records under ``$NORMLAB_SUITE_CPU``); it changes nothing of what the tests do.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ACCT = "/sys/fs/cgroup/cpuacct"
RECORDS = "NORMLAB_SUITE_CPU"

_group: str | None = None
_out = None


def _cpu_seconds() -> float:
    if _group is not None:
        with open(os.path.join(_group, "cpuacct.usage")) as stream:
            return int(stream.read()) / 1e9
    usage = os.times()
    return usage.user + usage.system + usage.children_user + usage.children_system


def pytest_configure(config):  # the plugin: in each worker (and the controller)
    global _group, _out
    folder = os.environ.get(RECORDS)
    if not folder:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    group = os.path.join(ACCT, f"normlab-suite-{os.getpid()}-{worker}")
    try:
        os.mkdir(group)
        with open(os.path.join(group, "cgroup.procs"), "w") as stream:
            stream.write(str(os.getpid()))
        _group = group
    except OSError:
        _group = None
    _out = open(os.path.join(folder, f"{worker}.jsonl"), "a")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _out is None:
        yield
        return
    before, started = _cpu_seconds(), time.monotonic()
    yield
    record = {
        "id": item.nodeid,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "start": started,
        "wall": time.monotonic() - started,
        "cpu": _cpu_seconds() - before,
        "counted": "cgroup" if _group else "rusage",
    }
    _out.write(json.dumps(record) + "\n")
    _out.flush()


def unit(nodeid: str) -> str:
    """The unit of the suite a test belongs to: tests/conftest.py's scheduler's own (``unit_of``),
    so that a test added to its SPLIT_BY_MODE or WAITING is a unit of this report too."""
    if str(ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests"))
    import conftest

    return conftest.unit_of(nodeid.split("::")[0], nodeid)


def machine_cpu() -> float:
    """CPU seconds the whole machine has spent (``/proc/stat``, every state but idle and iowait)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


def report(folder: Path, wall: float | None, machine: float | None) -> str:
    rows = []
    for path in sorted(folder.glob("*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines()]
    if not rows:
        return "no records: was the suite run with the plugin?"
    first = min(r["start"] for r in rows)
    units = collections.defaultdict(
        lambda: {"cpu": 0.0, "wall": 0.0, "start": float("inf"), "end": 0.0, "workers": set()}
    )
    for r in rows:
        u = units[unit(r["id"])]
        u["cpu"] += r["cpu"]
        u["wall"] += r["wall"]
        u["start"] = min(u["start"], r["start"] - first)
        u["end"] = max(u["end"], r["start"] - first + r["wall"])
        u["workers"].add(r["worker"])
    counted = {r["counted"] for r in rows}
    total = sum(u["cpu"] for u in units.values())
    lines = [
        "# Where make test's time goes",
        "",
        f"date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}",
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        f"tests: {len(rows)}, units: {len(units)}, workers: "
        f"{len({r['worker'] for r in rows})}, counted by: {', '.join(sorted(counted))}",
    ]
    if wall is not None:
        lines.append(f"wall time of make test: {wall:.0f} s")
    if machine is not None:
        lines.append(f"CPU time of the whole machine over the run: {machine:.0f} s")
    lines += [
        f"CPU time counted to the tests: {total:.0f} s",
        "",
        f"{'unit':58} {'worker':>6} {'start':>6} {'end':>6} {'wall':>6} {'CPU s':>6} {'share':>6}",
    ]
    for name, u in sorted(units.items(), key=lambda kv: -kv[1]["cpu"]):
        worker = ",".join(sorted(u["workers"]))
        lines.append(
            f"{name[:58]:58} {worker:>6} {u['start']:6.0f} {u['end']:6.0f} {u['wall']:6.0f} "
            f"{u['cpu']:6.1f} {u['cpu'] / total:6.1%}"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "suite_cpu.txt"))
    parser.add_argument("--records", default=str(ROOT / "build" / "suite_cpu"))
    parser.add_argument("--report-only", action="store_true")
    options = parser.parse_args(argv)
    folder = Path(options.records)
    wall = machine = None
    status = 0
    if not options.report_only:
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.jsonl"):
            old.unlink()
        environment = dict(os.environ, **{RECORDS: str(folder)})
        environment["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT / "benchmarks"), environment.get("PYTHONPATH")])
        )
        environment["PYTEST_ADDOPTS"] = " ".join(
            filter(None, [environment.get("PYTEST_ADDOPTS"), "-p suite_cpu"])
        )
        cpu_before, started = machine_cpu(), time.monotonic()
        done = subprocess.run(["make", "test"], cwd=ROOT, env=environment, check=False)
        wall, machine = time.monotonic() - started, machine_cpu() - cpu_before
        status = done.returncode
        if status != 0:
            print(f"make test failed (exit status {status})", file=sys.stderr)
    text = report(folder, wall, machine)
    for group in glob.glob(os.path.join(ACCT, "normlab-suite-*")):
        try:
            os.rmdir(group)  # empty once its worker has exited
        except OSError:
            pass
    Path(options.out).write_text(text, encoding="utf-8")
    print(text, end="")
    return status  # make test's: a report of a failed run is still written


if __name__ == "__main__":
    sys.exit(main())
