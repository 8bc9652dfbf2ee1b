"""``why`` by meaning: the embedder interface, the offline default, derived vectors that never
outlive their findings, and hybrid ranking with every filter applied first."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import memory
from memory._embed import checked_vectors
from memory._vectors import vectors_path
from tests._helpers.embedders import hashed_words
from tests.memory.conftest import Clock

REPO = Path(__file__).resolve().parents[2]

ALLERGY = "The user is allergic to peanuts"
FINDINGS = [
    ALLERGY,
    "The user lives in Berlin",
    "Deploys happen on Fridays after the standup",
    "The billing service retries a failed charge three times",
]


@pytest.fixture(scope="module")
def default() -> memory.Embedder:
    return memory.default_embedder()


class Toy:
    """A deterministic embedder: each text's bytes hashed into ``dims`` buckets (words that are the
    same land together); it counts its calls and the texts it was given."""

    def __init__(self, name: str = "toy@1", dims: int = 32) -> None:
        self.name = name
        self.dims = dims
        self.seen: list[str] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.seen.extend(texts)
        return hashed_words(texts, self.dims)


def _store(db: Path, embedder: Any, clock: Clock | None = None) -> memory.MemoryStore:
    return memory.MemoryStore(db, embedder=embedder, clock=clock or Clock())


@pytest.fixture
def semantic(db: Path, default: memory.Embedder) -> Iterator[memory.MemoryStore]:
    with _store(db, default) as s:
        with s.session(scope="u") as session:
            for text in FINDINGS:
                session.learn({"text": text})
        yield s


def _keys(answers: Sequence[memory.Explained]) -> list[str]:
    return [a.text for a in answers]


# -- finding by meaning ---------------------------------------------------------------------------


def test_a_paraphrase_finds_the_finding_by_meaning_where_words_find_nothing(
    semantic: memory.MemoryStore,
) -> None:
    assert semantic.why("nuts", mode="keyword") == []
    assert _keys(semantic.why("nuts", limit=1)) == [ALLERGY]
    assert _keys(semantic.why("does alice have any allergies?", limit=1)) == [ALLERGY]
    assert _keys(semantic.why("what food should I avoid for this user?", limit=1)) == [ALLERGY]
    top = semantic.why("what food should I avoid for this user?", limit=1)[0]
    assert top.matched_by == "both" and top.matched == ("user",) and top.similarity is not None
    assert top.citation.run_id and top.as_json()["matchedBy"] == "both"


def test_each_answer_says_whether_words_meaning_or_both_matched(semantic: memory.MemoryStore) -> None:
    by_meaning = semantic.why("nuts", limit=1, mode="semantic")[0]
    assert (by_meaning.text, by_meaning.matched_by, by_meaning.matched) == (ALLERGY, "meaning", ())
    assert by_meaning.score == by_meaning.similarity
    by_words = semantic.why("standup", mode="keyword")[0]
    assert (by_words.matched_by, by_words.similarity) == ("words", None)


def test_the_default_mode_is_hybrid_with_an_embedder_and_keyword_without(db: Path) -> None:
    toy = Toy()
    with _store(db, toy) as s:
        with s.session(scope="u") as session:
            session.learn({"text": "alpha beta"})
        assert s.why("alpha")[0].similarity is not None  # hybrid: similarity is reported
    with memory.MemoryStore(db) as s:
        assert s.embedder is None
        assert s.why("alpha")[0].similarity is None
        for mode in ("semantic", "hybrid"):
            with pytest.raises(memory.EmbedderUnavailable) as err:
                s.why("alpha", mode=mode)
            assert err.value.code == "memory_embedder_unavailable" and "embedder=" in str(err.value)
        with pytest.raises(memory.ArgumentInvalid):
            s.why("alpha", mode="fuzzy")


def test_filters_apply_before_ranking_on_rows_and_unsynced_files(db: Path) -> None:
    toy = Toy()
    with _store(db, toy) as s:
        with s.session(scope="a", source="cli") as a:
            a.learn({"text": "red apple pie", "tags": ["food"], "metadata": {"user": "bo"}})
        with s.session(scope="a", source="web") as a:
            a.learn({"text": "apple", "tags": ["fruit"], "metadata": {"user": "al"}})
        with s.session(scope="b") as b:
            b.learn({"text": "apple"})
        for synced in (False, True):
            if synced:
                s.sync()
            assert _keys(s.why("apple", mode="semantic", scope="b")) == ["apple"]
            assert _keys(s.why("apple", mode="semantic", scope="a", tags=["food"])) == ["red apple pie"]
            assert _keys(s.why("apple", mode="semantic", meta={"user": "bo"})) == ["red apple pie"]
            assert _keys(s.why("apple", mode="hybrid", source="cli")) == ["red apple pie"]
            first = s.recall(scope="a", source="cli")[0].learned_ms
            assert _keys(s.why("apple", mode="semantic", scope="a", before_ms=first + 1)) == ["red apple pie"]
            assert {a.synced for a in s.why("apple", mode="semantic")} == {synced}


# -- vectors are derived, never truth --------------------------------------------------------------


def _vector_rows(db: Path) -> list[tuple[str, str]]:
    path = vectors_path(db)
    if not path.exists():
        return []
    with sqlite3.connect(path) as conn:
        return sorted(conn.execute("SELECT model, key FROM vectors"))


def test_forgotten_superseded_and_expired_findings_are_never_returned_and_forget_drops_the_vector(
    db: Path,
) -> None:
    toy = Toy()
    clock = Clock()
    with _store(db, toy, clock) as s:
        with s.session(scope="u") as session:
            gone = session.learn({"text": "secret plan"}).key
            old = session.learn({"text": "plan old"}).key
            new = session.learn({"text": "plan new"}, supersedes=old).key
            soon = session.learn({"text": "plan soon", "expiresMs": clock.now + 10_000}).key
            s.derive_vectors()
            assert {k for _, k in _vector_rows(db)} == {gone, new, soon}  # old retired before any search
            session.forget(gone, reason="asked")
        assert gone not in {k for _, k in _vector_rows(db)}
        clock.now += 100_000  # ``soon`` has expired
        for mode in ("semantic", "hybrid"):
            assert [a.key for a in s.why("secret plan", mode=mode, limit=50)] == [new]


def test_a_crafted_vector_cannot_bring_back_a_dead_finding(db: Path) -> None:
    """A vector row planted for a forgotten key (and the question's own vector planted for it) ranks
    nothing: only live findings are ever scored."""
    toy = Toy()
    with _store(db, toy) as s:
        with s.session(scope="u") as session:
            dead = session.learn({"text": "zebra"}).key
            session.learn({"text": "zebra lion tiger"})
            s.derive_vectors()
            session.forget(dead, reason="asked")
        s.sync()
        model = f"{toy.name}#text+tags/1"
        blob = checked_vectors(toy, ["zebra"])[0].astype("<f2").tobytes()  # the question's own
        with sqlite3.connect(vectors_path(db)) as conn:
            conn.execute("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", (model, dead, blob))
            conn.execute("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", (model, "0" * 32, blob))
        with _store(db, toy) as fresh:
            for mode in ("semantic", "hybrid"):
                assert [a.text for a in fresh.why("zebra", mode=mode, limit=10)] == ["zebra lion tiger"]
            problems = memory.check_store(fresh)
            stale = [p for p in problems if p.kind == "vector_stale"]
            assert {dead, "0" * 32} == {k for p in stale for k in (dead, "0" * 32) if k in p.message}
            actions = memory.repair_store(fresh, problems)
            assert any("deleted 2 vector" in a for a in actions)
            assert [p.kind for p in memory.check_store(fresh)] == []


def test_a_damaged_vector_is_derived_again_and_a_damaged_file_is_reported_and_replaced(db: Path) -> None:
    toy = Toy()
    with _store(db, toy) as s:
        with s.session(scope="u") as session:
            key = session.learn({"text": "lion"}).key
        s.derive_vectors()
    model = f"{toy.name}#text+tags/1"
    with sqlite3.connect(vectors_path(db)) as conn:  # NaNs in place of the vector
        conn.execute("UPDATE vectors SET vec = ? WHERE key = ?", (b"\xff\x7f" * toy.dims, key))
    toy.seen.clear()
    with _store(db, toy) as s:
        assert [a.text for a in s.why("lion", mode="semantic")] == ["lion"]
        assert "lion" in toy.seen  # derived again rather than trusted
    with sqlite3.connect(vectors_path(db)) as conn:
        assert conn.execute("SELECT vec FROM vectors WHERE model = ? AND key = ?", (model, key)).fetchone()[
            0
        ] != (b"\xff\x7f" * toy.dims)
    vectors_path(db).write_bytes(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        Path(f"{vectors_path(db)}{suffix}").unlink(missing_ok=True)
    with _store(db, toy) as s:
        assert [a.text for a in s.why("lion", mode="semantic")] == ["lion"]  # in memory only
        problems = memory.check_store(s)
        assert [p.kind for p in problems] == ["vectors_damaged"]
        memory.repair_store(s, problems)
        assert memory.check_store(s) == []
        assert _vector_rows(db) == [(model, key)]  # derived again by the repair


@pytest.mark.parametrize("suffix", ["", "-wal"])
def test_a_folder_in_the_vectors_files_place_is_searched_past_and_repaired(db: Path, suffix: str) -> None:
    """A folder where the vectors file (or its write-ahead log) belongs: the search goes on in
    memory, check reports it, and repair removes it (it raised IsADirectoryError) and derives again."""
    toy = Toy()
    with _store(db, toy) as s, s.session(scope="u") as session:
        key = session.learn({"text": "lion"}).key
    if suffix:
        vectors_path(db).parent.mkdir(parents=True)
        vectors_path(db).write_bytes(b"")
    planted = Path(f"{vectors_path(db)}{suffix}")
    planted.mkdir(parents=True)
    (planted / "inside").write_text("x")
    with _store(db, toy) as s:
        assert [a.text for a in s.why("lion", mode="semantic")] == ["lion"]  # in memory only
        problems = memory.check_store(s)
        assert [p.kind for p in problems] == ["vectors_damaged"]
        memory.repair_store(s, problems)
        assert memory.check_store(s) == [] and not planted.is_dir()
        assert _vector_rows(db) == [(f"{toy.name}#text+tags/1", key)]  # derived again by the repair
        assert memory.repair_store(s, memory.check_store(s)) == []  # nothing left for a second repair


def test_a_vectors_file_repair_cannot_remove_is_a_coded_error_naming_it(db: Path) -> None:
    """A folder in the vectors file's place holding an immutable file (which even root cannot
    remove): repair fails with ``memory_unwritable`` naming the path, not a bare OSError."""
    import shutil
    import subprocess

    toy = Toy()
    with _store(db, toy) as s, s.session(scope="u") as session:
        session.learn({"text": "lion"})
    planted = vectors_path(db)
    planted.mkdir(parents=True)
    (planted / "stuck").write_text("x")
    marked = shutil.which("chattr") and subprocess.run(["chattr", "+i", str(planted / "stuck")], check=False)
    if not marked or marked.returncode:
        pytest.skip("this file system cannot mark a file immutable")
    try:
        with _store(db, toy) as s:
            problems = memory.check_store(s)
            assert [p.kind for p in problems] == ["vectors_damaged"]
            with pytest.raises(memory.Unwritable) as err:
                memory.repair_store(s, problems)
            assert err.value.code == "memory_unwritable" and str(planted) in str(err.value)
    finally:
        subprocess.run(["chattr", "-i", str(planted / "stuck")], check=True)


def test_a_stored_vector_that_is_not_of_unit_length_is_never_trusted(db: Path) -> None:
    """A vector row of the right size and finite values, but scaled (a flipped exponent bit, a
    crafted row), would multiply its finding's similarity: it is reported and derived again."""
    toy = Toy()
    with _store(db, toy) as s:
        with s.session(scope="u") as session:
            session.learn({"text": "zebra"})
            other = session.learn({"text": "lion tiger bear"}).key
        s.derive_vectors()
    scaled = (checked_vectors(toy, ["zebra"])[0] * 400).astype("<f2").tobytes()  # the question, 400 times
    with sqlite3.connect(vectors_path(db)) as conn:
        conn.execute("UPDATE vectors SET vec = ? WHERE key = ?", (scaled, other))
    with _store(db, toy) as s:
        problems = memory.check_store(s)
        assert [p.kind for p in problems] == ["vector_stale"] and other in problems[0].message
        for mode in ("semantic", "hybrid"):
            answers = s.why("zebra", mode=mode, limit=5)
            assert answers[0].text == "zebra"
            assert all(a.similarity is not None and a.similarity <= 1.001 for a in answers)
        assert memory.check_store(s) == []  # derived again and kept
    with sqlite3.connect(vectors_path(db)) as conn:
        (blob,) = conn.execute("SELECT vec FROM vectors WHERE key = ?", (other,)).fetchone()
    assert blob != scaled


def test_a_link_in_the_vectors_file_place_is_never_followed(db: Path, tmp_path: Path) -> None:
    toy = Toy()
    target = tmp_path / "elsewhere.sqlite3"
    target.write_bytes(b"")
    with _store(db, toy) as s:
        with s.session(scope="u") as session:
            session.learn({"text": "lion"})
        vectors_path(db).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, vectors_path(db))
        assert [a.text for a in s.why("lion", mode="semantic")] == ["lion"]
    assert target.read_bytes() == b""


def test_vectors_are_kept_per_embedder_name(db: Path) -> None:
    one, two = Toy("toy@1"), Toy("toy@2", dims=16)
    with _store(db, one) as s:
        with s.session(scope="u") as session:
            key = session.learn({"text": "lion"}).key
        s.derive_vectors()
    with _store(db, two) as s:
        assert [a.key for a in s.why("lion", mode="semantic")] == [key]
    assert _vector_rows(db) == [("toy@1#text+tags/1", key), ("toy@2#text+tags/1", key)]
    one.seen.clear()
    with _store(db, one) as s:
        s.why("lion", mode="semantic")
    assert one.seen == ["lion"]  # the question only: the finding's vector was kept


def test_discard_vectors_erases_every_embedders_vector_of_a_key(db: Path) -> None:
    toy = Toy()
    with _store(db, toy) as s:
        with s.session(scope="u") as session:
            key = session.learn({"text": "lion"}).key
            other = session.learn({"text": "tiger"}).key
        s.derive_vectors()
    assert memory.discard_vectors(db, [key]) == 1
    assert [k for _, k in _vector_rows(db)] == [other]
    raw = vectors_path(db).read_bytes()
    assert bytes.fromhex(key[:8]) not in raw and key.encode() not in raw


# -- the embedder interface ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("returned", "what"),
    [
        (lambda texts: [[1.0, 0.0]] * len(texts), "shape"),
        (lambda texts: [[float("nan")] * 4] * len(texts), "NaN"),
        (lambda texts: [["a"] * 4] * len(texts), "not numbers"),
        (lambda texts: [[1.0] * 4] * (len(texts) + 1), "shape"),
    ],
)
def test_an_embedder_that_returns_garbage_fails_closed(db: Path, returned: Any, what: str) -> None:
    bad = memory.embedder_of(returned, name="bad@1", dims=4)
    with _store(db, bad) as s:
        with s.session(scope="u") as session:
            session.learn({"text": "lion"})
        with pytest.raises(memory.EmbedderFailed) as err:
            s.why("lion", mode="semantic")
        assert err.value.code == "memory_embedder_failed" and what in str(err.value)
    assert _vector_rows(db) == []


class _RaisesWhenRead:
    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("lazy tensor lost its device")


@pytest.mark.parametrize(
    "returned",
    [
        lambda texts: [[10**400, 0, 0, 0]] * len(texts),  # an int too large for any float
        lambda texts: _RaisesWhenRead(),  # raises while numpy reads it
        lambda texts: __import__("numpy").full((len(texts), 4), 1 + 1j),  # complex: never its real part
        lambda texts: [["1", "0", "0", "0"]] * len(texts),  # text that looks like numbers
        lambda texts: [[True, False, False, False]] * len(texts),
        lambda texts: ([1.0, 0.0, 0.0, 0.0] for _ in texts),  # a generator
    ],
)
def test_an_embedder_that_returns_what_is_not_real_numbers_fails_with_its_code(
    db: Path, returned: Any
) -> None:
    bad = memory.embedder_of(returned, name="bad@1", dims=4)
    with _store(db, bad) as s:
        with s.session(scope="u") as session:
            session.learn({"text": "lion"})
        with pytest.raises(memory.EmbedderFailed, match="not numbers") as err:
            s.why("lion", mode="semantic")
        assert err.value.code == "memory_embedder_failed"
    assert _vector_rows(db) == []


@pytest.mark.parametrize("size", [3e38, 1e300, 1e-30, 1e-300])
def test_a_vector_of_any_finite_size_is_scaled_to_unit_length(db: Path, size: float) -> None:
    """Huge or tiny but finite components are a direction like any other: never a zero vector
    (which would match nothing) and never an overflow."""

    def scaled(texts: list[str]) -> list[list[float]]:
        return [[size if "lion" in t else 0.0, 0.0 if "lion" in t else size, 0.0, 0.0] for t in texts]

    with _store(db, memory.embedder_of(scaled, name="scaled@1", dims=4)) as s:
        with s.session(scope="u") as session:
            session.learn({"text": "lion"})
            session.learn({"text": "zebra"})
        (answer,) = s.why("lion", mode="semantic")
        assert answer.text == "lion" and answer.similarity == pytest.approx(1.0, abs=0.01)


def test_semantic_answers_stop_at_the_embedders_similarity_floor(semantic: memory.MemoryStore) -> None:
    assert [a.text for a in semantic.why("nuts", mode="semantic")] == [ALLERGY]  # not the unrelated three
    assert all(a.similarity is not None and a.similarity > 0.1 for a in semantic.why("xylophone berlin"))


def test_an_embedder_that_raises_fails_closed_and_words_still_answer(db: Path) -> None:
    def boom(texts: list[str]) -> list[list[float]]:
        raise RuntimeError("model server down")

    with _store(db, memory.embedder_of(boom, name="boom@1", dims=4)) as s:
        with s.session(scope="u") as session:
            session.learn({"text": "lion"})
        with pytest.raises(memory.EmbedderFailed, match="model server down"):
            s.why("lion")
        assert [a.text for a in s.why("lion", mode="keyword")] == ["lion"]


def test_an_embedder_without_name_dims_or_embed_is_refused(db: Path) -> None:
    for bad in (object(), memory.embedder_of(lambda t: t, name="x", dims=2)):
        if isinstance(bad, memory.FunctionEmbedder):
            bad.dims = 0  # type: ignore[misc]
        with pytest.raises(memory.ArgumentInvalid):
            memory.MemoryStore(db, embedder=bad)
    with pytest.raises(memory.ArgumentInvalid):
        memory.embedder_of(lambda t: t, name="", dims=2)


def test_an_embedder_whose_name_or_dims_raise_is_refused_with_its_code(db: Path) -> None:
    class Lazy(Toy):
        @property
        def name(self) -> str:  # type: ignore[override]
            raise RuntimeError("model not loaded yet")

        @name.setter
        def name(self, value: str) -> None:
            pass

    with pytest.raises(memory.ArgumentInvalid, match="model not loaded yet") as err:
        memory.MemoryStore(db, embedder=Lazy())
    assert err.value.code == "memory_argument_invalid"


def test_an_embedder_renamed_or_resized_after_the_store_opened_fails_and_files_nothing(db: Path) -> None:
    """A model swapped in place (the same object, a new name or dims) would file its vectors under
    the old name, where every later search by the old model trusts them: it fails with its code."""
    toy = Toy()
    with _store(db, toy) as s:
        with s.session(scope="u") as session:
            session.learn({"text": "zebra"})
        assert [a.text for a in s.why("zebra", mode="semantic")] == ["zebra"]
        with s.session(scope="u") as session:
            session.learn({"text": "lion"})
        toy.name = "toy@2"  # another model now answers to the same object
        with pytest.raises(memory.EmbedderFailed, match="toy@2") as err:
            s.why("lion", mode="semantic")
        assert err.value.code == "memory_embedder_failed"
        toy.name, toy.dims = "toy@1", 16
        with pytest.raises(memory.EmbedderFailed, match="16 dims"):
            s.why("lion", mode="semantic")
    assert [m for m, _ in _vector_rows(db)] == ["toy@1#text+tags/1"]  # the zebra's, from before the swap


def test_hostile_text_is_embedded_within_bounds(semantic: memory.MemoryStore) -> None:
    huge = "peanut " * 140_000 + "\x00\udcff"  # just under why's TEXT_MAX_BYTES
    answers = semantic.why(huge, limit=1, mode="semantic")
    assert [a.text for a in answers] == [ALLERGY]
    assert semantic.why("   ", mode="semantic") == []


# -- offline, and loaded only when used -----------------------------------------------------------


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        timeout=120,
    )


def test_the_default_embedder_loads_and_embeds_without_opening_a_socket() -> None:
    done = _python(
        """
        import sys
        events = []
        def hook(event, args):
            if event.startswith("socket.") or event in ("urllib.Request", "http.client.connect"):
                events.append(event)
                raise PermissionError(f"no network in this test: {event}")
        sys.addaudithook(hook)
        import memory
        e = memory.default_embedder()
        v = e.embed(["The user is allergic to peanuts", "nuts"])
        assert v.shape == (2, 256), v.shape
        print("events", events, e.name)
        """,
        HF_HUB_OFFLINE="0",
    )
    assert done.returncode == 0, done.stderr
    assert "events [] wordllama-l2_supercat-256@" in done.stdout


def test_import_memory_and_a_keyword_why_load_no_model_or_numpy(db: Path) -> None:
    with memory.MemoryStore(db) as s, s.session(scope="u") as session:
        session.learn({"text": "lion"})
    done = _python(
        f"""
        import sys, memory
        s = memory.MemoryStore({str(db)!r})
        assert [a.text for a in s.why("lion")] == ["lion"]
        s.forget if False else None
        loaded = sorted(m for m in ("numpy", "wordllama", "tokenizers", "safetensors", "memory._vectors")
                        if m in sys.modules)
        print("loaded", loaded)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "loaded []" in done.stdout


def test_processes_deriving_vectors_at_once_agree(db: Path) -> None:
    with memory.MemoryStore(db) as s, s.session(scope="u") as session:
        for i in range(300):
            session.learn({"text": f"finding number {i} about lions"})
    code = f"""
        import memory
        from tests.memory.test_semantic import Toy
        with memory.MemoryStore({str(db)!r}, embedder=Toy()) as s:
            got = s.why("lions", mode="semantic", limit=300)
        print(len(got))
        """
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [e for _, e in outs]
    assert [o.strip() for o, _ in outs] == ["300"] * 4
    assert len(_vector_rows(db)) == 300


# -- a fresh process maps the vectors' snapshot -----------------------------------------------------


def _many(db: Path, n: int = 2_100) -> list[str]:
    with memory.MemoryStore(db) as s, s.session(scope="u") as session:
        return [session.learn({"text": f"finding {i} about zebras"}).key for i in range(n)]


def test_a_fresh_store_maps_the_snapshot_and_a_forget_deletes_it(db: Path) -> None:
    from memory._vectors import snapshots

    keys = _many(db)
    toy = Toy()
    with _store(db, toy) as s:
        s.derive_vectors()
    (snap,) = snapshots(vectors_path(db).parent)
    with sqlite3.connect(vectors_path(db)) as conn:  # the file's rows gone: only the snapshot holds them
        conn.execute("DELETE FROM vectors")
    toy.seen.clear()
    with _store(db, toy) as s:
        assert len(s.why("zebras", mode="semantic", limit=5)) == 5
    assert toy.seen == ["zebras"]  # nothing derived again: the snapshot answered
    with _store(db, toy) as s, s.session(scope="u") as session:
        session.forget(keys[0], reason="gone")
    assert snapshots(vectors_path(db).parent) == [] and not snap.exists()


def test_a_snapshot_never_writes_back_a_vector_another_store_erased(db: Path) -> None:
    """A store holds vectors in memory; another store (a process, a host's sync) erases one of them.
    When the first later derives many vectors and keeps a snapshot, the erased one is not in it."""
    import numpy as np

    from memory._vectors import snapshots

    _many(db)
    with memory.MemoryStore(db) as s, s.session(scope="u") as session:
        secret = session.learn({"text": "the vault code is 4711"}).key
    toy = Toy()
    with _store(db, toy) as holder:
        holder.derive_vectors()  # every vector read or derived, the secret's too
        with memory.MemoryStore(db) as other:
            with other.session(scope="u") as session:
                session.erase(secret, reason="asked")
            assert snapshots(vectors_path(db).parent) == []
            with other.session(scope="v") as session:
                for i in range(2_100):
                    session.learn({"text": f"note {i} about lions"})
        holder.derive_vectors()  # many derived at once: a snapshot is written
        (snap,) = snapshots(vectors_path(db).parent)
        held = set(np.load(snap, allow_pickle=False)["key"].tolist())
        assert len(held) > 4_000 and secret.encode() not in held
    with _store(db, toy) as fresh:
        assert "4711" not in {a.text for a in fresh.why("vault code 4711", mode="semantic", limit=50)}
    assert secret not in {k for _, k in _vector_rows(db)}


class _ErasesWhileEmbedding(Toy):
    """A toy embedder that, the first time it is asked to embed ``trigger``, has another store (as
    another process would) erase ``secret`` first (or forget it, or update it): a retirement racing
    a search by meaning."""

    def __init__(self, db: Path, secret: str, trigger: str, act: str = "erase") -> None:
        super().__init__()
        self.db, self.secret, self.trigger, self.act, self.armed = db, secret, trigger, act, True

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.armed and any(self.trigger in t for t in texts):
            self.armed = False
            with memory.MemoryStore(self.db) as other, other.session(scope="u") as session:
                if self.act == "erase":
                    session.erase(self.secret, reason="asked")
                elif self.act == "forget":
                    session.forget(self.secret, reason="asked")
                else:
                    session.update(self.secret, {"text": "lions sleep"})
        return super().embed(texts)


@pytest.mark.parametrize("synced", [False, True])
@pytest.mark.parametrize("how", ["why", "derive_vectors"])
def test_a_vector_derived_while_another_store_erases_its_finding_is_not_kept(
    db: Path, synced: bool, how: str
) -> None:
    """The finding's text was read, the erase then deleted its row, file and vectors, and only then
    was its vector stored: the store sees the finding gone and deletes that vector again."""
    with memory.MemoryStore(db) as s, s.session(scope="u") as session:
        secret = session.learn({"text": "the vault code is 4711"}).key
        session.learn({"text": "lions roar"})
    if synced:
        with memory.MemoryStore(db) as s:
            s.sync()
    racing = _ErasesWhileEmbedding(db, secret, "4711")
    with _store(db, racing) as s:
        if how == "why":
            assert s.why("vault code", mode="semantic") == []
        else:
            s.derive_vectors()
        assert not racing.armed  # the erase ran while the secret was being embedded
        assert secret not in {k for _, k in _vector_rows(db)}
        assert [p.kind for p in memory.check_store(s)] == []
        assert [a.text for a in s.why("lions roar", mode="semantic")] == ["lions roar"]


def test_an_unsynced_finding_erased_during_a_search_by_meaning_is_not_returned(db: Path) -> None:
    """Its vector was held already; the erase ends while the question is embedded, after the
    candidates were listed: the answer is read again, and its file is gone."""
    with memory.MemoryStore(db) as s, s.session(scope="u") as session:
        secret = session.learn({"text": "the vault code is 4711"}).key
    racing = _ErasesWhileEmbedding(db, secret, "vault code")
    racing.armed = False
    with _store(db, racing) as s:
        s.derive_vectors()
        racing.armed = True
        assert s.why("vault code", mode="semantic") == []
        assert not racing.armed


@pytest.mark.parametrize("synced", [False, True])
@pytest.mark.parametrize("act", ["forget", "update"])
@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_a_finding_retired_during_a_search_by_meaning_is_not_returned(
    db: Path, synced: bool, act: str, mode: str
) -> None:
    """Its vector was held already; another store forgets (or supersedes) it while the question is
    embedded, after the candidates were listed: the retirements are looked at again."""
    with memory.MemoryStore(db) as s, s.session(scope="u") as session:
        secret = session.learn({"text": "the vault code is 4711"}).key
    if synced:
        with memory.MemoryStore(db) as s:
            s.sync()
    racing = _ErasesWhileEmbedding(db, secret, "vault code", act)
    racing.armed = False
    with _store(db, racing) as s:
        s.derive_vectors()
        racing.armed = True
        assert not [a.text for a in s.why("vault code", mode=mode) if "4711" in a.text]
        assert not racing.armed


def _snapshotted(db: Path) -> tuple[list[str], Toy, Path]:
    """Many findings, their vectors derived, and the snapshot that wrote."""
    from memory._vectors import snapshots

    keys = _many(db)
    toy = Toy()
    with _store(db, toy) as s:
        s.derive_vectors()
    (snap,) = snapshots(vectors_path(db).parent)
    return keys, toy, snap


def test_a_crafted_snapshot_row_is_derived_again(db: Path) -> None:
    import numpy as np

    keys, toy, snap = _snapshotted(db)
    block = np.load(snap, allow_pickle=False)
    block["vec"][0] = np.nan
    block["key"][1] = b"../../etc/passwd" + b"x" * 16
    block["vec"][2] = block["vec"][2] * 300  # finite, of the right size, not of unit length
    np.save(snap, block, allow_pickle=False)
    with sqlite3.connect(vectors_path(db)) as conn:
        conn.execute("DELETE FROM vectors")
    toy.seen.clear()
    with _store(db, toy) as s:
        s.why("zebras", mode="semantic")
    assert len(toy.seen) == 4 and "zebras" in toy.seen  # the question and the three bad rows' findings
    assert {t for t in toy.seen if t != "zebras"} <= {f"finding {i} about zebras" for i in range(len(keys))}


@pytest.mark.parametrize("shape", ["rows of two", "one row, no axis"])
def test_a_snapshot_of_another_shape_is_not_used(db: Path, shape: str) -> None:
    """A snapshot of the right record type but not one row per key (a 2-D or 0-D array) is passed
    over: the vectors are derived again, and the search never fails on it."""
    import numpy as np

    keys, toy, snap = _snapshotted(db)
    block = np.load(snap, allow_pickle=False)
    np.save(snap, np.stack([block[:1000], block[1000:2000]], axis=1) if shape == "rows of two" else block[0])
    with sqlite3.connect(vectors_path(db)) as conn:
        conn.execute("DELETE FROM vectors")
    toy.seen.clear()
    with _store(db, toy) as s:
        assert len(s.why("zebras", mode="semantic", limit=5)) == 5
    assert len(toy.seen) == len(keys) + 1  # every vector derived again, and the question


def test_a_store_that_found_no_vectors_still_drops_those_another_store_derived_since(db: Path) -> None:
    """A store with no vectors open skips the look for a vectors file while the cache folder is
    unchanged since one found none: a file another store derives afterwards changes the folder,
    so the next forget drops its vector."""
    import time

    from memory._files import RACY_S

    with memory.MemoryStore(db, embedder=None) as plain, plain.session(scope="u") as session:
        first = session.learn({"text": "forgotten before any vector"}).key
        second = session.learn({"text": "forgotten after the vectors were derived"}).key
        (db.parent / "flows-cache").mkdir(exist_ok=True)
        time.sleep(RACY_S * 2)  # the cache folder settles: its look can be trusted
        session.forget(first, reason="asked")  # looks, finds nothing, remembers the folder's stamp
        with _store(db, Toy()) as other:
            other.derive_vectors()
        assert second in {k for _, k in _vector_rows(db)}
        session.forget(second, reason="asked")
    assert second not in {k for _, k in _vector_rows(db)}


def test_the_vectors_snapshot_is_written_through_no_link_planted_beside_it(tmp_path: Path) -> None:
    """Deriving many vectors at once keeps a snapshot beside the vectors file, written through a
    temporary file. A link planted where a temporary file could be named (the name a process would
    once have used, from its pid) is never written through: what it points at stays as it was."""
    from memory._vectors import SNAPSHOT_PREFIX, model_of, vectors_path

    db = tmp_path / "store" / "history.db"
    victim = tmp_path / "victim"
    victim.write_bytes(b"not the store's")
    toy = Toy("toy-snapshot@1")
    with _store(db, toy) as store, store.session(scope="many") as session:
        for i in range(2_100):
            session.learn({"text": f"finding number {i} about fees"})
        folder = vectors_path(db).parent
        folder.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(model_of(toy).encode()).hexdigest()[:16]
        snapshot = folder / f"{SNAPSHOT_PREFIX}{digest}.npy"
        (folder / f".{snapshot.name}.{os.getpid()}.tmp").symlink_to(victim)
        assert store.derive_vectors("many") >= 2_000
    assert victim.read_bytes() == b"not the store's"
    made = [p for p in folder.iterdir() if p.name.endswith(".npy")]
    assert made and all(p.is_file() and not p.is_symlink() for p in made)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in made)
    assert not [p for p in folder.iterdir() if p.name.startswith(".tmp-")]


def test_an_embedders_min_similarity_must_be_a_number_from_minus_one_to_one(db: Path) -> None:
    import numpy as np

    class Floored(Toy):
        def __init__(self, floor: object) -> None:
            super().__init__()
            self.min_similarity = floor

    for bad in (float("nan"), float("inf"), 1.5, -2, "0.5", True, None, [0.1]):
        with pytest.raises(memory.ArgumentInvalid, match="min_similarity"):
            memory.MemoryStore(db, embedder=Floored(bad))

    class Raises(Toy):
        @property
        def min_similarity(self) -> float:
            raise RuntimeError("not loaded")

    with pytest.raises(memory.ArgumentInvalid, match="min_similarity raised RuntimeError"):
        memory.MemoryStore(db, embedder=Raises())
    # a numpy number is a number: it is the floor (it was read as 0.0)
    floored = Floored(np.float32(0.99))
    with _store(db, floored) as s:
        with s.session(scope="u") as session:
            session.learn({"text": "lion tiger"})
            session.learn({"text": "lion"})
        assert [a.text for a in s.why("lion", mode="semantic")] == ["lion"]
        floored.min_similarity = float("nan")  # changed after the store opened: refused at the read
        with pytest.raises(memory.ArgumentInvalid, match="min_similarity"):
            s.why("lion", mode="semantic")


def test_a_zero_vector_is_similar_to_nothing_whatever_the_floor(db: Path) -> None:
    """An embedder that finds no meaning in a text returns a zero vector: it has no direction, so
    it is never a match by meaning, even under a floor of -1 (it scored 0 there and outranked every
    finding of negative similarity; a question with no meaning matched every finding)."""

    class Blank:
        name, dims, min_similarity = "blank@1", 3, -1.0

        def embed(self, texts: list[str]) -> list[list[float]]:
            vectors = {"blank": [0.0, 0.0, 0.0], "lion": [1.0, 0.0, 0.0], "zebra": [-1.0, 1.0, 0.0]}
            return [next(v for w, v in vectors.items() if w in t) for t in texts]

    with _store(db, Blank()) as s:
        with s.session(scope="u") as session:
            session.learn({"text": "blank page"})
            session.learn({"text": "lion"})
            session.learn({"text": "zebra"})
        assert [(a.text, a.similarity) for a in s.why("lion", mode="semantic")] == [
            ("lion", pytest.approx(1.0, abs=0.01)),
            ("zebra", pytest.approx(-0.707, abs=0.01)),
        ]
        assert s.why("blank question", mode="semantic") == []
        # by words it is still found, with a similarity of 0
        (by_words,) = s.why("blank", mode="hybrid")
        assert (by_words.text, by_words.matched_by, by_words.similarity) == ("blank page", "words", 0.0)
