"""Crafted journal records: every ``memory-learn`` record read back is untrusted input. Before a path
or a file is built from one (sync, materialize, resume's republish, repair, learn's convergence), it
must be a finding's commit of the exact shape, or the read fails as ``journal_corrupt`` naming the
run, the stream and the line; ``flows check`` reports it. Nothing is ever written outside the
scope's folder."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

import journal
import memory
from tests.adversarial.memory_support import error_code, flows, populate, snapshot

FINDING = {"text": "the crafted one", "source": "adv", "tags": ["x"]}
ESCAPED = f"/tmp/flows-adv-escaped-{uuid.uuid4().hex}"  # where an absolute id would land
FID = memory.finding_id("adv", memory.validate(FINDING, "adv"))


def _payload(**changes: Any) -> dict[str, Any]:
    p: dict[str, Any] = {"id": FID, "scope": "adv", "flow": "adv", "finding": dict(FINDING), "learnedMs": 1}
    p.update(changes)
    return {k: v for k, v in p.items() if v is not _DROP}


_DROP = object()

CRAFTED: dict[str, dict[str, Any]] = {
    "id climbs out of the folder": _payload(id="../../../../escaped"),
    "id is an absolute path": _payload(id=ESCAPED),
    "id is not the finding's hash": _payload(id="0" * 32),
    "id in upper case": _payload(id=FID.upper()),
    "id is not a string": _payload(id=7),
    "scope is not a string": _payload(scope=["adv"]),
    "scope does not hash to the id": _payload(scope="other"),
    "an extra key": {**_payload(), "path": "/etc/passwd"},
    "a missing key": _payload(flow=_DROP),
    "finding with an extra key": _payload(finding={**FINDING, "x": 1}),
    "finding without source": _payload(finding={"text": "the crafted one", "tags": ["x"]}),
    "tags are not a list": _payload(finding={**FINDING, "tags": "x"}),
    "text is empty": _payload(finding={**FINDING, "text": ""}),
    "learnedMs is a bool": _payload(learnedMs=True),
    # learnedMs past signed 64 bits is refused by the journal at append (test_journal_integers.py)
    "learnedMs before the epoch": _payload(learnedMs=-1),
    "learnedMs is text": _payload(learnedMs="1"),
    "learnedMs past the last date": _payload(learnedMs=253_402_300_799_999 + 1),
    "payload is a list": {"not": "a finding"},
}


def _crafted_run(tmp_path: Path, payload: dict[str, Any], *, key: str | None = None) -> tuple[Path, str, int]:
    """A store with one good learned finding (run 1) and a run holding one crafted record; returns
    the DB, the crafted run's id and the crafted record's line."""
    db = tmp_path / "store" / "history.db"
    populate(db, ["a good finding"])
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("adv", "adv", {})
        store.learn({"text": "an ordinary commit on line 1"}, memory.RootRun(jr, lease, "adv", "adv"))
        # keyed by its own id where that is a key, so only what the case changed is wrong
        own = payload.get("id") if isinstance(payload.get("id"), str) and len(payload["id"]) == 32 else None
        rec = jr.append(lease, memory.STREAM, payload, key=key or own or "a" * 32)
        jr.finish(lease, journal.RunState.FAILED, {"code": "x", "message": "x"})
    return db, lease.run_id, rec.seq


def _assert_corrupt(exc: journal.JournalCorrupt, run_id: str, line: int) -> None:
    assert exc.code == "journal_corrupt"
    assert (exc.run_id, exc.stream, exc.line) == (run_id, memory.STREAM, line)
    assert run_id in str(exc) and memory.STREAM in str(exc) and f"line {line}" in str(exc)


OPERATIONS: dict[str, Callable[[memory.MemoryStore, str], object]] = {
    "sync": lambda store, run: store.sync(),
    "materialize": lambda store, run: store.materialize(),
    "resume's republish": lambda store, run: store.republish_run(store.open_journal(), run),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_crafted_learn_record_fails_as_journal_corrupt_before_any_path_is_built(
    tmp_path: Path, case: str, operation: str
) -> None:
    db, run_id, line = _crafted_run(tmp_path, CRAFTED[case])
    before = snapshot(tmp_path)
    with memory.MemoryStore(db) as store, pytest.raises(journal.JournalCorrupt) as caught:
        OPERATIONS[operation](store, run_id)
    _assert_corrupt(caught.value, run_id, line)
    assert snapshot(tmp_path) == before  # nothing written anywhere, inside the store or out
    assert not Path(f"{ESCAPED}.json").exists()


# An update's commit retires the version it names: with the right key and id, only these are wrong.
CRAFTED_SUPERSEDES: dict[str, dict[str, Any]] = {
    "supersedesScope without supersedes": _payload(supersedesScope="adv"),
    "supersedesScope is not a string": _payload(supersedes="b" * 32, supersedesScope=["adv"]),
    "supersedes climbs out of the folder": _payload(supersedes="../../../../escaped", supersedesScope="adv"),
    "supersedes is its own id": _payload(supersedes=FID, supersedesScope="adv"),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize("case", sorted(CRAFTED_SUPERSEDES))
def test_a_crafted_supersede_in_a_commit_fails_as_journal_corrupt_before_any_path_is_built(
    tmp_path: Path, case: str, operation: str
) -> None:
    db, run_id, line = _crafted_run(tmp_path, CRAFTED_SUPERSEDES[case], key=FID)
    before = snapshot(tmp_path)
    with memory.MemoryStore(db) as store, pytest.raises(journal.JournalCorrupt) as caught:
        OPERATIONS[operation](store, run_id)
    _assert_corrupt(caught.value, run_id, line)
    assert "supersedes" in str(caught.value)
    assert snapshot(tmp_path) == before


def test_repair_never_republishes_a_crafted_record(tmp_path: Path) -> None:
    db, run_id, line = _crafted_run(tmp_path, CRAFTED["id climbs out of the folder"])
    with memory.MemoryStore(db) as store:
        (record,) = [r for r in store.open_journal().read(run_id, memory.STREAM) if r.seq == line]
        with pytest.raises(journal.JournalCorrupt):
            store.republish(record)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_flows_sync_names_the_run_stream_and_line_and_check_reports_the_record(tmp_path: Path) -> None:
    db, run_id, line = _crafted_run(tmp_path, CRAFTED["id climbs out of the folder"])
    before = snapshot(tmp_path)
    synced = flows(db, "sync")
    assert synced.returncode == 1
    assert error_code(synced) == "journal_corrupt"
    assert run_id in synced.stderr and f"line {line}" in synced.stderr and memory.STREAM in synced.stderr
    checked = flows(db, "check", "--json")
    assert checked.returncode == 1, checked.stderr
    report = orjson.loads(checked.stdout)
    corrupt = [p for p in report["problems"] if p["kind"] == "record_corrupt"]
    assert len(corrupt) == 1 and corrupt[0]["repairable"] is False and run_id in corrupt[0]["message"]
    repaired = flows(db, "check", "--repair", "--json")
    assert repaired.returncode == 1
    assert snapshot(tmp_path, skip=db.parent / memory.QUARANTINE_DIR) == before


def test_a_commit_that_raced_ahead_with_a_crafted_payload_is_never_published(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("adv", "adv", {})
        root = memory.RootRun(jr, lease, "adv", "adv")
        # Another writer (or a damaged journal) committed this finding's key with other content.
        jr.append(lease, memory.STREAM, _payload(finding={**FINDING, "text": "what nobody learned"}), key=FID)
        with pytest.raises(journal.JournalCorrupt) as caught:
            store.learn(FINDING, root)
        assert caught.value.run_id == lease.run_id
        assert not (memory.learned_dir(db, "adv") / f"{FID}.json").exists()
        assert store.recall() == []


def test_a_resumed_learn_never_republishes_a_crafted_commit_of_its_key(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("adv", "adv", {})
        root = memory.RootRun(jr, lease, "adv", "adv")
        jr.append(lease, memory.STREAM, _payload(learnedMs="soon"), key=FID)
        final = memory.learned_dir(db, "adv") / f"{FID}.json"
        final.parent.mkdir(parents=True)
        final.write_bytes(b"left by an earlier attempt")  # so learn looks the commit up
        with pytest.raises(journal.JournalCorrupt):
            store.learn(FINDING, root)
        assert final.read_bytes() == b"left by an earlier attempt"


def test_every_finding_learn_writes_passes_the_record_check(tmp_path: Path) -> None:
    store_ = populate(tmp_path / "store" / "history.db", [f"finding {i}" for i in range(5)])
    jr = journal.FileJournal(store_.journal_dir)
    for rec in jr.read(store_.run_id, memory.STREAM):
        assert memory.checked_commit(rec, jr.location) is rec
    line = jr.stream_path(store_.run_id, memory.STREAM).read_bytes().splitlines()[0]
    assert orjson.loads(line[: line.rindex(b',"crc"')] + b"}")["payload"]["id"] in store_.keys


RETIREMENTS: dict[str, dict[str, Any]] = {
    "id climbs out of the folder": {"id": "../../../../escaped", "reason": "r", "by": None},
    "id is an absolute path": {"id": ESCAPED, "reason": "r", "by": None},
    "both a reason and a by": {"id": FID, "reason": "r", "by": "b" * 32},
    "by is not a key": {"id": FID, "reason": None, "by": "../x"},
    "an extra key": {"id": FID, "reason": "r", "by": None, "path": "/etc"},
}


@pytest.mark.parametrize("case", sorted(RETIREMENTS))
def test_a_crafted_retirement_fails_as_journal_corrupt_before_any_path_is_built(
    tmp_path: Path, case: str
) -> None:
    db = tmp_path / "store" / "history.db"
    populate(db, ["a good finding"])
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("adv", "adv", {})
        payload = {"scope": "adv", "flow": "adv", "forgottenMs": 1, **RETIREMENTS[case]}
        rec = jr.append(lease, memory.RETIRE_STREAM, payload, key="a" * 32)
        jr.finish(lease, journal.RunState.FAILED, {"code": "x", "message": "x"})
    before = snapshot(tmp_path)
    for operation in (lambda s: s.sync(), lambda s: s.republish_run(s.open_journal(), lease.run_id)):
        with memory.MemoryStore(db) as store, pytest.raises(journal.JournalCorrupt) as caught:
            operation(store)
        assert (caught.value.run_id, caught.value.stream, caught.value.line) == (
            lease.run_id,
            memory.RETIRE_STREAM,
            rec.seq,
        )
    assert snapshot(tmp_path) == before
    assert not Path(f"{ESCAPED}.json").exists()


def test_a_learned_file_citing_a_record_rewritten_to_a_crafted_shape_fails_as_journal_corrupt(
    tmp_path: Path,
) -> None:
    """Ingesting files (sync without materialize) checks each file against the record it cites;
    that record, crafted in place with a valid checksum, is refused as journal_corrupt, not rendered
    (which would have failed with an uncoded error)."""
    db = tmp_path / "store" / "history.db"
    made = populate(db, ["a finding whose record is rewritten"])
    with memory.MemoryStore(db) as store:
        location = Path(store.open_journal().location)
    log = location / "runs" / made.run_id / "streams" / f"{memory.STREAM}.jsonl"
    codec = journal.RecordCodec(made.run_id, memory.STREAM)
    (line,) = log.read_bytes().splitlines()
    good = codec.decode(line)
    crafted = {k: v for k, v in good.payload.items() if k != "flow"}  # still a mapping; no "flow"
    log.write_bytes(codec.encode(journal.Record(**{**good.__dict__, "payload": crafted})) + b"\n")
    # the crafter sets the durable mark to the new length too (a shorter file is lost lines)
    journal.LineLog(log, codec)._set_watermark(log.stat().st_size)
    with memory.MemoryStore(db) as store, pytest.raises(journal.JournalCorrupt) as caught:
        store.sync(materialize=False)
    _assert_corrupt(caught.value, made.run_id, good.seq)


def test_a_commit_rewritten_after_the_open_restored_its_file_is_checked_again_on_resume(
    tmp_path: Path,
) -> None:
    """The open's walk keeps the commits it checked and published files of, so the resume right after
    need not check them again: a record read then that is not equal to the one kept (the stream was
    rewritten meanwhile, with the same record id and other content) is checked, and refused."""
    import shutil

    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("adv", "adv", {})
        twin = tmp_path / "twin"
        shutil.copytree(jr.root, twin)  # the journal as it was before the commit
        store.learn(FINDING, memory.RootRun(jr, lease, "adv", "adv"))
        jr.finish(lease, journal.RunState.FAILED, {"code": "x", "message": "x"})
        stream = jr.stream_path(lease.run_id, memory.STREAM)
    with journal.FileJournal(twin) as other:  # the same record id, keyed by FID, crafted content
        other.append(
            lease, memory.STREAM, _payload(finding={**FINDING, "text": "what nobody learned"}), key=FID
        )
        crafted = other.stream_path(lease.run_id, memory.STREAM)
    final = memory.learned_dir(db, "adv") / f"{FID}.json"
    good = final.read_bytes()
    final.unlink()
    with memory.MemoryStore(db) as store:  # its open's walk publishes the file again, and keeps the commit
        assert final.read_bytes() == good
        for suffix in ("", ".lock"):
            shutil.copyfile(f"{crafted}{suffix}", f"{stream}{suffix}")
        final.unlink()
        with pytest.raises(journal.JournalCorrupt) as caught:
            store.republish_run(store.open_journal(), lease.run_id)
        _assert_corrupt(caught.value, lease.run_id, 1)
        assert not final.exists()


# A record keyed by a real finding's key but not of a commit's shape: a history of that finding
# reads nothing from it (its time, content and expiry could be anything) and shows the good commit;
# ``flows check`` reports it.
HISTORY_CRAFTED: dict[str, dict[str, Any]] = {
    "no learnedMs": {"id": FID},
    "learnedMs is text": {"id": FID, "learnedMs": "soon"},
    "learnedMs is a list": {"id": FID, "learnedMs": [1]},
    "finding is a list": {"id": FID, "learnedMs": 1, "finding": [1]},
    "finding is text": {"id": FID, "learnedMs": 1, "finding": "x"},
    "learnedMs a float past any date": {"id": FID, "learnedMs": 1e300, "finding": {"expiresMs": 1}},
    "a tombstone's shape with a time past any date": {
        "id": FID, "scope": "adv", "flow": "adv", "learnedMs": 2**63 - 1, "erased": "0" * 16,
    },
}


@pytest.mark.parametrize("payload", HISTORY_CRAFTED.values(), ids=list(HISTORY_CRAFTED))
def test_a_history_reads_nothing_from_a_crafted_record_of_its_key_and_check_reports_it(
    tmp_path: Path, payload: dict[str, Any]
) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("adv", "adv", {})
        assert store.learn(FINDING, memory.RootRun(jr, lease, "adv", "adv")).id == FID
        jr.finish(lease, journal.RunState.DONE)
        _, lease = jr.begin("adv", "adv", {})
        crafted = jr.append(lease, memory.STREAM, payload, key=FID)
        jr.finish(lease, journal.RunState.DONE)
        events = store.history(FID)
    assert [(e.kind, e.key, e.citation.run_id != crafted.run_id) for e in events] == [("learned", FID, True)]
    assert events[0].content is not None and events[0].content["text"] == FINDING["text"]
    shown = flows(db, "history", FID)
    assert shown.returncode == 0, shown.stderr
    assert "the crafted one" in shown.stdout and crafted.id not in shown.stdout
    checked = flows(db, "check", "--json")
    assert checked.returncode == 1, checked.stderr
    corrupt = [p for p in orjson.loads(checked.stdout)["problems"] if p["kind"] == "record_corrupt"]
    assert len(corrupt) == 1 and crafted.run_id in corrupt[0]["message"]
