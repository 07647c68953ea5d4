"""`normlab report canvas` against a local Canvas: the documented endpoints, on 127.0.0.1.

Two servers, so that two hosts are in play as with a real Canvas: ``FakeCanvas`` (the API:
the assignment's points, a submission with its comments, the comment-file upload's first step,
the upload's confirmation, the grade-or-comment PUT, a file's deletion; Canvas's answers when a
user is not in the course (404), when it throttles (429 with ``Retry-After``, or its documented
``403 Forbidden (Rate Limit Exceeded)``), refuses a permission (403) or fails (500), planned per
request in ``Recorder.faults``) and ``FakeStore`` (the ``upload_url`` of the first
step, another port, so another origin, as an S3 bucket or a file service would be). Both
record every request (host, method, path, form or multipart fields, Authorization header).
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import check_dict, run_cli

from normlab.instructor import canvas as canvas_module

TOKEN = "secret-token-7f3a"
COURSE, ASSIGNMENT = "11", "22"
PREFIX = f"/api/v1/courses/{COURSE}/assignments/{ASSIGNMENT}/submissions/"
HOSTILE_ERROR = "boom&submission[posted_grade]=100&comment[text_comment]=x\n<b>second</b>"
HOSTILE_CHECK = '<img src=x onerror="alert(1)">&comment[file_ids][]=9'
SIGNED = {"key": "uploads/abc/04_rmsnorm.html", "policy": "c2lnbmVk", "x-amz-signature": "f00d"}


ASSIGNMENT_PATH = f"/api/v1/courses/{COURSE}/assignments/{ASSIGNMENT}"
NOT_FOUND = {"errors": [{"message": "The specified resource does not exist."}]}
UNAUTHORIZED = {"status": "unauthorized", "errors": [{"message": "user not authorized"}]}
# Canvas's throttle (doc/api/throttling.md, lib/request_throttle.rb): a plain-text 403
THROTTLED_403 = (403, [("X-Rate-Limit-Remaining", "0.0")], b"403 Forbidden (Rate Limit Exceeded)\n")


def fault(method, path, status, headers=(), body=None, times=1, after=False):
    """Canvas's answer ``status`` to the next ``times`` requests ``method`` whose path holds
    ``path`` (``after``: once the request has been carried out, as a PUT that times out)."""
    raw = body if isinstance(body, bytes) else json.dumps(body or {}).encode()
    Recorder.faults.append(
        {
            "method": method,
            "path": path,
            "status": status,
            "headers": list(headers),
            "body": raw,
            "times": times,
            "after": after,
        }
    )


class Recorder(BaseHTTPRequestHandler):
    host = ""
    log: list = []
    state: dict = {}
    mode = {"confirm": "redirect"}  # or "created", or "elsewhere"
    bases: dict = {}
    faults: list = []

    def _fault(self, method, after=False):
        """Send the planned answer for this request, if one is planned; True when sent."""
        for planned in self.faults:
            if (
                planned["times"] > 0
                and planned["method"] == method
                and planned["path"] in self.path
                and planned["after"] == after
            ):
                planned["times"] -= 1
                self.send_response(planned["status"])
                for key, value in planned["headers"]:
                    self.send_header(key, value)
                kind = "application/json" if planned["body"][:1] == b"{" else "text/plain"
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(planned["body"])))
                self.end_headers()
                self.wfile.write(planned["body"])
                return True
        return False

    def log_message(self, *args):  # quiet
        pass

    def _body(self):
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def _json(self, data, status=200, headers=()):
        raw = json.dumps(data).encode()
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _record(self, method, fields):
        entry = (self.host, method, self.path, fields, self.headers.get("Authorization"))
        self.log.append(entry)


class FakeCanvas(Recorder):
    host = "canvas"

    def _user(self, tail=""):
        path = urllib.parse.urlsplit(self.path).path
        if not (path.startswith(PREFIX) and path.endswith(tail)):
            return None
        user = path[len(PREFIX) : len(path) - len(tail)]
        return user if user.isdigit() else None

    def _submission(self, user):
        state = self.state.setdefault(user, {"score": None, "submission_comments": []})
        return {"user_id": int(user), **state}

    def _authorised(self):
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.send_error(401)
            return False
        return True

    def _missing(self):
        """A user Canvas does not have in this course: 404, as Canvas answers it."""
        user = self._user() or self._user("/comments/files")
        if user is not None and user in self.state.get("missing", ()):
            self._json(NOT_FOUND, status=404)
            return True
        return False

    def do_GET(self):
        self._record("GET", None)
        if not self._authorised() or self._fault("GET") or self._missing():
            return
        parts = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parts.query)
        if parts.path == ASSIGNMENT_PATH and not query:  # "Get a single assignment"
            self._json({"id": int(ASSIGNMENT), "points_possible": self.state["points"]})
            return
        if parts.path.startswith("/api/v1/files/") and parts.path.endswith("/create_success"):
            file_id = parts.path.split("/")[4]
            upload = self.state["files"].get(file_id)
            if upload is None or query != {"uuid": [upload["uuid"]]}:
                self.send_error(404)
                return
            upload["available"] = True
            self._json({"id": int(file_id), "display_name": upload["name"], "size": upload["size"]})
            return
        if parts.path.startswith("/api/v1/files/"):  # the 201's Location: the file's JSON
            upload = self.state["files"].get(parts.path.split("/")[4])
            if upload is None or not upload["available"]:
                self.send_error(404)
                return
            self._json({"id": int(parts.path.split("/")[4]), "display_name": upload["name"]})
            return
        user = self._user()
        if user is None or query != {"include[]": ["submission_comments"]}:
            self.send_error(404)
            return
        self._json(self._submission(user))

    def do_POST(self):
        form = urllib.parse.parse_qs(self._body().decode(), strict_parsing=True)
        self._record("POST", form)
        if not self._authorised() or self._fault("POST") or self._missing():
            return
        user = self._user("/comments/files")
        if user is None or set(form) != {"name", "size", "content_type"}:
            self.send_error(404)
            return
        files = self.state["files"]
        file_id = str(900 + len(files))
        files[file_id] = {
            "user": user,
            "name": form["name"][0],
            "size": int(form["size"][0]),
            "uuid": f"u{file_id}",
            "available": False,
            "data": None,
        }
        self._json(
            {"upload_url": f"{self.bases['store']}/bucket/{file_id}", "upload_params": SIGNED}
        )

    def do_PUT(self):
        form = urllib.parse.parse_qs(self._body().decode(), strict_parsing=True)
        self._record("PUT", form)
        user = self._user()
        if not self._authorised() or self._fault("PUT") or self._missing():
            return
        if user is None or "?" in self.path:
            self.send_error(404)
            return
        state = self.state.setdefault(user, {"score": None, "submission_comments": []})
        for file_id in form.get("comment[file_ids][]", []):
            upload = self.state["files"].get(file_id)
            if upload is None or not upload["available"] or upload["user"] != user:
                self.send_error(401)  # Canvas: the file is not attachable
                return
        if "submission[posted_grade]" in form:
            state["score"] = float(form["submission[posted_grade]"][0])
        if "comment[text_comment]" in form:
            state["submission_comments"].append(
                {
                    "comment": form["comment[text_comment]"][0],
                    "attachments": [{"id": int(i)} for i in form.get("comment[file_ids][]", [])],
                }
            )
        if not self._fault("PUT", after=True):
            self._json(self._submission(user))

    def do_DELETE(self):
        """Files API, "Delete file": ``DELETE /api/v1/files/:id``."""
        self._record("DELETE", None)
        if not self._authorised() or self._fault("DELETE"):
            return
        path = urllib.parse.urlsplit(self.path).path
        file_id = path.rsplit("/", 1)[-1]
        if not path.startswith("/api/v1/files/") or file_id not in self.state["files"]:
            self._json(NOT_FOUND, status=404)
            return
        upload = self.state["files"].pop(file_id)
        self._json({"id": int(file_id), "display_name": upload["name"]})


class FakeStore(Recorder):
    host = "store"

    def do_POST(self):
        kind = self.headers.get("Content-Type", "")
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {kind}\r\n\r\n".encode() + self._body()
        )
        fields = [
            (
                part.get_param("name", header="content-disposition"),
                part.get_filename(),
                part.get_payload(decode=True),
            )
            for part in message.iter_parts()
        ]
        self._record("POST", fields)
        file_id = self.path.rsplit("/", 1)[-1]
        upload = self.state["files"].get(file_id)
        expected = [(k, None, v.encode()) for k, v in SIGNED.items()]
        if upload is None or fields[:-1] != expected or fields[-1][0] != "file":
            self.send_error(400)  # a signed request: any field added, removed or changed
            return
        upload["data"] = fields[-1][2]
        upload["filename"] = fields[-1][1]
        mode = self.mode["confirm"]
        if mode == "redirect":
            where = f"{self.bases['canvas']}/api/v1/files/{file_id}/create_success?uuid=u{file_id}"
            self.send_response(301)
            self.send_header("Location", where)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif mode == "created":
            upload["available"] = True
            where = f"{self.bases['canvas']}/api/v1/files/{file_id}"
            self._json({}, status=201, headers=[("Location", where)])
        else:  # a Location on the store itself: the token must not follow it
            where = f"{self.bases['store']}/confirm/{file_id}"
            self.send_response(302)
            self.send_header("Location", where)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def do_GET(self):
        self._record("GET", None)
        self.send_error(404)


@pytest.fixture
def canvas():
    Recorder.log.clear()
    Recorder.state.clear()
    Recorder.faults.clear()
    Recorder.state.update(files={}, points=16, missing=set())
    Recorder.mode["confirm"] = "redirect"
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), kind) for kind in (FakeCanvas, FakeStore)]
    for name, server in zip(("canvas", "store"), servers, strict=True):
        Recorder.bases[name] = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Recorder.bases["canvas"]
    for server in servers:
        server.shutdown()
        server.server_close()


def submission(student, score, error=None, path=None, check="forward", layout="canvas"):
    checks = [check_dict(check, score, 12), check_dict("backward", 0, 4)]
    return {
        "path": path or f"{student}_1_04_rmsnorm.ipynb",
        "student": student,
        "lab": "04_rmsnorm",
        "score": score,
        "max_score": 16,
        "error": error,
        "checks": checks,
        "findings": [],
        "isolation": None,
        "lang": None,
        "name": None,
        "id_conflict": [],
        "layout": layout,
    }


@pytest.fixture
def results(tmp_path):
    graded = [
        submission("101", 12),
        submission(
            "102", 0, error=HOSTILE_ERROR + "<script>alert(1)</script>", check=HOSTILE_CHECK
        ),
        # the better of two counts; its file name is the student's choice, and steers nothing
        submission("102", 0, path='102_x&name=../../evil"\r\n.html_04_rmsnorm.ipynb'),
        submission("../../users/1", 12),  # not a Canvas user id: no request at all
        submission("7?as_user_id=1", 12),
    ]
    path = tmp_path / "graded.json"
    path.write_text(json.dumps({"submissions": graded}), encoding="utf-8")
    return path


def push(url, results, *extra):
    return run_cli(
        [
            "report",
            "canvas",
            str(results),
            "--lab",
            "04_rmsnorm",
            "--url",
            url,
            "--course",
            COURSE,
            "--assignment",
            ASSIGNMENT,
            *extra,
        ]
    )


READ_POINTS = ("canvas", "GET", ASSIGNMENT_PATH)


def expected_requests(user):
    return [
        ("canvas", "GET", PREFIX + f"{user}?include[]=submission_comments"),
        ("canvas", "POST", PREFIX + f"{user}/comments/files"),
        ("store", "POST", "/bucket/{id}"),
        ("canvas", "GET", "/api/v1/files/{id}/create_success?uuid=u{id}"),
        ("canvas", "PUT", PREFIX + user),
    ]


def shape(log):
    """The log's (host, method, path), a file id written as {id}."""
    ids = sorted(Recorder.state["files"], key=len, reverse=True)
    out = []
    for host, method, path, *_ in log:
        for file_id in ids:
            path = path.replace(file_id, "{id}")
        out.append((host, method, path))
    return out


def test_score_comment_and_page_once_and_nothing_on_a_rerun(canvas, results, monkeypatch):
    monkeypatch.setenv("CANVAS_TOKEN", TOKEN)
    code, stdout, stderr = push(canvas, results)
    assert code == 0, stderr
    log = list(Recorder.log)
    assert shape(log) == [READ_POINTS, *expected_requests("101"), *expected_requests("102")]
    # the token goes to Canvas's host on every request, and never to the store
    assert all(auth == f"Bearer {TOKEN}" for host, *_, auth in log if host == "canvas")
    assert [auth for host, *_, auth in log if host == "store"] == [None, None]
    first_file, first_put = log[2][3], log[5][3]
    assert first_file == {
        "name": ["04_rmsnorm.html"],
        "content_type": ["text/html"],
        "size": [first_file["size"][0]],
    }
    files = Recorder.state["files"]
    assert sorted(f["user"] for f in files.values()) == ["101", "102"]
    for upload in files.values():
        assert upload["available"] and upload["filename"] == "04_rmsnorm.html"
        assert upload["size"] == len(upload["data"])  # step 1 announced what step 2 sent
    assert set(first_put) == {
        "submission[posted_grade]",
        "comment[text_comment]",
        "comment[file_ids][]",
    }
    assert first_put["submission[posted_grade]"] == ["12"]
    assert first_put["comment[text_comment]"][0].startswith("12/16 points.")
    (file_101,) = [i for i, f in files.items() if f["user"] == "101"]
    assert first_put["comment[file_ids][]"] == [file_101]
    # the page is the student's own: its score and the checks it failed
    page = files[file_101]["data"].decode()
    assert page.startswith("<!DOCTYPE html>") and "12 / 16" in page and "backward" in page
    # the student's texts are the comment's text and the page's escaped text, never a field
    second_put = log[10][3]
    assert second_put["submission[posted_grade]"] == ["0"]
    assert "boom&submission[posted_grade]=100" in second_put["comment[text_comment]"][0]
    assert [len(v) for v in second_put.values()] == [1, 1, 1]
    (file_102,) = [i for i, f in files.items() if f["user"] == "102"]
    assert second_put["comment[file_ids][]"] == [file_102]
    hostile = files[file_102]["data"].decode()
    assert "&lt;script&gt;" in hostile and "&lt;img" in hostile
    assert "<script" not in hostile and "<img" not in hostile and "<b>second" not in hostile
    assert FakeCanvas.state["101"]["score"] == 12.0
    assert TOKEN not in stdout + stderr
    assert stderr.count("not a Canvas user id") == 2
    assert "2 scores, 2 comments and 2 feedback pages posted, 0 already there" in stdout
    # a rerun reads, and changes nothing: no upload, no comment
    before = len(Recorder.log)
    code, stdout, stderr = push(canvas, results)
    assert code == 0, stderr
    assert shape(Recorder.log[before:]) == [
        READ_POINTS,
        *[expected_requests(u)[0] for u in ("101", "102")],
    ]
    assert len(files) == 2
    assert all(len(s["submission_comments"]) == 1 for u, s in Recorder.state.items() if u.isdigit())
    assert "0 scores, 0 comments and 0 feedback pages posted, 2 already there, 2 skipped" in stdout


def test_a_201_created_is_confirmed_by_its_location(canvas, results, monkeypatch):
    monkeypatch.setenv("CANVAS_TOKEN", TOKEN)
    Recorder.mode["confirm"] = "created"
    code, _, stderr = push(canvas, results)
    assert code == 0, stderr
    gets = [(h, p, a) for h, m, p, _, a in Recorder.log if m == "GET" and "/files/" in p]
    assert [(h, p) for h, p, _ in gets] == [
        ("canvas", f"/api/v1/files/{i}") for i in sorted(Recorder.state["files"])
    ]
    assert all(a == f"Bearer {TOKEN}" for *_, a in gets)


def test_a_location_off_canvas_gets_no_token_and_stops_the_push(canvas, results, monkeypatch):
    monkeypatch.setenv("CANVAS_TOKEN", TOKEN)
    Recorder.mode["confirm"] = "elsewhere"
    code, stdout, stderr = push(canvas, results)
    assert code == 1 and "the token is not sent there" in stderr
    assert [a for h, *_, a in Recorder.log if h == "store"] == [None]
    # no comment without it, and the push stops
    assert [m for _, m, *_ in Recorder.log] == ["GET", "GET", "POST", "POST"]
    assert "2 not pushed: 101 (" in stderr and ", 102 (" in stderr
    assert TOKEN not in stdout + stderr


def test_a_changed_score_posts_the_score_and_a_new_comment_with_its_page(
    canvas, results, monkeypatch
):
    monkeypatch.setenv("CANVAS_TOKEN", TOKEN)
    assert push(canvas, results)[0] == 0
    data = json.loads(results.read_text(encoding="utf-8"))
    data["submissions"][0] = submission("101", 16)
    data["submissions"][0]["checks"] = [check_dict("forward", 12, 12), check_dict("backward", 4, 4)]
    results.write_text(json.dumps(data), encoding="utf-8")
    before = len(Recorder.log)
    assert push(canvas, results)[0] == 0
    assert shape(Recorder.log[before:]) == [
        READ_POINTS,
        *expected_requests("101"),
        expected_requests("102")[0],
    ]
    assert Recorder.log[-2][3]["submission[posted_grade]"] == ["16"]
    comments = Recorder.state["101"]["submission_comments"]
    assert len(comments) == 2 and comments[0]["attachments"] != comments[1]["attachments"]


def test_dry_run_prints_every_request_and_sends_none(canvas, results, monkeypatch):
    monkeypatch.setenv("CANVAS_TOKEN", TOKEN)
    code, stdout, stderr = push(canvas, results, "--dry-run")
    assert code == 0, stderr
    assert Recorder.log == []
    lines = stdout.splitlines()
    assert lines[0] == f"GET {ASSIGNMENT_PATH}"
    assert [line.split()[0] for line in lines[1:-1]] == ["GET", "POST", "POST", "GET", "PUT"] * 2
    assert lines[2] == (
        f"POST {PREFIX}101/comments/files name=04_rmsnorm.html&size="
        + lines[2].split("size=")[1].split("&")[0]
        + "&content_type=text/html"
    )
    assert "[multipart, no token]" in lines[3]
    assert lines[5].startswith(f"PUT {PREFIX}101 submission[posted_grade]=12&comment[text_")
    assert "comment[file_ids][]=" in lines[5]
    assert TOKEN not in stdout + stderr and "dry run" in lines[-1]


def test_the_token_comes_from_the_environment_or_a_file_only(
    canvas, results, monkeypatch, tmp_path
):
    monkeypatch.delenv("CANVAS_TOKEN", raising=False)
    code, _, stderr = push(canvas, results)
    assert code == 2 and "CANVAS_TOKEN" in stderr and Recorder.log == []
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    code, stdout, stderr = push(canvas, results, "--token-file", str(token_file))
    assert code == 0, stderr
    assert all(auth == f"Bearer {TOKEN}" for host, *_, auth in Recorder.log if host == "canvas")
    assert TOKEN not in stdout + stderr
    code, _, stderr = push("http://canvas.example.edu", results, "--token-file", str(token_file))
    assert code == 2 and "https" in stderr  # a token never travels in clear text


@pytest.mark.parametrize(
    "lab", ['../../x"\r\nContent-Type: evil', "a/b\\c", "", "..", "ok-lab_1.2"]
)
def test_the_file_name_is_plain_whatever_the_lab(lab):
    name = canvas_module.file_name(lab)
    assert name.endswith(".html") and not name.startswith(".")
    assert set(name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def test_multipart_refuses_a_field_that_would_break_out():
    with pytest.raises(ValueError):
        canvas_module.multipart({'a"\r\nX': "1"}, "p.html", b"<p>")
    body, kind = canvas_module.multipart({"key": "k"}, "p.html", b"<p>x</p>")
    assert kind.startswith("multipart/form-data; boundary=") and body.endswith(b"--\r\n")


# ----------------------------------------------------------------------------- who is addressed


@pytest.fixture(scope="module")
def named_by_file(tmp_path_factory, root):
    """A blank lab 03 handed in as ``03_layernorm_5678.ipynb`` (the plain file-name layout:
    the id is the student's choice) beside Zoe's worked solution, graded for real."""
    import shutil

    from conftest import grade_json

    folder = tmp_path_factory.mktemp("class")
    shutil.copy(root / "labs" / "03_layernorm.ipynb", folder / "03_layernorm_5678.ipynb")
    shutil.copy(root / "solutions" / "03_layernorm.ipynb", folder / "03_layernorm_zoe.ipynb")
    code, data, stderr = grade_json(folder)
    assert code == 0, stderr
    graded = folder.parent / "graded.json"
    graded.write_text(json.dumps(data), encoding="utf-8")
    return graded, data


def push_lab_03(url, results, *extra):
    arguments = ["report", "canvas", str(results), "--lab", "03_layernorm", "--url", url]
    return run_cli([*arguments, "--course", COURSE, "--assignment", ASSIGNMENT, *extra])


def test_an_id_a_file_name_chose_addresses_nobody(canvas, named_by_file, monkeypatch, tmp_path):
    results, data = named_by_file
    found = {s["path"].rsplit("/", 1)[-1]: s for s in data["submissions"]}
    blank, zoe = found["03_layernorm_5678.ipynb"], found["03_layernorm_zoe.ipynb"]
    assert (blank["student"], blank["layout"], blank["score"]) == ("5678", "file", 0)
    assert (zoe["student"], zoe["layout"], zoe["score"]) == ("zoe", "file", 16)
    # a dry run shows no request, and says of each notebook why it is not pushed
    code, stdout, stderr = push_lab_03(canvas, results, "--dry-run")
    assert code == 0, stderr
    assert stdout.splitlines() == [
        "03_layernorm: 0 scores, 0 comments and 0 feedback pages posted, 0 already there, "
        "2 skipped (dry run: nothing was sent)"
    ]
    for student in ("5678", "zoe"):
        (line,) = [x for x in stderr.splitlines() if f"03_layernorm_{student}.ipynb" in x]
        assert f"the id {student} comes from the file layout, not from Canvas's download" in line
    # against Canvas: not one request, so Canvas user 5678 keeps what Canvas has
    monkeypatch.setenv("CANVAS_TOKEN", TOKEN)
    code, stdout, stderr = push_lab_03(canvas, results)
    assert code == 0, stderr
    assert Recorder.log == [] and "2 skipped" in stdout
    # the instructor's roster says who Zoe is in Canvas: Zoe's grade goes to her, and the file
    # that claims 5678 still addresses nobody
    roster = tmp_path / "roster.csv"
    roster.write_text("student,canvas_user_id\nzoe,5678\n", encoding="utf-8")
    code, stdout, stderr = push_lab_03(canvas, results, "--roster", roster)
    assert code == 0, stderr
    assert shape(Recorder.log) == [READ_POINTS, *expected_requests("5678")]
    put = Recorder.log[-1][3]
    assert put["submission[posted_grade]"] == ["16"]
    assert put["comment[text_comment]"][0].startswith("16/16 points.")
    (page,) = [f["data"].decode() for f in Recorder.state["files"].values()]
    assert "16 / 16" in page
    assert Recorder.state["5678"]["score"] == 16.0
    assert "1 scores" in stdout and "1 skipped" in stdout
    assert [x for x in stderr.splitlines() if "skipped" in x] == [
        x for x in stderr.splitlines() if "03_layernorm_5678.ipynb" in x
    ]


def chosen_and_skipped(graded, roster=None):
    from normlab.grader.results import SubmissionResult

    results = [SubmissionResult.from_dict(s) for s in graded]
    chosen, skipped = canvas_module.choose(results, "04_rmsnorm", roster)
    return [(user, r.path) for user, r in chosen], [(r.path, why) for r, why in skipped]


def test_only_canvas_files_name_a_canvas_user_and_a_roster_maps_the_rest():
    graded = [
        # Canvas's download: two files of user 23456 (the better counts), one of 23457
        submission("23456", 0, path="evansd_23456_789_04_rmsnorm.ipynb"),
        submission("23456", 12, path="evansd_23456_789_04_rmsnorm-1.ipynb"),
        submission("23457", 0, path="lee_23457_790_04_rmsnorm.ipynb"),
        # a plain file name that claims 23456's id, and folders and Moodle's numbers
        submission("23456", 0, path="04_rmsnorm_23456.ipynb", layout="file"),
        submission("alice", 12, path="alice/04_rmsnorm.ipynb", layout="folder"),
        submission("31", 12, path="Bo Li_31_assignsubmission_file_/04.ipynb", layout="moodle"),
        submission("4", 12, path="submission_4/04_rmsnorm.ipynb", layout="gradescope"),
        {**submission("77", 12, path="old/04_rmsnorm_77.ipynb"), "layout": None},
    ]
    chosen, skipped = chosen_and_skipped(graded)
    assert chosen == [
        ("23456", "evansd_23456_789_04_rmsnorm-1.ipynb"),
        ("23457", "lee_23457_790_04_rmsnorm.ipynb"),
    ]
    assert len(skipped) == 5
    for path, layout in [
        ("04_rmsnorm_23456.ipynb", "file"),
        ("alice/04_rmsnorm.ipynb", "folder"),
        ("Bo Li_31_assignsubmission_file_/04.ipynb", "moodle"),
        ("submission_4/04_rmsnorm.ipynb", "gradescope"),
    ]:
        assert dict(skipped)[path].startswith(f"normlab report canvas: {path}: the id ")
        assert f"from the {layout} layout, not from Canvas's download" in dict(skipped)[path]
    assert "grade again" in dict(skipped)["old/04_rmsnorm_77.ipynb"]
    # a roster maps the others; an id that a Canvas file and a mapped name both address, or
    # that two mapped names address, is left to the instructor, named
    roster = {"alice": "50", "31": "51", "4": "23457", "23456": "52"}
    chosen, skipped = chosen_and_skipped(graded, roster)
    assert chosen == [
        ("50", "alice/04_rmsnorm.ipynb"),
        ("51", "Bo Li_31_assignsubmission_file_/04.ipynb"),
        ("52", "04_rmsnorm_23456.ipynb"),
        ("23456", "evansd_23456_789_04_rmsnorm-1.ipynb"),
    ]
    assert [p for p, _ in skipped] == [
        "old/04_rmsnorm_77.ipynb",
        "lee_23457_790_04_rmsnorm.ipynb",
        "submission_4/04_rmsnorm.ipynb",
    ]
    assert (
        skipped[1][1]
        == skipped[2][1]
        == (
            "normlab report canvas: lee_23457_790_04_rmsnorm.ipynb, submission_4/04_rmsnorm.ipynb "
            "all address Canvas user 23457: skipped; decide which is the student's (a roster maps "
            "one id to one Canvas user)"
        )
    )


@pytest.mark.parametrize(
    ("rows", "why"),
    [
        ("id,user\nzoe,5678\n", "must name the columns student and canvas_user_id"),
        ("student,canvas_user_id\nzoe,z5678\n", "row 2: a row needs a student id and"),
        ("student,canvas_user_id\nzoe,1\nzoe,2\n", "row 3: this student is mapped to two"),
        ("student,canvas_user_id\nzoe,1\nbo,1\n", "row 3: this Canvas user is mapped from two"),
    ],
)
def test_a_roster_that_is_not_one_student_one_canvas_user_is_refused(
    canvas, results, tmp_path, rows, why
):
    roster = tmp_path / "roster.csv"
    roster.write_text(rows, encoding="utf-8")
    code, stdout, stderr = push(canvas, results, "--dry-run", "--roster", roster)
    assert code == 2 and why in stderr and stdout == ""


def test_a_roster_in_canvas_gradebook_order_is_read(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "\ufeffName,Canvas_User_ID,Student\nZoe Ruiz,5678,zoe\n,,\nBo Li,5679,bo\n",
        encoding="utf-8",
    )
    assert canvas_module.read_roster(roster) == {"zoe": "5678", "bo": "5679"}


# ----------------------------------------------------------------------------- the push finishes


CLASS = ("201", "202", "203", "204", "205")


@pytest.fixture
def five(tmp_path):
    """Five students of a Canvas download, 12/16 each."""
    graded = [submission(u, 12, path=f"s{u}_{u}_9{u}_04_rmsnorm.ipynb") for u in CLASS]
    path = tmp_path / "five.json"
    path.write_text(json.dumps({"submissions": graded}), encoding="utf-8")
    return path


@pytest.fixture
def waits(monkeypatch):
    """Every wait the push makes, in seconds, instead of waiting."""
    made = []
    monkeypatch.setattr(canvas_module, "sleep", made.append)
    monkeypatch.setenv("CANVAS_TOKEN", TOKEN)
    return made


def posted():
    """user -> (score, how many comments, how many pages attached) as Canvas holds them."""
    return {
        user: (
            state["score"],
            len(state["submission_comments"]),
            sum(len(c["attachments"]) for c in state["submission_comments"]),
        )
        for user, state in Recorder.state.items()
        if user.isdigit() and state["score"] is not None
    }


def orphans():
    """Files uploaded that no comment shows."""
    shown = {
        str(a["id"])
        for user, state in Recorder.state.items()
        if user.isdigit()
        for c in state["submission_comments"]
        for a in c["attachments"]
    }
    return sorted(set(Recorder.state["files"]) - shown)


def test_a_student_canvas_does_not_have_is_named_and_the_rest_pushed(canvas, five, waits):
    Recorder.state["missing"] = {"202"}
    for run in range(2):  # a rerun stops at nobody either
        code, stdout, stderr = push(canvas, five)
        assert code == 0, stderr
        assert stderr.splitlines() == [
            "normlab report canvas: Canvas has no submission of user 202 for this assignment "
            "(404; s202_202_9202_04_rmsnorm.ipynb): skipped"
        ]
        assert posted() == {u: (12.0, 1, 1) for u in CLASS if u != "202"}
        done = "4 scores, 4 comments" if run == 0 else "0 scores, 0 comments"
        assert done in stdout and "1 skipped" in stdout
    assert waits == [] and orphans() == []


def test_a_throttle_is_waited_out_and_never_called_a_permission(canvas, five, waits):
    fault("GET", PREFIX + "201?", 429, [("Retry-After", "7")], times=2)
    fault("POST", PREFIX + "202/comments/files", *THROTTLED_403)
    fault("PUT", PREFIX + "203", 403, [("X-Rate-Limit-Remaining", "-2.5")], b"", times=2)
    code, stdout, stderr = push(canvas, five)
    assert code == 0, stderr
    assert posted() == {u: (12.0, 1, 1) for u in CLASS} and orphans() == []
    assert waits == [7.0, 7.0, 1.0, 1.0, 2.0]  # Retry-After, else 1, 2, 4, ... s
    assert stderr == "" and "5 scores, 5 comments and 5 feedback pages posted" in stdout


def test_a_throttle_that_outlasts_the_tries_stops_and_says_what_is_left(canvas, five, waits):
    fault("GET", PREFIX + "203?", 429, [("Retry-After", "3600")], times=100)
    code, stdout, stderr = push(canvas, five)
    assert code == 1
    assert waits == [canvas_module.MAX_WAIT_S] * (canvas_module.THROTTLE_TRIES - 1)
    assert stderr.splitlines() == [
        f"normlab report canvas: Canvas still throttled GET {PREFIX}203?include[]="
        "submission_comments after 6 tries (status 429, rate limit exceeded): stopped",
        "normlab report canvas: 3 not pushed: 203 (s203_203_9203_04_rmsnorm.ipynb), 204 "
        "(s204_204_9204_04_rmsnorm.ipynb), 205 (s205_205_9205_04_rmsnorm.ipynb); run the same "
        "command again to push them (what Canvas already has is not sent again)",
    ]
    assert "permission" not in stderr and "2 scores" in stdout
    assert posted() == {"201": (12.0, 1, 1), "202": (12.0, 1, 1)}
    Recorder.faults.clear()
    code, stdout, stderr = push(canvas, five)
    assert code == 0 and stderr == ""
    assert "3 scores, 3 comments and 3 feedback pages posted, 2 already there" in stdout
    assert posted() == {u: (12.0, 1, 1) for u in CLASS} and orphans() == []


def test_a_permission_canvas_refuses_stops_the_push_without_a_wait(canvas, five, waits):
    fault("PUT", PREFIX + "201", 403, body=UNAUTHORIZED)
    code, stdout, stderr = push(canvas, five)
    assert code == 1 and waits == []
    assert stderr.splitlines()[0] == (
        f"normlab report canvas: Canvas refused PUT {PREFIX}201 (403): the token lacks a "
        "permission this push needs (grading this assignment): stopped"
    )
    assert "5 not pushed: 201 (" in stderr and "throttl" not in stderr
    # the page uploaded for the refused comment is deleted again: nothing is left behind
    assert ("canvas", "DELETE") in [(h, m) for h, m, *_ in Recorder.log]
    assert Recorder.state["files"] == {} and posted() == {}


def test_a_server_error_mid_way_leaves_no_orphan_and_a_rerun_finishes(canvas, five, waits):
    fault("PUT", PREFIX + "202", 500, body={"errors": [{"message": "An error occurred."}]})
    fault("GET", PREFIX + "204?", 502, times=1)  # a read is tried again
    code, stdout, stderr = push(canvas, five)
    assert code == 1
    assert stderr.splitlines() == [
        "normlab report canvas: user 202 (s202_202_9202_04_rmsnorm.ipynb) not pushed: PUT "
        f'{PREFIX}202: 500 {{"errors": [{{"message": "An error occurred."}}]}}',
        "normlab report canvas: 1 not pushed: 202 (s202_202_9202_04_rmsnorm.ipynb); run the "
        "same command again to push them (what Canvas already has is not sent again)",
    ]
    assert posted() == {u: (12.0, 1, 1) for u in CLASS if u != "202"}
    assert orphans() == [] and waits == [1.0]
    code, stdout, stderr = push(canvas, five)
    assert code == 0 and stderr == "" and "1 scores" in stdout
    assert posted() == {u: (12.0, 1, 1) for u in CLASS} and orphans() == []
    assert len(Recorder.state["files"]) == 5


def test_a_put_that_failed_after_it_was_done_is_not_sent_again(canvas, five, waits):
    fault("PUT", PREFIX + "202", 504, body=b"Gateway Timeout", after=True)
    code, stdout, stderr = push(canvas, five)
    assert code == 0 and stderr == ""
    assert posted() == {u: (12.0, 1, 1) for u in CLASS} and orphans() == []
    assert [m for _, m, *_ in Recorder.log].count("DELETE") == 0


def test_an_upload_that_cannot_be_deleted_is_named(canvas, five, waits):
    fault("PUT", PREFIX + "203", 500)
    fault("DELETE", "/api/v1/files/", 403, body=UNAUTHORIZED)
    code, stdout, stderr = push(canvas, five)
    assert code == 1
    (left,) = orphans()
    assert stderr.splitlines()[0] == (
        f"normlab report canvas: the feedback page uploaded for user 203 (file {left}) is "
        f"attached to nothing and could not be deleted: delete it in Canvas (DELETE "
        f"/api/v1/files/{left})"
    )
    assert "user 203 (s203_203_9203_04_rmsnorm.ipynb) not pushed: PUT" in stderr


def test_the_assignments_points_are_read_and_a_mismatch_refused_or_scaled(canvas, results, waits):
    Recorder.state["points"] = 100
    code, stdout, stderr = push(canvas, results)
    assert code == 2 and stdout == f"GET {ASSIGNMENT_PATH}\n"
    assert stderr.splitlines()[-1] == (
        "normlab report canvas: the assignment is worth 100 points in Canvas and 04_rmsnorm "
        "is graded out of 16: give --scale to post each score times 100/16, or make the "
        "assignment worth 16 points; nothing was sent"
    )
    assert shape(Recorder.log) == [READ_POINTS]
    code, stdout, stderr = push(canvas, results, "--scale")
    assert code == 0, stderr
    assert posted() == {"101": (75.0, 1, 1), "102": (0.0, 1, 1)}  # 12/16 of 100, 0
    assert "(scores scaled to 100 points)" in stdout
    code, stdout, stderr = push(canvas, results, "--scale")  # 75.0 is what was posted
    assert code == 0 and "0 scores, 0 comments" in stdout and "2 already there" in stdout
    Recorder.state["points"] = 10
    code, stdout, stderr = push(canvas, results, "--scale")
    assert code == 0 and "1 scores, 0 comments" in stdout  # 102's 0 is 0 of any points
    assert Recorder.state["101"]["score"] == 7.5  # 12/16 of 10
    Recorder.state["points"] = None
    code, stdout, stderr = push(canvas, results, "--scale")
    assert code == 2 and "the assignment has no points in Canvas (points_possible: null)" in stderr


def test_a_missing_assignment_sends_nothing(canvas, results, waits):
    fault("GET", ASSIGNMENT_PATH, 404, body=NOT_FOUND)
    code, stdout, stderr = push(canvas, results)
    assert code == 1 and shape(Recorder.log) == [READ_POINTS]
    assert stderr.splitlines()[-1] == (
        "normlab report canvas: Canvas has no assignment 22 in course 11 (404); nothing was sent"
    )


def test_how_long_the_push_waits():
    assert canvas_module._wait({"Retry-After": "7"}, 0) == 7.0
    assert canvas_module._wait({"retry-after": "3600"}, 0) == canvas_module.MAX_WAIT_S
    assert canvas_module._wait({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0) == 0.0
    assert canvas_module._wait({"Retry-After": "nan"}, 0) == canvas_module.MAX_WAIT_S
    assert [canvas_module._wait({}, n) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]


def test_what_the_push_says_is_in_spanish_where_asked(canvas, five, waits, monkeypatch):
    monkeypatch.setenv("NORMLAB_LANG", "es")
    Recorder.state["missing"] = {"202"}
    fault("PUT", PREFIX + "204", 500)
    code, stdout, stderr = push(canvas, five)
    assert code == 1
    lines = stderr.splitlines()
    assert lines[0].startswith("normlab report canvas: Canvas no tiene ninguna entrega del usuario")
    assert lines[1].startswith("normlab report canvas: el usuario 204 (")
    assert lines[2].startswith("normlab report canvas: 1 sin enviar: 204 (")
    assert "3 notas, 3 comentarios" in stdout


def test_a_404_after_the_read_is_not_taken_for_a_missing_student(canvas, five, waits):
    fault("GET", "/create_success", 404, body=NOT_FOUND)  # the first upload's confirmation
    code, stdout, stderr = push(canvas, five)
    assert code == 1 and "Canvas has no submission" not in stderr
    assert stderr.splitlines()[0].startswith(
        "normlab report canvas: user 201 (s201_201_9201_04_rmsnorm.ipynb) not pushed: GET "
    )
    assert "1 not pushed: 201 (" in stderr and "4 scores" in stdout
    assert posted() == {u: (12.0, 1, 1) for u in CLASS if u != "201"}
