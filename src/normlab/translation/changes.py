"""What changed in the English since a translation was made: the version its stamp (or a
catalog cell's hash) records, found in git's history, against the file today."""

from __future__ import annotations

import hashlib
from pathlib import Path

import nbformat

from normlab.translation.catalog import load_catalog
from normlab.translation.stamps import cell_sha256, english_of, read_stamp


def _git(root: Path, *arguments: str) -> bytes | None:
    import subprocess

    done = subprocess.run(["git", "-C", str(root), *arguments], capture_output=True, check=False)
    return done.stdout if done.returncode == 0 else None


def translated_version(root: Path, english: str, matches) -> tuple[str, bytes] | None:
    """The newest commit whose ``english`` file satisfies ``matches(bytes)``: (commit, bytes).

    The stamps record a SHA-256 of the file (not git's blob id), so the history is searched."""
    revisions = _git(root, "log", "--format=%H", "--", english)
    for revision in (revisions or b"").decode().split():
        content = _git(root, "show", f"{revision}:{english}")
        if content is not None and matches(content):
            return revision, content
    return None


def english_changes(root: Path, spanish: Path, cell_id: str | None = None) -> str:
    """A unified diff of the English since the version the Spanish file (or catalog cell)
    translates: what the translation has to carry over."""
    import difflib

    root = Path(root)
    relative = Path(spanish).resolve().relative_to(root.resolve()).as_posix()
    if relative.endswith(".json"):
        stem = Path(relative).stem
        english = f"solutions/{stem}.ipynb"
        entry = load_catalog(root / relative)["cells"].get(cell_id or "")
        if not isinstance(entry, dict) or "en_sha256" not in entry:
            return f"{relative}: give --cell ID of a Markdown entry"

        def cell_source(content: bytes) -> str | None:
            notebook = nbformat.reads(content.decode("utf-8"), as_version=4)
            found = [c.source for c in notebook.cells if c.get("id") == cell_id]
            return found[0] if found else None

        def matches(content: bytes) -> bool:
            source = cell_source(content)
            return source is not None and cell_sha256(source) == entry["en_sha256"]

        found = translated_version(root, english, matches)
        now = cell_source((root / english).read_bytes()) or ""
        label = f"{english} cell {cell_id}"
        old = cell_source(found[1]) if found else None
    else:
        stamp = read_stamp(root / relative)
        english = english_of(relative)
        if stamp is None:
            return f"{relative}: no stamp"
        found = translated_version(
            root, english, lambda content: hashlib.sha256(content).hexdigest() == stamp[1]
        )
        now = (root / english).read_text(encoding="utf-8")
        label = english
        old = found[1].decode("utf-8") if found else None
    if old is None:
        return f"{label}: no committed version has the recorded hash (not committed yet?)"
    diff = difflib.unified_diff(
        old.splitlines(keepends=True),
        now.splitlines(keepends=True),
        f"{label} (translated, {found[0][:10]})",
        f"{label} (now)",
    )
    return "".join(diff) or f"{label}: unchanged since it was translated"
