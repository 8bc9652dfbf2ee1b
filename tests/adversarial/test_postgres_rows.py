"""Rows read back from the PostgreSQL journal are untrusted, as a file's lines are.

Each crafted row below is one a person with write access to the tables (or a damaged restore) could
leave: a payload that is not JSON or not an object, an id or key of the wrong shape, a negative
time, a run whose meta or error is not what this journal writes, whose epoch is below 1 or whose
times are not times (a state outside the three stored ones the table's own check constraint
refuses), a run id or stream name no reader takes. Every reader (read, find,
lookup, run, runs, and the memory commands on top) fails closed with ``journal_corrupt`` naming the
run (and the stream and sequence number for a record); nothing crashes with a bare error and
nothing is skipped.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from journal import JournalCorrupt
from tests.conftest import ROOT

STREAM = "memory-learn"

RECORD_ROWS = {
    "payload not JSON": "update journal_records set payload = 'not json {' where seq = 2",
    "payload an array": "update journal_records set payload = '[1, 2]' where seq = 2",
    "payload a string": """update journal_records set payload = '"text"' where seq = 2""",
    "id of the wrong shape": "update journal_records set id = '../../etc' where seq = 2",
    "key with a control character": "update journal_records set key = E'a\\x01b' where seq = 2",
    "negative time": "update journal_records set ts_ms = -5 where seq = 2",
}

RUN_ROWS = {
    "meta not JSON": "update journal_runs set meta = 'nope'",
    "meta an array": "update journal_runs set meta = '[]'",
    "error a number": "update journal_runs set error = '7'",
    "epoch zero": "update journal_runs set epoch = 0",
    "epoch negative": "update journal_runs set epoch = -3",
    "created before 1970": "update journal_runs set created_ms = -1",
    "updated past year 9999": "update journal_runs set updated_ms = 9223372036854775807",
}


def _seed(dsn: str) -> str:
    from journal.postgres import PostgresJournal

    with PostgresJournal(dsn) as jr:
        info, lease = jr.begin("f", "s", {})
        for i in range(3):
            jr.append(lease, STREAM, {"n": i}, key=f"k{i}")
    return info.run_id


def _craft(dsn: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)


@pytest.mark.parametrize("crafted", list(RECORD_ROWS), ids=list(RECORD_ROWS))
def test_a_crafted_record_row_is_journal_corrupt_for_every_record_reader(
    postgres_dsn: str, crafted: str
) -> None:
    from journal.postgres import PostgresJournal

    run_id = _seed(postgres_dsn)
    _craft(postgres_dsn, RECORD_ROWS[crafted])
    with PostgresJournal(postgres_dsn) as jr:
        readers = {"read": lambda: jr.read(run_id, STREAM)}
        if "key" not in crafted:  # with its key crafted, the row is no longer found by "k1"
            readers["find"] = lambda: jr.find(run_id, STREAM, "k1")
            readers["keyed_anywhere"] = lambda: jr.keyed_anywhere(STREAM, "k1")
        for name, read in readers.items():
            with pytest.raises(JournalCorrupt) as err:
                read()
            assert (err.value.code, err.value.run_id, err.value.stream, err.value.line) == (
                "journal_corrupt",
                run_id,
                STREAM,
                2,
            ), name
            assert "restore it from a backup" in str(err.value)
        # a record the crafted row does not touch still reads
        assert jr.find(run_id, STREAM, "k0") is not None


@pytest.mark.parametrize("crafted", list(RUN_ROWS), ids=list(RUN_ROWS))
def test_a_crafted_run_row_is_journal_corrupt_naming_the_run(postgres_dsn: str, crafted: str) -> None:
    from journal.postgres import PostgresJournal

    run_id = _seed(postgres_dsn)
    _craft(postgres_dsn, RUN_ROWS[crafted])
    with PostgresJournal(postgres_dsn) as jr:
        for read in (lambda: jr.run(run_id), jr.runs):
            with pytest.raises(JournalCorrupt) as err:
                read()
            assert (err.value.code, err.value.run_id) == ("journal_corrupt", run_id)
    if "epoch" in crafted:  # a resume would hand out a lease of an epoch no begin gives
        with PostgresJournal(postgres_dsn) as jr, pytest.raises(JournalCorrupt) as err:
            jr.acquire(run_id)
        assert (err.value.code, err.value.run_id) == ("journal_corrupt", run_id)


def test_a_run_row_whose_id_is_no_run_id_fails_every_listing_closed(postgres_dsn: str) -> None:
    from journal.postgres import PostgresJournal

    with PostgresJournal(postgres_dsn) as jr:
        info, lease = jr.begin("f", "s", {})
        jr.release(lease)
    _craft(postgres_dsn, f"update journal_runs set run_id = '../../etc' where run_id = '{info.run_id}'")
    with PostgresJournal(postgres_dsn) as jr, pytest.raises(JournalCorrupt) as err:
        jr.runs()  # never a run whose id every later call refuses as the caller's mistake
    assert (err.value.code, err.value.run_id) == ("journal_corrupt", "../../etc")


def test_a_record_row_whose_run_id_is_no_run_id_fails_a_look_at_a_key_in_every_run_closed(
    postgres_dsn: str,
) -> None:
    from journal.postgres import PostgresJournal

    _seed(postgres_dsn)
    _craft(
        postgres_dsn,
        "alter table journal_records drop constraint journal_records_run_id_fkey;"
        " update journal_records set run_id = '../../etc' where seq = 2",
    )
    with PostgresJournal(postgres_dsn) as jr, pytest.raises(JournalCorrupt) as err:
        jr.keyed_anywhere(STREAM, "k1")  # never a record of a run no reader can name
    assert (err.value.code, err.value.run_id, err.value.stream) == ("journal_corrupt", "../../etc", STREAM)


@pytest.mark.parametrize("name", ["../evil", "a\nb", ".hidden"])
def test_records_under_a_stream_name_no_reader_takes_fail_the_listing_closed(
    postgres_dsn: str, name: str
) -> None:
    from journal.postgres import PostgresJournal

    run_id = _seed(postgres_dsn)
    _craft(postgres_dsn, f"update journal_records set stream = E'{name}' where seq = 2")
    with PostgresJournal(postgres_dsn) as jr:
        with pytest.raises(JournalCorrupt) as err:
            jr.streams(run_id)  # never a name that reading then refuses as the caller's mistake
        assert (err.value.code, err.value.run_id) == ("journal_corrupt", run_id)
        # the stream's other records read, and fail closed: a record is missing from their numbers
        with pytest.raises(JournalCorrupt):
            jr.read(run_id, STREAM)


def test_the_memory_commands_fail_closed_on_a_crafted_row(postgres_dsn: str, tmp_path: object) -> None:
    import memory

    db = tmp_path / "history.db"  # type: ignore[operator]
    with memory.MemoryStore(db, journal=postgres_dsn) as store, store.session(scope="s") as s:
        s.learn({"text": "the fee is 0.3 percent"})
    _craft(postgres_dsn, "update journal_records set payload = '[]' where stream = 'memory-learn'")
    for command in (["sync"], ["history", "0" * 32]):
        proc = subprocess.run(
            [sys.executable, "-m", "flows", *command, "--db", str(db), "--journal", postgres_dsn, "--json"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
            check=False,
        )
        assert proc.returncode != 0, command
        assert "Traceback" not in proc.stderr, proc.stderr
        assert "journal_corrupt" in proc.stdout + proc.stderr, (command, proc.stdout, proc.stderr)
