"""Choosing a backend from a location: a directory (file backend) or a PostgreSQL DSN."""

from __future__ import annotations

import os

from journal._backend import JournalBackend
from journal._errors import JournalLocationInvalid, JournalUnavailable
from journal._file import FileJournal

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_journal(location: str | os.PathLike[str], *, mode: int = 0o600) -> JournalBackend:
    """Open the journal at ``location``.

    ``mode`` is the mode of the files a file journal creates while its folder does not exist yet
    (its folders add the search bit wherever a read bit is set); once the folder exists, its own
    mode decides. A store passes its history DB's mode, so a journal beside a group-readable DB is
    group-readable too. PostgreSQL ignores it.

    A ``postgresql://`` (or ``postgres://``) DSN opens the PostgreSQL backend, which needs the
    ``postgres`` extra; anything else is a directory for the file backend.

    Raises:
        JournalLocationInvalid: the location holds NUL, or is a DSN libpq cannot parse (the
            message never shows its password).
        JournalUnavailable: a DSN, and psycopg is not installed.
    """
    text = os.fspath(location)
    if text.startswith(POSTGRES_SCHEMES):
        try:
            from journal._postgres import PostgresJournal
        except ImportError as exc:
            raise JournalUnavailable(
                "the PostgreSQL journal needs psycopg: pip install 'flows-memory[postgres]'"
            ) from exc

        backend: JournalBackend = PostgresJournal(text)
        return backend
    if "\x00" in text:
        raise JournalLocationInvalid(
            f"the journal location {text!r} holds a NUL character; give a directory without one"
        )
    return FileJournal(text, mode=mode)
