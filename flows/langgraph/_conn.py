"""``from_conn_string``: LangGraph's one-line way to open a saver or a store, for the adapters.

LangGraph's ``SqliteSaver``/``PostgresSaver``/``SqliteStore`` take a connection string and are
used as context managers; the adapters take the same string, so switching is a change of class
name. The string is read as:

* ``postgresql://…`` (or ``postgres://…``): the journal location (the history DB stays at its
  default, ``$FLOWS_DB`` or ``$XDG_DATA_HOME/flows/history.db``);
* ``:memory:``: a fresh temporary store, removed when the context ends (for tests, as LangGraph's
  in-memory SQLite is);
* anything else: the history DB path (a SQLite file name such as ``checkpoints.sqlite`` works);
  the journal is the folder ``flows-journal`` beside it. A saver and a store given the same string
  share one journal and one memory, as LangGraph's savers and stores share one database.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from flows.langgraph._errors import ConfigInvalid
from journal import is_keyword_dsn

T = TypeVar("T")
_OTHER_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
"""A URL's ``scheme://`` (the postgresql ones are read before it is looked for)."""


def locations(conn_string: str) -> tuple[str | None, str | None, str | None]:
    """``(db, journal, temporary folder)`` for a connection string; ConfigInvalid for one that
    names nothing."""
    if not isinstance(conn_string, str) or not conn_string.strip():
        raise ConfigInvalid(f"a connection string is a path or a postgresql:// URL, not {conn_string!r:.80}")
    if conn_string.startswith(("postgresql://", "postgres://")):
        return None, conn_string, None
    if is_keyword_dsn(conn_string):  # as a path it would name a DB file after its password
        raise ConfigInvalid(
            "a connection string is a path or a postgresql:// URL; libpq's key=value form "
            "(host=… dbname=…) is not read: write it as postgresql://user@host:5432/dbname"
        )
    if _OTHER_URL.match(conn_string):  # as a path: folders named after its scheme, a file after its password
        raise ConfigInvalid(
            "a connection string is a path or a postgresql:// URL; a URL of another scheme "
            "(sqlite:///…, postgresql+psycopg://…) is not read: give a SQLite file's path as it is, "
            "or write PostgreSQL as postgresql://user@host:5432/dbname"
        )
    if conn_string == ":memory:":
        tmp = tempfile.mkdtemp(prefix="flows-langgraph-")
        return str(Path(tmp) / "history.db"), None, tmp
    return conn_string, None, None


class Opening(Generic[T]):
    """A context manager (``with`` and ``async with``) that opens an adapter on entry and closes
    it, and removes its temporary folder if it made one, on exit."""

    def __init__(self, conn_string: str, make: Callable[[str | None, str | None], T]) -> None:
        self._conn_string = conn_string
        self._make = make
        self._opened: T | None = None
        self._tmp: str | None = None

    def __enter__(self) -> T:
        db, journal, self._tmp = locations(self._conn_string)
        try:
            self._opened = self._make(db, journal)
        except BaseException:
            self._remove()
            raise
        return self._opened

    def __exit__(self, *exc: object) -> None:
        try:
            if self._opened is not None:
                self._opened.close()  # type: ignore[attr-defined]
        finally:
            self._opened = None
            self._remove()

    async def __aenter__(self) -> T:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)

    def _remove(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
