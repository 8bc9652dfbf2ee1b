"""Fuzzing every dashboard route's parameters: path segments and query values of any text (odd
Unicode, control characters, huge numbers, repeated and unknown parameters), on the pages and under
``/api``. Every answer is below 500, never shows a traceback, and comes within ``BOUND_S``; a refusal
is a documented code. The fixed-seed profile keeps the examples the same on every run and machine.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("starlette", reason="the web extra is not installed")

from starlette.testclient import TestClient

from flows.web import ServeConfig
from tests.conftest import ROOT
from tests.web.conftest import client_for
from tests.web.stores import agent_home, demo_store

BOUND_S = 10.0
DOCUMENTED = set(re.findall(r"`([a-z]+_[a-z_]+)`", (ROOT / "docs" / "SURFACE.md").read_text()))
SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,  # the fixed-seed profile: the same examples on every run and machine
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Each route with the query parameters it reads; ``{}`` in a path is a fuzzed segment.
ROUTES: dict[str, tuple[str, ...]] = {
    "/runs": ("state", "flow", "cursor", "limit"),
    "/api/runs": ("state", "flow", "cursor", "limit"),
    "/runs/{}": ("record", "page"),
    "/api/runs/{}": ("offset", "full"),
    "/runs/{}/input": (),
    "/runs/{}/output": (),
    "/runs/{}/traceback": (),
    "/findings": ("q", "tag", "meta", "scope", "source", "cursor", "limit"),
    "/api/findings": ("q", "tag", "meta", "scope", "source", "cursor", "limit"),
    "/findings/{}": ("offset", "limit"),
    "/api/findings/{}": (),
    "/api/findings/{}/history": ("offset", "limit"),
    "/scopes": ("after", "limit"),
    "/api/scopes": ("after", "limit"),
    "/agents": (),
    "/api/agents": (),
    "/agents/{}": ("before",),
    "/api/agents/{}/ledger": ("before", "limit"),
    "/api/agents/{}/status": (),
    "/api/agents/{}/why": ("limit",),
    "/api/agents/{}/balances": (),
    "/api/agents/{}/journal": ("days",),
    "/": (),
}

_number = st.integers(-(10**30), 10**30).map(str)
_value = (
    st.text(max_size=30)
    | _number
    | st.sampled_from(["", "0", "1", "-1", "9" * 40, "x=1", "=", "a=b=c", "done", "../..", "%00", "1e9"])
)
_segment = (
    st.text(min_size=1, max_size=40)
    | _number
    | st.sampled_from(["0", "1", "..", "%2e%2e", "a" * 300, "0" * 32, "20260101T000000-0000000000"])
)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The dashboard over the demo store and agent home (as in tests/web)."""
    demo = demo_store(tmp_path_factory.mktemp("fuzz") / "store")
    agent = agent_home(tmp_path_factory.mktemp("fuzz") / "agent")
    with client_for(ServeConfig(db=str(demo.db), sail_homes=(agent,))) as c:
        yield c
    c.app.state.reader.close()  # type: ignore[attr-defined]


def _check(client: TestClient, url: str, params: list[tuple[str, str]]) -> None:
    started = time.monotonic()
    response = client.get(url, params=params)
    elapsed = time.monotonic() - started
    assert elapsed < BOUND_S, (url, params, elapsed)
    assert response.status_code < 500, (url, params, response.status_code, response.text[:300])
    # a failed run's recorded traceback is data the run page shows, not the server's own
    shown = re.sub(r'"traceback":"(?:[^"\\]|\\.)*"', "", response.text)
    shown = re.sub(r'<details class="traceback">.*?</details>', "", shown, flags=re.S)
    assert "Traceback" not in shown, (url, params)
    if response.status_code >= 400 and url.startswith("/api/"):
        assert response.json()["code"] in DOCUMENTED, (url, params, response.text[:300])


@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_answers_any_parameters_below_500_without_a_traceback(
    client: TestClient, route: str
) -> None:
    names = ROUTES[route]
    known = st.lists(st.tuples(st.sampled_from(names), _value), max_size=6) if names else st.just([])
    unknown = st.lists(st.tuples(st.text(max_size=10), _value), max_size=2)

    @SETTINGS
    @given(segment=_segment, params=known, extra=unknown)
    def check(segment: str, params: list[tuple[str, str]], extra: list[tuple[str, str]]) -> None:
        url = route.replace("{}", quote(segment, safe=""))
        _check(client, url, [*params, *extra])

    check()


def test_the_fuzzed_routes_are_every_route_the_app_serves(client: TestClient) -> None:
    served: set[Any] = {getattr(r, "path", None) for r in client.app.routes}  # type: ignore[attr-defined]
    served.discard("/static")
    fuzzed = {re.sub(r"\{\}", "{x}", r) for r in ROUTES}
    assert {re.sub(r"\{[^}]+\}", "{x}", str(p)) for p in served if p} == fuzzed
