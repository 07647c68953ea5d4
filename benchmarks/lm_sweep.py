"""Chapter 12's sweep: the byte-level GPT of the demo, trained on Jane Austen's novels in every
configuration the chapter compares, over seeds, into ``benchmarks/results/lm_sweep.json``.

Run from the repository root (about 27 CPU-minutes, 13.5 minutes on two idle cores: 18
configurations x 3 seeds of 400 steps, 2 to 12 blocks, and one run of 2,400 steps; two worker
processes of one thread each)::

    python benchmarks/lm_sweep.py                # the whole sweep, written to the results file
    python benchmarks/lm_sweep.py --only pre-3e-3 --seeds 0 --steps 30 --out /tmp/x.json
    python benchmarks/lm_sweep.py --only dyt-3e-3 --add    # (re)run some, keep the others

The model and the training loop are the demo's own cells (``lm12.py``). Each run records its
training loss and largest attention logit at every step, the residual stream's RMS after each
block every 50 steps, the validation loss at the end and its own CPU time; the long run also
writes text samples. The results file names the machine, the versions and the CPU time of the
whole sweep. A test (tests/test_lm_sweep.py) re-runs the first steps of one configuration and
compares them with this file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "lm_sweep.json"
SEEDS = (0, 1, 2)

# name -> (the chapter's question, the changes from the demo's SETTINGS and train()'s defaults)
CONFIGS = {
    "pre-3e-3": ("placement", {"placement": "pre"}),
    "post-3e-3": ("placement", {"placement": "post"}),
    "post-3e-3-warmup": ("rescue", {"placement": "post", "warmup": 300}),
    "pre-1e-2": ("qk", {"placement": "pre", "lr": 1e-2}),
    "pre-1e-2-qk": ("qk", {"placement": "pre", "lr": 1e-2, "qk_norm": True}),
    "peri-3e-3": ("placement", {"placement": "peri"}),
    "dyt-3e-3": ("placement", {"placement": "pre", "norm": "dyt"}),
    "none-3e-3": ("placement", {"placement": "none"}),
    "peri-1e-2": ("stream", {"placement": "peri", "lr": 1e-2}),
    # depth x placement x warmup: 2 and 12 blocks beside the 6 above, each with and without
    # the 300 warmup steps that rescued Post-LN at 6
    "pre-3e-3-warmup": ("depth", {"placement": "pre", "warmup": 300}),
    **{
        f"{placement}-3e-3{warm}-d{depth}": (
            "depth",
            {"placement": placement, "depth": depth, **({"warmup": 300} if warm else {})},
        )
        for depth in (2, 12)
        for placement in ("post", "pre")
        for warm in ("", "-warmup")
    },
}
# One longer run, one seed, whose model writes the chapter's samples: the configuration that
# ended lowest at 400 steps (Post-LN with warmup), trained six times as long.
LONG = ("long", {"placement": "post", "warmup": 300, "steps": 2400})
PROMPTS = ("Emma ", "It was ", '"My dear ')
SAMPLE_BYTES = 300


def run_one(job: tuple[str, dict, int]) -> dict:
    """Train one configuration with one seed in this process; its record, rounded."""
    sys.path.insert(0, str(HERE))
    import torch
    from lm12 import load

    torch.set_num_threads(1)
    name, changes, seed = job
    lm = load()
    start = time.process_time()
    model, record = lm.train(seed=seed, **changes)
    result = {
        "name": name,
        "changes": changes,
        "seed": seed,
        "loss": [round(v, 4) for v in record["loss"]],
        "max_logit": [round(v, 3) for v in record["max_logit"]],
        "stream_rms": {
            str(k): [round(v, 4) for v in rms] for k, rms in record["stream_rms"].items()
        },
        "valid": round(record["valid"], 4),
    }
    if name == "long":
        result["samples"] = {
            prompt: lm.sample(model, prompt, SAMPLE_BYTES, seed=index)
            for index, prompt in enumerate(PROMPTS)
        }
    result["cpu_s"] = round(time.process_time() - start, 1)
    return result


def jobs(only: list[str] | None, seeds: tuple[int, ...], steps: int | None):
    table = {name: changes for name, (_, changes) in CONFIGS.items()}
    table["long"] = LONG[1]
    names = only or [*list(CONFIGS)[:2], "long", *list(CONFIGS)[2:]]
    for name in names:
        changes = dict(table[name])
        if steps is not None:
            changes["steps"] = steps
        for seed in (0,) if name == "long" else seeds:
            yield name, changes, seed


def collect(runs: list[dict], kept: dict | None, wall: float, workers: int) -> dict:
    """The results file: these runs, and the runs of ``kept`` (an earlier file) not re-run."""
    import torch

    sys.path.insert(0, str(HERE))
    from lm12 import load

    runs = list(runs)
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {workers} workers of one thread"
    if kept is not None:
        done = {(r["name"], r["seed"]) for r in runs}
        runs += [r for r in kept["runs"] if (r["name"], r["seed"]) not in done]
        wall += kept["wall_seconds"]
        machine = f"{kept['machine']}; then {len(done)} runs added with {workers} workers"
    order = {job[:1] + (job[2],): i for i, job in enumerate(jobs(None, SEEDS, None))}
    runs.sort(key=lambda r: order.get((r["name"], r["seed"]), len(order)))
    return {
        "about": "benchmarks/lm_sweep.py: chapter 12's configurations x seeds",
        "date": datetime.date.today().isoformat(),
        "machine": machine,
        "torch": torch.__version__,
        "python": platform.python_version(),
        # the CPU kernels torch ran (ATEN_CPU_CAPABILITY chooses): lm_sweep_compare.py reads it
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "settings": load().SETTINGS,
        "configs": {name: {"question": q, "changes": c} for name, (q, c) in CONFIGS.items()},
        "cpu_seconds": round(sum(r["cpu_s"] for r in runs), 1),
        "wall_seconds": round(wall, 1),
        "runs": runs,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="configuration names (default: all)")
    parser.add_argument("--seeds", type=int, nargs="*", default=list(SEEDS))
    parser.add_argument("--steps", type=int, help="override every run's number of steps")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--add", action="store_true", help="keep the other runs already in --out")
    options = parser.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = "1"

    todo = list(jobs(options.only, tuple(options.seeds), options.steps))
    kept = json.loads(options.out.read_text()) if options.add and options.out.is_file() else None
    started, runs = time.time(), []
    with multiprocessing.get_context("spawn").Pool(options.workers) as pool:
        # Handed out in the order of the list (the configurations the chapter needs most come
        # first); the file is written after every run, whichever ends first.
        for result in pool.imap_unordered(run_one, todo):
            runs.append(result)
            print(f"{result['name']} seed {result['seed']}: valid {result['valid']:.3f}, "
                  f"{result['cpu_s']:.0f} CPU-s", flush=True)  # fmt: skip
            results = collect(runs, kept, time.time() - started, options.workers)
            options.out.parent.mkdir(parents=True, exist_ok=True)
            options.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"{len(results['runs'])} runs, {results['cpu_seconds']:.0f} CPU-s, "
          f"{results['wall_seconds']:.0f} s wall -> {options.out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
