"""``normlab report canvas``: each student's score and feedback comment, pushed to Canvas.

Canvas's REST API, two documented endpoints of its Submissions API, through ``urllib`` (no
client library: these two calls are all it takes, and a dependency would be one more thing
to keep):

- ``GET /api/v1/courses/:course/assignments/:assignment/submissions/:user?include[]=
  submission_comments``: the score and comments Canvas has now;
- ``PUT /api/v1/courses/:course/assignments/:assignment/submissions/:user`` with
  ``submission[posted_grade]`` and ``comment[text_comment]`` (form-encoded): "Grade or comment
  on a submission".

Idempotent: the comment ends with a tag that names the lab and the hash of the comment's text;
a comment with that tag already there is not posted again, and a score Canvas already has is
not posted again, so a rerun changes nothing. The user id in each path is the Canvas user id
of the download (``normlab grade``'s student id), digits only: any other id is skipped, so no
submission can aim a request anywhere but at its own grade. The token comes from the
``CANVAS_TOKEN`` environment variable or ``--token-file``, is sent only in the
``Authorization`` header and never printed.
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

from normlab.grader import inert

_USER_ID = re.compile(r"[0-9]{1,20}")
_NUMBER = re.compile(r"[0-9]{1,20}")


def comment_text(submission: dict) -> str:
    """The comment: the one-line result (as Moodle's worksheet gives it), as plain text, and
    the tag that makes a rerun find it."""
    from normlab.grader.lms import feedback_comment

    text = html.unescape(feedback_comment(submission))
    digest = hashlib.sha256(f"{submission['lab']}\n{text}".encode()).hexdigest()[:12]
    return f"{text}\n[normlab {submission['lab']} {digest}]"


class Canvas:
    """The two calls, against ``base`` (``https://canvas.example.edu``)."""

    def __init__(self, base: str, token: str, dry_run: bool = False):
        self.base, self.token, self.dry_run = base.rstrip("/"), token, dry_run

    def request(self, method: str, path: str, form: dict | None = None) -> dict:
        body = urllib.parse.urlencode(form).encode() if form else None
        # every request is printed (the token, in a header, never is)
        shown = urllib.parse.unquote_plus(body.decode()) if body else ""
        print(f"{method} {inert.one_line(path)} {inert.one_line(shown)}".rstrip())
        if self.dry_run:  # nothing is sent: as if Canvas had no score and no comment yet
            return {}
        request = urllib.request.Request(self.base + path, data=body, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        if body:
            request.add_header("Content-Type", "application/x-www-form-urlencoded")
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 -- https or loopback
            return json.loads(response.read(1 << 24) or b"{}")


def push(submissions: list[dict], canvas: Canvas, course: str, assignment: str) -> dict:
    """Post each submission's score and comment where Canvas lacks them; counts by outcome."""
    done = {"graded": 0, "commented": 0, "unchanged": 0, "skipped": 0}
    for submission in submissions:
        user = submission.get("student") or ""
        if not _USER_ID.fullmatch(user):
            print(
                f"normlab report canvas: {inert.text(user, lines=False)!s} is not a Canvas user id "
                "(from a Canvas download): skipped",
                file=sys.stderr,
            )
            done["skipped"] += 1
            continue
        path = f"/api/v1/courses/{course}/assignments/{assignment}/submissions/{user}"
        now = canvas.request("GET", path + "?include[]=submission_comments")
        comment = comment_text(submission)
        tag = comment.rsplit("\n", 1)[1]
        comments = now.get("submission_comments") or []
        form = {}
        if now.get("score") != submission["score"]:
            form["submission[posted_grade]"] = str(int(submission["score"]))
        if not any(tag in str(c.get("comment", "")) for c in comments if isinstance(c, dict)):
            form["comment[text_comment]"] = comment
        if not form:
            done["unchanged"] += 1
            continue
        canvas.request("PUT", path, form)
        done["graded"] += "submission[posted_grade]" in form
        done["commented"] += "comment[text_comment]" in form
    return done


def _token(args) -> str:
    if args.token_file:
        return Path(args.token_file).read_text(encoding="utf-8").strip()
    return os.environ.get("CANVAS_TOKEN", "").strip()


def run(args) -> int:
    """``normlab report canvas RESULTS.json --url URL --course ID --assignment ID --lab STEM``."""
    from normlab.grader.classreport import best_per_student
    from normlab.grader.report import results_from_json

    url = urllib.parse.urlsplit(args.url)
    loopback = url.hostname in ("127.0.0.1", "localhost", "::1")
    if url.scheme != "https" and not (url.scheme == "http" and loopback):
        print("normlab report canvas: --url must be https://", file=sys.stderr)
        return 2
    if not (_NUMBER.fullmatch(args.course) and _NUMBER.fullmatch(args.assignment)):
        print(
            "normlab report canvas: --course and --assignment are Canvas's numbers", file=sys.stderr
        )
        return 2
    token = "" if args.dry_run else _token(args)
    if not token and not args.dry_run:
        print("normlab report canvas: set CANVAS_TOKEN or give --token-file", file=sys.stderr)
        return 2
    try:
        payload = json.loads(Path(args.results).read_text(encoding="utf-8"))
        results = results_from_json(payload.get("submissions"), unique=False)
    except (OSError, ValueError, RecursionError, AttributeError) as error:
        print(f"normlab report canvas: {inert.text(error)}", file=sys.stderr)
        return 2
    chosen = [r.as_dict() for r in best_per_student(results, args.lab)]
    canvas = Canvas(url.geturl(), token, args.dry_run)
    try:
        done = push(chosen, canvas, args.course, args.assignment)
    except (urllib.error.URLError, OSError, ValueError) as error:
        # the error names the request, never the token (it is only in a header)
        print(f"normlab report canvas: {inert.text(error)}", file=sys.stderr)
        return 1
    print(
        f"{args.lab}: {done['graded']} scores and {done['commented']} comments posted, "
        f"{done['unchanged']} already there, {done['skipped']} skipped"
        + (" (dry run: nothing was sent)" if args.dry_run else "")
    )
    return 0
