"""Store and checkpoint filters as LangGraph's stores read them.

A filter maps keys to wanted values. A key is a dotted path (``"user.access-level"`` is
``value["user"]["access-level"]``), as in LangGraph's SQL stores and savers, and holds only
``[a-zA-Z0-9_.-]`` (they refuse anything else with ``ValueError("Invalid filter key: …")``, and so
do the adapters, with ``FilterInvalid``). A wanted value is matched as LangGraph's in-memory store
does: equality, nested objects key by key, lists item by item, and the operators ``$eq``, ``$ne``,
``$gt``, ``$gte``, ``$lt``, ``$lte``.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from flows.langgraph._errors import FilterInvalid

_FILTER_KEY = re.compile(r"[a-zA-Z0-9_.-]+")
"""What a filter key may hold: LangGraph's SQL stores refuse anything else, and so do the adapters."""


def check_filter(filter: Mapping[str, Any] | None) -> None:
    """Refuse a filter key outside ``[a-zA-Z0-9_.-]`` (as LangGraph's SQL stores do) and an unknown
    ``$`` operator, with ``FilterInvalid`` (a ``ValueError``); so is a filter that is not a mapping."""
    if filter is not None and not isinstance(filter, Mapping):
        raise FilterInvalid(
            f"a filter maps keys to wanted values, not {type(filter).__name__}: {filter!r:.80}"
        )
    for key, wanted in (filter or {}).items():
        if not isinstance(key, str) or not _FILTER_KEY.fullmatch(key):
            raise FilterInvalid(
                f"Invalid filter key: {key!r:.80}. Filter keys must contain only alphanumeric "
                "characters, underscores, dots, and hyphens."
            )
        if isinstance(wanted, dict):
            for op in wanted:
                if isinstance(op, str) and op.startswith("$") and op not in _OPERATORS:
                    raise FilterInvalid(f"Unsupported operator: {op!r:.40}; use {', '.join(_OPERATORS)}")


def at_path(value: Any, key: str) -> Any:
    """The part of ``value`` a filter key names: ``"user.access-level"`` is ``value["user"]
    ["access-level"]`` (a dotted key is a path, as in LangGraph's SQL stores); None when absent."""
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def matches(actual: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics: equality, nested objects, and the ``$`` operators."""
    if isinstance(wanted, dict):
        if not all(isinstance(k, str) for k in wanted):
            return False  # an object read back from JSON has string keys only
        if any(k.startswith("$") for k in wanted):
            return all(_operator(actual, op, v) for op, v in wanted.items())
        return isinstance(actual, dict) and all(matches(actual.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(wanted)
            and all(matches(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return _equal(actual, wanted)


_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
_ORDER: dict[str, Callable[[Any, Any], Any]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def _operator(actual: Any, op: str, wanted: Any) -> bool:
    """One ``$`` comparison as LangGraph's stores make it: a number against numbers (``inf`` and
    huge integers included, NaN never equal), a string against strings, anything else for
    (in)equality only."""
    if op == "$eq":
        return _equal(actual, wanted)
    if op == "$ne":
        return not _equal(actual, wanted)
    if op not in _OPERATORS:
        raise FilterInvalid(f"Unsupported operator: {op!r:.40}; use {', '.join(_OPERATORS)}")
    # Python compares ints and floats exactly (10**400 against inf too), unlike a float() of each
    if not ((_number(wanted) and _number(actual)) or (isinstance(wanted, str) and isinstance(actual, str))):
        return False
    return bool(_ORDER[op](actual, wanted))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(actual: Any, wanted: Any) -> bool:
    return bool(actual == wanted)
