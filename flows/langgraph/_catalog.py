"""The catalog: which root run holds each LangGraph thread, recorded in the journal itself.

A journal that LangGraph uses holds one *catalog* root run (flow ``langgraph-catalog``) whose
``threads`` stream registers every thread generation: ``{"thread", "gen", "run", "reason"}`` under
the key ``<digest of the thread id>.<gen>``. A keyed append is the journal's consensus: two
processes registering the same generation of one thread at once leave one record, and both get
it back, so they agree on the run. ``run`` is null for a generation that holds nothing (the thread
was deleted).

Every process appends to the catalog with the run's public fencing token ``Lease(run, epoch)``,
never holding its lease: the catalog is shared, the thread runs are not (see ``_leases``).

Finding the catalog: the oldest usable (running or interrupted) catalog run in ``runs()``, ordered
by ``(created_ms, run_id)``. When none exists a process begins one, lists again, and retires
(finishes as failed, "superseded") every usable catalog but the oldest, its own included if it lost.
Two processes racing to create the first catalog can each see only their own for a moment; the one
that sees both retires the younger, whose next append then fails (``journal_lease_lost``) and sends
its writer to the survivor. Registrations made in a retired catalog before it was retired stay
valid: every lookup reads every catalog, retired ones too, and merges them.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flows.langgraph._errors import RecordInvalid
from journal import (
    JournalBackend,
    JournalLeaseLost,
    JournalNameInvalid,
    JournalRunNotFound,
    Lease,
    Record,
    RunInfo,
    RunState,
    check_name,
)

CATALOG_FLOW = "langgraph-catalog"
THREAD_FLOW = "langgraph-thread"
SCOPE = "langgraph"
THREADS_STREAM = "threads"
_RETRIES = 8  # catalog appends retried after a fence (a resume of the catalog, or its retirement)


_DIGESTS: dict[str, str] = {}  # thread id -> its digest, for the threads this process asks about
_MAX_DIGESTS = 4096


def thread_digest(thread_id: str) -> str:
    """32 hex characters naming ``thread_id`` in keys (thread ids may hold any character)."""
    found = _DIGESTS.get(thread_id)
    if found is None:
        found = hashlib.blake2b(thread_id.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        if len(_DIGESTS) >= _MAX_DIGESTS:
            _DIGESTS.clear()
        _DIGESTS[thread_id] = found
    return found


def registration_key(thread_id: str, gen: int) -> str:
    """The catalog key of ``thread_id``'s generation ``gen``."""
    return f"{thread_digest(thread_id)}.{gen}"


@dataclass(frozen=True)
class Registration:
    """One thread generation as a catalog records it; ``run_id`` None means the thread was deleted."""

    thread_id: str
    gen: int
    run_id: str | None
    catalog: str
    record: Record


@dataclass(frozen=True)
class Generation:
    """A thread's current generation: its number and the runs registered for it, oldest catalog
    first (more than one only after a race between two new catalogs). ``runs`` is empty when the
    generation holds nothing (the thread was deleted)."""

    thread_id: str
    gen: int
    runs: tuple[str, ...]


def _usable(info: RunInfo) -> bool:
    return info.state in (RunState.RUNNING, RunState.INTERRUPTED)


def _age(info: RunInfo) -> tuple[int, str]:
    return (info.created_ms, info.run_id)


def _run_id(value: object) -> bool:
    """Whether ``value`` is a name the journal takes for a run id (what a registration holds)."""
    if not isinstance(value, str):
        return False
    try:
        check_name("run id", value)
    except JournalNameInvalid:
        return False
    return True


def _invalid(rec: Record, what: str) -> RecordInvalid:
    return RecordInvalid(
        f"record {rec.seq} of stream {rec.stream} in catalog run {rec.run_id} {what}; inspect it with "
        f"`flows journal {rec.run_id} --stream {rec.stream}`",
        run_id=rec.run_id,
        stream=rec.stream,
        seq=rec.seq,
    )


def parse_registration(rec: Record) -> Registration:
    """The registration a ``threads`` record holds; RecordInvalid for any other shape."""
    p = rec.payload
    thread, gen, run = p.get("thread"), p.get("gen"), p.get("run")
    if (
        not isinstance(thread, str)
        or isinstance(gen, bool)
        or not isinstance(gen, int)
        or gen < 1
        or not (run is None or _run_id(run))
        or (rec.key is not None and rec.key != registration_key(thread, gen))
    ):
        raise _invalid(rec, "is not a thread registration")
    return Registration(thread, gen, run, rec.run_id, rec)


class Catalog:
    """Thread generations, looked up and registered in the journal's catalog run(s).

    Thread-safe. Nothing is trusted from memory that the journal could have changed: a lookup
    probes for newer generations each time (one keyed ``find`` per catalog), and a miss checks that
    the catalog it used is still the one in use.
    """

    def __init__(self, backend: JournalBackend) -> None:
        self._backend = backend
        self._mutex = threading.RLock()
        self._catalogs: list[RunInfo] | None = None  # every catalog run seen, oldest first
        self._known: dict[str, dict[int, list[Registration]]] = {}
        self._owners: dict[str, str] = {}  # thread run -> the thread its own metadata names (checked)

    # -- finding the catalog -------------------------------------------------------------------

    def _list(self) -> list[RunInfo]:
        found = sorted((r for r in self._backend.runs() if r.flow == CATALOG_FLOW), key=_age)
        self._catalogs = found
        return found

    def _canonical(self, *, create: bool) -> RunInfo | None:
        """The catalog new registrations go to: the oldest usable one (made if ``create``)."""
        catalogs = self._catalogs if self._catalogs is not None else self._list()
        usable = [c for c in catalogs if _usable(c)]
        if len(usable) > 1:
            self._retire_all_but(usable[0], usable[1:])
            return usable[0]
        if usable or not create:
            return usable[0] if usable else None
        for _ in range(_RETRIES):
            _, lease = self._backend.begin(CATALOG_FLOW, SCOPE, {"langgraph": "catalog"})
            self._backend.release(lease)  # shared by token: no process holds it
            usable = [c for c in self._list() if _usable(c)]
            if usable:  # ours, or an older one that retires ours (never none, unless all were retired)
                self._retire_all_but(usable[0], usable[1:])
                return usable[0]
        raise JournalLeaseLost(
            "every LangGraph catalog this process created was retired at once; check what else "
            "writes to this journal",
            expected=0,
            got=0,
        )

    def _retire_all_but(self, keep: RunInfo, others: list[RunInfo]) -> None:
        for other in others:
            error = {
                "code": "langgraph_catalog_superseded",
                "message": f"two catalogs were created at once; {keep.run_id} is the one in use",
            }
            info = other
            for _ in range(_RETRIES):
                try:
                    self._backend.finish(Lease(info.run_id, info.epoch), RunState.FAILED, error)
                    break
                except JournalLeaseLost:
                    info = self._backend.run(info.run_id)
                    if not _usable(info):
                        break
        self._list()

    def _still_canonical(self, used: str | None) -> bool:
        """After a miss: is the catalog used for it still the one in use? (Re-lists if not.)"""
        if used is None:
            before = len(self._catalogs or [])
            return len(self._list()) == before
        try:
            if _usable(self._backend.run(used)):
                return True
        except JournalRunNotFound:
            pass
        self._list()
        return False

    # -- lookups -------------------------------------------------------------------------------

    def _probe(self, thread_id: str, gen: int) -> bool:
        """Look for generation ``gen`` of the thread in every catalog; True when one has it."""
        key = registration_key(thread_id, gen)
        found = [self._look(catalog.run_id, key) for catalog in self._catalogs or []]
        return any(reg is not None for reg in found)

    def _look(self, catalog: str, key: str) -> Registration | None:
        """The registration under ``key`` in ``catalog`` (kept in ``_known``), or None."""
        rec = self._backend.find(catalog, THREADS_STREAM, key)
        return None if rec is None else self._remember(parse_registration(rec))

    def _current(self, thread_id: str) -> Generation | None:
        if self._catalogs is None:
            self._list()
        known = self._known.get(thread_id, {})
        gen = max(known, default=0)
        while self._probe(thread_id, gen + 1):
            gen += 1
        if gen == 0:
            return None
        runs = tuple(r.run_id for r in self._known[thread_id][gen] if r.run_id is not None)
        return Generation(thread_id, gen, runs)

    def current(self, thread_id: str) -> Generation | None:
        """The thread's current generation, or None for a thread never registered.

        A generation without runs (a deleted thread), or no generation at all, is checked against
        the catalog in use once more, so a catalog retired by a racing process is never trusted.
        """
        with self._mutex:
            found = self._current(thread_id)
            if found is None or not found.runs:
                canonical = self._canonical(create=False)
                if not self._still_canonical(canonical.run_id if canonical else None):
                    found = self._current(thread_id)
            if found is not None:
                self._check_owners(found)
            return found

    def _check_owners(self, found: Generation) -> None:
        """Each run ``found`` names must be a thread run whose own metadata (written when it was
        begun) names this thread. The catalog is shared, and anyone who can append to it could
        register another thread's run: its reads would then show that thread's checkpoints, and its
        writes land among them. Checked once per run and process.

        Raises:
            RecordInvalid: a registered run is another thread's, no thread run at all, or missing
                (the journal never removes a run: it was never begun, so that registration is not
                one this adapter made); a missing one names the registration's record.
        """
        for run in found.runs:
            if self._owners.get(run) == found.thread_id:
                continue
            try:
                info = self._backend.run(run)
            except JournalRunNotFound:
                regs = self._known.get(found.thread_id, {}).get(found.gen, [])
                (rec, *_) = [r.record for r in regs if r.run_id == run]  # what ``runs`` was made of
                what = f"registers run {run} for thread {found.thread_id!r}, and the journal has no such run"
                raise _invalid(rec, what) from None
            meta = info.meta.get("langgraph")
            owner = meta.get("thread") if isinstance(meta, Mapping) else None
            if info.flow != THREAD_FLOW or owner != found.thread_id:
                what = (
                    f"belongs to thread {owner!r}"
                    if isinstance(owner, str) and info.flow == THREAD_FLOW
                    else f"is a run of flow {info.flow!r}, not a thread's"
                )
                raise RecordInvalid(
                    f"the catalog registers run {run} for thread {found.thread_id!r}, but that run "
                    f"{what}; its checkpoints are not served for this thread. Inspect the catalog with "
                    "`flows runs --flow langgraph-catalog` and its `threads` stream",
                    thread_id=found.thread_id,
                    run_id=run,
                )
            if len(self._owners) >= _MAX_DIGESTS:
                self._owners.clear()
            self._owners[run] = found.thread_id

    def stamp(self) -> tuple[object, ...] | None:
        """A token for the catalogs as this object last read them (``JournalBackend.stamp`` of
        each one's ``threads`` stream, with the list of catalogs): equal tokens mean ``current``
        would answer as it did after the first. None when the journal cannot tell cheaply."""
        catalogs = self._catalogs  # replaced whole, never changed in place: no lock to read it
        if not catalogs:
            return None
        if len(catalogs) == 1:  # the usual journal: one catalog
            token = self._backend.stamp(catalogs[0].run_id, THREADS_STREAM)
            return None if token is None else (catalogs[0].run_id, token)
        out: list[object] = []
        for catalog in catalogs:
            token = self._backend.stamp(catalog.run_id, THREADS_STREAM)
            if token is None:
                return None
            out += (catalog.run_id, token)
        return tuple(out)

    def relist(self) -> None:
        """Forget which catalogs exist and list them again (a registration was expected and missing)."""
        with self._mutex:
            self._list()

    def threads(self) -> list[str]:
        """Every thread id any catalog registers (deleted ones too), in first-registration order."""
        with self._mutex:
            self._list()
            seen: dict[str, None] = {}
            for catalog in self._catalogs or []:
                for rec in self._backend.read(catalog.run_id, THREADS_STREAM):
                    seen.setdefault(parse_registration(rec).thread_id, None)
            return list(seen)

    # -- registering ---------------------------------------------------------------------------

    def register(self, thread_id: str, gen: int, run_id: str | None, reason: str) -> Registration:
        """Record ``run_id`` (None: nothing) as generation ``gen`` of the thread; return the
        registration that won (another process's, when it registered this generation first).

        A registration that landed in a catalog retired by a creation race also wins: a process that
        listed the catalogs before an older one became visible registered in its own, and that
        catalog is retired (no later append lands there) before the others are looked in, so the
        first registration of a generation is found wherever it is and is never doubled.

        Raises the journal's errors; JournalLeaseLost only when the catalog kept being fenced.
        """
        payload: Mapping[str, Any] = {"thread": thread_id, "gen": gen, "run": run_id, "reason": reason}
        key = registration_key(thread_id, gen)
        with self._mutex:
            last: JournalLeaseLost | None = None
            for _ in range(_RETRIES):
                catalog = self._canonical(create=True)
                assert catalog is not None
                earlier = self._registered_elsewhere(catalog.run_id, key)
                if earlier is not None:
                    return earlier
                try:
                    rec = self._backend.append(
                        Lease(catalog.run_id, catalog.epoch),
                        THREADS_STREAM,
                        payload,
                        key=registration_key(thread_id, gen),
                    )
                except JournalLeaseLost as exc:  # resumed by someone (new epoch), or retired
                    last = exc
                    self._list()
                    continue
                return self._remember(parse_registration(rec))
            assert last is not None
            raise last

    def _registered_elsewhere(self, canonical: str, key: str) -> Registration | None:
        """The registration under ``key`` in a catalog other than ``canonical`` (one retired by a
        creation race), oldest catalog first; None when only ``canonical`` could hold it."""
        for other in self._catalogs or []:
            if other.run_id != canonical and (reg := self._look(other.run_id, key)) is not None:
                return reg
        return None

    def _remember(self, reg: Registration) -> Registration:
        """Keep ``reg`` among its generation's registrations, in catalog order (oldest first)."""
        regs = self._known.setdefault(reg.thread_id, {}).setdefault(reg.gen, [])
        if all(r.catalog != reg.catalog for r in regs):
            regs.append(reg)
            order = {c.run_id: i for i, c in enumerate(self._catalogs or [])}
            regs.sort(key=lambda r: order.get(r.catalog, len(order)))
        return reg
