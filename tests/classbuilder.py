"""A generated class of lab 04 (RMSNorm) notebooks, and what each one was built to be.

Each notebook is the worked solution with one answer region rewritten: several genuinely
different correct implementations, each known misconception of the forward and backward pass
planted by hand (the code a student with that misconception writes, not the probe's own
formula), copies of a classmate (renamed, reordered, reformatted), blank labs, broken notebooks
and hostile ones. The expected facts (who has which misconception, who did not run, who handed
in nothing) come from this construction, never from the code under test.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
STEM = "04_rmsnorm"
FORWARD, BACKWARD = "rmsnorm_forward", "rmsnorm_backward"

# Correct forward passes, different in formula and style.
CORRECT_FORWARD = {
    "ana": """
    mean_square = (x**2).mean(axis=-1, keepdims=True)
    return gamma * x / np.sqrt(mean_square + eps)
""",
    "ben": """
    rms = np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + eps)
    return x / rms * gamma
""",
    "cai": """
    ms = np.einsum("...i,...i->...", x, x)[..., None] / x.shape[-1]
    return gamma * x * (ms + eps) ** -0.5
""",
    "dee": """
    d = x.shape[-1]
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return gamma * x / np.sqrt(norm**2 / d + eps)
""",
    "eli": """
    inv = 1.0 / np.sqrt((x * x).sum(-1, keepdims=True) / x.shape[-1] + eps)
    return (x * inv) * gamma
""",
    "fay": """
    ms = np.average(x**2, axis=-1)[..., np.newaxis]
    return np.multiply(gamma, x) / np.sqrt(ms + eps)
""",
    "gus": """
    scale = 1 / np.sqrt(np.mean(x ** 2, axis=x.ndim - 1, keepdims=True) + eps)
    y = x * scale
    return y * gamma
""",
    "hal": """
    flat = x.reshape(-1, x.shape[-1])
    ms = (flat**2).mean(axis=1, keepdims=True)
    out = flat / np.sqrt(ms + eps)
    return (out * gamma).reshape(x.shape)
""",
}

# Correct backward passes, different in formula and style.
CORRECT_BACKWARD = {
    "ana": """
    rms = np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)
    x_hat = x / rms
    g = dy * gamma
    dx = (g - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) / rms
    dgamma = (dy * x_hat).sum(axis=tuple(range(x.ndim - 1)))
    return dx, dgamma
""",
    "ben": """
    d = x.shape[-1]
    inv = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    gdy = gamma * dy
    dot = np.sum(gdy * x, axis=-1, keepdims=True)
    dx = inv * gdy - inv**3 * x * dot / d
    dgamma = np.sum((dy * x * inv).reshape(-1, d), axis=0)
    return dx, dgamma
""",
    "cai": """
    n = x.shape[-1]
    r2 = np.einsum("...i,...i->...", x, x)[..., None] / n + eps
    r = np.sqrt(r2)
    upstream = dy * gamma
    proj = np.einsum("...i,...i->...", upstream, x)[..., None]
    dx = upstream / r - x * proj / (n * r2 * r)
    lead = tuple(range(x.ndim - 1))
    return dx, np.sum(dy * x / r, axis=lead)
""",
    "dee": """
    flat_x = x.reshape(-1, x.shape[-1])
    flat_dy = dy.reshape(-1, x.shape[-1])
    rms = np.sqrt((flat_x**2).mean(axis=1, keepdims=True) + eps)
    xh = flat_x / rms
    gh = flat_dy * gamma
    dx = (gh - xh * (gh * xh).mean(axis=1, keepdims=True)) / rms
    return dx.reshape(x.shape), (flat_dy * xh).sum(axis=0)
""",
}

# Each forward misconception, as a student with it writes the code: probe name -> region.
FORWARD_SLIPS = {
    "subtracts the mean": """
    centred = x - x.mean(axis=-1, keepdims=True)
    return gamma * centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + eps)
""",
    "standard deviation instead of RMS": """
    return gamma * x / np.sqrt(x.var(axis=-1, keepdims=True) + eps)
""",
    "eps outside the root": """
    return gamma * x / (np.sqrt((x**2).mean(axis=-1, keepdims=True)) + eps)
""",
    "no eps": """
    return gamma * x / np.sqrt((x**2).mean(axis=-1, keepdims=True))
""",
    "sum of squares instead of mean": """
    return gamma * x / np.sqrt((x**2).sum(axis=-1, keepdims=True) + eps)
""",
    "square root missing": """
    return gamma * x / ((x**2).mean(axis=-1, keepdims=True) + eps)
""",
    "gamma missing": """
    return x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)
""",
    "wrong axis": """
    return gamma * x / np.sqrt((x**2).mean(axis=0, keepdims=True) + eps)
""",
    "statistics without keepdims": """
    mean_square = (x**2).mean(axis=-1)
    return gamma * x / np.sqrt(mean_square + eps)
""",
    "eps ignored (1e-5 hard-coded)": """
    return gamma * x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + 1e-5)
""",
}

BACKWARD_SLIPS = {
    "RMS treated as a constant": """
    rms = np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)
    return dy * gamma / rms, (dy * x / rms).sum(axis=tuple(range(x.ndim - 1)))
""",
    "gamma missing in dx": """
    rms = np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)
    x_hat = x / rms
    dx = (dy - x_hat * (dy * x_hat).mean(axis=-1, keepdims=True)) / rms
    return dx, (dy * x_hat).sum(axis=tuple(range(x.ndim - 1)))
""",
    "dgamma from x": """
    rms = np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)
    x_hat = x / rms
    g = dy * gamma
    dx = (g - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) / rms
    return dx, (dy * x).sum(axis=tuple(range(x.ndim - 1)))
""",
}

# Copies of a classmate's forward: (copier, original, region)
COPIES = {
    # ben's, every name changed
    "zoe": (
        "ben",
        """
    root_mean = np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + eps)
    return x / root_mean * gamma
""",
    ),
    # gus's, statements renamed and reformatted, a comment added
    "yan": (
        "gus",
        """
    # scale each row
    factor = 1 / np.sqrt(
        np.mean(x**2, axis=x.ndim - 1, keepdims=True)
        + eps
    )
    result = x * factor
    return result * gamma
""",
    ),
    # hal's, renamed, two independent statements swapped
    "xiu": (
        "hal",
        """
    rows = x.reshape(-1, x.shape[-1])
    msq = (rows**2).mean(axis=1, keepdims=True)
    normed = rows / np.sqrt(msq + eps)
    return (normed * gamma).reshape(x.shape)
""",
    ),
    # cai's, renamed and reformatted
    "wes": (
        "cai",
        """
    m = np.einsum('...i,...i->...', x, x)[..., None] / x.shape[-1]
    return gamma*x*(m+eps)**-0.5
""",
    ),
}
# Backward copies: (copier, original, region); reordered statements.
BACKWARD_COPIES = {
    "zoe": (
        "ben",
        """
    gd = gamma * dy
    n = x.shape[-1]
    r_inv = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    s = np.sum(gd * x, axis=-1, keepdims=True)
    grad_x = r_inv * gd - r_inv**3 * x * s / n
    grad_gamma = np.sum((dy * x * r_inv).reshape(-1, n), axis=0)
    return grad_x, grad_gamma
""",
    ),
}


@dataclasses.dataclass
class Built:
    """What the class was built to be."""

    folder: Path
    #: probe name -> the students planted with it
    planted: dict[str, set[str]]
    #: students whose notebook cannot run (not JSON, a syntax error)
    broken: set[str]
    blank: set[str]
    #: every student with a notebook, and the roster (with students who handed in nothing)
    students: set[str]
    roster: list[str]
    absent: set[str]
    copies: set[frozenset[str]]
    correct: set[str]
    notebooks: int


def _solution() -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "solutions" / f"{STEM}.ipynb", as_version=4)


def with_region(notebook, function: str, region: str):
    """The notebook with the answer region of ``function`` replaced by ``region``."""
    notebook = nbformat.from_dict(json.loads(json.dumps(notebook)))
    for cell in notebook.cells:
        if cell.cell_type == "code" and f"def {function}(" in cell.source:
            cell.source = re.sub(
                r"(### BEGIN SOLUTION\n).*?(\n\s*### END SOLUTION)",
                lambda m: m.group(1) + region.strip("\n") + m.group(2),
                cell.source,
                flags=re.S,
            )
            return notebook
    raise AssertionError(f"no answer region of {function}")


def _save(folder: Path, student: str, notebook, name: str = f"{STEM}.ipynb") -> None:
    (folder / student).mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, folder / student / name)


HOSTILE_ID = "<img src=x onerror=alert(1)>"
HOSTILE_ERROR = "<script>alert('pwned')</script>"


def build_class(folder: Path) -> Built:
    solution = _solution()
    planted: dict[str, set[str]] = {}
    students: set[str] = set()
    count = 0

    def save(student, notebook, name=f"{STEM}.ipynb"):
        nonlocal count
        _save(folder, student, notebook, name)
        students.add(student)
        count += 1

    correct = set()
    for student, region in CORRECT_FORWARD.items():
        notebook = with_region(solution, FORWARD, region)
        if student in CORRECT_BACKWARD:
            notebook = with_region(notebook, BACKWARD, CORRECT_BACKWARD[student])
        save(student, notebook)
        correct.add(student)
    # how many students have each forward slip
    repeats = {"eps outside the root": 3, "no eps": 2, "gamma missing": 2, "subtracts the mean": 2}
    for probe, region in FORWARD_SLIPS.items():
        for copy in range(repeats.get(probe, 1)):
            student = f"f{len(planted):02d}{copy}"
            save(student, with_region(solution, FORWARD, region))
            planted.setdefault(probe, set()).add(student)
    for probe, region in BACKWARD_SLIPS.items():
        student = f"b{len(planted):02d}"
        save(student, with_region(solution, BACKWARD, region))
        planted.setdefault(probe, set()).add(student)
    # two misconceptions in one notebook
    both = with_region(solution, FORWARD, FORWARD_SLIPS["eps outside the root"])
    save("two", with_region(both, BACKWARD, BACKWARD_SLIPS["gamma missing in dx"]))
    planted["eps outside the root"].add("two")
    planted["gamma missing in dx"].add("two")
    copies = set()
    for copier, (original, region) in COPIES.items():
        notebook = with_region(solution, FORWARD, region)
        if copier in BACKWARD_COPIES:
            notebook = with_region(notebook, BACKWARD, BACKWARD_COPIES[copier][1])
        elif original in CORRECT_BACKWARD:
            notebook = with_region(notebook, BACKWARD, CORRECT_BACKWARD[original])
        save(copier, notebook)
        copies.add(frozenset({copier, original}))
        correct.add(copier)
    # blank labs, one of them handed in twice with a finished second version (the best counts)
    fresh = nbformat.read(ROOT / "labs" / f"{STEM}.ipynb", as_version=4)
    blank = {"nil1", "nil2", "nil3"}
    for student in sorted(blank):
        save(student, fresh)
    save("twice", fresh, f"{STEM}.ipynb")
    save("twice", with_region(solution, FORWARD, CORRECT_FORWARD["ana"]), f"{STEM}_final.ipynb")
    correct.add("twice")
    # broken: not JSON; a syntax error in the answer
    broken = {"junk", "syntax"}
    (folder / "junk").mkdir()
    (folder / "junk" / f"{STEM}.ipynb").write_text('{"cells": [', encoding="utf-8")
    students.add("junk")
    count += 1
    save("syntax", with_region(solution, FORWARD, "    return gamma * x / (np.sqrt(\n"))
    # hostile: markup in the id, and in an error the notebook raises while it runs
    raising = with_region(solution, FORWARD, f"    raise ValueError({HOSTILE_ERROR!r})")
    save(HOSTILE_ID, raising)
    save("kim", solution)
    correct.add("kim")
    absent = {"quinn", "rory", '=HYPERLINK("http://x")'}
    roster = sorted(students | absent)
    return Built(folder, planted, broken, blank, students, roster, absent, copies, correct, count)
