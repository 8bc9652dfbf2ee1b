"""Word forms for ``why``: the Porter stemmer (M. F. Porter, "An algorithm for suffix stripping",
Program 14(3), 1980), plus one rule of ours for comparatives and superlatives.

Why this, and why here: ``why`` must match word forms the same way on the history DB (FTS5) and on
the unsynced files (a Python index). SQLite's own ``porter`` tokenizer covers only the DB, and the
core may depend on nothing beyond orjson, portalocker and typing-extensions, so no stemming library
(NLTK, PyStemmer, snowballstemmer) can be used by ``import memory``. The stems are therefore computed
here, once, and stored in the DB's FTS index as they are in the file index: both sides see exactly
the same terms. Porter's algorithm is small, deterministic and well understood; this is a fresh
implementation of the steps as the paper gives them (step 2's ``abli`` rule as in the paper).

Porter conflates ``fees``/``fee``, ``running``/``run``, ``connection``/``connected``, but leaves
``cheapest`` whole. So a word ending in ``est`` or ``er`` whose remainder has measure 1 (one
vowel-consonant group: ``cheap``, ``late``, ``big``) gives a second term, the remainder tidied as
step 1b tidies (``lat`` → ``late``, ``bigg`` → ``big``) and stemmed: ``cheapest`` and ``cheaper``
both also index ``cheap``. A word's terms are its stem and, when the rule applies, that second term.
"""

from __future__ import annotations

import functools

_VOWELS = frozenset("aeiou")


def _consonants(word: str) -> list[bool]:
    """Whether each letter of ``word`` is a consonant in Porter's sense, in one pass.

    A ``y`` is a consonant at the start or after a vowel, so a run of ``y`` alternates. Each flag
    depends only on the one before it; computing them left to right keeps this linear in the word
    (a recursive check per letter went one level deeper per preceding ``y`` and was quadratic).
    """
    flags: list[bool] = []
    for ch in word:
        if ch in _VOWELS:
            flags.append(False)
        elif ch == "y":
            flags.append(not flags or not flags[-1])
        else:
            flags.append(True)
    return flags


def measure(stem: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``stem`` ([C](VC)^m[V])."""
    m = 0
    previous_vowel = False
    for consonant in _consonants(stem):
        if consonant and previous_vowel:
            m += 1
        previous_vowel = not consonant
    return m


def _has_vowel(stem: str) -> bool:
    return not all(_consonants(stem))


def _double_consonant(stem: str) -> bool:
    return len(stem) >= 2 and stem[-1] == stem[-2] and _consonants(stem)[-1]


def _cvc(stem: str) -> bool:
    """Porter's *o: the stem ends consonant-vowel-consonant, the last not w, x or y."""
    if len(stem) < 3 or stem[-1] in "wxy":
        return False
    flags = _consonants(stem)
    return flags[-3] and not flags[-2] and flags[-1]


def _tidy(stem: str) -> str:
    """What step 1b does after removing ``ed`` or ``ing``."""
    if stem.endswith(("at", "bl", "iz")):
        return stem + "e"
    if _double_consonant(stem) and stem[-1] not in "lsz":
        return stem[:-1]
    if measure(stem) == 1 and _cvc(stem):
        return stem + "e"
    return stem


def _step1ab(w: str) -> str:
    if w.endswith("sses") or w.endswith("ies"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    if w.endswith("eed"):
        if measure(w[:-3]) > 0:
            w = w[:-1]
    elif w.endswith("ed") and _has_vowel(w[:-2]):
        w = _tidy(w[:-2])
    elif w.endswith("ing") and _has_vowel(w[:-3]):
        w = _tidy(w[:-3])
    return w


def _step1c(w: str) -> str:
    if w.endswith("y") and _has_vowel(w[:-1]):
        return w[:-1] + "i"
    return w


# Each table is searched longest suffix first; the first suffix that matches decides the step,
# whether or not its condition then holds (the paper's rule).
_STEP2 = sorted(
    {
        "ational": "ate",
        "tional": "tion",
        "enci": "ence",
        "anci": "ance",
        "izer": "ize",
        "abli": "able",
        "alli": "al",
        "entli": "ent",
        "eli": "e",
        "ousli": "ous",
        "ization": "ize",
        "ation": "ate",
        "ator": "ate",
        "alism": "al",
        "iveness": "ive",
        "fulness": "ful",
        "ousness": "ous",
        "aliti": "al",
        "iviti": "ive",
        "biliti": "ble",
    }.items(),
    key=lambda kv: -len(kv[0]),
)
_STEP3 = sorted(
    {"icate": "ic", "ative": "", "alize": "al", "iciti": "ic", "ical": "ic", "ful": "", "ness": ""}.items(),
    key=lambda kv: -len(kv[0]),
)
_STEP4 = sorted(
    [
        "al",
        "ance",
        "ence",
        "er",
        "ic",
        "able",
        "ible",
        "ant",
        "ement",
        "ment",
        "ent",
        "ion",
        "ou",
        "ism",
        "ate",
        "iti",
        "ous",
        "ive",
        "ize",
    ],
    key=len,
    reverse=True,
)


def _replace(w: str, table: list[tuple[str, str]], min_measure: int) -> str:
    for suffix, replacement in table:
        if w.endswith(suffix):
            stem = w[: -len(suffix)]
            return stem + replacement if measure(stem) > min_measure else w
    return w


def _step4(w: str) -> str:
    for suffix in _STEP4:
        if w.endswith(suffix):
            stem = w[: -len(suffix)]
            if measure(stem) <= 1:
                return w
            if suffix == "ion" and not stem.endswith(("s", "t")):
                return w
            return stem
    return w


def _step5(w: str) -> str:
    if w.endswith("e"):
        stem = w[:-1]
        m = measure(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            w = stem
    if measure(w) > 1 and _double_consonant(w) and w.endswith("l"):
        w = w[:-1]
    return w


@functools.lru_cache(maxsize=65536)
def porter(word: str) -> str:
    """The Porter stem of a lower-case ``word`` (words of one or two letters are left as they are)."""
    if len(word) <= 2 or (word.isdigit() and word.isascii()):  # no rule ends in a digit
        return word
    w = _step1c(_step1ab(word))
    w = _replace(w, _STEP2, 0)
    w = _replace(w, _STEP3, 0)
    return _step5(_step4(w))


@functools.lru_cache(maxsize=65536)
def terms(word: str) -> tuple[str, ...]:
    """The index terms of a lower-case ``word``: its Porter stem, and for a comparative or
    superlative of a one-syllable stem (``cheaper``, ``cheapest``) the stem of its base too."""
    stem = porter(word)
    if stem is word and word[-1:].isdigit():  # a number: no comparative either
        return (stem,)
    for ending in ("est", "er"):
        base = word[: -len(ending)]
        if word.endswith(ending) and len(base) >= 2 and measure(base) == 1:
            other = porter(_tidy(base))
            if other != stem:
                return (stem, other)
    return (stem,)
