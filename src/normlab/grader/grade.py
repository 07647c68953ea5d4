"""Door 2: ``normlab grade`` — authoritative grading of notebooks, each in its own process.

At class scale: submissions are found with their student ids, graded in parallel, and every
finished result is written to a cache keyed by the notebook's content hash, so an interrupted
run resumes where it stopped and a re-run regrades only what changed.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from normlab.grader import attribution, core, lms
from normlab.grader.forkserver import ForkServer
from normlab.grader.registry import lab_for_path
from normlab.grader.report import SubmissionResult, write_atomically
from normlab.grader.sandbox import DEFAULT_MEMORY_MB, ChildSubmission, fork_server_environment

DEFAULT_TIMEOUT = 60.0
MAX_NOTEBOOK_BYTES = 50 << 20


class UsageError(Exception):
    """Bad command-line input (a path that does not exist, nothing to grade)."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One submission to grade: the notebook and the student it belongs to."""

    path: Path
    student: str


def student_of(path: Path, folder: Path | None) -> str:
    """The student id of a submission, from the documented layouts.

    * ``SUBMISSIONS/STUDENT/03_layernorm.ipynb`` (a folder per student): the folder's name;
    * ``SUBMISSIONS/03_layernorm_STUDENT.ipynb``, ``STUDENT_03_layernorm.ipynb``,
      ``STUDENT - 03_layernorm (1).ipynb`` (LMS exports): the file name without the lab's stem;
    * anything else: the file name.
    """
    if folder is not None and path.parent != folder:
        return path.relative_to(folder).parts[0]
    lab = lab_for_path(path)
    name = path.stem
    if lab is not None:
        name = re.sub(re.escape(lab.stem), " ", name, flags=re.IGNORECASE)
    name = re.sub(r"\(\d+\)", " ", name)  # "(1)": a browser's copy number, not the student
    name = re.sub(r"[\s_\-.]+", " ", name).strip().replace(" ", "_")
    return name or path.stem


def find_submissions(paths: list[str]) -> list[Entry]:
    """Every ``.ipynb`` named or found below the given folders, with student ids, sorted."""
    found: list[Entry] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found += [
                Entry(p, lms.student_id(p, path, student_of))
                for p in sorted(path.rglob("*.ipynb"))
                if ".ipynb_checkpoints" not in p.parts and p.is_file()
            ]
        elif path.is_file():
            found.append(Entry(path, lms.student_id(path, None, student_of)))
        else:
            raise UsageError(f"no such file or folder: {raw}")
    if not found:
        raise UsageError(f"no notebooks (.ipynb) found in: {' '.join(paths)}")
    return lms.unique(found, lambda p: getattr(lab_for_path(p), "stem", None))


def find_notebooks(paths: list[str]) -> list[Path]:
    """Every notebook named or found below the given folders, sorted (checkpoints skipped)."""
    return [entry.path for entry in find_submissions(paths)]


def read_code_cells(path: Path) -> tuple[list[str], dict]:
    """The code cells' sources and the notebook metadata; ValueError with a clear reason."""
    if path.stat().st_size > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"the file is larger than {MAX_NOTEBOOK_BYTES >> 20} MB")
    raw = path.read_bytes()
    try:
        notebook = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not a notebook: the file is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise ValueError(
            f"not a valid notebook: broken JSON at line {error.lineno}, column {error.colno} "
            f"({error.msg}); was the file truncated or edited by hand?"
        ) from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise ValueError("not a notebook: no list of cells in the file")
    cells = []
    for cell in notebook["cells"]:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            if isinstance(source, list):
                source = "".join(s for s in source if isinstance(s, str))
            if not isinstance(source, str):
                raise ValueError("not a valid notebook: a code cell's source is not text")
            cells.append(source)
    metadata = notebook.get("metadata") if isinstance(notebook.get("metadata"), dict) else {}
    return cells, metadata


def _cell_error_summary(errors: list[dict], limit: int = 3) -> str:
    parts = []
    for error in errors[:limit]:
        message = str(error.get("message", "")).strip()
        where = f"code cell {int(error.get('cell', -1)) + 1}: {error.get('error_type')}"
        parts.append(f"{where}: {message}" if message else where)
    more = f" (+{len(errors) - limit} more)" if len(errors) > limit else ""
    return "; ".join(parts) + more


@dataclasses.dataclass(frozen=True)
class Settings:
    """How each submission is run. Part of the cache key: change one, and everything regrades."""

    timeout: float = DEFAULT_TIMEOUT
    memory_mb: int = DEFAULT_MEMORY_MB
    bwrap: bool = False
    hide: tuple[str, ...] = ()
    fork: bool = True  # start submissions from a fork server (not with bwrap)


def grade_notebook(
    path: Path, settings: Settings = Settings(), student: str | None = None, fork_server=None
) -> SubmissionResult:
    """Grade one notebook. Never raises for anything the notebook contains."""
    shown = str(path)
    student = student if student is not None else student_of(path, None)
    try:
        cells, metadata = read_code_cells(path)
    except (OSError, ValueError) as error:
        lab = lab_for_path(path)  # the file name may still say which lab it was meant for
        return SubmissionResult(
            shown,
            lab.stem if lab else None,
            0,
            lab.max_score if lab else 0,
            str(error),
            [],
            student,
        )
    lab = lab_for_path(path, metadata)
    if lab is None:
        return SubmissionResult(
            shown,
            None,
            0,
            0,
            "cannot tell which lab this is: name the file after the lab (e.g. 03_layernorm.ipynb)",
            [],
            student,
        )
    with ChildSubmission(
        cells,
        lab.forbidden,
        budget=settings.timeout,
        memory_mb=settings.memory_mb,
        bwrap=settings.bwrap,
        hide=settings.hide,
        fork_server=fork_server,
    ) as submission:
        results = core.run_checks(lab, submission)
        error = None
        internal = [r for r in results if r.message.startswith(core.INTERNAL_ERROR)]
        if internal:
            error = internal[0].message
        elif submission.dead_reason:
            error = submission.dead_reason
            tail = submission.output_tail()
            if tail:
                error += f"\nlast output: {tail[-300:]}"
        else:
            # Stubs that raise NotImplementedError are a lab in progress, not a broken notebook.
            errors = [
                e for e in submission.cell_errors if e.get("error_type") != "NotImplementedError"
            ]
            if errors:
                error = attribution.learner_cells_message(errors, cells, lab, results)
    score = sum(r.points for r in results)
    return SubmissionResult(shown, lab.stem, score, lab.max_score, error, results, student)


def grader_fingerprint(settings: Settings, extra_checks: Path | None = None) -> str:
    """Hash of the grader's own code, the extra checks and the settings: the cache's validity."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for source in sorted(package.rglob("*.py")):
        digest.update(source.relative_to(package).as_posix().encode())
        digest.update(source.read_bytes())
    if extra_checks is not None:
        digest.update(Path(extra_checks).read_bytes())
    digest.update(json.dumps(dataclasses.asdict(settings), sort_keys=True).encode())
    return digest.hexdigest()


class ResultCache:
    """Finished results keyed by path and content hash, saved atomically after each one."""

    def __init__(self, path: Path | None, fingerprint: str, force: bool = False):
        self.path, self.fingerprint = path, fingerprint
        self.lock = threading.Lock()
        self.entries: dict = {}
        if path is not None and path.exists() and not force:
            try:
                stored = json.loads(path.read_text(encoding="utf-8"))
                if stored.get("fingerprint") == fingerprint:
                    self.entries = dict(stored.get("results", {}))
            except (OSError, ValueError, AttributeError):
                self.entries = {}  # a damaged cache only costs a regrade

    @staticmethod
    def content_hash(path: Path) -> str | None:
        try:
            return hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            return None

    def get(self, entry: Entry) -> SubmissionResult | None:
        stored = self.entries.get(str(entry.path))
        digest = self.content_hash(entry.path)
        if stored and digest and stored.get("sha256") == digest:
            try:
                return SubmissionResult.from_dict(stored["result"])
            except (KeyError, TypeError):
                return None
        return None

    def put(self, entry: Entry, result: SubmissionResult) -> None:
        if self.path is None:
            return
        with self.lock:
            self.entries[str(entry.path)] = {
                "sha256": self.content_hash(entry.path),
                "result": result.as_dict(),
            }
            payload = {"fingerprint": self.fingerprint, "results": self.entries}
            write_atomically(self.path, json.dumps(payload, sort_keys=True, indent=1))


def grade_all(
    entries: list[Entry],
    settings: Settings = Settings(),
    jobs: int = 1,
    cache: ResultCache | None = None,
    on_result: Callable[[SubmissionResult, bool], None] | None = None,
) -> list[SubmissionResult]:
    """Grade every entry (``jobs`` at a time), reusing cached results of unchanged notebooks.

    Returns the results in the order of ``entries``; ``on_result(result, reused)`` is called as
    each one is ready (for a progress bar).
    """
    results: dict[int, SubmissionResult] = {}
    pending = []
    for index, entry in enumerate(entries):
        cached = cache.get(entry) if cache else None
        if cached is not None:
            results[index] = cached
            if on_result:
                on_result(cached, True)
        else:
            pending.append(index)

    if jobs > 1 and pending:
        # Import the oracle's library here, once, before worker threads need it: importing a
        # large native library from two threads at once is asking for a crash.
        try:
            import torch  # noqa: F401
        except ImportError:
            pass
    with tempfile.TemporaryDirectory(prefix="normlab-fork-") as server_home:
        server = None
        # One notebook gains nothing from a server that first imports what it would import.
        if settings.fork and not settings.bwrap and len(pending) > 1:
            server = ForkServer(fork_server_environment(server_home))

        def work(index: int) -> SubmissionResult:
            entry = entries[index]
            return grade_notebook(entry.path, settings, entry.student, server)

        try:
            return _run_pool(entries, pending, results, work, jobs, cache, on_result)
        finally:
            if server is not None:
                server.close()


def _run_pool(entries, pending, results, work, jobs, cache, on_result) -> list[SubmissionResult]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(work, index): index for index in pending}
        try:
            for future in concurrent.futures.as_completed(futures):
                index = futures[future]
                results[index] = future.result()
                if cache:
                    cache.put(entries[index], results[index])
                if on_result:
                    on_result(results[index], False)
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return [results[i] for i in range(len(entries))]


def grade_paths(
    paths: list[str], timeout: float = DEFAULT_TIMEOUT, memory_mb: int = DEFAULT_MEMORY_MB
) -> list[SubmissionResult]:
    """Grade every notebook found in ``paths`` one after the other (no cache)."""
    return grade_all(find_submissions(paths), Settings(timeout=timeout, memory_mb=memory_mb))


def default_jobs() -> int:
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )


def is_interactive() -> bool:
    return sys.stderr.isatty()
