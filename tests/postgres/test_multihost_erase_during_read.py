"""A read on one host while another host erases the memory it is reading.

The erase forgets the memory (a shared retirement), records the erasure, then rewrites each of its
commits as a tombstone. A read on another host that listed the retirements before the forget and
checks the memory's file against its commit after the rewrite finds the commit a tombstone. It
failed closed (``memory_unreachable``, "not the rendering of the record it cites", advising a
repair that had nothing to repair), and an update of the memory there was refused with it rather
than told the memory is gone. Such a read now starts again and leaves the erased memory out; an
update is told ``memory_finding_unknown``, as after the erase. A tombstone that no retirement and
no erase record backs is still damage, and still said.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import memory
from memory._citations import Citations
from memory._erase import commits_of, rewrite
from tests._helpers.hosts import host

TEXT = "zqerasedduringread: ana lives in oslo"


def _erase_on_b_at_the_first_check(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, dsn: str, key: str
) -> list[Any]:
    """Make host B erase ``key`` as soon as any store of this process looks up the commit a file
    of it cites (after the read listed the files and the retirements); returns what B answered."""
    real = Citations.cited
    erased: list[Any] = []

    def cited_after_the_erase(self: Citations, entry: Any) -> Any:
        if not erased and entry.memory_id == key:
            with host(tmp_path, "b", dsn) as b, b.session(scope="privacy") as s:
                erased.append(s.erase(key, reason="ana asked"))
        return real(self, entry)

    monkeypatch.setattr(Citations, "cited", cited_after_the_erase)
    return erased


@pytest.mark.parametrize("read", ["recall", "why", "current", "update"])
def test_a_read_on_a_that_meets_bs_erase_between_listing_and_checking_leaves_the_memory_out(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    with host(tmp_path, "a", postgres_dsn) as a:
        with a.session(scope="team") as s:
            learned = s.learn({"text": TEXT})
        with host(tmp_path, "a", postgres_dsn) as reader:  # a fresh process: nothing checked yet
            erased = _erase_on_b_at_the_first_check(monkeypatch, tmp_path, postgres_dsn, learned.memory_id)
            if read == "recall":
                assert reader.recall(scope="team") == []
            elif read == "why":
                assert reader.why("ana oslo", scope="team") == []
            elif read == "current":
                assert reader.current(learned.memory_id) is None
            else:
                with pytest.raises(memory.FindingUnknown), reader.session(scope="team") as s:
                    s.update(learned.memory_id, {"text": "ana lives in bergen"})
            assert erased, "the erase did not run inside the read"
            reader.sync()
            assert memory.check_store(reader) == []


def test_a_tombstone_that_nothing_retires_still_fails_the_read_closed_and_says_so(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """The restart is for a memory an erase forgot: a commit rewritten as a tombstone by something
    that is no erase (nothing retires its key) is damage, and the read says what it is."""
    with host(tmp_path, "a", postgres_dsn) as a:
        with a.session(scope="team") as s:
            learned = s.learn({"text": TEXT})
        backend = a.open_journal()
        assert rewrite(backend, commits_of(backend, {learned.key})) == 1
        with host(tmp_path, "a", postgres_dsn) as reader:
            with pytest.raises(memory.Unreachable, match="erasure's tombstone"):
                reader.recall(scope="team")
            with pytest.raises(memory.Unreachable, match="erasure's tombstone"):
                reader.current(learned.memory_id)


def test_a_check_on_a_during_bs_erase_reports_no_damage(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flows check`` reads the journal run by run: B's erase, made after A's check listed the runs
    (its record in a run the check never lists) and before it read the commit, left the check a
    tombstone no erase record it read names, which it called damage (``tombstone_unbacked``,
    "restore the journal from a backup", and ``learned_unverified`` for A's file). It reads the erase
    records again before it says so: what it reports is the erasure A has not finished yet."""
    from journal.postgres import PostgresJournal

    with host(tmp_path, "a", postgres_dsn) as a:
        with a.session(scope="team") as s:
            learned = s.learn({"text": TEXT})
        real = PostgresJournal.read
        fired: list[bool] = []
        erased: list[Any] = []

        def read_after_the_erase(self: PostgresJournal, *args: Any, **kwargs: Any) -> Any:
            if not fired:  # once: the erase's own reads read as they are
                fired.append(True)
                with host(tmp_path, "b", postgres_dsn) as b, b.session(scope="privacy") as s:
                    erased.append(s.erase(learned.memory_id, reason="ana asked"))
            return real(self, *args, **kwargs)

        monkeypatch.setattr(PostgresJournal, "read", read_after_the_erase)
        kinds = {p.kind for p in memory.check_store(a)}
        monkeypatch.undo()
        assert erased, "the erase did not run inside the check"
        assert kinds & {"tombstone_unbacked", "learned_unverified"} == set(), kinds
        assert "erase_incomplete" in kinds  # A's copy, until A's sync (or the repair) removes it
        a.sync()
        assert memory.check_store(a) == []
