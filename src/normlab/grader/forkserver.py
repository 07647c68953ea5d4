"""A fork server: fresh submission processes in milliseconds instead of seconds.

Importing NumPy and PyTorch costs a new interpreter about 1.5 s of CPU; the checks take
milliseconds. The fork server is started once per grading run, imports those libraries (and
nothing of the grader's state: no labs, no results, no inputs), and forks a child for each
submission. The child starts its own session, takes the pipes the grader passed it, and becomes
a worker exactly as ``python -m normlab.grader.worker`` would (nanny, unprivileged user,
limits), so isolation is the same; only the start-up is shared, copy-on-write.

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

PRELOAD = ("numpy", "torch", "matplotlib.pyplot")


def _preload() -> None:
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception:  # a missing optional library only costs its import later
            pass


def _serve(sock: socket.socket) -> None:
    from normlab.grader.worker import run_submission

    children: set[int] = set()
    while True:
        readable, _, _ = select.select([sock], [], [], 0.05)
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                sock.sendall(json.dumps({"exited": pid, "status": code}).encode() + b"\n")
        if not readable:
            continue
        message, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
        if not message:
            return  # the grader is gone
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                os.setsid()
                request_fd, reply_fd, log_fd = fds
                os.dup2(log_fd, 1)
                os.dup2(log_fd, 2)
                os.close(log_fd)
                os.chdir(request["workdir"])
                os.environ.clear()
                os.environ.update(request["env"])
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                run_submission(request_fd, reply_fd, request["memory_mb"], request["cpu_seconds"])
            finally:
                os._exit(71)
        for fd in fds:
            os.close(fd)
        children.add(pid)
        sock.sendall(json.dumps({"pid": pid}).encode() + b"\n")


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    _preload()
    sock.sendall(b'{"ready": true}\n')
    _serve(sock)


class ForkedProcess:
    """The grader's handle on a forked child: the parts of ``subprocess.Popen`` the sandbox uses."""

    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        status = self.server.wait_for(self.pid, timeout)
        if status is None:
            raise subprocess.TimeoutExpired("forked worker", timeout)
        self.returncode = status
        return status


class ForkServer:
    """Starts the server on first use and restarts it if it dies; safe to share between threads."""

    def __init__(self, environment: dict):
        self.environment = environment
        self.lock = threading.Lock()
        self.statuses: dict[int, int] = {}
        self.changed = threading.Condition()
        self.process: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.replies: list[dict] = []

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-m", "normlab.grader.forkserver", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self.environment,
            cwd="/",
            start_new_session=True,
        )
        theirs.close()
        self.sock = ours
        reader = ours.makefile("rb")
        ready = reader.readline()
        if b"ready" not in ready:
            raise OSError("the fork server did not start")
        threading.Thread(target=self._read, args=(reader,), daemon=True).start()

    def _read(self, reader) -> None:
        for line in reader:
            message = json.loads(line)
            with self.changed:
                if "exited" in message:
                    self.statuses[message["exited"]] = message["status"]
                else:
                    self.replies.append(message)
                self.changed.notify_all()
        with self.changed:  # the server died: nobody will report these children any more
            self.replies.append({"dead": True})
            self.changed.notify_all()

    def spawn(
        self, workdir: str, env: dict, fds: tuple[int, int, int], memory_mb: int, cpu_seconds: int
    ) -> ForkedProcess:
        with self.lock:
            if self.process is None or self.process.poll() is not None:
                self._start()
            request = {
                "workdir": workdir,
                "env": env,
                "memory_mb": memory_mb,
                "cpu_seconds": cpu_seconds,
            }
            with self.changed:
                self.replies.clear()
            socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
            with self.changed:
                if not self.changed.wait_for(lambda: self.replies, timeout=30):
                    raise OSError("the fork server did not answer")
                reply = self.replies.pop(0)
            if "pid" not in reply:
                self.process = None
                raise OSError("the fork server died")
            return ForkedProcess(self, reply["pid"])

    def wait_for(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.changed:
            while pid not in self.statuses:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                if self.process is None or self.process.poll() is not None:
                    return None
                self.changed.wait(remaining if remaining is not None else 1.0)
            return self.statuses.pop(pid)

    def close(self) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.process.wait()
            self.process = None


if __name__ == "__main__":
    main()
