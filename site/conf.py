"""Sphinx configuration for the course website (`make site`).

The sources are a staged copy of the repository made by ``site/build.py``: the chapters,
demos, labs and worked solutions as they are, plus a generated home page and navigation.
Notebooks are rendered with their stored outputs; nothing is executed at build time.
Every asset is served from the site itself (no CDN), so the site works offline and from a zip.
"""

from __future__ import annotations

from pathlib import Path

from normlab.repository import repository_url

project = "normlab"
author = "the normlab authors"
copyright = "the normlab authors, MIT licence"

extensions = [
    "myst_nb",  # Markdown (MyST) and notebooks
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax 3 files copied into _static/mathjax (no CDN)
]

root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]

# Notebooks: show the outputs stored in the repository; never run them.
nb_execution_mode = "off"
# No widget JavaScript from a CDN: the knob cells carry no stored widget state anyway.
nb_ipywidgets_js = {}
nb_merge_streams = True

myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_dmath_double_inline = True
# "theory/03_layernorm.md#practice-problems": heading slugs as GitHub makes them.
myst_heading_anchors = 4

# MathJax from _static/mathjax (set by sphinx-mathjax-offline); typeset notebook outputs too.
mathjax3_config = {
    "options": {"processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"},
}

html_theme = "furo"
html_title = "normlab"
html_static_path = ["_static"]
html_css_files = ["normlab.css"]
# Search in the reader's language, summaries without TeX source (see the file); defer: after
# searchtools.js, before the search runs.
html_js_files = [("normlab-search.js", {"defer": "defer"})]
html_show_sourcelink = False
html_copy_source = False
html_last_updated_fmt = None
# The course's address has one home, pyproject.toml (normlab.repository).
html_context = {"repository_url": repository_url(Path(__file__).resolve().parents[1])}

suppress_warnings = ["myst.header"]
html_favicon = "_static/favicon.svg"


# --- the Spanish pages' sidebar ------------------------------------------------------------------
# Furo's sidebar is the home page's navigation (English captions and pages, the Spanish edition
# as one entry). A Spanish page shows the Spanish edition's own navigation instead: the
# toctrees of es/index (Capítulos, Laboratorios, Soluciones), resolved from that page.
SPANISH_HOME = "es/index"


def spanish_navigation(app, pagename: str) -> str | None:
    from furo.navigation import get_navigation_tree
    from sphinx import addnodes
    from sphinx.environment.adapters.toctree import _resolve_toctree

    env = app.builder.env
    if SPANISH_HOME not in env.all_docs:
        return None
    resolved = [
        _resolve_toctree(
            env,
            pagename,
            app.builder,
            node,
            prune=True,
            maxdepth=-1,
            titles_only=True,
            collapse=False,
            includehidden=True,
            tags=app.builder.tags,
        )  # fmt: skip
        for node in env.get_doctree(SPANISH_HOME).findall(addnodes.toctree)
    ]
    resolved = [tree for tree in resolved if tree is not None]
    if not resolved:
        return None
    tree = resolved[0]
    for more in resolved[1:]:
        tree.extend(more.children)
    return get_navigation_tree(app.builder.render_partial(tree)["fragment"])


def _no_english_tree(app, pagename, templatename, context, doctree) -> None:
    # Before Furo's handler: on a Spanish page the English tree, which Furo computes from
    # ``toctree`` (a fifth of the whole build's time, over all pages), would be thrown away.
    if pagename.startswith("es/") and "toctree" in context:
        context["normlab_toctree"] = context["toctree"]
        context["toctree"] = lambda **options: ""


def _spanish_sidebar(app, pagename, templatename, context, doctree) -> None:
    if "normlab_toctree" not in context:
        return
    context["toctree"] = context.pop("normlab_toctree")
    navigation = spanish_navigation(app, pagename)
    if navigation is None:  # no Spanish home: the English tree after all
        from furo import _compute_navigation_tree

        navigation = _compute_navigation_tree(context)
    context["furo_navigation_tree"] = navigation


def setup(app):
    # Around Furo's own handler (priority 500), which computes the English tree.
    app.connect("html-page-context", _no_english_tree, priority=400)
    app.connect("html-page-context", _spanish_sidebar, priority=600)
