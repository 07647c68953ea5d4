"""The parent's side of the boundary: run one submission in a child process and call into it.

Two modes (``docs/grading.md`` states what each enforces and what it does not):

* **bubblewrap** (the default where ``bwrap`` runs): a new interpreter (or, for a class graded
  as root, a child of a fork server that runs in such a sandbox: ``fork_servers``, each child in
  mount, PID, IPC and network namespaces of its own) in a sandbox that shows
  only the interpreter, its libraries and the course package, read-only; the working folder is
  a size-limited private tmpfs, the only writable place (``/tmp`` is read-only); no network; its own PID namespace (every process
  dies with it); never root (the child becomes ``nobody`` when the grader is root).
* **processes**: a child forked from the fork server (or a fresh interpreter) in a private folder,
  with the same limits; as root it runs as ``nobody``, or the grader refuses unless told
  ``--allow-root``; every process it starts is killed with it (``processes``).

In both, the parent never opens a path in a folder the child can write by name (its log is an
anonymous file handed over as a descriptor), validates every reply field by type (``wire``),
and the submission's time budget starts when it has a process: waiting for the fork server is
the grader's time, not the student's.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from normlab.grader import attribution, core
from normlab.grader.isolation import (
    cgroup,
    clock,
    files,
    forkserver,
    hidden,
    processes,
    wire,
    worker,
    workspace,
)
from normlab.grader.isolation.limits import DEFAULT, Limits

NOBODY = 65534
# Inside the sandbox: the working folder, a private size-limited tmpfs, the only writable place.
# Not /tmp: a course checked out under /tmp is bound back inside the sandbox's /tmp, and the
# folder that the child (as root) remounts with a bound on its number of files must hide
# nothing that execution needs. /tmp is read-only in the sandbox.
SANDBOX_HOME = "/home/notebook"

# Not limits of a submission (``Limits``) but waits and margins of the grader's own, each bounded
# far above what it needs so that only a hung or broken system ever reaches it:
#: a start-up probe that runs this Python and imports NumPy or PyTorch, once per run
PROBE_TIMEOUT = 120.0
#: a probe that starts an interpreter under bubblewrap and imports the course package alone
QUICK_PROBE_TIMEOUT = 60.0
#: waiting for a killed process to be reaped: gone in milliseconds, unless stuck in the kernel
REAP_WAIT = 5.0
#: waiting for the exit status of a child whose pipe has closed: it is exiting; one still
#: running after this has stopped answering
EXIT_STATUS_WAIT = 1.0
#: a call's alarm in the child rings this much before the grader's deadline, so that a slow
#: call is reported by the child as a timeout (its process kept) rather than killed ...
CALL_ALARM_MARGIN = 1.0
#: ... but the alarm never allows less than this
MIN_CALL_ALARM = 0.5
#: a restart with less of the budget left could not even run the notebook's cells
MIN_RESTART_BUDGET = 1.0
#: the sandbox's own /tmp: read-only once mounted, so only the mount needs a size
SANDBOX_TMP_BYTES = 1 << 20
#: each hidden PyTorch folder in the sandbox: a read-only tmpfs holding one small file
HIDDEN_FOLDER_BYTES = 65536


class IsolationError(Exception):
    """The requested isolation cannot be had here (a usage error for the command)."""


class MachineBusy(core.ProcessTimedOut):
    """An exchange reached its wall-time backstop before the submission's own time reached its
    budget (``clock``): the machine's load, not the student's code."""


@dataclasses.dataclass(frozen=True)
class Isolation:
    """How submissions run: under bubblewrap or as plain processes, and as which user."""

    sandbox: bool
    run_as: tuple[int, int] | None  # (uid, gid) to become, when the grader is root
    description: str
    #: processes mode: each child gets a private size-limited folder, every other mount
    #: read-only (``workspace``); False where this machine cannot give it one
    private_folder: bool = False
    #: processes mode: each child gets PID and IPC namespaces of its own (and its own /proc);
    #: False where this machine cannot give them (the sandbox always has them)
    namespaces: bool = False
    #: both modes: each submission has one memory total for all its processes and files (a
    #: cgroup of ``memory_mb + tmp_mb``); False where no cgroup can be made here (``cgroup``)
    memory_group: bool = False
    #: both modes: each submission's processes share one CPU share and its time is counted on
    #: its CPU group (``cgroup``, ``clock``); False where no ``cpu`` cgroup can be made here
    cpu_group: bool = False


@functools.cache
def child_paths() -> tuple[str, ...]:
    """What the child's interpreter needs on disk: its prefixes and its own ``sys.path``
    (as ``python -I`` sees it: never the current folder), and the course package."""
    paths = set()
    for entry in _child_entries():
        if entry and os.path.exists(entry):
            for path in (os.path.realpath(entry), os.path.abspath(entry)):
                paths.add(path if os.path.isdir(path) else os.path.dirname(path))
    # Outermost folders only: a folder inside one already shown comes with it.
    kept: list[str] = []
    for path in sorted(paths):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return tuple(kept)


@functools.cache
def _child_entries() -> tuple[str, ...]:
    """The child's interpreter's prefixes, its executable, the folder of the course package it
    imports and its ``sys.path``, as ``python -I`` reports them."""
    probe = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            "import sys, json, os, normlab; "
            "print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.executable,"
            " os.path.dirname(os.path.dirname(normlab.__file__))] + sys.path))",
        ],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT,
        cwd="/",
    )
    return tuple(json.loads(probe.stdout))


HIDDEN_PROBE = """
import csv, importlib.metadata, json, os, sys
from pathlib import PurePosixPath
hidden, modules, names = set(), {modules!r}, {distributions!r}

def tops(dist):
    # the first part of each installed file's path: dist.files, without a path object for
    # each of PyTorch's 15,000 files (the first part of a plain relative path is its text up
    # to the first slash; any other path is read as dist.files reads it)
    record = dist.read_text("RECORD")
    if record is None:
        return {{file.parts[0] for file in dist.files or [] if file.parts}}
    found = set()
    for row in csv.reader(record.splitlines()):
        if row:
            first = row[0].split("/", 1)[0]
            parts = (first,) if first not in ("", ".") else PurePosixPath(row[0]).parts
            found.update(parts[:1])
    return found

for entry in sys.path:
    if not os.path.isdir(entry):
        continue
    for dist in (d for n in names for d in importlib.metadata.distributions(name=n, path=[entry])):
        if (dist.metadata["Name"] or "").lower() in names:
            for top in tops(dist):
                if top != "..":
                    hidden.add(os.path.join(entry, top))
    for name in modules:
        hidden.add(os.path.join(entry, name))
print(json.dumps(sorted(hidden)))
"""


@functools.cache
def memo_folders() -> tuple[str, ...]:
    """The oracle's memo (``grader/oracle_memo``, package data beside the grader), under each
    name it has: the oracle's answers to the checks' questions, with the questions. A notebook
    that could read it could answer from it (its function calling the grader's own oracle, which
    the memo answers without PyTorch, or looking its input up), so in every lab and both modes
    it is an empty read-only folder in the child's filesystem, as PyTorch's folders are in a
    NumPy lab. The grader reads it in its own process, where nothing of the notebook's runs.
    Its own copy, and any the child's interpreter could import (the course package it finds,
    every ``normlab`` on its ``sys.path``): the grader may run another copy of the course than
    the one the child imports."""
    from normlab.grader import memo

    relative = os.path.join("normlab", "grader", memo.MEMO_DIR.name)
    candidates = {str(memo.MEMO_DIR)}
    candidates |= {os.path.join(entry, relative) for entry in _child_entries() if entry}
    found = set()
    for folder in candidates:
        if os.path.isdir(folder):
            found |= {os.path.abspath(folder), os.path.realpath(folder)}
    return tuple(sorted(found))


@functools.cache
def hidden_paths() -> tuple[str, ...]:
    """PyTorch's folders as the child's interpreter would find them (every ``sys.path`` entry,
    every installation of the distribution, its packages and its metadata), each under every
    name it has inside the sandbox; also any ``site-packages``/``dist-packages`` copy under
    ``/usr`` that a notebook could add to its ``sys.path`` itself."""
    code = HIDDEN_PROBE.format(
        modules=hidden.HIDDEN_MODULES, distributions=hidden.HIDDEN_DISTRIBUTIONS
    )
    probe = subprocess.run(
        [sys.executable, "-I", "-c", code],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT,
        cwd="/",
    )
    candidates = set(json.loads(probe.stdout))
    for pattern in ("/usr/lib/python3*/*-packages", "/usr/local/lib/python3*/*-packages"):
        for folder in glob.glob(pattern):
            candidates |= {os.path.join(folder, name) for name in hidden.HIDDEN_MODULES}
    found = set()
    for path in candidates:
        if os.path.isdir(path):  # a folder, not a link to one: hidden under both its names
            found |= {os.path.abspath(path), os.path.realpath(path)}
    return tuple(sorted(found))


HIDDEN_INIT = (
    '"""Stands in for a package that normlab grade hides from graded code in this lab."""\n'
    "raise ImportError(\n"
    '    "PyTorch is not available while this NumPy lab is graded: build it with NumPy"\n'
    ")\n"
)


SYSTEM = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]
SYSTEM_FILES = [
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/fonts",
    "/etc/ssl/certs",
]


def bwrap_command(limits: Limits = DEFAULT, hide_init: str | None = None) -> list[str]:
    """``bwrap`` arguments: an empty root with only what execution needs, read-only.

    Shown: the system's programs and libraries (``/usr`` and friends, a few files of ``/etc``),
    the interpreter and its ``sys.path``, the course package. Not shown: the home folder,
    ``solutions/``, other submissions, the extra-checks file, the gradebook: they are simply
    not there. The working folder ``SANDBOX_HOME`` is a private tmpfs of ``limits.tmp_mb``, the
    only writable place: ``/tmp``, the sandbox's root and ``/dev`` are remounted read-only (as a non-root
    grading user they would otherwise be the child's own, unbounded tmpfs).

    ``hide_init``: hide PyTorch (a NumPy lab). Each of its folders becomes an empty read-only
    tmpfs holding only this file (the grader's, bound read-only) as its ``__init__.py``, which
    raises ImportError: no import path reaches the library.
    """
    command = ["bwrap"]
    for path in SYSTEM:
        if os.path.islink(path):
            command += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            command += ["--ro-bind", path, path]
    for path in SYSTEM_FILES:
        command += ["--ro-bind-try", path, path]
    shown = [
        path
        for path in child_paths()
        if not any(path == s or path.startswith(s + "/") for s in SYSTEM if os.path.isdir(s))
    ]
    # Folders on the way to what is shown (e.g. /root for an interpreter installed there) are
    # empty and passable: nothing else of theirs is in the sandbox.
    ancestors = sorted(
        {os.path.dirname(p[: i + 1]) for p in shown for i, c in enumerate(p) if c == "/"}
        - {"", "/"}
        | {os.path.dirname(p) for p in shown} - {"/"},
        key=lambda p: p.count("/"),
    )
    inside_home = [p for p in shown if p == SANDBOX_HOME or p.startswith(SANDBOX_HOME + "/")]
    if inside_home:
        raise IsolationError(
            f"the sandbox's working folder {SANDBOX_HOME} would hide {inside_home[0]}, which the "
            "notebook's interpreter needs: install the course elsewhere"
        )
    command += ["--dev", "/dev", "--proc", "/proc"]
    command += ["--perms", "1777", "--size", str(SANDBOX_TMP_BYTES), "--tmpfs", "/tmp"]
    command += ["--perms", "1777", "--size", str(limits.tmp_mb << 20), "--tmpfs", SANDBOX_HOME]
    for folder in ancestors:
        if folder not in (SANDBOX_HOME, "/tmp"):
            command += ["--perms", "0755", "--dir", folder]
    for path in shown:  # after /tmp: a course checked out under /tmp is bound back on top
        command += ["--ro-bind", path, path]
    command += ["--remount-ro", "/tmp"]
    inside = [*shown, *(s for s in SYSTEM if os.path.isdir(s) and not os.path.islink(s))]
    for path in memo_folders():  # in every lab: an empty read-only folder, where it is shown
        if not any(path == s or path.startswith(s.rstrip("/") + "/") for s in inside):
            continue
        command += ["--perms", "0555", "--size", str(HIDDEN_FOLDER_BYTES), "--tmpfs", path]
        command += ["--remount-ro", path]
    if hide_init is not None:
        for path in hidden_paths():
            command += ["--perms", "0555", "--size", str(HIDDEN_FOLDER_BYTES), "--tmpfs", path]
            command += ["--ro-bind", hide_init, os.path.join(path, "__init__.py")]
            command += ["--remount-ro", path]
    command += ["--remount-ro", "/", "--remount-ro", "/dev"]
    command += ["--chdir", SANDBOX_HOME]
    command += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    command += ["--new-session", "--die-with-parent", "--"]
    return command


def fork_server_sandbox(limits: Limits = DEFAULT, hide_init: str | None = None) -> list[str]:
    """``bwrap`` arguments for the sandbox's fork server: ``bwrap_command``'s sandbox (the same
    files shown and hidden, ``hide_init`` for a NumPy lab's server), in the grader's PID
    namespace, so that the server reports its children by the PIDs the grader kills and
    accounts them by. Each child then enters PID, IPC, network and mount namespaces of its own,
    with its own working folder and ``/proc`` (``ChildSubmission._limits_for_child``), before
    any learner code runs: no child sees the server's processes, another child's or their files.
    """
    command = bwrap_command(limits, hide_init)
    command.remove("--unshare-pid")
    return command


@functools.cache
def bwrap_available() -> bool:
    """True when bubblewrap is installed and can create its namespaces here."""
    if shutil.which("bwrap") is None:
        return False
    try:
        probe = subprocess.run(
            [*bwrap_command(), sys.executable, "-I", "-c", "import normlab"],
            capture_output=True,
            timeout=QUICK_PROBE_TIMEOUT,
            cwd="/",
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return False
    return probe.returncode == 0


NOBODY_PROBE = """
import os, sys
os.setgroups([])
os.setgid({gid})
os.setuid({uid})
for entry in sys.path:
    try:
        os.listdir(entry)  # a folder this user cannot read raises PermissionError: exit 1
    except (FileNotFoundError, NotADirectoryError):
        pass  # not there, or a zip file: the same for every user
import {imports}
"""


def nobody_probe(ids: tuple[int, int], python: str = sys.executable) -> list[str]:
    """The command that shows whether a child run as ``ids`` works: ``python`` starts as the
    grader's user and drops to ``ids`` inside, as the worker does, then lists every folder of
    its ``sys.path`` and imports what the child imports after the drop
    (``worker.PROBE_IMPORTS``). Starting as ``ids`` instead would try another installation:
    an interpreter outside a 0700 /root whose standard library is inside it finds the
    system's, so the probe ran where the child then failed importing ``dataclasses``."""
    code = NOBODY_PROBE.format(uid=ids[0], gid=ids[1], imports=", ".join(worker.PROBE_IMPORTS))
    return [python, "-I", "-c", code]


@functools.cache
def unprivileged_ids(sandbox: bool, python: str = sys.executable) -> tuple[int, int] | None:
    """As root: (uid, gid) of ``nobody`` when that user can run ``python``'s child (tried once,
    in the mode asked for), else None. Under bubblewrap the interpreter is bound into an empty
    root, so an interpreter installed under /root works too."""
    if os.geteuid() != 0:
        return None
    try:
        import pwd

        entry = pwd.getpwnam("nobody")
        ids = entry.pw_uid, entry.pw_gid
    except (ImportError, KeyError):
        ids = NOBODY, NOBODY
    command = nobody_probe(ids, python)
    if sandbox:  # bwrap starts as root; the drop happens inside, as in the worker
        command = [*bwrap_command(), *command]
    try:
        probe = subprocess.run(
            command,
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            cwd="/",
            env=child_environment("/"),
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return ids if probe.returncode == 0 else None


#: the probes started by ``start_probes``, if any (one set per run)
_probing: list[threading.Thread] = []


def start_probes(sandbox: bool | None) -> None:
    """Start the probes ``choose_isolation``, ``hidden_paths`` and ``memo_folders`` will ask,
    each in a thread of its own; return at once.

    Each probe is a process of its own (an interpreter, ``bwrap``) that the grader only waits
    for, and run one after the other they were the longest part of grading one notebook alone
    once PyTorch was no longer imported (0.6-1.2 s of wall time on a busy 2-core machine). Here
    they run side by side, and beside the grader's own start-up (its imports, the notebook's
    parsing). Their answers are cached (``functools.cache``) and used by ``choose_isolation``
    exactly as without this: it waits for them (``wait_for_probes``) and asks again; a probe
    that failed here (an exception) runs again there and fails the same way. ``sandbox``: as
    ``choose_isolation``'s (a run that asks for no sandbox does not probe bubblewrap).
    """
    import pwd  # noqa: F401 -- imported here, before the threads that use it

    # the run's likely mode (bubblewrap where it is installed): the other's probes run later,
    # in choose_isolation, if it is the one
    sandboxed = sandbox if sandbox is not None else shutil.which("bwrap") is not None
    # memo_folders asks the child's interpreter for its paths (one process), which a child of
    # either mode needs before it starts
    probes = [hidden_paths, memo_folders] + ([bwrap_available] if sandboxed else [])
    if not sandboxed and not workspace.started:
        workspace.start_probe()
    if os.geteuid() == 0:
        probes.append(functools.partial(unprivileged_ids, sandboxed))
    for probe in probes:
        # bubblewrap's probes and memo_folders need the child's paths: one computes them while
        # the others wait
        first = child_paths if sandboxed and probe is not hidden_paths else None
        thread = threading.Thread(
            target=_quietly, args=(probe, first), name="normlab-probe", daemon=True
        )
        thread.start()
        _probing.append(thread)


_first_lock = threading.Lock()


def _quietly(probe, first=None) -> None:
    try:
        if first is not None:
            with _first_lock:
                first()
        probe()
    except Exception:  # noqa: BLE001 -- asked again by choose_isolation, which raises it there
        pass


def wait_for_probes() -> None:
    """Return once the probes ``start_probes`` started are done (at once without any)."""
    while _probing or workspace.started:
        (_probing or workspace.started).pop().join()


def choose_isolation(sandbox: bool | None, allow_root: bool) -> Isolation:
    """The isolation for this run. ``sandbox=None``: bubblewrap where it runs, else processes.

    Raises IsolationError for ``sandbox=True`` without bubblewrap, and as root when learner
    code could only run as root and ``allow_root`` is not given.
    """
    wait_for_probes()
    available = bwrap_available() if sandbox is not False else False
    if sandbox and not available:
        raise IsolationError(
            "--sandbox needs bubblewrap (bwrap), installed and allowed to run here"
        )
    use_sandbox = available if sandbox is None else sandbox
    if use_sandbox:
        mode = "bubblewrap sandbox (PyTorch hidden from NumPy labs)"
        private = namespaces = False
    else:
        private = workspace.available()
        namespaces = private and workspace.namespaces_available()
        mode = "separate processes (no sandbox), " + (
            "a private folder with a total, the rest read-only, PyTorch hidden from NumPy labs"
            if private
            else "NO total on disk (no mount namespace here)"
        )
        mode += (
            ", own PID and IPC namespaces"
            if namespaces
            else ", NO PID or IPC namespace (a notebook can signal its user's processes)"
        )
    where = cgroup.available()
    memory_group = where is not None
    mode += (
        f", one memory total per submission (cgroup v{where[1]})"
        if memory_group
        else ", memory bounded per process only (no cgroup here)"
    )
    cpu_group = cgroup.cpu_available() is not None
    mode += (
        f", one CPU share per submission (cgroup v{cgroup.cpu_available()[0]})"
        if cpu_group
        else ", NO CPU share per submission (no cpu cgroup here: its processes in other "
        "sessions compete as separate ones; its time is its process's own count)"
    )
    kept = private, namespaces, memory_group, cpu_group
    if os.geteuid() != 0:
        return Isolation(
            use_sandbox, None, f"{mode}, as the grading user (uid {os.getuid()})", *kept
        )
    ids = unprivileged_ids(use_sandbox)
    if ids is not None:
        return Isolation(use_sandbox, ids, f"{mode}, as uid {ids[0]} (nobody)", *kept)
    if not allow_root:
        raise IsolationError(
            "the grader runs as root and the user nobody cannot run this Python here"
            + ("" if use_sandbox else " outside a sandbox (bubblewrap's sandbox makes it possible)")
            + "; run as an unprivileged user, or pass --allow-root to run learner code as root"
        )
    return Isolation(use_sandbox, None, f"{mode}, AS ROOT (--allow-root)", *kept)


def child_environment(home: str) -> dict:
    """A small, predictable environment: nothing of the grader's leaks into the child."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": os.path.join(home, ".matplotlib"),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "NUMBA_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "NORMLAB_GRADING": "1",
        "LANG": "C.UTF-8",
        **{k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_CORETYPE")},
    }


def fork_server_environment(home: str) -> dict:
    """The fork server's environment: as a child's, so that imports behave the same."""
    return child_environment(home)


def write_hidden_init(folder: str) -> str:
    """``HIDDEN_INIT`` written as a new file in ``folder`` (a private folder of the grader's),
    for ``bwrap_command`` to bind read-only into a NumPy lab's sandbox; its path."""
    path = os.path.join(folder, "hidden_init.py")
    with open(path, "x") as stream:
        stream.write(HIDDEN_INIT)
    os.chmod(path, 0o644)  # read through its bind mount, never by its path
    return path


def fork_servers(
    isolation: Isolation,
    limits: Limits,
    home: str,
    reaper: processes.Reaper,
    preload: dict[bool, tuple[str, ...]] | None = None,
) -> forkserver.ForkServers | None:
    """The fork servers of a run that grades several notebooks, or None where its submissions
    start as fresh interpreters. ``home``: a private folder of the grader's that lasts as long
    as the servers (the processes mode's servers' working folder; the sandbox's stand-in for
    PyTorch's ``__init__.py``, bound read-only into the NumPy labs' server's sandbox).

    Under the sandbox, only where the grader is root: the server's children make their mount,
    PID and network namespaces with the capabilities that bubblewrap keeps for root; a grading
    user's sandbox keeps none, and its submissions start as fresh sandboxes of their own.
    ``preload``: kind of lab (``Lab.torch``) -> what its server imports for the run's labs
    (``Lab.preload``)."""
    if not isolation.sandbox:
        environment = fork_server_environment(home)
        return forkserver.ForkServers(environment, reaper, limits.fork_server_wait, preload=preload)
    if os.geteuid() != 0:
        return None
    hide_init = write_hidden_init(home)
    return forkserver.ForkServers(
        child_environment(SANDBOX_HOME),
        reaper,
        limits.fork_server_wait,
        sandbox=lambda torch: fork_server_sandbox(limits, None if torch else hide_init),
        preload=preload,
    )


class ChildSubmission(core.Submission):
    """A notebook's code cells running in a child process, restarted if it dies.

    Args:
        cells: the notebook's code cells, in order.
        limits: every limit (``Limits``).
        isolation: sandbox or processes, and the user to run as.
        fork_server: a ``forkserver.ForkServer`` (processes mode only), the ``ForkServers`` of
            a run (the one for this kind of lab is used), or None.
        reaper: the grader's ``processes.Reaper`` (kills orphans adopted by the grader).
        torch: whether the lab's graded code may use PyTorch (``Lab.torch``, and its default);
            when not, the sandbox hides it (processes mode cannot: see ``docs/grading.md``).
        call_timeouts: learner name -> wall seconds for one call, where the lab allows more
            than ``limits.call_timeout`` (``Lab.call_timeouts``).
    """

    def __init__(
        self,
        cells: list[str],
        limits: Limits,
        isolation: Isolation,
        fork_server=None,
        reaper: processes.Reaper | None = None,
        torch: bool = core.Lab.torch,
        call_timeouts: dict[str, float] | None = None,
        environment: dict[str, str] | None = None,
    ):
        self.cells = cells
        self.lab_environment = dict(environment or {})
        self.call_timeouts = dict(call_timeouts or {})
        # A NumPy lab's graded code meets stand-ins for PyTorch (``hidden``) in both modes, so
        # that an honest notebook gets one grade whatever the mode; only the sandbox's empty
        # folders make it a boundary (``hide_init``).
        self.hide_torch = not torch
        self.limits = limits
        self.isolation = isolation
        if isinstance(fork_server, forkserver.ForkServers):
            fork_server = fork_server.for_lab(torch)
        # Under the sandbox, only a server that runs in one (``fork_server_sandbox``) may start
        # a submission's process: a processes-mode server's children see the grader's files.
        sandboxed_server = getattr(fork_server, "sandbox", None) is not None
        self.fork_server = fork_server if sandboxed_server == isolation.sandbox else None
        self.reaper = reaper or processes.Reaper()
        self.deadline: float | None = None  # starts when the submission first has a process
        self.process = None
        self.request_fd = self.reply_fd = -1
        self.names: set[str] = set()
        self.cell_errors: list[wire.CellError] = []
        self.restarts = 0
        self.dead_reason = ""
        self.timed_out: set[str] = set()  # functions that ran out of time: not called again
        #: functions that ran out of time in a notebook cell, with that cell: not run again,
        #: neither by the cells after it nor by the checks (a hang costs one cell's time)
        self.hung: dict[str, int] = {}
        self._scanned: dict = {}
        #: its process died of a SIGKILL that neither the grader nor a limit of the submission
        #: sent: the result is not the student's doing, and is not cached
        self.killed_from_outside = False
        #: a call or cell reached its wall-time backstop before its own time reached its
        #: budget (``clock``): the machine was too busy; not the student's, and not cached
        self.machine_busy = False
        #: the submission's own seconds used so far (``clock.Span.used`` of each exchange)
        self.spent = 0.0
        self.last_span: clock.Span | None = None  # the last exchange's clock
        #: a failure of ``start_early``, raised by the first request (as it would have met it)
        self.early_failure: core.ProcessFailed | None = None
        #: the submission's cgroups: its memory total and its CPU share, where each can be had
        self.memory_group = None
        if isolation.memory_group or isolation.cpu_group:
            self.memory_group = cgroup.Cgroup(
                (limits.memory_mb + limits.tmp_mb) << 20 if isolation.memory_group else None,
                limits.cpus if isolation.cpu_group else None,
            )
        # The parent's private folder: the log (a file without a name) and, for the
        # processes mode, the child's working folder ``work`` inside it.
        self.base = tempfile.mkdtemp(prefix="normlab-grade-")
        self.log_fd = files.anonymous_file(self.base)
        self.workdir = os.path.join(self.base, "work")
        self.hide_init = None
        if self.hide_torch and isolation.sandbox:  # the grader's own file, bound read-only
            self.hide_init = write_hidden_init(self.base)
        if not isolation.sandbox:
            os.mkdir(self.workdir, 0o700)
            if isolation.run_as:
                os.chmod(self.base, 0o711)  # nobody may pass through to ``work``, not list
                os.chown(self.workdir, *isolation.run_as)

    # ------------------------------------------------------------------ lifecycle

    def remaining(self) -> float:
        """What is left of the submission's budget in its own time (``clock``): ``timeout``
        less what its exchanges used, and no more than its wall-time backstop (``deadline``,
        ``wall_backstop`` times ``timeout`` from its first process) still allows."""
        left = self.limits.timeout - self.spent
        if self.deadline is None:
            return left
        return min(left, (self.deadline - time.monotonic()) / self.limits.wall_backstop)

    def _limits_for_child(self, forked: bool) -> dict:
        """The child's limits; ``forked``: it is a child of the fork server."""
        limits = {
            "memory_mb": self.limits.memory_mb,
            "cpu_seconds": self.limits.cpu_seconds(self.remaining()),
            "max_file_bytes": self.limits.max_file_bytes,
            "max_processes": self.limits.max_processes,
            "hide_torch": self.hide_torch,
            "wall_backstop": self.limits.wall_backstop,
        }
        private = {"bytes": self.limits.tmp_mb << 20, "files": self.limits.max_files}
        if self.isolation.private_folder and not self.isolation.sandbox:
            limits["private_folder"] = dict(private, path=self.workdir, namespace=True)
            hide = list(memo_folders())  # in every lab, as under the sandbox
            if self.hide_torch:  # in its own mount namespace, as under the sandbox
                hide += hidden_paths()
                limits["private_folder"].update(hide_init=HIDDEN_INIT)
            limits["private_folder"].update(hide=hide)
            limits["pid_namespace"] = self.isolation.namespaces
        elif self.isolation.sandbox and forked:
            # A child of the sandbox's fork server shares that sandbox with the server and with
            # the other children: before anything it makes its own mount namespace with its own
            # working folder over the server's (a tmpfs with a total and a count of files), and
            # PID, IPC and network namespaces of its own, as a sandbox of its own would have.
            limits["private_folder"] = dict(private, path=SANDBOX_HOME, namespace=True, hide=[])
            limits["pid_namespace"] = limits["net_namespace"] = True
        elif self.isolation.sandbox and os.geteuid() == 0:
            # bubblewrap's /tmp has a size but no bound on its number of files: as root, the
            # child mounts one with both over it, in the sandbox's namespace, before anything.
            limits["private_folder"] = dict(private, path=SANDBOX_HOME, namespace=False)
        return limits

    def _spawn(self, request_read: int, reply_write: int, fork: bool) -> bool:
        """Start the child on these pipes; False when the fork server failed (the caller then
        tries again with new pipes: a server that was slow, not dead, may still hand these to
        a child, which must find nobody listening)."""
        fork = fork and self.fork_server is not None
        limits = self._limits_for_child(fork)
        home = SANDBOX_HOME if self.isolation.sandbox else self.workdir
        environment = child_environment(home)
        # the lab's own variables (Triton's interpreter and cache), set here for the child
        environment.update({k: v.format(home=home) for k, v in self.lab_environment.items()})
        if self.isolation.run_as:
            environment["NORMLAB_RUN_AS"] = "{}:{}".format(*self.isolation.run_as)
        if fork:
            try:
                self.process = self.fork_server.spawn(
                    home,
                    environment,
                    (request_read, reply_write, self.log_fd),
                    limits,
                    self.memory_group.paths if self.memory_group else None,
                )
                return True
            except OSError:
                self.process = None  # no fork server: start an interpreter the slow way
                return False
        command = [sys.executable, "-I", "-m", "normlab.grader.isolation.worker"]
        command += [str(request_read), str(reply_write), json.dumps(limits)]
        if self.isolation.sandbox:
            command = bwrap_command(self.limits, self.hide_init) + command
            environment["NORMLAB_NO_NANNY"] = "1"
        with self.reaper.lock:  # tracked before the reaper can mistake it for an orphan
            self.process = subprocess.Popen(
                command,
                pass_fds=(request_read, reply_write),
                stdin=subprocess.DEVNULL,
                stdout=self.log_fd,
                stderr=subprocess.STDOUT,
                cwd="/" if self.isolation.sandbox else self.workdir,
                env=environment,
                start_new_session=True,  # its own session: we kill everything in it
                preexec_fn=(
                    functools.partial(cgroup.join_or_exit, self.memory_group.paths)
                    if self.memory_group
                    else None
                ),
            )
            self.reaper.track(self.process.pid, session=self.process.pid)
        return True

    def start(self) -> None:
        """Start the child and run the notebook's cells in it."""
        started = time.monotonic()
        for fork in (True, False):
            request_read, request_write = os.pipe()
            reply_read, reply_write = os.pipe()
            try:
                spawned = self._spawn(request_read, reply_write, fork)
            finally:
                os.close(request_read)
                os.close(reply_write)
            if spawned:
                break
            os.close(request_write)
            os.close(reply_read)
        self.request_fd, self.reply_fd = request_write, reply_read
        os.set_blocking(self.request_fd, False)
        # The child imports its libraries before any learner code runs, then says it is ready:
        # that start-up (and a wait for the fork server) is the grader's time, not the student's.
        try:
            ready, extra = wire.recv(
                self._reader(time.monotonic() + self.limits.startup_wait), self.limits
            )
        except (TimeoutError, EOFError, wire.ProtocolError):
            reason = self._death_reason()
            self.close()
            raise core.ProcessFailed(f"the grader could not start a process ({reason})") from None
        if ready.get("ready") is not True or extra:
            self.close()
            raise core.ProcessFailed("the grader could not start a process (no ready signal)")
        if self.deadline is None:
            self.deadline = time.monotonic() + self.limits.timeout * self.limits.wall_backstop
        else:  # a restart: the time spent getting a process is not the submission's
            self.deadline += time.monotonic() - started
        header, arrays = wire.load_request(
            self.cells, self.limits.cell_timeout(self.remaining()), self.hung
        )
        reply, results = self._exchange(
            header, arrays, self.remaining(), "running the notebook's cells"
        )
        try:
            self.names, self.cell_errors = wire.parse_load_reply(reply, results, len(self.cells))
            self.hung.update(wire.parse_hung(reply, self.names, len(self.cells)))
            # A cell stopped at its wall-time backstop before its own time was up: the machine's
            # doing (the child's claim only makes this result uncached; it earns nothing).
            if any(error.error_type == worker.BUSY for error in self.cell_errors):
                self.machine_busy = True
        except wire.ProtocolError as error:
            self.close()
            raise core.ProcessFailed(
                f"the notebook's process sent garbage while running its cells: {error}"
            ) from None

    def close(self) -> None:
        """Kill the child and every process it started (its session, then adopted orphans)."""
        process, self.process = self.process, None
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if hasattr(process, "end"):
                process.end()  # forked: the fork server kills the session and its strays
            else:
                processes.kill_session(process.pid)
            if self.memory_group is not None:
                self.memory_group.kill_all()  # whatever session or namespace they are in
            try:
                process.wait(timeout=REAP_WAIT)
            except subprocess.TimeoutExpired:
                pass
            self.reaper.forget(process.pid, session=process.pid)
        for fd in (self.request_fd, self.reply_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.request_fd = self.reply_fd = -1

    def cleanup(self) -> None:
        self.close()
        if self.memory_group is not None:
            self.memory_group.remove()
            self.memory_group = None
        if self.log_fd >= 0:
            os.close(self.log_fd)
            self.log_fd = -1
        files.remove_tree(self.base)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()

    def output_tail(self, limit: int | None = None) -> str:
        """The end of what the notebook printed (for error messages only; never parsed): the
        last ``limit`` bytes, by default ``Limits.output_tail_bytes``."""
        limit = self.limits.output_tail_bytes if limit is None else limit
        return files.tail(self.log_fd, limit) if self.log_fd >= 0 else ""

    # ------------------------------------------------------------------ the wire

    def _death_reason(self) -> str:
        if self.process is None:
            return "the notebook's process is not running"
        try:
            code = self.process.wait(timeout=EXIT_STATUS_WAIT)
        except subprocess.TimeoutExpired:
            return "the notebook's process stopped answering"
        if self.isolation.sandbox and code > 128:
            code = -(code - 128)  # bwrap reports its child's fatal signal N as exit code 128 + N
        if code == workspace.EXIT_NO_WORKSPACE:
            return "the notebook's process could not set up its private folder"
        if code == cgroup.EXIT_NO_CGROUP:
            return "the notebook's process could not join its memory group"
        if code == -signal.SIGKILL:
            # The grader kills a process only after it has stopped waiting for it: a SIGKILL
            # seen here came from the submission's memory total, or from outside.
            if self.memory_group is not None and self.memory_group.new_oom_kill():
                total = self.limits.memory_mb + self.limits.tmp_mb
                return (
                    "the notebook's process was killed by SIGKILL (the submission's memory "
                    f"limit: {total} MB for all its processes and files together)"
                )
            self.killed_from_outside = True
            return (
                "the notebook's process was killed by SIGKILL, sent by neither the grader nor a "
                "limit of the submission (by the notebook itself, or from outside); this result "
                "is not cached"
            )
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            why = {
                "SIGKILL": " (memory or CPU limit, or killed)",
                "SIGXCPU": " (CPU time limit)",
                "SIGSEGV": " (a crash in native code)",
            }.get(name, "")
            return f"the notebook's process was killed by {name}{why}"
        return (
            f"the notebook's process exited with code {code} (sys.exit / os._exit in the notebook?)"
        )

    def _span(self, budget: float) -> clock.Span:
        """An exchange's clock (``clock``): its budget in the submission's own time, counted on
        its CPU group (every thread's wait for a CPU, and the grader's own thread's, is not
        the submission's time); its backstop, ``wall_backstop`` times that in wall time, within
        the submission's own backstop. Without a CPU group the grader sees neither count: the
        child's own clock stops its calls and cells, and the grader stops only what is still
        running at the backstop."""
        backstop = budget * self.limits.wall_backstop
        if self.deadline is not None:
            backstop = min(backstop, self.deadline - time.monotonic())
        group = self.memory_group
        if group is None or group.acct_path is None:
            return clock.Span(budget, backstop)
        grader_thread = f"/proc/self/task/{threading.get_native_id()}/schedstat"

        def waits():
            found = group.run_delays()
            if found is not None:
                delay = clock.read_run_delay(grader_thread)
                if delay is not None:
                    found["grader"] = delay
            return found

        return clock.Span(
            budget, backstop, cpu=group.cpu_seconds, waits=waits, rate=self.limits.cpus
        )

    def _exchange(self, header: dict, arrays: list, timeout: float, doing: str):
        span = self._span(max(0.0, timeout))
        self.last_span = span
        try:
            self._send(header, arrays, span)
            return wire.recv(self._reader(span), self.limits)
        except TimeoutError:
            self.close()
            if span.ended == clock.BUSY:
                self.machine_busy = True
                raise MachineBusy(
                    f"the machine was too busy while {doing}: stopped after "
                    f"{self.limits.wall_backstop:g} times its time budget in wall time, most of "
                    "it spent waiting for a CPU (not the notebook's doing); this result is not "
                    "cached"
                ) from None
            raise core.ProcessTimedOut(
                f"timed out while {doing} (an endless loop or sleep?)"
            ) from None
        except (EOFError, BrokenPipeError):
            reason = self._death_reason()
            self.close()
            raise core.ProcessFailed(f"{reason} while {doing}") from None
        except wire.ProtocolError as error:
            self.close()
            raise core.ProcessFailed(
                f"the notebook's process sent garbage while {doing}: {error}"
            ) from None
        finally:
            self.spent += span.used()

    @staticmethod
    def _time_left(deadline) -> float:
        """Seconds to wait before looking again, or TimeoutError once the time is up:
        ``deadline`` is a time (``time.monotonic``) or a ``clock.Span`` (then its verdict is
        kept as ``span.ended``)."""
        if isinstance(deadline, clock.Span):
            wait = deadline.look()
            if wait is None:
                raise TimeoutError
            return wait
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        return remaining

    def _send(self, header: dict, arrays: list, deadline) -> None:
        """Write a request without ever blocking past the deadline (the child may not read)."""
        view = memoryview(wire.frame(header, arrays))
        while view:
            _, writable, _ = select.select([], [self.request_fd], [], self._time_left(deadline))
            if writable:
                view = view[os.write(self.request_fd, view) :]

    def _reader(self, deadline):
        def read_exact(n: int) -> bytes:
            chunks, remaining_bytes = [], n
            while remaining_bytes:
                wait = self._time_left(deadline)
                readable, _, _ = select.select([self.reply_fd], [], [], wait)
                if not readable:
                    continue
                chunk = os.read(self.reply_fd, min(remaining_bytes, 1 << 20))
                if not chunk:
                    raise EOFError
                chunks.append(chunk)
                remaining_bytes -= len(chunk)
            return b"".join(chunks)

        return read_exact

    def start_early(self) -> None:
        """Start the child and run the notebook's cells now, before the first check asks: its
        start-up then overlaps the grader's own (the import of the oracle's library). A failure
        is kept and raised by the first request instead, exactly as that request would have
        met it, so that the submission's restarts and errors are the same either way."""
        try:
            self._ensure_running()
        except core.ProcessFailed as failure:
            self.early_failure = failure

    def _ensure_running(self) -> None:
        if self.early_failure is not None:
            failure, self.early_failure = self.early_failure, None
            raise failure
        if self.process is not None:
            return
        if self.dead_reason and self.restarts >= self.limits.max_restarts:
            raise core.ProcessFailed(f"not run: {self.dead_reason} (too many restarts)")
        if self.remaining() <= MIN_RESTART_BUDGET:
            raise core.ProcessFailed("not run: the submission's time budget is used up")
        if self.dead_reason:
            self.restarts += 1
        try:
            self.start()
        except core.ProcessFailed as failure:
            self.dead_reason = str(failure)
            raise

    # ------------------------------------------------------------------ Submission API

    def has(self, name):
        self._ensure_running()
        return name in self.names

    def _request(self, header: dict, arrays: list, name: str) -> core.Output:
        self._ensure_running()
        if name not in self.names:
            raise core.MissingName(
                f"`{name}` is not defined in the notebook (did its cell run without errors?)"
            )
        if name in self.hung:
            where = attribution.cell_label(self.cells, self.hung[name])
            raise core.RaisedError(
                f"`{name}` did not finish in time when {where} called it; not run again",
                "Timeout",
            )
        if name in self.timed_out:
            raise core.RaisedError(
                f"`{name}` did not finish in time on an earlier input; not run again"
            )
        budget = max(self.limits.call_timeout, self.call_timeouts.get(name, 0.0))
        timeout = min(budget, self.remaining())
        try:
            reply, results = self._exchange(
                dict(header, timeout=max(MIN_CALL_ALARM, timeout - CALL_ALARM_MARGIN)),
                arrays,
                timeout,
                f"calling `{name}`",
            )
        except core.ProcessTimedOut as failure:
            self.dead_reason = str(failure)
            if not isinstance(failure, MachineBusy):
                self.timed_out.add(name)
            raise
        except core.ProcessFailed as failure:
            self.dead_reason = str(failure)
            raise
        try:
            return wire.parse_call_reply(name, reply, results)
        except core.RaisedError as error:
            if error.error_type == worker.BUSY:
                # The child says it was kept waiting: believed only where the grader's own
                # count agrees that the call had not used its budget (a busy claim only
                # makes this result uncached; it earns nothing).
                if self.last_span is None or self.last_span.verdict() != clock.SPENT:
                    self.machine_busy = True
                    raise
                error = core.error_from_reply(name, {"error_type": "Timeout"})
            if error.error_type == "Timeout":
                self.timed_out.add(name)
            raise error from None
        except wire.ProtocolError as error:
            self.close()
            self.dead_reason = f"the notebook's process sent garbage while calling `{name}`"
            raise core.ProcessFailed(f"{self.dead_reason}: {error}") from None

    def call(self, name, *args, **kwargs):
        specs, kwarg_names, kwarg_specs, arrays = wire.encode_args(args, kwargs)
        header = {
            "op": "call",
            "name": name,
            "args": specs,
            "kwarg_names": kwarg_names,
            "kwargs": kwarg_specs,
        }
        return self._request(header, arrays, name)

    def get(self, name):
        return self._request({"op": "get", "name": name}, [], name)

    def static_forbidden(self, name, forbidden):
        from normlab.grader.trap import scan_source

        key = (name, tuple(forbidden))
        if key not in self._scanned:  # the source does not change between calls
            self._scanned[key] = scan_source(self.cells, name, forbidden)
        return self._scanned[key]
