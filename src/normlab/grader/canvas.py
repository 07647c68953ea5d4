"""``normlab report canvas``: each student's score, comment and HTML feedback, pushed to Canvas.

The requests, as Canvas's API reference gives them (read in the ``instructure/canvas-lms``
repository, whose API pages are generated from it: the ``@API`` comments of
``app/controllers/submissions_api_controller.rb`` and
``app/controllers/submission_comments_api_controller.rb``, and ``doc/api/file_uploads.md``;
on the web, canvas.instructure.com/doc/api/submissions.html, submission_comments.html and
file_uploads.html):

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
already has is not posted again, so a rerun sends nothing but the reads. (A run stopped
between the upload and the ``PUT`` leaves a file no comment shows; the rerun uploads again.)

What a submission chose never steers a request: the user id in each path is the Canvas user id
of the download (``normlab grade``'s student id), digits only, any other is skipped; the file
is named after the instructor's ``--lab``, restricted to ``[A-Za-z0-9._-]``; the student's
texts are form values of the comment and bytes of the page. The token comes from
``CANVAS_TOKEN`` or ``--token-file``, travels only in the ``Authorization`` header, only to
``--url``'s own scheme, host and port (never to ``upload_url``, never to a ``Location``
elsewhere), never through a redirect (none is followed blindly), and is never printed.

Plain ``urllib`` rather than ``canvasapi``: the four requests are few, and the client's
upload did not do what the file-upload page asks. Its ``Uploader`` (``canvasapi/upload.py``,
read in ``ucfopen/canvasapi``) posts to ``upload_url`` without the token, as it should, but
leaves the redirect to ``requests``, so the confirming GET goes out without the token the page
requires; and its ``Submission.upload_comment`` also edits the submission, which posts an
empty comment or attaches the file to an earlier one (ucfopen/canvasapi issues 496 and 631).
The push needs the upload, the comment and the score in one ``PUT`` to stay idempotent.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import sys
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
    from normlab.grader.lms import feedback_comment

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


class Canvas:
    """The requests, against ``base`` (``https://canvas.example.edu``)."""

    def __init__(self, base: str, token: str, dry_run: bool = False):
        self.base, self.token, self.dry_run = base.rstrip("/"), token, dry_run

    def _show(self, method: str, where: str, shown: str) -> None:
        # every request is printed (the token, in a header, never is)
        print(f"{method} {inert.one_line(where)} {inert.one_line(shown)}".rstrip())

    def _send(self, request: urllib.request.Request) -> tuple[int, dict, dict]:
        """(status, headers, JSON body) of a request; a redirect is an answer, not followed."""
        try:
            with _OPENER.open(request, timeout=30) as response:  # noqa: S310 -- https or loopback
                status, headers, raw = response.status, response.headers, response.read(_MOST)
        except urllib.error.HTTPError as error:
            if not 300 <= error.code < 400:
                raise
            status, headers, raw = error.code, error.headers, error.read(_MOST)
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = {}
        return status, dict(headers.items()), data if isinstance(data, dict) else {}

    def request(self, method: str, path: str, form: dict | list | None = None) -> dict:
        """A call of Canvas's API at ``path`` (or a URL on Canvas's own host), with the token."""
        body = urllib.parse.urlencode(form).encode() if form else None
        self._show(method, path, urllib.parse.unquote_plus(body.decode()) if body else "")
        if self.dry_run:  # nothing is sent: as if Canvas had no score and no comment yet
            return {}
        url = path if "://" in path else self.base + path
        if _origin(url) != _origin(self.base):
            raise ValueError(f"{url} is not on {self.base}: the token is not sent there")
        request = urllib.request.Request(url, data=body, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        if body:
            request.add_header("Content-Type", "application/x-www-form-urlencoded")
        status, _headers, data = self._send(request)
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
        request = urllib.request.Request(target, data=body, method="POST")
        request.add_header("Content-Type", kind)  # and no Authorization: another host, maybe
        status, headers, answer = self._send(request)
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
    from normlab.grader.classreport import best_per_student

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


def push(
    chosen: list, canvas: Canvas, course: str, assignment: str, lang: str | None = None
) -> dict:
    """Post each (user, result)'s score, comment and page where Canvas lacks them; counts."""
    from normlab.grader import report

    done = {"graded": 0, "commented": 0, "attached": 0, "unchanged": 0, "skipped": 0}
    for user, result in chosen:
        submission = result.as_dict()
        if not _USER_ID.fullmatch(user):  # choose() addresses digits only; a backstop
            raise ValueError(f"{inert.text(user, lines=False)} is not a Canvas user id")
        path = f"/api/v1/courses/{course}/assignments/{assignment}/submissions/{user}"
        now = canvas.request("GET", path + "?include[]=submission_comments")
        comment = comment_text(submission)
        tag = comment.rsplit("\n", 1)[1]
        comments = now.get("submission_comments") or []
        form = []
        if now.get("score") != submission["score"]:
            form.append(("submission[posted_grade]", str(int(submission["score"]))))
        if not any(tag in str(c.get("comment", "")) for c in comments if isinstance(c, dict)):
            page = report.feedback_html(result, lang).encode("utf-8")
            name = file_name(submission["lab"] or "feedback")
            file_id = canvas.upload(path + "/comments/files", name, page)
            form += [("comment[text_comment]", comment), ("comment[file_ids][]", file_id)]
        if not form:
            done["unchanged"] += 1
            continue
        canvas.request("PUT", path, form)
        names = {key for key, _ in form}
        done["graded"] += "submission[posted_grade]" in names
        done["commented"] += "comment[text_comment]" in names
        done["attached"] += "comment[file_ids][]" in names
    return done


def _token(args) -> str:
    if args.token_file:
        return Path(args.token_file).read_text(encoding="utf-8").strip()
    return os.environ.get("CANVAS_TOKEN", "").strip()


def run(args) -> int:
    """``normlab report canvas RESULTS.json --url URL --course ID --assignment ID --lab STEM``."""
    from normlab.grader.report import results_from_json

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
    try:
        done = push(chosen, canvas, args.course, args.assignment)
        done["skipped"] = len(skipped)
    except (urllib.error.URLError, OSError, ValueError) as error:
        # the error names the request, never the token (it is only in a header)
        print(f"normlab report canvas: {inert.text(error)}", file=sys.stderr)
        return 1
    print(
        i18n.text(
            "{lab}: {graded} scores, {commented} comments and {attached} feedback pages posted, "
            "{unchanged} already there, {skipped} skipped",
            lab=args.lab,
            **done,
        )
        + (" " + i18n.text("(dry run: nothing was sent)") if args.dry_run else "")
    )
    return 0
