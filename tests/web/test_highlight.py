"""The findings page marks the words ``why`` matched (``highlight``): the same words as the rule says,
and at a cost of a few looks per word of the text, however many words the question matched."""

from __future__ import annotations

import random
import re
import string
import sys
from collections.abc import Iterable
from types import FrameType
from typing import Any

import pytest

pytest.importorskip("markupsafe", reason="the web extra is not installed")

from markupsafe import escape

from flows.web import _findings
from flows.web._findings import highlight


def _by_the_rule(text: str, matched: Iterable[str]) -> str:
    """What ``highlight`` gives, word by word as its rule says: a word is marked when, lower-cased,
    it is a matched word or starts with one of at least three characters."""
    words = [m.lower() for m in matched if m]
    out, pos = [], 0
    for m in re.finditer(r"\w+", text):
        token = m.group(0).lower()
        if words and any(token == w or (len(w) >= 3 and token.startswith(w)) for w in words):
            out += [str(escape(text[pos : m.start()])), f"<mark>{escape(m.group(0))}</mark>"]
            pos = m.end()
    return "".join([*out, str(escape(text[pos:]))])


@pytest.mark.parametrize(
    ("text", "matched"),
    [
        ("Fees and fee <b>fe</b> FEEDBACK", ["fee"]),
        ("fe fee f", ["fe", "f"]),
        ("storms storm Stor <script>", ["storm", "sto"]),
        ("Ünïcode ÜNÏ straße STRASSE", ["üni", "straße"]),
        ("", ["a"]),
        ("nothing matched here", []),
        ("a & b", ["", "a"]),
    ],
)
def test_the_marked_words_are_the_rules(text: str, matched: list[str]) -> None:
    assert str(highlight(text, matched)) == _by_the_rule(text, matched)


def test_random_texts_and_questions_are_marked_by_the_rule() -> None:
    rng = random.Random(7)
    for _ in range(300):
        pool = ["".join(rng.choice("abcé") for _ in range(rng.randint(1, 6))) for _ in range(12)]
        text = " ".join(rng.choice(pool) + rng.choice(["", "s", "<", "&"]) for _ in range(30))
        matched = rng.sample(pool, rng.randint(0, 6))
        assert str(highlight(text, matched)) == _by_the_rule(text, matched)


def test_a_question_of_hundreds_of_matched_words_costs_a_few_looks_per_word_of_the_text() -> None:
    # each word of the text was compared with every matched word: a question of 400 words that each
    # of 200 findings matched made one findings page take 8 to 11 seconds, under the lock every
    # other request waits on. Counted in lines run (no clock): a few per word of the text.
    rng = random.Random(1)
    words = sorted({"".join(rng.choice(string.ascii_lowercase) for _ in range(4)) for _ in range(420)})[:400]
    text = " ".join(words)
    lines = 0

    def count(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal lines
        if frame.f_code.co_filename == _findings.__file__:
            if event == "line":
                lines += 1
            return count
        return None

    previous = sys.gettrace()  # a coverage tracer, say: given back after
    sys.settrace(count)
    try:
        shown = highlight(text, words)
    finally:
        sys.settrace(previous)
    assert str(shown).count("<mark>") == len(words)
    assert lines < 20 * len(words), lines
