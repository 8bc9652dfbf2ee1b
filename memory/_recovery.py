"""The check a store open makes: learned files whose names a power loss took, published again.

A learn returns once its record is durable; its file's name is made durable later (a group of
learns, a later learn's ``syncfs``, a run's end, a session's ``flush``/``close``). A power loss in
between can take the name, never the record. Such a name belongs to a run that did not end
``done`` (the runtime and sessions make every name durable before marking a run done), so a store
open walks the ``memory-learn`` streams of the runs that did not end cleanly (failed, or running
without a live holder: interrupted) and publishes each committed finding whose file is missing,
unless it is forgotten or superseded, or the history DB holds it.

Names are only lost with the storage's contents, that is across a reboot (or a remount of the
file system). So the check remembers, in ``<db-dir>/flows-cache/names-checked``, the boot and the
mounts it ran under and the journal it walked; an open under the same ones skips the walk. That
memo is derived state: if it is missing, damaged or of another boot the walk runs again, and it
never stands in for the journal (``flows check``, ``sync`` and a resume look at the journal).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

from journal import FileJournal, JournalBackend, RunState
from memory._filecache import CACHE_DIR
from memory._safe import write_beside
from staging import CodedError

log = logging.getLogger(__name__)

MEMO = "names-checked"
"""The memo's file name in ``flows-cache``."""

_BOOT_ID = "/proc/sys/kernel/random/boot_id"
_FDINFO = "/proc/self/fdinfo"


def _read_small(path: str | Path, limit: int = 1 << 20) -> bytes | None:
    """The bytes of the regular file ``path`` (never through a link, never a FIFO), else None.

    A read that returns less than it asked for has reached the end: a regular file reads short
    only there, and so do the small files of ``/proc`` read here (a boot id, a descriptor's
    ``fdinfo``), which the kernel hands over whole. So the usual file costs one read, not a
    second one that returns nothing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not str(path).startswith("/proc/") and not stat.S_ISREG(os.fstat(fd).st_mode):
            return None  # (a file of /proc is not regular: it is read as it is)
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 65536)
            chunks.append(chunk)
            limit -= len(chunk)
            if limit < 0:
                return None
            if len(chunk) < 65536:
                return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def storage_life(path: str | Path) -> str | None:
    """What names the present life of the storage holding ``path``: the boot's id and the id of the
    mount ``path`` is reached through (a mount's id changes when it is mounted again), or the boot's
    id alone where the kernel does not say the mount; None where no boot id is known, or ``path``
    cannot be opened (then every open walks).

    The mount's id is the ``mnt_id`` of ``/proc/self/fdinfo`` for a descriptor of ``path``: one
    small file about that descriptor, not the list of every mount of the system.
    """
    boot = _read_small(_BOOT_ID, 4096)
    if not boot:
        return None
    life = boot.decode(errors="replace").strip()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = _read_small(f"{_FDINFO}/{fd}", 65536) or b""
    finally:
        os.close(fd)
    for line in info.splitlines():
        if line.startswith(b"mnt_id:"):
            mount = line[len(b"mnt_id:") :].strip()
            if mount.isdigit():
                return f"{life} mount {int(mount)}"
    return life


class Recovery:
    """Runs the open-time check for the store whose history DB is ``db_path`` (see the module)."""

    def __init__(
        self,
        db_path: Path,
        journal_location: str,
        open_journal: Callable[[], JournalBackend],
        restore: Callable[[JournalBackend, str], int],
        walk: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        self._db_path = db_path
        self._journal_location = journal_location
        self._open_journal = open_journal
        self._restore = restore
        self._walk = walk  # held around the walk: what every run's restore may share

    def _memo(self, life: str) -> bytes:
        # The journal by a digest of its location: a DSN's password is never written to disk.
        where = hashlib.blake2b(self._journal_location.encode(), digest_size=16).hexdigest()
        return f"{life}\n{where}\n".encode()

    def check(self) -> int:
        """Walk the runs that did not end cleanly, unless this storage life was walked already;
        returns how many files were published. Best effort: a failure is logged, the memo is not
        written, and the next open walks again (``flows check`` reports what is still missing).
        """
        base = os.path.dirname(self._db_path)
        life = storage_life(base)
        memo = os.path.join(base, CACHE_DIR, MEMO)  # ``cache_dir(db_path) / MEMO``
        if life is not None and _read_small(memo, 65536) == self._memo(life):
            return 0
        try:
            backend = self._open_journal()
            runs = backend.runs()
            made = 0
            with self._walk():
                for run in runs:
                    if run.state in (RunState.FAILED, RunState.INTERRUPTED):
                        made += self._restore_one(backend, run.run_id)
        except (CodedError, OSError) as exc:
            log.warning("the check for learned files a power loss took did not finish: %s", exc)
            return 0
        if made:
            log.info("published %d learned files whose names a power loss took", made)
        if life is not None and runs:  # a store without runs writes nothing
            self._write_memo(Path(memo), self._memo(life))
        return made

    def _restore_one(self, backend: JournalBackend, run_id: str) -> int:
        """Restore one run. A file journal keeps every record it read for its object's life, so the
        walk reads each run through a journal object of its own, dropped after it: the store's own
        journal is left without the walked runs' records, and the walk holds one run's at a time."""
        if not isinstance(backend, FileJournal):
            return self._restore(backend, run_id)
        with FileJournal(backend.root) as walker:
            return self._restore(walker, run_id)

    @staticmethod
    def _write_memo(memo: Path, data: bytes) -> None:
        """Replace the memo (temporary file, then rename; not fsync'd: a memo a power loss takes
        only makes the next open walk again). Best effort."""
        write_beside(memo.parent, memo.name, data)
