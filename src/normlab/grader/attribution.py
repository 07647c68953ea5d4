"""Whose error is it? A cell of the learner's notebook that stops, told in plain words.

A lab's cells call the learner's functions at the top level and assert what they should give
(``assert np.allclose(d2_xhat(pairs), layernorm_forward(pairs, ...)), "..."``). When such a
cell stops, the fault is in the learner's code, not in the grader: the message says so, names
the learner's functions the cell calls, and points at those of them whose own checks failed
(a wrong ``layernorm_forward`` makes a correct ``d2_xhat`` look wrong in a later cell).

The parent process builds this message from the notebook it read itself and from the check
results it computed; of what the child reported, only each error's cell index (validated), its
type and its message (shown as text, never interpreted) are used.
"""

from __future__ import annotations

import ast

from normlab.grader import inert, trap

# Every message about the learner's own cells starts with this; reports read it to say
# "your code" instead of "error".
LEARNER_CODE = "Your code stopped"
_SHOWN = 3


def called_names(source: str, candidates: set[str], cells: list[str] | None = None) -> list[str]:
    """The names in ``candidates`` that ``source`` calls or refers to, in order of appearance.

    ``cells``: the notebook's cells, of which ``source`` is one: its tree, already parsed, is
    reused (``trap.parse_cells``)."""
    cells = list(cells) if cells is not None else [source]
    tree = trap.cell_tree(cells, cells.index(source))
    if tree is None:
        return []
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in candidates:
            found.append((node.lineno, node.col_offset, node.id))
    names: list[str] = []
    for _, _, name in sorted(found):
        if name not in names:
            names.append(name)
    return names


def _cell_index(error, cells: list[str]) -> int | None:
    index = getattr(error, "cell", None)
    if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(cells):
        return index
    return None


def _text(value) -> str:
    """What the child reported (an error's type or message) on one line, quoted short."""
    return inert.clip(" ".join((value if isinstance(value, str) else "").split()))


def learner_cells_message(errors: list, cells: list[str], lab, results) -> str:
    """A header line, then one line per failing cell (at most three), put on the learner's code.

    Args:
        errors: the cells' errors (``wire.CellError``: ``cell``, ``error_type``, ``message``),
            each field checked by type when the reply was parsed.
        cells: the code cells' sources, as the grader read them from the notebook.
        lab: the lab (its checks say which names the learner defines).
        results: the check results of this submission, in the lab's order.
    """
    names = set(lab.names) if lab is not None else set()
    failing: set[str] = set()
    if lab is not None:
        for check, result in zip(lab.checks, results, strict=False):
            if not result.passed:
                failing |= set(check.uses)
    parts = []
    for error in errors[:_SHOWN]:
        index = _cell_index(error, cells)
        where = cell_label(cells, index) if index is not None else "a code cell"
        kind = _text(error.error_type) or "an error"
        message = _text(error.message)
        if kind == "AssertionError":
            what = "failed its assertion" + (f": {message}" if message else "")
        else:
            what = f"raised {kind}" + (f": {message}" if message else "")
        called = called_names(cells[index], names, cells) if index is not None else []
        sentence = f"- {where[0].upper()}{where[1:]} {what}."
        if called:
            sentence += f" It calls your {_and(called)}."
            suspects = [name for name in called if name in failing]
            if suspects:
                one = len(suspects) == 1
                sentence += (
                    f" {_and(suspects)} also fail{'s' if one else ''} "
                    f"{'its' if one else 'their'} own checks: fix {'it' if one else 'them'} first."
                )
        parts.append(sentence)
    more = len(errors) - _SHOWN
    if more > 0:
        parts.append(f"({more} more cell{'s' if more > 1 else ''} stopped too.)")
    header = (
        f"{LEARNER_CODE} in {len(errors)} cell{'s' if len(errors) != 1 else ''} "
        "(a problem in the notebook's code, not in the grader):"
    )
    return "\n".join([header, *parts])


# A cell's first line, as a label to find it by (JupyterLab's search): a locator, kept shorter
# than a quote (``inert.clip``) and cut without its length, which nobody searches for.
_QUOTED_CHARS = 60


def _first_line(source: str) -> str:
    for line in source.splitlines():
        if line.strip():
            line = " ".join(line.replace("`", "'").split())
            return line if len(line) <= _QUOTED_CHARS else line[: _QUOTED_CHARS - 1] + "…"
    return ""


def cell_label(cells: list[str], index: int) -> str:
    """A code cell as a learner finds it in JupyterLab: by its first line, e.g. "the cell that
    starts `y = layernorm_forward(x)`", and which of them when several start so.

    JupyterLab numbers no cell: the number beside a cell is its execution count, which changes
    with every run, and a count of code cells alone matches nothing on the screen. The first
    line is what the learner sees, and what JupyterLab's search (Ctrl+F) finds.
    """
    first = _first_line(cells[index])
    if not first:
        return "an empty code cell"
    alike = [i for i, source in enumerate(cells) if _first_line(source) == first]
    where = f"the cell that starts `{first}`"
    if len(alike) > 1:
        where += f" (number {alike.index(index) + 1} of the {len(alike)} that start so)"
    return where


def _and(names: list[str]) -> str:
    quoted = [f"`{name}`" for name in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def is_learner_code(error: str | None) -> bool:
    return bool(error) and error.startswith(LEARNER_CODE)
