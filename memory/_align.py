"""Word alignment for ``why``'s ``hybrid`` ranking: how well each word of a question is met by some
word of a finding, by meaning.

A finding's vector is the mean of its tokens, so one close word among many is diluted: "what should
bruno not eat?" and "Bruno is lactose intolerant so no cheese or milk" share no word and only a
faint mean. Aligning word by word (each question word's best cosine with any word of the finding,
averaged over the question's words) keeps that signal, as soft term matching does for static word
embeddings. Words are embedded one at a time by the store's own embedder (so nothing new is
loaded), with the stop words ``why`` leaves out of a keyword search left out here too.

The average weighs each question word by how close its own vector is to the whole question's (their
cosine; a word pointing away counts 0): the words that carry what the question means count most,
and those the stop words miss ("should", "can", "whose", the "s" of "bruno's") little, whatever
list of stop words there is. The weights come from the vectors the search already has (the
question's, for its similarities; the words', for their alignment), so any embedder gets them.

Only the candidates a hybrid search already holds (at most the 50 most similar and the 50 best by
words) are aligned, and nothing is kept afterwards: the words of a finding are never remembered
past the search (an erased finding's words leave no trace in the process).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from memory._embed import EMBED_TEXT_MAX, Embedder, checked_vectors, embedder_shape
from memory._errors import EmbedderFailed

_WORD = re.compile(r"\w+", re.UNICODE)

WORDS_MAX = 256
"""Words of one text aligned at most (its first distinct ones; a text is read up to EMBED_TEXT_MAX)."""

BATCH = 4096
"""Words given to the embedder at once (a search's distinct words are embedded in batches of this
many, so a search over long findings never holds more than one batch's float64 check at a time)."""


def content_words(text: str, stop: frozenset[str]) -> list[str]:
    """The distinct words of ``text`` as written (case kept: the embedder may tell names by it),
    without the stop words (compared lower-cased), unless nothing else is left."""
    found = list(dict.fromkeys(_WORD.findall(text[:EMBED_TEXT_MAX])))
    kept = [w for w in found if w.lower() not in stop]
    return (kept or found)[:WORDS_MAX]


def alignments(
    embedder: Embedder, question: Sequence[str], texts: Sequence[Sequence[str]], asked: Any
) -> list[float]:
    """For each of ``texts`` (each a list of words), the mean over the ``question``'s words of the
    best cosine similarity with any of its words (0.0 when either has no words), each question word
    weighed by its cosine with ``asked``, the question's own vector (negatives as 0; all words alike
    when none is above 0). Every distinct word is embedded once, in batches of ``BATCH``, through
    ``checked_vectors`` (unit rows, the embedder's output checked, every batch against the one size
    its dims were read as, which ``asked`` must have too: ``EmbedderFailed`` otherwise)."""
    import numpy as np

    if not question or not any(texts):
        return [0.0] * len(texts)
    vocabulary = list(dict.fromkeys([*question, *(w for t in texts for w in t)]))
    at = {w: i for i, w in enumerate(vocabulary)}
    shape = embedder_shape(embedder)  # read once: a batch of another size is refused, not concatenated
    asked = np.asarray(asked, dtype=np.float32)
    if asked.shape != (shape[1],):
        raise EmbedderFailed(
            f"the embedder {shape[0]!r:.200} now has {shape[1]} dims; the question's vector had "
            f"{asked.shape[-1] if asked.ndim else 0}: close the store and open it again with the "
            "embedder as it is now"
        )
    batches = (vocabulary[i : i + BATCH] for i in range(0, len(vocabulary), BATCH))
    vectors: Any = np.concatenate([checked_vectors(embedder, batch, shape) for batch in batches])
    asked_words = vectors[[at[w] for w in question]]
    weights = np.maximum(asked_words @ asked, 0.0)
    if not weights.sum() > 0:  # no word points the question's way (or it has no vector): alike
        weights = np.ones(len(question), dtype=np.float32)
    weights = weights / weights.sum()
    out = []
    for words in texts:
        if not words:
            out.append(0.0)
            continue
        best = (asked_words @ vectors[[at[w] for w in words]].T).max(axis=1)
        out.append(float(best @ weights))
    return out
