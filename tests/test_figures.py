"""Every chapter figure exists in English and Spanish, drawn by one function (normlab.plotting).

* the Spanish chapters show the Spanish figures (``es/theory/figures/``), which exist;
* every text a figure was drawn with (recorded in the English PNG by ``bilingual_figure``) has
  its Spanish in ``es/figures.json``, and the Spanish picture is not the English one;
* ``bilingual_figure`` itself: a text without Spanish, or one that reaches the figure without
  ``t``, stops the drawing; values are filled in after translating, with the decimal point.

Each check is shown to fail on a changed copy: an English link, a catalog without a text, the
English picture saved as the Spanish one.
"""

from __future__ import annotations

import io
import json
import shutil
import sys

import numpy as np
import pytest
from conftest import ROOT

from normlab import plotting, translation

CATALOG = ROOT / "es" / "figures.json"


def spanish_chapters(root):
    return sorted((root / "es" / "theory").glob("[0-9][0-9]_*.md"))


def shown_figures(root, chapter) -> list[str]:
    """The figures a Spanish chapter shows, repository-relative."""
    where = chapter.relative_to(root).as_posix()
    return translation.analyse(chapter.read_text(encoding="utf-8"), where).figures


def chapter_figure_problems(root) -> list[str]:
    """A Spanish chapter's figure that is not a Spanish figure, or does not exist."""
    problems = []
    for chapter in spanish_chapters(root):
        for figure in shown_figures(root, chapter):
            if not figure.startswith("es/theory/figures/"):
                problems.append(f"{chapter.name}: shows {figure}, not es/theory/figures/")
            elif not (root / figure).is_file():
                problems.append(f"{chapter.name}: {figure} does not exist")
    return problems


def figure_text_problems(root, catalog: dict[str, str]) -> list[str]:
    """A figure a Spanish chapter shows whose English PNG records no texts (not drawn by
    bilingual_figure), or records a text the catalog has no Spanish for."""
    problems = []
    for chapter in spanish_chapters(root):
        for figure in shown_figures(root, chapter):
            english = root / translation.english_of(figure)
            texts = plotting.figure_texts(english) if english.is_file() else None
            if texts is None:
                problems.append(
                    f"{english.name}: no recorded texts (drawn without bilingual_figure)"
                )
                continue
            problems += [f"{english.name}: {t!r} has no Spanish" for t in texts if t not in catalog]
    return problems


def pixels(path):
    import matplotlib.image

    return matplotlib.image.imread(path)


def same_picture_problems(root) -> list[str]:
    problems = []
    for chapter in spanish_chapters(root):
        for figure in shown_figures(root, chapter):
            spanish, english = root / figure, root / translation.english_of(figure)
            if spanish.is_file() and english.is_file():
                a, b = pixels(spanish), pixels(english)
                if a.shape == b.shape and np.array_equal(a, b):
                    problems.append(f"{spanish.name}: the same picture as the English")
    return problems


@pytest.fixture()
def copy_of_the_figures(tmp_path):
    """The Spanish chapters, the figures of both languages and the catalog, in a temporary root."""
    for folder in ("theory/figures", "es/theory/figures"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    for chapter in spanish_chapters(ROOT):
        shutil.copy(chapter, tmp_path / "es" / "theory" / chapter.name)
    shutil.copy(CATALOG, tmp_path / "es" / "figures.json")
    return tmp_path


# ----------------------------------------------------------------------------- the repository


def test_every_spanish_chapter_shows_its_figures_in_spanish():
    shown = [f for chapter in spanish_chapters(ROOT) for f in shown_figures(ROOT, chapter)]
    assert len(shown) >= 20, shown  # the 20 figures of chapters 01-07
    assert chapter_figure_problems(ROOT) == []


def test_every_text_of_those_figures_has_its_spanish():
    catalog = json.loads(CATALOG.read_text(encoding="utf-8"))
    assert figure_text_problems(ROOT, catalog) == []


def test_the_spanish_figure_is_not_the_english_picture():
    assert same_picture_problems(ROOT) == []


def test_a_spanish_chapter_figure_is_checked_for_links_and_the_glossary():
    problems = translation.edition_problems(ROOT)
    assert [p for p in problems if "figure" in p or "image" in p] == []


# ----------------------------------------------------------------------------- drift


def new(problems: list[str], before: list[str]) -> list[str]:
    """The problems a change added (the copy may have others, such as a chapter in progress)."""
    return [p for p in problems if p not in before]


def test_an_english_figure_link_in_a_spanish_chapter_is_reported(copy_of_the_figures):
    root = copy_of_the_figures
    chapter = root / "es" / "theory" / "03_layernorm.md"
    text = chapter.read_text(encoding="utf-8")
    english = text.replace(
        "](figures/03_layernorm_eps.png)", "](../../theory/figures/03_layernorm_eps.png)"
    )
    assert english != text
    before = chapter_figure_problems(root)
    chapter.write_text(english, encoding="utf-8")
    assert new(chapter_figure_problems(root), before) == [
        "03_layernorm.md: shows theory/figures/03_layernorm_eps.png, not es/theory/figures/"
    ]
    where = "es/theory/03_layernorm.md"
    found = translation.link_problems(ROOT, english, where)
    assert found == [
        f"{where}: shows the English theory/figures/03_layernorm_eps.png; "
        "show the Spanish es/theory/figures/03_layernorm_eps.png"
    ]


def test_a_missing_spanish_figure_is_reported(copy_of_the_figures):
    root = copy_of_the_figures
    before = chapter_figure_problems(root)
    (root / "es" / "theory" / "figures" / "04_rmsnorm_eps.png").unlink()
    assert new(chapter_figure_problems(root), before) == [
        "04_rmsnorm.md: es/theory/figures/04_rmsnorm_eps.png does not exist"
    ]


def test_a_text_without_spanish_is_reported(copy_of_the_figures):
    catalog = json.loads(CATALOG.read_text(encoding="utf-8"))
    recorded = plotting.figure_texts(ROOT / "theory" / "figures" / "02_batchnorm_momentum.png")
    assert "training step" in recorded
    before = figure_text_problems(copy_of_the_figures, catalog)
    del catalog["training step"]
    assert new(figure_text_problems(copy_of_the_figures, catalog), before) == [
        "02_batchnorm_momentum.png: 'training step' has no Spanish"
    ]


def test_a_figure_drawn_without_bilingual_figure_is_reported(copy_of_the_figures):
    import matplotlib.pyplot as plt

    root = copy_of_the_figures
    catalog = json.loads(CATALOG.read_text(encoding="utf-8"))
    before = figure_text_problems(root, catalog)
    fig, ax = plt.subplots()
    ax.set_xlabel("std of the input row")
    fig.savefig(root / "theory" / "figures" / "03_layernorm_eps.png")  # save_figure's way
    plt.close(fig)
    assert new(figure_text_problems(root, catalog), before) == [
        "03_layernorm_eps.png: no recorded texts (drawn without bilingual_figure)"
    ]


def test_the_english_picture_saved_as_the_spanish_is_reported(copy_of_the_figures):
    root = copy_of_the_figures
    name = "05_group_instance_dyt.png"
    before = same_picture_problems(root)
    shutil.copy(root / "theory" / "figures" / name, root / "es" / "theory" / "figures" / name)
    assert new(same_picture_problems(root), before) == [f"{name}: the same picture as the English"]


def test_the_glossary_covers_the_figure_texts(tmp_path):
    (tmp_path / "es").mkdir()
    shutil.copy(ROOT / translation.GLOSSARY, tmp_path / translation.GLOSSARY)
    texts = {"std of the output": "desviación estándar de la salida"}
    (tmp_path / "es" / "figures.json").write_text(json.dumps(texts), encoding="utf-8")
    assert translation.glossary_problems(tmp_path) == []
    texts["std of the output"] = "desviación típica de la salida"
    (tmp_path / "es" / "figures.json").write_text(json.dumps(texts), encoding="utf-8")
    found = translation.glossary_problems(tmp_path)
    assert len(found) == 1 and "«desviación típica»" in found[0], found
    assert found[0].startswith("es/figures.json text 'std of the output'"), found


# ----------------------------------------------------------------------------- bilingual_figure


@pytest.fixture()
def course(tmp_path, monkeypatch):
    """An empty course (theory/ and pyproject.toml: where figures_dir looks) with a catalog,
    its figures written as an author's demo writes them (no NORMLAB_FIGURES)."""
    monkeypatch.delenv(plotting.FIGURES_VARIABLE, raising=False)
    (tmp_path / "theory").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "es").mkdir()
    catalog = {"learning rate": "tasa de aprendizaje", "lr = {lr:g}": "tasa = {lr:g}"}
    (tmp_path / "es" / "figures.json").write_text(json.dumps(catalog), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def figure_with(*labels):
    import matplotlib.pyplot as plt

    def draw(t):
        fig, ax = plt.subplots()
        ax.plot([1.0, 2.0], [1.0, 0.5])
        ax.set_xlabel(labels[0](t))
        if len(labels) > 1:
            ax.set_title(labels[1](t))
        return fig

    return draw


def test_bilingual_figure_draws_both_languages_and_records_the_texts(course):
    import matplotlib.pyplot as plt

    seen = []

    def draw(t):
        fig, ax = plt.subplots()
        ax.set_xlabel(t("learning rate"))
        ax.set_title(t("lr = {lr:g}", lr=0.002))
        ax.set_ylabel("$\\sigma$")  # mathematics alone: the same in both languages
        seen.append((ax.get_xlabel(), ax.get_title()))
        return fig

    english = plotting.bilingual_figure(draw, "08_demo_lr")
    plt.close(english)
    assert seen == [("tasa de aprendizaje", "tasa = 0.002"), ("learning rate", "lr = 0.002")]
    spanish_png = course / "es" / "theory" / "figures" / "08_demo_lr.png"
    english_png = course / "theory" / "figures" / "08_demo_lr.png"
    assert plotting.figure_texts(english_png) == ["learning rate", "lr = {lr:g}"]
    assert not np.array_equal(pixels(spanish_png), pixels(english_png))


def test_a_text_without_spanish_stops_the_drawing(course):
    draw = figure_with(lambda t: t("momentum"))
    with pytest.raises(KeyError, match="'momentum' has no Spanish in es/figures.json"):
        plotting.bilingual_figure(draw, "08_demo_momentum")
    assert not (course / "theory" / "figures" / "08_demo_momentum.png").exists()


def test_a_text_that_skips_t_stops_the_drawing(course):
    draw = figure_with(lambda t: t("learning rate"), lambda t: "loss after 10 steps")
    with pytest.raises(ValueError, match=r"\['loss after 10 steps'\] reached the figure without t"):
        plotting.bilingual_figure(draw, "08_demo_loss")
    assert not (course / "es" / "theory" / "figures" / "08_demo_loss.png").exists()


def test_a_text_without_words_needs_no_translation(course):
    import matplotlib.pyplot as plt

    draw = figure_with(lambda t: "B = 64", lambda t: r"$\varepsilon = 10^{-5}$, d = 3")
    plt.close(plotting.bilingual_figure(draw, "08_demo_neutral"))
    assert plotting.figure_texts(course / "theory" / "figures" / "08_demo_neutral.png") == []


# ----------------------------------------------------------------------------- redrawing


def shifted_copy(path, levels: int, texts: str | None = None) -> bytes:
    """The PNG at ``path`` with a 10 x 10 square of its pixels moved by ``levels`` in each
    colour channel (its recorded texts kept, or replaced by ``texts``)."""
    from PIL import Image, PngImagePlugin

    with Image.open(path) as image:
        recorded = image.info.get(plotting.TEXTS_KEY)
        picture = np.asarray(image.convert("RGBA"), dtype=np.int16).copy()
    picture[:10, :10, :3] = np.clip(picture[:10, :10, :3] + levels, 0, 255)
    if picture[:10, :10, :3].min() == 255:  # a white corner: move it down instead
        picture[:10, :10, :3] -= levels
    info = PngImagePlugin.PngInfo()
    if (texts if texts is not None else recorded) is not None:
        info.add_text(plotting.TEXTS_KEY, texts if texts is not None else recorded)
    buffer = io.BytesIO()
    Image.fromarray(picture.astype(np.uint8), "RGBA").save(buffer, format="PNG", pnginfo=info)
    return buffer.getvalue()


def redraw(course):
    """Draw the demo figure again; the bytes of its two files afterwards."""
    import matplotlib.pyplot as plt

    plt.close(
        plotting.bilingual_figure(figure_with(lambda t: t("learning rate")), "08_demo_redraw")
    )
    return {
        language: (course / folder / "figures" / "08_demo_redraw.png").read_bytes()
        for language, folder in (("en", "theory"), ("es", "es/theory"))
    }


def test_a_redrawn_figure_within_the_tolerance_is_not_rewritten(course):
    """A test run redraws every figure; pixels moved by at most the tolerance (the last bits of
    another CPU's arithmetic) leave the files, and so the checkout, as they were."""
    fresh = redraw(course)
    stored = {}
    for language, folder in (("en", "theory"), ("es", "es/theory")):
        path = course / folder / "figures" / "08_demo_redraw.png"
        stored[language] = shifted_copy(path, plotting.FIGURE_TOLERANCE)
        path.write_bytes(stored[language])
    assert stored["en"] != fresh["en"] and stored["es"] != fresh["es"]
    assert redraw(course) == stored


@pytest.mark.parametrize("change", ["pixels", "texts", "redraw"])
def test_a_changed_figure_is_rewritten(course, monkeypatch, change):
    fresh = redraw(course)
    path = course / "theory" / "figures" / "08_demo_redraw.png"
    if change == "pixels":
        path.write_bytes(shifted_copy(path, plotting.FIGURE_TOLERANCE + 1))
    elif change == "texts":
        path.write_bytes(shifted_copy(path, 0, texts='["a text no longer drawn"]'))
    else:
        path.write_bytes(shifted_copy(path, 1))
        monkeypatch.setenv(plotting.FIGURES_VARIABLE, "redraw")
    assert path.read_bytes() != fresh["en"]
    assert redraw(course)["en"] == fresh["en"]
    assert plotting.figure_texts(path) == ["learning rate"]


def test_under_the_test_suite_no_existing_figure_is_rewritten(course, monkeypatch):
    """What every demo a test run executes runs under (normlab.pytest_plugin sets it): an
    existing figure stays as it is however much it changed; a missing one is still drawn."""
    redraw(course)
    path = course / "theory" / "figures" / "08_demo_redraw.png"
    changed = shifted_copy(path, 100, texts='["a text no longer drawn"]')
    path.write_bytes(changed)
    (course / "es" / "theory" / "figures" / "08_demo_redraw.png").unlink()
    monkeypatch.setenv(plotting.FIGURES_VARIABLE, "keep")
    redraw(course)
    assert path.read_bytes() == changed
    assert (course / "es" / "theory" / "figures" / "08_demo_redraw.png").is_file()


def test_the_suite_keeps_the_figures_of_the_demos_it_runs():
    import subprocess

    kernel_environment = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('NORMLAB_FIGURES'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert kernel_environment.stdout.strip() == "keep"
