"""The runs pages' data: root runs newest first (filtered, paged) and one run's timeline.

``flows runs`` asks the journal for every run, which on the file journal reads every ``run.json``
(about a second for 10,000 runs here). A page cannot pay that per request, so ``RunIndex`` keeps what
it read and re-reads only what can have changed:

* the list of run folders is taken afresh on every request (one ``listdir``);
* a ``done`` run never changes again (a done run cannot be resumed): it is read once;
* a ``failed`` run changes only when a resume replaces its ``run.json``: it is re-read when that
  file's identity (inode, mtime, size) changed;
* a ``running`` or ``interrupted`` run is asked again each time (whether its holder lives is a
  lease probe, not a file change).

Every row shown is what the journal itself says (``JournalBackend.run``). Other backends answer
``runs()`` with one query, which is used as is.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

import journal
from flows._bounded import LIST_MAX_BYTES, fitting
from flows._runtime import RUN_STREAM
from flows._timeline import run_json, timeline
from flows.web._errors import ServeBadRequest
from journal import JournalBackend, RunInfo, RunState

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
TIMELINE_PAGE = 200
#: the most bytes of a run's input, of its output (as JSON) and of its traceback its page shows; the
#: whole is a link away (``/runs/RUN/input``, ``/output``, ``/traceback``, plain text)
PART_SHOWN = 64 * 1024
#: the parts of a run served whole at ``/runs/RUN/<part>``
RUN_PARTS = ("input", "output", "traceback")

_Stamp = tuple[int, int, int]


@dataclass
class _Known:
    info: RunInfo
    stamp: _Stamp | None


class RunIndex:
    """Root runs of ``backend``, newest first, kept current at the cost of what changed.

    Not thread-safe: the caller serialises access (the app holds one lock around its reads).
    """

    def __init__(self, backend: JournalBackend) -> None:
        self._backend = backend
        self._file = backend if isinstance(backend, journal.FileJournal) else None
        self._root = backend.root / "runs" if isinstance(backend, journal.FileJournal) else None
        self._known: dict[str, _Known] = {}
        self._done: set[str] = set()  # runs read as done: never read again
        self._members: frozenset[str] = frozenset()  # the ids ``_order`` was sorted from
        self._order: list[str] = []  # run ids, newest first
        self._listing: list[RunInfo] = []
        self._names: frozenset[str] = frozenset()
        self._names_stamp: tuple[int, int] | None = None

    def runs(self) -> list[RunInfo]:
        """Every root run, newest first, as the journal says now.

        Raises:
            journal.JournalError: a run's record is damaged or cannot be read (unchanged).
        """
        if self._root is None:
            return self._backend.runs()
        names = self._folder_names()
        changed = False
        for gone in self._members - names:
            self._known.pop(gone, None)
            self._done.discard(gone)
        for name in names - self._done:  # the new ones, and those that can still change
            before = self._known.get(name)
            self._refresh(name)
            after = self._known.get(name)
            changed = changed or before is None or after is None or before.info != after.info
        members = frozenset(self._known)
        if members != self._members:  # a run came or went: a run's start time never changes
            self._members = members
            self._order = sorted(members, key=lambda n: (self._known[n].info.created_ms, n), reverse=True)
            changed = True
        if changed:
            self._listing = [self._known[n].info for n in self._order]
        return self._listing

    def _folder_names(self) -> frozenset[str]:
        """The run folders' names, listed again only when the ``runs`` folder changed (a run folder
        is made or removed there; a listing within 50 ms of a change is not kept: mtimes are coarse)."""
        assert self._root is not None and self._file is not None
        try:
            st = os.stat(self._root)
            stamp = (st.st_mtime_ns, st.st_ino)
            if stamp == self._names_stamp:
                return self._names
            # the journal's own listing first, for its verdicts on what the folder holds (a name
            # that is no run id, records without a run record): this index answers as it does
            self._file.run_ids()
            names = frozenset(n for n in os.listdir(self._root) if not n.startswith("."))
        except FileNotFoundError:
            return frozenset()
        except OSError as exc:
            raise journal.JournalReadInterrupted(
                f"cannot list {self._root}: {exc.strerror or exc}", path=self._root
            ) from exc
        self._names = names
        self._names_stamp = stamp if time.time_ns() - st.st_mtime_ns > 50_000_000 else None
        return names

    def _refresh(self, name: str) -> None:
        known = self._known.get(name)
        stamp = self._stamp(name)
        if stamp is None:  # no run.json: a begin that never finished is not a run
            self._known.pop(name, None)
            return
        if known is not None and known.info.state is RunState.FAILED and known.stamp == stamp:
            return
        try:
            info = self._backend.run(name)
        except journal.JournalRunNotFound:  # removed between the listing and the read
            self._known.pop(name, None)
            return
        self._known[name] = _Known(info, stamp)
        if info.state is RunState.DONE:
            self._done.add(name)

    def _stamp(self, name: str) -> _Stamp | None:
        assert self._root is not None
        try:
            st = os.stat(f"{self._root}{os.sep}{name}{os.sep}run.json")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise journal.JournalReadInterrupted(
                f"cannot read run {name} in {self._root}: {exc.strerror or exc}", run_id=name
            ) from exc
        return (st.st_ino, st.st_mtime_ns, st.st_size)


@dataclass(frozen=True)
class RunsPage:
    """One page of the runs listing: rows in the CLI's ``--json`` shape and how to go on;
    ``truncated`` when it stopped at its bytes (``LIST_MAX_BYTES`` as JSON) before its ``limit``."""

    rows: list[dict[str, Any]]
    next_cursor: str | None
    counts: dict[str, int]
    total: int
    truncated: bool = False


def runs_page(
    index: RunIndex,
    backend: JournalBackend,
    *,
    state: str | None,
    flow: str | None,
    cursor: str | None,
    limit: int,
    max_bytes: int = LIST_MAX_BYTES,
) -> RunsPage:
    """The runs after ``cursor`` (a run id already shown) that match ``state`` and ``flow``: at most
    ``limit``, and fewer when their rows would pass ``max_bytes`` as JSON (a run's input and output
    are as large as its flow made them; the first row is always given).

    Raises:
        ServeBadRequest: an unknown state, or a cursor that names no run.
        journal.JournalError: reading the journal failed (unchanged).
    """
    if state is not None and state not in {s.value for s in RunState}:
        states = ", ".join(s.value for s in RunState)
        raise ServeBadRequest(f"unknown state {state!r:.80}: use one of {states}")
    every = index.runs()
    counts = {s.value: 0 for s in RunState}
    for r in every:
        counts[r.state.value] += 1
    chosen = [
        r for r in every if (state is None or r.state.value == state) and (flow is None or r.flow == flow)
    ]
    start = 0
    if cursor is not None:
        ids = [r.run_id for r in chosen]
        if cursor not in ids:
            raise ServeBadRequest(
                f"cursor {cursor!r:.80} names no run in this listing; start from the first page"
            )
        start = ids.index(cursor) + 1
    page = chosen[start : start + limit]
    rows: list[dict[str, Any]] = []

    def sizes() -> Iterator[int]:  # each row built only when the page still has room for it
        for r in page:
            rows.append(run_json(r, backend.read(r.run_id, RUN_STREAM) if r.state is RunState.DONE else ()))
            yield len(orjson.dumps(rows[-1]))

    cut = fitting(sizes(), max_bytes)
    if cut is not None:
        return RunsPage(rows[:cut], page[cut - 1].run_id, counts, len(chosen), truncated=True)
    more = start + limit < len(chosen)
    return RunsPage(rows, page[-1].run_id if more and page else None, counts, len(chosen))


def run_timeline(backend: JournalBackend, run_id: str) -> dict[str, Any]:
    """The run and everything it recorded, exactly as ``flows show --json`` prints it.

    Raises:
        journal.JournalNameInvalid: ``run_id`` is not a run id.
        journal.JournalRunNotFound: no such run.
        journal.JournalError: its records are damaged or cannot be read (unchanged).
    """
    return timeline(backend, run_id)


def run_summary(backend: JournalBackend, run_id: str) -> dict[str, Any]:
    """The run as ``flows runs --json`` gives it (its input, output and error), reading only its
    own record and its run stream, not the timeline.

    Raises:
        journal.JournalNameInvalid: ``run_id`` is not a run id.
        journal.JournalRunNotFound: no such run.
        journal.JournalError: its records are damaged or cannot be read (unchanged).
    """
    return run_json(backend.run(run_id), backend.read(run_id, RUN_STREAM))


def timeline_window(entries: Sequence[dict[str, Any]], *, page: int, record: str | None) -> tuple[int, int]:
    """Which page of a run's timeline to show (``record``, a record id, picks the page holding it),
    and how many pages there are."""
    pages = max(1, -(-len(entries) // TIMELINE_PAGE))
    if record is not None:
        for i, e in enumerate(entries):
            if e["citation"]["id"] == record:
                return i // TIMELINE_PAGE, pages
    return min(max(page, 0), pages - 1), pages


def _cut(data: bytes, whole_url: str, limit: int) -> tuple[str, dict[str, Any]] | None:
    """``data`` (UTF-8) cut at ``limit`` bytes, on a character, and its marker; None when it fits."""
    if len(data) <= limit:
        return None
    head = data[:limit].decode("utf-8", errors="ignore")  # no half of a character at the cut
    return head, {"shownBytes": len(head.encode()), "bytes": len(data), "url": whole_url}


def cut_value(value: object, whole_url: str, limit: int = PART_SHOWN) -> tuple[object, dict[str, Any] | None]:
    """A run's input or output as ``/api/runs/RUN`` gives it: the value itself when its JSON (compact,
    as ``whole_url`` serves it) is at most ``limit`` bytes; else the first ``limit`` bytes of that
    JSON, as a string, and the marker of the cut (``shownBytes``, the whole's ``bytes``, ``url``)."""
    try:
        data = orjson.dumps(value)
    except orjson.JSONEncodeError:  # nothing the journal gives; the answer's encoding says what it is
        return value, None
    cut = _cut(data, whole_url, limit)
    return (value, None) if cut is None else cut


def cut_parts(
    run: dict[str, Any], entries: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``run`` (``run_timeline``'s) and ``entries`` (a page of its timeline) with the run's input,
    output and error's traceback, and the output event's output, each cut at ``PART_SHOWN`` bytes
    (``cut_value``): a run's output is as large as its flow made it (8 MiB), and the answer held it
    twice. Each cut is named in a ``cut`` object beside it (on the run: ``input``, ``output``,
    ``error.traceback``; on the output event: ``output``), which is there only when something was cut.
    """
    base = f"/runs/{run['runId']}"
    cuts: dict[str, dict[str, Any]] = {}
    shown = dict(run)
    for part in ("input", "output"):
        shown[part], marker = cut_value(run[part], f"{base}/{part}")
        if marker is not None:
            cuts[part] = marker
    error = run.get("error")
    traceback = error.get("traceback") if isinstance(error, dict) else None
    if isinstance(error, dict) and isinstance(traceback, str):
        cut = _cut(traceback.encode("utf-8", errors="replace"), f"{base}/traceback", PART_SHOWN)
        if cut is not None:
            shown["error"] = {**error, "traceback": cut[0]}
            cuts["error.traceback"] = cut[1]
    if cuts:
        shown["cut"] = cuts
    return shown, [_cut_entry(e, run["output"], f"{base}/output") for e in entries]


def _cut_entry(entry: dict[str, Any], output: object, whole_url: str) -> dict[str, Any]:
    """A timeline entry, its output cut when it is the run's output event (``cut_parts``): an event
    of that kind holding another value (a journal written otherwise) is left whole, since
    ``whole_url`` serves the run's output."""
    if entry.get("kind") != "output" or "output" not in entry or entry["output"] != output:
        return entry
    value, marker = cut_value(entry["output"], whole_url)
    return entry if marker is None else {**entry, "output": value, "cut": {"output": marker}}
