"""Errors of ``flows serve``.

The tree::

    FlowsError                    (flows) base: code, message, run_id, path
    └── ServeError                serve_error: base of the dashboard's own errors; ``status`` is HTTP
        ├── ServeTokenRequired    serve_token_required: a non-loopback address without a strong token
        ├── ServeBindFailed       serve_bind_failed: the address could not be bound
        ├── ServeExtraMissing     serve_extra_missing: the web extra is not installed
        ├── ServeUnauthorized     serve_unauthorized: a request without the right token (401)
        ├── ServeNotFound         serve_not_found: no such page, run, finding or agent (404)
        ├── ServeBadRequest       serve_bad_request: a query parameter is malformed (400)
        ├── ServeHeadTooLarge     serve_head_too_large: a request head over 16 KiB (431)
        ├── ServeDbOutdated       serve_db_outdated: reading the history DB would migrate it (503)
        └── ServeInternal         serve_internal: an unexpected failure, logged, never shown (500)

Journal, memory and ledger errors keep their own codes on the page and in the JSON.
"""

from __future__ import annotations

from pathlib import Path

from flows._errors import FlowsError


class ServeError(FlowsError):
    """Base of the dashboard's errors; ``status`` is the HTTP status a request answers with."""

    code = "serve_error"
    status = 500


class ServeTokenRequired(ServeError):
    """``flows serve`` on an address other than loopback needs a token of at least 16 characters."""

    code = "serve_token_required"
    status = 400


class ServeBindFailed(ServeError):
    """The host and port could not be bound (in use, not an address of this machine, no permission)."""

    code = "serve_bind_failed"


class ServeExtraMissing(ServeError):
    """``flows serve`` needs the ``web`` extra (Starlette, uvicorn, Jinja2), which is not installed."""

    code = "serve_extra_missing"


class ServeUnauthorized(ServeError):
    """A request did not carry the server's token (header or cookie)."""

    code = "serve_unauthorized"
    status = 401


class ServeNotFound(ServeError):
    """No such page, run, finding or agent."""

    code = "serve_not_found"
    status = 404


class ServeBadRequest(ServeError):
    """A query parameter (cursor, limit, state, metadata filter) is malformed."""

    code = "serve_bad_request"
    status = 400


class ServeHeadTooLarge(ServeError):
    """A request's head (its request line and headers) is over ``limit`` bytes, the most the server
    reads; answered by the HTTP layer before the dashboard sees the request, and the connection is
    closed."""

    code = "serve_head_too_large"
    status = 431

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class ServeDbOutdated(ServeError):
    """The history DB's schema (``version``) is older than this flows-memory: reading it would migrate
    it, and the dashboard never writes the store. ``upgrading``: a ``flows sync`` was migrating it
    and had not finished within the dashboard's wait (reload in a moment); otherwise the DB held
    still (run ``flows sync`` once)."""

    code = "serve_db_outdated"
    status = 503

    def __init__(self, message: str, *, path: str | Path, version: int, upgrading: bool) -> None:
        super().__init__(message, path=path)
        self.version = version
        self.upgrading = upgrading


class ServeInternal(ServeError):
    """An unexpected failure inside the server; the details go to the server's log only."""

    code = "serve_internal"
