"""Reading the ledger's lines costs what is read, however long a line is: a crafted line of many
megabytes (an unfinished append at the end, a damaged line in the middle) is read once, never
re-joined or re-searched block after block; and the backward and forward readers return exactly the
lines a plain split finds, at every block size."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

import memory.ledger as ml
from journal import JournalCorrupt
from memory.ledger import Ledger, Skipped
from memory.ledger import _lines as lines_module
from tests.ledger.test_ledger import skipped, write

BIG = 48 << 20  # 48 MiB: 768 blocks of the backward reader


def _ledger(tmp_path: Path) -> tuple[Ledger, list[Skipped]]:
    ledger = Ledger(tmp_path / "damaged")  # no schema check of it after the test
    entries = [skipped(1), skipped(2)]
    write(ledger, *entries)
    return ledger, entries


def test_an_unfinished_append_of_many_megabytes_is_skipped_in_one_pass(tmp_path: Path) -> None:
    ledger, entries = _ledger(tmp_path)
    with open(ledger.path, "ab") as f:
        f.write(b'{"kind":"skipped","reason":"' + b"x" * (2 * BIG))  # no newline: not a line yet
    t0 = time.perf_counter()
    assert list(ledger.iter_reverse()) == entries[::-1]
    assert ledger.entries() == entries
    # read once, a fraction of a second here; searched again with every block, half a minute
    assert time.perf_counter() - t0 < 8


def test_a_damaged_line_of_many_megabytes_is_named_after_one_read(tmp_path: Path) -> None:
    ledger, _ = _ledger(tmp_path)
    good = ledger.path.read_bytes()
    ledger.path.write_bytes(good + b"{" + b"y" * BIG + b"\n" + good.splitlines(keepends=True)[-1])
    ledger = Ledger(ledger.path.parent.parent)  # a fresh reader, as the next tick's process would be
    t0 = time.perf_counter()
    with pytest.raises(JournalCorrupt, match="line 3 is damaged"):
        list(ledger.iter_reverse())
    assert time.perf_counter() - t0 < 8


def test_the_forward_reader_reads_a_line_of_many_megabytes_once(tmp_path: Path) -> None:
    path = tmp_path / "lines"
    path.write_bytes(b"first\n" + b"z" * (4 * BIG) + b"\nlast\n")
    reader = lines_module.LineFile(path, ml.LedgerCodec())
    fd = os.open(path, os.O_RDONLY)
    try:
        t0 = time.perf_counter()
        got = [(offset, len(raw)) for offset, raw in reader.forward_raw(fd, 0, path.stat().st_size)]
        took = time.perf_counter() - t0
    finally:
        os.close(fd)
    assert got == [(0, 5), (6, 4 * BIG), (7 + 4 * BIG, 4)]
    assert took < 8


@pytest.mark.parametrize("blocks", [(1, 1), (3, 7), (5, 64), (4096, 65536)])
def test_the_readers_return_exactly_the_lines_a_split_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blocks: tuple[int, int]
) -> None:
    monkeypatch.setattr(lines_module, "_FIRST_BLOCK", blocks[0])
    monkeypatch.setattr(lines_module, "_BLOCK", blocks[1])
    rng = random.Random(blocks[1])
    path = tmp_path / "lines"
    reader = lines_module.LineFile(path, ml.LedgerCodec())
    for case in range(60):
        body = b"".join(
            bytes(rng.choice(b"ab\n") for _ in range(rng.choice([0, 1, 2, 9, 40, 200])))
            for _ in range(rng.randint(0, 6))
        )
        path.write_bytes(body)
        fd = os.open(path, os.O_RDONLY)
        try:
            whole, _, _ = body.rpartition(b"\n")
            want, offset = [], 0
            if b"\n" in body:
                for raw in whole.split(b"\n"):
                    want.append((offset, raw))
                    offset += len(raw) + 1
            assert list(reader.reverse_raw(fd, len(body))) == want[::-1], (case, body)
            assert list(reader.forward_raw(fd, 0, len(body))) == want, (case, body)
            if want:  # from the start of a line in the middle to the end of another
                mid = want[len(want) // 2][0]
                assert list(reader.forward_raw(fd, mid, len(body))) == [w for w in want if w[0] >= mid]
        finally:
            os.close(fd)
