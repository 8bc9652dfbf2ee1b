"""The failpoint sweep: every named failpoint x each fault x learn, resume, sync, ledger append and
reconcile; then the normal recovery (resume the root, or the next tick), ``check_store`` clean, and
the model of acknowledged writes.

A fault is ``kill`` (SIGKILL: the operation runs in a child process) or an errno (``ENOSPC``,
``EIO``, ``EACCES``, ``EROFS``), raised once (``:once``) or every time the point is reached
(persistent: until the operation gives up; the fault clears before recovery, as a freed disk
would). Which failpoints an operation reaches is found by running it once with every point armed
to do nothing; a point the operation never reaches is not a case of it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson

import flows
import memory
from journal import RunState
from memory.ledger import (
    TRANSFER_TOPIC,
    Acted,
    ActivityLog,
    ChainTransaction,
    DispatchSubmitted,
    Ledger,
    LogRecord,
    Outcome,
    Receipt,
    SwapCall,
    TokenInfo,
    reconcile,
)
from staging import _failpoints
from tests.reliability import powerloss
from tests.reliability.tally import Tally

ROOT = Path(__file__).resolve().parents[2]
FLOW_FILE = Path(__file__).with_name("sweep_flow.py")
ERRNOS = ("ENOSPC", "EIO", "EACCES", "EROFS")
FAULTS_QUICK = ("kill", "ENOSPC:once", "EIO")
FAULTS_FULL = ("kill", *(f"{e}{mode}" for e in ERRNOS for mode in (":once", "")))
OPERATIONS = ("learn", "resume", "sync", "update", "forget by filter", "erase", "ledger append", "reconcile")
MEMORY_OPS = ("update", "forget by filter", "erase")  # on findings a flow learned, in a session
FINDINGS = 3
_CALL = re.compile(r"\b(?:failpoint|hit)\(\"([a-z_]+\.[a-z_]+)\"\)")


def failpoint_names() -> list[str]:
    """Every failpoint named in the write paths (``journal``, ``staging``, ``memory``)."""
    names: set[str] = set()
    for package in ("journal", "staging", "memory"):
        for path in (ROOT / package).rglob("*.py"):
            names.update(_CALL.findall(path.read_text()))
    return sorted(names)


# -- the operations ------------------------------------------------------------------------------


def _paths(base: Path) -> tuple[Path, Path, Path]:
    return base / "data" / "history.db", base / "sail", base / "acks"


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _disarm() -> None:
    os.environ.pop("FLOWS_FAILPOINTS", None)
    _failpoints.reset()


def setup(op: str, base: Path) -> None:
    """Prepare ``base`` for ``op``, with no fault armed."""
    db, sail, acks = _paths(base)
    if op == "resume":
        with _env(RELIABILITY_STOP_AFTER="2", RELIABILITY_ACKS=str(acks)):
            result = flows.run(FLOW_FILE, db=db)
        assert result.state is RunState.FAILED, result
    elif op in ("sync", *MEMORY_OPS):
        with _env(RELIABILITY_ACKS=str(acks)):
            assert flows.run(FLOW_FILE, db=db).ok
        acks.unlink()  # what the operation acknowledges is judged, not the learns before it
    elif op == "reconcile":
        log = ActivityLog(sail)
        for n in range(FINDINGS):
            log.append(_dispatch(n))


def perform(op: str, base: Path, plan: str) -> None:
    """Run ``op`` with the failpoint ``plan`` armed once its setup is done; errors propagate."""
    db, sail, acks = _paths(base)
    if op in ("learn", "resume"):
        with _env(RELIABILITY_FAILPOINTS=plan, RELIABILITY_ACKS=str(acks)):
            if op == "learn":
                flows.run(FLOW_FILE, db=db)
            else:
                flows.resume(_only_run(db), db=db)
        return
    os.environ["FLOWS_FAILPOINTS"] = plan
    _failpoints.reset()
    if op == "sync":
        with memory.MemoryStore(db) as store:
            store.sync()
    elif op in MEMORY_OPS:
        _perform_memory(op, db, acks)
    elif op == "ledger append":
        for n in range(FINDINGS):
            with Ledger(sail).writer() as w:
                w.append(powerloss.ledger_entry("SA"[n % 2], n))
            _ack(acks, str(n))
    else:
        with Ledger(sail).writer() as w:
            done = reconcile(
                w, ActivityLog(sail), FakeChain(), clock=lambda: 1_752_400_000, receipt_timeout=0
            )
        for entry in done:
            _ack(acks, entry.tx_hash)


def recover(op: str, base: Path) -> None:
    """The normal recovery after ``op``: resume unfinished roots, or run the next tick."""
    db, sail, _ = _paths(base)
    if op in MEMORY_OPS:  # a session has no body to resume: check --repair is the recovery
        with memory.MemoryStore(db) as store:
            problems = memory.check_store(store)
            if problems:
                memory.repair_store(store, problems)
            store.sync()
        return
    if op in ("learn", "resume", "sync"):
        with memory.MemoryStore(db) as store:
            pending = [r.run_id for r in store.open_journal().runs() if r.state is not RunState.DONE]
        for run_id in pending:
            result = flows.resume(run_id, db=db)
            assert result.ok, result.error
        if op == "sync":
            with memory.MemoryStore(db) as store:
                store.sync()
    elif op == "ledger append":
        with Ledger(sail).writer() as w:
            w.append(powerloss.ledger_entry("S", FINDINGS))
    else:
        with Ledger(sail).writer() as w:
            reconcile(w, ActivityLog(sail), FakeChain(), clock=lambda: 1_752_400_000, receipt_timeout=0)


def _fid(n: int) -> str:
    from tests.reliability import sweep_flow

    return memory.finding_id(
        "sweep", memory.validate({"text": sweep_flow.text(n), "tags": ["sweep"]}, "sweep")
    )


def _perform_memory(op: str, db: Path, acks: Path) -> None:
    from tests.reliability import sweep_flow

    with memory.MemoryStore(db) as store, store.session(scope="sweep", flow="sweep") as s:
        if op == "update":
            for n in range(FINDINGS):
                s.update(_fid(n), {"text": sweep_flow.text(n) + " revised", "tags": ["sweep"]})
                _ack(acks, f"update {n}")
        elif op == "forget by filter":
            s.forget_where(reason="the sweep forgets them all", tags=["sweep"])
            _ack(acks, "forgot")
        else:
            s.erase(_fid(0), reason="the sweep erases one")
            _ack(acks, "erased")


def _only_run(db: Path) -> str:
    with memory.MemoryStore(db) as store:
        (run,) = store.open_journal().runs()
    return run.run_id


def _ack(path: Path, what: str) -> None:
    with open(path, "a") as fh:
        fh.write(what + "\n")


def _acks(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


# -- a chain for reconcile ------------------------------------------------------------------------

_AGENT = "0x" + "33" * 20
_ROUTER = "0x" + "44" * 20
_USDC, _WETH = "0x" + "11" * 20, "0x" + "22" * 20


def _dispatch(n: int) -> DispatchSubmitted:
    return DispatchSubmitted(
        ts=1_752_400_000 + n,
        chain_id=8453,
        tx_hash=f"0x{n + 1:064x}",
        sender=_AGENT,
        to=_ROUTER,
        data="0xabcdef01",
        action="swap",
        permission=None,
    )


class FakeChain:
    """Every dispatch confirmed at block 100 + n, with a Transfer of WETH to the agent."""

    def receipt(self, tx_hash: str, timeout: float) -> Receipt | None:
        """A successful receipt."""
        n = int(tx_hash, 16)
        to_topic = "0x" + _AGENT[2:].rjust(64, "0")
        transfer = LogRecord(_WETH, (TRANSFER_TOPIC, "0x" + "0" * 64, to_topic), (10**16).to_bytes(32, "big"))
        return Receipt(status=1, block=100 + n, gas_used=50_000, logs=(transfer,))

    def transaction(self, tx_hash: str) -> ChainTransaction | None:
        """Every dispatch mined, sent by the agent with the calldata it logged."""
        n = int(tx_hash, 16)
        return ChainTransaction(_AGENT, _ROUTER, n - 1, "0xabcdef01", 100 + n)

    def nonce(self, account: str) -> int:
        """Every dispatch's nonce is used."""
        return FINDINGS

    def revert_reason(self, tx_hash: str) -> str | None:
        """Nothing reverts."""
        return None

    def block_timestamp(self, block: int) -> int:
        """A timestamp that grows with the block."""
        return 1_752_400_000 + block

    def decode_swap(self, to: str, data: str) -> SwapCall | None:
        """Every dispatch swaps 25 USDC for WETH."""
        return SwapCall(_USDC, _WETH, 25_000_000)

    def token_info(self, token: str) -> TokenInfo:
        """USDC or WETH."""
        return TokenInfo(6, "USDC") if token == _USDC else TokenInfo(18, "WETH")

    def balance_of(self, token: str, owner: str, block: int | None = None) -> int:
        """Some balance."""
        return 1_000 + (block or 0)


# -- judging --------------------------------------------------------------------------------------


def judge(op: str, base: Path, tally: Tally, label: str) -> None:
    """Compare what ``base`` holds after recovery with what was acknowledged; add to ``tally``."""
    db, sail, acks = _paths(base)
    acked = _acks(acks)
    tally.acknowledged += len(acked)
    with memory.MemoryStore(db) as store:
        # a failed sync's cut keeps the bytes it took beside the stream: evidence for a person,
        # which check lists (``stream_cut_kept``) and repair leaves, as it should after an fsync fault
        found = memory.check_store(store, sail_dirs=[sail] if sail.exists() else [])
        # and the ledger workloads append acts alone, with no activity log beside them: each is a
        # claim by construction (``ledger_claim``, tested on its own), not damage a crash left
        problems = [p for p in found if p.kind not in ("stream_cut_kept", "ledger_claim")]
        if op in MEMORY_OPS:
            _judge_memory(op, store, acked, tally, label)
        elif op in ("learn", "resume", "sync"):
            _judge_findings(store, acked, tally, label)
        elif sail.exists():
            _judge_ledger(op, sail, acked, tally, label)
    if problems:
        tally.unexpected += len(problems)
        tally.note(f"{label}: check: {problems[0].kind} {problems[0].message}")


def _judge_findings(store: memory.MemoryStore, acked: list[str], tally: Tally, label: str) -> None:
    from tests.reliability import sweep_flow

    wanted = {
        memory.finding_id(
            "sweep", memory.validate({"text": sweep_flow.text(n), "tags": ["sweep"]}, "sweep")
        ): n
        for n in range(FINDINGS)
    }
    jr = store.open_journal()
    runs = jr.runs()
    keys: Counter[str] = Counter()
    for run in runs:
        per_run = Counter(r.key for r in jr.read(run.run_id, memory.STREAM))
        if any(n > 1 for n in per_run.values()):
            tally.doubled += sum(n - 1 for n in per_run.values())
            tally.note(f"{label}: a finding has two records in root run {run.run_id}")
        keys.update(per_run)
    recalled = Counter(e.key for e in store.recall(limit=None))
    by_number = {n: fid for fid, n in wanted.items()}
    for line in acked:
        fid = by_number[int(line.split()[-1])]
        if keys[fid] == 0 or recalled[fid] == 0:
            tally.lost += 1
            tally.note(f"{label}: acknowledged finding {line} is not recallable")
    extra = set(keys) | set(recalled)
    if extra - set(wanted):
        tally.fabricated += len(extra - set(wanted))
        tally.note(f"{label}: findings nobody learned")
    if any(n > 1 for n in recalled.values()):
        tally.doubled += 1
        tally.note(f"{label}: a finding recalled twice")
    if set(recalled) != set(wanted) or any(r.state is not RunState.DONE for r in runs):
        tally.unexpected += 1
        tally.note(f"{label}: after recovery {len(recalled)} of {len(wanted)} findings, runs {runs}")


def _judge_memory(op: str, store: memory.MemoryStore, acked: list[str], tally: Tally, label: str) -> None:
    """After recovery: an acknowledged update, forget or erase holds; an unacknowledged one is
    all or nothing (a forget by filter never half done, an erase never half done); nothing
    forgotten comes back; nothing is made up or doubled."""
    from tests.reliability import sweep_flow

    live = store.recall(limit=None)
    texts = Counter(e.text for e in live)
    memories = Counter(e.memory_id for e in live)
    if any(n > 1 for n in memories.values()) or any(n > 1 for n in texts.values()):
        tally.doubled += 1
        tally.note(f"{label}: a memory has two live versions: {sorted(texts)}")
    known = {sweep_flow.text(n) for n in range(FINDINGS)} | {
        sweep_flow.text(n) + " revised" for n in range(FINDINGS)
    }
    if set(texts) - known:
        tally.fabricated += 1
        tally.note(f"{label}: findings nobody learned: {sorted(set(texts) - known)}")
    if op == "update":
        for n in range(FINDINGS):
            now = store.current(_fid(n))
            if now is None:
                tally.lost += 1
                tally.note(f"{label}: memory {n} has no live version")
            elif f"update {n}" in acked and not now.text.endswith(" revised"):
                tally.lost += 1
                tally.note(f"{label}: acknowledged update {n} is not the live version")
    elif op == "forget by filter":
        if "forgot" in acked and live:
            tally.lost += 1  # a forget acknowledged, and findings it retired still answer
            tally.note(f"{label}: {len(live)} findings back after an acknowledged forget by filter")
        elif len(live) not in (0, FINDINGS):
            tally.unexpected += 1
            tally.note(f"{label}: a forget by filter half done: {len(live)} of {FINDINGS} left")
    else:
        gone = _fid(0) not in {e.key for e in live}
        text = sweep_flow.text(0).encode()
        left = [p for p in _store_files(store) if text in p.read_bytes()]
        erased = any(
            rec.payload.get("memory") == _fid(0)
            for run in store.open_journal().runs()
            for rec in store.open_journal().read(run.run_id, memory.ERASE_STREAM)
        )
        if ("erased" in acked or erased) and (left or not gone):
            tally.lost += 1
            tally.note(f"{label}: erased, but its text is still in {left[:1]} or it still answers")
        if len(live) != FINDINGS - (1 if gone else 0):
            tally.unexpected += 1
            tally.note(f"{label}: {len(live)} findings left")


def _store_files(store: memory.MemoryStore) -> list[Path]:
    return [p for p in store.db_path.parent.rglob("*") if p.is_file() and not p.is_symlink()]


def _judge_ledger(op: str, sail: Path, acked: list[str], tally: Tally, label: str) -> None:
    ledger = Ledger(sail)
    entries = ledger.entries()
    if op == "ledger append":
        lines = Counter(orjson.dumps(e.to_wire()) for e in entries)
        attempted = {
            orjson.dumps(powerloss.ledger_entry("SA"[n % 2], n).to_wire()): n for n in range(FINDINGS)
        }
        attempted[orjson.dumps(powerloss.ledger_entry("S", FINDINGS).to_wire())] = FINDINGS
        for line in acked:
            wire = next(w for w, n in attempted.items() if n == int(line))
            if lines[wire] == 0:
                tally.lost += 1
                tally.note(f"{label}: acknowledged entry {line} is missing")
        made_up = set(lines) - set(attempted)
    else:
        lines = Counter(e.tx_hash for e in entries if isinstance(e, Acted))
        for tx in acked:
            if lines[tx] == 0:
                tally.lost += 1
                tally.note(f"{label}: acknowledged dispatch {tx} is not ledgered")
        made_up = set(lines) - {_dispatch(n).tx_hash for n in range(FINDINGS)}
        if len(lines) != FINDINGS:
            tally.unexpected += 1
            tally.note(f"{label}: {len(lines)} of {FINDINGS} dispatches ledgered after the next tick")
    if any(n > 1 for n in lines.values()):
        tally.doubled += sum(n - 1 for n in lines.values())
        tally.note(f"{label}: doubled ledger lines")
    if made_up:
        tally.fabricated += len(made_up)
        tally.note(f"{label}: ledger lines nobody appended")
    confirmed = [e for e in entries if isinstance(e, Acted) and e.outcome is Outcome.CONFIRMED]
    last = ledger.last_confirmed()
    if (last.tx_hash if last else None) != (confirmed[-1].tx_hash if confirmed else None):
        tally.unexpected += 1
        tally.note(f"{label}: the snapshot disagrees with the ledger")


# -- driving --------------------------------------------------------------------------------------


def reached(op: str, scratch: Path, names: list[str]) -> list[str]:
    """The failpoints ``op`` reaches (found by arming all of them to do nothing)."""
    base = scratch / f"probe-{op.replace(' ', '-')}"
    base.mkdir()
    try:
        setup(op, base)
        perform(op, base, ",".join(f"{n}=sleep0" for n in names))
        return sorted(_failpoints._fired)
    finally:
        _disarm()
        shutil.rmtree(base, ignore_errors=True)


def _perform_in_child(op: str, base: Path, plan: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FLOWS_FAILPOINTS", None)
    cmd = [sys.executable, "-m", "tests.reliability.failpoints", op, str(base), plan]
    return subprocess.run(cmd, env=env, capture_output=True, timeout=60, check=False).returncode


def run_case(op: str, name: str, fault: str, base: Path, tally: Tally) -> None:
    """One case: setup, ``op`` with ``name=fault``, recovery, judgement."""
    label = f"{op} x {name}={fault}"
    plan = f"{name}={fault}"
    tally.cases += 1
    try:
        setup(op, base)
        if fault == "kill":
            code = _perform_in_child(op, base, plan)
            fired = code == -signal.SIGKILL
        else:
            with contextlib.suppress(Exception):
                perform(op, base, plan)
            fired = name in _failpoints._fired
            _disarm()
        if not fired:
            tally.unexpected += 1
            tally.note(f"{label}: the failpoint never fired")
        recover(op, base)
    except Exception as exc:
        _disarm()
        tally.unexpected += 1
        tally.note(f"{label}: recovery raised {type(exc).__name__}: {exc}")
        return
    judge(op, base, tally, label)


def run_sweep(faults: tuple[str, ...] = FAULTS_QUICK, operations: tuple[str, ...] = OPERATIONS) -> Tally:
    """Every failpoint each operation reaches x each fault; returns the figures."""
    tally = Tally(f"failpoints x {{{', '.join(faults)}}} x {len(operations)} operations")
    scratch = powerloss.scratch_root()
    names = failpoint_names()
    try:
        n = 0
        for op in operations:
            for name in reached(op, scratch, names):
                for fault in faults:
                    n += 1
                    base = scratch / f"c{n}"
                    base.mkdir()
                    run_case(op, name, fault, base, tally)
                    shutil.rmtree(base, ignore_errors=True)
    finally:
        _disarm()
        shutil.rmtree(scratch, ignore_errors=True)
    return tally


if __name__ == "__main__":  # the child of a ``kill`` case: python -m ... OP BASE PLAN
    perform(sys.argv[1], Path(sys.argv[2]), sys.argv[3])
