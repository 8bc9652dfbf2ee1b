"""``why`` matches word forms, the same way on the history DB and on the unsynced files."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import memory
from memory import _db, _stem
from tests.memory.conftest import Clock

# Examples from Porter's 1980 paper, with the stems it gives them.
PORTER = {
    "caresses": "caress",
    "ponies": "poni",
    "ties": "ti",
    "cats": "cat",
    "feed": "feed",
    "agreed": "agre",
    "plastered": "plaster",
    "bled": "bled",
    "motoring": "motor",
    "sing": "sing",
    "conflated": "conflat",
    "troubled": "troubl",
    "sized": "size",
    "hopping": "hop",
    "tanned": "tan",
    "falling": "fall",
    "hissing": "hiss",
    "fizzed": "fizz",
    "failing": "fail",
    "filing": "file",
    "happy": "happi",
    "sky": "sky",
    "relational": "relat",
    "conditional": "condit",
    "rational": "ration",
    "digitizer": "digit",
    "conformabli": "conform",
    "radicalli": "radic",
    "differentli": "differ",
    "vileli": "vile",
    "analogousli": "analog",
    "vietnamization": "vietnam",
    "predication": "predic",
    "operator": "oper",
    "feudalism": "feudal",
    "decisiveness": "decis",
    "hopefulness": "hope",
    "callousness": "callous",
    "formaliti": "formal",
    "sensitiviti": "sensit",
    "sensibiliti": "sensibl",
    "triplicate": "triplic",
    "formative": "form",
    "formalize": "formal",
    "electriciti": "electr",
    "electrical": "electr",
    "hopeful": "hope",
    "goodness": "good",
    "revival": "reviv",
    "allowance": "allow",
    "inference": "infer",
    "airliner": "airlin",
    "gyroscopic": "gyroscop",
    "adjustable": "adjust",
    "defensible": "defens",
    "irritant": "irrit",
    "replacement": "replac",
    "adjustment": "adjust",
    "dependent": "depend",
    "adoption": "adopt",
    "homologous": "homolog",
    "communism": "commun",
    "activate": "activ",
    "angulariti": "angular",
    "effective": "effect",
    "bowdlerize": "bowdler",
    "probate": "probat",
    "rate": "rate",
    "cease": "ceas",
    "controll": "control",
    "roll": "roll",
    "generalizations": "gener",
    "oscillators": "oscil",
}


@pytest.mark.parametrize(("word", "stem"), sorted(PORTER.items()))
def test_the_stemmer_gives_the_papers_stems(word: str, stem: str) -> None:
    assert _stem.porter(word) == stem


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("fee", "fees"),
        ("cheap", "cheapest"),
        ("cheap", "cheaper"),
        ("late", "latest"),
        ("big", "biggest"),
        ("close", "closest"),
        ("connect", "connection"),
        ("connected", "connecting"),
        ("invest", "investment"),
        ("interest", "interesting"),
    ],
)
def test_word_forms_share_a_term(a: str, b: str) -> None:
    assert set(_stem.terms(a)) & set(_stem.terms(b))


@pytest.fixture
def store(db: Path, clock: Clock, journal_location: str) -> Iterator[memory.MemoryStore]:
    """A store over ``db`` whose journal is each backend in turn."""
    with memory.MemoryStore(db, journal=journal_location, clock=clock) as s:
        yield s


FINDINGS = [
    {"text": "swap fees are lower on weekends", "tags": ["costs"]},
    {"text": "gas is cheapest before the US open", "tags": ["gas"]},
    {"text": "the bridge connection drops at noon", "source": "monitoring"},
    {"text": "a cheaper route exists through the pool", "tags": ["routing"]},
    {"text": "nothing about money here"},
]


@pytest.mark.parametrize("synced", [False, True], ids=["unsynced files", "DB rows"])
def test_why_matches_word_forms_and_still_ranks_and_cites(store: memory.MemoryStore, synced: bool) -> None:
    with store.session(scope="desk") as s:
        learned = [s.learn(f) for f in FINDINGS]
    if synced:
        store.sync()

    def keys(subject: str) -> list[str]:
        return [a.finding.key for a in store.why(subject)]

    assert keys("fee") == [learned[0].key]
    assert set(keys("cheap")) == {learned[1].key, learned[3].key}
    assert keys("connected bridges") == [learned[2].key]
    assert keys("monitored") == [learned[2].key]  # the source's word forms too
    (best, other) = store.why("cheap gas")
    assert (best.finding.key, other.finding.key) == (learned[1].key, learned[3].key)
    assert best.matched == ("cheap", "gas") and other.matched == ("cheap",)
    assert best.finding.citation == learned[1].citation
    assert all(a.finding.synced is synced for a in store.why("fee cheap connected"))


def test_the_db_and_the_files_answer_alike(store: memory.MemoryStore) -> None:
    rng = random.Random(6)
    vocabulary = [
        "fee", "fees", "cheap", "cheaper", "cheapest", "connect", "connected", "connection", "run",
        "running", "runs", "late", "latest", "lateness", "swap", "swapped", "swapping", "pool", "pools",
    ]  # fmt: skip
    with store.session(scope="desk") as s:
        for i in range(60):
            s.learn(
                {"text": " ".join(rng.sample(vocabulary, 4)) + f" #{i}", "tags": rng.sample(vocabulary, 1)}
            )
    subjects = [" ".join(rng.sample(vocabulary, rng.randint(1, 3))) for _ in range(25)]
    before = [[(a.finding.key, a.score, a.matched) for a in store.why(q, limit=100)] for q in subjects]
    store.sync()
    after = [[(a.finding.key, a.score, a.matched) for a in store.why(q, limit=100)] for q in subjects]
    assert after == before
    assert all(before)


def test_a_history_db_of_schema_4_is_reindexed_by_stems(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for version in (1, 2, 3, 4):
        migration = _db._MIGRATIONS[version]
        if callable(migration):
            migration(conn)
        else:
            for statement in _db._split(migration):
                conn.execute(statement)
    conn.execute(
        "INSERT INTO findings (key, scope, flow, text, source, tags, learned_ms, run_id, stream, record_id,"
        " synced_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        ("0" * 32, "old", "f", "swap fees doubled", "f", '["costs"]', 5, "r", memory.STREAM, "1" * 16, 6),
    )
    conn.execute("PRAGMA user_version = 4")
    conn.close()
    with memory.MemoryStore(path) as store:
        assert [a.finding.key for a in store.why("fee")] == ["0" * 32]
        assert [a.finding.key for a in store.why("swapping cost")] == ["0" * 32]
    check = sqlite3.connect(path)
    names = {r[0] for r in check.execute("SELECT name FROM sqlite_master")}
    check.close()
    assert "findings_fts" not in names and "findings_stems" in names
