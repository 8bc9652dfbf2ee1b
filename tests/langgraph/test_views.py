"""LangGraph's runs in every view: ``flows runs``, ``flows show``, ``flows recall`` and the dashboard.

A thread's run shows its thread id and a state a reader can trust (``open`` while it can take more
checkpoints, ``closed`` once deleted), its timeline the checkpoints with their step and the node
whose writes made them, the writes, the tombstones, each citing its record; the catalog is
labelled; the store's items read as namespace, key and value, without the store's bookkeeping;
multi-line text never breaks a table.
"""

from __future__ import annotations

import base64
import operator
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import orjson
import ormsgpack
import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

import journal
from flows import _langgraph_view as view
from flows.langgraph import JournalSaver, JournalStore, _catalog, _records, _store
from tests.conftest import ROOT
from tests.langgraph.helpers import config


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _build(db: Path) -> None:
    def plan(state: State, *, store: BaseStore) -> dict[str, Any]:
        store.put(("notes", "u1"), "n1", {"text": "line one\nline two", "who": {"name": "ada"}})
        return {"log": ["planned"]}

    def act(state: State) -> dict[str, Any]:
        return {"log": ["acted"]}

    builder = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("act", act)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "act")
    builder.add_edge("act", END)
    with JournalSaver(db=str(db)) as saver, JournalStore(db=str(db)) as store:
        graph = builder.compile(checkpointer=saver, store=store)
        # durability "sync": each step's writes are committed before the next step runs, so the
        # timeline's commit order is the steps' order (LangGraph's default, "async", commits them
        # from background threads, in whichever order those run)
        graph.invoke({"log": []}, config("t-1"), durability="sync")
        graph.invoke({"log": []}, config("gone"), durability="sync")
        saver.delete_thread("gone")
        store.put(("notes", "u1"), "n2", {"text": "short"})
        store.delete(("notes", "u1"), "n2")


def flows(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "flows", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("views") / "history.db"
    _build(path)
    return path


def _runs(db: Path) -> list[dict[str, Any]]:
    result = flows("runs", "--db", str(db), "--json")
    assert result.returncode == 0, result.stderr
    return list(orjson.loads(result.stdout))


def _run(db: Path, flow: str, thread: str | None = None) -> dict[str, Any]:
    return next(
        r
        for r in _runs(db)
        if r["flow"] == flow and (thread is None or r["langgraph"].get("threadId") == thread)
    )


def test_the_adapters_names_are_the_views_names() -> None:
    assert (view.THREAD_FLOW, view.CATALOG_FLOW, view.STORE_FLOW) == (
        _catalog.THREAD_FLOW,
        _catalog.CATALOG_FLOW,
        _store.FLOW,
    )
    assert (view.CHECKPOINTS_STREAM, view.THREADS_STREAM) == (_records.STREAM, _catalog.THREADS_STREAM)
    assert (view.STORE_SCOPE_PREFIX, view.STORE_SOURCE) == (_store.SCOPE_PREFIX, _store.SOURCE)


def test_flows_runs_shows_each_thread_id_and_a_truthful_state(db: Path) -> None:
    listed = {(r["flow"], r["langgraph"].get("threadId")): r for r in _runs(db)}
    assert listed[("langgraph-thread", "t-1")]["langgraph"] == {
        "role": "thread",
        "state": "open",
        "threadId": "t-1",
        "generation": 1,
    }
    assert listed[("langgraph-thread", "gone")]["langgraph"]["state"] == "closed"
    assert listed[("langgraph-catalog", None)]["langgraph"]["role"] == "catalog"

    table = flows("runs", "--db", str(db)).stdout.splitlines()
    assert table[0].split() == ["RUN", "FLOW", "SCOPE", "THREAD", "STATE", "STARTED", "ERROR"]
    by_flow = {line.split()[1] + " " + line.split()[3]: line for line in table[1:]}
    assert " open " in by_flow["langgraph-thread t-1"]
    assert " closed " in by_flow["langgraph-thread gone"]
    assert "(catalog)" in by_flow["langgraph-catalog (catalog)"]
    assert all(" interrupted " not in line for line in table[1:] if "langgraph-thread" in line)


def test_flows_show_gives_a_threads_timeline_each_entry_citing_its_record(db: Path) -> None:
    run = _run(db, "langgraph-thread", "t-1")
    result = flows("show", "--db", str(db), run["runId"], "--json")
    assert result.returncode == 0, result.stderr
    shown = orjson.loads(result.stdout)
    checkpoints = [e for e in shown["timeline"] if e["kind"] == "checkpoint"]
    assert [c["step"] for c in checkpoints] == [-1, 0, 1, 2]
    assert [c["nodes"] for c in checkpoints] == [[], ["__start__"], ["plan"], ["act"]]
    assert checkpoints[2]["writes"] == {"log": ["planned"]}
    writes = [e for e in shown["timeline"] if e["kind"] == "writes"]
    assert [w["node"] for w in writes] == ["__start__", "plan", "act"]
    backend = journal.open_journal(str(db.parent / "flows-journal"))
    try:
        ids = {r.id for r in backend.read(run["runId"], "checkpoints")}
    finally:
        backend.close()
    assert {e["citation"]["id"] for e in shown["timeline"]} == ids

    text = flows("show", "--db", str(db), run["runId"]).stdout
    assert "LangGraph thread 't-1' (generation 1), open" in text
    assert "nothing recorded yet" not in text
    assert "step 1" in text and "loop after plan" in text
    for record in ids:
        assert record in text


def test_a_deleted_threads_run_shows_its_tombstone_and_is_closed(db: Path) -> None:
    run = _run(db, "langgraph-thread", "gone")
    shown = orjson.loads(flows("show", "--db", str(db), run["runId"], "--json").stdout)
    assert shown["timeline"][-1]["kind"] == "delete-thread"
    assert shown["langgraph"]["state"] == "closed"


def test_the_catalog_and_the_store_runs_show_what_they_hold(db: Path) -> None:
    catalog = _run(db, "langgraph-catalog")
    text = flows("show", "--db", str(db), catalog["runId"]).stdout
    assert "LangGraph catalog" in text and "t-1 gen 1" in text and "gone gen 2" in text
    stores = [r for r in _runs(db) if r["flow"] == "langgraph-store"]
    entries = [
        e
        for r in stores
        for e in orjson.loads(flows("show", "--db", str(db), r["runId"], "--json").stdout)["timeline"]
    ]
    puts = [e for e in entries if e["kind"] == "store-put"]
    assert {(tuple(p["namespace"]), p["itemKey"]) for p in puts} == {
        (("notes", "u1"), "n1"),
        (("notes", "u1"), "n2"),
    }
    assert next(p for p in puts if p["itemKey"] == "n1")["value"] == {
        "text": "line one\nline two",
        "who": {"name": "ada"},
    }
    deletes = [e for e in entries if e["kind"] == "store-delete"]
    assert [(d["namespace"], d["itemKey"]) for d in deletes] == [(["notes", "u1"], "n2")]


def test_multi_line_text_never_breaks_the_recall_table(db: Path) -> None:
    result = flows("recall", "--db", str(db))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2  # the header and the one live item
    assert "line one\\nline two" in lines[1]


def test_a_crafted_checkpoint_shown_imports_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    db = tmp_path / "history.db"
    with JournalSaver(db=str(db)) as saver:
        saver.put(
            config("t"),
            {"v": 4, "id": "1", "ts": "", "channel_values": {}, "channel_versions": {}, "versions_seen": {}},
            {},
            {},
        )  # type: ignore[typeddict-item]
        runs = [r for r in saver.backend.runs() if r.flow == "langgraph-thread"]
        run_id = runs[0].run_id
    evil = ormsgpack.packb(ormsgpack.Ext(0, ormsgpack.packb(["os", "system", f"touch {marker}"])))
    packed = ["msgpack", base64.b64encode(evil).decode()]
    backend = journal.open_journal(str(tmp_path / "flows-journal"))
    lease = backend.acquire(run_id)
    backend.append(
        lease,
        "checkpoints",
        {
            "kind": "writes",
            "ns": "",
            "checkpoint": "1",
            "task": "x",
            "path": "~__pregel_pull, n",
            "writes": [[0, "v", *packed]],
        },
    )
    backend.append(
        lease,
        "checkpoints",
        {
            "kind": "checkpoint",
            "ns": "",
            "id": "2",
            "parent": "1",
            "checkpoint": packed,
            "metadata": packed,
            "runId": None,
            "blobs": [],
        },
    )
    backend.release(lease)
    backend.close()
    result = flows("show", "--db", str(db), run_id, "--json")
    assert result.returncode == 0, result.stderr
    shown = orjson.loads(result.stdout)
    assert shown["timeline"][1]["writes"] == {"v": {"$type": "os.system", "value": f"touch {marker}"}}
    assert not marker.exists()


def test_the_dashboard_shows_threads_and_store_items_readably(db: Path) -> None:
    pytest.importorskip("starlette")
    from flows.web import ServeConfig
    from tests.web.conftest import client_for

    thread = _run(db, "langgraph-thread", "t-1")
    with client_for(ServeConfig(db=str(db))) as client:
        runs = client.get("/runs").text
        page = client.get(f"/runs/{thread['runId']}").text
        findings = client.get("/findings").text
        client.app.state.reader.close()  # type: ignore[attr-defined]
    assert "<code><bdi>t-1</bdi></code>" in runs  # a stored value is isolated from the text around it
    runs, page, findings = (h.replace("<bdi>", "").replace("</bdi>", "") for h in (runs, page, findings))
    assert "thread <code>t-1</code> gen 1" in runs and "(catalog)" in runs
    assert '<span class="badge state-open">open</span>' in runs
    assert "step 1 · loop after <code>plan</code>" in page
    assert "node <code>act</code>" in page
    assert "LangGraph item" in findings and "line one\nline two" in findings.replace("\\n", "\n")
    for internal in ("rev=", "v.text", "createdMs="):
        assert internal not in findings
