"""The README's first command: `make lab` serves JupyterLab with the course start page."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading

import pytest
from conftest import HANG_GUARD_S, ROOT, fetch, free_port

from normlab import chapter_files


def stop(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)


@pytest.mark.slow
def test_make_lab_serves_the_start_page():
    port = free_port()
    process = subprocess.Popen(
        ["make", "lab", f"PORT={port}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "DISPLAY": ""},
    )
    # Only a hung server is stopped (the reads below then end); how soon JupyterLab answers
    # depends on the machine's load and is not asserted.
    guard = threading.Timer(HANG_GUARD_S, stop, [process])
    guard.start()
    try:
        token, log = None, []
        while token is None:
            line = process.stdout.readline()
            if not line:
                break
            log.append(line)
            found = re.search(
                rf"http://(?:localhost|127\.0\.0\.1):{port}/lab/tree/START_HERE\.md\?token=(\w+)",
                line,
            )
            token = found and found.group(1)
        assert token, "".join(log[-20:])
        # The printed URL opens the start page itself, not the Launcher.
        page = fetch(f"http://localhost:{port}/lab/tree/START_HERE.md?token={token}", process, log)
        assert b"JupyterLab" in page
        url = f"http://localhost:{port}/api/contents/START_HERE.md?token={token}"
        assert b"start here" in fetch(url, process, log)
    finally:
        guard.cancel()
        stop(process)
        process.wait(timeout=HANG_GUARD_S)


def test_start_page_links_every_chapter_and_lab():
    text = (ROOT / "START_HERE.md").read_text(encoding="utf-8")
    for chapter in chapter_files(ROOT / "theory", ".md"):
        assert f"](theory/{chapter.name})" in text
        assert f"](work/{chapter.stem}.ipynb)" in text
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        # work/ is the learner's copy of labs/, made by `make lab` before the page opens.
        original = re.sub(r"^work/", "labs/", target)
        assert (ROOT / original).exists(), target
