"""``flows mcp``: its arguments and its handler. Imports the MCP SDK only when the command runs."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import orjson

from flows.mcp._admission import DEFAULT_MAX_SESSIONS
from flows.mcp._errors import McpTokenRequired, McpUnavailable

TOKEN_ENV = "FLOWS_MCP_TOKEN"  # noqa: S105 - the variable's name, not a secret
"""The environment variable that holds the HTTP server's bearer token."""

MIN_TOKEN_LENGTH = 16
"""A shorter token is refused: it would be guessable."""

LOG_FORMAT = "%(name)s: %(levelname)s: %(message)s"
"""As the CLI logs with -v."""

DEFAULT_IDLE_TIMEOUT_S = 1800.0
"""An HTTP session with no request for this long is ended, its root runs left interrupted."""


@dataclass(frozen=True)
class Address:
    """Where ``--http`` asks the server to listen."""

    host: str
    port: int

    @property
    def loopback(self) -> bool:
        """True when only this machine can reach the address."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_address(text: str) -> Address:
    """``HOST:PORT``, ``[IPV6]:PORT`` or ``:PORT`` (host 127.0.0.1); port 0 picks a free one."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:8765)")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if ":" in host and not (bracketed and _is_ip(host)):
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT; put an IPv6 host in brackets: [::1]:80")
    return Address(host or "127.0.0.1", int(port))


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def _sessions(text: str) -> int:
    from flows.mcp._admission import MAX_SESSIONS_CEILING

    value = int(text) if text.strip().isdigit() else 0
    if not 1 <= value <= MAX_SESSIONS_CEILING:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_SESSIONS_CEILING:,}")
    return value


def _scope(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def add_mcp_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``flows mcp`` to its subparser."""
    parser.add_argument(
        "--scope",
        metavar="S",
        type=_scope,
        help="default scope: learn writes here and reads cover only it (default: learn writes to "
        "`mcp`, reads cover every scope); a tool's `scope` argument overrides it",
    )
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        type=parse_address,
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio; a host other than "
        f"loopback needs a bearer token (at least {MIN_TOKEN_LENGTH} characters) in ${TOKEN_ENV}",
    )
    parser.add_argument(
        "--idle-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=DEFAULT_IDLE_TIMEOUT_S,
        help="end an HTTP session idle this long, leaving its root runs interrupted (default: 1800)",
    )
    parser.add_argument(
        "--max-sessions",
        metavar="N",
        type=_sessions,
        default=DEFAULT_MAX_SESSIONS,
        help=f"hold at most N HTTP sessions open at once; an initialize past them is answered 503 "
        f"(mcp_sessions_full) until a session is deleted or expires idle (default: {DEFAULT_MAX_SESSIONS})",
    )
    from flows._cli_common import add_embedder_option

    add_embedder_option(parser)  # with one, the why tool matches by meaning too (hybrid)


def _token(address: Address) -> str | None:
    token = os.environ.get(TOKEN_ENV) or None
    if token is None and not address.loopback:
        raise McpTokenRequired(
            f"serving on {address.host} reaches beyond this machine: set ${TOKEN_ENV} to a long random "
            f"token (e.g. `openssl rand -hex 32`) and give it to clients as `Authorization: Bearer`, "
            "or listen on 127.0.0.1"
        )
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise McpTokenRequired(
            f"${TOKEN_ENV} is {len(token)} characters; use at least {MIN_TOKEN_LENGTH} "
            "(e.g. `openssl rand -hex 32`)"
        )
    return token


def _load_server() -> ModuleType:
    try:
        from flows.mcp import _server
    except ModuleNotFoundError as exc:
        raise McpUnavailable(
            f"`flows mcp` needs the MCP SDK ({exc.name} is not installed): pip install 'flows-memory[mcp]'"
        ) from exc
    return _server


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve the memory over MCP until the client (stdio) or a signal (HTTP) ends it.

    Raises:
        McpTokenRequired, McpUnavailable, McpListenFailed: before serving.
        FlowsMemoryError, JournalError: the store cannot be opened or read.
    """
    address: Address | None = args.http
    token = _token(address) if address is not None else None
    server = _load_server()
    from flows.mcp._sessions import Sessions
    from memory import MemoryStore

    _report_on_stderr()
    from flows._cli_common import embedder_for

    store = MemoryStore(args.db, journal=args.journal, embedder=embedder_for(args))
    stopped_by: int | None = None
    try:
        _check_store(store)
        sessions = Sessions(store, args.scope)
        if address is None:
            stopped_by = server.run(lambda: server.serve_stdio(sessions))
        else:
            sock = server.listen(address.host, address.port)
            with sock:

                def announce() -> None:
                    if args.json:  # stdout is free over HTTP: where to connect, as serve says it
                        url = server.url_of(sock)
                        sys.stdout.write(
                            orjson.dumps({"url": url, "token": token is not None}).decode() + "\n"
                        )
                        sys.stdout.flush()

                server.run(
                    lambda: server.serve_http(
                        sessions,
                        sock,
                        loopback=address.loopback,
                        token=token,
                        idle_timeout_s=args.idle_timeout,
                        max_sessions=args.max_sessions,
                        announce=announce,
                    )
                )
    finally:
        store.close()
    if stopped_by is not None:
        # Sessions ended cleanly; exit as the signal asks (SIGINT: `flows: interrupted`, 130), as the
        # HTTP server does.
        signal.raise_signal(stopped_by)
    return 0


def _report_on_stderr() -> None:
    """Make the server report the failures it survives (a tool's bug, a root run it could not end)
    on stderr, even without -v.

    The CLI keeps a quiet command quiet by giving the root logger a ``NullHandler``; with it there,
    ``logging.basicConfig`` does nothing, and every such report was dropped: a session whose root
    run could not be ended (a store turned read-only) ended with exit 0 and not a word. With -v (or
    ``$FLOWS_LOG``) the root logger already prints, and the server's reports go there."""
    root = logging.getLogger()
    if any(not isinstance(h, logging.NullHandler) for h in root.handlers):
        return
    server_log = logging.getLogger("flows.mcp")
    if not server_log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        server_log.addHandler(handler)
    server_log.setLevel(logging.WARNING)


_PROBE_RUN = "mcp-probe-no-such-run"


def _check_store(store: Any) -> None:
    """Reach the journal and read the store once, so a store that cannot serve fails before serving.

    Backends connect lazily; asking for a run that does not exist makes them reach their storage
    (a PostgreSQL server that refuses raises ``journal_unavailable`` here, not at the first learn).
    """
    import journal

    try:
        store.open_journal().run(_PROBE_RUN)
    except journal.JournalRunNotFound:
        pass  # reached it
    except journal.JournalError as exc:
        exc.run_id = None  # the probe's run is no run of the user's
        raise
    store.recall(limit=1)
