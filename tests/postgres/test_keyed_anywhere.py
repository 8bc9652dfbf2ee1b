"""A key looked for in every run's records at once (``keyed_anywhere``): what an update on one host
asks before it gives its new version a key that another host's learn may already hold."""

from __future__ import annotations

import psycopg
import pytest

from journal import JournalNameInvalid
from journal.postgres import PostgresJournal


def test_every_runs_records_of_a_key_in_one_stream_are_found(pg: PostgresJournal) -> None:
    runs = []
    for n in range(3):
        info, lease = pg.begin("f", f"s{n}", {})
        runs.append(info.run_id)
        pg.append(lease, "memory-learn", {"n": n}, key="k")
        pg.append(lease, "memory-learn", {"n": n, "other": True}, key=f"other{n}")
        pg.append(lease, "memory-forget", {"n": n}, key="k")  # another stream's record of the key
    found = pg.keyed_anywhere("memory-learn", "k")
    assert sorted((r.run_id, r.stream, r.key, r.payload) for r in found) == sorted(
        (run, "memory-learn", "k", {"n": n}) for n, run in enumerate(runs)
    )
    assert all(r == pg.find(r.run_id, "memory-learn", "k") for r in found)  # as one run's lookup reads it
    assert len(pg.keyed_anywhere("memory-learn", "k", limit=2)) == 2
    assert pg.keyed_anywhere("memory-learn", "nobody") == []
    assert pg.keyed_anywhere("memory-erase", "k") == []
    with pytest.raises(JournalNameInvalid):
        pg.keyed_anywhere("memory-learn", "a\nb")
    with pytest.raises(JournalNameInvalid):
        pg.keyed_anywhere("../x", "k")
    with pytest.raises(ValueError, match="limit"):
        pg.keyed_anywhere("memory-learn", "k", limit=0)


def test_the_look_is_one_probe_of_the_index_of_keys(pg: PostgresJournal, postgres_dsn: str) -> None:
    _, lease = pg.begin("f", "s", {})
    for n in range(50):
        pg.append(lease, "memory-learn", {"n": n}, key=f"k{n}")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("set enable_seqscan = off")  # the table is small: only whether the index serves
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                "explain select * from journal_records x where x.key = 'k7' and x.stream = 'memory-learn'"
            )
        )
    assert "journal_records_by_key" in plan
