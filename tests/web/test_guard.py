"""The token, the host check, and the command's refusals before it binds anything."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

from flows.web import ServeConfig
from tests.conftest import ROOT, run_python
from tests.web.conftest import client_for
from tests.web.stores import DemoStore

TOKEN = "a-long-random-token-0123456789"


@pytest.fixture
def guarded(demo: DemoStore, agent: Path) -> Iterator[TestClient]:
    with client_for(ServeConfig(db=str(demo.db), sail_homes=(agent,), token=TOKEN)) as c:
        yield c
    c.app.state.reader.close()  # type: ignore[attr-defined]


def test_without_the_token_every_route_is_a_coded_401_that_names_nothing_of_the_store(
    guarded: TestClient, demo: DemoStore, agent: Path
) -> None:
    for url in (
        "/api/runs",
        "/api/findings",
        "/api/agents/0/status",
        "/runs",
        "/agents/0",
        "/findings?q=rain",
    ):
        response = guarded.get(url)
        assert response.status_code == 401, url
        assert str(demo.db) not in response.text and str(agent) not in response.text
    assert guarded.get("/api/runs").json()["code"] == "serve_unauthorized"
    page = guarded.get("/runs").text
    assert "serve_unauthorized" in page and 'name="token"' in page  # a login form
    assert guarded.get("/static/style.css").status_code == 200  # styles it; holds nothing of the store


def test_a_wrong_token_is_refused_in_the_header_the_cookie_and_the_query(guarded: TestClient) -> None:
    assert (
        guarded.get("/api/runs", headers={"Authorization": "Bearer " + TOKEN[:-1] + "x"}).status_code == 401
    )
    guarded.cookies.set("flows_token", "not-it-at-all-0000000")
    assert guarded.get("/api/runs").status_code == 401
    guarded.cookies.clear()
    response = guarded.get("/runs", params={"token": "wrong"})
    assert response.status_code == 401 and "set-cookie" not in response.headers


def test_the_bearer_header_opens_every_route(guarded: TestClient) -> None:
    for url in ("/api/runs", "/runs", "/agents/0", "/findings"):
        assert guarded.get(url, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200, url


def test_a_token_in_the_query_sets_a_cookie_and_comes_back_without_it(guarded: TestClient) -> None:
    response = guarded.get("/runs", params={"state": "done", "token": TOKEN})
    assert response.status_code == 303
    assert response.headers["location"] == "/runs?state=done"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"flows_token={TOKEN};") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert guarded.get("/runs", params={"state": "done"}).status_code == 200  # the cookie carries it


def test_a_token_link_from_another_site_is_a_page_of_this_one_that_moves_on(
    guarded: TestClient, demo: DemoStore, agent: Path
) -> None:
    # the browser withholds a SameSite=Strict cookie from a redirect chain begun on another site:
    # the login's answer is a page that sets it and moves on (a navigation of this site)
    cross = {"sec-fetch-site": "cross-site"}
    for path, target in (("/runs", "/runs?state=done"), ("/\\evil.example/x", "/evil.example/x?state=done")):
        response = guarded.get(path, params={"state": "done", "token": TOKEN}, headers=cross)
        assert response.status_code == 200 and "location" not in response.headers
        assert response.headers["set-cookie"].startswith(f"flows_token={TOKEN};")
        assert f'<meta http-equiv="refresh" content="0; url={target}">' in response.text
        assert f'<a href="{target}" id="continue">' in response.text
        assert str(demo.db) not in response.text and f"<bdi>{agent.name}</bdi>" not in response.text
        assert "<script" not in response.text
    refused = guarded.get("/runs", params={"token": "wrong"}, headers=cross)
    assert refused.status_code == 401 and "set-cookie" not in refused.headers


def test_without_a_token_only_a_loopback_host_name_is_answered(client: TestClient) -> None:
    assert client.get("/api/runs", headers={"host": "localhost:8765"}).status_code == 200
    refused = client.get("/api/runs", headers={"host": "attacker.example:8765"})
    assert refused.status_code == 400 and "loopback" in refused.json()["message"]


def _names_nothing_of_the_store(client: TestClient, text: str, demo: DemoStore, agent: Path) -> bool:
    reader = client.app.state.reader  # type: ignore[attr-defined]
    names = (str(demo.db), reader.journal_label(), f"<bdi>{agent.name}</bdi>")
    return not any(name in text for name in names)


MISSING_STATIC = ("/static/x", "/static/style.css.map", "/static/", "/static//style.css", "/static/a/../x")


def test_a_missing_static_file_without_the_token_is_the_refusal_not_a_404_naming_the_store(
    guarded: TestClient, demo: DemoStore, agent: Path
) -> None:
    for url in MISSING_STATIC:
        response = guarded.get(url)
        assert (response.status_code, url) == (401, url)
        assert "serve_unauthorized" in response.text
        assert _names_nothing_of_the_store(guarded, response.text, demo, agent), url
    # with the token, the request passed the guard: the page may name the store
    opened = guarded.get("/static/x", headers={"Authorization": f"Bearer {TOKEN}"})
    assert opened.status_code == 404 and str(demo.db) in opened.text


def test_a_missing_static_file_for_a_foreign_host_is_the_refusal_not_a_404_naming_the_store(
    client: TestClient, demo: DemoStore, agent: Path
) -> None:
    for url in MISSING_STATIC:
        response = client.get(url, headers={"host": "evil.example"})
        assert (response.status_code, url) == (400, url)
        assert "loopback" in response.text
        assert _names_nothing_of_the_store(client, response.text, demo, agent), url
    assert client.get("/static/style.css", headers={"host": "evil.example"}).status_code == 200
    assert client.get("/static/x").status_code == 404  # a loopback Host passed the guard


def _serve(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    code = "import sys; from flows._cli import main; sys.exit(main(sys.argv[1:]))"
    result = run_python(code, "serve", *args, env=env, timeout=60)
    return result.returncode, result.stdout, result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--host", "0.0.0.0"),
        ("--host", "192.0.2.10", "--token", "short"),
        ("--host", "127.0.0.1", "--token", "short"),
        ("--host", "192.0.2.10", "--token", "ключ-очень-длинный-токен"),
        ("--host", "127.0.0.1", "--token", "a long token with spaces in it"),
    ],
)
def test_serving_off_loopback_without_a_long_token_is_refused_before_binding(args: tuple[str, ...]) -> None:
    status, out, err = _serve(*args, "--port", "0", "--json")
    assert status == 2 and out == ""
    assert orjson.loads(err)["code"] == "serve_token_required"


def test_an_empty_host_is_named_as_every_interface_in_the_refusal() -> None:
    status, out, err = _serve("--host", "", "--port", "0", "--json")
    assert status == 2 and out == ""
    error = orjson.loads(err)
    assert error["code"] == "serve_token_required"
    assert "serving every interface (--host '') (not loopback)" in error["message"]


def test_the_token_may_come_from_the_environment(tmp_path: Path) -> None:
    # a long token from the environment passes the check; the bind then fails on an address that
    # is not this machine's (TEST-NET-1), which shows the token was accepted
    status, _, err = _serve("--host", "192.0.2.10", "--port", "0", "--db", str(tmp_path / "h.db"),
                            env={"FLOWS_SERVE_TOKEN": TOKEN})  # fmt: skip
    assert status == 1 and "error[serve_bind_failed]" in err


def test_a_sail_home_that_is_not_a_folder_is_a_usage_error(tmp_path: Path) -> None:
    status, _, err = _serve("--sail-home", str(tmp_path / "missing"))
    assert status == 2 and "is not a folder" in err


def _odd(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    """A store path with ``kind`` where the history DB (``fifo``, ``socket``) or its folder
    (``file-folder``, ``fifo-folder``) belongs: the ``--db`` to give, and the path refused."""
    if kind == "fifo":
        os.mkfifo(tmp_path / "h.db")
        return tmp_path / "h.db", tmp_path / "h.db"
    if kind == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind("h.db")  # relative (the cwd is tmp_path): a socket's path is at most 107 bytes
        return tmp_path / "h.db", tmp_path / "h.db"
    folder = tmp_path / "store"
    if kind == "fifo-folder":
        os.mkfifo(folder)
    else:
        folder.write_bytes(b"not a folder")
    return folder / "h.db", folder


@pytest.mark.parametrize("kind", ["fifo", "socket", "file-folder", "fifo-folder"])
def test_a_store_path_that_holds_no_store_is_refused_before_binding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # as `flows recall` refuses it; served, every page was a coded 500 (and a FIFO is never opened:
    # a serve that started, or hung on it, would run into the timeout)
    monkeypatch.chdir(tmp_path)
    db, refused = _odd(tmp_path, kind)
    status, out, err = _serve("--db", str(db), "--port", "0", "--json")
    assert status == 1 and out == ""
    error = orjson.loads(err)
    assert error["code"] == "memory_unreachable" and error["path"] == str(refused)
    assert str(refused) in error["message"]
    recall = run_python("import sys; from flows._cli import main; sys.exit(main(sys.argv[1:]))",
                        "recall", "--db", str(db), "--json", timeout=60)  # fmt: skip
    assert recall.returncode == 1 and orjson.loads(recall.stderr)["code"] == "memory_unreachable"


@pytest.mark.parametrize("kind", ["fifo", "socket", "file", "below-a-file", "file-url", "beside-the-db"])
def test_a_journal_path_that_holds_no_journal_folder_is_refused_before_binding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # served, it bound and answered every page with an error; `flows recall` said the journal was
    # corrupt (`journal_corrupt`), though nothing in it was damaged: it is refused as an odd store
    # path is, naming what is there (a FIFO is never opened: a hang would run into the timeout)
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "store" / "h.db"
    db.parent.mkdir()
    refused = db.parent / "flows-journal" if kind == "beside-the-db" else tmp_path / "j"
    if kind == "fifo":
        os.mkfifo(refused)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind("j")  # relative (the cwd is tmp_path): a socket's path is at most 107 bytes
    else:
        refused.write_bytes(b"not a folder")
    journal = {"below-a-file": f"{refused}/runs", "file-url": f"file://{refused}"}.get(kind, str(refused))
    given = [] if kind == "beside-the-db" else ["--journal", journal]
    status, out, err = _serve("--db", str(db), *given, "--port", "0", "--json")
    assert status == 1 and out == "", err
    error = orjson.loads(err)
    assert error["code"] == "memory_unreachable" and error["path"] == str(refused)
    assert str(refused) in error["message"] and "not a folder" in error["message"]
    recall = run_python("import sys; from flows._cli import main; sys.exit(main(sys.argv[1:]))",
                        "recall", "--db", str(db), *given, "--json", timeout=60)  # fmt: skip
    assert recall.returncode == 1 and orjson.loads(recall.stderr)["code"] == "memory_unreachable"


def test_serving_a_folder_with_no_store_is_refused_as_recall_refuses_it(tmp_path: Path) -> None:
    status, out, err = _serve("--db", str(tmp_path / "missing" / "h.db"), "--port", "0", "--json")
    assert status == 1 and out == ""
    assert orjson.loads(err)["code"] == "memory_store_missing"


def test_importing_flows_and_its_other_commands_never_import_the_web_stack() -> None:
    code = (
        "import sys, flows, flows._cli;"
        "flows._cli.build_parser();"
        "import flows.web;"
        "print(sorted(m for m in ('starlette', 'uvicorn', 'jinja2') if m in sys.modules))"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    assert (ROOT / "flows" / "web" / "templates" / "agent.html").is_file()
