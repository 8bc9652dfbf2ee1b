"""Fixtures of the dashboard's tests: a populated store and an agent home (built once: the server
never writes them, which ``test_readonly`` checks), and an HTTP client on the app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")

from starlette.testclient import TestClient

from flows.web import ServeConfig, create_app
from tests.web.stores import DemoStore, agent_home, demo_store


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    """The demo store (read-only for every test that uses it)."""
    return demo_store(tmp_path_factory.mktemp("web") / "store")


@pytest.fixture(scope="session")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo agent's home (read-only for every test that uses it)."""
    return agent_home(tmp_path_factory.mktemp("web") / "agent")


def client_for(config: ServeConfig) -> TestClient:
    """A client on the app over ``config``, addressed as the loopback host the guard expects."""
    return TestClient(create_app(config), base_url="http://127.0.0.1", follow_redirects=False)


@pytest.fixture
def client(demo: DemoStore, agent: Path) -> Iterator[TestClient]:
    """A client of the dashboard over the demo store and agent."""
    with client_for(ServeConfig(db=str(demo.db), sail_homes=(agent,))) as c:
        yield c
    c.app.state.reader.close()  # type: ignore[attr-defined]
