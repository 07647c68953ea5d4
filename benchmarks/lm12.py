"""Chapter 12's model and training loop, read from the demo notebook: the one copy.

The demo ``notebooks/12_language_model.ipynb`` defines the byte-level GPT in its cells tagged
``lm-model`` (the imports and the corpus, the hand-written RMSNorm and LayerNorm autograd
Functions, the norm layer, attention, block and model, the training loop and sampling). The
sweep (``lm_sweep.py``), the throughput benchmark (``lm_throughput.py``) and the test that re-runs
one configuration of the sweep execute those cells, in order, into one namespace: what they
measure is the model the demo shows, not a copy that could drift from it.

    from lm12 import load
    lm = load()
    model, record = lm.train(placement="post", seed=0, steps=50)
"""

from __future__ import annotations

import functools
import types
from pathlib import Path

import nbformat

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "12_language_model.ipynb"
TAG = "lm-model"


def model_cells(path: Path = NOTEBOOK) -> list[str]:
    """The sources of the notebook's cells tagged ``lm-model``, in order."""
    notebook = nbformat.read(path, as_version=4)
    sources = [
        cell.source
        for cell in notebook.cells
        if cell.cell_type == "code" and TAG in cell.metadata.get("tags", [])
    ]
    if not sources:
        raise LookupError(f"{path} has no code cell tagged {TAG!r}")
    return sources


@functools.cache
def load(path: Path = NOTEBOOK) -> types.SimpleNamespace:
    """Execute the model cells into one namespace and return it (GPT, train, sample, ...)."""
    namespace: dict = {"__name__": "lm12_model"}
    for index, source in enumerate(model_cells(path)):
        exec(compile(source, f"<{path.name} model cell {index}>", "exec"), namespace)
    return types.SimpleNamespace(**namespace)
