"""The store's check of a value takes an ASCII string leaf as it is (no call, no path built for it),
and still names the path of a bad part."""

from __future__ import annotations

from typing import Any

import pytest

from flows.langgraph import _store
from flows.langgraph._errors import ValueUnserializable


def test_a_values_ascii_strings_are_taken_without_a_call_each(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    plain = _store._plain

    def counted(value: Any, path: str, depth: int = 0) -> Any:
        calls.append(path)
        return plain(value, path, depth)

    monkeypatch.setattr(_store, "_plain", counted)
    value = {"tag": "t3", "text": "finding 3 about fees", "n": 3, "inner": {"a": "b"}}
    assert _store._plain(value, "value") == value
    assert calls == ["value", "value.n", "value.inner"]
    with pytest.raises(ValueUnserializable, match=r"`value\.inner\.bad` holds a lone surrogate"):
        _store._plain({"inner": {"bad": "\ud800"}}, "value")
    with pytest.raises(ValueUnserializable, match="keys are non-empty strings"):
        _store._plain({"a\x1fb": "x"}, "value")
