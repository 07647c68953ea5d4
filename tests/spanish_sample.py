"""Spanish files for the tests, written into temporary copies of the course (never into es/).

* :func:`sample_catalog`: a hand-translated catalog for two Markdown cells and one code cell of
  ``solutions/03_layernorm.ipynb``, stamped with the English cells' current hashes;
* :func:`pseudo_catalog`: a catalog for *every* Markdown cell and every comment and stub
  message of a solution notebook, "translated" by prefixing ``(es)`` — a Spanish edition as
  complete as a real one, for the generator and the grading tests;
* :func:`write_sample_edition`: a short Spanish chapter, worked solutions, README and start page
  for 03_layernorm, stamped, for the site and release tests.
"""

from __future__ import annotations

import hashlib
import io
import json
import tokenize
from pathlib import Path

import nbformat

STEM = "03_layernorm"

TITLE_ES = """# Laboratorio 03 — LayerNorm desde cero

Acompaña al capítulo [03 · LayerNorm](../theory/03_layernorm.md). Escribirás, en NumPy:

1. `layernorm_forward(x, gamma, beta, eps)` — normaliza cada fila de `x` sobre sus características;
2. `layernorm_backward(dy, x, gamma, eps)` — los gradientes, derivados a mano;
3. problema de práctica 1: qué hace LayerNorm con una sola característica (`d1_output`, `D1_ANSWER`);
4. problema de práctica 2: $\\hat x$ para dos características en forma cerrada (`d2_xhat`, `D2_ANSWER`);
5. problema de práctica 3: qué invariancia corresponde a cada normalización (`INVARIANCE_ANSWER`).

Cada parte termina con una celda `check(...)`. Compara tu respuesta con PyTorch (en float64) con
entradas aleatorias y con los casos límite donde se esconden los errores reales, y cuando algo
está mal dice *dónde* (forma, peor índice, error) y, cuando reconoce el error, *por qué*.
La regla de este laboratorio: **desde cero** — nada de `F.layer_norm`, `nn.LayerNorm` ni autograd
dentro de tus funciones (puedes usarlos en otro lugar para comparar)."""

PART1_ES = """## Parte 1 · El pase hacia adelante

Para una fila $x \\in \\mathbb{R}^d$ (las características de un token o de un ejemplo):

$$\\mu = \\frac{1}{d}\\sum_i x_i, \\qquad \\sigma^2 = \\frac{1}{d}\\sum_i (x_i-\\mu)^2, \\qquad
\\hat x = \\frac{x-\\mu}{\\sqrt{\\sigma^2+\\varepsilon}}, \\qquad y = \\gamma \\odot \\hat x + \\beta .$$

`x` puede tener cualquier número de ejes iniciales — `(N, d)` para un lote de vectores,
`(B, L, d)` para un lote de secuencias — y cada fila se normaliza por separado, sobre el
**último** eje. Regla de formas: la media de una entrada `(B, L, d)` tiene forma `(B, L)`;
guárdala como `(B, L, 1)` (`keepdims=True`) para que `x - mean` se difunda. Conserva el dtype de
la entrada (float32 entra, float32 sale)."""


def cell_hash(cell) -> str:
    return hashlib.sha256("".join(cell["source"]).encode("utf-8")).hexdigest()


def solution_cells(root: Path, stem: str = STEM) -> dict:
    notebook = json.loads((root / "solutions" / f"{stem}.ipynb").read_text(encoding="utf-8"))
    return {cell["id"]: cell for cell in notebook["cells"]}


def sample_catalog(root: Path) -> dict:
    cells = solution_cells(root)
    return {
        "source": f"solutions/{STEM}.ipynb",
        "cells": {
            "b7561e95": {"en_sha256": cell_hash(cells["b7561e95"]), "markdown": TITLE_ES},
            "9a378402": {"en_sha256": cell_hash(cells["9a378402"]), "markdown": PART1_ES},
            "337112d6": {
                "replace": [
                    ["LayerNorm over the last axis of x.", "LayerNorm sobre el último eje de x."],
                    [
                        "eps: added to the variance inside the square root.",
                        "eps: se suma a la varianza dentro de la raíz cuadrada.",
                    ],
                    [
                        "your code here: replace this line with your implementation",
                        "tu código aquí: sustituye esta línea por tu implementación",
                    ],
                ]
            },
        },
    }


def _comments(source: str) -> list[str]:
    lines = ["pass" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.split("\n")]
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO("\n".join(lines)).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    return [t.string for t in tokens if t.type == tokenize.COMMENT]


def pseudo_catalog(root: Path, stem: str) -> dict:
    """Every Markdown cell and every comment of the lab, marked ``(es)``; stub messages too."""
    from normlab.build import STUB_MESSAGE, make_lab

    solution = nbformat.read(root / "solutions" / f"{stem}.ipynb", as_version=4)
    lab = make_lab(solution, stem)
    english = {cell.id: cell for cell in solution.cells}
    cells = {}
    for cell in lab.cells:
        if cell.cell_type == "markdown":
            cells[cell.id] = {
                "en_sha256": cell_hash(english[cell.id]),
                "markdown": english[cell.id].source.replace("\n", " (es)\n", 1)
                if "\n" in english[cell.id].source
                else english[cell.id].source + " (es)",
            }
        elif cell.cell_type == "code":
            pairs = [
                [c, "# (es) " + c.lstrip("#").strip()]
                for c in dict.fromkeys(_comments(cell.source))
            ]
            if STUB_MESSAGE in cell.source:
                pairs.append([STUB_MESSAGE, "tu código aquí: sustituye esta línea"])
            if pairs:
                cells[cell.id] = {"replace": pairs}
    return {"source": f"solutions/{stem}.ipynb", "cells": cells}


def write_catalog(root: Path, stem: str, catalog: dict) -> Path:
    path = root / "es" / "catalog" / f"{stem}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(catalog, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def stamp(root: Path, english: str) -> str:
    digest = hashlib.sha256((root / english).read_bytes()).hexdigest()
    return f"<!-- es: translation of {english} sha256={digest} -->\n"


CHAPTER_ES = """# 3. Normalización por capas

Un resumen de muestra del capítulo, para las pruebas. Para un token $x \\in \\mathbb{R}^d$,

$$\\hat x = \\frac{x - \\mu}{\\sqrt{\\sigma^2 + \\varepsilon}}.$$

![La salida de LayerNorm frente a ε](figures/03_layernorm_eps.png)

Ver la [demo](../../notebooks/03_layernorm.ipynb), el [laboratorio](../labs/03_layernorm.ipynb)
y la [solución del problema 1](../solutions/03_layernorm.md#problema-1).

## Problemas de práctica

1. Con $d = 1$, LayerNorm devuelve $y = \\beta$. ¿Por qué?
   ([solución](../solutions/03_layernorm.md#problema-1))
"""

SOLUTIONS_ES = """# 3. Normalización por capas — soluciones

Soluciones de muestra de los [problemas de práctica](../theory/03_layernorm.md#problemas-de-práctica).

## Problema 1

Con una sola característica, $x - \\mu = 0$, así que $\\hat x = 0$ e $y = \\beta$.
"""

README_ES = """# normlab en español

La edición en español del curso: empieza por la [página de inicio](START_HERE.md) o por el
[capítulo 3](theory/03_layernorm.md). La edición en inglés: [README](../README.md).
"""


def write_sample_edition(root: Path) -> None:
    """A short Spanish chapter 03 with its worked solutions, README, start page and catalog."""
    es = root / "es"
    for folder in ("theory", "solutions"):
        (es / folder).mkdir(parents=True, exist_ok=True)
    (es / "theory" / f"{STEM}.md").write_text(
        stamp(root, f"theory/{STEM}.md") + CHAPTER_ES, encoding="utf-8"
    )
    figure = "theory/figures/03_layernorm_eps.png"  # the Spanish figure the chapter shows
    (es / "theory" / "figures").mkdir(exist_ok=True)
    (es / figure).write_bytes(
        (root / "es" / figure if (root / "es" / figure).is_file() else root / figure).read_bytes()
    )
    (es / "solutions" / f"{STEM}.md").write_text(
        stamp(root, f"solutions/{STEM}.md") + SOLUTIONS_ES, encoding="utf-8"
    )
    (es / "README.md").write_text(stamp(root, "README.md") + README_ES, encoding="utf-8")
    (es / "START_HERE.md").write_text(
        stamp(root, "START_HERE.md") + "# normlab — empieza aquí\n\n"
        "Lee el [capítulo 3](theory/03_layernorm.md), rellena tu copia del "
        "[laboratorio](../work/es/03_layernorm.ipynb) y ejecuta la "
        "[demo](../notebooks/03_layernorm.ipynb).\n",
        encoding="utf-8",
    )
    write_catalog(root, STEM, sample_catalog(root))
