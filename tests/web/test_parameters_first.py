"""A malformed query parameter is the usage error (``serve_bad_request``, 400) whatever the run,
finding or agent the path names: parameters are checked before anything is looked up, so an
unknown run with ``page=abc`` says what is wrong with the request, not that the run is missing."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from tests.web.stores import DemoStore

UNKNOWN_RUN = "0" * 26
UNKNOWN_KEY = "f" * 32
UNKNOWN_AGENT = "7"

#: (path, a malformed query) for every page and API whose path names something to look up
MALFORMED = [
    (f"/runs/{UNKNOWN_RUN}", "page=abc"),
    (f"/runs/{UNKNOWN_RUN}", "page=0"),
    (f"/runs/{UNKNOWN_RUN}", "skip=-1"),
    (f"/api/runs/{UNKNOWN_RUN}", "offset=abc"),
    (f"/api/runs/{UNKNOWN_RUN}", "full=2"),
    (f"/findings/{UNKNOWN_KEY}", "offset=abc"),
    (f"/findings/{UNKNOWN_KEY}", "limit=0"),
    (f"/api/findings/{UNKNOWN_KEY}/history", "limit=abc"),
    (f"/agents/{UNKNOWN_AGENT}", "before=abc"),
    (f"/agents/{UNKNOWN_AGENT}", "jsince=abc"),
    (f"/agents/{UNKNOWN_AGENT}", "jend=abc"),
    (f"/api/agents/{UNKNOWN_AGENT}/ledger", "limit=abc"),
    (f"/api/agents/{UNKNOWN_AGENT}/ledger", "before=abc"),
    (f"/api/agents/{UNKNOWN_AGENT}/why", "limit=0"),
    (f"/api/agents/{UNKNOWN_AGENT}/why", "before=x"),
    (f"/api/agents/{UNKNOWN_AGENT}/journal", "since=abc"),
    (f"/api/agents/{UNKNOWN_AGENT}/journal", "days=0"),
]


@pytest.mark.parametrize(("path", "query"), MALFORMED)
def test_a_malformed_parameter_is_a_400_even_where_nothing_is_found(
    client: TestClient, path: str, query: str
) -> None:
    found = client.get(path)
    assert found.status_code == 404  # the thing named is unknown: without the parameter, a 404
    answer = client.get(f"{path}?{query}")
    assert answer.status_code == 400, (path, query, answer.status_code)
    if path.startswith("/api/"):
        assert answer.json()["code"] == "serve_bad_request"
    else:
        assert "serve_bad_request" in answer.text
    assert query.partition("=")[0] in (answer.json()["message"] if path.startswith("/api/") else answer.text)


def test_a_malformed_parameter_of_a_known_run_is_the_same_400(client: TestClient, demo: DemoStore) -> None:
    known = client.get(f"/api/runs/{demo.done_run}?offset=abc")
    unknown = client.get(f"/api/runs/{UNKNOWN_RUN}?offset=abc")
    assert (known.status_code, known.json()) == (unknown.status_code, unknown.json())
    page = client.get(f"/runs/{demo.done_run}?page=abc")
    assert page.status_code == 400 and "serve_bad_request" in page.text
