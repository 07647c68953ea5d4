"""normlab: a course on activation normalization, and its grader.

A notebook imports what it needs from here::

    from normlab import check, set_seed
"""

from __future__ import annotations

import fnmatch
import random
from pathlib import Path

#: the course's version (pyproject.toml reads it from here)
__version__ = "0.1.0"

__all__ = ["check", "set_language", "set_seed", "chapter_files", "is_chapter_stem", "__version__"]

#: a chapter's files share a stem: two digits, an underscore, a name (``03_layernorm``)
STEM_PATTERN = "[0-9][0-9]_*"


def chapter_files(folder: str | Path, suffix: str) -> list[Path]:
    """The course files of ``folder`` whose names are a chapter's stem + ``suffix``
    (``chapter_files("solutions", ".ipynb")``: ``solutions/01_why_normalize.ipynb``, ...), sorted."""
    return sorted(Path(folder).glob(STEM_PATTERN + suffix))


def is_chapter_stem(stem: str) -> bool:
    """Whether ``stem`` has a chapter's form (``"03_layernorm"``; not ``"START_HERE"``)."""
    return fnmatch.fnmatchcase(stem, STEM_PATTERN)


def set_seed(seed: int = 0) -> None:
    """Seed Python's, NumPy's and (if installed) PyTorch's random generators.

    Args:
        seed: the seed; notebooks use 0 so that their stored outputs repeat exactly.
    """
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # the NumPy-only labs do not need torch (and are graded without it)
        return


def set_language(lang: str | None) -> None:
    """Show ``check()``'s feedback in ``lang``: ``"es"`` (Spanish) or ``"en"`` (English).

    Without it, ``check()`` follows the environment variable ``NORMLAB_LANG``, else English.
    Check names, hints and explanations are translated; numbers and code names stay as they are.
    ``None`` goes back to that default.
    """
    from normlab.grader.i18n import set_language as choose

    choose(lang)


def check(*functions, lab: str | None = None, **named):
    """Run the lab's checks on your function(s) and show a short report.

    Args:
        *functions: functions to check, found by their ``__name__``
            (``check(layernorm_forward)``).
        lab: the lab's stem (``"03_layernorm"``); only needed when a name belongs to several labs.
        **named: answers or functions under the name the lab expects
            (``check(D1_ANSWER="b")`` or ``check(layernorm_forward=my_version)``).

    Returns:
        None. The report is displayed (HTML in Jupyter, text elsewhere).
    """
    from normlab.grader.notebook import check as _check

    return _check(*functions, lab=lab, **named)
