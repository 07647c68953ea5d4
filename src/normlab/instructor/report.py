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

from normlab.grader import i18n, inert
from normlab.grader.attribution import is_learner_code
from normlab.grader.core import CheckResult
from normlab.grader.identity import LAYOUTS

PASS, FAIL = "✓", "✗"


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


def _html(value: str) -> str:
    """Text for HTML: unsafe characters as visible escapes (``inert.text``), then escaped."""
    return html.escape(inert.text(value))


class CheckReport:
    """The in-notebook report: one line per check, and for a failed check where and why.

    Results hold the English messages; the report shows them in ``lang`` (check names, hints and
    headings translated, numbers and identifiers as they are)."""

    def __init__(self, title: str, results: list[CheckResult], lang: str | None = None):
        self.title, self.results = title, results
        self.lang = i18n.normalise(lang) or i18n.DEFAULT

    def _points(self, got: int, total: int) -> str:
        return i18n.text(
            "{title}: {got}/{total} points",
            self.lang,
            title=i18n.translate(self.title, self.lang),
            got=got,
            total=total,
        )

    @property
    def score(self) -> tuple[int, int]:
        return sum(r.points for r in self.results), sum(r.max_points for r in self.results)

    def __str__(self) -> str:
        got, total = self.score
        lines = [self._points(got, total)]
        for result in self.results:
            mark = PASS if result.passed else FAIL
            name = i18n.translate(result.name, self.lang)
            lines.append(f"  {mark} {name}  [{result.points}/{result.max_points}]")
            for line in i18n.translate(result.message, self.lang).splitlines():
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
                text = i18n.translate(result.message, self.lang)
                body = _html(text).replace("\n", "<br>")
                message = (
                    '<div style="margin:2px 0 6px 1.6em;color:#444;overflow-wrap:anywhere">'
                    f"{body}</div>"
                )
            rows.append(
                f'<div><span style="color:{tint};font-weight:bold">{mark}</span> '
                f'{_html(i18n.translate(result.name, self.lang))} <span style="color:#666">'
                f"[{result.points}/{result.max_points}]</span>{message}</div>"
            )
        return (
            '<div style="font-family:system-ui,sans-serif;font-size:13px;line-height:1.4">'
            f'<div style="font-weight:bold;color:{colour}">{html.escape(self._points(got, total))}'
            f"</div>{''.join(rows)}</div>"
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
    #: the language of the learner's feedback (the notebook's ``metadata.normlab.lang``, or
    #: ``--lang``); None: the default. Messages are kept in English and translated when shown.
    lang: str | None = None
    #: the student's display name, as the LMS's layout gives it (``identity.py``)
    name: str | None = None
    #: the paths of the other submissions of this lab that claim the same student id (empty:
    #: none); the instructor decides which is the student's
    id_conflict: list[str] = dataclasses.field(default_factory=list)
    #: the layout the id was read from (``identity.LAYOUTS``: ``"canvas"`` means Canvas's own
    #: download wrote it, so it is a Canvas user id); None in results of an older grader
    layout: str | None = None
    #: False when the result is not the submission's doing (its process was killed from
    #: outside): never cached, regraded on the next run. Not part of the JSON.
    cacheable: bool = dataclasses.field(default=True, compare=False)

    def bounded(self, chars: int) -> SubmissionResult:
        """This result with its error, each check's message and each finding cut to ``chars``
        characters, their length stated (``inert.clip``): what one submission may put in the
        cache, the gradebook, the table and the feedback (``Limits.max_message_chars``)."""
        checks = [
            dataclasses.replace(check, message=inert.clip(check.message, chars))
            for check in self.checks
        ]
        return dataclasses.replace(
            self,
            error=None if self.error is None else inert.clip(self.error, chars),
            checks=checks,
            findings=[inert.clip(finding, chars) for finding in self.findings],
        )

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
            "lang": self.lang,
            "name": self.name,
            "id_conflict": list(self.id_conflict),
            "layout": self.layout,
        }

    @classmethod
    def from_dict(cls, data: dict) -> SubmissionResult:
        """A result read back from JSON (the cache, ``normlab merge``, ``normlab export``): every
        field is checked by type and bound (ValueError says which), since the file is data."""
        if not isinstance(data, dict):
            raise ValueError("a submission is not a JSON object")
        checks = data.get("checks")
        if not isinstance(checks, list):
            raise ValueError("checks is not a list")
        results = [_check_from_dict(check) for check in checks]
        path = _field(data, "path", str)
        if not path:
            raise ValueError("path is empty")
        score, max_score = _field(data, "score", int), _field(data, "max_score", int)
        if not 0 <= score <= max_score:
            raise ValueError(f"score {score} is not between 0 and max_score {max_score}")
        if results and (
            score != sum(c.points for c in results)
            or max_score != sum(c.max_points for c in results)
        ):
            raise ValueError(
                f"score {score}/{max_score} is not the sum of its checks' points "
                f"{sum(c.points for c in results)}/{sum(c.max_points for c in results)}"
            )
        if not results and score:
            raise ValueError(f"score {score} without a check")
        lab = _field(data, "lab", str, optional=True)
        if lab is not None and not _LAB_STEM.fullmatch(lab):
            raise ValueError(f"lab {inert.text(repr(lab))} is not a lab's stem")
        findings = data.get("findings", [])
        if not isinstance(findings, list) or not all(isinstance(f, str) for f in findings):
            raise ValueError("findings is not a list of text")
        lang = data.get("lang")
        if lang is not None and i18n.normalise(lang) is None:
            raise ValueError(f"lang {inert.text(repr(lang))} is not a language of the course")
        name = _field(data, "name", str, optional=True)
        others = data.get("id_conflict", [])
        if not isinstance(others, list) or not all(isinstance(p, str) for p in others):
            raise ValueError("id_conflict is not a list of text")
        layout = _field(data, "layout", str, optional=True)
        if layout is not None and layout not in LAYOUTS:
            raise ValueError(
                f"layout {inert.text(repr(layout))} is not one of {', '.join(LAYOUTS)}"
            )
        return cls(
            path,
            lab,
            score,
            max_score,
            _field(data, "error", str, optional=True),
            results,
            _field(data, "student", str, optional=True),
            findings,
            _field(data, "isolation", str, optional=True),
            i18n.normalise(lang),
            name,
            others,
            layout,
        )


_LAB_STEM = re.compile(r"\d\d_[a-z0-9_]+")


def _field(data: dict, key: str, kind: type, optional: bool = False):
    value = data.get(key)
    if value is None and optional:
        return None
    # bool is an int to Python, never to a gradebook
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        wanted = {int: "an integer", str: "text"}[kind]
        raise ValueError(f"{key} is not {wanted}" + (" or null" if optional else ""))
    return value


_CHECK_FIELDS = {"name", "points", "max_points", "passed", "message"}


def _probes_field(data: dict) -> tuple[str, ...]:
    """A check's ``probes``: at most 3 short texts, none for a passed check (absent: none, as
    results written before the field)."""
    probes = data.get("probes", [])
    if (
        not isinstance(probes, list)
        or len(probes) > 3
        or not all(isinstance(p, str) and 0 < len(p) <= 200 for p in probes)
        or (probes and data.get("passed") is True)
    ):
        raise ValueError("a check's probes are not at most 3 names of a failed check")
    return tuple(probes)


def _check_from_dict(data: object) -> CheckResult:
    if not isinstance(data, dict) or set(data) - {"probes"} != _CHECK_FIELDS:
        raise ValueError("a check is not {name, points, max_points, passed, message[, probes]}")
    points, most = _field(data, "points", int), _field(data, "max_points", int)
    if not 0 <= points <= most:
        raise ValueError(f"a check's points {points} are not between 0 and {most}")
    if not isinstance(data["passed"], bool):
        raise ValueError("a check's passed is not true or false")
    if points != (most if data["passed"] else 0):  # a check earns all its points or none
        raise ValueError(f"a check with {points}/{most} points has passed {data['passed']}")
    return CheckResult(
        _field(data, "name", str),
        points,
        most,
        data["passed"],
        _field(data, "message", str),
        probes=_probes_field(data),
    )


def results_from_json(submissions: object, unique: bool = True) -> list[SubmissionResult]:
    """``normlab grade --json``'s submissions, each checked (``from_dict``); ``unique``: no path
    given twice (as one run grades). Two submissions of one lab that claim one student id are
    not refused: as in one run, both keep it and are flagged (``identity.flag_conflicts``)."""
    if not isinstance(submissions, list):
        raise ValueError("submissions is not a list")
    results, paths = [], set()
    for number, data in enumerate(submissions, 1):
        try:
            result = SubmissionResult.from_dict(data)
        except ValueError as error:
            raise ValueError(f"submission {number}: {error}") from None
        if unique and result.path in paths:
            raise ValueError(f"submission {number}: {inert.text(result.path)} is given twice")
        paths.add(result.path)
        results.append(result)
    return results


def write_atomically(path: Path, text: str | bytes) -> None:
    """Write via a temporary file and a rename: readers see the old file or the new, never half.
    ``text`` as UTF-8, or bytes as they are."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if isinstance(text, bytes):
            with os.fdopen(handle, "wb") as stream:
                stream.write(text)
        else:
            with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
                stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


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
    title = _html(_title(result, lang))
    body = CheckReport("Checks", result.checks, lang)._repr_html_()
    error = ""
    if result.error:
        heading = html.escape(error_heading(result.error, lang))
        text = _html(i18n.translate(result.error, lang))
        # a long line of the stopped cell's message wraps instead of widening the page
        wrapped = "white-space:pre-wrap;overflow-wrap:anywhere"
        error = f'<p><b>{heading}</b></p><pre style="{wrapped}">{text}</pre>'
    if result.findings:
        items = "".join(f"<li>{_html(f)}</li>" for f in result.findings)
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
