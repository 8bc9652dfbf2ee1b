"""Addresses: which hosts are loopback, and binding the listening socket."""

from __future__ import annotations

import ipaddress
import socket

from flows.web._errors import ServeBindFailed


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and the loopback addresses (127.0.0.0/8, ::1)."""
    bare = host.strip("[]").lower()
    if bare in {"localhost", "localhost."}:
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (IPv6 when ``host`` is an IPv6 address; port 0 picks a
    free one).

    Raises:
        ServeBindFailed: the address is in use, not this machine's, or not allowed.
    """
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bare, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ServeBindFailed(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from exc
    return sock
