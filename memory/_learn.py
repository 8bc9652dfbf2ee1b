"""Learning journal-first: validate, stage, append, publish; and republishing a resumed run's commits."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import journal
from journal import JournalBackend, Record
from memory._errors import ArgumentInvalid, FindingInvalid, FindingRetired, Unjournaled, UnsupportedHeader
from memory._files import parse_learned, published_own
from memory._finding import (
    PAD,
    RETIRE_STREAM,
    REVISION_MAX,
    STREAM,
    Finding,
    check_key,
    checked_commit,
    commit_to_publish,
    finding_id,
    is_erased,
    learn_payload,
    render,
    retirements_in,
    supersede_in,
    validate,
)
from memory._publisher import Publisher, holds
from memory._results import Citation
from memory._retire import Located, Retirer, lists_heads, unknown
from memory._safe import named, regular_prefix
from memory._syncing import scan_journal
from staging import CodedError, OpenDir, failpoint

if TYPE_CHECKING:
    from memory._outcomes import Learned
    from memory._root import Root

RESTORED_KEPT_BYTES = 8 << 20
"""How many bytes of learned files the store open's walk may keep the commits of (``restore_missing``),
so that a resume of the run right after (``republish_run``) neither checks those commits again nor
reads back the files the walk has just written; past it they are checked and read as any other. A
kept commit takes about four times its file's size in memory, until its run's resume or the close."""


def _to_replace(final: Path, rec: Record, data: bytes) -> bool:
    """Whether the walk for lost files should publish ``data`` (the rendering of ``rec``) over what
    is at ``final``: a regular file that holds neither exactly ``data`` nor a newer commit of the
    finding (a power loss can tear a file whose bytes were written without fsync, and the record
    holds every byte it must hold). Anything else there (a link, a FIFO, a folder, a file that
    cannot be read) is left for ``flows check``."""
    held = regular_prefix(final, max(len(data) + 1, 1 << 20))
    if held is None or held == data:
        return False
    try:
        there = parse_learned(final, held)
    except CodedError:
        return True  # torn, or damaged: the record restores it
    committed = int(rec.payload["learnedMs"])
    ours = (there.citation.run_id, there.citation.id) == (rec.run_id, rec.id)
    return there.learned_ms < committed or (there.learned_ms == committed and ours)


def _newer_there(final: Path, rec: Record, at: OpenDir | None = None) -> bool:
    """Whether ``final`` is a regular file holding a commit of the same finding that another root
    run made later than ``rec`` (the one rule, ``commit_to_publish``: across runs the newest commit
    is the one published). A resume of an older root must leave such a file as it is. ``at``: its
    folder held open, which the file is read through."""
    if at is None:
        held = regular_prefix(final, 1 << 20)
    else:  # a learn's name is mostly not there yet: one look that raises nothing, then the read
        name = final.name
        held = regular_prefix(name, 1 << 20, dir_fd=at.fd) if named(name, dir_fd=at.fd) else None
    if held is None:
        return False
    try:
        there = parse_learned(final, held)
    except CodedError:
        return False  # torn or damaged: the record restores it
    if there.key != rec.payload["id"] or there.citation.run_id == rec.run_id:
        return False
    return (there.learned_ms, there.citation.run_id) > (int(rec.payload["learnedMs"]), rec.run_id)


_new_object = object.__new__
_LEARNED: list[type[Learned]] = []  # ``Learned``, imported by the first learn (a recall makes none)


def _learned(fid: str, record: Record, final: Path) -> Learned:
    """What ``learn`` returns for ``record``, the commit of ``fid`` published at ``final``.

    Equal to ``Learned(id=fid, citation=Citation(...), ...)``, made without the frozen dataclasses'
    ``__init__`` (keywords and one ``object.__setattr__`` per field) and without an ``import``
    statement per learn (each about as costly as the checks of a journal line)."""
    if not _LEARNED:
        from memory._outcomes import Learned  # not at import: a recall makes none of them

        _LEARNED.append(Learned)
    payload = record.payload
    memory = payload.get("memory")
    citation: Citation = _new_object(Citation)
    fields = citation.__dict__
    fields["run_id"], fields["stream"], fields["id"] = record.run_id, record.stream, record.id
    learned: Learned = _new_object(_LEARNED[0])
    fields = learned.__dict__
    fields["id"], fields["citation"], fields["path"] = fid, citation, final
    fields["learned_ms"] = int(payload["learnedMs"])
    fields["memory"] = memory if isinstance(memory, str) else None
    return learned


def scope_turn(scope: str) -> str:
    """The name of ``scope``'s turn among the hosts sharing a journal (``MemoryStore._hosts_turn``):
    an update holds it, a plain learn's commit holds it shared (``Learner.learn``)."""
    return f"memory-scope:{scope}"


_NAMES_MEMORY = '"memory"'
"""The token of a commit that names its memory (``learn_payload``): what a plain learn on a journal
hosts share asks the append to look for in other runs' commits of its key (``_append``)."""


def _append(root: Root, payload: Mapping[str, Any], fid: str, turn: str | None) -> Record:
    """Commit ``payload`` under ``fid`` to the root's ``memory-learn`` stream; with ``turn`` (a
    journal hosts share), holding that turn among them shared while it commits. A plain learn's
    commit there (one that names no memory) is made unless another run's commit of the key names
    one: that commit is returned instead (its ``run_id`` is not the root's), and nothing appended
    (``_version_elsewhere``)."""
    if turn is None:
        return root.journal.append(root.lease, STREAM, payload, key=fid)
    append: Callable[..., Record] = root.journal.append
    if "memory" in payload or "supersedes" in payload:
        return append(root.lease, STREAM, payload, key=fid, turn=turn)
    return append(root.lease, STREAM, payload, key=fid, turn=turn, unless_elsewhere=_NAMES_MEMORY)


def _commit(
    root: Root,
    expected: Record,
    fid: str,
    turn: str | None,
    *,
    stage: tuple[Any, bytes],
    restage: Callable[[bytes], Any],
) -> tuple[Record, Record, Any, bytes]:
    """Append ``expected``, its file staged already (``stage``: the stage and its bytes), as
    ``_append`` does; when another host's commit of the key names the key's memory, the file is
    staged again (``restage``) and the commit made naming it (``_version_elsewhere``). The commit,
    what it was meant to be, its stage and the stage's bytes (the caller discards that stage on an
    error)."""
    staged, data = stage
    record = _append(root, expected.payload, fid, turn)
    if record.run_id == root.run_id:
        return record, expected, staged, data
    staged.discard()
    expected = _version_elsewhere(record, root, expected, fid)
    data = render(expected)
    staged = restage(data)
    try:
        append: Callable[..., Record] = root.journal.append
        return append(root.lease, STREAM, expected.payload, key=fid, turn=turn), expected, staged, data
    except BaseException:
        staged.discard()
        raise


def _version_elsewhere(record: Record, root: Root, expected: Record, fid: str) -> Record:
    """What a plain learn commits when ``record``, another run's commit of its key (another host's
    update, say), may name the key's memory: ``expected`` naming that memory (learning what a
    memory's version holds is that version again, as ``Learner._memory_of_live`` keeps it on one
    host), or ``expected`` itself when it names none (matched by an escape alone).

    Raises:
        JournalCorrupt: ``record`` is not a commit of the exact shape.
    """
    checked_commit(record, root.journal.location)
    named = record.payload.get("memory")
    if not isinstance(named, str) or named == fid:
        return expected
    again = _new_object(Record)
    again.__dict__.update(expected.__dict__)
    again.__dict__["payload"] = {**expected.payload, "memory": named}
    return again


class Learner:
    """Learns findings through ``publisher``, stamping new commits with ``clock``.

    Remembers, per journal backend and folder, whether an append can make a stage in that folder
    durable, and, per resumed root run, the commits ``republish_run`` read.
    """

    def __init__(self, publisher: Publisher, retirer: Retirer, clock: Callable[[], int]) -> None:
        self._publisher = publisher
        self._retirer = retirer
        self._clock = clock
        # run id -> (scope, finding id) -> its commit, as republish_run read them (resumed roots)
        self._committed: dict[str, dict[tuple[str, str], Record]] = {}
        # while a store open walks runs (``one_scan``): the journal's retirements, once scanned
        self._walk: list[dict[str, Record]] | None = None
        # run id -> record id -> each commit the walk checked and published a file of (durably),
        # up to RESTORED_KEPT_BYTES of files in all: what a resume of the run need not do again
        self._restored: dict[str, dict[str, Record]] = {}
        self._restored_bytes = 0
        # told (memory id, key, scope) of each version a learn wrote or found committed, so the
        # next lookup of that memory's live version reads one file instead of walking the folders
        self.on_learned: Callable[[tuple[str, str, str]], None] = lambda version: None
        # told each commit a learn appended or found (``Citations.committed``)
        self.on_committed: Callable[[Record], None] = lambda record: None
        # The journal, when hosts share it (set by the store; None on a journal of one host): a
        # plain learn's commit holds its scope's turn among them shared (``scope_turn``), and an
        # update asks it whether another host's learn holds the key it would take. A host's learn
        # and another host's update to the same content are then never both answered with one key
        # as two memories: the learn commits before the update looks, or waits until it has.
        self.hosts_journal: Callable[[], JournalBackend | None] = lambda: None
        # told the commit of each new version an update (a supersede) made live
        self.on_updated: Callable[[Record], None] = lambda record: None

    def learn(
        self,
        finding: object,
        root: Root | None,
        supersedes: str | None = None,
        *,
        live: tuple[Finding, Located] | None = None,
        keyed: tuple[int, str] | None = None,
    ) -> Learned:
        """See ``MemoryStore.learn``. ``live``: ``finding`` validated, and where the live version
        ``supersedes`` names is, as an update has just read them in that version's scope's turn,
        which it holds (not looked for again). ``keyed``: a revision and the key ``finding_id``
        gives the validated finding at it in the root's scope, as the update has just computed it
        (not hashed again by ``_revision``)."""
        if root is None:
            raise Unjournaled("learn needs a root run to journal into; run the flow with `flows run`")
        if not root.script:
            raise UnsupportedHeader(
                f"flow {root.flow!r} declares memory.script: false, so it cannot learn", run_id=root.run_id
            )
        item = validate(finding, default_source=root.source or root.flow) if live is None else live[0]
        known = (item, root) if live is None or keyed is None else (item, root, keyed)
        if supersedes is None:
            # A plain learn holds a share of its scope's turn from its look at the key to its
            # publish: no update of the scope is between its own look and its publish meanwhile,
            # so the key this learn looks at is not taken by another memory's new version after
            # the look (both would then be answered with one key, and one of them lost)
            share = self._publisher.take_share(root.scope, root.run_id)
            try:
                # (not when this thread holds the scope's turn already: an update's, among the
                # hosts too, which its own commit would wait for)
                shared = share[1] != -1 and self.hosts_journal() is not None
                turn = scope_turn(root.scope) if shared else None
                return self._learn_version(item, root, None, self._revision(*known), None, turn=turn)
            finally:
                self._publisher.drop_share(share)
        if live is not None:  # an update, which read ``live`` in the turns it holds
            keys = self._revision(*known, versioning=(supersedes, live[1]))
            old = self._replaced(keys[1], supersedes, root.scope, live[1])
            return self._learn_version(item, root, supersedes, keys, old)
        # Updates of one scope's versions take turns, from the look at the version they replace
        # to its retired file (and, when another retirement came first, the new version's own
        # forget): no update reads, or builds on, a version that another has already replaced or
        # that is about to lose its race, so one memory never splits into two lines. The new
        # version's key is looked at in the turn of the scope it goes to as well, where no plain
        # learn is between its look and its publish (``update_turns``).
        # (refused before any turn is taken, as nothing is written: an unknown or malformed key,
        # or the key this learn takes; both are looked at again in the turns)
        ahead = self._revision(*known, versioning=(supersedes, None))
        first = self._replaced(ahead[1], supersedes, root.scope)
        scopes = {root.scope} if first is None else {root.scope, first.scope}
        with self._publisher.update_turns(scopes, root.run_id):
            keys = self._revision(*known, versioning=(supersedes, None))
            old = self._replaced(keys[1], supersedes, root.scope)
            if keys[2] is not None or old is None:  # a resumed body's replay: nothing newer to look for
                return self._learn_version(item, root, supersedes, keys, old)
            with self._publisher.update_turn(old.scope, root.run_id):  # held, unless it moved
                # a retirement seen before stands; one published since is looked for again here
                now = old.retired or self._retirer.published_retirement(supersedes, old.scope)
                return self._learn_version(item, root, supersedes, keys, replace(old, retired=now))

    def _learn_version(
        self,
        item: Finding,
        root: Root,
        supersedes: str | None,
        keyed: tuple[int, str, Record | None, str],
        old: Located | None,
        *,
        turn: str | None = None,
    ) -> Learned:
        """``learn`` once the version ``supersedes`` names is found (``old``), under its scope's lock
        when it is an update of it; ``keyed``: the revision, key, replayed commit and the key's
        retired name (``_revision``); ``turn``: the turn among the hosts its commit holds shared."""
        revision, fid, replayed, retired = keyed
        if old is not None and old.retired is not None and old.retired.by != fid and replayed is None:
            # the finding it replaces was forgotten or replaced by another meanwhile: learning this
            # one would bring back what that retirement took away
            raise FindingRetired(
                f"{supersedes} was retired before this supersede ("
                + (
                    f"forgotten: {old.retired.reason}"
                    if old.retired.by is None
                    else f"superseded by {old.retired.by}"
                )
                + "); nothing was written: read the memory again and decide on its current version",
                key=str(supersedes),
            )
        pub = self._publisher
        directory = pub.scope_dir(root.scope)
        final = directory / f"{fid}.json"
        if replayed is not None:
            record = replayed
            learned = _learned(fid, replayed, final)
        else:
            # one look at the learned name serves a plain learn twice: here, and in ``_learn``
            # (another learn of the key publishing it in between is answered the same either way:
            # the keyed append hands back the commit that came first)
            there = named(final)
            if old is not None:
                memory = old.memory or supersedes
            else:
                memory = self._memory_of_live(fid, root.scope) if there else None
            # The commit retires the version it supersedes: one record and one flush, and no crash
            # leaves the new version committed with the old one live (on a journal hosts share,
            # they learn of it from the heads of the commits' stream, ``SharedRetirements``)
            one = old is not None and old.retired is None
            settled: list[Record] = []
            kept: list[str] = []  # the replaced version, when this settle retired it (its file stays)
            held: list[Any] = []  # the new version's folder, held open by its stage
            # the update's two files (its new version's and the old one's retired file) take the
            # mode the DB has as the update begins: one look, not one per file
            mode = pub.file_mode() if one else None

            def settle(commit: Record, at: Any) -> None:
                # The version replaced is retired before the new one is renamed into place, so that
                # no reader (a process of this host that reads the retired files, not the journal)
                # and no kill in between ever finds the two versions live at once. Its learned file
                # stays until the new one is in place: a kill in between leaves it beside its
                # retired file, where a read that meets it publishes the new version from this
                # commit (``Syncer.publish_successor``), so no kill leaves the memory with neither
                view = supersede_in(commit)
                if old is None or supersedes is None or view is None or view.payload["id"] != supersedes:
                    return
                settled.append(commit)
                held.append(at)
                published = self._retirer.settle_supersede(view, root, keep_file=True, mode=mode)
                if published is not None:
                    kept.append(supersedes)
                self._refuse_if_retired(root, supersedes, old.scope, fid, published)

            learned, record = self._learn(
                fid,
                item,
                root,
                directory,
                final,
                retired=retired,
                revision=revision,
                memory=memory,
                supersedes=supersedes if old is not None else None,
                supersedes_scope=old.scope if one and old is not None else None,
                settle=settle if one else None,
                mode=mode,
                there=there,
                turn=turn,
            )
            if settled:
                self.on_updated(record)
                if kept and old is not None:  # the replaced version's file, kept by the settle until now
                    # in the folder the new version was just renamed into (held open by its stage:
                    # not looked at again), when it is that one
                    at = held[0] if old.scope == root.scope else None
                    pub.remove_in(pub.scope_dir(old.scope), f"{kept[0]}.json", root.run_id, at)
                old = None  # settled before the publish, above
        if old is not None and supersedes is not None and old.retired is None:
            # a commit ``_learn`` returns is this attempt's own or one it checked; a replayed one
            # is checked here
            if replayed is None:
                view = supersede_in(record)
            else:
                view = next(iter(retirements_in(record, root.journal.location)), None)
            if view is not None and view.payload["id"] == supersedes:
                published = self._retirer.settle_supersede(view, root)
                self._refuse_if_retired(root, supersedes, old.scope, fid, published)
            else:
                self._finish_supersede(root, supersedes, old.scope, fid)
            self.on_updated(record)
        self.on_committed(record)
        self.on_learned((learned.memory_id, fid, root.scope))
        return learned

    def _finish_supersede(self, root: Root, old: str, scope: str, fid: str) -> None:
        """Retire ``old`` as superseded by ``fid``, just committed, with a record of its own; then
        ``_refuse_if_retired``."""
        now = self._retirer.locate(old, scope)
        if now is None or now.retired is None or now.retired.by == fid:
            self._retirer.retire(root, old, scope, reason=None, by=fid, lazy=True)
        self._refuse_if_retired(root, old, scope, fid)

    def _refuse_if_retired(
        self, root: Root, old: str, scope: str, fid: str, published: bytes | None = None
    ) -> None:
        """When another process or host retired ``old`` between the look before ``fid``'s commit
        and now (a delete racing this update), that retirement stands and ``fid`` must not outlive
        it: ``fid`` is forgotten too and the supersede is refused (``FindingRetired``), as if it had
        come a moment later. ``published``: the retired file this update wrote for ``old``, which
        answers at once while it is still there, unchanged."""
        if published is not None and self._retirer.still_ours(old):
            return
        now = self._retirer.retirement(old, scope)
        if now is None or now.by == fid:
            return
        what = f"forgotten: {now.reason}" if now.by is None else f"superseded by {now.by}"
        self._retirer.retire(
            root,
            fid,
            root.scope,
            reason=f"{old} was retired while this version of it was written ({what})",
            by=None,
        )
        raise FindingRetired(
            f"{old} was retired while this supersede was written ({what}); the new version {fid} was "
            "forgotten with it: read the memory again and decide on its current version",
            key=old,
        )

    def _revision(
        self,
        item: Finding,
        root: Root,
        keyed: tuple[int, str] | None = None,
        *,
        versioning: tuple[str | None, Located | None] = (None, None),
    ) -> tuple[int, str, Record | None, str]:
        """The revision and key a learn of ``item`` takes, the commit that answers it when it is a
        resumed body's replay of a learn made before its key was retired, and the key's retired
        name (``Retirer.retired_path``: looked at here, and again after the learn's publish).

        A finding's key is retired for good. Learning the finding again is a new memory: it takes
        the first revision whose key is not retired (``finding_id``). One exception keeps a resumed
        body from bringing back what was forgotten: when this root run committed the retired key
        itself and the retirement was made before this attempt of the run began (and not by it),
        the learn is the replay of that commit and is answered with it, publishing nothing.

        ``versioning``: the key a supersede (an update) replaces, and where it is when the caller
        has read it. A new version whose key another memory's finding holds here (an update to
        the content another memory's live version has) takes the next revision as well: a key is
        one memory's, so the other memory keeps its identity, its history and its content.
        """
        revision = 0
        while True:
            # ``keyed``: the caller's ``finding_id`` of ``item`` at one revision, in this scope
            known = keyed is not None and keyed[0] == revision
            fid = keyed[1] if keyed is not None and known else finding_id(root.scope, item, revision)
            path = self._retirer.retired_path(root.scope, fid)
            elsewhere = self._retirer.shared.current().get(fid)
            here = named(path)  # (``os.path.lexists``, without an exception for the missing name)
            if not here and elsewhere is None:
                if not self._of_another_memory(fid, root.scope, *versioning):
                    return revision, fid, None, path
                held = True  # by another memory's finding
            elif not here:  # forgotten by another host
                held = False
            else:
                retired = self._retirer.read_checked(path)  # a forged one never moves a learn's key
                if root.begun and self._retirer.before_attempt(root, retired):
                    existing = root.journal.find(root.run_id, STREAM, fid)
                    if existing is not None:
                        return revision, fid, existing, path
                held = False
            if revision == REVISION_MAX:
                why = "is held by {} other memories or retirements" if held else "was retired {} times"
                raise FindingRetired(
                    f"finding {fid} {why.format(REVISION_MAX)}; learn it with other text, metadata or scope",
                    key=fid,
                    path=path,
                )
            revision += 1

    def _memory_of_live(self, fid: str, scope: str) -> str | None:
        """The memory a plain learn of ``fid`` commits a version of: the memory of the finding
        whose learned file this host holds under that key (a version an update wrote) when it is
        not its own, else None. Learning what a memory's live version holds is that version
        again: the commit keeps the memory id, so the file it publishes over the version's reads
        as the same memory. A learn never opens the DB: a version synced into it keeps its memory
        in its row (``HistoryDB.upsert`` never replaces a row's memory id with none)."""
        holder = self._retirer.held_memory(fid, scope, db=False)
        return holder if holder != fid else None

    def _of_another_memory(
        self, fid: str, scope: str, supersedes: str | None, target: Located | None
    ) -> bool:
        """Whether ``fid``, the key a new version of the memory ``supersedes`` is a version of would
        take, is held here (a learned file in ``scope``, or a DB row) by a finding of another
        memory. False for a plain learn (learning what is there answers with it), for the key
        superseded itself (refused by ``_replaced``) and for a version of the same memory (a
        resumed body's replay of its own update).

        On a journal hosts share, a key this host holds no finding of is looked for in every run's
        commits as well (``keyed_anywhere``: one indexed query): another host's learn that this host
        has not synced yet holds it as much. The update holds the scope's turn among the hosts
        here, which that learn's commit holds shared (``scope_turn``), so a learn committed after
        this look commits after the update's own commit too, and finds the key taken."""
        if supersedes is None or fid == supersedes:
            return False
        # an update (``target`` given) has just looked for the DB as it read that version
        holder = self._retirer.held_memory(fid, scope, db_looked=target is not None)
        holders = {holder} if holder is not None else self._held_by_hosts(fid)
        if not holders:
            return False
        if target is None:
            target = self._retirer.locate(supersedes, scope)
        if target is None or (target.retired is not None and target.retired.by == fid):
            return False  # unknown (refused by ``_replaced``), or replaced by this very key: a replay
        return bool(holders - {target.memory or supersedes})

    def _held_by_hosts(self, fid: str) -> set[str]:
        """The memories whose commits of ``fid`` the journal hosts share holds, in any run (a
        commit names its memory, or is its memory's first version); empty on a journal of one host.
        A record is untrusted: a memory that is not a string is taken as the key's own."""
        backend = self.hosts_journal()
        if backend is None:
            return set()
        keyed = backend.keyed_anywhere(STREAM, fid)  # type: ignore[attr-defined]
        return {m if isinstance(m := rec.payload.get("memory"), str) else fid for rec in keyed}

    def _replaced(
        self, fid: str, supersedes: str | None, scope: str, known: Located | None = None
    ) -> Located | None:
        """Where the finding that ``supersedes`` names is (None when it names none; ``known`` when
        the caller has just found it; else looked for in ``scope``, the learn's, first); raises
        before anything is written when it is malformed, unknown, or the finding being learned."""
        if supersedes is None:
            return None
        check_key(supersedes, "supersedes")
        if supersedes == fid:
            raise ArgumentInvalid(
                f"supersedes names the finding being learned ({fid}); a finding cannot replace itself"
            )
        old = known if known is not None else self._retirer.locate(supersedes, scope)
        if old is None:
            raise unknown(supersedes, "the key that supersedes names,")
        return old

    def _learn(
        self,
        fid: str,
        item: Finding,
        root: Root,
        directory: Path,
        final: Path,
        *,
        retired: str,
        revision: int,
        memory: str | None = None,
        supersedes: str | None = None,
        supersedes_scope: str | None = None,
        settle: Callable[[Record, Any], None] | None = None,
        mode: int | None = None,
        there: bool | None = None,
        turn: str | None = None,
    ) -> tuple[Learned, Record]:
        """Stage, commit and publish one version (see ``MemoryStore.learn``). ``settle``, for a
        fresh commit, is called with it and the folder its stage holds open (``OpenDir``) after the
        commit and before the rename: an update's retirement of the version it replaces (an error
        there discards the stage, publishing nothing). ``mode``: the file's mode, taken by the
        caller (``Publisher.stage``). ``there``: whether ``final`` was there when the caller looked
        a moment ago (looked at here when not given)."""
        pub = self._publisher
        # Only a finding whose file is already there can have been committed and published (a
        # resumed body's re-learn): look it up then. Otherwise the keyed append below returns a
        # commit that raced ahead of this one, and its bytes are what get published.
        there = named(final) if there is None else there
        existing = root.journal.find(root.run_id, STREAM, fid) if there and root.begun else None
        if existing is not None:
            self._check(root, existing, fid)
        if existing is None:
            payload = learn_payload(
                fid,
                root.scope,
                root.flow,
                item,
                self._clock(),
                revision=revision,
                memory=memory,
                supersedes=supersedes,
                supersedes_scope=supersedes_scope,
            )
            # ``Record(run, STREAM, 0, id, fid, 0, payload)``, without the frozen dataclass's
            # ``__init__``: the commit this learn expects, for its rendering and the compare
            expected = _new_object(Record)
            fields = expected.__dict__
            fields["run_id"], fields["stream"], fields["seq"] = root.run_id, STREAM, 0
            fields["id"] = journal.record_id(root.run_id, STREAM, fid)
            fields["key"], fields["ts_ms"], fields["payload"] = fid, 0, payload
        else:
            expected = existing
        data = render(expected)
        if existing is not None and (holds(final, data) or _newer_there(final, existing)):
            # Committed and published already (a resumed body), or a newer commit of the finding by
            # another run is what the file holds (and keeps): make sure the name is durable, in case
            # the publish that made it died before its directory fsync, and say so.
            if not pub.durable(final):
                pub.sync_dir(directory, root.run_id)
            return _learned(fid, existing, final), existing
        # The record holds every byte the file will: once it is durable, the file is derived state
        # that the store's next open, a resume or ``sync`` can write again from it. So the one device
        # flush of a learn is the journal's own sync of its log, and the stage is written without
        # fsync; its bytes are made durable with its name, later (``flush_names``). With a journal
        # elsewhere (another file system, PostgreSQL) the stage is synced first, as before: the
        # power-loss model proves the unsynced stage with a file journal on the store's own disk.
        loose = existing is None and self._publisher.shares_filesystem(root.journal, directory)
        staged = pub.stage(directory, data, root.run_id, sync=not loose, mode=mode)
        try:
            if existing is not None:
                record = existing
            else:
                again = partial(pub.stage, directory, run_id=root.run_id, sync=not loose, mode=mode)
                record, expected, staged, data = _commit(
                    root, expected, fid, turn, stage=(staged, data), restage=again
                )
        except BaseException:
            staged.discard()
            raise
        own = existing is None and record.payload == expected.payload  # a fresh commit of this attempt
        try:
            self._after_commit(root, record, fid, staged, fresh=existing is None, own=own)
        except BaseException:
            # the commit stands (a resume or the store's next open publishes it); its stage goes,
            # not left behind for `flows check` (a shared journal's look can fail here, say)
            staged.discard()
            raise
        # Another attempt committed first: publish its bytes. (A record under this key has this
        # run, stream and id: an equal payload renders to ``data``, and is not rendered again.)
        if record is not expected and record.payload != expected.payload and render(record) != data:
            staged.discard()
            self._check(root, record, fid)
            staged = pub.stage(directory, render(record), root.run_id)  # synced
            loose = False
        if settle is not None and existing is None:
            _settle_or_discard(settle, record, staged)
            # the version replaced is retired and this one not yet in place: a reader here sees
            # neither (what a put that replaces an item looks again for, ``JournalStore._put``)
            failpoint("memory.after_retire_replaced")
        # The record is durable: the name (and, with ``loose``, the file's bytes) may be too, later
        # (``flush_names``: a run's end, a session's flush or close, a group of learns); a power
        # loss before then loses only the name or tears the file, which the store's next open, a
        # resume or ``sync`` publish again from the record.
        try:
            self._publish_unless_newer(
                staged, record, final, root.run_id, loose=loose, own=data if own else None, folder=directory
            )
        except BaseException:
            # an erase that retired the key since the look removes hidden stages of it, this one
            # too: its commit is this learn's to erase before the failure is told
            self._remove_if_retired(root, record if existing is None else None, fid, retired, None)
            raise
        # A forget of this finding may have raced this learn: it committed after the check above,
        # and its retired file is there now. The forget wins; the file goes. (The forget, having
        # published its retired file first, removes this file itself if it looks after the rename.)
        self._remove_if_retired(root, record if existing is None else None, fid, retired, final)
        return _learned(fid, record, final), record

    def _after_commit(
        self, root: Root, record: Record, fid: str, staged: Any, *, fresh: bool, own: bool
    ) -> None:
        """What follows the commit ``record`` before its publish: note a commit of this attempt
        (``own``); when this learn appended it (``fresh``) and another host retired ``fid`` after
        ``_revision`` looked, ``_unless_erased``."""
        if own:
            self._retirer.noted(root, committed_ms=int(record.payload["learnedMs"]))
        failpoint("memory.after_append")
        if fresh and not is_erased(record) and self._retired_elsewhere(root, fid):
            # retired on another host after ``_revision`` looked: when by an erase, this commit
            # holds erased text (a retirement on this host is looked for once the file is placed)
            self._unless_erased(root, record, fid, staged)

    def _remove_if_retired(
        self, root: Root, fresh: Record | None, fid: str, retired: str, final: Path | None
    ) -> None:
        """Remove ``final`` (when given) if ``fid`` has a retired file here now (a forget that raced
        the learn wins), after ``_unless_erased`` when this learn appended ``fresh`` itself."""
        if not named(retired):
            return
        if fresh is not None and not is_erased(fresh):
            self._unless_erased(root, fresh, fid, None, final)
        if final is not None:
            self._publisher.remove(final, root.run_id)

    def _retired_elsewhere(self, root: Root, fid: str) -> bool:
        """Whether, on a journal hosts share, ``fid`` is retired now by a retirement any host
        committed (one query of the retirement stream's heads); False on a file journal."""
        return lists_heads(root.journal) and self._retirer.shared.current().get(fid) is not None

    def _unless_erased(
        self, root: Root, record: Record, fid: str, staged: Any, final: Path | None = None
    ) -> None:
        """When an erase names ``fid``, whose commit ``record`` (of this root run) was appended
        after the learn looked for its retirement and found none, and so after that erase's forget:
        the erase may have returned already, and must not be undone by this commit. The stage
        (``staged``) or the published file (``final``) goes at once, its folder fsync'd, then the
        commit is rewritten as a tombstone (the run's holder may) and the learn is refused
        (``FindingRetired``). A kill before the rewrite leaves the commit to ``flows check``
        (``erase_incomplete``) and ``--repair``. Returns when no erase names ``fid``."""
        from memory._erase import audits, audits_after, tombstone  # not at import: only a learn that raced

        backend = root.journal
        # on a journal hosts share, only the runs holding erase records are read (their heads)
        found = audits_after(backend, {}) if lists_heads(backend) else audits(backend)
        if not any(fid in rec.payload["keys"] for rec in found):
            return
        pub = self._publisher
        if staged is not None:
            staged.discard()
        if final is not None:
            pub.remove_many([final], root.run_id, now=True)
        pub.sync_dir(pub.scope_dir(root.scope), root.run_id)
        backend.rewrite_payloads(
            record.run_id, record.stream, {record.seq: tombstone(record.payload)}, pad=PAD, lease=root.lease
        )
        raise FindingRetired(
            f"finding {fid} was erased while this learn was written; its commit was erased too and "
            "nothing is published: learn it again to start a new memory",
            key=fid,
        )

    def _publish_unless_newer(
        self,
        staged: Any,
        record: Record,
        final: Path,
        run_id: str,
        *,
        loose: bool,
        own: bytes | None = None,
        folder: Path | None = None,
    ) -> None:
        """Rename ``staged`` (the rendering of ``record``) to ``final``, unless ``final`` holds a
        newer commit of the finding by another run. Another process may publish one at the same
        moment: the compare and the rename happen under the folder's lock, so the newer commit is
        the one left in place whichever renames last (``commit_to_publish``). ``own``: the bytes of
        a fresh commit of this learn, noted once renamed (``published_own``: its next read, a
        sync's, takes it without a parse). ``folder``: ``final``'s folder (``Publisher.scope_dir``)."""
        pub = self._publisher
        folder = final.parent if folder is None else folder
        lock = pub.lock_folder(folder, run_id, staged.at)  # ``folder_lock``, without a generator
        try:
            newer = _newer_there(final, record, staged.at)
            if newer:
                staged.discard()
            else:
                pub.publish(staged, final, run_id, sync=False)
        finally:
            pub.unlock_folder(lock)
        if not newer:
            pub.renamed_lazily(final, run_id, loose=loose, folder=folder)
            if own is not None:
                published_own(final, own, record)

    @staticmethod
    def _check(root: Root, record: Record, fid: str) -> None:
        """A commit the journal handed back for ``fid`` is this finding's, of the exact shape, in
        this root's scope: only then are its bytes published (``JournalCorrupt`` otherwise)."""
        if is_erased(record):
            raise FindingRetired(f"finding {fid} was forgotten and erased; nothing is published", key=fid)
        checked_commit(record, root.journal.location)
        if record.payload["id"] != fid or record.payload["scope"] != root.scope:
            raise journal.JournalCorrupt(
                f"record {record.id!r} (line {record.seq}) of stream {record.stream} of root run "
                f"{record.run_id} in the journal {root.journal.location} is keyed by finding {fid} but "
                "commits another finding; nothing is published from it. Restore the journal from a backup",
                path=root.journal.location,
                line=record.seq,
                reason="the record is not the finding its key names",
                run_id=record.run_id,
                stream=record.stream,
            )

    def _commits(
        self, backend: JournalBackend, run_id: str, checked: Mapping[str, Record] | None = None
    ) -> tuple[dict[tuple[str, str], Record], list[Record]]:
        """The commit to publish of each finding ``run_id`` learned, by (scope, finding id), once
        the run's own retirements have their retired files (so none of the findings they retire
        comes back); and those retirements. ``checked``: commits checked already, by record id (a
        record equal to one of them is that record, and its checks are a function of it alone)."""
        committed: dict[tuple[str, str], Record] = {}
        retirements: list[Record] = []
        for rec in backend.read(run_id, STREAM):
            # checked before any path is built from it; an update's commit (erased or not) retires
            # the version it supersedes
            if checked is not None and checked.get(rec.id) == rec:
                view = supersede_in(rec)
                retirements += [] if view is None else [view]
            else:
                retirements += retirements_in(rec, backend.location)
            if is_erased(rec):
                continue
            key = (rec.payload["scope"], rec.payload["id"])
            committed[key] = commit_to_publish(committed.get(key), rec)
        retirements += [  # checked before a retired file's path is built
            view
            for rec in backend.read(run_id, RETIRE_STREAM)
            for view in retirements_in(rec, backend.location)
        ]
        self._retirer.publish_missing(retirements, torn=True)  # a lazily named one may be torn
        return committed, retirements

    def _not_retired(
        self,
        backend: JournalBackend,
        wanted: list[tuple[Path, bytes]],
        run_id: str,
        retirements: list[Record],
    ) -> list[tuple[Path, bytes]]:
        """``wanted`` without the findings a retirement anywhere in the journal retired: a forget
        committed elsewhere whose retired file a crash never published must not let a run bring the
        finding back (those retired files are published here). ``retirements``: those of ``run_id``,
        just read and checked, which the journal's scan takes as given."""
        if not wanted:
            return wanted
        walk = self._walk
        if walk is not None and walk:
            retired = walk[0]  # scanned, and its retired files published, for an earlier run
        else:
            retired = scan_journal(backend, learns=False, known={run_id: retirements}).retired
            self._retirer.publish_missing(retired.values())
            if walk is not None:
                walk.append(retired)
        return [(final, data) for final, data in wanted if final.stem not in retired]

    @contextlib.contextmanager
    def one_scan(self) -> Iterator[None]:
        """Within it (the walk a store open makes over the runs that did not end cleanly), the
        journal-wide scan for retirements that ``restore_missing`` makes before it publishes is made
        once, at the first run with something to publish, and reused for every later run: a scan
        per run cost the walk the whole journal once for each run that lost a name. Not
        thread-safe: for the store's open, before any other thread uses the store."""
        self._walk = []
        try:
            yield
        finally:
            self._walk = None

    def restore_missing(
        self, backend: JournalBackend, run_id: str, held: Callable[[list[str]], Container[str]]
    ) -> int:
        """Publish the file of each finding ``run_id`` committed whose file is missing, torn or
        damaged, or holds an older commit of it (``_to_replace``), unless it is retired or (a
        missing file) the history DB holds it (``held(keys)`` returns the keys it holds); returns
        how many. Anything but a regular file in its place is left for ``flows check``. The check a
        store open makes for runs that did not end cleanly.
        """
        pub = self._publisher
        wanted: list[tuple[Path, bytes]] = []
        sources: dict[Path, Record] = {}  # the commit of each file in wanted
        missing: list[str] = []
        committed, retirements = self._commits(backend, run_id)
        for (scope, fid), rec in committed.items():
            final = pub.scope_dir(scope) / f"{fid}.json"
            if os.path.lexists(self._retirer.retired_path(scope, fid)):
                continue
            if self._retirer.lost(rec):  # an update that died before it saw it lost: it never lived
                pub.remove(final, run_id)
                continue
            data = render(rec)
            if not os.path.lexists(final):
                missing.append(fid)
                wanted.append((final, data))
            elif _to_replace(final, rec, data):
                wanted.append((final, data))
            else:
                continue
            sources[final] = rec
        if missing:
            # A missing file the DB holds was synced, not lost. A file that is there but torn is
            # written again either way (a copy the DB also holds is what the next sync drops).
            kept = held(missing)
            wanted = [(final, data) for final, data in wanted if final.stem not in kept]
        wanted = self._not_retired(backend, wanted, run_id, retirements)
        pub.publish_batches(wanted)
        self._keep_restored(run_id, [(sources[final], len(data)) for final, data in wanted])
        return len(wanted)

    def _keep_restored(self, run_id: str, published: list[tuple[Record, int]]) -> None:
        """Keep the commits of the files ``restore_missing`` just published durably for ``run_id``
        (each with its file's size), unless they would pass ``RESTORED_KEPT_BYTES`` with what is kept
        already."""
        size = sum(n for _, n in published)
        if not published or self._restored_bytes + size > RESTORED_KEPT_BYTES:
            return
        self._restored.setdefault(run_id, {}).update((rec.id, rec) for rec, _ in published)
        self._restored_bytes += size

    def republish_run(self, backend: JournalBackend, run_id: str) -> int:
        """See ``MemoryStore.republish_run``."""
        # The run's own forgets and supersedes first, so none of its findings they retire returns.
        # The commits the store open's walk checked and published files of are not checked again.
        walked = self._restored.pop(run_id, None)
        committed, retirements = self._commits(backend, run_id, walked)
        pub = self._publisher
        wanted: list[tuple[Path, bytes]] = []
        intact: list[Path] = []
        for (scope, fid), rec in list(committed.items()):
            final = pub.scope_dir(scope) / f"{fid}.json"
            if os.path.lexists(self._retirer.retired_path(scope, fid)) or self._retirer.lost(rec):
                pub.remove(final, run_id)  # retired, or an update that lost: no place (a crash left it)
                del committed[(scope, fid)]
                continue
            if walked is not None and walked.get(rec.id) == rec and pub.durable(final):
                continue  # the walk has just published its bytes durably: not read back (the body's
                # re-learn reads them before it is answered from them, ``republished``)
            data = render(rec)
            if holds(final, data) or _newer_there(final, rec):
                intact.append(final)  # a newer commit by another run stays: newest across runs wins
            else:
                wanted.append((final, data))
        wanted = self._not_retired(backend, wanted, run_id, retirements)
        pub.publish_batches(wanted)
        # Files already in place may be names a crashed publish never made durable: one fsync of
        # each of their folders settles them all.
        for directory in dict.fromkeys(final.parent for final in intact):
            pub.sync_dir(directory, run_id)
        pub.mark_durable(intact)
        self._committed[run_id] = committed
        return len(wanted)

    def republished(self, finding: object, root: Root | None) -> Learned | None:
        """A resumed body's re-learn of a finding ``republish_run`` found committed and whose file
        this store published durably and still holds its bytes: answered without a journal read,
        an executor hop or a write. None in every other case (``learn`` then decides)."""
        if root is None or not root.script or not root.begun:
            return None
        known = self._committed.get(root.run_id)
        if not known:
            return None
        try:
            fid = finding_id(root.scope, validate(finding, default_source=root.source or root.flow))
        except FindingInvalid:
            return None
        rec = known.get((root.scope, fid))
        if rec is None:
            return None
        final = self._publisher.scope_dir(root.scope) / f"{fid}.json"
        if not self._publisher.durable(final) or not holds(final, render(rec)):
            return None
        return _learned(fid, rec, final)


def _settle_or_discard(settle: Callable[[Record, Any], None], record: Record, staged: Any) -> None:
    """``settle(record, staged.at)`` before ``staged`` is published; on an error the stage goes,
    unpublished."""
    try:
        settle(record, staged.at)
    except BaseException:
        staged.discard()
        raise
