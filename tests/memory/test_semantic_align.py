"""``why``'s hybrid ranking aligns the question's words with each candidate's (``memory._align``):
a finding that shares no word with the question but answers it word by word ranks first, an
embedder decides by its ``word_alignment`` whether its words are embedded at all, and nothing of a
finding's words is kept after the search."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest

import memory
from memory._embed import EMBED_TEXT_MAX
from tests._helpers.embedders import hashed_words
from tests.memory.conftest import Clock

PRIYA = [
    "Priya keeps a rescue greyhound called Biscuit",
    "Priya leads the accessibility audit for the checkout",
    "Priya is learning to play the violin",
    "Priya flies to Toronto for the partner summit in June",
    "Priya avoids caffeine after midday",
    "Priya's standup is at half past nine",
    "Priya has a nut allergy",
    "Priya prefers written agendas before any meeting",
]


class Counting:
    """A deterministic embedder (each word hashed into a bucket) that records the texts it embeds."""

    def __init__(self, word_alignment: object = None) -> None:
        self.name = "counting@1"
        self.dims = 64
        self.seen: list[str] = []
        if word_alignment is not None:
            self.word_alignment = word_alignment

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.seen.extend(texts)
        return hashed_words(texts, self.dims)


def test_a_finding_that_answers_the_question_word_by_word_ranks_first(db: Path) -> None:
    """"Toronto" answers "canada" though the two share no word: the mean of the finding's tokens
    dilutes that one close word among nine, and the default embedder's hybrid ranking put a
    finding about caffeine first; aligned word by word, the trip ranks first."""
    with memory.MemoryStore(db, embedder=memory.default_embedder(), clock=Clock()) as store:
        with store.session(scope="u") as s:
            for text in PRIYA:
                s.learn({"text": text})
        (best, *_) = store.why("is priya travelling to canada?", mode="hybrid")
        assert best.text == "Priya flies to Toronto for the partner summit in June"
        assert best.matched_by == "both"  # "priya" is a shared word; the similarity is the cosine
        assert best.similarity is not None and best.score > best.similarity
        # semantic ranks by the cosine alone, unchanged
        for answer in store.why("is priya travelling to canada?", mode="semantic"):
            assert answer.score == answer.similarity


def test_an_embedder_without_word_alignment_embeds_no_single_word(db: Path) -> None:
    embedder = Counting()
    with memory.MemoryStore(db, embedder=embedder, clock=Clock()) as store:
        with store.session(scope="u") as s:
            s.learn({"text": "lion tiger bear"})
            s.learn({"text": "zebra"})
        store.derive_vectors()
        embedder.seen.clear()
        answers = store.why("lion zebra", mode="hybrid")
        assert {a.text for a in answers} == {"lion tiger bear", "zebra"}
        assert embedder.seen == ["lion zebra"]  # the question; the findings' vectors were derived before
        assert all(a.score <= a.similarity + 0.1 + 1e-6 for a in answers if a.similarity is not None)


def test_an_embedder_with_word_alignment_embeds_the_candidates_words_each_search(db: Path) -> None:
    """The words are embedded in one batch per search, the question's and the candidates' without
    the stop words, and none is remembered: the next search embeds them again."""
    embedder = Counting(word_alignment=0.5)
    with memory.MemoryStore(db, embedder=embedder, clock=Clock()) as store:
        with store.session(scope="u") as s:
            s.learn({"text": "The lion sleeps", "tags": ["Zoo"]})
        store.derive_vectors()
        for _ in range(2):
            embedder.seen.clear()
            (answer,) = store.why("where is the lion", mode="hybrid")
            assert embedder.seen[0] == "where is the lion"
            # "The", "where", "is" are stop words; each word once, in one batch
            assert sorted(embedder.seen[1:]) == ["Zoo", "lion", "sleeps"]
            # each word's own vector matches exactly: "lion" aligns with "lion" (cosine 1), weighed 0.5
            assert answer.score == pytest.approx(answer.similarity + 0.1 + 0.5, abs=1e-3)
        assert store.why("where is the lion", mode="semantic")[0].score == pytest.approx(answer.similarity)


def test_an_embedders_word_alignment_must_be_a_number_from_zero_to_one(db: Path) -> None:
    for bad in (float("nan"), float("inf"), 1.5, -0.1, "0.5", True, [0.1]):
        with pytest.raises(memory.ArgumentInvalid, match="word_alignment"):
            memory.MemoryStore(db, embedder=Counting(word_alignment=bad))

    class Raises(Counting):
        @property
        def word_alignment(self) -> float:
            raise RuntimeError("not loaded")

        @word_alignment.setter
        def word_alignment(self, value: object) -> None:
            pass

    with pytest.raises(memory.ArgumentInvalid, match="word_alignment raised RuntimeError"):
        memory.MemoryStore(db, embedder=Raises())
    changing = Counting(word_alignment=1.0)
    with memory.MemoryStore(db, embedder=changing, clock=Clock()) as store:
        with store.session(scope="u") as s:
            s.learn({"text": "lion"})
        changing.word_alignment = 2.0  # changed after the store opened: refused at the read
        with pytest.raises(memory.ArgumentInvalid, match="word_alignment"):
            store.why("lion", mode="hybrid")
        assert [a.text for a in store.why("lion", mode="semantic")] == ["lion"]  # not read there


def test_a_long_finding_is_aligned_by_its_first_words_in_bounded_batches(db: Path) -> None:
    from memory._align import BATCH, WORDS_MAX

    embedder = Counting(word_alignment=1.0)
    batches: list[int] = []
    embed = embedder.embed

    def counted(texts: Sequence[str]) -> list[list[float]]:
        batches.append(len(texts))
        return embed(texts)

    embedder.embed = counted  # type: ignore[method-assign]
    with memory.MemoryStore(db, embedder=embedder, clock=Clock()) as store:
        with store.session(scope="u") as s:
            for n in range(40):  # 40 findings of 2,000 distinct words each: 80,000 words in all
                s.learn({"text": " ".join(f"w{n}x{i}" for i in range(2_000))})
        store.derive_vectors()
        batches.clear()
        embedder.seen.clear()
        assert len(store.why("w0x1", mode="hybrid", limit=40)) == 40
    words = embedder.seen[1:]
    assert len(words) == len(set(words)) <= 40 * WORDS_MAX + 1
    assert "w0x1" in words and "w0x300" not in words  # each finding's first 256 words
    assert max(batches[1:]) <= BATCH


def test_the_default_embedder_gives_each_text_the_mean_of_its_tokens_rows() -> None:
    """The default embedder sums every text's rows at once; each vector is still its own tokens'
    mean, scaled to unit length (a text of no token: zeros), in the texts' order."""
    import numpy as np

    embedder = memory.default_embedder()
    texts = ["", "Priya", " ", "is priya travelling to canada?", "x" * 20_000, "caffeine", "", "ok"]
    got = np.asarray(embedder.embed(texts))
    table, tokenizer = embedder._table, embedder._tokenizer  # type: ignore[attr-defined]
    for text, vector in zip(texts, got, strict=True):
        ids = tokenizer.encode(text[:EMBED_TEXT_MAX], add_special_tokens=False).ids
        if not ids:
            assert not vector.any()
            continue
        mean = table[np.asarray(ids)].mean(axis=0)
        assert np.allclose(vector, mean / np.linalg.norm(mean), atol=1e-6)
    assert np.asarray(embedder.embed([])).shape == (0, 256)


class Axes:
    """A deterministic embedder of known word vectors: a text's vector is the sum of its words'
    (as a mean-pooling model's is, up to its length), so a heavy word sets the text's direction.
    "kitten" is heavy and along the first axis; "please" light and along the third; "cat" close
    to "kitten" (cosine 0.8); "biscuits" heavy and along the fourth; any other word has no vector."""

    name = "axes@1"
    dims = 4
    word_alignment = 1.0
    WORDS: ClassVar[dict[str, tuple[float, ...]]] = {
        "kitten": (10.0, 0.0, 0.0, 0.0),
        "please": (0.0, 0.0, 1.0, 0.0),
        "cat": (0.8, 0.6, 0.0, 0.0),
        "biscuits": (0.0, 0.0, 0.0, 10.0),
    }

    def __init__(self) -> None:
        self.seen: list[str] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.seen.extend(texts)
        out = []
        for t in texts:
            rows = [self.WORDS.get(w.lower(), (0.0,) * 4) for w in t.split()]
            out.append([sum(column) for column in zip(*rows, strict=True)] if rows else [0.0] * 4)
        return out


def test_a_question_word_far_from_the_questions_meaning_counts_little_in_the_alignment(db: Path) -> None:
    """The alignment weighs each question word by its cosine with the whole question's vector.
    "kitten please": "please" is light, nearly orthogonal to the question (cosine 0.1), "kitten"
    carries it (0.995). "please stand by" shares "please" (a keyword match and a perfect alignment
    of that word) and is a little more similar; "cat biscuits" answers "kitten" (0.8) but shares
    no word. Averaged alike, the two words put "please stand by" first (0.20 + 0.5 against
    0.08 + 0.4); weighed by the question's meaning, "cat biscuits" is first (0.08 + 0.73 against
    0.20 + 0.09). The question's vector is the one its similarities were ranked by: it is embedded
    once per search."""
    embedder = Axes()
    with memory.MemoryStore(db, embedder=embedder, clock=Clock()) as store:
        with store.session(scope="u") as s:
            s.learn({"text": "please stand by"})
            s.learn({"text": "cat biscuits"})
        store.derive_vectors()
        embedder.seen.clear()
        hybrid = store.why("kitten please", mode="hybrid")
        assert [a.text for a in hybrid] == ["cat biscuits", "please stand by"]
        assert embedder.seen.count("kitten please") == 1
        best, other = hybrid
        # "cat" meets "kitten" at 0.8, weighed 10/11; "please stand by": its words, and "please" at 1/11
        assert best.score - best.similarity == pytest.approx(0.8 * 10 / 11, abs=1e-3)
        assert other.score - other.similarity == pytest.approx(0.1 + 1 / 11, abs=1e-3)
        # semantic ranks by the cosine alone, unchanged
        semantic = store.why("kitten please", mode="semantic")
        assert [a.text for a in semantic] == ["please stand by", "cat biscuits"]
