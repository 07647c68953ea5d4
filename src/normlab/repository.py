"""The course's public address: one home (``[project.urls] Repository`` in pyproject.toml).

The README, ``docs/running.md`` (Binder and Colab), the website's launch buttons and the Colab
first cell all use this address. The website reads it from pyproject.toml when it is built;
the Markdown files quote it, and ``tests/test_consistency.py`` fails when a quote differs from
the home or a placeholder is left. An instructor who publishes a copy of the course changes the
address everywhere at once::

    python -m normlab.repository NEW_ADDRESS

which writes the new address into pyproject.toml and into every file of the course that quotes
the old one, and re-stamps the Spanish translations that were in step before (the change of
address is the only change their English files saw).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

# https://github.com/OWNER/NAME, nothing after it.
ADDRESS = re.compile(r"^https://github\.com/([A-Za-z0-9][A-Za-z0-9-]*)/([A-Za-z0-9_.-]+)$")
HOME_LINE = re.compile(r'^(Repository\s*=\s*")([^"]*)(")\s*$', re.MULTILINE)
# Where a learner launches the course; the path opened is a query parameter of its own.
BINDER = "https://mybinder.org/v2/gh/{owner}/{name}/HEAD"
COLAB = "https://colab.research.google.com/github/{owner}/{name}/blob/main/{path}"


def repository_url(root: Path) -> str:
    """The address in pyproject.toml's ``[project.urls]``: ``https://github.com/OWNER/NAME``."""
    text = (Path(root) / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.urls]", 1)
    found = HOME_LINE.search(section[1].split("\n[", 1)[0]) if len(section) == 2 else None
    if found is None or not ADDRESS.match(found.group(2)):
        raise ValueError(
            'pyproject.toml: [project.urls] needs Repository = "https://github.com/OWNER/NAME"'
        )
    return found.group(2)


def owner_and_name(url: str) -> tuple[str, str]:
    match = ADDRESS.match(url)
    if match is None:
        raise ValueError(f"not a GitHub repository address: {url!r}")
    return match.group(1), match.group(2)


def binder_url(url: str, path: str) -> str:
    """Binder, opening ``path`` (repository-relative) in JupyterLab."""
    owner, name = owner_and_name(url)
    return BINDER.format(owner=owner, name=name) + f"?urlpath=lab/tree/{path}"


def colab_url(url: str, path: str) -> str:
    """Colab, opening the notebook ``path`` of the repository's main branch."""
    owner, name = owner_and_name(url)
    return COLAB.format(owner=owner, name=name, path=path)


def quotes(url: str) -> re.Pattern:
    """The address as the files quote it: itself, or its OWNER/NAME in a Binder or Colab link."""
    owner, name = owner_and_name(url)
    return re.compile(
        r"(?:(?<=github\.com/)|(?<=mybinder\.org/v2/gh/)|(?<=colab\.research\.google\.com/github/))"
        + re.escape(f"{owner}/{name}")
        + r"(?![\w-])(?!\.(?!git\b)[\w-])"  # not normlab2 or normlab.x; normlab.git is
    )


def quoting_files(root: Path, url: str | None) -> list[Path]:
    """The course's text files (those git would commit) that quote ``url`` (all, for None)."""
    root = Path(root)
    pattern = quotes(url) if url else None
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        check=False,
    )
    if listed.returncode == 0:
        names = [n for n in listed.stdout.decode().split("\0") if n]
    else:  # not a git checkout: every file but the virtual environment and build outputs
        skip = {".venv", ".git", "build", "_site", "work"}
        names = [
            p.relative_to(root).as_posix()
            for p in root.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(root).parts)
        ]
    found = []
    for name in names:
        path = root / name
        if (
            path.suffix not in (".md", ".ipynb", ".py", ".toml", ".yml", ".txt", "")
            or not path.is_file()
        ):
            continue
        try:
            if pattern is None or pattern.search(path.read_text(encoding="utf-8")):
                found.append(path)
        except (UnicodeDecodeError, OSError):
            continue
    return found


def set_repository(root: Path, new: str) -> list[Path]:
    """Make ``new`` the course's address everywhere; return the files changed."""
    from normlab import translation

    root = Path(root)
    owner_and_name(new)
    old = repository_url(root)
    if old == new:
        return []
    fresh = [
        p for p in translation.stamped_files(root) if translation.stamp_problem(root, p) is None
    ]
    changed = []
    for path in quoting_files(root, old):
        text = path.read_text(encoding="utf-8")
        # The address, the addresses under it (…/normlab.git, …/blob/main/x) and launch links.
        path.write_text(quotes(old).sub("/".join(owner_and_name(new)), text), encoding="utf-8")
        changed.append(path)
    for spanish in fresh:
        if translation.stamp_problem(root, spanish) is not None:
            translation.restamp(root, spanish)
            changed.append(spanish)
    return changed


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m normlab.repository https://github.com/OWNER/NAME", file=sys.stderr)
        return 2
    try:
        changed = set_repository(Path.cwd(), argv[0])
    except ValueError as error:
        print(f"normlab.repository: {error}", file=sys.stderr)
        return 2
    for path in changed:
        print(f"updated {path.relative_to(Path.cwd()).as_posix()}")
    print(f"the course's address is now {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
