"""``python benchmarks/pg_key_runs.py [--runs N] [--appends M] [--pg DSN]``: what a plain learn's
append costs on PostgreSQL when many root runs committed its key (a finding an agent learns again on
every tick, each tick a root run of its own).

In a fresh schema it writes N runs (default 3,000), each holding one commit of the key ``many``
(rows inserted directly, no memory named), then times M appends (default 60) of that key from new
runs as a plain learn makes them on a journal hosts share (``append(turn=, unless_elsewhere=)``),
and prints the median in ms. The look at other runs' commits reads a bounded number of them (schema
step 10), so the figure stays flat as N grows. The schema is dropped afterwards.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from journal.postgres import PostgresJournal
from tests.pg_fixtures import server_dsn, with_schema


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3000, help="runs holding a commit of the key")
    parser.add_argument("--appends", type=int, default=60, help="appends timed")
    parser.add_argument("--pg", default=None, help="PostgreSQL server DSN (default: the tests' server)")
    args = parser.parse_args()
    import psycopg

    dsn = args.pg or server_dsn()
    schema = f"flows_bench_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'create schema "{schema}"')
    location = with_schema(dsn, schema)
    try:
        with PostgresJournal(location) as jr:
            _, lease = jr.begin("bench", "bench", {})
            jr.append(lease, "memory-learn", {"n": 0}, key="first")  # the schema made
            with psycopg.connect(location, autocommit=True) as conn:
                conn.execute(
                    "insert into journal_runs select 'r' || g, 'f', 's', 'done', 1, 1, 1, '{}', null, null,"
                    " null from generate_series(1, %s) g",
                    (args.runs,),
                )
                conn.execute(
                    "insert into journal_records select 'r' || g, 'memory-learn', 1, md5(g::text), 'many', 1,"
                    " '{\"finding\":\"' || repeat('x', 400) || '\"}' from generate_series(1, %s) g",
                    (args.runs,),
                )
                conn.execute("analyze journal_records")
            took = []
            for n in range(args.appends):
                _, each = jr.begin("bench", "bench", {})
                start = time.perf_counter()
                token = '"memory"'  # what a plain learn asks for: a commit naming a memory
                jr.append(each, "memory-learn", {"n": n}, key="many", turn="bench", unless_elsewhere=token)
                took.append((time.perf_counter() - start) * 1000)
                jr.release(each)
        print(f"append of a key {args.runs:,} runs committed: median {statistics.median(took):.3f} ms")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'drop schema "{schema}" cascade')


if __name__ == "__main__":
    main()
