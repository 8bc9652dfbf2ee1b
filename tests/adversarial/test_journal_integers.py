"""Integers a journal stores must fit signed 64 bits, on every backend, refused at append time.

orjson writes integers up to 2**64 - 1, so a payload holding 2**63 … 2**64 - 1 (a step attempt
counter run past 2**63 - 1 by a crafted record, say) used to be journaled, and then read back by
nothing that holds signed 64 bits (PostgreSQL's bigint, every reader's range checks). The journal
now refuses it with ``journal_payload_invalid`` before anything is written, whatever the depth.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import journal
from journal import FileJournal, JournalBackend

WIDE = [2**63, 2**64 - 1]  # below -(2**63), orjson itself refuses
PAYLOADS = {
    "top level": lambda n: {"attempt": n},
    "in a list": lambda n: {"xs": [1, 2, n]},
    "nested": lambda n: {"a": {"b": [{"c": n}]}},
}


@pytest.fixture(params=["file", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JournalBackend]:
    if request.param == "file":
        jr: Any = FileJournal(tmp_path / "j")
    else:
        from journal.postgres import PostgresJournal

        jr = PostgresJournal(request.getfixturevalue("postgres_dsn"))
    yield jr
    jr.close()


@pytest.mark.parametrize("value", WIDE)
@pytest.mark.parametrize("shape", sorted(PAYLOADS))
def test_an_integer_outside_signed_64_bits_is_refused_at_append_and_nothing_is_written(
    backend: JournalBackend, value: int, shape: str
) -> None:
    _, lease = backend.begin("f", "s", {})
    with pytest.raises(journal.JournalPayloadInvalid) as err:
        backend.append(lease, "steps", PAYLOADS[shape](value))
    assert err.value.code == "journal_payload_invalid"
    assert list(backend.read(lease.run_id, "steps")) == []
    edge = backend.append(lease, "steps", PAYLOADS[shape](2**63 - 1))
    assert list(backend.read(lease.run_id, "steps")) == [edge]  # the range's own ends are fine
