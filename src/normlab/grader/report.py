"""Results -> what people read: the in-notebook report, the terminal table, JSON and CSV."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import html
import io
import json
import os
import re
import tempfile
from pathlib import Path

from normlab.grader.attribution import is_learner_code
from normlab.grader.core import CheckResult

PASS, FAIL = "✓", "✗"


class CheckReport:
    """The in-notebook report: one line per check, and for a failed check where and why."""

    def __init__(self, title: str, results: list[CheckResult]):
        self.title, self.results = title, results

    @property
    def score(self) -> tuple[int, int]:
        return sum(r.points for r in self.results), sum(r.max_points for r in self.results)

    def __str__(self) -> str:
        got, total = self.score
        lines = [f"{self.title}: {got}/{total} points"]
        for result in self.results:
            mark = PASS if result.passed else FAIL
            lines.append(f"  {mark} {result.name}  [{result.points}/{result.max_points}]")
            for line in result.message.splitlines():
                lines.append(f"      {line}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        got, total = self.score
        colour = "#1a7f37" if got == total else "#b35900"
        rows = []
        for result in self.results:
            mark = PASS if result.passed else FAIL
            tint = "#1a7f37" if result.passed else "#cf222e"
            message = ""
            if result.message:
                body = html.escape(result.message).replace("\n", "<br>")
                message = f'<div style="margin:2px 0 6px 1.6em;color:#444">{body}</div>'
            rows.append(
                f'<div><span style="color:{tint};font-weight:bold">{mark}</span> '
                f'{html.escape(result.name)} <span style="color:#666">'
                f"[{result.points}/{result.max_points}]</span>{message}</div>"
            )
        return (
            '<div style="font-family:system-ui,sans-serif;font-size:13px;line-height:1.4">'
            f'<div style="font-weight:bold;color:{colour}">{html.escape(self.title)}: '
            f"{got}/{total} points</div>{''.join(rows)}</div>"
        )


@dataclasses.dataclass
class SubmissionResult:
    """One graded notebook. ``as_dict`` is the JSON contract of ``normlab grade --json``."""

    path: str
    lab: str | None
    score: int
    max_score: int
    error: str | None
    checks: list[CheckResult]
    student: str | None = None
    #: indirection found in the notebook's source, for the instructor to review (not a score)
    findings: list[str] = dataclasses.field(default_factory=list)
    #: how the submission was run (sandbox or processes, and as which user)
    isolation: str | None = None

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "student": self.student,
            "lab": self.lab,
            "score": self.score,
            "max_score": self.max_score,
            "error": self.error,
            "checks": [c.as_dict() for c in self.checks],
            "findings": list(self.findings),
            "isolation": self.isolation,
        }

    @classmethod
    def from_dict(cls, data: dict) -> SubmissionResult:
        checks = [CheckResult(**check) for check in data["checks"]]
        findings = data.get("findings", [])
        if not isinstance(findings, list) or not all(isinstance(f, str) for f in findings):
            raise TypeError("findings is not a list of text")
        return cls(
            data["path"],
            data["lab"],
            data["score"],
            data["max_score"],
            data["error"],
            checks,
            data.get("student"),
            findings,
            data.get("isolation"),
        )


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file and a rename: readers see the old file or the new, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def to_json(results: list[SubmissionResult]) -> str:
    return json.dumps({"submissions": [r.as_dict() for r in results]}, indent=2, ensure_ascii=False)


def to_csv(results: list[SubmissionResult]) -> str:
    """The gradebook: one row per submission, one column per check (points earned).

    Columns: student, lab, score, max_score, error, path, then the checks in course order, then
    findings (indirection for the instructor to review, ``; ``-separated) and isolation. When
    several labs are graded together, a check's column is prefixed with its lab.
    """
    labs = {r.lab for r in results if r.lab}
    columns: list[str] = []
    for result in results:
        for check in result.checks:
            column = f"{result.lab}: {check.name}" if len(labs) > 1 else check.name
            if column not in columns:
                columns.append(column)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        ["student", "lab", "score", "max_score", "error", "path", *columns, "findings", "isolation"]
    )
    for result in sorted(results, key=lambda r: (r.student or "", r.lab or "", r.path)):
        points = {
            (f"{result.lab}: {c.name}" if len(labs) > 1 else c.name): c.points
            for c in result.checks
        }
        error = " ".join((result.error or "").split())
        writer.writerow(
            [
                result.student or "",
                result.lab or "",
                result.score,
                result.max_score,
                error,
                result.path,
            ]
            + [points.get(column, "") for column in columns]
            + ["; ".join(result.findings), result.isolation or ""]
        )
    return buffer.getvalue()


def feedback_markdown(result: SubmissionResult) -> str:
    """What a student gets back: score, then each check with its points and what to fix."""
    title = f"{result.lab or 'unknown lab'} — {result.student or Path(result.path).stem}"
    lines = [f"# {title}", "", f"**Score: {result.score} / {result.max_score}**", ""]
    if result.error:
        lines += [f"**{error_heading(result.error)}**", "", "```", result.error, "```", ""]
    if result.findings:
        lines += ["**For the instructor to review (from-scratch rule):**", ""]
        lines += [f"- {finding}" for finding in result.findings] + [""]
    for check in result.checks:
        mark = PASS if check.passed else FAIL
        lines.append(f"- {mark} {check.name} — {check.points}/{check.max_points}")
        for line in check.message.splitlines():
            lines.append(f"  > {line}")
    return "\n".join(lines) + "\n"


def feedback_html(result: SubmissionResult) -> str:
    title = html.escape(
        f"{result.lab or 'unknown lab'} — {result.student or Path(result.path).stem}"
    )
    body = CheckReport("Checks", result.checks)._repr_html_()
    error = ""
    if result.error:
        heading = html.escape(error_heading(result.error))
        error = f"<p><b>{heading}</b></p><pre>{html.escape(result.error)}</pre>"
    if result.findings:
        items = "".join(f"<li>{html.escape(f)}</li>" for f in result.findings)
        error += f"<p><b>For the instructor to review (from-scratch rule):</b></p><ul>{items}</ul>"
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>'
        f"<body><h1>{title}</h1><p><b>Score: {result.score} / {result.max_score}</b></p>"
        f"{error}{body}</body></html>\n"
    )


def error_heading(error: str) -> str:
    """How a report introduces a submission's error: the learner's code, or running it at all."""
    if is_learner_code(error):
        return "A cell of your notebook stopped (your code, not the grader):"
    return "Problem running the notebook:"


def error_label(error: str) -> str:
    return "YOUR CODE" if is_learner_code(error) else "ERROR"


def write_feedback(results: list[SubmissionResult], folder: Path) -> list[Path]:
    """``folder/STUDENT/LAB.md`` and ``.html`` for each result (file stem added on a clash)."""
    written, taken = [], set()
    for result in sorted(results, key=lambda r: r.path):
        student = safe_name(result.student or Path(result.path).stem)
        name = safe_name(result.lab or Path(result.path).stem)
        if (student, name) in taken:
            name = f"{name}-{safe_name(Path(result.path).stem)}"
        taken.add((student, name))
        for suffix, text in ((".md", feedback_markdown(result)), (".html", feedback_html(result))):
            target = Path(folder) / student / f"{name}{suffix}"
            write_atomically(target, text)
            written.append(target)
    return written


def safe_name(text: str) -> str:
    """A file-name-safe version of a student id or lab (no separators, no dot-files)."""
    cleaned = re.sub(r"[^\w.\- ]+", "_", text).strip(" .") or "unnamed"
    return cleaned[:100]


def to_table(results: list[SubmissionResult], verbose: bool = True) -> str:
    """A readable summary: one line per submission, then its failed checks."""
    lines = []
    width = max([len(r.path) for r in results] + [10])
    for result in results:
        error_lines = result.error.splitlines() if result.error else []
        lines.append(
            f"{result.path:<{width}}  {result.lab or '?':<18} {result.score:>3}/{result.max_score:<3}"
            + (f"  {error_label(result.error)}: {error_lines[0]}" if error_lines else "")
        )
        lines += [f"      {line}" for line in error_lines[1:]]
        if verbose:
            for check in result.checks:
                if not check.passed:
                    message = check.message.splitlines() or [""]
                    lines.append(f"    {FAIL} {check.name}: {message[0]}")
                    # The whole message: the "Why:" hints are on the lines after the first.
                    lines += [f"        {line}" for line in message[1:]]
    if len(results) > 1:
        got, total = sum(r.score for r in results), sum(r.max_score for r in results)
        lines.append(f"total: {got}/{total} points in {len(results)} notebooks")
    return "\n".join(lines)
