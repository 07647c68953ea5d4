"""One figure style for the whole course.

Usage in a notebook::

    from normlab.plotting import use_course_style, save_figure
    use_course_style()
    fig, ax = plt.subplots()
    ...
    save_figure(fig, "03_layernorm_scale_invariance")  # -> theory/figures/03_layernorm_scale_invariance.png
    plt.show()

A chapter figure is drawn once per language by one function, so that the Spanish chapter shows
Spanish labels::

    def draw(t):  # t(english_text) -> the text in the language being drawn
        fig, ax = plt.subplots()
        ax.set_xlabel(t("learning rate"))
        return fig

    bilingual_figure(draw, "08_training_lr_sweep")
    # -> theory/figures/08_training_lr_sweep.png and es/theory/figures/08_training_lr_sweep.png

Every text the function passes through ``t`` needs its Spanish in ``es/figures.json`` (a flat
map from the English text to the Spanish one); a text without it stops the demo, naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

# Colour-blind-safe palette (Okabe & Ito), in the order the course uses it.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]

COURSE_STYLE = {
    "figure.figsize": (6.4, 3.6),
    "figure.dpi": 100,
    "savefig.dpi": 120,
    "savefig.bbox": "tight",
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "font.size": 10,
    # Stable SVG/PNG bytes between runs: no timestamps, fixed hash salt.
    "svg.hashsalt": "normlab",
}


def use_course_style() -> None:
    """Apply the course's matplotlib style (palette, grid, sizes)."""
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update(COURSE_STYLE)
    mpl.rcParams["axes.prop_cycle"] = cycler(color=PALETTE)


def figures_dir() -> Path:
    """The folder where chapter figures live: ``theory/figures`` of the course checkout.

    Found by walking up from the current directory, so a notebook run from ``notebooks/``
    or from the repository root saves to the same place.
    """
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "theory").is_dir() and (folder / "pyproject.toml").is_file():
            return folder / "theory" / "figures"
    raise FileNotFoundError(
        "run the notebook inside the normlab checkout (no theory/ folder found)"
    )


def save_figure(fig, name: str) -> Path:
    """Save ``fig`` as ``theory/figures/<name>.png`` without metadata that changes between runs.

    Args:
        fig: a matplotlib figure.
        name: file stem; start it with the chapter's stem, e.g. ``"03_layernorm_scale"``.

    Returns:
        The path written.
    """
    path = figures_dir() / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})
    return path


def figure_labels(root: Path | None = None) -> dict[str, str]:
    """The Spanish of every figure text: ``es/figures.json``, English text -> Spanish text."""
    root = root or figures_dir().parent.parent
    path = root / "es" / "figures.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def spanish(labels: dict[str, str]):
    """The ``t`` of a Spanish drawing: the catalog's Spanish, or an error naming the text."""

    def t(text: str) -> str:
        try:
            return labels[text]
        except KeyError:
            raise KeyError(
                f"figure text {text!r} has no Spanish in es/figures.json: add it there"
            ) from None

    return t


def bilingual_figure(draw, name: str):
    """Draw ``draw(t)`` in English and in Spanish; save both; return the English figure.

    Args:
        draw: a function of ``t`` (the translation of a text) that returns a new figure.
        name: file stem, starting with the chapter's stem (``"03_layernorm_eps"``).

    Returns:
        The English figure (to show in the notebook). The Spanish one is saved as
        ``es/theory/figures/<name>.png`` and closed.
    """
    import matplotlib.pyplot as plt

    root = figures_dir().parent.parent
    spanish_figure = draw(spanish(figure_labels(root)))
    path = root / "es" / "theory" / "figures" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    spanish_figure.savefig(path, metadata={"Software": None})
    plt.close(spanish_figure)
    english = draw(lambda text: text)
    save_figure(english, name)
    return english
