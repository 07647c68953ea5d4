"""One memory total and one CPU share for a submission and every process it starts (Linux
cgroups).

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

The same submission's processes also share one CPU share where the ``cpu`` controller can be
had (cgroup v1's ``cpu`` and ``cpuacct`` hierarchies, or v2's ``cpu``: :func:`cpu_available`):
a group of the default weight (``cpu.shares`` 1024, ``cpu.weight`` 100), at most
``Limits.cpus`` cores' worth of time (``cpu.cfs_quota_us``, ``cpu.max``). Without it, every
session is a scheduling group of its own (the kernel's autogroup): a notebook that forks 240
spinning processes, each in a new session, got 240 shares of the machine against its
classmate's one. The group's counters are also the submission's clock (``clock``): the CPU
time of all its processes (``cpuacct.usage``, ``cpu.stat``'s ``usage_usec``) and each of its
threads, whose time spent waiting for a CPU the kernel reports (``/proc/TID/schedstat``).
"""

from __future__ import annotations

import functools
import itertools
import os
import time

from normlab.grader.isolation import processes
from normlab.grader.isolation.clock import read_run_delay

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


def _v1_mount(controller: str = "memory") -> str | None:
    try:
        with open("/proc/self/mountinfo") as stream:
            for line in stream:
                before, _, after = line.partition(" - ")
                fields, extra = before.split(), after.split()
                if len(extra) >= 3 and extra[0] == "cgroup" and controller in extra[2].split(","):
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
    mount = _v1_mount("memory")
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


def join(path: str | list[str]) -> None:
    """Move the calling process into the cgroup at ``path``, or into each of a list of them
    (one per cgroup v1 hierarchy); its children follow it."""
    for folder in [path] if isinstance(path, str) else path:
        _write(os.path.join(folder, "cgroup.procs"), str(os.getpid()))


def join_by_descriptors(descriptors: list[int]) -> None:
    """Move the calling process into the cgroup of each ``cgroup.procs`` file opened for writing
    by the grader (``open_procs``): a fork server's child, which may not see the cgroup's folder
    by name (the sandbox's server has no ``/sys``). Each descriptor is closed."""
    try:
        for descriptor in descriptors:
            os.write(descriptor, str(os.getpid()).encode())
    finally:
        for descriptor in descriptors:
            os.close(descriptor)


def open_procs(path: str | list[str]) -> list[int]:
    """The ``cgroup.procs`` file of the cgroup at ``path`` (or of each of a list of them),
    opened for writing: what ``join_by_descriptors`` writes to in another process."""
    opened: list[int] = []
    try:
        for folder in [path] if isinstance(path, str) else path:
            opened.append(os.open(os.path.join(folder, "cgroup.procs"), os.O_WRONLY))
    except OSError:
        for descriptor in opened:
            os.close(descriptor)
        raise
    return opened


def join_or_exit(path: str | list[str] | None = None, descriptors: list[int] | None = None) -> None:
    """``join`` (or ``join_by_descriptors``) before any learner code runs, or end the process
    (never run unbounded)."""
    try:
        if descriptors is not None:
            join_by_descriptors(descriptors)
        if path is not None:
            join(path)
    except OSError:
        os._exit(EXIT_NO_CGROUP)


# ----------------------------------------------------------------------------- CPU

#: the scheduler's period for a group's CPU quota (v1 ``cpu.cfs_period_us``, v2 ``cpu.max``)
CPU_PERIOD_US = 100_000


def _cpu_candidates() -> list[tuple[int, str, str]]:
    """(cgroup version, folder for the ``cpu`` group, folder for its CPU-time counter)."""
    own = _own_paths()
    found = []
    if os.path.exists(os.path.join(V2_ROOT, "cgroup.controllers")) and "" in own:
        folder = V2_ROOT + own[""].rstrip("/")
        found.append((2, folder, folder))
    cpu_mount, acct_mount = _v1_mount("cpu"), _v1_mount("cpuacct")
    cpu_path = acct_path = None
    for controllers, path in own.items():
        names = controllers.split(",")
        if "cpu" in names:
            cpu_path = path.rstrip("/")
        if "cpuacct" in names:
            acct_path = path.rstrip("/")
    if cpu_mount and acct_mount and cpu_path is not None and acct_path is not None:
        found.append((1, cpu_mount + cpu_path, acct_mount + acct_path))
    return found


def _set_cpu(path: str, version: int, cpus: float) -> None:
    quota = max(1000, int(cpus * CPU_PERIOD_US))
    if version == 2:
        _write(os.path.join(path, "cpu.weight"), "100")
        _write(os.path.join(path, "cpu.max"), f"{quota} {CPU_PERIOD_US}")
    else:
        _write(os.path.join(path, "cpu.shares"), "1024")
        _write(os.path.join(path, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
        _write(os.path.join(path, "cpu.cfs_quota_us"), str(quota))


def _make_cpu(version: int, cpu_folder: str, acct_folder: str, name: str, cpus: float):
    """The folders of a new CPU group (made and set, or OSError with nothing left behind)."""
    made: list[str] = []
    try:
        for folder in dict.fromkeys([cpu_folder, acct_folder]):
            os.mkdir(os.path.join(folder, name))
            made.append(os.path.join(folder, name))
        _set_cpu(os.path.join(cpu_folder, name), version, cpus)
    except OSError:
        for path in made:
            try:
                os.rmdir(path)
            except OSError:
                pass
        raise
    return made


@functools.cache
def cpu_available() -> tuple[int, str, str] | None:
    """Where submissions' CPU groups are made here: (version, cpu folder, CPU-time folder);
    None: nowhere (tried once)."""
    for version, cpu_folder, acct_folder in _cpu_candidates():
        name = f"normlab-probe-{os.getpid()}-{next(_counter)}"
        try:
            made = _make_cpu(version, cpu_folder, acct_folder, name, 1.0)
        except OSError:
            continue
        for path in made:
            try:
                os.rmdir(path)
            except OSError:
                pass
        return version, cpu_folder, acct_folder
    return None


class Cgroup:
    """A submission's cgroups: its memory total (``limit_bytes``; None: none) and its CPU share
    (``cpus``: at most that many cores' worth; None: none), made with their limits, emptied and
    removed at the end. ``paths``: every folder its first process joins (one per v1 hierarchy).
    """

    def __init__(self, limit_bytes: int | None, cpus: float | None = None):
        name = f"normlab-{os.getpid()}-{next(_counter)}"
        self.path: str | None = None  # the memory group's folder
        self.cpu_path: str | None = None  # the CPU group's folder (its share and quota)
        self.acct_path: str | None = None  # where its CPU time is counted
        self.paths: list[str] = []
        self.seen_oom_kills = 0
        self.limit = limit_bytes
        if limit_bytes is not None:
            where = available()
            if where is None:
                raise OSError("no cgroup can be made here")
            folder, self.version = where
            self.path = os.path.join(folder, name)
            os.mkdir(self.path)
            self.paths.append(self.path)
            try:
                _set_limit(self.path, self.version, limit_bytes)
            except OSError:
                self.remove()
                raise
        if cpus is not None:
            where_cpu = cpu_available()
            if where_cpu is None:
                self.remove()
                raise OSError("no CPU cgroup can be made here")
            self.cpu_version, cpu_folder, acct_folder = where_cpu
            self.cpu_path = os.path.join(cpu_folder, name)
            self.acct_path = os.path.join(acct_folder, name)
            if self.cpu_path == self.path:  # cgroup v2, both controllers: one folder
                _set_cpu(self.cpu_path, 2, cpus)
            else:
                try:
                    made = _make_cpu(self.cpu_version, cpu_folder, acct_folder, name, cpus)
                except OSError:
                    self.remove()
                    raise
                self.paths += made

    def cpu_seconds(self) -> float | None:
        """CPU time of all the submission's processes so far (None: no CPU group, or unread)."""
        if self.acct_path is None:
            return None
        try:
            if self.cpu_version == 1:
                with open(os.path.join(self.acct_path, "cpuacct.usage")) as stream:
                    return int(stream.read()) / 1e9
            with open(os.path.join(self.acct_path, "cpu.stat")) as stream:
                for line in stream:
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        return int(value) / 1e6
        except (OSError, ValueError):
            pass
        return None

    def threads(self) -> list[int]:
        """Every thread of the submission's processes (ids as the grader sees them)."""
        folder = self.cpu_path or self.path
        if folder is None:
            return []
        name = (
            "cgroup.threads" if os.path.exists(os.path.join(folder, "cgroup.threads")) else "tasks"
        )
        try:
            with open(os.path.join(folder, name)) as stream:
                return [int(line) for line in stream if line.strip()]
        except (OSError, ValueError):
            return []

    def run_delays(self) -> dict[int, float] | None:
        """Thread -> seconds it has waited for a CPU (None where the kernel does not say)."""
        found = {}
        for tid in self.threads():
            delay = read_run_delay(f"/proc/{tid}/schedstat")
            if delay is not None:
                found[tid] = delay
        if not found and read_run_delay("/proc/thread-self/schedstat") is None:
            return None
        return found

    def members(self) -> list[int]:
        found: set[int] = set()
        for folder in self.paths:
            try:
                with open(os.path.join(folder, "cgroup.procs")) as stream:
                    found |= {int(line) for line in stream if line.strip()}
            except (OSError, ValueError):
                pass
        return sorted(found)

    def oom_kills(self) -> int:
        """How many processes the kernel killed here for the memory limit."""
        if self.path is None:
            return 0
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
        for path in self.paths:
            for _ in range(200):  # a killed process leaves the cgroup once it is reaped
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
