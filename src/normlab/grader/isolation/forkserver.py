"""A fork server: fresh submission processes in milliseconds instead of seconds.

Importing NumPy and PyTorch costs a new interpreter about 1.5 s of CPU; the checks take
milliseconds. The fork server is started once per grading run, imports those libraries (and
nothing of the grader's state: no labs, no results, no inputs), and forks a child for each
submission. The child starts its own session, takes the pipes the grader passed it, and becomes
a worker exactly as ``python -m normlab.grader.isolation.worker`` would (nanny, unprivileged
user, limits), so isolation is the same; only the start-up is shared, copy-on-write.

Under the sandbox (a grader running as root), the server itself runs inside bubblewrap
(``sandbox.fork_server_sandbox``) and each child makes its own namespaces before anything else
(``ChildSubmission._limits_for_child``). A child of either server joins its cgroups through
``cgroup.procs`` files the grader opened and sent with the pipes: the sandbox has no ``/sys``.

The server is a subreaper: a process a submission double-forks away from its session is adopted
here when its parent dies, and killed (``processes.Reaper``). The grader kills a submission's
whole session when it ends (``{"end": PID}``). A server that does not answer in
``Limits.fork_server_wait`` seconds (stopped, killed, stuck) is killed and replaced; the
children it had already forked are then adopted by the grader, which tracks their sessions too.

Protocol on the grader's Unix socket: the grader sends a JSON request with three file
descriptors (request pipe, reply pipe, log file); the server answers ``{"pid": N}``, and later
``{"exited": N, "status": S}`` when that child ends (S as ``subprocess`` reports it: negative for
a signal).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from normlab.grader.isolation import cgroup, processes
from normlab.grader.isolation.worker import SERVER_PRELOAD

#: waiting for a killed server to be reaped: gone in milliseconds, unless stuck in the kernel
REAP_WAIT = 5.0
#: a request's descriptors: the request pipe, the reply pipe, the log, then the ``cgroup.procs``
#: files the child joins its cgroups by (one per cgroup v1 hierarchy)
PIPES_AND_LOG, MAX_CGROUP_FILES = 3, 4


def _preload(torch: bool = True, extra: tuple[str, ...] = ()) -> None:
    """Import ``SERVER_PRELOAD`` (without PyTorch's modules for a NumPy lab's server) and the
    ``extra`` modules the run's labs name (``Lab.preload``)."""
    for name in (*SERVER_PRELOAD, *extra):
        if name.partition(".")[0] == "torch" and not torch:
            continue
        try:
            __import__(name)
        except Exception:  # a missing optional library only costs its import later
            pass


def _serve(sock: socket.socket) -> None:
    from normlab.grader.isolation.worker import run_submission

    reaper = processes.Reaper()
    children: set[int] = set()
    last_sweep = time.monotonic()
    while True:
        readable, _, _ = select.select([sock], [], [], 0.05)
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                sock.sendall(json.dumps({"exited": pid, "status": code}).encode() + b"\n")
        if time.monotonic() - last_sweep > 0.5:
            reaper.sweep()
            last_sweep = time.monotonic()
        if not readable:
            continue
        message, fds, _, _ = socket.recv_fds(sock, 1 << 16, PIPES_AND_LOG + MAX_CGROUP_FILES)
        if not message:
            return  # the grader is gone
        request = json.loads(message)
        if "end" in request:
            # A submission ended: every process of its session dies, then its strays.
            reaper.forget(-1, request["end"])
            continue
        pid = os.fork()
        if pid == 0:
            try:
                request_fd, reply_fd, log_fd, *group_files = fds
                # before anything: all it starts is in its cgroups (joined by the files the
                # grader opened: under the sandbox the server cannot see them by name)
                if group_files:
                    cgroup.join_or_exit(descriptors=group_files)
                sock.close()
                os.setsid()
                os.dup2(log_fd, 1)
                os.dup2(log_fd, 2)
                os.close(log_fd)
                os.chdir(request["workdir"])
                os.environ.clear()
                os.environ.update(request["env"])
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                run_submission(request_fd, reply_fd, request["limits"])
            finally:
                os._exit(71)
        for fd in fds:
            os.close(fd)
        children.add(pid)
        reaper.track(pid, session=pid)  # the child's first act is setsid: session id = pid
        sock.sendall(json.dumps({"pid": pid}).encode() + b"\n")


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    processes.become_subreaper()
    options = sys.argv[2:]
    extra = [o.removeprefix("--preload=") for o in options if o.startswith("--preload=")]
    _preload("--no-torch" not in options, tuple(name for o in extra for name in o.split(",")))
    sock.sendall(b'{"ready": true}\n')
    _serve(sock)


class ForkedProcess:
    """The grader's handle on a forked child: the parts of ``subprocess.Popen`` the sandbox uses."""

    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        # Like ``Popen.wait``: once the status is known, asking again returns it (the server
        # reports each exit once; waiting for a second report would only run out the timeout).
        if self.returncode is not None:
            return self.returncode
        status = self.server.wait_for(self.pid, timeout)
        if status is None:
            status = self._wait_adopted(timeout)
        if status is None:
            raise subprocess.TimeoutExpired("forked worker", timeout)
        self.returncode = status
        return status

    def _wait_adopted(self, timeout: float | None) -> int | None:
        """After the server died, its children are the grader's (a subreaper): wait directly."""
        if self.server.alive():
            return None
        deadline = time.monotonic() + (timeout or 0)
        while True:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return None
            if done:
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    def end(self) -> None:
        self.server.end(self.pid)


class ForkServer:
    """Starts the server on first use and restarts it if it dies; safe to share between threads.

    ``torch``: the server imports PyTorch before it forks (for a lab written in PyTorch). A
    NumPy lab's children come from a server that never imported it: there ``import torch``
    meets only the stand-ins (``hidden``), and a notebook that removes them imports the real
    library afresh from disk, as a fresh interpreter would, not a second copy over the one
    already loaded (which can crash the process).
    """

    def __init__(
        self,
        environment: dict,
        reaper: processes.Reaper,
        wait: float,
        torch: bool,
        sandbox: list[str] | None = None,
        preload: tuple[str, ...] = (),
    ):
        self.torch = torch
        #: modules the server imports beyond ``SERVER_PRELOAD`` (the run's labs' ``Lab.preload``)
        self.preload = tuple(preload)
        #: the command the server runs under (bubblewrap's, ``sandbox.fork_server_sandbox``), or
        #: None: the server sees the grader's filesystem (processes mode)
        self.sandbox = sandbox
        self.environment = environment
        self.reaper, self.wait = reaper, wait
        self.generation = 0
        self.lock = threading.Lock()
        self.statuses: dict[int, int] = {}
        self.changed = threading.Condition()
        self.process: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.replies: list[dict] = []

    def _start(self) -> None:
        # SEQPACKET: one message per request, whatever follows it.
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with self.reaper.lock:  # tracked before the reaper can take it for an orphan
            self.process = subprocess.Popen(
                [
                    *(self.sandbox or []),
                    sys.executable,
                    "-I",
                    "-m",
                    "normlab.grader.isolation.forkserver",
                    str(theirs.fileno()),
                    *([] if self.torch else ["--no-torch"]),
                    *([f"--preload={','.join(self.preload)}"] if self.preload else []),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=self.environment,
                cwd="/",
                start_new_session=True,
            )
            self.reaper.track(self.process.pid)
        theirs.close()
        self.sock = ours
        ours.settimeout(60)  # importing PyTorch on a loaded machine
        reader = ours.makefile("rb")
        try:
            ready = reader.readline()
        except OSError:
            ready = b""
        ours.settimeout(None)
        if b"ready" not in ready:
            self._discard()
            raise OSError("the fork server did not start")
        self.generation += 1
        with self.changed:
            self.replies = []
        threading.Thread(target=self._read, args=(reader, self.generation), daemon=True).start()

    def _read(self, reader, generation: int) -> None:
        try:
            for line in reader:
                try:
                    message = json.loads(line)
                except ValueError:
                    break
                if not isinstance(message, dict):
                    break
                with self.changed:
                    exited, status = message.get("exited"), message.get("status")
                    if type(exited) is int and type(status) is int:
                        self.statuses[exited] = status
                    elif generation == self.generation:  # not a reply of a replaced server
                        self.replies.append(message)
                    self.changed.notify_all()
        except (OSError, ValueError):
            pass
        if generation != self.generation:
            return
        with self.changed:  # the server died: nobody will report these children any more
            self.replies.append({"dead": True})
            self.changed.notify_all()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _stopped(self) -> bool:
        """Whether the server is stopped (a submission sent it SIGSTOP): it would not answer,
        and waiting ``wait`` seconds to find that out is the next submission's time."""
        if self.process is None:
            return False
        fields = processes.stat_fields(self.process.pid)
        return bool(fields) and fields[0] in (b"T", b"t")  # no /proc here: the wait finds out

    def _discard(self) -> None:
        """Kill a server that failed (stopped, stuck, dead); the next spawn starts a new one."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.process.wait(timeout=REAP_WAIT)
            except subprocess.TimeoutExpired:
                pass
            self.reaper.forget(self.process.pid)
            self.process = None
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def spawn(
        self,
        workdir: str,
        env: dict,
        fds: tuple[int, int, int],
        limits: dict,
        memory_group: str | None = None,
    ):
        """A fresh child for one submission, or OSError (then the caller starts an interpreter).
        ``memory_group``: the submission's cgroup, which the child joins before anything.

        A server that does not answer within ``wait`` seconds is replaced: the time is the
        grader's, not the submission's (its budget starts when it has a process).
        """
        with self.lock:
            if not self.alive() or self._stopped():
                self._discard()
                self._start()
            request = {"workdir": workdir, "env": env, "limits": limits}
            group_files = cgroup.open_procs(memory_group) if memory_group else []
            with self.changed:
                self.replies.clear()
            try:
                self.sock.settimeout(self.wait)
                socket.send_fds(self.sock, [json.dumps(request).encode()], [*fds, *group_files])
                self.sock.settimeout(None)
            except OSError:
                self._discard()
                raise
            finally:
                for descriptor in group_files:
                    os.close(descriptor)
            with self.changed:
                if not self.changed.wait_for(lambda: self.replies, timeout=self.wait):
                    reply = {}
                else:
                    reply = self.replies.pop(0)
            if type(reply.get("pid")) is not int:
                self._discard()
                raise OSError("the fork server did not answer")
            # Its session (id = pid) is a running submission's, wherever its processes end up.
            self.reaper.track(reply["pid"], session=reply["pid"])
            return ForkedProcess(self, reply["pid"])

    def end(self, pid: int) -> None:
        """The submission of child ``pid`` is over: its whole session dies, here and there."""
        processes.kill_session(pid)
        with self.lock:
            if self.alive() and self.sock is not None:
                try:
                    self.sock.settimeout(self.wait)
                    self.sock.sendall(json.dumps({"end": pid}).encode())
                    self.sock.settimeout(None)
                except OSError:
                    self._discard()
        self.reaper.forget(pid, session=pid)

    def wait_for(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.changed:
            while pid not in self.statuses:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                if not self.alive() or self._stopped():
                    return None  # no report will come (the next spawn replaces a stopped one)
                self.changed.wait(min(remaining, 0.2) if remaining is not None else 0.2)
            return self.statuses.pop(pid)

    def close(self) -> None:
        with self.lock:
            self._discard()
        self.reaper.sweep()


class ForkServers:
    """One fork server per kind of lab (PyTorch's or NumPy's), each started on first use.

    ``sandbox``: kind of lab (``torch``) -> the command its server runs under (bubblewrap's:
    ``sandbox.fork_server_sandbox``), or None for servers that see the grader's filesystem.
    ``preload``: kind of lab -> the modules its server imports beyond ``SERVER_PRELOAD``; a
    kind it leaves out has no server (``for_lab`` is None: its notebooks start as fresh
    interpreters). None: both kinds, importing nothing more."""

    def __init__(
        self,
        environment: dict,
        reaper: processes.Reaper,
        wait: float,
        sandbox: Callable[[bool], list[str]] | None = None,
        preload: dict[bool, tuple[str, ...]] | None = None,
    ):
        kinds = preload if preload is not None else {True: (), False: ()}
        self.servers = {
            torch: ForkServer(environment, reaper, wait, torch, sandbox and sandbox(torch), names)
            for torch, names in kinds.items()
        }

    def for_lab(self, torch: bool) -> ForkServer | None:
        return self.servers.get(torch)

    def close(self) -> None:
        for server in self.servers.values():
            server.close()


if __name__ == "__main__":
    main()
