"""A ``run.json`` is read as strictly as a stream line: JSON the journal never writes fails closed.

The journal writes a run record as canonical JSON (sorted keys, no spaces, integers within signed
64 bits, nesting orjson writes). A crafted or hand-edited file that is anything else (a repeated
key, an integer orjson reads back as a float, nesting it reads but cannot write, a flow name no
``begin`` takes, NaN) is ``journal_corrupt`` naming the run and the file, from every operation
that reads it: never a record a consumer then fails to encode or store, never a crash or a hang.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

import journal
from journal import FileJournal, JournalCorrupt, RunState
from tests._helpers.crafted import left_running, refused_by_every_reader, run_json_readers


@pytest.fixture
def run_dir(tmp_path: Path) -> tuple[Path, str, journal.Lease]:
    return left_running(tmp_path / "j", {"source": "flow.py"})


def _good(run_id: str, **meta: object) -> bytes:
    record = {
        "runId": run_id,
        "flow": "f",
        "scope": "s",
        "state": "running",
        "epoch": 1,
        "createdMs": 1_700_000_000_000,
        "updatedMs": 1_700_000_000_000,
        "meta": meta,
        "error": None,
    }
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


def _meta_raw(run_id: str, raw: bytes) -> bytes:
    """A canonical run record whose ``meta`` holds ``{"x": <raw>}``, ``raw`` spliced in as bytes."""
    return _good(run_id, x="@@").replace(b'"@@"', raw)


def _deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


CRAFTED: dict[str, Callable[[str], bytes]] = {
    # nesting orjson reads (up to 1024) but never writes: a consumer encoding it again fails
    "meta nested 300 deep": lambda r: _meta_raw(r, _deep(300)),
    "meta nested 5000 deep": lambda r: _meta_raw(r, _deep(5000)),
    "an integer of 2**70 (read back as a float)": lambda r: _meta_raw(r, str(2**70).encode()),
    "an integer of 2**64 - 1 (past signed 64 bits)": lambda r: _meta_raw(r, str(2**64 - 1).encode()),
    "a negative integer past 64 bits": lambda r: _meta_raw(r, str(-(2**70)).encode()),
    "a float of 30 digits": lambda r: _meta_raw(r, b"0.100000000000000000000000000001"),
    "NaN": lambda r: _meta_raw(r, b"NaN"),
    "Infinity": lambda r: _meta_raw(r, b"Infinity"),
    "1e400": lambda r: _meta_raw(r, b"1e400"),
    "epoch given twice": lambda r: _good(r).replace(b'"epoch":1,', b'"epoch":1,"epoch":7,'),
    "a meta key given twice": lambda r: _meta_raw(r, b'{"a":1,"a":2}'),
    "keys out of order": lambda r: orjson.dumps(dict(reversed(orjson.loads(_good(r)).items()))),
    "a flow of 10 MB": lambda r: _good(r).replace(b'"flow":"f"', b'"flow":"' + b"x" * 10_000_000 + b'"'),
    "a flow with a control character": lambda r: _good(r).replace(b'"flow":"f"', b'"flow":"f\\u0000"'),
    "a scope with a lone surrogate": lambda r: _good(r).replace(b'"scope":"s"', b'"scope":"\\ud800"'),
    "pretty-printed by a hand edit": lambda r: orjson.dumps(
        orjson.loads(_good(r)), option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2
    ),
    "a final newline": lambda r: _good(r) + b"\n",
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_run_json_the_journal_never_writes_is_journal_corrupt_naming_the_run_and_the_file(
    run_dir: tuple[Path, str, journal.Lease], case: str
) -> None:
    root, run_id, lease = run_dir
    path = root / "runs" / run_id / "run.json"
    crafted = CRAFTED[case](run_id)
    assert crafted != _good(run_id)
    path.write_bytes(crafted)
    for error in refused_by_every_reader(root, run_id, lease, path):
        assert len(str(error)) < 2000  # the message quotes no 10 MB value
    assert path.read_bytes() == crafted  # nothing rewrote it


def test_what_the_journal_writes_reads_back_a_large_meta_and_edge_values_included(
    run_dir: tuple[Path, str, journal.Lease],
) -> None:
    """The strict read refuses nothing the journal writes: a 10 MB string in meta (under the run
    record's cap), the 64-bit integer limits, floats, nesting as deep as a begin takes."""
    root, _, _ = run_dir
    jr = FileJournal(root)
    nested: object = {}
    for _ in range(250):
        nested = [nested]
    meta = {
        "big": "x" * 10_000_000,
        "limits": [2**63 - 1, -(2**63), 0.1, 1e300, -0.0],
        "text": 'ünïcode \u2028 "quoted" \\',
        "nested": nested,
    }
    info, lease = jr.begin("flöw", "scope with spaces", meta)
    jr.finish(lease, RunState.DONE, {"code": "x", "message": "y"})
    jr.close()
    again = FileJournal(root).run(info.run_id)
    assert again.meta == meta and again.state is RunState.DONE and again.flow == "flöw"


@pytest.mark.parametrize("kind", ["a symbolic link", "a FIFO", "a directory"])
def test_run_json_that_is_no_regular_file_is_journal_corrupt_never_followed_nor_waited_on(
    run_dir: tuple[Path, str, journal.Lease], kind: str, tmp_path: Path
) -> None:
    root, run_id, lease = run_dir
    path = root / "runs" / run_id / "run.json"
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(path.read_bytes())
    path.unlink()
    if kind == "a symbolic link":
        path.symlink_to(elsewhere)
    elif kind == "a FIFO":
        os.mkfifo(path)
    else:
        path.mkdir()
    for name, operation in run_json_readers(root, run_id, lease).items():
        with pytest.raises(JournalCorrupt) as err:
            operation()
        assert (err.value.code, err.value.path) == ("journal_corrupt", path), name
        assert kind in str(err.value), name
