"""``python -m benchmarks.langgraph_ab [--what put|get] [--blocks B] [--per-block K] [--dir DISK]``:
what a cut of the LangGraph adapters is worth, measured in one process against the code path it
replaced and against LangGraph's own SQLite adapter, blocks taking turns so that all three see the
same machine and disk at the same minutes.

* ``put``: ``JournalStore.put`` of distinct keys (after 500 items, as ``--only langgraph`` puts
  them), the item looked up by the memory's read (``JournalStore._live``, before) or by the store's
  own look-up (``flows.langgraph._lookup``); ``SqliteStore.put`` (autocommit, SQLite's defaults).
* ``get``: ``JournalSaver.get_tuple`` of the latest of 200 checkpoints by a reader holding no lease,
  the checkpoint's fields checked on every read (before) or once per stored checkpoint;
  ``SqliteSaver.get_tuple`` on another connection.

Prints, for each, the median rate and CPU (user + system) per call, and the medians of the
per-block ratios.
"""

from __future__ import annotations

import resource
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchmarks._common import paired_parser

OLD, NEW = "before", "after"


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _store_puts(
    base: str,
) -> tuple[dict[str, Callable[[int], None]], Callable[[str], None], Callable[[], None]]:
    """``put``: the three contenders' blocks, the switch between before and after, and a close."""
    from langgraph.store.sqlite import SqliteStore

    from benchmarks.langgraph_bench import store_filler
    from flows.langgraph import JournalStore

    ours = JournalStore(db=f"{base}/history.db", journal=f"{base}/journal")
    opening = SqliteStore.from_conn_string(f"{base}/store.sqlite")
    theirs = opening.__enter__()
    theirs.setup()
    ns = ("bench", "items")
    counters = {"ours": 0, "theirs": 0}
    fill = {
        "ours": store_filler(ours, ns, counters, "ours"),
        "theirs": store_filler(theirs, ns, counters, "theirs"),
    }

    def switch(kind: str) -> None:  # both keep the look-up's notes: only the reads differ
        if kind == OLD:
            ours._live_for_write = ours._live  # type: ignore[method-assign]
            ours._alone = lambda *args: False  # type: ignore[method-assign]
        else:
            vars(ours).pop("_live_for_write", None)
            vars(ours).pop("_alone", None)

    def close() -> None:
        ours.close()
        opening.__exit__(None, None, None)

    fill["ours"](500)
    fill["theirs"](500)
    return fill, switch, close


def _saver_gets(
    base: str,
) -> tuple[dict[str, Callable[[int], None]], Callable[[str], None], Callable[[], None]]:
    """``get``: the three contenders' blocks, the switch between before and after, and a close."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from benchmarks.langgraph_bench import _Chain
    from flows.langgraph import JournalSaver

    writer = JournalSaver(journal=f"{base}/journal")
    opening = SqliteSaver.from_conn_string(f"{base}/saver.sqlite")
    theirs = opening.__enter__()
    _Chain(writer, "bench-read").put(200)
    _Chain(theirs, "bench-read").put(200)
    reader = JournalSaver(journal=f"{base}/journal")
    other = sqlite3.connect(f"{base}/saver.sqlite", check_same_thread=False)
    peer = SqliteSaver(other)
    cfg: Any = {"configurable": {"thread_id": "bench-read", "checkpoint_ns": ""}}

    def calls(saver: Any) -> Callable[[int], None]:
        def get(n: int) -> None:
            for _ in range(n):
                saver.get_tuple(cfg)

        return get

    def switch(kind: str) -> None:
        if kind == OLD:
            reader._shape_checked = lambda stored: False  # type: ignore[method-assign]
        else:
            vars(reader).pop("_shape_checked", None)

    def close() -> None:
        reader.close()
        writer.close()
        other.close()
        opening.__exit__(None, None, None)

    return {"ours": calls(reader), "theirs": calls(peer)}, switch, close


def main(argv: list[str] | None = None) -> int:
    """Run the blocks and print the figures."""
    ap = paired_parser("langgraph_ab", __doc__, blocks=12, per_block=100)
    ap.add_argument("--what", choices=["put", "get"], default="put")
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="flows-langgraph-ab-", dir=args.dir)
    peer = "SqliteStore" if args.what == "put" else "SqliteSaver"
    rates: dict[str, list[float]] = {OLD: [], NEW: [], peer: []}
    cpu: dict[str, list[float]] = {OLD: [], NEW: [], peer: []}
    try:
        blocks, switch, close = (_store_puts if args.what == "put" else _saver_gets)(base)
        try:
            for block in range(args.blocks):
                pair = [OLD, NEW] if block % 2 == 0 else [NEW, OLD]
                for kind in [*pair, peer] if block % 2 == 0 else [peer, *pair]:
                    if kind != peer:
                        switch(kind)
                    run = blocks["theirs" if kind == peer else "ours"]
                    c0, t0 = _cpu_s(), time.perf_counter()
                    run(args.per_block)
                    t1, c1 = time.perf_counter(), _cpu_s()
                    rates[kind].append(args.per_block / (t1 - t0))
                    cpu[kind].append((c1 - c0) / args.per_block * 1e6)
        finally:
            close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    width = 24
    for kind, values in rates.items():
        print(
            f"{kind:>{width}}: median {statistics.median(values):8.0f} calls/s, "
            f"CPU {statistics.median(cpu[kind]):7.1f} µs a call  ({' '.join(f'{v:.0f}' for v in values)})"
        )
    for label, a, b, what in (
        (f"{NEW} / {OLD} rate", NEW, OLD, rates),
        (f"{NEW} / {OLD} CPU", NEW, OLD, cpu),
        (f"{NEW} / {peer} rate", NEW, peer, rates),
        (f"{OLD} / {peer} rate", OLD, peer, rates),
    ):
        pairs = [x / y for x, y in zip(what[a], what[b], strict=True)]
        each = " ".join(f"{p:.2f}" for p in pairs)
        print(f"{label:>{width}}: median {statistics.median(pairs):.2f}  ({each})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
