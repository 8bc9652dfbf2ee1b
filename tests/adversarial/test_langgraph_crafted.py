"""Crafted LangGraph records: bytes read back from a journal never choose code.

A record of the saver's exact shape can carry msgpack whose extension names any module and
callable; LangGraph's default serializer imports and calls what it is told. The saver checks every
extension against an allow-list first, so a crafted value is ``langgraph_record_invalid`` naming
the run, stream and record, for every reader (``get_tuple``, ``list``, ``list`` with a filter,
``copy_thread``, ``prune``), and nothing is imported or called: no marker file appears and no new
module is loaded. The store's items and the catalog are JSON; crafted ones are skipped (items) or
refused with the same code (catalog registrations), never a bare ``KeyError`` or ``TypeError``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import enum
import pickle
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, TypedDict

import ormsgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph

import journal
from flows.langgraph import ConfigInvalid, JournalSaver, JournalStore, RecordInvalid, ValueUnserializable
from flows.langgraph._catalog import THREADS_STREAM
from flows.langgraph._records import STREAM
from flows.langgraph._serde import Refused, StrictDecoder
from tests.langgraph.helpers import catalog_runs, config, put_chain, thread_runs

MODULE = "flows_crafted_marker_module"
"""A module on sys.path whose import creates a marker file: importing it at all is the failure."""


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The marker file a crafted value would create; a module that creates it on import is on
    sys.path. Fails the test if the module got imported."""
    path = tmp_path / "MARKER"
    pkg = tmp_path / "mods"
    pkg.mkdir()
    (pkg / f"{MODULE}.py").write_text(
        f"open({str(path)!r}, 'w').close()\ndef touch(*a, **k):\n    open({str(path)!r}, 'w').close()\n"
    )
    monkeypatch.syspath_prepend(str(pkg))
    yield path
    assert MODULE not in sys.modules
    assert not path.exists()


def _ext(code: int, *parts: Any) -> bytes:
    return ormsgpack.packb(ormsgpack.Ext(code, ormsgpack.packb(list(parts))))


def _payloads(marker: Path) -> dict[str, tuple[str, bytes]]:
    touch = f"touch {marker}"
    code = f"open({str(marker)!r}, 'w').close()"
    nested = {"x": ormsgpack.Ext(0, ormsgpack.packb(["os", "system", touch]))}
    return {
        "os.system": ("msgpack", _ext(0, "os", "system", touch)),
        "builtins.eval": ("msgpack", _ext(1, "builtins", "eval", [code])),
        "builtins.exec as a method": ("msgpack", _ext(3, "builtins", "exec", code, "__call__")),
        "subprocess.run": ("msgpack", _ext(2, "subprocess", "run", {"args": ["touch", str(marker)]})),
        "pydantic v2 shape": ("msgpack", _ext(5, "subprocess", "Popen", {"args": ["touch", str(marker)]})),
        "pydantic v1 shape": ("msgpack", _ext(4, "os", "system", {"command": touch})),
        "an unimported module": ("msgpack", _ext(0, MODULE, "touch", "x")),
        "nested in a dict": ("msgpack", ormsgpack.packb(nested)),
        "inside an allowed type": ("msgpack", _ext(1, "builtins", "set", [[_ext_obj(MODULE)]])),
        "an unknown extension": ("msgpack", ormsgpack.packb(ormsgpack.Ext(42, b"\x90"))),
        "pickle": ("pickle", pickle.dumps(_Touch(str(marker)))),
        "json constructor": (
            "json",
            b'{"lc": 2, "type": "constructor", "id": ["' + MODULE.encode() + b'", "touch"], "args": []}',
        ),
    }


def _ext_obj(module: str) -> ormsgpack.Ext:
    return ormsgpack.Ext(0, ormsgpack.packb([module, "touch", "x"]))


class _Touch:
    """Pickles to a call of ``os.system`` (what a crafted pickle does)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, (f"touch {self.path}",))


def _packed(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode()]


def _good(value: Any) -> list[str]:
    return _packed(JsonPlusSerializer().dumps_typed(value))


def _crafted_records(slot: str, evil: tuple[str, bytes], last_id: str) -> list[dict[str, Any]]:
    """Records of the saver's exact shape with ``evil`` in one value slot, newest in the thread."""
    cp = empty_checkpoint()
    cp["id"] = "ffffffff-ffff-6fff-bfff-ffffffffffff"  # sorts after every real id: the latest
    cp["channel_versions"] = {"x": "v-crafted"}
    body = {k: v for k, v in cp.items() if k != "channel_values"}
    record: dict[str, Any] = {
        "kind": "checkpoint",
        "ns": "",
        "id": cp["id"],
        "parent": last_id,
        "checkpoint": _packed(evil) if slot == "checkpoint" else _good(body),
        "metadata": _packed(evil) if slot == "metadata" else _good({"source": "loop", "step": 9}),
        "runId": None,
        "blobs": [["x", "v-crafted", *(_packed(evil) if slot == "channel" else _good(1))]],
    }
    out = [record]
    if slot == "write":
        out.append(
            {
                "kind": "writes",
                "ns": "",
                "checkpoint": cp["id"],
                "task": "t",
                "path": "",
                "writes": [[0, "x", *_packed(evil)]],
            }
        )
    return out


def _append(location: str, run_id: str, stream: str, payloads: list[dict[str, Any]]) -> None:
    backend = journal.open_journal(location)
    try:
        lease = backend.acquire(run_id)
        for payload in payloads:
            backend.append(lease, stream, payload)
        backend.release(lease)
    finally:
        backend.close()


READERS: dict[str, Callable[[JournalSaver], Any]] = {
    "get_tuple": lambda s: s.get_tuple(config("t")),
    "list": lambda s: list(s.list(config("t"))),
    "list of every thread with a filter": lambda s: list(s.list(None, filter={"step": 9})),
    "copy_thread": lambda s: s.copy_thread("t", "copy"),
    "prune": lambda s: s.prune(["t"]),
}
SLOTS = ("checkpoint", "metadata", "channel", "write")


@pytest.mark.parametrize("slot", SLOTS)
@pytest.mark.parametrize("kind", sorted(_payloads(Path("/x"))))
def test_a_crafted_checkpoint_value_is_refused_by_get_tuple_and_runs_nothing(
    journal_location: str, marker: Path, slot: str, kind: str
) -> None:
    with JournalSaver(journal=journal_location) as saver:
        ids = put_chain(saver, "t", [{"x": 1}])
        run_id = thread_runs(saver.backend)[0].run_id
        saver.get_tuple(config("t"))  # whatever a read imports of its own, imported now
    _append(journal_location, run_id, STREAM, _crafted_records(slot, _payloads(marker)[kind], ids[-1]))
    modules = set(sys.modules)

    with JournalSaver(journal=journal_location) as fresh, pytest.raises(RecordInvalid) as caught:
        fresh.get_tuple(config("t"))

    assert caught.value.code == "langgraph_record_invalid"
    assert (caught.value.run_id, caught.value.stream) == (run_id, STREAM)
    assert caught.value.seq == (3 if slot == "write" else 2)
    assert not marker.exists()
    assert set(sys.modules) - modules == set()


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("kind", ["os.system", "an unimported module", "pickle"])
def test_every_reader_of_checkpoints_refuses_a_crafted_value_and_runs_nothing(
    journal_location: str, marker: Path, reader: str, kind: str
) -> None:
    with JournalSaver(journal=journal_location) as saver:
        ids = put_chain(saver, "t", [{"x": 1}, {"x": 2}])
        run_id = thread_runs(saver.backend)[0].run_id
    # the checkpoint is what every reader decodes (copy and prune carry the other values as bytes)
    _append(
        journal_location, run_id, STREAM, _crafted_records("checkpoint", _payloads(marker)[kind], ids[-1])
    )

    with JournalSaver(journal=journal_location) as fresh, pytest.raises(RecordInvalid) as caught:
        READERS[reader](fresh)

    assert (caught.value.run_id, caught.value.stream, caught.value.seq) == (run_id, STREAM, 3)
    assert not marker.exists()


def test_the_allowed_types_still_round_trip(journal_location: str) -> None:
    import datetime
    import uuid

    from langchain_core.messages import AIMessage, HumanMessage

    value = {
        "when": datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC),
        "id": uuid.UUID(int=7),
        "tags": {"a", "b"},
        "messages": [HumanMessage("hi"), AIMessage("hello")],
    }
    with JournalSaver(journal=journal_location) as saver:
        put_chain(saver, "t", [{"x": value}])
    with JournalSaver(journal=journal_location) as fresh:
        tup = fresh.get_tuple(config("t"))
    assert tup is not None and tup.checkpoint["channel_values"]["x"] == value


class Custom:
    """A type of the user's own, allowed by name."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Custom) and other.n == self.n

    def __hash__(self) -> int:
        return self.n


def test_a_type_of_your_own_needs_allowed_types(journal_location: str) -> None:
    serde = JsonPlusSerializer()
    typed = ("msgpack", ormsgpack.packb(ormsgpack.Ext(2, ormsgpack.packb([__name__, "Custom", {"n": 3}]))))
    assert serde.loads_typed(typed) == Custom(3)  # LangGraph's permissive default would build it
    with pytest.raises(Refused, match="Custom"):
        StrictDecoder().loads(typed)
    assert StrictDecoder([Custom]).loads(typed) == Custom(3)
    assert StrictDecoder([(__name__, "Custom")]).loads(typed) == Custom(3)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    code=st.integers(0, 127),
    module=st.sampled_from(["os", "subprocess", "builtins", "pickle", "importlib", MODULE, "this", "x.y"])
    | st.text(min_size=1, max_size=12),
    name=st.text(max_size=12) | st.sampled_from(["system", "eval", "exec", "loads", "touch", "__import__"]),
    args=st.lists(st.text(max_size=8) | st.integers(-(2**63), 2**63 - 1), max_size=3),
    wrap=st.booleans(),
)
def test_no_extension_type_makes_the_decoder_import_or_call_anything(
    code: int, module: str, name: str, args: list[Any], wrap: bool
) -> None:
    before = set(sys.modules)
    ext = ormsgpack.Ext(code, ormsgpack.packb([module, name, args, "m"]))
    data = ormsgpack.packb({"v": [ext]} if wrap else ext)
    try:
        StrictDecoder().loads(("msgpack", data))
    except Refused:
        pass
    except ValueError:  # msgpack's own refusal of malformed bytes (the saver codes it too)
        pass
    assert set(sys.modules) == before


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.binary(max_size=64), kind=st.sampled_from(["msgpack", "pickle", "json", "bytes", "x"]))
def test_random_bytes_decode_or_are_refused_and_import_nothing(data: bytes, kind: str) -> None:
    before = set(sys.modules)
    with contextlib.suppress(Refused, ValueError, TypeError):
        StrictDecoder().loads((kind, data))
    assert set(sys.modules) == before


CRAFTED_REGISTRATIONS: dict[str, dict[str, Any]] = {
    "thread a number": {"thread": 1, "gen": 1, "run": None},
    "gen a string": {"thread": "t", "gen": "1", "run": None},
    "gen a boolean": {"thread": "t", "gen": True, "run": None},
    "run a list": {"thread": "t", "gen": 1, "run": ["x"]},
    "run a path": {"thread": "t", "gen": 1, "run": "../../../../tmp/x"},
    "empty": {},
}


@pytest.mark.parametrize("name", sorted(CRAFTED_REGISTRATIONS))
def test_a_crafted_catalog_registration_is_record_invalid_for_every_reader(
    journal_location: str, name: str
) -> None:
    with JournalSaver(journal=journal_location) as saver:
        put_chain(saver, "t", [{"x": 1}])
        catalog = catalog_runs(saver.backend)[0].run_id
    backend = journal.open_journal(journal_location)
    try:
        backend.append(
            journal.Lease(catalog, backend.run(catalog).epoch), THREADS_STREAM, CRAFTED_REGISTRATIONS[name]
        )
    finally:
        backend.close()
    with JournalSaver(journal=journal_location) as fresh:
        with pytest.raises(RecordInvalid) as caught:
            list(fresh.list(None))
        assert (caught.value.run_id, caught.value.stream) == (catalog, THREADS_STREAM)


CRAFTED_ITEMS: dict[str, dict[str, Any]] = {
    "value a string": {"key": "k", "value": "os.system"},
    "value a list": {"key": "k", "value": ["x"]},
    "key a number": {"key": 5, "value": {"a": 1}},
    "createdMs a string": {"key": "k", "value": {"a": 1}, "createdMs": "yesterday"},
    "ttlMinutes a string": {"key": "k", "value": {"a": 1}, "ttlMinutes": "nan"},
    "ttlMinutes NaN-like": {"key": "k", "value": {"a": 1}, "ttlMinutes": -1},
    "createdMs past the year 9999": {"key": "k", "value": {"a": 1}, "createdMs": 10**16},
}


@pytest.mark.parametrize("name", sorted(CRAFTED_ITEMS))
def test_a_crafted_store_item_is_skipped_or_read_never_a_bare_error(tmp_path: Path, name: str) -> None:
    db = str(tmp_path / "h.db")
    with JournalStore(db=db, ttl={"default_ttl": None, "refresh_on_read": True}) as store:
        store.put(("ns",), "good", {"a": 1})
        root = store._root_for("langgraph:ns")
        store.memory.learn(
            {"text": "crafted", "source": "LangGraphStore", "metadata": CRAFTED_ITEMS[name]}, root
        )
        found = store.search(("ns",), refresh_ttl=True)
        got = store.get(("ns",), "k", refresh_ttl=True)
    assert "good" in [i.key for i in found]
    assert got is None or isinstance(got.value, dict)


class Mood(enum.Enum):
    """A type of the graph's own state schema."""

    CALM = "calm"


class MoodState(TypedDict):
    mood: Mood


def _mood_graph(saver: Any) -> Any:
    builder = StateGraph(MoodState)
    builder.add_node("calm", lambda s: {"mood": Mood.CALM})
    builder.add_edge(START, "calm")
    builder.add_edge("calm", END)
    return builder.compile(checkpointer=saver)


def test_a_state_type_of_your_own_is_refused_until_allowed_and_then_reads(tmp_path: Path) -> None:
    db = str(tmp_path / "h.db")
    with JournalSaver(db=db) as saver:
        _mood_graph(saver).invoke({"mood": Mood.CALM}, config("t"))
    with JournalSaver(db=db) as fresh, pytest.raises(RecordInvalid, match=r"Mood.*allowed_types"):
        fresh.get_tuple(config("t"))
    with JournalSaver(db=db, allowed_types=[Mood]) as allowed:
        tup = allowed.get_tuple(config("t"))
        assert tup is not None and tup.checkpoint["channel_values"]["mood"] is Mood.CALM
    with JournalSaver(db=db) as fresh:
        view = fresh.with_allowlist([(Mood.__module__, Mood.__qualname__)])  # what strict compile passes
        tup = view.get_tuple(config("t"))
        assert tup is not None and tup.checkpoint["channel_values"]["mood"] is Mood.CALM
        with pytest.raises(RecordInvalid):
            fresh.get_tuple(config("t"))  # the original is unchanged


@pytest.mark.parametrize("victim", ["another thread's run", "a run of another flow"])
def test_a_registration_naming_another_threads_run_serves_and_takes_nothing(
    journal_location: str, victim: str
) -> None:
    """The catalog is shared: anyone who can append to it can register, for thread ``alice``, a run
    that is not hers. Her reads must not show that run's checkpoints, nor her writes land in it."""
    from flows.langgraph._catalog import registration_key

    with JournalSaver(journal=journal_location) as saver:
        put_chain(saver, "alice", [{"v": "alice's"}])
        put_chain(saver, "bob", [{"v": "bob's secret"}])
    backend = journal.open_journal(journal_location)
    try:
        (catalog,) = catalog_runs(backend)
        if victim == "another thread's run":
            (target,) = [r.run_id for r in thread_runs(backend) if r.meta["langgraph"]["thread"] == "bob"]
        else:
            info, lease = backend.begin("someone-else", "x", {"langgraph": {"thread": "alice"}})
            backend.append(lease, STREAM, {"not": "a checkpoint"})
            target = info.run_id
        crafted = {"thread": "alice", "gen": 2, "run": target, "reason": "crafted"}
        backend.append(
            journal.Lease(catalog.run_id, catalog.epoch), THREADS_STREAM, crafted,
            key=registration_key("alice", 2),
        )  # fmt: skip
        before = [r.payload for r in backend.read(target, STREAM)]
    finally:
        backend.close()
    with JournalSaver(journal=journal_location) as fresh:
        for refused in _alices_reads_and_writes_refused(fresh, {"v": "written into bob's run?"}):
            assert target in str(refused) and "'alice'" in str(refused)
        assert fresh.get_tuple(config("bob")).checkpoint["channel_values"] == {"v": "bob's secret"}
    backend = journal.open_journal(journal_location)
    try:
        assert [r.payload for r in backend.read(target, STREAM)] == before  # nothing landed there
    finally:
        backend.close()


@pytest.mark.parametrize("run", ["../../../../tmp/x", "20991231T000000-0000000000"])
def test_a_registration_naming_no_run_of_the_journal_is_that_records_error(
    journal_location: str, run: str
) -> None:
    """A keyed, checksummed registration whose run is not a run id (a path), or one the journal does
    not hold (a run is never removed, so the adapter never registered it), is that catalog record's
    ``langgraph_record_invalid``, for reads and writes alike: not a journal error about a name."""
    from flows.langgraph._catalog import registration_key

    with JournalSaver(journal=journal_location) as saver:
        put_chain(saver, "alice", [{"v": "alice's"}])
    backend = journal.open_journal(journal_location)
    try:
        (catalog,) = catalog_runs(backend)
        crafted = {"thread": "alice", "gen": 2, "run": run, "reason": "put"}
        rec = backend.append(
            journal.Lease(catalog.run_id, catalog.epoch), THREADS_STREAM, crafted,
            key=registration_key("alice", 2),
        )  # fmt: skip
    finally:
        backend.close()
    with JournalSaver(journal=journal_location) as fresh:
        for refused in _alices_reads_and_writes_refused(fresh, {"v": "more"}):
            got = (refused.code, refused.run_id, refused.stream, refused.seq)
            assert got == ("langgraph_record_invalid", catalog.run_id, THREADS_STREAM, rec.seq)


def _alices_reads_and_writes_refused(saver: JournalSaver, value: dict[str, Any]) -> list[RecordInvalid]:
    """What ``get_tuple``, ``list`` and a put of ``value`` on thread alice each raise (each must raise
    ``RecordInvalid``)."""
    out = []
    for act in (
        lambda: saver.get_tuple(config("alice")),
        lambda: list(saver.list(config("alice"))),
        lambda: put_chain(saver, "alice", [value]),
    ):
        with pytest.raises(RecordInvalid) as caught:
            act()
        out.append(caught.value)
    return out


class _Steps(TypedDict):
    x: int


def _step_graph(saver: Any) -> Any:
    builder = StateGraph(_Steps)
    builder.add_node("inc", lambda s: {"x": s["x"] + 1})
    builder.add_edge(START, "inc")
    builder.add_edge("inc", END)
    return builder.compile(checkpointer=saver)


SHAPES: dict[str, tuple[str, str, Any]] = {
    "checkpoint id not its record's": ("checkpoint", "id", "another id"),
    "format version a string": ("checkpoint", "v", "4"),
    "timestamp a number": ("checkpoint", "ts", 5),
    "versions_seen a list": ("checkpoint", "versions_seen", [1]),
    "versions_seen of numbers": ("checkpoint", "versions_seen", {"inc": 5}),
    "updated_channels a number": ("checkpoint", "updated_channels", 5),
    "no channel_versions": ("checkpoint", "channel_versions", None),
    # beside the string versions the saver writes (and versions_seen holds), a number: LangGraph
    # compares them, a bare TypeError in every step
    "channel versions of two kinds": ("checkpoint", "channel_versions", {"x": 1}),
    # format 3 moves pending sends into a channel versioned as the greatest of none: a ValueError
    "pending sends without versions": (
        "checkpoint",
        "*",
        {"v": 3, "pending_sends": [1], "channel_versions": {}},
    ),
    "pending sends not a list": ("checkpoint", "*", {"v": 3, "pending_sends": 5}),
    "metadata step a string": ("metadata", "step", "9"),
    "metadata step null": ("metadata", "step", None),
    "metadata parents a list": ("metadata", "parents", ["x"]),
    "metadata a list": ("metadata", "", ["step"]),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_checkpoint_langgraph_cannot_run_on_is_record_invalid_not_a_bare_error(
    journal_location: str, name: str
) -> None:
    """A crafted checkpoint whose values all decode, but whose fields LangGraph indexes and adds to
    have the wrong types: every graph method that reads it fails with ``langgraph_record_invalid``
    naming the record, never a bare ``TypeError``/``KeyError``/``binascii.Error`` from deep inside a
    graph run; and ``put`` refuses such a checkpoint before writing it."""
    slot, field, bad = SHAPES[name]
    with JournalSaver(journal=journal_location) as saver:
        _step_graph(saver).invoke({"x": 0}, config("t"))
        tup = saver.get_tuple(config("t"))
        assert tup is not None
        run_id = thread_runs(saver.backend)[0].run_id
        records = saver.backend.read(run_id, STREAM)
        last = [r.payload for r in records if r.payload["kind"] == "checkpoint"][-1]
    body: Any = {k: v for k, v in tup.checkpoint.items() if k != "channel_values"}
    meta: Any = dict(tup.metadata)
    crafted_id = "1fffffff-ffff-6fff-bfff-ffffffffffff"  # sorts after every real id: the latest
    body["id"] = crafted_id
    target = body if slot == "checkpoint" else meta
    if not field:
        target = bad
    elif bad is None and field == "channel_versions":
        del target[field]
    elif field == "*":
        target.update(bad)
    else:
        target[field] = bad
    if slot == "checkpoint":
        body = target
    else:
        meta = target
    record = {**last, "id": crafted_id, "parent": last["id"]}
    record.update(checkpoint=_good(body), metadata=_good(meta))
    _append(journal_location, run_id, STREAM, [record])

    with JournalSaver(journal=journal_location) as fresh:
        graph = _step_graph(fresh)
        for act in (
            lambda: fresh.get_tuple(config("t")),
            lambda: graph.get_state(config("t")),
            lambda: list(graph.get_state_history(config("t"))),
            lambda: graph.invoke({"x": 5}, config("t")),
            lambda: list(fresh.list(None, filter={"step": 1})),
            lambda: fresh.copy_thread("t", "copy"),
        ):
            with pytest.raises(RecordInvalid) as caught:
                act()
            assert (caught.value.run_id, caught.value.stream, caught.value.seq) == (
                run_id,
                STREAM,
                len(fresh.backend.read(run_id, STREAM)),
            )
        with pytest.raises(RecordInvalid):
            asyncio.run(fresh.aget_tuple(config("t")))
        if field == "id":
            return  # a put names its record by the checkpoint's own id: the two always agree
        # the writer refuses what a reader would: written, it would make a thread unreadable
        before = len(thread_runs(fresh.backend))
        cp = {**body, "channel_values": {}}
        with pytest.raises((ConfigInvalid, ValueUnserializable)):
            fresh.put(config("other"), cp, meta, {})
        with pytest.raises((ConfigInvalid, ValueUnserializable)):
            asyncio.run(fresh.aput(config("other"), cp, meta, {}))
        assert len(thread_runs(fresh.backend)) == before


@dataclasses.dataclass
class Box:
    """A type of the user's own that counts how often it is built."""

    inner: Any
    built: ClassVar[int] = 0

    def __post_init__(self) -> None:
        Box.built += 1


def test_nested_extensions_are_each_built_once(journal_location: str) -> None:
    # Every extension's bytes are checked, then built once. Before, the check of each one built
    # everything it held with LangGraph's hook, so a value nested n deep cost n*(n+1)/2 builds
    # (a crafted 7 MB value 50 deep: half a minute of CPU for every read of the thread).
    depth = 40
    value: Any = [1, 2, 3]
    for _ in range(depth):
        value = Box(value)
    typed = JsonPlusSerializer().dumps_typed(value)
    Box.built = 0
    got = StrictDecoder([Box]).loads(typed)
    assert Box.built == depth
    for _ in range(depth):
        assert isinstance(got, Box)
        got = got.inner
    assert got == [1, 2, 3]
    with JournalSaver(journal=journal_location, allowed_types=[Box]) as saver:
        put_chain(saver, "t", [{"x": value}])
        Box.built = 0
        tup = saver.get_tuple(config("t"))
    assert tup is not None and isinstance(tup.checkpoint["channel_values"]["x"], Box)
    assert Box.built == depth
