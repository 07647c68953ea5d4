"""Chapter 12's stored sweep against a re-run of some of it on another machine, torch version or
CPU kernel (``ATEN_CPU_CAPABILITY``): how far the numbers the chapter quotes hold elsewhere.

    python benchmarks/lm_sweep.py --only pre-3e-3 post-3e-3 --out /tmp/here.json
    python benchmarks/lm_sweep_compare.py /tmp/here.json [more.json ...]

For each re-run: the largest difference from the stored run in training loss (over every step),
in validation loss and (relative) in the largest attention logit, and whether the chapter's
verdict for that run (stalled: validation loss above 3.0 nats) is the same. Prints a report.

The chapter quotes ``benchmarks/results/lm_sweep_elsewhere.txt``: the report over the two
re-runs stored beside it (``--write`` rewrites it from them; a test checks that it is current)::

    python benchmarks/lm_sweep_compare.py --write
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "lm_sweep.json"
STALLED = 3.0  # the demo's and the chapter's threshold, in nats
REPORT = HERE / "results" / "lm_sweep_elsewhere.txt"
# The five configurations of the placement and QK-norm comparisons, three seeds each, re-run
# with ``--workers 1``: under torch 2.14.1 on this CPU's own kernels (AVX512), then with
# ATEN_CPU_CAPABILITY=default. Both ran just before lm_sweep.py recorded the kernels itself: their
# ``aten_cpu_capability`` was written in afterwards, from the command each ran under.
RERUNS = (
    HERE / "results" / "lm_sweep_torch2.14.1_avx512.json",
    HERE / "results" / "lm_sweep_torch2.14.1_default.json",
)


def compare(stored: dict, other: dict) -> list[str]:
    by_run = {(run["name"], run["seed"]): run for run in stored["runs"]}
    capability = other.get("aten_cpu_capability") or "(not set)"
    lines = [
        f"re-run: torch {other['torch']}, Python {other['python']}, "
        f"ATEN_CPU_CAPABILITY {capability}, {other['machine']}, {other['date']}",
        f"stored: torch {stored['torch']}, Python {stored['python']}, {stored['machine']}",
        f"{'configuration':>18} seed  max |d loss|  |d valid|  max rel d logit  stalled (stored -> re-run)",
    ]
    same = 0
    for run in other["runs"]:
        old = by_run[run["name"], run["seed"]]
        loss = max(abs(a - b) for a, b in zip(run["loss"], old["loss"], strict=True))
        valid = abs(run["valid"] - old["valid"])
        logit = max(
            abs(a - b) / max(abs(b), 1e-9)
            for a, b in zip(run["max_logit"], old["max_logit"], strict=True)
        )
        verdicts = (old["valid"] > STALLED, run["valid"] > STALLED)
        same += verdicts[0] == verdicts[1]
        lines.append(
            f"{run['name']:>18} {run['seed']:>4}  {loss:11.4f}  {valid:9.4f}  {logit:15.4f}"
            f"  {verdicts[0]!s:>5} -> {verdicts[1]!s}"
        )
    lines.append(f"same verdict in {same} of {len(other['runs'])} runs")
    lines.append("per configuration, median [min, max] over the seeds re-run (stored -> re-run):")
    names = dict.fromkeys(run["name"] for run in other["runs"])
    for name in names:
        seeds = [run["seed"] for run in other["runs"] if run["name"] == name]
        for what, value in (("valid loss", _valid), ("largest logit", _largest_logit)):
            old = summary([value(by_run[name, seed]) for seed in seeds])
            new = summary([value(run) for run in other["runs"] if run["name"] == name])
            lines.append(f"{name:>18}  {what:>13}  {old} -> {new}")
    return lines


def _valid(run: dict) -> float:
    return run["valid"]


def _largest_logit(run: dict) -> float:
    return max(run["max_logit"])


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def report(paths) -> str:
    stored = json.loads(RESULTS.read_text())
    return "\n\n".join("\n".join(compare(stored, json.loads(p.read_text()))) for p in paths) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--write"]:
        REPORT.write_text(report(RERUNS), encoding="utf-8")
        print(f"written to {REPORT}")
        return 0
    if not argv:
        print(__doc__)
        return 2
    print(report([Path(p) for p in argv]), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
