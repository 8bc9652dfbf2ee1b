"""Memory identity and retirement under several processes and several hosts, some killed.

3-4 worker processes, on one host (a file journal, one store) or on two hosts (two store folders
sharing one PostgreSQL journal), each do a seeded random sequence of learn, update (by memory id),
forget, forget by filter, erase, erase by filter, sync, recall, why, current and history, each write
in a session of its own. Some are armed to SIGKILL themselves at a random pass of a random
failpoint (``staging/_failpoints.py``). Every process writes one JSON line per operation: what it
was about to do (``pre``), what was acknowledged (``ack``, with its start and end on the machine's
monotonic clock, comparable across processes), what it read, and what was refused.

Then each host is settled (a store opened, which recovers, ``sync``, ``check_store`` and
``repair_store``, ``sync`` again) and the oracle judges what was acknowledged against what the
stores and the journal hold:

- lost: an acknowledged version missing from its memory's history, or neither live nor retired;
- doubled: two live versions of one memory in one read (or at the end on a host, or the hosts
  disagreeing on the live version), a key answered twice;
- fabricated: a read answering a text no process wrote, or under another memory id than the one
  its writer gave it;
- resurrected: a read that began after an acknowledged forget, forget by filter, update or erase
  answering the version that retired (an older version of an updated memory, any of an erased one);
- erased bytes: a unique marker of an acknowledged erase's memory left in any file under the stores
  and the journal, or in any row of the PostgreSQL schema;
- history: not oldest first, a ``learned`` event without its content (or with another text) for a
  memory not erased, content left for an erased one, an event of another memory.

``python -m tests.reliability.identity --rounds 0-50 [--pg] [--ops 40] [--workers 4]`` runs it long by
hand (``--pg``: two hosts on the server at ``$FLOWS_TEST_PG``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCOPES = ("alpha", "beta")
TAGS = ("red", "green", "blue", "cyan", "pink", "gold")
USERS = ("ann", "bob", "cid", "dee", "eve")
WORDS = ("river", "stone", "cloud", "engine", "garden", "ticket", "harbor", "lamp", "orbit", "violin")
KILL_POINTS = (
    "memory.after_append",
    "memory.after_retire_replaced",
    "staging.after_stage",
    "staging.before_rename",
    "staging.after_rename",
    "staging.before_fsync",
    "memory.before_stage",
    "memory.after_set_aside",
    "memory.erase_after_record",
    "memory.erase_after_derived",
    "memory.erase_before_rewrite",
    "memory.sync_after_upsert",
)
FILE_KILL_POINTS = ("linelog.before_append", "linelog.after_append", "linelog.before_fsync")
OPS = (
    ("learn", 30),
    ("update", 22),
    ("forget", 6),
    ("forget_where", 2),
    ("erase", 5),
    ("erase_where", 1),
    ("sync", 5),
    ("recall", 12),
    ("why", 6),
    ("history", 8),
    ("current", 3),
)
# Refusals the contract names for a race: the write changed nothing the oracle relies on.
EXPECTED_CODES = {
    "memory_finding_unknown",
    "memory_finding_retired",
    "journal_lease_held",
}


# -- the worker ------------------------------------------------------------------------------------


def _items(rows: Iterable[Any]) -> list[list[Any]]:
    return [[r.key, r.memory_id, r.text] for r in rows]


def worker(db: str, journal: str, name: str, seed: int, ops: int) -> None:
    """Run ``ops`` random operations on the store at ``db``; one JSON line per event on stdout."""
    import memory

    rng = random.Random(seed)
    me = _Worker(memory.MemoryStore(db, journal=journal), name, rng)
    names, weights = zip(*OPS, strict=True)
    for i in range(ops):
        op = rng.choices(names, weights)[0]
        if op in ("update", "forget", "erase", "history", "current") and not me.known:
            op = "learn"
        me.t0, me.marker = time.monotonic_ns(), f"zq{name}x{i}q"
        try:
            getattr(me, op)()
        except memory.FlowsMemoryError as exc:
            me.log(err=op, code=exc.code, msg=str(exc)[:400], t0=me.t0, t1=time.monotonic_ns())
        except Exception as exc:  # every other error is reported, and judged by the oracle
            me.log(err=op, code="unexpected", msg=f"{type(exc).__name__}: {exc}"[:400], t0=me.t0)
    me.store.close()
    me.log(done=name)


class _Worker:
    """One worker's store, its random source and what it has seen (keys, memory ids, scopes)."""

    def __init__(self, store: Any, name: str, rng: random.Random) -> None:
        self.store, self.name, self.rng = store, name, rng
        self.known: list[tuple[str, str, str]] = []
        self.t0, self.marker = 0, ""

    def log(self, **fields: Any) -> None:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()

    def acked(self, what: str, **fields: Any) -> None:
        self.log(ack=what, t0=self.t0, t1=time.monotonic_ns(), **fields)

    def finding(self) -> dict[str, Any]:
        text = f"{self.marker} {' '.join(self.rng.sample(WORDS, 3))}"
        return {"text": text, "tags": [self.rng.choice(TAGS)], "metadata": {"user": self.rng.choice(USERS)}}

    def read(self, kind: str, rows: Any) -> None:
        items = _items(rows)
        self.known.extend((r.key, r.memory_id, r.scope) for r in rows)
        del self.known[:-200]
        self.log(read=kind, t0=self.t0, t1=time.monotonic_ns(), items=items)

    def learn(self) -> None:
        scope, finding = self.rng.choice(SCOPES), self.finding()
        self.log(pre="learn", text=finding["text"], scope=scope)
        with self.store.session(scope=scope, flow=self.name) as s:
            got = s.learn(finding)
        self.acked("learn", key=got.key, mid=got.memory_id, text=finding["text"])
        self.known.append((got.key, got.memory_id, scope))

    def update(self) -> None:
        _, mid, scope = self.rng.choice(self.known)
        finding = self.finding()
        self.log(pre="update", text=finding["text"], mid=mid)
        with self.store.session(scope=scope, flow=self.name) as s:
            got = s.update(mid, finding)
        self.acked("update", key=got.key, mid=got.memory_id, asked=mid, text=finding["text"])
        self.known.append((got.key, got.memory_id, scope))

    def forget(self) -> None:
        key, _, scope = self.rng.choice(self.known)
        with self.store.session(scope=scope, flow=self.name) as s:
            got = s.forget(key, reason=f"forget by {self.name}")
        self.acked("forget", key=key, by=got.by)

    def forget_where(self) -> None:
        rng = self.rng
        filt: dict[str, Any] = (
            {"tags": [rng.choice(TAGS)]} if rng.random() < 0.5 else {"meta": {"user": rng.choice(USERS)}}
        )
        scope = rng.choice(SCOPES)
        with self.store.session(scope=scope, flow=self.name) as s:
            many = s.forget_where(reason=f"filter by {self.name}", scope=scope, **filt)
        self.acked("forget_where", keys=list(many.keys))

    def erase(self) -> None:
        key, _, scope = self.rng.choice(self.known)
        with self.store.session(scope=scope, flow=self.name) as s:
            erased = s.erase(key, reason=f"erase by {self.name}")
        self.acked("erase", mid=erased.memory, keys=list(erased.keys))

    def erase_where(self) -> None:
        user = self.rng.choice(USERS)
        with self.store.session(scope=self.rng.choice(SCOPES), flow=self.name) as s:
            mids = s.erase_where(reason=f"erase {user} by {self.name}", meta={"user": user})
        self.acked("erase_where", mids=list(mids))

    def sync(self) -> None:
        how = self.rng.choice(("sync", "materialize", "catch_up", "sync_nomat"))
        if how == "sync":
            self.store.sync()
        elif how == "sync_nomat":
            self.store.sync(materialize=False)
        elif how == "materialize":
            self.store.materialize()
        else:
            self.store.catch_up()
        self.acked("sync", how=how)

    def recall(self) -> None:
        self.read("recall", self.store.recall(scope=self.rng.choice((None, *SCOPES)), limit=None))

    def why(self) -> None:
        self.read("why", self.store.why(self.rng.choice(WORDS), scope=None, limit=200))

    def current(self) -> None:
        now = self.store.current(self.rng.choice(self.known)[1])
        self.read("current", [] if now is None else [now])

    def history(self) -> None:
        mid = self.rng.choice(self.known)[1]
        events = [_event(e) for e in self.store.history(mid)]
        self.log(history=mid, t0=self.t0, t1=time.monotonic_ns(), events=events)


def _event(e: Any) -> list[Any]:
    text = None if e.content is None else e.content.get("text")
    return [e.kind, e.key, e.at_ms, e.memory, text, e.by]


# -- the driver ------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """What one seeded round found; ``clean`` when every count of damage is zero."""

    number: int
    acked: int = 0
    kills: int = 0
    lost: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    fabricated: list[str] = field(default_factory=list)
    resurrected: list[str] = field(default_factory=list)
    unerased: list[str] = field(default_factory=list)
    history: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    leftover: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (
            self.lost
            or self.doubled
            or self.fabricated
            or self.resurrected
            or self.unerased
            or self.history
            or self.unexpected
            or self.leftover
        )

    def summary(self) -> str:
        parts = [f"round {self.number}: acked {self.acked}, killed {self.kills}"]
        for name in (
            "lost",
            "doubled",
            "fabricated",
            "resurrected",
            "unerased",
            "history",
            "unexpected",
            "leftover",
        ):
            found = getattr(self, name)
            if found:
                parts.append(f"{name} {len(found)}: " + "; ".join(found[:4]))
        return "\n  ".join(parts)


def run_round(
    base: Path, seed: int, *, pg: str | None, workers: int = 4, ops: int = 25, kill_share: float = 0.5
) -> Verdict:
    """One seeded round in ``base`` (empty); on two hosts sharing ``pg`` when given, else one host
    with a file journal. The events are kept in ``base/events.jsonl``."""
    import memory

    hosts = ["a", "b"] if pg else ["a"]
    journal = pg or str(base / "journal")
    verdict = Verdict(seed)
    events = _run_workers(base, seed, pg, hosts=hosts, size=(workers, ops, kill_share), verdict=verdict)
    (base / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    live = {host: _settle(base / host / "history.db", journal, verdict) for host in hosts}
    readers = {host: memory.MemoryStore(base / host / "history.db", journal=journal) for host in hosts}
    try:
        _Oracle(events, live, readers, verdict).judge()
    finally:
        for store in readers.values():
            store.close()
    _grep(base, pg, events, verdict)
    return verdict


def _run_workers(
    base: Path, seed: int, pg: str | None, *, hosts: list[str], size: tuple[int, int, float], verdict: Verdict
) -> list[dict[str, Any]]:
    """Start the workers (some armed to kill themselves), wait for them; every event they wrote."""
    workers, ops, kill_share = size
    rng = random.Random(seed)
    journal = pg or str(base / "journal")
    procs = []
    for w in range(workers):
        host = hosts[w % len(hosts)]
        env = {k: v for k, v in os.environ.items() if k not in ("FLOWS_FAILPOINTS", "FLOWS_JOURNAL")}
        env["PYTHONPATH"] = str(ROOT)
        if rng.random() < kill_share:
            points = KILL_POINTS + (() if pg else FILE_KILL_POINTS)
            env["FLOWS_FAILPOINTS"] = f"{rng.choice(points)}=kill:nth{rng.randint(1, 12)}"
        db = base / host / "history.db"
        db.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "tests.reliability.identity", "--worker", str(db), journal]
        argv += [f"w{w}{host}", str(w + 100 * seed), str(ops)]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append((host, env.get("FLOWS_FAILPOINTS"), proc))
    events: list[dict[str, Any]] = []
    for host, armed, proc in procs:
        out, err = proc.communicate(timeout=600)
        events += [{**json.loads(line), "host": host} for line in out.splitlines()]
        if proc.returncode == -9:
            verdict.kills += 1
        elif proc.returncode != 0:
            verdict.unexpected.append(f"worker on {host} ({armed}) exited {proc.returncode}: {err[-1500:]}")
    return events


def _settle(db: Path, journal: str, verdict: Verdict) -> list[list[Any]]:
    """Open the host's store (which recovers), sync, check and repair, sync again; its live findings.
    An error in any of it, or a problem the repair left, is reported."""
    import memory

    with memory.MemoryStore(db, journal=journal) as store:
        try:
            store.sync()
        except memory.FlowsMemoryError as exc:
            verdict.unexpected.append(f"{db.parent.name}: settling sync: {exc.code} {str(exc)[:300]}")
        problems = memory.check_store(store)
        if problems:
            memory.repair_store(store, problems)
            store.sync()
        verdict.leftover += [f"{db.parent.name}: {p.kind} {p.path}" for p in memory.check_store(store)]
        return _items(store.recall(scope=None, limit=None))


class _Oracle:
    """Judges the events of a round against the settled hosts (``live``: each one's live findings,
    ``readers``: a store of each for the histories)."""

    def __init__(
        self,
        events: list[dict[str, Any]],
        live: dict[str, list[list[Any]]],
        readers: dict[str, Any],
        verdict: Verdict,
    ) -> None:
        self.events, self.live, self.verdict = events, live, verdict
        # every text a process meant to write, with the memory it was meant for (an update's)
        self.texts = {e["text"]: e for e in events if e.get("pre") in ("learn", "update")}
        self.histories = {host: self._histories(store) for host, store in readers.items()}
        self.first = next(iter(readers), "")
        first = self.histories.get(self.first, {})
        self.chains = {mid: [ev[1] for ev in evs if ev[0] == "learned"] for mid, evs in first.items()}
        self.erased = {mid for mid, evs in first.items() if any(ev[0] == "erased" for ev in evs)}
        self.retirements: list[tuple[int, str, str]] = []  # (acknowledged at, key or "", memory or "")
        for e in events:
            kind = e.get("ack")
            if kind == "forget":
                self.retirements.append((e["t1"], e["key"], ""))
            elif kind == "forget_where":
                self.retirements += [(e["t1"], k, "") for k in e["keys"]]
            elif kind == "erase":
                self.retirements.append((e["t1"], "", e["mid"]))
            elif kind == "erase_where":
                self.retirements += [(e["t1"], "", m) for m in e["mids"]]
        self.updates = [(e["t1"], e["mid"], e["key"]) for e in events if e.get("ack") == "update"]

    def _histories(self, store: Any) -> dict[str, list[list[Any]]]:
        import memory

        mids = {e["mid"] for e in self.events if e.get("ack") in ("learn", "update", "erase")}
        mids |= {e["mid"] for e in self.events if e.get("pre") == "update"}
        mids |= {m for e in self.events if e.get("ack") == "erase_where" for m in e["mids"]}
        mids |= {item[1] for e in self.events for item in e.get("items", ())}
        mids |= {item[1] for live in self.live.values() for item in live}
        out = {}
        for mid in sorted(mids):
            try:
                out[mid] = [_event(e) for e in store.history(mid)]
            except memory.FlowsMemoryError as exc:
                if exc.code != "memory_finding_unknown":
                    self.verdict.unexpected.append(f"history of {mid}: {exc.code} {str(exc)[:300]}")
        return out

    def judge(self) -> None:
        v = self.verdict
        v.acked = sum(1 for e in self.events if "ack" in e and e["ack"] != "sync")
        for mid, evs in self.histories[self.first].items():
            for host, hist in self.histories.items():
                if [ev[:4] for ev in hist.get(mid, [])] != [ev[:4] for ev in evs]:
                    v.history.append(f"{mid}: the history differs between hosts {self.first} and {host}")
            self.history(mid, evs, "final")
        self.acknowledged_versions()
        for e in self.events:
            if "read" in e:
                self.read(e)
            elif "history" in e:
                self.history(e["history"], e["events"], f"read on {e['host']}")
            elif e.get("err") and e["code"] not in EXPECTED_CODES:
                v.unexpected.append(f"{e['host']} {e['err']}: {e['code']} {e['msg'][:300]}")
        for host, live in self.live.items():
            self.read({"read": "settled", "host": host, "t0": time.monotonic_ns(), "items": live})
        lives = {host: sorted(item[0] for item in live) for host, live in self.live.items()}
        if len({tuple(keys) for keys in lives.values()}) > 1:
            v.doubled.append(f"the hosts disagree on the live findings: {lives}")

    def acknowledged_versions(self) -> None:
        """Lost: an acknowledged version missing from its memory's history, or neither live on
        every host nor retired there; an update answered under another memory."""
        v = self.verdict
        history = self.histories[self.first]
        retired = {ev[1] for evs in history.values() for ev in evs if ev[0] in ("superseded", "forgotten")}
        for e in self.events:
            if e.get("ack") not in ("learn", "update"):
                continue
            if e["ack"] == "update" and e["mid"] != e["asked"]:
                v.fabricated.append(f"the update of {e['asked']} answered as memory {e['mid']}")
            learned = {ev[1] for ev in history.get(e["mid"], []) if ev[0] == "learned"}
            if e["key"] not in learned:
                v.lost.append(f"{e['ack']} {e['key']} ({e['text'][:20]}) not in the history of {e['mid']}")
                continue
            if e["key"] in retired or e["mid"] in self.erased:
                continue
            for host, live in self.live.items():
                if e["key"] not in {item[0] for item in live}:
                    v.lost.append(f"{e['ack']} {e['key']} neither live on {host} nor retired")

    def history(self, mid: str, evs: list[list[Any]], where: str) -> None:
        """Oldest first (events of one instant in ``HISTORY_KINDS`` order), every event of the
        memory, each ``learned`` with the text written for it, none once the memory is erased."""
        import memory

        v = self.verdict
        order = {kind: i for i, kind in enumerate(memory.HISTORY_KINDS)}
        erased = any(ev[0] == "erased" for ev in evs)
        for prev, ev in itertools.pairwise(evs):
            if (prev[2], order[prev[0]]) > (ev[2], order[ev[0]]):
                v.history.append(f"{where}: the history of {mid} is not oldest first: {prev[:3]}, {ev[:3]}")
        for kind, key, _at, of, text, _by in evs:
            if of is not None and of != mid:
                v.history.append(f"{where}: the history of {mid} holds {kind} {key} of memory {of}")
            if kind not in ("learned", "lost"):
                continue
            if erased and text is not None and where == "final":
                v.history.append(f"{where}: erased memory {mid} still shows the content of {key}")
            if not erased and text is None:
                v.history.append(f"{where}: {kind} {key} of {mid} has no content and no erasure")
            meant = None if text is None else self.texts.get(text)
            if text is not None and meant is None:
                v.fabricated.append(f"{where}: the history of {mid} shows a text nobody wrote: {text!r}")
            elif meant is not None and meant["pre"] == "update" and meant["mid"] != mid:
                v.fabricated.append(f"{where}: {text!r} written for {meant['mid']}, in the history of {mid}")

    def read(self, e: dict[str, Any]) -> None:
        """One read: no key twice, no memory twice, no text nobody wrote (or under another memory),
        nothing an acknowledged retirement before the read began had retired."""
        v = self.verdict
        where = f"{e['read']} on {e['host']}"
        by_mid: dict[str, list[str]] = defaultdict(list)
        for key, mid, text in e["items"]:
            if key in by_mid[mid]:
                v.doubled.append(f"{where}: key {key} answered twice")
            by_mid[mid].append(key)
            meant = self.texts.get(text)
            if meant is None:
                v.fabricated.append(f"{where}: a text nobody wrote: {text!r}")
            elif meant["pre"] == "update" and meant["mid"] != mid:
                v.fabricated.append(f"{where}: {text!r} written for {meant['mid']} answered as {mid}")
            elif meant["pre"] == "learn" and mid != key:
                v.fabricated.append(f"{where}: a first learn {key} answered as memory {mid}")
            for at, rkey, rmid in self.retirements:
                if at < e["t0"] and (rkey == key or rmid == mid):
                    ago = (e["t0"] - at) / 1e6
                    v.resurrected.append(f"{where}: {key} of {mid}, {ago:.1f} ms after it was retired")
            chain = self.chains.get(mid, [])
            for at, umid, ukey in self.updates:
                older = key in chain and ukey in chain and chain.index(key) < chain.index(ukey)
                if umid == mid and at < e["t0"] and older:
                    ago = (e["t0"] - at) / 1e6
                    v.resurrected.append(f"{where}: {key} of {mid}, {ago:.1f} ms after its update to {ukey}")
        for mid, keys in by_mid.items():
            if len(keys) > 1:
                v.doubled.append(f"{where}: memory {mid} answered with {len(keys)} live versions {keys}")


def _grep(base: Path, pg: str | None, events: list[dict[str, Any]], verdict: Verdict) -> None:
    """Every marker of an acknowledged erase's memory, looked for in every byte the round left:
    every file under ``base`` (both hosts' stores, a file journal) and every row of the schema."""
    erased = {e["mid"] for e in events if e.get("ack") == "erase"}
    erased |= {m for e in events if e.get("ack") == "erase_where" for m in e["mids"]}
    markers: dict[str, str] = {}
    for e in events:
        if (e.get("pre") == "update" or e.get("ack") in ("learn", "update")) and e["mid"] in erased:
            markers[e["text"].split()[0]] = e["mid"]
        markers.update({text.split()[0]: mid for _, mid, text in e.get("items", ()) if mid in erased})
    if not markers:
        return
    for path in sorted(base.rglob("*")):
        if path.is_symlink() or not path.is_file() or path.name == "events.jsonl":
            continue
        data = path.read_bytes()
        verdict.unerased += [
            f"{m} (memory {mid}) in {path}" for m, mid in markers.items() if m.encode() in data
        ]
    if pg:
        import psycopg

        with psycopg.connect(pg, autocommit=True) as conn:
            tables = [
                r[0]
                for r in conn.execute(
                    "select table_name from information_schema.tables where table_schema = current_schema()"
                )
            ]
            for table in tables:
                for (row,) in conn.execute(f'select t::text from "{table}" t'):
                    verdict.unerased += [
                        f"{m} (memory {mid}) in table {table}" for m, mid in markers.items() if m in row
                    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.identity")
    parser.add_argument("--worker", nargs=5, metavar=("DB", "JOURNAL", "NAME", "SEED", "OPS"))
    parser.add_argument("--rounds", default="0-9", help="rounds to run, A-B")
    parser.add_argument(
        "--pg", action="store_true", help="two hosts on the PostgreSQL at $FLOWS_TEST_PG; else a file journal"
    )
    parser.add_argument("--ops", type=int, default=40)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    if args.worker:
        db, journal, name, seed, ops = args.worker
        worker(db, journal, name, int(seed), int(ops))
        return 0
    import shutil
    import tempfile

    lo, _, hi = args.rounds.partition("-")
    bad = 0
    for number in range(int(lo), int(hi or lo) + 1):
        base = Path(tempfile.mkdtemp(prefix=f"identity-{number}-"))
        dsn = schema = None
        if args.pg:
            from tests.pg_fixtures import _drop, admin_connection, server_dsn, with_schema

            schema = f"flows_identity_{number}_{os.getpid()}"
            with admin_connection() as conn:
                conn.execute(f'create schema "{schema}"')
            dsn = with_schema(server_dsn(), schema)
        try:
            verdict = run_round(base, number, pg=dsn, workers=args.workers, ops=args.ops)
        finally:
            if schema and not args.keep:
                _drop(schema)
        print(verdict.summary(), flush=True)
        if not verdict.clean:
            bad += 1
            print(f"  kept in {base}" + (f" (schema {schema})" if schema else ""), flush=True)
        elif not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
