"""Shared pieces of the memory adversarial suites: a populated store, the CLI as a bounded
subprocess, snapshots of a folder tree, the documented codes, and ways to take file permissions
and writable mounts away for real."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import stat
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

import journal
import memory
from tests.conftest import ROOT

CLI_TIMEOUT_S = 60.0


@dataclass
class Store:
    """A store under ``db`` with one root run that learned ``texts`` (files, or rows once synced)."""

    db: Path
    run_id: str
    scope: str
    keys: dict[str, str]  # finding id -> text

    @property
    def folder(self) -> Path:
        return memory.learned_dir(self.db, self.scope)

    @property
    def journal_dir(self) -> Path:
        return self.db.parent / "flows-journal"


def populate(db: Path, texts: list[str], *, scope: str = "adv", flow: str = "adv") -> Store:
    """Learn ``texts`` in one (finished) root run of the file journal beside ``db``."""
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin(flow, scope, {"source": f"{flow}.py"})
        root = memory.RootRun(jr, lease, flow, scope)
        keys = {store.learn({"text": t, "tags": ["adv"]}, root).id: t for t in texts}
        jr.finish(lease, journal.RunState.DONE)
    return Store(db, lease.run_id, scope, keys)


def flows(
    db: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = CLI_TIMEOUT_S,
    preexec: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m flows ARGS --db DB`` (``$FLOWS_JOURNAL`` unset unless ``env`` sets it),
    bounded by ``timeout`` (a hang fails the test with ``TimeoutExpired``)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT)}
    full.pop("FLOWS_JOURNAL", None)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "flows", *args, "--db", str(db)],
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
        check=False,
        preexec_fn=preexec,
    )


def error_code(result: subprocess.CompletedProcess[str]) -> str:
    """The code of the one diagnostic line a failed command printed (asserting its form)."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    if lines[0].startswith("{"):
        code = orjson.loads(lines[0])["code"]
        assert isinstance(code, str)
        return code
    found = re.match(r"flows: error\[([a-z_]+)\]: ", lines[0])
    assert found is not None, lines[0]
    return found.group(1)


def documented_codes() -> set[str]:
    """Every code in the first column of docs/SURFACE.md's tables."""
    text = (ROOT / "docs" / "SURFACE.md").read_text()
    return set(re.findall(r"^\| `([a-z_]+)` \|", text, re.M))


def snapshot(root: Path, *, skip: Path | None = None) -> dict[str, tuple[str, bytes | str | None, int]]:
    """Every path under ``root`` (not following links, and not below ``skip``): its type, its bytes
    (files) or target (links), and its permission bits."""
    out: dict[str, tuple[str, bytes | str | None, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if skip is not None and (here == skip or skip in here.parents):
            dirnames[:] = []
            continue
        for name in [*dirnames, *filenames]:
            path = here / name
            if skip is not None and path == skip:
                continue
            st = os.lstat(path)
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path), 0)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
            else:
                out[rel] = (oct(stat.S_IFMT(st.st_mode)), None, stat.S_IMODE(st.st_mode))
    return out


# -- taking permissions and writable mounts away, for real ---------------------------------------

_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def without_dac_override() -> None:
    """For a child process (``preexec_fn``): drop the capabilities that let root ignore file modes,
    so permission bits bind it as they bind any user (a no-op for a non-root user)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=30)


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A fresh tmpfs of ``size`` mounted at ``where`` (created), unmounted afterwards. Needs the
    right to mount (root in the test container); raises ``PermissionError`` otherwise."""
    where.mkdir(parents=True, exist_ok=True)
    tag = f"flows-adv-{uuid.uuid4().hex[:8]}"
    mounted = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", tag, str(where))
    if mounted.returncode != 0:
        raise PermissionError(f"cannot mount a tmpfs at {where}: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        _run("mount", "-o", "remount,rw", str(where))
        done = _run("umount", str(where))
        if done.returncode != 0:
            _run("umount", "-l", str(where))


def remount_read_only(where: Path) -> None:
    """Make the tmpfs at ``where`` read-only."""
    done = _run("mount", "-o", "remount,ro", str(where))
    assert done.returncode == 0, done.stderr


def can_mount(probe: Path) -> bool:
    """Whether this process may mount a tmpfs (tried for real at ``probe``)."""
    try:
        with tmpfs(probe, "64k"):
            return True
    except (PermissionError, FileNotFoundError):
        return False
