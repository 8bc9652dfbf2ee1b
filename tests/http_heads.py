"""Request heads of a chosen size written on a real socket, whole or in pieces, for the tests of
both servers' head limit (``flows._uvicorn.MAX_HEAD_BYTES``): h11 bounded only a head still
incomplete after a read, so the same head was refused or served by how it arrived."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from flows._uvicorn import MAX_HEAD_BYTES

#: the pieces a trickled head is written in, each sent once the last one was
TRICKLE_PIECE = 64


def head_of(request_line: str, size: int, *, headers: tuple[str, ...] = ()) -> bytes:
    """A request head of exactly ``size`` bytes (request line, ``headers``, a padding header, the
    empty line): the padding ``X-Pad`` header makes up the size."""
    fixed = (request_line + "\r\n" + "".join(h + "\r\n" for h in headers)).encode("latin-1")
    pad = size - len(fixed) - len(b"X-Pad: \r\n\r\n")
    assert pad > 0, size
    head = fixed + b"X-Pad: " + b"a" * pad + b"\r\n\r\n"
    assert len(head) == size
    return head


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def send_head(port: int, data: bytes, *, trickle: bool) -> Answer:
    """``data`` written on a new connection, in one ``sendall`` or ``TRICKLE_PIECE`` bytes at a time
    (``TCP_NODELAY``, a pause between pieces so they reach the server as many reads), then what the
    server answers until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if trickle:
            for start in range(0, len(data), TRICKLE_PIECE):
                sock.sendall(data[start : start + TRICKLE_PIECE])
                time.sleep(0.002)  # pacing only: nothing is asserted of time
        else:
            sock.sendall(data)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    top, _, body = got.partition(b"\r\n\r\n")
    status_line, *lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    return Answer(int(status_line.split()[1]), headers, body)


OVER = 20 * 1024
UNDER = 15 * 1024
assert UNDER < MAX_HEAD_BYTES < OVER
