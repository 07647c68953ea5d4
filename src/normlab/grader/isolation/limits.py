"""Every limit of ``normlab grade`` in one object, each described where it is defined.

The command line changes any of them (``--timeout``, ``--memory``, ``--limit NAME=VALUE``).
Each field carries its unit and what it bounds; ``docs/grading.md``'s limits table and
``--limit``'s help are generated from them (``python -m normlab.grader.isolation.limits
--update docs/grading.md`` rewrites the table; a test fails when it is stale).

Numbers that are not limits an instructor could set (how long to wait for a killed process to
be reaped, the margin between a call's alarm in the child and the parent's deadline) are named
constants beside the code that uses them, each with its reason.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

MiB = 1 << 20

#: units a limit is given in, and how the table shows its value
UNITS = {"s": "s", "MB": "MB", "bytes": "MB", "count": "", "share": "", "times": "times"}


def limit(default, unit: str, help: str, option: str | None = None):
    """A field of ``Limits``: its default, its unit (a key of ``UNITS``) and what it bounds,
    as the documentation says it; ``option``: the command-line option that sets it, if any
    (otherwise ``--limit NAME=VALUE``)."""
    assert unit in UNITS, unit
    return dataclasses.field(
        default=default, metadata={"unit": unit, "help": help, "option": option}
    )


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one submission may use. Part of the cache key: change one and everything regrades."""

    timeout: float = limit(
        60.0,
        "s",
        "the whole submission's own time (`--timeout`): the CPU time of all its processes, or "
        "its wall time less the time it waited for a CPU, whichever is more (see "
        "`wall_backstop`)",
        option="--timeout",
    )
    memory_mb: int = limit(
        3072,
        "MB",
        'with a cgroup (the run\'s isolation line says "one memory total per submission"): one '
        "total of `memory_mb + tmp_mb` for all the submission's processes and files together; "
        "without one (no cgroup can be made here), only the address space of each of its "
        "processes, separately: six processes may then hold six times `memory_mb` (`--memory`)",
        option="--memory",
    )
    call_timeout: float = limit(
        5.0,
        "s",
        "one call of a learner's function, in the same own time (not called again after)",
    )
    cell_timeout_share: float = limit(
        0.25, "share", "one notebook cell, in the same own time, as a share of what is left"
    )
    min_cell_timeout: float = limit(5.0, "s", "... but never less than")
    wall_backstop: float = limit(
        10.0,
        "times",
        "wall time a call, a cell or the whole submission may take, as a multiple of its "
        "budget: past it, it spent most of its time waiting for a CPU, and is stopped as the "
        "machine being too busy (never the student's; not cached)",
    )
    cpus: float = limit(
        1.0,
        "count",
        "cores' worth of CPU time all the submission's processes together may use at once, "
        "with one share of the machine between them, whatever their sessions (a `cpu` "
        "cgroup; the run's isolation line says whether there is one)",
    )
    cpu_slack: int = limit(
        5, "s", "CPU time of each process beyond what is left of the budget (`RLIMIT_CPU`)"
    )
    max_restarts: int = limit(2, "count", "restarts of a child that died, for the remaining checks")
    max_file_bytes: int = limit(
        64 * MiB,
        "bytes",
        "any one file the submission writes (writing more fails in the notebook)",
    )
    max_processes: int = limit(
        256,
        "count",
        "processes and threads the submission may add (its user's, `RLIMIT_NPROC`)",
    )
    tmp_mb: int = limit(
        256,
        "MB",
        "everything the submission writes, in all its files: the sandbox's working folder "
        "(`/home/notebook`), or outside the sandbox its private working folder (a tmpfs either "
        "way)",
    )
    max_files: int = limit(
        65536,
        "count",
        "files and folders in that folder (small and empty files cost kernel memory that the "
        "size does not count); in the sandbox when the grader is root",
    )
    max_notebook_bytes: int = limit(
        16 * MiB, "bytes", "a notebook file (a larger one is rejected unread)"
    )
    max_json_depth: int = limit(100, "count", "nesting of a notebook's JSON")
    max_cell_tokens: int = limit(
        25_000,
        "count",
        "tokens (names, numbers, punctuation) of one code cell that the grader parses to "
        "analyse it; a larger cell still runs, but is not parsed: a finding, and the lab's "
        "from-scratch checks earn nothing",
    )
    max_code_tokens: int = limit(
        100_000,
        "count",
        "tokens of all the code cells of a notebook that the grader parses (past it, the same "
        "rule)",
    )
    max_header_bytes: int = limit(1 * MiB, "bytes", "the JSON header of one reply")
    max_arrays: int = limit(64, "count", "arrays in one reply")
    max_reply_bytes: int = limit(
        256 * MiB, "bytes", "all arrays of one reply together: the grader's memory per reply"
    )
    fork_server_wait: float = limit(
        10.0, "s", "waiting for the fork server before replacing it (not charged)"
    )
    startup_wait: float = limit(
        300.0,
        "s",
        "a new child's start-up (imports, before any learner code; not charged)",
    )
    shown_output_chars: int = limit(
        300,
        "count",
        "characters of any one text of the submission's that a message quotes (an answer, a "
        "returned value's type, an exception's message, a traceback, a name in a finding, a "
        "dead process's last output): a longer text is cut, its length stated",
    )
    max_message_chars: int = limit(
        4000,
        "count",
        "characters of one message, error or finding of a result (a check's own message is at "
        "most about 1,100): a longer one is cut, its length stated, before the result reaches "
        "the cache, the gradebook, the table or the feedback",
    )

    def cell_timeout(self, remaining: float) -> float:
        return max(self.min_cell_timeout, self.cell_timeout_share * remaining)

    def cpu_seconds(self, remaining: float) -> int:
        return max(self.cpu_slack, int(remaining) + self.cpu_slack)

    @property
    def output_tail_bytes(self) -> int:
        """Bytes of the log read for ``shown_output_chars`` characters of it: a third more, so
        that multi-byte characters and trailing blank space still leave as many to show."""
        return self.shown_output_chars + self.shown_output_chars // 3


DEFAULT = Limits()


def shown_value(field: dataclasses.Field) -> str:
    """A limit's default as the table shows it: ``60 s``, ``16 MB``, ``0.25``, ``65536``."""
    value, unit = field.default, field.metadata["unit"]
    if unit == "bytes":
        value = value // MiB
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value} {UNITS[unit]}".strip()


def markdown_table() -> str:
    """``docs/grading.md``'s limits table, one row per field of ``Limits``."""
    rows = [
        "| limit (`normlab.grader.isolation.limits.Limits`) | what it bounds | value |",
        "|---|---|---|",
    ]
    for field in dataclasses.fields(Limits):
        rows.append(f"| `{field.name}` | {field.metadata['help']} | {shown_value(field)} |")
    return "\n".join(rows) + "\n"


def option_help() -> str:
    """Help for ``--limit NAME=VALUE``: every limit it may set, with its default (in the
    field's own unit: bytes for ``*_bytes``)."""
    names = [
        f"{field.name}={field.default}"
        for field in dataclasses.fields(Limits)
        if field.metadata["option"] is None
    ]
    return (
        "set a limit of docs/grading.md's table; repeatable; seconds, bytes or counts, as "
        "the defaults: " + ", ".join(names)
    )


TABLE_START = "<!-- limits table: generated from normlab.grader.isolation.limits -->\n"
TABLE_END = "<!-- end of the limits table -->\n"


def with_table(document: str) -> str:
    """``document`` with the text between the table's two markers replaced by the table."""
    pattern = re.compile(re.escape(TABLE_START) + ".*?" + re.escape(TABLE_END), re.DOTALL)
    if not pattern.search(document):
        raise ValueError("the document has no limits table markers")
    return pattern.sub(lambda _: TABLE_START + markdown_table() + TABLE_END, document, count=1)


def main(argv: list[str]) -> int:
    """``--update FILE``: rewrite FILE's limits table; otherwise print the table."""
    if len(argv) == 2 and argv[0] == "--update":
        path = Path(argv[1])
        path.write_text(with_table(path.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
