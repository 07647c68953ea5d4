"""`normlab report canvas` against a local Canvas: the two documented endpoints, on 127.0.0.1.

The server keeps each submission's score and comments, answers the GET and the PUT the push
uses, and records every request (method, path, form body, Authorization header).
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import check_dict, run_cli

TOKEN = "secret-token-7f3a"
COURSE, ASSIGNMENT = "11", "22"
PREFIX = f"/api/v1/courses/{COURSE}/assignments/{ASSIGNMENT}/submissions/"
HOSTILE_ERROR = "boom&submission[posted_grade]=100&comment[text_comment]=x\n<b>second</b>"


class FakeCanvas(BaseHTTPRequestHandler):
    state: dict = {}
    log: list = []

    def log_message(self, *args):  # quiet
        pass

    def _user(self):
        path = urllib.parse.urlsplit(self.path).path
        if not path.startswith(PREFIX) or not path[len(PREFIX) :].isdigit():
            return None
        return path[len(PREFIX) :]

    def _answer(self, user):
        state = self.state.setdefault(user, {"score": None, "submission_comments": []})
        data = json.dumps({"user_id": int(user), **state}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.log.append(("GET", self.path, None, self.headers.get("Authorization")))
        user = self._user()
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        if user is None or query != {"include[]": ["submission_comments"]}:
            self.send_error(404)
            return
        self._answer(user)

    def do_PUT(self):
        length = int(self.headers.get("Content-Length", 0))
        form = urllib.parse.parse_qs(self.rfile.read(length).decode(), strict_parsing=True)
        self.log.append(("PUT", self.path, form, self.headers.get("Authorization")))
        user = self._user()
        if user is None or "?" in self.path:
            self.send_error(404)
            return
        state = self.state.setdefault(user, {"score": None, "submission_comments": []})
        if "submission[posted_grade]" in form:
            state["score"] = float(form["submission[posted_grade]"][0])
        if "comment[text_comment]" in form:
            state["submission_comments"].append({"comment": form["comment[text_comment]"][0]})
        self._answer(user)


@pytest.fixture
def canvas():
    FakeCanvas.state, FakeCanvas.log = {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeCanvas)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def submission(student, score, error=None, path=None):
    checks = [check_dict("forward", score, 12), check_dict("backward", 0, 4)]
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
    }


@pytest.fixture
def results(tmp_path):
    graded = [
        submission("101", 12),
        submission("102", 0, error=HOSTILE_ERROR),
        submission("102", 0, path="102_again_04_rmsnorm.ipynb"),  # the better of two counts
        submission("../../users/1", 12),  # not a Canvas user id: no request at all
        submission("7?as_user_id=1", 12),
    ]
    path = tmp_path / "graded.json"
    path.write_text(json.dumps({"submissions": graded}), encoding="utf-8")
    return path


def push(url, results, *extra, env=None):
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


def test_scores_and_comments_once_and_nothing_on_a_rerun(canvas, results, monkeypatch):
    monkeypatch.setenv("CANVAS_TOKEN", TOKEN)
    code, stdout, stderr = push(canvas, results)
    assert code == 0, stderr
    log = FakeCanvas.log
    assert [(m, p) for m, p, _, _ in log] == [
        ("GET", PREFIX + "101?include[]=submission_comments"),
        ("PUT", PREFIX + "101"),
        ("GET", PREFIX + "102?include[]=submission_comments"),
        ("PUT", PREFIX + "102"),
    ]
    assert all(auth == f"Bearer {TOKEN}" for *_, auth in log)
    first, second = log[1][2], log[3][2]
    assert set(first) == {"submission[posted_grade]", "comment[text_comment]"}
    assert first["submission[posted_grade]"] == ["12"]
    assert first["comment[text_comment]"][0].startswith("12/16 points.")
    # the student's error text is the comment's text, never another field
    assert second["submission[posted_grade]"] == ["0"]
    assert "boom&submission[posted_grade]=100" in second["comment[text_comment]"][0]
    assert len(second["comment[text_comment]"]) == 1
    assert FakeCanvas.state["101"]["score"] == 12.0
    assert TOKEN not in stdout + stderr
    assert "not a Canvas user id" in stderr
    # a rerun reads, and changes nothing
    before = len(log)
    code, stdout, stderr = push(canvas, results)
    assert code == 0, stderr
    assert [m for m, *_ in log[before:]] == ["GET", "GET"]
    assert all(len(s["submission_comments"]) == 1 for s in FakeCanvas.state.values())
    assert "0 scores and 0 comments posted, 2 already there, 2 skipped" in stdout


def test_a_changed_score_posts_the_score_and_the_new_comment_only(canvas, results, monkeypatch):
    monkeypatch.setenv("CANVAS_TOKEN", TOKEN)
    assert push(canvas, results)[0] == 0
    data = json.loads(results.read_text(encoding="utf-8"))
    data["submissions"][0] = submission("101", 16)
    data["submissions"][0]["checks"] = [check_dict("forward", 12, 12), check_dict("backward", 4, 4)]
    results.write_text(json.dumps(data), encoding="utf-8")
    before = len(FakeCanvas.log)
    assert push(canvas, results)[0] == 0
    puts = [(p, f) for m, p, f, _ in FakeCanvas.log[before:] if m == "PUT"]
    assert [p for p, _ in puts] == [PREFIX + "101"]
    assert puts[0][1]["submission[posted_grade]"] == ["16"]
    assert len(FakeCanvas.state["101"]["submission_comments"]) == 2


def test_dry_run_prints_every_request_and_sends_none(canvas, results, monkeypatch, tmp_path):
    monkeypatch.setenv("CANVAS_TOKEN", TOKEN)
    code, stdout, stderr = push(canvas, results, "--dry-run")
    assert code == 0, stderr
    assert FakeCanvas.log == []
    lines = stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["GET", "PUT", "GET", "PUT"]
    assert lines[1].startswith(f"PUT {PREFIX}101 submission[posted_grade]=12&comment[text_")
    assert TOKEN not in stdout + stderr


def test_the_token_comes_from_the_environment_or_a_file_only(
    canvas, results, monkeypatch, tmp_path
):
    monkeypatch.delenv("CANVAS_TOKEN", raising=False)
    code, _, stderr = push(canvas, results)
    assert code == 2 and "CANVAS_TOKEN" in stderr and FakeCanvas.log == []
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    code, stdout, stderr = push(canvas, results, "--token-file", str(token_file))
    assert code == 0, stderr
    assert all(auth == f"Bearer {TOKEN}" for *_, auth in FakeCanvas.log)
    assert TOKEN not in stdout + stderr
    code, _, stderr = push("http://canvas.example.edu", results, "--token-file", str(token_file))
    assert code == 2 and "https" in stderr  # a token never travels in clear text
