"""``flows check``: verify a store end to end, and repair what can be repaired from the journal.

What is checked:

* every journal run and stream passes its line checks, and every ``memory-learn`` and
  ``memory-forget`` record is a finding's commit or retirement of the exact shape
  (``checked_commit``, ``checked_retirement``);
* the store's folders are folders, never links (``flows-memory``, each scope's, ``.trajectories``,
  ``compacted``, ``retired``);
* every learned file is a regular file (not a link, FIFO or folder), parses, cites a record that
  exists, and is exactly that record's rendering, and is not the file of a finding the journal says
  was forgotten or superseded;
* every retired file is a regular file, parses, cites a ``memory-forget`` record (or, for a version
  an update replaced, the update's ``memory-learn`` commit) that exists and retires it, and is
  exactly its rendering; every finding the journal retires has its retired file;
* every finding the journal records, and does not retire or erase, has its learned file or its
  history-DB row;
* every tombstone (an erased commit) is of a key an erase record names;
* every history-DB row cites a record that exists;
* the journal holds at least one of the root runs the store cites (else it is another store's);
* no stage file is older than the sweep age;
* each agent ledger and activity log given passes its line checks, and no cut of either kept
  bytes beside it (as a journal stream's kept cuts, ``stream_cut_kept``).

What ``repair`` does: republish missing or wrong learned and retired files from their journal
record; move a learned file that cites no record or belongs to a retired finding, and anything that
is not what the store expects at its place (a link, a FIFO, a folder), into
``<db-dir>/flows-quarantine/`` (never delete it, never follow it); sweep stale stages. It never
republishes the learned file of a retired or erased finding, and after finishing an erasure or a
supersede it surveys the store again before mending anything else. It never adds, changes or removes a journal
record, and reports what it cannot repair. It refuses to change anything (``WrongJournal``) when
the journal holds none of the runs the store cites: a wrong ``--journal`` or a forgotten
``$FLOWS_JOURNAL`` would otherwise quarantine every file.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import journal
from memory._erase import keys_in_file, keys_in_stages, sync_folders
from memory._errors import FlowsMemoryError, Unreachable, Unwritable, WrongJournal
from memory._files import is_learned_name, parse_learned, parse_retired
from memory._finding import (
    ERASE_STREAM,
    RETIRE_STREAM,
    STREAM,
    commit_to_publish,
    filter_holds_content,
    is_erased,
    render,
    render_retirement,
    retirement_to_publish,
    retirements_in,
)
from memory._paths import QUARANTINE_DIR, learned_dir, retired_dir, scan_scopes
from memory._publisher import HOLDER_FILE, refuse_links
from memory._safe import Folder, describe
from memory._store import MemoryStore
from staging import DEFAULT_SWEEP_AGE_S, stale_stages, sweep


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a store: what (``kind``), where (``path``), and what repair would do."""

    kind: str
    path: str
    message: str
    repair: str
    repairable: bool
    detail: tuple[tuple[str, Any], ...] = ()  # further fields of its JSON, by name (a kind's own)

    def as_json(self) -> dict[str, Any]:
        """The problem as a JSON object."""
        return {
            "kind": self.kind,
            "path": self.path,
            "message": self.message,
            "repair": self.repair,
            "repairable": self.repairable,
            **dict(self.detail),
        }


@dataclass
class _Context:
    store: MemoryStore
    records: dict[tuple[str, str], journal.Record]  # (run id, record id) -> memory-learn record
    latest: dict[str, journal.Record]  # finding id -> the commit to publish
    problems: list[Problem]
    runs: set[str] = field(default_factory=set)  # the journal's root runs
    cited: set[str] = field(default_factory=set)  # the runs learned files and rows cite
    location: str = ""  # the journal, as its backend names it
    unlisted: journal.JournalError | None = None  # why the journal's runs could not be listed
    unread: set[str] = field(default_factory=set)  # runs whose memory-learn stream is damaged
    unread_retired: set[str] = field(default_factory=set)  # runs whose memory-forget stream is damaged
    unread_erase: set[str] = field(default_factory=set)  # runs whose memory-erase stream is damaged
    folders: list[Path] = field(default_factory=list)  # the scopes' learned-file folders, no links
    retired_folders: list[Path] = field(default_factory=list)  # their retired-file folders, no links
    # (run id, record id, key) -> the retirement of that key a record makes
    retirements: dict[tuple[str, str, str], journal.Record] = field(default_factory=dict)
    retired: dict[str, journal.Record] = field(default_factory=dict)  # key -> the first retirement
    batches: dict[tuple[str, str], journal.Record] = field(default_factory=dict)  # forgets by filter
    erasures: list[journal.Record] = field(default_factory=list)  # memory-erase records
    erased_files: set[str] = field(default_factory=set)  # keys an erase named whose learned file is there
    erased: set[str] = field(default_factory=set)  # every key an erase record names
    supersedes: list[journal.Record] = field(default_factory=list)  # commits naming the version they replace
    lost: dict[str, journal.Record] = field(default_factory=dict)  # updates that lost their race, by key
    tombstones: list[journal.Record] = field(default_factory=list)  # erased memory-learn commits
    # (run id, record id) -> a tombstone whose key no erase record names (``_tombstone_problems``)
    unbacked: dict[tuple[str, str], journal.Record] = field(default_factory=dict)


def _journal_problems(ctx: _Context) -> None:
    """Read every run and stream afresh (no cache), collecting memory-learn records."""
    backend = journal.open_journal(ctx.store.journal_location)
    ctx.location = backend.location
    try:
        try:
            runs = backend.runs()
        except journal.JournalCorrupt as exc:
            ctx.problems.append(_unrepairable("run_corrupt", exc.path, str(exc)))
            if exc.line == 0:  # a thing that is no run where a run's folder or record belongs
                ctx.problems[-1] = replace(
                    ctx.problems[-1],
                    repair="nothing: --repair never changes the journal; do what the message says (a "
                    "stray entry moved out of the journal), or restore the run from a backup",
                )
            ctx.unlisted = exc
            return
        for run in runs:
            ctx.runs.add(run.run_id)
            try:
                if isinstance(backend, journal.FileJournal):  # one listing: its streams and kept cuts
                    listed, kept = backend.stream_listing(run.run_id)
                    ctx.problems += [_kept_cut(cut) for cut in kept]
                else:
                    listed = backend.streams(run.run_id)
            except journal.JournalReadInterrupted as exc:
                # reported like a damaged stream, and the run's records judged unread: the rest of
                # the store is still checked (a permission the user lacks is no reason to stop)
                ctx.problems.append(_unreadable(exc))
                ctx.unread.add(run.run_id)
                ctx.unread_retired.add(run.run_id)
                ctx.unread_erase.add(run.run_id)
                continue
            # the memory's own streams are read even when not listed: an emptied stream file is
            # not listed, and only its read says that its durable mark held records
            for stream in sorted({*listed, STREAM, RETIRE_STREAM, ERASE_STREAM}):
                _read_stream(ctx, backend, run.run_id, stream)
    finally:
        backend.close()


def _read_stream(ctx: _Context, backend: journal.JournalBackend, run_id: str, stream: str) -> None:
    """Read one stream of a run, keeping the memory's records; a stream that is damaged or cannot
    be read is reported, and its run's records of that kind judged unread."""
    try:
        records = backend.read(run_id, stream)
    except (journal.JournalCorrupt, journal.JournalReadInterrupted) as exc:
        corrupt = isinstance(exc, journal.JournalCorrupt)
        ctx.problems.append(_damaged("stream_corrupt", exc, exc.path) if corrupt else _unreadable(exc))
        if stream == STREAM:
            ctx.unread.add(run_id)
        elif stream == RETIRE_STREAM:
            ctx.unread_retired.add(run_id)
        elif stream == ERASE_STREAM:
            ctx.unread_erase.add(run_id)
        return
    if stream == STREAM:
        _learn_records(ctx, records)
    elif stream == RETIRE_STREAM:
        _retire_records(ctx, records)
    elif stream == ERASE_STREAM:
        _erase_records(ctx, records)


def _unreadable(exc: journal.JournalError) -> Problem:
    """A run's folder or stream that cannot be read (a permission, an I/O error): not damage, and
    nothing ``--repair`` can mend; the error says what to do."""
    detail = [(name, getattr(exc, attr, None)) for name, attr in (("runId", "run_id"), ("stream", "stream"))]
    return Problem(
        "journal_unreadable",
        str(exc.path or ""),
        str(exc),
        "nothing: --repair never changes the journal; make it readable (the message says how), then "
        "check again",
        False,
        tuple((k, v) for k, v in detail if v is not None),
    )


def _kept_cut(cut: journal.KeptCut) -> Problem:
    """A file where a cut of a stream's poisoned end kept the bytes it took: evidence for a person,
    never removed by ``--repair``."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(cut.modified_ms // 1000))
    return Problem(
        "stream_cut_kept",
        str(cut.path),
        f"{cut.size:,} byte(s) cut from stream {cut.stream} of root run {cut.run_id} at {when} are kept "
        f"here (generation {cut.generation}): a sync failed, or the stream's mark file said so, and "
        "nothing past that point was acknowledged if it is true; read it, and delete it once no "
        "record in it is one you need",
        "nothing: the kept bytes are evidence, removed only by you",
        False,
        (
            ("runId", cut.run_id),
            ("stream", cut.stream),
            ("size", cut.size),
            ("modifiedMs", cut.modified_ms),
            ("generation", cut.generation),
        ),
    )


def _learn_records(ctx: _Context, records: Iterable[journal.Record]) -> None:
    """Keep the finding commits among ``records``; report any record that is not one."""
    for rec in records:
        try:
            views = retirements_in(rec, ctx.location)  # an update's commit retires what it supersedes
        except journal.JournalCorrupt as exc:
            ctx.problems.append(_unrepairable("record_corrupt", exc.path, str(exc)))
            continue
        for view in views:
            ctx.batches[(rec.run_id, rec.id)] = rec  # its retired file is published from the commit
            _retirement(ctx, view)
        if is_erased(rec):
            # an erased commit: nothing to publish, nothing to check against; kept to be matched
            # with the erase records once all are read (``_tombstone_problems``)
            ctx.tombstones.append(rec)
            continue
        ctx.records[(rec.run_id, rec.id)] = rec
        if "supersedes" in rec.payload:
            ctx.supersedes.append(rec)
        fid = rec.payload["id"]
        ctx.latest[fid] = commit_to_publish(ctx.latest.get(fid), rec)


def _erase_records(ctx: _Context, records: Iterable[journal.Record]) -> None:
    """Keep the erase records among ``records``; report any record that is not one (every read
    ignores it, so a repair must not act on it either)."""
    from memory._erase import checked_audit

    for rec in records:
        try:
            ctx.erasures.append(checked_audit(rec, ctx.location))
        except journal.JournalCorrupt as exc:
            ctx.problems.append(_unrepairable("record_corrupt", exc.path, str(exc)))


def _retire_records(ctx: _Context, records: Iterable[journal.Record]) -> None:
    """Keep the retirements among ``records``; report any record that is not one."""
    for record in records:
        try:
            views = retirements_in(record, ctx.location)
        except journal.JournalCorrupt as exc:
            ctx.problems.append(_unrepairable("record_corrupt", exc.path, str(exc)))
            continue
        if views and views[0] is not record:
            ctx.batches[(record.run_id, record.id)] = record
        for rec in views:
            _retirement(ctx, rec)


def _retirement(ctx: _Context, rec: journal.Record) -> None:
    """Keep ``rec``, the retirement of one key (a record or a view of one)."""
    key = rec.payload["id"]
    ctx.retirements[(rec.run_id, rec.id, key)] = rec
    ctx.retired[key] = retirement_to_publish(ctx.retired.get(key), rec)


def _unrepairable(kind: str, path: object, message: str) -> Problem:
    return Problem(
        kind,
        str(path),
        message,
        "nothing: --repair never changes the journal or the ledger; restore the file from a backup"
        if kind != "journal_mismatch"
        else "nothing: point the check at the store's own journal",
        False,
    )


def _damaged(kind: str, exc: Exception, where: object) -> Problem:
    """A damaged line of a journal stream or of an agent's log (``kind``): unrepairable, with the
    error's context in its JSON too (``runId``, ``stream`` and ``line``, where the error has them)."""
    problem = _unrepairable(kind, getattr(exc, "path", None) or where, str(exc))
    detail = [(name, getattr(exc, attr, None)) for name, attr in (("runId", "run_id"), ("stream", "stream"))]
    detail.append(("line", getattr(exc, "line", None)))
    return replace(problem, detail=tuple((k, v) for k, v in detail if v is not None))


def _file_problems(ctx: _Context) -> set[str]:
    """Check the store's folders and every learned file; return the finding ids that have a good file."""
    good: set[str] = set()
    erased = ctx.erased
    tombstoned = {rec.payload["id"] for rec in ctx.tombstones}
    try:
        folders, wrong = scan_scopes(ctx.store.db_path)
        ctx.retired_folders, wrong_retired = scan_scopes(ctx.store.db_path, leaf="retired")
    except OSError as exc:
        raise Unreachable(f"cannot list {exc.filename}: {describe(exc)}", path=exc.filename) from exc
    ctx.folders = folders
    for path, what in dict.fromkeys([*wrong, *wrong_retired]):
        ctx.problems.append(
            Problem(
                "folder_wrong",
                str(path),
                f"{path} is {what}; the store never reads through it",
                f"move it to {QUARANTINE_DIR}/ (the link itself, never what it points to)",
                True,
            )
        )
    _holder_problems(ctx, [p.parent for p in (*folders, *ctx.retired_folders)])
    for directory in folders:
        try:
            folder = Folder.open(ctx.store.db_path.parent, directory)
        except OSError as exc:
            ctx.problems.append(_misplaced(Path(exc.filename or directory), describe(exc), None))
            continue
        if folder is None:
            continue
        with folder:
            try:
                names = sorted(n for n in folder.names() if is_learned_name(n))
            except OSError as exc:
                raise Unreachable(f"cannot list {directory}: {describe(exc)}", path=directory) from exc
            for name in names:
                _check_name(ctx, folder, name, good, tombstoned)
        if erased:  # a removed file's hidden name a power loss brought back, holding erased content
            ctx.erased_files.update(keys_in_stages([directory], erased))
    return good


def _erased_keys(ctx: _Context) -> set[str]:
    """Every key an erase record names."""
    return {
        k
        for rec in ctx.erasures
        if isinstance(rec.payload.get("keys"), list)
        for k in rec.payload["keys"]
        if isinstance(k, str)
    }


def _erasures_since(ctx: _Context) -> None:
    """When a tombstone's key is named by no erase record the survey read: read every run's erase
    records again. The survey reads the journal run by run, so an erase made meanwhile (on another
    host, or by another process) may have its record in a run listed too late, or read before it was
    appended, and its tombstones read after they were made: that is an erasure, not damage."""
    if all(rec.payload["id"] in ctx.erased for rec in ctx.tombstones):
        return
    from memory._erase import audits, checked_audit

    backend = journal.open_journal(ctx.store.journal_location)
    try:
        known = {(rec.run_id, rec.id) for rec in ctx.erasures}
        for rec in audits(backend):
            if (rec.run_id, rec.id) not in known:
                ctx.erasures.append(checked_audit(rec, ctx.location))
    except journal.JournalError:
        return  # read as the survey read it: what it could not read is said where it was met
    finally:
        backend.close()
    ctx.erased = _erased_keys(ctx)


def _tombstone_problems(ctx: _Context) -> None:
    """A commit of the tombstone's shape whose key no erase record names. Only an erase makes
    tombstones, and it commits its record first, so this is damage: the erase record was lost, or
    the commit was rewritten by something that is no erase (a CRC is no signature). Its content is
    gone from the journal either way, but nothing says it was meant to go: the finding's learned
    file and row are left where they are (never moved or deleted on the strength of this commit),
    and the store is never called clean over it."""
    for rec in ctx.tombstones:
        key = rec.payload["id"]
        if key in ctx.erased:
            continue
        ctx.unbacked[(rec.run_id, rec.id)] = rec
        ctx.problems.append(
            Problem(
                "tombstone_unbacked",
                ctx.location,
                f"record {rec.id} (line {rec.seq}) of stream {rec.stream} of root run {rec.run_id} in the "
                f"journal {ctx.location} is an erasure's tombstone of finding {key}, but no memory-erase "
                "record read here names that finding: "
                + (
                    f"the memory-erase stream of run(s) {', '.join(sorted(ctx.unread_erase))} cannot "
                    "be read (see the problem above), and may hold it"
                    if ctx.unread_erase
                    else "the erase record was lost, or the commit was rewritten by something that is "
                    "no erase"
                )
                + ". The finding's learned file and history-DB row, if any, are not served and are left "
                "in place",
                "nothing: --repair never changes the journal, nor removes a finding for a commit no "
                "erase backs; "
                + (
                    "make those streams readable, then check again"
                    if ctx.unread_erase
                    else "restore the run's memory-learn stream (or the run that erased the finding) "
                    "from a backup"
                )
                + ". Until then its learned file and row stay, unserved",
                False,
                (("runId", rec.run_id), ("stream", rec.stream), ("line", rec.seq), ("key", key)),
            )
        )


def _lost_updates(ctx: _Context) -> None:
    """Note each update commit that lost its race (``MemoryStore.update_lost``): the version it
    replaces was retired first by another, and a crash kept it from forgetting itself. It never
    lived, so its file is never republished, and one that is there is moved aside."""
    for fid, rec in ctx.latest.items():
        if "supersedes" not in rec.payload or fid in ctx.retired:
            continue
        try:
            if ctx.store.update_lost(rec, ctx.retired):
                ctx.lost[fid] = rec
        except Unreachable:
            continue  # the standing retired file is damaged: reported as such (``_retired_problems``)


def _lost_file(ctx: _Context, path: Path) -> Problem:
    rec = ctx.lost[path.name[: -len(".json")]]
    return Problem(
        "learned_forgotten",
        str(path),
        f"{path} is the learned file of an update (record {rec.id} of root run {rec.run_id}) whose "
        f"version it replaces, {rec.payload['supersedes']}, was retired first by another: the update "
        "lost its race, and that version never lived",
        f"move it to {QUARANTINE_DIR}/",
        True,
    )


def _fits(ctx: _Context, path: Path) -> journal.Record | None:
    """The commit whose learned file belongs at ``path``, if the journal has one."""
    rec = ctx.latest.get(path.name[: -len(".json")])
    if rec is not None and learned_dir(ctx.store.db_path, rec.payload["scope"]) == path.parent:
        return rec
    return None


def _misplaced(path: Path, what: str, rec: journal.Record | None) -> Problem:
    repair = f"move it to {QUARANTINE_DIR}/" + (", then republish it from its journal record" if rec else "")
    return Problem("learned_damaged", str(path), f"learned file {path} cannot be read: {what}", repair, True)


def _check_name(ctx: _Context, folder: Folder, name: str, good: set[str], tombstoned: set[str]) -> None:
    """Check the learned file ``name`` of ``folder`` by what the journal says of its key."""
    key = name[: -len(".json")]
    if key in ctx.erased:
        # never quarantined (which keeps the text): an unfinished erasure, whose repair deletes it
        # (``_erase_problems``)
        ctx.erased_files.add(key)
    elif key in tombstoned:
        # its commit is a tombstone no erase record read here names: quarantining it would keep
        # what may be erased content; left where it is (``_tombstone_problems``)
        ctx.problems.append(_tombstoned_file(ctx, folder.path / name))
    elif key in ctx.retired:
        ctx.problems.append(_forgotten(ctx, folder.path / name))
    elif key in ctx.lost:
        ctx.problems.append(_lost_file(ctx, folder.path / name))
    else:
        _check_file(ctx, folder, name, good)


def _tombstoned_file(ctx: _Context, path: Path) -> Problem:
    """The learned file of a finding whose commit is a tombstone no erase record read here names."""
    return Problem(
        "learned_unverified",
        str(path),
        f"{path} is the learned file of finding {path.name[: -len('.json')]}, whose commit the journal "
        f"{ctx.location} holds only as a tombstone that no erase record read here names (see "
        "tombstone_unbacked): it is not served, and neither moved (a copy in the quarantine would "
        "keep what may be erased content) nor deleted on the strength of that commit",
        "nothing until the journal is settled (see tombstone_unbacked)",
        False,
    )


def _forgotten(ctx: _Context, path: Path) -> Problem:
    key = path.name[: -len(".json")]
    return Problem(
        "learned_forgotten",
        str(path),
        f"{path} is the learned file of finding {key}, which record "
        f"{ctx.retired[key].id} of root run {ctx.retired[key].run_id} forgot or superseded",
        f"move it to {QUARANTINE_DIR}/",
        True,
    )


def _check_file(ctx: _Context, folder: Folder, name: str, good: set[str]) -> None:
    path = folder.path / name
    rec = _fits(ctx, path)
    try:
        data = folder.read(name)
    except OSError as exc:
        ctx.problems.append(_misplaced(path, describe(exc), rec))
        return
    if data is None:
        return  # removed since the folder was listed
    try:
        entry = parse_learned(path, data)
    except Unreachable as exc:
        repair = "republish it from its journal record" if rec else f"move it to {QUARANTINE_DIR}/"
        ctx.problems.append(Problem("learned_damaged", str(path), str(exc), repair, True))
        return
    ctx.cited.add(entry.citation.run_id)
    cited = ctx.records.get((entry.citation.run_id, entry.citation.id))
    if cited is None:
        ctx.problems.append(_uncited(ctx, path, entry.citation, rec))
        return
    if data != render(cited):
        ctx.problems.append(
            Problem(
                "learned_mismatch",
                str(path),
                f"{path} differs from the rendering of the record it cites",
                "republish it from its journal record",
                True,
            )
        )
        return
    stale = _stale(path, cited, rec)
    if stale is not None:
        ctx.problems.append(stale)
    else:
        good.add(entry.key)


def _stale(path: Path, cited: journal.Record, newest: journal.Record | None) -> Problem | None:
    """The problem of a learned file holding a commit older than the newest one across runs (the
    one rule ``commit_to_publish`` states), or None."""
    if newest is None or (newest.run_id, newest.id) == (cited.run_id, cited.id):
        return None
    return Problem(
        "learned_stale",
        str(path),
        f"{path} holds the commit of root run {cited.run_id}, but root run {newest.run_id} committed "
        "the finding later, and the newest commit across runs is the one published",
        "republish it from the newest commit",
        True,
    )


def _holder_problems(ctx: _Context, turn_dirs: Iterable[Path]) -> None:
    """A scope's ``turn-holder`` file that is not a regular file (a link, a folder, a FIFO): every
    update, forget and erase of the scope fails with ``memory_unwritable`` naming it, as the file
    is never opened through a link or as anything but a file; reported, and moved aside by repair."""
    for directory in dict.fromkeys(turn_dirs):
        holder = directory / HOLDER_FILE
        try:
            st = os.lstat(holder)
        except OSError:  # none yet (no turn taken), or unreadable: the turn says so when taken
            continue
        if stat.S_ISREG(st.st_mode):
            continue
        link, folder = stat.S_ISLNK(st.st_mode), stat.S_ISDIR(st.st_mode)
        what = "a link" if link else "a folder" if folder else "not a regular file"
        ctx.problems.append(
            Problem(
                "holder_wrong",
                str(holder),
                f"{holder} is {what} where the scope's turn-holder file belongs: every update, forget "
                "and erase of the scope fails (memory_unwritable) while it is there",
                f"move it to {QUARANTINE_DIR}/ (the link itself, never what it points to); the next "
                "turn makes the file anew",
                True,
            )
        )


def _retired_problems(ctx: _Context) -> set[str]:
    """Check every retired file; return the keys that have a good one."""
    good: set[str] = set()
    for directory in ctx.retired_folders:
        try:
            folder = Folder.open(ctx.store.db_path.parent, directory)
        except OSError as exc:
            where = Path(exc.filename or directory)
            repair = f"move it to {QUARANTINE_DIR}/"
            what = f"{where}: {describe(exc)}"
            ctx.problems.append(Problem("folder_wrong", str(where), what, repair, True))
            continue
        if folder is None:
            continue
        with folder:
            try:
                names = sorted(n for n in folder.names() if is_learned_name(n))
            except OSError as exc:
                raise Unreachable(f"cannot list {directory}: {describe(exc)}", path=directory) from exc
            for name in names:
                _check_retired(ctx, folder, name, good)
    for key, rec in ctx.retired.items():
        path = retired_dir(ctx.store.db_path, rec.payload["scope"]) / f"{key}.json"
        if key in good or any(p.path == str(path) for p in ctx.problems):
            continue
        ctx.problems.append(
            Problem(
                "retirement_unpublished",
                str(path),
                f"record {rec.id} of root run {rec.run_id} retires finding {key}, but its retired file "
                "is missing, so reads may still return it",
                "publish the retired file from its journal record",
                True,
            )
        )
    return good


def _check_retired(ctx: _Context, folder: Folder, name: str, good: set[str]) -> None:
    path = folder.path / name
    rec = ctx.retired.get(name[: -len(".json")])
    fits = rec is not None and retired_dir(ctx.store.db_path, rec.payload["scope"]) == folder.path
    repair = "republish it from its journal record" if fits else f"move it to {QUARANTINE_DIR}/"
    try:
        data = folder.read(name)
    except OSError as exc:
        moved = f"move it to {QUARANTINE_DIR}/" + (", then republish it from its record" if fits else "")
        what = f"retired file {path} cannot be read: {describe(exc)}"
        ctx.problems.append(Problem("retired_damaged", str(path), what, moved, True))
        return
    if data is None:
        return
    try:
        entry = parse_retired(path, data)
    except Unreachable as exc:
        ctx.problems.append(Problem("retired_damaged", str(path), str(exc), repair, True))
        return
    ctx.cited.add(entry.citation.run_id)
    cited = ctx.retirements.get((entry.citation.run_id, entry.citation.id, entry.key))
    unread = ctx.unread | ctx.unread_retired
    if cited is None and (ctx.unlisted is not None or entry.citation.run_id in unread):
        ctx.problems.append(_unverified(path, entry.citation.run_id))
    elif cited is None:
        ctx.problems.append(
            Problem(
                "retired_unjournaled",
                str(path),
                f"{path} cites record {entry.citation.id} of root run {entry.citation.run_id}, which "
                f"the journal {ctx.location} does not hold",
                repair,
                True,
            )
        )
    elif data != render_retirement(cited):
        ctx.problems.append(
            Problem(
                "retired_mismatch",
                str(path),
                f"{path} differs from the rendering of the record it cites",
                "republish it from its journal record",
                True,
            )
        )
    else:
        good.add(entry.key)


def _unverified(path: Path, run_id: str) -> Problem:
    return Problem(
        "learned_unverified" if path.parent.name != "retired" else "retired_unverified",
        str(path),
        f"{path} cites root run {run_id}, whose records cannot be read (see the journal's problem above)",
        "nothing until the journal is restored: a file is never moved for want of its record",
        False,
    )


def _uncited(ctx: _Context, path: Path, citation: Any, rec: journal.Record | None) -> Problem:
    """The problem of the learned file ``path`` whose cited commit is not among the journal's live
    commits: unverified while its run cannot be read or the commit is a tombstone no erase backs
    (never moved for want of its record), else unjournaled."""
    if ctx.unlisted is not None or citation.run_id in ctx.unread:
        return _unverified(path, citation.run_id)
    if (citation.run_id, citation.id) in ctx.unbacked:
        return Problem(
            "learned_unverified",
            str(path),
            f"{path} cites record {citation.id} of root run {citation.run_id}, which the journal holds "
            "only as a tombstone that no erase record names (see tombstone_unbacked): it is not served, "
            "and never moved or deleted on the strength of that commit",
            "nothing until the journal is settled (see tombstone_unbacked)",
            False,
        )
    return Problem(
        "learned_unjournaled",
        str(path),
        f"{path} cites record {citation.id} of root run {citation.run_id}, which the journal "
        f"{ctx.location} does not hold",
        f"move it to {QUARANTINE_DIR}/" if rec is None else "republish it from its journal record",
        True,
    )


def _record_problems(ctx: _Context, good: set[str]) -> None:
    try:
        held = ctx.store.db.held(ctx.latest)
    except Unreachable as exc:  # which findings the DB holds is unknown: reported once, below
        ctx.problems.append(_db_unreadable(ctx, exc))
        return
    # A retirement sits in a run's memory-forget stream, or in its memory-learn stream (an update's
    # commit retires what it supersedes): while any of those cannot be read, a record without its
    # file may be one that was forgotten, and publishing it would bring the finding back.
    unread = sorted(ctx.unread | ctx.unread_retired)
    for fid, rec in ctx.latest.items():
        if fid in held or fid in good or fid in ctx.retired or fid in ctx.lost:
            continue
        if fid in ctx.erased:
            # an erase record names it: its content is to go (``erase_incomplete``), never to be
            # published again, whether or not its learned file is still there
            continue
        path = learned_dir(ctx.store.db_path, rec.payload["scope"]) / f"{fid}.json"
        if any(p.path == str(path) for p in ctx.problems):
            continue  # already reported as a damaged or wrong file
        missing = (
            f"record {rec.id} of root run {rec.run_id} has neither its learned file nor a history-DB row"
        )
        if unread:
            ctx.problems.append(
                Problem(
                    "record_unpublished",
                    str(path),
                    f"{missing}; it is not published again while the retirements of root run "
                    f"{', '.join(unread)} cannot be read (see the journal's problem above): one of "
                    "them may have forgotten it",
                    "nothing until the journal is restored: a finding is never published while a "
                    "retirement of it may be unread",
                    False,
                )
            )
            continue
        ctx.problems.append(
            Problem("record_unpublished", str(path), missing, "republish it from its journal record", True)
        )


def _db_unreadable(ctx: _Context, exc: Unreachable) -> Problem:
    return Problem(
        "db_unreadable",
        str(exc.path or ctx.store.db_path),
        str(exc),
        "nothing: --repair never changes the history DB; follow the message (a DB moved aside is "
        "rebuilt by `flows sync` from the learned files and the journal)",
        False,
    )


def _db_problems(ctx: _Context) -> None:
    if any(p.kind == "db_unreadable" for p in ctx.problems):
        return
    try:
        rows = ctx.store.db.every_row()
    except Unreachable as exc:
        ctx.problems.append(_db_unreadable(ctx, exc))
        return
    for row in rows:
        ctx.cited.add(row.citation.run_id)
        if (row.citation.run_id, row.citation.id) not in ctx.records:
            unbacked = (row.citation.run_id, row.citation.id) in ctx.unbacked
            ctx.problems.append(
                _unrepairable(
                    "row_unjournaled",
                    ctx.store.db_path,
                    f"history-DB row {row.id} cites record {row.citation.id} of root run "
                    f"{row.citation.run_id}, which the journal "
                    + (
                        "holds only as a tombstone that no erase record names (see tombstone_unbacked)"
                        if unbacked
                        else "does not hold"
                    ),
                )
            )


def _unbacked_marks(ctx: _Context) -> list[tuple[str, str, str]]:
    """The retirements the DB records (and so marks on rows, hiding their findings from every read)
    that no record of the journal makes: (key, run id, record id). A run whose retirements could
    not be read (or no run list) leaves its marks unjudged: that damage is reported on its own."""
    if ctx.unlisted is not None:
        return []
    unread = ctx.unread | ctx.unread_retired
    return [
        (key, run_id, rid)
        for key, run_id, rid in ctx.store.db.retirement_marks()
        if (run_id, rid, key) not in ctx.retirements and run_id not in unread
    ]


def _mark_problems(ctx: _Context) -> None:
    if any(p.kind == "db_unreadable" for p in ctx.problems):
        return
    try:
        marks = _unbacked_marks(ctx)
    except Unreachable as exc:
        ctx.problems.append(_db_unreadable(ctx, exc))
        return
    for key, run_id, rid in marks:
        ctx.problems.append(
            Problem(
                "retirement_unjournaled",
                str(ctx.store.db_path),
                f"the history DB marks finding {key} retired by record {rid} of root run {run_id}, "
                f"which the journal {ctx.location} does not hold as a retirement of it: the finding is "
                "left out of every read",
                "unmark it (a retirement the journal does hold is marked again by the next sync)",
                True,
            )
        )


def _foreign_journal(ctx: _Context) -> str | None:
    """Why the journal cannot be this store's (it holds none of the runs the store cites), or None."""
    if ctx.unlisted is not None or not ctx.cited or ctx.cited & ctx.runs:
        return None
    return (
        f"the journal {ctx.location} holds none of the {len(ctx.cited)} root run(s) that the store's "
        f"learned files and history-DB rows cite (e.g. {min(ctx.cited)}), so it is not this store's "
        "journal: pass the right one with --journal (or $FLOWS_JOURNAL). --repair changes nothing "
        "until then"
    )


def _survey(store: MemoryStore, tick: Callable[[], None] = lambda: None) -> _Context:
    """Read the journal, the learned and retired files and the DB rows, collecting their problems
    (``tick`` after each of the five)."""
    ctx = _Context(store, {}, {}, [])
    _journal_problems(ctx)
    ctx.erased = _erased_keys(ctx)
    _erasures_since(ctx)
    _tombstone_problems(ctx)
    _lost_updates(ctx)
    tick()
    good = _file_problems(ctx)
    tick()
    _retired_problems(ctx)
    tick()
    _record_problems(ctx, good)
    tick()
    _db_problems(ctx)
    _mark_problems(ctx)
    tick()
    foreign = _foreign_journal(ctx)
    if foreign is not None:
        ctx.problems.insert(0, _unrepairable("journal_mismatch", ctx.location, foreign))
    return ctx


def _unfinished_supersedes(ctx: _Context) -> list[tuple[str, str]]:
    """(old key, new key) of each commit that supersedes a version no retirement retires (a crash
    between the new version's commit and the old one's retirement, when that was a record of its
    own), unless it is an update that lost its race. The new version may have been retired since (a
    later update, made on another host, superseded it): the old one is live beside the memory's
    newest version then, and is retired all the same (retired is final)."""
    out = []
    for rec in ctx.supersedes:
        old, new = rec.payload["supersedes"], rec.payload["id"]
        if old not in ctx.retired and new not in ctx.lost and (old, new) not in out:
            out.append((old, new))
    return out


def _supersede_problems(ctx: _Context) -> None:
    for old, new in _unfinished_supersedes(ctx):
        later = ctx.retired.get(new)
        then = "both answer"
        if later is not None:
            by = later.payload.get("by")
            how = f"superseded by {by}" if isinstance(by, str) else "forgotten"
            then = f"{new} was retired since ({how}) and {old} still answers: one memory, two live lines"
        ctx.problems.append(
            Problem(
                "supersede_unfinished",
                ctx.location,
                f"finding {new} was committed as the new version of {old}, which no retirement retires "
                f"(a crash between the two): {then}",
                f"retire {old} as superseded by {new}",
                True,
            )
        )


def _erase_problems(ctx: _Context) -> None:
    """An erase record whose keys still have content somewhere: a commit that is no tombstone, a
    history-DB row or a learned file (an erase a crash or a running run left unfinished)."""
    # each key a forget by filter retired whose filter still names content (its tags, metadata or
    # source: values of the findings it retired)
    named = {
        k
        for batch in ctx.batches.values()
        if batch.stream == RETIRE_STREAM and filter_holds_content(batch)
        for k, _ in batch.payload["ids"]
    }
    quarantined = _quarantined_keys(ctx)
    for rec in ctx.erasures:
        keys = rec.payload.get("keys")
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            continue
        left = [k for k in keys if k in ctx.latest or k in ctx.erased_files or k in named or k in quarantined]
        with contextlib.suppress(FlowsMemoryError):  # an unreadable DB is its own problem
            left += [r.key for r in ctx.store.db.rows_of(keys) if r.key not in left]
        if left:
            ctx.problems.append(
                Problem(
                    "erase_incomplete",
                    ctx.location,
                    f"memory {rec.payload.get('memory')} was erased (record {rec.id} of root run "
                    f"{rec.run_id}) but {len(left)} of its findings still hold content (e.g. {left[0]})",
                    "finish the erasure",
                    True,
                )
            )


def _quarantined_keys(ctx: _Context) -> set[str]:
    """The erased keys a file in the quarantine still holds (a copy an earlier repair moved aside,
    or one put there by hand): the erasure is unfinished until it is gone."""
    from memory._erase import keys_in_file, quarantined_holding

    erased = {
        k
        for rec in ctx.erasures
        if isinstance(keys := rec.payload.get("keys"), list)
        for k in keys
        if isinstance(k, str)
    }
    found: set[str] = set()
    for path in quarantined_holding(ctx.store.db_path.parent / QUARANTINE_DIR, erased):
        found |= {path.name[: -len(".json")]} & erased
        found |= keys_in_file(path, erased)
    return found


def _pending_problems(ctx: _Context) -> None:
    """Each marker of an erasure whose old copies a reader kept (``ErasePending``): the history
    DB's old pages, or on PostgreSQL the old versions of its rewritten rows, may still hold it."""
    from memory._erase import pending_dir, pending_folder_wrong, read_marker

    wrong = pending_folder_wrong(ctx.store.db_path)
    if wrong is not None:
        folder = pending_dir(ctx.store.db_path)
        ctx.problems.append(
            Problem(
                "folder_wrong",
                str(folder),
                f"{folder} is {wrong}, where the folder of pending erasures' markers belongs: nothing "
                "is read or removed through it",
                "nothing: move it away yourself (an erase makes the folder when it needs one)",
                False,
            )
        )
    for path in _markers(ctx):
        marker = read_marker(path)
        memories: list[Any] = m if isinstance(m := marker.get("memories"), list) else []
        held: list[Any] = h if isinstance(h := marker.get("held"), list) else []
        named = ", ".join(str(m)[:40] for m in memories[:3]) + (", …" if len(memories) > 3 else "")
        ctx.problems.append(
            Problem(
                "erase_pending",
                str(path),
                f"an erasure of {len(memories)} memor{'y' if len(memories) == 1 else 'ies'} ({named}) "
                f"left old copies that a reader kept: "
                f"{'; '.join(str(h)[:300] for h in held[:3]) or 'unknown'}",
                "checkpoint the history DB's log and vacuum the PostgreSQL journal's records, then "
                "remove the marker (once no reader keeps them)",
                True,
            )
        )


def _markers(ctx: _Context) -> list[Path]:
    from memory._erase import pending_markers

    try:
        return pending_markers(ctx.store.db_path)
    except FlowsMemoryError:
        return []


def _finish_records(ctx: _Context, kinds: set[str]) -> list[str]:
    """Finish what a crash left half recorded: supersedes first (a memory with two live versions),
    then erasures, then what readers kept of erasures (the markers, this repair's own included)."""
    actions = _finish_supersedes(ctx) if "supersede_unfinished" in kinds else []
    actions += _finish_erasures(ctx) if "erase_incomplete" in kinds else []
    if "erase_pending" in kinds or "erase_incomplete" in kinds:
        held = ctx.store.finish_pending()
        actions.append(
            "finished the pending erasures" if not held else f"erasures still pending: {'; '.join(held)}"
        )
    return actions


def _finish_supersedes(ctx: _Context) -> list[str]:
    actions = []
    for old, new in _unfinished_supersedes(ctx):
        with ctx.store.session(scope=ctx.store.scope_of(old) or "repair", flow="repair") as session:
            if session.retire_superseded(old, new):
                actions.append(f"retired {old} as superseded by {new}")
    return actions


def _finish_erasures(ctx: _Context) -> list[str]:
    actions = []
    for rec in ctx.erasures:
        keys = rec.payload.get("keys")
        if isinstance(keys, list) and all(isinstance(k, str) for k in keys):
            done = ctx.store.finish_erasure(keys)
            memory = rec.payload.get("memory")
            actions.append(f"finished the erasure of memory {memory} ({done} journal record(s) rewritten)")
            ctx.store.note_erasure_held([str(memory)])
    return actions


def _vector_problems(ctx: _Context) -> None:
    """Stored vectors of anything but the live findings, malformed vectors, and a vectors file that
    cannot be read. Skipped when the live findings cannot be listed (that damage is reported)."""
    from memory._vectors import vector_problems, vectors_path

    if not os.path.lexists(vectors_path(ctx.store.db_path)):
        return
    try:
        live = {e.key for e in ctx.store.recall(limit=None)}
    except FlowsMemoryError:
        return
    problems, damaged = vector_problems(ctx.store.db_path, live)
    where = str(vectors_path(ctx.store.db_path))
    if damaged is not None:
        ctx.problems.append(
            Problem(
                "vectors_damaged", where, damaged, "delete it (vectors are derived again when needed)", True
            )
        )
    for p in problems:
        ctx.problems.append(
            Problem(
                "vector_stale",
                where,
                f"the vector of {p.key} (embedder {p.model}) is {p.what}"
                if p.what.startswith("not ")
                else f"a vector is kept for {p.key} (embedder {p.model}), and {p.what}",
                "delete it (a live finding's vector is derived again when needed)",
                True,
            )
        )


def _stage_dirs(ctx: _Context) -> list[Path]:
    """The folders stages are made in: each scope's learned-file folder and each run's folder of a
    file journal, none of them a link (a linked folder's stages are not the store's to sweep)."""
    store = ctx.store
    dirs = [*ctx.folders, *ctx.retired_folders]
    try:
        root = Path(store.journal_location) / "runs"
        if _is_folder(root):
            dirs += [root / n for n in sorted(os.listdir(root)) if _is_folder(root / n)]
    except OSError as exc:
        where = exc.filename or store.db_path.parent
        raise Unreachable(f"cannot list {where}: {describe(exc)}", path=where) from exc
    return dirs


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _stage_problems(ctx: _Context, sweep_age_s: float, now: float) -> None:
    for directory in _stage_dirs(ctx):
        try:
            stale = stale_stages(directory, sweep_age_s, now=now)
        except OSError as exc:
            raise Unreachable(f"cannot list {directory}: {describe(exc)}", path=directory) from exc
        for path in stale:
            if _is_folder(path):  # never a stage: sweeping it would fail, so it is moved aside whole
                ctx.problems.append(_stage_folder(ctx, path))
                continue
            message = f"{path} is a stage older than {sweep_age_s:.0f}s, left by a crash"
            ctx.problems.append(Problem("stage_stale", str(path), message, "sweep it", True))


def _stage_folder(ctx: _Context, path: Path) -> Problem:
    """A folder named as a stage is: moved into the quarantine when it is inside the store's folder
    (the quarantine never leaves it), else left for its owner."""
    message = f"{path} is a folder with a stage's name; no stage is ever a folder"
    if path.is_relative_to(ctx.store.db_path.parent):
        return Problem("stage_stale", str(path), message, f"move it to {QUARANTINE_DIR}/", True)
    outside = "nothing: it is outside the store's folder; remove it by hand"
    return Problem("stage_stale", str(path), message, outside, False)


def _sail_problems(ctx: _Context, sail_dirs: Iterable[Path]) -> None:
    """Each agent's ledger and activity log: a damaged line (``ledger_corrupt``, ``activity_corrupt``)
    and the bytes a cut of either kept beside it (``stream_cut_kept``, as a journal stream's)."""
    from memory.ledger import ActivityLog, Ledger, LedgerError

    for sail_dir in sail_dirs:
        ledger, activity = Ledger(sail_dir), ActivityLog(sail_dir)
        damaged = False
        for label, read, path in (
            ("ledger", ledger.entries, ledger.path),
            ("activity", activity.read, activity.path),
        ):
            try:
                read()
            except (journal.JournalCorrupt, LedgerError) as exc:
                ctx.problems.append(_damaged(f"{label}_corrupt", exc, sail_dir))
                damaged = True
            ctx.problems += _log_kept_cuts(label, path)
        if not damaged:
            # (a line damaged since the read above is for the next check to report)
            with contextlib.suppress(journal.JournalCorrupt, LedgerError):
                ctx.problems += _ledger_claims(ledger, activity)


def _ledger_claims(ledger: Any, activity: Any) -> list[Problem]:
    """Each final ``acted`` line of the agent's ledger that its activity log does not back: no
    ``dispatch_included`` of that transaction, block and status, nor the runner's receipt line
    (``memory.ledger.Backing``). A claim: a line added by hand, forged or restored; the ledger keeps
    it as written, so it is evidence, never repaired."""
    from memory.ledger import BACKING_EVENTS, CLAIM_NOTE, Backing, is_claim

    backing = Backing(activity.scan(BACKING_EVENTS))
    found = []
    for number, _, entry in ledger.numbered():
        if is_claim(entry, backing):
            found.append(
                Problem(
                    "ledger_claim",
                    str(ledger.path),
                    f"line {number} of the agent ledger {ledger.path} says {entry.tx_hash} was "
                    f"{entry.outcome} in block {entry.block}, {CLAIM_NOTE} (no dispatch_included of that "
                    "block and status, nor a receipt line of its dispatch): check it against the chain "
                    "(`sail ledger` shows it beside the trade's other lines)",
                    "nothing: the ledger keeps every line as written",
                    False,
                    (("log", "ledger"), ("line", number), ("txHash", entry.tx_hash), ("block", entry.block)),
                )
            )
    return found


_LOG_CUT = re.compile(r"\.(.+)\.cut-([0-9]{1,20})")


def _log_kept_cuts(label: str, log: Path) -> list[Problem]:
    """The files in which a cut of an agent's log (``label``: ``ledger`` or ``activity``) at
    ``log`` kept the bytes it took: ``.<name>.cut-<generation>`` beside it, as a journal stream's
    (``journal.LineLog.kept_cut_path``). Listed without following anything; a thing of that name
    that is no regular file is listed too."""
    try:
        with os.scandir(log.parent) as listing:
            entries = [e for e in listing if e.name.startswith(f".{log.name}.cut-")]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        return [_unrepairable(f"{label}_corrupt", log.parent, f"cannot list {log.parent}: {describe(exc)}")]
    found = []
    for entry in sorted(entries, key=lambda e: e.name):
        match = _LOG_CUT.fullmatch(entry.name)
        if match is None or match[1] != log.name:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        found.append(_log_cut(label, log, Path(entry.path), int(match[2]), st))
    return found


def _log_cut(label: str, log: Path, path: Path, generation: int, st: os.stat_result) -> Problem:
    """A kept cut of an agent's log: evidence for a person, never removed by ``--repair``."""
    modified_ms = st.st_mtime_ns // 1_000_000
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(modified_ms // 1000))
    what = "agent ledger" if label == "ledger" else "agent activity log"
    return Problem(
        "stream_cut_kept",
        str(path),
        f"{st.st_size:,} byte(s) cut from the {what} {log} at {when} are kept here (generation "
        f"{generation}): a sync failed, or the log's mark file said so, and nothing past that point "
        "was acknowledged if it is true; read it, and delete it once no line in it is one you need",
        "nothing: the kept bytes are evidence, removed only by you",
        False,
        (
            ("runId", None),
            ("stream", None),
            ("log", label),
            ("logPath", str(log)),
            ("size", st.st_size),
            ("modifiedMs", modified_ms),
            ("generation", generation),
        ),
    )


def check_store(
    store: MemoryStore,
    *,
    sail_dirs: Iterable[str | os.PathLike[str]] = (),
    sweep_age_s: float = DEFAULT_SWEEP_AGE_S,
    now: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Problem]:
    """Return every problem of the store (empty when clean). Reads only; writes nothing.

    ``progress(done, total)``, if given, is told as each of the check's phases ends.

    Raises:
        JournalError: the journal cannot be reached or listed (damage in it is a problem, not an
            error).
        Unreachable: a folder of the store cannot be listed.
    """
    phases, done = 8, 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, phases)

    ctx = _survey(store, tick)
    _stage_problems(ctx, sweep_age_s, time.time() if now is None else now)
    tick()
    _sail_problems(ctx, [Path(d) for d in sail_dirs])
    tick()
    _vector_problems(ctx)
    _supersede_problems(ctx)
    _erase_problems(ctx)
    _pending_problems(ctx)
    tick()
    return ctx.problems


def repair_store(
    store: MemoryStore,
    problems: Iterable[Problem],
    *,
    sweep_age_s: float = DEFAULT_SWEEP_AGE_S,
    now: float | None = None,
) -> list[str]:
    """Repair what ``check_store`` found; return one line per action taken.

    Republishes from the journal, quarantines files that cite no record and whatever is not what
    the store expects at its place (a link is moved itself, never followed), sweeps stale stages.
    Never touches the journal, the DB's rows (but for unmarking a retirement no record backs) or a
    ledger.

    Raises:
        WrongJournal: the journal holds none of the root runs the store cites (a wrong
            ``--journal``); nothing is changed.
        JournalCorrupt: the journal's runs cannot be listed (a damaged run record); nothing is
            changed.
        Unwritable: a file could not be republished.
    """
    ctx = _survey(store)
    if ctx.unlisted is not None:  # what the journal holds is unknown: nothing can be judged unjournaled
        raise ctx.unlisted
    foreign = _foreign_journal(ctx)
    if foreign is not None:
        raise WrongJournal(f"refusing to repair: {foreign}", path=ctx.location)
    actions: list[str] = []
    quarantine = store.db_path.parent / QUARANTINE_DIR / time.strftime("%Y%m%dT%H%M%S")

    def move_aside(path: Path) -> None:
        if keys_in_file(path, ctx.erased):  # the quarantine keeps what it holds: erased content never
            _delete(path)
            actions.append(f"deleted {path}, which holds erased content")
            return
        target = quarantine / path.relative_to(store.db_path.parent)
        refuse_links(store.db_path.parent, target.parent)  # the quarantine stays inside the store
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, target)  # a rename: a link moves as a link, a folder as a whole
        except OSError as exc:
            raise Unwritable(
                f"cannot move {path} to {target}: {describe(exc)}", path=path, errno=exc.errno
            ) from exc
        actions.append(f"quarantined {path} to {target}")

    ctx, problems, finished = _finish_first(ctx, list(problems), sweep_age_s, now)
    actions += finished
    vectors = [p for p in problems if p.kind in ("vector_stale", "vectors_damaged")]
    if vectors:
        actions += _repair_vectors(ctx)
    if any(p.kind == "retirement_unjournaled" for p in problems):
        marks = _unbacked_marks(ctx)
        ctx.store.db.unretire([key for key, _, _ in marks])
        actions += [f"unmarked finding {key}, which no record of the journal retires" for key, _, _ in marks]
    problems = [p for p in problems if p.kind != "retirement_unjournaled"]
    for problem in problems:
        if not problem.repairable or problem in vectors:
            continue
        path = Path(problem.path)
        if problem.kind == "stage_stale":
            actions += _repair_stage(path, sweep_age_s, now, move_aside)
        elif problem.kind in ("folder_wrong", "holder_wrong"):
            if os.path.lexists(path):
                move_aside(path)
        else:
            record = _home_record(ctx, path)
            if record is not None:
                _republish(ctx, record, path, move_aside)
                actions.append(f"republished {path} from record {record.id} of root run {record.run_id}")
            elif os.path.lexists(path):
                move_aside(path)
    return actions


def _finish_first(
    ctx: _Context, problems: list[Problem], sweep_age_s: float, now: float | None
) -> tuple[_Context, list[Problem], list[str]]:
    """Finish what a crash left half recorded (``_finish_records``), then answer the survey and the
    problems to mend next, with the actions taken. Finishing retires or erases findings and
    rewrites commits as tombstones, and the survey read the store before that: acting on its
    records would publish again what was just retired or erased (an erased finding's text written
    back by the same repair). So after any of it the store is surveyed afresh, and the problems to
    mend are the fresh survey's and stale stages' as they are now, with the given ones of the kinds
    a survey does not make (an agent's logs, vectors: judged afresh when mended, or not
    repairable)."""
    actions = _finish_records(ctx, {p.kind for p in problems})
    problems = [p for p in problems if p.kind not in _FINISHED]
    if not actions:
        return ctx, problems, actions
    ctx = _survey(ctx.store)
    _stage_problems(ctx, sweep_age_s, time.time() if now is None else now)
    kept = [p for p in problems if p.kind not in _SURVEYED and p.kind != "stage_stale"]
    return ctx, [p for p in ctx.problems if p.kind not in _FINISHED] + kept, actions


# The kinds ``_finish_records`` mends (before any other, and never again in the same repair).
_FINISHED = ("erase_incomplete", "supersede_unfinished", "erase_pending")

# The kinds ``_survey`` reports (a fresh survey's list replaces the given problems of these kinds).
_SURVEYED = frozenset(
    {
        "run_corrupt",
        "stream_corrupt",
        "stream_cut_kept",
        "record_corrupt",
        "folder_wrong",
        "holder_wrong",
        "learned_damaged",
        "learned_unjournaled",
        "learned_mismatch",
        "learned_stale",
        "learned_unverified",
        "learned_forgotten",
        "retired_damaged",
        "retired_unjournaled",
        "retired_mismatch",
        "retired_unverified",
        "retirement_unpublished",
        "record_unpublished",
        "row_unjournaled",
        "retirement_unjournaled",
        "db_unreadable",
        "journal_mismatch",
        "tombstone_unbacked",
        "journal_unreadable",
    }
)


def _repair_stage(
    path: Path, sweep_age_s: float, now: float | None, move_aside: Callable[[Path], None]
) -> list[str]:
    """Sweep the stale stages of ``path``'s folder, or move ``path`` aside whole when it is a folder
    with a stage's name (which the sweep leaves)."""
    if _is_folder(path):
        move_aside(path)
        return []
    return [f"swept {swept}" for swept in sweep(path.parent, sweep_age_s, now=now)]


def _delete(path: Path) -> None:
    """Remove the file ``path`` (a link itself, never what it points to), durably."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise Unwritable(f"cannot remove {path}: {describe(exc)}", path=path, errno=exc.errno) from exc
    sync_folders([path.parent])


def _republish(ctx: _Context, record: journal.Record, path: Path, move_aside: Callable[[Path], None]) -> None:
    """Publish the file ``record`` renders at ``path`` (a forget by filter's retired file from its
    record, for the one key), moving aside first what the rename could not replace."""
    if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
        move_aside(path)  # a FIFO, a folder or a link: the rename could not replace it
    batch = ctx.batches.get((record.run_id, record.id))
    if batch is None:
        ctx.store.republish(record)
    else:  # one key of a forget by filter: that key's retired file
        ctx.store.republish(batch, record.payload["id"])


def _repair_vectors(ctx: _Context) -> list[str]:
    """Delete the vectors ``_vector_problems`` finds now (the file when it is damaged), and derive the
    live findings' vectors again when the store has an embedder."""
    from memory._vectors import repair_vectors, vector_problems, vectors_path

    live = {e.key for e in ctx.store.recall(limit=None)}
    problems, damaged = vector_problems(ctx.store.db_path, live)
    where = vectors_path(ctx.store.db_path)
    actions = []
    if damaged is not None:
        repair_vectors(ctx.store.db_path, [], True)
        actions.append(f"deleted the damaged vectors file {where}")
    elif problems:
        gone = repair_vectors(ctx.store.db_path, problems, False)
        actions.append(f"deleted {gone} vector(s) of findings that are not live from {where}")
    if ctx.store.embedder is not None:
        made = ctx.store.derive_vectors(again=True)
        actions.append(f"derived the vectors of {made} live finding(s) with {ctx.store.embedder.name}")
    return actions


def _home_record(ctx: _Context, path: Path) -> journal.Record | None:
    """The record whose file belongs at ``path`` (a retirement in a retired folder, else the commit of
    a finding that is not retired), or None: such a file is moved aside, never republished."""
    key = path.name[: -len(".json")]
    if path.parent.name == "retired":
        retirement = ctx.retired.get(key)
        home = None if retirement is None else retired_dir(ctx.store.db_path, retirement.payload["scope"])
        return retirement if home == path.parent else None
    if key in ctx.retired or key in ctx.lost or key in ctx.erased:
        # never republish a retired finding, an update that lost its race, or a finding an erase
        # record names (its file, if any, is deleted: ``move_aside``)
        return None
    return _fits(ctx, path)
