"""The dashboard never writes the store: after a crawl of every page it links to (and every JSON
route), every file under the store and the agent home is the same, byte for byte and by mtime, and
no file was created anywhere: not SQLite's ``-shm`` or ``-wal`` beside the WAL history DB either
(a plain ``mode=ro`` reader would make both), not the ledger's snapshot, not the files' index."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from flows.web import ServeConfig
from tests.adversarial.memory_support import without_dac_override
from tests.conftest import ROOT
from tests.web.conftest import client_for
from tests.web.stores import DemoStore

Tree = dict[str, tuple[str, int, int]]

_HREF = re.compile(r'href="(/[^"#]*)')


def tree(*roots: Path) -> Tree:
    out: Tree = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            st = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
            out[str(path)] = (digest, st.st_mtime_ns, st.st_mode)
    return out


def crawl(client: TestClient, limit: int = 2000) -> list[str]:
    """Every page reachable from the menu by its links (a finding's page links to its JSON), and
    each run's JSON, each read once; every one must answer 200. Returns the paths read."""
    todo = ["/runs", "/findings", "/agents", "/api/agents"]
    seen: set[str] = set()
    while todo:
        url = todo.pop()
        if url in seen or url.startswith("/static/"):
            continue
        seen.add(url)
        assert len(seen) <= limit, "the crawl did not end"
        response = client.get(url)
        assert response.status_code == 200, (url, response.text[:500])
        if url.startswith("/api/"):
            continue
        todo.extend(_HREF.findall(response.text.replace("&amp;", "&")))
        if url.split("?", 1)[0].startswith("/runs/"):
            todo.append("/api" + url)  # a finding's page links to its own JSON
    return sorted(seen)


def _copy(demo: DemoStore, agent: Path, where: Path) -> tuple[Path, Path]:
    store, home = where / "store", where / "agent"
    shutil.copytree(demo.db.parent, store)
    shutil.copytree(agent, home)
    return store, home


def _fold_the_log(db: Path) -> None:
    """Leave the DB as its last writer does: the log folded into it, no ``-wal``, no ``-shm``."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    with contextlib.closing(sqlite3.connect(db)) as conn:  # a writer that closes last removes them
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert not Path(f"{db}-wal").exists() and not Path(f"{db}-shm").exists()


@pytest.fixture
def copies(demo: DemoStore, agent: Path, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    store, home = _copy(demo, agent, tmp_path)
    yield store, home


def test_a_crawl_of_every_page_writes_nothing_and_creates_no_file(copies: tuple[Path, Path]) -> None:
    store, home = copies
    _fold_the_log(store / "history.db")
    snapshot = home / ".sail" / "memory" / "state.json"
    snapshot.unlink()  # a reader that rebuilt it (as the ledger's own lookup does) would write it
    before = tree(store, home)
    with client_for(ServeConfig(db=str(store / "history.db"), sail_homes=(home,))) as client:
        read = crawl(client)
        client.app.state.reader.close()  # type: ignore[attr-defined]
    kinds = {re.sub(r"/[0-9a-zA-Z_-]{16,}.*|\?.*", "", u) for u in read}
    assert {"/runs", "/findings", "/agents/0", "/api/findings", "/api/runs"} <= kinds
    assert sum(u.startswith("/findings/") for u in read) >= 10  # every finding, live or retired
    assert any(u.endswith("/history") for u in read)
    assert not snapshot.exists()
    assert tree(store, home) == before


def test_beside_a_log_left_by_readers_the_crawl_touches_not_even_the_index(
    copies: tuple[Path, Path],
) -> None:
    """A CLI reader left an empty ``-wal`` and a ``-shm``: the dashboard reads the DB file alone
    (nothing in the log) and does not even mark its read in the ``-shm``."""
    store, home = copies
    db = store / "history.db"
    _fold_the_log(db)
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        conn.execute("SELECT count(*) FROM findings").fetchone()
    assert Path(f"{db}-shm").exists() and Path(f"{db}-wal").stat().st_size == 0
    before = tree(store, home)
    with client_for(ServeConfig(db=str(db), sail_homes=(home,))) as client:
        crawl(client)
        client.app.state.reader.close()  # type: ignore[attr-defined]
    assert tree(store, home) == before


def test_a_wal_db_in_a_read_only_folder_is_served(copies: tuple[Path, Path]) -> None:
    """Folders that not even root may write (its override dropped in the server's process): the
    whole crawl answers, from the DB and the unsynced files alike."""
    store, home = copies
    _fold_the_log(store / "history.db")
    folders = [p for root in (store, home) for p in (root, *root.rglob("*")) if p.is_dir()]
    for folder in folders:
        os.chmod(folder, 0o555)
    try:
        before = tree(store, home)
        code = (
            "import os, sys\n"
            "from pathlib import Path\n"
            "from flows.web import ServeConfig\n"
            "from tests.web.conftest import client_for\n"
            "from tests.web.test_readonly import crawl\n"
            "assert not os.access(sys.argv[1], os.W_OK), 'the folder is writable'\n"
            "db = os.path.join(sys.argv[1], 'history.db')\n"
            "config = ServeConfig(db=db, sail_homes=(Path(sys.argv[2]),))\n"
            "with client_for(config) as client:\n"
            "    print(len(crawl(client)))\n"
            "    print(len(client.get('/api/findings', params={'limit': 200}).json()))\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code, str(store), str(home)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            preexec_fn=without_dac_override,  # the child may not override modes
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        pages, findings = (int(n) for n in result.stdout.split())
        assert pages > 30 and findings == 8
        assert tree(store, home) == before
    finally:
        for folder in folders:
            os.chmod(folder, 0o755)
