"""The wire format between the grader and a submission's child process.

A message is a JSON header followed by zero or more arrays, each as ``.npy`` bytes::

    [4 bytes: header length][header JSON][for each array: 8 bytes length][npy bytes]

Arrays are written with ``np.save(..., allow_pickle=False)`` and read with
``np.load(..., allow_pickle=False)``: nothing that crosses the boundary can execute code in the
reader. The reader also caps every length, so a hostile child cannot make the grader allocate
unbounded memory.
"""

from __future__ import annotations

import io
import json
import os
import struct

import numpy as np

MAX_HEADER_BYTES = 1 << 20  # 1 MiB of JSON is far more than any honest reply needs
MAX_ARRAY_BYTES = 256 << 20  # 256 MiB per array
MAX_ARRAYS = 64


class ProtocolError(RuntimeError):
    """The other side sent something that is not a well-formed message."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def encode_array(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def decode_array(data: bytes) -> np.ndarray:
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as error:  # malformed bytes from the child are a protocol error
        raise ProtocolError(f"unreadable array: {error}") from None


def frame(header: dict, arrays: list[np.ndarray] = ()) -> bytes:
    """One message (header + arrays) as bytes."""
    payload = json.dumps(dict(header, n_arrays=len(arrays))).encode()
    parts = [struct.pack("<I", len(payload)), payload]
    for array in arrays:
        blob = encode_array(np.asarray(array))
        parts += [struct.pack("<Q", len(blob)), blob]
    return b"".join(parts)


def send(fd: int, header: dict, arrays: list[np.ndarray] = ()) -> None:
    """Write one message to a blocking file descriptor."""
    _write_all(fd, frame(header, arrays))


def recv(read_exact) -> tuple[dict, list[np.ndarray]]:
    """Read one message with ``read_exact(n) -> bytes`` (which must return exactly n bytes)."""
    (length,) = struct.unpack("<I", read_exact(4))
    if length > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {length} bytes is too large")
    try:
        header = json.loads(read_exact(length))
    except ValueError as error:
        raise ProtocolError(f"header is not JSON: {error}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    count = header.get("n_arrays", 0)
    if not isinstance(count, int) or not 0 <= count <= MAX_ARRAYS:
        raise ProtocolError(f"bad array count {count!r}")
    arrays = []
    for _ in range(count):
        (size,) = struct.unpack("<Q", read_exact(8))
        if size > MAX_ARRAY_BYTES:
            raise ProtocolError(f"array of {size} bytes is too large")
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
