"""What does a normalization layer cost? Time LayerNorm and RMSNorm against a plain copy.

Run from the repository root::

    python benchmarks/norm_cost.py                 # (64, 512, 768) float32 on the CPU
    python benchmarks/norm_cost.py --quick         # a small, fast run
    python benchmarks/norm_cost.py --device cuda   # torch rows only, on a GPU
    python benchmarks/norm_cost.py --plot          # also save benchmarks/results/norm_cost_cpu.png

On the CPU the table includes the lab's fused kernels (Numba): RMSNorm and LayerNorm into an
existing output, LayerNorm with Welford's one-pass statistics, and both into a fresh output.

Every row is the forward pass over the last axis (gain gamma for both norms, bias beta for
LayerNorm, eps = 1e-5). The table gives the median time, the effective bandwidth and the ratio to
a copy of the same tensor into an existing one:

* ``GB/s`` counts the bytes a perfect (fused) kernel must move, read x + write y =
  2 * x.nbytes, whatever the implementation really moves; so it compares implementations, and
  for the copy it is the machine's real streaming bandwidth.
* ``x copy`` is time / (time of ``copy into existing``): 1.0 is the physical limit of a
  memory-bound operation that reads x once and writes y once.

The rows are timed in interleaved rounds (each round times every row once), so a change of load
on a shared machine hits all rows alike; the median over rounds is reported. Importable: the
course's demo notebook calls :func:`run` and :func:`format_table`.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import signal
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

EPS = 1e-5
FULL_SHAPE = (64, 512, 768)
QUICK_SHAPE = (16, 256, 768)
COMPILE_LIMIT_S = 60


# ----------------------------------------------------------------------------- NumPy versions


def numpy_layernorm_naive(x, gamma, beta):
    """Textbook LayerNorm, one whole-array operation at a time (12 full passes over memory)."""
    centred = x - x.mean(axis=-1, keepdims=True)
    variance = (centred**2).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(variance + EPS) * gamma + beta


def numpy_rmsnorm_naive(x, gamma):
    """Textbook RMSNorm, one whole-array operation at a time (7 full passes over memory)."""
    return x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + EPS) * gamma


def numpy_rmsnorm_two_pass(x, gamma, out):
    """Statistics first (einsum: no x**2 array), then scale into a preallocated ``out``.

    5 full passes: read x (mean square); read x, write out; read out, write out (gamma).
    """
    mean_square = np.einsum("...i,...i->...", x, x) / x.shape[-1]
    inverse_rms = (1.0 / np.sqrt(mean_square + EPS)).astype(x.dtype)
    np.multiply(x, inverse_rms[..., None], out=out)
    return np.multiply(out, gamma, out=out)


def numpy_layernorm_two_pass(x, gamma, beta, out):
    """Mean, centre into ``out``, variance of ``out`` (no cancellation), then scale in place.

    10 full passes: read x (mean); read x, write out; read out (variance); and three
    read-write passes over out (1/sigma, gamma, beta).
    """
    np.subtract(x, x.mean(axis=-1, keepdims=True), out=out)
    variance = np.einsum("...i,...i->...", out, out) / x.shape[-1]
    inverse_std = (1.0 / np.sqrt(variance + EPS)).astype(x.dtype)
    np.multiply(out, inverse_std[..., None], out=out)
    np.multiply(out, gamma, out=out)
    return np.add(out, beta, out=out)


# ----------------------------------------------------------------------------- fused (Numba)
# The lab's part 4: one read of x and one write of out per row, compiled by Numba. Each row is
# read a second (and for LayerNorm a third) time from the L1 cache, not from memory.


@functools.cache
def numba_kernels():
    """Compile-on-first-call fused kernels, or None when Numba is not installed.

    Cached: every caller in one process shares the kernels, so each type compiles once.
    """
    try:
        from numba import njit, prange
    except ImportError:
        return None

    @njit(parallel=True, fastmath={"reassoc"})
    def rmsnorm_rows(x, gamma, eps, out):
        n_rows, d = x.shape
        for row in prange(n_rows):
            sum_squares = 0.0
            for j in range(d):
                sum_squares += x[row, j] * x[row, j]
            inverse_rms = 1.0 / np.sqrt(sum_squares / d + eps)
            for j in range(d):
                out[row, j] = x[row, j] * inverse_rms * gamma[j]

    @njit(parallel=True, fastmath={"reassoc"})
    def layernorm_rows(x, gamma, beta, eps, out):
        """Two passes over each row in cache: the mean, then the sum of squared deviations."""
        n_rows, d = x.shape
        for row in prange(n_rows):
            total = 0.0
            for j in range(d):
                total += x[row, j]
            mean = total / d
            sum_squares = 0.0
            for j in range(d):
                deviation = x[row, j] - mean
                sum_squares += deviation * deviation
            inverse_std = 1.0 / np.sqrt(sum_squares / d + eps)
            for j in range(d):
                out[row, j] = (x[row, j] - mean) * inverse_std * gamma[j] + beta[j]

    @njit(parallel=True, fastmath={"reassoc"})
    def layernorm_rows_welford(x, gamma, beta, eps, out):
        """Welford's one-pass statistics: one read of the row fewer, a division per element."""
        n_rows, d = x.shape
        for row in prange(n_rows):
            mean = 0.0
            m2 = 0.0
            count = 0
            for j in range(d):
                count += 1
                delta = x[row, j] - mean
                mean += delta / count
                m2 += delta * (x[row, j] - mean)
            inverse_std = 1.0 / np.sqrt(m2 / d + eps)
            for j in range(d):
                out[row, j] = (x[row, j] - mean) * inverse_std * gamma[j] + beta[j]

    return rmsnorm_rows, layernorm_rows, layernorm_rows_welford


def fused_rows(x, gamma, beta, out, notes: list[str]) -> dict[str, tuple[str, Callable]]:
    """The fused rows of the table (CPU only): into an existing output and into a fresh one."""
    kernels = numba_kernels()
    if kernels is None:
        notes.append("skipped the fused rows: Numba is not installed")
        return {}
    rms, layer, welford = kernels
    d = x.shape[-1]
    x2, out2 = x.reshape(-1, d), out.reshape(-1, d)

    def fresh(kernel, *params):
        y = np.empty_like(x)
        kernel(x2, *params, EPS, y.reshape(-1, d))
        return y

    start = time.perf_counter()
    for kernel, params in [(rms, (gamma,)), (layer, (gamma, beta)), (welford, (gamma, beta))]:
        kernel(x2[:2], *params, EPS, out2[:2])  # compile for these types, on 2 rows
    notes.append(f"compiled the 3 Numba kernels in {time.perf_counter() - start:.1f} s")
    return {
        "fused RMSNorm into existing (Numba)": ("fused", lambda: rms(x2, gamma, EPS, out2)),
        "fused LayerNorm into existing (Numba)": (
            "fused",
            lambda: layer(x2, gamma, beta, EPS, out2),
        ),
        "fused LayerNorm, Welford, into existing": (
            "fused",
            lambda: welford(x2, gamma, beta, EPS, out2),
        ),
        "fused RMSNorm, fresh output (Numba)": ("fused", lambda: fresh(rms, gamma)),
        "fused LayerNorm, fresh output (Numba)": ("fused", lambda: fresh(layer, gamma, beta)),
    }


# ----------------------------------------------------------------------------- torch versions


def torch_layernorm_scratch(x, gamma, beta):
    """LayerNorm from tensor operations; ``x.var`` is a separate (Welford) reduction."""
    mean = x.mean(-1, keepdim=True)
    variance = x.var(-1, keepdim=True, correction=0)
    return (x - mean) * torch.rsqrt(variance + EPS) * gamma + beta


def torch_rmsnorm_scratch(x, gamma):
    """RMSNorm from tensor operations (what a model file typically writes)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * gamma


def _with_time_limit(seconds: int, function: Callable[[], object]) -> object:
    """Run function(); raise TimeoutError after ``seconds`` (POSIX main thread only)."""
    if not hasattr(signal, "SIGALRM"):
        return function()

    def give_up(signum, frame):
        raise TimeoutError(f"compilation took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(seconds)
    try:
        return function()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def compiled_rows(x, gamma, beta, notes: list[str]) -> dict[str, Callable[[], object]]:
    """torch.compile'd from-scratch norms; skipped (with a note) if compiling fails or is slow."""
    rows = {}
    for name, function, args in [
        ("torch.compile LayerNorm (from scratch)", torch_layernorm_scratch, (x, gamma, beta)),
        ("torch.compile RMSNorm (from scratch)", torch_rmsnorm_scratch, (x, gamma)),
    ]:
        start = time.perf_counter()
        try:
            compiled = torch.compile(function)
            _with_time_limit(COMPILE_LIMIT_S, lambda c=compiled, a=args: c(*a))
        except Exception as error:  # noqa: BLE001 - any failure means: skip this row
            message = " ".join(str(error).split())[:120]  # one line in the table's header
            notes.append(f"skipped {name}: {type(error).__name__}: {message}")
            continue
        notes.append(f"compiled {name} in {time.perf_counter() - start:.1f} s")
        rows[name] = lambda c=compiled, a=args: c(*a)
    return rows


# ----------------------------------------------------------------------------- the table


def implementations(shape, device, compile_: bool, notes: list[str]):
    """name -> (group, zero-argument callable) for every row of the table."""
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal(shape, dtype=np.float32) * 2 + 0.5
    gamma_np = rng.normal(1.0, 0.1, shape[-1]).astype(np.float32)
    beta_np = rng.normal(0.0, 0.1, shape[-1]).astype(np.float32)
    x, gamma, beta = (torch.from_numpy(a).to(device) for a in (x_np, gamma_np, beta_np))
    out, out_np = torch.empty_like(x), np.empty_like(x_np)
    d = shape[-1]

    rows = {
        "copy into existing (torch)": ("copy", lambda: out.copy_(x)),
        "clone = fresh output (torch)": ("copy", lambda: x.clone()),
    }
    if device == "cpu":
        rows |= {"copy into existing (NumPy)": ("copy", lambda: np.copyto(out_np, x_np))}
        rows |= fused_rows(x_np, gamma_np, beta_np, out_np, notes)
        rows |= {
            "NumPy LayerNorm, naive": (
                "numpy",
                lambda: numpy_layernorm_naive(x_np, gamma_np, beta_np),
            ),
            "NumPy RMSNorm, naive": ("numpy", lambda: numpy_rmsnorm_naive(x_np, gamma_np)),
            "NumPy LayerNorm, two-pass": (
                "numpy",
                lambda: numpy_layernorm_two_pass(x_np, gamma_np, beta_np, out_np),
            ),
            "NumPy RMSNorm, two-pass": (
                "numpy",
                lambda: numpy_rmsnorm_two_pass(x_np, gamma_np, out_np),
            ),
        }
    rows |= {
        "torch LayerNorm, from scratch": ("torch", lambda: torch_layernorm_scratch(x, gamma, beta)),
        "torch RMSNorm, from scratch": ("torch", lambda: torch_rmsnorm_scratch(x, gamma)),
        # One pass each by the counting rule (a read of x); they show where the from-scratch
        # LayerNorm's time goes: x.var is a Welford reduction, x.mean a plain sum.
        "torch x.mean(-1) alone": ("torch", lambda: x.mean(-1, keepdim=True)),
        "torch x.var(-1) alone": ("torch", lambda: x.var(-1, keepdim=True, correction=0)),
        "F.layer_norm": ("torch", lambda: F.layer_norm(x, (d,), gamma, beta, EPS)),
        "F.rms_norm": ("torch", lambda: F.rms_norm(x, (d,), gamma, EPS)),
    }
    if compile_:
        rows |= {k: ("compiled", f) for k, f in compiled_rows(x, gamma, beta, notes).items()}
    return rows, x.nbytes if hasattr(x, "nbytes") else x.numel() * x.element_size()


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def time_rows(
    rows, device, repeats: int, warmup: int, inner: int = 1, clock: str = "wall"
) -> dict[str, float]:
    """Median seconds per call of each row, timed in interleaved rounds.

    Each sample times ``inner`` back-to-back calls (on a GPU, one call of 50 us is too short
    for the timer and the synchronization around it). ``clock="cpu"`` measures the CPU time of
    this process (all its threads) instead of the wall clock: with one thread, a figure that
    other users of the machine barely change, since time spent waiting for the CPU is not
    counted.
    """
    timer = CLOCKS[clock]
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _, function in rows.values():
        for _ in range(warmup):
            function()
    synchronize()
    samples = {name: [] for name in rows}
    for _ in range(repeats):
        for name, (_, function) in rows.items():
            start = timer()
            for _ in range(inner):
                function()
            synchronize()
            samples[name].append((timer() - start) / inner)
    return {name: statistics.median(s) for name, s in samples.items()}


def matmul_gflops(device, size=None, repeats=5, clock="wall") -> float:
    """Achieved float32 FLOP/s of a square matrix product: the compute ceiling we can reach."""
    size = size or (8192 if device == "cuda" else 1024)
    a = torch.randn(size, size, device=device)
    seconds = time_rows({"mm": ("", lambda: a @ a)}, device, repeats, 2, 1, clock)["mm"]
    return 2 * size**3 / seconds / 1e9


def run(shape=FULL_SHAPE, device="cpu", repeats=15, warmup=3, compile_=True, clock="wall") -> dict:
    """Time every implementation; returns the table's rows and what the machine was.

    The matrix-product rate (the compute ceiling of the roofline) and the load average are
    measured before and after the table, so that a change of load during the run shows.
    """
    notes: list[str] = []
    load_before = _load()
    matmul_before = matmul_gflops(device, clock=clock)
    rows, x_bytes = implementations(shape, device, compile_, notes)
    inner = 20 if device == "cuda" else 1
    medians = time_rows(rows, device, repeats, warmup, inner, clock)
    matmul_after = matmul_gflops(device, clock=clock)
    copy_time = medians["copy into existing (torch)"]
    table = [
        {
            "name": name,
            "group": group,
            "ms": medians[name] * 1e3,
            "GB/s": 2 * x_bytes / medians[name] / 1e9,
            "x copy": medians[name] / copy_time,
        }
        for name, (group, _) in rows.items()
    ]
    info = machine(shape, device, repeats, warmup)
    info["clock"] = "wall" if clock == "wall" else "CPU time of the process (all threads)"
    info["load average before (1, 5, 15 min)"] = load_before
    info["load average after (1, 5, 15 min)"] = _load()
    info["matmul GFLOP/s (float32)"] = round(min(matmul_before, matmul_after), 1)
    info["matmul GFLOP/s before, after"] = f"{matmul_before:.1f}, {matmul_after:.1f}"
    info["copy GB/s (read + write)"] = round(table[0]["GB/s"], 1)
    return {"rows": table, "machine": info, "notes": notes}


def _load() -> str:
    if not hasattr(os, "getloadavg"):
        return "unknown"
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def machine(shape, device, repeats, warmup) -> dict:
    info = {
        "shape": shape,
        "dtype": "float32",
        "MB per tensor": round(int(np.prod(shape)) * 4 / 1e6, 1),
        "device": device,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torch threads": torch.get_num_threads(),
        "CPU cores": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "repeats (median of)": repeats,
        "warm-up calls": warmup,
        "calls per timed sample": 20 if device == "cuda" else 1,
        "date (UTC)": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
    }
    if device == "cuda":
        info["GPU"] = torch.cuda.get_device_name()
    else:
        try:
            import numba

            info["numba"] = f"{numba.__version__}, {numba.get_num_threads()} threads"
        except ImportError:
            pass
    return info


def format_table(result: dict) -> str:
    lines = [f"{k}: {v}" for k, v in result["machine"].items()]
    lines += [f"note: {n}" for n in result["notes"]]
    lines.append(f"\n{'implementation':42s} {'median ms':>10s} {'GB/s':>8s} {'x copy':>7s}")
    for row in result["rows"]:
        lines.append(f"{row['name']:42s} {row['ms']:10.3f} {row['GB/s']:8.1f} {row['x copy']:7.2f}")
    return "\n".join(lines)


def plot(result: dict, path=None):
    """Horizontal bars of time / copy time; saved to ``path`` if given. Returns the figure."""
    import matplotlib.pyplot as plt

    rows = result["rows"]
    colours = {
        "copy": "#000000",
        "fused": "#CC79A7",
        "numpy": "#E69F00",
        "torch": "#0072B2",
        "compiled": "#009E73",
    }
    fig, ax = plt.subplots(figsize=(6.4, 0.32 * len(rows) + 1.2))
    positions = np.arange(len(rows))[::-1]
    _ = ax.barh(positions, [r["x copy"] for r in rows], color=[colours[r["group"]] for r in rows])
    _ = ax.set_yticks(positions, [r["name"] for r in rows])
    _ = ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    m = result["machine"]
    _ = ax.set(
        xlabel="median time / time of a copy into an existing tensor",
        title=f"{m['shape']} {m['dtype']}, {m['device']}, {m['torch threads']} threads",
    )
    if path is not None:
        fig.savefig(path, bbox_inches="tight", dpi=120)
    return fig


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--quick", action="store_true", help="small shape, few repeats")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds (default 15)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile rows")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch and Numba threads (default: theirs)"
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time the process's CPU time, not the wall clock (meaningful with --threads 1)",
    )
    parser.add_argument(
        "--plot", action="store_true", help="save a figure under benchmarks/results"
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
        try:
            import numba

            numba.set_num_threads(args.threads)
        except ImportError:
            pass
    shape = QUICK_SHAPE if args.quick else FULL_SHAPE
    repeats = args.repeats or (5 if args.quick else 15)
    result = run(
        shape,
        args.device,
        repeats,
        warmup=2 if args.quick else 3,
        compile_=not args.no_compile,
        clock="cpu" if args.cpu_time else "wall",
    )
    print(format_table(result))
    if args.plot:
        # The chapter's figure is drawn by the demo from the stored runs; this one is yours.
        suffix = f"_{args.device}" + ("_quick" if args.quick else "")
        path = os.path.join(os.path.dirname(__file__), "results", f"norm_cost{suffix}.png")
        plot(result, path)
        print(f"saved {os.path.normpath(path)}")


if __name__ == "__main__":
    main()
