"""Throughput of the journal: file backend vs PostgreSQL, 1 and 8 concurrent writer processes.

Two workloads, each into one root run, every writer its own process holding the run's lease token:

* ``append``: ``journal.append(lease, "memory-learn", payload, key=...)`` with distinct keys
  (durable: fsync'd, or committed, before it returns);
* ``learn``: ``MemoryStore.learn(finding, root)`` (stage, append, publish) with distinct findings,
  every writer on its own ``<db-dir>`` (as if on its own host).
* ``update``: ``MemoryStore.update(memory_id, finding, root=root)`` of the writer's 20 memories
  (learned before the clock starts) in turn, every writer on its own ``<db-dir>``: on PostgreSQL
  it holds its scope's turn among the hosts and looks for its new key in every run's commits.

Writers import and connect first, then start together; the figure is all operations over the wall
time from the first start to the last finish. Latency percentiles are per operation.

    python benchmarks/pg_bench.py                      # both workloads, 1 and 8 writers, 200 ops each
    python benchmarks/pg_bench.py --ops 500 --workload append --writers 1 2 4 8 --repeat 3

The PostgreSQL server is ``--pg``, else ``$FLOWS_TEST_PG``, else postgresql://postgres@127.0.0.1:5432/test;
each measurement uses a fresh schema, dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import journal  # noqa: E402
from tests.pg_fixtures import server_dsn, with_schema  # noqa: E402

_WORKER = r"""
import json, sys, time
import journal
from journal import Lease
workload, location, run_id, epoch, who, ops, db = sys.argv[1:8]
PRELEARNED = int(sys.argv[8])
jr = journal.open_journal(location)
lease = Lease(run_id, int(epoch))
jr.read(run_id, "memory-learn")  # connect (and import) before the clock starts
if workload in ("learn", "update"):
    import memory
    store = memory.MemoryStore(db, journal=location)
    root = memory.RootRun(jr, lease, "bench", "bench")
if workload == "update":
    mids = [store.learn({"text": f"memory {who}-{m}"}, root).memory_id for m in range(PRELEARNED)]
print("ready", flush=True)
sys.stdin.readline()
lat = []
start = time.perf_counter_ns()
for i in range(int(ops)):
    t = time.perf_counter_ns()
    if workload == "append":
        jr.append(lease, "memory-learn", {"text": f"finding {who}-{i}", "n": i}, key=f"{who}-{i}")
    elif workload == "learn":
        store.learn({"text": f"finding {who}-{i}", "tags": ["bench"]}, root)
    else:
        store.update(mids[i % PRELEARNED], {"text": f"memory {who}-{i % PRELEARNED} at {i}"}, root)
    lat.append(time.perf_counter_ns() - t)
end = time.perf_counter_ns()
print(json.dumps({"start": start, "end": end, "lat": lat}), flush=True)
"""


PRELEARNED = 20  # the memories each writer of ``update`` learns before the clock starts


def _postgres_location(dsn: str) -> tuple[str, str]:
    import psycopg

    schema = f"flows_bench_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'create schema "{schema}"')
    return with_schema(dsn, schema), schema


def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'drop schema "{schema}" cascade')


def measure(backend: str, workload: str, writers: int, ops: int, dsn: str) -> dict[str, float]:
    """Run one measurement; return ops/s and latency percentiles in ms."""
    with tempfile.TemporaryDirectory(prefix="flows-bench-") as tmp:
        schema = None
        if backend == "file":
            location = str(Path(tmp) / "journal")
        else:
            location, schema = _postgres_location(dsn)
        jr = journal.open_journal(location)
        try:
            info, lease = jr.begin("bench", "bench", {})
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            procs = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        _WORKER,
                        workload,
                        location,
                        info.run_id,
                        str(lease.epoch),
                        str(w),
                        str(ops),
                        str(Path(tmp) / f"host-{w}" / "history.db"),
                        str(PRELEARNED),
                    ],
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for w in range(writers)
            ]
            for p in procs:
                assert p.stdout is not None and p.stdout.readline().strip() == "ready"
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            results = []
            for p in procs:
                out, _ = p.communicate(timeout=600)
                assert p.returncode == 0, f"a {backend} writer failed"
                results.append(json.loads(out.strip().splitlines()[-1]))
            first = PRELEARNED if workload == "update" else 0
            assert len(jr.read(info.run_id, "memory-learn")) == writers * (first + ops)
            jr.finish(lease, journal.RunState.DONE)
        finally:
            jr.close()
            if schema is not None:
                _drop_schema(dsn, schema)
    wall_s = (max(r["end"] for r in results) - min(r["start"] for r in results)) / 1e9
    lat_ms = sorted(x / 1e6 for r in results for x in r["lat"])
    return {
        "ops_per_s": writers * ops / wall_s,
        "p50_ms": statistics.median(lat_ms),
        "p99_ms": lat_ms[min(len(lat_ms) - 1, int(len(lat_ms) * 0.99))],
    }


def main() -> None:
    """Measure and print a Markdown table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pg", default=None, help="PostgreSQL server DSN")
    parser.add_argument("--ops", type=int, default=200, help="operations per writer")
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--workload", choices=["append", "learn", "update"], nargs="+", default=["append", "learn"]
    )
    parser.add_argument("--backend", choices=["file", "postgres"], nargs="+", default=["file", "postgres"])
    parser.add_argument("--repeat", type=int, default=1, help="measure N times, report the median run")
    args = parser.parse_args()
    dsn = args.pg or server_dsn()
    print(f"# journal throughput ({args.ops} ops per writer, {os.cpu_count()} CPUs)\n")
    print("| workload | writers | backend | ops/s | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    for workload in args.workload:
        for writers in args.writers:
            for backend in args.backend:
                runs = sorted(
                    (measure(backend, workload, writers, args.ops, dsn) for _ in range(args.repeat)),
                    key=lambda m: m["ops_per_s"],
                )
                m = runs[len(runs) // 2]
                print(
                    f"| {workload} | {writers} | {backend} | {m['ops_per_s']:.0f} | "
                    f"{m['p50_ms']:.2f} | {m['p99_ms']:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
