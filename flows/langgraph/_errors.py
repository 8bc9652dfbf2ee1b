"""Errors of the LangGraph adapters.

Where LangGraph defines an exception for a mistake (``InvalidNamespaceError`` for a bad store
namespace), the adapters raise one that is both LangGraph's and coded (``NamespaceInvalid``).
Everything they raise for a user has a stable ``code`` and derives from one base, a branch of
``flows.FlowsError`` and so of the project's one tree under ``staging.CodedError`` (where LangGraph's
caller expects a built-in type, it is a second base). Journal errors (``journal_lease_lost``,
``journal_unavailable`` …) pass through unchanged. This module imports nothing of LangGraph, so the
package can say that the extra is missing with a coded error of its own. The branch::

    LangGraphAdapterError          langgraph_error (family): code, message, run_id, stream, thread_id
    ├── ValueUnserializable        langgraph_value_unserializable: LangGraph's serializer refused a value
    │                              (also a TypeError, as the serializer's own failure is)
    ├── ValueTooLarge              langgraph_value_too_large: one journal record would exceed the bound
    │                              (also a ValueError)
    ├── ConfigInvalid              langgraph_config_invalid: a config or argument the adapter cannot use
    │                              (also a ValueError)
    ├── FilterInvalid              langgraph_filter_invalid: a store filter key outside [a-zA-Z0-9_.-]
    │                              or an unknown $ operator (also a ValueError)
    ├── NamespaceInvalid           langgraph_namespace_invalid: a store namespace LangGraph refuses, or
    │                              one the memory cannot hold (also LangGraph's InvalidNamespaceError;
    │                              defined in ``_store``, as it derives from a LangGraph class)
    ├── RecordInvalid              langgraph_record_invalid: a journal record of a thread or of the
    │                              catalog does not have the shape this adapter writes, or its value
    │                              names a type outside the allow-list
    └── ExtraMissing               langgraph_extra_missing: LangGraph is not installed (also an
                                   ImportError)
"""

from __future__ import annotations

from typing import Any

from flows._errors import FlowsError


class LangGraphAdapterError(FlowsError):
    """Base of the adapters' coded errors (a branch of the one tree under ``staging.CodedError``);
    ``code`` is stable and listed in docs/SURFACE.md. Context: ``run_id``, ``stream``, ``thread_id``."""

    code = "langgraph_error"

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        stream: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id)
        self.stream = stream
        self.thread_id = thread_id


class ValueUnserializable(LangGraphAdapterError, TypeError):
    """LangGraph's serializer (``serde``) cannot encode a value; nothing was written."""

    code = "langgraph_value_unserializable"


class ValueTooLarge(LangGraphAdapterError, ValueError):
    """One record would exceed ``max_record_bytes``; nothing was written.

    ``size`` is the encoded size the write needed and ``limit`` the bound.
    """

    code = "langgraph_value_too_large"

    def __init__(self, message: str, *, size: int, limit: int, **context: Any) -> None:
        super().__init__(message, **context)
        self.size = size
        self.limit = limit


class ConfigInvalid(LangGraphAdapterError, ValueError):
    """A config lacks what the call needs (``thread_id``), or an argument is not one the call takes."""

    code = "langgraph_config_invalid"


class FilterInvalid(LangGraphAdapterError, ValueError):
    """A store search filter this store (like LangGraph's SQL stores) refuses: a key with
    characters outside ``[a-zA-Z0-9_.-]``, or an operator other than $eq, $ne, $gt, $gte, $lt, $lte.
    The message begins as LangGraph's does (``Invalid filter key: …``)."""

    code = "langgraph_filter_invalid"


class RecordInvalid(LangGraphAdapterError):
    """A journal record read back does not have the shape this adapter writes (damage, or another
    program's record in a stream the adapter owns); ``seq`` is its sequence number."""

    code = "langgraph_record_invalid"

    def __init__(self, message: str, *, seq: int | None = None, **context: Any) -> None:
        super().__init__(message, **context)
        self.seq = seq


class ItemContended(LangGraphAdapterError):
    """A store ``delete`` found its item written again by another process (a put, a read that
    refreshed its TTL) under every one of its attempts: the item may be live still. Nothing this
    delete forgot comes back; the delete did not end with the item gone."""

    code = "langgraph_item_contended"


# Both bases declare ``path`` (a file for ImportError, a store path for FlowsError); neither is set
# here, so the two never disagree at run time.
class ExtraMissing(LangGraphAdapterError, ImportError):  # type: ignore[misc]
    """``flows.langgraph`` was imported without LangGraph installed; ``missing`` names the module.

    Also an ``ImportError``, so code that tries the import and falls back keeps working.
    """

    code = "langgraph_extra_missing"

    def __init__(self, missing: str) -> None:
        super().__init__(
            f"flows.langgraph needs LangGraph, and the module {missing!r} is not installed: "
            "pip install 'flows-memory[langgraph]'"
        )
        self.missing = missing


def checked_count(name: str, value: object, low: int, high: int | None = None) -> int:
    """``value`` when it is an int from ``low`` to ``high`` (no bound when None), else
    ``ConfigInvalid`` naming the argument: a constructor refuses it before anything is opened."""
    if type(value) is not int or value < low or (high is not None and value > high):
        bound = f"from {low:,} to {high:,}" if high is not None else f"of at least {low:,}"
        raise ConfigInvalid(f"{name} must be a whole number {bound}, not {value!r:.40}")
    return value


def checked_seconds(name: str, value: object) -> float:
    """``value`` when it is a finite number of seconds, 0 or more (bool refused), else
    ``ConfigInvalid`` naming the argument."""
    if not (isinstance(value, (int, float)) and type(value) is not bool and 0 <= value < float("inf")):
        # NaN fails the comparison too
        raise ConfigInvalid(f"{name} must be a finite number of seconds, 0 or more, not {value!r:.40}")
    return float(value)
