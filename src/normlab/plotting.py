"""One figure style for the whole course.

Usage in a notebook: ``use_course_style()`` in the first cell; then a figure a chapter shows is
drawn once per language by one function, so that the Spanish chapter shows Spanish labels::

    def draw(t):  # t(english_text) -> the text in the language being drawn
        fig, ax = plt.subplots()
        ax.set_xlabel(t("learning rate"))
        ax.plot(x, y, label=t("{blocks} blocks", blocks=12))  # values go in after translating
        return fig

    bilingual_figure(draw, "08_training_lr_sweep")
    # -> theory/figures/08_training_lr_sweep.png and es/theory/figures/08_training_lr_sweep.png

Every text the function passes through ``t`` needs its Spanish in ``es/figures.json`` (a flat
map from the English text to the Spanish one; a text with values is a ``str.format`` template,
the same in both, such as ``"{blocks} blocks": "{blocks} bloques"``); a text without it stops
the demo, naming it. So does a text that reaches the figure without ``t`` (any word of two
letters or more outside ``$...$``): a name that reads the same in Spanish (``"LayerNorm"``) is
in the catalog as itself. Numbers keep the decimal point in both languages, as code writes them.
The English PNG records the texts it was drawn with (PNG text ``normlab:texts``), so that a test
can check that the catalog still covers them.

``save_figure(fig, name)`` saves one figure in one language (``theory/figures/<name>.png``).

Running a demo again does not always rewrite its figures (``write_figure``). A file is written
when it is missing; otherwise the environment variable ``NORMLAB_FIGURES`` decides:

- unset (an author running a demo): only when the picture changed: its size or recorded texts,
  or any channel of any pixel by more than ``FIGURE_TOLERANCE`` levels (the anti-aliased edges
  of an unchanged drawing move by a few levels, and the file is kept as it is);
- ``keep`` (set by the test suite for every kernel it starts, and by ``make bench``): never. A
  chaotic experiment redrawn on another CPU is another picture (demo 06's training curves under
  ``ATEN_CPU_CAPABILITY=default``: 20,438 of 345,600 pixels differ, by up to 255 levels), and a
  test run must leave the checkout as it found it;
- ``redraw``: always (this machine's exact bytes).
"""

from __future__ import annotations

import io
import json
import os
import re
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

    An existing file is rewritten only as ``write_figure`` says.

    Args:
        fig: a matplotlib figure.
        name: file stem; start it with the chapter's stem, e.g. ``"03_layernorm_scale"``.

    Returns:
        The path of the figure.
    """
    path = figures_dir() / f"{name}.png"
    write_figure(path, png_bytes(fig, {}))
    return path


def figure_labels(root: Path | None = None) -> dict[str, str]:
    """The Spanish of every figure text: ``es/figures.json``, English text -> Spanish text."""
    root = root or figures_dir().parent.parent
    path = root / "es" / "figures.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


TEXTS_KEY = "normlab:texts"  # the PNG text chunk that lists a figure's English texts
# A word a reader has to read: two letters or more, once the mathematics is taken out.
WORD = re.compile(r"[^\W\d_]{2,}")
MATH = re.compile(r"(?<!\\)\$.*?(?<!\\)\$")


class Translator:
    """The ``t`` of one drawing: each text looked up (or kept, for English), then filled in.

    ``t(text)`` returns the text in the drawing's language; ``t(template, **values)`` fills a
    ``str.format`` template after translating it. ``used`` lists the English texts asked for,
    ``drawn`` the texts handed out.
    """

    def __init__(self, labels: dict[str, str] | None):
        self.labels = labels  # None: English
        self.used: list[str] = []
        self.drawn: set[str] = set()

    def __call__(self, text: str, **values) -> str:
        if not isinstance(text, str):
            raise TypeError(f"t() takes a text, not {type(text).__name__}")
        if self.labels is None:
            result = text
        elif text in self.labels:
            result = self.labels[text]
        else:
            raise KeyError(f"figure text {text!r} has no Spanish in es/figures.json: add it there")
        if values:
            result = result.format(**values)
        if text not in self.used:
            self.used.append(text)
        self.drawn.add(result)
        return result


def spanish(labels: dict[str, str]) -> Translator:
    """The ``t`` of a Spanish drawing: the catalog's Spanish, or an error naming the text."""
    return Translator(labels)


def untranslated_texts(fig, translator: Translator) -> list[str]:
    """Texts on the (drawn) figure with a word in them that did not come out of ``translator``."""
    from matplotlib.text import Text

    found = []
    for artist in fig.findobj(Text):
        text = artist.get_text()
        if not artist.get_visible() or not text or text in translator.drawn:
            continue
        if WORD.search(MATH.sub(" ", text)) and text not in found:
            found.append(text)
    return found


#: Levels (of 255) by which a channel of a pixel may move before a figure file is rewritten.
FIGURE_TOLERANCE = 8
FIGURES_VARIABLE = "NORMLAB_FIGURES"  # unset, "keep" or "redraw" (the module's docstring)


def png_bytes(fig, metadata: dict[str, str]) -> bytes:
    """The figure as PNG bytes, without metadata that changes between runs (this draws it)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None, **metadata})
    return buffer.getvalue()


def same_picture(old: bytes, new: bytes, tolerance: int = FIGURE_TOLERANCE) -> bool:
    """Whether two PNGs have the same size, the same recorded texts and pixels within
    ``tolerance`` levels in every channel."""
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(old)) as a, Image.open(io.BytesIO(new)) as b:
        if a.size != b.size or a.info.get(TEXTS_KEY) != b.info.get(TEXTS_KEY):
            return False
        first = np.asarray(a.convert("RGBA"), dtype=np.int16)
        second = np.asarray(b.convert("RGBA"), dtype=np.int16)
    return int(np.abs(first - second).max()) <= tolerance


def write_figure(path: Path, data: bytes) -> bool:
    """Write the PNG ``data`` to ``path``, unless a file is there and ``NORMLAB_FIGURES`` says to
    keep it: ``keep`` always, unset when it is the same picture (``same_picture``); ``redraw``
    writes it anyway. Returns whether it wrote."""
    mode = os.environ.get(FIGURES_VARIABLE, "")
    if mode not in ("", "keep", "redraw"):
        raise ValueError(f"{FIGURES_VARIABLE}={mode!r}: leave it unset, or set keep or redraw")
    if path.is_file() and mode != "redraw":
        if mode == "keep":
            return False
        old = path.read_bytes()
        if old == data or same_picture(old, data):
            return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return True


def figure_texts(path: Path) -> list[str] | None:
    """The English texts a PNG written by :func:`bilingual_figure` records, or None."""
    from PIL import Image

    with Image.open(path) as image:
        recorded = image.info.get(TEXTS_KEY)
    return None if recorded is None else json.loads(recorded)


def bilingual_figure(draw, name: str):
    """Draw ``draw(t)`` in English and in Spanish; save both; return the English figure.

    Args:
        draw: a function of ``t`` (the translation of a text) that returns a new figure.
        name: file stem, starting with the chapter's stem (``"03_layernorm_eps"``).

    Returns:
        The English figure (to show in the notebook). The Spanish one is saved as
        ``es/theory/figures/<name>.png`` and closed.

    Raises:
        KeyError: a text has no Spanish in ``es/figures.json``.
        ValueError: a text with words reached the figure without passing through ``t``.
    """
    import matplotlib.pyplot as plt

    root = figures_dir().parent.parent
    translator = spanish(figure_labels(root))
    spanish_figure = draw(translator)
    spanish_png = png_bytes(spanish_figure, {})  # drawing it makes the tick labels and legends
    missed = untranslated_texts(spanish_figure, translator)
    plt.close(spanish_figure)
    if missed:
        raise ValueError(
            f"figure {name}: {missed} reached the figure without t(...); pass each through t "
            "and give its Spanish in es/figures.json (a name the same in both, as itself)"
        )
    write_figure(root / "es" / "theory" / "figures" / f"{name}.png", spanish_png)
    english = draw(Translator(None))
    texts = json.dumps(translator.used)  # ASCII: a PNG text chunk is Latin-1
    write_figure(figures_dir() / f"{name}.png", png_bytes(english, {TEXTS_KEY: texts}))
    return english
