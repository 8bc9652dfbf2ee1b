"""The token page never points off-site: against a real ``flows serve --token`` process, request
targets a browser would read as another site's address (``//host/x``, ``/\\host/x``, dot segments,
encoded slashes) get a redirect and a login form whose target is a path of this site."""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pytest
from starlette.testclient import TestClient

from tests.conftest import ROOT
from tests.web.stores import DemoStore

TOKEN = "redirect-test-token-0123456789"


@pytest.fixture(scope="module")
def server(demo: DemoStore, agent: Path) -> Iterator[tuple[str, int]]:
    """A real ``flows serve`` with a token, on a free loopback port: its host and port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows", "serve", "--db", str(demo.db), "--sail-home", str(agent),
         "--port", "0", "--json", "--token", TOKEN],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        if not line:
            raise AssertionError(f"flows serve did not start: {proc.communicate(timeout=30)[1].decode()}")
        url = urlsplit(str(orjson.loads(line)["url"]))
        assert url.hostname is not None and url.port is not None
        yield url.hostname, url.port
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert b"Traceback" not in err


def _get(server: tuple[str, int], target: str) -> tuple[int, dict[str, str], str]:
    """GET ``target`` exactly as written on the request line (no client normalises it)."""
    conn = http.client.HTTPConnection(*server, timeout=30)
    try:
        conn.request("GET", target)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
    finally:
        conn.close()


OFF_SITE = [
    ("//evil.example/x", "/evil.example/x"),
    ("///evil.example/x", "/evil.example/x"),
    ("/\\evil.example/x", "/evil.example/x"),
    ("/\\/evil.example/x", "/evil.example/x"),
    ("/./..//evil.example/x", "/evil.example/x"),
    ("/%2F%2Fevil.example/x", "/evil.example/x"),
    ("/%5C%5Cevil.example/x", "/evil.example/x"),
    ("/runs/..//evil.example", "/evil.example"),
]


def _is_same_site(target: str) -> bool:
    parts = urlsplit(target)
    return not parts.scheme and not parts.netloc and target.startswith("/") and target[1:2] not in ("/", "\\")


@pytest.mark.parametrize(("target", "expected"), OFF_SITE)
def test_a_token_login_redirects_only_to_a_path_of_this_site(
    server: tuple[str, int], target: str, expected: str
) -> None:
    status, headers, _ = _get(server, f"{target}?state=done&token={TOKEN}")
    assert status == 303
    assert headers["location"] == f"{expected}?state=done"
    assert _is_same_site(headers["location"])


@pytest.mark.parametrize(("target", "expected"), OFF_SITE)
def test_the_login_form_posts_only_to_a_path_of_this_site(
    server: tuple[str, int], target: str, expected: str
) -> None:
    status, _, page = _get(server, target)
    assert status == 401 and 'name="token"' in page
    [action] = re.findall(r'<form[^>]*class="login"[^>]*>', page)
    assert f'action="{expected}"' in action
    assert "evil.example" not in action.replace(expected, "")


@pytest.mark.parametrize(
    ("target", "expected"),
    [("/runs/", "/runs"), ("/findings/?q=rain", "/findings?q=rain"), ("/api/runs/", "/api/runs"),
     ("/runs//", "/runs"), ("/agents/0/", "/agents/0")],
)  # fmt: skip
def test_a_trailing_slash_is_sent_on_by_a_path_never_by_the_host_header(
    client: TestClient, target: str, expected: str
) -> None:
    """``/runs/`` is ``/runs``; the redirect names a path of this site, not an address built from
    the request's Host header (which a proxy or a DNS name in front of the dashboard can set)."""
    for host in ("127.0.0.1", "localhost:9"):
        response = client.get(target, headers={"host": host})
        assert response.status_code == 308, response.text
        assert response.headers["location"] == expected
        assert _is_same_site(response.headers["location"])


def test_a_trailing_slash_on_nothing_is_not_found(client: TestClient) -> None:
    assert client.get("/nothing/").status_code == 404
    assert client.get("/runs/no-such-run/x/").status_code == 404
