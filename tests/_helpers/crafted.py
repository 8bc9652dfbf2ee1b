"""Journal bytes built by hand: stream lines and mark-file slots with right checksums, as a writer
(or a forger, or an older version) would write them; and a run left as a crashed holder leaves it.

A stream line is canonical JSON (sorted keys) whose last field is ``"crc"``: the CRC-32, in eight hex
digits, of ``<run>\\0<stream>\\0`` and then the line without that field. Versions before checksums
named their run and stream wrote the CRC-32 of the line alone ("unbound"). A mark-file slot is its
raw bytes and their CRC-32, four bytes little-endian.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

import journal
from journal import FileJournal, JournalCorrupt, RunState

CRC_TAIL = len(b',"crc":"00000000"}')
"""How many bytes the checksum field adds at a line's end (its length never changes)."""


def seal(body: bytes, run_id: str = "", stream: str = "") -> bytes:
    """``body`` (a JSON object's bytes) with its checksum field: bound to ``run_id``'s ``stream`` as
    this version writes it; without a run, of the body alone, as versions before that did."""
    start = zlib.crc32(f"{run_id}\0{stream}\0".encode()) if run_id else 0
    return body[:-1] + b',"crc":"%08x"}' % zlib.crc32(body, start)


def line(obj: Any, run_id: str = "", stream: str = "") -> bytes:
    """``obj`` as a stream line (canonical JSON, sealed as :func:`seal` says)."""
    return seal(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS), run_id, stream)


def unsealed(sealed: bytes) -> bytes:
    """A line's JSON without its checksum field."""
    return sealed[:-CRC_TAIL] + b"}"


def unbound(sealed: bytes) -> bytes:
    """``sealed`` as a version before checksums named their run and stream wrote it (same length)."""
    return seal(unsealed(sealed))


def unbind_stream(path: Path) -> None:
    """Rewrite every line of the stream at ``path`` with an unbound checksum, each its own length."""
    path.write_bytes(b"".join(unbound(x) + b"\n" for x in path.read_bytes().splitlines()))


def sealed_slot(raw: bytes) -> bytes:
    """A mark-file slot: ``raw`` and its CRC-32 (four bytes, little-endian)."""
    return raw + zlib.crc32(raw).to_bytes(4, "little")


def left_running(root: Path, meta: dict[str, Any]) -> tuple[Path, str, journal.Lease]:
    """A journal at ``root`` holding one run (``meta``) with one record in stream ``s``, its lease
    released as a crashed holder would leave it: the root, the run and the stale lease."""
    jr = FileJournal(root)
    info, lease = jr.begin("f", "s", meta)
    jr.append(lease, "s", {"n": 1})
    jr.release(lease)  # as a crashed holder would leave it
    jr.close()
    return root, info.run_id, lease


def run_json_readers(root: Path, run_id: str, lease: journal.Lease) -> dict[str, Callable[[], object]]:
    """Each operation that reads ``run.json``, in a fresh journal object (another process's first look)."""
    return {
        "run": lambda: FileJournal(root).run(run_id),
        "runs": lambda: FileJournal(root).runs(),
        "acquire": lambda: FileJournal(root).acquire(run_id),
        "append": lambda: FileJournal(root).append(lease, "s", {"n": 2}),
        "finish": lambda: FileJournal(root).finish(lease, RunState.DONE),
    }


def refused_by_every_reader(
    root: Path, run_id: str, lease: journal.Lease, path: Path
) -> list[JournalCorrupt]:
    """Assert that every operation reading ``run_id``'s ``run.json`` (at ``path``) fails closed:
    ``journal_corrupt`` naming the file, and the run (but for ``runs``, which lists them all).
    Returns the errors, in :func:`run_json_readers`' order."""
    errors = []
    for name, operation in run_json_readers(root, run_id, lease).items():
        with pytest.raises(JournalCorrupt) as err:
            operation()
        assert (err.value.code, err.value.path) == ("journal_corrupt", path), name
        if name != "runs":
            assert err.value.run_id == run_id, name
        assert str(path) in str(err.value)
        errors.append(err.value)
    return errors
