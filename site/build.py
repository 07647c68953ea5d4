"""Build the course website: ``python site/build.py [OUT]`` (``make site`` writes ``_site/``).

Two steps, both offline:

1. **Stage** a copy of the course's readable parts under ``build/site-src/``: the chapters
   (``theory/``), demo notebooks with their stored outputs (``notebooks/``), labs
   (``labs/``), worked solutions (``solutions/*.md``), ``docs/`` and the README as the home
   page. The repository is never modified. While copying, each page of a stem gets a strip of
   links to its chapter, demo, lab and worked solutions; each lab gets a note that it is a
   read-only view and how to run it; links to the solution *notebooks*, which the site does
   not publish, become plain text; other local files a page links to (a benchmark script,
   its quoted results) are copied so that their links still work.
   The Spanish edition, where it exists (``es/theory``, ``es/solutions``, ``es/labs``,
   ``es/README.md``), is staged the same way under ``es/``, with its own home page
   (``es/index``); every page that exists in both languages links to its other-language twin.
2. **Build** the staged copy with Sphinx + MyST-NB (notebooks are *not* executed) into OUT.
   Warnings are errors, so a link that does not resolve fails the build.

Every page gets launch buttons built from the course's address, which has one home
(``[project.urls] Repository`` in pyproject.toml, see ``normlab.repository``): Binder, opening
that page's file (a lab opens as the learner's copy in ``work/``, which Binder's ``postBuild``
makes), and for notebooks Colab.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "site"
STAGE = ROOT / "build" / "site-src"

STEM = re.compile(r"^(\d\d)_[a-z0-9_]+$")
# [text](target) with a relative target; images (![..](..)) are left alone.
LINK = re.compile(r"(?<!!)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(([^()\s]+)\)")


def stems() -> list[str]:
    from normlab import chapter_files

    return [p.stem for p in chapter_files(ROOT / "theory", ".md")]


# A page's folder and suffix -> (its Spanish twin's path, its English twin's path).
PAGE_SUFFIX = {"theory": ".md", "solutions": ".md", "labs": ".ipynb", "notebooks": ".ipynb"}


def spanish(folder: str, stem: str) -> Path | None:
    """The Spanish twin of a page (``es/theory/03_layernorm.md``), if the edition has it."""
    if folder == "notebooks":
        return None  # the demos are English only
    path = ROOT / "es" / folder / f"{stem}{PAGE_SUFFIX[folder]}"
    return path if path.is_file() else None


def language_switch(target: str, label: str) -> str:
    return f"```{{container}} normlab-lang\n[{label}]({target})\n```\n"


def chapter_title(stem: str, lang: str = "en") -> str:
    """'03_layernorm' -> 'Layer normalization' (the chapter's heading without its number)."""
    chapter = ROOT / "theory" / f"{stem}.md"
    if lang == "es" and (ROOT / "es" / "theory" / f"{stem}.md").is_file():
        chapter = ROOT / "es" / "theory" / f"{stem}.md"
    for line in chapter.read_text().splitlines():
        if line.startswith("# "):
            return re.sub(r"^\d+\.\s*", "", line[2:]).split(":")[0].strip()
    return stem


def pair_strip(stem: str, folder: str, lang: str = "en") -> str:
    """Links from a page in ``folder`` to the four pages of its stem, as a MyST block.

    A Spanish page (``lang="es"``, staged under ``es/FOLDER``) links to the Spanish chapter, lab
    and worked solutions and to the English demo; every page links to its twin in the other
    language where that exists.
    """
    up = "../" if folder else ""
    parts = [
        ("theory", f"{stem}.md", "chapter"),
        ("notebooks", f"{stem}.ipynb", "demo"),
        ("labs", f"{stem}.ipynb", "lab"),
        ("solutions", f"{stem}.md", "worked solutions"),
    ]
    # The student edition (`normlab release`) has no worked solutions: no link to them.
    parts = [p for p in parts if (ROOT / p[0] / p[1]).is_file()]
    if lang == "es":
        labels = {"chapter": "capítulo", "demo": "demo (en inglés)", "lab": "laboratorio"}
        labels["worked solutions"] = "soluciones"
        links = []
        for here, name, label in parts:
            text = labels[label]
            if here == folder:
                links.append(f"**{text}**")
            elif here == "notebooks":
                links.append(f"[{text}](../../notebooks/{name})")
            elif spanish(here, stem) is not None:
                links.append(f"[{text}]({up}{here}/{name})")
        title = chapter_title(stem, "es")
        twin = f"../../{folder}/{stem}{PAGE_SUFFIX[folder]}"
        switch = f" · [English]({twin})"
        return f"```{{container}} normlab-pair\n{stem[:2]} · {title}: {' · '.join(links)}{switch}\n```\n"
    links = " · ".join(
        f"**{label}**" if here == folder else f"[{label}]({up}{here}/{name})"
        for here, name, label in parts
    )
    number = stem[:2]
    switch = ""
    if spanish(folder, stem) is not None:
        switch = f" · [Español]({up}es/{folder}/{stem}{PAGE_SUFFIX[folder]})"
    return (
        f"```{{container}} normlab-pair\n{number} · {chapter_title(stem)}: {links}{switch}\n```\n"
    )


def launch_strip(binder_path: str, colab_path: str | None = None, lang: str = "en") -> str:
    """Buttons that open this page's file on Binder (and a notebook on Colab), as a MyST block."""
    from normlab.repository import binder_url, colab_url, repository_url

    home = repository_url(ROOT)
    binder = "Abrir en Binder" if lang == "es" else "Open in Binder"
    links = [f"[{binder}]({binder_url(home, binder_path)})"]
    if colab_path:
        colab = "Abrir en Colab" if lang == "es" else "Open in Colab"
        links.append(f"[{colab}]({colab_url(home, colab_path)})")
    return f"```{{container}} normlab-launch\n{' · '.join(links)}\n```\n"


def lab_note(stem: str) -> str:
    """The note at the top of a lab page: read-only here, and where to run it."""
    ways = "on your machine with `make lab`, or on a hosted Jupyter"
    hosted = " The Binder button above opens your copy of it (`work/`); Colab opens the lab itself."
    return (
        ":::{admonition} A read-only view of the lab\n:class: tip\n"
        "Here you can read the lab; you fill it in inside Jupyter, where each `check(...)` "
        f"cell tells you at once whether your code is right. Run it {ways} (Binder, Colab): "
        f"see [Running the labs](../docs/running.md). "
        f"{{download}}`Download this notebook <{stem}.ipynb>`.{hosted}\n:::\n"
    )


def lab_note_es(stem: str) -> str:
    """The note at the top of a Spanish lab page."""
    return (
        ":::{admonition} Vista de solo lectura del laboratorio\n:class: tip\n"
        "Aquí puedes leer el laboratorio; lo rellenas en Jupyter, donde cada celda "
        "`check(...)` te dice al momento si tu código es correcto. Ejecútalo en tu máquina "
        "con `make lab` (tu copia está en `work/es/`) o en un Jupyter alojado (Binder, Colab): "
        "ver [Running the labs](../../docs/running.md) (en inglés). "
        f"{{download}}`Descargar este notebook <{stem}.ipynb>`.\n:::\n"
    )


# Pages of the repository that the site publishes (repository-relative), filled in by stage();
# a link to another .md or .ipynb file becomes plain text.
PUBLISHED: set[Path] = set()
# Staged where the repository has them elsewhere: the READMEs are the home pages.
STAGED_AS = {Path("README.md"): Path("index.md"), Path("es/README.md"): Path("es/index.md")}


def rewrite_links(text: str, page: Path, extra_files: set[Path]) -> str:
    """Unpublished solution notebooks -> plain text; note other local files to copy."""

    def fix(match: re.Match) -> str:
        label, target = match.groups()
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return match.group(0)
        path = target.split("#", 1)[0]
        resolved = (page.parent / path).resolve()
        try:
            relative = resolved.relative_to(ROOT)
        except ValueError:
            return match.group(0)
        if relative.parts[0] == "solutions" and relative.suffix == ".ipynb":
            return label  # the full lab with answers is in the repository, not on the site
        anchor = target.split("#", 1)[1] if "#" in target else ""
        if relative == Path("README.md") and anchor in LEFT_OUT_OF_HOME:
            # A section the home page leaves out: the guide that says it in full.
            staged_page = STAGED_AS.get(page.relative_to(ROOT), page.relative_to(ROOT))
            guide = os.path.relpath(LEFT_OUT_OF_HOME[anchor], staged_page.parent)
            return f"[{label}]({guide})"
        if relative in STAGED_AS:
            staged_page = STAGED_AS.get(page.relative_to(ROOT), page.relative_to(ROOT))
            new = os.path.relpath(STAGED_AS[relative], staged_page.parent)
            return f"[{label}]({new}{'#' + anchor if anchor else ''})"
        if PUBLISHED and relative.suffix in (".md", ".ipynb") and relative not in PUBLISHED:
            return label  # START_HERE.md, a learner's work/ copy: not pages of the site
        if resolved.is_file() and relative.suffix not in (".md", ".ipynb"):
            extra_files.add(relative)
        return match.group(0)

    return LINK.sub(fix, text)


def insert_after_title(text: str, block: str) -> str:
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if line.startswith("# "):
            return "".join(lines[: index + 1]) + "\n" + block + "".join(lines[index + 1 :])
    return block + "\n" + text


def stage_markdown(source: Path, target: Path, extra_files: set[Path], block: str = "") -> None:
    if source.parent.name == "solutions" and not source.is_file():
        return  # the student edition (`normlab release`) has no worked solutions
    text = rewrite_links(source.read_text(), source, extra_files)
    if block:
        text = insert_after_title(text, block)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def stage_notebook(source: Path, target: Path, extra_files: set[Path], block: str = "") -> None:
    notebook = json.loads(source.read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"])
            cell["source"] = rewrite_links(text, source, extra_files)
    if block:
        first = notebook["cells"][0]
        first["source"] = insert_after_title("".join(first["source"]), block)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(notebook, indent=1, ensure_ascii=False))


# README sections for the repository's readers (instructors, authors), not for a learner: the
# website's home page leaves them out and links the guides that say the same in full.
NOT_FOR_LEARNERS = ("Grading a class", "For authors")
LEFT_OUT_OF_HOME = {"grading-a-class": "docs/instructors.md", "for-authors": "docs/authoring.md"}
FOR_INSTRUCTORS = """
## Instructors and authors

Grading a class, the student edition, LMS exports and Gradescope:
[For instructors](docs/instructors.md) and [Grading](docs/grading.md). Writing or changing a
chapter: [Authoring](docs/authoring.md).
"""


def learners_readme(text: str) -> str:
    """The README without its instructors' and authors' sections, and a link to their guides."""
    sections = re.split(r"(?m)^(?=## )", text)
    kept = [s for s in sections if not s.startswith(tuple(f"## {t}\n" for t in NOT_FOR_LEARNERS))]
    return "".join(kept).rstrip() + "\n" + FOR_INSTRUCTORS


def home_page(extra_files: set[Path]) -> str:
    readme = learners_readme((ROOT / "README.md").read_text())
    readme = rewrite_links(readme, ROOT / "README.md", extra_files)
    readme = insert_after_title(readme, launch_strip("START_HERE.md"))
    all_stems = stems()

    def toctree(caption: str, entries: list[str]) -> str:
        if not entries:  # the student edition: no worked solutions, no instructors' documents
            return ""
        body = "\n".join(entries)
        return f"\n```{{toctree}}\n:caption: {caption}\n:hidden:\n\n{body}\n```\n"

    docs = sorted(p.stem for p in (ROOT / "docs").glob("*.md") if p.stem != "running")
    worked = [s for s in all_stems if (ROOT / "solutions" / f"{s}.md").is_file()]
    spanish_home = ""
    if spanish_pages():
        readme = insert_after_title(
            readme, language_switch("es/index.md", "Español: la edición en español")
        )
        spanish_home = toctree("Español", ["es/index"])
    return (
        readme
        + toctree("Chapters", [f"theory/{s}" for s in all_stems])
        + toctree("Demos", [f"notebooks/{s}" for s in all_stems])
        + toctree("Labs", ["docs/running", *[f"labs/{s}" for s in all_stems]])
        + toctree("Worked solutions", [f"solutions/{s}" for s in worked])
        + toctree("For instructors", [f"docs/{d}" for d in docs])
        + spanish_home
    )


def spanish_pages() -> dict[str, list[str]]:
    """Folder -> the stems the Spanish edition has a page for (chapters, worked solutions, labs)."""
    found = {}
    for folder in ("theory", "solutions", "labs"):
        have = [s for s in stems() if spanish(folder, s) is not None]
        if have:
            found[folder] = have
    return found


def spanish_home_page(extra_files: set[Path]) -> str:
    """es/index: the Spanish README (or a title), a link back, and the Spanish navigation."""
    readme = ROOT / "es" / "README.md"
    if readme.is_file():
        text = rewrite_links(readme.read_text(), readme, extra_files)
    else:
        text = "# normlab en español\n"
    text = insert_after_title(text, language_switch("../index.md", "English: the English edition"))
    text = insert_after_title(text, launch_strip("es/START_HERE.md", None, "es"))
    captions = {"theory": "Capítulos", "labs": "Laboratorios", "solutions": "Soluciones"}
    for folder, have in spanish_pages().items():
        body = "\n".join(f"{folder}/{s}" for s in have)
        text += f"\n```{{toctree}}\n:caption: {captions[folder]}\n:hidden:\n\n{body}\n```\n"
    return text


def stage(STAGE: Path = STAGE) -> Path:  # noqa: N803 -- the module's default folder
    """Write the staged sources into ``STAGE``; return it."""
    if STAGE.exists():
        shutil.rmtree(STAGE)
    STAGE.mkdir(parents=True)
    extra_files: set[Path] = set()
    PUBLISHED.clear()
    for stem in stems():
        pages = (Path(f) / f"{stem}{PAGE_SUFFIX[f]}" for f in PAGE_SUFFIX)
        PUBLISHED.update(p for p in pages if (ROOT / p).is_file())
    PUBLISHED.update(p.relative_to(ROOT) for p in (ROOT / "docs").glob("*.md"))
    for folder, have in spanish_pages().items():
        PUBLISHED.update(Path("es") / folder / f"{s}{PAGE_SUFFIX[folder]}" for s in have)
    for stem in stems():
        stage_markdown(
            ROOT / "theory" / f"{stem}.md",
            STAGE / "theory" / f"{stem}.md",
            extra_files,
            pair_strip(stem, "theory") + "\n" + launch_strip(f"theory/{stem}.md"),
        )
        stage_markdown(
            ROOT / "solutions" / f"{stem}.md",
            STAGE / "solutions" / f"{stem}.md",
            extra_files,
            pair_strip(stem, "solutions") + "\n" + launch_strip(f"solutions/{stem}.md"),
        )
        demo = f"notebooks/{stem}.ipynb"
        stage_notebook(
            ROOT / demo,
            STAGE / demo,
            extra_files,
            pair_strip(stem, "notebooks") + "\n" + launch_strip(demo, demo),
        )
        launch = launch_strip(f"work/{stem}.ipynb", f"labs/{stem}.ipynb")
        stage_notebook(
            ROOT / "labs" / f"{stem}.ipynb",
            STAGE / "labs" / f"{stem}.ipynb",
            extra_files,
            pair_strip(stem, "labs") + "\n" + launch + "\n" + lab_note(stem),
        )
    for document in sorted((ROOT / "docs").glob("*.md")):
        block = launch_strip("START_HERE.md")
        stage_markdown(document, STAGE / "docs" / document.name, extra_files, block)
    for folder, have in spanish_pages().items():
        for stem in have:
            source = spanish(folder, stem)
            target = STAGE / "es" / folder / source.name
            if folder == "labs":
                launch = launch_strip(f"work/es/{stem}.ipynb", f"es/labs/{stem}.ipynb", "es")
                block = pair_strip(stem, folder, "es") + "\n" + launch + "\n" + lab_note_es(stem)
                stage_notebook(source, target, extra_files, block)
            else:
                launch = launch_strip(f"es/{folder}/{source.name}", None, "es")
                block = pair_strip(stem, folder, "es") + "\n" + launch
                stage_markdown(source, target, extra_files, block)
    if spanish_pages():
        (STAGE / "es" / "index.md").write_text(spanish_home_page(extra_files))
    shutil.copytree(ROOT / "theory" / "figures", STAGE / "theory" / "figures")
    if (ROOT / "es" / "theory" / "figures").is_dir():  # the same figures, drawn in Spanish
        shutil.copytree(ROOT / "es" / "theory" / "figures", STAGE / "es" / "theory" / "figures")
    if (ROOT / "docs" / "figures").is_dir():  # the instructors' pages' screenshots
        shutil.copytree(ROOT / "docs" / "figures", STAGE / "docs" / "figures")
    (STAGE / "index.md").write_text(home_page(extra_files))
    for relative in sorted(extra_files):
        (STAGE / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, STAGE / relative)
    return STAGE


def build(out: Path, quiet: bool = True) -> float:
    """Stage and build the site into ``out``; return the seconds it took."""
    from normlab.startup import skip_unused_iri_parser

    skip_unused_iri_parser()  # before MyST-NB imports nbformat (normlab.startup)
    from sphinx.cmd.build import build_main

    start = time.perf_counter()
    # A folder of its own for each build, so that two builds at once (make site while the
    # tests build it) never share staged files.
    (ROOT / "build").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="site-", dir=ROOT / "build"))
    try:
        staged, html = stage(work / "src"), work / "html"
        arguments = ["-b", "html", "-c", str(SITE), "-d", str(work / "doctrees"), "-W"]
        arguments += ["--keep-going", *(["-q"] if quiet else [])]
        status = build_main([*arguments, str(staged), str(html)])
        if status != 0:
            raise SystemExit(f"the site build failed (sphinx-build exit status {status})")
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(html, out, ignore=shutil.ignore_patterns(".buildinfo", ".doctrees"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (out / ".nojekyll").touch()  # GitHub Pages: serve the _static/ folders as they are
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    folders = [a for a in argv if not a.startswith("-")]
    out = Path(folders[0]) if folders else ROOT / "_site"
    seconds = build(out.resolve(), quiet="-v" not in argv)
    print(f"site built in {seconds:.1f} s: open {out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
