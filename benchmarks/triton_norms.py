"""Time the Triton norm kernels of lab 11 on a GPU against PyTorch and a copy of the same bytes.

Run from the repository root, on a machine with a CUDA GPU and Triton (``make kernels``)::

    python benchmarks/triton_norms.py                  # full grid, writes benchmarks/results/
    python benchmarks/triton_norms.py --quick          # two shapes, few repeats
    python benchmarks/triton_norms.py --notebook work/11_triton_kernels.ipynb   # your own lab

The kernels are read from a notebook (default ``solutions/11_triton_kernels.ipynb``): its code
cells are executed in order in one namespace, except the cells tagged ``runs-learner-code`` (the
``check(...)`` cells), and the names ``tri_rmsnorm_forward``, ``tri_rmsnorm_backward``,
``tri_layernorm_forward`` and ``tri_layernorm_backward`` are taken from it. Each is compared with
PyTorch in float32 before it is timed (y; dx, dγ and dβ); a kernel whose result differs is reported, not timed.

For each shape (M, N) and dtype (float32, bfloat16) the rows are: ``copy`` (``y.copy_(x)``, the
floor of anything that reads x once and writes y once), the forward kernels, ``F.rms_norm`` /
``F.layer_norm``, ``torch.compile`` of the eager norm of ``benchmarks/norm_cost.py``, and the
backward kernels against autograd's backward of the PyTorch norms. The output, a text file
``benchmarks/results/triton_<device>.txt``, has a header of ``key: value`` lines (device, SMs,
versions, date, load, repeats) and one line per row::

    M      N     dtype     implementation            median us   GB/s  x copy  of peak

* ``GB/s`` counts the bytes the kernel must move by the chapter's model (forward: read x,
  write y; backward: read dy and x, write dx; the small per-row statistics left out), whatever
  the implementation really moves; for ``copy`` it is the device's real bandwidth.
* ``x copy`` is the time divided by the time of the copy of x at the same shape and dtype, in
  the same run (a backward kernel moves 3 passes, the copy 2: its floor is 1.5).
* ``of peak`` is ``GB/s`` divided by the device's peak bandwidth from ``PEAK_BANDWIDTH`` (``-``
  for a device not in the table).

Without a CUDA GPU the script says so, times nothing and exits with status 0. ``--interpret``
runs the same code on the CPU under Triton's interpreter (``TRITON_INTERPRET=1``), on a tiny
grid, without ``torch.compile``: a test of the script, whose times mean nothing.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_NOTEBOOK = ROOT / "solutions" / "11_triton_kernels.ipynb"
EPS = 1e-5
LEARNER_NAMES = (
    "tri_rmsnorm_forward",
    "tri_rmsnorm_backward",
    "tri_layernorm_forward",
    "tri_layernorm_backward",
)
#: byte/s, by the name torch.cuda.get_device_name() returns; the H200's is NVIDIA's datasheet
#: figure that chapter 07 uses
PEAK_BANDWIDTH = {"NVIDIA H200": 4.8e12}
FULL_GRID = [(4096, n) for n in (128, 512, 768, 1000, 2048, 4096, 8192)] + [(32768, 768)]
QUICK_GRID = [(4096, 768), (32768, 768)]
INTERPRET_GRID = [(3, 100)]
DTYPES = ("float32", "bfloat16")


def load_learner_kernels(notebook: Path) -> dict:
    """Execute the notebook's definition cells; return the lab's four wrappers by name.

    Raises:
        ValueError: the notebook cannot be read, a cell fails, or a name is missing.
    """
    import nbformat

    try:
        cells = nbformat.read(notebook, as_version=4).cells
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read {notebook}: {error}") from None
    namespace: dict = {"__name__": "learner_notebook"}
    for index, cell in enumerate(cells):
        if cell.cell_type != "code" or "runs-learner-code" in cell.metadata.get("tags", []):
            continue
        # IPython magics and shell lines are not Python: leave them out, as the grader does
        source = "\n".join(
            "" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.split("\n")
        )
        try:
            exec(compile(source, f"<{notebook.name} cell {index}>", "exec"), namespace)
        except Exception as error:  # noqa: BLE001 - any failure is the notebook's, reported
            raise ValueError(
                f"{notebook}, code cell {index}: {type(error).__name__}: {error}"
            ) from None
    missing = [name for name in LEARNER_NAMES if not callable(namespace.get(name))]
    if missing:
        raise ValueError(f"{notebook} does not define {', '.join(missing)}")
    return {name: namespace[name] for name in LEARNER_NAMES}


def _agrees(result, reference, dtype_name: str) -> bool:
    tolerance = 2e-2 if dtype_name == "bfloat16" else 1e-4
    scale = max(1.0, reference.abs().max().item())
    return (result.float() - reference.float()).abs().max().item() <= tolerance * scale


def shape_rows(kernels: dict, m: int, n: int, dtype_name: str, device: str, compile_: bool):
    """name -> (passes of the model, zero-argument callable), and notes, for one shape."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import norm_cost  # the eager norms that chapter 07's benchmark compiles

    dtype = getattr(torch, dtype_name)
    generator = torch.Generator().manual_seed(m * 100003 + n)
    x = (torch.randn(m, n, generator=generator) * 2 + 0.5).to(device, dtype)
    dy = torch.randn(m, n, generator=generator).to(device, dtype)
    weight = (1 + 0.1 * torch.randn(n, generator=generator)).to(device)
    bias = (0.1 * torch.randn(n, generator=generator)).to(device)
    weight_x, bias_x = weight.to(dtype), bias.to(dtype)  # PyTorch's norms want one dtype
    out = torch.empty_like(x)
    notes = []

    rms_reference = F.rms_norm(x.float(), (n,), weight, EPS)
    layer_reference = F.layer_norm(x.float(), (n,), weight, bias, EPS)
    rms_y, rms_rstd = kernels["tri_rmsnorm_forward"](x, weight, EPS)
    layer_y, layer_mean, layer_rstd = kernels["tri_layernorm_forward"](x, weight, bias, EPS)
    learner = {
        "tri_rmsnorm_forward": (
            2,
            lambda: kernels["tri_rmsnorm_forward"](x, weight, EPS),
            _agrees(rms_y, rms_reference, dtype_name),
        ),
        "tri_layernorm_forward": (
            2,
            lambda: kernels["tri_layernorm_forward"](x, weight, bias, EPS),
            _agrees(layer_y, layer_reference, dtype_name),
        ),
    }
    # the backward kernels against autograd's, in float32
    x32 = x.detach().float().clone().requires_grad_()
    # (a copy: x.float() of a float32 x is x itself, which the timed rows use without autograd)
    w32 = weight.clone().requires_grad_()
    F.rms_norm(x32, (n,), w32, EPS).backward(dy.float())
    rms_dx, rms_dw = kernels["tri_rmsnorm_backward"](dy, x, weight, rms_rstd)
    learner["tri_rmsnorm_backward"] = (
        3,
        lambda: kernels["tri_rmsnorm_backward"](dy, x, weight, rms_rstd),
        _agrees(rms_dx, x32.grad, dtype_name) and _agrees(rms_dw, w32.grad, dtype_name),
    )
    x32.grad = w32.grad = None
    b32 = bias.clone().requires_grad_()
    F.layer_norm(x32, (n,), w32, b32, EPS).backward(dy.float())
    layer_grads = kernels["tri_layernorm_backward"](dy, x, weight, layer_mean, layer_rstd)
    learner["tri_layernorm_backward"] = (
        3,
        lambda: kernels["tri_layernorm_backward"](dy, x, weight, layer_mean, layer_rstd),
        all(
            _agrees(mine, theirs, dtype_name)
            for mine, theirs in zip(layer_grads, (x32.grad, w32.grad, b32.grad), strict=True)
        ),
    )

    rows = {"copy": (2, lambda: out.copy_(x))}

    def time_if_right(names, reference):
        """The learner's kernels among the rows, each only where it agreed with ``reference``."""
        for name in names:
            passes, function, right = learner[name]
            if right:
                rows[name] = (passes, function)
            else:
                notes.append(
                    f"{name} at ({m}, {n}) {dtype_name}: differs from {reference}, not timed"
                )

    time_if_right(("tri_rmsnorm_forward", "tri_layernorm_forward"), "PyTorch")
    rows["F.rms_norm"] = (2, lambda: F.rms_norm(x, (n,), weight_x, EPS))
    rows["F.layer_norm"] = (2, lambda: F.layer_norm(x, (n,), weight_x, bias_x, EPS))
    if compile_:
        for name, eager, arguments in (
            ("torch.compile RMSNorm", norm_cost.torch_rmsnorm_scratch, (x, weight_x)),
            ("torch.compile LayerNorm", norm_cost.torch_layernorm_scratch, (x, weight_x, bias_x)),
        ):
            try:
                compiled = torch.compile(eager)
                compiled(*arguments)
            except Exception as error:  # noqa: BLE001 - any failure means: skip this row
                notes.append(f"skipped {name}: {type(error).__name__}")
                continue
            rows[name] = (2, lambda c=compiled, a=arguments: c(*a))
    time_if_right(("tri_rmsnorm_backward", "tri_layernorm_backward"), "autograd")
    for name, norm in (
        ("autograd backward of F.rms_norm", lambda v: F.rms_norm(v, (n,), weight_x, EPS)),
        (
            "autograd backward of F.layer_norm",
            lambda v: F.layer_norm(v, (n,), weight_x, bias_x, EPS),
        ),
    ):
        leaf = x.detach().clone().requires_grad_()
        y = norm(leaf)
        rows[name] = (3, lambda y=y, v=leaf: torch.autograd.grad(y, v, dy, retain_graph=True))
    return rows, x.numel() * x.element_size(), notes


def run(kernels: dict, grid, device: str, repeats: int, warmup: int, compile_: bool) -> dict:
    """Time every row of every shape and dtype; the table and what the machine was."""
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import norm_cost

    load_before = norm_cost._load()
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (Triton interpreter)"
    peak = PEAK_BANDWIDTH.get(name)
    table, notes = [], []
    for m, n in grid:
        for dtype_name in DTYPES:
            rows, one_pass, shape_notes = shape_rows(kernels, m, n, dtype_name, device, compile_)
            notes += shape_notes
            timed = {label: ("", function) for label, (_, function) in rows.items()}
            inner = 20 if device == "cuda" else 1
            medians = norm_cost.time_rows(timed, device, repeats, warmup, inner)
            for label, (passes, _) in rows.items():
                bandwidth = passes * one_pass / medians[label]
                table.append(
                    {
                        "M": m,
                        "N": n,
                        "dtype": dtype_name,
                        "implementation": label,
                        "us": medians[label] * 1e6,
                        "GB/s": bandwidth / 1e9,
                        "x copy": medians[label] / medians["copy"],
                        "of peak": bandwidth / peak if peak else None,
                    }
                )
    import triton

    info = {
        "device": name,
        "peak bandwidth (TB/s)": f"{peak / 1e12}" if peak else "not in PEAK_BANDWIDTH",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
        "repeats (median of)": repeats,
        "warm-up calls": warmup,
        "calls per timed sample": 20 if device == "cuda" else 1,
        "date (UTC)": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "load average before (1, 5, 15 min)": load_before,
        "load average after (1, 5, 15 min)": norm_cost._load(),
    }
    if device == "cuda":
        info["SMs"] = torch.cuda.get_device_properties(0).multi_processor_count
    else:
        info["note"] = "interpreter: programs run one after another in NumPy; times mean nothing"
    return {"machine": info, "rows": table, "notes": notes}


def format_table(result: dict) -> str:
    lines = [f"{key}: {value}" for key, value in result["machine"].items()]
    lines += [f"note: {note}" for note in result["notes"]]
    header = f"{'M':>6} {'N':>6} {'dtype':9} {'implementation':34} {'median us':>10} {'GB/s':>8}"
    lines.append(f"\n{header} {'x copy':>7} {'of peak':>8}")
    for row in result["rows"]:
        fraction = "-" if row["of peak"] is None else f"{row['of peak']:.2f}"
        lines.append(
            f"{row['M']:6d} {row['N']:6d} {row['dtype']:9} {row['implementation']:34}"
            f" {row['us']:10.1f} {row['GB/s']:8.1f} {row['x copy']:7.2f} {fraction:>8}"
        )
    return "\n".join(lines)


def result_path(device_name: str) -> Path:
    """benchmarks/results/triton_<device>.txt: ``NVIDIA H200`` -> ``triton_h200.txt``."""
    slug = device_name.lower().removeprefix("nvidia").strip()
    slug = "".join(c if c.isalnum() else "_" for c in slug).strip("_")
    return ROOT / "benchmarks" / "results" / f"triton_{slug}.txt"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--notebook", type=Path, default=DEFAULT_NOTEBOOK)
    parser.add_argument("--quick", action="store_true", help="two shapes, few repeats")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds (default 15)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    parser.add_argument(
        "--interpret",
        action="store_true",
        help="no GPU needed: Triton's interpreter on the CPU, a tiny grid (tests the script)",
    )
    parser.add_argument("--out", type=Path, default=None, help="where to write the table")
    args = parser.parse_args(argv)
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch

    if not args.interpret and not torch.cuda.is_available():
        print("no CUDA GPU on this machine: nothing was timed (--interpret runs on the CPU)")
        return 0
    try:
        import triton  # noqa: F401 - only to say clearly that it is missing
    except ImportError:
        print(
            "Triton is not installed (make kernels, or pip install -e '.[kernels]'): nothing was timed"
        )
        return 0
    try:
        kernels = load_learner_kernels(args.notebook)
    except ValueError as error:
        print(f"nothing was timed: {error}", file=sys.stderr)
        return 2
    if args.interpret:
        grid, repeats, device, compile_ = INTERPRET_GRID, args.repeats or 1, "cpu", False
    else:
        grid = QUICK_GRID if args.quick else FULL_GRID
        repeats, device = args.repeats or (5 if args.quick else 15), "cuda"
        compile_ = not args.no_compile
    result = run(
        kernels, grid, device, repeats, warmup=1 if args.interpret else 3, compile_=compile_
    )
    text = format_table(result)
    print(text)
    out = args.out or (None if args.interpret else result_path(result["machine"]["device"]))
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")
        print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
