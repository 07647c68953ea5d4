"""normlab.corpus: chapter 12's shipped text, its fixed split and the batches a model trains on."""

from __future__ import annotations

import fnmatch
import hashlib

import pytest
import tomllib
import torch
from conftest import ROOT

from normlab import corpus
from normlab.corpus import SOURCE, batches, decode, encode, load_split

# The three files' sizes (wc -c on the package's files) and the two newline pairs between them.
TOTAL = 673_022 + 887_071 + 466_292 + 2 * 2
TRAIN, VALID = 1_823_750, 202_639


def test_the_split_is_fixed_and_covers_the_text_once():
    split = load_split()
    assert TRAIN + VALID == TOTAL and VALID == TOTAL - int(TOTAL * 0.9)
    assert {name: tuple(ids.shape) for name, ids in split.items()} == {
        "train": (TRAIN,),
        "valid": (VALID,),
    }
    for ids in split.values():
        assert ids.dtype == torch.int64 and 0 <= int(ids.min()) and int(ids.max()) <= 255
    whole = corpus.text().encode("ascii")
    assert bytes(split["train"].tolist()) == whole[:TRAIN]
    assert bytes(split["valid"].tolist()) == whole[TRAIN:]  # no byte in both, none left out
    assert decode(split["train"][:43]) == "[Sense and Sensibility by Jane Austen 1811]"
    assert decode(split["valid"]).rstrip().endswith("Finis")  # the end of Persuasion


def test_each_call_gives_fresh_tensors():
    first = load_split()
    first["train"][:10] = 0
    assert int(load_split()["train"][:10].min()) > 0


def test_the_text_is_the_recorded_one_without_the_trademark():
    data = corpus.text().encode("ascii")
    assert len(data) == SOURCE["bytes"] == TOTAL
    assert hashlib.sha256(data).hexdigest() == SOURCE["sha256"]
    assert "gutenberg" not in corpus.text().lower()
    for key in ("title", "author", "package", "files", "version", "licence"):
        assert SOURCE[key]


def test_the_data_file_is_package_data():
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = settings["tool"]["setuptools"]["package-data"]["normlab"]
    shipped = SOURCE["data_file"].removeprefix("normlab/")
    assert any(fnmatch.fnmatch(shipped, pattern) for pattern in patterns)
    assert (ROOT / "src" / SOURCE["data_file"]).is_file()


@pytest.mark.parametrize("text", ["Emma Woodhouse, handsome", "café, naïve — 12°", ""])
def test_bytes_round_trip(text):
    ids = encode(text)
    assert ids.dtype == torch.int64 and ids.shape == (len(text.encode("utf-8")),)
    assert decode(ids) == text
    assert decode(ids.tolist()) == text


def test_a_sample_cut_inside_a_character_decodes_with_a_replacement():
    ids = encode("café")[:-1]  # the é's first byte only
    assert decode(ids) == "caf\N{REPLACEMENT CHARACTER}"


def test_batches_are_windows_and_their_next_bytes():
    # Ids that name their own position: each window shows where it starts.
    positions = torch.arange(1000)
    got = list(batches(positions, batch_size=5, context=8, seed=3, steps=7))
    assert len(got) == 7
    for x, y in got:
        assert x.shape == y.shape == (5, 8) and x.dtype == y.dtype == torch.int64
        assert torch.equal(x, x[:, :1] + torch.arange(8))  # contiguous windows
        assert torch.equal(y, x + 1)  # the next byte at every position
        assert int(x.min()) >= 0 and int(y.max()) <= 999


def test_batches_reach_the_last_window():
    # Two windows fit in context + 2 ids: both start positions must come up.
    starts = set()
    for x, _ in batches(torch.arange(10), batch_size=4, context=8, seed=0, steps=20):
        starts.update(x[:, 0].tolist())
    assert starts == {0, 1}


def test_batches_are_deterministic_by_seed():
    train = load_split()["train"]

    def take(seed):
        return [
            torch.cat([x, y])
            for x, y in batches(train, batch_size=16, context=64, seed=seed, steps=3)
        ]

    first, again, other = take(0), take(0), take(1)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(first, other, strict=True))


def test_batches_without_steps_do_not_end():
    stream = batches(torch.arange(100), batch_size=2, context=4, seed=0)
    assert len([next(stream) for _ in range(50)]) == 50


@pytest.mark.parametrize(
    "ids, batch_size, context",
    [
        (torch.arange(8), 2, 8),
        (torch.zeros(2, 20, dtype=torch.int64), 2, 4),
        (torch.arange(50), 0, 4),
    ],
)
def test_batches_refuse_what_cannot_be_windowed(ids, batch_size, context):
    with pytest.raises(ValueError):
        next(batches(ids, batch_size=batch_size, context=context))
