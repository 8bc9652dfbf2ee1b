"""Writes: the fsync floor, learn (1 writer; N threads; N processes; file and PostgreSQL journals), and
the peers, every contender in its own worker process(es), rounds interleaved so drift hits all alike.

Round k runs every contender once, for a fixed count, in an order rotated by k (and reversed on odd
rounds); a contender's figure is the median of its per-round rates. An N-writer rate is all the
operations of the round over the wall time from the first writer's start to the last one's end.
"""

from __future__ import annotations

import contextlib
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from benchmarks._common import (
    PEERS_HINT,
    VENV_PYTHON,
    Sheet,
    Sizes,
    Worker,
    WorkerError,
    peer_worker,
    project_worker,
    say,
)

WRITE_NAMES = {
    "floor_append_1w": "append one line + fsync (under an exclusive lock)",
    "floor_newfile_1w": "new file + fsync + rename + directory fsync",
    "floor_journal_first_1w": "raw journal-first sequence (3 fsyncs), 1 writer",
    "floor_journal_first_8p": "raw journal-first sequence, 8 processes",
    "floor_one_flush_1w": "raw one-flush sequence (unsynced file, line + fsync, rename), 1 writer",
    "floor_one_flush_update_1w": "raw one-flush sequence of an update (that one, then a retired file "
    "written and renamed, the old file renamed aside, unlinked 128 at a time), 1 writer",
    "learn_file_1w": "MemoryStore.learn, file journal, 1 writer",
    "learn_file_8t": "learn, file journal, 8 threads on one root",
    "learn_flow_8t": "learn in one flow (8 executor threads), file journal",
    "learn_file_8p": "learn, file journal, 8 processes on one root",
    "update_file_1w": "MemoryStore.update (a new version of a memory), file journal, 1 writer (each round "
    "waits for the background unlinks of the old versions' files it set aside)",
    "learn_pg_1w": "learn, PostgreSQL journal, 1 writer",
    "learn_pg_8p": "learn, PostgreSQL journal, 8 processes on one root",
    "sqlite3_full_1w": "sqlite3, 1 insert/txn, WAL, synchronous=FULL, 1 writer",
    "sqlite3_full_8p": "sqlite3 FULL, 8 processes",
    "eventsourcing_1w": "eventsourcing SQLite recorder, 1 writer",
    "eventsourcing_8p": "eventsourcing SQLite recorder, 8 processes",
    "langgraph_put_1w": "LangGraph SqliteStore.put, its default rollback journal, FULL, 1 writer",
    "langgraph_put_wal_1w": "LangGraph SqliteStore.put, connection switched to WAL, FULL, 1 writer",
    "dbos_step_1w": "DBOS workflow + 1 step on SQLite, 1 writer",
}
"""Stable contender names; each figure is ``write.<name>_per_s``."""


Starter = Callable[[], list[Worker]]


@dataclass
class Contender:
    name: str
    n: int  # operations per writer per round
    start: Starter
    workers: list[Worker] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    cpu_user_us: list[float] = field(default_factory=list)  # per operation, each round
    cpu_sys_us: list[float] = field(default_factory=list)


def _pg_location(base: Path) -> tuple[str | None, str]:
    """A DSN with a private schema on ``$FLOWS_TEST_PG``, or None and why not."""
    try:
        import psycopg

        import journal.postgres  # noqa: F401
    except ImportError as exc:
        return None, f"PostgreSQL backend unavailable here ({exc})"
    from tests.pg_fixtures import server_dsn, with_schema

    dsn = server_dsn()
    schema = f"flows_bench_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'create schema "{schema}"')
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return None, f"PostgreSQL at {dsn} unreachable ({first})"
    return with_schema(dsn, schema), schema


def _drop_pg(schema: str) -> None:
    import psycopg

    from tests.pg_fixtures import server_dsn

    with contextlib.suppress(psycopg.Error), psycopg.connect(server_dsn(), autocommit=True) as conn:
        conn.execute(f'drop schema if exists "{schema}" cascade')


@contextlib.contextmanager
def _root(db: Path, journal_location: str) -> Iterator[dict[str, Any]]:
    """Begin a root run and hold its lease while the workers learn into it with its token."""
    import memory

    store = memory.MemoryStore(db, journal=journal_location)
    jr = store.open_journal()
    _, lease = jr.begin("bench", "bench", {})
    try:
        yield {"db": str(db), "journal": journal_location, "run_id": lease.run_id, "epoch": lease.epoch}
    finally:
        store.close()


def _group(kind: str, procs: int, params: Callable[[int], dict[str, Any]], peer: bool = False) -> Starter:
    make = peer_worker if peer else project_worker
    return lambda: [make(kind, params(i)) for i in range(procs)]


def _floor(base: Path, sizes: Sizes) -> list[Contender]:
    out = []
    for name, kind, procs in (
        ("floor_append_1w", "append", 1),
        ("floor_newfile_1w", "file", 1),
        ("floor_journal_first_1w", "floor", 1),
        ("floor_journal_first_8p", "floor", sizes.writers),
        ("floor_one_flush_1w", "oneflush", 1),
        ("floor_one_flush_update_1w", "oneflush_update", 1),
    ):
        d = base / "raw" / name

        def params(i: int, d: Path = d) -> dict[str, Any]:
            return {"dir": str(d / "compacted"), "journal": str(d / "journal.jsonl"), "who": f"w{i}"}

        n = sizes.per_round if procs == 1 else sizes.per_writer
        out.append(Contender(name, n, _group(kind, procs, params)))
    return out


def _learn(base: Path, sizes: Sizes, sheet: Sheet, stack: contextlib.ExitStack) -> list[Contender]:
    w, nw = sizes.writers, sizes.per_writer
    out = []
    journals = {"file": lambda name: str(base / name / "flows-journal")}
    dsn, schema = _pg_location(base)
    if dsn is None:
        for name in ("learn_pg_1w", "learn_pg_8p"):
            sheet.skip(f"write.{name}_per_s", schema)
    else:
        stack.callback(_drop_pg, schema)
        journals["pg"] = lambda name: dsn
    for name, procs, threads in (
        ("learn_file_1w", 1, 1),
        ("learn_file_8t", 1, w),
        ("learn_file_8p", w, 1),
        ("learn_pg_1w", 1, 1),
        ("learn_pg_8p", w, 1),
    ):
        where = journals.get(name.split("_")[1])
        if where is None:
            continue
        root = stack.enter_context(_root(base / name / "history.db", where(name)))

        def params(i: int, root: dict[str, Any] = root, threads: int = threads) -> dict[str, Any]:
            return {**root, "scope": "bench", "who": f"w{i}", "threads": threads}

        n = sizes.per_round if procs == threads == 1 else nw * threads
        out.append(Contender(name, n, _group("learn", procs, params)))
    root = stack.enter_context(_root(base / "update" / "history.db", journals["file"]("update")))
    update = {**root, "scope": "bench", "who": "w0", "memories": max(10, sizes.per_round // 4)}

    def updater(i: int, update: dict[str, Any] = update) -> dict[str, Any]:
        return update

    out.append(Contender("update_file_1w", sizes.per_round, _group("update", 1, updater)))
    flow = {"db": str(base / "flow" / "history.db"), "journal": journals["file"]("flow"), "scope": "bench"}
    out.append(Contender("learn_flow_8t", nw * w, _group("flow", 1, lambda i: flow)))
    return out


def _peers(base: Path, sizes: Sizes, sheet: Sheet, peers: bool) -> list[Contender]:
    w, n1, nw = sizes.writers, sizes.per_round, sizes.per_writer
    out = []
    for name, procs in (("sqlite3_full_1w", 1), ("sqlite3_full_8p", w)):  # stdlib: the project's interpreter
        path = base / name / "f.db"
        path.parent.mkdir(parents=True)
        params = lambda i, p=path: {"path": str(p), "who": f"w{i}"}  # noqa: E731
        out.append(Contender(name, n1 if procs == 1 else nw, _group("sqlite", procs, params)))
    venv_peers = (
        ("eventsourcing_1w", "eventsourcing", 1, n1),
        ("eventsourcing_8p", "eventsourcing", w, nw),
        ("langgraph_put_1w", "langgraph", 1, n1),
        ("langgraph_put_wal_1w", "langgraph", 1, n1),
        ("dbos_step_1w", "dbos", 1, max(3, n1 // 5)),  # ~130/s: a fifth of the count keeps rounds short
    )
    reason = None if peers else "peers not asked for (--no-peers)"
    reason = reason or (None if VENV_PYTHON.exists() else PEERS_HINT)
    for name, kind, procs, n in venv_peers:
        if reason:
            sheet.skip(f"write.{name}_per_s", reason)
            continue
        path = base / name / "peer.db"
        path.parent.mkdir(parents=True)
        params = lambda i, p=path, wal="_wal_" in name: {"path": str(p), "who": f"w{i}", "wal": wal}  # noqa: E731
        out.append(Contender(name, n, _group(kind, procs, params, peer=True)))
    return out


def bench_writes(base: Path, sizes: Sizes, sheet: Sheet, out: TextIO | None, peers: bool = True) -> None:
    """Measure every write contender side by side and put ``write.*`` figures on ``sheet``."""
    w = sizes.writers
    stack = contextlib.ExitStack()
    contenders = [
        *_floor(base, sizes),
        *_learn(base, sizes, sheet, stack),
        *_peers(base, sizes, sheet, peers),
    ]
    try:
        t0 = time.perf_counter()
        _start_all(contenders, sheet, out)
        live = [c for c in contenders if c.workers]
        took = time.perf_counter() - t0
        say(out, f"writes: {sum(len(c.workers) for c in live)} workers started and warmed in {took:.1f} s")
        say(out, f"write rounds: {sizes.rounds} x {len(live)} contenders ({w} writers where concurrent)")
        for r in range(sizes.rounds):
            order = live[r % len(live) :] + live[: r % len(live)] if live else []
            if r % 2:
                order.reverse()
            for c in order:
                if c.workers:
                    _round(c, r, sheet)
            say(out, f"  round {r + 1}/{sizes.rounds} done")
    finally:
        for c in contenders:
            for worker in c.workers:
                worker.close()
        stack.close()

    for c in contenders:
        if c.rates and f"write.{c.name}_per_s" not in sheet.skipped:
            sheet.put(f"write.{c.name}_per_s", statistics.median(c.rates), WRITE_NAMES[c.name])
            sheet.rounds[f"write.{c.name}_per_s"] = [round(x, 1) for x in c.rates]
        if c.cpu_user_us and f"write.{c.name}_per_s" not in sheet.skipped:
            what, user, system = WRITE_NAMES[c.name], c.cpu_user_us, c.cpu_sys_us
            sheet.put(f"write.{c.name}_cpu_user_us", statistics.median(user), f"{what}: user CPU µs/op")
            sheet.put(f"write.{c.name}_cpu_sys_us", statistics.median(system), f"{what}: system CPU µs/op")
    sheet.meta["writers"] = w
    sheet.meta["write_rounds"] = sizes.rounds


def _start_all(contenders: list[Contender], sheet: Sheet, out: TextIO | None) -> None:
    """Start every worker at once (imports overlap), then wait for each to be ready."""
    for c in contenders:
        try:
            c.workers = c.start()
        except OSError as exc:
            sheet.skip(f"write.{c.name}_per_s", f"could not start: {exc}")
    for c in contenders:
        try:
            for worker in c.workers:
                info = worker.wait_ready()
                if "version" in info:
                    sheet.meta.setdefault("versions", {})[c.name.rsplit("_", 1)[0]] = info["version"]
            for worker in c.workers:  # warm-up, untimed: files and folders made, caches filled
                worker.send({"op": "run", "n": min(c.n, 3), "start": 0})
            for worker in c.workers:
                worker.receive()
        except WorkerError as exc:
            sheet.skip(f"write.{c.name}_per_s", str(exc))
            say(out, f"  {c.name}: skipped: {exc}")
            for worker in c.workers:
                worker.close()
            c.workers = []


def _round(c: Contender, r: int, sheet: Sheet) -> None:
    start = (r + 1) * 10_000_000  # distinct findings every round (the warm-up used 0..2)
    try:
        for worker in c.workers:
            worker.send({"op": "run", "n": c.n, "start": start})
        replies = [worker.receive() for worker in c.workers]
    except WorkerError as exc:
        sheet.skip(f"write.{c.name}_per_s", f"failed in round {r + 1}: {exc}")
        for worker in c.workers:
            worker.close()
        c.workers = []
        return
    span = max(x["end"] for x in replies) - min(x["start"] for x in replies)
    c.rates.append(c.n * len(c.workers) / (span / 1e9))
    if all("cpuUserUs" in x for x in replies):
        ops = c.n * len(c.workers)
        c.cpu_user_us.append(sum(x["cpuUserUs"] for x in replies) / ops)
        c.cpu_sys_us.append(sum(x["cpuSysUs"] for x in replies) / ops)
