"""The random kill soak: ``flows run`` and ``flows resume`` processes learning concurrently on one
store (the same findings, each process its own root run) and across stores, SIGKILLed at random
instants and resumed, for a bounded time; then every unfinished root is resumed to the end and the
stores are judged: ``check_store`` clean, every acknowledged finding recallable and journaled, one
record per finding per root run, nothing recallable that no flow learned.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import flows
import memory
from journal import RunState
from tests.reliability import powerloss, sweep_flow
from tests.reliability.failpoints import FLOW_FILE, ROOT
from tests.reliability.tally import Tally

FINDINGS = 12


def _spawn(db: Path, args: list[str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.update(RELIABILITY_FINDINGS=str(FINDINGS), RELIABILITY_ACKS=str(db.parent / "acks"))
    for name in ("FLOWS_FAILPOINTS", "RELIABILITY_FAILPOINTS", "RELIABILITY_STOP_AFTER", "FLOWS_JOURNAL"):
        env.pop(name, None)
    return subprocess.Popen(
        [sys.executable, "-m", "flows", *args, "--db", str(db)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _unfinished(db: Path) -> list[str]:
    with memory.MemoryStore(db) as store:
        return [r.run_id for r in store.open_journal().runs() if r.state is not RunState.DONE]


def _round(dbs: list[Path], per_store: int, rng: random.Random) -> int:
    """Start ``per_store`` processes on each store (resumes first), kill some at random; return kills."""
    procs: list[subprocess.Popen[bytes]] = []
    for db in dbs:
        pending = _unfinished(db)
        rng.shuffle(pending)
        for i in range(per_store):
            args = ["resume", pending[i]] if i < len(pending) else ["run", str(FLOW_FILE)]
            procs.append(_spawn(db, args))
    kills = 0
    deadline = time.monotonic() + rng.uniform(0.05, 1.2)
    victims = [p for p in procs if rng.random() < 0.7]
    rng.shuffle(victims)
    for p in victims:
        time.sleep(max(0.0, min(deadline - time.monotonic(), rng.uniform(0.0, 0.3))))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
    for p in procs:
        p.wait(timeout=120)
    return kills


def _finish(db: Path) -> None:
    with _quiet_env():
        for run_id in _unfinished(db):
            result = flows.resume(run_id, db=db)
            assert result.ok, result.error


class _quiet_env:
    """``flows.resume`` in this process learns the soak's findings with no acknowledgement file."""

    def __enter__(self) -> None:
        self._saved = os.environ.get("RELIABILITY_FINDINGS")
        os.environ["RELIABILITY_FINDINGS"] = str(FINDINGS)

    def __exit__(self, *exc: object) -> None:
        if self._saved is None:
            os.environ.pop("RELIABILITY_FINDINGS", None)
        else:
            os.environ["RELIABILITY_FINDINGS"] = self._saved


def judge(db: Path, tally: Tally) -> None:
    """Judge one store after every root has been resumed to the end."""
    wanted = {
        memory.finding_id(
            "sweep", memory.validate({"text": sweep_flow.text(n), "tags": ["sweep"]}, "sweep")
        ): n
        for n in range(FINDINGS)
    }
    by_number = {n: fid for fid, n in wanted.items()}
    acked = (db.parent / "acks").read_text().splitlines() if (db.parent / "acks").exists() else []
    tally.acknowledged += len(acked)
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        records = {r.run_id: Counter(x.key for x in jr.read(r.run_id, memory.STREAM)) for r in jr.runs()}
        recalled = Counter(e.key for e in store.recall(limit=None))
        problems = memory.check_store(store)
    for run_id, keys in records.items():
        extra = sum(n - 1 for n in keys.values())
        if extra:
            tally.doubled += extra
            tally.note(f"{db}: root run {run_id} has {extra} doubled records")
        if set(keys) - set(wanted):
            tally.fabricated += len(set(keys) - set(wanted))
            tally.note(f"{db}: root run {run_id} journals findings nobody learned")
    for line in acked:
        run_id, n = line.split()
        fid = by_number[int(n)]
        if records.get(run_id, Counter())[fid] == 0 or recalled[fid] == 0:
            tally.lost += 1
            tally.note(f"{db}: acknowledged {line} is lost")
    if set(recalled) - set(wanted):
        tally.fabricated += len(set(recalled) - set(wanted))
        tally.note(f"{db}: recalled findings nobody learned")
    if any(n > 1 for n in recalled.values()):
        tally.doubled += 1
        tally.note(f"{db}: a finding recalled twice")
    if problems:
        tally.unexpected += len(problems)
        tally.note(f"{db}: check: {problems[0].kind} {problems[0].message}")


def run_soak(seconds: float = 20.0, stores: int = 2, per_store: int = 2, seed: int = 3) -> Tally:
    """Kill and resume for about ``seconds``; returns the figures (cases = kills survived)."""
    rng = random.Random(seed)
    tally = Tally(f"kill soak, {stores} stores x {per_store} processes, {seconds:.0f} s")
    scratch = powerloss.scratch_root()
    dbs = [scratch / f"store{i}" / "history.db" for i in range(stores)]
    for db in dbs:
        db.parent.mkdir()
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            tally.cases += _round(dbs, per_store, rng)
        for db in dbs:
            try:
                _finish(db)
            except Exception as exc:
                tally.unexpected += 1
                tally.note(f"{db}: resuming to the end raised {type(exc).__name__}: {exc}")
            judge(db, tally)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return tally
