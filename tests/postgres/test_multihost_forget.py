"""Two hosts (separate ``<db-dir>``s) sharing one PostgreSQL journal: a forget, or a forget by
filter, acknowledged on one host is honoured by the very next read and learn on the other, whether
the finding was synced there or not; retired stays retired on every path (sync, materialize,
``check --repair``); a supersede racing a forget never brings the finding back."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

import memory
from tests._helpers.hosts import two_hosts


@pytest.mark.parametrize("synced_on_a", [False, True], ids=["unsynced", "synced"])
def test_a_forget_on_b_is_honoured_by_the_next_read_and_learn_on_a(
    tmp_path: Path, postgres_dsn: str, synced_on_a: bool
) -> None:
    a, b = two_hosts(tmp_path, postgres_dsn)
    with a.session(scope="team") as s:
        key = s.learn({"text": "the door code is 4711", "tags": ["secret"]}).key
        other = s.learn({"text": "lunch is at noon"}).key
    if synced_on_a:
        a.sync()
    b.materialize()
    assert {e.key for e in a.recall(scope="team")} == {key, other}
    assert [x.key for x in a.why("door code")] == [key]
    with b.session(scope="team") as s:
        s.forget(key, reason="rotated")
    # the very next read on A, with nothing synced or materialized there since
    assert {e.key for e in a.recall(scope="team")} == {other}
    assert a.why("door code") == [] and a.get(key) is None and a.current(key) is None
    # learning it again on A is a new memory under the next revision, never the old key back
    with a.session(scope="team") as s:
        again = s.learn({"text": "the door code is 4711", "tags": ["secret"]})
        assert again.key != key
        forgotten = s.forget(key, reason="twice")  # A sees B's forget as the first one
    assert forgotten.reason == "rotated"
    kinds = [(e.kind, e.key) for e in a.history(key)]
    assert kinds == [("learned", key), ("forgotten", key)]
    for store in (a, b):
        store.sync()
        assert {e.key for e in store.recall(scope="team")} == {other, again.key}
        assert memory.check_store(store) == []


def test_a_forget_by_filter_on_b_reaches_a(tmp_path: Path, postgres_dsn: str) -> None:
    a, b = two_hosts(tmp_path, postgres_dsn)
    with a.session(scope="users") as s:
        keys = [s.learn({"text": f"carol fact {i}", "metadata": {"user": "carol"}}).key for i in range(4)]
        dave = s.learn({"text": "dave fact", "metadata": {"user": "dave"}}).key
    a.sync()
    b.materialize()
    b.sync()
    with b.session(scope="users") as s:
        done = s.forget_where(reason="carol asked", meta={"user": "carol"})
    assert sorted(done.keys) == sorted(keys)
    assert [e.key for e in a.recall(scope="users")] == [dave]
    a.sync()
    assert [e.key for e in a.recall(scope="users")] == [dave]


def test_a_supersede_of_a_finding_forgotten_elsewhere_is_refused(tmp_path: Path, postgres_dsn: str) -> None:
    a, b = two_hosts(tmp_path, postgres_dsn)
    with a.session(scope="docs") as s:
        key = s.learn({"text": "draft one"}).key
    b.materialize()
    with b.session(scope="docs") as s:
        s.forget(key, reason="deleted")
    with a.session(scope="docs") as s, pytest.raises(memory.FindingRetired, match="retired before"):
        s.learn({"text": "draft two"}, supersedes=key)
    assert a.recall(scope="docs") == []
    with a.session(scope="docs") as s, pytest.raises(memory.FindingUnknown):
        s.update(key, {"text": "draft three"})


def test_an_erase_on_b_leaves_nothing_on_a_after_its_next_sync(tmp_path: Path, postgres_dsn: str) -> None:
    a, b = two_hosts(tmp_path, postgres_dsn)
    mark = "ZQXHOSTERASE"
    with a.session(scope="users") as s:
        key = s.learn({"text": f"erin's address {mark}", "tags": ["addr"]}).key
        s.learn({"text": "erin likes jazz"})
    a.sync()
    assert [x.key for x in a.why("address")] == [key]
    b.materialize()
    with b.session(scope="privacy") as s:
        s.erase(key, reason="erin asked")
    assert a.get(key) is None and a.why("address") == []  # the very next read on A
    a.sync()
    held = [p for p in (tmp_path / "a").rglob("*") if p.is_file() and mark.encode() in p.read_bytes()]
    assert held == [] and [e.text for e in a.recall(scope="users")] == ["erin likes jazz"]
    import psycopg

    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute(
            "select count(*) from journal_records where payload like %s", (f"%{mark}%",)
        ).fetchone()
    assert rows == (0,)
    assert memory.check_store(a) == [] and memory.check_store(b) == []


def test_an_erase_on_a_reaches_a_commit_another_host_made_after_a_built_its_key_index(
    tmp_path: Path, postgres_dsn: str
) -> None:
    # A's key index of the shared journal is brought up to date by each host's newest record per
    # stream: a commit of the same finding that B made after A built the index is found and erased
    a, b = two_hosts(tmp_path, postgres_dsn)
    mark = "ZQXLATERHOST"
    finding = {"text": f"frank's phone {mark}", "source": "crm"}
    with a.session(scope="users", flow="first") as s:
        key = s.learn(finding).key
    with b.session(scope="users", flow="later") as s:
        s.learn({"text": "something else"})
        assert a.index_journal()  # B's run is indexed, without the finding
        assert s.learn(finding).key == key  # a second commit of it, in that run, after
    with a.session(scope="privacy") as s:
        erased = s.erase(key, reason="frank asked")
    assert erased.rewritten == 2
    import psycopg

    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute(
            "select count(*) from journal_records where payload like %s", (f"%{mark}%",)
        ).fetchone()
    assert rows == (0,)
    b.sync()
    held = [p for p in tmp_path.rglob("*") if p.is_file() and mark.encode() in p.read_bytes()]
    assert held == []


def test_a_forget_by_filter_on_b_reaches_what_a_learned_and_b_never_synced(
    tmp_path: Path, postgres_dsn: str
) -> None:
    a, b = two_hosts(tmp_path, postgres_dsn)
    with a.session(scope="users") as s:
        carol = [s.learn({"text": f"carol fact {i}", "metadata": {"user": "carol"}}).key for i in range(3)]
        dave = s.learn({"text": "dave fact", "metadata": {"user": "dave"}}).key
    with b.session(scope="users") as s:
        planned = s.forget_where(reason="carol asked", meta={"user": "carol"}, dry_run=True)
        assert sorted(planned.keys) == sorted(carol)
        done = s.forget_where(reason="carol asked", meta={"user": "carol"})
    assert sorted(done.keys) == sorted(carol)
    for store in (a, b):
        assert [e.key for e in store.recall(scope="users")] == [dave]
        store.sync()
        assert [e.key for e in store.recall(scope="users")] == [dave]
        assert memory.check_store(store) == []


def test_an_erase_on_b_leaves_nothing_on_a_after_a_sync_that_materializes_nothing(
    tmp_path: Path, postgres_dsn: str
) -> None:
    # the LangGraph store syncs with materialize=False after its writes: that sync too removes the
    # copies (DB rows, files, stages) of what another host erased, once, as the erase records come
    a, b = two_hosts(tmp_path, postgres_dsn)
    marks = ["ZQXQUIETERASE1", "ZQXQUIETERASE2"]
    with a.session(scope="users") as s:
        keys = [s.learn({"text": f"frank's address {m}", "tags": ["addr"]}).key for m in marks]
        s.learn({"text": "frank likes chess"})
    a.sync(materialize=False)
    b.materialize()

    def held(mark: str) -> list[Path]:
        return [p for p in (tmp_path / "a").rglob("*") if p.is_file() and mark.encode() in p.read_bytes()]

    for key, mark in zip(keys, marks, strict=True):
        assert held(mark)
        with b.session(scope="privacy") as s:
            s.erase(key, reason="frank asked")
        a.sync(materialize=False)
        assert held(mark) == []
        assert a.get(key) is None
    assert [e.text for e in a.recall(scope="users")] == ["frank likes chess"]
    a.sync()  # a whole sync publishes B's retirements here too; then nothing is left to report
    assert memory.check_store(a) == []


def _carol_and_dave(a: memory.MemoryStore, b: memory.MemoryStore) -> tuple[memory.Learned, str]:
    """Host A learns a memory of carol's and one of dave's (his key returned); B catches up."""
    with a.session(scope="users") as s:
        carol = s.learn({"text": "carol likes tea", "metadata": {"user": "carol"}})
        dave = s.learn({"text": "dave likes coffee", "metadata": {"user": "dave"}}).key
    b.catch_up()
    return carol, dave


def test_a_forget_by_filter_takes_the_version_another_host_wrote_after_its_first_look(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """B's forget by filter catches up, and host A updates a matching memory before B holds the
    scopes' turn: the look B takes in the turn catches up as well, so it forgets A's new version
    (committed before B's forget, and matching it) rather than leaving it live behind the version
    A's update retired."""
    a, b = two_hosts(tmp_path, postgres_dsn)
    carol, dave = _carol_and_dave(a, b)
    turn = b._every_scope_turn
    newer: list[str] = []

    def update_on_a_first() -> Any:
        if not newer:  # between B's first catch-up and its turn
            with a.session(scope="users") as s:
                again = {"text": "carol likes green tea", "metadata": {"user": "carol"}}
                newer.append(s.update(carol.memory_id, again).key)
        return turn()

    b._every_scope_turn = update_on_a_first  # type: ignore[method-assign]
    with b.session(scope="users") as s:
        done = s.forget_where(reason="carol asked", scope="users", meta={"user": "carol"})
    assert done.keys == tuple(newer)
    for store in (a, b):
        assert [e.key for e in store.recall(scope="users")] == [dave]
        store.sync()
        assert [e.key for e in store.recall(scope="users")] == [dave]
        assert store.current(carol.memory_id) is None
        assert memory.check_store(store) == []
    a.close()
    b.close()


@pytest.mark.parametrize("scoped", [False, True], ids=["any-scope", "one-scope"])
def test_a_forget_by_filter_whose_first_look_falls_inside_an_update_on_another_host_forgets_its_version(
    tmp_path: Path, postgres_dsn: str, scoped: bool
) -> None:
    """B's forget by filter catches up, and host A's update of the one matching memory commits
    before B reads: B's read learns from the journal that the version it holds is retired, and has
    not caught up with the version that replaced it. Before, B's look saw neither, found nothing
    to forget and returned, and A's new version stayed live on every host; now the forget looks in
    the turn every update takes, and forgets the new version."""
    a, b = two_hosts(tmp_path, postgres_dsn)
    carol, dave = _carol_and_dave(a, b)
    catch_up = b.catch_up
    newer: list[str] = []

    def update_on_a_after_the_catch_up() -> int:
        made = catch_up()
        if not newer:  # between B's first catch-up and its read
            with a.session(scope="users") as s:
                again = {"text": "carol likes green tea", "metadata": {"user": "carol"}}
                newer.append(s.update(carol.memory_id, again).key)
        return made

    b.catch_up = update_on_a_after_the_catch_up  # type: ignore[method-assign]
    with b.session(scope="users") as s:
        done = s.forget_where(reason="carol asked", meta={"user": "carol"}, scope="users" if scoped else None)
    assert newer and done.keys == tuple(newer)
    for store in (a, b):
        assert [e.key for e in store.recall(scope="users")] == [dave]
        store.sync()
        assert [e.key for e in store.recall(scope="users")] == [dave]
        assert store.current(carol.memory_id) is None
        assert memory.check_store(store) == []
    a.close()
    b.close()


def test_an_update_on_another_host_waits_for_a_forget_by_filter_and_then_finds_the_memory_forgotten(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """While B's forget by filter holds every scope's turn (between its look and its record), A's
    update of a matching memory waits for it (the server's lock table shows it waiting), and then
    finds no live version to replace: the forget's look is never outdated by an update."""
    a, b = two_hosts(tmp_path, postgres_dsn)
    with a.session(scope="users") as s:
        carol = s.learn({"text": "carol likes tea", "metadata": {"user": "carol"}})
    b.catch_up()
    outcome: list[object] = []

    def update_on_a() -> None:
        try:
            with a.session(scope="users") as s:
                outcome.append(s.update(carol.memory_id, {"text": "carol likes green tea"}))
        except memory.FlowsMemoryError as exc:
            outcome.append(exc)

    racer = threading.Thread(target=update_on_a, daemon=True)
    matches = b._forget_matches

    def start_the_update_first(*args: Any) -> Any:
        racer.start()
        while racer.is_alive() and not _waiting_for_every_scope(postgres_dsn):
            threading.Event().wait(0.01)
        assert racer.is_alive(), f"A's update did not wait for the forget's turn: {outcome}"
        return matches(*args)

    b._forget_matches = start_the_update_first  # type: ignore[method-assign]
    with b.session(scope="users") as s:
        done = s.forget_where(reason="carol asked", meta={"user": "carol"})
    racer.join(60)
    assert done.keys == (carol.key,)
    assert len(outcome) == 1 and isinstance(outcome[0], memory.FindingUnknown)
    for store in (a, b):
        assert store.current(carol.memory_id) is None and store.recall(scope="users") == []
    a.close()
    b.close()


def _waiting_for_every_scope(dsn: str) -> bool:
    """Whether a session waits on the server for a scope's turn or the turn of every scope."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select count(*) from pg_locks where locktype = 'advisory' and not granted"
            " and objsubid = 2 and classid = 1953854062"  # 'turn': the journal's turns
            " and objid::bigint = hashtext(current_schema() || ':memory-scopes')::bigint & 4294967295"
        ).fetchone()
    return bool(row and row[0])
