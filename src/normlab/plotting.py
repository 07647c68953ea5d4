"""One figure style for the whole course.

Usage in a notebook::

    from normlab.plotting import use_course_style, save_figure
    use_course_style()
    fig, ax = plt.subplots()
    ...
    save_figure(fig, "03_layernorm_scale_invariance")  # -> theory/figures/03_layernorm_scale_invariance.png
    plt.show()
"""

from __future__ import annotations

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
