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
import textwrap
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


# ----------------------------------------------------------------------------- similar code
#
# Classes of labs 03, 06, 09 and 11 for the similarity report: students who wrote the lab
# independently, each in a style of their own (plain NumPy, a class, torch.autograd.Function,
# CS231n-style helpers in a cell of their own behind adapters that several of them write
# alike, one-liners, match statements, Triton kernels), and students who copied one of them and
# disguised the copy. Each notebook is the lab as handed out with some stubs filled in; the
# stubs left are the lab's code.

_STUB = re.compile(r"( *)# YOUR CODE HERE\n *raise NotImplementedError\([^\n]*\)")


def lab(stem: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "labs" / f"{stem}.ipynb", as_version=4)


def _copy(notebook) -> nbformat.NotebookNode:
    return nbformat.from_dict(json.loads(json.dumps(notebook)))


def _code_cell(notebook, anchor: str):
    cells = [c for c in notebook.cells if c.cell_type == "code" and anchor in c.source]
    assert len(cells) == 1, f"{len(cells)} cells hold {anchor!r}"
    return cells[0]


def fill(notebook, anchor: str, body: str):
    """The notebook with the first stub after ``anchor`` replaced by ``body`` (dedented, then
    indented as the stub was)."""
    notebook = _copy(notebook)
    cell = _code_cell(notebook, anchor)
    start = cell.source.index(anchor)
    stub = _STUB.search(cell.source, start)
    assert stub, f"no stub after {anchor!r}"
    indent = stub.group(1)
    lines = textwrap.dedent(body).strip("\n").splitlines()
    code = "\n".join(indent + line if line.strip() else "" for line in lines)
    cell.source = cell.source[: stub.start()] + code + cell.source[stub.end() :]
    return notebook


def fills(notebook, bodies: dict[str, str]):
    for anchor, body in bodies.items():
        notebook = fill(notebook, anchor, body)
    return notebook


def add_cell(notebook, source: str, at_end: bool = False):
    """The notebook with a code cell of ``source`` after the imports (or at the end)."""
    notebook = _copy(notebook)
    cell = nbformat.v4.new_code_cell(textwrap.dedent(source).strip("\n"))
    first = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "code")
    notebook.cells.insert(len(notebook.cells) if at_end else first + 1, cell)
    return notebook


def edit_cells(notebook, anchor: str, change):
    """The notebook with every code cell that holds ``anchor`` rewritten by ``change``."""
    notebook = _copy(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code" and anchor in cell.source:
            cell.source = change(cell.source)
    return notebook


def rename(mapping: dict[str, str]):
    """A change that renames whole words (``x`` to ``inputs``, not ``xs``)."""

    def change(source: str) -> str:
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, mapping)) + r")\b")
        return pattern.sub(lambda m: mapping[m.group(1)], source)

    return change


def under_if_true(source: str) -> str:
    return "if True:\n" + textwrap.indent(source, "    ")


_DEAD = [
    "unused_{i} = {i} * 2",
    "pass",
    '"""note {i}"""',
    "scratch_{i} = np.zeros({i})",
    'print("step", {i})',
    "tmp_{i} = (1 + {i}) ** 2",
    "label_{i} = 'stage {i}'",
    "{i} + {i}",
]


def with_dead_statements(count: int):
    """A change that puts ``count`` dead statements after statements inside functions (each
    line indented 8 or more spaces that ends a statement), over as many passes as it takes."""

    def change(source: str) -> str:
        lines = source.splitlines()
        added = 0
        while added < count:
            out = []
            for line in lines:
                out.append(line)
                stripped = line.strip()
                indent = len(line) - len(stripped)
                simple = stripped and not stripped.endswith((":", ",", "(", "[", "{"))
                if (
                    added < count
                    and indent >= 4
                    and simple
                    and not stripped.startswith(
                        ("return", "raise", "def ", "class ", "@", '"""', ")", "]", "}")
                    )
                    and line.count("(") == line.count(")")
                ):
                    out.append(" " * indent + _DEAD[added % len(_DEAD)].format(i=added))
                    added += 1
            assert len(out) > len(lines), "no statement to put dead code after"
            lines = out
        return "\n".join(lines)

    return change


def formatted(source: str) -> str:
    """The source reformatted: a comment before each non-blank line, ``=`` without spaces,
    double quotes as single, a blank line after each statement."""
    out = []
    for line in source.splitlines():
        stripped = line.strip()
        indent = line[: len(line) - len(stripped)]
        if stripped and not stripped.startswith(("@", ")", "]", "}")):
            out.append(f"{indent}# ok")
        out.append(line.replace(" = ", "=").replace('"', "'"))
    return "\n".join(out)


@dataclasses.dataclass
class SimilarClass:
    """A lab's class: who wrote their code alone, and who copied whom."""

    stem: str
    #: student -> their notebooks (a student may hand in drafts)
    notebooks: dict[str, list[nbformat.NotebookNode]]
    independent: set[str]
    #: copier -> the student whose code they copied
    copied: dict[str, str]

    def save(self, folder: Path) -> Path:
        for student, notebooks in self.notebooks.items():
            for index, notebook in enumerate(notebooks):
                suffix = f"_draft{index}" if index else ""
                _save(folder, student, notebook, f"{self.stem}{suffix}.ipynb")
        return folder


# Lab 03, NumPy. The adapters of the two CS231n-style students (dia, eda) are the same code.
ADAPTERS_231N = {
    "def layernorm_forward(": """
        out, _ = layernorm_fwd(x, gamma, beta, {"eps": eps})
        return out
    """,
    "def layernorm_backward(": """
        _, cache = layernorm_fwd(x, gamma, np.zeros_like(gamma), {"eps": eps})
        return layernorm_bwd(dy, cache)
    """,
}
LAB03 = {
    "ada": {
        "def layernorm_forward(": """
            mu = x.mean(axis=-1, keepdims=True)
            var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
            x_hat = (x - mu) / np.sqrt(var + eps)
            return gamma * x_hat + beta
        """,
        "def layernorm_backward(": """
            mu = x.mean(axis=-1, keepdims=True)
            var = x.var(axis=-1, keepdims=True)
            inv_std = 1.0 / np.sqrt(var + eps)
            x_hat = (x - mu) * inv_std
            d = x.shape[-1]
            dxhat = dy * gamma
            total = dxhat.sum(axis=-1, keepdims=True)
            projected = x_hat * (dxhat * x_hat).sum(axis=-1, keepdims=True)
            dx = inv_std / d * (d * dxhat - total - projected)
            axes = tuple(range(dy.ndim - 1))
            return dx, (dy * x_hat).sum(axis=axes), dy.sum(axis=axes)
        """,
    },
    "fum": {
        "def layernorm_forward(": """
            return gamma * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) + beta
        """,  # noqa: E501
        "def layernorm_backward(": """
            xh = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
            g = dy * gamma
            dx = (g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
            return dx, (dy * xh).reshape(-1, x.shape[-1]).sum(0), dy.reshape(-1, x.shape[-1]).sum(0)
        """,  # noqa: E501
    },
}
LAYERS_BO = '''
class LayerNormLayer:
    """Caches what the backward pass needs."""

    def __init__(self, eps=1e-5):
        self.eps = eps
        self.cache = None

    def forward(self, x, gamma, beta):
        centred = x - np.mean(x, axis=-1, keepdims=True)
        std = np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + self.eps)
        normed = centred / std
        self.cache = (normed, std, gamma)
        return normed * gamma + beta

    def backward(self, grad_out):
        normed, std, gamma = self.cache
        width = normed.shape[-1]
        g = grad_out * gamma
        mean_g = np.mean(g, axis=-1, keepdims=True)
        mean_gn = np.mean(g * normed, axis=-1, keepdims=True)
        grad_in = (g - mean_g - normed * mean_gn) / std
        flat = grad_out.reshape(-1, width)
        return grad_in, (flat * normed.reshape(-1, width)).sum(0), flat.sum(0)
'''
ADAPTERS_BO = {
    "def layernorm_forward(": "return LayerNormLayer(eps).forward(x, gamma, beta)",
    "def layernorm_backward(": """
        layer = LayerNormLayer(eps)
        layer.forward(x, gamma, np.zeros_like(gamma))
        return layer.backward(dy)
    """,
}
FUNCTION_CY = """
import torch


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp, weight, bias, eps):
        mean = inp.mean(dim=-1, keepdim=True)
        var = inp.var(dim=-1, unbiased=False, keepdim=True)
        rstd = torch.rsqrt(var + eps)
        xhat = (inp - mean) * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        return xhat * weight + bias

    @staticmethod
    def backward(ctx, grad):
        xhat, rstd, weight = ctx.saved_tensors
        gx = grad * weight
        n = xhat.shape[-1]
        centred = gx - gx.sum(-1, keepdim=True) / n
        gin = rstd * (centred - xhat * (gx * xhat).sum(-1, keepdim=True) / n)
        dims = list(range(grad.dim() - 1))
        return gin, (grad * xhat).sum(dims), grad.sum(dims), None
"""
ADAPTERS_CY = {
    "def layernorm_forward(": """
        args = [torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (x, gamma, beta)]
        return LayerNormFunction.apply(*args, eps).numpy()
    """,
    "def layernorm_backward(": """
        leaves = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, gamma)]
        shift = torch.zeros_like(leaves[1], requires_grad=True)
        LayerNormFunction.apply(leaves[0], leaves[1], shift, eps).backward(torch.from_numpy(dy))
        return leaves[0].grad.numpy(), leaves[1].grad.numpy(), shift.grad.numpy()
    """,
}
LAYERS_DIA = """
def layernorm_fwd(x, gamma, beta, ln_param):
    eps = ln_param.get("eps", 1e-5)
    xt = x.T
    sample_mean = xt.mean(axis=0)
    sample_var = xt.var(axis=0)
    x_norm = ((xt - sample_mean) / np.sqrt(sample_var + eps)).T
    out = gamma * x_norm + beta
    cache = (x_norm, gamma, sample_var + eps)
    return out, cache


def layernorm_bwd(dout, cache):
    x_norm, gamma, var_eps = cache
    dbeta = dout.reshape(-1, dout.shape[-1]).sum(axis=0)
    dgamma = (dout * x_norm).reshape(-1, dout.shape[-1]).sum(axis=0)
    dx_norm = (dout * gamma).T
    n = dx_norm.shape[0]
    xn = x_norm.T
    dx = n * dx_norm - dx_norm.sum(axis=0) - xn * (dx_norm * xn).sum(axis=0)
    return (dx / (n * np.sqrt(var_eps))).T, dgamma, dbeta
"""
LAYERS_EDA = """
def layernorm_fwd(x, gamma, beta, ln_param):
    eps = ln_param.get("eps", 1e-5)
    mu = np.mean(x, axis=-1, keepdims=True)
    xmu = x - mu
    sq = xmu**2
    var = np.mean(sq, axis=-1, keepdims=True)
    sqrtvar = np.sqrt(var + eps)
    ivar = 1.0 / sqrtvar
    xhat = xmu * ivar
    out = gamma * xhat + beta
    cache = (xhat, gamma, xmu, ivar, sqrtvar, var, eps)
    return out, cache


def layernorm_bwd(dout, cache):
    xhat, gamma, xmu, ivar, sqrtvar, var, eps = cache
    D = dout.shape[-1]
    lead = tuple(range(dout.ndim - 1))
    dbeta = np.sum(dout, axis=lead)
    dgamma = np.sum(dout * xhat, axis=lead)
    dxhat = dout * gamma
    divar = np.sum(dxhat * xmu, axis=-1, keepdims=True)
    dxmu1 = dxhat * ivar
    dsqrtvar = -1.0 / (sqrtvar**2) * divar
    dvar = 0.5 * 1.0 / np.sqrt(var + eps) * dsqrtvar
    dsq = 1.0 / D * np.ones_like(dout) * dvar
    dxmu2 = 2 * xmu * dsq
    dx1 = dxmu1 + dxmu2
    dmu = -1 * np.sum(dx1, axis=-1, keepdims=True)
    dx2 = 1.0 / D * np.ones_like(dout) * dmu
    return dx1 + dx2, dgamma, dbeta
"""
# cy's Function, its statements reordered where the order does not matter, its methods
# swapped, its names changed, and the cell moved to the end of the notebook
FUNCTION_CY_REORDERED = """
import torch


class LNFn(torch.autograd.Function):
    @staticmethod
    def backward(ctx, upstream):
        normalized, inv_sigma, w = ctx.saved_tensors
        count = normalized.shape[-1]
        scaled = upstream * w
        dims = list(range(upstream.dim() - 1))
        centred = scaled - scaled.sum(-1, keepdim=True) / count
        gin = inv_sigma * (centred - normalized * (scaled * normalized).sum(-1, keepdim=True) / count)
        return gin, (upstream * normalized).sum(dims), upstream.sum(dims), None

    @staticmethod
    def forward(ctx, inputs, w, b, epsilon):
        variance = inputs.var(dim=-1, unbiased=False, keepdim=True)
        average = inputs.mean(dim=-1, keepdim=True)
        inv_sigma = torch.rsqrt(variance + epsilon)
        normalized = (inputs - average) * inv_sigma
        ctx.save_for_backward(normalized, inv_sigma, w)
        return normalized * w + b
"""


def lab03_class() -> SimilarClass:
    given = lab("03_layernorm")
    written = {
        "ada": fills(given, LAB03["ada"]),
        "bo": fills(add_cell(given, LAYERS_BO), ADAPTERS_BO),
        "cy": fills(add_cell(given, FUNCTION_CY), ADAPTERS_CY),
        "dia": fills(add_cell(given, LAYERS_DIA), ADAPTERS_231N),
        "eda": fills(add_cell(given, LAYERS_EDA), ADAPTERS_231N),
        "fum": fills(given, LAB03["fum"]),
    }
    # ada's code moved into two helpers that the graded functions call
    helpers = "\n\n\n".join(
        f"def _{name}_core(dy, x, gamma, beta, eps):\n"
        + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
        for name, body in zip(("forward", "backward"), LAB03["ada"].values(), strict=True)
    )
    helper = fills(
        add_cell(given, helpers),
        {
            "def layernorm_forward(": "return _forward_core(None, x, gamma, beta, eps)",
            "def layernorm_backward(": "return _backward_core(dy, x, gamma, None, eps)",
        },
    )
    renamed = edit_cells(
        written["fum"],
        "def layernorm_",
        rename({"x": "inputs", "gamma": "scale", "beta": "shift", "eps": "epsilon"}),
    )
    renamed = edit_cells(renamed, "xh = ", rename({"xh": "normed", "g": "upstream"}))
    dead = edit_cells(written["bo"], "class LayerNormLayer", with_dead_statements(40))
    wrapped = edit_cells(written["dia"], "def layernorm_", under_if_true)
    reordered = fills(add_cell(given, FUNCTION_CY_REORDERED, at_end=True), {
        "def layernorm_forward(": ADAPTERS_CY["def layernorm_forward("].replace(
            "LayerNormFunction", "LNFn"),
        "def layernorm_backward(": ADAPTERS_CY["def layernorm_backward("].replace(
            "LayerNormFunction", "LNFn"),
    })  # fmt: skip
    reformatted = edit_cells(written["eda"], "def layernorm_", formatted)
    # a verbatim copy of fum's, handed in with two drafts: the lab half done, and the copy
    drafts = [
        written["fum"],
        fill(given, "def layernorm_forward(", LAB03["fum"]["def layernorm_forward("]),
        edit_cells(written["fum"], "def layernorm_", lambda s: s + "\n# draft"),
    ]
    notebooks = {student: [notebook] for student, notebook in written.items()}
    notebooks.update(
        hal=[helper],
        ren=[renamed],
        ded=[dead],
        wra=[wrapped],
        reo=[reordered],
        fmt=[reformatted],
        dra=drafts,
    )
    copied = {
        "hal": "ada",
        "ren": "fum",
        "ded": "bo",
        "wra": "dia",
        "reo": "cy",
        "fmt": "eda",
        "dra": "fum",
    }
    return SimilarClass("03_layernorm", notebooks, set(written), copied)


# Lab 06, torch: the two norms (the blocks' stubs are left as the lab gives them).
NORMALISER_ANA = """
class Normaliser:
    def __init__(self, eps, centre):
        self.eps = eps
        self.centre = centre

    def __call__(self, x, gamma, beta=None):
        if self.centre:
            x = x - x.mean(dim=-1, keepdim=True)
        scale = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        out = x * scale * gamma
        return out if beta is None else out + beta
"""
ADAPTERS_ANA = {
    "def scratch_layernorm(": "return Normaliser(eps, centre=True)(x, gamma, beta)",
    "def scratch_rmsnorm(": "return Normaliser(eps, centre=False)(x, gamma)",
}
FUNCTION_BEN = """
class RMSFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gamma, eps):
        inv = (x.square().mean(-1, keepdim=True) + eps).rsqrt()
        ctx.save_for_backward(x, gamma, inv)
        return x * inv * gamma

    @staticmethod
    def backward(ctx, grad):
        x, gamma, inv = ctx.saved_tensors
        xn = x * inv
        g = grad * gamma
        dx = inv * (g - xn * (g * xn).mean(-1, keepdim=True))
        return dx, (grad * xn).reshape(-1, x.shape[-1]).sum(0), None
"""
ADAPTERS_BEN = {
    "def scratch_layernorm(": """
        centred = x - x.mean(-1, keepdim=True)
        return RMSFn.apply(centred, gamma, eps) + beta
    """,
    "def scratch_rmsnorm(": "return RMSFn.apply(x, gamma, eps)",
}
LAYERS_CAT = """
def ln_forward(x, gamma, beta, params):
    mean = torch.mean(x, dim=-1, keepdim=True)
    var = torch.mean((x - mean) ** 2, dim=-1, keepdim=True)
    out = gamma * (x - mean) / torch.sqrt(var + params["eps"]) + beta
    return out, (x, mean, var)


def rms_forward(x, gamma, params):
    ms = torch.mean(x * x, dim=-1, keepdim=True)
    out = gamma * x / torch.sqrt(ms + params["eps"])
    return out, (x, ms)
"""
ADAPTERS_CAT = {
    "def scratch_layernorm(": """
        out, _ = ln_forward(x, gamma, beta, {"eps": eps})
        return out
    """,
    "def scratch_rmsnorm(": """
        out, _ = rms_forward(x, gamma, {"eps": eps})
        return out
    """,
}
ONE_LINERS_DAN = {
    "def scratch_layernorm(": (
        "return (x - x.mean(-1, True)) / (x.var(-1, unbiased=False, keepdim=True) + eps)"
        ".sqrt() * gamma + beta"
    ),
    "def scratch_rmsnorm(": "return gamma * x * torch.rsqrt(torch.mean(x**2, -1, keepdim=True) + eps)",
}
# ben's Function with the layer norm's centring moved into a helper, reformatted and renamed
FUNCTION_BEN_MOVED = """
class ScaleByRMS(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inputs, weight, epsilon):
        # inverse root mean square
        inverse = (inputs.square()
                   .mean(-1, keepdim=True) + epsilon).rsqrt()
        ctx.save_for_backward(inputs, weight, inverse)
        return inputs * inverse * weight

    @staticmethod
    def backward(ctx, upstream):
        inputs, weight, inverse = ctx.saved_tensors
        unit = inputs * inverse
        scaled = upstream * weight
        grad = inverse * (scaled - unit * (scaled * unit).mean(-1, keepdim=True))
        return grad, (upstream * unit).reshape(-1, inputs.shape[-1]).sum(0), None


def centre_then_scale(inputs, weight, shift, epsilon):
    centred = inputs - inputs.mean(-1, keepdim=True)
    return ScaleByRMS.apply(centred, weight, epsilon) + shift
"""


def lab06_class() -> SimilarClass:
    given = lab("06_pre_post_ln")
    written = {
        "ana": fills(add_cell(given, NORMALISER_ANA), ADAPTERS_ANA),
        "ben": fills(add_cell(given, FUNCTION_BEN), ADAPTERS_BEN),
        "cat": fills(add_cell(given, LAYERS_CAT), ADAPTERS_CAT),
        "dan": fills(given, ONE_LINERS_DAN),
    }
    # ana's class, renamed, its methods' order swapped, wrapped in ``if True:``
    renamed = rename({"Normaliser": "Norm", "centre": "subtract_mean", "scale": "factor"})
    klass = (
        "class Normaliser:\n    def __call__"
        + NORMALISER_ANA.split("    def __call__")[1]
        + "\n    def __init__"
        + NORMALISER_ANA.split("    def __init__")[1].split("    def __call__")[0].rstrip()
        + "\n"
    )
    copy_ana = fills(add_cell(given, under_if_true(renamed(klass))), {
        anchor: renamed(body) for anchor, body in ADAPTERS_ANA.items()
    })  # fmt: skip
    copy_ben = fills(
        add_cell(given, FUNCTION_BEN_MOVED, at_end=True),
        {
            "def scratch_layernorm(": "return centre_then_scale(x, gamma, beta, eps)",
            "def scratch_rmsnorm(": "return ScaleByRMS.apply(x, gamma, eps)",
        },
    )
    notebooks = {student: [notebook] for student, notebook in written.items()}
    notebooks.update(eve=[copy_ana], fox=[copy_ben])
    return SimilarClass("06_pre_post_ln", notebooks, set(written), {"eve": "ana", "fox": "ben"})


# Lab 09: policy_rmsnorm and residual_sublayer, the students' own code behind the lab's
# wrappers (qknorm_attention's stub is left as given).
LAB09_PLAIN = {
    "def policy_rmsnorm(": """
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        gain = 1 + weight.float() if offset else weight.float()
        if multiply_in_float32:
            return (h * gain).to(dtype)
        return h.to(dtype) * (1 + weight if offset else weight)
    """,
    "def residual_sublayer(": """
        if placement == "pre":
            return x + sublayer(norm_in(x))
        if placement == "post":
            return norm_out(x + sublayer(x))
        if placement == "peri":
            return x + norm_out(sublayer(norm_in(x)))
        if placement == "olmo2":
            return x + norm_out(sublayer(x))
        if placement == "scaled":
            return x + sublayer(norm_in(x) / math.sqrt(layer))
        raise ValueError(f"unknown placement {placement}")
    """,
}
TABLES_RIA = '''
PLACEMENTS = {
    "pre": lambda x, f, n_in, n_out, layer: x + f(n_in(x)),
    "post": lambda x, f, n_in, n_out, layer: n_out(x + f(x)),
    "peri": lambda x, f, n_in, n_out, layer: x + n_out(f(n_in(x))),
    "olmo2": lambda x, f, n_in, n_out, layer: x + n_out(f(x)),
    "scaled": lambda x, f, n_in, n_out, layer: x + f(n_in(x) * layer**-0.5),
}


class GainPolicy:
    """Llama's or Gemma's gain, multiplied before or after the cast."""

    def __init__(self, offset, wide):
        self.offset = offset
        self.wide = wide

    def gain(self, weight, dtype):
        w = weight.to(dtype)
        return w + 1 if self.offset else w

    def __call__(self, x, weight, eps):
        acc = x.to(torch.float32)
        normed = acc / torch.sqrt(torch.mean(acc * acc, dim=-1, keepdim=True) + eps)
        if self.wide:
            return (normed * self.gain(weight, torch.float32)).to(x.dtype)
        return normed.to(x.dtype) * self.gain(weight, x.dtype)
'''
ADAPTERS_RIA = {
    "def policy_rmsnorm(": "return GainPolicy(offset, multiply_in_float32)(x, weight, eps)",
    "def residual_sublayer(": "return PLACEMENTS[placement](x, sublayer, norm_in, norm_out, layer)",
}
HELPERS_SAM = """
def rms_core(x, eps):
    x32 = x.to(torch.float32)
    ms = (x32 * x32).mean(dim=-1, keepdim=True)
    return x32 * torch.rsqrt(ms + eps)


def effective_gain(weight, offset):
    return weight + 1.0 if offset else weight
"""
ADAPTERS_SAM = {
    "def policy_rmsnorm(": """
        normed = rms_core(x, eps)
        if multiply_in_float32:
            return (normed * effective_gain(weight.float(), offset)).to(x.dtype)
        return normed.to(x.dtype) * effective_gain(weight, offset)
    """,
    "def residual_sublayer(": """
        inner = x if placement in ("post", "olmo2") else norm_in(x)
        if placement == "scaled":
            inner = inner / layer**0.5
        out = sublayer(inner)
        if placement in ("peri", "olmo2"):
            out = norm_out(out)
        return norm_out(x + out) if placement == "post" else x + out
    """,
}
LAB09_TERSE = {
    "def policy_rmsnorm(": """
        g = (1 + weight.float()) if offset else weight.float()
        y = x.float() * (x.float().square().mean(-1, keepdim=True) + eps).rsqrt()
        return (y * g).to(x.dtype) if multiply_in_float32 else y.to(x.dtype) * g.to(x.dtype)
    """,
    "def residual_sublayer(": """
        match placement:
            case "pre":
                return x + sublayer(norm_in(x))
            case "post":
                return norm_out(x + sublayer(x))
            case "peri":
                return x + norm_out(sublayer(norm_in(x)))
            case "olmo2":
                return x + norm_out(sublayer(x))
            case "scaled":
                return x + sublayer(norm_in(x) / layer**0.5)
        raise ValueError(placement)
    """,
}
# sam's helpers, inlined into the graded functions, renamed
INLINED_SAM = {
    "def policy_rmsnorm(": """
        wide = x.to(torch.float32)
        mean_square = (wide * wide).mean(dim=-1, keepdim=True)
        unit = wide * torch.rsqrt(mean_square + eps)
        if multiply_in_float32:
            w = weight.float()
            return (unit * (w + 1.0 if offset else w)).to(x.dtype)
        return unit.to(x.dtype) * (weight + 1.0 if offset else weight)
    """,
    "def residual_sublayer(": ADAPTERS_SAM["def residual_sublayer("].replace("inner", "h"),
}


def lab09_class() -> SimilarClass:
    given = lab("09_modern_norms")
    written = {
        "pia": fills(given, LAB09_PLAIN),
        "ria": fills(add_cell(given, TABLES_RIA), ADAPTERS_RIA),
        "sam": fills(add_cell(given, HELPERS_SAM), ADAPTERS_SAM),
        "tea": fills(given, LAB09_TERSE),
    }
    notebooks = {student: [notebook] for student, notebook in written.items()}
    # pia's notebook, verbatim; sam's code inlined and renamed
    notebooks.update(vic=[written["pia"]], uma=[fills(given, INLINED_SAM)])
    return SimilarClass("09_modern_norms", notebooks, set(written), {"vic": "pia", "uma": "sam"})


# Lab 11: the RMSNorm forward kernel and its wrapper.
KERNEL_KAI = {
    "def _rms_fwd_kernel(": """
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        tl.store(RSTD + row, rstd)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + row * N + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)
    """,
    "def tri_rmsnorm_forward(": """
        M, N = x.shape
        y = torch.empty_like(x)
        rstd = torch.empty(M, dtype=torch.float32, device=x.device)
        _rms_fwd_kernel[(M,)](x, weight, y, rstd, N, eps, BLOCK=triton.next_power_of_2(N))
        return y, rstd
    """,
}
KERNEL_LEO = {
    "def _rms_fwd_kernel(": """
        pid = tl.program_id(axis=0)
        offs = tl.arange(0, BLOCK)
        inside = offs < N
        x_ptrs = X + pid * N + offs
        xs = tl.load(x_ptrs, mask=inside, other=0.).to(tl.float32)
        mean_sq = tl.sum(xs * xs) / N
        r = tl.rsqrt(mean_sq + eps)
        tl.store(RSTD + pid, r)
        gain = tl.load(W + offs, mask=inside).to(tl.float32)
        out = xs * r * gain
        tl.store(Y + pid * N + offs, out.to(Y.dtype.element_ty), mask=inside)
    """,
    "def tri_rmsnorm_forward(": """
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty_like(x)
        inv_rms = x.new_empty(rows, dtype=torch.float32)
        block = max(16, triton.next_power_of_2(cols))
        _rms_fwd_kernel[(rows,)](x, weight, out, inv_rms, cols, eps, BLOCK=block)
        return out, inv_rms
    """,
}
HELPER_MIA = """
@triton.jit
def _row_inverse_rms(values, count, eps):
    squares = tl.where(values == values, values * values, 0.0)
    return 1 / tl.sqrt(tl.sum(squares, axis=0) / count + eps)
"""
KERNEL_MIA = {
    "def _rms_fwd_kernel(": """
        start = tl.program_id(0).to(tl.int64) * N
        index = tl.arange(0, BLOCK)
        valid = index < N
        values = tl.load(X + start + index, valid, 0.0).to(tl.float32)
        inverse = _row_inverse_rms(values, N, eps)
        tl.store(RSTD + tl.program_id(0), inverse)
        scaled = values * inverse * tl.load(W + index, valid, 0.0).to(tl.float32)
        tl.store(Y + start + index, scaled.to(Y.dtype.element_ty), valid)
    """,
    "def tri_rmsnorm_forward(": """
        y, rstd = torch.empty_like(x), torch.empty(x.shape[0], device=x.device)
        grid = lambda meta: (x.shape[0],)  # noqa: E731
        _rms_fwd_kernel[grid](x, weight, y, rstd, x.shape[1], eps, BLOCK=triton.next_power_of_2(x.shape[1]))
        return y, rstd
    """,  # noqa: E501
}


def lab11_class() -> SimilarClass:
    given = lab("11_triton_kernels")
    written = {
        "kai": fills(given, KERNEL_KAI),
        "leo": fills(given, KERNEL_LEO),
        "mia": fills(add_cell(given, HELPER_MIA), KERNEL_MIA),
    }
    # kai's kernel renamed and reformatted; leo's kernel moved into a jitted helper
    copy_kai = edit_cells(
        written["kai"],
        "def _rms_fwd_kernel(",
        lambda source: formatted(rename({"row": "r", "cols": "offsets", "mask": "m"})(source)),
    )
    body = textwrap.indent(textwrap.dedent(KERNEL_LEO["def _rms_fwd_kernel("]).strip(), "    ")
    moved = "@triton.jit\ndef _normalise_row(X, W, Y, RSTD, N, eps, BLOCK: tl.constexpr):\n" + body
    copy_leo = fills(
        add_cell(given, moved),
        {
            "def _rms_fwd_kernel(": "_normalise_row(X, W, Y, RSTD, N, eps, BLOCK)",
            "def tri_rmsnorm_forward(": KERNEL_LEO["def tri_rmsnorm_forward("],
        },
    )
    notebooks = {student: [notebook] for student, notebook in written.items()}
    notebooks.update(ned=[copy_kai], oli=[copy_leo])
    return SimilarClass("11_triton_kernels", notebooks, set(written), {"ned": "kai", "oli": "leo"})
