"""LangGraph on the flows journal: ``JournalSaver`` (checkpointer) and ``JournalStore`` (store).

Needs the ``langgraph`` extra (``pip install 'flows-memory[langgraph]'``); without it, importing
this package raises ``ExtraMissing`` (a coded ``ImportError`` that says what to install). ``import
flows`` never imports this package, and so never imports LangGraph. See docs/LANGGRAPH.md.
"""

import importlib

from flows.langgraph._errors import (
    ConfigInvalid,
    ExtraMissing,
    FilterInvalid,
    ItemContended,
    LangGraphAdapterError,
    RecordInvalid,
    ValueTooLarge,
    ValueUnserializable,
)


def _require_extra() -> None:
    """Raise ExtraMissing, not a bare ModuleNotFoundError, when the extra is not installed."""
    for module in (
        "langchain_core.runnables",
        "langgraph.checkpoint.base",
        "langgraph.store.base",
        "ormsgpack",
    ):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            if top not in ("langgraph", "langchain_core", "ormsgpack"):
                raise  # a module the extra does not bring: a real bug, not a missing extra
            raise ExtraMissing(top) from None


_require_extra()

from flows.langgraph._saver import Citation, JournalSaver  # noqa: E402
from flows.langgraph._store import JournalStore, NamespaceInvalid  # noqa: E402

__all__ = [
    "Citation",
    "ConfigInvalid",
    "ExtraMissing",
    "FilterInvalid",
    "ItemContended",
    "JournalSaver",
    "JournalStore",
    "LangGraphAdapterError",
    "NamespaceInvalid",
    "RecordInvalid",
    "ValueTooLarge",
    "ValueUnserializable",
]
