"""Large and hostile text: every routine over a finding's text (validation, rendering, the word
splitter, the stemmer, search, sync into the DB) stays linear on 1 MiB of adversarial text, through
the real ``flows`` commands; and a finding's text, source and tags have documented size limits,
refused with ``memory_finding_invalid`` naming the limit before anything is written."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

import memory
from memory._stem import _consonants, porter, terms
from tests.adversarial.memory_support import error_code, flows, populate, snapshot

MiB = 1024 * 1024

# Each text is 1 MiB of one shape a super-linear routine would choke on: runs of the letter whose
# consonant test looks at the letter before it, alternations of it with a vowel, a very long word
# that also has step suffixes, many short words, only separators, multi-byte letters.
ADVERSARIAL = {
    "y-run": "y" * MiB,
    "ay-run": "ay" * (MiB // 2),
    "long-suffixed-word": "y" * (MiB - 8) + "ational",
    "many-words": "yes " * (MiB // 4),
    "separators": " ." * (MiB // 2 - 1) + "zz",
    "multibyte": "ÿ" * (MiB // 2),
}

# One command on 1 MiB answers in well under a second here; the bound leaves room for a loaded
# machine, and a quadratic routine on this size takes hours (or overflows the stack at once).
BOUND_S = 60.0


@pytest.mark.parametrize("shape", sorted(ADVERSARIAL))
def test_a_finding_of_one_mebibyte_of_adversarial_text_is_learned_found_and_synced(
    tmp_path: Path, shape: str
) -> None:
    text = ADVERSARIAL[shape]
    assert len(text.encode()) <= memory.TEXT_MAX_BYTES
    store = populate(tmp_path / "store" / "history.db", [text, "a plain yellow finding"])
    question = ("why", "yellow yes y x")
    for args in (question, ("recall", "--json"), ("sync",), question, ("check",)):
        started = time.monotonic()
        result = flows(store.db, *args, timeout=BOUND_S)
        assert (result.returncode, result.stderr) == (0, ""), args
        assert time.monotonic() - started < BOUND_S
    recalled = flows(store.db, "recall", "--json")
    assert text in recalled.stdout


def test_the_stemmer_handles_a_word_of_one_mebibyte_in_linear_time() -> None:
    started = time.monotonic()
    assert porter("y" * MiB) == "y" * (MiB - 1) + "i"
    assert terms("ay" * (MiB // 2) + "est")
    assert time.monotonic() - started < 10.0


def _consonant_by_definition(word: str, i: int) -> bool:
    # Porter's definition as the paper words it (recursive; fine for the short words below)
    if word[i] in "aeiou":
        return False
    return word[i] != "y" or i == 0 or not _consonant_by_definition(word, i - 1)


def test_the_linear_consonant_test_agrees_with_the_papers_definition_on_every_short_word() -> None:
    for length in range(1, 9):
        for letters in itertools.product("ayb", repeat=length):
            word = "".join(letters)
            expected = [_consonant_by_definition(word, i) for i in range(length)]
            assert _consonants(word) == expected, word
    assert porter("syzygy") == "syzygi"


def test_a_long_y_word_learned_by_the_command_then_why_and_sync_answer(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    word = "y" * 100_000  # one argument may be at most 128 KiB on Linux
    learned = flows(db, "learn", word, "--scope", "adv")
    assert learned.returncode == 0, learned.stderr
    for args in (("why", word), ("why", "x"), ("sync",), ("why", word)):
        result = flows(db, *args, timeout=BOUND_S)
        assert (result.returncode, result.stderr) == (0, ""), args
    assert word in flows(db, "why", word).stdout


@pytest.mark.parametrize(
    ("finding", "field", "limit"),
    [
        ({"text": "x" * (MiB + 1)}, "text", f"at most {MiB} (TEXT_MAX_BYTES)"),
        ({"text": "é" * (MiB // 2) + "x"}, "text", f"at most {MiB} (TEXT_MAX_BYTES)"),
        ({"text": "ok", "source": "s" * 4097}, "source", "at most 4096 (SOURCE_MAX_BYTES)"),
        ({"text": "ok", "tags": ["t"] * 65}, "tags", "at most 64 (TAGS_MAX)"),
        ({"text": "ok", "tags": ["ok", "t" * 257]}, "tags[1]", "at most 256 (TAG_MAX_BYTES)"),
        ({"text": "ok", "tags": ["ok", "é" * 129]}, "tags[1]", "at most 256 (TAG_MAX_BYTES)"),  # 129 chars
        ({"text": "ok", "tags": ["t" * 256, "é" * 128, "\ud800"]}, "tags[2]", "lone surrogate"),
    ],
)
def test_a_finding_over_a_size_limit_is_invalid_naming_the_limit_and_nothing_is_written(
    tmp_path: Path, finding: dict[str, object], field: str, limit: str
) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("adv", "adv", {})
        before = snapshot(tmp_path)
        with pytest.raises(memory.FindingInvalid) as caught:
            store.learn(finding, memory.RootRun(jr, lease, "adv", "adv"))
        assert caught.value.code == "memory_finding_invalid"
        assert caught.value.field == field
        assert limit in caught.value.message
        assert snapshot(tmp_path) == before
        assert list(jr.read(lease.run_id, memory.STREAM)) == []


def test_a_finding_at_each_size_limit_is_learned(tmp_path: Path) -> None:
    finding = {
        "text": "é" * (MiB // 2),
        "source": "s" * memory.SOURCE_MAX_BYTES,
        "tags": [f"{i:0256d}" for i in range(memory.TAGS_MAX)],
    }
    store = populate(tmp_path / "store" / "history.db", [])
    with memory.MemoryStore(store.db) as opened:
        jr = opened.open_journal()
        _, lease = jr.begin("adv", "adv", {})
        learned = opened.learn(finding, memory.RootRun(jr, lease, "adv", "adv"))
        assert opened.get(learned.id) is not None


def test_the_learn_command_refuses_a_tag_over_its_limit_with_the_invalid_finding_code(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    result = flows(db, "learn", "fine", "--scope", "adv", "--tag", "t" * 257)
    assert result.returncode == 2  # the command's input was bad: the usage status
    assert error_code(result) == "memory_finding_invalid"
    assert "TAG_MAX_BYTES" in result.stderr


def test_metadata_nested_a_hundred_thousand_deep_is_refused_without_recursing(tmp_path: Path) -> None:
    nested: object = "leaf"
    for _ in range(100_000):
        nested = [nested]
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("adv", "adv", {})
        with pytest.raises(memory.FindingInvalid, match="nests deeper than 16"):
            store.learn({"text": "ok", "metadata": {"k": nested}}, memory.RootRun(jr, lease, "adv", "adv"))
    deep = "[" * 60_000 + "]" * 60_000  # past orjson's own depth: taken as text, then too large
    result = flows(db, "learn", "fine", "--scope", "adv", "--meta", f"k={deep}")
    assert result.returncode == 2
    assert error_code(result) == "memory_finding_invalid"
