"""An append decodes every line other writers added since its last, and reads the marks they left:
the shortcuts those take for the common line and the common marks answer exactly as the full checks
(the same record, or the same damage), and skip the work they exist to skip."""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import journal
from journal import LineDamaged, LineMarks, Record, RecordCodec
from tests._helpers.crafted import line, unsealed


def _line(obj: dict[str, Any]) -> bytes:
    """A stream line of run ``run``'s stream ``s`` holding ``obj``'s fields with a right checksum
    (which covers the run and stream first), as a writer would (or a forger)."""
    return line(obj, "run", "s")


def _fields(seq: object, rid: object, key: object, ts: object, payload: object) -> dict[str, Any]:
    return {"id": rid, "key": key, "payload": payload, "seq": seq, "ts": ts}


_INTS = st.one_of(
    st.integers(-3, 3), st.integers(2**63 - 3, 2**63 - 1), st.integers(-(2**63), 2**63 - 1), st.booleans()
)
_TEXT = st.one_of(
    st.text(max_size=20),
    st.text(alphabet="abc-_Z09", min_size=0, max_size=70),
    st.text(alphabet="ab\x00\x1f\x7f\x85\u00e9\u2028\u202e", max_size=8),
    st.sampled_from(["a" * 1024, "a" * 1025, "é" * 512, "é" * 513, "\ud800", "k\n"]),
)


@settings(max_examples=400, deadline=None)
@given(
    seq=_INTS,
    rid=st.one_of(_TEXT, _INTS, st.none()),
    key=st.one_of(st.none(), _TEXT, _INTS),
    ts=st.one_of(_INTS, st.floats(allow_nan=False, allow_infinity=False)),
    payload=st.one_of(
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.lists(st.integers())
    ),
)
def test_a_checksummed_line_decodes_to_the_record_or_the_damage_the_full_check_names(
    seq: object, rid: object, key: object, ts: object, payload: object
) -> None:
    try:
        line = _line(_fields(seq, rid, key, ts, payload))
    except orjson.JSONEncodeError:  # a lone surrogate: no writer can write it
        return
    obj = orjson.loads(unsealed(line))
    codec = RecordCodec("run", "s")
    try:
        expected: Record | str = Record(
            "run", "s", obj["seq"], obj["id"], obj["key"], obj["ts"], obj["payload"]
        )
        codec.encode(expected)  # the writer's own check: refuses what decode must refuse
    except ValueError as exc:
        expected = str(exc).replace("cannot encode a record with ", "checksummed record with ")
    except TypeError:
        expected = "?"
    if isinstance(expected, Record):
        got = codec.decode(line)
        assert got == expected
        assert (got.seq, got.id, got.key, got.ts_ms, got.payload) == (seq, rid, key, ts, payload)
    else:
        with pytest.raises(LineDamaged) as err:
            codec.decode(line)
        assert err.value.torn is False
        if expected != "?":
            assert str(err.value) == expected


def test_a_decoded_record_is_a_frozen_record_like_any_other() -> None:
    made = Record("run", "s", 7, "abc", "k7", 12, {"t": "x"})
    got = RecordCodec("run", "s").decode(RecordCodec("run", "s").encode(made))
    assert type(got) is Record and got == made and repr(got) == repr(made)
    assert dataclasses.replace(got, seq=8) == dataclasses.replace(made, seq=8)
    assert dataclasses.asdict(got) == dataclasses.asdict(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.seq = 9  # type: ignore[misc]


def test_decoding_common_lines_builds_no_record_field_by_field(monkeypatch: pytest.MonkeyPatch) -> None:
    # A frozen dataclass's __init__ sets each of the seven fields through object.__setattr__: a
    # share of each line's decode that the codec skips (the fields are checked first, as ever).
    codec = RecordCodec("run", "s")
    lines = [
        codec.encode(Record("run", "s", i, f"id{i}", f"key-{i}", i, {"finding": {"text": f"t{i}"}}))
        for i in range(1, 51)
    ]
    calls = []
    init = Record.__init__

    def counted(self: Record, *args: Any, **kwargs: Any) -> None:
        calls.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(Record, "__init__", counted)
    records = [codec.decode(line) for line in lines]
    assert [r.seq for r in records] == list(range(1, 51))
    assert calls == []


def test_marks_whose_state_is_unchanged_are_parsed_with_one_checksum_per_watermark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every sync moves the watermarks; only a cut or a poison moves the state: a log reading the
    # marks another writer left checks the state's checksum once while it stays put.
    first = LineMarks(10, None, None, 3)
    LineMarks.parse(first.pack())
    raws = [LineMarks(10 + i, 5, None, 3).pack() for i in range(20)]
    calls = []
    crc32 = zlib.crc32

    def counted(data: Any, value: int = 0) -> int:
        calls.append(1)
        return crc32(data, value)

    monkeypatch.setattr(zlib, "crc32", counted)
    parsed = [LineMarks.parse(raw) for raw in raws]
    assert parsed == [LineMarks(10 + i, 5, None, 3) for i in range(20)]
    assert len(calls) == 2 * 20  # the two watermarks of each; the state's, none
    calls.clear()
    packed = [LineMarks(30 + i, None, None, 3).pack() for i in range(20)]
    assert [LineMarks.parse(raw).plain for raw in packed] == [30 + i for i in range(20)]
    assert len(calls) == 20 + 2 * 20  # a pack's one watermark; a parse's two (one slot empty)


def test_a_state_that_changes_is_parsed_afresh() -> None:
    before = LineMarks(10, 10, None, 3, (None, None, None, None), None, None)
    after = LineMarks(10, 10, 8, 4, (8, None, None, None), 2, 3)
    for marks in (before, after, before, after):
        assert LineMarks.parse(marks.pack()) == marks
    torn = bytearray(after.pack())
    torn[40] ^= 1
    assert LineMarks.parse(bytes(torn)) == LineMarks(10, 10, None, None)
    assert LineMarks.parse(after.pack()) == after
    assert journal.LineMarks.parse(b"") == LineMarks(None, None, None, 0)
