"""One memory total for a submission and every process it starts (a Linux memory cgroup).

``RLIMIT_AS`` bounds each process alone: six forked children of 250 MB each held 1.5 GB under
``--memory 1024``. Where the grading user may create cgroups (root with cgroup v1's memory
controller, or a delegated cgroup v2 with the memory controller enabled for its children),
each submission gets a cgroup of its own, below the grader's, whose limit is
``Limits.memory_mb + Limits.tmp_mb`` (its processes' memory and its private folder's files,
which a tmpfs keeps in RAM). The submission's first process joins it before any learner code
runs, so everything it starts is in it; past the total the kernel kills a process of the
submission (SIGKILL), which the grader reports as the submission's memory limit. At the end
the grader kills every process left in it and removes it.

Where no cgroup can be made, :func:`available` says so, the run's isolation line says
"memory per process only", and ``docs/grading.md`` states what is bounded then.
"""

from __future__ import annotations

import functools
import itertools
import os
import time

from normlab.grader.isolation import processes

V2_ROOT = "/sys/fs/cgroup"
EXIT_NO_CGROUP = 74  # the child's exit status when it cannot join its cgroup
_counter = itertools.count()


def _own_paths() -> dict[str, str]:
    """controller list (``"memory"``, or ``""`` for v2) -> this process's cgroup path."""
    found = {}
    try:
        with open("/proc/self/cgroup") as stream:
            for line in stream:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3:
                    found[parts[1]] = parts[2]
    except OSError:
        pass
    return found


def _v1_memory_mount() -> str | None:
    try:
        with open("/proc/self/mountinfo") as stream:
            for line in stream:
                before, _, after = line.partition(" - ")
                fields, extra = before.split(), after.split()
                if len(extra) >= 3 and extra[0] == "cgroup" and "memory" in extra[2].split(","):
                    return fields[4]
    except OSError:
        pass
    return None


def _write(path: str, text: str) -> None:
    with open(path, "w") as stream:
        stream.write(text)


def _candidates() -> list[tuple[str, int]]:
    """(folder in which this process could make a submission's cgroup, cgroup version)."""
    own = _own_paths()
    found = []
    if os.path.exists(os.path.join(V2_ROOT, "cgroup.controllers")) and "" in own:
        found.append((V2_ROOT + own[""].rstrip("/"), 2))
    mount = _v1_memory_mount()
    for controllers, path in own.items():
        if mount and "memory" in controllers.split(","):
            found.append((mount + path.rstrip("/"), 1))
    return found


def _try(folder: str, version: int) -> bool:
    probe = os.path.join(folder, f"normlab-probe-{os.getpid()}-{next(_counter)}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        _set_limit(probe, version, 64 << 20)
        return True
    except OSError:
        return False
    finally:
        try:
            os.rmdir(probe)
        except OSError:
            pass


def _set_limit(path: str, version: int, limit: int) -> None:
    if version == 2:
        _write(os.path.join(path, "memory.max"), str(limit))
        try:
            _write(os.path.join(path, "memory.swap.max"), "0")
        except OSError:
            pass  # no swap accounting: no swap to escape to either
    else:
        _write(os.path.join(path, "memory.limit_in_bytes"), str(limit))
        try:  # memory + swap: the same total (where swap is accounted)
            _write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(limit))
        except OSError:
            pass


@functools.cache
def available() -> tuple[str, int] | None:
    """Where submissions' cgroups are made here, and the version; None: nowhere (tried once)."""
    for folder, version in _candidates():
        if _try(folder, version):
            return folder, version
    return None


def join(path: str) -> None:
    """Move the calling process into the cgroup at ``path`` (its children follow it)."""
    _write(os.path.join(path, "cgroup.procs"), str(os.getpid()))


def join_or_exit(path: str) -> None:
    """``join`` before any learner code runs, or end the process (never run unbounded)."""
    try:
        join(path)
    except OSError:
        os._exit(EXIT_NO_CGROUP)


class Cgroup:
    """A submission's memory cgroup: made with its limit, emptied and removed at the end."""

    def __init__(self, limit_bytes: int):
        where = available()
        if where is None:
            raise OSError("no cgroup can be made here")
        folder, self.version = where
        self.path = os.path.join(folder, f"normlab-{os.getpid()}-{next(_counter)}")
        os.mkdir(self.path)
        self.limit = limit_bytes
        try:
            _set_limit(self.path, self.version, limit_bytes)
        except OSError:
            os.rmdir(self.path)
            raise
        self.seen_oom_kills = 0

    def members(self) -> list[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as stream:
                return [int(line) for line in stream if line.strip()]
        except (OSError, ValueError):
            return []

    def oom_kills(self) -> int:
        """How many processes the kernel killed here for the memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            with open(os.path.join(self.path, name)) as stream:
                for line in stream:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def new_oom_kill(self) -> bool:
        """Whether the kernel killed a process here for the memory limit since last asked."""
        count = self.oom_kills()
        new, self.seen_oom_kills = count > self.seen_oom_kills, count
        return new

    def kill_all(self, rounds: int = 200) -> None:
        """SIGKILL every process in the cgroup until none is left (it may be forking)."""
        processes.kill_until_none(self.members, rounds, pause=0.005)

    def remove(self) -> None:
        self.kill_all()
        for _ in range(200):  # a killed process leaves the cgroup once it is reaped
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)
