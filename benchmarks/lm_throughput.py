"""Training throughput of chapter 12's GPT with the hand-written norms vs PyTorch's own.

Run from the repository root::

    python benchmarks/lm_throughput.py            # writes benchmarks/results/lm_throughput.txt
    python benchmarks/lm_throughput.py --quick    # fewer rounds, printed only

The same model (the demo's, ``lm12.py``: Pre-LN, 6 blocks, d = 64, batch 16 x 64 bytes, one
thread) is built twice from one seed: once with the norms as the demo's autograd Functions
(``RMSNormFunction``/``LayerNormFunction``, backward written by hand), once with ``F.rms_norm`` /
``F.layer_norm``. Both train on the same batches, in interleaved rounds (each round times every
variant once, so a change of load on a shared machine hits both alike), and each round counts
its own CPU time (``time.process_time``, one thread): tokens per CPU-second, median over rounds.
Then ``torch.profiler`` runs a few steps of each variant and the table says where the time goes:
the norms' own operations, the matrix products, attention's softmax, the optimizer, the rest.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from lm12 import load  # noqa: E402

OUT = HERE / "results" / "lm_throughput.txt"
VARIANTS = [("rms", True), ("rms", False), ("layer", True), ("layer", False)]


def label(norm: str, ours: bool) -> str:
    name = {"rms": "RMSNorm", "layer": "LayerNorm"}[norm]
    return f"{name}, {'hand-written Function' if ours else 'torch F.' + norm + '_norm'}"


def trainer(lm, norm: str, ours: bool):
    """A model and its optimizer, and a function that runs ``steps`` training steps."""
    s = lm.SETTINGS
    torch.manual_seed(0)
    model = lm.GPT(s["depth"], s["d"], s["heads"], s["context"], "pre", norm, False, ours)
    optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], betas=(0.9, 0.95))
    stream = lm.batches(lm.DATA["train"], s["batch_size"], s["context"], seed=0)

    def run(steps: int) -> None:
        for _ in range(steps):
            x, y = next(stream)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return run


def is_norm(name: str) -> bool:
    """An outermost profiler event of a norm, forward or backward (its time includes its ops)."""
    if name.startswith("autograd::engine::evaluate_function"):
        return False
    return (
        "NormFunction" in name
        or name in ("aten::rms_norm", "aten::layer_norm")
        or (name.endswith("NormBackward0") and "Norm" in name)
    )


def profile(run, steps: int) -> tuple[float, list[tuple[str, float]]]:
    """Over ``steps`` training steps: the norms' share of the CPU time (their events' inclusive
    time over the sum of every event's self time), and the six operations of largest self time
    with their shares."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        run(steps)
    events = prof.key_averages()
    whole = sum(event.self_cpu_time_total for event in events)
    norms = sum(event.cpu_time_total for event in events if is_norm(event.key))
    top = sorted(events, key=lambda event: event.self_cpu_time_total, reverse=True)[:6]
    return norms / whole, [(event.key, event.self_cpu_time_total / whole) for event in top]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10, help="training steps per round")
    options = parser.parse_args(argv)
    rounds, steps = (3, 3) if options.quick else (options.rounds, options.steps)
    torch.set_num_threads(1)
    lm = load()
    s = lm.SETTINGS
    tokens = steps * s["batch_size"] * s["context"]
    runs = {variant: trainer(lm, *variant) for variant in VARIANTS}
    for run in runs.values():
        run(2)  # warm up the allocator and the autograd graph
    rates: dict = {variant: [] for variant in VARIANTS}
    for _ in range(rounds):
        for variant, run in runs.items():
            start = time.process_time()
            run(steps)
            rates[variant].append(tokens / (time.process_time() - start))
    shares = {variant: profile(run, max(2, steps // 2)) for variant, run in runs.items()}

    lines = [
        f"# chapter 12: training throughput, {datetime.date.today().isoformat()}",
        f"# {platform.machine()}, {os.cpu_count()} CPUs, one thread; torch {torch.__version__}",
        f"# Pre-LN, {s['depth']} blocks, d = {s['d']}, batch {s['batch_size']} x "
        f"{s['context']} bytes; {rounds} interleaved rounds of {steps} steps, CPU time",
        "",
        f"{'variant':44} {'tokens/CPU-s':>12} {'range':>15}  ratio",
    ]
    medians = {variant: statistics.median(values) for variant, values in rates.items()}
    for variant in VARIANTS:
        norm, ours = variant
        reference = medians[(norm, False)]
        low, high = min(rates[variant]), max(rates[variant])
        lines.append(
            f"{label(*variant):44} {medians[variant]:12.0f} {low:7.0f}-{high:<7.0f}  "
            f"{reference / medians[variant]:.2f}x"
        )
    lines += [
        "",
        "where the CPU time goes (torch.profiler, which slows every operation; shares of a step)",
    ]
    for variant in VARIANTS:
        norm_share, top = shares[variant]
        ops = ", ".join(f"{name} {share:.0%}" for name, share in top)
        lines.append(f"{label(*variant)}: the norms {norm_share:.0%}; largest: {ops}")
    text = "\n".join(lines) + "\n"
    print(text)
    if not options.quick:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
