"""The Spanish edition (``es/``): stamps, the lab catalog, and what must stay identical.

The English files are the source of truth. A hand-written Spanish file records the English
version it translates in its first line::

    <!-- es: translation of theory/03_layernorm.md sha256=<hex> -->

(the start page ``es/START_HERE.md`` and ``es/README.md`` included; a Spanish notebook would keep
the same in ``metadata.normlab.translation_of`` / ``sha256``). When the English file changes,
its hash no longer matches and the translation is *stale*.

The Spanish labs are generated (``normlab labs``): the English lab of ``solutions/NN_stem.ipynb``
with the text of ``es/catalog/NN_stem.json`` put in, keyed by cell id. A Markdown cell is
replaced by the catalog's ``markdown`` when its ``en_sha256`` still matches the English solution
cell; a code cell gets the catalog's ``replace`` pairs ``[English, Spanish]``, each of which must
occur in the lab cell, and the result must be the same code up to its strings and comments.

:func:`analyse` extracts from a Markdown text what a translation keeps unchanged (heading
structure, equations, numbers, inline code, code blocks, figures, link targets, practice-problem
labels); :func:`parity_problems` compares an English file with its Spanish one.

The package, a module per job (every name is importable from ``normlab.translation``):

* ``scope``: the language, the chapters the edition claims (``SPANISH_CHAPTERS``), the start page;
* ``stamps``: hashes and stamps, stale or fresh, and ``restamp``;
* ``catalog``: the lab catalog and the generation of a Spanish lab from it;
* ``parity``: what a Markdown translation keeps unchanged, and its links;
* ``edition``: the edition as a whole (coverage, every problem, the start page's rows);
* ``changes``: the English diff since a translation was made (from git's history);
* ``glossary``: one Spanish term per concept, over every Spanish text.
"""

from normlab.translation.catalog import (  # noqa: F401
    SETUP_IMPORT,
    catalog_path,
    catalog_problems,
    load_catalog,
    stale_catalog_cells,
    stamp_catalog_cells,
    translate_lab,
)
from normlab.translation.changes import (  # noqa: F401
    english_changes,
    translated_version,
)
from normlab.translation.edition import (  # noqa: F401
    WORK_AS,
    catalog_parity_problems,
    coverage,
    edition_problems,
    start_page_problems,
)
from normlab.translation.glossary import (  # noqa: F401
    FIGURE_TEXTS,
    GLOSSARY,
    GLOSSARY_PAGE,
    PO_FILE,
    glossary_problems,
    load_glossary,
    spanish_texts,
)
from normlab.translation.parity import (  # noqa: F401
    COMMA_GROUPS,
    DISPLAY_MATH,
    EDITION_FOLDERS,
    FENCE,
    HEADING,
    HTML_IMG,
    IMAGE,
    INLINE_CODE,
    INLINE_MATH,
    ITALICS,
    LABEL,
    LINK,
    LIST_MARKER,
    MATH_GROUPS,
    MATH_TEXT,
    NUMBER,
    PRACTICE,
    THIN_SPACES,
    URL,
    Parts,
    analyse,
    labels,
    link_problems,
    math_key,
    notebook_anchors,
    number_value,
    parity_problems,
    slug,
)
from normlab.translation.scope import (  # noqa: F401
    LANG,
    MIRRORED,
    SPANISH_CHAPTERS,
    START_PAGE,
    TranslationError,
)
from normlab.translation.stamps import (  # noqa: F401
    STAMP,
    cell_sha256,
    english_of,
    file_sha256,
    make_stamp,
    read_stamp,
    restamp,
    spanish_markdown,
    stamp_problem,
    stamped_files,
)
