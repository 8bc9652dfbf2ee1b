"""``flows serve`` on a big store: the runs, findings and agent pages, timed through the app.

Builds 100,000 findings (90,000 in the history DB, 10,000 unsynced files: ``benchmarks.reads``),
10,000 root runs (their ``run.json`` written in the journal's layout: 90% done, 8% failed, 2% left
running by a dead holder, i.e. interrupted), and a 1,000,000-line agent ledger
(``benchmarks.ledger_bench``), then times requests through Starlette's test client (the whole app:
guard, routing, reads, templates), warm, median of ``--rounds``.

Run: ``python -m benchmarks.web_bench [--rounds N] [--dir DISK]`` (about a minute to build).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import orjson

from benchmarks.ledger_bench import build as build_ledger
from benchmarks.reads import build_dataset
from flows.web import ServeConfig, create_app

RUNS = 10_000


def build_runs(root: Path, n: int) -> None:
    """``n`` runs in the file journal's layout (``runs/<id>/run.json``), oldest first."""
    base_ms = 1_760_000_000_000
    for i in range(n):
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(base_ms / 1000 + i * 60))
        run_id = f"{stamp}-{i:010x}"
        state = "done" if i % 50 < 45 else "failed" if i % 50 < 49 else "running"
        directory = root / "runs" / run_id
        (directory / "streams").mkdir(parents=True)
        error = {"code": "flow_failed", "message": "RuntimeError: bench"} if state == "failed" else None
        record = {
            "runId": run_id, "flow": f"flow{i % 7}", "scope": "bench", "state": state, "epoch": 1,
            "createdMs": base_ms + i * 60_000, "updatedMs": base_ms + i * 60_000 + 500, "meta": {},
            "error": error,
        }  # fmt: skip
        (directory / "run.json").write_bytes(orjson.dumps(record, option=orjson.OPT_SORT_KEYS))


def timed(client: object, url: str, rounds: int) -> float:
    """Median milliseconds of ``GET url`` after one warm-up request."""
    get = client.get  # type: ignore[attr-defined]
    assert get(url).status_code == 200, url
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        response = get(url)
        samples.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, url
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    """Build the store, time the pages, print one line per page."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--dir", help="build the store here (default: a temporary directory)")
    args = parser.parse_args(argv)
    from starlette.testclient import TestClient

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="web-bench-") as tmp:
        base = Path(tmp)
        t0 = time.perf_counter()
        db = base / "store" / "history.db"
        build_dataset(db, 90_000, 10_000)
        build_runs(base / "store" / "flows-journal", RUNS)
        home = base / "agent"
        build_ledger(home / ".sail", 1_000_000)
        built = time.perf_counter() - t0
        print(f"built 100,000 findings, {RUNS:,} runs, a 1,000,000-line ledger in {built:.0f} s")
        config = ServeConfig(db=str(db), sail_homes=(home,))
        with TestClient(create_app(config), base_url="http://127.0.0.1") as client:
            t1 = time.perf_counter()
            client.get("/runs")
            print(f"first /runs (reads every run.json once): {(time.perf_counter() - t1) * 1000:.0f} ms")
            last_run = client.get("/api/runs", params={"limit": 1}).json()[0]["runId"]
            pages = [
                "/runs", "/runs?state=failed", "/runs?state=interrupted", f"/runs?cursor={last_run}",
                "/api/runs", "/findings", "/findings?tag=tag7", "/findings?q=cache+cold",
                "/api/findings?q=deploy+rollback", "/findings?cursor=1600050000000.0",
                "/agents/0", "/api/agents/0/ledger", "/api/agents/0/status", "/api/agents/0/balances",
            ]  # fmt: skip
            for url in pages:
                print(f"{url:44} {timed(client, url, args.rounds):8.1f} ms")
            older = client.get("/api/agents/0/ledger", params={"limit": 1000}).headers["link"]
            second = timed(client, older[1 : older.index(">")], args.rounds)
            print(f"{'ledger page 2 (by offset)':44} {second:8.1f} ms")
            client.app.state.reader.close()  # type: ignore[attr-defined]
    print(f"(pid {os.getpid()}, load {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
