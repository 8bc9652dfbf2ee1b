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


_DIGITS = frozenset("0123456789")
#: what an IPv6 literal may hold between its brackets (RFC 3986 ``IPv6address``): no zone id
#: (``%25…``) and no ``IPvFuture`` (``v1.…``)
_IPV6_CHARS = frozenset("0123456789abcdefABCDEF:.")
_LOOPBACK_NAMES = ("localhost", "localhost.")


def _dec_octet(text: str) -> bool:
    """RFC 3986 ``dec-octet``: 0 to 255 in decimal, without a leading zero."""
    return (
        0 < len(text) <= 3
        and set(text) <= _DIGITS
        and (text == "0" or text[0] != "0")
        and int(text) <= 255
    )


def _loopback_host(host: str) -> bool:
    """``host`` (no brackets, no port) is ``localhost`` or a dotted-decimal 127.0.0.0/8 address.

    Any other ``reg-name`` is refused, percent-escapes included: only these exact names are loopback.
    """
    if host.lower() in _LOOPBACK_NAMES:
        return True
    parts = host.split(".")
    if len(parts) != 4 or not all(_dec_octet(p) for p in parts):
        return False
    return ipaddress.IPv4Address(host).is_loopback


def _port(rest: str) -> bool:
    """``rest`` is nothing, or ``:`` and an RFC 3986 ``port`` (decimal digits, possibly none) that is
    at most 65535."""
    if not rest:
        return True
    digits = rest[1:]
    return (
        rest[0] == ":"
        and len(digits) <= 5
        and set(digits) <= _DIGITS
        and (not digits or int(digits) <= 65535)
    )


def is_loopback_authority(value: str) -> bool:
    """True when ``value`` (a ``Host`` header's value) is exactly a loopback host and an optional
    port, by RFC 3986's ``host [":" port]``: ``localhost``, a dotted-decimal 127.0.0.0/8 address or
    ``[::1]``, then nothing or ``:`` and at most 65535.

    Parsed whole, never by prefix or suffix: userinfo (``evil@127.0.0.1``), a path, spaces, a second
    colon, a port past 65535 or with other characters, an empty host, percent-escapes, a zone id,
    anything outside ASCII all make it False.
    """
    if not value.isascii():
        return False
    if value.startswith("["):
        end = value.find("]")
        literal = value[1:end] if end > 0 else ""
        if not literal or not set(literal) <= _IPV6_CHARS:
            return False
        try:
            loopback = ipaddress.IPv6Address(literal).is_loopback
        except ValueError:
            return False
        return loopback and _port(value[end + 1 :])
    host, colon, port = value.partition(":")
    return _loopback_host(host) and _port(colon + port)


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
