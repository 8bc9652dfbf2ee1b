"""``JournalSaver`` beyond the conformance suite: journal-first records, citations, generations,
leases and fencing between processes, the catalog race, damaged records."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

import journal
from flows.langgraph import JournalSaver, RecordInvalid
from flows.langgraph._catalog import (
    CATALOG_FLOW,
    SCOPE,
    THREAD_FLOW,
    THREADS_STREAM,
    Catalog,
    registration_key,
)
from flows.langgraph._records import STREAM
from journal import JournalLeaseHeld, JournalLeaseLost, Lease, RunState, open_journal
from tests.conftest import ROOT
from tests.langgraph.helpers import catalog_runs, checkpoint, config, put_chain, thread_runs


def test_a_put_is_a_record_of_the_threads_run_before_it_returns(saver: JournalSaver) -> None:
    ids = put_chain(saver, "t1", [{"a": "one"}, {"b": "two"}])

    cite = saver.citation(config("t1"))
    assert cite is not None
    with open_journal(saver.journal_location) as other:  # another reader, nothing shared
        records = other.read(cite.run_id, STREAM)
        assert [r.payload["id"] for r in records] == ids
        assert (records[-1].id, records[-1].seq, records[-1].ts_ms) == (cite.id, cite.seq, cite.committed_ms)
        assert other.run(cite.run_id).meta == {"langgraph": {"thread": "t1", "generation": 1}}


def test_a_fresh_saver_reads_back_values_stored_across_incremental_puts(journal_location: str) -> None:
    with JournalSaver(journal=journal_location) as first:
        ids = put_chain(first, "t", [{"a": 1, "b": [1, 2]}, {"a": 2}, {"c": {"deep": True}}])
        first.put_writes(config("t", ids[-1]), [("a", 5), ("b", [9])], "task-1", "p")
    with JournalSaver(journal=journal_location) as second:
        tup = second.get_tuple(config("t"))
        assert tup is not None
        assert tup.checkpoint["channel_values"] == {"a": 2, "b": [1, 2], "c": {"deep": True}}
        assert tup.pending_writes == [("task-1", "a", 5), ("task-1", "b", [9])]
        assert tup.parent_config is not None
        assert tup.parent_config["configurable"]["checkpoint_id"] == ids[1]
        first_tuple = second.get_tuple(config("t", ids[0]))
        assert first_tuple is not None
        assert first_tuple.checkpoint["channel_values"] == {"a": 1, "b": [1, 2]}


def test_the_same_put_twice_appends_one_record(saver: JournalSaver) -> None:
    cp = checkpoint({"x": 1})
    saver.put(config("t"), cp, {"step": 0}, {"x": 1})
    saver.put(config("t"), cp, {"step": 0}, {"x": 1})
    saver.put_writes(config("t", cp["id"]), [("x", 2)], "task")
    saver.put_writes(config("t", cp["id"]), [("x", 2)], "task")

    cite = saver.citation(config("t"))
    assert cite is not None
    assert [r.payload["kind"] for r in saver.backend.read(cite.run_id, STREAM)] == ["checkpoint", "writes"]


@pytest.mark.parametrize("channel", ["__error__", "__interrupt__"])
def test_a_special_write_put_again_after_another_value_is_the_latest_again(
    journal_location: str, channel: str
) -> None:
    # An error (or interrupt) write replaces the task's last one, as in LangGraph's own savers: the
    # third value equals the first, and must not be taken for a retry of the first call.
    cp = checkpoint({"x": 1})
    with JournalSaver(journal=journal_location) as saver:
        saver.put(config("t"), cp, {"step": 0}, {"x": 1})
        for value in ["timeout", "rate limit", "timeout"]:
            saver.put_writes(config("t", cp["id"]), [(channel, value)], "task")
        tup = saver.get_tuple(config("t"))
        assert tup is not None and tup.pending_writes == [("task", channel, "timeout")]
        saver.put_writes(config("t", cp["id"]), [(channel, "timeout")], "task")  # a retry: no record
        cite = saver.citation(config("t"))
        assert cite is not None
        kinds = [r.payload["kind"] for r in saver.backend.read(cite.run_id, STREAM)]
        assert kinds == ["checkpoint", "writes", "writes", "writes"]
    with JournalSaver(journal=journal_location) as fresh:
        tup = fresh.get_tuple(config("t"))
        assert tup is not None and tup.pending_writes == [("task", channel, "timeout")]
        fresh.put_writes(config("t", cp["id"]), [(channel, "rate limit")], "task")
    with JournalSaver(journal=journal_location) as again:
        tup = again.get_tuple(config("t"))
        assert tup is not None and tup.pending_writes == [("task", channel, "rate limit")]


def test_list_without_a_config_lists_every_thread_newest_first(saver: JournalSaver) -> None:
    a = put_chain(saver, "a", [{"x": 1}, {"x": 2}])
    b = put_chain(saver, "b", [{"y": 1}])
    c = put_chain(saver, "c", [{"z": 1}], ns="child:1")

    listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(None)]
    assert listed == sorted(a + b + c, reverse=True)
    assert [t.config["configurable"]["thread_id"] for t in saver.list(None, filter={"step": 1})] == ["a"]


def test_delete_thread_tombstones_retires_the_run_and_starts_an_empty_generation(saver: JournalSaver) -> None:
    put_chain(saver, "t", [{"x": 1}, {"x": 2}])
    old = saver.citation(config("t"))
    assert old is not None

    saver.delete_thread("t")

    assert saver.get_tuple(config("t")) is None
    assert saver.backend.run(old.run_id).state is RunState.DONE
    kinds = [r.payload["kind"] for r in saver.backend.read(old.run_id, STREAM)]
    assert kinds == ["checkpoint", "checkpoint", "delete-thread"]  # the records stay
    (catalog,) = catalog_runs(saver.backend)
    gen2 = saver.backend.find(catalog.run_id, THREADS_STREAM, registration_key("t", 2))
    assert gen2 is not None and gen2.payload["run"] is None

    ids = put_chain(saver, "t", [{"y": 3}])  # the thread lives on, in a third generation
    tup = saver.get_tuple(config("t"))
    assert tup is not None and tup.checkpoint["id"] == ids[0]
    assert tup.checkpoint["channel_values"] == {"y": 3}
    new = saver.citation(config("t"))
    assert new is not None and new.run_id != old.run_id
    assert saver.backend.run(new.run_id).meta["langgraph"]["generation"] == 3


def test_prune_compacts_the_latest_checkpoint_with_all_its_values_into_a_new_run(saver: JournalSaver) -> None:
    ids = put_chain(saver, "t", [{"a": "a1", "b": "b1"}, {"a": "a2"}, {"c": "c1"}])
    saver.put_writes(config("t", ids[-1]), [("a", "w")], "task")
    saver.put_writes(config("t", ids[0]), [("a", "old")], "task")
    old = saver.citation(config("t"))
    assert old is not None

    saver.prune(["t"], strategy="keep_latest")

    assert [t.checkpoint["id"] for t in saver.list(config("t"))] == [ids[-1]]
    with JournalSaver(journal=saver.journal_location) as fresh:
        tup = fresh.get_tuple(config("t"))
        assert tup is not None
        assert tup.checkpoint["channel_values"] == {"a": "a2", "b": "b1", "c": "c1"}
        assert tup.pending_writes == [("task", "a", "w")]
        new = fresh.citation(config("t"))
    assert new is not None and new.run_id != old.run_id
    assert saver.backend.run(old.run_id).state is RunState.DONE
    last = saver.backend.read(old.run_id, STREAM)[-1]
    assert last.payload == {"kind": "compacted", "into": new.run_id}
    kinds = [r.payload["kind"] for r in saver.backend.read(new.run_id, STREAM)]
    assert kinds == ["checkpoint", "writes"]


def test_copy_thread_carries_every_value_so_the_copy_outlives_its_source(saver: JournalSaver) -> None:
    ids = put_chain(saver, "src", [{"a": 1}, {"b": 2}, {"a": 3}])
    saver.put_writes(config("src", ids[1]), [("b", 7)], "task")

    saver.copy_thread("src", "dst")
    saver.delete_thread("src")

    listed = list(saver.list(config("dst")))
    assert [t.checkpoint["id"] for t in listed] == list(reversed(ids))
    assert [t.checkpoint["channel_values"] for t in listed] == [{"a": 3, "b": 2}, {"a": 1, "b": 2}, {"a": 1}]
    assert listed[1].pending_writes == [("task", "b", 7)]


def test_delete_for_runs_tombstones_in_place_across_threads(saver: JournalSaver) -> None:
    for thread in ("t1", "t2"):
        for run in ("keep", "drop", "keep"):
            saver.put(config(thread), checkpoint({"x": thread}), {"run_id": run, "step": 0}, {"x": 1})

    saver.delete_for_runs(["drop", "never-ran"])

    for thread in ("t1", "t2"):
        assert [t.metadata["run_id"] for t in saver.list(config(thread))] == ["keep", "keep"]
        cite = saver.citation(config(thread))
        assert cite is not None
        assert saver.backend.read(cite.run_id, STREAM)[-1].payload == {
            "kind": "delete-runs",
            "runIds": ["drop"],
        }


def test_a_checkpoint_put_again_after_delete_for_runs_is_stored_again(saver: JournalSaver) -> None:
    """The journal answers a write whose key it holds with the record it holds: a put (or a
    tombstone, or a copy) identical to one a tombstone dropped must still be a new record, as a put
    after a delete is in LangGraph's SQL savers (and after delete_thread in its InMemorySaver)."""
    cp = checkpoint({"a": 1})
    meta = {"source": "loop", "step": 0, "run_id": "r1"}
    saver.put(config("t1"), cp, dict(meta), {"a": 1})
    saver.delete_for_runs(["r1"])
    assert saver.get_tuple(config("t1", cp["id"])) is None

    saver.put(config("t1"), cp, dict(meta), {"a": 1})
    again = saver.get_tuple(config("t1", cp["id"]))
    assert again is not None and again.checkpoint["channel_values"] == {"a": 1}
    cite = saver.citation(config("t1"))
    assert cite is not None
    count = len(saver.backend.read(cite.run_id, STREAM))
    saver.put(config("t1"), cp, dict(meta), {"a": 1})  # a retry after the same tombstone: a no-op
    assert len(saver.backend.read(cite.run_id, STREAM)) == count

    # a second delete of the same run is a tombstone of its own, not the first one handed back
    saver.delete_for_runs(["r1"])
    assert saver.get_tuple(config("t1")) is None

    # a copy into a thread holding the dropped record brings the checkpoint back too
    saver.put(config("src"), cp, dict(meta), {"a": 1})
    saver.copy_thread("src", "t1")
    copied = saver.get_tuple(config("t1"))
    assert copied is not None and copied.checkpoint["id"] == cp["id"]


def test_writes_put_again_after_delete_for_runs_are_stored_again(saver: JournalSaver) -> None:
    # The checkpoint and its writes are dropped by the tombstone; put again identically, the writes
    # must be new records too, not the dropped ones handed back.
    cp = checkpoint({"a": 1})
    meta = {"source": "loop", "step": 0, "run_id": "r1"}
    saver.put(config("t1"), cp, dict(meta), {"a": 1})
    saver.put_writes(config("t1", cp["id"]), [("a", 2), ("__error__", "boom")], "task")
    saver.delete_for_runs(["r1"])
    saver.put(config("t1"), cp, dict(meta), {"a": 1})
    saver.put_writes(config("t1", cp["id"]), [("a", 2), ("__error__", "boom")], "task")
    again = saver.get_tuple(config("t1", cp["id"]))
    assert again is not None
    assert again.pending_writes == [("task", "__error__", "boom"), ("task", "a", 2)]
    cite = saver.citation(config("t1"))
    assert cite is not None
    count = len(saver.backend.read(cite.run_id, STREAM))
    saver.put_writes(config("t1", cp["id"]), [("a", 2), ("__error__", "boom")], "task")  # a retry
    assert len(saver.backend.read(cite.run_id, STREAM)) == count


def test_a_second_writer_waits_for_the_holder_and_fails_with_lease_held_past_its_patience(
    journal_location: str,
) -> None:
    with JournalSaver(journal=journal_location, lease_idle_s=60) as holder:
        put_chain(holder, "t", [{"x": 1}])
        with JournalSaver(journal=journal_location, lease_wait_s=0.3) as other:
            assert other.get_tuple(config("t")) is not None  # reading needs no lease
            with pytest.raises(JournalLeaseHeld):
                put_chain(other, "t", [{"x": 2}])
        holder.close()  # lets go
        with JournalSaver(journal=journal_location, lease_wait_s=5) as other:
            put_chain(other, "t", [{"y": 2}])
            tup = other.get_tuple(config("t"))
            assert tup is not None and tup.checkpoint["channel_values"] == {"y": 2}


def test_an_idle_holder_lets_go_so_another_writer_gets_the_thread(journal_location: str) -> None:
    with (
        JournalSaver(journal=journal_location, lease_idle_s=0.05) as first,
        JournalSaver(journal=journal_location, lease_wait_s=10) as second,
    ):
        put_chain(first, "t", [{"a": 1}])
        put_chain(second, "t", [{"b": 2}])  # waits until the first lets go, then writes
        put_chain(first, "t", [{"c": 3}])
        assert [t.checkpoint["channel_values"] for t in first.list(config("t"))] == [
            {"c": 3},
            {"b": 2},
            {"a": 1},
        ]


def test_a_holder_whose_lease_was_taken_is_refused_and_writes_nothing(journal_location: str) -> None:
    stalled = JournalSaver(journal=journal_location, lease_idle_s=60)
    put_chain(stalled, "t", [{"x": 1}])
    cite = stalled.citation(config("t"))
    assert cite is not None
    lease = stalled._leases.holds(cite.run_id)
    assert lease is not None
    # The holder stalls: its lock goes (as a stalled PostgreSQL session's lease expires) while it
    # still believes it holds the thread, and another process takes the thread over.
    stalled.backend.release(lease)
    with JournalSaver(journal=journal_location) as newer:
        put_chain(newer, "t", [{"x": 2}])
        before = list(newer.backend.read(cite.run_id, STREAM))

        with pytest.raises(JournalLeaseLost):
            stalled.put(config("t"), checkpoint({"x": 3}), {"step": 9}, {"x": 3})

        assert list(newer.backend.read(cite.run_id, STREAM)) == before
        assert newer.backend.run(cite.run_id).epoch == lease.epoch + 1
    stalled.close()


_CHILD = """
import sys, time
from flows.langgraph import JournalSaver
from tests.langgraph.helpers import put_chain
saver = JournalSaver(journal=sys.argv[1], lease_idle_s=600)
put_chain(saver, "t", [{"child": 1}])
print("holding", flush=True)
time.sleep(600)
"""


def test_a_killed_holder_frees_the_thread_at_once(journal_location: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, journal_location], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "holding"
        with JournalSaver(journal=journal_location, lease_wait_s=0.3) as saver:
            with pytest.raises(JournalLeaseHeld):
                put_chain(saver, "t", [{"parent": 1}])
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
            put_chain(saver, "t", [{"parent": 2}])
            assert [t.checkpoint["channel_values"] for t in saver.list(config("t"))] == [
                {"parent": 2},
                {"child": 1},
            ]
    finally:
        child.kill()
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()


_WRITER = """
import sys
from flows.langgraph import JournalSaver
from tests.langgraph.helpers import checkpoint, config
with JournalSaver(journal=sys.argv[1], lease_idle_s=0.0, lease_wait_s=60) as saver:
    for i in range(int(sys.argv[3])):
        cp = checkpoint({"w" + sys.argv[2]: i})
        saver.put(config("shared"), cp, {"writer": sys.argv[2], "i": i}, {"w" + sys.argv[2]: i + 1})
        saver.put_writes(config("shared", cp["id"]), [("w", i)], "task-" + sys.argv[2])
"""


@pytest.mark.slow
def test_four_processes_writing_one_thread_lose_and_double_nothing(journal_location: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    n = 6
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, journal_location, str(w), str(n)], env=env)
        for w in range(4)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0

    with JournalSaver(journal=journal_location) as saver:
        listed = list(saver.list(config("shared")))
        got = sorted((t.metadata["writer"], t.metadata["i"]) for t in listed)
        assert got == sorted((str(w), i) for w in range(4) for i in range(n))
        assert all(len(t.pending_writes or []) == 1 for t in listed)
        # The creation race was decided once: one run holds the thread; any loser's run was
        # finished unused, saying why.
        runs = thread_runs(saver.backend)
        assert len([r for r in runs if r.state is not RunState.FAILED]) == 1
        assert all(
            (r.error or {}).get("code") == "langgraph_thread_race" for r in runs if r.state is RunState.FAILED
        )


def test_a_catalog_retired_by_a_creation_race_still_answers_for_its_threads(journal_location: str) -> None:
    with open_journal(journal_location) as jr:
        # Two processes created a catalog at once, and one registered a thread in its own
        # (the younger) before anyone saw both.
        for _ in range(2):
            _, lease = jr.begin(CATALOG_FLOW, SCOPE, {"langgraph": "catalog"})
            jr.release(lease)
        older, younger = catalog_runs(jr)
        run, tlease = jr.begin(
            "langgraph-thread", SCOPE, {"langgraph": {"thread": "only-in-b", "generation": 1}}
        )
        jr.append(tlease, STREAM, _checkpoint_record(checkpoint({"x": "b"})), key="c-manual")
        jr.append(
            Lease(younger.run_id, younger.epoch),
            THREADS_STREAM,
            {"thread": "only-in-b", "gen": 1, "run": run.run_id, "reason": "put"},
            key=registration_key("only-in-b", 1),
        )
        jr.release(tlease)

    with JournalSaver(journal=journal_location) as a:  # sees both: retires the younger
        put_chain(a, "only-in-a", [{"x": "a"}])
        states = {c.run_id: c.state for c in catalog_runs(a.backend)}
        assert states[younger.run_id] is RunState.FAILED
        assert states[older.run_id] in (RunState.RUNNING, RunState.INTERRUPTED)
        assert a.backend.find(older.run_id, THREADS_STREAM, registration_key("only-in-a", 1)) is not None
        with pytest.raises(JournalLeaseLost):  # a writer still using the younger one is fenced out
            a.backend.append(Lease(younger.run_id, younger.epoch), THREADS_STREAM, {"late": True})

    with JournalSaver(journal=journal_location) as b:
        for thread, x in (("only-in-a", "a"), ("only-in-b", "b")):
            tup = b.get_tuple(config(thread))
            assert tup is not None and tup.checkpoint["channel_values"] == {"x": x}, thread
        assert set(b._catalog.threads()) == {"only-in-a", "only-in-b"}


def _registered_late(
    jr: journal.JournalBackend, payload: dict[str, Any]
) -> tuple[journal.RunInfo, journal.RunInfo, Catalog]:
    """Two catalogs created at once, and a ``Catalog`` that listed both and found no registration;
    then another process, which listed the catalogs before the older one was visible, appends
    ``payload`` under thread ``t``'s first generation key in the younger one, before this process
    retires it. Returns the older and younger catalog runs and the ``Catalog``."""
    for _ in range(2):
        _, lease = jr.begin(CATALOG_FLOW, SCOPE, {"langgraph": "catalog"})
        jr.release(lease)
    older, younger = catalog_runs(jr)
    cat = Catalog(jr)
    assert cat.threads() == []  # listed and looked in: nothing yet, nothing retired
    jr.append(Lease(younger.run_id, younger.epoch), THREADS_STREAM, payload, key=registration_key("t", 1))
    return older, younger, cat


def test_a_generation_registered_in_a_catalog_about_to_be_retired_is_not_registered_again(
    journal_location: str,
) -> None:
    with open_journal(journal_location) as jr:
        other, lease = jr.begin(THREAD_FLOW, SCOPE, {"langgraph": {"thread": "t", "generation": 1}})
        jr.release(lease)  # the other process's thread run: a registration names a run that exists
        payload = {"thread": "t", "gen": 1, "run": other.run_id, "reason": "put"}
        older, younger, cat = _registered_late(jr, payload)

        won = cat.register("t", 1, "run-of-this-one", "put")

        assert (won.run_id, won.catalog) == (other.run_id, younger.run_id)
        assert jr.find(older.run_id, THREADS_STREAM, registration_key("t", 1)) is None
        assert jr.run(younger.run_id).state is RunState.FAILED  # retired before it was looked in
        gen = Catalog(jr).current("t")
        assert gen is not None and gen.runs == (other.run_id,)


@pytest.mark.parametrize(
    "payload",
    [
        {"thread": "t", "gen": 2, "run": "run-of-the-other", "reason": "put"},  # not the keyed one
        {"thread": "t", "gen": True, "run": "run-of-the-other", "reason": "put"},
        {"thread": "t", "gen": 1, "run": ["not", "a", "run"], "reason": "put"},
    ],
)
def test_a_crafted_registration_in_a_retired_catalog_fails_the_registration_closed(
    journal_location: str, payload: dict[str, Any]
) -> None:
    with open_journal(journal_location) as jr:
        older, younger, cat = _registered_late(jr, payload)

        with pytest.raises(RecordInvalid) as caught:
            cat.register("t", 1, "run-of-this-one", "put")

        assert caught.value.code == "langgraph_record_invalid"
        assert younger.run_id in str(caught.value)  # names the catalog run to inspect
        assert jr.find(older.run_id, THREADS_STREAM, registration_key("t", 1)) is None  # nothing doubled


def _checkpoint_record(cp: Any) -> dict[str, Any]:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from flows.langgraph._records import pack

    serde = JsonPlusSerializer()
    values = cp.pop("channel_values")
    return {
        "kind": "checkpoint",
        "ns": "",
        "id": cp["id"],
        "parent": None,
        "checkpoint": pack(serde.dumps_typed(cp)),
        "metadata": pack(serde.dumps_typed({"step": 0})),
        "runId": None,
        "blobs": [[k, 1, *pack(serde.dumps_typed(v))] for k, v in values.items()],
    }


@pytest.mark.parametrize(
    "payload",
    [
        {"kind": "mystery"},
        {"kind": "checkpoint", "ns": "", "id": "x"},
        {
            "kind": "writes",
            "ns": "",
            "checkpoint": "c",
            "task": "t",
            "path": "",
            "writes": [["0", "ch", "json", "e30="]],
        },
        {
            "kind": "checkpoint",
            "ns": "",
            "id": "x",
            "parent": None,
            "checkpoint": ["msgpack", "not base64!"],
            "metadata": ["msgpack", ""],
            "blobs": [],
        },
        {"kind": "delete-runs", "runIds": "all"},
    ],
)
def test_a_record_the_saver_did_not_write_fails_the_read_naming_it(saver: JournalSaver, payload: Any) -> None:
    put_chain(saver, "t", [{"x": 1}])
    cite = saver.citation(config("t"))
    assert cite is not None
    lease = saver._leases.holds(cite.run_id)
    assert lease is not None
    bad = saver.backend.append(lease, STREAM, payload)

    with JournalSaver(journal=saver.journal_location) as reader, pytest.raises(RecordInvalid) as caught:
        reader.get_tuple(config("t"))
    assert (caught.value.run_id, caught.value.stream, caught.value.seq) == (cite.run_id, STREAM, bad.seq)
    assert caught.value.code == "langgraph_record_invalid"


def test_damaged_value_bytes_fail_the_read_with_the_record_named(saver: JournalSaver) -> None:
    put_chain(saver, "t", [{"x": 1}])
    cite = saver.citation(config("t"))
    assert cite is not None
    lease = saver._leases.holds(cite.run_id)
    assert lease is not None
    cp = checkpoint({"x": 2})
    record = _checkpoint_record(cp)
    record["blobs"] = [["x", 1, "msgpack", "kgE="]]  # 0x92 0x01: an array of two, cut after one
    saver.backend.append(lease, STREAM, record)

    with JournalSaver(journal=saver.journal_location) as reader, pytest.raises(RecordInvalid) as caught:
        reader.get_tuple(config("t"))
    assert caught.value.run_id == cite.run_id


def test_the_async_methods_run_the_same_operations(saver: JournalSaver) -> None:
    async def go() -> list[Any]:
        cp = checkpoint({"x": 1})
        stored = await saver.aput(config("t"), cp, {"step": 0}, {"x": 1})
        await saver.aput_writes(stored, [("x", 2)], "task")
        tup = await saver.aget_tuple(config("t"))
        listed = [t async for t in saver.alist(config("t"))]
        await saver.acopy_thread("t", "u")
        await saver.aprune(["u"])
        await saver.adelete_for_runs(["none"])
        await saver.adelete_thread("t")
        return [tup, listed, await saver.aget_tuple(config("t")), await saver.aget_tuple(config("u"))]

    tup, listed, gone, copied = asyncio.run(go())
    assert tup.checkpoint["channel_values"] == {"x": 1} and tup.pending_writes == [("task", "x", 2)]
    assert len(listed) == 1 and gone is None
    assert copied.checkpoint["channel_values"] == {"x": 1}


def test_close_is_safe_twice_and_use_after_close_raises(journal_location: str) -> None:
    saver = JournalSaver(journal=journal_location)
    put_chain(saver, "t", [{"x": 1}])
    saver.close()
    saver.close()
    for call in (lambda: saver.get_tuple(config("t")), lambda: asyncio.run(saver.aget_tuple(config("t")))):
        with pytest.raises(journal.JournalClosed) as err:
            call()
        assert err.value.code == "journal_closed"  # a coded error, as every error a user meets
        assert isinstance(err.value, RuntimeError)  # what it was before it had a code
        assert "closed" in str(err.value) and "make a new one" in str(err.value)


def test_versions_from_get_next_version_increase_and_differ_between_forks(saver: JournalSaver) -> None:
    a = saver.get_next_version(None, None)
    b = saver.get_next_version(a, None)
    assert a < b and int(b.split(".")[0]) == 2
    assert saver.get_next_version(a, None) != b  # two forks from one version never collide
    assert int(saver.get_next_version(7, None).split(".")[0]) == 8  # type: ignore[arg-type]


@pytest.mark.parametrize("version", ["abc", "-1.0", "9" * 5_000 + ".1", "", "１.5"])
def test_a_version_this_saver_never_writes_is_record_invalid_not_a_bare_value_error(
    saver: JournalSaver, version: str
) -> None:
    # LangGraph hands back what it read from a checkpoint's channel versions: a crafted record's
    with pytest.raises(RecordInvalid, match="not one this saver writes"):
        saver.get_next_version(version, None)


def test_a_delete_while_another_process_holds_the_thread_waits_then_refuses(journal_location: str) -> None:
    with JournalSaver(journal=journal_location, lease_idle_s=60) as holder:
        put_chain(holder, "t", [{"x": 1}])
        with JournalSaver(journal=journal_location, lease_wait_s=0.3) as other:
            with pytest.raises(JournalLeaseHeld) as caught:
                other.delete_thread("t")
            assert caught.value.code == "journal_lease_held"
        assert holder.get_tuple(config("t")) is not None
