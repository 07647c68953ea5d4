"""What grading returns: one notebook's result (``SubmissionResult``, whose ``as_dict`` is the
JSON contract of ``normlab grade --json``), read back from JSON with every field checked, and the
in-notebook report of one lab's checks (``CheckReport``, door 1). ``write_atomically`` writes the
cache and every file made of results."""

from __future__ import annotations

import contextlib
import dataclasses
import html
import os
import re
import tempfile
from pathlib import Path

from normlab.grader import i18n, inert
from normlab.grader.core import CheckResult
from normlab.grader.identity import LAYOUTS

PASS, FAIL = "✓", "✗"


def html_text(value: str) -> str:
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
                body = html_text(text).replace("\n", "<br>")
                message = (
                    '<div style="margin:2px 0 6px 1.6em;color:#444;overflow-wrap:anywhere">'
                    f"{body}</div>"
                )
            rows.append(
                f'<div><span style="color:{tint};font-weight:bold">{mark}</span> '
                f'{html_text(i18n.translate(result.name, self.lang))} <span style="color:#666">'
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
