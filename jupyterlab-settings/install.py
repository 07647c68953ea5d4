"""Apply the course's JupyterLab settings where JupyterLab reads a user's settings.

``make lab`` and the conda route point JupyterLab at this folder (``--LabApp.app_settings_dir``).
A server that someone else starts (Binder) takes no such option, so ``postBuild`` runs this
script: each plugin's settings in ``overrides.json`` are merged into that plugin's file in the
user settings folder (``$JUPYTERLAB_SETTINGS_DIR``, else ``JUPYTER_CONFIG_DIR/lab/user-settings``,
as JupyterLab looks for it). Settings of other plugins, and other keys of these plugins, are
kept; a file that is not plain JSON (the user's own, with comments) is left alone and named.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def user_settings_dir() -> Path:
    if os.environ.get("JUPYTERLAB_SETTINGS_DIR"):
        return Path(os.environ["JUPYTERLAB_SETTINGS_DIR"])
    from jupyter_core.paths import jupyter_config_dir

    return Path(jupyter_config_dir()) / "lab" / "user-settings"


def install(target: Path) -> list[Path]:
    """Write each plugin's settings under ``target``; return the files written."""
    overrides = json.loads((HERE / "overrides.json").read_text(encoding="utf-8"))
    written = []
    for plugin_id, settings in overrides.items():
        package, plugin = plugin_id.split(":", 1)
        path = target.joinpath(*package.split("/"), f"{plugin}.jupyterlab-settings")
        current = {}
        if path.is_file():
            try:
                current = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                print(f"left {path} as it is (not plain JSON): set it by hand", file=sys.stderr)
                continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**current, **settings}, indent=2) + "\n", encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in install(user_settings_dir()):
        print(f"course setting written: {path}")
