"""Labs are generated, never hand-edited: ``solutions/NN_stem.ipynb`` -> ``labs/NN_stem.ipynb``.

In a solution notebook the answer is marked nbgrader-style::

    def layernorm_forward(x, gamma, beta, eps=1e-5):
        \"\"\"Docstring (kept in the lab).\"\"\"
        ### BEGIN SOLUTION
        ...
        ### END SOLUTION

The lab keeps everything outside the markers (signature, docstring, comments) and replaces each
region by a stub:

* inside a function: ``raise NotImplementedError("...")`` at the region's indentation;
* at the top level: each ``NAME = ...`` answer becomes ``NAME = None  # YOUR ANSWER HERE``
  (so the lab still runs to the end and its checks say "no answer yet");
* in a markdown cell: ``*YOUR ANSWER HERE*``.

Cells tagged ``solution-only`` are left out of the lab. Cells tagged ``runs-learner-code`` (they
call the learner's functions at the top level) get Jupyter's ``raises-exception`` tag in the lab,
so that a fresh lab still runs to the end while its stubs raise ``NotImplementedError``. Outputs and execution counts are
cleared; the notebook's metadata records its lab (``metadata.normlab.lab``).
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import nbformat

from normlab import chapter_files

BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION\s*$")
END = re.compile(r"^[ \t]*### END SOLUTION\s*$")
STUB_MESSAGE = "your code here: replace this line with your implementation"


class BuildError(ValueError):
    """A solution notebook whose markers cannot be turned into a lab."""


def _top_level_stub(region: list[str], where: str) -> list[str]:
    source = "\n".join(region)
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise BuildError(f"{where}: the solution region does not parse: {error}") from None
    stubs = []
    for node in tree.body:
        if not isinstance(node, ast.Assign) or not all(
            isinstance(t, ast.Name) for t in node.targets
        ):
            raise BuildError(
                f"{where}: a top-level solution region may only assign answers (NAME = ...); "
                "put code inside a function"
            )
        stubs += [f"{t.id} = None  # YOUR ANSWER HERE" for t in node.targets]
    return stubs


def strip_code(source: str, where: str) -> str:
    """Replace every marked region of a code cell's source by its stub."""
    lines = source.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        begin = BEGIN.match(lines[i])
        if not begin:
            if END.match(lines[i]):
                raise BuildError(f"{where}: '### END SOLUTION' without a BEGIN")
            out.append(lines[i])
            i += 1
            continue
        indent = begin.group("indent")
        j = i + 1
        while j < len(lines) and not END.match(lines[j]):
            if BEGIN.match(lines[j]):
                raise BuildError(f"{where}: nested '### BEGIN SOLUTION'")
            j += 1
        if j == len(lines):
            raise BuildError(f"{where}: '### BEGIN SOLUTION' without an END")
        region = lines[i + 1 : j]
        if indent:
            out += [
                f"{indent}# YOUR CODE HERE",
                f'{indent}raise NotImplementedError("{STUB_MESSAGE}")',
            ]
        else:
            out += _top_level_stub(region, where)
        i = j + 1
    return "\n".join(out)


def strip_markdown(source: str, where: str) -> str:
    lines, out, inside = source.split("\n"), [], False
    for line in lines:
        if BEGIN.match(line):
            if inside:
                raise BuildError(f"{where}: nested '### BEGIN SOLUTION'")
            inside = True
            out.append("*YOUR ANSWER HERE*")
        elif END.match(line):
            if not inside:
                raise BuildError(f"{where}: '### END SOLUTION' without a BEGIN")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise BuildError(f"{where}: '### BEGIN SOLUTION' without an END")
    return "\n".join(out)


# ipykernel's python3 kernel: its kernel.json, and its language_info less the version, which is
# the learner's Python (filled in by copy_missing_labs, which runs in the kernel's environment).
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}


def kernel_language_info() -> dict | None:
    """The language_info this environment's kernel reports (ipykernel's), or None without it."""
    try:
        from ipykernel.ipkernel import IPythonKernel
    except ImportError:
        return None
    return json.loads(json.dumps(IPythonKernel.language_info))


def for_this_kernel(text: str) -> str:
    """A lab's text with the metadata this environment's kernel will write into it on start.

    JupyterLab replaces a notebook's ``language_info`` and ``kernelspec`` with the running
    kernel's when it starts one, and marks the notebook modified when they differ: a fresh copy
    carries them already (the Python version is only known here), so it opens unmodified.
    """
    info = kernel_language_info()
    if info is None:
        return text
    try:
        notebook = nbformat.reads(text, as_version=4)
    except Exception:  # not a notebook that nbformat reads: the copy is the file as it is
        return text
    if notebook.metadata.get("language_info") == info:
        return text
    notebook.metadata["language_info"] = info
    return render(notebook)


def make_lab(solution: nbformat.NotebookNode, stem: str) -> nbformat.NotebookNode:
    """The lab notebook for a solution notebook (pure function; nothing is written)."""
    lab = nbformat.v4.new_notebook()
    lab.metadata = {
        # As the course's kernel (ipykernel's python3) describes itself: JupyterLab writes the
        # kernel's own description into a notebook when the kernel starts, and any difference
        # marks the notebook modified before the learner has typed anything.
        "kernelspec": dict(KERNELSPEC),
        "language_info": dict(LANGUAGE_INFO),
        "normlab": {"lab": stem, "generated_from": f"solutions/{stem}.ipynb"},
    }
    for index, cell in enumerate(solution.cells):
        if "solution-only" in cell.get("metadata", {}).get("tags", []):
            continue
        where = f"solutions/{stem}.ipynb cell {index + 1}"
        new = nbformat.from_dict(dict(cell))
        tags = list(cell.get("metadata", {}).get("tags", []))
        if "runs-learner-code" in tags:
            tags = [t for t in tags if t != "runs-learner-code"] + ["raises-exception"]
        new.metadata = {"tags": tags} if tags else {}
        if cell.cell_type == "code":
            new.source = strip_code(cell.source, where)
            new.outputs = []
            new.execution_count = None
        elif cell.cell_type == "markdown":
            new.source = strip_markdown(cell.source, where)
        lab.cells.append(new)
    return lab


def render(notebook: nbformat.NotebookNode) -> str:
    return nbformat.writes(notebook) + "\n"


def spanish_labs(root: Path, solutions: list[Path], english: dict[str, str]) -> dict[str, str]:
    """``es/labs/NAME`` text for every solution that has an ``es/catalog/STEM.json``."""
    from normlab import translation

    out, problems = {}, []
    for path in solutions:
        catalog_file = translation.catalog_path(root, path.stem)
        if not catalog_file.is_file():
            continue
        try:
            catalog = translation.load_catalog(catalog_file)
            solution = nbformat.read(path, as_version=4)
            lab = nbformat.reads(english[path.name], as_version=4)
            spanish = translation.translate_lab(lab, solution, catalog, path.stem, strip_markdown)
        except translation.TranslationError as error:
            problems.append(str(error))  # every catalog's problems at once
            continue
        out[path.name] = render(spanish)
    if problems:
        raise translation.TranslationError("\nnormlab labs: ".join(problems))
    return out


def build_all(root: Path, check: bool = False, stems: list[str] | None = None) -> int:
    """Write (or, with ``check``, compare) every lab, or only those of ``stems``.

    Also the Spanish labs ``es/labs/STEM.ipynb`` of the stems with an ``es/catalog/STEM.json``.
    Returns a process exit status.
    """
    from normlab.translation import TranslationError

    solutions = chapter_files(root / "solutions", ".ipynb")
    catalogs = sorted((root / "es" / "catalog").glob("*.json"))
    orphan_catalogs = sorted({p.stem for p in catalogs} - {p.stem for p in solutions})
    if orphan_catalogs:
        print(
            f"normlab labs: es/catalog/{orphan_catalogs[0]}.json has no "
            f"solutions/{orphan_catalogs[0]}.ipynb",
            file=sys.stderr,
        )
        return 1
    if stems:
        unknown = sorted(set(stems) - {path.stem for path in solutions})
        if unknown:
            print(f"normlab labs: no solutions/{unknown[0]}.ipynb", file=sys.stderr)
            return 2
        solutions = [path for path in solutions if path.stem in stems]
    folders = {"labs": root / "labs", "es/labs": root / "es" / "labs"}
    expected: dict[str, dict[str, str]] = {"labs": {}, "es/labs": {}}
    try:
        for path in solutions:
            notebook = nbformat.read(path, as_version=4)
            expected["labs"][path.name] = render(make_lab(notebook, path.stem))
        expected["es/labs"] = spanish_labs(root, solutions, expected["labs"])
    except (BuildError, TranslationError) as error:
        print(f"normlab labs: {error}", file=sys.stderr)
        return 1
    if check:
        problems = []
        for folder, texts in expected.items():
            for name, text in texts.items():
                target = folders[folder] / name
                source = f"solutions/{name}" + (
                    f" and es/catalog/{name[: -len('.ipynb')]}.json" if folder != "labs" else ""
                )
                if not target.exists():
                    problems.append(f"missing: {folder}/{name}")
                elif target.read_text(encoding="utf-8") != text:
                    problems.append(f"stale: {folder}/{name} differs from what {source} generates")
            for extra in sorted(folders[folder].glob("*.ipynb")):
                if extra.name not in texts and not stems:
                    origin = f"solutions/{extra.name}"
                    if folder != "labs":
                        origin = f"es/catalog/{extra.stem}.json"
                    problems.append(f"orphan: {folder}/{extra.name} has no {origin}")
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print("run `make labs` to regenerate labs/ and es/labs/", file=sys.stderr)
            return 1
        spanish = len(expected["es/labs"])
        print(f"labs/ is up to date ({len(expected['labs'])} labs; {spanish} in es/labs/)")
        return 0
    for folder, texts in expected.items():
        if texts:
            folders[folder].mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            (folders[folder] / name).write_text(text, encoding="utf-8")
            print(f"wrote {folder}/{name}")
    return 0


WORK_README = """# Your work

This folder holds your copies of the labs: fill these in, not `labs/`.
`make lab` (or `normlab work`) copies a lab here only when you have no copy of it yet, and no
course command ever overwrites a file in this folder. `make grade` grades what is here.
Git ignores this folder: back it up, or commit it to a repository of your own.

To start a lab over, rename or delete your copy and run `make lab` (or `normlab work`) again.
"""


WORK_README_ES = """# Tu trabajo (edición en español)

Esta carpeta guarda tus copias de los laboratorios en español: rellena estas, no `es/labs/`.
`make lab` (o `normlab work`) copia aquí un laboratorio solo si aún no tienes una copia, y
ningún comando del curso sobrescribe un archivo de esta carpeta. `make grade` califica lo que
hay aquí y en `work/`.

Para empezar de nuevo un laboratorio, cambia el nombre de tu copia o bórrala y vuelve a
ejecutar `make lab` (o `normlab work`).
"""


def copy_missing_labs(root: Path, work: str = "work", quiet: bool = False) -> int:
    """Give the learner a copy of every lab they do not have yet in ``root/work``.

    The Spanish labs (``es/labs/``), where the course has them, go to ``root/work/es``.
    A file already in ``work/`` is never written, whatever it holds: it is the learner's.
    Returns a process exit status.
    """
    labs_dir, work_dir = root / "labs", root / work
    if not chapter_files(labs_dir, ".ipynb"):
        print(f"normlab work: no labs in {labs_dir}", file=sys.stderr)
        return 2
    editions = [(labs_dir, work_dir, WORK_README, "labs", work)]
    spanish = root / "es" / "labs"
    if chapter_files(spanish, ".ipynb"):
        editions.append((spanish, work_dir / "es", WORK_README_ES, "es/labs", f"{work}/es"))
    for source, target_dir, readme, source_name, target_name in editions:
        _copy_edition(source, target_dir, readme, source_name, target_name, quiet)
    return 0


# A Markdown link or image: [text](target) or ![alt](target "title").
MARKDOWN_LINK = re.compile(r"(\]\()(<[^<>\n]*>|[^()\s]+)((?:\s+\"[^\"]*\")?\))")


def relink(text: str, source_dir: Path, target_dir: Path) -> str:
    """A lab's text for a copy in ``target_dir``: its relative links reach the same files.

    ``es/labs/03_layernorm.ipynb`` links ``../theory/03_layernorm.md`` (the Spanish chapter);
    copied to ``work/es/`` the same text would point at ``work/theory/``, which does not exist,
    so the copy says ``../../es/theory/03_layernorm.md``. Links with a scheme (``https:``),
    anchors in the page itself and absolute paths are left as they are. A copy whose links need
    no change (the English labs: ``labs/`` and ``work/`` sit side by side) is the lab's text
    byte for byte.
    """
    import os

    if os.path.realpath(source_dir) == os.path.realpath(target_dir):
        return text
    try:
        notebook = nbformat.reads(text, as_version=4)
    except Exception:  # not a notebook that nbformat reads: the copy is the file as it is
        return text

    def fix(match: re.Match) -> str:
        target = match.group(2)
        bare = target[1:-1] if target.startswith("<") else target
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", bare) or bare.startswith(("#", "/")):
            return match.group(0)
        path, hash_mark, anchor = bare.partition("#")
        if not path:
            return match.group(0)
        moved = os.path.relpath(os.path.join(source_dir, path), target_dir).replace(os.sep, "/")
        moved += hash_mark + anchor
        return match.group(1) + (f"<{moved}>" if target.startswith("<") else moved) + match.group(3)

    changed = False
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            new = MARKDOWN_LINK.sub(fix, cell.source)
            changed = changed or new != cell.source
            cell.source = new
    return render(notebook) if changed else text


def _copy_edition(labs_dir, work_dir, readme, labs_name, work_name, quiet) -> None:
    labs = chapter_files(labs_dir, ".ipynb")
    work_dir.mkdir(exist_ok=True)
    note = work_dir / "README.md"
    if not note.exists():
        try:
            with open(note, "x", encoding="utf-8") as stream:
                stream.write(readme)
        except FileExistsError:
            pass
    copied = []
    for lab in labs:
        target = work_dir / lab.name
        if target.exists() or target.is_symlink():
            continue
        text = for_this_kernel(relink(lab.read_text(encoding="utf-8"), labs_dir, work_dir))
        try:
            # "x" mode: creating the file fails if it exists, so a copy made a moment ago by
            # someone else is not overwritten either.
            with open(target, "x", encoding="utf-8") as stream:
                stream.write(text)
        except FileExistsError:
            continue
        copied.append(target.name)
    if not quiet:
        for name in copied:
            print(f"copied {labs_name}/{name} -> {work_name}/{name} (your copy to fill in)")
        kept = len(labs) - len(copied)
        if kept:
            print(f"kept your {kept} lab(s) already in {work_name}/ (never overwritten)")
