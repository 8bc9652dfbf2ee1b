"""What every benchmark section shares: sizes, the results sheet, timing helpers, worker processes."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

REPO = Path(__file__).resolve().parent.parent
VENV_PYTHON = Path(os.environ.get("BENCH_VENV", REPO / ".bench-venv")) / "bin" / "python"
PEERS_HINT = "peers' venv absent: run `bash benchmarks/setup_peers.sh`"

WORDS = [
    "cache",
    "cold",
    "warm",
    "deploy",
    "latency",
    "queue",
    "retry",
    "timeout",
    "shard",
    "replica",
    "index",
    "vacuum",
    "lock",
    "lease",
    "token",
    "batch",
    "stream",
    "backlog",
    "spike",
    "drift",
    "budget",
    "quota",
    "alert",
    "pager",
    "rollback",
    "canary",
    "region",
    "zone",
    "disk",
    "memory",
    "socket",
    "thread",
    "worker",
    "cron",
    "tick",
    "swap",
    "router",
    "gas",
    "nonce",
    "block",
    "chain",
    "receipt",
]
TAGS = [f"tag{i}" for i in range(50)]


@dataclass(frozen=True)
class Sizes:
    """How much work each section does; ``full``, ``quick`` and ``smoke`` are the presets."""

    name: str
    rounds: int  # interleaved rounds of the write contenders
    per_round: int  # operations per round per writer (1-writer contenders)
    per_writer: int  # operations per round per writer (N-writer contenders)
    writers: int  # the "8" of "8 concurrent writers"
    synced: int  # findings in the history DB for the reads
    unsynced: int  # unsynced learned files for the reads
    read_calls: int
    resume_n: int
    ledger_entries: int
    ledger_runs: int
    scale_findings: int  # the largest store of the scale section (findings already in its DB)
    erase_records: int  # the journal records (and DB rows) of the store one erase is timed in


FULL = Sizes("full", 7, 500, 150, 8, 90_000, 10_000, 500, 10_000, 1_000_000, 21, 100_000, 1_000_000)
QUICK = Sizes("quick", 3, 200, 60, 8, 90_000, 10_000, 200, 2_000, 1_000_000, 7, 100_000, 100_000)
SMOKE = Sizes("smoke", 2, 5, 2, 2, 450, 50, 5, 40, 2_000, 3, 2_000, 2_000)


@dataclass
class Sheet:
    """Every figure, ratio, goal and skip of one run, under stable names (the ``--json`` output)."""

    figures: dict[str, float] = field(default_factory=dict)
    rounds: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    goals: dict[str, dict[str, Any]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def put(self, name: str, value: float, note: str | None = None) -> None:
        self.figures[name] = value
        if note:
            self.notes[name] = note

    def skip(self, name: str, reason: str) -> None:
        self.skipped.setdefault(name, reason)

    def as_json(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "figures": self.figures,
            "ratios": self.ratios,
            "goals": self.goals,
            "skipped": self.skipped,
            "notes": self.notes,
            "rounds": self.rounds,
        }


def say(out: TextIO | None, text: str = "") -> None:
    """Print progress and tables (to stderr under ``--json``, so stdout stays one JSON document)."""
    if out is not None:
        print(text, file=out, flush=True)


def paired_parser(name: str, doc: str | None, *, blocks: int, per_block: int) -> argparse.ArgumentParser:
    """The options every paired-blocks benchmark (``python -m benchmarks.<name>``) takes: how many
    blocks, how many learns per block, and the disk to measure on."""
    ap = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=doc)
    ap.add_argument("--blocks", type=int, default=blocks, help="blocks in all (even: half of each kind)")
    ap.add_argument("--per-block", type=int, default=per_block)
    ap.add_argument("--dir", default=None, help="a directory on the disk to measure (default: temp)")
    return ap


def print_paired(rates: dict[str, list[float]], ratio_label: str) -> None:
    """Print each kind's median rate and the median of the per-pair ratios of the second kind to
    the first (``rates`` holds two kinds, measured in alternating blocks)."""
    width = max(len(k) for k in [*rates, ratio_label])
    old, new = rates.values()
    for kind, values in rates.items():
        each = " ".join(f"{v:.0f}" for v in values)
        print(f"{kind:>{width}}: median {statistics.median(values):7.0f} learns/s  ({each})")
    pairs = [b / a for a, b in zip(old, new, strict=False)]
    each = " ".join(f"{p:.2f}" for p in pairs)
    print(f"{ratio_label:>{width}}: median {statistics.median(pairs):.2f}  ({each})")


def learn_blocks(
    base: str, flow: str, kinds: Sequence[str], blocks: int, per_block: int, *, switch: Callable[[str], None]
) -> dict[str, list[float]]:
    """Learn ``per_block`` distinct findings per block into one root run of a store made in
    ``base`` (after one untimed warm-up learn), the blocks taking ``kinds`` in turn (``switch(kind)``
    before each block's clock starts); the learns per second of each block, by kind."""
    import memory
    from journal import RunState

    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    with memory.MemoryStore(os.path.join(base, "history.db")) as store:
        jr = store.open_journal()
        _, lease = jr.begin(flow, "bench", {})
        root = memory.RootRun(jr, lease, flow, "bench")
        store.learn({"text": "warm-up"}, root)
        for block in range(blocks):
            kind = kinds[block % len(kinds)]
            switch(kind)
            store.flush()
            texts = [f"finding {i}" for i in range(block * per_block, (block + 1) * per_block)]
            t0 = time.perf_counter()
            for text in texts:
                store.learn({"text": text, "tags": ["bench"]}, root)
            rates[kind].append(per_block / (time.perf_counter() - t0))
        store.flush()
        jr.finish(lease, RunState.DONE)
    return rates


def median_ms(fn: Callable[[], object], calls: int) -> float:
    """Median wall time of ``calls`` calls of ``fn``, in milliseconds."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


class WorkerError(RuntimeError):
    """A worker process failed to start or to run a round; its stderr tail is in the message."""


class Worker:
    """A benchmark worker process speaking JSON lines on stdin/stdout.

    Started with ``argv`` (a kind and its JSON parameters); it sets up, prints ``{"ready": ...}``, then
    answers each ``{"op": "run", "n": N, "start": S}`` with the ``perf_counter_ns`` bounds of the work
    (CLOCK_MONOTONIC: comparable across processes), until ``{"op": "quit"}``.
    """

    def __init__(
        self, python: str | Path, module_or_script: Sequence[str], kind: str, params: dict[str, Any]
    ):
        self.kind = kind
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 -- closed in close(); a file, not a pipe, never blocks
        self.proc = subprocess.Popen(
            [str(python), *module_or_script, kind, json.dumps(params)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=REPO,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.ready: dict[str, Any] | None = None

    def wait_ready(self) -> dict[str, Any]:
        self.ready = self._reply()
        return self.ready

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self._failed("its stdin closed") from None

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise self._failed("it exited")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise self._failed(reply["error"])
        return reply

    def receive(self) -> dict[str, Any]:
        return self._reply()

    def _failed(self, what: str) -> WorkerError:
        self.proc.kill()
        self.proc.wait()
        self._stderr.seek(0)
        err = self._stderr.read().decode(errors="replace")
        tail = " | ".join(err.strip().splitlines()[-3:])
        return WorkerError(f"{self.kind} worker failed: {what}" + (f" ({tail})" if tail else ""))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send({"op": "quit"})
                self.proc.wait(timeout=30)
            except (WorkerError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()


def project_worker(kind: str, params: dict[str, Any]) -> Worker:
    """A worker running ``benchmarks/_worker.py`` on this interpreter (the project's environment)."""
    return Worker(sys.executable, ["-m", "benchmarks._worker"], kind, params)


def peer_worker(kind: str, params: dict[str, Any]) -> Worker:
    """A worker running ``benchmarks/peers.py`` in the peers' own venv."""
    return Worker(VENV_PYTHON, [str(REPO / "benchmarks" / "peers.py")], kind, params)


RoundFn = Callable[[int, int], "dict[str, Any] | None"]


def serve(setup: Callable[[str, dict[str, Any]], tuple[dict[str, Any], RoundFn]]) -> None:
    """The worker side of ``Worker``: ``python worker.py KIND PARAMS`` (``_worker`` and ``peers``).

    A round function may return extra fields (a read's median, say) for its reply.
    """
    kind, params = sys.argv[1], json.loads(sys.argv[2])
    try:
        info, run = setup(kind, params)
    except Exception as exc:
        print(json.dumps({"error": f"setup: {type(exc).__name__}: {exc}"}), flush=True)
        raise
    print(json.dumps({"ready": True, **info}), flush=True)
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "quit":
            break
        try:
            before = resource.getrusage(resource.RUSAGE_SELF)
            start = time.perf_counter_ns()
            extra = run(msg["n"], msg["start"]) or {}
            end = time.perf_counter_ns()
            after = resource.getrusage(resource.RUSAGE_SELF)
        except Exception as exc:
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
            raise
        cpu = {  # the worker's own CPU over the round, every thread of it: what a cut shows up in
            "cpuUserUs": round((after.ru_utime - before.ru_utime) * 1e6),
            "cpuSysUs": round((after.ru_stime - before.ru_stime) * 1e6),
            # how often it slept (waiting on a lock, a flush, a pipe) and was preempted
            "ctxVoluntary": after.ru_nvcsw - before.ru_nvcsw,
            "ctxInvoluntary": after.ru_nivcsw - before.ru_nivcsw,
        }
        print(json.dumps({"start": start, "end": end, **cpu, **extra}), flush=True)
