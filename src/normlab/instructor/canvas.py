"""``normlab report canvas``: each student's score, comment and HTML feedback, pushed to Canvas.

The requests, as Canvas's API reference gives them (read in the ``instructure/canvas-lms``
repository, whose API pages are generated from it: the ``@API`` comments of
``app/controllers/submissions_api_controller.rb`` and
``app/controllers/submission_comments_api_controller.rb``, and ``doc/api/file_uploads.md``;
on the web, canvas.instructure.com/doc/api/submissions.html, submission_comments.html and
file_uploads.html):

0. Once, ``GET /api/v1/courses/:course_id/assignments/:assignment_id`` ("Get a single
   assignment" of the Assignments API): its ``points_possible``, which must be the lab's
   points, or scores are scaled to it (``--scale``), or nothing is sent.
1. ``GET /api/v1/courses/:course_id/assignments/:assignment_id/submissions/:user_id``
   ``?include[]=submission_comments`` ("Get a single submission"): the score and comments
   Canvas has now.
2. Only where the comment is not there yet, "Upload a file" of the Submission Comments API and
   "Uploading via POST" of the file-upload page: ``POST .../submissions/:user_id/comments/files``
   with ``name``, ``size`` and ``content_type`` (form-encoded), which answers ``upload_url``
   and ``upload_params``; then a ``multipart/form-data`` POST to ``upload_url`` of every
   ``upload_params`` entry as given and ``file`` last, *without* the token ("The access token
   is not sent with this request"); then the confirmation: a 3XX answer's ``Location`` is
   fetched with a GET that carries the token, a 201's ``Location`` (or its body) gives the
   file's JSON, whose ``id`` is the file's id.
3. ``PUT .../submissions/:user_id`` ("Grade or comment on a submission"), form-encoded:
   ``submission[posted_grade]`` (points), ``comment[text_comment]`` and
   ``comment[file_ids][]`` (the uploaded page).

The page is ``report.feedback_html`` of the student's own result, the one ``normlab grade
--feedback`` writes: every text a submission chose is escaped in it, so it carries no markup.

Idempotent: the comment ends with a tag that names the lab and the hash of the comment's text;
a comment with that tag already there is neither uploaded nor posted again, and a score Canvas
already has is not posted again, so a rerun sends nothing but the reads and what is missing.

It finishes, or says exactly what is left: a student Canvas does not have (404 on the read) is
skipped and named; a request Canvas throttles (429, or the ``403 Forbidden (Rate Limit
Exceeded)`` of ``doc/api/throttling.md``) is sent again after ``Retry-After`` or 1, 2, 4, ...
s (at most ``MAX_WAIT_S`` each, ``THROTTLE_TRIES`` tries), then the push stops; a read that
fails with a 5xx is tried again (``READ_TRIES``), a write never is; a ``PUT`` that fails is
checked by reading the submission back (a ``PUT`` Canvas carried out before failing counts as
done), and otherwise the page uploaded for it is deleted (Files API, ``DELETE
/api/v1/files/:id``), or, where Canvas refuses that, named. That student is left and named,
the rest pushed; a permission Canvas refuses (401, any other 403) or a broken connection stops
the push. Every student not pushed is listed at the end (exit status 1).

What a submission chose never steers a request: the user id in each path is the Canvas user id
written by Canvas's download (``layout`` ``canvas``), or the one the instructor's ``--roster``
maps an id of another layout to, digits only; any other result is skipped and named; the file
is named after the instructor's ``--lab``, restricted to ``[A-Za-z0-9._-]``; the student's
texts are form values of the comment and bytes of the page. The token comes from
``CANVAS_TOKEN`` or ``--token-file``, travels only in the ``Authorization`` header, only to
``--url``'s own scheme, host and port (never to ``upload_url``, never to a ``Location``
elsewhere), never through a redirect (none is followed blindly), and is never printed.

Plain ``urllib`` rather than ``canvasapi``: the requests are few, and the client's
upload did not do what the file-upload page asks. Its ``Uploader`` (``canvasapi/upload.py``,
read in ``ucfopen/canvasapi``) posts to ``upload_url`` without the token, as it should, but
leaves the redirect to ``requests``, so the confirming GET goes out without the token the page
requires; and its ``Submission.upload_comment`` also edits the submission, which posts an
empty comment or attaches the file to an earlier one (ucfopen/canvasapi issues 496 and 631).
The push needs the upload, the comment and the score in one ``PUT`` to stay idempotent.
"""

from __future__ import annotations

import datetime
import email.utils
import hashlib
import html
import json
import math
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from normlab.grader import i18n, inert

_USER_ID = re.compile(r"[0-9]{1,20}")
_NUMBER = re.compile(r"[0-9]{1,20}")
_FILE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_MOST = 1 << 24  # bytes read from any answer
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_UNSENT = "<not sent: dry run>"


def comment_text(submission: dict) -> str:
    """The comment: the one-line result (as Moodle's worksheet gives it), as plain text, and
    the tag that makes a rerun find it."""
    from normlab.instructor.lms import feedback_comment

    text = html.unescape(feedback_comment(submission))
    digest = hashlib.sha256(f"{submission['lab']}\n{text}".encode()).hexdigest()[:12]
    return f"{text}\n[normlab {submission['lab']} {digest}]"


def file_name(lab: str) -> str:
    """The attached page's name: the lab's, in ``[A-Za-z0-9._-]`` only."""
    return (_FILE_NAME.sub("_", lab).strip("._") or "feedback")[:64] + ".html"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects come back as answers: urllib would otherwise resend our headers (the token)
    to wherever a ``Location`` points."""

    def redirect_request(self, *args, **kwargs):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


def _safe_url(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in _LOOPBACK)


def multipart(fields: dict, name: str, data: bytes) -> tuple[bytes, str]:
    """``fields`` in order, then the file, as ``multipart/form-data``; (body, content type)."""
    boundary = "normlab-" + hashlib.sha256(data).hexdigest()[:32]
    chunks = []
    for key, value in fields.items():
        key, value = str(key), "" if value is None else str(value)
        if any(c in key for c in '\r\n"') or boundary in value:
            raise ValueError("upload_params holds a field that multipart cannot carry")
        chunks.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'
        )
    chunks.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        "Content-Type: text/html\r\n\r\n"
    )
    body = "".join(chunks).encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


#: attempts of one request that Canvas throttles (429, or its documented 403 "Rate Limit
#: Exceeded"), the first included; then the push stops and says what is left
THROTTLE_TRIES = 6
#: attempts of a read (GET) that Canvas answers with a server error (5xx); a write is never
#: sent twice (a PUT that failed may have been applied: the push reads back instead)
READ_TRIES = 3
#: the longest wait obeyed, in seconds (a longer ``Retry-After`` is cut to this)
MAX_WAIT_S = 60.0
#: how the push waits (tests replace it: no test sleeps)
sleep = time.sleep


class CanvasError(Exception):
    """Canvas (or the upload host) answered a request with an error status."""

    def __init__(self, method: str, where: str, status: int, raw=b"", throttled=False, tries=1):
        self.method, self.where, self.status = method, where, status
        self.throttled, self.tries = throttled, tries
        detail = raw[:200].decode("utf-8", "replace").strip()
        super().__init__(
            f"{method} {where}: {status}" + (f" {inert.one_line(detail)}" if detail else "")
        )


def _throttled(status: int, headers: dict, raw: bytes) -> bool:
    """Canvas's throttle: a 429, or (doc/api/throttling.md of ``instructure/canvas-lms``) a
    ``403 Forbidden (Rate Limit Exceeded)``, whose ``X-Rate-Limit-Remaining`` is not positive.
    Any other 403 is a permission Canvas refuses."""
    if status == 429:
        return True
    if status != 403:
        return False
    if b"rate limit exceeded" in raw[:4096].lower():
        return True
    remaining = {k.lower(): v for k, v in headers.items()}.get("x-rate-limit-remaining")
    try:
        return remaining is not None and float(remaining) <= 0
    except ValueError:
        return False


def _wait(headers: dict, attempt: int) -> float:
    """Seconds before the next attempt: ``Retry-After`` (seconds or an HTTP date) where Canvas
    gives it, else 1, 2, 4, ... s; never more than ``MAX_WAIT_S``."""
    given = {k.lower(): v for k, v in headers.items()}.get("retry-after")
    seconds = float(2**attempt)
    if given is not None:
        try:
            seconds = float(given)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(given)
                seconds = (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
            except (TypeError, ValueError, IndexError, OverflowError):
                pass
    return min(max(seconds, 0.0), MAX_WAIT_S) if math.isfinite(seconds) else MAX_WAIT_S


class Canvas:
    """The requests, against ``base`` (``https://canvas.example.edu``)."""

    def __init__(self, base: str, token: str, dry_run: bool = False):
        self.base, self.token, self.dry_run = base.rstrip("/"), token, dry_run
        self.waited = 0.0  # seconds spent waiting for Canvas's throttle, in all

    def _show(self, method: str, where: str, shown: str) -> None:
        # every request is printed (the token, in a header, never is)
        print(f"{method} {inert.one_line(where)} {inert.one_line(shown)}".rstrip())

    def _send(self, request: urllib.request.Request) -> tuple[int, dict, bytes]:
        """(status, headers, body) of a request, whatever its status; a redirect is an answer,
        not followed."""
        try:
            with _OPENER.open(request, timeout=30) as response:  # noqa: S310 -- https or loopback
                status, headers, raw = response.status, response.headers, response.read(_MOST)
        except urllib.error.HTTPError as error:
            status, headers, raw = error.code, error.headers, error.read(_MOST)
        return status, dict((headers or {}).items()), raw

    def _answer(self, make, method: str, where: str) -> tuple[int, dict, dict]:
        """(status, headers, JSON body) of the request ``make()`` builds, sent again after a
        throttle (``THROTTLE_TRIES``) or, for a read, a server error (``READ_TRIES``), waiting
        as ``_wait`` says; CanvasError for any other error, or when the tries run out."""
        for attempt in range(THROTTLE_TRIES):
            status, headers, raw = self._send(make())
            throttled = _throttled(status, headers, raw)
            again = throttled or (method == "GET" and status >= 500 and attempt + 1 < READ_TRIES)
            if status < 400 or not again or attempt + 1 == THROTTLE_TRIES:
                break
            pause = _wait(headers, attempt)
            sleep(pause)
            self.waited += pause
        if status >= 400:
            raise CanvasError(method, where, status, raw, throttled, attempt + 1)
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = {}
        return status, headers, data if isinstance(data, dict) else {}

    def request(self, method: str, path: str, form: dict | list | None = None) -> dict:
        """A call of Canvas's API at ``path`` (or a URL on Canvas's own host), with the token."""
        body = urllib.parse.urlencode(form).encode() if form else None
        self._show(method, path, urllib.parse.unquote_plus(body.decode()) if body else "")
        if self.dry_run:  # nothing is sent: as if Canvas had no score and no comment yet
            return {}
        url = path if "://" in path else self.base + path
        if _origin(url) != _origin(self.base):
            raise ValueError(f"{url} is not on {self.base}: the token is not sent there")

        def make():
            request = urllib.request.Request(url, data=body, method=method)
            request.add_header("Authorization", f"Bearer {self.token}")
            if body:
                request.add_header("Content-Type", "application/x-www-form-urlencoded")
            return request

        status, _headers, data = self._answer(make, method, path)
        if 300 <= status < 400:
            raise ValueError(f"{method} {path}: Canvas answered a redirect ({status})")
        return data

    def upload(self, path: str, name: str, data: bytes) -> str:
        """The three steps of "Uploading via POST"; the new file's id."""
        ticket = self.request(
            "POST", path, {"name": name, "size": str(len(data)), "content_type": "text/html"}
        )
        target = ticket.get("upload_url") if not self.dry_run else _UNSENT
        fields = ticket.get("upload_params") if not self.dry_run else {}
        if not isinstance(target, str) or not isinstance(fields, dict):
            raise ValueError(f"POST {path}: no upload_url and upload_params in the answer")
        self._show(
            "POST", target, f"[multipart, no token] upload_params + file={name} ({len(data)} bytes)"
        )
        if self.dry_run:
            self._show("GET", "<Location of the upload's answer>", "")
            return _UNSENT
        if not _safe_url(target):
            raise ValueError(f"POST {path}: upload_url is not https")
        body, kind = multipart(fields, name, data)

        def make():
            request = urllib.request.Request(target, data=body, method="POST")
            request.add_header("Content-Type", kind)  # and no Authorization: another host, maybe
            return request

        status, headers, answer = self._answer(make, "POST", "upload_url")
        location = {k.lower(): v for k, v in headers.items()}.get("location")
        if 300 <= status < 400 or (status == 201 and location):
            if not location:
                raise ValueError(f"the upload answered {status} without a Location")
            location = urllib.parse.urljoin(target, location)
            if (
                status == 201
                and answer.get("id") is not None
                and _origin(location) != _origin(self.base)
            ):
                confirmed = answer
            else:
                confirmed = self.request("GET", location)
        else:
            confirmed = answer
        file_id = str(confirmed.get("id", ""))
        if not _NUMBER.fullmatch(file_id):
            raise ValueError(f"the upload's confirmation gave no file id ({status})")
        return file_id


_NOT_A_USER_ID = (
    "normlab report canvas: {user} is not a Canvas user id (from a Canvas download): skipped"
)
_NOT_FROM_CANVAS = (
    "normlab report canvas: {path}: the id {user} comes from the {layout} layout, not from "
    "Canvas's download, and no --roster maps it to a Canvas user: skipped"
)
_NO_LAYOUT = (
    "normlab report canvas: {path}: the results do not say where the id {user} came from "
    "(graded by an older normlab: grade again): skipped"
)
_SHARED_USER = (
    "normlab report canvas: {paths} all address Canvas user {target}: skipped; decide which "
    "is the student's (a roster maps one id to one Canvas user)"
)


def read_roster(path: Path) -> dict[str, str]:
    """``--roster``: normlab's student id -> Canvas user id, from a CSV whose header names the
    columns ``student`` (the id ``normlab grade`` gave: the ``student`` of its CSV and JSON) and
    ``canvas_user_id`` (the ``ID`` column of Canvas's gradebook export). ValueError names a
    row that is not one student, one Canvas user."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
    header = [cell.strip().lower() for cell in rows[0]] if rows else []
    if "student" not in header or "canvas_user_id" not in header:
        raise ValueError(
            i18n.text(
                "{path}: the roster's first row must name the columns student and canvas_user_id",
                path=str(inert.text(str(path), lines=False)),
            )
        )
    column, target_column = header.index("student"), header.index("canvas_user_id")
    roster: dict[str, str] = {}
    users: dict[str, str] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        student = row[column].strip() if len(row) > column else ""
        target = row[target_column].strip() if len(row) > target_column else ""
        problem = None
        if not student or not _USER_ID.fullmatch(target):
            problem = i18n.text("a row needs a student id and a Canvas user id (digits)")
        elif roster.get(student, target) != target:
            problem = i18n.text("this student is mapped to two Canvas users")
        elif users.get(target, student) != student:
            problem = i18n.text("this Canvas user is mapped from two students")
        if problem is not None:
            where = str(inert.text(str(path), lines=False))
            raise ValueError(
                i18n.text("{path}, row {row}: {problem}", path=where, row=number, problem=problem)
            )
        roster[student], users[target] = target, student
    return roster


def _address(result, roster: dict[str, str]) -> tuple[str | None, str | None]:
    """(the Canvas user a result is for, or None and why not).

    Only Canvas's download writes a Canvas user id into a file's name (``identity.py``): an id
    read from another layout (a plain file name a student chose, a folder, Moodle's participant
    number, a Gradescope sid) addresses nobody in Canvas unless the instructor's roster maps it.
    """
    user = result.student or ""
    fields = {
        "user": str(inert.text(user, lines=False)),
        "path": str(inert.text(result.path, lines=False)),
    }
    if result.layout == "canvas":
        if _USER_ID.fullmatch(user):
            return user, None
        return None, i18n.text(_NOT_A_USER_ID, user=fields["user"])
    if user in roster:
        return roster[user], None
    if result.layout is None:
        return None, i18n.text(_NO_LAYOUT, **fields)
    return None, i18n.text(_NOT_FROM_CANVAS, layout=result.layout, **fields)


def choose(results: list, lab: str, roster: dict[str, str] | None = None):
    """([(Canvas user id, the result posted to them)], [(a result skipped, why)]).

    Several files of one Canvas user in Canvas's download are that user's: the best counts
    (``classreport.best_per_student``). Any other two results that address one Canvas user
    (two files that claim one mapped id, a mapped id and a Canvas file) are all skipped: which
    is the student's is the instructor's call.
    """
    from normlab.instructor.classreport import best_per_student

    roster = roster or {}
    by_user: dict[str, list] = {}
    skipped: list[str] = []
    for result in sorted((r for r in results if r.lab == lab), key=lambda r: r.path):
        target, why = _address(result, roster)
        if target is None:
            skipped.append((result, why))
        else:
            by_user.setdefault(target, []).append(result)
    chosen = []
    for target, group in sorted(by_user.items(), key=lambda item: int(item[0])):
        from_canvas = {(r.layout == "canvas", r.student) for r in group}
        if len(group) == 1 or from_canvas == {(True, target)}:
            chosen.append((target, best_per_student(group, lab)[0]))
            continue
        paths = ", ".join(str(inert.text(r.path, lines=False)) for r in group)
        why = i18n.text(_SHARED_USER, paths=paths, target=target)
        skipped += [(result, why) for result in group]
    return chosen, skipped


_MISSING = (
    "normlab report canvas: Canvas has no submission of user {user} for this assignment "
    "(404; {path}): skipped"
)
_THROTTLED = (
    "normlab report canvas: Canvas still throttled {request} after {tries} tries (status "
    "{status}, rate limit exceeded): stopped"
)
_REFUSED = (
    "normlab report canvas: Canvas refused {request} ({status}): the token lacks a permission "
    "this push needs (grading this assignment): stopped"
)
_FAILED = "normlab report canvas: user {user} ({path}) not pushed: {error}"
_FILE_LEFT = (
    "normlab report canvas: the feedback page uploaded for user {user} (file {file}) is "
    "attached to nothing and could not be deleted: delete it in Canvas (DELETE /api/v1/files/{file})"
)
_STOPPED = "normlab report canvas: {error}: stopped"
_LEFT = (
    "normlab report canvas: {count} not pushed: {users}; run the same command again to push "
    "them (what Canvas already has is not sent again)"
)


class Unfinished(Exception):
    """One student's push failed part-way: ``error`` why; ``file`` the id of an uploaded page
    that no comment shows and that could not be deleted (None: nothing is left on Canvas)."""

    def __init__(self, error: Exception, file: str | None = None):
        super().__init__(str(error))
        self.error, self.file = error, file


def _has_comment(now: dict, tag: str) -> bool:
    comments = now.get("submission_comments") or []
    return any(tag in str(c.get("comment", "")) for c in comments if isinstance(c, dict))


def posted_grade(score: int, most: int, points: float | None) -> str:
    """The grade posted for ``score`` of ``most``: as it is, or, with the assignment's
    ``points`` (``--scale``), ``score * points / most`` to two decimals."""
    if points is None or most <= 0 or points == most:
        return str(int(score))
    return f"{score * points / most:.2f}".rstrip("0").rstrip(".")


def _same_grade(canvas_score: object, grade: str) -> bool:
    if isinstance(canvas_score, bool) or not isinstance(canvas_score, (int, float)):
        return False
    return abs(canvas_score - float(grade)) < 0.005


def _after_failed_put(canvas: Canvas, path: str, tag: str, file_id: str) -> str:
    """What a ``PUT`` that failed left behind: ``"applied"`` (Canvas has the comment after
    all: it failed after it was done), ``"deleted"`` (the page uploaded for it is deleted
    again, Files API "Delete file"), or ``"left"`` (neither could be done)."""
    try:
        if _has_comment(canvas.request("GET", path + "?include[]=submission_comments"), tag):
            return "applied"
        canvas.request("DELETE", f"/api/v1/files/{file_id}")
        return "deleted"
    except (CanvasError, urllib.error.URLError, OSError, ValueError):
        return "left"


def push_one(canvas: Canvas, path: str, result, lang=None, points=None) -> list[str]:
    """One student's score, comment and page where Canvas lacks them; what was posted
    (``graded``, ``commented``, ``attached``) or ``["unchanged"]``. Unfinished when a write
    failed, with the upload deleted again or named."""
    from normlab.instructor import report

    submission = result.as_dict()
    now = canvas.request("GET", path + "?include[]=submission_comments")
    comment = comment_text(submission)
    tag = comment.rsplit("\n", 1)[1]
    form, file_id = [], None
    grade = posted_grade(submission["score"], submission["max_score"], points)
    if not _same_grade(now.get("score"), grade):
        form.append(("submission[posted_grade]", grade))
    if not _has_comment(now, tag):
        page = report.feedback_html(result, lang).encode("utf-8")
        name = file_name(submission["lab"] or "feedback")
        try:
            file_id = canvas.upload(path + "/comments/files", name, page)
        except CanvasError as error:
            raise Unfinished(error) from error
        form += [("comment[text_comment]", comment), ("comment[file_ids][]", file_id)]
    if not form:
        return ["unchanged"]
    try:
        canvas.request("PUT", path, form)
    except (CanvasError, urllib.error.URLError, OSError, ValueError) as error:
        left = _after_failed_put(canvas, path, tag, file_id) if file_id else "deleted"
        if left != "applied":
            raise Unfinished(error, file_id if left == "left" else None) from error
    names = {key for key, _ in form}
    posted = {"submission[posted_grade]": "graded", "comment[text_comment]": "commented"}
    posted["comment[file_ids][]"] = "attached"
    return [posted[key] for key in posted if key in names]


def push(
    chosen: list,
    canvas: Canvas,
    course: str,
    assignment: str,
    lang: str | None = None,
    points: float | None = None,
    write=None,
) -> dict:
    """Post each (user, result)'s score, comment and page where Canvas lacks them.

    A student Canvas does not have (404) is skipped and named; a write that fails leaves that
    student for a rerun (named, with any page uploaded for it deleted again, or named too); a
    throttle that outlasts ``THROTTLE_TRIES``, a permission Canvas refuses, the network or a
    request the push will not make stops it. ``points``: the assignment's points when scores
    are scaled (``--scale``). Returns the counts by outcome and ``left``: the (user, result)
    pairs not pushed, which the same command pushes when run again.
    """
    write = write or (lambda line: print(line, file=sys.stderr))
    done = {"graded": 0, "commented": 0, "attached": 0, "unchanged": 0, "skipped": 0}
    left: list = []
    for index, (user, result) in enumerate(chosen):
        if not _USER_ID.fullmatch(user):  # choose() addresses digits only; a backstop
            raise ValueError(f"{inert.text(user, lines=False)} is not a Canvas user id")
        path = f"/api/v1/courses/{course}/assignments/{assignment}/submissions/{user}"
        shown = str(inert.text(result.path, lines=False))
        try:
            outcome = push_one(canvas, path, result, lang, points)
        except (CanvasError, Unfinished) as failure:
            error = failure.error if isinstance(failure, Unfinished) else failure
            if isinstance(failure, Unfinished) and failure.file is not None:
                write(i18n.text(_FILE_LEFT, user=user, file=failure.file))
            if (
                isinstance(error, CanvasError)
                and error.status == 404
                and (error.method, error.where) == ("GET", path + "?include[]=submission_comments")
            ):  # the read: Canvas has no such student here (final, not left for a rerun)
                write(i18n.text(_MISSING, user=user, path=shown))
                done["skipped"] += 1
                continue
            stop = _stop_message(error)
            if stop is not None:
                write(stop)
                left += chosen[index:]
                break
            write(i18n.text(_FAILED, user=user, path=shown, error=str(inert.text(error))))
            left.append((user, result))
            continue
        except (urllib.error.URLError, OSError, ValueError) as error:
            write(i18n.text(_STOPPED, error=str(inert.text(error))))
            left += chosen[index:]
            break
        for kind in outcome:
            done[kind] += 1
    if left:
        users = ", ".join(f"{user} ({inert.text(r.path, lines=False)})" for user, r in left)
        write(i18n.text(_LEFT, count=len(left), users=users))
    return {**done, "left": left}


def _stop_message(error: Exception) -> str | None:
    """Why an error stops the whole push (None: it concerns one student only)."""
    if not isinstance(error, CanvasError):
        return i18n.text(_STOPPED, error=str(inert.text(error)))
    request = f"{error.method} {inert.one_line(error.where)}"
    if error.throttled:
        return i18n.text(_THROTTLED, request=request, tries=error.tries, status=error.status)
    if error.status in (401, 403):
        return i18n.text(_REFUSED, request=request, status=error.status)
    return None


_POINTS = (
    "normlab report canvas: the assignment is worth {points} points in Canvas and {lab} is "
    "graded out of {most}: give --scale to post each score times {points}/{most}, or make the "
    "assignment worth {most} points; nothing was sent"
)
_NO_POINTS = (
    "normlab report canvas: the assignment has no points in Canvas (points_possible: "
    "{points}): give it points, then push; nothing was sent"
)
_NO_ASSIGNMENT = (
    "normlab report canvas: Canvas has no assignment {assignment} in course {course} (404); "
    "nothing was sent"
)


def points_possible(canvas: Canvas, course: str, assignment: str) -> object:
    """The assignment's ``points_possible`` ("Get a single assignment" of the Assignments
    API); None in a dry run (nothing is read)."""
    found = canvas.request("GET", f"/api/v1/courses/{course}/assignments/{assignment}")
    return None if canvas.dry_run else found.get("points_possible")


def scale_for(points: object, chosen: list, lab: str, scale: bool) -> tuple[float | None, str]:
    """(the points to scale scores to, or None to post them as they are; "" or why nothing
    may be sent): the assignment's points must be the lab's, unless ``scale``."""
    if isinstance(points, bool) or not isinstance(points, (int, float)) or not points > 0:
        return None, i18n.text(_NO_POINTS, points=json.dumps(points))
    most = sorted({r.max_score for _, r in chosen})
    if all(m == points for m in most):
        return None, ""
    if not scale:
        shown = f"{points:g}"
        return None, i18n.text(
            _POINTS, points=shown, lab=lab, most="/".join(str(m) for m in most) or "?"
        )
    return float(points), ""


def _token(args) -> str:
    if args.token_file:
        return Path(args.token_file).read_text(encoding="utf-8").strip()
    return os.environ.get("CANVAS_TOKEN", "").strip()


def run(args) -> int:
    """``normlab report canvas RESULTS.json --url URL --course ID --assignment ID --lab STEM``:
    0 when every student addressed is on Canvas or skipped (and named), 1 when some are left
    for a rerun (named), 2 for a usage error or a refusal before anything was sent."""
    from normlab.grader.results import results_from_json

    if not _safe_url(args.url):
        print(i18n.text("normlab report canvas: --url must be https://"), file=sys.stderr)
        return 2
    if not (_NUMBER.fullmatch(args.course) and _NUMBER.fullmatch(args.assignment)):
        print(
            i18n.text("normlab report canvas: --course and --assignment are Canvas's numbers"),
            file=sys.stderr,
        )
        return 2
    token = "" if args.dry_run else _token(args)
    if not token and not args.dry_run:
        print(
            i18n.text("normlab report canvas: set CANVAS_TOKEN or give --token-file"),
            file=sys.stderr,
        )
        return 2
    try:
        payload = json.loads(Path(args.results).read_text(encoding="utf-8"))
        results = results_from_json(payload.get("submissions"), unique=False)
    except (OSError, ValueError, RecursionError, AttributeError) as error:
        print(f"normlab report canvas: {inert.text(error)}", file=sys.stderr)
        return 2
    try:
        roster = read_roster(Path(args.roster)) if args.roster else {}
    except (OSError, ValueError, UnicodeDecodeError) as error:
        print(f"normlab report canvas: {inert.text(error)}", file=sys.stderr)
        return 2
    chosen, skipped = choose(results, args.lab, roster)
    for why in dict.fromkeys(why for _, why in skipped):  # once each
        print(why, file=sys.stderr)
    canvas = Canvas(args.url, token, args.dry_run)
    # the error names the request, never the token (it is only in a header)
    try:  # read only when there is something to post
        points = points_possible(canvas, args.course, args.assignment) if chosen else None
    except CanvasError as error:
        if error.status == 404:
            message = i18n.text(_NO_ASSIGNMENT, assignment=args.assignment, course=args.course)
        else:
            message = _stop_message(error) or f"normlab report canvas: {inert.text(error)}"
        print(message, file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as error:
        print(i18n.text(_STOPPED, error=str(inert.text(error))), file=sys.stderr)
        return 1
    scaled = None
    if chosen and not args.dry_run:
        scaled, refused = scale_for(points, chosen, args.lab, args.scale)
        if refused:
            print(refused, file=sys.stderr)
            return 2
    done = push(chosen, canvas, args.course, args.assignment, points=scaled)
    done["skipped"] += len(skipped)
    line = i18n.text(
        "{lab}: {graded} scores, {commented} comments and {attached} feedback pages posted, "
        "{unchanged} already there, {skipped} skipped",
        lab=args.lab,
        **{k: v for k, v in done.items() if k != "left"},
    )
    if scaled is not None:
        line += " " + i18n.text("(scores scaled to {points} points)", points=f"{scaled:g}")
    if args.dry_run:
        line += " " + i18n.text("(dry run: nothing was sent)")
    print(line)
    return 1 if done["left"] else 0
