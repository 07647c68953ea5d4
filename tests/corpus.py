"""An adversarial grading corpus: broken and hostile submissions, each with its exact outcome.

Every case is a notebook for lab 03 built from the solution notebook (or from nothing) plus one
attack. ``build`` returns, per file, ``(score, text that must appear in its error or messages,
finding that must be flagged or None)``; a score or text that depends on the isolation is a
dict by mode (``"processes"``, ``"sandbox"``). The solution earns 16: 7 for the forward checks,
4 backward, 2 for practice problem 1, 2 for problem 2 and 1 for problem 3.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import nbformat
from conftest import ROOT

from normlab.grader.isolation import cgroup

SOLUTION = ROOT / "solutions" / "03_layernorm.ipynb"
LAB = ROOT / "labs" / "03_layernorm.ipynb"
FULL, FORWARD = 16, 7
BACKWARD = 4
FORWARD_DEF = "def layernorm_forward(x, gamma, beta, eps=1e-5):"
BACKWARD_DEF = "def layernorm_backward(dy, x, gamma, eps=1e-5):"
# Unique arguments of processes that must not survive grading (looked up in /proc by the tests).
SURVIVOR_MARK = "4242.0424242"

# A correct forward pass by a library norm: a from-scratch bypass when it reaches the grade.
LIBRARY_FORWARD = "{call}(torch.from_numpy(x), x.shape[-1:], torch.from_numpy(gamma), torch.from_numpy(beta), eps).numpy()"
# A correct backward pass by autograd, through a name bound to ``torch.autograd.grad``.
AUTOGRAD_BACKWARD = (
    "    xt = torch.tensor(x)\n    xt.requires_grad_(True)\n"
    "    gt = torch.tensor(gamma)\n    gt.requires_grad_(True)\n"
    "    mean = xt.mean(-1, keepdim=True)\n"
    "    y = gt * (xt - mean) / torch.sqrt(((xt - mean) ** 2).mean(-1, keepdim=True) + eps)\n"
    "    dx, dgamma = {grad}(y, (xt, gt), torch.from_numpy(dy))\n"
    "    return dx.numpy(), dgamma.numpy(), dy.sum(axis=tuple(range(dy.ndim - 1)))\n"
)


def _solution() -> nbformat.NotebookNode:
    return nbformat.read(SOLUTION, as_version=4)


def _with_cells(before=(), after=(), notebook=None) -> nbformat.NotebookNode:
    notebook = notebook or _solution()
    new = [nbformat.v4.new_code_cell(source) for source in before]
    notebook.cells = new + notebook.cells + [nbformat.v4.new_code_cell(s) for s in after]
    return notebook


def _forward_returning(expression: str) -> nbformat.NotebookNode:
    """The solution, but layernorm_forward returns ``expression`` of the right answer ``y``."""
    notebook = _solution()
    for cell in notebook.cells:
        if cell.source.startswith(FORWARD_DEF):
            cell.source = cell.source.replace(
                "    return gamma * x_hat + beta",
                f"    y = gamma * x_hat + beta\n    return {expression}",
            )
    return notebook


def _without_function(name: str) -> nbformat.NotebookNode:
    notebook = _solution()
    notebook.cells = [c for c in notebook.cells if not c.source.startswith(f"def {name}(")]
    return notebook


def _edit_forward(old: str, new: str) -> nbformat.NotebookNode:
    notebook = _solution()
    for cell in notebook.cells:
        if cell.source.startswith(FORWARD_DEF):
            cell.source = cell.source.replace(old, new)
    return notebook


def _replace_function(header: str, source: str, before=(), notebook=None):
    """The solution with the cell that starts with ``header`` replaced by ``source``."""
    notebook = notebook or _solution()
    for cell in notebook.cells:
        if cell.source.startswith(header):
            cell.source = source
    notebook.cells = [nbformat.v4.new_code_cell(b) for b in before] + notebook.cells
    return notebook


def _forward_by(call: str, before=(), signature=FORWARD_DEF):
    body = f"{signature}\n    return {LIBRARY_FORWARD.format(call=call)}"
    return _replace_function(FORWARD_DEF, body, ["import torch", *before])


def _backward_by(grad: str, before=(), signature=BACKWARD_DEF):
    body = signature + "\n" + AUTOGRAD_BACKWARD.format(grad=grad)
    return _replace_function(BACKWARD_DEF, body, ["import torch", *before])


TORCH_HIDDEN = "raised TorchHiddenError: PyTorch is not available while this NumPy lab is graded"
UNHIDE = """import importlib, sys
if type(sys.modules.get('torch')).__name__ == 'StandInModule':
    sys.meta_path[:] = [f for f in sys.meta_path if 'StandIn' not in type(f).__name__]
    for name in [n for n in sys.modules if n.split('.')[0] == 'torch']:
        del sys.modules[name]
    importlib.invalidate_caches()"""


def _forward_through(module: str, setup: str = "") -> nbformat.NotebookNode:
    """The solution with a forward pass by ``torch.nn.functional.layer_norm``, reached through
    ``module`` (an expression that gives the torch module) and names built at run time, so that
    no reading of the source resolves it."""
    body = (
        f"{FORWARD_DEF}\n"
        + "".join(f"    {line}\n" for line in setup.splitlines())
        + f"    lib = {module}\n"
        "    norm = getattr(getattr(lib.nn, 'funct' + 'ional'), 'layer' + '_norm')\n"
        "    t = lib.from_numpy\n"
        "    return norm(t(x), x.shape[-1:], t(gamma), t(beta), eps).numpy()"
    )
    return _replace_function(FORWARD_DEF, body)


def _cells_of(notebook) -> list[str]:
    return [c.source for c in notebook.cells if c.cell_type == "code"]


# ----------------------------------------------------------------------------- correct styles

# Correct code in the styles of public course material must get full marks: a class with its
# own forward/backward methods (llm.c), a torch.autograd.Function whose backward is written by
# hand, and CS231n-style functions that keep a cache. Names like ``.backward`` are theirs.
CLASS_STYLE = """
class LayerNorm:
    \"\"\"llm.c style: forward keeps what backward needs; backward written by hand.\"\"\"

    def __init__(self, eps=1e-5):
        self.eps = eps

    def forward(self, x, gamma, beta):
        self.x_hat = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + self.eps)
        self.rstd = 1 / np.sqrt(x.var(-1, keepdims=True) + self.eps)
        return gamma * self.x_hat + beta

    def backward(self, dy, gamma):
        axes = tuple(range(dy.ndim - 1))
        g = dy * gamma
        dx = self.rstd * (g - g.mean(-1, keepdims=True) - self.x_hat * (g * self.x_hat).mean(-1, keepdims=True))
        return dx, (dy * self.x_hat).sum(axes), dy.sum(axes)


def layernorm_forward(x, gamma, beta, eps=1e-5):
    return LayerNorm(eps).forward(x, gamma, beta)


def layernorm_backward(dy, x, gamma, eps=1e-5):
    layer = LayerNorm(eps)
    layer.forward(x, gamma, np.zeros_like(gamma))
    return layer.backward(dy, gamma)
"""

FUNCTION_STYLE = """
import torch


class LayerNormFunction(torch.autograd.Function):
    \"\"\"autograd.Function style, with the backward written by hand (no autograd inside).\"\"\"

    @staticmethod
    def forward(ctx, x, gamma, beta, eps):
        rstd = 1 / np.sqrt(x.var(-1, keepdims=True) + eps)
        x_hat = (x - x.mean(-1, keepdims=True)) * rstd
        ctx.save_for_backward = (x_hat, rstd, gamma)
        return gamma * x_hat + beta

    @staticmethod
    def backward(ctx, dy):
        x_hat, rstd, gamma = ctx.save_for_backward
        axes = tuple(range(dy.ndim - 1))
        g = dy * gamma
        dx = rstd * (g - g.mean(-1, keepdims=True) - x_hat * (g * x_hat).mean(-1, keepdims=True))
        return dx, (dy * x_hat).sum(axes), dy.sum(axes), None


class Context:
    pass


def layernorm_forward(x, gamma, beta, eps=1e-5):
    return LayerNormFunction.forward(Context(), x, gamma, beta, eps)


def layernorm_backward(dy, x, gamma, eps=1e-5):
    ctx = Context()
    LayerNormFunction.forward(ctx, x, gamma, np.zeros_like(gamma), eps)
    return LayerNormFunction.backward(ctx, dy)[:3]
"""

CS231N_STYLE = """
def layernorm_forward_with_cache(x, gamma, beta, eps):
    mu = x.mean(axis=-1, keepdims=True)
    xmu = x - mu
    var = (xmu ** 2).mean(axis=-1, keepdims=True)
    ivar = 1.0 / np.sqrt(var + eps)
    xhat = xmu * ivar
    out = gamma * xhat + beta
    cache = (xhat, gamma, ivar)
    return out, cache


def layernorm_backward_with_cache(dout, cache):
    xhat, gamma, ivar = cache
    D = xhat.shape[-1]
    axes = tuple(range(dout.ndim - 1))
    dbeta = dout.sum(axis=axes)
    dgamma = (dout * xhat).sum(axis=axes)
    dxhat = dout * gamma
    dx = (1.0 / D) * ivar * (D * dxhat - dxhat.sum(-1, keepdims=True) - xhat * (dxhat * xhat).sum(-1, keepdims=True))
    return dx, dgamma, dbeta


def layernorm_forward(x, gamma, beta, eps=1e-5):
    return layernorm_forward_with_cache(x, gamma, beta, eps)[0]


def layernorm_backward(dy, x, gamma, eps=1e-5):
    _, cache = layernorm_forward_with_cache(x, gamma, np.zeros_like(gamma), eps)
    return layernorm_backward_with_cache(dy, cache)
"""


def styled(source: str) -> nbformat.NotebookNode:
    """The solution with its forward and backward replaced by ``source`` (defined after them)."""
    notebook = _solution()
    notebook.cells.append(nbformat.v4.new_code_cell(source))
    return notebook


CONTROLS = {
    "class_style": CLASS_STYLE,
    "function_style": FUNCTION_STYLE,
    "cs231n_style": CS231N_STYLE,
}


def _by_mode(processes, sandbox) -> dict:
    return {"processes": processes, "sandbox": sandbox}


def build(folder: Path, targets: dict[str, Path]) -> dict[str, tuple]:
    """Write every case into ``folder``; return (score, text, finding) per file name.

    Args:
        targets: absolute paths the hostile cases try to write to or read:
            ``sentinel`` (a file outside the grader's temp dirs that no notebook writes
            itself), ``gradebook``, ``victim`` (another student's notebook), ``secret`` (a file
            in a home folder), ``linked`` (a file the log-symlink attack points the grader at).
    """
    sentinel, gradebook, victim = (str(targets[k]) for k in ("sentinel", "gradebook", "victim"))
    secret, linked = str(targets["secret"]), str(targets["linked"])
    solution_path = str(SOLUTION)
    notebooks = {
        "empty_notebook": (nbformat.v4.new_notebook(), 0, "is not defined in the notebook"),
        "missing_function": (
            _without_function("layernorm_backward"),
            FULL - 4,
            "`layernorm_backward` is not defined",
        ),
        "wrong_signature": (
            _edit_forward(FORWARD_DEF, "def layernorm_forward(x):"),
            FULL - FORWARD,
            "TypeError",
        ),
        "syntax_error": (
            _edit_forward(FORWARD_DEF, FORWARD_DEF[:-1]),
            FULL - FORWARD,
            "SyntaxError",
        ),
        "exception_at_import": (
            _with_cells(before=["import module_that_does_not_exist"]),
            FULL,
            "ModuleNotFoundError",
        ),
        "infinite_loop": (_with_cells(after=["while True:\n    pass"]), FULL, "Timeout"),
        "sleep_forever": (_with_cells(after=["import time\ntime.sleep(1e9)"]), FULL, "Timeout"),
        # A hang costs the checks of the function that hangs, and one cell's time: the cell
        # that first calls it runs out of time, the cells after it that call it stop at once,
        # and the grader calls it no more (docs/grading.md, "A hang").
        "forward_hangs": (
            _edit_forward(FORWARD_DEF, FORWARD_DEF + "\n    while True:\n        pass"),
            FULL - FORWARD,
            "`layernorm_forward` did not finish in time when the cell that starts "
            "`y = layernorm_forward(np.array([[2.0, 4.0], [20.0, 40.0]]),…` called it",
        ),
        "backward_hangs": (
            _replace_function(BACKWARD_DEF, BACKWARD_DEF + "\n    while True:\n        pass"),
            FULL - BACKWARD,
            "`layernorm_backward` did not finish in time when the cell that starts "
            "`rng = np.random.default_rng(2)` called it",
        ),
        "hang_in_a_cell_that_calls_no_graded_function": (
            _with_cells(after=["def spin():\n    while True:\n        pass\n\nspin()"]),
            FULL,
            "Timeout",
        ),
        "hang_at_import": (_with_cells(before=["while True:\n    pass"]), FULL, "Timeout"),
        "memory_bomb": (_with_cells(after=["hog = bytearray(16 * 1024**3)"]), FULL, "MemoryError"),
        "sys_exit": (_with_cells(after=["import sys\nsys.exit(0)"]), FULL, "SystemExit"),
        "os_exit": (_with_cells(after=["import os\nos._exit(0)"]), 0, "exited with code 0"),
        # Its parent is never the grader: a small nanny process, or under bubblewrap the
        # sandbox's init, which ignores the signal. Either way the notebook is graded.
        "kill_parent": (
            _with_cells(after=["import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"]),
            FULL,
            "",
        ),
        "fork_bomb": (
            _with_cells(after=["import os\nfor _ in range(5):\n    os.fork()"]),
            FULL,
            "",
        ),
        "huge_output": (_with_cells(after=["print('x' * 16_000_000)"]), FULL, "OSError"),
        "segfault": (_with_cells(after=["import ctypes\nctypes.string_at(0)"]), 0, "SIGSEGV"),
        # The cell's alarm is ignored: only the grader's own deadline for the whole submission
        # ends it. It sleeps, so that the class's run does not spend that budget's CPU; the
        # same with an endless loop, on a short budget: test_adversarial.py,
        # test_a_cell_that_ignores_its_alarm_and_spins_is_killed_at_the_deadline.
        "ignores_alarm_then_sleeps": (
            _with_cells(
                after=[
                    "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                    "time.sleep(1e9)"
                ]
            ),
            0,
            "timed out",
        ),
        "returns_nan": (
            _forward_returning("np.full_like(y, np.nan)"),
            FULL - FORWARD,
            "non-finite",
        ),
        "returns_list": (_forward_returning("y.tolist()"), FULL - FORWARD, "returned a list"),
        "wrong_shape": (_forward_returning("y[:1]"), FULL - FORWARD, "shape is"),
        "wrong_dtype": (_forward_returning("y.astype(np.int64)"), FULL - FORWARD, "max abs error"),
        "returns_object": (
            _forward_returning("object()"),
            FULL - FORWARD,
            "returned an object of type object",
        ),
        "patches_numpy": (
            _with_cells(
                after=["np.allclose = lambda *a, **k: True\nnp.isfinite = lambda a: True"],
                notebook=_forward_returning("x"),
            ),
            FULL - FORWARD,
            "max abs error",
        ),
        "patches_normlab": (
            _with_cells(
                after=[
                    "import normlab.grader.core as core, normlab.grader.probes as probes\n"
                    "probes.expect_array = lambda *a, **k: None\n"
                    "core.run_checks = lambda *a, **k: []"
                ],
                notebook=_forward_returning("x"),
            ),
            FULL - FORWARD,
            "max abs error",
        ),
        "prints_fake_score": (
            _with_cells(
                after=[
                    'print(\'{"submissions": [{"score": 13, "max_score": 13}]}\')\nprint("score: 13/13")'
                ],
                notebook=nbformat.read(LAB, as_version=4),
            ),
            0,
            "not implemented yet",
        ),
        "writes_outside": (
            _with_cells(
                after=[
                    f"for path in [{sentinel!r}, {gradebook!r}]:\n    open(path, 'w').write('student,score\\nme,100\\n')"
                ]
            ),
            FULL,
            "",
        ),
        "reads_other_student": (
            _with_cells(after=[f"stolen = open({victim!r}).read()"]),
            FULL,
            "",
        ),
        # What it prints and raises reaches the instructor as escapes (test_adversarial's
        # test_the_gradebook_is_inert): a clipboard write (OSC 52), a screen clear, a window
        # title, a bidi override, HTML and a fence-closing run of backticks.
        "terminal_escapes": (
            _with_cells(
                after=[
                    "print('\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\x1b]0;graded 16/16\\x07')\n"
                    "raise ValueError('\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J \\u202eecilA "
                    "<script>x</script> ```')"
                ]
            ),
            FULL,
            "ValueError",
        ),
    }
    notebooks.update(hostile_cases(sentinel, secret, linked, solution_path))
    expected = {}
    for name, (notebook, score, text, *finding) in notebooks.items():
        nbformat.write(notebook, folder / f"03_layernorm_{name}.ipynb")
        expected[f"03_layernorm_{name}.ipynb"] = (score, text, finding[0] if finding else None)
    for name, (raw, score, text) in file_cases().items():
        path = folder / f"03_layernorm_{name}.ipynb"
        if raw is None:  # a sparse 1 GB file: rejected by its size, never read
            with open(path, "wb") as stream:
                stream.truncate(1 << 30)
        else:
            path.write_bytes(raw)
        expected[path.name] = (score, text, None)
    return expected


def file_cases() -> dict[str, tuple[bytes | None, int, str]]:
    """Files that are not (valid) notebooks: each costs its submission alone."""
    text = SOLUTION.read_text()
    depth = 100_000  # 200 KB of brackets: too deep for a recursive parser
    return {
        "malformed_json": (text[: len(text) // 3].encode(), 0, "broken JSON"),
        "not_a_notebook": (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", 0, "not UTF-8"),
        "json_not_notebook": (json.dumps([1, 2, 3]).encode(), 0, "no list of cells"),
        "deeply_nested": (
            b'{"cells": ' + b"[" * depth + b"]" * depth + b"}",
            0,
            "nests more than",
        ),
        # 90 bytes: metadata.normlab is a string, not an object
        "metadata_not_object": (
            b'{"cells": [], "metadata": {"normlab": "03_layernorm"}, "nbformat": 4, '
            b'"nbformat_minor": 5}',
            0,
            "is not defined",
        ),
        "one_gigabyte": (None, 0, "larger than"),
    }


# The corpus is graded with these limits (``normlab grade --limit``), so that each limit case
# reaches its limit in a small fraction of its time budget, at any load: 2,000 files instead
# of 65,536 (creating 65,536 files once took longer than a cell's 5 s on a loaded machine,
# and "No space left on device" became "Timeout"), 32 MB instead of 256, 8 MB per file.
TEST_LIMITS = {"tmp_mb": 32, "max_files": 2000, "max_file_bytes": 8 << 20}
# The cases that spin in an endless loop until a cell's alarm stops them: each costs that
# cell's whole time in CPU. They are graded in a run of their own whose cells have 2 s each
# (SPINNER_CELL_OPTIONS; the corpus's other cells have 5 s, a quarter of its 20 s budget): 10 s
# of the suite's CPU where they took 25, their other cells (the lab's, numpy already imported)
# taking milliseconds. The alarm is the child's own
# (worker.run_submission's cells and calls, on ITIMER_REAL), the same code whether the child
# was forked by the fork server or started under bubblewrap, and so is the stand-in that stops
# a hung function's later calls; the corpus grades them in the processes mode only. What the
# sandbox adds to a hang (its process tree ended at the grader's deadline) is
# test_a_cell_that_ignores_its_alarm_and_spins_is_killed_at_the_deadline[sandbox].
SPINNERS = {
    "infinite_loop",
    "forward_hangs",
    "backward_hangs",
    "hang_in_a_cell_that_calls_no_graded_function",
    "hang_at_import",
}
SPINNER_FILES = {f"03_layernorm_{name}.ipynb" for name in SPINNERS}
SPINNER_CELL_OPTIONS = ["--limit=min_cell_timeout=2", "--limit=cell_timeout_share=0.1"]
TEST_MEMORY_MB = 1024  # --memory: the cgroup's total is then 1024 + 32 MB
LIMIT_OPTIONS = [f"--limit={name}={value}" for name, value in TEST_LIMITS.items()]
NO_SPACE = "No space left on device"
# Under the sandbox the number of files is bounded when the grader is root (the child mounts
# its own /tmp); bubblewrap's tmpfs alone has a size only (docs/grading.md).
SANDBOX_FILE_COUNT = NO_SPACE if os.geteuid() == 0 else ""
FILL_EVERYWHERE = """
import os
written, chunk = 0, b'x' * (6 << 20)
places = ['.', '/tmp', '/var/tmp', '/dev/shm', os.path.expanduser('~'), os.path.dirname(os.getcwd())]
for index, place in enumerate(places):
    for i in range(10):
        try:
            with open(os.path.join(place, f'fill_{index}_{i}'), 'wb') as stream:
                stream.write(chunk)
        except OSError:
            break
        written += len(chunk)
assert written <= 32 << 20, f'wrote {written >> 20} MB'
raise OSError('the disk total held')
"""


def _encoded_exec(source: str) -> str:
    blob = base64.b64encode(source.encode()).decode()
    return f"import base64\nexec(base64.b64decode({blob!r}).decode())"


# Kills, for 3 s, every process of its user outside its own session (its classmates, graded
# at the same time, and their grader's helpers), ignoring its alarm.
KILL_CLASSMATES = """
import os, signal, time
signal.signal(signal.SIGALRM, signal.SIG_IGN)
me, session, killed = os.getuid(), os.getsid(0), 0
end = time.monotonic() + 3
while time.monotonic() < end:
    for name in os.listdir('/proc'):
        if name.isdigit() and int(name) != os.getpid():
            try:
                if os.stat(f'/proc/{name}').st_uid == me and os.getsid(int(name)) != session:
                    os.kill(int(name), signal.SIGKILL)
                    killed += 1
            except OSError:
                pass
    time.sleep(0.05)
raise OSError(f'killed {killed} processes')
"""
# Forks 240 processes that spin forever, each in a session of its own (setsid), each carrying
# MARK on its command line; then waits for them, ignoring its alarm. Without one CPU share for
# the submission each session was a scheduling group of its own: 240 shares of the machine
# against a classmate's one.
SETSID_SPINNERS = """
import os, signal
signal.signal(signal.SIGALRM, signal.SIG_IGN)
for _ in range({count}):
    if os.fork() == 0:
        os.setsid()
        os.execv('/bin/sh', ['sh', '-c', 'while :; do :; done', 'sh', '{mark}'])
while True:
    os.wait()
"""
# Six forked children of 250 MB each, all alive at once (each says so through a pipe, no
# timing): 1.5 GB, over the submission's total of --memory + tmp_mb (1056 MB here).
MEMORY_ACROSS_PROCESSES = """
import os
ready_read, ready_write = os.pipe()
hold_read, hold_write = os.pipe()
children = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        os.close(ready_read)
        os.close(hold_write)
        block = b'x' * (250 << 20)
        os.write(ready_write, b'1')
        os.close(ready_write)
        os.read(hold_read, 1)
        os._exit(0)
    children.append(pid)
os.close(ready_write)
while os.read(ready_read, 16):
    pass
os.close(hold_write)
statuses = [os.waitpid(pid, 0)[1] for pid in children]
killed = sum(os.WIFSIGNALED(s) and os.WTERMSIG(s) == 9 for s in statuses)
raise OSError(f'{killed} of 6 children killed' if killed else 'six children held 1.5 GB')
"""
MEMORY_TOTAL = cgroup.available() is not None
# System V shared memory: two segments of 250 MB that nobody removes.
SHM_KEYS = (0x4242000, 0x4242001)
SYSV_SHM = f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
ids = [libc.shmget(key, 250 << 20, 0o1600) for key in {SHM_KEYS!r}]
assert min(ids) >= 0, ctypes.get_errno()
"""
# One cell of 1.4 MB: ``a;`` x 700,000 (1.2 GB and 51 s of the grader's, under a lock every
# submission shares, when it was parsed whole).
PARSE_BOMB = "a = 0\n" + "a;" * 700_000


def _points_without_a_from_scratch_rule() -> int:
    from normlab.grader.registry import get_lab

    lab = get_lab("03_layernorm")
    return sum(c.points for c in lab.checks if not any(lab.forbidden.get(n) for n in c.uses))


def hostile_cases(sentinel: str, secret: str, linked: str, solution_path: str) -> dict:
    """The attacks on the trust boundary: each with its exact outcome (and finding)."""
    forward_library = (
        f"{FORWARD_DEF}\n    return {LIBRARY_FORWARD.format(call='torch.nn.functional.layer_norm')}"
    )
    survivor = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{SURVIVOR_MARK}'])\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)"
    )
    find_server = (
        "import os, signal\n"
        "def parent_of(pid):\n"
        "    text = open(f'/proc/{pid}/stat').read()\n"
        "    return int(text[text.rfind(')') + 2:].split()[1])\n"
        "server = parent_of(os.getppid())\n"
        "if server > 1 and b'forkserver' in open(f'/proc/{server}/cmdline', 'rb').read():\n"
        "    try:\n"
        "        os.kill(server, signal.SIGSTOP)\n"
        "    except OSError:\n"
        "        pass"
    )
    forge_reply = (
        "import normlab.grader.isolation.wire as wire\n"
        "real_send = wire.send\n"
        "def send(fd, header, arrays=()):\n"
        "    if 'names' in header:\n"
        "        header = dict(header, cell_errors=[{'cell': 'everywhere', 'error_type': 7}])\n"
        "    real_send(fd, header, arrays)\n"
        "wire.send = send"
    )
    huge_reply = (
        "import os, struct, json\n"
        "import normlab.grader.isolation.wire as wire\n"
        "real_send = wire.send\n"
        "def send(fd, header, arrays=()):\n"
        "    if 'items' not in header:\n"
        "        return real_send(fd, header, arrays)\n"
        "    payload = json.dumps(dict(header, n_arrays=64)).encode()\n"
        "    os.write(fd, struct.pack('<I', len(payload)) + payload + struct.pack('<Q', 257 << 20))\n"
        "wire.send = send"
    )
    return {
        # -- the parent never opens a path in the child's folder by name
        "log_symlink_write": (
            _with_cells(
                after=[
                    "import os, contextlib\nwith contextlib.suppress(OSError):\n"
                    f"    os.symlink({linked!r}, 'output.log')\nos._exit(3)"
                ]
            ),
            0,
            "exited with code 3",
        ),
        "log_symlink_read": (
            _with_cells(
                after=[
                    "import os, contextlib\nfor n in ('output.log', 'log'):\n"
                    f"    with contextlib.suppress(OSError):\n        os.symlink({secret!r}, n)\n"
                    "os._exit(3)"
                ]
            ),
            0,
            "exited with code 3",
        ),
        "fifo_left_behind": (
            _with_cells(
                after=[
                    "import os, contextlib\nfor n in ('output.log', 'fifo'):\n"
                    "    with contextlib.suppress(OSError):\n        os.mkfifo(n)"
                ]
            ),
            FULL,
            "",
        ),
        "deep_folders": (
            _with_cells(
                after=["import os\nfor _ in range(5000):\n    os.mkdir('d')\n    os.chdir('d')"]
            ),
            FULL,
            "",
        ),
        "unreadable_folder": (
            _with_cells(
                after=["import os\nos.makedirs('a/b/c')\nos.chmod('a/b', 0)\nos.chmod('a', 0)"]
            ),
            FULL,
            "",
        ),
        # -- replies are validated field by field; memory per reply is bounded
        "forged_cell_errors": (_with_cells(after=[forge_reply]), 0, "sent garbage"),
        "huge_reply": (_with_cells(after=[huge_reply]), 0, "sent garbage"),
        "large_data_cell": (
            _with_cells(
                after=["DATA = " + repr("0123456789" * 110_000) + "\nassert len(DATA) > 10**6"]
            ),
            FULL,
            "",
        ),
        # -- processes die with their submission; the fork server is not the student's to stop
        "double_fork_survivor": (_with_cells(after=[survivor]), FULL, ""),
        "stops_fork_server": (_with_cells(after=[find_server]), FULL, ""),
        # -- one submission costs only itself: its own PID and IPC namespaces, one memory
        # total, a bounded parse in the grader, a SIGKILL said as what it is
        "kills_classmates": (_with_cells(after=[KILL_CLASSMATES]), FULL, "killed 0 processes"),
        # (six children that together pass the memory total: test_adversarial's
        # test_memory_is_bounded_for_the_submission_as_a_whole, on a budget of its own)
        "sysv_shared_memory": (_with_cells(after=[SYSV_SHM]), FULL, ""),
        # the grader does not parse it: a finding, and no check with a from-scratch rule earns
        "parse_bomb": (
            _with_cells(after=[PARSE_BOMB]),
            _points_without_a_from_scratch_rule(),
            "that the grader cannot analyse",
            "a cell too large or deep",
        ),
        "kills_itself": (
            _with_cells(after=["import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"]),
            0,
            "sent by neither the grader nor a limit",
        ),
        # -- limits
        "fills_tmp": (
            _with_cells(
                after=[
                    "chunk = b'x' * (1 << 20)\n"
                    "for i in range(40):\n"
                    "    with open(f'fill{i // 6}', 'ab') as stream:\n"
                    "        stream.write(chunk)"
                ]
            ),
            FULL,
            # 7 files of 6 MB: each under the file-size limit (8 MB), together over the 32 MB
            # that a submission may write in all (the sandbox's /tmp, or the private folder)
            NO_SPACE,
        ),
        "many_6mb_files": (
            _with_cells(
                after=["for i in range(40):\n    open(f'f{i}', 'wb').write(b'x' * (6 << 20))"]
            ),
            FULL,
            NO_SPACE,
        ),
        # 20,000 small files: the count of files is bounded (Limits.max_files, 2,000 here), not
        # only their size (a kernel may keep small files in no page of the tmpfs at all).
        "many_small_files": (
            _with_cells(after=["for i in range(20_000):\n    open(f's{i}', 'w').write('x' * 100)"]),
            FULL,
            _by_mode(NO_SPACE, SANDBOX_FILE_COUNT),
        ),
        # Empty files take no space but kernel memory: their number is bounded too.
        "many_empty_files": (
            _with_cells(after=["for i in range(10_000):\n    open(f'e{i}', 'w').close()"]),
            FULL,
            _by_mode(NO_SPACE, SANDBOX_FILE_COUNT),
        ),
        # Every place a notebook might write, until each refuses: all together stay within the
        # total (the sandbox: its /tmp only; processes: the private folder, the rest read-only).
        "fills_every_writable_place": (
            _with_cells(after=[FILL_EVERYWHERE]),
            FULL,
            "the disk total held",
        ),
        "writes_a_huge_file": (
            _with_cells(after=["open('big', 'wb').write(b'x' * (16 << 20))"]),
            FULL,
            "OSError",
        ),
        # -- what the sandbox does not show
        "reads_secret": (
            _with_cells(after=[f"stolen = open({secret!r}).read()"]),
            FULL,
            _by_mode("", "FileNotFoundError"),
        ),
        "runs_solution_from_disk": (
            _replace_function(
                FORWARD_DEF,
                "import json\n"
                f"for cell in json.load(open({solution_path!r}))['cells']:\n"
                "    if cell['cell_type'] == 'code' and 'def layernorm_forward' in ''.join(cell['source']):\n"
                "        exec(''.join(cell['source']))",
            ),
            _by_mode(FULL, FULL - FORWARD),
            _by_mode("", "FileNotFoundError"),
            "reads notebooks or solutions/",
        ),
        # -- from scratch: a library norm or autograd under another name costs the points
        "norm_bound_at_module_level": (
            _forward_by("_norm", before=["import torch.nn.functional as F\n_norm = F.layer_norm"]),
            FULL - FORWARD,
            "from scratch",
            "library norm or autograd bound to a name",
        ),
        "norm_as_default_argument": (
            _forward_by(
                "norm",
                signature=FORWARD_DEF[:-2] + ", norm=torch.nn.functional.layer_norm):",
            ),
            FULL - FORWARD,
            "from scratch",
            "as a default argument",
        ),
        "autograd_bound_at_module_level": (
            _backward_by("_grad", before=["_grad = torch.autograd.grad"]),
            FULL - BACKWARD,
            "from scratch",
            "library norm or autograd bound to a name",
        ),
        "aten_by_getattr": (
            _forward_by("getattr(torch.ops.aten, 'layer_norm')"),
            FULL - FORWARD,
            "from scratch",
            "PyTorch internals",
        ),
        "variable_functions_by_getattr": (
            _forward_by("getattr(torch._C._VariableFunctions, 'layer_norm')"),
            FULL - FORWARD,
            "from scratch",
            "PyTorch internals",
        ),
        "group_norm_by_computed_name": (
            _replace_function(
                FORWARD_DEF,
                f"{FORWARD_DEF}\n"
                "    name = 'group' + '_norm'\n"
                "    xt = torch.from_numpy(x.reshape(-1, x.shape[-1], 1))\n"
                "    y = getattr(torch.nn.functional, name)(xt, 1, eps=eps)\n"
                "    return gamma * y.numpy().reshape(x.shape) + beta",
                ["import torch"],
            ),
            FULL - FORWARD,  # PyTorch is hidden from a NumPy lab's graded code
            TORCH_HIDDEN,
            "computed lookup",
        ),
        "instance_norm_on_a_view_by_computed_name": (
            _replace_function(
                FORWARD_DEF,
                f"{FORWARD_DEF}\n"
                "    name = ''.join(['instance', '_', 'norm'])\n"
                "    xt = torch.from_numpy(x.reshape(1, -1, x.shape[-1]))\n"
                "    y = getattr(torch.nn.functional, name)(xt, eps=eps)\n"
                "    return gamma * y.numpy().reshape(x.shape) + beta",
                ["import torch"],
            ),
            FULL - FORWARD,
            TORCH_HIDDEN,
            "computed lookup",
        ),
        "exec_of_encoded_source": (
            _replace_function(FORWARD_DEF, _encoded_exec(forward_library), ["import torch"]),
            FULL - FORWARD,
            TORCH_HIDDEN,
            "dynamic code: exec",
        ),
        "forward_mode_autodiff": (
            _backward_by(
                "backward_by_jvp",
                before=[
                    "import torch.func\n"
                    "def backward_by_jvp(y, inputs, dy):\n"
                    "    return torch.func.jvp(lambda t: t, (inputs[0],), (dy,))[1], inputs[1] * 0"
                ],
            ),
            FULL - BACKWARD,
            "from scratch",
            "PyTorch internals: torch.func",
        ),
        # -- a NumPy lab's graded code cannot reach PyTorch under the sandbox, by any route;
        # without it the same stand-ins stop an honest notebook's use (one grade in both modes),
        # and what a hostile one does around them is a finding for the instructor
        "torch_by_importlib": (
            _forward_through("importlib.import_module('to' + 'rch')", "import importlib"),
            FULL - FORWARD,
            TORCH_HIDDEN,
            "dynamic import: importlib",
        ),
        "torch_by_dunder_import": (
            _forward_through("__import__(''.join(map(chr, [116, 111, 114, 99, 104])))"),
            FULL - FORWARD,
            TORCH_HIDDEN,
            "dynamic code: __import__",
        ),
        "torch_from_sys_modules": (
            _forward_through("sys.modules['to' + 'rch']", "import sys"),
            FULL - FORWARD,
            TORCH_HIDDEN,
            "module table: sys.modules",
        ),
        # Removes the stand-in and imports again: reaches the sandbox's empty folder.
        "torch_unhidden_by_removing_the_stand_in": (
            _forward_through("importlib.import_module('to' + 'rch')", UNHIDE),
            FULL - FORWARD,
            "raised ImportError: PyTorch is not available",
            "dynamic import: importlib",
        ),
        "patches_the_trap_and_the_reply": (
            _replace_function(
                FORWARD_DEF,
                forward_library,
                [
                    "import torch\nimport normlab.grader.trap as trap\n"
                    "import contextlib\n"
                    "trap.forbidden_calls = lambda *a, **k: contextlib.nullcontext()"
                ],
            ),
            FULL - FORWARD,
            "from scratch",
        ),
    }
