"""The course website: it builds offline, every link and image resolves, and a real browser
shows every page (of the Spanish ones, one of each kind) with its math typeset and no error.

The build (``site/build.py``, what ``make site`` runs) needs the ``site`` extra
(``pip install -e '.[site]'``; ``make test`` installs it). The browser part drives the system's
headless Chromium through Playwright (the ``browser`` extra: ``make test`` installs it, ``make
site`` does not) and skips, saying why, where either is missing.
Screenshots of a chapter and a demo are kept in ``_artifacts/screens/``.
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import importlib.util
import re
import shutil
import sys
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from conftest import ROOT, course_copy, with_spanish_edition

from normlab import chapter_files
from normlab.release import answer_regions

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:.*Check CHANGES for Sphinx API"),  # myst-parser on Sphinx 9
]

ARTIFACTS = ROOT / "_artifacts" / "screens"
STEMS = [p.stem for p in chapter_files(ROOT / "theory", ".md")]


class _Page(html.parser.HTMLParser):
    """The ids, links, images, scripts and stylesheets of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.images: list[str] = []
        self.assets: list[str] = []  # script src and link href (stylesheets, icons, preloads)

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if attributes.get("id"):
            self.ids.add(attributes["id"])
        if tag == "a" and attributes.get("href"):
            self.links.append(attributes["href"])
        if tag == "img" and attributes.get("src"):
            self.images.append(attributes["src"])
        if tag == "script" and attributes.get("src"):
            self.assets.append(attributes["src"])
        if tag == "link" and attributes.get("href"):
            self.assets.append(attributes["href"])


@functools.cache
def parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    missing = [m for m in ("sphinx", "myst_nb", "furo") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(
            f"the site builder is not installed ({', '.join(missing)} missing): "
            "pip install -e '.[site]' (make test and make site install it)"
        )
    out = tmp_path_factory.mktemp("site") / "_site"
    source = ROOT
    if not (ROOT / "es" / "theory").is_dir():
        # No Spanish pages yet: build a copy of the course with the sample Spanish chapter, so
        # that the Spanish section and the language links are built and checked all the same.
        source = with_spanish_edition(course_copy(tmp_path_factory.mktemp("course")))
    sys.path.insert(0, str(source / "site"))
    try:
        sys.modules.pop("build", None)
        import build as site_build
    finally:
        sys.path.remove(str(source / "site"))
        sys.modules.pop("build", None)
    site_build.build(out)
    return out


def pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.parts)


def test_every_part_of_the_course_has_a_page(site):
    for stem in STEMS:
        for page in (
            f"theory/{stem}.html",
            f"notebooks/{stem}.html",
            f"labs/{stem}.html",
            f"solutions/{stem}.html",
        ):
            assert (site / page).is_file(), f"no page {page}"
    assert (site / "docs" / "running.html").is_file()
    assert (site / "search.html").is_file() and (site / "searchindex.js").is_file()
    home = (site / "index.html").read_text()
    assert "Course map" in home and "Practice problems" in home


def test_answers_are_not_published(site):
    # The solution notebooks are the full labs with their answers: not part of the site.
    solutions = {p.read_bytes() for p in (ROOT / "solutions").glob("*.ipynb")}
    leaks = [
        p.relative_to(site)
        for p in site.rglob("*.ipynb")
        if p.read_bytes() in solutions or b"BEGIN SOLUTION" in p.read_bytes()
    ]
    assert leaks == [], f"solution notebooks published: {leaks}"
    assert len(list(site.rglob("*.ipynb"))) >= len(STEMS), "the labs are not downloadable"
    for page in pages(site):
        text = page.read_text()
        if page.name in ("authoring.html", "authoring-reference.html"):
            # The authors' guide shows the markers themselves, around examples that are no
            # lab's answer: no line of a real answer region appears on the page.
            plain = html.unescape(re.sub(r"<[^>]+>", "", text))
            for stem, source in answer_regions(ROOT):
                for line in source.splitlines():
                    if len(line.strip()) > 12:
                        assert line.strip() not in plain, f"{page} shows {stem}'s answer"
            continue
        assert "BEGIN SOLUTION" not in text, f"{page} shows a lab's answer"


def test_no_asset_comes_from_another_site(site):
    """Offline: no script, stylesheet or font is loaded from a CDN (links to read are fine)."""
    remote = re.compile(r"^(https?:)?//", re.IGNORECASE)
    offenders = []
    for page in pages(site):
        offenders += [
            f"{page.relative_to(site)}: {a}" for a in parse(page).assets if remote.match(a)
        ]
    for sheet in site.rglob("*.css"):
        for url in re.findall(r"url\(\s*['\"]?([^)'\"]+)", sheet.read_text(errors="replace")):
            if remote.match(url):
                offenders.append(f"{sheet.relative_to(site)}: {url}")
    assert not offenders, "\n".join(offenders)
    assert (site / "_static" / "mathjax" / "tex-chtml.js").is_file(), (
        "MathJax is not served locally"
    )


def _target(site: Path, page: Path, reference: str) -> tuple[Path, str] | None:
    parts = urlsplit(reference)
    if parts.scheme or parts.netloc or reference.startswith("mailto:"):
        return None
    path = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
    if path.is_dir():
        path = path / "index.html"
    return path, unquote(parts.fragment)


def test_every_internal_link_and_image_resolves(site):
    broken = []
    for page in pages(site):
        parsed = parse(page)
        for reference in parsed.links + parsed.images + parsed.assets:
            target = _target(site, page, reference)
            if target is None:
                continue
            path, fragment = target
            if not path.is_file():
                broken.append(f"{page.relative_to(site)} -> {reference} (no such file)")
            elif fragment and path.suffix == ".html" and fragment not in parse(path).ids:
                broken.append(f"{page.relative_to(site)} -> {reference} (no such anchor)")
    assert not broken, "\n".join(broken)


def test_the_spanish_chapters_show_the_spanish_figures(site):
    """Each image of a Spanish chapter's page is the Spanish PNG, byte for byte."""
    spanish = {p.read_bytes() for p in (ROOT / "es" / "theory" / "figures").glob("*.png")}
    english = {p.read_bytes() for p in (ROOT / "theory" / "figures").glob("*.png")}
    shown = []
    for page in sorted((site / "es" / "theory").glob("[0-9][0-9]_*.html")):
        for reference in parse(page).images:
            target = _target(site, page, reference)
            if target is not None and target[0].suffix == ".png":
                shown.append((page.name, target[0].read_bytes()))
    assert shown, "no figure on the Spanish chapters' pages"
    assert [name for name, data in shown if data not in spanish or data in english] == []


def _links_from(site: Path, page: str) -> set[str]:
    """The pages that ``page`` links to, relative to the site's root."""
    source = site / page
    found = set()
    for reference in parse(source).links:
        target = _target(site, source, reference)
        if target is not None and target[0].suffix == ".html":
            found.add(target[0].relative_to(site.resolve()).as_posix())
    return found


@pytest.mark.parametrize("stem", STEMS)
def test_chapter_lab_demo_and_solution_link_to_each_other(site, stem):
    four = {f"{folder}/{stem}.html" for folder in ("theory", "notebooks", "labs", "solutions")}
    for page in four:
        assert four - {page} <= _links_from(site, page), f"{page} lacks a link to its pair"
    assert "docs/running.html" in _links_from(site, f"labs/{stem}.html")


def test_both_languages_link_to_each_other(site):
    """The Spanish section: its home page, and a link between every page and its twin."""
    assert "es/index.html" in _links_from(site, "index.html")
    assert "index.html" in _links_from(site, "es/index.html")
    spanish = sorted(
        p.relative_to(site / "es").as_posix()
        for p in (site / "es").rglob("*.html")
        if p.name != "index.html"
    )
    assert {page.split("/")[0] for page in spanish} == {"theory", "solutions", "labs"}, spanish
    for page in spanish:
        assert page in _links_from(site, f"es/{page}"), f"es/{page} lacks its English twin"
        assert f"es/{page}" in _links_from(site, page), f"{page} lacks its Spanish twin"
        assert f"es/{page}" in _links_from(site, "es/index.html"), f"es/index lacks es/{page}"
    home = (site / "es" / "index.html").read_text()
    assert "English" in home


def _launch_links(page: Path) -> list[str]:
    return [
        link for link in parse(page).links if "mybinder.org" in link or "colab.research" in link
    ]


def test_every_page_has_launch_buttons_to_the_course(site):
    """Binder on every page (Colab on notebooks), all from the course's one address; each opens
    a file Binder's server has (a lab: the learner's copy in work/, which postBuild makes)."""
    from normlab.repository import owner_and_name, repository_url

    owner, name = owner_and_name(repository_url(ROOT))
    binder = f"https://mybinder.org/v2/gh/{owner}/{name}/HEAD?urlpath=lab/tree/"
    colab = f"https://colab.research.google.com/github/{owner}/{name}/blob/main/"
    problems, checked = [], 0
    for page in pages(site):
        relative = page.relative_to(site).as_posix()
        if relative in ("search.html", "genindex.html"):
            continue
        links = _launch_links(page)
        opened = [link[len(binder) :] for link in links if link.startswith(binder)]
        if not opened or len(opened) != len([x for x in links if "mybinder.org" in x]):
            problems.append(f"{relative}: Binder buttons {links}")
            continue
        for path in opened:
            original = re.sub(r"^work/es/", "es/labs/", path)
            original = re.sub(r"^work/", "labs/", original)
            if not (ROOT / original).is_file():
                problems.append(f"{relative}: Binder opens {path}, which the course lacks")
        if relative.startswith(("labs/", "es/labs/")):
            stem = Path(relative).stem
            mine = f"work/es/{stem}.ipynb" if relative.startswith("es/") else f"work/{stem}.ipynb"
            lab = "es/labs" if relative.startswith("es/") else "labs"
            if opened != [mine] or f"{colab}{lab}/{stem}.ipynb" not in links:
                problems.append(f"{relative}: {links}")
        if relative.startswith("notebooks/") and f"{colab}{relative[:-5]}.ipynb" not in links:
            problems.append(f"{relative}: no Colab button")
        checked += 1
    assert not problems, "\n".join(problems)
    assert checked >= 4 * len(STEMS)


def test_the_home_page_is_for_learners(site):
    """The README's instructors' and authors' sections are not the learners' home page."""
    home = (site / "index.html").read_text()
    plain = html.unescape(re.sub(r"<[^>]+>", "", home))
    assert not {"grading-a-class", "for-authors"} & parse(site / "index.html").ids
    assert "normlab grade SUBMISSIONS/" not in plain
    assert {"docs/instructors.html", "docs/authoring.html"} <= _links_from(site, "index.html")
    assert "Course map" in plain and "Checking your work" in plain
    assert any(
        link.endswith("lab/tree/START_HERE.md") for link in _launch_links(site / "index.html")
    )
    es_home = site / "es" / "index.html"
    assert any(link.endswith("lab/tree/es/START_HERE.md") for link in _launch_links(es_home))


# --- in a real browser ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


def _failed(request) -> bool:
    """A request that failed, not one the browser dropped on leaving the page (the tab icon)."""
    return not (request.failure == "net::ERR_ABORTED" and "favicon" in request.url)


WAIT_FOR_MATH = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  // MathJax's fonts load after the typesetting: wait for them, or leaving the page aborts a
  // font still on its way (a busy machine), which would read as a failed request.
  document.body.getBoundingClientRect();  // lay the page out: the fonts it needs start loading
  await new Promise(resolve => requestAnimationFrame(() => resolve()));
  await document.fonts.ready;
  // The prose as a reader sees it, without code (Python strings may hold "$x$" for Matplotlib).
  const article = document.querySelector('article');
  let text = '';
  if (article) {
    const prose = article.cloneNode(true);
    prose.querySelectorAll('pre, code, .highlight, mjx-container').forEach(e => e.remove());
    text = prose.textContent;
  }
  return {
    math: document.querySelectorAll('.math').length,
    typeset: document.querySelectorAll('mjx-container').length,
    errors: document.querySelectorAll('mjx-merror').length,
    text: text,
    broken_images: Array.from(document.images)
      .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
  };
}"""

# Text that TeX was meant to typeset: $x$, $$...$$, \( \), \[ \] left as characters on the page.
RAW_MATH = re.compile(r"\$[^$\s][^$\n]*\$|\\\(|\\\)|\\\[|\\\]")


def browser_pages(site: Path) -> list[Path]:
    """Every English page, and of the Spanish ones the home page and one page of each kind.

    A Spanish page is built by the same templates as its English one, from text whose math,
    numbers, code and links the translation tests hold equal to the English (``parity_problems``
    on the chapters, ``catalog_parity_problems`` on the labs' catalogs); what a browser could
    still find only there is in its templates, which one page of each kind shows. Each page
    costs Chromium about 0.7 s of CPU, so the 18 others would add some 13 s to every run.
    """
    spanish_sample = {"es/index.html", *(f"es/{kind}/03_layernorm.html" for kind in SPANISH_KINDS)}
    return [
        path
        for path in pages(site)
        if path.relative_to(site).parts[0] != "es"
        or path.relative_to(site).as_posix() in spanish_sample
    ]


SPANISH_KINDS = ("theory", "labs", "solutions")


def test_browser_pages_take_every_english_page_and_each_kind_of_spanish_page(site):
    chosen = {path.relative_to(site).as_posix() for path in browser_pages(site)}
    every = {path.relative_to(site).as_posix() for path in pages(site)}
    assert {name for name in every if not name.startswith("es/")} <= chosen
    spanish_kinds = {
        name.split("/")[1] for name in every if name.startswith("es/") and name.count("/") == 2
    }
    assert spanish_kinds == set(SPANISH_KINDS), "a new kind of Spanish page: add it to the sample"
    assert {name for name in chosen if name.startswith("es/")} <= every, "a sampled page is gone"
    assert len([name for name in chosen if name.startswith("es/")]) == 1 + len(SPANISH_KINDS)


WIDE_MATH = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  await document.fonts.ready;
  const column = document.querySelector('article').getBoundingClientRect();
  const cut = [];
  document.querySelectorAll('mjx-container[display="true"]').forEach((formula, index) => {
    const box = formula.getBoundingClientRect();
    const drawn = formula.scrollWidth;  // the typeset formula's width, scrolled or not
    const scrolls = ['auto', 'scroll'].includes(getComputedStyle(formula).overflowX);
    if (box.right > column.right + 1 || (drawn > formula.clientWidth + 1 && !scrolls)) {
      cut.push(`display formula ${index + 1}: ${drawn} px wide in a ${Math.round(column.width)}`
        + ` px column, overflow-x ${getComputedStyle(formula).overflowX}`);
    }
  });
  return cut;
}"""


# A chapter's page, in either language.
CHAPTER = re.compile(r"(es/)?theory/\d\d_\w+\.html")


def test_every_page_renders_in_a_browser(site, served, browser):
    """Every page the browser takes (``browser_pages``) loads without an error, its math
    typeset and its images shown; and on each chapter's page a display formula wider than the
    text column scrolls inside it, so that none of it is cut off (chapter 09's QK-norm equation
    is some 790 px wide in a 736 px column). The Spanish chapters' formulas are the English
    ones (``parity_problems``), laid out by the same template: their sample chapter stands for
    them, as it does for their rendering; measuring the twelve others cost some 9 s of CPU."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: _failed(r) and problems.append(f"request failed: {r.url}"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"{r.status}: {r.url}"))
    report = []
    typeset_pages = chapters = 0
    for path in browser_pages(site):
        relative = path.relative_to(site).as_posix()
        problems.clear()
        page.goto(f"{served}/{relative}", wait_until="load")
        result = page.evaluate(WAIT_FOR_MATH)
        if result["math"]:
            typeset_pages += 1
            if result["typeset"] < result["math"]:
                problems.append(f"{result['math']} math elements, {result['typeset']} typeset")
        if result["errors"]:
            problems.append(f"{result['errors']} TeX errors")
        raw = RAW_MATH.findall(result["text"])
        if raw:
            problems.append(f"untypeset math in the text: {raw[:3]}")
        if result["broken_images"]:
            problems.append(f"images that did not load: {result['broken_images']}")
        if CHAPTER.fullmatch(relative):
            chapters += 1
            problems += [f"at 1280 px: {cut}" for cut in page.evaluate(WIDE_MATH)]
        report += [f"{relative}: {problem}" for problem in problems]
    context.close()
    assert not report, "\n".join(report)
    assert typeset_pages >= len(STEMS) * 2, "math was typeset on too few pages"
    assert chapters >= len(STEMS) + 1, "the wide formulas were measured on too few chapters"


def test_the_site_reads_from_files_without_a_server(site, browser):
    """Unzipped on a laptop and opened with a double click: file:// pages, math still typeset."""
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((site / "theory" / "04_rmsnorm.html").as_uri(), wait_until="load")
    result = page.evaluate(WAIT_FOR_MATH)
    page.close()
    assert errors == []
    assert result["math"] and result["typeset"] >= result["math"] and not result["errors"]
    assert result["broken_images"] == []


def test_a_chapter_title_and_wide_formula_fit_a_phone(site, served, browser):
    """On a 390 x 844 screen chapter 09's long title takes at most a quarter of the screen
    (at the desktop size it took 350 px of the first 844, under the top bar), and its wide
    display formulas scroll within the column (as at the desktop size: the test above)."""
    page = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        for address in ("theory/09_modern_norms.html", "es/theory/09_modern_norms.html"):
            page.goto(f"{served}/{address}", wait_until="load")
            height = page.evaluate("() => document.querySelector('article h1').offsetHeight")
            assert height <= 844 / 4, f"{address}: the title is {height} px tall on a phone"
            assert page.evaluate(WIDE_MATH) == [], address
    finally:
        page.close()


SIDEBAR = """() => ({
  captions: Array.from(document.querySelectorAll('.sidebar-tree .caption'))
    .map(c => c.textContent.trim()),
  links: Array.from(document.querySelectorAll('.sidebar-tree a.reference'))
    .map(a => new URL(a.href).pathname),
})"""


def test_the_spanish_pages_sidebar_is_spanish(site, served, browser):
    """A Spanish page's navigation lists the Spanish chapters, labs and worked solutions under
    Spanish captions; an English page's keeps the English navigation."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        for kind in SPANISH_KINDS:
            page.goto(f"{served}/es/{kind}/03_layernorm.html", wait_until="load")
            sidebar = page.evaluate(SIDEBAR)
            assert sorted(sidebar["captions"]) == ["Capítulos", "Laboratorios", "Soluciones"], (
                sidebar
            )
            assert sidebar["links"], sidebar
            english = [link for link in sidebar["links"] if "/es/" not in link]
            assert english == [], f"es/{kind}: the sidebar links English pages {english[:5]}"
            assert any(
                link.endswith("/es/theory/09_modern_norms.html") for link in sidebar["links"]
            )
        page.goto(f"{served}/theory/03_layernorm.html", wait_until="load")
        sidebar = page.evaluate(SIDEBAR)
        assert sidebar["captions"][:2] == ["Chapters", "Demos"], sidebar["captions"]
    finally:
        page.close()


SEARCH_DONE = """() => {
  const items = document.querySelectorAll('#search-results ul li');
  return items.length > 0 && Array.from(items).every(i => i.querySelector('p.context'));
}"""


def _search(page, served: str, query: str) -> tuple[list[str], list[str]]:
    """Search from the search box's page: the hits' addresses and their summaries' text."""
    page.goto(f"{served}/search.html?q={query}", wait_until="load")
    page.wait_for_function(SEARCH_DONE, timeout=60_000)
    hits = page.eval_on_selector_all("#search-results ul li > a", "els => els.map(e => e.href)")
    summaries = page.eval_on_selector_all(
        "#search-results p.context", "els => els.map(e => e.textContent)"
    )
    return hits, summaries


def test_search_finds_a_chapter_in_the_readers_language_without_raw_tex(served, browser):
    """An English reader's search lists English pages, a Spanish reader's Spanish ones, and no
    summary shows the TeX source of a formula."""
    page = browser.new_page()
    try:
        page.goto(f"{served}/theory/03_layernorm.html", wait_until="load")
        hits, summaries = _search(page, served, "RMSNorm")
        assert any(hit.endswith("/theory/04_rmsnorm.html") for hit in hits), hits[:10]
        assert not [hit for hit in hits if "/es/" in hit], hits
        raw = [s for s in summaries if RAW_MATH.search(s) or "\\frac" in s or "\\sqrt" in s]
        assert raw == [], raw[:3]
        page.goto(f"{served}/es/theory/03_layernorm.html", wait_until="load")
        hits, summaries = _search(page, served, "RMSNorm")
        assert any(hit.endswith("/es/theory/04_rmsnorm.html") for hit in hits), hits[:10]
        assert [hit for hit in hits if "/es/" not in hit] == [], hits
        raw = [s for s in summaries if RAW_MATH.search(s) or "\\frac" in s or "\\sqrt" in s]
        assert raw == [], raw[:3]
    finally:
        page.close()


@pytest.mark.parametrize(
    ("name", "address", "anchor"),
    [
        ("chapter_03_layernorm", "theory/03_layernorm.html", "invariances-and-geometry"),
        ("demo_03_layernorm", "notebooks/03_layernorm.html", "IMG"),
        ("lab_03_layernorm", "labs/03_layernorm.html", None),
    ],
)
def test_screenshot(served, browser, name, address, anchor):
    """A chapter, a demo and a lab as a reader sees them (kept in _artifacts/screens/)."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(f"{served}/{address}", wait_until="load")
    page.evaluate(WAIT_FOR_MATH)
    if anchor == "IMG":  # the first figure
        page.locator("article img").first.scroll_into_view_if_needed()
    elif anchor:
        page.locator(f"#{anchor}").scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(shot))
    assert page.locator("mjx-container").count() > 0
    page.close()
    assert shot.stat().st_size > 20_000  # a picture of a page, not a blank one


# --- the first cell of a hosted notebook (docs/running.md) ------------------------------------

# What a Colab runtime already has that the labs need: NumPy and PyTorch (with PyTorch's own
# dependencies). Nothing else of the course environment is visible to the fresh environment.
HOSTED_PACKAGES = ("numpy", "torch", "torchgen", "functorch", "typing_extensions", "filelock", "fsspec", "jinja2",
                   "markupsafe", "networkx", "sympy", "mpmath")  # fmt: skip

LAB_FIRST_CELL_AND_A_CHECK = """
import numpy as np

from normlab import check, set_seed
from normlab.gradcheck import numeric_gradient, relative_error

set_seed(0)


def layernorm_forward(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


check(layernorm_forward)
import normlab
print("normlab from", normlab.__file__)
"""


def test_hosted_first_cell_installs_the_course_into_a_fresh_environment(tmp_path):
    """`%pip install --no-deps "normlab @ git+..."`, the way pip runs it, without the network.

    pip clones the repository and builds a wheel from it; here the tracked files of this
    checkout are copied (what a clone holds), a wheel is built from the copy, and installed with
    --no-deps into a new virtual environment that sees only NumPy and PyTorch. A lab's first
    cell and a check(...) then run there, in a folder outside the course.
    """
    import subprocess

    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is needed to build the course's wheel")
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if tracked.returncode != 0:
        pytest.skip("not a git checkout: cannot tell which files a clone would hold")
    clone = tmp_path / "clone"
    for name in filter(None, tracked.stdout.split("\0")):
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wheels = tmp_path / "wheels"
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", wheels, clone],
                   check=True)  # fmt: skip
    (wheel,) = wheels.glob("normlab-*.whl")

    env = tmp_path / "hosted"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", env], check=True)
    python = env / "bin" / "python"
    subprocess.run([*pip, "--python", python, "install", "--no-deps", "--no-index", wheel],
                   check=True)  # fmt: skip
    # The runtime's preinstalled packages: NumPy and PyTorch only, by way of a .pth file.
    ours = Path(next(p for p in sys.path if p.endswith("site-packages")))
    preinstalled = tmp_path / "preinstalled"
    preinstalled.mkdir()
    for entry in ours.iterdir():
        if entry.name.split("-")[0].split(".")[0].lower() in HOSTED_PACKAGES:
            (preinstalled / entry.name).symlink_to(entry)
    (site_packages,) = (env / "lib").glob("python3*/site-packages")
    (site_packages / "preinstalled.pth").write_text(f"{preinstalled}\n")

    elsewhere = tmp_path / "colab"
    elsewhere.mkdir()
    (elsewhere / "lab.py").write_text(LAB_FIRST_CELL_AND_A_CHECK)
    run = subprocess.run([python, "-I", "lab.py"], cwd=elsewhere, capture_output=True,
                         text=True, timeout=300, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "LayerNorm: 7/7 points" in run.stdout and "error" not in run.stdout, run.stdout
    assert f"normlab from {site_packages}" in run.stdout  # the installed copy, not this checkout
    # And the environment really is bare: the course's other dependencies are absent.
    absent = subprocess.run([python, "-I", "-c", "import matplotlib"], capture_output=True,
                            check=False)  # fmt: skip
    assert absent.returncode != 0
