"""LangGraph on the flows journal: ``JournalSaver`` (checkpointer) and ``JournalStore`` (store).

Needs the ``langgraph`` extra (``pip install 'flows-memory[langgraph]'``); ``import flows`` never
imports this package, and so never imports LangGraph. See docs/LANGGRAPH.md.
"""

from flows.langgraph._errors import (
    ConfigInvalid,
    LangGraphAdapterError,
    RecordInvalid,
    ValueTooLarge,
    ValueUnserializable,
)
from flows.langgraph._saver import Citation, JournalSaver
from flows.langgraph._store import JournalStore

__all__ = [
    "Citation",
    "ConfigInvalid",
    "JournalSaver",
    "JournalStore",
    "LangGraphAdapterError",
    "RecordInvalid",
    "ValueTooLarge",
    "ValueUnserializable",
]
