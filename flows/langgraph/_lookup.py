"""How a write of ``JournalStore`` finds its item's live versions: the memory's read, made cheap for
a scope folder this process keeps writing.

A put reads its item's live versions before it learns (to supersede the newest, to keep its
creation time) and, for a new item, looks again after its commit (racing creators,
``JournalStore._put``). The memory's ``recall`` answers exactly, but a folder a store keeps writing
is always fresh: its mtime cannot vouch for a listing (clocks are coarse), so each such read looks
at every unsynced file again and reads again each one written in the last seconds. ``WriteLookup``
answers the same question from what cannot be stale:

* the scope folder's names, listed on every lookup (no clock is trusted). A learned file is named
  after its finding's key (a digest of what it holds) and is only ever published, dropped, or
  replaced by a commit of that same finding, so which item a name holds is learned once: from this
  store's own learn for the versions it wrote, else by reading the file (another process's);
* then the history DB, in one snapshot, for the item's rows (the memory's metadata index). Sync
  commits rows before it drops their files, so a file gone since the listing is a row there, as in
  the memory's own reads; a file whose key the DB holds is read from the DB, as there too;
* a file of the item that this store did not publish, a version with an expiry, a version with a
  retired file that this store did not retire, and a file that does not read, are left to the
  memory's full read (the lookup answers None): whether a file was journaled, whether a retirement
  stands, whether a clock has passed, and how damage fails are the memory's to say. So two
  processes writing one item read it the memory's way; a file another process wrote for another
  item is read once, to learn which item it holds, and never vouched for.

Only on a file journal (one host): on a journal hosts share, other hosts' forgets are known from the
journal, not from this host's folders, and the memory's read is used.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from memory import MemoryStore, Recalled, Unreachable, learned_dir, meta_value_key, read_learned, retired_dir

_MAX_SCOPES = 1024
"""Scopes whose files are remembered; past it, all are forgotten (and read again as needed)."""
_MAX_OWN = 100_000
"""Versions remembered as this store's own (published, or retired); past it, all are forgotten
(the lookups that needed them are then the memory's)."""

_Versions = dict[str, Recalled | None]
"""An item's versions by key: its entry, or None for a file of this store's not read yet."""


class _ScopeFiles:
    """One scope's unsynced learned files as last listed: the item each holds, by name; the names
    of each item; and the entries read so far."""

    def __init__(self, folder: Path, retired: Path) -> None:
        self.folder = folder
        self.retired = retired
        self.items: dict[str, str | None] = {}  # file name -> its item key (None: not an item)
        self.by_item: dict[str, set[str]] = {}
        self.entries: dict[str, Recalled] = {}
        # names listed that are no learned file's (stages, and the hidden names of files a sync
        # dropped, waiting for the background unlink): passed over by set operations, not one by one
        self.other: set[str] = set()
        self.mutex = threading.Lock()

    def _names(self) -> set[str] | None:
        """Every name in the folder now (none when it is not there); None when it cannot be listed
        or is not a folder (a link in its place is never followed)."""
        try:
            fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return set()
        except OSError:
            return None
        try:
            return set(os.listdir(fd))
        except OSError:
            return None
        finally:
            os.close(fd)

    def _read(self, name: str) -> Recalled | bool | None:
        """The entry of file ``name``; None when it is gone since the listing (the DB snapshot read
        next holds it); False when it does not read, or is not of this scope."""
        path = self.folder / name
        try:
            entry = read_learned(path)
        except Unreachable:
            return False if os.path.lexists(path) else None
        return entry

    def versions(self, scope: str, item: str, mine: dict[str, str]) -> _Versions | None:
        """The versions of ``item`` among the folder's files, listed now (``mine``: the item of each
        version this store published, by key); None when a file cannot be read and is still there,
        or holds another scope (the memory's read says how that fails)."""
        listed = self._names()
        if listed is None:
            return None
        with self.mutex:
            for name in self.items.keys() - listed:  # synced into the DB, or forgotten
                self._drop(name)
            self.other &= listed
            for name in listed - self.items.keys() - self.other:
                if not name.endswith(".json") or name.startswith("."):
                    self.other.add(name)
                    continue
                held = mine.get(name[:-5])
                if held is None:  # another process's file: which item it holds is in it
                    entry = self._read(name)
                    if entry is False:
                        return None
                    if entry is None:
                        continue
                    assert isinstance(entry, Recalled)
                    if entry.scope != scope:
                        return None
                    self.entries[name] = entry
                    key = entry.metadata.get("key")
                    held = key if isinstance(key, str) else None
                self.items[name] = held
                if held is not None:
                    self.by_item.setdefault(held, set()).add(name)
            return {name[:-5]: self.entries.get(name) for name in self.by_item.get(item, ())}

    def entry(self, key: str) -> Recalled | bool | None:
        """The entry of the version ``key`` (read once, then kept while its file is listed)."""
        name = f"{key}.json"
        with self.mutex:
            found = self.entries.get(name)
        if found is not None:
            return found
        got = self._read(name)
        if isinstance(got, Recalled):
            with self.mutex:
                if name in self.items:
                    self.entries[name] = got
        return got

    def _drop(self, name: str) -> None:
        held = self.items.pop(name)
        self.entries.pop(name, None)
        if held is None:
            return
        names = self.by_item.get(held)
        if names is not None:
            names.discard(name)
            if not names:
                del self.by_item[held]


class WriteLookup:
    """The live versions of an item, for the store's writes (see the module docstring)."""

    def __init__(self, memory: MemoryStore) -> None:
        self._memory = memory
        self._scopes: dict[str, _ScopeFiles] = {}
        self._mine: dict[str, str] = {}  # the versions this store learned: key -> item key
        self._retired: set[str] = set()  # keys of the versions this store forgot or superseded
        self._mutex = threading.Lock()

    def published(self, key: str, item: str) -> None:
        """Note a version this store learned, of ``item`` (its file holds its own journal record)."""
        with self._mutex:
            if len(self._mine) >= _MAX_OWN:
                self._mine.clear()
            self._mine[key] = item

    def retired(self, key: str) -> None:
        """Note a version this store forgot or superseded (its retirement is a record of its own)."""
        with self._mutex:
            if len(self._retired) >= _MAX_OWN:
                self._retired.clear()
            self._retired.add(key)

    def _scope(self, scope: str) -> _ScopeFiles:
        with self._mutex:
            files = self._scopes.get(scope)
            if files is None:
                if len(self._scopes) >= _MAX_SCOPES:
                    self._scopes.clear()
                db_path = self._memory.db_path
                files = self._scopes[scope] = _ScopeFiles(
                    learned_dir(db_path, scope), retired_dir(db_path, scope)
                )
            return files

    def _versions(
        self, scope: str, item: str, now_ms: int, own: str | None = None
    ) -> tuple[_ScopeFiles, _Versions] | None:
        """The live versions of ``item``: its files (listed now) that the DB does not hold, then its
        rows (one snapshot), less the versions this store retired; None when only the memory's
        read can tell. ``own``: a version this store has just learned, whose file, when listed, is
        taken as one of the item's versions without asking the DB or the retired folder about it
        (``alone`` asks only whether any other version is live; see there)."""
        files = self._scope(scope)
        on_disk = files.versions(scope, item, self._mine)  # the files first, then the DB
        if on_disk is None or any(key not in self._mine for key in on_disk):
            return None
        asked = [key for key in on_disk if key != own]
        db = self._memory.db
        # the item's rows and which listed versions the DB holds, from one state of the DB: one
        # read transaction for the two statements; a lone statement (nothing listed to ask about,
        # as for a new item, before its learn and after it) is one already, without a BEGIN and a
        # ROLLBACK around it
        with db.snapshot() if asked else contextlib.nullcontext():
            rows = db.recall(
                scope=scope,
                source=None,
                before_ms=None,
                limit=None,
                now_ms=now_ms,
                meta={"key": meta_value_key(item)},
            )
            held = db.held(asked) if asked else {}
        found: _Versions = {r.key: r for r in rows}
        for key, entry in on_disk.items():
            if key not in held:
                found.setdefault(key, entry)
        for key, version in list(found.items()):
            if version is not None and version.expires_ms is not None:
                return None
            if key != own and os.path.lexists(files.retired / f"{key}.json"):
                if key not in self._retired:
                    return None
                del found[key]  # retired by this store, and not yet marked so in the DB
        return files, found

    def live(self, scope: str, item: str, now_ms: int) -> list[Recalled] | None:
        """Every live version of ``item`` in ``scope`` (in no order), as the memory's ``recall(scope,
        meta={"key": item})`` finds them at ``now_ms``; None when only that read can tell."""
        got = self._versions(scope, item, now_ms)
        if got is None:
            return None
        files, found = got
        live = []
        for key, version in found.items():
            entry = files.entry(key) if version is None else version
            # not a Recalled: a file that does not read, or one dropped since the listing, whose
            # row the snapshot (taken before) may lack
            if not isinstance(entry, Recalled) or entry.expires_ms is not None:
                return None
            live.append(entry)
        return live

    def alone(self, scope: str, item: str, key: str, now_ms: int) -> bool:
        """Whether the version ``key`` this store just learned is the only live version of ``item``
        (False also when only the memory's read can tell).

        What is asked is whether any *other* version is live (a creator racing this put): ``key``'s
        own file is listed but neither its DB row nor its retired name is looked at (``_versions``'s
        ``own``). The learn that returned ``key`` looked for its retirement after its rename; a
        retirement since (a racing forget) or a sync that moved it into the DB changes nothing
        another version's presence would: every other version is asked about as before, and is
        one the listing or the DB's rows show."""
        got = self._versions(scope, item, now_ms, own=key)
        return got is not None and list(got[1]) == [key]
