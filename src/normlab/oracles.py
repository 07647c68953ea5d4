"""Write or check the oracle's memo (``normlab/grader/oracle_memo/``), for authors.

    python -m normlab.oracles            # grade each NumPy lab's solution; write the memo files
    python -m normlab.oracles --check    # recompute every entry with PyTorch; exit 1 on a difference

Writing grades each NumPy lab's solution notebook (``solutions/<stem>.ipynb``) with ``normlab
grade``'s own engine, one at a time, while every oracle call is recorded with its inputs and the
answer PyTorch gives (``memo.recording``); then each check module's calls are written to its
file, and the file of a module that no longer records any is removed. A solution that does not
earn every point is an error, and nothing is written. Run it (``make oracles``) after changing
an oracle, the inputs a check generates, or a lab's solution; ``tests/test_oracle_memo.py``
says when it is due. Labs written in PyTorch (``Lab.torch``) import it in their process anyway
and get no memo.

``--check`` is what the test runs: every entry's key recomputed from its stored inputs, its
oracle found as declared now, and its answer recomputed with PyTorch and compared within a few
units in the last place (``memo.verify``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from normlab.grader import memo
from normlab.grader.registry import all_labs


def numpy_labs(stems=()) -> list[str]:
    """The labs whose graded code is NumPy (``Lab.torch`` False), or those of ``stems``."""
    chosen = [stem for stem, lab in all_labs().items() if not lab.torch]
    return [stem for stem in chosen if not stems or stem in stems]


def record(root: Path, stems=()) -> dict[str, dict[str, dict]]:
    """Every oracle call made while each NumPy lab's solution is graded (module -> key -> entry).

    Raises ValueError when a solution does not earn every point (its calls would not be those
    that a right answer makes).
    """
    from normlab.grader.grade import Settings, grade_paths

    calls: dict[str, dict[str, dict]] = {}
    # The solutions are our own code: where the grader runs as root, they may run as root.
    settings = Settings(allow_root=hasattr(os, "geteuid") and os.geteuid() == 0)
    for stem in numpy_labs(stems):
        solution = root / "solutions" / f"{stem}.ipynb"
        with memo.recording() as recorded:
            (result,) = grade_paths([solution], settings, jobs=1)
        if result.error or result.score != result.max_score:
            raise ValueError(
                f"{stem}: the solution earns {result.score}/{result.max_score} "
                f"({result.error or 'a check failed'}): nothing written"
            )
        for module, entries in recorded.items():
            calls.setdefault(module, {}).update(entries)
        print(f"{stem}: {sum(len(e) for e in recorded.values())} oracle calls", file=sys.stderr)
    return calls


def write_all(root: Path, folder: Path = memo.MEMO_DIR) -> list[Path]:
    """Record every NumPy lab's oracle calls and write the memo files; returns them."""
    calls = record(root)
    written = [memo.write(module, entries, folder) for module, entries in sorted(calls.items())]
    for stale in sorted(set(folder.glob("*.npz")) - set(written)):
        stale.unlink()
    memo.forget()
    return written


def check_all(folder: Path = memo.MEMO_DIR) -> list[str]:
    """The problems of every memo file (``memo.verify``); empty when all are right."""
    all_labs()  # declares every oracle
    return [problem for path in sorted(folder.glob("*.npz")) for problem in memo.verify(path)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="recompute and compare; exit 1")
    parser.add_argument("--root", default=".", help="the course checkout (default: .)")
    args = parser.parse_args(argv)
    if args.check:
        problems = check_all()
        for problem in problems:
            print(problem, file=sys.stderr)
        count = sum(1 for _ in memo.MEMO_DIR.glob("*.npz"))
        print(f"{count} memo files, {len(problems)} problems", file=sys.stderr)
        return 1 if problems else 0
    try:
        written = write_all(Path(args.root))
    except ValueError as error:
        print(f"normlab.oracles: {error}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path} ({path.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
