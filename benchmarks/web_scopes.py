"""The findings form's scope picker on a store of a scope per user: CPU of every scope against one page.

``MemoryStore.scopes()`` (what the form asked for, to count them) against ``scopes(limit=101)`` (what
it asks now: a page and one more), and ``GET /findings`` through the app, each as CPU seconds of this
process (``getrusage``, best of 3): wall time on the shared machine is noise. The store is built
once with a finding in each of ``--scopes`` scopes, each learned through its own session as a user's
would be, then synced (slow: about 14 minutes for 5,000 on the loaded machine); ``--db`` reuses it.

Run: ``python -m benchmarks.web_scopes --db /tmp/scopes/history.db [--scopes 5000]``.
"""

from __future__ import annotations

import argparse
import resource
from collections.abc import Callable
from pathlib import Path

import memory


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def best_cpu_ms(fn: Callable[[], object], rounds: int = 3) -> float:
    """The least CPU milliseconds ``fn`` took over ``rounds`` calls (after one to warm)."""
    fn()
    samples = []
    for _ in range(rounds):
        start = cpu()
        fn()
        samples.append((cpu() - start) * 1000)
    return min(samples)


def build(db: Path, scopes: int) -> None:
    """A finding in each of ``scopes`` scopes, then synced into the history DB."""
    db.parent.mkdir(parents=True, exist_ok=True)
    with memory.MemoryStore(db) as store:
        for i in range(scopes):
            with store.session(scope=f"user-{i:06d}", flow="notes") as s:
                s.learn({"text": f"user {i} prefers tea"})
        store.sync()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="the store (built when missing)")
    parser.add_argument("--scopes", type=int, default=5000, help="scopes to build (default 5000)")
    args = parser.parse_args()
    if not args.db.exists():
        build(args.db, args.scopes)
    from starlette.testclient import TestClient

    from flows.web import ServeConfig, create_app
    from flows.web._app import MAX_SCOPE_CHOICES

    with memory.MemoryStore(args.db, read_only=True) as store:
        every = best_cpu_ms(store.scopes)
        page = best_cpu_ms(lambda: store.scopes(limit=MAX_SCOPE_CHOICES + 1))
        count = len(store.scopes())
    app = create_app(ServeConfig(db=str(args.db)))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        findings = best_cpu_ms(lambda: client.get("/findings"))
        client.app.state.reader.close()  # type: ignore[attr-defined]
    print(f"{count} scopes: scopes() {every:.1f} ms CPU; scopes(limit={MAX_SCOPE_CHOICES + 1}) {page:.1f} ms "
          f"({every / page:.1f}x less); GET /findings {findings:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
