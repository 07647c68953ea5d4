"""Lab id -> its checks. Every module in ``normlab.grader.checks`` defines one ``LAB``."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from normlab.grader import checks
from normlab.grader.core import Lab

_LABS: dict[str, Lab] | None = None


def all_labs() -> dict[str, Lab]:
    """Every lab, by stem (``"03_layernorm"``), in course order."""
    global _LABS
    if _LABS is None:
        labs = {}
        for module_info in pkgutil.iter_modules(checks.__path__):
            module = importlib.import_module(f"{checks.__name__}.{module_info.name}")
            lab = getattr(module, "LAB", None)
            if isinstance(lab, Lab):
                labs[lab.stem] = lab
        _LABS = dict(sorted(labs.items()))
    return _LABS


def get_lab(stem: str) -> Lab:
    labs = all_labs()
    if stem not in labs:
        raise KeyError(f"no lab {stem!r}; known labs: {', '.join(labs)}")
    return labs[stem]


def lab_for_path(path: Path, metadata: dict | None = None) -> Lab | None:
    """Recognise a submission's lab: notebook metadata ``normlab.lab`` first, then the file name.

    The file name matches when it contains a lab's stem (``03_layernorm.ipynb``,
    ``alice_03_layernorm.ipynb``, ``03_layernorm-bob.ipynb``) or starts with the lab's number
    followed by a non-digit (``03-alice.ipynb``).
    """
    labs = all_labs()
    declared = ((metadata or {}).get("normlab") or {}).get("lab")
    if isinstance(declared, str) and declared in labs:
        return labs[declared]
    name = path.stem.lower()
    for stem, lab in labs.items():
        if stem in name:
            return lab
    number = re.match(r"(\d\d)(?!\d)", name)
    if number:
        matches = [lab for stem, lab in labs.items() if stem.startswith(number.group(1) + "_")]
        if len(matches) == 1:
            return matches[0]
    return None


def labs_using(name: str) -> list[Lab]:
    """The labs whose checks use a learner name (``"layernorm_forward"``): the lab that owns
    it, not those that only borrow it (``Lab.borrowed``), unless no lab owns it."""
    using = [lab for lab in all_labs().values() if name in lab.names]
    return [lab for lab in using if name not in lab.borrowed] or using


def load_extra_checks(path: Path) -> int:
    """Run an instructor's file of extra (e.g. hidden) checks; returns how many it added.

    The file uses the same API as the built-in checks::

        from normlab.grader.registry import get_lab
        from normlab.grader.probes import expect_array

        @get_lab("03_layernorm").check("hidden: wide rows", points=1, uses=["layernorm_forward"])
        def wide_rows(sub):
            ...

    It runs in the grader's process (it is the instructor's code, not a student's). Students see
    an extra check only by its name, points and message, like any other.
    """
    import runpy

    before = sum(len(lab.checks) for lab in all_labs().values())
    runpy.run_path(str(path), run_name="normlab_extra_checks")
    return sum(len(lab.checks) for lab in all_labs().values()) - before
