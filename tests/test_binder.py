"""Binder, as a learner meets it: the launch link of docs/running.md on a server built like Binder's.

Binder (repo2docker) installs ``environment.yml``, runs the executable ``postBuild`` in the
course's folder, and starts a JupyterLab server that takes none of the course's options; the
launch link names the page to open (``urlpath``). Here the course's committed files are copied
to a temporary folder, ``postBuild`` runs there with a Jupyter configuration folder of its own
(Binder's ``~/.jupyter``), and a plain ``jupyter lab`` serves the folder. Then, through that
server: the launch page opens, the chapters open rendered (the course's settings reached
JupyterLab), every link of both start pages, of the chapters and of the learner's copies of the
labs leads to a file, and in a browser: the start pages open rendered, start no kernel and stay
unmodified, their links open the learner's copies in ``work/``, and the links of a Spanish lab
copy open the Spanish chapter.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import nbformat
import pytest
from conftest import HANG_GUARD_S, ROOT, course_copy, fetch, free_port

from normlab import chapter_files
from normlab.repository import repository_url

pytestmark = pytest.mark.slow

VENV = ROOT / ".venv"


def binder_launch_path() -> str:
    """The page docs/running.md's Binder link opens (its urlpath), e.g. lab/tree/START_HERE.md."""
    text = (ROOT / "docs" / "running.md").read_text(encoding="utf-8")
    home = repository_url(ROOT).removeprefix("https://github.com/")
    links = re.findall(
        r"https://mybinder\.org/v2/gh/" + re.escape(home) + r"/HEAD\?urlpath=([^)\s>]+)", text
    )
    assert links, "docs/running.md has no Binder link to the course's repository"
    return urllib.parse.unquote(links[0])


@pytest.fixture(scope="module")
def binder(tmp_path_factory):
    if not (VENV / "bin" / "jupyter").exists():
        pytest.skip("needs the course's .venv")
    base = tmp_path_factory.mktemp("binder")
    course = course_copy(base / "course")
    assert os.access(course / "postBuild", os.X_OK), "postBuild must be executable (repo2docker)"
    env = {
        **os.environ,
        "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(base / "home"),
        "JUPYTER_CONFIG_DIR": str(base / "home" / ".jupyter"),
        "JUPYTER_DATA_DIR": str(base / "home" / ".local" / "share" / "jupyter"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "DISPLAY": "",
    }
    env.pop("JUPYTERLAB_SETTINGS_DIR", None)
    (base / "home").mkdir()
    built = subprocess.run(
        [str(course / "postBuild")], cwd=course, env=env, capture_output=True, text=True,
        timeout=HANG_GUARD_S, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    port, token = free_port(), secrets.token_hex(16)
    command = [str(VENV / "bin" / "jupyter"), "lab", "--no-browser", f"--port={port}"]
    command += [f"--ServerApp.token={token}", "--ServerApp.port_retries=0"]
    command += ["--allow-root"] if os.getuid() == 0 else []
    server = subprocess.Popen(
        command, cwd=course, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    log: list[str] = []
    threading_log(server, log)
    url = f"http://127.0.0.1:{port}"
    try:
        fetch(f"{url}/api/status?token={token}", server, log)
        yield {"course": course, "url": url, "token": token, "server": server, "log": log}
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def threading_log(process, log):
    def read():
        for line in process.stdout:
            log.append(line)

    threading.Thread(target=read, daemon=True).start()


def api(binder, path: str) -> bytes:
    quoted = urllib.parse.quote(path)
    return fetch(
        f"{binder['url']}{quoted}?token={binder['token']}", binder["server"], binder["log"]
    )


def contents(binder, path: str) -> dict:
    """The server's record of a file of the course (HTTP 200, or the test fails)."""
    quoted = urllib.parse.quote(path)
    address = f"{binder['url']}/api/contents/{quoted}?content=0&token={binder['token']}"
    try:
        with urllib.request.urlopen(address, timeout=60) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as error:
        raise AssertionError(f"{path}: HTTP {error.code}") from None


def relative_links(text: str) -> list[str]:
    targets = re.findall(r"\]\(([^()\s]+)\)", text)
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:|#", t)]


def markdown_of(path: Path) -> str:
    if path.suffix == ".ipynb":
        notebook = nbformat.read(path, as_version=4)
        return "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    return path.read_text(encoding="utf-8")


def test_the_launch_link_opens_the_start_page(binder):
    path = binder_launch_path()
    assert path == "lab/tree/START_HERE.md", path
    assert b"JupyterLab" in api(binder, "/" + path)
    assert contents(binder, "START_HERE.md")["type"] == "file"


def test_chapters_open_rendered(binder):
    """postBuild applied the course's settings: a click on a chapter shows it rendered."""
    answer = api(binder, "/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
    composite = json.loads(answer)["settings"]["defaultViewers"]
    assert composite.get("markdown") == "Markdown Preview", composite


def test_every_link_of_the_start_pages_chapters_and_lab_copies_leads_to_a_file(binder):
    course = binder["course"]
    pages = [course / "START_HERE.md", course / "es" / "START_HERE.md"]
    pages += chapter_files(course / "theory", ".md")
    pages += chapter_files(course / "es" / "theory", ".md")
    pages += chapter_files(course / "work", ".ipynb")
    pages += chapter_files(course / "work" / "es", ".ipynb")
    your_labs, followed, broken = [], 0, []
    for page in pages:
        for target in relative_links(markdown_of(page)):
            path = os.path.normpath((page.parent / target.split("#")[0]).relative_to(course))
            if path.startswith(".."):
                broken.append(f"{page.relative_to(course)} -> {target} (outside the course)")
                continue
            try:
                record = contents(binder, path)
            except AssertionError as error:
                broken.append(f"{page.relative_to(course)} -> {target} ({error})")
                continue
            followed += 1
            if page.name == "START_HERE.md" and path.startswith("work/"):
                your_labs.append(path)
                assert record["type"] == "notebook", path
    assert not broken, "\n".join(broken)
    labs = [p.name for p in chapter_files(ROOT / "labs", ".ipynb")]
    assert sorted(your_labs) == sorted(
        [f"work/{name}" for name in labs] + [f"work/es/{name}" for name in labs]
    )
    assert followed > 4 * len(labs)


def sessions(binder) -> dict[str, str]:
    """Session id -> the path of the document its kernel serves, of every session the server
    holds."""
    found = json.loads(api(binder, "/api/sessions"))
    return {s["id"]: s["path"] for s in found if s.get("kernel")}


def open_start_page(binder, browser, start: str, lab: str) -> dict:
    """Open the start page ``start`` in JupyterLab, as the launch link does, then click its link
    to the learner's copy ``lab``; report what the browser and the server saw."""
    course = binder["course"]
    before, sessions_before = (course / start).read_bytes(), sessions(binder)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(HANG_GUARD_S * 1000)
    try:
        # A workspace of its own: JupyterLab restores a workspace's tabs, and those of an
        # earlier page would stand in front of this one.
        workspace = f"/lab/workspaces/{secrets.token_hex(4)}/tree/{start}"
        page.goto(f"{binder['url']}{workspace}?token={binder['token']}")
        view = ".jp-MarkdownViewer .jp-RenderedMarkdown"
        page.locator(f"{view} h1").first.wait_for()
        title = page.locator(f"{view} h1").first.inner_text()
        hrefs = page.locator(f"{view} a[href]").evaluate_all("els => els.map(e => e.href)")
        page.locator(f"{view} a[href*='{lab}']").first.click()
        # The click opens the learner's copy, a notebook, which starts its kernel: once the
        # server holds that session, it would hold one for the start page too, had it asked.
        new: dict[str, str] = {}
        for _ in range(HANG_GUARD_S * 5):  # only a hung server ends this loop unmet
            new = {k: v for k, v in sessions(binder).items() if k not in sessions_before}
            if lab in new.values():
                break
            page.wait_for_timeout(200)
        # Its kernel has started and told JupyterLab what it is (JupyterLab then writes the
        # kernel's kernelspec and language_info into the notebook; a difference marks it
        # modified): the notebook's toolbar shows the kernel idle.
        page.locator(".jp-NotebookPanel-toolbar [data-status='idle']").first.wait_for()
        page.wait_for_timeout(500)
        tabs = page.locator(".lm-DockPanel .lm-TabBar-tab").evaluate_all(
            "els => els.map(e => [e.innerText, e.className])"
        )
        return {
            "title": title,
            "hrefs": hrefs,
            "new sessions": sorted(new.values()),
            "tabs": tabs,
            "file unchanged": (course / start).read_bytes() == before,
        }
    finally:
        page.close()
        for session in sessions(binder):
            if session not in sessions_before:  # the lab's kernel, shut down for the next test
                request = urllib.request.Request(
                    f"{binder['url']}/api/sessions/{session}?token={binder['token']}",
                    method="DELETE",
                )
                urllib.request.urlopen(request, timeout=60).close()


@pytest.mark.parametrize("language", ["en", "es"])
def test_the_start_page_opens_rendered_without_a_kernel_and_leads_to_the_labs(
    binder, browser, language
):
    """The start page in JupyterLab: rendered, no kernel, never modified; each row's "your lab"
    link is the learner's copy in work/ (work/es/ for the Spanish page), and a click opens it."""
    start = binder_launch_path().removeprefix("lab/tree/")
    work = "work"
    if language == "es":
        start, work = f"es/{start}", "work/es"
    seen = open_start_page(binder, browser, start, f"{work}/03_layernorm.ipynb")
    assert seen["title"].startswith("normlab —"), seen
    assert seen["new sessions"] == [f"{work}/03_layernorm.ipynb"], seen
    # Two tabs: the start page, which shows no unsaved change, and the lab, now in front.
    (page_tab,) = [c for t, c in seen["tabs"] if t.strip() == Path(start).name]
    (lab_tab,) = [c for t, c in seen["tabs"] if t.strip() == "03_layernorm.ipynb"]
    assert "lm-mod-dirty" not in page_tab and "lm-mod-current" in lab_tab, seen["tabs"]
    # ... and the fresh lab, its kernel started, shows no unsaved change either
    assert "jp-mod-dirty" not in lab_tab and "lm-mod-dirty" not in lab_tab, seen["tabs"]
    assert seen["file unchanged"], seen
    labs = sorted(p.name for p in (ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))
    local = {h.split("?")[0] for h in seen["hrefs"] if h.startswith(binder["url"])}
    linked = {h for h in local if "/files/work/" in h}
    assert linked == {f"{binder['url']}/files/{work}/{name}" for name in labs}, seen["hrefs"]
    for href in local:  # each address the page gives a link answers
        assert urllib.request.urlopen(f"{href}?token={binder['token']}", timeout=60).status == 200


def test_a_spanish_lab_copy_links_open_the_spanish_chapter_in_the_browser(binder, browser):
    """Open work/es/03_layernorm.ipynb in JupyterLab and click its link to the chapter.

    JupyterLab draws a notebook's cells as they scroll into view, so the browser sees the links
    of the first cells; every link of every copy is followed through the server above.
    """
    assert contents(binder, "work/es/03_layernorm.ipynb")["type"] == "notebook"
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(HANG_GUARD_S * 1000)
    try:
        page.goto(f"{binder['url']}/lab/tree/work/es/03_layernorm.ipynb?token={binder['token']}")
        link = ".jp-NotebookPanel .jp-RenderedMarkdown a[href]:not(.jp-InternalAnchorLink)"
        page.locator(link).first.wait_for()
        hrefs = page.locator(link).evaluate_all("els => els.map(e => e.href)")
        local = [h for h in hrefs if h.startswith(binder["url"])]
        assert any("/files/es/theory/03_layernorm.md" in h for h in local), hrefs
        for href in local:  # each address the page gives a link answers
            assert page.request.get(href).status == 200, href
        page.locator(f"{link}[href*='es/theory/03_layernorm.md']").first.click()
        # JupyterLab opens the chapter in a tab of its own, rendered (Markdown Preview).
        heading = page.locator(".jp-MarkdownViewer .jp-RenderedMarkdown h1").first
        heading.wait_for()
        assert "Normalización por capas" in heading.inner_text()
        tabs = page.locator(".lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel")
        assert "03_layernorm.md" in tabs.all_inner_texts()
    finally:
        page.close()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
