"""``MemoryStore.session``: learning outside a flow under a root run of the session's own, on every
journal backend; and ``get`` / ``scopes``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import flows
import journal
import memory
from journal import RunState
from tests.memory.conftest import Clock, learned_files


@pytest.fixture
def store(db: Path, clock: Clock, journal_location: str) -> Iterator[memory.MemoryStore]:
    """A store over ``db`` whose journal is each backend in turn."""
    with memory.MemoryStore(db, journal=journal_location, clock=clock) as s:
        yield s


def _runs(store: memory.MemoryStore) -> list[journal.RunInfo]:
    return store.open_journal().runs()


def _records(store: memory.MemoryStore, run_id: str) -> list[journal.Record]:
    return list(store.open_journal().read(run_id, memory.STREAM))


def test_a_session_learns_under_its_own_root_run_which_ends_done(store: memory.MemoryStore) -> None:
    with store.session(scope="research", flow="notes") as s:
        learned = s.learn({"text": "fees are lower on weekends", "tags": ["fees"]})
        run_id = s.run_id
        assert s.state is memory.SessionState.OPEN
    assert s.state is memory.SessionState.CLOSED

    (run,) = _runs(store)
    assert (run.run_id, run.flow, run.scope, run.state) == (run_id, "notes", "research", RunState.DONE)
    assert run.meta["session"] is True
    (record,) = _records(store, run_id)
    assert learned.key == learned.id == record.key == learned.path.stem
    assert learned.citation == memory.Citation(run_id, memory.STREAM, record.id)
    assert learned.path.read_bytes() == memory.render(record)
    (found,) = store.recall()
    assert (found.key, found.scope, found.flow, found.source) == (learned.key, "research", "notes", "notes")


def test_a_session_source_is_the_default_source_of_its_findings(store: memory.MemoryStore) -> None:
    with store.session(scope="research", source="desk") as s:
        s.learn({"text": "one"})
        s.learn({"text": "two", "source": "wire"})
    assert sorted(e.source for e in store.recall()) == ["desk", "wire"]
    assert _runs(store)[0].flow == "session"


def test_an_error_in_the_with_block_ends_the_root_failed_with_the_error_recorded(
    store: memory.MemoryStore,
) -> None:
    with pytest.raises(ValueError, match="the script broke"), store.session(scope="research") as s:
        s.learn({"text": "kept: it was journaled before the error"})
        raise ValueError("the script broke")
    (run,) = _runs(store)
    assert run.state is RunState.FAILED
    assert run.error == {"code": "session_failed", "message": "ValueError: the script broke"}
    assert [e.text for e in store.recall()] == ["kept: it was journaled before the error"]

    with pytest.raises(memory.FindingInvalid), store.session(scope="research") as s2:
        s2.learn({"text": "fine"})
        s2.learn({"text": "x", "colour": "red"})
    failed = next(r for r in _runs(store) if r.run_id == s2.run_id)
    assert failed.state is RunState.FAILED
    assert failed.error is not None and failed.error["code"] == "memory_finding_invalid"


def test_async_with_and_the_awaitable_methods_end_done_or_failed(store: memory.MemoryStore) -> None:
    async def good() -> str:
        async with store.session(scope="a", flow="async-notes") as s:
            learned = await asyncio.gather(*(s.alearn({"text": f"note {i}"}) for i in range(5)))
            assert len({x.key for x in learned}) == 5
            await s.aflush()
            return s.run_id

    async def bad() -> str:
        s = store.session(scope="a", flow="async-bad")
        with pytest.raises(RuntimeError):
            async with s:
                await s.alearn({"text": "before the failure"})
                raise RuntimeError("async body failed")
        return s.run_id

    ok_id = asyncio.run(good())
    bad_id = asyncio.run(bad())
    states = {r.run_id: r for r in _runs(store)}
    assert states[ok_id].state is RunState.DONE
    assert len(_records(store, ok_id)) == 5
    assert states[bad_id].state is RunState.FAILED
    assert states[bad_id].error == {"code": "session_failed", "message": "RuntimeError: async body failed"}


def test_aclose_ends_a_session_used_without_a_block(store: memory.MemoryStore) -> None:
    async def main() -> str:
        s = store.session(scope="a")
        await s.alearn({"text": "x"})
        await s.aclose()
        await s.aclose()
        return s.run_id

    run_id = asyncio.run(main())
    assert store.open_journal().run(run_id).state is RunState.DONE


def test_a_session_that_never_writes_begins_no_root_run(store: memory.MemoryStore) -> None:
    with store.session(scope="quiet") as s:
        assert s.state is memory.SessionState.NEW
    assert _runs(store) == []
    with store.session(scope="quiet") as s, pytest.raises(memory.FindingInvalid):
        s.learn({"text": ""})  # refused before any journal write: no root run for it
    assert _runs(store) == []
    assert learned_files(store.db_path) == []


def test_close_is_safe_twice_and_a_closed_session_refuses_every_write(store: memory.MemoryStore) -> None:
    s = store.session(scope="a")
    s.learn({"text": "x"})
    s.close()
    s.close()
    with pytest.raises(memory.SessionClosed) as caught:
        s.learn({"text": "y"})
    assert caught.value.code == "memory_session_closed"
    assert s.run_id in str(caught.value)
    never = store.session(scope="a")
    never.close()
    with pytest.raises(memory.SessionClosed):
        _ = never.run_id
    assert [r.state for r in _runs(store)] == [RunState.DONE]
    assert [e.text for e in store.recall()] == ["x"]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"scope": ""}, "scope"),
        ({"scope": "   "}, "scope"),
        ({"scope": 7}, "scope"),
        ({"scope": "a" * 257}, "scope"),
        ({"scope": "a\0b"}, "scope"),
        ({"scope": "a", "flow": ""}, "flow"),
        ({"scope": "a", "flow": None}, "flow"),
        ({"scope": "a", "source": ""}, "source"),
        ({"scope": "a", "source": ["x"]}, "source"),
    ],
)
def test_a_bad_session_argument_is_refused_with_its_name_and_nothing_is_journaled(
    store: memory.MemoryStore, kwargs: dict[str, object], named: str
) -> None:
    with pytest.raises(memory.ArgumentInvalid) as caught:
        store.session(**kwargs)  # type: ignore[arg-type]
    assert caught.value.code == "memory_argument_invalid"
    assert f"session's {named}" in str(caught.value)
    assert _runs(store) == []


def test_threads_sharing_a_session_begin_one_root_run(store: memory.MemoryStore) -> None:
    with store.session(scope="shared") as s:
        threads = [threading.Thread(target=s.learn, args=({"text": f"from thread {i}"},)) for i in range(8)]
        for t in threads:
            t.start()
        s.flush()
        for t in threads:
            t.join()
    (run,) = _runs(store)
    assert run.state is RunState.DONE
    assert len(_records(store, run.run_id)) == 8


def test_a_keyboard_interrupt_leaves_the_session_root_interrupted(
    db: Path, clock: Clock, tmp_path: Path
) -> None:
    with memory.MemoryStore(db, clock=clock) as store:
        with pytest.raises(KeyboardInterrupt), store.session(scope="a") as s:
            s.learn({"text": "x"})
            raise KeyboardInterrupt
        # The lease is let go; another journal object (another process) sees it interrupted.
        with journal.FileJournal(store.journal_location) as other:
            assert other.run(s.run_id).state is RunState.INTERRUPTED


def test_flows_resume_of_a_session_root_says_it_has_no_body_to_run_again(db: Path, clock: Clock) -> None:
    with memory.MemoryStore(db, clock=clock) as store:
        s = store.session(scope="a")
        s.learn({"text": "x"})
        store.open_journal().release(s._root.lease)  # as if the process had died
        with pytest.raises(flows.SessionNotResumable, match="no body to run again") as raised:
            flows.resume(s.run_id, store=store)
        assert raised.value.code == "flow_session_not_resumable" and raised.value.run_id == s.run_id
        assert store.open_journal().run(s.run_id).state is RunState.INTERRUPTED  # nothing was written


# -- get and scopes ---------------------------------------------------------------------------


def test_get_returns_the_finding_by_key_before_and_after_a_sync(store: memory.MemoryStore) -> None:
    with store.session(scope="research") as s:
        learned = s.learn({"text": "fees are lower on weekends", "tags": ["fees"]})
        other = s.learn({"text": "gas spikes at noon"})
    before = store.get(learned.key)
    assert before is not None and before.id < 0
    assert (before.key, before.citation) == (learned.key, learned.citation)
    assert before.text == "fees are lower on weekends"
    store.sync()
    after = store.get(learned.key)
    assert after is not None and after.id > 0
    assert (after.key, after.text, after.citation) == (before.key, before.text, before.citation)
    assert store.get(other.key) is not None
    assert store.get("0" * 32) is None


@pytest.mark.parametrize("key", ["", "ABCDEF0123456789abcdef0123456789", "abc", "g" * 32, None, 12])
def test_get_refuses_a_malformed_key(store: memory.MemoryStore, key: object) -> None:
    with pytest.raises(memory.ArgumentInvalid, match="32 lowercase hex"):
        store.get(key)  # type: ignore[arg-type]


def test_scopes_lists_the_scopes_holding_findings_in_the_db_and_in_files(store: memory.MemoryStore) -> None:
    assert store.scopes() == []
    with store.session(scope="beta") as s:
        s.learn({"text": "b"})
    store.sync()
    with store.session(scope="alpha") as s:
        s.learn({"text": "a"})
    assert store.scopes() == ["alpha", "beta"]


def test_a_session_recalls_and_asks_why_in_its_own_scope_unless_told_another(
    store: memory.MemoryStore,
) -> None:
    with store.session(scope="elsewhere") as other:
        other.learn({"text": "weekend fees elsewhere", "tags": ["fees"]})
    with store.session(scope="research") as s:
        mine = s.learn({"text": "weekend fees are lower", "tags": ["fees"]})
        assert [f.key for f in s.recall()] == [mine.key]
        assert [f.key for f in s.recall(tags=["fees"])] == [mine.key]
        assert [e.finding.key for e in s.why("weekend fees")] == [mine.key]
        assert sorted(f.scope for f in s.recall(scope=None)) == ["elsewhere", "research"]
        assert [e.finding.scope for e in s.why("weekend fees", scope="elsewhere")] == ["elsewhere"]
        s.forget(mine.key, reason="wrong")
        assert s.recall() == []
        assert s.why("weekend fees") == []


def test_a_session_that_only_reads_begins_no_root_run_and_reads_after_close_are_refused(
    store: memory.MemoryStore,
) -> None:
    s = store.session(scope="research")
    assert s.recall() == [] and s.why("anything") == []
    assert s.state is memory.SessionState.NEW
    s.close()
    assert _runs(store) == []
    with pytest.raises(memory.SessionClosed):
        s.recall()
    with pytest.raises(memory.SessionClosed):
        s.why("anything")


def test_a_session_recalls_and_asks_why_from_async_code(store: memory.MemoryStore) -> None:
    async def main() -> tuple[list[str], list[str]]:
        async with store.session(scope="research") as s:
            learned = await s.alearn({"text": "async weekend fees"})
            recalled = [f.key for f in await s.arecall()]
            explained = [e.finding.key for e in await s.awhy("weekend")]
            assert recalled == explained == [learned.key]
            return recalled, explained

    asyncio.run(main())


class _Unprintable(Exception):
    def __str__(self) -> str:
        return self.detail  # type: ignore[attr-defined,no-any-return]


_NAME = b"note-\xff.txt".decode("utf-8", "surrogateescape")


@pytest.mark.parametrize(
    ("make", "start"),
    [
        (lambda: ValueError(f"cannot import {_NAME}"), "ValueError: cannot import note-\\udcff.txt"),
        (lambda: ValueError("x" * 17_000_000), "ValueError: xxx"),
        (_Unprintable, "_Unprintable: <str() of the exception failed with AttributeError"),
    ],
    ids=["surrogate", "huge", "unprintable"],
)
def test_a_block_error_whose_text_cannot_be_stored_as_is_still_ends_the_root_failed(
    store: memory.MemoryStore, journal_location: str, make: object, start: str
) -> None:
    """The block's own error comes out of the ``with``, and every other reader sees the run failed
    with its message escaped and bounded (``journal.MESSAGE_MAX``), never running for good."""
    error = make()  # type: ignore[operator]
    with pytest.raises(type(error)) as raised, store.session(scope="notes") as s:
        s.learn({"text": "a note"})
        raise error
    assert raised.value is error
    other = journal.open_journal(journal_location)
    try:
        run = other.run(s.run_id)
    finally:
        other.close()
    assert run.state is RunState.FAILED
    assert run.error is not None and run.error["code"] == "session_failed"
    assert run.error["message"].startswith(start)
    assert len(run.error["message"]) <= journal.MESSAGE_MAX
