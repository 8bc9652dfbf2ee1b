"""The journal conformance suite: every backend must pass it unchanged."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import journal
import staging
from journal import JournalBackend, RunState


def test_begin_creates_a_running_run_with_its_metadata_and_first_lease(jr: JournalBackend) -> None:
    info, lease = jr.begin("greet", "team", {"source": "/x/flow.py", "header": {"script": True}})
    assert info.state == RunState.RUNNING
    assert (info.flow, info.scope, info.epoch) == ("greet", "team", 1)
    assert dict(info.meta) == {"source": "/x/flow.py", "header": {"script": True}}
    assert lease == journal.Lease(info.run_id, 1)
    assert jr.run(info.run_id).state == RunState.RUNNING
    journal.check_name("run id", info.run_id)  # safe in a path


def test_run_ids_are_unique(jr: JournalBackend) -> None:
    ids = {jr.begin("f", "s", {})[0].run_id for _ in range(20)}
    assert len(ids) == 20


def test_append_numbers_records_per_stream_and_read_returns_them_in_order(jr: JournalBackend) -> None:
    info, lease = jr.begin("f", "s", {})
    a = [jr.append(lease, "a", {"n": i}) for i in range(5)]
    b = jr.append(lease, "b", {"n": 99})
    assert [r.seq for r in a] == [1, 2, 3, 4, 5]
    assert b.seq == 1
    assert [r.payload["n"] for r in jr.read(info.run_id, "a")] == [0, 1, 2, 3, 4]
    assert list(jr.read(info.run_id, "a")) == a
    assert len({r.id for r in [*a, b]}) == 6
    assert jr.streams(info.run_id) == ["a", "b"]


def test_a_stream_never_written_reads_as_empty(jr: JournalBackend) -> None:
    info, _ = jr.begin("f", "s", {})
    assert list(jr.read(info.run_id, "nothing-here")) == []
    assert jr.find(info.run_id, "nothing-here", "k") is None


def test_append_is_idempotent_by_key(jr: JournalBackend) -> None:
    info, lease = jr.begin("f", "s", {})
    first = jr.append(lease, "memory-learn", {"v": 1}, key="k")
    again = jr.append(lease, "memory-learn", {"v": 2}, key="k")
    other = jr.append(lease, "memory-learn", {"v": 3}, key="other")
    assert again == first
    assert [r.payload["v"] for r in jr.read(info.run_id, "memory-learn")] == [1, 3]
    assert jr.find(info.run_id, "memory-learn", "k") == first
    assert jr.find(info.run_id, "memory-learn", "other") == other
    assert first.id == journal.record_id(info.run_id, "memory-learn", "k")


def test_a_second_holder_is_refused_while_the_lease_is_live(
    jr: JournalBackend, journal_location: str
) -> None:
    info, _lease = jr.begin("f", "s", {})
    other = journal.open_journal(journal_location)
    try:
        with pytest.raises(journal.JournalLeaseHeld) as err:
            other.acquire(info.run_id)
        assert err.value.code == "journal_lease_held"
        assert err.value.run_id == info.run_id
    finally:
        other.close()


def test_a_released_running_run_reads_interrupted_and_is_resumed_with_a_higher_epoch(
    jr: JournalBackend, journal_location: str
) -> None:
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "a", {"n": 1})
    jr.release(lease)
    other = journal.open_journal(journal_location)
    try:
        assert other.run(info.run_id).state == RunState.INTERRUPTED
        assert other.run(info.run_id).state.resumable
        new = other.acquire(info.run_id)
        assert new.epoch == lease.epoch + 1
        assert other.run(info.run_id).state == RunState.RUNNING
        with pytest.raises(journal.JournalLeaseLost) as err:
            jr.append(lease, "a", {"n": 2})
        assert (err.value.code, err.value.expected, err.value.got) == ("journal_lease_lost", 2, 1)
        other.append(new, "a", {"n": 3})
        assert [r.payload["n"] for r in other.read(info.run_id, "a")] == [1, 3]
    finally:
        other.close()


def test_finish_records_done_and_failed_and_done_is_not_resumable(jr: JournalBackend) -> None:
    done, lease = jr.begin("f", "s", {})
    assert jr.finish(lease, RunState.DONE).state == RunState.DONE
    with pytest.raises(journal.JournalNotResumable):
        jr.acquire(done.run_id)
    with pytest.raises(journal.JournalLeaseLost):
        jr.append(lease, "a", {})  # the run has ended: the lease is gone

    failed, lease2 = jr.begin("f", "s", {})
    info = jr.finish(lease2, RunState.FAILED, {"code": "boom", "message": "it broke"})
    assert info.state == RunState.FAILED
    assert dict(jr.run(failed.run_id).error or {}) == {"code": "boom", "message": "it broke"}
    assert jr.acquire(failed.run_id).epoch == 2
    assert jr.run(failed.run_id).error is None


def test_runs_lists_every_run_newest_first(jr: JournalBackend) -> None:
    made = [jr.begin("f", "s", {})[0].run_id for _ in range(3)]
    listed = [r.run_id for r in jr.runs()]
    assert sorted(listed) == sorted(made)
    created = [r.created_ms for r in jr.runs()]
    assert created == sorted(created, reverse=True)


def test_unknown_runs_and_unsafe_names_are_refused(jr: JournalBackend) -> None:
    with pytest.raises(journal.JournalRunNotFound):
        jr.run("20000101T000000-0000000000")
    with pytest.raises(journal.JournalRunNotFound):
        jr.acquire("20000101T000000-0000000000")
    _, lease = jr.begin("f", "s", {})
    for bad in ["../x", "a/b", "", ".hidden", "a\x00b", "x" * 200]:
        with pytest.raises(journal.JournalNameInvalid):
            jr.append(lease, bad, {})


def test_a_finished_runs_state_survives_reopening(jr: JournalBackend, journal_location: str) -> None:
    info, lease = jr.begin("f", "s", {"k": "v"})
    jr.append(lease, "a", {"n": 1}, key="one")
    jr.finish(lease, RunState.DONE)
    again = journal.open_journal(journal_location)
    try:
        assert again.run(info.run_id).state == RunState.DONE
        assert [r.key for r in again.read(info.run_id, "a")] == ["one"]
    finally:
        again.close()


def test_every_call_on_a_closed_journal_is_journal_closed_but_location_release_and_close(
    journal_location: str,
) -> None:
    backend = journal.open_journal(journal_location)
    info, lease = backend.begin("f", "s", {})
    backend.append(lease, "a", {"n": 1}, key="one")
    where = backend.location
    backend.close()
    backend.close()  # safe twice
    backend.release(lease)  # a no-op: closing let go of every lease
    assert backend.location == where
    calls = {
        "begin": lambda: backend.begin("f", "s", {}),
        "acquire": lambda: backend.acquire(info.run_id),
        "finish": lambda: backend.finish(lease, RunState.DONE),
        "append": lambda: backend.append(lease, "a", {"n": 2}),
        "shares_filesystem": lambda: backend.shares_filesystem(where),
        "read": lambda: backend.read(info.run_id, "a"),
        "find": lambda: backend.find(info.run_id, "a", "one"),
        "stamp": lambda: backend.stamp(info.run_id, "a"),
        "streams": lambda: backend.streams(info.run_id),
        "run": lambda: backend.run(info.run_id),
        "runs": backend.runs,
    }
    for name, call in calls.items():
        with pytest.raises(journal.JournalClosed) as err:
            call()
        assert err.value.code == "journal_closed", name
        assert isinstance(err.value, journal.JournalUsageError)
        assert isinstance(err.value, RuntimeError)  # what it was before it had a code
        assert where in str(err.value) and "open it again" in str(err.value), name
    again = journal.open_journal(journal_location)  # nothing the closed object was asked changed a thing
    try:
        assert again.run(info.run_id).state == RunState.INTERRUPTED
        assert [r.payload for r in again.read(info.run_id, "a")] == [{"n": 1}]
        assert [r.run_id for r in again.runs()] == [info.run_id]
    finally:
        again.close()


def test_location_names_the_journal_and_the_errors_about_it(
    jr: JournalBackend, journal_location: str, backend_name: str
) -> None:
    assert isinstance(jr.location, str)
    if backend_name == "file":
        assert jr.location == journal_location
    else:  # the DSN as given, less any password (the test server's has none)
        from journal.postgres import redact_dsn

        assert jr.location == redact_dsn(journal_location) == journal_location
    with pytest.raises(journal.JournalRunNotFound) as err:
        jr.run("20000101T000000-0000000000")
    assert jr.location in str(err.value)


def test_shares_filesystem_says_where_sync_filesystem_can_be_asked_for(
    jr: JournalBackend, backend_name: str, tmp_path: Path
) -> None:
    info, lease = jr.begin("f", "s", {})
    beside = tmp_path / "staged.bin"
    beside.write_bytes(b"written, never fsynced by the caller")
    shares = jr.shares_filesystem(str(beside))
    # the file backend shares its own file system (where syncfs exists); PostgreSQL shares none
    assert shares is (backend_name == "file" and staging.HAVE_SYNCFS)
    assert jr.shares_filesystem(str(tmp_path / "missing" / "file")) is False  # cannot be told: False
    assert jr.shares_filesystem("/proc/self") is False  # another file system
    if shares:
        record = jr.append(lease, "a", {"n": 1}, key="k", sync_filesystem=True)
        assert list(jr.read(info.run_id, "a")) == [record]
        again = jr.append(lease, "a", {"n": 2}, key="k", sync_filesystem=True)  # a key already there
        assert again == record
        assert jr.append(lease, "a", {"n": 3}, sync_filesystem=True).seq == 2
    else:
        with pytest.raises(journal.JournalSyncUnsupported) as err:
            jr.append(lease, "a", {"n": 1}, key="k", sync_filesystem=True)
        assert err.value.code == "journal_sync_unsupported"
        assert isinstance(err.value, journal.JournalUsageError)
        assert isinstance(err.value, ValueError)  # what it was before it had a code
        assert jr.location in str(err.value) and "fsync the files" in str(err.value)
        assert list(jr.read(info.run_id, "a")) == []
    assert jr.append(lease, "b", {"n": 1}).seq == 1  # a plain append is always there


def test_finish_with_a_stale_lease_is_journal_lease_lost_and_changes_nothing(
    jr: JournalBackend, journal_location: str
) -> None:
    info, stale = jr.begin("f", "s", {})
    jr.release(stale)
    other = journal.open_journal(journal_location)
    try:
        current = other.acquire(info.run_id)
        for state, error in ((RunState.DONE, None), (RunState.FAILED, {"code": "x", "message": "stale"})):
            with pytest.raises(journal.JournalLeaseLost) as err:
                jr.finish(stale, state, error)
            assert (err.value.code, err.value.expected, err.value.got) == ("journal_lease_lost", 2, 1)
            assert err.value.run_id == info.run_id
        seen = other.run(info.run_id)
        assert (seen.state, seen.epoch, seen.error) == (RunState.RUNNING, 2, None)
        other.append(current, "a", {"n": 1})  # the holder goes on
        assert other.finish(current, RunState.DONE).state == RunState.DONE
        with pytest.raises(journal.JournalLeaseLost):  # and a finished run ends every lease
            other.finish(current, RunState.DONE)
    finally:
        other.close()
    assert jr.run(info.run_id).state == RunState.DONE


def test_releasing_twice_or_an_older_lease_is_a_no_op(jr: JournalBackend, journal_location: str) -> None:
    info, first = jr.begin("f", "s", {})
    jr.release(first)
    jr.release(first)  # again: nothing to let go, no error
    assert jr.run(info.run_id).state == RunState.INTERRUPTED
    second = jr.acquire(info.run_id)
    jr.release(first)  # an older epoch of the same run: the current lease stays held
    other = journal.open_journal(journal_location)
    try:
        assert other.run(info.run_id).state == RunState.RUNNING
        with pytest.raises(journal.JournalLeaseHeld):
            other.acquire(info.run_id)
        jr.append(second, "a", {"n": 1})
        jr.finish(second, RunState.DONE)
        jr.release(second)  # after finish: a no-op too
        other.release(second)  # a lease this object never held: a no-op
        assert other.run(info.run_id).state == RunState.DONE
    finally:
        other.close()


@pytest.mark.parametrize("bad", [RunState.RUNNING, RunState.INTERRUPTED, "bogus", None, 3], ids=repr)
def test_finishing_in_a_state_but_done_or_failed_is_journal_state_invalid_and_changes_nothing(
    jr: JournalBackend, bad: object
) -> None:
    info, lease = jr.begin("f", "s", {})
    with pytest.raises(journal.JournalStateInvalid) as err:
        jr.finish(lease, bad, {"code": "x", "message": "y"})  # type: ignore[arg-type]
    assert err.value.code == "journal_state_invalid"
    assert isinstance(err.value, journal.JournalUsageError)
    assert isinstance(err.value, ValueError)  # what it was before it had a code
    assert "done or failed" in str(err.value)
    seen = jr.run(info.run_id)
    assert (seen.state, seen.epoch, seen.error) == (RunState.RUNNING, 1, None)
    jr.append(lease, "a", {"n": 1})  # the lease is still held and current
    assert jr.finish(lease, RunState.DONE).state == RunState.DONE


UNSAFE_NAMES = [
    "memory-learn\n",  # a trailing newline: ``$`` would have let it through
    "a\nb",
    "a\x00b",
    "a\tb",
    "a\x7fb",
    "a\x85b",
    "a b",
    "\ud800",
    "é",
]


@pytest.mark.parametrize("bad", UNSAFE_NAMES, ids=repr)
def test_run_ids_and_stream_names_with_newlines_nul_or_control_characters_are_refused(
    jr: JournalBackend, bad: str
) -> None:
    info, lease = jr.begin("f", "s", {})
    calls = [
        lambda: jr.append(lease, bad, {}),
        lambda: jr.read(info.run_id, bad),
        lambda: jr.find(info.run_id, bad, "k"),
        lambda: jr.append(journal.Lease(bad, 1), "s", {}),
        lambda: jr.read(bad, "s"),
        lambda: jr.run(bad),
        lambda: jr.acquire(bad),
        lambda: jr.streams(bad),
    ]
    for call in calls:
        with pytest.raises(journal.JournalNameInvalid) as err:
            call()
        assert err.value.code == "journal_name_invalid"
    assert jr.streams(info.run_id) == []


@pytest.mark.parametrize(
    "bad",
    ["k\x00", "\n", "a\rb", "\x1b[31m", "k\x7f", "k\x9f", "k\ud800", "\udfff", "x" * 1025, "é" * 513],
    ids=repr,
)
def test_keys_with_nul_control_characters_lone_surrogates_or_too_many_bytes_are_refused(
    jr: JournalBackend, bad: str
) -> None:
    info, lease = jr.begin("f", "s", {})
    with pytest.raises(journal.JournalNameInvalid):
        jr.append(lease, "s", {"n": 1}, key=bad)
    with pytest.raises(journal.JournalNameInvalid):
        jr.find(info.run_id, "s", bad)
    assert list(jr.read(info.run_id, "s")) == []


@pytest.mark.parametrize("good", ["", "x" * 1024, "é" * 512, "日本語", "a b/c:d", "🙂"], ids=repr)
def test_keys_of_any_printable_text_up_to_the_limit_are_stored_and_found(
    jr: JournalBackend, good: str
) -> None:
    info, lease = jr.begin("f", "s", {})
    rec = jr.append(lease, "s", {"n": 1}, key=good)
    assert jr.find(info.run_id, "s", good) == rec
    assert [r.key for r in jr.read(info.run_id, "s")] == [good]


@pytest.mark.parametrize(
    "bad",
    [{"x": object()}, {"s": "lone \ud800"}, {"n": 2**64}, {1: "int key"}, ["a", "list"], "text"],
    ids=["object", "lone-surrogate", "beyond-64-bits", "int-key", "list", "str"],
)
def test_a_payload_that_is_not_json_is_refused_with_its_own_code_and_nothing_is_written(
    jr: JournalBackend, bad: object
) -> None:
    info, lease = jr.begin("f", "s", {})
    with pytest.raises(journal.JournalPayloadInvalid) as err:
        jr.append(lease, "s", bad, key="k")  # type: ignore[arg-type]
    assert err.value.code == "journal_payload_invalid"
    assert list(jr.read(info.run_id, "s")) == []
    assert jr.append(lease, "s", {"n": 1}, key="k").payload == {"n": 1}


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        (2**63 - 1, True),
        (-(2**63), True),
        (10**18, True),
        ("9" * 40, True),  # 19 digits and more in a string: text, not an integer
        ({"id": "1234567890123456789012", "n": 2**63 - 1}, True),
        (2**63, False),
        (-(2**63) - 1, False),
        ([1, {"deep": [2**64 - 1]}], False),
        ({"text": "12345678901234567890", "n": 2**63}, False),
    ],
    ids=repr,
)
def test_integers_are_taken_exactly_within_signed_64_bits_wherever_digits_run_long(
    jr: JournalBackend, value: object, stored: bool
) -> None:
    info, lease = jr.begin("f", "s", {})
    if stored:
        assert jr.append(lease, "s", {"v": value}).payload == {"v": value}
    else:
        with pytest.raises(journal.JournalPayloadInvalid):
            jr.append(lease, "s", {"v": value})
    assert [r.payload["v"] for r in jr.read(info.run_id, "s")] == ([value] if stored else [])


def test_metadata_or_an_error_that_is_not_json_is_refused_and_nothing_changes(jr: JournalBackend) -> None:
    with pytest.raises(journal.JournalPayloadInvalid):
        jr.begin("f", "s", {"source": object()})
    assert jr.runs() == []
    info, lease = jr.begin("f", "s", {})
    with pytest.raises(journal.JournalPayloadInvalid):
        jr.finish(lease, RunState.FAILED, {"code": "x", "detail": "lone \ud800"})
    assert jr.run(info.run_id).state == RunState.RUNNING
    assert jr.finish(lease, RunState.FAILED, {"code": "x"}).state == RunState.FAILED


def _text_for(size: int, frame: dict[str, object]) -> str:
    """The text that makes ``frame``, with it as ``frame["x"]``, ``size`` bytes of canonical JSON."""
    return "x" * (size - len(orjson.dumps({**frame, "x": ""}, option=orjson.OPT_SORT_KEYS)))


def test_every_backend_stores_a_payload_of_the_cap_and_refuses_one_byte_more(
    jr: JournalBackend, journal_location: str
) -> None:
    info, lease = jr.begin("f", "s", {})
    over = {"x": _text_for(journal.MAX_PAYLOAD_BYTES + 1, {})}
    with pytest.raises(journal.JournalPayloadInvalid) as err:
        jr.append(lease, "s", over, key="k")
    assert err.value.code == "journal_payload_invalid"
    assert f"{journal.MAX_PAYLOAD_BYTES:,}" in str(err.value)
    assert list(jr.read(info.run_id, "s")) == []
    at_cap = {"x": over["x"][1:]}
    rec = jr.append(lease, "s", at_cap, key="k")
    with journal.open_journal(journal_location) as reader:
        assert list(reader.read(info.run_id, "s")) == [rec]


def _run_record(info: journal.RunInfo, meta: dict[str, object], error: object = None) -> dict[str, object]:
    """The run record as run.json holds it: what the cap on a run measures, on every backend."""
    return {
        "runId": info.run_id,
        "flow": info.flow,
        "scope": info.scope,
        "state": "running" if error is None else "failed",
        "epoch": info.epoch,
        "createdMs": info.created_ms,
        "updatedMs": info.updated_ms,
        "meta": meta,
        "error": error,
    }


def test_every_backend_stores_a_run_record_of_the_cap_and_refuses_one_byte_more(
    jr: JournalBackend, journal_location: str
) -> None:
    probe, _ = jr.begin("flow", "scope", {})  # the same length of id and times as the next runs
    base = len(orjson.dumps(_run_record(probe, {"x": ""}), option=orjson.OPT_SORT_KEYS))
    meta = {"x": "x" * (journal.MAX_RUN_BYTES + 1 - base)}
    with pytest.raises(journal.JournalPayloadInvalid) as err:
        jr.begin("flow", "scope", meta)
    assert err.value.code == "journal_payload_invalid" and err.value.run_id is None
    assert f"{journal.MAX_RUN_BYTES:,}" in str(err.value)
    assert [r.run_id for r in jr.runs()] == [probe.run_id]
    meta = {"x": meta["x"][1:]}
    info, lease = jr.begin("flow", "scope", meta)
    size = len(orjson.dumps(_run_record(info, meta), option=orjson.OPT_SORT_KEYS))
    assert size == journal.MAX_RUN_BYTES
    with journal.open_journal(journal_location) as reader:
        assert reader.run(info.run_id).meta == meta
    # an error that would make the record larger is refused the same way, and the run goes on
    with pytest.raises(journal.JournalPayloadInvalid) as err:
        jr.finish(lease, RunState.FAILED, {"c": "e"})
    assert err.value.run_id == info.run_id
    assert jr.run(info.run_id).state == RunState.RUNNING
    assert jr.append(lease, "s", {"n": 1}).seq == 1
    assert jr.finish(lease, RunState.DONE).state == RunState.DONE


def test_an_appended_record_equals_the_one_read_back(jr: JournalBackend) -> None:
    info, lease = jr.begin("f", "s", {})
    payload = {"t": (1, 2), "nested": {"b": 1, "a": [None, True, 1.5]}}
    rec = jr.append(lease, "s", payload, key="k")
    payload["nested"]["b"] = 2  # the caller's object is not the record's
    assert rec == jr.read(info.run_id, "s")[0]
    assert rec.payload == {"t": [1, 2], "nested": {"b": 1, "a": [None, True, 1.5]}}


# -- the steps stream: a flow's step outcomes, as every backend must keep them ----------------

import threading  # noqa: E402 - this block is appended whole, apart from the cases above

import flows  # noqa: E402

_RESULT = {
    "text": "naïve café — 東京 🙂",
    "big": 2**63 - 1,
    "small": -(2**63),
    "float": 0.1,
    "tiny": 5e-324,
    "nested": [[], {}, [None, True, False, {"k": [1.5, -0.0]}]],
}


def _step_payload(
    name: str, position: str, attempt: int, *, final: bool, **outcome: object
) -> dict[str, object]:
    return {"step": name, "position": position, "attempt": attempt, "final": final, "epoch": 1, **outcome}


def test_a_step_outcome_reads_back_exactly_as_it_was_journaled(jr: JournalBackend) -> None:
    info, lease = jr.begin("f", "s", {})
    result = flows.json_value(_RESULT)
    written = jr.append(
        lease,
        flows.STEPS_STREAM,
        _step_payload("ask model", "2.1", 1, final=True, ok=True, result=result),
        key="ask model#2.1",
    )
    (read,) = jr.read(info.run_id, flows.STEPS_STREAM)
    assert read == written
    assert read.payload["result"] == result
    assert list(read.payload["result"]) == list(result)  # key order as a replay hands it back
    key, outcome = flows.parse_step_record(jr, read)
    assert (key, outcome.ok, outcome.result) == ("ask model#2.1", True, result)
    assert jr.find(info.run_id, flows.STEPS_STREAM, "ask model#2.1") == written


def test_step_attempts_and_outcomes_keep_one_record_per_key_under_concurrent_appends(
    jr: JournalBackend,
) -> None:
    info, lease = jr.begin("f", "s", {})
    keys = [f"fetch#{n}" for n in range(1, 9)]

    def record(key: str, attempt: int) -> None:
        position = key.split("#")[1]
        error = {"code": "flow_failed", "message": "ConnectionError: dropped"}
        jr.append(
            lease,
            flows.STEPS_STREAM,
            _step_payload("fetch", position, attempt, final=False, ok=False, error=error),
            key=f"{key}~{attempt}",
        )
        jr.append(
            lease,
            flows.STEPS_STREAM,
            _step_payload("fetch", position, 2, final=True, ok=True, result=attempt),
            key=key,
        )

    threads = [threading.Thread(target=record, args=(k, a)) for k in keys for a in (1, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = list(jr.read(info.run_id, flows.STEPS_STREAM))
    assert [r.seq for r in records] == list(range(1, 17))
    assert sorted(r.key for r in records) == sorted([*keys, *(f"{k}~1" for k in keys)])
    for r in records:
        flows.parse_step_record(jr, r)


def test_a_new_holder_finds_the_steps_the_last_one_recorded_and_the_stale_one_is_fenced(
    jr: JournalBackend, journal_location: str
) -> None:
    info, lease = jr.begin("f", "s", {})
    first = jr.append(
        lease, flows.STEPS_STREAM, _step_payload("a", "1", 1, final=True, ok=True, result=1), key="a#1"
    )
    jr.release(lease)
    other = journal.open_journal(journal_location)
    try:
        new = other.acquire(info.run_id)
        assert other.find(info.run_id, flows.STEPS_STREAM, "a#1") == first
        again = other.append(
            new, flows.STEPS_STREAM, _step_payload("a", "1", 1, final=True, ok=True, result=2), key="a#1"
        )
        assert again == first  # the recorded outcome stands
        with pytest.raises(journal.JournalLeaseLost):
            jr.append(
                lease,
                flows.STEPS_STREAM,
                _step_payload("b", "1", 1, final=True, ok=True, result=3),
                key="b#1",
            )
        assert [r.key for r in other.read(info.run_id, flows.STEPS_STREAM)] == ["a#1"]
    finally:
        other.close()


def test_a_step_record_of_the_wrong_shape_reads_as_journal_corrupt(jr: JournalBackend) -> None:
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, flows.STEPS_STREAM, _step_payload("a", "1", 1, final=True, ok=True), key="a#1")
    jr.append(lease, flows.STEPS_STREAM, _step_payload("b", "1", 1, final=True, ok=True, result=1), key="c#1")
    for rec in jr.read(info.run_id, flows.STEPS_STREAM):
        with pytest.raises(journal.JournalCorrupt) as err:
            flows.parse_step_record(jr, rec)
        assert (err.value.run_id, err.value.stream, err.value.line) == (info.run_id, "steps", rec.seq)


def test_acquiring_a_run_this_object_already_holds_is_journal_lease_held_alike_everywhere(
    jr: JournalBackend,
) -> None:
    info, lease = jr.begin("f", "s", {})
    for _ in range(2):  # refused, and refusing changed nothing: so again
        with pytest.raises(journal.JournalLeaseHeld) as err:
            jr.acquire(info.run_id)
        assert err.value.code == "journal_lease_held"
        assert err.value.run_id == info.run_id
        assert str(err.value) == (
            f"root run {info.run_id} is already driven by this journal object; append with the lease "
            "it holds, or release that lease before acquiring the run again"
        )
    seen = jr.run(info.run_id)
    assert (seen.state, seen.epoch) == (RunState.RUNNING, 1)
    jr.append(lease, "a", {"n": 1})  # the lease held is untouched
    jr.release(lease)
    assert jr.acquire(info.run_id).epoch == 2  # released: acquiring it is fine


def _with_clock(backend_name: str, location: str, clock: object) -> JournalBackend:
    """The backend at ``location`` with an injected ``clock`` (a constructor argument of each)."""
    if backend_name == "file":
        return journal.FileJournal(location, clock=clock)  # type: ignore[arg-type]
    from journal.postgres import PostgresJournal

    return PostgresJournal(location, clock=clock)  # type: ignore[arg-type]


@pytest.mark.parametrize("reading", [-1, 253_402_300_799_999 + 1, 10**30, 1.5e12, True, None], ids=repr)
def test_a_clock_that_reads_no_time_is_journal_clock_invalid_and_nothing_is_written(
    journal_location: str, backend_name: str, reading: object
) -> None:
    good = journal.open_journal(journal_location)
    bad = _with_clock(backend_name, journal_location, lambda: reading)
    try:
        info, lease = good.begin("f", "s", {})
        good.append(lease, "a", {"n": 1})
        good.release(lease)
        calls = {
            "begin": lambda: bad.begin("f", "s", {}),
            "acquire": lambda: bad.acquire(info.run_id),
        }
        for name, call in calls.items():
            with pytest.raises(journal.JournalClockInvalid) as err:
                call()
            assert err.value.code == "journal_clock_invalid", name
            assert isinstance(err.value, journal.JournalUsageError)
            assert isinstance(err.value, ValueError)  # what a file journal's begin raised before
            assert "clock" in str(err.value) and repr(reading)[:20] in str(err.value), name
        assert [r.run_id for r in good.runs()] == [info.run_id]  # begin created nothing
        seen = good.run(info.run_id)
        assert (seen.state, seen.epoch) == (RunState.INTERRUPTED, 1)  # acquire took nothing over
        # a lease taken with a good clock, then appended and finished with the bad one
        held = good.acquire(info.run_id)
        for name, call in {
            "append": lambda: bad.append(held, "a", {"n": 2}),
            "finish": lambda: bad.finish(held, RunState.DONE),
        }.items():
            with pytest.raises(journal.JournalClockInvalid) as err:
                call()
            assert err.value.code == "journal_clock_invalid", name
            assert err.value.run_id == info.run_id, name
        assert [r.payload for r in good.read(info.run_id, "a")] == [{"n": 1}]
        assert good.run(info.run_id).state == RunState.RUNNING
        good.append(held, "a", {"n": 3})  # the holder goes on, with its own clock
        assert good.finish(held, RunState.DONE).state == RunState.DONE
    finally:
        bad.close()
        good.close()


@pytest.mark.parametrize(
    "bad",
    ["f\x00", "a\nb", "\ud800", 3, None, "x" * (64 * 1024 + 1)],
    ids=["nul", "newline", "lone-surrogate", "int", "none", "too-long"],
)
def test_a_flow_or_scope_either_backend_cannot_store_is_journal_name_invalid(
    jr: JournalBackend, bad: object
) -> None:
    for flow, scope in ((bad, "s"), ("f", bad)):
        with pytest.raises(journal.JournalNameInvalid) as err:
            jr.begin(flow, scope, {})  # type: ignore[arg-type]
        assert err.value.code == "journal_name_invalid"
    assert jr.runs() == []
    info, _ = jr.begin("日本語 flow: a/b", "é" * 100, {})  # any printable text is fine
    assert (jr.run(info.run_id).flow, jr.run(info.run_id).scope) == ("日本語 flow: a/b", "é" * 100)


def test_lookup_finds_one_record_by_id_with_or_without_a_hint(
    jr: JournalBackend, journal_location: str
) -> None:
    info, lease = jr.begin("f", "s", {})
    written = [jr.append(lease, "memory-learn", {"n": i}, key=f"k{i}" if i % 2 else None) for i in range(6)]
    other = journal.open_journal(journal_location)  # a fresh object: nothing cached
    try:
        hints = other.hints(info.run_id, "memory-learn")
        assert set(hints) <= {r.id for r in written}
        fresh = journal.open_journal(journal_location)
        try:
            for r in written:
                assert fresh.lookup(info.run_id, "memory-learn", r.id) == r
                assert fresh.lookup(info.run_id, "memory-learn", r.id, hint=hints.get(r.id)) == r
                # another record's hint, or a nonsense one, costs a full read, never a wrong answer
                for wrong in (*hints.values(), 1, 10**9, -5):
                    assert fresh.lookup(info.run_id, "memory-learn", r.id, hint=wrong) == r
            assert fresh.lookup(info.run_id, "memory-learn", "no-such-id") is None
            assert fresh.lookup(info.run_id, "other-stream", written[0].id) is None
            first = hints.get(written[0].id)
            assert fresh.lookup(info.run_id, "memory-learn", "no-such-id", hint=first) is None
        finally:
            fresh.close()
    finally:
        other.close()


def test_lookup_refuses_bad_names_and_an_unknown_run(jr: JournalBackend) -> None:
    info, lease = jr.begin("f", "s", {})
    r = jr.append(lease, "a", {"n": 1})
    with pytest.raises(journal.JournalRunNotFound):
        jr.lookup("no-such-run", "a", r.id)
    with pytest.raises(journal.JournalRunNotFound):
        jr.lookup("no-such-run", "a", r.id, hint=0)
    with pytest.raises(journal.JournalNameInvalid):
        jr.lookup("../x", "a", r.id)
    with pytest.raises(journal.JournalNameInvalid):
        jr.lookup(info.run_id, "a/b", r.id)
    with pytest.raises(journal.JournalNameInvalid):
        jr.lookup(info.run_id, "a", 5)  # type: ignore[arg-type]
    with pytest.raises(journal.JournalRunNotFound):
        jr.hints("no-such-run", "a")


def test_a_stamp_matches_only_while_the_stream_is_as_the_last_read_left_it(journal_location: str) -> None:
    with journal.open_journal(journal_location) as writer, journal.open_journal(journal_location) as reader:
        info, lease = writer.begin("f", "s", {})
        writer.append(lease, "a", {"n": 1, "text": "something to erase later"})
        assert reader.stamp(info.run_id, "a") is None  # never read: nothing to vouch for
        assert len(reader.read(info.run_id, "a")) == 1
        token = reader.stamp(info.run_id, "a")
        if journal_location.startswith("postgresql"):
            assert token is None  # a table says nothing cheaper than a query
            return
        assert token is not None and reader.stamp(info.run_id, "a") == token
        writer.append(lease, "a", {"n": 2})  # another journal object appends
        assert reader.stamp(info.run_id, "a") != token
        assert [r.payload["n"] for r in reader.read(info.run_id, "a")] == [1, 2]
        again = reader.stamp(info.run_id, "a")
        assert again is not None and again != token
        # an erasure replaces the file with one of the same size: not the stream that was read
        writer.finish(lease, RunState.DONE)
        assert writer.rewrite_payloads(info.run_id, "a", {1: {"n": 0}}, pad="pad") == 1
        assert reader.stamp(info.run_id, "a") is None
        assert [r.payload["n"] for r in reader.read(info.run_id, "a")] == [0, 2]


def test_a_runs_holder_rewrites_its_own_records_while_it_runs_and_appends_after_it(
    jr: JournalBackend, journal_location: str
) -> None:
    # an erasure of a record its own run committed: the run's holder may rewrite it while the run
    # runs (anyone else waits for the run's end), and its appends after it go on where they were
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "a", {"n": 1, "text": "a secret"}, key="k1")
    jr.append(lease, "a", {"n": 2}, key="k2")
    _, other = jr.begin("f", "s", {})
    for wrong in (None, other):
        with pytest.raises(journal.JournalLeaseHeld):
            jr.rewrite_payloads(info.run_id, "a", {1: {"n": 0}}, pad="pad", lease=wrong)
    assert jr.rewrite_payloads(info.run_id, "a", {1: {"n": 0}}, pad="pad", lease=lease) == 1
    assert jr.append(lease, "a", {"n": 3}, key="k3").seq == 3
    found = jr.find(info.run_id, "a", "k1")
    assert found is not None and found.payload["n"] == 0 and "text" not in found.payload
    with journal.open_journal(journal_location) as fresh:  # what the storage holds, read afresh
        assert [r.payload["n"] for r in fresh.read(info.run_id, "a")] == [0, 2, 3]
    jr.finish(lease, RunState.DONE)
    with pytest.raises(journal.JournalLeaseLost):  # an ended run's lease writes nothing more
        jr.append(lease, "a", {"n": 4})


def test_a_lost_lease_says_what_is_true_of_the_run_now(jr: JournalBackend, journal_location: str) -> None:
    """``journal_lease_lost`` advised "resume it to continue" whatever the run had become, though a
    resume refuses a done run, and one another holder drives: its advice follows the run's state."""
    info, lease = jr.begin("f", "s", {})
    jr.release(lease)
    other = journal.open_journal(journal_location)
    try:
        new = other.acquire(info.run_id)
        with pytest.raises(journal.JournalLeaseLost) as running:
            jr.append(lease, "a", {})
        assert "another holder took it over (it runs at epoch 2)" in running.value.message
        assert "resume it to continue" not in running.value.message
        other.finish(new, RunState.DONE)
        with pytest.raises(journal.JournalLeaseLost) as done:
            jr.append(lease, "a", {})
        assert "it is done at epoch 2): nothing is left to resume" in done.value.message
        assert "resume it" not in done.value.message
        with pytest.raises(journal.JournalNotResumable):  # what the advice no longer says to do
            other.acquire(info.run_id)

        failed, lease2 = jr.begin("f", "s", {})
        jr.release(lease2)
        other.finish(other.acquire(failed.run_id), RunState.FAILED, {"code": "x", "message": "y"})
        with pytest.raises(journal.JournalLeaseLost) as ended:
            jr.append(lease2, "a", {})
        assert "ended it failed at epoch 2: resume it to run it again" in ended.value.message
        assert other.acquire(failed.run_id).epoch == 3  # the advice holds
    finally:
        other.close()
