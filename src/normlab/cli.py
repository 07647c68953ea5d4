"""The ``normlab`` command: ``normlab grade ...`` and ``normlab labs [--check]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _grade(args) -> int:
    from normlab.grader import report
    from normlab.grader.grade import UsageError, grade_paths

    def progress(result):
        if not args.json and sys.stderr.isatty():
            print(f"graded {result.path}: {result.score}/{result.max_score}", file=sys.stderr)

    try:
        results = grade_paths(
            args.paths, timeout=args.timeout, memory_mb=args.memory, progress=progress
        )
    except UsageError as error:
        print(f"normlab grade: {error}", file=sys.stderr)
        return 2
    if args.csv:
        path = Path(args.csv)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(report.to_csv(results), encoding="utf-8")
        tmp.replace(path)  # atomic: an interrupted run leaves the old gradebook whole
    if args.json:
        print(report.to_json(results))
    else:
        print(report.to_table(results, verbose=not args.quiet))
    return 0


def _labs(args) -> int:
    from normlab.build import build_all

    return build_all(Path(args.root), check=args.check)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="normlab", description="The normlab course tools.")
    commands = parser.add_subparsers(dest="command", required=True)

    grade = commands.add_parser(
        "grade",
        help="grade notebooks (each in its own sandboxed process)",
        description="Grade lab notebooks. PATH is a notebook or a folder searched for notebooks. "
        "The lab is recognised from the notebook's metadata or its file name (03_layernorm...). "
        "Exit status 0 whenever grading ran, whatever the scores; 2 for usage errors.",
    )
    grade.add_argument("paths", nargs="+", metavar="PATH")
    grade.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    grade.add_argument("--csv", metavar="FILE", help="also write a CSV gradebook")
    grade.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="wall-time budget per submission in seconds (default 60)",
    )
    grade.add_argument(
        "--memory",
        type=int,
        default=3072,
        metavar="MB",
        help="memory limit per submission in MB (default 3072)",
    )
    grade.add_argument("--quiet", action="store_true", help="table without the failed checks")
    grade.set_defaults(run=_grade)

    labs = commands.add_parser("labs", help="generate labs/ from solutions/ (or --check staleness)")
    labs.add_argument("--check", action="store_true", help="exit 1 if labs/ is not up to date")
    labs.add_argument("--root", default=".", help="the course checkout (default: .)")
    labs.set_defaults(run=_labs)

    args = parser.parse_args(argv)
    if getattr(args, "timeout", 1) is not None and getattr(args, "timeout", 1) <= 0:
        parser.error("--timeout must be positive")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
