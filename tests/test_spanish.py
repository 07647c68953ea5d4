"""The Spanish edition (es/) keeps in step with the English, and its labs are generated and grade.

Three kinds of test:

* the generator (``normlab labs`` -> ``es/labs/``) and the edition's rules, on temporary copies
  of the course with sample Spanish files (tests/spanish_sample.py), so that they hold whatever
  the translators have delivered;
* the Spanish files that exist in the repository, each against its English file: parity
  (headings, equations, numbers, inline code, code blocks, figures, link targets, practice
  labels), links and anchors, freshness of the stamps, completeness of the lab catalogs;
* drift: each check is shown to fail on a deliberately changed copy.

``SPANISH_CHAPTERS`` (src/normlab/translation/scope.py) lists the chapters the edition claims to
cover; the coverage test fails when a claimed chapter lacks a part and reports (as a skip) the
chapters not translated yet.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil

import nbformat
import pytest
from conftest import (
    HANG_GUARD_S,
    ROOT,
    SharedKernel,
    check_reports,
    fill_answer_regions,
    missing_extra,
)
from spanish_sample import (
    STEM,
    pseudo_catalog,
    sample_catalog,
    solution_cells,
    stamp,
    write_catalog,
    write_sample_edition,
)

from normlab import chapter_files, translation
from normlab.build import build_all, copy_missing_labs, for_this_kernel
from normlab.grader.grade import parse_notebook
from normlab.grader.registry import all_labs, lab_for_path

ES = ROOT / "es"
SPANISH_MARKDOWN = translation.spanish_markdown(ROOT)
STAMPED = translation.stamped_files(ROOT)
CATALOGS = sorted((ES / "catalog").glob("*.json"))
SPANISH_LABS = chapter_files(ES / "labs", ".ipynb")


def rel(path):
    return path.relative_to(ROOT).as_posix()


def build(root, **kwargs):
    """build_all in ``root``: (exit status, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = build_all(root, **kwargs)
    return code, err.getvalue()


@pytest.fixture
def course(tmp_path):
    """The parts of the course the generator reads, with the sample catalog of 03_layernorm."""
    for folder in ("solutions", "theory", "notebooks", "docs"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    for name in ("README.md", "START_HERE.md"):
        shutil.copy2(ROOT / name, tmp_path / name)
    write_catalog(tmp_path, STEM, sample_catalog(tmp_path))
    return tmp_path


def edit_solution(course, cell_id, old, new):
    path = course / "solutions" / f"{STEM}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    (cell,) = [c for c in notebook.cells if c.id == cell_id]
    assert old in cell.source
    cell.source = cell.source.replace(old, new)
    nbformat.write(notebook, path)


# ----------------------------------------------------------------------------- the generator


def test_spanish_lab_is_the_english_lab_with_the_catalog_text(course):
    assert build(course) == (0, "")
    english = nbformat.read(course / "labs" / f"{STEM}.ipynb", as_version=4)
    spanish = nbformat.read(course / "es" / "labs" / f"{STEM}.ipynb", as_version=4)
    assert [c.id for c in spanish.cells] == [c.id for c in english.cells]
    assert [c.cell_type for c in spanish.cells] == [c.cell_type for c in english.cells]
    assert [c.metadata for c in spanish.cells] == [c.metadata for c in english.cells]
    assert all(c.outputs == [] for c in spanish.cells if c.cell_type == "code")
    translated = {"b7561e95", "9a378402", "337112d6"}
    setup = "1721a320"  # the setup cell: the English one, plus the switch to Spanish reports
    for en, es in zip(english.cells, spanish.cells, strict=True):
        if en.id == setup:
            assert "from normlab import check, set_language, set_seed\n" in es.source
            assert '\nset_language("es")  # los informes de check() en español\nset_seed(0)' in (
                es.source
            )
            assert (
                es.source.replace(", set_language", "").replace(
                    'set_language("es")  # los informes de check() en español\n', ""
                )
                == en.source
            )
        elif en.id not in translated:
            assert es.source == en.source, en.id
    by_id = {c.id: c for c in spanish.cells}
    assert by_id["b7561e95"].source.startswith("# Laboratorio 03 — LayerNorm desde cero")
    code = by_id["337112d6"].source
    assert '"""LayerNorm sobre el último eje de x.' in code
    assert 'raise NotImplementedError("tu código aquí' in code
    assert "def layernorm_forward(x, gamma, beta, eps=1e-5):" in code
    assert "### BEGIN SOLUTION" not in json.dumps(spanish)
    assert spanish.metadata["normlab"]["lang"] == "es"
    assert spanish.metadata["normlab"]["lab"] == STEM
    assert "lang" not in english.metadata["normlab"]  # the English labs are unchanged
    # The grader reads the lab from the metadata (or the file name) of a Spanish lab too.
    raw = (course / "es" / "labs" / f"{STEM}.ipynb").read_bytes()
    _, metadata = parse_notebook(raw)
    assert lab_for_path(course / "renamed.ipynb", metadata).stem == STEM
    assert build(course, check=True) == (0, "")


def test_a_changed_english_markdown_cell_marks_its_translation_stale(course):
    edit_solution(course, "9a378402", "over the **last** axis", "over the **final** axis")
    code, err = build(course)
    assert code == 1 and "9a378402" in err and "stale" in err, err
    code, err = build(course, check=True)
    assert code == 1 and "9a378402" in err, err


def test_every_stale_entry_of_every_catalog_is_reported_at_once(course):
    write_catalog(course, "04_rmsnorm", pseudo_catalog(course, "04_rmsnorm"))
    edit_solution(course, "9a378402", "over the **last** axis", "over the **final** axis")
    edit_solution(course, "b7561e95", "You will write, in NumPy:", "You will write:")
    path = course / "solutions" / "04_rmsnorm.ipynb"
    notebook = nbformat.read(path, as_version=4)
    first = next(c for c in notebook.cells if c.cell_type == "markdown")
    first.source += "\n\nOne more sentence."
    nbformat.write(notebook, path)
    code, err = build(course)
    assert code == 1, err
    for cell_id in ("9a378402", "b7561e95", first.id):
        assert f"cell {cell_id} is stale" in err, err


def test_a_changed_english_fragment_in_code_fails_naming_the_cell(course):
    edit_solution(course, "337112d6", "LayerNorm over the last axis of x.", "LayerNorm, last axis.")
    code, err = build(course)
    assert code == 1 and "337112d6" in err and "LayerNorm over the last axis of x." in err, err


def test_an_entry_for_a_cell_that_does_not_exist_fails(course):
    catalog = sample_catalog(course)
    catalog["cells"]["deadbeef"] = {"replace": [["x", "y"]]}
    write_catalog(course, STEM, catalog)
    code, err = build(course)
    assert code == 1 and "deadbeef" in err and "does not exist" in err, err


def test_a_translated_identifier_is_refused(course):
    catalog = sample_catalog(course)
    catalog["cells"]["337112d6"]["replace"].append(["def layernorm_forward", "def capa_forward"])
    write_catalog(course, STEM, catalog)
    code, err = build(course)
    assert code == 1 and "337112d6" in err and "strings and comments" in err, err


def test_a_markdown_entry_on_a_code_cell_and_a_missing_hash_are_refused(course):
    catalog = sample_catalog(course)
    catalog["cells"]["1721a320"] = {"en_sha256": "0" * 64, "markdown": "texto"}
    write_catalog(course, STEM, catalog)
    code, err = build(course)
    assert code == 1 and "1721a320" in err, err
    catalog = sample_catalog(course)
    del catalog["cells"]["b7561e95"]["en_sha256"]
    write_catalog(course, STEM, catalog)
    code, err = build(course)
    assert code == 1 and "b7561e95" in err, err


def test_check_reports_missing_stale_and_orphan_spanish_labs(course):
    code, err = build(course, check=True)
    assert code == 1 and f"missing: es/labs/{STEM}.ipynb" in err, err
    assert build(course)[0] == 0
    catalog = sample_catalog(course)
    catalog["cells"]["b7561e95"]["markdown"] += "\n\nUna frase más."
    write_catalog(course, STEM, catalog)
    code, err = build(course, check=True)
    assert code == 1 and f"stale: es/labs/{STEM}.ipynb" in err, err
    assert build(course)[0] == 0
    (course / "es" / "catalog" / f"{STEM}.json").unlink()
    code, err = build(course, check=True)
    assert code == 1 and f"orphan: es/labs/{STEM}.ipynb" in err, err
    write_catalog(course, "42_nothing", {"cells": {}})
    code, err = build(course)
    assert code == 1 and "42_nothing" in err, err


def test_one_stem_builds_its_spanish_lab_alone(course):
    write_catalog(course, "04_rmsnorm", pseudo_catalog(course, "04_rmsnorm"))
    assert build(course, stems=[STEM])[0] == 0
    assert sorted(p.name for p in (course / "es" / "labs").iterdir()) == [f"{STEM}.ipynb"]


def test_pseudo_translation_of_every_lab_builds_and_keeps_the_code(course):
    """A catalog entry for every Markdown cell and every comment of every lab is accepted."""
    for stem in all_labs():
        write_catalog(course, stem, pseudo_catalog(course, stem))
    assert build(course) == (0, "")
    for stem in all_labs():
        assert translation.catalog_problems(course, stem) == []
        spanish = nbformat.read(course / "es" / "labs" / f"{stem}.ipynb", as_version=4)
        assert all(c.source.count("(es)") for c in spanish.cells if c.cell_type == "markdown")


def test_a_markdown_answer_region_must_keep_its_markers(course):
    path = course / "solutions" / f"{STEM}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    answer = nbformat.v4.new_markdown_cell(
        "Why?\n### BEGIN SOLUTION\nbecause x - mu = 0\n### END SOLUTION"
    )
    answer.id = "a1b2c3d4"
    notebook.cells.append(answer)
    nbformat.write(notebook, path)
    catalog = sample_catalog(course)
    english = solution_cells(course)["a1b2c3d4"]
    from spanish_sample import cell_hash

    catalog["cells"]["a1b2c3d4"] = {
        "en_sha256": cell_hash(english),
        "markdown": "¿Por qué? x - mu = 0",
    }
    write_catalog(course, STEM, catalog)
    code, err = build(course)
    assert code == 1 and "a1b2c3d4" in err and "BEGIN SOLUTION" in err, err
    catalog["cells"]["a1b2c3d4"]["markdown"] = (
        "¿Por qué?\n### BEGIN SOLUTION\nporque x - mu = 0\n### END SOLUTION"
    )
    write_catalog(course, STEM, catalog)
    assert build(course)[0] == 0
    spanish = (course / "es" / "labs" / f"{STEM}.ipynb").read_text()
    assert "porque x - mu" not in spanish and "*YOUR ANSWER HERE*" in spanish


def test_copying_gives_the_spanish_labs_and_never_overwrites(course):
    assert build(course)[0] == 0
    (course / "work" / "es").mkdir(parents=True)
    mine = course / "work" / "es" / f"{STEM}.ipynb"
    mine.write_text("my Spanish work")
    assert copy_missing_labs(course, quiet=True) == 0
    assert mine.read_text() == "my Spanish work"
    # The English copy is the lab, with the kernel's language_info (its Python version, which
    # JupyterLab would write on starting the kernel) filled in.
    assert (course / "work" / f"{STEM}.ipynb").read_text() == for_this_kernel(
        (course / "labs" / f"{STEM}.ipynb").read_text()
    )
    mine.unlink()
    assert copy_missing_labs(course, quiet=True) == 0
    # The copy is the Spanish lab, but one folder deeper: its links to the Spanish chapter and
    # worked solutions say so (../../es/...), and nothing else changes.
    original = (course / "es" / "labs" / f"{STEM}.ipynb").read_text()
    assert mine.read_text() != original
    assert mine.read_text().replace("../../es/", "../") == for_this_kernel(original)
    assert (course / "work" / "es" / "README.md").is_file()


def markdown_links(notebook_path):
    """The relative link targets of a notebook's Markdown cells, without their anchors."""
    notebook = nbformat.read(notebook_path, as_version=4)
    text = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    targets = re.findall(r"\]\(([^()\s]+)\)", text)
    return [t.split("#")[0] for t in targets if not re.match(r"^[a-z]+:|#", t)]


def test_every_link_of_every_copy_leads_where_the_lab_leads(tmp_path):
    """work/es/NN.ipynb links the Spanish chapter and worked solutions, as es/labs/NN does."""
    for folder in ("labs", "theory", "solutions", "notebooks", "es"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    assert copy_missing_labs(tmp_path, quiet=True) == 0
    checked = 0
    pairs = [("labs", "work"), ("es/labs", "work/es")]
    for labs, work in pairs:
        for source in chapter_files(tmp_path / labs, ".ipynb"):
            copy = tmp_path / work / source.name
            from_lab = [(source.parent / t).resolve() for t in markdown_links(source)]
            from_copy = [(copy.parent / t).resolve() for t in markdown_links(copy)]
            assert from_copy == from_lab, copy
            assert all(path.is_file() for path in from_copy), (copy, from_copy)
            checked += len(from_copy)
    spanish = markdown_links(tmp_path / "work" / "es" / "03_layernorm.ipynb")
    assert "../../es/theory/03_layernorm.md" in spanish, spanish
    assert checked > 2 * len(SPANISH_LABS)


# ----------------------------------------------------------------------------- the real files


@pytest.mark.parametrize("spanish", SPANISH_MARKDOWN, ids=rel)
def test_translation_has_the_same_structure_math_numbers_code_and_links(spanish):
    where = rel(spanish)
    english = translation.english_of(where)
    assert (ROOT / english).is_file(), f"{where} translates a file that does not exist"
    problems = translation.parity_problems(
        (ROOT / english).read_text(encoding="utf-8"),
        english,
        spanish.read_text(encoding="utf-8"),
        where,
    )
    assert problems == []


@pytest.mark.parametrize(
    "spanish",
    [*SPANISH_MARKDOWN, *[p for p in (ES / "README.md", ES / "START_HERE.md") if p.is_file()]],
    ids=rel,
)
def test_every_link_and_anchor_of_a_spanish_file_resolves(spanish):
    text = spanish.read_text(encoding="utf-8")
    assert translation.link_problems(ROOT, text, rel(spanish), translation.WORK_AS) == []


@pytest.mark.parametrize("spanish", STAMPED, ids=rel)
def test_translation_stamp_is_fresh(spanish):
    assert translation.stamp_problem(ROOT, spanish) is None


@pytest.mark.parametrize("catalog", CATALOGS, ids=lambda p: p.stem)
def test_catalog_covers_every_markdown_cell_and_is_fresh(catalog):
    assert translation.catalog_problems(ROOT, catalog.stem) == []
    assert translation.stale_catalog_cells(ROOT, catalog.stem) == []
    assert translation.catalog_parity_problems(ROOT, catalog.stem) == []


def test_claimed_chapters_are_complete_and_the_rest_are_listed():
    stems = {p.stem for p in chapter_files(ROOT / "theory", ".md")}
    assert set(translation.SPANISH_CHAPTERS) <= stems, "SPANISH_CHAPTERS names unknown stems"
    missing = {stem: parts for stem, parts in translation.coverage(ROOT).items() if parts}
    claimed = {s: p for s, p in missing.items() if s in translation.SPANISH_CHAPTERS}
    assert claimed == {}, f"claimed in SPANISH_CHAPTERS but not translated: {claimed}"
    for stem in translation.SPANISH_CHAPTERS:
        assert (ES / "labs" / f"{stem}.ipynb").is_file(), f"no es/labs/{stem}.ipynb: make labs"
    if translation.SPANISH_CHAPTERS:  # an edition that claims chapters has its front pages
        assert (ES / "README.md").is_file() and (ES / "START_HERE.md").is_file()
    if missing:
        pytest.skip(
            "not translated yet (not claimed): "
            + "; ".join(f"{stem}: {', '.join(parts)}" for stem, parts in missing.items())
        )


def test_the_start_page_offers_the_spanish_one():
    text = (ROOT / "START_HERE.md").read_text(encoding="utf-8")
    assert "Español: [es/START_HERE.md](es/START_HERE.md)" in text
    assert "es/START_HERE.md" in (ROOT / "Makefile").read_text()
    assert "English: [START_HERE.md](../START_HERE.md)" in (ES / "START_HERE.md").read_text()


def test_the_spanish_start_page_has_a_row_for_every_spanish_chapter():
    assert translation.start_page_problems(ROOT) == []


def test_a_start_page_row_missing_or_extra_in_spanish_is_found(course):
    write_sample_edition(course)
    assert translation.start_page_problems(course) == []
    page = course / "es" / "START_HERE.md"
    text = page.read_text(encoding="utf-8")
    # The Spanish row of chapter 03 loses a page that the English row links (its demo).
    demo = "[demo](../notebooks/03_layernorm.ipynb)"
    page.write_text(text.replace(demo, "la demo"), encoding="utf-8")
    (problem,) = translation.start_page_problems(course)
    assert "missing ['notebooks/03_layernorm.ipynb']" in problem, problem
    # A row for a chapter the Spanish edition does not have (04: no es/theory/04_rmsnorm.md).
    extra = "\n[RMSNorm](../work/es/04_rmsnorm.ipynb)\n"
    page.write_text(text + extra, encoding="utf-8")
    (problem,) = translation.start_page_problems(course)
    assert "not in the English ['work/04_rmsnorm.ipynb']" in problem, problem
    page.write_text(text, encoding="utf-8")
    assert translation.start_page_problems(course) == []


# ----------------------------------------------------------------------------- drift

ENGLISH = """# 3. Layer normalization

Intro: Ba et al. (2016), §3.1 and Table 1. With $\\varepsilon = 10^{-5}$ and the mean
$\\mu = \\frac1d \\sum_i x_i$, a batch of 1,000 tokens costs 23.6% more; `eps=1e-5` by default.

![The output against epsilon](figures/03_layernorm_eps.png)

## The math

$$\\hat x = \\frac{x - \\mu}{\\sqrt{\\sigma^2 + \\varepsilon}}$$

$$\\sigma^2 = \\frac1d \\sum_i (x_i - \\mu)^2 \\quad \\text{(biased), and for a factor of 0.9:}
\\quad n = 25{,}165{,}824$$

1. First step: 0.9288 after 12 blocks.
2. Second step, see the [demo](../notebooks/03_layernorm.ipynb#a-small-helper-checked-against-pytorch).

```python
y = layernorm_forward(x, gamma, beta)  # a comment
```

### Shape rule

Keep `(B, L, 1)`. See [the practice problems](#practice-problems) and
[arXiv:1607.06450](https://arxiv.org/abs/1607.06450).

## Practice problems

1. With $d = 1$, why is $y = \\beta$? (a) the mean, (b) the variance.
   ([worked solution](../solutions/03_layernorm.md#problem-1))
2. What is $\\hat x$ for $d = 2$?
"""

SPANISH = """# 3. Normalización por capas

Introducción: Ba et al. (2016), §3.1 y la Tabla 1. Con $\\varepsilon = 10^{-5}$ y la media $\\mu =
\\frac1d \\sum_i x_i$, un lote de 1\u202f000 tokens cuesta un 23.6% más; `eps=1e-5` por defecto.

![La salida frente a épsilon](figures/03_layernorm_eps.png)

## Las matemáticas

$$\\hat x = \\frac{x - \\mu}{\\sqrt{\\sigma^2 + \\varepsilon}}$$

$$\\sigma^2 = \\frac1d \\sum_i (x_i - \\mu)^2 \\quad \\text{(sesgada), y para un factor de 0.9:}
\\quad n = 25\\,165\\,824$$

1. Primer paso: 0.9288 tras 12 bloques.
2. Segundo paso, ver la [demo](../../notebooks/03_layernorm.ipynb#a-small-helper-checked-against-pytorch).

```python
y = layernorm_forward(x, gamma, beta)  # a comment
```

### Regla de formas

Conserva `(B, L, 1)`. Ver [los problemas de práctica](#problemas-de-práctica) y
[arXiv:1607.06450](https://arxiv.org/abs/1607.06450).

## Problemas de práctica

1. Con $d = 1$, ¿por qué $y = \\beta$? (a) la media, (b) la varianza.
   ([solución](../solutions/03_layernorm.md#problema-1))
2. ¿Cuánto vale $\\hat x$ para $d = 2$?
"""

SOLUTIONS_ES = "# 3. Soluciones\n\n## Problema 1\n\nTexto.\n"


def parity(spanish, english=ENGLISH):
    return translation.parity_problems(
        english, "theory/03_layernorm.md", spanish, "es/theory/03_layernorm.md"
    )


def test_parity_reads_a_count_of_parameters_in_millions():
    english = "# 3. Layer\n\nModels of 130M to 7B parameters, and one of 22 billion.\n"
    spanish = "# 3. Capa\n\nModelos de 130 millones a 7000 millones de parámetros, y uno de 22\u202f000 millones.\n"
    assert translation.parity_problems(english, "theory/x.md", spanish, "es/theory/x.md") == []
    wrong = spanish.replace("7000 millones", "700 millones")
    found = translation.parity_problems(english, "theory/x.md", wrong, "es/theory/x.md")
    assert len(found) == 1 and found[0].startswith("numbers differ"), found


def test_parity_reads_the_spanish_copies_folder_as_the_english_in_a_command_block():
    english = "# 3. Layer\n\n```bash\nnormlab grade work/03_layernorm.ipynb\n```\n"
    spanish = english.replace("Layer", "Capa").replace("work/", "work/es/")
    assert translation.parity_problems(english, "theory/x.md", spanish, "es/theory/x.md") == []


DRIFTS = {  # name: (text of the faithful translation, what replaces it, the problem reported)
    "an equation changed": ("\\sigma^2 + \\varepsilon}}$$", "\\sigma^2}}$$", "math"),
    "an inline equation changed": ("$d = 2$", "$d = 3$", "math"),
    "a heading dropped": ("### Regla de formas\n", "", "heading"),
    "a heading level changed": ("### Regla", "## Regla", "heading"),
    "a number changed": ("0.9288", "0.9289", "numbers"),
    "a number dropped": (" tras 12 bloques", "", "numbers"),
    "a number added": ("Primer paso", "Primer paso (de 3)", "numbers"),
    "a decimal comma": ("23.6%", "23,6%", "numbers"),
    "a section number changed": ("§3.1", "§3.2", "numbers"),
    "a list item dropped": ("2. ¿Cuánto vale $\\hat x$ para $d = 2$?\n", "", "math"),
    "an inline code span translated": ("`eps=1e-5`", "`épsilon=1e-5`", "code spans"),
    "a code block changed": ("# a comment", "# un comentario", "code blocks"),
    "a figure dropped": (
        "![La salida frente a épsilon](figures/03_layernorm_eps.png)",
        "",
        "figures",
    ),
    "a notebook link changed": ("notebooks/03_layernorm", "notebooks/04_rmsnorm", "link"),
    "a URL changed": ("abs/1607.06450)", "abs/1607.06451)", "external"),
    "a practice label dropped": (" (b) la varianza.", " la varianza.", "labels"),
    "a number in a formula's words changed": ("factor de 0.9:}", "factor de 0.8:}", "math"),
    "a formula changed beside its words": ("(x_i - \\mu)^2 \\quad", "(x_i - \\mu) \\quad", "math"),
    "a formula's thousands changed": ("25\\,165\\,824", "25\\,165\\,825", "math"),
    "thousands grouped with a comma": ("1\u202f000 tokens", "1,000 tokens", "grouped with commas"),
    "thousands grouped with a point": ("1\u202f000 tokens", "1.000 tokens", "numbers"),
}


def test_a_faithful_translation_passes():
    assert parity(SPANISH) == []


@pytest.mark.parametrize("name", DRIFTS)
def test_parity_fails_on_a_drifted_translation(name):
    original, replacement, expected = DRIFTS[name]
    assert original in SPANISH, f"the drift {name!r} does not apply"
    drifted = SPANISH.replace(original, replacement, 1)
    problems = parity(drifted)
    assert problems and any(expected in p for p in problems), problems


def _spans(text):
    """Where the math, numbers and headings of a real Spanish file are (for drifting it)."""
    math = re.search(r"\$\$([^$]+)\$\$|\$([^$\n]+)\$", text)
    number = re.search(r"(?<![\w.$\\{^_-])\d+\.\d+(?![\w$])", text)
    headings = [m for m in re.finditer(r"^#{2,6} .*\n", text, re.M)]
    return math, number, headings


@pytest.mark.parametrize(
    "spanish", SPANISH_MARKDOWN or [None], ids=lambda p: rel(p) if p else "sample"
)
def test_parity_fails_on_drifted_copies_of_the_real_translations(spanish, tmp_path):
    """Each real Spanish file with one equation changed, one heading dropped, one number
    changed: parity (or the links) must notice each."""
    if spanish is None:
        english_where, where, english, text = (
            "theory/03_layernorm.md",
            "es/theory/03_layernorm.md",
            ENGLISH,
            SPANISH,
        )
    else:
        where = rel(spanish)
        english_where = translation.english_of(where)
        english = (ROOT / english_where).read_text(encoding="utf-8")
        text = spanish.read_text(encoding="utf-8")
    math, number, headings = _spans(text)
    drifted = []
    if math:
        drifted.append(text[: math.end() - 1] + " + 1" + text[math.end() - 1 :])
    if number:
        digit = number.group(0)[-1]
        changed = number.group(0)[:-1] + ("7" if digit != "7" else "3")
        drifted.append(text[: number.start()] + changed + text[number.end() :])
    if headings:
        last = headings[-1]
        drifted.append(text[: last.start()] + text[last.end() :])
    assert len(drifted) == 3, "the file has no equation, decimal number or heading to drift"
    for copy in drifted:
        assert translation.parity_problems(english, english_where, copy, where), copy[:200]


def test_links_must_resolve_and_point_to_the_spanish_pages(course):
    write_sample_edition(course)
    (course / "es" / "theory" / f"{STEM}.md").write_text(
        stamp(course, f"theory/{STEM}.md") + SPANISH
    )
    (course / "es" / "solutions" / f"{STEM}.md").write_text(SOLUTIONS_ES)
    where = f"es/theory/{STEM}.md"
    assert translation.link_problems(course, SPANISH, where) == []
    broken = {
        "#problema-1)": "#problem-1)",  # the English anchor
        "(#problemas-de-práctica)": "(#problemas-de-practica)",  # the accent dropped
        "(figures/03_layernorm_eps.png)": "(figures/03_layernorm_epsilon.png)",  # no such file
        "](figures/03_layernorm_eps.png)": "](../../theory/figures/03_layernorm_eps.png)",  # English
        "(../solutions/03_layernorm.md#problema-1)": "(../../solutions/03_layernorm.md#problem-1)",
        "(../../notebooks/03_layernorm.ipynb#a-small-helper-checked-against-pytorch)": "(../../notebooks/03_layernorm.ipynb#no-such)",
    }
    for good, bad in broken.items():
        assert good in SPANISH, good
        assert translation.link_problems(course, SPANISH.replace(good, bad), where), bad


def test_staleness_when_the_english_changes_after_stamping(course):
    write_sample_edition(course)
    stamped = translation.stamped_files(course)
    assert {p.relative_to(course).as_posix() for p in stamped} == {
        f"es/theory/{STEM}.md",
        f"es/solutions/{STEM}.md",
        "es/README.md",
        "es/START_HERE.md",
    }
    assert [translation.stamp_problem(course, p) for p in stamped] == [None] * 4
    for english in (f"theory/{STEM}.md", f"solutions/{STEM}.md", "README.md", "START_HERE.md"):
        with open(course / english, "a", encoding="utf-8") as stream:
            stream.write("\nOne more English sentence.\n")
    problems = [translation.stamp_problem(course, p) for p in stamped]
    assert all(p and "stale" in p for p in problems), problems
    # Restamping (after updating the translation) makes them fresh again.
    for path in stamped:
        translation.restamp(course, path)
    assert [translation.stamp_problem(course, p) for p in stamped] == [None] * 4
    first = (course / "es" / "theory" / f"{STEM}.md").read_text().splitlines()[:2]
    assert (
        first[0].startswith("<!-- es: translation of")
        and first[1] == "# 3. Normalización por capas"
    )
    # No stamp, or a stamp that names another file, is an error too.
    path = course / "es" / "theory" / f"{STEM}.md"
    body = path.read_text().split("\n", 1)[1]
    path.write_text(body)
    assert "no translation stamp" in translation.stamp_problem(course, path)
    path.write_text(stamp(course, "theory/04_rmsnorm.md") + body)
    assert "names theory/04_rmsnorm.md" in translation.stamp_problem(course, path)


def test_catalog_staleness_incompleteness_and_restamping_a_cell(course):
    assert translation.catalog_problems(course, STEM)  # the sample translates 2 of 13 cells
    full = pseudo_catalog(course, STEM)
    write_catalog(course, STEM, full)
    assert translation.catalog_problems(course, STEM) == []
    assert translation.stale_catalog_cells(course, STEM) == []
    edit_solution(course, "9a378402", "over the **last** axis", "over the **final** axis")
    assert translation.stale_catalog_cells(course, STEM) == ["9a378402"]
    assert translation.stamp_catalog_cells(course, STEM, ["9a378402"]) == []
    assert translation.stale_catalog_cells(course, STEM) == []
    del full["cells"]["9a378402"]
    write_catalog(course, STEM, full)
    assert translation.catalog_problems(course, STEM) == [
        f"es/catalog/{STEM}.json: no entry for Markdown cell 9a378402"
    ]


def test_catalog_markdown_keeps_the_english_math_and_numbers(course):
    write_sample_edition(course)  # the chapter the lab's first cell links to
    assert translation.catalog_parity_problems(course, STEM) == []
    catalog = sample_catalog(course)
    catalog["cells"]["9a378402"]["markdown"] = catalog["cells"]["9a378402"]["markdown"].replace(
        "float32 entra", "float16 entra"
    )
    write_catalog(course, STEM, catalog)
    problems = translation.catalog_parity_problems(course, STEM)
    assert problems and "9a378402" in problems[0] and "numbers" in problems[0], problems


def test_the_translations_command_reports_and_restamps(course, capsys):
    from normlab.cli import main

    write_sample_edition(course)
    assert main(["translations", "--root", str(course)]) == 1  # the sample is a summary
    out = capsys.readouterr()
    assert "not translated yet: 04_rmsnorm: chapter, worked solutions, lab catalog" in out.out
    assert "es/theory/03_layernorm.md: heading levels differ" in out.err
    with open(course / "README.md", "a", encoding="utf-8") as stream:
        stream.write("\nMore.\n")
    main(["translations", "--root", str(course)])
    assert "es/README.md is stale" in capsys.readouterr().err
    readme = course / "es" / "README.md"
    assert main(["translations", "stamp", str(readme), "--root", str(course)]) == 0
    main(["translations", "--root", str(course)])
    assert "es/README.md is stale" not in capsys.readouterr().err
    catalog = str(course / "es" / "catalog" / f"{STEM}.json")
    assert main(["translations", "stamp", catalog, "--root", str(course)]) == 2


# ----------------------------------------------------------------------------- grading


# The Spanish labs grade full with the answers pasted in, graded by the released edition's
# grader (tests/test_release.py::test_edition_labs_grade_full_when_filled), and 0 as
# shipped (the edition's own `make test`, run by test_release.py's student-edition test).


@pytest.fixture(scope="module")
def spanish_kernel():
    """The Spanish labs share a kernel, as the English ones do (tests/test_notebooks.py)."""
    shared = SharedKernel()
    yield shared
    shared.close()


@pytest.mark.notebooks
@pytest.mark.parametrize("path", SPANISH_LABS, ids=lambda p: p.stem)
def test_fresh_spanish_lab_runs_to_the_end_and_says_not_implemented(spanish_kernel, path):
    reports = check_reports(spanish_kernel, path)
    # The Spanish lab's setup cell switches check()'s reports to Spanish.
    assert reports and all(
        "todavía no está implementada" in r or "todavía no hay respuesta" in r for r in reports
    ), reports


# A mistake per lab, made in the answer pasted from the solution: (the right line, the wrong one).
MISTAKES = {
    "08_training": (  # the unbiased variance in training: a batch of one gives NaN
        "mean, var = x.mean(axis=0), x.var(axis=0)",
        "mean, var = x.mean(axis=0), x.var(axis=0, ddof=1)",
    ),
    "09_modern_norms": (  # the query norm's gain forgotten
        "q = q / torch.sqrt(q.pow(2).mean(dim=-1, keepdim=True) + eps) * gamma_q",
        "q = q / torch.sqrt(q.pow(2).mean(dim=-1, keepdim=True) + eps)",
    ),
    "10_low_precision": (  # truncating to bfloat16 instead of rounding
        "rounded = (bits + 0x7FFF + lowest_kept) & 0xFFFF0000",
        "rounded = bits & 0xFFFF0000",
    ),
    "11_triton_kernels": (  # RMSNorm's epsilon dropped
        "rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)",
        "rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N)",
    ),
}
# Words of English that Spanish does not have (the test reads prose, not code: identifiers with
# "_" or ".", `code` and Python's literals are left out first).
ENGLISH_WORDS = frozenset(
    "the of and is are should with your expected returned than not when must within whatever "
    "which this that from for to by at on it be was were its only each every after before below "
    "above same into does if or an".split()
)


WARNING = re.compile(r"^\S+:\d+: \w*Warning: .*\n(?:  .*\n)?", re.M)


def english_in(text: str) -> list[str]:
    """The lines of ``text`` that hold an English word."""
    found = []
    for line in text.splitlines():
        prose = re.sub(r"`[^`]*`|\b\w*[_.]\w*\b|\b(?:True|False|None)\b", " ", line)
        if any(word.lower() in ENGLISH_WORDS for word in re.findall(r"[^\W\d_]+", prose)):
            found.append(line)
    return found


def test_the_english_finder_finds_english_and_not_spanish():
    assert english_in("policy_rmsnorm returned torch.float32 for bfloat16 x") != []
    assert english_in("the loss should not change") != []
    spanish = "policy_rmsnorm devolvió torch.float32 para una x bfloat16: True\nvalores atípicos"
    assert english_in(spanish) == []


@pytest.mark.notebooks
@pytest.mark.parametrize("stem", sorted(MISTAKES))
def test_a_spanish_lab_with_a_mistake_says_nothing_in_english(tmp_path, stem):
    from nbclient import NotebookClient

    if missing_extra(stem):
        pytest.skip(missing_extra(stem))
    lab = tmp_path / f"{stem}.ipynb"
    shutil.copy2(ES / "labs" / f"{stem}.ipynb", lab)
    fill_answer_regions(lab, ROOT / "solutions" / f"{stem}.ipynb")
    notebook = nbformat.read(lab, as_version=4)
    right, wrong = MISTAKES[stem]
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and right in c.source]
    cell.source = cell.source.replace(right, wrong)
    NotebookClient(
        notebook,
        timeout=HANG_GUARD_S,
        kernel_name="python3",
        allow_errors=True,  # every cell runs: the failing ones say why, in Spanish
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    said, failed = [], 0
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                # a library's warning (NumPy's, Python's) is its own text, as a traceback is
                said.append(WARNING.sub("", output.text))
            elif output.output_type == "error":
                failed += 1
                said.append(output.evalue)  # the message; Python's traceback frame is not ours
            elif not any(kind.startswith("image/") for kind in output.get("data", {})):
                # a figure is shown as its image; its text/plain repr is not what anyone reads
                said.append(output.get("data", {}).get("text/plain", ""))
    assert failed or any("✗" in text for text in said), f"{stem}: the mistake went unnoticed"
    english = [line for text in said for line in english_in(text)]
    assert english == [], english


def test_diff_shows_what_changed_in_the_english_since_the_translation(course):
    import subprocess

    def git(*arguments):
        subprocess.run(
            ["git", "-c", "user.email=a@b", "-c", "user.name=a", *arguments],
            cwd=course,
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    write_sample_edition(course)
    git("add", "-A")
    git("commit", "-qm", "translated")
    with open(course / "theory" / f"{STEM}.md", "a", encoding="utf-8") as stream:
        stream.write("\nA sentence added later.\n")
    edit_solution(course, "9a378402", "over the **last** axis", "over the **final** axis")
    git("commit", "-qam", "English edited")
    chapter = translation.english_changes(course, course / "es" / "theory" / f"{STEM}.md")
    assert "+A sentence added later." in chapter and "(translated, " in chapter, chapter
    catalog = course / "es" / "catalog" / f"{STEM}.json"
    cell = translation.english_changes(course, catalog, "9a378402")
    removed = [ln for ln in cell.splitlines() if ln.startswith("-") and "**last**" in ln]
    added = [ln for ln in cell.splitlines() if ln.startswith("+") and "**final**" in ln]
    assert len(removed) == len(added) == 1, cell
    unchanged = translation.english_changes(course, catalog, "b7561e95")
    assert "unchanged since it was translated" in unchanged


# ----------------------------------------------------------------------------- the glossary


def test_every_spanish_text_follows_the_glossary():
    # chapters, worked solutions, catalogs (Markdown and the Spanish of code), README, start
    # page and every msgstr of es.po
    assert translation.glossary_problems(ROOT) == []


def test_the_glossary_page_lists_every_term():
    page = (ROOT / translation.GLOSSARY_PAGE).read_text(encoding="utf-8")
    rows = {
        tuple(cell.strip() for cell in line.strip("|").split("|")[:2])
        for line in page.splitlines()
        if line.startswith("| ")
    }
    for entry in translation.load_glossary(ROOT):
        spanish = entry["es"].replace("«…»", "«…» (comillas latinas)")
        assert (entry["en"], spanish) in rows, f"{translation.GLOSSARY_PAGE} lacks {entry['en']}"


GLOSSARY_DRIFTS = {  # a sentence with one variant the glossary replaces: the form it asks for
    "Luego la pasada hacia delante acumula.": "pase hacia adelante",
    "Divide entre la desviación típica de la fila.": "desviación estándar",
    "Actualiza las estadísticas móviles en cada paso.": "estadísticos móviles",
    "Abre la práctica y escribe la función.": "laboratorio",
    "El corrector ejecuta tus celdas.": "calificador",
    "Un núcleo fusionado lee `x` una vez.": "kernel; kernel fusionado",
    "El núcleo de Numba lee `x` una vez.": "kernel; kernel fusionado",
    "Abre el notebook de la demo.": "cuaderno",
    "La demostración mide el cociente.": "demo",
    "Mira la solución resuelta.": "soluciones desarrolladas",
    "Devuelve un arreglo de forma `(d,)`.": "array",
    "La comprobación suspende tu función.": "falla / no pasa",
    'Es lo que llaman "ruido" del lote.': "«…»",
    "LN usa estadísticos por ejemplo.": "de cada ejemplo",
    "Propón cambios únicos que lo arreglen.": "cambios aislados",
    "Un token normalizado solo da lo mismo.": "por sí solo",
    "Normalizarlas juntas es una suposición pobre.": "un mal supuesto",
    "No puede resolver una varianza de 1.": "no tiene resolución para una varianza",
    "Toma el ejemplo y puntúalo en 200 lotes.": "calcula su predicción",
    "Termina con `check(...)`. Compara tu respuesta con PyTorch.": "que compara tu respuesta",
    "Las entradas fuera de la diagonal del jacobiano son cero.": "elementos",
    "Las estadísticas de la fila dan la media.": "estadísticos",
    "Compárala con el punto de inflexión de la GPU.": "punto de cresta",
    "Clasifica las imágenes de test una vez.": "prueba (conjunto de prueba, lote de prueba)",
    "La precisión de validación mediana es 0.97.": "exactitud",
    "En punto flotante la resta cancela.": "coma flotante",
    "Un modelo de 22B parámetros.": "mil millones; 22\u202f000 millones",
    "retropropagación: dx coincide con autograd": "pase hacia atrás",
    "El paso hacia atrás lee x dos veces.": "pase hacia atrás",
    "Parte 1 · RMSNorm hacia delante": "pase hacia adelante",
    "La compuerta multiplica la rama.": "puerta",
    "Al fusionar la BatchNorm en la convolución cambia el sesgo.": "plegar; plegado",
    "El corrimiento se suma tras la escala.": "desplazamiento",
    "La pérdida en datos retenidos baja.": "datos reservados",
    "La corriente residual crece con la profundidad.": "flujo residual",
    "Post-LN se atasca en 3.1 nats.": "estancarse",
    "Un modelo atascado no aprende.": "estancarse",
    "El mayor logit de la atención crece.": "logit de atención",
}
# Each of these uses a word the glossary watches, rightly: none may be flagged.
GLOSSARY_ALLOWED = (
    "En la práctica, los problemas de práctica y el problema de práctica 2 son de este "
    "laboratorio. Una CPU de 2 núcleos, el kernel fusionado, el cuaderno de la demo. Escribe "
    'una letra, p. ej. "b" o "(b) porque ...". Por ejemplo, `notebooks/03_layernorm.ipynb`. '
    "El calentamiento (warmup) dura 50 pasos; después del warmup la tasa es fija. La "
    "retropropagación multiplica por W en cada paso hacia la entrada. La precisión de bfloat16, "
    "en coma flotante, y la exactitud de validación de un modelo de 22\u202f000 millones de "
    "parámetros; los estadísticos del lote de prueba y el punto de cresta."
)


def glossary_course(tmp_path, text, po_text=None):
    (tmp_path / "es" / "theory").mkdir(parents=True)
    shutil.copy2(ES / "glossary.json", tmp_path / "es" / "glossary.json")
    (tmp_path / "es" / "theory" / "03_layernorm.md").write_text(text, encoding="utf-8")
    if po_text is not None:
        po = tmp_path / translation.PO_FILE
        po.parent.mkdir(parents=True)
        po.write_text(po_text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("sentence", GLOSSARY_DRIFTS)
def test_the_glossary_flags_each_variant(tmp_path, sentence):
    found = translation.glossary_problems(glossary_course(tmp_path, f"# 3. Capa\n\n{sentence}\n"))
    assert len(found) == 1 and f"says «{GLOSSARY_DRIFTS[sentence]}»" in found[0], found


def test_the_glossary_leaves_the_right_uses_alone(tmp_path):
    assert translation.glossary_problems(glossary_course(tmp_path, GLOSSARY_ALLOWED)) == []


def test_the_first_warmup_of_a_text_is_glossed(tmp_path):
    found = translation.glossary_problems(
        glossary_course(tmp_path, "Sin warmup no entrena. Un calentamiento (warmup) corto.\n")
    )
    assert len(found) == 1 and "the first «warmup» is not glossed" in found[0], found


def test_the_glossary_reads_the_messages_of_the_grader(tmp_path):
    po = 'msgid "the forward pass matches"\nmsgstr "la pasada hacia delante coincide"\n'
    found = translation.glossary_problems(glossary_course(tmp_path, "Nada.\n", po))
    assert len(found) == 1 and found[0].startswith("es.po:1:"), found


ENGLISH_SECTION = re.compile(r"\*([^*]+)\*,? \(?en inglés|«([^»]+)» \(en inglés\)")


def _notebook_headings(path):
    if not path.is_file():
        return []
    notebook = nbformat.read(path, as_version=4)
    return [
        " ".join(line.lstrip("#").split())
        for cell in notebook.cells
        if cell.cell_type == "markdown"
        for line in cell.source.splitlines()
        if line.startswith("#")
    ]


@pytest.mark.parametrize("spanish", SPANISH_MARKDOWN + [ES / "README.md"], ids=rel)
def test_a_cited_english_section_is_named_as_the_notebook_names_it(spanish):
    """A Spanish text that cites a section of an English notebook (a solution or a demo) gives
    its real heading, marked (en inglés), so that a reader finds it."""
    text = spanish.read_text(encoding="utf-8")
    stems = [spanish.stem] if spanish.stem[:2].isdigit() else translation.SPANISH_CHAPTERS
    headings = [
        heading
        for stem in stems
        for folder in ("solutions", "notebooks")
        for heading in _notebook_headings(ROOT / folder / f"{stem}.ipynb")
    ]
    cited = [" ".join((a or b).split()) for a, b in ENGLISH_SECTION.findall(text)]
    missing = [name for name in cited if not any(h.startswith(name) for h in headings)]
    assert missing == [], f"{rel(spanish)} cites sections no English notebook has: {missing}"


@pytest.mark.parametrize("lab", SPANISH_LABS, ids=rel)
def test_a_spanish_lab_marks_its_stubs_in_spanish(lab):
    # build.py writes the stubs in English; each catalog puts in the Spanish
    notebook = nbformat.read(lab, as_version=4)
    english = [
        cell.get("id")
        for cell in notebook.cells
        if "YOUR CODE HERE" in cell.source or "YOUR ANSWER HERE" in cell.source
    ]
    assert english == [], f"{rel(lab)}: English stub markers in cells {english}"
