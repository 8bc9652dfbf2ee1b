"""recall and why over the history DB plus unsynced learned files; damage fails closed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import orjson
import pytest

import memory
import staging
from tests.memory.conftest import Clock, Failpoints

# (text, source, tags) learned in this order, one clock step (1 s) apart.
FINDINGS = [
    ("the cache is cold at dawn", "ops", ["cache"]),
    ("deploys fail on fridays", "ci", ["deploy", "risk"]),
    ("the cache warms within a minute", "ops", ["cache", "latency"]),
    ("rollbacks take ten minutes", "ci", ["deploy"]),
    ("p99 latency doubles under the batch job", "metrics", ["latency", "risk"]),
]


def _learn_all(store: memory.MemoryStore, root: memory.RootRun) -> list[memory.Learned]:
    return [store.learn({"text": t, "source": s, "tags": tags}, root) for t, s, tags in FINDINGS]


def _texts(results: list[memory.Recalled]) -> list[str]:
    return [r.text for r in results]


def _rewrite(path: Path, data: bytes) -> None:
    """Replace a learned file's bytes the way a damaging writer might, through a new name."""
    tmp = path.with_name(".tmp-damage")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# -- merge, ids, order -------------------------------------------------------------


def test_the_next_run_recalls_a_finding_before_any_sync_with_a_negative_stable_id(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    learned = store.learn({"text": "the cache is cold at dawn", "tags": ["cache"]}, root)
    [found] = store.recall()
    assert found.id < 0
    assert not found.synced
    assert (found.key, found.text, found.source, found.tags) == (
        learned.id,
        "the cache is cold at dawn",
        "probe",
        ("cache",),
    )
    assert (found.scope, found.flow, found.learned_ms) == ("scope-a", "probe", learned.learned_ms)
    assert found.citation == learned.citation
    with memory.MemoryStore(db) as fresh:  # another process reading the same folder
        assert fresh.recall() == [found]
    assert store.recall() == [found]
    assert not db.exists()  # reading creates no DB


def test_recall_honours_every_filter_on_unsynced_entries(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    learned = _learn_all(store, root)
    newest_first = [t for t, _, _ in reversed(FINDINGS)]

    assert _texts(store.recall()) == newest_first
    assert _texts(store.recall(source="ops")) == [FINDINGS[2][0], FINDINGS[0][0]]
    assert _texts(store.recall(tag="risk")) == [FINDINGS[4][0], FINDINGS[1][0]]
    assert _texts(store.recall(before_ms=learned[2].learned_ms)) == [FINDINGS[1][0], FINDINGS[0][0]]
    assert _texts(store.recall(limit=2)) == newest_first[:2]
    assert _texts(store.recall(source="ci", tag="deploy", before_ms=learned[3].learned_ms)) == [
        FINDINGS[1][0]
    ]
    assert store.recall(source="nobody") == []
    assert store.recall(tag="cache", limit=0) == []
    assert all(r.id < 0 for r in store.recall(limit=None))


def test_recall_honours_every_filter_on_db_rows_and_files_alike_with_the_limit_after_the_merge(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    learned = _learn_all(store, root)
    store.sync()
    # interleave: re-learning nothing old, learn newer findings that stay on disk
    later = [
        store.learn({"text": "the cache is cold again", "source": "ops", "tags": ["cache"]}, root),
        store.learn({"text": "deploys are safe on mondays", "source": "ci", "tags": ["deploy"]}, root),
    ]
    everything = store.recall(limit=None)
    assert [r.synced for r in everything] == [False, False, True, True, True, True, True]
    assert [r.learned_ms for r in everything] == sorted((r.learned_ms for r in everything), reverse=True)

    assert _texts(store.recall(limit=3)) == [
        "deploys are safe on mondays",
        "the cache is cold again",
        FINDINGS[4][0],
    ]
    assert _texts(store.recall(tag="cache")) == [
        "the cache is cold again",
        FINDINGS[2][0],
        FINDINGS[0][0],
    ]
    assert _texts(store.recall(source="ci", limit=2)) == ["deploys are safe on mondays", FINDINGS[3][0]]
    assert _texts(store.recall(before_ms=later[1].learned_ms, tag="deploy")) == [
        FINDINGS[3][0],
        FINDINGS[1][0],
    ]
    assert _texts(store.recall(before_ms=learned[1].learned_ms)) == [FINDINGS[0][0]]


def test_reads_are_scoped_when_asked_and_cover_every_scope_otherwise(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    jr = root.journal
    _, lease = jr.begin("other", "scope-b", {})
    other = memory.RootRun(jr, lease, "other", "scope-b")
    store.learn({"text": "alpha in scope a", "tags": ["x"]}, root)
    store.learn({"text": "beta in scope b", "tags": ["x"]}, other)
    store.sync()
    store.learn({"text": "gamma in scope b", "tags": ["x"]}, other)

    assert _texts(store.recall(scope="scope-a")) == ["alpha in scope a"]
    assert _texts(store.recall(scope="scope-b")) == ["gamma in scope b", "beta in scope b"]
    assert _texts(store.recall(tag="x")) == ["gamma in scope b", "beta in scope b", "alpha in scope a"]
    assert [e.finding.text for e in store.why("gamma beta alpha", scope="scope-b")] == [
        "gamma in scope b",
        "beta in scope b",
    ]


# -- dedupe after sync ------------------------------------------------------------------


def test_after_a_sync_the_db_rows_are_returned_and_the_disk_copies_are_gone(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    learned = _learn_all(store, root)
    before = store.recall(limit=None)
    report = store.sync()
    assert (report.ingested, report.dropped) == (5, 5)
    after = store.recall(limit=None)
    assert [r.id > 0 for r in after] == [True] * 5
    assert [(r.key, r.citation, r.learned_ms) for r in after] == [
        (r.key, r.citation, r.learned_ms) for r in before
    ]
    assert not any(p.exists() for p in (x.path for x in learned))


def test_a_row_read_before_and_committed_again_since_is_returned_as_the_db_now_holds_it(
    store: memory.MemoryStore, root: memory.RootRun, db: Path, clock: Clock
) -> None:
    """A warm read builds each row once and then reads only its stamp (time and citation): a row
    another process committed again since (the same finding learned in a later run, synced) is
    read in full again, not answered from what this process built."""
    store.learn({"text": "the cache is cold at dawn", "tags": ["cache"]}, root)
    store.sync()
    [before] = store.recall(tag="cache")
    with memory.MemoryStore(db, clock=clock) as other:
        jr = other.open_journal()
        _, lease = jr.begin("probe", "scope-a", {"source": "probe.py"})
        later = memory.RootRun(jr, lease, "probe", "scope-a")
        again = other.learn({"text": "the cache is cold at dawn", "tags": ["cache"]}, later)
        other.sync()
    [after] = store.recall(tag="cache")
    assert after.key == before.key
    assert (after.citation, after.learned_ms) == (again.citation, again.learned_ms)
    assert after.citation != before.citation


def test_a_warm_read_answered_before_sees_a_commit_another_process_made_since(
    store: memory.MemoryStore, root: memory.RootRun, db: Path, clock: Clock
) -> None:
    """A warm read the DB answered before, at the same DB version, is given that answer again
    without its statement; a commit of another process since (a sync of a newer finding) moves the
    version, and the read sees the new row."""
    store.learn({"text": "the cache is cold at dawn", "tags": ["cache"]}, root)
    store.sync()
    for _ in range(3):  # built, then answered from its stamps, then remembered by version
        assert _texts(store.recall(tag="cache")) == ["the cache is cold at dawn"]
    with memory.MemoryStore(db, clock=clock) as other:
        jr = other.open_journal()
        _, lease = jr.begin("probe", "scope-a", {"source": "probe.py"})
        other.learn(
            {"text": "the cache warms by noon", "tags": ["cache"]},
            memory.RootRun(jr, lease, "probe", "scope-a"),
        )
        other.sync()
    assert _texts(store.recall(tag="cache")) == ["the cache warms by noon", "the cache is cold at dawn"]


def test_a_warm_read_answered_before_leaves_out_a_row_that_expired_since_and_not_after_the_clock_went_back(
    store: memory.MemoryStore, root: memory.RootRun, clock: Clock
) -> None:
    """The DB unchanged, a read's remembered answer holds only until one of its rows expires, and
    only forward in time: a row that expired since is left out, and a clock set back before a
    row's expiry shows that row again, as the statement would."""
    expires = clock.now + 60_000
    store.learn({"text": "the cache is cold at dawn", "tags": ["cache"]}, root)
    store.learn({"text": "the cache warms by noon", "tags": ["cache"], "expiresMs": expires}, root)
    store.sync()
    clock.step = 0
    both = ["the cache warms by noon", "the cache is cold at dawn"]
    for _ in range(3):  # built, then answered from its stamps, then remembered by version
        assert _texts(store.recall(tag="cache")) == both
    clock.now = expires  # expired: ``expiresMs`` is the first moment it is not returned
    for _ in range(3):
        assert _texts(store.recall(tag="cache")) == ["the cache is cold at dawn"]
    clock.now = expires - 1
    assert _texts(store.recall(tag="cache")) == both


def test_a_finding_the_db_holds_is_read_once_from_the_db_while_its_disk_copy_remains(
    store: memory.MemoryStore, root: memory.RootRun, failpoints: Failpoints
) -> None:
    learned = _learn_all(store, root)
    failpoints.set("memory.sync_after_upsert=EIO")  # the sync dies after its commit, before the drops
    with pytest.raises(OSError, match="failpoint"):
        store.sync()
    failpoints.set("")
    assert all(x.path.exists() for x in learned)
    assert store.db.count() == 5

    recalled = store.recall(limit=None)
    assert len(recalled) == 5
    assert all(r.synced for r in recalled)
    assert sorted(r.key for r in recalled) == sorted(x.id for x in learned)
    assert all(r.synced for r in store.recall(tag="cache"))
    answers = store.why("cache latency deploy risk dawn fridays minutes")
    assert len(answers) == 5
    assert all(a.finding.synced for a in answers)

    store.sync()  # finishing the job drops the copies
    assert not any(x.path.exists() for x in learned)
    assert len(store.recall(limit=None)) == 5


# -- why --------------------------------------------------------------------------------


def test_why_answers_best_match_first_with_provenance(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    learned = _learn_all(store, root)
    answers = store.why("why is the cache cold?")
    assert [a.finding.text for a in answers] == [FINDINGS[0][0], FINDINGS[2][0]]
    best = answers[0]
    assert best.matched == ("cache", "cold")
    assert best.score > answers[1].score
    assert best.finding.citation == learned[0].citation
    assert (best.finding.flow, best.finding.learned_ms) == ("probe", learned[0].learned_ms)
    assert store.why("the and of") == []
    assert store.why("nothing matches this") == []


def test_why_merges_the_db_and_unsynced_files(store: memory.MemoryStore, root: memory.RootRun) -> None:
    _learn_all(store, root)
    store.sync()
    newer = store.learn({"text": "latency spikes at noon", "source": "metrics", "tags": ["latency"]}, root)
    answers = store.why("latency", limit=10)
    assert {a.finding.text for a in answers} == {
        "latency spikes at noon",
        FINDINGS[2][0],
        FINDINGS[4][0],
    }
    disk = [a for a in answers if not a.finding.synced]
    assert [a.finding.key for a in disk] == [newer.id]
    assert len(store.why("latency", limit=1)) == 1


def test_why_matches_the_source_as_well_as_text_and_tags(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    _learn_all(store, root)
    assert {a.finding.text for a in store.why("metrics")} == {FINDINGS[4][0]}
    store.sync()
    assert {a.finding.text for a in store.why("metrics")} == {FINDINGS[4][0]}


# -- damage fails closed ----------------------------------------------------------------


def _damages(good: bytes, path: Path) -> dict[str, bytes]:
    obj = orjson.loads(good)
    other_id = {**obj, "id": "0" * 32}
    renamed_scope = {**obj, "scope": "scope-b"}
    return {
        "not JSON": b'{"id": "trunc',
        "empty": b"",
        "a JSON array": b"[1, 2, 3]\n",
        "a field missing": orjson.dumps({k: v for k, v in obj.items() if k != "journal"}),
        "an extra field": orjson.dumps({**obj, "note": "hand-edited"}),
        "tags not a list": orjson.dumps({**obj, "tags": "cache"}),
        "a citation of the wrong shape": orjson.dumps({**obj, "journal": {"runId": "r"}}),
        "text edited after commit": orjson.dumps({**obj, "text": "the cache is hot at dawn"}),
        "an id that is not its name": orjson.dumps(other_id),
        "a scope that is not its folder": orjson.dumps(renamed_scope),
    }


@pytest.mark.parametrize(
    "shape",
    [
        "not JSON",
        "empty",
        "a JSON array",
        "a field missing",
        "an extra field",
        "tags not a list",
        "a citation of the wrong shape",
        "text edited after commit",
        "an id that is not its name",
        "a scope that is not its folder",
    ],
)
def test_a_damaged_learned_file_fails_every_read_naming_the_file(
    store: memory.MemoryStore, root: memory.RootRun, db: Path, shape: str
) -> None:
    store.learn({"text": "healthy neighbour", "tags": ["cache"]}, root)
    learned = store.learn({"text": "the cache is cold at dawn", "tags": ["cache"]}, root)
    _rewrite(learned.path, _damages(learned.path.read_bytes(), learned.path)[shape])

    with memory.MemoryStore(db) as fresh:
        for read in (
            lambda s: s.recall(),
            lambda s: s.recall(tag="cache", limit=1),
            lambda s: s.recall(source="nobody"),
            lambda s: s.why("cache"),
            lambda s: s.sync(materialize=False),
        ):
            for s in (store, fresh):
                with pytest.raises(memory.Unreachable) as caught:
                    read(s)
                assert caught.value.code == "memory_unreachable"
                assert caught.value.path == learned.path
                assert str(learned.path) in caught.value.message
    assert fresh.db.count() == 0  # the failed sync ingested nothing


def test_a_damaged_file_appearing_after_a_cached_listing_still_fails_the_read(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    learned = store.learn({"text": "the cache is cold at dawn", "tags": ["cache"]}, root)
    directory = learned.path.parent
    past = learned.path.stat().st_mtime_ns - 10_000_000_000
    os.utime(directory, ns=(past, past))  # an old directory: its listing may be cached
    assert len(store.recall()) == 1
    assert len(store.recall()) == 1

    bad = directory / f"{'f' * 32}.json"
    bad.write_bytes(b"not json")
    with pytest.raises(memory.Unreachable) as caught:
        store.recall()
    assert caught.value.path == bad
    bad.unlink()
    assert len(store.recall()) == 1


def test_the_cached_listing_sees_files_published_and_removed_after_it(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    learned = store.learn({"text": "first finding"}, root)
    directory = learned.path.parent
    past = learned.path.stat().st_mtime_ns - 10_000_000_000
    os.utime(directory, ns=(past, past))
    assert _texts(store.recall()) == ["first finding"]

    store.learn({"text": "second finding"}, root)
    assert _texts(store.recall()) == ["second finding", "first finding"]
    os.utime(directory, ns=(past + 1_000_000_000, past + 1_000_000_000))  # old again: cacheable
    assert _texts(store.recall()) == ["second finding", "first finding"]
    learned.path.unlink()
    assert _texts(store.recall()) == ["second finding"]


def test_stage_files_are_never_listed_even_when_they_hold_garbage(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    learned = store.learn({"text": "the cache is cold at dawn"}, root)
    staging.stage(learned.path.parent, b"half a fin", hint=f"{'a' * 32}.json")
    staging.stage(learned.path.parent, learned.path.read_bytes(), hint=learned.path.name)
    assert _texts(store.recall()) == ["the cache is cold at dawn"]
    assert len(store.why("cache")) == 1
    assert store.sync(materialize=False).ingested == 1


# -- async -------------------------------------------------------------------------------------


def test_async_reads_return_what_the_sync_reads_return(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    _learn_all(store, root)

    async def main() -> tuple[list[memory.Recalled], list[memory.Explained], memory.SyncReport]:
        recalled = await store.arecall(tag="cache", limit=5)
        explained = await store.awhy("cache", limit=5)
        return recalled, explained, await store.async_sync()

    recalled, explained, report = asyncio.run(main())
    assert _texts(recalled) == [FINDINGS[2][0], FINDINGS[0][0]]
    assert [e.finding.key for e in explained] == [r.key for r in recalled]
    assert report.ingested == 5


def test_results_are_frozen(store: memory.MemoryStore, root: memory.RootRun) -> None:
    store.learn({"text": "the cache is cold at dawn"}, root)
    [found] = store.recall()
    with pytest.raises(AttributeError):
        found.text = "changed"  # type: ignore[misc]


def test_the_public_api_takes_typed_keyword_arguments_not_a_catch_all() -> None:
    """Every public method of the store and of a session names its arguments: a misspelt filter
    (``tgas=``) is a TypeError at the call, not a filter silently ignored or a late failure."""
    import inspect

    for cls in (memory.MemoryStore, memory.MemorySession):
        for name, method in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_"):
                continue
            kinds = {p.kind for p in inspect.signature(method).parameters.values()}
            assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{cls.__name__}.{name} takes **kwargs"
    for name in ("arecall", "awhy"):
        params = inspect.signature(getattr(memory.MemoryStore, name)).parameters
        assert {"tags", "meta", "scope", "limit"} <= set(params), name


def test_a_first_bounded_read_reads_its_rows_with_one_statement_and_later_ones_by_their_stamps(
    db: Path, store: memory.MemoryStore, root: memory.RootRun
) -> None:
    """Inside a read's snapshot a bounded recall selects the rows' stamps, and reads in full only
    the rows not built before; a process's first read has built none, so it reads the rows whole
    with one statement (not the stamps, then every row again). The answers are the same."""
    _learn_all(store, root)
    store.sync()
    statements: list[str] = []
    with memory.MemoryStore(db) as fresh:
        conn = fresh.db._reader()
        assert conn is not None
        conn.set_trace_callback(statements.append)
        first = fresh.recall(tag="cache", limit=10)
        selects = [s for s in statements if s.startswith("SELECT") and "finding_tags" in s]
        assert len(selects) == 1 and "f.text" in selects[0]
        assert not any(" IN (" in s for s in statements)
        statements.clear()
        assert fresh.recall(tag="cache", limit=10) == first
        selects = [s for s in statements if s.startswith("SELECT") and "finding_tags" in s]
        assert len(selects) == 1 and "f.text" not in selects[0]  # the stamps: every row was built
    assert _texts(first) == ["the cache warms within a minute", "the cache is cold at dawn"]
    assert first == store.recall(tag="cache", limit=10)
