"""The lab catalog (``es/catalog/NN_stem.json``): the Spanish text of a lab, keyed by cell id,
put into the English lab to make the Spanish one."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat

from normlab.translation.scope import LANG, TranslationError
from normlab.translation.stamps import cell_sha256


def catalog_path(root: Path, stem: str) -> Path:
    return Path(root) / LANG / "catalog" / f"{stem}.json"


def load_catalog(path: Path) -> dict:
    try:
        catalog = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as error:
        raise TranslationError(f"{path.name}: not valid JSON: {error}") from None
    if not isinstance(catalog, dict) or not isinstance(catalog.get("cells"), dict):
        raise TranslationError(f'{path.name}: expected an object with a "cells" object')
    return catalog


def _code_shape(source: str) -> str | None:
    """The code's AST with every string constant blanked (comments are not in the AST)."""
    lines = ["pass" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.split("\n")]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    return ast.dump(tree, annotate_fields=False)


def translate_lab(
    lab: nbformat.NotebookNode,
    solution: nbformat.NotebookNode,
    catalog: dict,
    stem: str,
    strip_markdown,
) -> nbformat.NotebookNode:
    """The Spanish lab: ``lab`` (the English lab of ``solution``) with the catalog's text.

    ``strip_markdown`` is the English build's function that hides Markdown answer regions.
    Raises TranslationError naming the cell id on a stale or broken entry.
    """
    where = f"{LANG}/catalog/{stem}.json"
    english = {cell.get("id"): cell for cell in solution.cells}
    entries = catalog["cells"]
    problems = [
        f"{where}: cell {cell_id} does not exist in solutions/{stem}.ipynb "
        "(deleted, or its id changed): remove or re-key the entry"
        for cell_id in entries
        if cell_id not in english
    ]
    out = nbformat.from_dict(json.loads(json.dumps(lab)))
    out.metadata["normlab"] = {
        **lab.metadata.get("normlab", {}),
        "lang": LANG,
        "translated_from": f"{LANG}/catalog/{stem}.json",
    }
    for cell in out.cells:
        cell_id = cell.get("id")
        entry = entries.get(cell_id)
        if entry is None:
            continue
        try:
            _translate_cell(cell, entry, english[cell_id].source, where, strip_markdown)
        except TranslationError as error:
            problems.append(str(error))
    if not _speak_spanish(out):
        problems.append(
            f"labs/{stem}.ipynb has no setup cell importing `{SETUP_IMPORT}`: the Spanish lab "
            "cannot switch check()'s reports to Spanish"
        )
    if problems:
        raise TranslationError("\n".join(problems))
    return out


# The labs' setup cell imports check; the Spanish lab's also chooses the language of its reports
# (a kernel cannot read its notebook's metadata, so the choice is written where the learner sees it).
SETUP_IMPORT = "from normlab import check, set_seed"


def _speak_spanish(lab: nbformat.NotebookNode) -> bool:
    for cell in lab.cells:
        if cell.cell_type == "code" and SETUP_IMPORT + "\n" in cell.source:
            if "\nset_seed(" not in cell.source:
                return False
            source = cell.source.replace(
                SETUP_IMPORT, "from normlab import check, set_language, set_seed", 1
            )
            cell.source = source.replace(
                "\nset_seed(",
                f'\nset_language("{LANG}")  # los informes de check() en español\nset_seed(',
                1,
            )
            return True
    return False


def _translate_cell(cell, entry, source: str, where: str, strip_markdown) -> None:
    """Put one catalog entry's Spanish into one lab cell (in place)."""
    cell_id = cell.get("id")
    if not isinstance(entry, dict):
        raise TranslationError(f"{where}: cell {cell_id}: the entry must be an object")
    if cell.cell_type == "markdown":
        if "markdown" not in entry or "en_sha256" not in entry:
            raise TranslationError(
                f'{where}: cell {cell_id} is a Markdown cell: give "markdown" and "en_sha256"'
            )
        if entry["en_sha256"] != cell_sha256(source):
            raise TranslationError(
                f"{where}: cell {cell_id} is stale: its English Markdown changed since it "
                f"was translated (en_sha256 {str(entry['en_sha256'])[:12]}..., now "
                f'{cell_sha256(source)[:12]}...): update "markdown", then '
                f"`normlab translations stamp {where} --cell {cell_id}`"
            )
        spanish = entry["markdown"]
        if "BEGIN SOLUTION" in source and "BEGIN SOLUTION" not in spanish:
            raise TranslationError(
                f"{where}: cell {cell_id}: the English cell marks an answer region "
                "(### BEGIN SOLUTION ... ### END SOLUTION); keep the markers"
            )
        cell.source = strip_markdown(spanish, f"{where} cell {cell_id}")
    elif cell.cell_type == "code":
        if "markdown" in entry:
            raise TranslationError(
                f'{where}: cell {cell_id} is a code cell: translate it with "replace"'
            )
        text = cell.source
        for pair in entry.get("replace", []):
            if not (isinstance(pair, list) and len(pair) == 2 and all(map(_is_str, pair))):
                raise TranslationError(
                    f"{where}: cell {cell_id}: each replace entry is [English, Spanish]"
                )
            fragment, spanish = pair
            if not fragment or fragment not in text:
                raise TranslationError(
                    f"{where}: cell {cell_id}: the English fragment {fragment!r} does not "
                    f"occur in the lab cell (the English code text changed?)"
                )
            text = text.replace(fragment, spanish)
        if _code_shape(text) != _code_shape(cell.source):
            raise TranslationError(
                f"{where}: cell {cell_id}: after the replacements the code is not the "
                "same apart from strings and comments (an identifier or a quote was "
                "translated?)"
            )
        cell.source = text


def _is_str(value) -> bool:
    return isinstance(value, str)


def catalog_problems(root: Path, stem: str) -> list[str]:
    """Markdown cells of the lab without a Spanish entry (the catalog is incomplete)."""
    root = Path(root)
    solution = nbformat.read(root / "solutions" / f"{stem}.ipynb", as_version=4)
    entries = load_catalog(catalog_path(root, stem))["cells"]
    missing = []
    for cell in solution.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "markdown" and "solution-only" not in tags:
            if cell.get("id") not in entries:
                missing.append(f"{LANG}/catalog/{stem}.json: no entry for Markdown cell {cell.id}")
    return missing


def stamp_catalog_cells(root: Path, stem: str, cell_ids: list[str]) -> list[str]:
    """Record the English cells' current hashes for ``cell_ids``; returns unknown ids."""
    root = Path(root)
    path = catalog_path(root, stem)
    catalog = load_catalog(path)
    solution = nbformat.read(root / "solutions" / f"{stem}.ipynb", as_version=4)
    english = {c.get("id"): c for c in solution.cells}
    unknown = [i for i in cell_ids if i not in english or i not in catalog["cells"]]
    if unknown:
        return unknown
    for cell_id in cell_ids:
        catalog["cells"][cell_id]["en_sha256"] = cell_sha256(english[cell_id].source)
    path.write_text(json.dumps(catalog, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return []


def stale_catalog_cells(root: Path, stem: str) -> list[str]:
    root = Path(root)
    catalog = load_catalog(catalog_path(root, stem))
    solution = nbformat.read(root / "solutions" / f"{stem}.ipynb", as_version=4)
    english = {c.get("id"): c for c in solution.cells}
    return [
        cell_id
        for cell_id, entry in catalog["cells"].items()
        if cell_id in english
        and isinstance(entry, dict)
        and "en_sha256" in entry
        and entry["en_sha256"] != cell_sha256(english[cell_id].source)
    ]
