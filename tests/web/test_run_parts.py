"""A run's page shows at most ``PART_SHOWN`` (64 KiB) of its input, of its output and of its
traceback, says where it cut and how big the whole is, and links to the whole as plain text
(``/runs/RUN/input``, ``/output``, ``/traceback``). Before, the page rendered each whole: a run whose
output was megabytes of ``<`` made a page six times that size (each one escaped)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

import flows
from flows.web import ServeConfig
from flows.web._app import as_json_text, text_part
from flows.web._runs import PART_SHOWN, cut_parts
from tests.web.conftest import client_for
from tests.web.stores import DemoStore

OUTPUT_CHARS = 6_000_000  # under the runtime's 8 MiB bound on an output, 90 times what a page shows

_HUGE = f"""\
import flows


@flows.flow(name="huge-output", scope="big")
async def body(f):
    return {{"report": "<" * {OUTPUT_CHARS} + "\\u202e tail"}}
"""


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str, object]]:
    """A store holding one done run whose output is 6 MB of ``<``, its input 100 KB; a client on it."""
    home = tmp_path_factory.mktemp("huge")
    (home / "huge.py").write_text(_HUGE)
    given = {"rows": ["&" * 100] * 1000}
    done = flows.run(home / "huge.py", db=home / "history.db", input=given)
    assert done.ok, done.error
    with client_for(ServeConfig(db=str(home / "history.db"))) as client:
        yield client, done.run_id, given
    client.app.state.reader.close()  # type: ignore[attr-defined]


def test_a_huge_output_is_cut_on_its_page_with_its_size_and_a_link_to_the_whole(
    huge: tuple[TestClient, str, object],
) -> None:
    client, run_id, _ = huge
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    output = {"report": "<" * OUTPUT_CHARS + "\u202e tail"}
    whole = len(orjson.dumps(output))
    # the page holds at most PART_SHOWN bytes of the input and of the output, each escaped ("<" is 4
    # bytes of HTML, "&" 5): about 24 MB before
    assert len(page.content) < 2 * 5 * PART_SHOWN + 64 * 1024, len(page.content)
    note = f"the output is cut here: {PART_SHOWN:,} bytes of it are shown; the whole is {whole:,} bytes"
    assert note in page.text
    assert f'<a href="/runs/{run_id}/output">' in page.text
    assert f"flows show {run_id} --json" in page.text
    assert "\u202e" not in page.text  # the cut text never holds the override raw (it is past the cut)


def test_the_whole_output_is_served_as_plain_text(huge: tuple[TestClient, str, object]) -> None:
    client, run_id, _ = huge
    answer = client.get(f"/runs/{run_id}/output")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert orjson.loads(answer.content) == {"report": "<" * OUTPUT_CHARS + "\u202e tail"}


def test_an_input_over_the_bound_is_cut_and_served_whole(huge: tuple[TestClient, str, object]) -> None:
    client, run_id, given = huge
    page = client.get(f"/runs/{run_id}")
    assert "the input is cut here" in page.text and f'href="/runs/{run_id}/input"' in page.text
    assert orjson.loads(client.get(f"/runs/{run_id}/input").content) == given


def test_a_small_input_and_output_are_shown_whole_without_a_note(client: TestClient, demo: DemoStore) -> None:
    page = client.get(f"/runs/{demo.done_run}")
    assert "&#34;learned&#34;: 6" in page.text and "&#34;hPa&#34;: 1003" in page.text
    assert "is cut here" not in page.text
    assert orjson.loads(client.get(f"/runs/{demo.done_run}/output").content) == {"learned": 6, "hPa": 1003}


def test_a_traceback_is_served_whole_and_a_run_without_one_is_a_404(
    client: TestClient, demo: DemoStore
) -> None:
    recorded = client.get(f"/api/runs/{demo.failed_run}").json()["error"]["traceback"]
    assert "the sensor did not answer" in recorded
    answer = client.get(f"/runs/{demo.failed_run}/traceback")
    assert (answer.status_code, answer.text) == (200, recorded)
    missing = client.get(f"/runs/{demo.done_run}/traceback")
    assert missing.status_code == 404 and "serve_not_found" in missing.text
    unknown = client.get(f"/runs/{'0' * 26}/output")
    assert unknown.status_code == 404 and "journal_run_not_found" in unknown.text


def test_a_traceback_is_cut_at_its_bound_on_a_character() -> None:
    text = "é" * 100  # two bytes each: a cut at an odd byte falls inside one
    part = text_part(text, "/runs/R/traceback", limit=51)
    assert (part.text, part.size, part.cut) == ("é" * 25, 200, True)
    assert text_part(text, "/runs/R/traceback", limit=200).cut is False


def test_a_timeline_cell_formats_only_the_start_of_a_value() -> None:
    # the run page's timeline shows the first 200 characters of an output event's JSON: it formats
    # (and escapes the bidirectional controls of) its first 1000 bytes, never the whole 6 MB
    value = {"report": "é" * 600 + "\u202e" + "x" * 6_000_000}
    head = as_json_text(value, head=1000)
    assert len(head.encode()) <= 1000 and head == as_json_text(value)[: len(head)]
    small = {"a": "\u202e"}
    assert as_json_text(small, head=1000) == as_json_text(small) == '{\n  "a": "\\u202e"\n}'


def test_the_runs_json_cuts_a_huge_output_and_input_saying_where_how_big_and_where_the_whole_is(
    huge: tuple[TestClient, str, object],
) -> None:
    # ``/api/runs/RUN`` gave the output whole, twice (the run's and its output event's): 12 MB
    client, run_id, given = huge
    answer = client.get(f"/api/runs/{run_id}")
    assert answer.status_code == 200
    assert len(answer.content) < 4 * PART_SHOWN + 64 * 1024, len(answer.content)
    run = answer.json()
    whole_output = client.get(f"/runs/{run_id}/output").content
    whole_input = client.get(f"/runs/{run_id}/input").content
    assert run["cut"] == {
        "input": {"shownBytes": PART_SHOWN, "bytes": len(whole_input), "url": f"/runs/{run_id}/input"},
        "output": {"shownBytes": PART_SHOWN, "bytes": len(whole_output), "url": f"/runs/{run_id}/output"},
    }
    assert run["output"] == whole_output[:PART_SHOWN].decode()  # the start of its JSON, as text
    assert run["input"] == whole_input[:PART_SHOWN].decode() and whole_input == orjson.dumps(given)
    (event,) = [e for e in run["timeline"] if e["kind"] == "output"]
    assert event["output"] == run["output"] and event["cut"] == {"output": run["cut"]["output"]}
    assert {k: v for k, v in run.items() if k not in ("input", "output", "cut", "timeline")} == {
        k: v
        for k, v in client.get(f"/api/runs/{run_id}?full=1").json().items()
        if k not in ("input", "output", "timeline")
    }


def test_the_runs_json_gives_the_whole_with_full_1(huge: tuple[TestClient, str, object]) -> None:
    client, run_id, given = huge
    run = client.get(f"/api/runs/{run_id}", params={"full": "1"}).json()
    output = {"report": "<" * OUTPUT_CHARS + "\u202e tail"}
    assert (run["input"], run["output"]) == (given, output) and "cut" not in run
    (event,) = [e for e in run["timeline"] if e["kind"] == "output"]
    assert event["output"] == output and "cut" not in event
    for bad in ("2", "yes", "-1"):
        refused = client.get(f"/api/runs/{run_id}", params={"full": bad})
        assert refused.status_code == 400 and refused.json()["code"] == "serve_bad_request"


def test_a_small_run_is_given_whole_without_a_cut(client: TestClient, demo: DemoStore) -> None:
    run = client.get(f"/api/runs/{demo.done_run}").json()
    assert run["output"] == {"learned": 6, "hPa": 1003} and "cut" not in run
    assert run == client.get(f"/api/runs/{demo.done_run}?full=1").json()


def test_a_traceback_over_the_bound_is_cut_on_a_character_and_marked() -> None:
    # the runtime records at most 16K characters of a traceback; a journal written otherwise may hold more
    error = {"code": "flow_failed", "message": "m", "traceback": "é" * PART_SHOWN}
    run = {"runId": "R", "input": None, "output": None, "error": error}
    shown, _ = cut_parts(run, [])
    assert shown["error"] == {**error, "traceback": "é" * (PART_SHOWN // 2)}
    assert shown["cut"] == {
        "error.traceback": {"shownBytes": PART_SHOWN, "bytes": 2 * PART_SHOWN, "url": "/runs/R/traceback"}
    }
    assert run["error"]["traceback"] == "é" * PART_SHOWN  # the run given is left as it was
    small, _ = cut_parts({**run, "error": {**error, "traceback": "é" * 100}}, [])
    assert "cut" not in small


def test_only_the_runs_own_output_event_is_cut_and_pointed_at_its_output() -> None:
    big = "x" * (PART_SHOWN + 10)
    run = {"runId": "R", "input": None, "output": big, "error": None}
    own = {"kind": "output", "output": big, "tsMs": 1}
    other = {"kind": "output", "output": big + "y", "tsMs": 2}  # a journal written otherwise
    shown, (first, second) = cut_parts(run, [own, other])
    assert first["cut"] == {"output": shown["cut"]["output"]} and first["output"] == shown["output"]
    assert second is other  # left whole: /runs/R/output serves another value


def test_a_run_whose_records_nest_as_deep_as_the_journal_takes_is_served(tmp_path: Path) -> None:
    """The run's API answer wraps its output's record in more levels than JSON output holds: the
    part past them is a string saying so (as ``flows show --json`` writes it), never an error."""
    import journal

    value: object = 1
    for _ in range(252):  # the deepest output a run record takes
        value = [value]
    jr = journal.open_journal(str(tmp_path / "flows-journal"))
    info, lease = jr.begin("deep", "s", {})
    jr.append(lease, "run", {"event": "output", "output": value}, key="output")
    jr.finish(lease, journal.RunState.DONE)
    jr.close()
    with client_for(ServeConfig(db=str(tmp_path / "history.db"))) as client:
        page = client.get(f"/runs/{info.run_id}")
        answer = client.get(f"/api/runs/{info.run_id}")
    client.app.state.reader.close()  # type: ignore[attr-defined]
    assert page.status_code == 200 and answer.status_code == 200, answer.text
    found = answer.json()
    assert found["output"] == value
    (entry,) = found["timeline"]
    inner = entry["output"]
    for _ in range(251):
        (inner,) = inner
    assert inner == "(not shown: nested more than 254 levels deep, past what JSON output holds)"
