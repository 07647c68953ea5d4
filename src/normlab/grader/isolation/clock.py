"""Whose time a call, a cell or a whole submission used: the student's code's, or a busy machine's.

A budget that exists to stop endless loops counts the submission's own time, never the
machine's load. Over a span (one call, one cell, the whole notebook) the submission has used

* its **CPU time** (all its processes: its CPU group's counter, ``cgroup``; in the child, its
  own process's), and
* its **own wall time**: the wall time less the time it waited for a CPU, the longest such
  wait of any of its threads (``/proc/TID/schedstat``; the wait includes its CPU quota's
  throttling). Sleeping, or waiting for anything but a CPU, is not waiting for a CPU: an
  endless ``time.sleep`` uses no CPU, and its own wall time runs on.

The span is the **student's** to end (``SPENT``) when either reaches the budget: an endless loop
reaches it in CPU time, an endless sleep in own wall time, whatever the machine's load. Wall time
stays only as a backstop, ``Limits.wall_backstop`` times the budget: a span that reaches it
before either count reached the budget spent most of it waiting for a CPU, so the machine was
too busy (``BUSY``): reported as such, never as the student's, and never cached.

Where a count cannot be read, the rule uses what can: without the waits (no schedstat), a
sleep is stopped by the backstop and reported as the machine's; with neither (the grader's side
without a CPU group), the child's own clock stops its cells and calls, and the grader stops
only what is still running at the backstop, as the student's.
"""

from __future__ import annotations

import time
from collections.abc import Callable

SPENT = "spent"
BUSY = "busy"
#: the shortest wait between two looks at a span's counts (seconds of wall time)
MIN_TICK = 0.05


def read_run_delay(path: str) -> float | None:
    """Seconds a thread has spent runnable but waiting for a CPU (``/proc/…/schedstat``'s
    second field: the run queue, and a CPU quota's throttling), or None where unreadable."""
    try:
        with open(path, "rb") as stream:
            return int(stream.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def own_waits() -> dict[str, float] | None:
    """The calling thread's wait for a CPU so far (the child's clock), or None (unreadable)."""
    delay = read_run_delay("/proc/thread-self/schedstat")
    return None if delay is None else {"self": delay}


class Span:
    """One budget's span, from now.

    Args:
        budget: the submission's own seconds it may use (CPU time, or own wall time).
        backstop: wall seconds after which the span ends whatever the counts say.
        cpu: the submission's CPU seconds so far (a counter), or None where unknown.
        waits: thread -> seconds it has waited for a CPU so far, or None where unknown; a
            thread that starts during the span counts from 0.
        rate: how many CPU seconds the submission can use per wall second at most (its cores):
            how soon the CPU count can reach the budget.
    """

    def __init__(
        self,
        budget: float,
        backstop: float,
        cpu: Callable[[], float | None] | None = None,
        waits: Callable[[], dict | None] | None = None,
        rate: float = 1.0,
    ):
        self.budget, self.backstop, self.rate = budget, max(budget, backstop), max(1.0, rate)
        self._cpu, self._waits = cpu, waits
        self.start = time.monotonic()
        self.cpu_start = cpu() if cpu is not None else None
        self.waits_start = waits() if waits is not None else None
        #: the verdict that ended the span, once one has (set by whoever stops it)
        self.ended: str | None = None
        #: until this wall time (``time.monotonic``) no count can reach its limit (``look``)
        self._quiet_until = self.start

    def counts(self) -> tuple[float, float | None, float | None]:
        """(wall seconds, CPU seconds or None, longest wait for a CPU or None) so far."""
        wall = time.monotonic() - self.start
        cpu = None
        if self._cpu is not None and self.cpu_start is not None:
            now = self._cpu()
            cpu = None if now is None else max(0.0, now - self.cpu_start)
        waited = None
        if self._waits is not None and self.waits_start is not None:
            now_waits = self._waits()
            if now_waits is not None:
                start = self.waits_start
                waited = max((v - start.get(k, 0.0) for k, v in now_waits.items()), default=0.0)
                waited = min(wall, max(0.0, waited))
        return wall, cpu, waited

    def used(self) -> float:
        """The submission's own seconds over the span: the larger of its CPU time and its own
        wall time; with neither known, the wall time scaled to the budget by the backstop."""
        wall, cpu, waited = self.counts()
        known = [
            value for value in (cpu, None if waited is None else wall - waited) if value is not None
        ]
        if not known:
            return wall * self.budget / self.backstop if self.backstop > 0 else wall
        return max(known)

    def verdict(self) -> str | None:
        """``SPENT`` (the student's), ``BUSY`` (the machine's) or None (still running)."""
        return self._verdict(*self.counts())

    def _verdict(self, wall: float, cpu: float | None, waited: float | None) -> str | None:
        if cpu is not None and cpu >= self.budget:
            return SPENT
        if waited is not None and wall - waited >= self.budget:
            return SPENT
        if wall >= self.backstop:
            return BUSY if cpu is not None or waited is not None else SPENT
        return None

    def next_check(self) -> float:
        """Wall seconds before the budget could be reached, or the backstop (at least a tick)."""
        return self._next_check(*self.counts())

    def _next_check(self, wall: float, cpu: float | None, waited: float | None) -> float:
        left = self.backstop - wall
        if cpu is not None:
            left = min(left, (self.budget - cpu) / self.rate)
        if waited is not None:
            left = min(left, self.budget - (wall - waited))
        return max(MIN_TICK, left)

    def look(self) -> float | None:
        """Seconds to wait before looking again, or None once the span has ended (its verdict
        kept in ``ended``). The counts are read only when they could have reached a limit:
        ``next_check`` is the least wall time that takes (CPU time grows by at most ``rate`` a
        second, own wall time and wall time by one), so a reply read in many pieces, or a
        request written in many, costs one reading of the counts, not one or two a piece."""
        now = time.monotonic()
        if now < self._quiet_until:
            return self._quiet_until - now
        counts = self.counts()
        verdict = self._verdict(*counts)
        if verdict is not None:
            self.ended = verdict
            return None
        wait = self._next_check(*counts)
        self._quiet_until = now + wait
        return wait
