"""Bad input to ``JournalSaver``: coded errors (or LangGraph's own types), and nothing written."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from flows.langgraph import ConfigInvalid, JournalSaver, ValueTooLarge, ValueUnserializable
from flows.langgraph._records import STREAM
from tests.langgraph.helpers import checkpoint, config, put_chain


def _records(saver: JournalSaver) -> list[Any]:
    """Every record of every run of the journal, to show nothing was written."""
    return [
        (r.run_id, s, len(saver.backend.read(r.run_id, s)))
        for r in saver.backend.runs()
        for s in saver.backend.streams(r.run_id)
    ]


@pytest.mark.parametrize(
    "where",
    ["channel", "metadata", "write"],
)
def test_a_value_langgraphs_serializer_refuses_raises_coded_and_writes_nothing(
    saver: JournalSaver, where: str
) -> None:
    ids = put_chain(saver, "t", [{"x": 1}])
    before = _records(saver)
    lock = threading.Lock()

    with pytest.raises(ValueUnserializable) as caught:
        if where == "channel":
            saver.put(config("t", ids[0]), checkpoint({"x": lock}), {"step": 1}, {"x": 2})
        elif where == "metadata":
            saver.put(config("t", ids[0]), checkpoint({"x": 2}), {"step": 1, "lock": lock}, {"x": 2})  # type: ignore[typeddict-unknown-key]
        else:
            saver.put_writes(config("t", ids[0]), [("x", 1), ("y", lock)], "task")

    assert isinstance(caught.value, TypeError)  # as the serializer's own failure is
    assert caught.value.code == "langgraph_value_unserializable"
    assert caught.value.thread_id == "t"
    assert "lock" in caught.value.message
    assert _records(saver) == before
    tup = saver.get_tuple(config("t"))
    assert tup is not None and tup.checkpoint["id"] == ids[0] and tup.pending_writes == []


def test_an_unserializable_first_put_creates_no_thread_run_and_no_catalog(saver: JournalSaver) -> None:
    with pytest.raises(ValueUnserializable):
        saver.put(config("new"), checkpoint({"x": object()}), {}, {"x": 1})
    assert saver.backend.runs() == []
    assert saver.get_tuple(config("new")) is None


def test_a_record_over_the_bound_raises_value_too_large_and_writes_nothing(journal_location: str) -> None:
    with JournalSaver(journal=journal_location, max_record_bytes=4096) as saver:
        ids = put_chain(saver, "t", [{"x": "small"}])
        before = _records(saver)
        with pytest.raises(ValueTooLarge) as caught:
            saver.put(config("t", ids[0]), checkpoint({"x": "y" * 5000}), {}, {"x": 2})
        with pytest.raises(ValueTooLarge):
            saver.put_writes(config("t", ids[0]), [("x", "y" * 5000)], "task")
        assert isinstance(caught.value, ValueError)
        assert caught.value.code == "langgraph_value_too_large"
        assert caught.value.limit == 4096 and caught.value.size > 5000
        assert _records(saver) == before


@pytest.mark.parametrize(
    "cfg",
    [{}, {"configurable": {}}, {"configurable": {"thread_id": None}}, {"configurable": {"thread_id": ["a"]}}],
)
def test_a_config_without_a_thread_id_raises_config_invalid(saver: JournalSaver, cfg: Any) -> None:
    with pytest.raises(ConfigInvalid) as caught:
        saver.put(cfg, checkpoint({"x": 1}), {}, {"x": 1})
    assert caught.value.code == "langgraph_config_invalid"
    with pytest.raises(ConfigInvalid):
        saver.get_tuple(cfg)
    assert saver.backend.runs() == []


def test_other_bad_arguments_raise_config_invalid(saver: JournalSaver) -> None:
    put_chain(saver, "t", [{"x": 1}])
    with pytest.raises(ConfigInvalid, match="checkpoint_id"):
        saver.put_writes(config("t"), [("x", 1)], "task")
    with pytest.raises(ConfigInvalid, match="strategy"):
        saver.prune(["t"], strategy="keep_some")
    with pytest.raises(ConfigInvalid, match="checkpoint_ns"):
        saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": 3}})
    with pytest.raises(ConfigInvalid):
        saver.delete_thread(None)  # type: ignore[arg-type]
    cite = saver.citation(config("t"))
    assert cite is not None
    assert len(saver.backend.read(cite.run_id, STREAM)) == 1


def test_thread_ids_with_any_characters_are_kept_apart(saver: JournalSaver) -> None:
    odd = ["a/b", "../..", "", "nul\x00byte", "ünï ☃", "x" * 500, "t.1", "t-1"]
    for i, thread in enumerate(odd):
        put_chain(saver, thread, [{"i": i}])
    for i, thread in enumerate(odd):
        tup = saver.get_tuple(config(thread))
        assert tup is not None and tup.checkpoint["channel_values"] == {"i": i}, repr(thread)
        assert tup.config["configurable"]["thread_id"] == thread


def _bad_checkpoint(kind: str) -> tuple[Any, Any]:
    """A checkpoint and ``new_versions`` that a reader would refuse once journaled."""
    cp: Any = checkpoint({"x": 1})
    versions: Any = {"x": 1}
    if kind == "id-not-str":
        cp["id"] = 5
    elif kind == "version-none":
        cp["channel_versions"] = versions = {"x": None}
    elif kind == "version-bool":
        versions = {"x": True}
    elif kind == "version-nan":  # JSON has no NaN: it would be read back as null
        versions = {"x": float("nan")}
    elif kind == "checkpoint-versions":
        cp["channel_versions"] = {"x": [1]}
    return cp, versions


@pytest.mark.parametrize(
    "kind", ["id-not-str", "version-none", "version-bool", "version-nan", "checkpoint-versions"]
)
def test_a_put_no_reader_could_take_back_raises_and_leaves_the_thread_readable(
    journal_location: str, kind: str
) -> None:
    with JournalSaver(journal=journal_location) as saver:
        ids = put_chain(saver, "t", [{"x": 0}])
        before = _records(saver)
        cp, versions = _bad_checkpoint(kind)
        with pytest.raises(ConfigInvalid) as caught:
            saver.put(config("t", ids[0]), cp, {}, versions)
        assert caught.value.code == "langgraph_config_invalid"
        assert _records(saver) == before
    with JournalSaver(journal=journal_location) as other:  # another process reads the thread
        tup = other.get_tuple(config("t"))
        assert tup is not None and tup.checkpoint["id"] == ids[0]
        assert [c.checkpoint["id"] for c in other.list(None)] == [ids[0]]


def test_a_lone_surrogate_in_an_id_or_name_raises_value_unserializable(saver: JournalSaver) -> None:
    ids = put_chain(saver, "t", [{"x": 0}])
    before = _records(saver)
    with pytest.raises(ValueUnserializable):
        saver.put(config("t", ids[0], ns="\ud800"), checkpoint({"x": 1}), {}, {"x": 2})
    with pytest.raises(ValueUnserializable):
        saver.put_writes(config("t", ids[0]), [("\udc00", 1)], "task")
    with pytest.raises(ValueUnserializable):
        saver.put_writes(config("t", ids[0]), [("x", 1)], "task\ud800")
    assert _records(saver) == before


def test_a_string_where_a_list_of_ids_belongs_is_refused_not_read_as_its_characters(
    saver: JournalSaver,
) -> None:
    """``prune("t-1", strategy="delete")`` would iterate the string and delete the threads "t", "-"
    and "1"; it is refused, as is a string of run ids, and nothing is touched."""
    for thread_id in ("t", "-", "1", "t-1"):
        put_chain(saver, thread_id, [{"x": 1}, {"x": 2}])
    before = {t: len(list(saver.list(config(t)))) for t in ("t", "-", "1", "t-1")}
    with pytest.raises(ConfigInvalid, match=r"\['t-1'\]"):
        saver.prune("t-1", strategy="delete")  # type: ignore[arg-type]
    with pytest.raises(ConfigInvalid):
        saver.prune("t-1")  # type: ignore[arg-type]
    with pytest.raises(ConfigInvalid):
        saver.delete_for_runs("t-1")  # type: ignore[arg-type]
    with pytest.raises(ConfigInvalid):
        asyncio.run(saver.aprune("t-1", strategy="delete"))  # type: ignore[arg-type]
    assert {t: len(list(saver.list(config(t)))) for t in before} == before


@pytest.mark.parametrize(
    "call",
    [
        lambda s: list(s.list(config("t"), limit="1")),
        lambda s: list(s.list(config("t"), limit=1.5)),
        lambda s: list(s.list(config("t"), before="x")),
        lambda s: list(s.list(config("t"), before={"configurable": {"checkpoint_id": 5}})),
        lambda s: list(s.list("t")),
        lambda s: list(s.list({"configurable": {"thread_id": "t", "checkpoint_ns": 5}})),
        lambda s: s.put_writes(config("t", "c"), [1], "task"),
        lambda s: s.put_writes(config("t", "c"), "ab", "task"),
        # a config or its configurable that is not a dict: a bare AttributeError before
        lambda s: s.get_tuple("t"),
        lambda s: s.get_tuple({"configurable": "t"}),
        lambda s: asyncio.run(s.aget_tuple(["t"])),
        lambda s: list(s.list({"configurable": ["t"]})),
        lambda s: s.put_writes("t", [("x", 1)], "task"),
        lambda s: s.put({"configurable": "t"}, checkpoint({"x": 1}), {}, {}),
        lambda s: s.citation("t"),
    ],
)
def test_bad_list_and_put_writes_arguments_are_config_invalid_not_bare_errors(
    saver: JournalSaver, call: Any
) -> None:
    put_chain(saver, "t", [{"x": 1}])
    with pytest.raises(ConfigInvalid) as caught:
        call(saver)
    assert caught.value.code == "langgraph_config_invalid"


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("max_record_bytes", 16 * 1024 * 1024 + 1),  # past the journal's own bound: refused there
        ("max_record_bytes", 0),
        ("max_record_bytes", "4096"),
        ("max_record_bytes", True),
        ("lease_idle_s", float("nan")),
        ("lease_idle_s", -0.5),
        ("lease_wait_s", -1.0),
        ("lease_wait_s", float("inf")),
        ("lease_wait_s", "30"),
        ("max_workers", 0),
        ("max_cached_threads", 0),
        ("max_cached_threads", 2.5),
    ],
)
def test_a_saver_setting_out_of_range_is_refused_before_anything_is_opened(
    tmp_path: Path, argument: str, value: Any
) -> None:
    journal = tmp_path / "journal"
    with pytest.raises(ConfigInvalid) as caught:
        JournalSaver(journal=str(journal), **{argument: value})
    assert caught.value.code == "langgraph_config_invalid" and argument in str(caught.value)
    assert not journal.exists()


def test_a_record_of_the_largest_bound_a_saver_takes_is_written(tmp_path: Path) -> None:
    # the largest max_record_bytes is the journal's own bound: a record just under it is written
    # (a channel's bytes are base64 in the record: 11 MiB of text is a record of about 15 MiB)
    big = "y" * (11 * 1024 * 1024)
    with JournalSaver(journal=str(tmp_path / "journal"), max_record_bytes=16 * 1024 * 1024) as saver:
        [cid] = put_chain(saver, "t", [{"x": big}])
        got = saver.get_tuple(config("t", cid))
        assert got is not None and got.checkpoint["channel_values"]["x"] == big
        with pytest.raises(ValueTooLarge) as caught:  # past it: no advice to raise the bound
            put_chain(saver, "t", [{"x": big + big}])
        assert "raise max_record_bytes" not in str(caught.value)


@pytest.mark.parametrize(
    ("argument", "value"),
    [("sync_every", -1), ("sync_every", "16"), ("max_workers", 0), ("max_workers", None)],
)
def test_a_store_setting_out_of_range_is_refused_before_anything_is_opened(
    tmp_path: Path, argument: str, value: Any
) -> None:
    from flows.langgraph import JournalStore

    with pytest.raises(ConfigInvalid) as caught:
        JournalStore(db=str(tmp_path / "history.db"), **{argument: value})
    assert caught.value.code == "langgraph_config_invalid" and argument in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_connection_string_with_a_lone_surrogate_is_coded(tmp_path: Path) -> None:
    import memory
    from flows.langgraph import JournalStore

    for cls in (JournalSaver, JournalStore):
        opening = cls.from_conn_string(str(tmp_path / "a\ud800.sqlite"))
        with pytest.raises(memory.ArgumentInvalid) as caught, opening:  # a bare UnicodeEncodeError before
            pass
        assert caught.value.code == "memory_argument_invalid"
