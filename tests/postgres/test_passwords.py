"""A password in a PostgreSQL journal location is never shown, however it is spelled.

libpq and ``urllib.parse.urlsplit`` cut a URL differently: libpq takes ``?`` and ``#`` in a
password as the password's own characters, ``urlsplit`` ends the authority there; neither takes an
unencoded ``/``, yet the text before the last ``@`` is still the password a person meant. Every place
that shows a location (a journal error, ``PostgresJournal.location``, ``JournalStore``'s ``repr``,
the dashboard's footer) shows none of it, and a driver message that quotes part of the DSN back is
scrubbed too. The server runs with trust authentication, so a password in the DSN is ignored by it
and the journal still works.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest

import journal
from journal.postgres import PostgresJournal, redact_dsn

# Each password is written in the URL as a careless person would: unencoded.
PASSWORDS = {
    "slash": "Zq7/w9Xk",
    "question mark": "Zq7?w9Xk",
    "hash": "Zq7#w9Xk",
    "at": "Zq7@w9Xk",
    "slash and question mark": "Zq7/w9?Xk",
}


def _parts(password: str) -> list[str]:
    """The pieces of ``password`` that a parser could show on their own (3 characters or more)."""
    pieces = [password]
    for sep in "/?#@":
        pieces += [p for p in password.split(sep) if len(p) >= 3]
    return pieces


def _with_password(dsn: str, password: str, *, port: int | None = None) -> str:
    parts = urllib.parse.urlsplit(dsn)
    host = f"{parts.hostname}:{port or parts.port or 5432}"
    return f"{parts.scheme}://{parts.username}:{password}@{host}{parts.path}" + (
        f"?{parts.query}" if parts.query else ""
    )


def _assert_hidden(text: str, password: str) -> None:
    for piece in _parts(password):
        assert piece not in text, (piece, text)


@pytest.mark.parametrize("password", list(PASSWORDS.values()), ids=list(PASSWORDS))
def test_no_message_or_location_shows_any_part_of_the_password(password: str) -> None:
    dsn = _with_password("postgresql://flows@127.0.0.1/test", password, port=1)  # nothing listens
    try:
        jr = journal.open_journal(dsn)
    except journal.JournalLocationInvalid as err:  # libpq could not parse it: one coded line
        _assert_hidden(str(err), password)
    else:
        with jr:
            _assert_hidden(jr.location, password)
            with pytest.raises(journal.JournalStorageError) as caught:
                jr.runs()
            _assert_hidden(str(caught.value), password)
    _assert_hidden(journal.shown_location(dsn), password)


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://127.0.0.1:1/test?password=Zq7#w9Xk",  # '#' does not end a libpq parameter
        "postgresql://127.0.0.1:1/test?sslmode=disable&pass%77ord=Zq7w9Xk",
        "postgresql://127.0.0.1:1/test?PASSWORD=Zq7w9Xk",
    ],
)
def test_a_password_parameter_is_dropped_whole(dsn: str) -> None:
    for shown in (redact_dsn(dsn), journal.shown_location(dsn)):
        assert "Zq7" not in shown and "w9Xk" not in shown, shown
        assert shown.startswith("postgresql://127.0.0.1:1/test")


def test_the_langgraph_store_and_the_dashboard_never_show_the_password(
    postgres_dsn: str, tmp_path: Path
) -> None:
    from flows.langgraph import JournalStore
    from flows.web._reader import Reader, ServeConfig

    password = PASSWORDS["slash and question mark"]
    parts = urllib.parse.urlsplit(postgres_dsn)
    dsn = _with_password(postgres_dsn, urllib.parse.quote(password, safe=""))
    assert parts.username and password not in dsn  # percent-encoded: the server takes it
    with JournalStore(db=str(tmp_path / "h.db"), journal=dsn) as store:
        store.put(("ns",), "k", {"v": 1})
        _assert_hidden(urllib.parse.unquote(repr(store)), password)
        assert urllib.parse.quote(password, safe="") not in repr(store)
    careless = _with_password(postgres_dsn, password)  # unencoded: libpq cannot use it, still hidden
    for location in (dsn, careless):
        reader = Reader(ServeConfig(db=str(tmp_path / "h.db"), journal=location))
        try:
            label = reader.journal_label()
        finally:
            reader.close()
        _assert_hidden(urllib.parse.unquote(label), password)
        assert "127.0.0.1" in label
    with PostgresJournal(dsn) as jr:
        assert jr.location == journal.shown_location(dsn)
