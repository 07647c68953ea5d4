"""A private, size-limited working folder for a submission outside the sandbox (Linux).

In processes mode the child, before it runs any learner code, enters a mount namespace of its
own (``unshare``: as root directly, otherwise inside a new user namespace) and there

* mounts a tmpfs of ``Limits.tmp_mb`` and at most ``Limits.max_files`` files over its working
  folder (its ``HOME`` and ``TMPDIR``): every file the notebook writes counts against that total,
  and writing past it fails in the notebook with ``OSError: [Errno 28] No space left on device``;
* makes every other mount read-only in its namespace (``/tmp``, ``/var/tmp``, ``/dev/shm``, the
  home folder, the repository, the gradebook's folder): there is nowhere else to write;
* after it has become its unprivileged user, gives up every capability and new privileges
  (``PR_SET_NO_NEW_PRIVS``), so nothing it runs can undo a mount or gain them back.

Nothing of this touches the grader's namespace: the tmpfs vanishes with the submission's last
process, and the folder the grader sees stays empty. Where neither root nor user namespaces are
available, :func:`available` says so and the grader reports that the run has no disk total.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import subprocess
import sys
import threading

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
# statvfs f_flag bit -> the mount flag to keep when remounting (a user namespace must keep them)
KEPT_FLAGS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME}
KEPT_FLAGS |= {2048: MS_NODIRATIME, 4096: MS_RELATIME}
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
EXIT_NO_WORKSPACE = 73  # the child's exit status when it cannot set up its folder


class WorkspaceError(OSError):
    pass


@functools.cache
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise WorkspaceError(error, f"{what}: {os.strerror(error)}")


def _mount(source, target, fstype, flags: int, data) -> None:
    encode = lambda value: None if value is None else os.fsencode(value)  # noqa: E731
    result = _libc().mount(encode(source), encode(target), encode(fstype), flags, encode(data))
    _check(result, f"mount {target}")


def _enter_namespace() -> None:
    libc = _libc()
    if os.geteuid() == 0:
        _check(libc.unshare(CLONE_NEWNS), "unshare")
        return
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as stream:
            stream.write(text)


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo", "rb") as stream:
        for line in stream:
            fields = line.split()
            if len(fields) > 4:  # spaces, tabs, newlines, backslashes: octal escapes
                raw = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields[4])
                points.append(os.fsdecode(raw))
    return points


def make_private(
    folder: str, size_bytes: int, max_files: int, owner: tuple[int, int], namespace: bool = True
) -> None:
    """Enter a private mount namespace: ``folder`` becomes a tmpfs of ``size_bytes`` owned by
    ``owner`` and holding at most ``max_files`` entries; every other mount becomes read-only.

    ``namespace=False``: already in a sandbox's private, read-only namespace (bubblewrap, as
    root): only mount the tmpfs, which, unlike bubblewrap's, bounds the number of files.
    Raises WorkspaceError (nothing is half done that matters: the caller exits)."""
    if not namespace:
        _mount_folder(folder, size_bytes, max_files, owner)
        return
    _enter_namespace()
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)  # nothing propagates back to the host
    for point in _mount_points():
        try:
            kept = os.statvfs(point).f_flag
        except OSError:
            continue  # not reachable from here (shadowed, or a folder it may not enter)
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        flags |= sum(flag for bit, flag in KEPT_FLAGS.items() if kept & bit)
        try:
            _mount(None, point, None, flags, None)
        except WorkspaceError:
            if not kept & 1:
                raise  # a writable place that stays writable: no total then
    _mount_folder(folder, size_bytes, max_files, owner)


def hide_folders(paths, init_text: str) -> None:
    """In the private namespace: each folder of ``paths`` becomes an empty read-only tmpfs whose
    only file is ``__init__.py`` holding ``init_text`` (PyTorch's folders for a NumPy lab, as
    the sandbox hides them: ``import torch`` then raises, whatever the notebook does to its
    import machinery). A folder that is not there is skipped."""
    for path in paths:
        if not os.path.isdir(path):
            continue
        _mount("normlab-hidden", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=8")
        with open(os.path.join(path, "__init__.py"), "w", encoding="utf-8") as stream:
            stream.write(init_text)
        _mount(None, path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)


def _mount_folder(folder: str, size_bytes: int, max_files: int, owner: tuple[int, int]) -> None:
    # The size alone does not bound small files: some kernels store them in no page of the
    # tmpfs at all (Linux 6.18 kept 50,000 files of 100 bytes in a 1 MB tmpfs); the count does.
    options = f"size={size_bytes},nr_inodes={max_files},mode=0700,uid={owner[0]},gid={owner[1]}"
    _mount("normlab-work", folder, "tmpfs", MS_NOSUID | MS_NODEV, options)
    os.chdir(folder)  # the cwd was the folder underneath


def enter_pid_and_ipc_namespaces(network: bool = False) -> None:
    """The next child of this process is PID 1 of a new PID namespace, and this process and its
    children share a new IPC namespace (System V shared memory, semaphores, message queues):
    a submission sees, signals and shares memory with no process but its own, and its IPC
    objects vanish with its last process. Called after ``make_private`` (the mount namespace,
    and outside root a user namespace, that gives the right to do it).

    ``network``: a network namespace of its own as well, with no interface up (not even
    loopback): no socket, abstract Unix sockets included, reaches another submission's."""
    flags = CLONE_NEWPID | CLONE_NEWIPC | (CLONE_NEWNET if network else 0)
    _check(_libc().unshare(flags), "unshare pid, ipc" + (", net" if network else ""))


def mount_proc() -> None:
    """In the new PID namespace (its first process): a ``/proc`` that shows only its
    processes, mounted over the grader's in the submission's private mount namespace."""
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)


def drop_capabilities() -> None:
    """No capabilities, now or after ``exec``, and no new privileges (setuid programs): nothing
    the notebook runs can undo a mount, lift a hard limit or become another user."""
    libc = _libc()
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break  # EINVAL: past the last capability
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: none (two words each)
    _check(libc.capset(header, data), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


#: a probe that starts this Python, imports the course package and mounts one small folder
PROBE_TIMEOUT = 60.0
#: the probes' private folder: small, since it only shows that a size and a count can be bounded
PROBE_FOLDER_BYTES, PROBE_FOLDER_FILES = 1 << 20, 64

PROBE = f"""
import os, sys
from normlab.grader.isolation import workspace
folder = sys.argv[1]
workspace.make_private(folder, {PROBE_FOLDER_BYTES}, {PROBE_FOLDER_FILES}, (os.getuid(), os.getgid()))
open(os.path.join(folder, "x"), "w").write("x")
try:
    open(os.path.join(os.path.dirname(folder), "y"), "w")
except OSError:
    sys.exit(0)
sys.exit(1)
"""

NAMESPACES_PROBE = f"""
import os, sys
from normlab.grader.isolation import workspace
folder = sys.argv[1]
workspace.make_private(folder, {PROBE_FOLDER_BYTES}, {PROBE_FOLDER_FILES}, (os.getuid(), os.getgid()))
workspace.enter_pid_and_ipc_namespaces()
pid = os.fork()
if pid == 0:
    workspace.mount_proc()
    seen = sorted(int(n) for n in os.listdir('/proc') if n.isdigit())
    os._exit(0 if os.getpid() == 1 and seen == [1] else 1)
_, status = os.waitpid(pid, 0)
sys.exit(0 if status == 0 else 1)
"""


def _probe(code: str) -> bool:
    """Run ``code`` in a new interpreter on a fresh folder: True when it exits 0 having left
    that folder empty (what it wrote went to its own mount)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="normlab-probe-") as base:
        folder = os.path.join(base, "work")
        os.mkdir(folder)
        try:
            probe = subprocess.run(
                [sys.executable, "-I", "-c", code, folder],
                capture_output=True,
                timeout=PROBE_TIMEOUT,
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return probe.returncode == 0 and not os.listdir(folder)


@functools.cache
def namespaces_available() -> bool:
    """True when a child can also have PID and IPC namespaces of its own, with its own /proc
    (tried once, after the private folder that it needs)."""
    return available() and _probe(NAMESPACES_PROBE)


@functools.cache
def available() -> bool:
    """True when a child can have a private, size-limited folder here (tried once)."""
    return _probe(PROBE)


#: the probe started ahead by ``start_probe`` (``sandbox.wait_for_probes`` joins it)
started: list[threading.Thread] = []


def start_probe() -> None:
    """Start ``namespaces_available`` (after ``available``, which it needs) in a thread; return
    at once. Of the probes of a run outside the sandbox, this pair of interpreters takes longest,
    and it needs nothing heavier than this module: ``normlab grade`` starts it before its own
    imports (NumPy, the grader), and ``sandbox.choose_isolation`` waits for it and asks again
    (the answers are cached; a probe that raised here raises there)."""

    def probe() -> None:
        try:
            namespaces_available()
        except Exception:  # noqa: BLE001 -- asked again by choose_isolation
            pass

    thread = threading.Thread(target=probe, name="normlab-probe", daemon=True)
    thread.start()
    started.append(thread)
