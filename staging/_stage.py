"""Stage bytes under a hidden name, publish by atomic rename, sweep what crashes leave.

The discipline: the stage is created in the destination's own directory, so the
rename never crosses file systems; exclusively (``O_EXCL``), never following a link (``O_NOFOLLOW``),
with the asked mode; its bytes are fsync'd before ``stage`` returns. ``publish`` is ``os.replace``
followed by an fsync of the directory (shared by threads that publish into it at once), so the new
name survives power loss. A stage's name starts with ``STAGE_PREFIX``; readers skip such names and
``sweep`` removes old ones.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from staging._errors import PublishFailed, StageFailed
from staging._failpoints import hit

log = logging.getLogger(__name__)

STAGE_PREFIX = ".stage-"
"""Every staged file's name begins with this; no reader lists such names."""

DEFAULT_SWEEP_AGE_S = 3600.0
"""A stage older than this is left by a crash (a live write takes milliseconds) and may be swept."""


class _Names:
    """A stage's unique part: this process's random prefix and a count, not ``getrandom`` per
    stage. A forked child draws its own prefix (else it would make its parent's next names), and
    a name found taken (``O_EXCL``) draws a new one: a name seen in the folder says nothing sure
    of the next."""

    def __init__(self) -> None:
        self.renew()

    def renew(self) -> None:
        self.prefix, self.count = secrets.token_hex(5), itertools.count()  # count: atomic under the GIL

    def next(self) -> str:
        return f"{self.prefix}{next(self.count):x}"


_NAMES = _Names()
os.register_at_fork(after_in_child=_NAMES.renew)


def is_stage_name(name: str) -> bool:
    """Return True when ``name`` (a file name, not a path) is a staged file's name."""
    return name.startswith(STAGE_PREFIX)


class OpenDir:
    """A directory held open by its descriptor ``fd`` (this object owns it): stages made in it
    (``stage(..., at=)``), their renames and its fsyncs go through ``fd``, never through a path, so
    a link swapped in for the directory, or for a folder above it, after it was opened cannot
    redirect them. The descriptor is closed when the last reference goes (a stage in flight keeps
    one), or by ``close``."""

    __slots__ = ("fd", "ident")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        st = os.fstat(fd)
        self.ident = (st.st_dev, st.st_ino)  # what ``path`` names while it names this directory

    def close(self) -> None:
        """Close the descriptor now (safe twice)."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            self.close()


def fsync_dir(directory: str | os.PathLike[str], at: OpenDir | None = None) -> None:
    """Fsync a directory so the names created, renamed or removed in it are durable (through
    ``at``'s descriptor when given: ``directory`` is then only its name).

    Raises:
        OSError: when the directory cannot be opened or fsync'd.
    """
    if at is not None:
        os.fsync(at.fd)
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _SharedSync:
    """Syncs shared by the threads of this process (group commit), for one directory or one file
    system. A caller takes a ticket after its change; a sync that begins after the ticket was taken
    covers it, so of many threads that changed things at once, one sync serves them all.
    """

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.syncing = threading.Lock()
        self.requested = 0
        self.done = 0

    def ticket(self) -> int:
        """Take the next ticket (call it after the change that needs syncing)."""
        with self.mutex:
            self.requested += 1
            return self.requested

    def covering(self) -> int:
        """The newest ticket taken so far: what a sync that begins now covers."""
        with self.mutex:
            return self.requested


_dir_syncs: dict[str, _SharedSync] = {}
_dir_syncs_mutex = threading.Lock()


def sync_dir_shared(directory: str | os.PathLike[str], at: OpenDir | None = None) -> None:
    """Make the names changed in ``directory`` so far durable, sharing the fsync with other threads
    (through ``at``'s descriptor when given, not the path).

    Returns once an fsync of the directory that began after this call completed. Raises ``OSError``
    as ``fsync_dir`` does (the failed fsync covers nobody; each waiter then tries its own).
    """
    key = os.fspath(directory)
    with _dir_syncs_mutex:
        state = _dir_syncs.setdefault(key, _SharedSync())
    ticket = state.ticket()
    with state.syncing:
        if state.done >= ticket:
            return
        covering = state.covering()
        fsync_dir(directory, at)
        state.done = covering


_fs_syncs: dict[int, _SharedSync] = {}


_NOT_LOADED: Any = object()

# Linux's ``syncfs`` and whether there is one: loaded through ctypes on first use (module
# ``__getattr__`` below), since importing ctypes costs a few milliseconds that a process which never
# writes (``flows recall``, ``flows why``) should not pay at start-up.
_syncfs: Callable[[int], int] | None
HAVE_SYNCFS: bool
"""Whether ``syncfs`` is available (Linux): one call makes every write on a file system durable."""


def _load_syncfs() -> Callable[[int], int] | None:
    """Look ``syncfs`` up in the C library (once: later calls find it in the module's globals).
    A ``_syncfs`` already set (a test's stand-in) is kept; ``HAVE_SYNCFS`` says what the platform has."""
    found: Callable[[int], int] | None = None
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            found = libc.syncfs
        except (OSError, AttributeError):
            found = None
    names = globals()
    names.setdefault("HAVE_SYNCFS", found is not None)
    fn: Callable[[int], int] | None = names.setdefault("_syncfs", found)
    return fn


def __getattr__(name: str) -> Any:
    if name in ("_syncfs", "HAVE_SYNCFS"):
        _load_syncfs()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _the_syncfs() -> Callable[[int], int] | None:
    """``syncfs`` as the module holds it now (loaded on first use), or None where there is none."""
    fn = globals().get("_syncfs", _NOT_LOADED)
    return _load_syncfs() if fn is _NOT_LOADED else cast("Callable[[int], int] | None", fn)


def have_syncfs() -> bool:
    """``HAVE_SYNCFS``, looked up on first use (see ``_load_syncfs``)."""
    have = globals().get("HAVE_SYNCFS")
    if have is None:
        _load_syncfs()
        have = globals()["HAVE_SYNCFS"]
    return bool(have)


def syncfs(fd: int) -> None:
    """Make every write made so far to the file system holding ``fd`` durable, by any process.

    Linux's ``syncfs(2)`` (it reports write-back errors since 5.8). Where it is missing this is
    ``fsync(fd)``, which covers ``fd``'s file only: check ``HAVE_SYNCFS`` before relying on more.

    Raises:
        OSError: the sync failed.
    """
    fn = _the_syncfs()
    if fn is None:
        os.fsync(fd)
    elif fn(fd) != 0:
        import ctypes  # loaded with ``fn``

        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def sync_file_shared(fd: int) -> None:
    """Make the data written to ``fd`` durable, sharing one sync with threads that wrote meanwhile.

    Alone, it is ``fsync(fd)``. When other threads of this process wrote files on the same file
    system and queued behind, one ``syncfs`` (Linux; it reports write-back errors since 5.8) makes
    all of their data durable at once, so concurrent stages share a sync as appends do.

    Raises:
        OSError: the sync failed.
    """
    dev = os.fstat(fd).st_dev
    with _dir_syncs_mutex:
        state = _fs_syncs.setdefault(dev, _SharedSync())
    ticket = state.ticket()
    with state.syncing:
        if state.done >= ticket:
            return
        covering = state.covering()
        if covering == ticket or _the_syncfs() is None:  # nobody queued behind: a plain fsync
            os.fsync(fd)
            return
        syncfs(fd)
        state.done = covering


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


@dataclass(eq=False)
class Staged:
    """A staged file: durable bytes under a hidden name, not yet visible under its final name."""

    where: str
    """Where the staged bytes are (a hidden name in the destination's directory), as a string."""
    size: int
    at: OpenDir | None = field(default=None, repr=False)
    """The directory held open that the stage was made in, when one was given: the rename and the
    directory's fsync go through it."""
    _done: bool = field(default=False, repr=False)

    @property
    def path(self) -> Path:
        """``where`` as a path."""
        return Path(self.where)

    def publish(self, final_path: str | os.PathLike[str], *, sync_dir: bool = True) -> Path:
        """Rename the stage to ``final_path`` atomically (replacing any older file) and fsync the dir.

        ``final_path`` must be in the stage's own directory. A reader sees the old bytes or the new,
        never a part. Publishing twice, or after ``discard``, is a usage error. With ``sync_dir``
        False the caller fsyncs the directory itself (``publish_many`` does, once for many).

        Returns:
            The final path.

        Raises:
            PublishFailed: the rename or the directory fsync failed (the stage is removed when the
                rename failed; when only the fsync failed the new name is in place but not durable).
            ValueError: ``final_path`` is in another directory, or the stage was already used.
        """
        final = final_path if isinstance(final_path, Path) else Path(final_path)
        if self._done:
            raise ValueError(f"stage {self.where} was already published or discarded")
        # the two folders by ``rpartition`` (equal heads are equal ``dirname``s); ``dirname``, which
        # also drops repeated slashes, only when they differ
        head, own = os.fspath(final_path).rpartition(os.sep)[0], self.where.rpartition(os.sep)
        if head != own[0] and os.path.dirname(final_path) != os.path.dirname(self.where):
            raise ValueError(f"{final} is not in the stage's directory {os.path.dirname(self.where)}")
        self._done = True
        at = self.at
        try:
            hit("staging.before_rename")
            if at is None:
                os.replace(self.where, final_path)
            else:
                os.replace(own[2], final.name, src_dir_fd=at.fd, dst_dir_fd=at.fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                self._unlink()
            raise PublishFailed(
                f"could not publish {final}: {exc.strerror or exc}; "
                "check the directory's space and permissions",
                path=final,
                errno=exc.errno,
            ) from exc
        try:
            hit("staging.after_rename")
            if sync_dir:
                sync_dir_shared(os.path.dirname(final_path), at)
        except OSError as exc:
            raise PublishFailed(
                f"published {final} but could not fsync its directory: {exc.strerror or exc}",
                path=final,
                errno=exc.errno,
            ) from exc
        return final

    def discard(self) -> None:
        """Remove the stage (safe to call twice, and after a failed publish)."""
        if self._done:
            return
        self._done = True
        with contextlib.suppress(FileNotFoundError):
            self._unlink()

    def _unlink(self) -> None:
        if self.at is None:
            os.unlink(self.where)
        else:
            os.unlink(os.path.basename(self.where), dir_fd=self.at.fd)


def stage(
    directory: str | os.PathLike[str],
    data: bytes,
    mode: int = 0o600,
    *,
    hint: str = "",
    sync: bool = True,
    at: OpenDir | None = None,
) -> Staged:
    """Write ``data`` to a new hidden file in ``directory`` and fsync it.

    Args:
        directory: the destination's directory (must exist; it is not created here).
        data: the bytes to stage.
        mode: the file's permission bits (the umask does not narrow them).
        hint: a readable fragment for the stage's name (e.g. the final name), for debugging.
        sync: False leaves the data unsynced; only ``publish_many`` should ask for that.
        at: ``directory`` held open: the stage is made through its descriptor (and so are the
            publish and the directory's fsync), not by resolving ``directory`` again.

    Returns:
        The staged handle; call ``publish`` or ``discard`` on it.

    Raises:
        StageFailed: the directory is missing or not a directory, or the file could not be created,
            written or fsync'd (no space, no permission, read-only, I/O). Nothing is left behind.
    """
    directory = os.fspath(directory)
    safe_hint = hint if hint.isalnum() else "".join(c for c in hint if c.isalnum() or c in "-_.")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        for tries in range(3):
            name = f"{STAGE_PREFIX}{_NAMES.next()}.{safe_hint[:64]}"
            # ``os.path.join(directory, name)`` (``name`` is relative), without its generic steps
            path = (
                f"{directory}{os.sep}{name}" if directory[-1:] not in ("", os.sep) else f"{directory}{name}"
            )
            try:
                fd = os.open(path, flags, mode) if at is None else os.open(name, flags, mode, dir_fd=at.fd)
                break
            except FileExistsError:
                if tries == 2:
                    raise
                _NAMES.renew()  # taken (put there by someone else): draw a prefix nobody has seen
    except OSError as exc:
        raise StageFailed(
            f"could not stage a file in {directory}: {exc.strerror or exc}; "
            "check that it is a writable directory with free space",
            path=directory,
            errno=exc.errno,
        ) from exc
    try:
        os.fchmod(fd, mode)
        write_all(fd, data)
        hit("staging.before_fsync")
        if sync:
            sync_file_shared(fd)
    except OSError as exc:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path) if at is None else os.unlink(name, dir_fd=at.fd)
        raise StageFailed(
            f"could not write the stage {path}: {exc.strerror or exc}; check free space and the disk",
            path=path,
            errno=exc.errno,
        ) from exc
    os.close(fd)
    hit("staging.after_stage")
    return Staged(where=path, size=len(data), at=at)


def publish_many(
    items: Sequence[tuple[Path, bytes]], mode: int = 0o600, *, dirs: Mapping[Path, OpenDir] | None = None
) -> None:
    """Stage and publish many files with few syncs: write every stage, make all their data durable
    at once (``syncfs``; an fsync each where it is missing), rename each into place, then fsync
    each directory once. Same guarantees as ``stage`` + ``publish`` per file: no name becomes
    durable before its data, and a reader sees old bytes or new.

    Args:
        items: (final path, bytes) pairs; each final path's directory must exist.
        mode: the files' permission bits.
        dirs: directories held open, by path: a file whose directory is here is staged, renamed
            and fsync'd through its descriptor (``stage(..., at=)``).

    Raises:
        StageFailed, PublishFailed: as ``stage`` and ``publish``; stages not yet published are
            removed, files already published stay.
    """
    held = dirs or {}
    staged: list[tuple[Staged, Path]] = []
    try:
        for final, data in items:
            at = held.get(final.parent)
            staged.append((stage(final.parent, data, mode, hint=final.name, sync=False, at=at), final))
        _sync_all([s for s, _ in staged])
        for s, final in staged:
            s.publish(final, sync_dir=False)
        for directory in dict.fromkeys(final.parent for _, final in staged):
            try:
                at = held.get(directory)
                fsync_dir(directory, at)
            except OSError as exc:
                raise PublishFailed(
                    f"published into {directory} but could not fsync it: {exc.strerror or exc}",
                    path=directory,
                    errno=exc.errno,
                ) from exc
    finally:
        for s, _ in staged:
            s.discard()


def _open_stage(s: Staged) -> int:
    """A read descriptor of the staged file ``s`` (through its held directory when it has one)."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    if s.at is None:
        return os.open(s.where, flags)
    return os.open(os.path.basename(s.where), flags, dir_fd=s.at.fd)


def _sync_all(stages: Sequence[Staged]) -> None:
    if not stages:
        return
    try:
        fd = _open_stage(stages[0])
        try:
            hit("staging.before_fsync")
            if _the_syncfs() is None or len(stages) == 1:
                os.fsync(fd)
                for s in stages[1:]:
                    other = _open_stage(s)
                    try:
                        os.fsync(other)
                    finally:
                        os.close(other)
            else:
                syncfs(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StageFailed(
            f"could not make staged files durable: {exc.strerror or exc}; check free space and the disk",
            path=os.path.dirname(stages[0].where),
            errno=exc.errno,
        ) from exc


def sweep(
    directory: str | os.PathLike[str], older_than_s: float = DEFAULT_SWEEP_AGE_S, *, now: float | None = None
) -> list[Path]:
    """Remove stages in ``directory`` whose mtime is older than ``older_than_s`` seconds.

    A missing directory has nothing to sweep. A link is removed itself, never followed; a folder
    with a stage's name is left alone (``flows check --repair`` moves it aside). Returns the removed
    paths.
    """
    directory = Path(directory)
    cutoff = (time.time() if now is None else now) - older_than_s
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if not is_stage_name(entry.name):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                continue  # a stage is never a folder: one named so is not ours to remove
            if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
                log.info("swept the stale stage %s", entry.path)
        except FileNotFoundError:
            continue
    return removed


def stale_stages(
    directory: str | os.PathLike[str], older_than_s: float = DEFAULT_SWEEP_AGE_S, *, now: float | None = None
) -> list[Path]:
    """List (without removing) the stages in ``directory`` older than ``older_than_s`` seconds."""
    directory = Path(directory)
    cutoff = (time.time() if now is None else now) - older_than_s
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    out = []
    for entry in entries:
        if is_stage_name(entry.name):
            with contextlib.suppress(FileNotFoundError):
                if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    out.append(Path(entry.path))
    return out


def _set_folder_mode(folder: Path, mode: int) -> None:
    """Give a folder just made exactly ``mode``, through a descriptor that refuses a link (a folder
    swapped for a link since the ``mkdir`` never has its target's mode changed)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def ensure_dir(directory: str | os.PathLike[str], mode: int = 0o700) -> Path:
    """Create ``directory`` and any missing parents, fsyncing each parent that gained an entry.

    Each folder it creates gets exactly ``mode`` (set again after ``mkdir``, so the process's umask
    does not narrow it); folders that already exist are left as they are. Returns the directory's
    path. Raises ``OSError`` as ``os.mkdir`` and ``os.chmod`` do (other than EEXIST).
    """
    directory = Path(directory)
    missing: list[Path] = []
    probe = directory
    while not probe.is_dir():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for new in reversed(missing):
        try:
            os.mkdir(new, mode)
        except FileExistsError:
            if not new.is_dir():
                raise
            continue
        _set_folder_mode(new, mode)
        fsync_dir(new.parent)
    return directory
