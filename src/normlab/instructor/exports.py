"""What ``normlab export`` can write: one table, read by the command and by the docs.

Each entry names an export, what its ``OUT`` is, a line saying what it writes, whether it reads
graded results (``--results``, the JSON of ``normlab grade --json`` or ``normlab merge --json``)
and the options only it reads. ``cli.py`` builds the subcommand's choices, options and description
from :data:`EXPORTS`; ``docs/instructors.md`` carries :func:`markdown_table`, and
``tests/test_cli.py`` keeps the two equal. A new export is one writer and one entry here.

A writer takes ``(out, results, options)``: the path given as ``OUT``, the checked results
(``normlab.grader.results.SubmissionResult``; None for an export that reads none) and its
options by name. It returns the line ``normlab export`` prints when it has written everything,
prints its warnings on stderr, and raises :class:`ExportError` for a usage error (exit status
2).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from normlab.instructor.gradescope import VISIBILITIES


class ExportError(Exception):
    """The export cannot be written as asked (``normlab export`` exits with status 2)."""


@dataclasses.dataclass(frozen=True)
class Option:
    """An option of ``normlab export`` that one export reads: argparse's flag and settings."""

    flag: str
    settings: dict

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


@dataclasses.dataclass(frozen=True)
class Export:
    name: str
    #: what ``OUT`` is (the file or folder written)
    out: str
    #: what it writes, in a line
    summary: str
    write: Callable[[Path, list | None, dict], str]
    #: reads ``--results``
    reads_results: bool = True
    options: tuple[Option, ...] = ()


def _written(out: Path, text: str) -> str:
    from normlab.instructor import report

    report.write_atomically(out, text)
    return f"wrote {out}"


def _canvas(out: Path, results: list, options: dict) -> str:
    from normlab.grader import i18n, inert
    from normlab.instructor import lms

    submissions = [result.as_dict() for result in results]
    missing = lms.canvas_ids_missing(submissions)
    if missing:
        shown = ", ".join(str(inert.text(student, lines=False)) for student in missing)
        print(
            i18n.text(
                "normlab export canvas: {count} ids are not from Canvas's download, so their "
                "rows have no ID (Canvas's user id): {ids}; fill it in (the ID column of "
                "Canvas's gradebook export) before importing",
                count=len(missing),
                ids=shown,
            ),
            file=sys.stderr,
        )
    return _written(out, lms.canvas_csv(submissions))


def _summary(out: Path, results: list, options: dict) -> str:
    from normlab.instructor import lms

    return _written(out, lms.class_summary([result.as_dict() for result in results]))


def _moodle(out: Path, results: list, options: dict) -> str:
    """Per lab, a grading worksheet and a feedback-files zip, all rendered before any is
    written."""
    from normlab.grader import inert
    from normlab.instructor import lms, report

    submissions = [result.as_dict() for result in results]
    files: dict[Path, str | bytes] = {}
    for lab in sorted({s["lab"] for s in submissions if s.get("lab")}):
        files[out / f"moodle-{lab}.csv"] = lms.moodle_csv(submissions, lab)
        archive, left_out = lms.moodle_feedback_zip(results, lab)
        files[out / f"moodle-{lab}-feedback.zip"] = archive
        if left_out:
            print(
                f"normlab export: {len(left_out)} submissions of {lab} have no Moodle "
                "participant number (their id is not from Moodle's download), so no row in "
                "the worksheet and no folder in the feedback zip: "
                + ", ".join(inert.text(path, lines=False) for path in left_out),
                file=sys.stderr,
            )
    for path, content in files.items():
        report.write_atomically(path, content)
    return f"wrote {out}"


def _gradescope(out: Path, results: None, options: dict) -> str:
    from normlab.grader.registry import all_labs
    from normlab.instructor.gradescope import BundleError, write_bundle

    lab = options["lab"]
    if lab not in all_labs():
        raise ExportError(f"--lab must be one of {', '.join(all_labs())}")
    extra = Path(options["extra_checks"]) if options["extra_checks"] else None
    try:
        write_bundle(out, lab, extra, options["extra_visibility"], options["require_sandbox"])
    except BundleError as error:
        raise ExportError(str(error)) from None
    return f"wrote the Gradescope autograder for {lab} to {out} (zip its contents)"


EXPORTS: dict[str, Export] = {
    export.name: export
    for export in (
        Export(
            "canvas",
            "OUT.csv",
            "Canvas's gradebook import (Grades → Import): one row per student, a column per lab",
            _canvas,
        ),
        Export(
            "moodle",
            "OUTDIR",
            "per lab, the grading worksheet moodle-LAB.csv and the feedback-files zip "
            "moodle-LAB-feedback.zip",
            _moodle,
        ),
        Export(
            "summary",
            "OUT.csv",
            "the class summary: one row per student, a column per lab, the total",
            _summary,
        ),
        Export(
            "gradescope",
            "OUTDIR",
            "a Gradescope autograder bundle for the lab --lab STEM (zip its contents)",
            _gradescope,
            reads_results=False,
            options=(
                Option("--lab", {"help": "the lab this assignment is (e.g. 03_layernorm)"}),
                Option("--extra-checks", {"metavar": "FILE.py", "help": "hidden checks"}),
                Option(
                    "--extra-visibility",
                    {
                        "choices": list(VISIBILITIES),
                        "default": "after_due_date",
                        "help": "when students see the hidden checks' results (default "
                        "after_due_date)",
                    },
                ),
                Option(
                    "--require-sandbox",
                    {
                        "action": "store_true",
                        "help": "grade only under bubblewrap (no grade where the container "
                        "forbids it)",
                    },
                ),
            ),
        ),
    )
}


def description() -> str:
    """The description of ``normlab export --help``, one clause per export."""
    reading = [e.name for e in EXPORTS.values() if e.reads_results]
    each = "; ".join(f"{e.name} {e.out}: {e.summary}" for e in EXPORTS.values())
    return (
        f"{each}. {', '.join(reading[:-1])} and {reading[-1]} read --results (the JSON of "
        "`normlab grade --json` or `normlab merge --json`)."
    )


def markdown_table() -> str:
    """The exports as the Markdown table of ``docs/instructors.md``."""
    lines = ["| export | `OUT` | reads `--results` | writes |", "|---|---|---|---|"]
    for e in EXPORTS.values():
        options = "".join(f" `{o.flag}`" for o in e.options)
        reads = "yes" if e.reads_results else f"no; options:{options}"
        lines.append(f"| `{e.name}` | `{e.out}` | {reads} | {e.summary} |")
    return "\n".join(lines) + "\n"
