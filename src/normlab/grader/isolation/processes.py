"""Every process a submission starts dies with it.

A notebook can fork, start a new session (``setsid``) and fork again: such a daemon leaves the
submission's process group and is adopted by whoever is the nearest *subreaper* when its parent
dies. The grader and the fork server make themselves subreapers, so these orphans come back to
them, never to ``init``; :class:`Reaper` then kills every adopted child that belongs to no
running submission. A submission's own processes are killed at its end by session (all
processes whose session id is the submission's), in a loop until none is left.

Under bubblewrap the submission has its own PID namespace as well: when the sandbox's first
process dies, the kernel kills every process in it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphaned descendants of this process are adopted by it (Linux); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first, then the parent
    pid, ...); None when there is no such process or no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            text = stream.read()
    except OSError:
        return None
    return text[text.rfind(b")") + 2 :].split()


def _processes():
    """(pid, parent pid, session id, zombie?) of every process (Linux /proc)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit():
            continue
        fields = stat_fields(name)
        if fields is None:
            continue
        try:
            yield int(name), int(fields[1]), int(fields[3]), fields[0] == b"Z"
        except (IndexError, ValueError):
            continue


def session_members(session: int) -> list[int]:
    return [
        pid
        for pid, _, sid, zombie in _processes()
        if sid == session and not zombie and pid != os.getpid()
    ]


def kill_until_none(members, rounds: int, pause: float = 0.0) -> None:
    """SIGKILL every process ``members()`` lists, again and again until it lists none (they
    may be forking), at most ``rounds`` times, ``pause`` seconds apart."""
    for _ in range(rounds):
        pids = members()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if pause:
            time.sleep(pause)


def kill_session(session: int, rounds: int = 50) -> None:
    """SIGKILL every process of a session, again and again until none is left."""
    kill_until_none(lambda: session_members(session), rounds)


class Reaper:
    """Kills and reaps the orphans this (subreaper) process adopts.

    ``expected`` are our own children (started with ``track``); ``sessions`` the sessions of
    running submissions, whose members are left alone until the submission ends.
    """

    def __init__(self):
        self.lock = threading.RLock()
        self.expected: set[int] = set()
        self.sessions: set[int] = set()
        self.active = become_subreaper()

    def track(self, pid: int, session: int | None = None) -> None:
        with self.lock:
            self.expected.add(pid)
            if session is not None:
                self.sessions.add(session)

    def forget(self, pid: int, session: int | None = None) -> None:
        """A submission ended: its process and every process of its session die now."""
        with self.lock:
            self.expected.discard(pid)
            if session is not None:
                self.sessions.discard(session)
        if session is not None:
            kill_session(session)
        self.sweep()

    def sweep(self) -> int:
        """Kill and reap adopted orphans of no running submission; how many there were.

        A child in the grader's own session is never one: every submission runs in a session
        of its own from its first instruction, and a process can only leave its session for a
        new one. Such a child is the grader's own (a probe of what the sandbox must show or
        hide, run by another thread while this one sweeps), and is left alone.
        """
        if not self.active:
            return 0
        killed = 0
        own = os.getsid(0)
        for _ in range(50):
            with self.lock:
                me = os.getpid()
                strays = [
                    pid
                    for pid, parent, sid, _ in _processes()
                    if parent == me
                    and pid not in self.expected
                    and sid not in self.sessions
                    and sid != own
                ]
                for pid in strays:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                for pid in strays:
                    try:
                        os.waitpid(pid, 0)
                    except ChildProcessError:
                        pass
            if not strays:
                return killed
            killed += len(strays)
        return killed
