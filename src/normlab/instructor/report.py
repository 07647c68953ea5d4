"""Results -> what an instructor reads or sends: the terminal table, the JSON contract, the CSV
gradebook and each student's feedback (Markdown/HTML). The results themselves, and the
in-notebook report, are the engine's (``normlab.grader.results``)."""

from __future__ import annotations

import csv
import html
import io
import json
from pathlib import Path

from normlab.grader import i18n, inert
from normlab.grader.attribution import is_learner_code
from normlab.grader.results import (
    FAIL,
    PASS,
    CheckReport,
    SubmissionResult,
    html_text,
    write_atomically,
)


def language(result: SubmissionResult | None = None, lang: str | None = None) -> str:
    """The language a report is given in: ``lang`` (``--lang``), else the notebook's own
    (``metadata.normlab.lang``), else ``set_language``/``NORMLAB_LANG``, else English."""
    chosen = i18n.normalise(lang) or (i18n.normalise(result.lang) if result else None)
    return chosen or i18n.current_language()


# The two lines `normlab grade` frames its table with (on stderr), in the report's language.
ISOLATION_LINE = "normlab grade: isolation: {description}"
GRADED_LINE = (
    "graded {graded} notebook(s), reused {reused} unchanged from the cache, in {seconds} s"
)


def isolation_line(description: str, lang: str | None = None) -> str:
    """How the run isolates the submissions; the description's ", "-separated parts are texts
    of the catalog, each translated in turn."""
    shown = language(None, lang)
    parts = ", ".join(i18n.translate(part, shown) for part in description.split(", "))
    return i18n.text(ISOLATION_LINE, shown, description=parts)


def graded_line(results: list, graded: int, reused: int, seconds: float, lang=None) -> str:
    """The run's count and time, in the submissions' language when they share one."""
    shown = {language(r, lang) for r in results} or {language(None, lang)}
    shown = shown.pop() if len(shown) == 1 else language(None, lang)
    return i18n.text(GRADED_LINE, shown, graded=graded, reused=reused, seconds=f"{seconds:.1f}")


def to_json(results: list[SubmissionResult], lang: str | None = None) -> str:
    """The JSON contract; each submission's ``lang`` says which language its feedback is shown
    in (``message`` and ``error`` stay in English, the course's source text)."""
    submissions = []
    for result in results:
        data = result.as_dict()
        data["lang"] = language(result, lang)
        submissions.append(data)
    return inert.json_text(json.dumps({"submissions": submissions}, indent=2, ensure_ascii=False))


def to_csv(results: list[SubmissionResult]) -> str:
    """The gradebook: one row per submission, one column per check (points earned).

    Columns: student, lab, score, max_score, error, path, then the checks in course order, then
    findings (indirection for the instructor to review, ``; ``-separated), isolation and
    id_conflict (the other paths that claim this row's id for this lab, ``; ``-separated). When
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
    header = ["student", "lab", "score", "max_score", "error", "path", *columns]
    writer.writerow(inert.csv_row([*header, "findings", "isolation", "id_conflict"]))
    for result in sorted(results, key=lambda r: (r.student or "", r.lab or "", r.path)):
        points = {
            (f"{result.lab}: {c.name}" if len(labs) > 1 else c.name): c.points
            for c in result.checks
        }
        error = " ".join((result.error or "").split())
        writer.writerow(
            inert.csv_row(
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
                + ["; ".join(result.id_conflict)]
            )
        )
    return buffer.getvalue()


def _title(result: SubmissionResult, lang: str) -> str:
    lab = result.lab or i18n.text("unknown lab", lang)
    return f"{lab} — {result.student or Path(result.path).stem}"  # shown through inert


_FINDINGS = "For the instructor to review (from-scratch rule):"


def feedback_markdown(result: SubmissionResult, lang: str | None = None) -> str:
    """What a student gets back: score, then each check with its points and what to fix."""
    lang = language(result, lang)
    score = i18n.text(
        "Score: {score} / {max_score}", lang, score=result.score, max_score=result.max_score
    )
    # Every text that may hold what the student wrote goes through inert.markdown (one line) or
    # inert.code_block: no HTML, link, image or autolink is made of it, no fence is closed.
    lines = [f"# {inert.markdown(_title(result, lang))}", "", f"**{score}**", ""]
    if result.error:
        error = i18n.translate(result.error, lang)
        lines += [f"**{error_heading(result.error, lang)}**", "", *inert.code_block(error), ""]
    if result.findings:
        lines += [f"**{i18n.text(_FINDINGS, lang)}**", ""]
        lines += [f"- {inert.markdown(finding)}" for finding in result.findings] + [""]
    for check in result.checks:
        mark = PASS if check.passed else FAIL
        name = inert.markdown(i18n.translate(check.name, lang))
        lines.append(f"- {mark} {name} — {check.points}/{check.max_points}")
        for line in inert.text(i18n.translate(check.message, lang)).splitlines():
            lines.append(f"  > {inert.markdown(line)}")
    return "\n".join(lines) + "\n"


def feedback_html(result: SubmissionResult, lang: str | None = None) -> str:
    lang = language(result, lang)
    title = html_text(_title(result, lang))
    body = CheckReport("Checks", result.checks, lang)._repr_html_()
    error = ""
    if result.error:
        heading = html.escape(error_heading(result.error, lang))
        text = html_text(i18n.translate(result.error, lang))
        # a long line of the stopped cell's message wraps instead of widening the page
        wrapped = "white-space:pre-wrap;overflow-wrap:anywhere"
        error = f'<p><b>{heading}</b></p><pre style="{wrapped}">{text}</pre>'
    if result.findings:
        items = "".join(f"<li>{html_text(f)}</li>" for f in result.findings)
        error += f"<p><b>{html.escape(i18n.text(_FINDINGS, lang))}</b></p><ul>{items}</ul>"
    score = i18n.text(
        "Score: {score} / {max_score}", lang, score=result.score, max_score=result.max_score
    )
    return (
        f'<!DOCTYPE html>\n<html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title></head>'
        f"<body><h1>{title}</h1><p><b>{html.escape(score)}</b></p>"
        f"{error}{body}</body></html>\n"
    )


def error_heading(error: str, lang: str = i18n.DEFAULT) -> str:
    """How a report introduces a submission's error: the learner's code, or running it at all."""
    if is_learner_code(error):
        return i18n.text("A cell of your notebook stopped (your code, not the grader):", lang)
    return i18n.text("Problem running the notebook:", lang)


def error_label(error: str, lang: str = i18n.DEFAULT) -> str:
    return i18n.text("YOUR CODE" if is_learner_code(error) else "ERROR", lang)


def write_feedback(
    results: list[SubmissionResult], folder: Path, lang: str | None = None
) -> list[Path]:
    """``folder/STUDENT/LAB.md`` and ``.html`` for each result.

    STUDENT is ``inert.folder_name`` of the id, so that no two ids share a folder (``alice``
    and ``alice.``, ``Alice`` and ``alice`` on a case-insensitive disk); a second result of one
    student and lab gets the notebook's stem after the lab, then a number.
    """
    written, taken = [], set()
    for result in sorted(results, key=lambda r: r.path):
        stem = Path(result.path).stem
        student = inert.folder_name(result.student or stem)
        name = inert.folder_name(result.lab or stem)
        if (student.casefold(), name.casefold()) in taken:
            base = f"{result.lab or stem}-{stem}"
            name, number = inert.folder_name(base), 2
            while (student.casefold(), name.casefold()) in taken:
                name, number = inert.folder_name(f"{base}-{number}"), number + 1
        taken.add((student.casefold(), name.casefold()))
        pages = ((".md", feedback_markdown(result, lang)), (".html", feedback_html(result, lang)))
        for suffix, text in pages:
            target = Path(folder) / student / f"{name}{suffix}"
            write_atomically(target, text)
            written.append(target)
    return written


_CLAIMED = "the id {student} is also claimed for {lab} by:"


def to_table(results: list[SubmissionResult], verbose: bool = True, lang: str | None = None) -> str:
    """A readable summary: one line per submission, then its failed checks. What a submission
    wrote (its path, errors, messages) is shown through ``inert.text``: no terminal control."""
    lines = []
    width = max([len(inert.text(r.path, lines=False)) for r in results] + [10])
    for result in results:
        shown = language(result, lang)
        error = inert.text(i18n.translate(result.error, shown)) if result.error else ""
        error_lines = error.splitlines()
        label = error_label(result.error, shown) if result.error else ""
        path, lab = inert.text(result.path, lines=False), inert.text(result.lab or "?", lines=False)
        lines.append(
            f"{path:<{width}}  {lab:<18} {result.score:>3}/{result.max_score:<3}"
            + (f"  {label}: {error_lines[0]}" if error_lines else "")
        )
        lines += [f"      {line}" for line in error_lines[1:]]
        if result.id_conflict:
            claimed = i18n.text(_CLAIMED, shown, student=result.student, lab=result.lab)
            others = ", ".join(inert.text(other, lines=False) for other in result.id_conflict)
            lines.append(f"      ! {inert.text(claimed, lines=False)} {others}")
        if verbose:
            for check in result.checks:
                if not check.passed:
                    message = inert.text(i18n.translate(check.message, shown)).splitlines() or [""]
                    name = inert.text(i18n.translate(check.name, shown), lines=False)
                    lines.append(f"    {FAIL} {name}: {message[0]}")
                    # The whole message: the "Why:" hints are on the lines after the first.
                    lines += [f"        {line}" for line in message[1:]]
    if len(results) > 1:
        got, total = sum(r.score for r in results), sum(r.max_score for r in results)
        # in the submissions' language when they share one
        shown = {language(r, lang) for r in results}
        shown = shown.pop() if len(shown) == 1 else language(None, lang)
        total_line = "total: {got}/{total} points in {count} notebooks"
        lines.append(i18n.text(total_line, shown, got=got, total=total, count=len(results)))
    return "\n".join(lines)
