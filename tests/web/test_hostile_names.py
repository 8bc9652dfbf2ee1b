"""An agent's home whose folder name is not UTF-8 (a byte such as ``ff``, which Python reads as the
lone surrogate U+DCFF) is shown as the CLI shows it (``desk\\xff``) on every page, and given by the
JSON API as the CLI's ``--json`` gives it (the ``\\udcff`` escape, which decodes to the same name).
No UTF-8 page can hold the surrogate itself: every page (its menu names every agent) was a 500."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from flows.web import ServeConfig
from tests.web.conftest import client_for
from tests.web.stores import agent_home

NAME = os.fsdecode(b"desk\xff")


@pytest.mark.skipif(os.fsencode(NAME) != b"desk\xff", reason="file names are not bytes here")
def test_an_agent_folder_whose_name_is_not_utf8_is_shown_escaped_on_every_page_and_api(
    tmp_path: Path,
) -> None:
    home = agent_home(tmp_path / NAME)
    with client_for(ServeConfig(db=str(tmp_path / "store" / "h.db"), sail_homes=(home,))) as client:
        pages = {url: client.get(url) for url in ("/runs", "/findings", "/agents", "/agents/0")}
        agents = client.get("/api/agents")
        client.app.state.reader.close()  # type: ignore[attr-defined]
    for url, page in pages.items():
        assert page.status_code == 200, (url, page.text[:300])
        assert "Agent <bdi>desk\\xff</bdi>" in page.text  # the menu
    assert f"<bdi>{tmp_path}/desk\\xff</bdi>" in pages["/agents/0"].text  # its home
    assert "<title>Agent desk\\xff · flows</title>" in pages["/agents/0"].text
    assert agents.status_code == 200
    assert json.loads(agents.content)[0]["home"] == str(home)  # the same name, surrogate and all
