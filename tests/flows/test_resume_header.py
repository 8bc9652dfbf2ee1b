"""A root run's recorded flow header is read back from the journal, so untrusted: a damaged field
(a scope that is not a string, ``memory`` that is not an object) refuses the resume with
``flow_load_failed`` before any of the flow file runs, never an uncoded error out of it or out of
the body's learns."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

import flows
import memory
from journal import RunState

FLOW = """\
import flows

@flows.flow(name="n", scope="s")
async def body(f):
    await f.memory.learn({"text": "a finding", "tags": ["t"]})
    return 1
"""


@pytest.mark.parametrize(
    ("header", "field"),
    [
        ({"name": "n", "scope": "s", "memory": "yes"}, "memory.script"),
        ({"name": "n", "scope": "s", "memory": {"script": "no"}}, "memory.script"),
        ({"name": "n", "scope": ["s"]}, "scope"),
        ({"name": 5, "scope": "s"}, "name"),
    ],
)
def test_a_damaged_recorded_header_refuses_the_resume_with_its_code(
    tmp_path: Path, header: dict[str, Any], field: str
) -> None:
    source = tmp_path / "flow.py"
    source.write_text(FLOW)
    db = tmp_path / "h.db"
    with memory.MemoryStore(db) as store:
        backend = store.open_journal()
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        meta = {"source": str(source), "header": header, "sourceSha256": digest}
        _, lease = backend.begin("n", "s", meta)
        backend.finish(lease, RunState.FAILED, {"code": "flow_failed", "message": "before"})
    with pytest.raises(flows.FlowLoadFailed) as err:
        flows.resume(lease.run_id, db=db)
    assert err.value.code == "flow_load_failed" and err.value.run_id == lease.run_id
    assert f"records a flow header whose {field} is not" in str(err.value)
    with memory.MemoryStore(db) as store:
        info = store.open_journal().run(lease.run_id)
        assert (info.state, info.epoch) == (RunState.FAILED, lease.epoch)  # nothing taken or written
        assert store.open_journal().read(lease.run_id, memory.STREAM) == []
