"""Choosing a backend from a location: a directory (file backend) or a PostgreSQL DSN."""

from __future__ import annotations

import os
import re
import urllib.parse

from journal._backend import JournalBackend
from journal._dsn import POSTGRES_SCHEMES, is_keyword_dsn
from journal._errors import JournalLocationInvalid, JournalUnavailable
from journal._file import FileJournal

LOCATION_MAX = 4096
"""The longest folder location, in bytes (Linux's ``PATH_MAX``)."""
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _check_size(text: str) -> None:
    """Refuse a location longer than ``LOCATION_MAX`` bytes: no folder's path or DSN is that
    long, and each message naming the location would carry all of it."""
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > LOCATION_MAX:
        shown = "" if text.startswith(POSTGRES_SCHEMES) or is_keyword_dsn(text) else f" ({text[:80]!r}…)"
        raise JournalLocationInvalid(
            f"the journal location is {size:,} bytes, over the {LOCATION_MAX:,} a location may "
            f"have{shown}: give a shorter one"
        )


def file_location(text: str) -> str:
    """The folder a file journal location names: a path as it is, or a ``file:`` URL
    (``file:///abs/path``, ``file://localhost/abs/path``) as its decoded absolute path.

    Raises:
        JournalLocationInvalid: an empty location, a ``file:`` URL of another host or without an
            absolute path, a location of a scheme no backend reads (``http://…``, ``s3://…``), or
            a libpq ``key=value`` connection string (``host=… dbname=…``), which would otherwise
            become a folder of that name.
    """
    if not text:
        raise JournalLocationInvalid(
            "the journal location is empty (it would be the current folder): give a folder, a file:/// "
            "URL or a postgresql:// DSN"
        )
    _check_size(text)
    if text[:5].lower() != "file:":
        if _URL.match(text):
            scheme = text.split(":", 1)[0]
            raise JournalLocationInvalid(
                f"the journal location {text[:200]!r} is a {scheme}: URL, which no journal reads; "
                "give a folder, a file:/// URL or a postgresql:// DSN"
            )
        if is_keyword_dsn(text):
            # As a folder, it would put its password in a folder's name and in every message
            # naming the journal; the location is never shown, it may hold a password.
            raise JournalLocationInvalid(
                "the journal location is a PostgreSQL key=value connection string (host=… dbname=…), "
                "which the journal does not read: write it as a URL, "
                "postgresql://user@host:5432/dbname (a folder whose name starts that way: ./host=…)"
            )
        return text  # a path (a folder named "notes:2026" included)
    parts = urllib.parse.urlsplit(text)
    path = urllib.parse.unquote(parts.path)
    if parts.netloc not in ("", "localhost") or not path.startswith("/") or parts.query or parts.fragment:
        raise JournalLocationInvalid(
            f"the journal location {text[:200]!r} is not a local file: URL; write it as "
            "file:///absolute/path (or give the folder itself)"
        )
    return path


def open_journal(location: str | os.PathLike[str], *, mode: int = 0o600) -> JournalBackend:
    """Open the journal at ``location``.

    ``mode`` is the mode of the files a file journal creates while its folder does not exist yet
    (its folders add the search bit wherever a read bit is set); once the folder exists, its own
    mode decides. A store passes its history DB's mode, so a journal beside a group-readable DB is
    group-readable too. PostgreSQL ignores it.

    A ``postgresql://`` (or ``postgres://``) DSN opens the PostgreSQL backend, which needs the
    ``postgres`` extra; a ``file:///`` URL or anything else is a directory for the file backend.

    Raises:
        JournalLocationInvalid: the location holds NUL, is a DSN libpq cannot parse or that
            names no database (the message never shows its password), or a URL no backend
            reads (``file_location``).
        JournalUnavailable: a DSN, and psycopg is not installed.
    """
    text = os.fspath(location)
    folder = _folder_of(text)
    if folder is None:
        try:
            from journal._postgres import PostgresJournal
        except ImportError as exc:
            raise JournalUnavailable(
                "the PostgreSQL journal needs psycopg: pip install 'flows-memory[postgres]'"
            ) from exc

        backend: JournalBackend = PostgresJournal(text)
        return backend
    return FileJournal(folder, mode=mode)


def hosts_share(location: str | os.PathLike[str]) -> bool:
    """Whether ``open_journal(location)`` opens a journal several hosts share (a PostgreSQL DSN),
    told without opening it or touching the disk. A folder's location (a file journal, one host's)
    is checked here as ``open_journal`` checks it.

    Raises:
        JournalLocationInvalid: as ``open_journal``, for a location too long, or a folder's
            location it refuses (a DSN is checked when it is opened).
    """
    return _folder_of(os.fspath(location)) is None


def _folder_of(text: str) -> str | None:
    """The folder a file journal's location names (``file_location``), or None for a PostgreSQL
    DSN (checked when it is opened)."""
    _check_size(text)
    if text.startswith(POSTGRES_SCHEMES):
        return None
    if "\x00" in text:
        raise JournalLocationInvalid(
            f"the journal location {text!r} holds a NUL character; give a directory without one"
        )
    return file_location(text)
