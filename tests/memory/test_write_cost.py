"""What a learn, an update and a store's sync spend their instructions on, and no more: a metadata
check builds no field path for a plain leaf (the path is named only in an error), a whole number
is its own index term (no stemming step runs), a scalar metadata value is compared as its JSON, and
the names a learn or an update leave waiting are kept with their folder as the store computed it
(one object per folder, so a group flush tells the folders apart by identity)."""

from __future__ import annotations

import pytest

import memory
from memory import _finding, _stem


def test_a_metadata_check_builds_no_path_for_plain_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    paths: list[str] = []
    member = _finding._member

    def counted(parent: str, key: str) -> str:
        paths.append(key)
        return member(parent, key)

    monkeypatch.setattr(_finding, "_member", counted)
    meta = {"key": "k1", "createdMs": 1_765_000_000_000, "ok": True, "none": None, "tags": ["a", "b"]}
    assert _finding.check_metadata(meta) == meta
    assert paths == ["tags"]  # the list only: its items are ASCII strings, taken as they are
    # a bad leaf is still named by its path, and a nested object's keys by theirs
    with pytest.raises(memory.FindingInvalid) as bad:
        _finding.check_metadata({"deep": {"n": 2**63}})
    assert bad.value.field == "metadata.deep.n"
    with pytest.raises(memory.FindingInvalid) as bad:
        _finding.check_metadata({"odd key": ["x", "\ud800"]})
    assert bad.value.field == "metadata['odd key'][1]"
    with pytest.raises(memory.FindingInvalid, match="control characters"):
        _finding.check_metadata({"a\x7fb": 1})


def test_a_whole_number_is_its_own_term_without_the_stemming_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[str] = []
    first = _stem._step1ab

    def counted(word: str) -> str:
        steps.append(word)
        return first(word)

    monkeypatch.setattr(_stem, "_step1ab", counted)
    for cached in (_stem.porter, _stem.terms):  # stems an earlier test in this process kept
        cached.cache_clear()  # type: ignore[attr-defined]
    assert _stem.terms.__wrapped__("1765000123") == ("1765000123",)  # type: ignore[attr-defined]
    assert _stem.porter.__wrapped__("20261206") == "20261206"  # type: ignore[attr-defined]
    assert steps == []
    assert _stem.terms.__wrapped__("cheapest") == ("cheapest", "cheap")  # type: ignore[attr-defined]
    assert steps == ["cheapest", "cheap"]


def test_a_scalar_metadata_value_is_compared_as_its_json(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []
    comparable = _finding._comparable

    def counted(value: object) -> object:
        seen.append(value)
        return comparable(value)

    monkeypatch.setattr(_finding, "_comparable", counted)
    assert [_finding.meta_value_key(v) for v in ("k1", 7, True, None)] == ['"k1"', "7", "true", "null"]
    assert seen == []
    assert _finding.meta_value_key(2500.0) == "2500" and _finding.meta_value_key({"b": 1.0, "a": 2}) == (
        '{"a":2,"b":1}'
    )


def test_the_names_a_learn_and_an_update_leave_waiting_keep_the_stores_folder_objects(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    pub = store._publisher
    folders: list[object] = []
    renamed = pub.pending.renamed

    def noted(directory: object, loose: bool = False) -> bool:
        folders.append(directory)
        return renamed(directory, loose)  # type: ignore[arg-type]

    pub.pending.renamed = noted  # type: ignore[method-assign]
    first = store.learn({"text": "the pool's fee is 30 bps", "tags": ["fee"]}, root)
    store.update(first.memory_id, {"text": "the pool's fee is 25 bps", "tags": ["fee"]}, root)
    scope_dir, retired_dir = pub.scope_dir(root.scope), pub.retired_dir(root.scope)
    # the learn's name, then the update's retired file and its new version's name
    assert [id(f) for f in folders] == [id(scope_dir), id(retired_dir), id(scope_dir)]
