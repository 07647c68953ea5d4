"""How fast does `normlab grade` go? One submission alone, and a class, in both isolation modes.

    python benchmarks/grading_throughput.py                  # both modes, 40 copies, --jobs 2
    python benchmarks/grading_throughput.py --copies 100 --jobs 4
    python benchmarks/grading_throughput.py --mode processes --repeats 9

Measured, for each mode (``sandbox``: ``--sandbox``, bubblewrap; ``processes``: ``--no-sandbox``,
the fork server):

- **one submission alone**: the LayerNorm solution graded by the command, the median wall time
  of ``--repeats`` runs, everything included (the interpreter's and the grader's own start-up,
  the probes of what this machine allows, the child's start-up, the notebook's cells, the
  checks; not PyTorch: lab 03 is a NumPy lab, whose oracle answers come from the memo);
- **a class**: ``--copies`` copies graded with ``--jobs`` workers, as wall seconds per class and
  per submission.

A busy machine inflates every wall-clock figure. So the same run also times three start-ups of
a bare interpreter (``python -c pass``, ``python -c 'import numpy'``, ``python -c 'import
torch'``, each the median of ``--repeats``, at the start and again at the end), and each figure
is also given as a ratio to the NumPy start-up: "9.5 x numpy" is nine and a half times as long
as a fresh interpreter took to import NumPy in this run. PyTorch's import is given for scale:
it was the floor of one submission alone until the oracle's answers for a NumPy lab's checks
were shipped (``normlab.grader.memo``); a lab written in PyTorch still imports it.

The course package's bytecode is compiled first, as an installation compiles it (``pip install``
writes it; where ``PYTHONDONTWRITEBYTECODE`` is set, an editable checkout would otherwise compile
the grader's forty-odd modules from source in every run: about 0.13 s of CPU).

As root, the processes mode is run with ``--allow-root`` (where ``nobody`` cannot run this
Python, the worked solution's code then runs as root: it is our own). Nothing here is a test:
no figure fails anything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "03_layernorm.ipynb"

#: the options of ``normlab grade`` that choose each mode
MODES = {
    "sandbox": ["--sandbox"],
    "processes": ["--no-sandbox"] + (["--allow-root"] if os.geteuid() == 0 else []),
}
#: the start-ups each figure is compared with
BASELINES = {
    "python -c pass": "pass",
    "python -c 'import numpy'": "import numpy",
    "python -c 'import torch'": "import torch",
}
RATIO_TO = "python -c 'import numpy'"
FLOOR = "python -c 'import torch'"

OPTIONS: list[str] = []  # extra options for `normlab grade` (bench.py's runs, --grade-option)


def seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def grade_command(folder: str, jobs: int, mode: list[str] | None = None) -> float:
    """Wall seconds of ``normlab grade FOLDER --jobs JOBS`` in ``mode`` (options)."""
    command = [sys.executable, "-m", "normlab.cli", "grade", folder, "--jobs", str(jobs)]
    return seconds(command + ["--quiet"] + (mode or []) + OPTIONS)


def one_submission_seconds(repeats: int, mode: list[str] | None = None) -> list[float]:
    return [grade_command(str(SOLUTION), 1, mode) for _ in range(repeats)]


def class_seconds(copies: int, jobs: int, mode: list[str] | None = None) -> float:
    with tempfile.TemporaryDirectory() as folder:
        for i in range(copies):
            (Path(folder) / f"student{i:03d}").mkdir()
            shutil.copy(SOLUTION, Path(folder) / f"student{i:03d}" / "03_layernorm.ipynb")
        return grade_command(folder, jobs, mode)


def compile_package() -> None:
    """Write the course package's bytecode (``__pycache__``, ignored by git), as pip does."""
    import compileall

    import normlab

    compileall.compile_dir(Path(normlab.__file__).parent, quiet=1)


def baselines(repeats: int) -> dict[str, float]:
    """Median wall seconds of each bare start-up, run in turn (so that load drift hits all)."""
    runs: dict[str, list[float]] = {name: [] for name in BASELINES}
    for _ in range(repeats):
        for name, code in BASELINES.items():
            runs[name].append(seconds([sys.executable, "-c", code]))
    return {name: statistics.median(values) for name, values in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mode", choices=(*MODES, "both"), default="both")
    parser.add_argument(
        "--grade-option", action="append", default=[], help="passed on to normlab grade"
    )
    args = parser.parse_args()
    OPTIONS.extend(args.grade_option)
    modes = list(MODES) if args.mode == "both" else [args.mode]
    if "sandbox" in modes and shutil.which("bwrap") is None:
        print("no bubblewrap here: the sandbox mode is left out")
        modes.remove("sandbox")

    compile_package()
    start = baselines(args.repeats)
    figures = {}
    for mode in modes:
        alone = one_submission_seconds(args.repeats, MODES[mode])
        whole = class_seconds(args.copies, args.jobs, MODES[mode])
        figures[mode] = alone, whole
    end = baselines(args.repeats)

    base = {name: (start[name] + end[name]) / 2 for name in BASELINES}
    unit = base[RATIO_TO]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"baselines (median of {args.repeats}, at the start / at the end of this run):")
    for name in BASELINES:
        print(f"  {name:<28} {start[name]:6.2f} / {end[name]:.2f} s")
    print(f"ratios ('x numpy') are to the mean of {RATIO_TO}: {unit:.2f} s")
    for mode, (alone, whole) in figures.items():
        median = statistics.median(alone)
        print(
            f"{mode}: one submission alone: median {median:.2f} s of {args.repeats} "
            f"(min {min(alone):.2f}, max {max(alone):.2f}), {median / unit:.1f} x numpy, "
            f"{median / base[FLOOR]:.2f} x import torch"
        )
        print(
            f"{mode}: {args.copies} submissions with --jobs {args.jobs}: {whole:.1f} s, "
            f"{whole / args.copies:.2f} s per submission ({whole / args.copies / unit:.1f} x numpy)"
        )
    print(f"load average (1 min) at the end: {load:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
