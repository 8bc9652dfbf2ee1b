"""Fixtures of the findings-memory tests: a store under ``tmp_path``, a root run, a stepping clock."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import memory
from memory._reaper import REAPER
from tests._helpers.failpoints import arm, disarm


class Clock:
    """Milliseconds that move forward by ``step`` on every reading (so learns never tie)."""

    def __init__(self, start: int = 1_700_000_000_000, step: int = 1_000) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> int:
        self.now += self.step
        return self.now


def stages(directory: Path) -> list[str]:
    """The staged (hidden, temporary) files in ``directory``."""
    try:
        return sorted(n for n in os.listdir(directory) if n.startswith(".stage-"))
    except FileNotFoundError:
        return []


def learned_files(db: Path) -> list[Path]:
    """Every learned file under the DB's folder, hidden ones too, once this process's background
    unlinks are done (a removed file is set aside under a hidden name until then)."""
    REAPER.drain(10)
    return sorted((db.parent / "flows-memory").rglob("*.json"))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Where the history DB lives (not created)."""
    return tmp_path / "data" / "history.db"


@pytest.fixture
def clock() -> Clock:
    """The store's clock."""
    return Clock()


@pytest.fixture
def store(db: Path, clock: Clock) -> Iterator[memory.MemoryStore]:
    """A store over ``db`` and the file journal beside it."""
    with memory.MemoryStore(db, clock=clock) as s:
        yield s


@pytest.fixture
def root(store: memory.MemoryStore) -> memory.RootRun:
    """A running root run of flow ``probe`` in scope ``scope-a``, driven by this process."""
    jr = store.open_journal()
    _, lease = jr.begin("probe", "scope-a", {"source": "probe.py"})
    return memory.RootRun(jr, lease, "probe", "scope-a")


class Failpoints:
    """Arms ``$FLOWS_FAILPOINTS`` in this process (the plan is re-read at once)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch

    def set(self, plan: str) -> None:
        """Arm ``plan`` (``name=ACTION[,...]``); an empty plan disarms every failpoint."""
        arm(self._monkeypatch, plan)


@pytest.fixture
def failpoints(monkeypatch: pytest.MonkeyPatch) -> Iterator[Failpoints]:
    """Failpoints armed in-process for one test, disarmed afterwards."""
    yield Failpoints(monkeypatch)
    disarm(monkeypatch)
