"""Try the demos' knobs in a real JupyterLab, driven by headless Chromium, and screenshot them.

    .venv/bin/python site/knobs_in_jupyterlab.py [OUT_FOLDER]     (default: _artifacts/screens)

For each demo with a "Knobs to turn" section, the knob cells are copied into a notebook in a
temporary folder (the demo itself is never opened, so nothing can autosave over it), JupyterLab
is started on 127.0.0.1 on a free port, each cell is run, a screenshot is taken, one slider is
dragged, and a second screenshot shows the redrawn picture. The script fails if a widget does
not appear or its picture does not change when the slider moves.
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMOS = ["02_batchnorm", "03_layernorm", "04_rmsnorm"]
CHROMIUM = "/usr/bin/chromium"


def knob_cells(stem: str) -> list[dict]:
    notebook = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())
    return [
        cell
        for cell in notebook["cells"]
        if cell.get("id", "").startswith("knobs-") and cell["cell_type"] == "code"
    ]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_lab(folder: Path, port: int, token: str) -> subprocess.Popen:
    lab = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "jupyter"),
            "lab",
            "--no-browser",
            "--allow-root",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--ServerApp.token={token}",
            f"--ServerApp.root_dir={folder}",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api?token={token}", timeout=2)
            return lab
        except OSError:
            time.sleep(0.5)
    lab.terminate()
    raise SystemExit("JupyterLab did not start")


def drag_first_slider(page) -> None:
    handle = page.locator(".jp-OutputArea .widget-slider .noUi-handle").first
    box = handle.bounding_box()
    track = page.locator(".jp-OutputArea .widget-slider .noUi-base").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(track["x"] + track["width"] * 0.15, box["y"] + box["height"] / 2, steps=8)
    page.mouse.up()


def picture(page) -> str:
    return page.locator(".jp-OutputArea img").first.get_attribute("src") or ""


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    out = Path(argv[0]) if argv else ROOT / "_artifacts" / "screens"
    out.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="normlab-knobs-"))
    names = []
    for stem in DEMOS:
        for index, cell in enumerate(knob_cells(stem)):
            name = f"knobs_{stem}_{index + 1}"
            setup = {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": "from normlab.widgets import *  # the knob cells' own imports may be above",
            }
            notebook = {
                "cells": [setup, cell],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
                "nbformat": 4,
                "nbformat_minor": 4,
            }
            (folder / f"{name}.ipynb").write_text(json.dumps(notebook))
            names.append(name)
    port, token = free_port(), secrets.token_hex(16)
    lab = start_lab(folder, port, token)
    failures = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=["--headless", "--no-sandbox", "--disable-gpu"],
            )
            for name in names:
                # A fresh page and workspace per notebook: one notebook open at a time.
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                page.goto(
                    f"http://127.0.0.1:{port}/lab/workspaces/{name}/tree/{name}.ipynb"
                    f"?reset&token={token}"
                )
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
                page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=60_000)
                page.locator(".jp-Cell .jp-InputArea-editor").first.click()
                page.keyboard.press("Shift+Enter")  # the setup cell
                page.keyboard.press("Shift+Enter")  # the knob cell
                try:
                    page.wait_for_selector(".jp-OutputArea img", timeout=90_000)
                except Exception:
                    page.screenshot(path=str(out / f"{name}_error.png"))
                    raise
                page.wait_for_timeout(500)
                before = picture(page)
                no_news = page.get_by_role("button", name="No")  # "get Jupyter news?" toast
                if no_news.count():
                    no_news.first.click()
                page.screenshot(path=str(out / f"{name}_before.png"))
                drag_first_slider(page)
                deadline = time.monotonic() + 30
                while picture(page) == before and time.monotonic() < deadline:
                    page.wait_for_timeout(200)
                page.wait_for_timeout(500)
                page.screenshot(path=str(out / f"{name}_after.png"))
                if picture(page) == before:
                    failures.append(f"{name}: the picture did not change when the slider moved")
                print(f"{name}: {'ok' if picture(page) != before else 'NOT REDRAWN'}")
                page.close()
            browser.close()
    finally:
        lab.terminate()
        lab.wait(timeout=20)
        shutil.rmtree(folder, ignore_errors=True)
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
