"""Loaded first by the course's own test runs (``-p normlab.pytest_plugin`` in pyproject.toml).

nbval, one of pytest's plugins, imports nbformat as pytest loads its plugins, before any
``conftest.py`` runs. Loaded earlier still, this module skips the IRI parser that nbformat's
jsonschema imports and never uses (:func:`normlab.startup.skip_unused_iri_parser`): about 2 s of
CPU in each of pytest's processes, the controller and every worker.

It also sets ``NORMLAB_FIGURES=keep`` for every process a test run starts (nbval's kernels
inherit it): no demo executed by a test rewrites a chapter figure that exists, even when nbval
runs one notebook alone, outside ``tests/`` and its conftest. Redrawn on another CPU, a chaotic
experiment is another picture, and a test run leaves the checkout as it found it
(:func:`normlab.plotting.write_figure`).
"""

import os

from normlab.startup import skip_unused_iri_parser

skip_unused_iri_parser()
os.environ["NORMLAB_FIGURES"] = "keep"
