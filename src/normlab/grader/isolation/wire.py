"""The one wire format between the grader and a submission's process, and its validation.

A message is a JSON header followed by zero or more arrays, each as ``.npy`` bytes::

    [4 bytes: header length][header JSON][for each array: 8 bytes length][npy bytes]

Arrays are written with ``np.save(..., allow_pickle=False)``; the reader parses the ``.npy``
header itself and refuses object arrays, sizes that disagree with the bytes, and anything over
the limits, *before* allocating. Nothing that crosses the boundary can execute code in the
reader or make it hold more than ``Limits.max_reply_bytes`` per reply.

The parent never trusts a reply: ``parse_load_reply`` and ``parse_call_reply`` check the type
of every field and turn anything else into a :class:`ProtocolError` (the submission's error, the
run goes on). Control flow uses the reply's *fields*, never the text of a message.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import struct
from collections.abc import Sequence

import numpy as np

from normlab.grader import core, inert
from normlab.grader.isolation.limits import DEFAULT, Limits

MAX_NAMES = 10_000


class ProtocolError(RuntimeError):
    """The other side sent something that is not a well-formed message."""


# ----------------------------------------------------------------------------- arrays


def encode_array(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def decode_array(data: bytes) -> np.ndarray:
    """``.npy`` bytes -> array, validated before any allocation the bytes do not pay for."""
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    except Exception as error:
        raise ProtocolError(f"unreadable array: {type(error).__name__}") from None
    if dtype.hasobject:
        raise ProtocolError("an array of Python objects")
    count = 1
    for dimension in shape:
        count *= int(dimension)
    if count * dtype.itemsize != len(data) - stream.tell():
        raise ProtocolError("an array whose size disagrees with its bytes")
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=stream.tell())
    return flat.reshape(shape, order="F" if fortran else "C").copy()


# ----------------------------------------------------------------------------- framing


def frame(header: dict, arrays: Sequence[np.ndarray] = ()) -> bytes:
    """One message (header + arrays) as bytes."""
    payload = json.dumps(dict(header, n_arrays=len(arrays))).encode()
    parts = [struct.pack("<I", len(payload)), payload]
    for array in arrays:
        blob = encode_array(np.asarray(array))
        parts += [struct.pack("<Q", len(blob)), blob]
    return b"".join(parts)


def send(fd: int, header: dict, arrays: Sequence[np.ndarray] = ()) -> None:
    """Write one message to a blocking file descriptor."""
    view = memoryview(frame(header, arrays))
    while view:
        view = view[os.write(fd, view) :]


def recv(read_exact, limits: Limits = DEFAULT) -> tuple[dict, list[np.ndarray]]:
    """Read one message with ``read_exact(n) -> bytes`` (which returns exactly n bytes).

    Every length is checked against ``limits`` before it is read: at most
    ``max_header_bytes`` of JSON, ``max_arrays`` arrays and ``max_reply_bytes`` in all.
    """
    (length,) = struct.unpack("<I", read_exact(4))
    if length > limits.max_header_bytes:
        raise ProtocolError(f"header of {length} bytes is too large")
    try:
        header = json.loads(read_exact(length))
    except (ValueError, RecursionError):
        raise ProtocolError("header is not JSON (or nested too deeply)") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    count = header.get("n_arrays", 0)
    if type(count) is not int or not 0 <= count <= limits.max_arrays:
        raise ProtocolError("bad array count")
    arrays, total = [], 0
    for _ in range(count):
        (size,) = struct.unpack("<Q", read_exact(8))
        total += size
        if total > limits.max_reply_bytes:
            raise ProtocolError(f"more than {limits.max_reply_bytes >> 20} MiB of arrays")
        arrays.append(decode_array(read_exact(size)))
    return header, arrays


def blocking_reader(fd: int):
    """A ``read_exact`` for a blocking file descriptor (used by the child)."""

    def read_exact(n: int) -> bytes:
        chunks, remaining = [], n
        while remaining:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                raise EOFError("the other side closed the channel")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    return read_exact


# ----------------------------------------------------------------------------- requests


def _is_json_scalar(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def encode_args(args: Sequence, kwargs: dict) -> tuple[list, list, list, list]:
    """Arguments -> (arg specs, kwarg names, kwarg specs, arrays) for the wire."""
    arrays: list[np.ndarray] = []

    def spec(value):
        if isinstance(value, core.AsTorch):
            arrays.append(np.asarray(value.array))
            return {"array": len(arrays) - 1, "as": "torch"}
        if isinstance(value, core.ReadBack):
            arrays.append(np.asarray(value.array))
            return {"array": len(arrays) - 1, "read_back": True}
        if isinstance(value, np.ndarray):
            arrays.append(value)
            return {"array": len(arrays) - 1}
        if _is_json_scalar(value) or (
            isinstance(value, (list, tuple)) and all(_is_json_scalar(v) for v in value)
        ):
            return {"value": list(value) if isinstance(value, tuple) else value}
        raise TypeError(f"cannot send {type(value).__name__} to a submission")

    arg_specs = [spec(a) for a in args]
    names = list(kwargs)
    kwarg_specs = [spec(kwargs[n]) for n in names]
    return arg_specs, names, kwarg_specs, arrays


def load_request(
    cells: list[str], cell_timeout: float, hung: dict[str, int] | None = None
) -> tuple[dict, list[np.ndarray]]:
    """The request that runs a notebook's cells. The cells travel as bytes, not in the JSON
    header, so a notebook with a large data cell is limited by the notebook size alone.
    ``hung``: the functions that ran out of time in a cell of an earlier run (a restart), by
    name, with that cell: not run again."""
    blob = np.frombuffer(json.dumps(cells).encode(), dtype=np.uint8)
    return {"op": "load", "cell_timeout": cell_timeout, "hung": dict(hung or {})}, [blob]


def cells_of_load_request(arrays: list[np.ndarray]) -> list[str]:
    return json.loads(arrays[0].tobytes().decode())


def decode_args(specs: list, arrays: list, read_back: list | None = None):
    """Arguments from the wire: arrays (as NumPy or torch) and plain JSON values.

    Arrays marked ``read_back`` are also appended to ``read_back``: they are sent back after the
    call, as the function left them.
    """
    decoded = []
    for spec in specs:
        if "array" in spec:
            array = arrays[spec["array"]].copy()
            if spec.get("as") == "torch":
                import torch

                array = torch.from_numpy(array)
            if spec.get("read_back") and read_back is not None:
                read_back.append(array)
            decoded.append(array)
        else:
            value = spec["value"]
            # Sequences travel as JSON lists; a learner's code expects axes as a tuple.
            decoded.append(tuple(value) if isinstance(value, list) else value)
    return decoded


# ----------------------------------------------------------------------------- replies (child side)


def to_arrays(value) -> tuple[dict, object]:
    """Describe one returned value and turn it into an array the wire can carry (or None)."""
    kind = type(value).__name__
    if isinstance(value, np.ndarray):
        kind, array = "ndarray", value
    elif type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        kind = "tensor"
        tensor = value.detach().cpu()
        if str(tensor.dtype) in ("torch.bfloat16",):
            tensor = tensor.float()
        array = tensor.numpy()
    elif value is None:
        return {"kind": "none"}, None
    elif isinstance(value, str):
        kind, array = "str", np.asarray(value)
    elif isinstance(value, (bool, int, float, complex, np.generic)):
        kind, array = "scalar", np.asarray(value)
    elif isinstance(value, (list, tuple)):
        kind = "list"
        try:
            array = np.asarray(value)
        except Exception:
            return {"kind": kind, "unsendable": "a list that is not a regular array"}, None
    else:
        return {"kind": kind, "unsendable": f"an object of type {kind}"}, None
    if array.dtype.hasobject:
        return {"kind": kind, "unsendable": "an array of Python objects"}, None
    return {"kind": kind, "dtype": str(array.dtype), "shape": list(array.shape)}, array


def encode_result(result, read_back: Sequence = ()) -> tuple[dict, list]:
    """A function's return value -> (header, arrays). Tuples become several items.

    ``read_back``: arguments to send back as the call left them (header ``read_back``).
    """
    is_tuple = isinstance(result, tuple)
    values = list(result) if is_tuple else [result]
    arrays: list = []

    def encode(value) -> dict:
        item, array = to_arrays(value)
        if array is not None:
            item["array"] = len(arrays)
            arrays.append(array)
        return item

    header = {"ok": True, "tuple": is_tuple, "items": [encode(v) for v in values]}
    if read_back:
        header["read_back"] = [encode(v) for v in read_back]
    return header, arrays


# ----------------------------------------------------------------------------- replies (parent side)


def _text(value, field: str, last: bool = False) -> str:
    """A text field of a reply, cut to ``Limits.shown_output_chars`` characters (its length
    stated, ``inert.clip``): every text the child sends is the submission's, and a message may
    quote it. ``last``: keep its end (a traceback's)."""
    if not isinstance(value, str):
        raise ProtocolError(f"reply field {field!r} is not text")
    return inert.clip(value, last=last)


def _flag(header: dict, field: str) -> bool:
    value = header.get(field)
    if not isinstance(value, bool):
        raise ProtocolError(f"reply field {field!r} is not true/false")
    return value


@dataclasses.dataclass(frozen=True)
class CellError:
    cell: int
    error_type: str
    message: str


def parse_load_reply(header: dict, arrays: list, n_cells: int) -> tuple[set[str], list[CellError]]:
    """The names a notebook defined and its cells' errors, every field checked by type."""
    if arrays or not _flag(header, "ok"):
        raise ProtocolError("a load reply must be ok and carry no arrays")
    names = header.get("names")
    if not isinstance(names, list) or len(names) > MAX_NAMES:
        raise ProtocolError("reply field 'names' is not a list")
    checked_names = {_text(name, "names") for name in names}
    errors = header.get("cell_errors")
    if not isinstance(errors, list) or len(errors) > n_cells:
        raise ProtocolError("reply field 'cell_errors' is not a list of the notebook's cells")
    checked = []
    for error in errors:
        if not isinstance(error, dict):
            raise ProtocolError("a cell error is not an object")
        cell = error.get("cell")
        if type(cell) is not int or not 0 <= cell < n_cells:
            raise ProtocolError("a cell error names no cell of the notebook")
        checked.append(
            CellError(
                cell,
                _text(error.get("error_type"), "error_type"),
                _text(error.get("message"), "message"),
            )
        )
    return checked_names, checked


def parse_hung(header: dict, names: set[str], n_cells: int) -> dict[str, int]:
    """The functions of the notebook that ran out of time in a cell (name -> that cell), every
    field checked by type. Believed as it is: a name listed here only loses its own checks."""
    hung = header.get("hung", {})
    if not isinstance(hung, dict) or len(hung) > MAX_NAMES:
        raise ProtocolError("reply field 'hung' is not an object")
    checked = {}
    for name, cell in hung.items():
        if _text(name, "hung") not in names or type(cell) is not int or not 0 <= cell < n_cells:
            raise ProtocolError("reply field 'hung' names no function of a cell")
        checked[name] = cell
    return checked


def parse_call_reply(name: str, header: dict, arrays: list) -> core.Output:
    """A call's reply -> Output, or raise the learner-facing error it reports (typed)."""
    if not _flag(header, "ok"):
        error_type = _text(header.get("error_type"), "error_type")
        message = _text(header.get("message"), "message")
        detail = _text(header.get("traceback", ""), "traceback", last=True)
        raise core.error_from_reply(
            name, {"error_type": error_type, "message": message, "traceback": detail}
        )
    specs = header.get("items")
    if not isinstance(specs, list) or not specs or len(specs) > len(arrays) + 64:
        raise ProtocolError("reply field 'items' is not a list of results")
    is_tuple = _flag(header, "tuple")
    if not is_tuple and len(specs) != 1:
        raise ProtocolError("a single result with several items")
    used: set[int] = set()

    def item_of(spec) -> core.Item:
        if not isinstance(spec, dict):
            raise ProtocolError("a result item is not an object")
        kind = _text(spec.get("kind"), "kind")
        note = _text(spec.get("unsendable", ""), "unsendable")
        index = spec.get("array")
        array = None
        if index is not None:
            if type(index) is not int or not 0 <= index < len(arrays) or index in used:
                raise ProtocolError("a result item points at no array")
            used.add(index)
            array = arrays[index]
        return core.Item(kind, array, note)

    items = [item_of(spec) for spec in specs]
    read_back = header.get("read_back", [])
    if not isinstance(read_back, list) or len(read_back) > 64:
        raise ProtocolError("reply field 'read_back' is not a list of arguments")
    return core.Output(items, is_tuple, read_back=[item_of(spec) for spec in read_back])
