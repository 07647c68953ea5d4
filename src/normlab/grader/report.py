"""Results -> what people read: the in-notebook report, the terminal table, JSON and CSV."""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json

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

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "lab": self.lab,
            "score": self.score,
            "max_score": self.max_score,
            "error": self.error,
            "checks": [c.as_dict() for c in self.checks],
        }


def to_json(results: list[SubmissionResult]) -> str:
    return json.dumps({"submissions": [r.as_dict() for r in results]}, indent=2, ensure_ascii=False)


def to_csv(results: list[SubmissionResult]) -> str:
    """One row per submission: path, lab, score, max_score, error, then one column per check."""
    check_names: list[str] = []
    for result in results:
        check_names += [c.name for c in result.checks if c.name not in check_names]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["path", "lab", "score", "max_score", "error", *check_names])
    for result in results:
        points = {c.name: c.points for c in result.checks}
        writer.writerow(
            [result.path, result.lab or "", result.score, result.max_score, result.error or ""]
            + [points.get(name, "") for name in check_names]
        )
    return buffer.getvalue()


def to_table(results: list[SubmissionResult], verbose: bool = True) -> str:
    """A readable summary: one line per submission, then its failed checks."""
    lines = []
    width = max([len(r.path) for r in results] + [10])
    for result in results:
        lines.append(
            f"{result.path:<{width}}  {result.lab or '?':<14} {result.score:>3}/{result.max_score:<3}"
            + (f"  ERROR: {result.error.splitlines()[0]}" if result.error else "")
        )
        if verbose:
            for check in result.checks:
                if not check.passed:
                    first = check.message.splitlines()[0] if check.message else ""
                    lines.append(f"    {FAIL} {check.name}: {first}")
    return "\n".join(lines)
