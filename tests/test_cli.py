"""The ``normlab`` command as data: its subcommands, the exports' table, and what loads first."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(json.loads(done.stdout))


def test_the_pytest_plugin_loads_neither_the_command_nor_the_grader():
    loaded = _modules_after("import normlab.pytest_plugin")
    assert "rfc3987_syntax" in loaded  # the skip took effect (a None entry)
    assert not {"normlab.cli", "normlab.grader", "argparse"} & loaded


def test_the_gradescope_bundle_copies_the_installed_package():
    import normlab
    from normlab.grader import gradescope

    assert gradescope.PACKAGE == ROOT / "src" / "normlab"
    assert gradescope.PACKAGE == type(ROOT)(normlab.__file__).resolve().parent
    source = (gradescope.PACKAGE / "grader" / "gradescope.py").read_text(encoding="utf-8")
    assert "import normlab\n" not in source
