"""The oracle's answers, computed once with PyTorch and shipped: a NumPy lab is graded without it.

Every oracle of a NumPy lab is PyTorch in float64, and importing PyTorch is most of what grading
one notebook alone costs (1.2-1.9 s of a 2.2 s run on a busy 2-core machine), while the checks
ask the oracle the same questions every time: their inputs come from seeded generators. So each
oracle is declared with :func:`oracle`, and a call is answered from the memo when the memo holds
that exact call; otherwise (a *miss*) it is computed with PyTorch, as without a memo.

What decides an entry (its key, a SHA-256): the oracle (its module, its name, a fingerprint of
its compiled code and the values its closure holds) and every argument, exactly: each array's
dtype, shape and bytes, each number's type and value (``float.hex``), each string, the
structure of tuples, lists and dictionaries, keyword names. An argument of any other kind (a
tensor, a function) is a miss. The memo is a function's table, not a verdict: an entry gives
the oracle's answer to one input, so nothing a submission returns can select an entry that
makes a wrong answer pass; a check that passes the learner's output to an oracle gets the
oracle's answer for that very output, or a miss.

Where it lives: ``oracle_memo/<module>.npz`` beside this file, one per check module, part of
the grader's package (data the grader owns; no submission's process can write there: a
submission runs as another user, under the sandbox with the package read-only; nor read it: in
the child's filesystem its folder is empty, ``isolation.sandbox.memo_folders``). It is written
by ``python -m normlab.oracles`` (each NumPy lab's solution graded by ``normlab grade``'s own
engine, every oracle call recorded) and each entry keeps its inputs, so that ``--check`` and
``tests/test_oracle_memo.py`` recompute every entry with PyTorch and compare. An oracle whose
code changed has another fingerprint: its old entries are never used (they are misses, and the
check says to rebuild).
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import threading
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: the memo's files, one per check module
MEMO_DIR = Path(__file__).with_name("oracle_memo")
#: the kinds of array an entry may hold (no objects, no structured records)
ARRAY_KINDS = frozenset("biufc")

#: every oracle declared with :func:`oracle`, by its identity (``module:name``)
ORACLES: dict[str, Callable] = {}

_lock = threading.RLock()
_tables: dict[str, _Table | None] = {}
#: where ``python -m normlab.oracles`` records every call (None: answer from the memo)
_recording: dict[str, dict[str, dict]] | None = None
#: the oracles that missed in this process, by identity (for the tests and ``--check``)
misses: list[str] = []


class Unencodable(TypeError):
    """A value that a key cannot describe exactly: such a call is a miss."""


# ----------------------------------------------------------------------------- values as data


def encode(value, arrays: list[np.ndarray]):
    """``value`` as JSON data, its arrays appended to ``arrays`` and referred to by position.

    The type of every value is kept (a float, a NumPy float64 scalar and a 0-d array are three
    different encodings). Raises :class:`Unencodable` for anything else.
    """
    kind = type(value)
    if value is None:
        return ["none"]
    if kind is bool:
        return ["bool", value]
    if kind is int:
        if value.bit_length() > 4096:  # beyond any question a check asks (and str() may refuse)
            raise Unencodable("an integer of more than 4096 bits")
        return ["int", str(value)]
    if kind is float:
        return ["float", value.hex()]
    if kind is str:
        return ["str", value]
    if kind is np.ndarray:
        if value.dtype.kind not in ARRAY_KINDS or value.dtype.fields is not None:
            raise Unencodable(f"an array of dtype {value.dtype}")
        arrays.append(np.array(value, order="C", copy=True))  # 0-d stays 0-d
        return ["array", len(arrays) - 1]
    if isinstance(value, np.generic) and kind is type(np.asarray(value)[()]):
        if value.dtype.kind not in ARRAY_KINDS:
            raise Unencodable(f"a scalar of dtype {value.dtype}")
        arrays.append(np.asarray(value))
        return ["scalar", len(arrays) - 1]
    if kind in (tuple, list):
        return [kind.__name__, [encode(item, arrays) for item in value]]
    if kind is dict and all(type(key) is str for key in value):
        return ["dict", [[key, encode(item, arrays)] for key, item in value.items()]]
    raise Unencodable(f"a {kind.__module__}.{kind.__qualname__}")


def decode(data, arrays: Callable[[int], np.ndarray]):
    """The value :func:`encode` described; ``arrays(position)`` gives each array (a copy)."""
    tag = data[0]
    if tag == "none":
        return None
    if tag == "bool":
        return bool(data[1])
    if tag == "int":
        return int(data[1])
    if tag == "float":
        return float.fromhex(data[1])
    if tag == "str":
        return str(data[1])
    if tag == "array":
        return arrays(data[1])
    if tag == "scalar":
        return arrays(data[1])[()]
    if tag in ("tuple", "list"):
        items = [decode(item, arrays) for item in data[1]]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict":
        return {key: decode(item, arrays) for key, item in data[1]}
    raise ValueError(f"unknown tag {tag!r}")


def digest(identity: str, call, arrays: list[np.ndarray]) -> str:
    """The key of one call: the oracle, the call's structure, every array's dtype, shape and
    bytes, each part length-prefixed (no two calls share a byte stream)."""
    hasher = hashlib.sha256()

    def part(data: bytes) -> None:
        hasher.update(len(data).to_bytes(8, "little"))
        hasher.update(data)

    part(identity.encode())
    part(json.dumps(call, sort_keys=True).encode())
    for array in arrays:
        part(array.dtype.str.encode())
        part(json.dumps(array.shape).encode())
        part(array.tobytes(order="C"))
    return hasher.hexdigest()


# ----------------------------------------------------------------------------- oracles


def _code_fingerprint(code: types.CodeType) -> list:
    """What a function computes, without where it stands (line numbers, file): its bytecode,
    names and constants, nested functions' code included."""
    constants = [
        _code_fingerprint(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts
    ]
    return [code.co_code.hex(), code.co_names, code.co_varnames, code.co_freevars, constants]


def fingerprint(function: Callable) -> str:
    """The identity's suffix: the code, its defaults and the values of its closure (an
    oracle built by a function, ``_variant(axis=0)``, is told apart by them)."""
    arrays: list[np.ndarray] = []
    closure = [encode(cell.cell_contents, arrays) for cell in function.__closure__ or ()]
    defaults = encode(tuple(function.__defaults__ or ()), arrays)
    keyword_defaults = encode(dict(function.__kwdefaults__ or {}), arrays)
    data = [_code_fingerprint(function.__code__), closure, defaults, keyword_defaults]
    if arrays:
        raise Unencodable("an oracle whose closure or defaults hold arrays")
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:16]


def oracle(function: Callable | None = None, *, name: str | None = None):
    """Declare ``function`` an oracle whose answers the memo may give.

    ``name``: its name in the memo, where ``__qualname__`` does not tell it (an oracle built by
    a function). The function must compute its answer from its arguments alone, leave them as
    they were, and return arrays, numbers, strings or tuples and lists of them;
    ``python -m normlab.oracles`` refuses one that does not. The declared function is
    ``__wrapped__``.
    """
    if function is None:
        return functools.partial(oracle, name=name)
    module = function.__module__
    identity = f"{module}:{name or function.__qualname__}:{fingerprint(function)}"
    if identity in ORACLES and ORACLES[identity].__wrapped__ is not function:
        raise ValueError(f"two oracles are {identity}: give one a name=")

    @functools.wraps(function)
    def remembered(*args, **kwargs):
        try:
            arrays: list[np.ndarray] = []
            call = [encode(list(args), arrays), encode(dict(kwargs), arrays)]
        except Unencodable:
            return _computed(identity, function, args, kwargs)
        key = digest(identity, call, arrays)
        if _recording is not None:
            return _record(identity, function, args, kwargs, call, arrays, key)
        found = _table(module).answer(key)
        if found is _MISSING:
            return _computed(identity, function, args, kwargs)
        return found

    remembered.memo_identity = identity
    ORACLES[identity] = remembered
    return remembered


def _computed(identity: str, function: Callable, args, kwargs):
    """A miss: the oracle computes, with PyTorch imported first (once, under a lock)."""
    with _lock:
        misses.append(identity)
        import_torch()
    return function(*args, **kwargs)


def import_torch() -> None:
    """Import PyTorch for an oracle that computes, one thread at a time, and run its operations
    on one thread (its arrays are small: see ``grade.one_oracle_thread``)."""
    with _lock:
        if "torch.nn.functional" in sys.modules:
            return
        import torch
        import torch.nn.functional  # noqa: F401

        if torch.get_num_threads() != 1:
            torch.set_num_threads(1)


# ----------------------------------------------------------------------------- the tables


_MISSING = object()


class _Table:
    """One module's memo file: its entries' descriptions, and its arrays read when asked."""

    def __init__(self, path: Path):
        self.archive = np.load(path, allow_pickle=False)
        index = json.loads(str(self.archive["index"][()]))
        self.entries: dict[str, dict] = index["entries"]
        self.torch = index.get("torch", "")

    def answer(self, key: str):
        entry = self.entries.get(key)
        if entry is None:
            return _MISSING
        with _lock:  # one reader of the archive at a time
            return decode(entry["result"], lambda i: self.archive[f"{key}.out{i}"].copy())


def _table(module: str) -> _Table:
    """The memo of a check module (an empty one where it has no file or cannot be read)."""
    with _lock:
        if module not in _tables:
            path = MEMO_DIR / f"{module.rsplit('.', 1)[-1]}.npz"
            try:
                _tables[module] = _Table(path)
            except (OSError, ValueError, KeyError, TypeError):
                _tables[module] = None  # every call a miss: slower, never wrong
        table = _tables[module]
    return table if table is not None else _EMPTY


class _Empty:
    def answer(self, key: str):
        return _MISSING


_EMPTY = _Empty()


def shipped() -> bool:
    """Whether this copy of the course carries the memo (the student edition leaves it out: its
    oracle then computes every answer with PyTorch)."""
    return any(MEMO_DIR.glob("*.npz"))


def forget() -> None:
    """Read the memo files again at the next call (after ``normlab.oracles`` wrote them)."""
    with _lock:
        _tables.clear()


# ----------------------------------------------------------------------------- recording


def _record(identity, function, args, kwargs, call, arrays, key):
    """Compute with PyTorch, check that the arguments were left as they were, and keep the
    entry (its inputs included, for the check)."""
    import_torch()
    result = function(*args, **kwargs)
    after: list[np.ndarray] = []
    if [encode(list(args), after), encode(dict(kwargs), after)] != call or any(
        a.tobytes() != b.tobytes() for a, b in zip(arrays, after, strict=True)
    ):
        raise ValueError(f"the oracle {identity} changed its arguments: it cannot be memoised")
    outputs: list[np.ndarray] = []
    try:
        encoded = encode(result, outputs)
    except Unencodable as error:
        raise ValueError(f"the oracle {identity} returned {error}: it cannot be memoised") from None
    entries = _recording.setdefault(identity.split(":", 1)[0], {})
    entries[key] = {
        "oracle": identity,
        "call": call,
        "inputs": arrays,
        "result": encoded,
        "outputs": outputs,
    }
    return result


class recording:
    """``with recording() as calls:`` every oracle call computes with PyTorch and is kept in
    ``calls`` (module -> key -> entry), for :func:`write`."""

    def __enter__(self) -> dict[str, dict[str, dict]]:
        global _recording
        _recording = {}
        return _recording

    def __exit__(self, *exc) -> None:
        global _recording
        _recording = None


def write(module: str, entries: dict[str, dict], folder: Path = MEMO_DIR) -> Path:
    """Write one module's memo file (entries sorted by key: the same calls give the same file)."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    index = {"torch": torch.__version__, "entries": {}}
    arrays: dict[str, np.ndarray] = {}
    for key in sorted(entries):
        entry = entries[key]
        index["entries"][key] = {
            "oracle": entry["oracle"],
            "call": entry["call"],
            "result": entry["result"],
        }
        arrays |= {f"{key}.in{i}": a for i, a in enumerate(entry["inputs"])}
        arrays |= {f"{key}.out{i}": a for i, a in enumerate(entry["outputs"])}
    path = folder / f"{module.rsplit('.', 1)[-1]}.npz"
    np.savez_compressed(path, index=np.array(json.dumps(index, sort_keys=True)), **arrays)
    return path


# ----------------------------------------------------------------------------- checking


def _close(stored, computed, where: str) -> list[str]:
    """Where ``computed`` (the oracle now) differs from ``stored`` (the memo): the same
    structure and types, the same dtypes and shapes, values within a few units in the last
    place of their dtype (NaN where NaN)."""
    if type(stored) is not type(computed):
        return [f"{where}: {type(stored).__name__} stored, {type(computed).__name__} computed"]
    if isinstance(stored, (tuple, list)):
        if len(stored) != len(computed):
            return [f"{where}: {len(stored)} items stored, {len(computed)} computed"]
        return [
            p
            for i, pair in enumerate(zip(stored, computed, strict=True))
            for p in _close(*pair, f"{where}[{i}]")
        ]
    if isinstance(stored, dict):
        if list(stored) != list(computed):
            return [f"{where}: keys {list(stored)} stored, {list(computed)} computed"]
        return [p for k in stored for p in _close(stored[k], computed[k], f"{where}[{k!r}]")]
    if isinstance(stored, (np.ndarray, np.generic, float)):
        a, b = np.asarray(stored), np.asarray(computed)
        if a.dtype != b.dtype or a.shape != b.shape:
            return [f"{where}: {a.dtype}{a.shape} stored, {b.dtype}{b.shape} computed"]
        if a.dtype.kind in "fc":
            ulp = 8 * np.finfo(a.dtype).eps
            scale = max(1.0, float(np.nanmax(np.abs(b), initial=0.0)))
            if not np.allclose(a, b, rtol=ulp, atol=ulp * scale, equal_nan=True):
                worst = float(np.nanmax(np.abs(a.astype(complex) - b), initial=0.0))
                return [f"{where}: stored and computed differ by up to {worst:.3g}"]
            return []
        return [] if np.array_equal(a, b) else [f"{where}: stored and computed differ"]
    return [] if stored == computed else [f"{where}: {stored!r} stored, {computed!r} computed"]


def verify(path: Path) -> list[str]:
    """What is wrong with one memo file: every entry's key recomputed from its stored inputs,
    its oracle found among the declared ones (an oracle whose code changed is not), and its
    answer recomputed with PyTorch and compared (:func:`_close`). Empty when it is right."""
    problems = []
    try:
        archive = np.load(path, allow_pickle=False)
        entries = json.loads(str(archive["index"][()]))["entries"]
    except Exception as error:  # noqa: BLE001 -- any unreadable file is the finding
        return [f"{path.name}: cannot be read ({type(error).__name__}: {error})"]
    for key, entry in entries.items():
        where = f"{path.name}: {entry.get('oracle')} entry {key[:12]}"
        try:
            inputs = [
                archive[f"{key}.in{i}"] for i in range(_count(entry["call"], "array", "scalar"))
            ]
            if digest(entry["oracle"], entry["call"], inputs) != key:
                problems.append(f"{where}: its key is not that of its inputs")
                continue
            function = ORACLES.get(entry["oracle"])
            if function is None:
                problems.append(f"{where}: no such oracle now (its code changed): rebuild")
                continue
            args, kwargs = (
                decode(part, lambda i, given=inputs: given[i].copy()) for part in entry["call"]
            )
            stored = decode(entry["result"], lambda i, k=key: archive[f"{k}.out{i}"].copy())
            import_torch()
            problems += _close(stored, function.__wrapped__(*args, **kwargs), where)
        except Exception as error:  # noqa: BLE001 -- a damaged entry is a finding
            problems.append(f"{where}: {type(error).__name__}: {error}")
    return problems


def _count(data, *tags) -> int:
    """How many arrays an encoding refers to."""
    if not isinstance(data, list) or not data:
        return 0
    if data[0] in tags:
        return 1
    if data[0] in ("tuple", "list"):
        return sum(_count(item, *tags) for item in data[1])
    if data[0] == "dict":
        return sum(_count(item, *tags) for _, item in data[1])
    if isinstance(data[0], list):
        return sum(_count(item, *tags) for item in data)
    return 0
