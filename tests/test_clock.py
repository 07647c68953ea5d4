"""The rule that says whose time a call or a cell used (``isolation.clock``), on counts given
here: an endless loop's CPU time and an endless sleep's own wall time are the student's; a span
that waited for a CPU until its wall-time backstop is the machine's."""

from __future__ import annotations

import pytest

from normlab.grader.isolation import clock


class Counts:
    """A made-up wall clock and the submission's counts, advanced by the test."""

    def __init__(self, monkeypatch, cpu=True, waits=True):
        self.wall = self.cpu_time = self.waited = 0.0
        monkeypatch.setattr(clock.time, "monotonic", lambda: self.wall)
        self.cpu = (lambda: self.cpu_time) if cpu else None
        self.waits = (lambda: {"main": self.waited}) if waits else None

    def advance(self, wall: float, cpu: float = 0.0, waited: float = 0.0) -> None:
        self.wall += wall
        self.cpu_time += cpu
        self.waited += waited


def span(counts: Counts, budget=5.0, backstop=50.0) -> clock.Span:
    return clock.Span(budget, backstop, cpu=counts.cpu, waits=counts.waits)


def test_an_endless_loop_is_the_students_once_its_cpu_time_reaches_the_budget(monkeypatch):
    counts = Counts(monkeypatch)
    loop = span(counts)
    counts.advance(4.9, cpu=4.9)
    assert loop.verdict() is None
    counts.advance(0.1, cpu=0.1)
    assert loop.verdict() == clock.SPENT


def test_an_endless_sleep_is_the_students_once_its_own_wall_time_reaches_the_budget(monkeypatch):
    counts = Counts(monkeypatch)
    sleep = span(counts)
    counts.advance(4.9)
    assert sleep.verdict() is None and sleep.next_check() == pytest.approx(0.1)
    counts.advance(0.1)
    assert sleep.verdict() == clock.SPENT


def test_code_kept_waiting_for_a_cpu_runs_on_and_ends_as_the_machines_at_the_backstop(
    monkeypatch,
):
    counts = Counts(monkeypatch)
    slowed = span(counts)  # slowed twentyfold: 0.05 s of CPU per wall second, 0.95 s waited
    counts.advance(10.0, cpu=0.5, waited=9.5)
    assert slowed.verdict() is None  # twice the budget in wall time: not the student's
    assert slowed.used() == pytest.approx(0.5)
    counts.advance(39.9, cpu=1.995, waited=37.905)
    assert slowed.verdict() is None
    counts.advance(0.1, cpu=0.005, waited=0.095)
    assert slowed.verdict() == clock.BUSY


def test_the_longest_wait_of_any_thread_counts_and_a_new_thread_counts_from_zero(monkeypatch):
    counts = Counts(monkeypatch)
    threads = {"main": 100.0}
    counts.waits = lambda: dict(threads)
    slowed = span(counts)
    counts.advance(6.0, cpu=0.6)
    threads.update(main=100.5, late=5.4)  # the late thread waited 5.4 s of the 6
    assert slowed.verdict() is None and slowed.used() == pytest.approx(0.6)


def test_without_the_waits_a_sleep_ends_at_the_backstop_as_the_machines(monkeypatch):
    counts = Counts(monkeypatch, waits=False)
    sleep = span(counts)
    counts.advance(49.9)
    assert sleep.verdict() is None
    counts.advance(0.1)
    assert sleep.verdict() == clock.BUSY


def test_with_neither_count_only_the_backstop_ends_a_span_and_it_is_the_students(monkeypatch):
    counts = Counts(monkeypatch, cpu=False, waits=False)
    blind = span(counts)
    counts.advance(49.9)
    assert blind.verdict() is None and blind.used() == pytest.approx(4.99)
    counts.advance(0.1)
    assert blind.verdict() == clock.SPENT


def test_this_kernel_reports_a_threads_wait_for_a_cpu():
    assert clock.own_waits() is not None


def test_a_look_reads_the_counts_only_once_they_could_have_reached_a_limit(monkeypatch):
    """``look`` (the grader's wait on a reply or a request, once per piece of it) reads the
    counts again only when a limit could have been reached: CPU time grows by at most one
    second a second here, so a span 4 s into a 5 s budget cannot end before 1 s more."""
    counts = Counts(monkeypatch)
    reads = []
    cpu = counts.cpu
    counts.cpu = lambda: reads.append(1) or cpu()
    loop = span(counts)
    assert (loop.look(), len(reads)) == (pytest.approx(5.0), 2)  # the start, and one look
    counts.advance(4.0, cpu=4.0)
    assert (loop.look(), len(reads)) == (pytest.approx(1.0), 2)
    counts.advance(0.5, cpu=0.5)
    assert (loop.look(), len(reads)) == (pytest.approx(0.5), 2)
    counts.advance(0.5, cpu=0.5)
    assert (loop.look(), loop.ended, len(reads)) == (None, clock.SPENT, 3)
