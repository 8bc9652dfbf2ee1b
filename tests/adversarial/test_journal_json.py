"""A checksummed stream line must hold JSON the journal writes, not only a record's fields.

A CRC is not a signature: a crafted line can carry any JSON with a right checksum. orjson reads
more than it writes — nesting up to 1024 deep (it writes 254), integers up to 2**64 - 1 (the
journal stores signed 64 bits), and integers past that as floats — so such a line used to be
returned as a record: a payload no consumer could encode again (``TypeError``), an integer no
PostgreSQL bigint holds, or a number silently other than the one on disk. Each is now damage
(``journal_corrupt`` naming the file and line), wherever it is; what the journal writes reads back.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from journal import FileJournal, JournalCorrupt, JournalPayloadInvalid, LineLog, LineMarks, RecordCodec
from tests._helpers.crafted import seal

STREAM = "s"
CRAFTED = {
    "nested 300 deep": b"[" * 300 + b"]" * 300,
    "2**63": b"9223372036854775808",
    "2**64 - 1": b"18446744073709551615",
    "below -(2**63), read as a float": b"-9223372036854775809",
    "30 digits, read as a float": b"1" + b"0" * 30,
}


def _nested(levels: int) -> object:
    deep: object = 1
    for _ in range(levels):
        deep = [deep]
    return deep


def _line(payload: bytes) -> bytes:
    body = b'{"id":"abcdef0123456789","key":"k1","payload":{"x":' + payload + b'},"seq":2,"ts":1}'
    return seal(body)


def _stream_with(root: Path, line: bytes, *, acknowledged: bool) -> tuple[str, Path]:
    jr = FileJournal(root)
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, STREAM, {"n": 0}, key="k0")
    path = jr.stream_path(info.run_id, STREAM)
    jr.release(lease)
    jr.close()
    with path.open("ab") as f:
        f.write(line + b"\n")
    if acknowledged:
        lock = Path(f"{path}.lock")
        lock.write_bytes(replace(LineMarks.parse(lock.read_bytes()), plain=path.stat().st_size).pack())
    return info.run_id, path


@pytest.mark.parametrize("acknowledged", [True, False], ids=["below the mark", "past the mark"])
@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_checksummed_line_of_json_the_journal_never_writes_is_journal_corrupt_naming_its_line(
    tmp_path: Path, case: str, acknowledged: bool
) -> None:
    run_id, path = _stream_with(tmp_path, _line(CRAFTED[case]), acknowledged=acknowledged)
    jr = FileJournal(tmp_path)
    with pytest.raises(JournalCorrupt) as refused:
        jr.read(run_id, STREAM)
    assert (refused.value.path, refused.value.line, refused.value.stream) == (path, 2, STREAM)
    jr.close()
    log = LineLog(path, RecordCodec(run_id, STREAM), sequence=lambda r: r.seq)
    with pytest.raises(JournalCorrupt) as backwards:  # the reverse reader, too
        list(log.iter_reverse())
    assert backwards.value.line == 2


def test_what_the_journal_writes_near_those_bounds_reads_back_exactly(tmp_path: Path) -> None:
    """Long digit runs in text, the widest integers, floats and the deepest nesting orjson writes
    all read back (the slower check the scans trigger finds nothing wrong with them)."""
    deep = _nested(252)  # with the payload, 253 levels: the deepest a record holds (254)
    payloads = [
        {"text": "1234567890" * 5, "hex": "0123456789" * 3 + "abcdef"},
        {"max": 2**63 - 1, "min": -(2**63), "f": 1e300, "g": -1.5e-300},
        {"deep": deep},
        {"brackets": "[{" * 300},
    ]
    jr = FileJournal(tmp_path)
    info, lease = jr.begin("f", "s", {})
    written = [jr.append(lease, STREAM, p) for p in payloads]
    jr.release(lease)
    jr.close()
    again = FileJournal(tmp_path)
    read = again.read(info.run_id, STREAM)
    assert read == written
    assert [orjson.dumps(r.payload, option=orjson.OPT_SORT_KEYS) for r in read] == [
        orjson.dumps(p, option=orjson.OPT_SORT_KEYS) for p in payloads
    ]
    again.close()


def test_a_payload_nested_too_deep_for_its_record_is_journal_payload_invalid_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    """orjson encodes the payload alone one level shallower than inside its record: a payload of
    254 levels passed the payload check and failed the record's encode with a bare ``TypeError``."""
    jr = FileJournal(tmp_path)
    info, lease = jr.begin("f", "s", {})
    with pytest.raises(JournalPayloadInvalid) as refused:
        jr.append(lease, STREAM, {"deep": _nested(253)})
    assert refused.value.code == "journal_payload_invalid"
    assert jr.read(info.run_id, STREAM) == []
    jr.close()
