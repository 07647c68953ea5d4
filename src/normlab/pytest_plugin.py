"""Loaded first by the course's own test runs (``-p normlab.pytest_plugin`` in pyproject.toml).

nbval, one of pytest's plugins, imports nbformat as pytest loads its plugins, before any
``conftest.py`` runs. Loaded earlier still, this module skips the IRI parser that nbformat's
jsonschema imports and never uses (:func:`normlab.startup.skip_unused_iri_parser`): about 2 s of
CPU in each of pytest's processes, the controller and every worker.
"""

from normlab.startup import skip_unused_iri_parser

skip_unused_iri_parser()
