"""A reader holding no lease answers ``get_tuple`` from what it read last while the journal says
nothing changed (``JournalBackend.stamp``), and never once something did: another process's put,
a delete, a new generation registered in the catalog without a word in the old run's stream."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import Any

import pytest

import flows.langgraph._saver as saver_module
from flows.langgraph import JournalSaver
from flows.langgraph._catalog import SCOPE, THREAD_FLOW
from journal import open_journal
from tests.conftest import ROOT
from tests.langgraph.helpers import config, put_chain

UUID_VALUE = uuid.UUID(int=7)

_PUT = """
import sys
from flows.langgraph import JournalSaver
from tests.langgraph.helpers import checkpoint, config
with JournalSaver(journal=sys.argv[1]) as saver:
    parent = saver.get_tuple(config("t")).config["configurable"]["checkpoint_id"]
    v = int(sys.argv[3])
    saver.put(config("t", parent), checkpoint({"x": sys.argv[2]}, {"x": v}), {"step": 9}, {"x": v})
"""


def _settled(reader: JournalSaver, thread_id: str) -> dict[str, object]:
    """Read the thread until the reader answers from its cache (a token taken, then matched)."""
    for _ in range(3):
        found = reader.get_tuple(config(thread_id))
        assert found is not None
    return found.checkpoint["channel_values"]


def test_the_next_get_tuple_sees_another_processs_put(journal_location: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with JournalSaver(journal=journal_location) as writer:
        put_chain(writer, "t", [{"x": "a"}, {"x": "b"}])
    with JournalSaver(journal=journal_location) as reader:
        for i, value in enumerate(["c", "d", "e"]):
            assert _settled(reader, "t") == {"x": ["b", "c", "d"][i]}
            done = subprocess.run(
                [sys.executable, "-c", _PUT, journal_location, value, str(3 + i)],
                env=env,
                check=False,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            latest = reader.get_tuple(config("t"))
            assert latest is not None and latest.checkpoint["channel_values"] == {"x": value}
            assert latest.metadata["step"] == 9


def test_the_next_get_tuple_sees_a_delete_and_a_prune_by_another_saver(journal_location: str) -> None:
    # A second saver has its own journal object: it shares no cache with the reader, as another
    # process would.
    with JournalSaver(journal=journal_location) as writer, JournalSaver(journal=journal_location) as reader:
        put_chain(writer, "t", [{"x": 1}, {"x": 2}, {"x": 3}])
        assert _settled(reader, "t") == {"x": 3}
        writer.prune(["t"])
        assert len(list(reader.list(config("t")))) == 1
        assert _settled(reader, "t") == {"x": 3}
        writer.delete_thread("t")
        assert reader.get_tuple(config("t")) is None
        put_chain(writer, "t", [{"x": "new"}])
        assert _settled(reader, "t") == {"x": "new"}


def test_a_generation_registered_without_touching_the_old_stream_is_seen(journal_location: str) -> None:
    """A pruner that dies between registering the new generation and its tombstone in the old
    run leaves the old stream as it was; the catalog alone says where the thread went, so the
    reader's cached answer must depend on the catalog too."""
    with JournalSaver(journal=journal_location) as writer, JournalSaver(journal=journal_location) as reader:
        put_chain(writer, "t", [{"x": "old"}])
        assert _settled(reader, "t") == {"x": "old"}
        gen = writer._catalog.current("t")
        assert gen is not None
        with open_journal(journal_location) as jr:
            meta = {"langgraph": {"thread": "t", "generation": gen.gen + 1}}
            info, lease = jr.begin(THREAD_FLOW, SCOPE, meta)
            jr.release(lease)
        writer._catalog.register("t", gen.gen + 1, info.run_id, "prune")
        with JournalSaver(journal=journal_location) as mover:
            put_chain(mover, "t", [{"x": "moved"}])  # goes to the new generation's run
            assert [t.checkpoint["channel_values"] for t in mover.list(config("t"))] == [{"x": "moved"}]
            assert mover.citation(config("t")).run_id == info.run_id  # type: ignore[union-attr]
        latest = reader.get_tuple(config("t"))
        assert latest is not None and latest.checkpoint["channel_values"] == {"x": "moved"}


def test_a_cached_answer_is_a_new_object_each_time(journal_location: str) -> None:
    with JournalSaver(journal=journal_location) as writer, JournalSaver(journal=journal_location) as reader:
        put_chain(writer, "t", [{"x": [1, 2]}])
        first = reader.get_tuple(config("t"))
        assert first is not None
        first.checkpoint["channel_values"]["x"].append(3)
        first.metadata["step"] = 99
        for _ in range(3):
            again = reader.get_tuple(config("t"))
            assert again is not None
            assert again.checkpoint["channel_values"] == {"x": [1, 2]}
            assert again.metadata["step"] == 0


def test_a_checkpoint_read_again_is_decoded_again_and_its_fields_checked_once(
    saver: JournalSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same bytes decode to the same fields, so a stored checkpoint's fields, once checked, are
    # not checked again by the same decoder; every answer is still a fresh decode of its own.
    put_chain(saver, "t", [{"x": "a"}, {"x": "b"}])
    checked: list[str] = []
    real = saver_module.checkpoint_problem

    def counted(checkpoint: Any, record_id: str) -> str | None:
        checked.append(record_id)
        return real(checkpoint, record_id)

    monkeypatch.setattr(saver_module, "checkpoint_problem", counted)
    first, second = saver.get_tuple(config("t")), saver.get_tuple(config("t"))
    assert first is not None and second is not None
    assert len(checked) == 1
    assert first.checkpoint == second.checkpoint and first.checkpoint is not second.checkpoint
    assert first.metadata == second.metadata and first.metadata is not second.metadata
    view = saver.with_allowlist([("tests.langgraph", "Nothing")])  # another decoder checks for itself
    assert view.get_tuple(config("t")) is not None
    assert len(checked) == 2
    put_chain(saver, "t", [{"x": "c"}])  # a new checkpoint is checked (its put checks it too)
    checked.clear()
    for _ in range(2):
        latest = saver.get_tuple(config("t"))
        assert latest is not None and latest.checkpoint["channel_values"] == {"x": "c"}
    assert checked == [latest.config["configurable"]["checkpoint_id"]]


def test_a_value_without_an_extension_is_decoded_in_one_pass_and_one_with_one_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A msgpack value that holds no extension is decoded once, with no hook (an extension, or
    # damage, fails that decode and nothing is built); anything else takes the checking decode.
    import ormsgpack
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from flows.langgraph._serde import Refused, StrictDecoder

    checked: list[bytes] = []
    real = StrictDecoder._unpack

    def counted(self: StrictDecoder, data: bytes) -> Any:
        checked.append(data)
        return real(self, data)

    monkeypatch.setattr(StrictDecoder, "_unpack", counted)
    serde, decoder = JsonPlusSerializer(), StrictDecoder()
    plain = serde.dumps_typed({"a": [1, "b", {"c": None}], 2: 3.5})
    assert decoder.loads(plain) == {"a": [1, "b", {"c": None}], 2: 3.5}
    assert checked == []
    when = serde.dumps_typed(UUID_VALUE)
    assert decoder.loads(when) == UUID_VALUE
    assert checked == [when[1]]
    crafted = ("msgpack", ormsgpack.packb([ormsgpack.Ext(2, ormsgpack.packb(["os", "system", ["true"]]))]))
    with pytest.raises(Refused, match=r"os\.system"):
        decoder.loads(crafted)
    with pytest.raises(ValueError):
        decoder.loads(("msgpack", plain[1][:-3]))  # cut short: damage, raised by the checking decode
    assert len(checked) == 3
