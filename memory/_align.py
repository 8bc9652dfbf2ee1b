"""Word alignment for ``why``'s ``hybrid`` ranking: how well each word of a question is met by some
word of a finding, by meaning.

A finding's vector is the mean of its tokens, so one close word among many is diluted: "what should
bruno not eat?" and "Bruno is lactose intolerant so no cheese or milk" share no word and only a
faint mean. Aligning word by word (each question word's best cosine with any word of the finding,
averaged over the question's words) keeps that signal, as soft term matching does for static word
embeddings. Words are embedded one at a time by the store's own embedder (so nothing new is
loaded), with the stop words ``why`` leaves out of a keyword search left out here too.

Only the candidates a hybrid search already holds (at most the 50 most similar and the 50 best by
words) are aligned, and nothing is kept afterwards: the words of a finding are never remembered
past the search (an erased finding's words leave no trace in the process).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from memory._embed import EMBED_TEXT_MAX, Embedder, checked_vectors, embedder_shape

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


def alignments(embedder: Embedder, question: Sequence[str], texts: Sequence[Sequence[str]]) -> list[float]:
    """For each of ``texts`` (each a list of words), the mean over the ``question``'s words of the
    best cosine similarity with any of its words (0.0 when either has no words). Every distinct word
    is embedded once, in batches of ``BATCH``, through ``checked_vectors`` (unit rows, the embedder's
    output checked, every batch against the one size its dims were read as)."""
    import numpy as np

    if not question or not any(texts):
        return [0.0] * len(texts)
    vocabulary = list(dict.fromkeys([*question, *(w for t in texts for w in t)]))
    at = {w: i for i, w in enumerate(vocabulary)}
    shape = embedder_shape(embedder)  # read once: a batch of another size is refused, not concatenated
    batches = (vocabulary[i : i + BATCH] for i in range(0, len(vocabulary), BATCH))
    vectors: Any = np.concatenate([checked_vectors(embedder, batch, shape) for batch in batches])
    asked = vectors[[at[w] for w in question]]
    out = []
    for words in texts:
        if not words:
            out.append(0.0)
            continue
        best = (asked @ vectors[[at[w] for w in words]].T).max(axis=1)
        out.append(float(best.mean()))
    return out
