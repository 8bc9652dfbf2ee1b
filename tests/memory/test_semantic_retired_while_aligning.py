"""A hybrid ``why`` embeds its answers' words after it has read them (the word alignment), which
with a remote embedder takes seconds. An erase, a forget or an update that returns meanwhile must
not be answered: the answers are looked at again after the alignment, as after the search."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

import memory
from tests._helpers.embedders import hashed_words
from tests.memory.conftest import Clock

SECRET = "the patient Ingrid Zorbalov is allergic to peanuts"
OTHER = "the clinic opens at nine on weekdays"


class _Meanwhile:
    """A deterministic embedder that, the first time it embeds a batch of single words (a hybrid
    search's alignment), runs ``meanwhile`` to its end first, on another thread."""

    name = "meanwhile@1"
    dims = 64
    word_alignment = 1.0
    min_similarity = 0.0

    def __init__(self) -> None:
        self.meanwhile: Callable[[], None] | None = None
        self.ran = False

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        single = len(texts) > 1 and all(" " not in t for t in texts)
        if single and self.meanwhile is not None and not self.ran:
            self.ran = True
            worker = threading.Thread(target=self.meanwhile)
            worker.start()
            worker.join(60)
            assert not worker.is_alive()
        return hashed_words(texts, self.dims)


@pytest.mark.parametrize("synced", [True, False], ids=["synced", "unsynced"])
@pytest.mark.parametrize("change", ["erase", "forget", "update"])
def test_a_finding_retired_while_its_words_are_aligned_is_not_answered(
    tmp_path: Path, change: str, synced: bool
) -> None:
    db = tmp_path / "history.db"
    with memory.MemoryStore(db, clock=Clock()) as store, store.session(scope="clinic") as s:
        secret = s.learn({"text": SECRET})
        s.learn({"text": OTHER})
        if synced:
            store.sync()
    done: list[str] = []

    def retire() -> None:
        with memory.MemoryStore(db, clock=Clock()) as other, other.session(scope="clinic") as s:
            if change == "erase":
                s.erase(secret.key, reason="asked to")
            elif change == "forget":
                s.forget(secret.key, reason="wrong")
            else:
                s.update(secret.memory_id, {"text": "the patient Ingrid Zorbalov has no allergy"})
        done.append(change)

    embedder = _Meanwhile()
    with memory.MemoryStore(db, embedder=embedder, clock=Clock()) as store:
        store.why("patient Ingrid allergic peanuts", mode="hybrid")  # vectors derived, words aligned
        embedder.meanwhile, embedder.ran = retire, False
        answers = store.why("patient Ingrid allergic peanuts", mode="hybrid")
    assert done == [change]  # it returned before the why did
    assert SECRET not in [a.text for a in answers]
    if change == "update":  # the new version is there to be answered by the next read
        with memory.MemoryStore(db, embedder=_Meanwhile(), clock=Clock()) as store:
            texts = [a.text for a in store.why("patient Ingrid allergic peanuts", mode="hybrid")]
        assert "the patient Ingrid Zorbalov has no allergy" in texts and SECRET not in texts
