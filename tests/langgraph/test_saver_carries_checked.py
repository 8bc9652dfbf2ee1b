"""``copy_thread`` and ``prune`` carry a thread's values as bytes, but check them as a read does.

A value written into the thread's journal by another writer of it, naming a type outside the
allow-list (a channel value, or a pending write), used to be copied, under this saver's own lease,
into the new run: the call said done, and the copy (or the pruned thread) then failed every read
with an error that cited the new run instead of the crafted record. Both now refuse, citing the
crafted record, and write nothing.
"""

from __future__ import annotations

import base64

import ormsgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from flows.langgraph import JournalSaver, RecordInvalid
from flows.langgraph._records import pack
from journal import open_journal
from tests.langgraph.helpers import checkpoint, config, put_chain, thread_runs

EVIL = ormsgpack.packb(ormsgpack.Ext(0, ormsgpack.packb(["os", "system", "exit 3"])))


def _crafted(location: str, where: str) -> str:
    """A thread whose last checkpoint (appended by another writer) carries a value naming
    ``os.system``, as a channel value (``where="blob"``) or a pending write; its run id."""
    serde = JsonPlusSerializer()
    with JournalSaver(journal=location, lease_idle_s=0) as saver:
        first = put_chain(saver, "victim", [{"x": "ok"}])[0]
    backend = open_journal(location)
    try:
        run = thread_runs(backend)[-1].run_id
        lease = backend.acquire(run)
        cp = checkpoint({"x": "ok"}, {"x": 2})
        evil = ["msgpack", base64.b64encode(EVIL).decode()]
        fine = [*pack(serde.dumps_typed("fine"))]
        backend.append(
            lease,
            "checkpoints",
            {
                "kind": "checkpoint",
                "ns": "",
                "id": cp["id"],
                "parent": first,
                "runId": None,
                "checkpoint": pack(serde.dumps_typed(cp)),
                "metadata": pack(serde.dumps_typed({"step": 1, "source": "loop", "parents": {}})),
                "blobs": [["x", 2, *(evil if where == "blob" else fine)]],
            },
            key="crafted-checkpoint",
        )
        if where == "write":
            backend.append(
                lease,
                "checkpoints",
                {
                    "kind": "writes",
                    "ns": "",
                    "checkpoint": cp["id"],
                    "task": "t",
                    "path": "p",
                    "writes": [[0, "x", *evil]],
                },
                key="crafted-writes",
            )
        backend.release(lease)
        return run
    finally:
        backend.close()


@pytest.mark.parametrize("where", ["blob", "write"])
def test_copy_thread_and_prune_refuse_a_crafted_value_and_write_nothing(
    journal_location: str, where: str
) -> None:
    run = _crafted(journal_location, where)
    with JournalSaver(journal=journal_location) as saver:
        with pytest.raises(RecordInvalid, match=r"os\.system") as read:
            saver.get_tuple(config("victim"))
        assert read.value.run_id == run
        before = [r.run_id for r in thread_runs(saver._backend)]
        for call in (lambda: saver.copy_thread("victim", "copy"), lambda: saver.prune(["victim"])):
            with pytest.raises(RecordInvalid, match=r"os\.system") as refused:
                call()
            assert refused.value.run_id == run  # the crafted record is the one cited
        assert saver.get_tuple(config("copy")) is None  # nothing copied
        assert [r.run_id for r in thread_runs(saver._backend)] == before  # no new generation
        with pytest.raises(RecordInvalid) as after:
            saver.get_tuple(config("victim"))
        assert after.value.run_id == run
