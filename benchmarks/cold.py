"""What a fresh process pays: its first recall, ``flows recall`` end to end, and the same with SQLite.

Run after ``reads`` on its dataset (``synced`` rows in the history DB plus ``unsynced`` learned files)
and its SQLite baseline (``baseline.db``, the same rows with a (tag, time) index):

* ``cold.first_recall_ms``: a fresh interpreter opens the store and makes its first
  ``recall(tag=, limit=10)``, timed inside the process after the imports (``import memory`` alone
  imports nothing until a name is used, so the timed code's ``MemoryStore`` is taken from the
  package before the clock starts, as ``import sqlite3`` is before the peer's; the unsynced files' index
  written by an earlier process in place, as after any earlier read);
* ``cold.first_recall_no_index_ms``: the same with ``<db-dir>/flows-cache`` deleted first (every
  unsynced file read and parsed, as before the index existed, and the index written);
* ``cold.sqlite_first_query_ms``: a fresh interpreter connects to the baseline and runs the
  same indexed query, timed the same way;
* ``cold.cli_recall_ms`` / ``cold.sqlite_cli_ms``: ``flows recall --limit 10`` end to end (process
  start to exit) against ``python -c`` that imports sqlite3, connects and runs the query.

Each is the median over fresh processes. The child processes run with bytecode caching on (into a
temporary ``PYTHONPYCACHEPREFIX``, warmed once), as an installed package runs: a session that sets
``PYTHONDONTWRITEBYTECODE`` would otherwise recompile every module on every start.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from benchmarks._common import REPO, TAGS, Sheet, say

_FIRST_RECALL = r"""
import sys, time
from memory import MemoryStore  # the package imports its modules on first use: use it here
t0 = time.perf_counter()
store = MemoryStore(sys.argv[1])
found = store.recall(tag=sys.argv[2], limit=10)
print((time.perf_counter() - t0) * 1000, len(found))
"""

_FIRST_SQLITE = r"""
import sys, time
import sqlite3
t0 = time.perf_counter()
conn = sqlite3.connect(sys.argv[1])
rows = conn.execute(
    "SELECT f.id, f.key, f.text, f.source, f.tags, f.learned_ms, f.run_id, f.record_id FROM t"
    " JOIN f ON f.id = t.f WHERE t.tag = ? ORDER BY t.learned_ms DESC LIMIT 10", (sys.argv[2],)
).fetchall()
print((time.perf_counter() - t0) * 1000, len(rows))
"""

_SQLITE_CLI = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
    "print(c.execute('SELECT key, text, source, tags, learned_ms FROM f ORDER BY learned_ms DESC LIMIT 10')"
    ".fetchall())"
)


def _env(pycache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(REPO), "PYTHONPYCACHEPREFIX": str(pycache)}


def _inner_ms(argv: list[str], env: dict[str, str]) -> float:
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, check=True, timeout=300)
    ms, n = out.stdout.split()
    if int(n) != 10:
        raise RuntimeError(f"a fresh-process read returned {n} rows, not 10")
    return float(ms)


def _wall_ms(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, capture_output=True, env=env, cwd=REPO, check=True, timeout=300)
    return (time.perf_counter() - t0) * 1000


def bench_cold(base: Path, calls: int, sheet: Sheet, out: TextIO | None) -> None:
    """Measure the fresh-process figures over ``reads``' dataset (see the module docstring)."""
    db = base / "reads" / "history.db"
    baseline = base / "reads" / "baseline.db"
    pycache = Path(tempfile.mkdtemp(prefix="flows-bench-pyc-"))
    env = _env(pycache)
    flows_cli = [sys.executable, "-m", "flows", "--db", str(db), "recall", "--limit", "10"]
    sqlite_cli = [sys.executable, "-c", _SQLITE_CLI, str(baseline)]
    try:
        for argv in (flows_cli, sqlite_cli):  # compile once; writes the files' index too
            _wall_ms(argv, env)
        first, first_none, peer, cli, peer_cli = [], [], [], [], []
        for i in range(calls):
            tag = TAGS[i % len(TAGS)]
            shutil.rmtree(db.parent / "flows-cache", ignore_errors=True)
            first_none.append(_inner_ms([sys.executable, "-c", _FIRST_RECALL, str(db), tag], env))
            first.append(_inner_ms([sys.executable, "-c", _FIRST_RECALL, str(db), tag], env))
            peer.append(_inner_ms([sys.executable, "-c", _FIRST_SQLITE, str(baseline), tag], env))
            cli.append(_wall_ms(flows_cli, env))
            peer_cli.append(_wall_ms(sqlite_cli, env))
    finally:
        shutil.rmtree(pycache, ignore_errors=True)
    sheet.put("cold.first_recall_ms", statistics.median(first), "fresh process: open + first recall(tag=)")
    sheet.put(
        "cold.first_recall_no_index_ms",
        statistics.median(first_none),
        "the same with no files' index: reads every unsynced file, writes the index",
    )
    sheet.put(
        "cold.sqlite_first_query_ms",
        statistics.median(peer),
        "fresh process: sqlite3 connect + indexed query",
    )
    sheet.put(
        "cold.cli_recall_ms", statistics.median(cli), "`flows recall --limit 10`, process start to exit"
    )
    sheet.put(
        "cold.sqlite_cli_ms",
        statistics.median(peer_cli),
        "`python -c` sqlite3 connect + query, start to exit",
    )
    sheet.rounds["cold.first_recall_ms"] = [round(x, 2) for x in first]
    sheet.rounds["cold.sqlite_first_query_ms"] = [round(x, 2) for x in peer]
    sheet.rounds["cold.cli_recall_ms"] = [round(x, 1) for x in cli]
    sheet.rounds["cold.sqlite_cli_ms"] = [round(x, 1) for x in peer_cli]
    say(out, f"cold: {calls} fresh processes of each")
