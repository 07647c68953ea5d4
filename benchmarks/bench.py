"""`make bench`: how long the course takes on this machine, in seconds and in baseline units.

    python benchmarks/bench.py                          # every notebook, then grading
    python benchmarks/bench.py --only grading --copies 20
    python benchmarks/bench.py --only notebooks --folders notebooks

What is measured:

- every notebook in solutions/, notebooks/ and labs/, executed top to bottom in a fresh kernel
  (as nbval does): wall seconds and the kernel's CPU seconds (user + system);
- ``normlab grade``: one submission graded alone (the median of a few runs, the grader's own
  start-up included) and a class of copies of the LayerNorm solution with ``--jobs`` workers,
  as seconds per class and per submission (benchmarks/grading_throughput.py does the grading).

A busy machine inflates every wall-clock figure. So a fixed workload (NumPy matrix products and
a pure-Python loop, about a second on a 2-core laptop) is timed at the start and at the end of
the same run, and each figure is also given as a ratio to it: "12.0 x baseline" means twelve
times as long as that workload took in this run. The two baseline runs disagree when the load
changed during the run; the report says by how much. The budgets (DESIGN: each notebook under
45 s, the course under 3 minutes, on a 2-core CPU) are compared with the seconds, for an idle
machine; nothing here fails a test.

The report goes to benchmarks/results/bench.json and bench.txt (``--out`` to change), and the
text is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grading_throughput  # noqa: E402

from normlab import chapter_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("solutions", "notebooks", "labs")
NOTEBOOK_BUDGET_S = 45
COURSE_BUDGET_S = 180
CELL_HANG_GUARD_S = 1800  # only stops a notebook that hangs; not a speed target


def children_cpu() -> float:
    """CPU seconds (user + system) of every finished child process so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def baseline_workload() -> dict:
    """A fixed piece of work: the yardstick each figure is divided by."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 300))
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(40):
        a = a @ a
        a /= np.abs(a).max()
    total = 0
    for i in range(3_000_000):
        total += i % 7
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}


def run_notebook(path: Path) -> dict:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_HANG_GUARD_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    cpu, wall = children_cpu(), time.perf_counter()
    error = None
    try:
        client.execute()
    except Exception as exc:  # report it and go on: the suite, not the benchmark, judges
        error = f"{type(exc).__name__}: {exc}"[-300:]
    # The kernel has been shut down and reaped by now, so its CPU time is in RUSAGE_CHILDREN.
    return {
        "wall_s": time.perf_counter() - wall,
        "cpu_s": children_cpu() - cpu,
        "error": error,
    }


def timed_children(function, *args):
    cpu, wall = children_cpu(), time.perf_counter()
    value = function(*args)
    return value, time.perf_counter() - wall, children_cpu() - cpu


def grading(copies: int, jobs: int, repeats: int) -> dict:
    alone, _, alone_cpu = timed_children(grading_throughput.one_submission_seconds, repeats)
    class_wall, _, class_cpu = timed_children(grading_throughput.class_seconds, copies, jobs)
    return {
        "one_submission": {
            "median_wall_s": statistics.median(alone),
            "min_wall_s": min(alone),
            "max_wall_s": max(alone),
            "cpu_s": alone_cpu / repeats,
            "runs": repeats,
        },
        "class": {
            "copies": copies,
            "jobs": jobs,
            "wall_s": class_wall,
            "cpu_s": class_cpu,
            "wall_s_per_submission": class_wall / copies,
            "cpu_s_per_submission": class_cpu / copies,
        },
    }


def machine() -> dict:
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    for name in ("numpy", "torch"):
        try:
            info[name] = __import__(name).__version__
        except ImportError:
            pass
    return info


def to_text(report: dict) -> str:
    base = report["baseline"]["wall_s"]
    lines = [
        "normlab benchmark (benchmarks/bench.py)",
        "machine: " + ", ".join(f"{k} {v}" for k, v in report["machine"].items()),
        f"baseline workload: start {report['baseline']['start']['wall_s']:.2f} s, "
        f"end {report['baseline']['end']['wall_s']:.2f} s wall "
        f"(drift {report['baseline']['drift']:+.0%}), {report['baseline']['start']['cpu_s']:.2f} and "
        f"{report['baseline']['end']['cpu_s']:.2f} cpu s; ratios below are to the mean wall, {base:.2f} s",
        "seconds are wall clock unless marked cpu; a loaded machine inflates wall seconds, less so "
        "the ratios and the cpu seconds",
    ]
    # Budgets are for an idle machine: judged only when the run started on one.
    info = report["machine"]
    idle = info["load_average_at_start"][0] < (info["cpus_usable"] or 1)
    if "notebooks" in report:
        lines += ["", f"notebooks (budget {NOTEBOOK_BUDGET_S} s each on an idle 2-core CPU):"]
        if not idle:
            lines.append("  (the machine was busy when the run started: budgets not judged)")
        lines.append(f"  {'notebook':<34} {'wall s':>8} {'cpu s':>8} {'x base':>8}")
        for name, row in report["notebooks"]["each"].items():
            flag = "  over budget" if idle and row["wall_s"] > NOTEBOOK_BUDGET_S else ""
            flag += f"  ERROR {row['error']}" if row["error"] else ""
            lines.append(
                f"  {name:<34} {row['wall_s']:>8.1f} {row['cpu_s']:>8.1f} "
                f"{row['wall_s'] / base:>8.1f}{flag}"
            )
        for folder, row in report["notebooks"]["total"].items():
            budget = f" (course budget {COURSE_BUDGET_S} s)" if folder == "notebooks" else ""
            lines.append(
                f"  {'total ' + folder + '/':<34} {row['wall_s']:>8.1f} {row['cpu_s']:>8.1f} "
                f"{row['wall_s'] / base:>8.1f}{budget}"
            )
    if "grading" in report:
        one, whole = report["grading"]["one_submission"], report["grading"]["class"]
        lines += [
            "",
            "grading (normlab grade, LayerNorm solution):",
            f"  one submission alone: median {one['median_wall_s']:.2f} s "
            f"(min {one['min_wall_s']:.2f}, max {one['max_wall_s']:.2f}, {one['runs']} runs), "
            f"{one['cpu_s']:.2f} cpu s, {one['median_wall_s'] / base:.1f} x base",
            f"  class of {whole['copies']} with --jobs {whole['jobs']}: {whole['wall_s']:.1f} s "
            f"({whole['cpu_s']:.1f} cpu s), {whole['wall_s'] / base:.1f} x base",
            f"  per submission in the class: {whole['wall_s_per_submission']:.2f} s "
            f"({whole['cpu_s_per_submission']:.2f} cpu s), "
            f"{whole['wall_s_per_submission'] / base:.2f} x base",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    # Timing the demos redraws their figures: leave the chapter's files as they are.
    os.environ["NORMLAB_FIGURES"] = "keep"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("notebooks", "grading"), help="measure one part only")
    parser.add_argument(
        "--folders", nargs="+", default=list(FOLDERS), help="notebook folders to run"
    )
    parser.add_argument("--copies", type=int, default=100, help="class size for grading")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--repeats", type=int, default=5, help="runs of one submission alone")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench")
    parser.add_argument(
        "--text-from", type=Path, metavar="JSON", help="only rewrite the text of a saved report"
    )
    args = parser.parse_args(argv)
    if args.text_from:
        text = to_text(json.loads(args.text_from.read_text()))
        args.text_from.with_suffix(".txt").write_text(text)
        print(text, end="")
        return 0

    report: dict = {"machine": machine()}
    start = baseline_workload()
    if args.only in (None, "notebooks"):
        each, total = {}, {}
        for folder in args.folders:
            total[folder] = {"wall_s": 0.0, "cpu_s": 0.0}
            for path in chapter_files(ROOT / folder, ".ipynb"):
                print(f"running {folder}/{path.name} ...", file=sys.stderr, flush=True)
                row = run_notebook(path)
                each[f"{folder}/{path.stem}"] = row
                total[folder]["wall_s"] += row["wall_s"]
                total[folder]["cpu_s"] += row["cpu_s"]
        report["notebooks"] = {"each": each, "total": total}
    if args.only in (None, "grading"):
        print("grading ...", file=sys.stderr, flush=True)
        report["grading"] = grading(args.copies, args.jobs, args.repeats)
    end = baseline_workload()
    report["baseline"] = {
        "start": start,
        "end": end,
        "wall_s": (start["wall_s"] + end["wall_s"]) / 2,
        "drift": end["wall_s"] / start["wall_s"] - 1,
    }
    text = to_text(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    args.out.with_suffix(".txt").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
