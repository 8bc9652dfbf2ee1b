"""The dashboard never writes the store: every file under the store and the agent home is the same,
byte for byte and by mtime, after every route has been read (SQLite's shared-memory index of a WAL
database aside, which SQLite keeps for any reader)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from flows.web import ServeConfig
from tests.web.conftest import client_for
from tests.web.stores import DemoStore

Tree = dict[str, tuple[str, int, int]]


def tree(*roots: Path) -> Tree:
    out: Tree = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            st = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
            out[str(path)] = (digest, st.st_mtime_ns, st.st_mode)
    return out


def test_reading_every_route_writes_nothing_and_never_rebuilds_the_ledger_snapshot(
    demo: DemoStore, agent: Path, tmp_path: Path
) -> None:
    store, home = tmp_path / "store", tmp_path / "agent"
    shutil.copytree(demo.db.parent, store)
    shutil.copytree(agent, home)
    snapshot = home / ".sail" / "memory" / "state.json"
    snapshot.unlink()  # a reader that rebuilt it (as the ledger's own lookup does) would write it
    before = tree(store, home)
    with client_for(ServeConfig(db=str(store / "history.db"), sail_homes=(home,))) as client:
        run_ids = [r["runId"] for r in client.get("/api/runs").json()]
        urls = [
            "/runs", "/runs?state=failed", "/api/runs?limit=1", "/findings", "/findings?q=storm",
            "/findings?tag=weather", "/api/findings?q=rain", "/agents", "/agents/0", "/api/agents",
            "/api/agents/0/ledger", "/api/agents/0/status", "/api/agents/0/why", "/api/agents/0/balances",
            *(f"/runs/{r}" for r in run_ids), *(f"/api/runs/{r}" for r in run_ids),
        ]  # fmt: skip
        for url in urls:
            assert client.get(url).status_code == 200, url
        client.app.state.reader.close()  # type: ignore[attr-defined]
    assert not snapshot.exists()
    assert tree(store, home) == before
