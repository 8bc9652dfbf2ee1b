"""PostgreSQL restarted in the middle of a run of learns: fail, resume, and every invariant holds.

This restarts the shared cluster, so every session on it is cut: it is marked slow, waits for the
server with ``pg_isready`` afterwards, and skips where it cannot control a local cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

import journal
import memory
from tests.conftest import ROOT
from tests.flows.helpers import flows, json_of, write_flow

FINDINGS = 60

# Learns FINDINGS findings, three at a time, noting progress; a short pause between batches.
_STEADY = f"""
import os
from pathlib import Path
progress = Path(os.environ["FLOWS_TEST_PROGRESS"])
for i in range(0, {FINDINGS}, 3):
    await asyncio.gather(*(
        f.memory.learn({{"text": f"restart finding {{n}}", "tags": ["restart"]}}) for n in range(i, i + 3)
    ))
    progress.write_text(str(i + 3))
    await asyncio.sleep(0.05)
"""


def _cluster() -> list[str]:
    """The ``pg_ctlcluster`` arguments that name the local cluster, or skip when there is none."""
    if shutil.which("pg_ctlcluster") is None or not Path("/etc/postgresql").is_dir():
        pytest.skip("no local PostgreSQL cluster to restart (pg_ctlcluster and /etc/postgresql)")
    if os.geteuid() != 0:
        pytest.skip("restarting the cluster needs root")
    version = sorted(os.listdir("/etc/postgresql"))[0]
    return ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main"]


def _wait_until_ready(seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q"], check=False).returncode:
        assert time.monotonic() < deadline, "PostgreSQL did not come back after the restart"
        time.sleep(0.2)


@pytest.mark.slow
def test_a_server_restart_fails_learns_in_flight_and_the_resumed_root_keeps_every_invariant(
    postgres_dsn: str, tmp_path: Path
) -> None:
    cluster = _cluster()
    db = tmp_path / "store" / "history.db"
    flow = write_flow(tmp_path / "steady.py", _STEADY, 'name="steady", scope="restart"')
    progress = tmp_path / "progress"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLOWS_TEST_PROGRESS": str(progress)}
    env.pop("FLOWS_JOURNAL", None)
    on_pg = ("--journal", postgres_dsn)
    cmd = [sys.executable, "-m", "flows", "run", str(flow), "--db", str(db), *on_pg]
    running = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not progress.exists() or int(progress.read_text() or 0) < 9:
            assert running.poll() is None, "the flow ended before the restart"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        subprocess.run([*cluster, "restart"], check=True, capture_output=True, timeout=90)
    finally:
        _wait_until_ready()
        out, err = running.communicate(timeout=60)
    assert running.returncode == 1, (out, err)
    assert "flows: error[journal_unavailable]: the PostgreSQL journal at " in err
    assert int(progress.read_text()) < FINDINGS

    (listed,) = json_of(flows(db, "runs", "--json", *on_pg))
    run_id = listed["runId"]
    assert listed["state"] in ("failed", "interrupted")  # both resumable
    if listed["state"] == "failed":
        assert listed["error"]["code"] == "journal_unavailable"
    resumed = flows(db, "resume", run_id, *on_pg, env={"FLOWS_TEST_PROGRESS": str(progress)})
    assert resumed.returncode == 0, resumed.stderr

    jr = journal.open_journal(postgres_dsn)
    try:
        info = jr.run(run_id)
        assert (info.state, info.epoch) == (journal.RunState.DONE, 2)
        records = list(jr.read(run_id, memory.STREAM))
    finally:
        jr.close()
    assert [r.seq for r in records] == list(range(1, FINDINGS + 1))
    assert Counter(r.key for r in records).most_common(1)[0][1] == 1
    texts = sorted(r.payload["finding"]["text"] for r in records)
    assert texts == sorted(f"restart finding {n}" for n in range(FINDINGS))
    by_id = {r.id: r for r in records}
    files = [p for d in memory.scope_dirs(db) for p in d.iterdir()]
    assert len(files) == FINDINGS
    for path in files:
        cited = orjson.loads(path.read_bytes())["journal"]
        assert path.read_bytes() == memory.render(by_id[cited["id"]]), path
