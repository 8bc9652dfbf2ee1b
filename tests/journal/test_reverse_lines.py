"""The line log's backward reader (``iter_reverse``) returns exactly the lines a plain split finds,
newest first with their offsets, whatever their lengths against its read block (lines shorter than
it, as long, one byte longer, several blocks long), with and without a watermark; a line longer than
the codec's ``max_line`` is ``JournalCorrupt`` naming it, found without holding it whole."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

import journal
from journal import JournalCorrupt, LineDamaged, LineLog

BLOCK = 64 * 1024  # the backward reader's block; the lengths below straddle it
LENGTHS = [0, 1, 2, 100, BLOCK - 2, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 7, 3 * BLOCK - 1]


class _Raw:
    """Lines as they are, each starting with ``L`` (anything else is damage)."""

    max_line = 20 * BLOCK  # longer than the forward reader's block, as every codec's is

    def encode(self, record: bytes) -> bytes:
        return record

    def decode(self, line: bytes) -> bytes:
        if not line.startswith(b"L"):
            raise LineDamaged("not a line", torn=False)
        return line


def _lines(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [b"L" + bytes([rng.choice(b"ab")]) * rng.choice(LENGTHS) for _ in range(rng.randint(1, 12))]


def _expected(lines: list[bytes]) -> list[tuple[int, bytes]]:
    out, at = [], 0
    for line in lines:
        out.append((at, line))
        at += len(line) + 1
    return out[::-1]


@pytest.mark.parametrize("seed", range(12))
def test_the_backward_reader_finds_every_line_at_its_offset(tmp_path: Path, seed: int) -> None:
    lines = _lines(seed)
    path = tmp_path / "log.jsonl"
    log = LineLog(path, _Raw())
    with log.locked():
        log.recover()
        for line in lines:
            log.append(line)
    log.close()
    assert list(LineLog(path, _Raw()).iter_reverse_at()) == _expected(lines)  # with its watermark
    with open(path, "ab") as f:
        f.write(b"L" + b"c" * (BLOCK + 3))  # an unfinished append: not a line yet
    assert list(LineLog(path, _Raw()).iter_reverse_at()) == _expected(lines)
    Path(f"{path}.lock").unlink()  # no watermark: the reader guesses the tail
    assert list(LineLog(path, _Raw()).iter_reverse_at()) == _expected(lines)


@pytest.mark.parametrize("where", [0, 1, 2])
@pytest.mark.parametrize("extra", [1, BLOCK, 3 * BLOCK + 5])
def test_a_line_longer_than_the_codecs_bound_is_damage_naming_it(
    tmp_path: Path, where: int, extra: int
) -> None:
    """Acknowledged (a checksummed mark claims every byte): the reader names the line and stops
    there, having returned the newer lines only."""
    lines = [b"L1", b"L2" * 50, b"L3"]
    lines[where] = b"L" + b"x" * (_Raw.max_line - 1 + extra)
    path = tmp_path / "log.jsonl"
    log = LineLog(path, _Raw())
    with log.locked():
        log.recover()
        log.append(b"L0")
    log.close()
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    marks_path = Path(f"{path}.lock")
    marks = journal.LineMarks.parse(marks_path.read_bytes())
    marks_path.write_bytes(dataclasses.replace(marks, plain=path.stat().st_size).pack())
    got: list[bytes] = []
    with pytest.raises(JournalCorrupt) as err:
        got.extend(LineLog(path, _Raw()).iter_reverse())
    assert err.value.line == where + 1
    assert f"a line of more than {_Raw.max_line:,} bytes" in err.value.reason
    assert got == lines[where + 1 :][::-1]
