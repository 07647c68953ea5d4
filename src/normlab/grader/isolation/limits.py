"""Every limit of ``normlab grade`` in one object.

The command line changes a few of them (``--timeout``, ``--memory``); the rest are fixed here
and only here. ``docs/grading.md`` shows them in a table that a test compares with this file.
"""

from __future__ import annotations

import dataclasses

MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one submission may use. Part of the cache key: change one and everything regrades."""

    #: wall seconds for the whole submission (loading, calls, restarts); ``--timeout``
    timeout: float = 60.0
    #: in MiB; ``--memory``. With a cgroup: one total of ``memory_mb + tmp_mb`` for all the
    #: submission's processes and files; without one: the address space of each process
    memory_mb: int = 3072
    #: wall seconds for one call of a learner's function
    call_timeout: float = 5.0
    #: share of the budget one notebook cell may use (and at least ``min_cell_timeout``)
    cell_timeout_share: float = 0.25
    min_cell_timeout: float = 5.0
    #: CPU seconds beyond the wall budget (the CPU limit is budget + this)
    cpu_slack: int = 5
    #: times a dead child is restarted for the remaining checks
    max_restarts: int = 2
    #: bytes of any one file the submission writes
    max_file_bytes: int = 64 * MiB
    #: processes and threads of the submission's user (when it runs as its own user)
    max_processes: int = 256
    #: everything the submission writes, in MiB: the sandbox's private /tmp (its working
    #: folder), or outside the sandbox its private working folder (the rest is read-only);
    #: either way a tmpfs, so RAM beside ``memory_mb``
    tmp_mb: int = 256
    #: files and folders in that private folder outside the sandbox (each costs kernel memory
    #: even when empty; bubblewrap's tmpfs cannot bound the count)
    max_files: int = 65536
    #: size of a notebook file; a larger one is rejected before it is read
    max_notebook_bytes: int = 16 * MiB
    #: nesting depth of a notebook's JSON
    max_json_depth: int = 100
    #: tokens (names, numbers, punctuation) of one code cell that the grader parses to analyse
    #: it; a larger cell still runs, but is not parsed: a finding, and no from-scratch points
    max_cell_tokens: int = 25_000
    #: tokens of all the code cells of one notebook that the grader parses (the same rule)
    max_code_tokens: int = 100_000
    #: JSON header of one reply from the child
    max_header_bytes: int = 1 * MiB
    #: arrays in one reply
    max_arrays: int = 64
    #: all the arrays of one reply together (bounded parent memory per reply)
    max_reply_bytes: int = 256 * MiB
    #: seconds to wait for the fork server to hand out a child before replacing it
    fork_server_wait: float = 10.0
    #: seconds a new child may take to start (imports) before it runs any learner code
    startup_wait: float = 300.0

    def cell_timeout(self, remaining: float) -> float:
        return max(self.min_cell_timeout, self.cell_timeout_share * remaining)

    def cpu_seconds(self, remaining: float) -> int:
        return max(self.cpu_slack, int(remaining) + self.cpu_slack)


DEFAULT = Limits()
