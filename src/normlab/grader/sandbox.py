"""Door 2's boundary: run one submission in a child process and call into it.

Threat model, in short (the README has the long form): the learner's code runs in a fresh
interpreter (``python -I``) in a private temporary directory, in its own process group, with
limits on memory (RLIMIT_AS), CPU time, file size and wall time. Only arrays (``.npy``,
``allow_pickle=False``) and a small JSON header come back, over a pipe of their own; the child's
stdout/stderr go to a capped file that is never parsed. Comparison and scoring happen only in
the parent. What this does NOT stop: reading files the grading user can read, or network access;
run ``normlab grade`` as an unprivileged user (or in a container) for untrusted classes.
"""

from __future__ import annotations

import functools
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from normlab.grader import core, protocol

DEFAULT_MEMORY_MB = 3072
CALL_TIMEOUT = 5.0  # the checks' inputs are tiny: a correct answer takes milliseconds
MAX_RESTARTS = 2
CELL_TIMEOUT_SHARE = 0.25  # one slow cell may use a quarter of the budget, not all of it


@functools.cache
def unprivileged_ids() -> tuple[int, int] | None:
    """(uid, gid) to run learner code as when the grader is root (``nobody``), else None.

    Only when that user can actually run this Python and import the course (an interpreter
    installed under /root, for instance, is not readable by ``nobody``): checked once, by trying.
    """
    if os.geteuid() != 0:
        return None
    try:
        import pwd

        entry = pwd.getpwnam("nobody")
        ids = entry.pw_uid, entry.pw_gid
    except (ImportError, KeyError):
        ids = 65534, 65534

    def become():
        os.setgroups([])
        os.setgid(ids[1])
        os.setuid(ids[0])

    try:
        probe = subprocess.run(
            [sys.executable, "-I", "-c", "import json, numpy, normlab.grader.worker"],
            preexec_fn=become,
            capture_output=True,
            timeout=60,
            cwd="/",
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return ids if probe.returncode == 0 else None


def interpreter_paths() -> list[str]:
    """Folders the child's Python needs: its prefixes and every existing ``sys.path`` entry."""
    import normlab

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(normlab.__file__).parents[1])}
    paths |= {entry for entry in sys.path if entry and os.path.isdir(entry)}
    return sorted(os.path.realpath(p) for p in paths)


def bwrap_prefix(workdir: str, hide: list[str]) -> list[str]:
    """``bwrap`` arguments: read-only filesystem, private /tmp, no network, own PID namespace.

    ``hide`` lists folders (e.g. the class's submissions) replaced by empty ones, so a notebook
    cannot read another student's file. The interpreter and the course package are bound back
    (read-only) when they live under /tmp, as a checkout there does.
    """
    command = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    command += ["--tmpfs", "/tmp"]
    for path in interpreter_paths():
        if path == "/tmp" or path.startswith("/tmp/"):
            command += ["--ro-bind", path, path]
    for folder in hide:
        command += ["--tmpfs", folder]
    command += ["--bind", workdir, workdir]
    command += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--"]
    return command


def bwrap_available() -> bool:
    """True when bubblewrap is installed and can create its namespaces here."""
    if shutil.which("bwrap") is None:
        return False
    probe = subprocess.run(
        ["bwrap", "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "true"],
        capture_output=True,
        timeout=10,
    )
    return probe.returncode == 0


def child_environment(workdir: str, mpl_cache: str) -> dict:
    """A small, predictable environment: nothing of the grader's leaks into the child."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": workdir,
        "TMPDIR": workdir,
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": mpl_cache,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "NORMLAB_GRADING": "1",
        "LANG": "C.UTF-8",
        **{k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_CORETYPE")},
    }


def fork_server_environment(cache_dir: str) -> dict:
    """The fork server's environment: as a child's, so that imports behave the same."""
    environment = child_environment(cache_dir, cache_dir)
    environment["HOME"] = cache_dir
    return environment


class ChildSubmission(core.Submission):
    """A notebook's code cells running in a child process, restarted if it dies.

    Args:
        cells: the notebook's code cells, in order.
        forbidden: learner name -> library names it may not use (checked statically and trapped).
        budget: wall seconds for the whole submission (load, calls, restarts).
        memory_mb: address-space limit of the child.
    """

    def __init__(
        self,
        cells: list[str],
        forbidden: dict,
        budget: float,
        memory_mb: int = DEFAULT_MEMORY_MB,
        bwrap: bool = False,
        hide: tuple[str, ...] = (),
        fork_server=None,
    ):
        self.cells = cells
        self.forbidden = forbidden
        self.deadline = time.monotonic() + budget
        self.memory_mb = memory_mb
        self.bwrap = bwrap
        self.hide = list(hide)
        self.fork_server = fork_server  # a forkserver.ForkServer, or None: a new interpreter
        self.process: subprocess.Popen | None = None
        self.names: set[str] = set()
        self.cell_errors: list[dict] = []
        self.restarts = 0
        self.dead_reason = ""
        self.timed_out: set[str] = set()  # functions that ran out of time: not called again
        self._tmp = tempfile.TemporaryDirectory(prefix="normlab-grade-")
        self.workdir = Path(self._tmp.name)
        # Private, not shared between students: a shared cache is a channel between them.
        self.mpl_cache = str(self.workdir / ".matplotlib")
        self.run_as = unprivileged_ids()
        if self.run_as:
            os.chown(self.workdir, *self.run_as)

    # ------------------------------------------------------------------ lifecycle

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def start(self) -> None:
        """Start the child and run the notebook's cells in it."""
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        log = open(self.workdir / "output.log", "wb")
        cpu_seconds = max(5, int(self.remaining()) + 5)
        command = [sys.executable, "-I", "-m", "normlab.grader.worker"]
        command += [str(request_read), str(reply_write), str(self.memory_mb), str(cpu_seconds)]
        environment = child_environment(str(self.workdir), self.mpl_cache)
        if self.bwrap:
            command = bwrap_prefix(str(self.workdir), self.hide) + command
            environment["NORMLAB_NO_NANNY"] = "1"
        if self.run_as:
            environment["NORMLAB_RUN_AS"] = "{}:{}".format(*self.run_as)
        if self.fork_server is not None and not self.bwrap:
            try:
                self.process = self.fork_server.spawn(
                    str(self.workdir),
                    environment,
                    (request_read, reply_write, log.fileno()),
                    self.memory_mb,
                    cpu_seconds,
                )
            except OSError:
                self.process = None  # no fork server: start an interpreter the slow way
        if self.process is None:
            self.process = subprocess.Popen(
                command,
                pass_fds=(request_read, reply_write),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=environment,
                start_new_session=True,  # its own process group: we can kill everything it forks
            )
        log.close()
        os.close(request_read)
        os.close(reply_write)
        self.request_fd, self.reply_fd = request_write, reply_read
        os.set_blocking(self.request_fd, False)
        reply = self._exchange(
            {
                "op": "load",
                "cells": self.cells,
                "forbidden": self.forbidden,
                "cell_timeout": max(5.0, CELL_TIMEOUT_SHARE * self.remaining()),
            },
            [],
            self.remaining(),
            "running the notebook's cells",
        )[0]
        self.names = set(reply.get("names", []))
        self.cell_errors = list(reply.get("cell_errors", []))

    def close(self) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass  # a forked child whose server died: killed above, nobody reports it
            for fd in (self.request_fd, self.reply_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.process = None

    def cleanup(self) -> None:
        self.close()
        self._tmp.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()

    def output_tail(self, limit: int = 400) -> str:
        """The end of what the notebook printed (for error messages only; never parsed)."""
        try:
            with open(self.workdir / "output.log", "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - limit))
                return log.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""

    # ------------------------------------------------------------------ the wire

    def _death_reason(self) -> str:
        if self.process is None:
            return "the notebook's process is not running"
        try:
            code = self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return "the notebook's process stopped answering"
        if self.bwrap and code > 128:
            code = -(code - 128)  # bwrap reports its child's fatal signal N as exit code 128 + N
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

    def _exchange(self, header: dict, arrays: list, timeout: float, doing: str):
        deadline = time.monotonic() + max(0.0, timeout)
        try:
            self._send(header, arrays, deadline)
            return protocol.recv(self._reader(deadline))
        except TimeoutError:
            self.close()
            raise core.ProcessFailed(
                f"timed out while {doing} (an endless loop or sleep?)"
            ) from None
        except (EOFError, BrokenPipeError):
            reason = self._death_reason()
            self.close()
            raise core.ProcessFailed(f"{reason} while {doing}") from None
        except protocol.ProtocolError as error:
            self.close()
            raise core.ProcessFailed(
                f"the notebook's process sent garbage while {doing}: {error}"
            ) from None

    def _send(self, header: dict, arrays: list, deadline: float) -> None:
        """Write a request without ever blocking past the deadline (the child may not read)."""
        view = memoryview(protocol.frame(header, arrays))
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            _, writable, _ = select.select([], [self.request_fd], [], remaining)
            if not writable:
                raise TimeoutError
            view = view[os.write(self.request_fd, view) :]

    def _reader(self, deadline: float):
        def read_exact(n: int) -> bytes:
            chunks, remaining_bytes = [], n
            while remaining_bytes:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                readable, _, _ = select.select([self.reply_fd], [], [], remaining)
                if not readable:
                    raise TimeoutError
                chunk = os.read(self.reply_fd, min(remaining_bytes, 1 << 20))
                if not chunk:
                    raise EOFError
                chunks.append(chunk)
                remaining_bytes -= len(chunk)
            return b"".join(chunks)

        return read_exact

    def _ensure_running(self) -> None:
        if self.process is not None:
            return
        if self.dead_reason and self.restarts >= MAX_RESTARTS:
            raise core.ProcessFailed(f"not run: {self.dead_reason} (too many restarts)")
        if self.remaining() <= 1:
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
        if name in self.timed_out:
            raise core.RaisedError(
                f"`{name}` did not finish in time on an earlier input; not run again"
            )
        timeout = min(CALL_TIMEOUT, self.remaining())
        try:
            reply, results = self._exchange(
                dict(header, timeout=max(0.5, timeout - 1)), arrays, timeout, f"calling `{name}`"
            )
        except core.ProcessFailed as failure:
            self.dead_reason = str(failure)
            if "timed out" in str(failure):
                self.timed_out.add(name)
            raise
        if not reply.get("ok"):
            if reply.get("error_type") == "Timeout":
                self.timed_out.add(name)
            raise core.error_from_reply(name, reply)
        return core.Output.from_wire(reply, results)

    def call(self, name, *args, **kwargs):
        specs, kwarg_names, kwarg_specs, arrays = core.encode_args(args, kwargs)
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

        return scan_source(self.cells, name, forbidden)
