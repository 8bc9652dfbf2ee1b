"""``flows serve``: start the read-only dashboard (``flows.web``) on a local address.

The command lives apart from ``flows.web`` so that ``flows --help`` and every other command never
import Starlette, uvicorn or Jinja2: they are imported only when ``serve`` runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import orjson

from flows._cli_common import diagnose
from flows.web._errors import ServeExtraMissing, ServeTokenRequired
from memory.cli import EXIT_OK, EXIT_USAGE

Add = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]

TOKEN_ENV = "FLOWS_SERVE_TOKEN"  # noqa: S105 - the name of the variable, not a secret
MIN_TOKEN = 16


def _port(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(
            f"must be a port number from 0 to 65535 (0: any free port), got {text!r:.80}"
        )
    return int(text)


def _home(text: str) -> Path:
    path = Path(text)
    try:
        if path.is_dir():
            return path.resolve()
        problem = "is not a folder"
    except OSError as exc:  # a name too long, a folder on the way this user may not search
        problem = f"cannot be looked at ({exc.strerror or exc})"
    raise argparse.ArgumentTypeError(f"{text!r:.200} {problem} (an agent's home holds .sail/)")


def add_serve_command(add: Add) -> None:
    """Register ``serve`` with the ``flows`` parser's ``add``."""
    p = add("serve", cmd_serve, "a read-only web dashboard of runs, findings and agent ledgers")
    p.add_argument(
        "--sail-home",
        metavar="DIR",
        action="append",
        type=_home,
        default=[],
        help="an agent's home (the folder holding .sail/); repeat for several agents (default: none)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8765, help="port to bind (default 8765; 0: any free port)")
    p.add_argument(
        "--token",
        metavar="TOKEN",
        help=f"require this token on every request (default ${TOKEN_ENV}); needed off loopback",
    )


def check_address(host: str, token: str | None) -> None:
    """Off loopback a token of at least ``MIN_TOKEN`` characters is required; a token given on
    loopback is held to the same length. A token is printable ASCII without spaces (it travels in a
    header and a cookie).

    Raises:
        ServeTokenRequired: no token, or a short one.
    """
    from flows.web._net import is_loopback  # sockets only for serve, not for every command

    if token is not None and len(token) < MIN_TOKEN:
        raise ServeTokenRequired(f"the token must be at least {MIN_TOKEN} characters; pick a long random one")
    # a header or cookie carries only ASCII: another character could never be sent, and setting
    # the login cookie with it failed
    if token is not None and not all("!" <= c <= "~" for c in token):
        raise ServeTokenRequired(
            "the token must be printable ASCII without spaces (letters, digits, punctuation); "
            "pick a long random one, e.g. from `python -c 'import secrets; print(secrets.token_urlsafe())'`"
        )
    if token is None and not is_loopback(host):
        # an empty host binds every interface; say so rather than print nothing between two spaces
        where = "every interface (--host '')" if host == "" else host
        raise ServeTokenRequired(
            f"serving {where} (not loopback) needs a token: pass --token or set ${TOKEN_ENV} (at least "
            f"{MIN_TOKEN} characters); every request must then carry it"
        )


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve the dashboard until Ctrl-C (or SIGTERM); print its URL first."""
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    try:
        check_address(args.host, token)
    except ServeTokenRequired as exc:
        diagnose(exc, as_json=args.json)
        return EXIT_USAGE
    from memory import check_store_location, refuse_odd_db, resolve_db

    # what `flows recall` refuses (a FIFO, a socket or a folder where the DB belongs, a file where
    # its folder belongs, no store at the path) is refused before binding, not served as an error on
    # every page; both look with (l)stat only, so a FIFO is never opened
    refuse_odd_db(resolve_db(args.db))
    check_store_location(args.db, args.journal, creating=False)
    try:
        import uvicorn

        from flows.web._app import create_app, head_refusal
        from flows.web._reader import ServeConfig
    except ImportError as exc:
        raise ServeExtraMissing(
            f"flows serve needs the web extra ({exc.name} is missing): pip install 'flows-memory[web]'"
        ) from exc
    from flows._uvicorn import announcing_server, bounded_http
    from flows.web._net import bind

    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    config = ServeConfig(db=args.db, journal=args.journal, sail_homes=tuple(args.sail_home), token=token)
    app = create_app(config)

    def announce() -> None:  # once serving, Ctrl-C handled by the server (``announcing_server``)
        if args.json:
            sys.stdout.write(
                orjson.dumps({"url": url, "readOnly": True, "token": token is not None}).decode() + "\n"
            )
        else:
            sys.stdout.write(f"flows serve: {url} (read-only; Ctrl-C stops it)\n")
        sys.stdout.flush()

    server = announcing_server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            lifespan="off",
            **bounded_http(head_too_large=head_refusal()),
        ),
        announce,
    )
    try:
        server.run(sockets=[sock])
    finally:
        app.state.reader.close()
        sock.close()
    return EXIT_OK
