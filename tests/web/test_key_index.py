"""The dashboard's ``KeyIndex`` (which runs name a finding, so its page reads only those): a run not
yet done is read again only when one of its memory streams changed, and then sees the change."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")

import journal
import memory
from flows.web._findings import KeyIndex


def test_a_run_not_done_is_read_again_only_when_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long session (an MCP client's, say) keeps its root run open: every finding's page read its
    streams whole again, however many findings it held, though nothing had changed."""
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        s = store.session(scope="desk", flow="mcp")
        first = s.learn({"text": "the one memory"})
        for n in range(50):
            s.learn({"text": f"another finding {n}"})
        backend = journal.open_journal(str(db.parent / "flows-journal"))  # the dashboard's own
        runs = list(backend.runs())
        assert [r.state for r in runs] == [journal.RunState.RUNNING]
        index = KeyIndex()
        assert index.runs_naming(backend, runs, first.key) == [runs[0].run_id]
        read = backend.read
        reads: list[str] = []
        monkeypatch.setattr(backend, "read", lambda run, stream: reads.append(stream) or read(run, stream))
        assert index.runs_naming(backend, runs, first.key) == [runs[0].run_id]
        assert index.runs_naming(backend, runs, "0" * 32) == []
        assert memory.STREAM not in reads, reads  # unchanged: not read again
        second = s.update(first.memory_id, {"text": "the one memory, corrected"})
        assert index.runs_naming(backend, runs, second.key) == [runs[0].run_id]
        assert reads.count(memory.STREAM) == 1  # changed: read again, and the new version is named
        s.close()
        backend.close()
