"""Power-loss simulation: record what a workload asked of the disk, then crash it every way allowed.

In the style of SQLite's crash-test VFS, but at the ``os`` level and in-process. While a workload
runs, ``Recorder`` wraps the ``os`` functions the durable writers call (``open``, ``write``,
``ftruncate``, ``fsync``, ``replace``/``rename``, ``link``, ``unlink``, ``mkdir``, ``close``): each
call is applied to a real directory as usual *and* logged. A crash after the first ``k`` logged
operations is then any state the durability model below allows; each one is materialised into a
fresh directory, recovered the normal way (the store's open, which publishes again the files of
committed findings whose names were lost; resume the root run; ``flows check --repair`` for what
a session's update, forget or erase left half done, the recovery a session has; a locked open of a
ledger), and judged: ``check_store`` clean, and no acknowledged write lost, doubled or fabricated;
every acknowledged learn readable, its file byte-identical to the rendering of its record, once the
store is open; nothing readable without a record, even by a reader that recovers nothing; nothing
an acknowledged update, forget or erase retired readable again (recall, why, current), by any
reader; and after an erase that was acknowledged, or whose record survived, no byte of the erased
memory's text in any file under the store's folder (its journal, files, caches, quarantine).

The wrapped calls are looked up on the ``os`` module at call time by the durable writers; a call
relative to a folder's descriptor (``dir_fd``) is resolved through ``/proc/self/fd``.

The durability model (stricter than ext4 ``data=ordered``, on purpose):

* A file's data operations (writes, truncates) are durable once an ``fsync`` of that file follows
  them. Of the rest, any *prefix* survives, in order; the last surviving write may be *torn*: only
  its first ``cut`` bytes land, and the part of it that extended the file holds nothing (the size
  stops at the cut), zeros, garbage, stale bytes (what an earlier, cut version of the file held at
  those offsets) or replayed lines (copies of the file's last complete line: stale data that looks
  valid).
* A directory's entry operations (create, mkdir, rename, link, unlink) are durable once an ``fsync``
  of that directory follows them. Of the rest, any prefix survives, in order.
* Files and directories are independent: any combination of their prefixes is a crash state (so
  a rename may survive while the renamed file's unsynced data does not, and the other way round).
  Nothing else is shared: an fsync of a file does not make its name durable, as POSIX allows.
* A ``syncfs`` (``staging.syncfs``: Linux's sync of a whole file system) makes every operation
  logged before it durable, files and directories alike.

The history DB (SQLite, written only by ``sync``) is not modelled here; SQLite has its own crash
tests, and the failpoint sweep kills ``sync`` at each of its steps.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import random
import shutil
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

import memory
import staging._stage
from journal import JournalBackend, RunState
from memory.ledger import Acted, Amount, Ledger, Outcome, Skipped
from tests.reliability.tally import Tally

FILLS = ("none", "zeros", "garbage", "stale", "replay")
BARE_FORMAT_LOGS = ("ledger.jsonl", "activity.jsonl")
"""Logs whose lines are the entry schema's schema, bare: no sequence number, no checksum. A replayed copy of
an earlier line reads as a new entry there, so the main run does not replay lines into them (see
``run_ledger_replay``, which measures what it would do)."""


def default_fills(path: str) -> tuple[str, ...]:
    """The tear fills the model uses for the file created at ``path``."""
    if os.path.basename(path) in BARE_FORMAT_LOGS:
        return tuple(f for f in FILLS if f != "replay")
    return FILLS


# -- recording ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One logged operation: an ``entry`` change of a directory, or a ``write``/``truncate`` of a
    file, or an ``fsync`` of either. ``target`` is a file's object id or a directory's path
    relative to the recorded root ("" for the root itself)."""

    kind: str
    target: int | str
    args: tuple[Any, ...] = ()


class Recorder:
    """Logs what the code under test does to files under ``root`` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))
        self.ops: list[Op] = []
        self._fds: dict[int, tuple[str, int | str, bool]] = {}  # fd -> (kind, target, append)
        self._objects: dict[int, int] = {}  # real inode -> object id
        self.names: dict[int, str] = {}  # object id -> the path it was created at
        self._next = 0

    def _rel(self, path: Any) -> str | None:
        full = os.path.abspath(os.fspath(path))
        if full == str(self.root):
            return ""
        prefix = str(self.root) + os.sep
        return full[len(prefix) :] if full.startswith(prefix) else None

    def _split(self, rel: str) -> tuple[str, str]:
        parent, _, name = rel.rpartition(os.sep)
        return parent, name

    def _new_object(self, ino: int) -> int:
        self._next += 1
        self._objects[ino] = self._next
        return self._next

    @contextlib.contextmanager
    def recording(self) -> Iterator[Recorder]:
        """Wrap the ``os`` functions for the duration of the block."""
        real = {name: getattr(os, name) for name in _WRAPPED}
        wrappers = _wrappers(self, real)
        for name, fn in wrappers.items():
            setattr(os, name, fn)
        real_syncfs = staging._stage._syncfs
        if real_syncfs is not None:

            def syncfs(fd: int) -> int:
                status = real_syncfs(fd)
                if status == 0:
                    self.ops.append(Op("syncfs", ""))
                return status

            staging._stage._syncfs = syncfs
        try:
            yield self
        finally:
            for name, fn in real.items():
                setattr(os, name, fn)
            staging._stage._syncfs = real_syncfs


_WRAPPED = (
    "open",
    "write",
    "pwrite",
    "fsync",
    "ftruncate",
    "close",
    "replace",
    "rename",
    "link",
    "unlink",
    "mkdir",
)


def _beside(path: Any, dir_fd: int | None) -> Any:
    """``path`` as the kernel resolves it: relative to the folder ``dir_fd`` holds open, if given
    (a learned file's removal names it in its folder's descriptor)."""
    if dir_fd is None or os.path.isabs(os.fspath(path)):
        return path
    return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), os.fspath(path))


def _wrappers(rec: Recorder, real: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        full = _beside(path, dir_fd)
        rel = rec._rel(full)
        existed = rel is not None and os.path.lexists(full)
        fd: int = real["open"](path, flags, mode, dir_fd=dir_fd)
        if rel is None:
            return fd
        st = os.fstat(fd)
        if os.path.isdir(full):
            rec._fds[fd] = ("dir", rel, False)
            return fd
        if existed:
            obj = rec._objects.get(st.st_ino) or rec._new_object(st.st_ino)
        else:
            obj = rec._new_object(st.st_ino)
            rec.names[obj] = rel
            parent, name = rec._split(rel)
            rec.ops.append(Op("entry", parent, ("create", name, obj)))
        if flags & os.O_TRUNC:
            rec.ops.append(Op("truncate", obj, (0,)))
        rec._fds[fd] = ("file", obj, bool(flags & os.O_APPEND))
        return fd

    def write(fd: int, data: Any) -> int:
        held = rec._fds.get(fd)
        if held is None or held[0] != "file":
            return int(real["write"](fd, data))
        offset = os.fstat(fd).st_size if held[2] else os.lseek(fd, 0, os.SEEK_CUR)
        n = int(real["write"](fd, data))
        rec.ops.append(Op("write", held[1], (offset, bytes(data[:n]))))
        return n

    def pwrite(fd: int, data: Any, offset: int) -> int:
        held = rec._fds.get(fd)
        n = int(real["pwrite"](fd, data, offset))
        if held is not None and held[0] == "file":
            rec.ops.append(Op("write", held[1], (offset, bytes(data[:n]))))
        return n

    def fsync(fd: int) -> None:
        real["fsync"](fd)
        held = rec._fds.get(fd)
        if held is not None:
            rec.ops.append(Op("fsync", held[1]))

    def ftruncate(fd: int, length: int) -> None:
        real["ftruncate"](fd, length)
        held = rec._fds.get(fd)
        if held is not None and held[0] == "file":
            rec.ops.append(Op("truncate", held[1], (length,)))

    def close(fd: int) -> None:
        rec._fds.pop(fd, None)
        real["close"](fd)

    def two_names(name: str) -> Callable[..., None]:
        def move(src: Any, dst: Any, **kwargs: Any) -> None:
            real[name](src, dst, **kwargs)
            a = rec._rel(_beside(src, kwargs.get("src_dir_fd")))
            b = rec._rel(_beside(dst, kwargs.get("dst_dir_fd")))
            if a is None or b is None:
                return
            (pa, na), (pb, nb) = rec._split(a), rec._split(b)
            if pa != pb:
                raise AssertionError(f"the model has no cross-directory {name}: {a} -> {b}")
            rec.ops.append(Op("entry", pa, ("link" if name == "link" else "rename", na, nb)))

        return move

    def unlink(path: Any, *, dir_fd: int | None = None) -> None:
        full = _beside(path, dir_fd)
        real["unlink"](path, dir_fd=dir_fd)
        rel = rec._rel(full)
        if rel is not None:
            parent, name = rec._split(rel)
            rec.ops.append(Op("entry", parent, ("unlink", name)))

    def mkdir(path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real["mkdir"](path, mode, dir_fd=dir_fd)
        rel = rec._rel(path)
        if rel is not None:
            parent, name = rec._split(rel)
            rec.ops.append(Op("entry", parent, ("mkdir", name)))

    return {
        "open": open_,
        "write": write,
        "pwrite": pwrite,
        "fsync": fsync,
        "ftruncate": ftruncate,
        "close": close,
        "replace": two_names("replace"),
        "rename": two_names("rename"),
        "link": two_names("link"),
        "unlink": unlink,
        "mkdir": mkdir,
    }


# -- crash states -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tear:
    """A torn write: ``cut`` bytes of it land; the rest of what it added to the file is ``fill``."""

    cut: int
    fill: str


FileChoice = tuple[int, Tear | None]  # how many volatile ops survive; the last one torn or not


def _apply_write(
    content: bytearray, shadow: bytearray, offset: int, data: bytes, *, tear: Tear | None, seed: int
) -> bool:
    """Apply one write to ``content`` (and ``shadow``, which keeps every byte ever written).

    Returns False when ``tear`` cannot be built here (no stale bytes, no line to replay).
    """
    before = bytes(content)
    if len(content) < offset:
        content.extend(b"\0" * (offset - len(content)))
    if tear is None:
        content[offset : offset + len(data)] = data
    else:
        content[offset : offset + tear.cut] = data[: tear.cut]
        start, end = max(len(before), offset + tear.cut), offset + len(data)
        if tear.fill != "none" and end > start:
            fill = _fill(tear.fill, before, shadow, start, size=end - start, seed=seed)
            if fill is None:
                return False
            if len(content) < start:
                content.extend(b"\0" * (start - len(content)))
            content[start:end] = fill
    if len(shadow) < offset + len(data):
        shadow.extend(b"\0" * (offset + len(data) - len(shadow)))
    shadow[offset : offset + len(data)] = data
    return True


def _fill(kind: str, before: bytes, shadow: bytes, start: int, *, size: int, seed: int) -> bytes | None:
    if kind == "zeros":
        return b"\0" * size
    if kind == "garbage":
        return random.Random(seed).randbytes(size)
    if kind == "stale":
        old = shadow[start : start + size]
        return old + b"\0" * (size - len(old)) if old.strip(b"\0") else None
    lines = before.split(b"\n")[:-1]
    if not lines:
        return None
    line = lines[-1] + b"\n"
    return (line * (size // len(line) + 1))[:size]


class CrashPoint:
    """What is durable and what is volatile after the first ``k`` operations of ``ops``."""

    def __init__(
        self,
        ops: Sequence[Op],
        k: int,
        names: dict[int, str] | None = None,
        fills: Callable[[str], tuple[str, ...]] = default_fills,
    ) -> None:
        self.ops = list(ops[:k])
        self.k = k
        self.names = names or {}
        self.fills = fills
        self.dir_ops: dict[str, list[Op]] = {"": []}
        self.file_ops: dict[int, list[Op]] = {}
        durable: dict[int | str, int] = {}
        for op in self.ops:
            if op.kind == "entry":
                self.dir_ops.setdefault(str(op.target), []).append(op)
                if op.args[0] == "mkdir":
                    self.dir_ops.setdefault(_join(str(op.target), op.args[1]), [])
            elif op.kind in ("write", "truncate"):
                self.file_ops.setdefault(int(op.target), []).append(op)
            elif op.kind == "syncfs":
                durable.update({d: len(ops) for d, ops in self.dir_ops.items()})
                durable.update({o: len(ops) for o, ops in self.file_ops.items()})
            else:
                group = self.dir_ops if isinstance(op.target, str) else self.file_ops
                durable[op.target] = len(group.get(op.target, []))  # type: ignore[call-overload]
        self.durable = durable

    def volatile_dirs(self) -> dict[str, int]:
        """How many entry operations of each directory are not yet durable."""
        out = {d: len(ops) - self.durable.get(d, 0) for d, ops in self.dir_ops.items()}
        return {d: n for d, n in out.items() if n}

    def volatile_files(self) -> dict[int, int]:
        """How many data operations of each file are not yet durable."""
        out = {o: len(ops) - self.durable.get(o, 0) for o, ops in self.file_ops.items()}
        return {o: n for o, n in out.items() if n}

    def file_choices(self, obj: int) -> list[FileChoice]:
        """Every way the volatile operations of file ``obj`` can survive."""
        ops = self.file_ops[obj]
        base = self.durable.get(obj, 0)
        out: list[FileChoice] = [(0, None)]
        for n in range(1, len(ops) - base + 1):
            out.append((n, None))
            last = ops[base + n - 1]
            if last.kind == "write":
                size = len(last.args[1])
                for cut in sorted({0, size // 2, size - 1}):
                    for fill in self.fills(self.names.get(obj, "")):
                        if not (cut == 0 and fill == "none") and cut < size:
                            out.append((n, Tear(cut, fill)))
        return out

    def choices(self) -> tuple[list[str], list[list[int]], list[int], list[list[FileChoice]]]:
        """The volatile directories and files, and the choices for each."""
        dirs = sorted(self.volatile_dirs().items())
        files = sorted(self.volatile_files())
        return (
            [d for d, _ in dirs],
            [list(range(n + 1)) for _, n in dirs],
            files,
            [self.file_choices(o) for o in files],
        )

    def states(self) -> Iterator[tuple[dict[str, int], dict[int, FileChoice]]]:
        """Every crash state at this point (the product of every object's choices)."""
        dirs, dir_options, files, file_options = self.choices()
        for combo in itertools.product(*dir_options, *file_options):
            yield (
                dict(zip(dirs, combo[: len(dirs)], strict=True)),
                dict(zip(files, combo[len(dirs) :], strict=True)),
            )

    def random_state(self, rng: random.Random) -> tuple[dict[str, int], dict[int, FileChoice]]:
        """One crash state at this point, drawn at random."""
        dirs, dir_options, files, file_options = self.choices()
        return (
            {d: rng.choice(opts) for d, opts in zip(dirs, dir_options, strict=True)},
            {o: rng.choice(opts) for o, opts in zip(files, file_options, strict=True)},
        )

    def covering_states(self, rng: random.Random) -> Iterator[tuple[dict[str, int], dict[int, FileChoice]]]:
        """Every choice of every volatile object at this point, each in one state whose other
        objects are drawn at random; and the two ends: nothing volatile survived, all of it did.

        Where the product of every object's choices (``states``) is too large to walk: a session's
        update, forget or erase leaves many small files unsynced at once (watermarks, the files'
        index), and the product passes 10^9 states at a single point of a three-step workload."""
        dirs, dir_options, files, file_options = self.choices()
        whole = [max(c for c in opts if c[1] is None) for opts in file_options]
        yield dict.fromkeys(dirs, 0), {o: (0, None) for o in files}
        yield (
            {d: opts[-1] for d, opts in zip(dirs, dir_options, strict=True)},
            dict(zip(files, whole, strict=True)),
        )
        for d, opts in zip(dirs, dir_options, strict=True):
            for n in opts:
                some_dirs, some_files = self.random_state(rng)
                yield {**some_dirs, d: n}, some_files
        for o, choices in zip(files, file_options, strict=True):
            for choice in choices:
                some_dirs, some_files = self.random_state(rng)
                yield some_dirs, {**some_files, o: choice}

    def tree(self, dirs: dict[str, int], files: dict[int, FileChoice]) -> dict[str, bytes | None] | None:
        """The files (path -> bytes) and directories (path -> None) of one crash state.

        Returns None when a chosen tear cannot be built (nothing stale or no line to replay).
        """
        contents: dict[int, bytes] = {}
        for obj, ops in self.file_ops.items():
            keep, tear = files.get(obj, (0, None))
            upto = self.durable.get(obj, 0) + keep
            content, shadow = bytearray(), bytearray()
            for i, op in enumerate(ops[:upto]):
                if op.kind == "truncate":
                    del content[op.args[0] :]
                    content.extend(b"\0" * (op.args[0] - len(content)))
                    continue
                torn = tear if i == upto - 1 else None
                if not _apply_write(content, shadow, op.args[0], op.args[1], tear=torn, seed=obj * 1000 + i):
                    return None
            contents[obj] = bytes(content)
        out: dict[str, bytes | None] = {}
        self._walk("", dirs, contents, out)
        return out

    def _walk(self, d: str, dirs: dict[str, int], contents: dict[int, bytes], out: dict[str, Any]) -> None:
        entries: dict[str, int | str] = {}
        upto = self.durable.get(d, 0) + dirs.get(d, 0)
        for op in self.dir_ops.get(d, [])[:upto]:
            action, name, *rest = op.args
            if action == "create":
                entries[name] = rest[0]
            elif action == "mkdir":
                entries[name] = _join(d, name)
            elif action == "unlink":
                entries.pop(name, None)
            elif name in entries:  # rename or link of a name this state has
                entries[rest[0]] = entries[name]
                if action == "rename":
                    del entries[name]
        for name, what in sorted(entries.items()):
            path = _join(d, name)
            if isinstance(what, str):
                out[path] = None
                self._walk(what, dirs, contents, out)
            else:
                out[path] = contents.get(what, b"")


def _join(d: str, name: str) -> str:
    return f"{d}{os.sep}{name}" if d else name


def signature(tree: dict[str, bytes | None]) -> bytes:
    """A digest of a crash state's files and directories (equal states, equal digests)."""
    h = hashlib.blake2b(digest_size=16)
    for path, data in sorted(tree.items()):
        h.update(path.encode() + b"\0" + (b"D" if data is None else b"F" + data) + b"\0")
    return h.digest()


def materialize(tree: dict[str, bytes | None], dest: Path) -> None:
    """Write a crash state into the (empty, existing) directory ``dest``."""
    for path, data in sorted(tree.items()):
        target = dest / path
        if data is None:
            target.mkdir()
        else:
            target.write_bytes(data)
            target.chmod(0o600)


# -- workloads ----------------------------------------------------------------------------------


class Clock:
    """Milliseconds that step forward on every reading, so learns never tie."""

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1_000
        return self.now


@dataclass(frozen=True)
class Event:
    """A workload step: what it was, and the operation count when it began and returned.

    ``end`` is None when the step raised (it was never acknowledged).
    """

    step: str
    start: int
    end: int | None
    detail: Any = None


@dataclass
class Trace:
    """A recorded workload: its operations and steps."""

    kind: str
    steps: tuple[str, ...]
    ops: list[Op] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


FLOW, SCOPE = "powerloss", "powerloss"


def finding(step: str) -> dict[str, Any]:
    """The finding a ``L<n>`` step learns (even ones are long, so a torn record can hold whole
    copies of a shorter earlier one)."""
    n = int(step[1:])
    text = f"finding number {n}" + (" that runs on" * 30 if n % 2 == 0 else "")
    return {"text": text, "tags": ["power"]}


def fid_of(step: str) -> str:
    """The id of the finding a ``L<n>`` step learns."""
    return memory.finding_id(SCOPE, memory.validate(finding(step), FLOW))


def ledger_entry(step: str, n: int) -> Acted | Skipped:
    """The ledger entry of step number ``n``: ``S`` a skip, ``A`` a confirmed act (unique ts)."""
    ts = 1_752_400_000 + n
    if step == "S":
        return Skipped(ts=ts, block=1000 + n, chain_id=8453, reason=f"balance {n} < min 100")
    token_in, token_out = "0x" + "11" * 20, "0x" + "22" * 20
    return Acted(
        ts=ts,
        block=1000 + n,
        chain_id=8453,
        action="swap",
        permission=None,
        outcome=Outcome.CONFIRMED,
        tx_hash=f"0x{n:064x}",
        gas_used=142_013,
        token_in=token_in,
        token_out=token_out,
        amount_in=Amount.of(25_000_000, 6, "USDC"),
        amount_out=Amount.of(9_821_340_000_000_000, 18, "WETH"),
        balances_after={token_in: 475_000_000, token_out: 104_213_340_000_000_000},
    )


def _store_paths(base: Path) -> tuple[Path, Path]:
    return base / "data" / "history.db", base / "sail"


MEMORY_ONE = "finding number 1"
"""The text every version of memory 1 (``L1``'s finding, then its updates) holds, and nothing else
does: what a grep for an erased memory's bytes looks for."""
SESSION_FLOW = "powerloss-cli"
CHANGE_STEPS = ("U", "W", "E", "X")
ERASING_STEPS = ("E", "X")


def version(n: int) -> dict[str, Any]:
    """The finding the ``n``-th ``U`` step of a workload makes the new version of memory 1."""
    return {"text": f"{MEMORY_ONE} version {n + 1}", "tags": ["power"]}


def marker(step: str) -> str:
    """The text every version of the memory ``L<n>`` began holds, and no other memory does."""
    return f"finding number {int(step[1:])}"


def memory_one() -> str:
    """The id of memory 1: the key of its first version, ``L1``'s finding."""
    return fid_of("L1")


def record_findings(steps: Sequence[str], base: Path) -> Trace:
    """Run a findings workload in one root run (``L<n>`` learn finding n, ``R`` give up the lease
    and resume, ``D`` end the root run done as the flows runtime does: the store's names made
    durable, then ``finish``; a learn after it is refused, so not acknowledged) and sessions of
    their own, as ``flows update``/``forget``/``erase`` make them: ``U`` a new version of memory 1,
    ``W`` forget by filter (every live finding tagged ``power``, one record), ``E`` erase memory 1
    (every version), ``X`` erase by filter (every memory with a commit tagged ``power``, forgotten
    ones included, one erase record each); before ``E`` and ``X`` the root run is ended, as ``D``,
    because an erase waits for the runs holding its commits to end. A session's step is
    acknowledged when its operation returns; the session is closed (names made durable, its run
    marked done) after that."""
    trace = Trace("findings", tuple(steps))
    db, _ = _store_paths(base)
    rec = Recorder(base)
    updates = 0
    with memory.MemoryStore(db, clock=Clock()) as store, rec.recording():
        jr = store.open_journal()
        start = len(rec.ops)
        info, lease = jr.begin(FLOW, SCOPE, {"source": None})
        trace.events.append(Event("begin", start, len(rec.ops), info.run_id))
        trace.info["run_id"] = info.run_id
        done = False  # the root run ended (D, or the end an erase waits for)
        for step in steps:
            if step in ERASING_STEPS and not done:
                start = len(rec.ops)
                store.flush()
                jr.finish(lease, RunState.DONE)
                done = True
                trace.events.append(Event("D", start, len(rec.ops), None))
            start = len(rec.ops)
            session = None
            try:
                if step == "R":
                    jr.release(lease)
                    lease = jr.acquire(info.run_id)
                    detail: Any = lease.epoch
                elif step == "D":
                    store.flush()
                    jr.finish(lease, RunState.DONE)
                    done = True
                    detail = None
                elif step in CHANGE_STEPS:
                    session = store.session(scope=SCOPE, flow=SESSION_FLOW)
                    detail = _change(store, session, step, updates)
                    updates += step == "U"
                else:
                    # its key: fid_of(step), or a new revision's when that one was retired
                    detail = store.learn(finding(step), memory.RootRun(jr, lease, FLOW, SCOPE)).key
            except Exception as exc:  # a step that fails is simply not acknowledged
                trace.events.append(Event(step, start, None, repr(exc)))
                if session is not None:
                    with contextlib.suppress(Exception):
                        session.close()
                continue
            trace.events.append(Event(step, start, len(rec.ops), detail))
            if session is not None:
                session.close()
        jr.release(lease)
    trace.ops = rec.ops
    trace.info["names"] = rec.names
    return trace


def _change(store: memory.MemoryStore, session: memory.MemorySession, step: str, updates: int) -> Any:
    """Run one session step; its detail: ``U`` (the version it replaced, the new one), ``W`` and
    ``E`` the keys they retired or erased, ``X`` the memories it erased."""
    if step == "U":
        live = store.current(memory_one())
        learned = session.update(memory_one(), version(updates + 1))
        return (live.key if live is not None else None, learned.key)
    if step == "W":
        return session.forget_where(reason="the workload forgets them all", tags=["power"]).keys
    if step == "E":
        return session.erase(memory_one(), reason="the workload erases memory 1").keys
    return tuple(session.erase_where(reason="the workload erases them all", tags=["power"]))


def record_ledger(steps: Sequence[str], base: Path) -> Trace:
    """Run a ledger workload: each step is one tick appending one entry (``S`` skip, ``A`` act)."""
    trace = Trace("ledger", tuple(steps))
    _, sail = _store_paths(base)
    rec = Recorder(base)
    with rec.recording():
        for n, step in enumerate(steps, 1):
            entry = ledger_entry(step, n)
            start = len(rec.ops)
            try:
                with Ledger(sail).writer() as w:
                    w.append(entry)
            except Exception as exc:
                trace.events.append(Event(step, start, None, repr(exc)))
                continue
            trace.events.append(Event(step, start, len(rec.ops), _wire(entry)))
    trace.ops = rec.ops
    trace.info["names"] = rec.names
    return trace


def _wire(entry: Acted | Skipped) -> bytes:
    return orjson.dumps(entry.to_wire())


# -- judging a crash state ----------------------------------------------------------------------


@dataclass
class Verdict:
    """What one crash state showed."""

    acknowledged: int = 0
    lost: int = 0
    doubled: int = 0
    fabricated: int = 0
    resurrected: int = 0
    unerased: int = 0
    unexpected: int = 0
    refused: int = 0
    notes: list[str] = field(default_factory=list)


def count(tally: Tally, verdict: Verdict, where: str) -> None:
    """Add one judged crash state's ``verdict`` to ``tally``, its notes labelled ``where``."""
    tally.cases += 1
    tally.acknowledged += verdict.acknowledged
    tally.lost += verdict.lost
    tally.doubled += verdict.doubled
    tally.fabricated += verdict.fabricated
    tally.resurrected += verdict.resurrected
    tally.unerased += verdict.unerased
    tally.unexpected += verdict.unexpected
    tally.refused += verdict.refused
    for note in verdict.notes:
        tally.note(f"{where}: {note}")


def judge(trace: Trace, k: int, state: Path, *, recover: bool = True) -> Verdict:
    """Recover the crash state in ``state`` (after ``k`` operations) and judge it against ``trace``
    (``recover=False``: the store's open makes no check for lost names, to show it is needed)."""
    verdict = Verdict()
    acked = [e for e in trace.events if e.end is not None and e.end <= k]
    attempted = [e for e in trace.events if e.start < k]
    verdict.acknowledged = len(acked)
    try:
        if trace.kind == "findings":
            _judge_findings(trace, acked, attempted, state, verdict, recover=recover)
        else:
            _judge_ledger(acked, attempted, state, verdict)
    except Exception as exc:
        verdict.unexpected += 1
        tb = traceback.format_exception_only(exc)[-1].strip()
        verdict.notes.append(f"recovery raised {tb}")
    return verdict


REPORTED_KINDS = frozenset(
    {"supersede_unfinished", "erase_incomplete", "retirement_unpublished", "learned_forgotten"}
)
"""What ``flows check`` may report after a power loss in a session's update, forget or erase, and
``--repair`` finishes (the recovery a session has: it has no body to resume). A retired finding's
learned file is removed without an fsync (its retired file keeps it out of every read), so a power
loss may bring the file back after an acknowledged forget: ``learned_forgotten``."""


@dataclass
class Promises:
    """What the workload's acknowledged steps promise at a crash point, and what the one step in
    flight (begun, not returned) may or may not have done."""

    changes: bool  # the workload has session steps (else the checks of them are skipped)
    made: set[str]  # every key any step made (a learn's, an update's), resumed or not
    retired: set[str]  # keys an acknowledged update, forget or erase retired: never readable again
    erased: set[str]  # memories an acknowledged erase took: no byte of them anywhere after recovery
    in_flight: Event | None
    memory_one: set[str | None]  # memory 1's live version after recovery may be any of these
    acked_keys: set[str]  # the keys acknowledged learns and updates made
    superseded: set[str]  # the old versions acknowledged updates retired (their retired files lazily named)

    def excused(self) -> set[str]:
        """Keys an acknowledged learn made that need not be readable (retired, or retired by the
        step in flight)."""
        return self.retired | self.maybe_retired()

    def maybe_retired(self) -> set[str]:
        """What the step in flight retires if it landed."""
        e = self.in_flight
        if e is None or e.step not in CHANGE_STEPS:
            return set()
        if e.step == "X":
            return set(self.acked_keys)
        return {e.detail[0]} if e.step == "U" else set(e.detail)


def promises(trace: Trace, acked: list[Event], attempted: list[Event]) -> Promises:
    """The promises of ``acked`` (and of the one step in flight among ``attempted``)."""
    flight = [e for e in attempted if e.end is not None and e not in acked]
    assert len(flight) <= 1, flight
    made = {fid_of(s) for s in trace.steps if s.startswith("L")}
    made |= {e.detail for e in trace.events if e.step.startswith("L") and e.end is not None}
    made |= {e.detail[1] for e in trace.events if e.step == "U" and e.end is not None}
    retired: set[str] = set()
    erased: set[str] = set()
    superseded: set[str] = set()
    keys: set[str] = set()
    one: str | None = None
    for e in acked:
        if e.step.startswith("L"):
            keys.add(e.detail)
            one = e.detail if e.detail == memory_one() else one
        elif e.step == "U":
            keys.add(e.detail[1])
            retired.add(e.detail[0])
            superseded.add(e.detail[0])
            one = e.detail[1]
        elif e.step == "X":  # every commit is tagged power: every memory made so far
            retired |= keys
            erased |= set(e.detail)
            one = None
        elif e.step in ("W", "E"):
            retired |= set(e.detail)
            erased |= {memory_one()} if e.step == "E" else set()
            one = None if e.step == "E" or one in e.detail else one
    changes = any(s in CHANGE_STEPS for s in trace.steps)
    now = Promises(changes, made, retired, erased, flight[0] if flight else None, {one}, keys, superseded)
    flying = now.in_flight
    if flying is not None and flying.step == "U":
        now.memory_one.add(flying.detail[1])
    elif flying is not None and (
        flying.step in ERASING_STEPS or (flying.step == "W" and one in flying.detail)
    ):
        now.memory_one.add(None)
    elif flying is not None and flying.detail == memory_one() and one is None:
        now.memory_one.add(flying.detail)
    return now


def _judge_findings(
    trace: Trace, acked: list[Event], attempted: list[Event], state: Path, v: Verdict, *, recover: bool
) -> None:
    db, _ = _store_paths(state)
    run_id = trace.info["run_id"]
    learn_steps = [s for s in trace.steps if s.startswith("L")]
    tried = {e.detail if e.end is not None else fid_of(e.step) for e in attempted if e.step.startswith("L")}
    tried |= {e.detail[1] for e in attempted if e.step == "U" and e.end is not None}
    owed = promises(trace, acked, attempted)
    # A reader in another process before anything is recovered: whatever it reads has a record;
    # a file the crash tore (its bytes were written without fsync) fails its read, coded; nothing
    # an acknowledged forget, update or erase retired comes back.
    with memory.MemoryStore(db, recover=False, file_index=False) as reader:
        readable = _unjournaled(
            reader, v, when="after the crash, before any recovery", torn_ok=True, every=owed.changes
        )
        if readable is not None:  # an update names the old version's retired file lazily: the
            # store's next open publishes it again if a power loss took it (docs/MEMORY.md)
            _resurrected(
                reader, readable - owed.superseded, owed, v, when="after the crash, before any recovery"
            )
    with memory.MemoryStore(db, clock=Clock(1_800_000_000_000), recover=recover) as store:
        jr = store.open_journal()
        runs = {r.run_id: r for r in jr.runs()}
        # Before any resume: what was acknowledged must be there once the store is open.
        _count(
            store, run_id in runs, run_id, acked, tried=tried, owed=owed, v=v, when="after the store's open"
        )
        unacked = tried - {e.detail for e in acked if e.step.startswith("L")}
        unacked |= {e.detail[1] for e in attempted if e.step == "U" and e not in acked and e.end is not None}
        for p in memory.check_store(store):
            if p.kind in REPORTED_KINDS:
                continue  # reported, and repaired below
            if p.kind != "record_unpublished" or Path(p.path).stem not in unacked:
                v.unexpected += 1
                v.notes.append(f"after the store's open: {p.kind} {p.message}")
        epochs = [e.detail for e in acked if e.step == "R"]
        if epochs and run_id in runs and runs[run_id].epoch < max(epochs):
            v.lost += 1
            v.notes.append(f"the run's epoch {runs[run_id].epoch} is older than acknowledged {max(epochs)}")
        # The normal recovery: resume the root, whose body learns every finding again.
        if run_id in runs and runs[run_id].state is not RunState.DONE:
            lease = jr.acquire(run_id)
            root = memory.RootRun(jr, lease, FLOW, SCOPE)
            for step in learn_steps:
                store.learn(finding(step), root)
            store.flush()
            jr.finish(lease, RunState.DONE)
            tried |= {fid_of(s) for s in learn_steps}
            if "L1" in learn_steps and memory_one() not in owed.excused():
                owed.memory_one.add(memory_one())  # the body learns it, if it had not
        if owed.changes:
            _erasure_reported(trace, store, v)
        # A session has no body to resume: what its step left half done, `flows check` reports
        # and `--repair` finishes.
        problems = memory.check_store(store)
        if problems and all(p.kind in REPORTED_KINDS for p in problems):
            memory.repair_store(store, problems)
            problems = memory.check_store(store)
        _count(
            store,
            run_id in runs,
            run_id,
            acked,
            tried=tried,
            owed=owed,
            v=v,
            when="after recovery",
            final=True,
        )
        if problems:
            v.unexpected += len(problems)
            v.notes += [f"after recovery: {p.kind} {p.message}" for p in problems]
        if owed.changes:
            _judge_memory_one(store, owed, v)
            _judge_erasures(trace, store, state, owed, v)


def _erased_memories(store: memory.MemoryStore) -> set[str]:
    """The memories the journal holds an erase record of."""
    jr = store.open_journal()
    return {
        str(rec.payload.get("memory"))
        for run in jr.runs()
        for rec in jr.read(run.run_id, memory.ERASE_STREAM)
    }


def _holding(state: Path, text: str) -> list[Path]:
    """Every file under ``state`` (the store's folder, its journal, its caches) holding ``text``."""
    wanted = text.encode()
    return sorted(
        p for p in state.rglob("*") if p.is_file() and not p.is_symlink() and wanted in p.read_bytes()
    )


def _memories(trace: Trace) -> dict[str, str]:
    """The memories a workload's learns begin, by id: the step that learns each (a learn of a
    retired finding begins a new memory, under a revision's key)."""
    found = {fid_of(s): s for s in trace.steps if s.startswith("L")}
    found.update({e.detail: e.step for e in trace.events if e.step.startswith("L") and e.end is not None})
    return found


def _written_again(trace: Trace) -> set[str]:
    """The texts (``marker``) a learn or an update began to write after the workload's first erase
    began: a refused learn stages its file before the journal refuses it, and those are new bytes
    of the same text, not the erased ones."""
    first = min((e.start for e in trace.events if e.step in ERASING_STEPS), default=None)
    if first is None:
        return set()
    later = [e for e in trace.events if e.start >= first and e.step not in ERASING_STEPS]
    return {marker(e.step) for e in later if e.step.startswith("L")} | (
        {MEMORY_ONE} if any(e.step == "U" for e in later) else set()
    )


def _erased_texts(trace: Trace, store: memory.MemoryStore, erased: set[str]) -> list[str]:
    """The texts (``marker``) whose every memory the journal committed is among ``erased``, and
    that nothing wrote again after an erase (``_written_again``)."""
    jr = store.open_journal()
    committed = {r.key for run in jr.runs() for r in jr.read(run.run_id, memory.STREAM)}
    memories = _memories(trace)
    out = []
    for text in sorted({marker(step) for step in memories.values()}):
        group = {m for m, step in memories.items() if marker(step) == text and m in committed}
        if group and group <= erased and text not in _written_again(trace):
            out.append(text)
    return out


def _erasure_reported(trace: Trace, store: memory.MemoryStore, v: Verdict) -> None:
    """Before the repair: an erase record whose memory still has bytes somewhere is reported."""
    texts = _erased_texts(trace, store, _erased_memories(store))
    left = [p for text in texts for p in _holding(store.db_path.parent, text)]
    if not left:
        return
    kinds = {p.kind for p in memory.check_store(store)}
    if "erase_incomplete" not in kinds:
        v.unerased += 1
        v.notes.append(f"an erase record, erased bytes in {left[0].name}, and check reports {sorted(kinds)}")


def _judge_memory_one(store: memory.MemoryStore, owed: Promises, v: Verdict) -> None:
    """After recovery: memory 1's live version is one the steps allow."""
    live = store.current(memory_one())
    got = live.key if live is not None else None
    if got not in owed.memory_one:
        if got is not None and got in owed.retired:
            v.resurrected += 1
        elif got is None or (owed.memory_one - {None}):
            v.lost += 1
        else:
            v.fabricated += 1
        v.notes.append(f"memory 1's live version is {got}, not one of {sorted(map(str, owed.memory_one))}")


def _judge_erasures(trace: Trace, store: memory.MemoryStore, state: Path, owed: Promises, v: Verdict) -> None:
    """After recovery: where every memory holding a text (``marker``) that the journal committed
    was erased (acknowledged, or in flight and recorded), no byte of the text is left anywhere; a
    memory with no erase record has no tombstone (an erase in flight left it untouched)."""
    recorded = _erased_memories(store)
    for text in _erased_texts(trace, store, owed.erased | recorded):
        left = _holding(state, text)
        if left and not v.unerased:  # one per state
            v.unerased += 1
            v.notes.append(
                f"{text!r} was erased, and its bytes are in {[str(p.relative_to(state)) for p in left]}"
            )
    jr = store.open_journal()
    tombstones = {
        r.key for run in jr.runs() for r in jr.read(run.run_id, memory.STREAM) if memory.is_erased(r)
    }
    bare = {m for m in _memories(trace) if m in tombstones and m not in recorded}
    if bare and not v.unerased:
        v.unerased += 1
        v.notes.append(f"memories {sorted(bare)} have a tombstone and no erase record")


def _readable(store: memory.MemoryStore, every: bool = True) -> Counter[str]:
    """The keys every read returns: recall, and (``every``) why and current (a key twice in one
    read counts twice)."""
    keys = Counter(e.key for e in store.recall(limit=None, scope=None))
    if not every:
        return keys
    why = Counter(e.finding.key for e in store.why("finding number", limit=1000))
    keys.update({k: n - keys[k] for k, n in why.items() if n > keys[k]})
    one = store.current(memory_one())
    if one is not None and one.key not in keys:
        keys[one.key] = 1
    return keys


def _resurrected(
    store: memory.MemoryStore,
    readable: set[str],
    owed: Promises,
    v: Verdict,
    *,
    when: str,
    final: bool = False,
) -> None:
    """Count what ``store`` reads that an acknowledged step retired (``final``, after recovery: or
    any retirement the journal holds, a step in flight that landed included; before, such a
    step's record may stand with its retired files not yet published, which check reports)."""
    back = readable & owed.retired
    for key in readable - back if final else ():
        if any(e.key == key and e.kind in ("superseded", "forgotten", "erased") for e in store.history(key)):
            back.add(key)
    if back:
        v.resurrected += len(back)
        v.notes.append(f"{when}: {len(back)} retired findings readable again")


def _count(
    store: memory.MemoryStore,
    has_run: bool,
    run_id: str,
    acked: list[Event],
    *,
    tried: set[str],
    owed: Promises,
    v: Verdict,
    when: str,
    final: bool = False,
) -> None:
    if not has_run:
        if acked:
            v.lost += len(acked)
            v.notes.append(f"{when}: root run {run_id} is gone")
        return
    jr = store.open_journal()
    records = jr.read(run_id, memory.STREAM)
    keys = Counter(r.key for r in records)
    first = {r.key: r for r in reversed(records)}
    known = set(keys) | _session_keys(jr, run_id, v, when=when)
    readable = _readable(store, owed.changes)
    recalled = set(readable)
    excused = owed.excused()
    for e in acked:
        if not e.step.startswith("L"):
            continue
        if keys[e.detail] == 0 or (e.detail not in recalled and e.detail not in excused):
            v.lost += 1
            v.notes.append(
                f"{when}: acknowledged {e.step} has {keys[e.detail]} records, recalled={e.detail in recalled}"
            )
        elif e.detail in recalled:
            path = memory.learned_dir(store.db_path, SCOPE) / f"{e.detail}.json"
            if path.read_bytes() != memory.render(first[e.detail]):
                v.unexpected += 1
                v.notes.append(f"{when}: acknowledged {e.step}'s file is not its record's rendering")
    _unjournaled(store, v, when=when, every=owed.changes)
    _resurrected(store, recalled, owed, v, when=when, final=final and owed.changes)
    extra = sum(n - 1 for n in keys.values() if n > 1) + sum(n - 1 for n in readable.values() if n > 1)
    if (
        final and owed.changes
    ):  # before the repair, an update in flight may have left two live versions, reported
        lives = Counter(e.memory_id for e in store.recall(limit=None, scope=None))
        extra += sum(n - 1 for n in lives.values() if n > 1)
    if extra:
        v.doubled += extra
        v.notes.append(f"{when}: {extra} doubled records, reads or live versions")
    made_up = (known | recalled) - tried - owed.made
    if made_up:
        v.fabricated += len(made_up)
        v.notes.append(f"{when}: {len(made_up)} findings nobody learned")


def _session_keys(jr: JournalBackend, root: str, v: Verdict, *, when: str) -> set[str]:
    """The keys the sessions' runs (every run but ``root``) committed; a key twice in one counts
    as doubled."""
    known: set[str] = set()
    for run in jr.runs():
        if run.run_id != root:
            keys = Counter(r.key for r in jr.read(run.run_id, memory.STREAM))
            if any(n > 1 for n in keys.values()):
                v.doubled += sum(n - 1 for n in keys.values() if n > 1)
                v.notes.append(f"{when}: doubled records in session run {run.run_id}")
            known |= {k for k in keys if k is not None}
    return known


def _unjournaled(
    store: memory.MemoryStore, v: Verdict, *, when: str, torn_ok: bool = False, every: bool = True
) -> set[str] | None:
    """Count the findings ``store`` reads that no record of any run commits (``torn_ok``: a read
    refused with ``memory_unreachable`` for a learned file whose finding a record commits is
    counted as refused, not as a failure: the file was torn, and the read failed closed); return
    what it read (None when refused)."""
    jr = store.open_journal()
    keys = {r.key for run in jr.runs() for r in jr.read(run.run_id, memory.STREAM) if not memory.is_erased(r)}
    try:
        readable = set(_readable(store, every))
    except memory.Unreachable as exc:
        path = exc.context().get("path")
        if not torn_ok or path is None or Path(str(path)).stem not in keys:
            raise
        v.refused += 1
        return None
    if readable - keys:
        v.fabricated += len(readable - keys)
        v.notes.append(f"{when}: {len(readable - keys)} findings readable without a record")
    return readable


def _judge_ledger(acked: list[Event], attempted: list[Event], state: Path, v: Verdict) -> None:
    db, sail = _store_paths(state)
    ledger = Ledger(sail)
    with ledger.writer():
        pass  # the next tick's locked open: cuts a torn tail
    lines = Counter(_wire(e) for e in ledger.entries())
    tried = {e.detail for e in attempted if e.detail is not None}
    for e in acked:
        if lines[e.detail] == 0:
            v.lost += 1
            v.notes.append(f"acknowledged entry {e.step} is missing")
    extra = sum(n - 1 for n in lines.values() if n > 1)
    if extra:
        v.doubled += extra
        v.notes.append(f"{extra} doubled ledger lines")
    made_up = set(lines) - tried
    if made_up:
        v.fabricated += len(made_up)
        v.notes.append(f"{len(made_up)} ledger lines nobody appended")
    confirmed = [e for e in ledger.entries() if isinstance(e, Acted) and e.outcome is Outcome.CONFIRMED]
    last = ledger.last_confirmed()
    if (last.tx_hash if last else None) != (confirmed[-1].tx_hash if confirmed else None):
        v.unexpected += 1
        v.notes.append(f"the snapshot says the last act is {last}, the ledger {confirmed[-1:]}")
    with memory.MemoryStore(db) as store:
        # the workload appends acts alone, with no activity log beside them: each is a claim by
        # construction (``ledger_claim``, tested on its own), not damage a crash left
        problems = [p for p in memory.check_store(store, sail_dirs=[sail]) if p.kind != "ledger_claim"]
    if problems:
        v.unexpected += len(problems)
        v.notes += [f"{p.kind} {p.message}" for p in problems]


# -- driving ------------------------------------------------------------------------------------


def scratch_root() -> Path:
    """A fresh scratch directory, in memory when the machine has ``/dev/shm``."""
    shm = "/dev/shm"
    return Path(tempfile.mkdtemp(prefix="flows-powerloss-", dir=shm if os.path.isdir(shm) else None))


class Explorer:
    """Builds crash states of recorded workloads, recovers each once, and tallies the verdicts."""

    def __init__(
        self,
        tally: Tally,
        scratch: Path,
        fills: Callable[[str], tuple[str, ...]] = default_fills,
        *,
        recover: bool = True,
    ) -> None:
        self.tally = tally
        self.scratch = scratch
        self.fills = fills
        self.recover = recover
        self._n = 0

    def point(self, trace: Trace, k: int) -> CrashPoint:
        """The crash point after ``k`` operations of ``trace``."""
        return CrashPoint(trace.ops, k, trace.info["names"], self.fills)

    def record(self, kind: str, steps: Sequence[str]) -> Trace:
        """Run and record one workload in a scratch directory of its own."""
        self._n += 1
        base = self.scratch / f"w{self._n}"
        base.mkdir()
        trace = (record_findings if kind == "findings" else record_ledger)(steps, base)
        shutil.rmtree(base)
        return trace

    def judge_state(
        self,
        trace: Trace,
        point: CrashPoint,
        dirs: dict[str, int],
        files: dict[int, FileChoice],
        seen: set[bytes] | None,
    ) -> None:
        """Materialise, recover and judge one crash state (skipped when already seen)."""
        tree = point.tree(dirs, files)
        if tree is None:
            return
        acked = sum(1 for e in trace.events if e.end is not None and e.end <= point.k)
        key = signature(tree) + bytes([min(acked, 255)])
        if seen is not None:
            if key in seen:
                return
            seen.add(key)
        self._n += 1
        state = self.scratch / f"s{self._n}"
        state.mkdir()
        try:
            materialize(tree, state)
            verdict = judge(trace, point.k, state, recover=self.recover)
        finally:
            shutil.rmtree(state, ignore_errors=True)
        count(self.tally, verdict, f"{trace.kind} {''.join(trace.steps)} @op {point.k}")

    def exhaust(self, trace: Trace) -> None:
        """Judge every crash state of ``trace``, at every operation (equal states once)."""
        seen: set[bytes] = set()
        for k in range(len(trace.ops) + 1):
            point = self.point(trace, k)
            for dirs, files in point.states():
                self.judge_state(trace, point, dirs, files, seen)

    def cover(self, trace: Trace, rng: random.Random, points: Sequence[int] | None = None) -> None:
        """Judge the covering states (``CrashPoint.covering_states``) of ``trace`` at every
        operation (or at ``points``), equal states once."""
        seen: set[bytes] = set()
        for k in range(len(trace.ops) + 1) if points is None else points:
            point = self.point(trace, k)
            for dirs, files in point.covering_states(rng):
                self.judge_state(trace, point, dirs, files, seen)

    def sample(self, trace: Trace, rng: random.Random, n: int) -> None:
        """Judge ``n`` crash states of ``trace`` drawn at random."""
        for _ in range(n):
            point = self.point(trace, rng.randrange(len(trace.ops) + 1))
            self.judge_state(trace, point, *point.random_state(rng), None)


def workloads(alphabet: Sequence[str], longest: int) -> list[tuple[str, ...]]:
    """Every sequence of 1 to ``longest`` steps over ``alphabet``."""
    return [w for n in range(1, longest + 1) for w in itertools.product(alphabet, repeat=n)]


FINDING_STEPS = ("L1", "L2", "R", "D")
LEDGER_STEPS = ("S", "A")
RANDOM_FINDING_STEPS = ("L1", "L2", "L3", "L4", "R", "D", *CHANGE_STEPS)
CHANGE_PREFIX = ("L1", "L2")


def change_workloads(longest: int) -> list[tuple[str, ...]]:
    """``L1 L2``, then every sequence of 1 to ``longest`` session steps (``U``, ``W``, ``E``)."""
    return [CHANGE_PREFIX + w for w in workloads(CHANGE_STEPS, longest)]


def run_exhaustive(
    longest: int = 3,
    kinds: Sequence[str] = ("findings", "ledger"),
    alphabets: dict[str, Sequence[str]] | None = None,
    *,
    recover: bool = True,
) -> list[Tally]:
    """Every crash state of every workload of up to ``longest`` steps over each kind's alphabet
    (``recover=False``: without the check a store open makes for lost names)."""
    alphabets = {"findings": FINDING_STEPS, "ledger": LEDGER_STEPS, **(alphabets or {})}
    out = []
    scratch = scratch_root()
    try:
        for kind in kinds:
            steps_of = ",".join(alphabets[kind])
            tally = Tally(
                f"power loss, every state, {kind} workloads of <= {longest} steps over {{{steps_of}}}"
            )
            explorer = Explorer(tally, scratch, recover=recover)
            for steps in workloads(alphabets[kind], longest):
                explorer.exhaust(explorer.record(kind, steps))
            out.append(tally)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def run_random(states: int = 1000, length: int = 8, seed: int = 7) -> Tally:
    """``states`` random crash states of random longer workloads (findings and ledger alike)."""
    rng = random.Random(seed)
    tally = Tally(f"power loss, {states} random states, workloads of {length} steps")
    scratch = scratch_root()
    try:
        explorer = Explorer(tally, scratch)
        per_trace = 50
        while tally.cases < states:
            kind = rng.choice(("findings", "ledger"))
            alphabet = RANDOM_FINDING_STEPS if kind == "findings" else LEDGER_STEPS
            trace = explorer.record(kind, [rng.choice(alphabet) for _ in range(length)])
            explorer.sample(trace, rng, min(per_trace, states - tally.cases))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return tally


def run_random_changes(per_workload: int = 20, longest: int = 2, seed: int = 13) -> Tally:
    """``per_workload`` random crash states of each workload of ``change_workloads(longest)``."""
    rng = random.Random(seed)
    chosen = change_workloads(longest)
    steps = ",".join(CHANGE_STEPS)
    tally = Tally(f"power loss, {per_workload} random states each, L1 L2 then <= {longest} of {{{steps}}}")
    scratch = scratch_root()
    try:
        explorer = Explorer(tally, scratch)
        for w in chosen:
            explorer.sample(explorer.record("findings", w), rng, per_workload)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return tally


def run_covering(longest: int = 2, seed: int = 3, steps: Sequence[Sequence[str]] | None = None) -> Tally:
    """The covering states (every choice of every file and folder, the others at random) at every
    operation of every workload of ``change_workloads(longest)`` (or of ``steps``): updates,
    forgets by filter and erases, each in a session of its own, after a root run's learns."""
    rng = random.Random(seed)
    chosen = [tuple(w) for w in steps] if steps is not None else change_workloads(longest)
    what = (
        f"L1 L2 then <= {longest} of {{{','.join(CHANGE_STEPS)}}}"
        if steps is None
        else ", ".join(" ".join(w) for w in chosen)
    )
    tally = Tally(f"power loss, every choice of every file and folder at every point, {what}")
    scratch = scratch_root()
    try:
        explorer = Explorer(tally, scratch)
        for w in chosen:
            explorer.cover(explorer.record("findings", w), rng)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return tally


@contextlib.contextmanager
def without_publish_dir_fsync(where: str = "") -> Iterator[None]:
    """Remove one fsync on purpose: the directory fsync after ``publish``'s rename (only for
    directories whose path contains ``where``, when given)."""
    real = staging._stage.fsync_dir

    def maybe(directory: Any, at: Any = None) -> None:
        caller = sys._getframe(1).f_code.co_name
        if caller not in ("publish", "sync_dir_shared") or where not in os.fspath(directory):
            real(directory, at)

    staging._stage.fsync_dir = maybe
    try:
        yield
    finally:
        staging._stage.fsync_dir = real


def run_ledger_replay(longest: int = 2) -> Tally:
    """What replayed stale lines do to the bare-format ledger (outside the model; see ``FILLS``)."""
    tally = Tally(f"ledger, replayed stale lines, workloads of <= {longest} steps (outside the model)")
    scratch = scratch_root()
    try:
        explorer = Explorer(tally, scratch, fills=lambda _path: FILLS)
        for steps in workloads(LEDGER_STEPS, longest):
            explorer.exhaust(explorer.record("ledger", steps))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return tally


# -- damage in the middle of a stream ------------------------------------------------------------
# A power loss never harms bytes an fsync made durable; a bad disk, a careless restore or a person
# can. Here a crash state of a findings workload gets one more blow before recovery: a line of the
# root run's ``memory-learn`` stream that lies wholly below the durability watermark the crash state
# holds, with the line after it below the mark too, is deleted, zeroed in place (newline included),
# duplicated, or swapped with the next. The verdict: every acknowledged learn still readable after
# recovery, or a coded refusal (``journal_corrupt``) from the store's open, a read or the resume;
# never a silent loss, never a traceback. (Past the watermark a reader cannot tell damage from the
# tail a crash tears, holes and landed later lines included, and cuts it: the watermark's own write
# reaches the disk with the log's next sync, so what such a cut can take is bounded by the records
# appended since; see docs/JOURNAL.md.)

DAMAGES = ("delete", "zero", "duplicate", "swap")


def damage_mid_stream(state: Path, run_id: str, how: str, rng: random.Random) -> bool:
    """Damage one middle line of ``run_id``'s ``memory-learn`` stream in the crash state ``state``,
    one that ends at or below its watermark; False when there is none."""
    db, _ = _store_paths(state)
    path = db.parent / "flows-journal" / "runs" / run_id / "streams" / f"{memory.STREAM}.jsonl"
    if not path.is_file():
        return False
    from journal import LineLog, RecordCodec

    mark = LineLog(path, RecordCodec(run_id, memory.STREAM), sequence=lambda r: r.seq).watermark() or 0
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    lines = complete.splitlines(keepends=True)
    # the line and the one after it both end at or below the mark: the middle of what was synced
    below = [i for i in range(len(lines) - 1) if sum(map(len, lines[: i + 2])) <= mark]
    if not below:
        return False
    i = rng.choice(below)
    if how == "delete":
        lines[i] = b""
    elif how == "zero":
        lines[i] = b"\0" * len(lines[i])
    elif how == "duplicate":
        lines[i] = lines[i] * 2
    else:
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    path.write_bytes(b"".join(lines) + data[len(complete) :])
    return True


def judge_damaged(trace: Trace, k: int, state: Path, how: str, rng: random.Random) -> Verdict | None:
    """Damage the crash state (``damage_mid_stream``), then recover and judge it; a coded
    ``journal_corrupt`` from any step counts as refused (the store failed closed). None when the
    state has no middle line to damage."""
    if not damage_mid_stream(state, trace.info["run_id"], how, rng):
        return None
    verdict = Verdict()
    acked = [e for e in trace.events if e.end is not None and e.end <= k]
    attempted = [e for e in trace.events if e.start < k]
    verdict.acknowledged = len(acked)
    try:
        _judge_findings(trace, acked, attempted, state, verdict, recover=True)
    except staging.CodedError as exc:
        if exc.code != "journal_corrupt":
            verdict.unexpected += 1
            verdict.notes.append(f"{how}: recovery failed with {exc.code}: {exc}")
        else:
            verdict.refused += 1
            verdict.lost = verdict.doubled = verdict.fabricated = verdict.unexpected = 0
    except Exception as exc:
        verdict.unexpected += 1
        verdict.notes.append(f"{how}: recovery raised {traceback.format_exception_only(exc)[-1].strip()}")
    return verdict


def run_mid_stream_damage(states: int = 200, length: int = 5, seed: int = 5) -> Tally:
    """``states`` crash states of random findings workloads, each damaged in the middle of its
    stream by one of ``DAMAGES`` (in turn), recovered and judged."""
    rng = random.Random(seed)
    tally = Tally(f"power loss then mid-stream damage, {states} states, workloads of {length} steps")
    scratch = scratch_root()
    try:
        explorer = Explorer(tally, scratch)
        n = 0
        while tally.cases < states:
            trace = explorer.record(
                "findings", [rng.choice(("L1", "L2", "L3", "L4", "R")) for _ in range(length)]
            )
            for _ in range(20):
                point = explorer.point(trace, rng.randrange(len(trace.ops) + 1))
                tree = point.tree(*point.random_state(rng))
                if tree is None:
                    continue
                n += 1
                state = scratch / f"d{n}"
                state.mkdir()
                how = DAMAGES[n % len(DAMAGES)]
                try:
                    materialize(tree, state)
                    verdict = judge_damaged(trace, point.k, state, how, rng)
                finally:
                    shutil.rmtree(state, ignore_errors=True)
                if verdict is None:
                    continue
                count(tally, verdict, f"{''.join(trace.steps)} @op {point.k} {how}")
                if tally.cases >= states:
                    break
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return tally
