"""Two hosts (separate ``<db-dir>``s) sharing one PostgreSQL journal: the same memory on both.

A "host" here is a ``<db-dir>`` of its own; the processes of a host share it, and the hosts share
nothing but the journal DSN.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import journal
import memory
from tests._helpers.hosts import host_db
from tests.conftest import ROOT
from tests.flows.helpers import flows, json_of, write_flow

# One learner process: learns the findings numbered argv[5:] into the shared root, in that order,
# after every learner is ready (it waits for a line on stdin).
_LEARNER = """
import sys
import journal, memory
dsn, db, run_id, epoch = sys.argv[1:5]
store = memory.MemoryStore(db, journal=dsn)
jr = store.open_journal()
root = memory.RootRun(jr, journal.Lease(run_id, int(epoch)), "learner", "team")
jr.read(run_id, memory.STREAM)
print("ready", flush=True)
sys.stdin.readline()
for n in sys.argv[5:]:
    store.learn({"text": f"finding number {n}", "tags": ["shared"], "source": "learner"}, root)
store.close()
"""


def _host_files(db: Path) -> dict[str, bytes]:
    """The learned files of one host, by name relative to its ``<db-dir>``."""
    return {
        str(p.relative_to(db.parent)): p.read_bytes()
        for d in memory.scope_dirs(db)
        for p in d.iterdir()
        if not p.name.startswith(".")
    }


def _assert_files_cite_records(db: Path, records: list[journal.Record]) -> None:
    by_id = {r.id: r for r in records}
    for d in memory.scope_dirs(db):
        for p in d.iterdir():
            assert not p.name.startswith("."), f"a stage was left behind: {p}"
            entry = memory.read_learned(p)
            assert p.read_bytes() == memory.render(by_id[entry.citation.id]), p


@pytest.mark.slow
def test_eight_processes_on_two_hosts_learning_overlapping_findings_leave_one_record_each(
    postgres_dsn: str, tmp_path: Path
) -> None:
    hosts = [tmp_path / "host-a" / "history.db", tmp_path / "host-b" / "history.db"]
    jr = journal.open_journal(postgres_dsn)
    info, lease = jr.begin("learner", "team", {})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for w in range(8):
        host = hosts[w % 2]
        # Host A learns findings 0-11, host B 6-17: 6 findings in common; each process its own order.
        numbers = list(range(0, 12) if w % 2 == 0 else range(6, 18))
        numbers = numbers[w:] + numbers[:w]
        args = [postgres_dsn, str(host), info.run_id, str(lease.epoch), *map(str, numbers)]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _LEARNER, *args],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.close()
    assert [p.wait(90) for p in procs] == [0] * 8
    for p in procs:
        assert p.stdout is not None
        p.stdout.close()

    records = list(jr.read(info.run_id, memory.STREAM))
    assert len(records) == 18
    assert Counter(r.key for r in records).most_common(1)[0][1] == 1
    assert [r.seq for r in records] == list(range(1, 19))
    for db in hosts:
        _assert_files_cite_records(db, records)
    a, b = (_host_files(db) for db in hosts)
    assert len(a) == 12 and len(b) == 12
    assert {k: a[k] for k in a.keys() & b.keys()} == {k: b[k] for k in a.keys() & b.keys()}
    assert len(a.keys() & b.keys()) == 6

    # Each host materialises what the other learned, from the journal alone: byte-identical.
    for db in hosts:
        with memory.MemoryStore(db, journal=postgres_dsn) as store:
            assert store.materialize() == 6
    a, b = (_host_files(db) for db in hosts)
    assert a == b
    assert len(a) == 18
    for db in hosts:
        _assert_files_cite_records(db, records)
    jr.finish(lease, journal.RunState.DONE)
    jr.close()


_CRASHY = """
import os
from pathlib import Path
marker = Path(os.environ["FLOWS_TEST_MARKER"])
await f.memory.learn({"text": "alpha is learned on the first host", "tags": ["greek"]})
await f.memory.learn({"text": "beta is learned on the first host", "tags": ["greek"]})
if not marker.exists():
    marker.write_text("crash me")
    await asyncio.sleep(600)
await f.memory.learn({"text": "gamma is learned after the resume", "tags": ["greek"]})
"""


def _wait_for(path: Path, proc: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, "the flow exited before reaching its crash point"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.slow
def test_a_root_crashed_on_one_host_is_listed_resumed_and_recalled_on_the_other(
    postgres_dsn: str, tmp_path: Path
) -> None:
    host_a, host_b = host_db(tmp_path, "a"), host_db(tmp_path, "b")
    flow = write_flow(tmp_path / "greek.py", _CRASHY, 'name="greek", scope="letters"')
    marker = tmp_path / "marker"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLOWS_TEST_MARKER": str(marker)}
    env.pop("FLOWS_JOURNAL", None)
    cmd = [sys.executable, "-m", "flows", "run", str(flow), "--db", str(host_a), "--journal", postgres_dsn]
    crashed = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(marker, crashed)
    finally:
        crashed.send_signal(signal.SIGKILL)
        crashed.wait(10)
        assert crashed.stderr is not None
        crashed.stderr.close()

    on_b = ("--journal", postgres_dsn)
    (listed,) = json_of(flows(host_b, "runs", "--json", *on_b))
    run_id = listed["runId"]
    assert (listed["flow"], listed["state"]) == ("greek", "interrupted")
    resumed = flows(host_b, "resume", run_id, *on_b, env={"FLOWS_TEST_MARKER": str(marker)})
    assert resumed.returncode == 0, resumed.stderr
    assert f"root run {run_id} resumed: done" in resumed.stdout

    records = json_of(flows(host_b, "journal", run_id, "--stream", memory.STREAM, "--json", *on_b))
    texts = [r["payload"]["finding"]["text"] for r in records]
    assert [t.split()[0] for t in texts] == ["alpha", "beta", "gamma"]
    a, b = _host_files(host_a), _host_files(host_b)
    assert len(a) == 2 and len(b) == 3
    assert all(b[name] == data for name, data in a.items())  # republished byte-identical on B

    synced = flows(host_a, "sync", *on_b)  # A catches up with what B learned, then ingests
    assert synced.returncode == 0, synced.stderr
    recalled = json_of(flows(host_a, "recall", "--tag", "greek", "--json", *on_b))
    assert [r["text"].split()[0] for r in recalled] == ["gamma", "beta", "alpha"]
    assert {r["journal"]["runId"] for r in recalled} == {run_id}
    (done,) = json_of(flows(host_a, "runs", "--json", *on_b))
    assert (done["state"], done["epoch"]) == ("done", 2)
