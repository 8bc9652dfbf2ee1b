"""How long an update waits while plain learns of its scope keep coming:
``python -m benchmarks.update_wait {threads,procs} [W] [--updates U] [--dir DIR]``.

A fresh store under DIR (default: the system's temporary folder) with one memory in scope ``s``;
``W`` writers (default 8), threads of this process or forked processes, each with a store object of
its own, learn distinct findings into ``s`` without pause. After a second, this process's main
thread updates the memory ``U`` times (default 5), 0.2 s apart, and prints each update's wait in
seconds; an update still waiting after ``--give-up`` seconds (default 60) is reported as such and
the run ends. Shared locks are granted while an exclusive one waits, so without the scope's gate
(docs/MEMORY.md) overlapping learns kept updates waiting for good.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import threading
import time
from pathlib import Path


def _learn_on(db: Path, who: str, stop: threading.Event) -> None:
    import memory

    with memory.MemoryStore(db) as store, store.session(scope="s") as s:
        n = 0
        while not stop.is_set():
            s.learn({"text": f"{who} learns {n}"})
            n += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.update_wait", description=__doc__)
    parser.add_argument("mode", choices=["threads", "procs"], help="writers as threads or processes")
    parser.add_argument("writers", type=int, nargs="?", default=8, help="how many writers learn (8)")
    parser.add_argument("--updates", type=int, default=5, help="how many updates to time (5)")
    parser.add_argument("--give-up", type=float, default=60.0, help="seconds an update may wait (60)")
    parser.add_argument("--dir", default=None, help="where the store goes (the temporary folder)")
    args = parser.parse_args(argv)
    import memory

    db = Path(tempfile.mkdtemp(prefix="update-wait-", dir=args.dir)) / "history.db"
    with memory.MemoryStore(db) as store:
        with store.session(scope="s") as s:
            mid = s.learn({"text": "the memory updated"}).memory_id
        stop = threading.Event()
        threads: list[threading.Thread] = []
        pids: list[int] = []
        for i in range(args.writers):
            if args.mode == "threads":
                thread = threading.Thread(target=_learn_on, args=(db, f"thread {i}", stop), daemon=True)
                thread.start()
                threads.append(thread)
                continue
            pid = os.fork()
            if pid == 0:
                try:
                    _learn_on(db, f"process {i}", stop)
                finally:
                    os._exit(0)
            pids.append(pid)
        waits: list[str] = []
        try:
            time.sleep(1.0)
            for n in range(args.updates):
                done = threading.Event()

                def update(n: int = n, done: threading.Event = done) -> None:
                    with store.session(scope="s") as s:
                        s.update(mid, {"text": f"updated {n}"})
                    done.set()

                start = time.perf_counter()
                threading.Thread(target=update, daemon=True).start()
                if not done.wait(args.give_up):
                    waits.append(f"still waiting after {args.give_up:g} s")
                    break
                waits.append(f"{time.perf_counter() - start:.3f}")
                time.sleep(0.2)
        finally:
            stop.set()
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            for thread in threads:
                thread.join(args.give_up)
    print(f"{args.mode} {args.writers}: update waits (s): {' '.join(waits)}")
    if any(w.startswith("still") for w in waits):
        os._exit(1)  # the store's writers still wait on the update that never came
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
