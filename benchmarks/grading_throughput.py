"""How fast does `normlab grade` go? Seconds per submission and for a class.

    python benchmarks/grading_throughput.py            # 100 copies of the LayerNorm solution
    python benchmarks/grading_throughput.py --copies 20 --jobs 2
    python benchmarks/grading_throughput.py --grade-option=--no-sandbox   # plain processes

Prints the median seconds of one submission graded alone by the command (everything included:
the grader's own start-up, the fork server's imports, the child, the checks), then the wall time
of grading the whole class with ``--jobs`` workers (one fork server shared by all).
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


OPTIONS: list[str] = []  # extra options for `normlab grade` (e.g. --no-sandbox)


def grade_command(folder: str, jobs: int) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "normlab.cli", "grade", folder, "--jobs", str(jobs), "--quiet"]
        + OPTIONS,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def one_submission_seconds(repeats: int) -> list[float]:
    return [grade_command(str(SOLUTION), 1) for _ in range(repeats)]


def class_seconds(copies: int, jobs: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        for i in range(copies):
            (Path(folder) / f"student{i:03d}").mkdir()
            shutil.copy(SOLUTION, Path(folder) / f"student{i:03d}" / "03_layernorm.ipynb")
        return grade_command(folder, jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--grade-option", action="append", default=[], help="passed on to normlab grade"
    )
    args = parser.parse_args()
    OPTIONS.extend(args.grade_option)
    alone = one_submission_seconds(args.repeats)
    print(
        f"one submission alone: median {statistics.median(alone):.2f} s "
        f"(min {min(alone):.2f}, max {max(alone):.2f}, {args.repeats} runs)"
    )
    total = class_seconds(args.copies, args.jobs)
    print(
        f"{args.copies} submissions with --jobs {args.jobs}: {total:.1f} s "
        f"({total / args.copies:.2f} s per submission)"
    )


if __name__ == "__main__":
    main()
