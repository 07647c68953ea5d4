"""Door 2: ``normlab grade`` — authoritative grading of notebooks, each in its own process.

At class scale: submissions are found with their student ids, graded in parallel, and every
finished result is written to a cache keyed by the SHA-256 of the exact bytes graded (each
notebook is read once; those bytes are hashed, parsed and graded), so an interrupted run resumes
where it stopped and a re-run regrades only what changed.

Every submission is behind a barrier: whatever its notebook or its process does, grading it
ends with a result (its error said plainly), and the next one is graded.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from normlab.grader import attribution, core, i18n, identity, inert, trap
from normlab.grader.identity import Identity
from normlab.grader.isolation import files, hidden, worker
from normlab.grader.isolation.limits import DEFAULT, Limits
from normlab.grader.isolation.processes import Reaper
from normlab.grader.isolation.sandbox import (
    ChildSubmission,
    Isolation,
    choose_isolation,
    fork_servers,
    hidden_paths,
)
from normlab.grader.registry import all_labs
from normlab.grader.results import SubmissionResult, write_atomically


class UsageError(Exception):
    """Bad command-line input (a path that does not exist, nothing to grade)."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One submission to grade: the notebook and who it is (decided once, in ``identity``)."""

    path: Path
    identity: Identity

    @property
    def student(self) -> str:
        return self.identity.student


def find_submissions(paths: list[str], lab: str | None = None) -> list[Entry]:
    """Every ``.ipynb`` named or found below the given folders, with its identity, sorted.

    ``lab``: the assignment's lab (``--lab``), which every notebook is graded as.
    """
    if lab is not None and lab not in all_labs():
        raise UsageError(f"--lab must be one of {', '.join(all_labs())}")
    found: list[Entry] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            submitters = identity.read_gradescope_submitters(path)
            found += [
                Entry(p, identity.identify(p, path, lab, submitters))
                for p in sorted(path.rglob("*.ipynb"))
                if ".ipynb_checkpoints" not in p.parts and p.is_file()
            ]
        elif path.is_file():
            found.append(Entry(path, identity.identify(path, None, lab)))
        else:
            raise UsageError(f"no such file or folder: {raw}")
    if not found:
        raise UsageError(f"no notebooks (.ipynb) found in: {' '.join(paths)}")
    # An id shows as itself: no control, bidi or invisible character acts (inert.identifier).
    return [
        dataclasses.replace(
            e,
            identity=dataclasses.replace(
                e.identity,
                student=inert.identifier(e.identity.student),
                name=inert.identifier(e.identity.name),
            ),
        )
        for e in found
    ]


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


def json_depth(raw: bytes) -> int:
    """How deeply the JSON in ``raw`` nests, found without recursion (strings skipped)."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return int(np.cumsum(steps).max())


EMPTY_FILE = (
    "not a notebook: the file is empty (no bytes, or only blank space); save the notebook in "
    "Jupyter and hand in the saved file again"
)


def too_large(limit: int) -> str:
    """Why a notebook over ``limit`` bytes is refused, and what the student and the instructor
    can do: nothing past the limit is read (the limit protects the grader's memory), so the
    outputs that almost always make a notebook that large are named, not stripped."""
    return (
        f"the file is larger than {limit >> 20} MB: stored outputs (figures, long printouts) are "
        "what make a notebook this large; clear them (`Edit > Clear Outputs of All Cells`), save, "
        "and hand the notebook in again. An instructor can raise the limit with "
        f"`--limit max_notebook_bytes={2 * limit}`"
    )


def read_notebook_bytes(path, limits: Limits = DEFAULT) -> bytes:
    """A notebook file's bytes (``files.read_regular_file``), refused with ``too_large``."""
    try:
        return files.read_regular_file(path, limits.max_notebook_bytes)
    except files.FileTooLarge:
        raise ValueError(too_large(limits.max_notebook_bytes)) from None


def parse_notebook(raw: bytes, limits: Limits = DEFAULT) -> tuple[list[str], dict]:
    """The code cells' sources and the notebook metadata from a notebook's bytes.

    ValueError with a clear reason for anything that is not a notebook; every field used is
    checked by type (a notebook is the student's to write).
    """
    if len(raw) > limits.max_notebook_bytes:
        raise ValueError(too_large(limits.max_notebook_bytes))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not a notebook: the file is not UTF-8 text") from None
    if not text.strip():
        raise ValueError(EMPTY_FILE)
    if json_depth(raw) > limits.max_json_depth:
        raise ValueError(
            f"not a valid notebook: its JSON nests more than {limits.max_json_depth} levels deep"
        )
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"not a valid notebook: broken JSON at line {error.lineno}, column {error.colno} "
            f"({error.msg}); was the file truncated or edited by hand?"
        ) from None
    except (ValueError, RecursionError):
        raise ValueError("not a valid notebook: unreadable JSON") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise ValueError("not a notebook: no list of cells in the file")
    cells = []
    for cell in notebook["cells"]:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            if isinstance(source, list) and all(isinstance(s, str) for s in source):
                source = "".join(source)
            if not isinstance(source, str):
                raise ValueError("not a valid notebook: a code cell's source is not text")
            cells.append(source)
    metadata = notebook.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    declared = metadata.get("normlab")
    # Only a well-formed declaration is used: {"normlab": {"lab": "03_layernorm", "lang": "es"}}.
    kept = {}
    if isinstance(declared, dict):
        if isinstance(declared.get("lab"), str):
            kept["lab"] = declared["lab"]
        if i18n.normalise(declared.get("lang")):
            kept["lang"] = i18n.normalise(declared["lang"])
    metadata = {"normlab": kept} if kept else {}
    return cells, metadata


def read_code_cells(path: Path, limits: Limits = DEFAULT) -> tuple[list[str], dict]:
    """A notebook file's code cells and metadata (the similarity report reads answers with
    it); ValueError with a clear reason."""
    return parse_notebook(read_notebook_bytes(path, limits), limits)


@dataclasses.dataclass(frozen=True)
class Settings:
    """How each submission is run. Part of the cache key: change one, and everything regrades.

    ``sandbox``: True (bubblewrap, or a usage error), False (processes), None (bubblewrap where
    it runs). ``allow_root``: let learner code run as root where it cannot run as ``nobody``.
    """

    timeout: float = DEFAULT.timeout
    memory_mb: int = DEFAULT.memory_mb
    sandbox: bool | None = None
    allow_root: bool = False
    #: start a class's submissions from fork servers (``sandbox.fork_servers``: under
    #: bubblewrap, where the grader is root)
    fork: bool = True
    #: (name, value) of other ``Limits`` fields (``--limit NAME=VALUE``)
    overrides: tuple = ()

    @property
    def limits(self) -> Limits:
        return dataclasses.replace(
            DEFAULT, **dict(self.overrides), timeout=self.timeout, memory_mb=self.memory_mb
        )


def parse_limit_overrides(texts: list[str]) -> tuple:
    """``["max_files=2000", ...]`` -> ``(("max_files", 2000), ...)``, each a field of ``Limits``
    (not ``timeout`` or ``memory_mb``: they have options of their own), positive, of the
    field's type; UsageError otherwise."""
    fields = {f.name: type(getattr(DEFAULT, f.name)) for f in dataclasses.fields(Limits)}
    overrides = {}
    for text in texts:
        name, _, value = text.partition("=")
        name = name.strip()
        if name not in fields or name in ("timeout", "memory_mb"):
            raise UsageError(f"--limit {text}: no such limit (see docs/grading.md)")
        try:
            number = fields[name](value)
        except ValueError:
            raise UsageError(f"--limit {text}: not a {fields[name].__name__}") from None
        if not number > 0:
            raise UsageError(f"--limit {text}: must be positive")
        overrides[name] = number
    return tuple(sorted(overrides.items()))


def _failed(shown, who: Identity, lab, error, isolation="", findings=()) -> SubmissionResult:
    """A submission that earns nothing: ``lab`` (a stem or None) is the lab it was meant for."""
    lab = all_labs().get(lab) if lab else None
    return SubmissionResult(
        shown,
        lab.stem if lab else None,
        0,
        lab.max_score if lab else 0,
        error,
        [],
        who.student,
        list(findings),
        isolation,
        name=who.name,
        layout=who.layout,
    )


@dataclasses.dataclass
class Grading:
    """One submission on its way through the stages of ``grade_bytes``: what each has found.

    A stage that ends the grading (a file that is not a notebook, the wrong lab) sets
    ``stopped``, with ``error`` saying why and ``meant_for`` the lab the result names.
    """

    raw: bytes
    path: Path
    who: Identity
    settings: Settings
    isolation: Isolation
    fork_server: object = None
    reaper: Reaper | None = None
    meant_for: str | None = None  # a lab's stem, or None
    cells: list[str] = dataclasses.field(default_factory=list)
    metadata: dict = dataclasses.field(default_factory=dict)
    lab: core.Lab | None = None
    findings: list[str] = dataclasses.field(default_factory=list)
    results: list[core.CheckResult] = dataclasses.field(default_factory=list)
    error: str | None = None
    stopped: bool = False
    cacheable: bool = True

    def stop(self, error: str, meant_for: str | None) -> None:
        self.stopped, self.error, self.meant_for = True, error, meant_for

    def result(self) -> SubmissionResult:
        if self.stopped:
            failed = _failed(
                str(self.path), self.who, self.meant_for, self.error, self.isolation.description
            )
            return dataclasses.replace(failed, cacheable=self.cacheable)
        result = SubmissionResult(
            str(self.path),
            self.lab.stem,
            sum(r.points for r in self.results),
            self.lab.max_score,
            self.error,
            self.results,
            self.who.student,
            self.findings,
            self.isolation.description,
            self.metadata.get("normlab", {}).get("lang"),
            self.who.name,
            layout=self.who.layout,
        )
        return dataclasses.replace(result, cacheable=self.cacheable)


def parse(grading: Grading) -> None:
    """The notebook's code cells and metadata, from its bytes (read once, by the caller)."""
    try:
        grading.cells, grading.metadata = parse_notebook(grading.raw, grading.settings.limits)
    except ValueError as error:
        # the file name (or the assignment) may still say which lab it was meant for
        grading.stop(str(error), grading.who.lab)


def choose_lab(grading: Grading) -> None:
    """The lab it is graded as: the assignment's, the metadata's or the file name's."""
    declared = grading.metadata.get("normlab", {}).get("lab")
    stem, wrong = identity.lab_to_grade(grading.who, declared)
    if wrong is not None:
        grading.stop(wrong, stem)
    else:
        grading.lab = all_labs()[stem]
        missing = grading.lab.missing_extra()
        if missing:
            grading.stop(missing, stem)
            grading.cacheable = False  # graded for real once the extra is installed


def scan(grading: Grading) -> None:
    """What the notebook's source shows, for the instructor: library norms reached indirectly."""
    lab = grading.lab
    forbidden_names = sorted({n for names in lab.forbidden.values() for n in names})
    grading.findings = trap.notebook_findings(grading.cells, forbidden_names)


def run(grading: Grading) -> None:
    """The lab's checks against the notebook's process; then whose fault a failure is."""
    lab, limits = grading.lab, grading.settings.limits

    def child(cells):
        return ChildSubmission(
            cells,
            limits,
            grading.isolation,
            grading.fork_server,
            grading.reaper,
            torch=lab.torch,
            call_timeouts=lab.call_timeouts,
            environment=lab.environment,
        )

    # A process killed by a SIGKILL that neither the grader nor a limit of the submission sent
    # (someone on the machine, or the notebook itself) is not the student's doing: the whole
    # submission is graded once more, afresh, in this run, so that such a kill costs nobody a
    # point; killed again, its result says so and is not cached (the next run grades it again).
    for _ in range(1 + OUTSIDE_KILL_REGRADES):
        with contextlib.ExitStack() as stack:
            submission = stack.enter_context(child(grading.cells))
            # Its start-up and cells run while the grader may still be importing the oracle's
            # library (``import_oracle_in_background``), which the checks need.
            submission.start_early()
            wait_for_oracle()
            one_oracle_thread()  # where PyTorch was imported another way (a check's own import)
            graded, companion = submission, None
            if lab.companion is not None:  # started at its first call, in a process of its own
                companion = stack.enter_context(child(lab.companion.cells(grading.cells)))
                graded = core.WithCompanion(submission, companion, lab.companion.names)
            grading.results = core.run_checks(lab, graded)
            grading.error = attribute(grading, submission)
            processes_used = [p for p in (submission, companion) if p is not None]
            killed = any(process.killed_from_outside for process in processes_used)
            # not the student's doing: killed from outside, or stopped by the machine's load
            grading.cacheable = not killed and not any(p.machine_busy for p in processes_used)
        if not killed:
            break


#: how many times a submission is graded again, afresh, in the same run, when a process of it was
#: killed by a SIGKILL that neither the grader nor a limit of the submission sent (``run``)
OUTSIDE_KILL_REGRADES = 1

#: the error of a submission that the machine's load stopped somewhere (``isolation.clock``)
BUSY_ERROR = (
    "the machine was too busy to run this notebook in time: a call or a cell reached its "
    "wall-time backstop before using its time budget (not the notebook's doing); this result "
    "is not cached, and the next run grades it again"
)


def attribute(grading: Grading, submission: ChildSubmission) -> str | None:
    """The submission's error: the grader's own, the process's death, or the learner's cells."""
    internal = [r for r in grading.results if r.internal]
    if internal:
        return internal[0].message
    if submission.dead_reason:
        error = submission.dead_reason
        tail = submission.output_tail()
        if tail:
            error += f"\nlast output: {tail[-grading.settings.limits.shown_output_chars :]}"
        return error
    # Stubs that raise NotImplementedError are a lab in progress, not a broken notebook; a cell
    # stopped by PyTorch, hidden from a NumPy lab, is a comparison of the learner's own, skipped
    # while grading (``isolation.hidden``). A cell that called a function which ran out of time
    # in an earlier cell: that cell's timeout is the one reported.
    skipped = {"NotImplementedError", worker.NOT_RUN_AGAIN, worker.BUSY}
    if submission.hide_torch:
        skipped.add(hidden.ERROR_TYPE)
    if submission.machine_busy and not submission.killed_from_outside:
        return BUSY_ERROR
    errors = [e for e in submission.cell_errors if e.error_type not in skipped]
    if errors:
        return attribution.learner_cells_message(
            errors, grading.cells, grading.lab, grading.results
        )
    return None


#: What grading one notebook is, in order; each stage may stop it (``Grading.stopped``).
STAGES = (parse, choose_lab, scan, run)


def grade_bytes(
    raw: bytes,
    path: Path,
    settings: Settings,
    isolation: Isolation,
    who: Identity | None = None,
    fork_server=None,
    reaper: Reaper | None = None,
) -> SubmissionResult:
    """Grade the notebook whose bytes are ``raw`` (read once by the caller) as ``who``."""
    who = who if who is not None else identity.identify(path)
    grading = Grading(raw, path, who, settings, isolation, fork_server, reaper)
    for stage in STAGES:
        stage(grading)
        if grading.stopped:
            break
    return grading.result()


@functools.cache
def _grader_places() -> re.Pattern:
    """The folders the grader itself is installed in, longest first, each as a pattern of a
    path inside it: what a student is never shown (an ImportError names the file of the
    module it failed in, under the grader's Python)."""
    import site
    import sysconfig

    import normlab

    package = Path(normlab.__file__).resolve().parent
    places = {str(package): "<normlab>"}
    paths = sysconfig.get_paths()
    for key in ("purelib", "platlib"):
        places[paths[key]] = "<site-packages>"
    for folder in site.getsitepackages() + [site.getusersitepackages()]:
        places[folder] = "<site-packages>"
    for key in ("stdlib", "platstdlib"):
        places[paths[key]] = "<python>"
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        places[prefix] = "<python>"
    for folder, label in list(places.items()):
        places.setdefault(os.path.realpath(folder), label)
    places = {f.rstrip("/"): label for f, label in places.items() if f.rstrip("/")}
    ordered = sorted(places, key=len, reverse=True)
    _GRADER_LABELS.update(places)
    return re.compile("|".join(f"{re.escape(f)}(?=/)" for f in ordered))


_GRADER_LABELS: dict[str, str] = {}


def without_grader_paths(text: str | None) -> str | None:
    """``text`` with each path inside the grader's own folders written from a label
    (``<site-packages>/numpy/__init__.py``): the grader's install paths are not the student's
    to read."""
    if not text:
        return text
    pattern = _grader_places()
    return pattern.sub(lambda m: _GRADER_LABELS[m.group()], text)


def _hide_grader_paths(result: SubmissionResult) -> SubmissionResult:
    checks = [
        dataclasses.replace(check, message=without_grader_paths(check.message))
        for check in result.checks
    ]
    return dataclasses.replace(
        result,
        error=without_grader_paths(result.error),
        checks=checks,
        findings=[without_grader_paths(finding) for finding in result.findings],
    )


def guarded(raw, path, settings, isolation, who, fork_server, reaper) -> SubmissionResult:
    """The barrier around one submission: a bug it triggers costs it alone, with a clear error;
    and whatever it wrote, its result is of bounded size (``Limits.max_message_chars``)."""
    limits = settings.limits
    try:
        # every parse of it with its run's bounds; every quote of what it wrote, short
        with trap.parse_bounds(limits), inert.quoting(limits):
            result = grade_bytes(raw, path, settings, isolation, who, fork_server, reaper)
    except Exception as error:  # noqa: BLE001 -- whatever happened, the run goes on
        result = _failed(
            str(path),
            who,
            who.lab,
            f"{core.INTERNAL_ERROR}: {type(error).__name__} while grading this notebook",
            isolation.description,
        )
    return _hide_grader_paths(result).bounded(limits.max_message_chars)


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
    digest.update(json.dumps(dataclasses.asdict(settings.limits), sort_keys=True).encode())
    return digest.hexdigest()


#: The most of a cache file read back: far above any class's (a result is a few kB).
MAX_CACHE_BYTES = 1 << 30
#: The longest line of it read back. A result's texts are cut to ``Limits.max_message_chars``
#: before it is cached (a few kB; some 40 such texts, written as JSON escapes of up to 12 bytes
#: a character, stay under 2 MB); a longer line is damage, or an older grader's, and costs that
#: result alone a regrade, never the class its cache.
MAX_CACHE_LINE = 16 << 20


class ResultCache:
    """Finished results keyed by the SHA-256 of the exact bytes graded, kept in one file.

    Content-keyed: the same bytes give the same result whoever submitted them (the path, id
    and name of a reused result are the entry's own), when they are graded as the same lab
    (the entry's ``identity.grading_key``, stored with the result and compared). The file is
    written only by the grader, from memory, after the submission's processes are dead; a
    damaged or altered file costs a regrade, never a grade (every field is checked when it is
    read).

    The file is JSON lines: the fingerprint, then one finished result per line. Opening the
    cache rewrites it atomically with what is still valid; each result is then appended as one
    line, so a class of n costs n lines written, not n rewrites of a growing file. A run killed
    mid-line leaves a line that does not parse, and a line longer than ``MAX_CACHE_LINE`` is
    skipped unread: that result alone is graded again.
    """

    def __init__(self, path: Path | None, fingerprint: str, force: bool = False):
        self.path, self.fingerprint = path, fingerprint
        self.lock = threading.Lock()
        self.entries: dict = {}
        if path is None:
            return
        if not force:
            self.entries = self._read(path, fingerprint)
        lines = [json.dumps({"fingerprint": fingerprint})]
        lines += [self._line(digest, stored) for digest, stored in sorted(self.entries.items())]
        write_atomically(path, "".join(line + "\n" for line in lines))

    @staticmethod
    def _read(path: Path, fingerprint: str) -> dict:
        try:
            lines = files.regular_file_lines(path, MAX_CACHE_LINE, MAX_CACHE_BYTES)
            first = next(lines, None)
            if first is None or json.loads(first) != {"fingerprint": fingerprint}:
                return {}
        except (OSError, ValueError, RecursionError):
            return {}  # a damaged cache only costs a regrade
        entries = {}
        for line in _still_readable(lines):
            try:
                stored = json.loads(line)
                entries[stored["digest"]] = {"result": stored["result"], "as": stored["as"]}
            except Exception:  # noqa: BLE001 -- a damaged line only costs its regrade
                continue
        return entries

    @staticmethod
    def _line(digest: str, stored: dict) -> str:
        return json.dumps({"digest": digest, **stored}, sort_keys=True)

    @staticmethod
    def content_hash(raw: bytes) -> str:
        return hashlib.sha256(raw).hexdigest()

    def get(self, digest: str, entry: Entry) -> SubmissionResult | None:
        stored = self.entries.get(digest)
        try:
            if stored["as"] != entry.identity.grading_key:
                return None  # the same bytes graded as another lab
            result = SubmissionResult.from_dict(stored["result"])
        except Exception:  # noqa: BLE001 -- absent or malformed: grade it
            return None
        who = entry.identity
        return dataclasses.replace(
            result, path=str(entry.path), student=who.student, name=who.name, layout=who.layout
        )

    def put(self, digest: str, result: SubmissionResult, entry: Entry) -> None:
        if self.path is None:
            return
        stored = {"result": result.as_dict(), "as": entry.identity.grading_key}
        line = (self._line(digest, stored) + "\n").encode("utf-8")
        if len(line) > MAX_CACHE_LINE:
            return  # it would not be read back: graded again next time
        with self.lock:
            self.entries[digest] = stored
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)


def _still_readable(lines):
    """The lines that were read, until the file can no longer be (each line skipped for its
    length is one result's regrade)."""
    try:
        yield from (line for line in lines if line is not None)
    except (OSError, ValueError):
        return


def import_oracle_library() -> None:
    """Import the oracle's library (PyTorch) in this thread: every check's oracle needs it."""
    try:
        import torch  # noqa: F401
    except Exception:  # noqa: BLE001 -- absent or broken: each check that needs it says so
        return
    one_oracle_thread()


def one_oracle_thread() -> None:
    """The oracle computes on one thread, where PyTorch is imported. Its arrays are small, and
    PyTorch's default, a thread per core, made each of its operations wait for a second thread
    to get a core: on a busy 2-core machine 24 ms per ``F.layer_norm`` of 64 x 32 (0.01 ms on
    one thread), 0.7 s of a LayerNorm notebook's checks; ``--jobs`` already grades one
    submission per core."""
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "get_num_threads", None) is not None:
        if torch.get_num_threads() != 1:
            torch.set_num_threads(1)


#: the import started by ``import_oracle_in_background``, if any (one per run)
_oracle_import: threading.Thread | None = None


def import_oracle_in_background() -> None:
    """Start importing the oracle's library (PyTorch) in a thread of its own; return at once.

    For one notebook graded alone: that import is most of what such a run costs (a second or
    more of CPU), and nothing before the first check needs it, while the probes of the
    isolation and the child's start-up and cells are other processes that this one only waits
    for. So the import runs beside them, on another core where one is free; the checks begin
    once it is done (``wait_for_oracle``). Nothing else here imports any of PyTorch meanwhile:
    a second thread that imports a submodule (``torch.nn.functional``) while the first is
    still importing ``torch`` does not wait for it, and can crash the grader. Not a daemon: the
    interpreter does not exit in the middle of the import.
    """
    global _oracle_import
    _oracle_import = threading.Thread(target=import_oracle_library, name="normlab-oracle-import")
    _oracle_import.start()


def wait_for_oracle() -> None:
    """Return once ``import_oracle_in_background``'s import is done (at once without one)."""
    if _oracle_import is not None:
        _oracle_import.join()


def probe_isolation(settings: Settings, import_oracle: bool = False) -> Isolation:
    """The run's isolation (``choose_isolation``), and PyTorch's folders where that isolation
    hides them (``hidden_paths``), probed once for the run.

    ``import_oracle``: meanwhile, this thread imports the oracle's library. The probes are other
    processes (an interpreter, ``bwrap``, as the grader and as ``nobody``) that this process
    only waits for, so they run on another core while this one imports PyTorch, which costs a
    run seconds and which every graded notebook needs. Each probe runs, and its answer is used,
    exactly as without the overlap; its error (``IsolationError``) is raised here. The helper
    thread imports nothing of PyTorch's (two threads importing one package's modules at once
    can deadlock), and grading starts only once both are done.
    """

    def probe() -> Isolation:
        isolation = choose_isolation(settings.sandbox, settings.allow_root)
        if isolation.sandbox or isolation.private_folder:
            hidden_paths()
        return isolation

    if not import_oracle:
        return probe()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="normlab-probe") as helper:
        probing = helper.submit(probe)
        import_oracle_library()
        return probing.result()


def server_preload(entries: list[Entry]) -> dict[bool, tuple[str, ...]]:
    """Kind of lab (``Lab.torch``) -> what its fork server imports for these entries: the
    ``Lab.preload`` of each lab among them, in the entries' order; only the kinds with two
    entries or more have a server (a server's start-up costs what one fresh interpreter's does,
    and more: it imports what it preloads for all). An entry's lab is the one known before its
    notebook is read (its file name's or the assignment's); an entry without one counts for
    both kinds. Speed only: a notebook whose metadata names a lab of the other kind starts as a
    fresh interpreter where that kind has no server."""
    labs = all_labs()
    count = {True: 0, False: 0}
    preload: dict[bool, list[str]] = {True: [], False: []}
    for entry in entries:
        lab = labs.get(entry.identity.lab or "")
        for torch in [lab.torch] if lab is not None else [True, False]:
            count[torch] += 1
            more = lab.preload if lab is not None else ()
            preload[torch] += [name for name in more if name not in preload[torch]]
    return {torch: tuple(names) for torch, names in preload.items() if count[torch] > 1}


def grade_all(
    entries: list[Entry],
    settings: Settings = Settings(),
    jobs: int = 1,
    cache: ResultCache | None = None,
    on_result: Callable[[SubmissionResult, bool], None] | None = None,
    isolation: Isolation | None = None,
) -> list[SubmissionResult]:
    """Grade every entry (``jobs`` at a time), reusing cached results of unchanged notebooks.

    Returns the results in the order of ``entries``; ``on_result(result, reused)`` is called as
    each one is ready (for a progress bar). Each notebook is read once; its bytes are hashed
    (the cache key) and graded.
    """
    isolation = isolation or choose_isolation(settings.sandbox, settings.allow_root)
    if jobs > 1 and len(entries) > 1:
        # Import the oracle's library here, once, before worker threads need it: importing a
        # large native library from two threads at once is asking for a crash.
        import_oracle_library()
    if isolation.sandbox:
        hidden_paths()  # probed once, here, rather than by each worker thread that needs it
    results: dict[int, SubmissionResult] = {}
    reaper = Reaper()
    with tempfile.TemporaryDirectory(prefix="normlab-fork-") as server_home:
        server = None
        # One notebook gains nothing from a server that first imports what it would import.
        if settings.fork and len(entries) > 1:
            server = fork_servers(
                isolation, settings.limits, server_home, reaper, server_preload(entries)
            )

        def work(index: int) -> tuple[SubmissionResult, bool, str | None]:
            entry = entries[index]
            try:
                raw = read_notebook_bytes(entry.path, settings.limits)
            except (OSError, ValueError) as error:
                who = entry.identity
                return (
                    _failed(str(entry.path), who, who.lab, str(error), isolation.description),
                    False,
                    None,
                )
            digest = ResultCache.content_hash(raw)
            cached = cache.get(digest, entry) if cache else None
            if cached is not None:
                return cached, True, None
            result = guarded(raw, entry.path, settings, isolation, entry.identity, server, reaper)
            return result, False, digest if result.cacheable else None

        try:
            # Two submissions of one lab that claim one id: both kept, both flagged.
            return identity.flag_conflicts(
                _run_pool(entries, results, work, jobs, cache, on_result)
            )
        finally:
            if server is not None:
                server.close()
            reaper.sweep()


def grade_paths(
    paths: list[str | Path],
    settings: Settings = Settings(),
    lab: str | None = None,
    jobs: int = 0,
) -> list[SubmissionResult]:
    """Grade notebooks as ``normlab grade PATH...`` grades them, without a cache, and return the
    results: door 2 called from Python (``normlab progress`` grades through it).

    Args:
        paths: notebooks, or folders searched for notebooks (``find_submissions``).
        settings: how each submission is run (its isolation is probed once, here).
        lab: grade every notebook as this lab (``--lab``).
        jobs: submissions graded at a time; 0: one per CPU this process may use.

    Returns:
        One result per notebook, in ``find_submissions``' order.

    Raises:
        UsageError: a path that does not exist, no notebook, or an unknown lab.
        IsolationError: the isolation ``settings`` ask for cannot run here.
    """
    entries = find_submissions([str(path) for path in paths], lab)
    isolation = probe_isolation(settings, import_oracle=True)
    return grade_all(entries, settings, jobs or default_jobs(), None, None, isolation)


def _run_pool(entries, results, work, jobs, cache, on_result) -> list[SubmissionResult]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(work, index): index for index in range(len(entries))}
        try:
            for future in concurrent.futures.as_completed(futures):
                index = futures[future]
                result, reused, digest = future.result()
                results[index] = result
                if cache and digest is not None:
                    cache.put(digest, result, entries[index])
                if on_result:
                    on_result(result, reused)
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return [results[i] for i in range(len(entries))]


def default_jobs() -> int:
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
