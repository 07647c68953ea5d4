"""Lab 11 on a real GPU: its checks on the compiled kernels, then the kernels' timings.

Run from the repository root on a machine with a CUDA GPU and Triton (``make kernels``)::

    make gpu-check                                   # or: python benchmarks/gpu_check.py
    python benchmarks/gpu_check.py --notebook work/11_triton_kernels.ipynb   # your own lab

Two steps, one results file:

1. **The checks, compiled.** The notebook (default ``solutions/11_triton_kernels.ipynb``) is
   executed top to bottom in a fresh kernel with ``TRITON_INTERPRET`` removed from its
   environment, so its first cell finds CUDA and Triton compiles every kernel for the GPU (the
   grader, ``normlab grade``, always uses the interpreter). Each ``check(...)`` cell's score line
   is kept, with any error a cell raised; then one more cell checks every graded name of lab 11
   the notebook defines at once: that score, with each check's line, is the verdict.
2. **The timings.** ``benchmarks/triton_norms.py`` (``--quick`` passes on) times the same
   notebook's kernels against PyTorch and a copy of the bytes, and writes its own table.

The results file ``benchmarks/results/gpu_check_<device>.txt`` starts with ``key: value`` lines
(device, compute capability, driver, CUDA, Python, torch, Triton, NumPy, normlab, date), then the
checks' scores, then the timing table.

Exit status: 0 when the whole-lab check reached full marks, no cell raised and the timings ran; 1 when a check
fell short, a cell raised or the benchmark failed; 3 when the machine has no CUDA GPU (nothing
is run; the message says so); 4 when Triton is not installed. ``--interpret`` runs the same two
steps on the CPU under Triton's interpreter (the benchmark on its tiny grid): a test of the
script, whose results are no GPU's; the file is written only where ``--out`` says.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_NOTEBOOK = ROOT / "solutions" / "11_triton_kernels.ipynb"
NO_GPU, NO_TRITON = 3, 4
SCORE = re.compile(r"^(?P<name>.+?): (?P<got>\d+(?:\.\d+)?)/(?P<out_of>\d+(?:\.\d+)?) points", re.M)


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine(interpret: bool) -> dict[str, str]:
    """What the results were measured on: device, driver, versions and date."""
    import torch

    facts = {
        "date (UTC)": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "mode": "interpreter (TRITON_INTERPRET=1, CPU)" if interpret else "compiled (CUDA)",
    }
    if interpret:
        facts["device"] = f"CPU ({platform.processor() or platform.machine()})"
    else:
        properties = torch.cuda.get_device_properties(0)
        facts["device"] = properties.name
        facts["compute capability"] = f"{properties.major}.{properties.minor}"
        facts["memory (GiB)"] = f"{properties.total_memory / 2**30:.0f}"
        facts["driver"] = nvidia_smi("driver_version")
        facts["CUDA (torch)"] = str(torch.version.cuda)
    facts["Python"] = platform.python_version()
    for package in ("torch", "triton", "numpy", "normlab"):
        facts[package] = version(package)
    return facts


def nvidia_smi(field: str) -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    return (
        done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else "unknown"
    )


# Run after the notebook's own cells: every graded name of lab 11 the notebook defines, in one
# check, so that the verdict is the whole lab's score whatever each part's cell reports.
WHOLE_LAB = """\
from normlab.grader.registry import all_labs as _all_labs

_names = _all_labs()["11_triton_kernels"].names
check(**{_name: globals()[_name] for _name in _names if _name in globals()})
"""


def cell_text(cell) -> str:
    """What a code cell printed or displayed, as plain text."""
    text = ""
    for output in cell.outputs:
        if output.get("output_type") == "stream":
            text += output.get("text", "")
        elif output.get("output_type") in ("display_data", "execute_result"):
            text += output.get("data", {}).get("text/plain", "") + "\n"
    return text


def run_checks(notebook: Path, interpret: bool) -> tuple[list[str], bool]:
    """Execute the notebook and a whole-lab check after it; return the report's lines and
    whether the whole lab reached full marks with no cell raising."""
    import nbformat
    from nbclient import NotebookClient

    environment = dict(os.environ)
    environment.pop("TRITON_INTERPRET", None)
    if interpret:
        environment["TRITON_INTERPRET"] = "1"
    book = nbformat.read(notebook, as_version=4)
    book.cells.append(nbformat.v4.new_code_cell(WHOLE_LAB))
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(environment)  # the kernel inherits this process's environment
    try:
        NotebookClient(
            book, timeout=1800, allow_errors=True, kernel_name="python3",
            resources={"metadata": {"path": str(notebook.parent)}},
        ).execute()  # fmt: skip
    finally:
        os.environ.clear()
        os.environ.update(saved)
    *cells, whole = [cell for cell in book.cells if cell.cell_type == "code"]
    lines, passed = ["### each check cell of the notebook, as it printed its score"], True
    for cell in cells:
        for error in (o for o in cell.outputs if o.get("output_type") == "error"):
            passed = False
            first = cell.source.strip().splitlines()[0][:70] if cell.source.strip() else ""
            lines.append(f"ERROR {error['ename']}: {error['evalue'][:200]} (cell: {first})")
        if "check(" in cell.source:
            lines += [match.group(0) for match in SCORE.finditer(cell_text(cell))]
    lines.append("### the whole lab, checked once after the notebook ran")
    text = cell_text(whole)
    scores = list(SCORE.finditer(text))
    for error in (o for o in whole.outputs if o.get("output_type") == "error"):
        passed = False
        lines.append(f"ERROR {error['ename']}: {error['evalue'][:200]} (the whole-lab check)")
    if not scores:
        passed = False
        lines.append("FAIL the whole-lab check printed no score")
    for match in scores:
        full = float(match["got"]) == float(match["out_of"])
        passed &= full
        lines.append(f"{'ok  ' if full else 'FAIL'} {match.group(0)}")
    lines += [f"  {line.strip()}" for line in text.splitlines()[1:] if line.strip()]
    return lines, passed


def run_benchmark(notebook: Path, interpret: bool, quick: bool) -> tuple[str, bool]:
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "triton_norms.py"),
        "--notebook",
        str(notebook),
    ]
    command += ["--interpret"] if interpret else (["--quick"] if quick else [])
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    text = done.stdout.strip()
    if done.returncode != 0:
        text += f"\n(benchmarks/triton_norms.py exited with status {done.returncode})\n"
        text += done.stderr.strip()[-3000:]
    return text, done.returncode == 0


def result_path(device: str) -> Path:
    """benchmarks/results/gpu_check_<device>.txt: ``NVIDIA H200`` -> ``gpu_check_h200.txt``."""
    slug = device.lower().removeprefix("nvidia").strip()
    slug = "".join(c if c.isalnum() else "_" for c in slug).strip("_")
    return ROOT / "benchmarks" / "results" / f"gpu_check_{slug}.txt"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--notebook", type=Path, default=DEFAULT_NOTEBOOK)
    parser.add_argument("--quick", action="store_true", help="the benchmark's two shapes only")
    parser.add_argument(
        "--interpret",
        action="store_true",
        help="no GPU needed: both steps on the CPU under Triton's interpreter (tests the script)",
    )
    parser.add_argument("--out", type=Path, default=None, help="where to write the results")
    args = parser.parse_args(argv)
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch

    if not args.interpret and not torch.cuda.is_available():
        print(
            "no CUDA GPU on this machine: nothing was run, no results were written. "
            "gpu-check runs lab 11's kernels compiled for a GPU; "
            "--interpret runs the same steps on the CPU under Triton's interpreter."
        )
        return NO_GPU
    try:
        import triton  # noqa: F401 - only to say clearly that it is missing
    except ImportError:
        print("Triton is not installed (make kernels): nothing was run")
        return NO_TRITON
    notebook = args.notebook.resolve()
    facts = machine(args.interpret)
    print(f"lab 11's checks on {facts['device']}, {facts['mode']}: {notebook.name}", flush=True)
    checks, checks_passed = run_checks(notebook, args.interpret)
    print("\n".join(checks), flush=True)
    print("timing the kernels (benchmarks/triton_norms.py)", flush=True)
    table, timed = run_benchmark(notebook, args.interpret, args.quick)
    header = [f"{key}: {value}" for key, value in facts.items()]
    header.append(
        f"notebook: {notebook.relative_to(ROOT) if notebook.is_relative_to(ROOT) else notebook}"
    )
    verdict = "full marks" if checks_passed else "a check fell short or a cell raised"
    text = "\n".join(
        [
            *header,
            "",
            f"## lab 11's checks ({verdict})",
            *checks,
            "",
            "## benchmarks/triton_norms.py",
            table,
        ]
    )
    out = args.out or (None if args.interpret else result_path(facts["device"]))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n", encoding="utf-8")
        print(f"written to {out}")
    print(table)
    return 0 if checks_passed and timed else 1


if __name__ == "__main__":
    sys.exit(main())
