"""Running the flows CLI in a temp store, and checking a store's invariants."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

import journal
import memory
from tests.conftest import ROOT


def flows_cmd(installed: bool = False) -> list[str]:
    """The command that runs the CLI: the installed console script, or ``python -m flows``."""
    if installed:
        exe = shutil.which("flows")
        assert exe is not None, "the `flows` console script is not installed (pip install -e .)"
        return [exe]
    return [sys.executable, "-m", "flows"]


def flows(
    db: Path, *args: str, installed: bool = False, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``flows ARGS --db DB`` and return the completed process."""
    full_env = {k: v for k, v in os.environ.items() if k != "FLOWS_EMBEDDER"}
    full_env = {**full_env, "PYTHONPATH": str(ROOT), **(env or {})}
    full_env.pop("FLOWS_JOURNAL", None)
    return subprocess.run(
        [*flows_cmd(installed), *args, "--db", str(db)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )


def write_flow(path: Path, body: str, header: str = "") -> Path:
    """Write a flow file whose body is ``body`` (indented into ``async def body(f)``)."""
    lines = "\n".join("    " + line for line in body.strip("\n").splitlines())
    path.write_text(f"import asyncio\nimport flows\n\n\n@flows.flow({header})\nasync def body(f):\n{lines}\n")
    return path


def json_of(result: subprocess.CompletedProcess[str]) -> Any:
    """The JSON a command printed on stdout (asserting it succeeded)."""
    assert result.returncode == 0, result.stderr
    return orjson.loads(result.stdout)


def check_invariants(db: Path, run_id: str) -> dict[str, memory.Recalled]:
    """Assert the learn invariants for one root run; return its findings by key.

    One record per finding in ``memory-learn``; every learned file parses, cites a record that
    exists, and is exactly that record's rendering.
    """
    store = memory.MemoryStore(db)
    try:
        jr = store.open_journal()
        records = list(jr.read(run_id, memory.STREAM))
        counts = Counter(r.key for r in records)
        assert all(n == 1 for n in counts.values()), counts
        by_id = {r.id: r for r in records}
        found: dict[str, memory.Recalled] = {}
        for d in memory.scope_dirs(db):
            for p in d.iterdir():
                if p.name.startswith("."):
                    continue
                entry = memory.read_learned(p)
                if entry.citation.run_id != run_id:
                    continue
                rec = by_id[entry.citation.id]
                assert p.read_bytes() == memory.render(rec), p
                found[entry.key] = entry
        return found
    finally:
        store.close()


def journal_of(db: Path) -> journal.FileJournal:
    """The file journal beside ``db``."""
    return journal.FileJournal(db.parent / "flows-journal")


def many_versions(folder: Path, versions: int) -> tuple[Path, str, list[dict[str, Any]]]:
    """A store in ``folder`` whose one memory has ``versions`` versions (an update a cron tick
    makes, ``versions - 1`` times): its DB, the memory's id and every event of its history."""
    db = folder / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        with store.session(scope="cron", flow="cron") as s:
            first = s.learn({"text": "check 0: all quiet"})
            for n in range(1, versions):
                s.update(first.memory_id, {"text": f"check {n}: all quiet"})
        everything = [e.as_json() for e in store.history(first.memory_id)]
    return db, first.memory_id, everything
