"""What a course process does first, before it imports anything heavy (one job: start-up time).

Both ``normlab``'s command and the course's pytest plugin call :func:`skip_unused_iri_parser`
before nbformat is imported; this module imports nothing of the course, so that loading it costs
nothing.
"""

from __future__ import annotations

import sys


def skip_unused_iri_parser() -> None:
    """Skip an import that nothing here uses: 1.9 s of CPU in each command that reads notebooks.

    nbformat imports jsonschema, which imports its optional checker for the "iri" format
    (rfc3987-syntax 1.1), and that builds a Lark parser as it is imported. The notebook schemas
    have no "format" keyword, so no IRI is ever checked. A command is a process of its own;
    where jsonschema is already imported this changes nothing.
    """
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)
