"""The LangGraph adapters against LangGraph's own SQLite ones, side by side in one process.

* checkpointer ``put``: a chain of checkpoints on one thread, each with one changed channel of
  about 200 bytes (as a graph step makes), durable per call. ``JournalSaver`` on the file journal
  against ``SqliteSaver.from_conn_string`` (its ``PRAGMA journal_mode=WAL``, SQLite's default
  ``synchronous=FULL``: the WAL is synced at every commit).
* checkpointer ``get_tuple``: the latest checkpoint of a thread of ``n`` checkpoints, from a saver
  that did not write it (for ours: a reader that holds no lease, so it asks the journal).
* store ``put``: distinct keys in one namespace. ``JournalStore`` against
  ``SqliteStore.from_conn_string`` (autocommit, SQLite's default rollback journal, FULL).
* store filtered search: newest 10 of one namespace with ``filter={"tag": …}`` matching a tenth.

Rounds alternate the two contenders (ours first on even rounds); a figure is the median over
rounds, a ratio the median of the per-round ratios. ``python -m benchmarks --only langgraph``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from benchmarks._common import Sheet, Sizes, say

NAMES = (
    "langgraph.saver_put_per_s",
    "langgraph.sqlitesaver_put_per_s",
    "langgraph.saver_get_tuple_ms",
    "langgraph.sqlitesaver_get_tuple_ms",
    "langgraph.store_put_per_s",
    "langgraph.sqlitestore_put_per_s",
    "langgraph.store_search_ms",
    "langgraph.sqlitestore_search_ms",
)

RATIOS = {
    "ratio.saver_put_vs_sqlitesaver": ("langgraph.saver_put_per_s", "langgraph.sqlitesaver_put_per_s"),
    "ratio.saver_get_tuple_ms_vs_sqlitesaver": (
        "langgraph.saver_get_tuple_ms",
        "langgraph.sqlitesaver_get_tuple_ms",
    ),
    "ratio.store_put_vs_sqlitestore": ("langgraph.store_put_per_s", "langgraph.sqlitestore_put_per_s"),
    "ratio.store_search_ms_vs_sqlitestore": ("langgraph.store_search_ms", "langgraph.sqlitestore_search_ms"),
}

NOTES = {
    "langgraph.saver_put_per_s": "JournalSaver.put, file journal, one thread, durable per call",
    "langgraph.sqlitesaver_put_per_s": "SqliteSaver.put, its WAL, synchronous=FULL (SQLite default)",
    "langgraph.saver_get_tuple_ms": "JournalSaver.get_tuple(latest), a reader holding no lease",
    "langgraph.sqlitesaver_get_tuple_ms": "SqliteSaver.get_tuple(latest), another connection",
    "langgraph.store_put_per_s": "JournalStore.put (a journal-first learn), distinct keys",
    "langgraph.sqlitestore_put_per_s": "SqliteStore.put, autocommit, rollback journal, FULL",
    "langgraph.store_search_ms": "JournalStore.search(filter=tag, limit=10)",
    "langgraph.sqlitestore_search_ms": "SqliteStore.search(filter=tag, limit=10)",
}

# (puts per round, get_tuple calls per round, checkpoints behind get_tuple, store items, searches)
_SIZES = {"smoke": (5, 5, 20, 30, 3), "quick": (50, 50, 200, 500, 20), "full": (100, 100, 500, 1_000, 50)}


def _rate(fn: Callable[[int], None], n: int) -> float:
    t0 = time.perf_counter()
    fn(n)
    return n / (time.perf_counter() - t0)


def _latency_ms(fn: Callable[[], object], calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


class _Chain:
    """Puts a chain of checkpoints on one thread of ``saver``, as a graph's steps would."""

    def __init__(self, saver: Any, thread: str) -> None:
        from langgraph.checkpoint.base import empty_checkpoint

        self._saver, self._thread, self._empty = saver, thread, empty_checkpoint
        self._parent: str | None = None
        self._version: Any = None
        self.count = 0

    def put(self, n: int) -> None:
        for _ in range(n):
            cp = self._empty()
            self._version = self._saver.get_next_version(self._version, None)
            cp["channel_values"] = {"messages": f"step {self.count} " + "x" * 200}
            cp["channel_versions"] = {"messages": self._version}
            configurable = {"thread_id": self._thread, "checkpoint_ns": ""}
            if self._parent:
                configurable["checkpoint_id"] = self._parent
            self._saver.put(
                {"configurable": configurable},
                cp,
                {"source": "loop", "step": self.count},
                {"messages": self._version},
            )
            self._parent = cp["id"]
            self.count += 1


def _bench_saver(base: Path, sizes: Sizes, sheet: Sheet, out: TextIO | None) -> None:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    from flows.langgraph import JournalSaver

    base.mkdir(parents=True, exist_ok=True)
    puts, calls, depth, _, _ = _SIZES[sizes.name]
    journal = str(base / "journal")
    db = str(base / "saver.sqlite")
    rounds: dict[str, list[float]] = {n: [] for n in NAMES[:4]}
    with JournalSaver(journal=journal) as ours, SqliteSaver.from_conn_string(db) as theirs:
        chains = {"ours": _Chain(ours, "bench-put"), "theirs": _Chain(theirs, "bench-put")}
        for name, saver in (("ours", ours), ("theirs", theirs)):  # the read thread, built once
            _Chain(saver, "bench-read").put(depth)
            chains[name].put(2)  # warm: the thread exists, the lease is held, the schema is set up
        mode = theirs.conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = theirs.conn.execute("PRAGMA synchronous").fetchone()[0]
        sheet.meta["sqlitesaver"] = {"journal_mode": mode, "synchronous": sync}
        with JournalSaver(journal=journal) as reader:
            other = sqlite3.connect(db, check_same_thread=False)
            peer = SqliteSaver(other)
            cfg = {"configurable": {"thread_id": "bench-read", "checkpoint_ns": ""}}
            for k in range(sizes.rounds):
                order = ["ours", "theirs"] if k % 2 == 0 else ["theirs", "ours"]
                for who in order:
                    if who == "ours":
                        rounds["langgraph.saver_put_per_s"].append(_rate(chains["ours"].put, puts))
                        rounds["langgraph.saver_get_tuple_ms"].append(
                            _latency_ms(lambda: reader.get_tuple(cfg), calls)  # type: ignore[arg-type]
                        )
                    else:
                        rounds["langgraph.sqlitesaver_put_per_s"].append(_rate(chains["theirs"].put, puts))
                        rounds["langgraph.sqlitesaver_get_tuple_ms"].append(
                            _latency_ms(lambda: peer.get_tuple(cfg), calls)  # type: ignore[arg-type]
                        )
            other.close()
    for name, values in rounds.items():
        sheet.rounds[name] = values
        sheet.put(name, statistics.median(values), NOTES[name])
    say(
        out,
        f"langgraph saver: {puts} puts and {calls} get_tuple per round, {sizes.rounds} rounds; "
        f"SqliteSaver journal_mode={mode}, synchronous={sync}",
    )


def store_filler(
    store: Any, ns: tuple[str, ...], counters: dict[str, int], who: str
) -> Callable[[int], None]:
    """A function putting ``n`` items of distinct keys into ``store`` (``counters[who]`` numbers them)."""

    def put(n: int) -> None:
        for _ in range(n):
            i = counters[who]
            counters[who] += 1
            store.put(ns, f"k{i}", {"tag": f"t{i % 10}", "text": f"finding {i} about fees and swaps"})

    return put


def _bench_store(base: Path, sizes: Sizes, sheet: Sheet, out: TextIO | None) -> None:
    from langgraph.store.sqlite import SqliteStore

    from flows.langgraph import JournalStore

    base.mkdir(parents=True, exist_ok=True)
    puts, _, _, items, searches = _SIZES[sizes.name]
    rounds: dict[str, list[float]] = {n: [] for n in NAMES[4:]}
    ns = ("bench", "items")
    with (
        JournalStore(db=str(base / "history.db"), journal=str(base / "journal")) as ours,
        SqliteStore.from_conn_string(str(base / "store.sqlite")) as theirs,
    ):
        theirs.setup()
        mode = theirs.conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = theirs.conn.execute("PRAGMA synchronous").fetchone()[0]
        sheet.meta["sqlitestore"] = {"journal_mode": mode, "synchronous": sync}
        counters = {"ours": 0, "theirs": 0}
        fill = {
            "ours": store_filler(ours, ns, counters, "ours"),
            "theirs": store_filler(theirs, ns, counters, "theirs"),
        }
        for who in ("ours", "theirs"):  # the searched items, built once
            fill[who](items)
        flt = {"tag": "t3"}
        for k in range(sizes.rounds):
            for who in ["ours", "theirs"] if k % 2 == 0 else ["theirs", "ours"]:
                store: Any = ours if who == "ours" else theirs
                name = "store" if who == "ours" else "sqlitestore"
                rounds[f"langgraph.{name}_search_ms"].append(
                    _latency_ms(lambda s=store: s.search(ns, filter=flt, limit=10), searches)
                )
                rounds[f"langgraph.{name}_put_per_s"].append(_rate(fill[who], puts))
    for name, values in rounds.items():
        sheet.rounds[name] = values
        sheet.put(name, statistics.median(values), NOTES[name])
    say(
        out,
        f"langgraph store: {puts} puts per round over {items}+ items, {searches} filtered searches; "
        f"SqliteStore journal_mode={mode}, synchronous={sync}",
    )


def bench_langgraph(base: Path, sizes: Sizes, sheet: Sheet, out: TextIO | None) -> None:
    """Run the checkpointer and store comparisons into ``sheet`` (work under ``base``)."""
    base.mkdir(parents=True, exist_ok=True)
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError as exc:
        for name in NAMES:
            sheet.skip(name, f"the langgraph extra is not installed ({exc}): pip install -e '.[langgraph]'")
        return
    _bench_saver(base / "saver", sizes, sheet, out)
    _bench_store(base / "store", sizes, sheet, out)
