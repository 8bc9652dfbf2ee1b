"""CPU per learn with one writer, 8 processes and 8 threads:
``python -m benchmarks.concurrent_cpu [--learns M] [--writers W] [--rounds R] [--dir DIR] [--ab CHECKOUT]``.

Each round makes a fresh store under DIR (default: the system's temporary folder), begins one root
run in it and holds its lease, as ``benchmarks/writes.py`` does, then learns with each mode in turn:

* ``1w``: one process, one thread, ``W * M`` learns;
* ``8p``: ``W`` processes, each ``M`` learns on the root run's token (``learn_file_8p``);
* ``8t``: one process, ``W`` threads sharing ``W * M`` learns (``learn_file_8t``);
* ``8rr``: ``W`` stores in one process, one thread, taking turns learn by learn (``W * M`` learns):
  each learn finds the lines the other ``W - 1`` appended since its last, as in ``8p``, without
  the scheduling: the work concurrency adds, apart from waiting and switching (steady on a busy
  machine, where the other modes' figures drift);
* ``sqlite8p``: ``W`` processes of plain sqlite3 (WAL, ``synchronous=FULL``), ``M`` inserts each,
  the benchmark's yardstick (``--sqlite``).

The workers are ``benchmarks/_worker.py``'s, started afresh for each mode, warmed with 3 learns each
(untimed). Per mode it prints the user and system CPU per learn (``resource.getrusage`` of every
worker over its timed part, summed, divided by the learns), the learns per second (all learns over
the span from the first start to the last end) and the context switches per learn, voluntary (a
sleep: a lock, a flush, a pipe) and involuntary (preempted), as medians over the rounds. On this
machine each sleep costs the learn after it CPU (docs/PERFORMANCE.md, "a learn pays CPU for every
sleep"), so the switches explain much of what the CPU figures do.

``--ab CHECKOUT``: paired A/B. Every round runs each mode twice, once on CHECKOUT's code and once on
this one's (the order alternating between rounds), and the medians of the per-round ratios
(this / CHECKOUT) are printed too (``8rr`` runs this script from CHECKOUT: copy it there first if
CHECKOUT predates it). Rates on a shared machine drift between rounds; CPU per learn drifts less,
``8rr`` least. System calls and futexes per learn: ``perf stat -e raw_syscalls:sys_enter,
syscalls:sys_enter_futex,syscalls:sys_enter_flock,context-switches`` around one mode (``--modes 8p
--rounds 1``) at two sizes, the difference divided by the extra learns (``strace`` slows every call
and so multiplies the GIL's hand-overs it counts).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
WARM = 3


class _Proc:
    """A ``benchmarks._worker`` process run from ``checkout`` (its code on ``PYTHONPATH``)."""

    def __init__(self, checkout: Path, kind: str, params: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks._worker", kind, json.dumps(params)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=checkout,
            text=True,
            env={**os.environ, "PYTHONPATH": str(checkout)},
        )

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        reply: dict[str, Any] = json.loads(line) if line else {"error": "the worker exited"}
        if "error" in reply:
            self.proc.kill()
            raise RuntimeError(f"worker failed: {reply['error']}")
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send({"op": "quit"})
            self.proc.wait(timeout=60)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def _root(base: Path) -> tuple[Any, dict[str, Any]]:
    """A fresh store under ``base`` with one root run begun, its lease held by this process."""
    import memory

    store = memory.MemoryStore(base / "history.db", journal=str(base / "flows-journal"))
    _, lease = store.open_journal().begin("bench", "bench", {})
    return store, {
        "db": str(base / "history.db"),
        "journal": str(base / "flows-journal"),
        "run_id": lease.run_id,
        "epoch": lease.epoch,
        "scope": "bench",
    }


def _interleaved(params: dict[str, Any]) -> dict[str, float]:
    """``8rr`` in this process: ``writers`` stores on one root run, learning in turns."""
    import journal
    import memory

    stores = [memory.MemoryStore(params["db"], journal=params["journal"]) for _ in range(params["writers"])]
    roots = []
    for store in stores:
        jr = store.open_journal()
        lease = journal.Lease(params["run_id"], params["epoch"])
        roots.append(memory.RootRun(jr, lease, "bench", params["scope"]))
    pairs = list(zip(stores, roots, strict=True))

    def learn(i: int) -> None:
        for w, (store, root) in enumerate(pairs):
            store.learn({"text": f"engine finding w{w}-{i}", "tags": ["bench"]}, root)

    for i in range(WARM):
        learn(i)
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter_ns()
    for i in range(1_000_000, 1_000_000 + params["learns"]):
        learn(i)
    end, after = time.perf_counter_ns(), resource.getrusage(resource.RUSAGE_SELF)
    for store in stores:
        store.close()
    return {
        "start": start,
        "end": end,
        "cpuUserUs": round((after.ru_utime - before.ru_utime) * 1e6),
        "cpuSysUs": round((after.ru_stime - before.ru_stime) * 1e6),
        "ctxVoluntary": after.ru_nvcsw - before.ru_nvcsw,
        "ctxInvoluntary": after.ru_nivcsw - before.ru_nivcsw,
    }


def _measure_interleaved(checkout: Path, base: Path, writers: int, learns: int) -> dict[str, float]:
    """``8rr`` once, in a process of its own on ``checkout``'s code."""
    store, root = _root(base)
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.concurrent_cpu",
                "--interleaved",
                json.dumps({**root, "writers": writers, "learns": learns}),
            ],
            cwd=checkout,
            env={**os.environ, "PYTHONPATH": str(checkout)},
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        store.close()
    got = json.loads(out)
    total = writers * learns
    return {
        "user": got["cpuUserUs"] / total,
        "sys": got["cpuSysUs"] / total,
        "rate": total / ((got["end"] - got["start"]) / 1e9),
        "vcs": got.get("ctxVoluntary", 0) / total,
        "ics": got.get("ctxInvoluntary", 0) / total,
    }


def _workers(
    checkout: Path, mode: str, base: Path, writers: int, learns: int
) -> tuple[Any, list[_Proc], list[int]]:
    """The store (None for sqlite3), the worker processes of ``mode`` and how many each learns."""
    if mode == "sqlite8p":
        made = [
            _Proc(checkout, "sqlite", {"path": str(base / "f.db"), "who": f"w{i}"}) for i in range(writers)
        ]
        return None, made, [learns] * writers
    store, root = _root(base)
    if mode == "8p":
        return (
            store,
            [_Proc(checkout, "learn", {**root, "who": f"w{i}"}) for i in range(writers)],
            [learns] * writers,
        )
    threads = writers if mode == "8t" else 1
    return store, [_Proc(checkout, "learn", {**root, "who": "w0", "threads": threads})], [learns * writers]


def _measure(checkout: Path, mode: str, base: Path, writers: int, learns: int) -> dict[str, float]:
    """One mode once, on ``checkout``'s code: CPU per learn (µs) and learns per second."""
    base.mkdir(parents=True)
    if mode == "8rr":
        return _measure_interleaved(checkout, base, writers, learns)
    store, procs, per = _workers(checkout, mode, base, writers, learns)
    try:
        for p in procs:
            p.receive()  # ready
        for p in procs:
            p.send({"op": "run", "n": WARM, "start": 0})
        for p in procs:
            p.receive()
        for p, n in zip(procs, per, strict=True):
            p.send({"op": "run", "n": n, "start": 1_000_000})
        replies = [p.receive() for p in procs]
    finally:
        for p in procs:
            p.close()
        if store is not None:
            store.close()
    total = sum(per)
    span = (max(r["end"] for r in replies) - min(r["start"] for r in replies)) / 1e9
    return {
        "user": sum(r["cpuUserUs"] for r in replies) / total,
        "sys": sum(r["cpuSysUs"] for r in replies) / total,
        "rate": total / span,
        # context switches per learn: sleeps (a lock, a flush) and preemptions (0 from a checkout
        # whose workers do not report them)
        "vcs": sum(r.get("ctxVoluntary", 0) for r in replies) / total,
        "ics": sum(r.get("ctxInvoluntary", 0) for r in replies) / total,
    }


Results = dict[tuple[str, str], list[dict[str, float]]]


def _report(results: Results, modes: list[str], rounds: int, paired: bool) -> None:
    print(f"CPU per learn (user + system µs, medians of {rounds} rounds) and learns/s:")
    for (side, mode), runs in results.items():
        user = statistics.median(x["user"] for x in runs)
        system = statistics.median(x["sys"] for x in runs)
        rate = statistics.median(x["rate"] for x in runs)
        vcs = statistics.median(x.get("vcs", 0) for x in runs)
        ics = statistics.median(x.get("ics", 0) for x in runs)
        print(
            f"  {mode:>8} {side:>5}: {user:6.1f} + {system:6.1f} = {user + system:6.1f} µs   {rate:7.0f}/s"
            f"   switches {vcs:.2f} slept + {ics:.2f} preempted"
        )
    if paired:
        print("ratios this / other (medians of the per-round ratios):")
        for mode in modes:
            a, b = results.get(("other", mode)), results.get(("this", mode))
            if not a or not b:
                continue
            cpu = [(y["user"] + y["sys"]) / (x["user"] + x["sys"]) for x, y in zip(a, b, strict=True)]
            rate = [y["rate"] / x["rate"] for x, y in zip(a, b, strict=True)]
            print(
                f"  {mode:>8}: CPU per learn x{statistics.median(cpu):.2f}  "
                f"({' '.join(f'{c:.2f}' for c in cpu)}); learns/s x{statistics.median(rate):.2f}  "
                f"({' '.join(f'{c:.2f}' for c in rate)})"
            )
    yardstick = results.get(("this", "sqlite8p"))
    if yardstick:
        base_rate = statistics.median(x["rate"] for x in yardstick)
        for mode in ("8p", "8t"):
            ours = results.get(("this", mode))
            if ours:
                rate = statistics.median(x["rate"] for x in ours)
                print(f"  learn {mode} / sqlite3 FULL 8p: {rate / base_rate:.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.concurrent_cpu", description=__doc__)
    ap.add_argument("--learns", type=int, default=200, help="learns per writer per mode (default 200)")
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="a directory on the disk to measure (default: temp)")
    ap.add_argument("--modes", default="1w,8rr,8p,8t", help="comma-separated: 1w, 8rr, 8p, 8t, sqlite8p")
    ap.add_argument("--sqlite", action="store_true", help="add sqlite8p, the yardstick")
    ap.add_argument("--ab", default=None, help="another checkout to pair this one with, round by round")
    ap.add_argument("--interleaved", default=None, help=argparse.SUPPRESS)  # the 8rr worker's own call
    args = ap.parse_args(argv)
    if args.interleaved:
        print(json.dumps(_interleaved(json.loads(args.interleaved))))
        return 0
    modes = args.modes.split(",") + (["sqlite8p"] if args.sqlite and "sqlite8p" not in args.modes else [])
    sides = {"other": Path(args.ab).resolve(), "this": HERE} if args.ab else {"this": HERE}
    results: Results = {}
    base = Path(tempfile.mkdtemp(prefix="concurrent-cpu-", dir=args.dir))
    try:
        for r in range(args.rounds):
            order = list(sides.items())[:: -1 if r % 2 else 1]
            for mode in modes:
                for side, checkout in order:
                    if mode == "sqlite8p" and side != "this":
                        continue
                    where = base / f"r{r}-{mode}-{side}"
                    got = _measure(checkout, mode, where, args.writers, args.learns)
                    shutil.rmtree(where, ignore_errors=True)
                    results.setdefault((side, mode), []).append(got)
                    print(
                        f"round {r + 1} {mode:>8} {side:>5}: user {got['user']:6.1f} + sys {got['sys']:6.1f}"
                        f" = {got['user'] + got['sys']:6.1f} µs/learn, {got['rate']:7.0f} learns/s,"
                        f" switches {got.get('vcs', 0):.2f} + {got.get('ics', 0):.2f}",
                        file=sys.stderr,
                        flush=True,
                    )
                    time.sleep(0.2)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    _report(results, modes, args.rounds, bool(args.ab))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
