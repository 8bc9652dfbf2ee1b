"""How a PostgreSQL location is recognised and shown: without its password, ever."""

from __future__ import annotations

import functools
import os
import re
import urllib.parse
from collections.abc import Sequence

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


@functools.cache
def _keyword_dsn() -> re.Pattern[str]:
    """The start of a libpq ``key=value`` connection string (``host=db dbname=app password=…``),
    compiled on first need: a location without ``=`` (a folder, as a rule) never needs it."""
    return re.compile(
        r"\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|connect_timeout|options"
        r"|application_name|target_session_attrs)\s*=",
        re.IGNORECASE,
    )


def is_keyword_dsn(text: str) -> bool:
    """Whether ``text`` starts as a libpq ``key=value`` connection string (``host=db dbname=app``),
    which no journal location takes (``./host=db`` is a folder)."""
    return "=" in text and _keyword_dsn().match(text) is not None


def shown_location(location: str | os.PathLike[str]) -> str:
    """``location`` as a message or a ``repr`` may show it: a ``postgresql://`` URL without its
    password, anything else as it is (a key=value DSN, which no journal takes, is not shown).

    The URL is cut as no parser would misread it: everything before its *last* ``@`` is the user
    and password, of which only the user (up to the first ``:``) is kept, and a ``password``
    parameter of the query is dropped whole (to its ``&``: a ``#`` does not end it, as it does not
    for libpq). So a password with ``/``, ``?``, ``#`` or ``@`` in it, which ``urlsplit`` and libpq
    each split their own way, is never shown in part. An ``@`` after the user part (in a query
    value) hides a little more than the password: never less.
    """
    text = os.fspath(location)
    if is_keyword_dsn(text):
        return "<a key=value connection string>"
    if not text.startswith(POSTGRES_SCHEMES):
        return text
    scheme, rest = text.split("://", 1)
    at = rest.rfind("@")
    if at >= 0:
        user = rest[:at].split(":", 1)[0]
        rest = f"{user}@{rest[at + 1 :]}" if user else rest[at + 1 :]
    head, sep, query = rest.partition("?")
    if sep:
        kept = [
            pair
            for pair in query.split("&")
            if urllib.parse.unquote(pair.split("=", 1)[0]).strip().lower() != "password"
        ]
        rest = f"{head}?{'&'.join(kept)}" if kept else head
    return f"{scheme}://{rest}"


def location_secrets(location: str) -> list[str]:
    """Every spelling of a password ``location`` (a ``postgresql://`` URL) may hold, longest first:
    what to scrub from a message that may quote it (libpq quotes a bad part of a DSN back)."""
    found: list[str] = []
    if location.startswith(POSTGRES_SCHEMES):
        rest = location.split("://", 1)[1]
        at = rest.rfind("@")
        if at >= 0 and ":" in rest[:at]:
            password = rest[:at].split(":", 1)[1]
            found.append(password)
            # libpq ends the user part at the first '@' (or '/') and may quote the rest back as a
            # host or port: each piece of 3 characters or more is scrubbed on its own too
            found += [p for p in re.split(r"[@/?#]", password) if len(p) >= 3]
        _, _, query = rest.partition("?")
        for pair in query.split("&"):
            key, eq, value = pair.partition("=")
            if eq and urllib.parse.unquote(key).strip().lower() == "password":
                found.append(value)
    found += [urllib.parse.unquote(f) for f in found]
    found += [urllib.parse.unquote_plus(f) for f in found]
    return sorted({f for f in found if f}, key=len, reverse=True)


def scrubbed(text: str, secrets: Sequence[str]) -> str:
    """``text`` with each of ``secrets`` written as ``***`` (give them longest first, so that no
    part of a longer one is left around a shorter one)."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text
