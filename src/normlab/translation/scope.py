"""What the Spanish edition is: its language, the chapters it claims, its start page, the
folders it mirrors by hand, and the error a broken translation raises."""

from __future__ import annotations

LANG = "es"

# The chapters the Spanish edition claims to cover: each needs its chapter (es/theory), worked
# solutions (es/solutions) and lab catalog (es/catalog), all fresh, and the edition's start
# page and README. Add a stem here only when all of its parts are translated.
SPANISH_CHAPTERS: tuple[str, ...] = (
    "01_why_normalize",
    "02_batchnorm",
    "03_layernorm",
    "04_rmsnorm",
    "05_group_instance",
    "06_pre_post_ln",
    "07_cost",
    "08_training",
    "09_modern_norms",
    "10_low_precision",
    "11_triton_kernels",
    "12_language_model",
)

# The course's start page (Markdown, opened rendered); the Spanish one is es/START_HERE.md.
START_PAGE = "START_HERE.md"

# Hand-written Spanish Markdown: folder -> the English folder it mirrors.
MIRRORED = ("theory", "solutions")


class TranslationError(ValueError):
    """A Spanish lab cannot be generated: a stale or broken catalog entry."""
