"""``why`` by meaning against hostile input: crafted rows of the vectors file and crafted snapshot
headers, an embedder whose dims answer differently on each read, and questions holding what is not
Unicode. Each search answers or fails with its code; none fails with a bare numpy or Python error."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

import memory
from memory._vectors import snapshots, vectors_path
from tests.memory.test_semantic import Toy, _many, _snapshotted, _store, _vector_rows


def test_a_crafted_vectors_row_whose_key_is_not_a_key_is_left_out(db: Path) -> None:
    """Rows of the vectors file whose key is a blob, a number or other text, with a well-formed
    vector: a first search reads every stored vector at once (and keeps a snapshot of them); such a
    row is left out (it names no finding), the search answers, and check reports and repair
    deletes the rows."""
    keys = _many(db)
    toy = Toy()
    with _store(db, toy) as s:
        s.derive_vectors()
    for snap in snapshots(vectors_path(db).parent):
        snap.unlink()  # the first search reads the vectors file, not a snapshot
    model = f"{toy.name}#text+tags/1"
    with sqlite3.connect(vectors_path(db)) as conn:
        (vec,) = conn.execute("SELECT vec FROM vectors WHERE key = ?", (keys[0],)).fetchone()
        crafted: list[object] = [b"\x01a blob, not a key", 12345, "Z" * 32, keys[1].upper()]
        conn.executemany("INSERT INTO vectors VALUES (?, ?, ?)", [(model, k, vec) for k in crafted])
    toy.seen.clear()
    with _store(db, toy) as s:
        assert len(s.why("zebras", mode="semantic", limit=5)) == 5
        assert toy.seen == ["zebras"]  # every finding's own vector read, none derived
        (snap,) = snapshots(vectors_path(db).parent)
        problems = memory.check_store(s)
        assert sorted(p.kind for p in problems) == ["vector_stale"] * 4
        memory.repair_store(s, problems)
        assert memory.check_store(s) == []
    assert {k for _, k in _vector_rows(db)} == set(keys)


class Shifty:
    """An embedder whose ``dims`` reads 8 until its ``shift``-th read, then 4; each call of
    ``embed`` returns vectors as wide as ``dims`` reads then."""

    name = "shifty@1"
    word_alignment = 1.0

    def __init__(self, shift: int) -> None:
        self.shift = shift
        self.reads = 0

    @property
    def dims(self) -> int:
        self.reads += 1
        return 8 if self.reads < self.shift else 4

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        width = self.dims
        return [[float(len(t) % 7 + 1), *([0.5] * (width - 1))] for t in texts]


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_an_embedder_whose_dims_read_differently_each_time_fails_with_its_code(db: Path, mode: str) -> None:
    """Whichever read of ``dims`` turns out different (the one the vectors were opened with, the
    one a vector is checked against, the one ``embed`` makes its vectors by), a vector of another
    width is refused (``memory_embedder_failed``) before it reaches the matrix or the question's
    product with it, in the vectors and in the word alignment alike."""
    with memory.MemoryStore(db) as s, s.session(scope="u") as session:
        session.learn({"text": "lion"})
    for shift in range(2, 16):
        embedder = Shifty(shift)
        with _store(db, embedder) as s:
            try:
                answers = s.why("lion", mode=mode)
            except memory.EmbedderFailed as err:
                assert err.code == "memory_embedder_failed"
            else:
                assert [a.text for a in answers] == ["lion"]


class Strict(Toy):
    """An embedder that encodes each text as UTF-8 first, as a tokenizer or a request does."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        for t in texts:
            t.encode()
        return super().embed(texts)


def test_a_lone_surrogate_in_a_question_is_left_out_of_what_is_embedded(db: Path) -> None:
    """A question holding lone surrogates (what an undecodable byte of a CLI argument becomes):
    they mean nothing and are not handed to the embedder (which would fail on them), the rest of
    the question is asked, as a keyword ``why`` matches its words; the offline default alike."""
    with memory.MemoryStore(db) as s, s.session(scope="u") as session:
        session.learn({"text": "The user is allergic to peanuts"})
    for embedder in (Strict(), memory.default_embedder()):
        with _store(db, embedder) as s:
            for mode in ("keyword", "semantic", "hybrid"):
                answers = s.why("peanuts \ud800 allergic\udcff", mode=mode)
                assert [a.text for a in answers] == ["The user is allergic to peanuts"], mode
                assert s.why("\ud800\udcff \udc80", mode=mode) == []


def test_a_snapshot_whose_header_claims_another_count_is_passed_over(db: Path) -> None:
    """A snapshot whose header claims a negative count, one that overflows, more rows than the file
    holds, or fewer (the file is longer than its header says): it is not mapped, every vector is
    read from the vectors file or derived again, and the search answers."""
    import numpy as np
    from numpy.lib import format as npy

    keys, toy, snap = _snapshotted(db)
    block = np.load(snap, allow_pickle=False)
    body = block.tobytes()
    for count in (-5, 2**60, 2**63 - 1, len(keys) + 1, len(keys) - 1):
        with snap.open("wb") as fh:
            header = {"descr": npy.dtype_to_descr(block.dtype), "fortran_order": False, "shape": (count,)}
            npy.write_array_header_1_0(fh, header)
            fh.write(body)
        with sqlite3.connect(vectors_path(db)) as conn:
            conn.execute("DELETE FROM vectors")  # what the snapshot does not give is derived again
        toy.seen.clear()
        with _store(db, toy) as s:
            assert len(s.why("zebras", mode="semantic", limit=5)) == 5, count
        assert len(toy.seen) == len(keys) + 1, count  # every vector derived again, and the question


def test_a_sparse_snapshot_whose_header_claims_millions_of_rows_is_passed_over(db: Path) -> None:
    """A snapshot with a well-formed header claiming 2**24 rows, made exactly that long with a hole
    (a few KiB of disk): its size agrees with its header, and a search mapped it and copied every
    row it claimed into memory (a file claiming tens of gigabytes: the process killed, or a
    MemoryError). A file with holes is no snapshot a store wrote: it is passed over, every vector
    read from the vectors file, and the search answers."""
    import numpy as np
    from numpy.lib import format as npy

    from memory._vectors import VectorIndex

    _, toy, snap = _snapshotted(db)
    dtype = np.load(snap, allow_pickle=False).dtype
    count = 2**24
    with snap.open("wb") as fh:
        header = {"descr": npy.dtype_to_descr(dtype), "fortran_order": False, "shape": (count,)}
        npy.write_array_header_1_0(fh, header)
        fh.truncate(fh.tell() + count * dtype.itemsize)
    assert snap.stat().st_blocks * 512 < 1 << 20 < snap.stat().st_size
    assert VectorIndex(db, toy)._mapped_snapshot() is None  # never mapped
    toy.seen.clear()
    with _store(db, toy) as s:
        assert len(s.why("zebras", mode="semantic", limit=5)) == 5
    assert toy.seen == ["zebras"]  # every finding's vector read from the vectors file


def _erasable(db: Path) -> tuple[str, bytes, Toy]:
    """A secret and another finding, their vectors derived; the secret's key and stored vector."""
    toy = Toy()
    with _store(db, toy) as s:
        with s.session(scope="u") as session:
            key = session.learn({"text": "the vault code is 4711"}).key
            session.learn({"text": "lion"})
        s.derive_vectors()
    with sqlite3.connect(vectors_path(db)) as conn:
        (vec,) = conn.execute("SELECT vec FROM vectors WHERE key = ?", (key,)).fetchone()
    return key, vec, toy


def _holding(base: Path, needle: bytes) -> list[str]:
    return sorted(
        str(p) for p in base.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()
    )


def test_an_erase_removes_a_vectors_file_it_cannot_delete_the_vector_from(db: Path) -> None:
    """A vectors file whose header is damaged still holds the erased finding's vector in its pages;
    the erase cannot delete the row, so it removes the file whole (derived state) rather than finish
    with the vector left behind, and check finds nothing left to report."""
    key, vec, toy = _erasable(db)
    path = vectors_path(db)
    with path.open("r+b") as fh:
        fh.write(b"not SQLite at all")
    assert _holding(db.parent, vec) == [str(path)]
    with _store(db, toy) as s:
        with s.session(scope="cli") as session:
            session.erase(key, reason="asked")
        assert _holding(db.parent, vec) == []
        assert memory.check_store(s) == []
        assert [a.text for a in s.why("lion", mode="semantic")] == ["lion"]  # derived again


def test_an_erase_that_cannot_remove_the_vectors_file_fails_and_is_finished_later(db: Path) -> None:
    """The damaged vectors file cannot be removed either (immutable): the erase fails with
    ``memory_unwritable`` naming it, its commits are not yet tombstones, check reports the erase
    unfinished, and once the file can go a repair finishes it."""
    import shutil
    import subprocess

    key, vec, toy = _erasable(db)
    path = vectors_path(db)
    with path.open("r+b") as fh:
        fh.write(b"not SQLite at all")
    marked = shutil.which("chattr") and subprocess.run(["chattr", "+i", str(path)], check=False)
    if not marked or marked.returncode:
        pytest.skip("this file system cannot mark a file immutable")
    try:
        with _store(db, toy) as s:
            with s.session(scope="cli") as session, pytest.raises(memory.Unwritable) as err:
                session.erase(key, reason="asked")
            assert err.value.code == "memory_unwritable" and str(path) in str(err.value)
            assert "erase_incomplete" in {p.kind for p in memory.check_store(s)}
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    with _store(db, toy) as s:
        memory.repair_store(s, memory.check_store(s))
        assert memory.check_store(s) == []
    assert _holding(db.parent, vec) == []


_OTHER_SCHEMAS = {
    "a view by its name": [
        "CREATE VIEW vectors AS SELECT 'toy@1#text+tags/1' AS model, 'k' AS key, x'00' AS vec"
    ],
    "a table a NULL key fits": [
        "CREATE TABLE vectors (model TEXT, key TEXT, vec BLOB)",
        "INSERT INTO vectors VALUES ('toy@1#text+tags/1', NULL, x'0000')",
    ],
    "an index beside it": [
        "CREATE TABLE vectors (model TEXT NOT NULL, key TEXT NOT NULL, vec BLOB NOT NULL, "
        "PRIMARY KEY (model, key)) WITHOUT ROWID",
        "CREATE INDEX by_vec ON vectors (vec)",
    ],
}


@pytest.mark.parametrize("crafted", sorted(_OTHER_SCHEMAS))
def test_a_vectors_file_of_another_schema_is_reported_and_replaced(db: Path, crafted: str) -> None:
    """A vectors file holding a view by the table's name (every delete failed: repair raised a bare
    ``OperationalError``), a table a NULL key fits (no delete matched it: repair never converged), or
    another object beside the table: the search goes on in memory, check says ``vectors_damaged``,
    and repair replaces the file."""
    toy = Toy()
    with _store(db, toy) as s, s.session(scope="u") as session:
        key = session.learn({"text": "lion"}).key
    vectors_path(db).parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(vectors_path(db)) as conn:
        for statement in _OTHER_SCHEMAS[crafted]:
            conn.execute(statement)
    with _store(db, toy) as s:
        assert [a.text for a in s.why("lion", mode="semantic")] == ["lion"]
        problems = memory.check_store(s)
        assert [p.kind for p in problems] == ["vectors_damaged"]
        memory.repair_store(s, problems)
        assert memory.check_store(s) == []
    assert _vector_rows(db) == [(f"{toy.name}#text+tags/1", key)]


def test_a_trigger_planted_in_the_vectors_file_cannot_keep_an_erased_vector(db: Path) -> None:
    """A trigger planted in the vectors file copies each deleted row into another table of it: the
    erase's delete would have kept the erased finding's vector there. A file holding anything but
    its table is not used; the erase removes it whole."""
    key, vec, toy = _erasable(db)
    with sqlite3.connect(vectors_path(db)) as conn:
        conn.execute("CREATE TABLE kept (model, key, vec)")
        conn.execute(
            "CREATE TRIGGER keep BEFORE DELETE ON vectors "
            "BEGIN INSERT INTO kept VALUES (old.model, old.key, old.vec); END"
        )
    with _store(db, toy) as s:
        with s.session(scope="cli") as session:
            session.erase(key, reason="asked")
        assert memory.check_store(s) == []
    assert _holding(db.parent, vec) == []


def test_a_crafted_row_sorted_first_does_not_make_every_vector_of_its_model_malformed(db: Path) -> None:
    """Check takes a model's vector size from most of its rows, not from its first: a crafted short
    row under a key that sorts first is the one reported, the good vectors are not."""
    toy = Toy()
    with _store(db, toy) as s:
        with s.session(scope="u") as session:
            for word in ("lion", "tiger", "bear"):
                session.learn({"text": word})
        s.derive_vectors()
    with sqlite3.connect(vectors_path(db)) as conn:
        conn.execute("INSERT INTO vectors VALUES (?, ?, ?)", (f"{toy.name}#text+tags/1", "0" * 32, b"\x00<"))
    with _store(db, toy) as s:
        problems = memory.check_store(s)
        assert [(p.kind, "0" * 32 in p.message) for p in problems] == [("vector_stale", True)]


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_a_why_limit_up_to_the_largest_a_read_takes_answers_in_every_mode(db: Path, mode: str) -> None:
    """``limit`` may be up to 2**63 - 1 (what every read takes); a search looks further than its
    limit (a hybrid's words 25 times it), which overflowed SQLite's integer or ``islice``'s bound
    with a bare error. Every such limit answers with every match, synced and unsynced."""
    with _store(db, Toy()) as s:
        with s.session(scope="u") as session:
            session.learn({"text": "lion"})
            session.learn({"text": "tiger lion"})
        s.sync()
        with s.session(scope="u") as session:
            session.learn({"text": "bear lion"})
        for limit in (2**63 - 1, 2**62, 2**61, 2**59, 2**55 + 1):
            answers = s.why("lion", mode=mode, limit=limit)
            assert sorted(a.text for a in answers) == ["bear lion", "lion", "tiger lion"], limit


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_only_a_questions_first_distinct_words_are_matched(db: Path, mode: str) -> None:
    """A question's words are matched up to ``QUESTION_WORDS_MAX`` distinct ones (stop words aside,
    repeats counted once): each is stemmed, looked up and compared with every candidate, so a
    subject of a megabyte cost seconds per hundred candidates. A word past them matches nothing."""
    words_max = 256  # QUESTION_WORDS_MAX, as docs/MEMORY.md states it
    with _store(db, Toy()) as s:
        with s.session(scope="u") as session:
            session.learn({"text": "zebra"})
        filler = " ".join(f"w{i} the w{i}" for i in range(words_max - 1))
        first = s.why(f"{filler} zebra", mode=mode)
        assert [(a.text, a.matched) for a in first] == [("zebra", ("zebra",))]
        later = s.why(f"{filler} w0 w{words_max} zebra", mode=mode)
        assert all(a.matched == () for a in later)  # by meaning, perhaps; never by its words


def test_a_value_longer_than_any_vector_is_reported_and_never_read_whole(db: Path) -> None:
    """A live finding's stored vector replaced by a zero blob far longer than any vector (an
    embedder has at most 8,192 dims): check reports it (a zero blob of its model's only size passed
    as a zero vector), and neither check nor a search brings it into memory (check decoded 64 MB
    into a gigabyte of Python floats; a search read it whole to find it was of the wrong size)."""
    import json
    import os
    import subprocess
    import sys
    import textwrap

    from tests.conftest import ROOT

    toy = Toy()
    with _store(db, toy) as s:
        with s.session(scope="u") as session:
            key = session.learn({"text": "lion"}).key
        s.derive_vectors()
    with sqlite3.connect(vectors_path(db)) as conn:
        conn.execute("UPDATE vectors SET vec = zeroblob(64000000) WHERE key = ?", (key,))
    code = f"""
        import json, resource
        import memory
        from tests.memory.test_semantic import Toy

        def peak():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

        with memory.MemoryStore({str(db)!r}, embedder=Toy()) as s:
            s.recall()
            before = peak()
            problems = [p.kind for p in memory.check_store(s)]
            checked = peak() - before
            found = [a.text for a in s.why("lion", mode="semantic")]
            print(json.dumps([found, peak() - before, checked, problems]))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    found, searched, checked, problems = json.loads(done.stdout)
    assert found == ["lion"] and problems == ["vector_stale"]
    assert searched < 32_000_000 and checked < 32_000_000, done.stdout  # the blob is 64 MB


_SEARCH = """
import sys
import memory
from tests.memory.test_semantic import Toy
with memory.MemoryStore(sys.argv[1], embedder=Toy()) as s:
    print(len(s.why("zebras", mode="semantic", limit=3)))
"""


def test_a_fifo_where_the_vectors_files_rollback_journal_goes_never_hangs_a_search(db: Path) -> None:
    """SQLite opens a ``-journal`` it finds beside a database (a rollback journal a crash left) as it
    opens the file: a FIFO there hung every search by meaning (in ``open``, which no signal ends: the
    search runs in a child process here, bounded). The vectors file is then left alone, as a damaged
    one is, and the search goes on."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    with memory.MemoryStore(db) as s, s.session(scope="u") as session:
        for i in range(5):
            session.learn({"text": f"finding {i} about zebras"})
    with _store(db, Toy()) as s:
        s.derive_vectors()
    for snap in snapshots(vectors_path(db).parent):
        snap.unlink()  # the search opens the vectors file itself
    os.mkfifo(f"{vectors_path(db)}-journal")
    done = subprocess.run(
        [sys.executable, "-c", _SEARCH, str(db)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "3"), done.stderr
