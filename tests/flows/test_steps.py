"""Durable steps: recorded once, replayed on resume, retried with backoff, keyed by call position;
flow input and output; the flow file's digest on resume; ``arun``/``aresume`` inside a loop."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import orjson
import pytest

import flows
import journal
from flows._steps import MAX_RETRIES
from journal import RunState
from tests.flows.helpers import flows as flows_cli
from tests.flows.helpers import json_of

STEPS_FLOW = """\
import asyncio
import os
import flows


def bump(counter, n):
    with open(counter, "a") as fh:
        fh.write(f"{n}\\n")
    return {"n": n, "square": n * n}


def broken(counter, n):
    with open(counter, "a") as fh:
        fh.write(f"broken {n}\\n")
    raise ValueError(f"no luck with {n}")


@flows.flow(name="steps", scope="steps")
async def body(f):
    got = []
    for n in range(f.input["steps"]):
        got.append(await f.step("bump", bump, f.input["counter"], n))
    try:
        await f.step("broken", broken, f.input["counter"], 7)
    except flows.StepFailed as exc:
        got.append([exc.error_code, exc.error_message, exc.replayed])
    if os.path.exists(f.input["fail"]):
        raise RuntimeError("told to fail")
    return got
"""


def _flow_file(tmp_path: Path, text: str = STEPS_FLOW, name: str = "steps_flow.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _steps(location: str, run_id: str) -> list[journal.Record]:
    backend = journal.open_journal(location)
    try:
        return list(backend.read(run_id, flows.STEPS_STREAM))
    finally:
        backend.close()


@pytest.fixture
def where(tmp_path: Path, journal_location: str) -> dict[str, Any]:
    """A store on each journal backend: the history DB path and the journal location."""
    return {"db": tmp_path / "store" / "history.db", "journal_location": journal_location}


def test_recorded_steps_return_their_results_on_resume_without_calling_the_function(
    tmp_path: Path, where: dict[str, Any], journal_location: str
) -> None:
    counter, fail = tmp_path / "counter.txt", tmp_path / "fail"
    fail.touch()
    flow = _flow_file(tmp_path)
    data = {"steps": 3, "counter": str(counter), "fail": str(fail)}
    first = flows.run(flow, input=data, **where)
    assert first.state == RunState.FAILED
    assert isinstance(first.error, RuntimeError)
    assert _lines(counter) == ["0", "1", "2", "broken 7"]

    fail.unlink()
    second = flows.resume(first.run_id, **where)
    assert second.state == RunState.DONE, second.error
    assert _lines(counter) == ["0", "1", "2", "broken 7"]  # no step function ran again
    expected = [{"n": n, "square": n * n} for n in range(3)]
    assert second.output == [*expected, ["flow_failed", "ValueError: no luck with 7", True]]

    records = _steps(journal_location, first.run_id)
    assert [r.key for r in records] == ["bump#1", "bump#2", "bump#3", "broken#1"]
    assert [r.payload["result"] for r in records[:3]] == expected
    assert records[3].payload["error"] == {
        "code": "flow_failed",
        "message": "ValueError: no luck with 7",
        "type": "builtins.ValueError",
    }
    assert {r.payload["epoch"] for r in records} == {1}

    shown = json_of(flows_cli(where["db"], "show", first.run_id, "--journal", journal_location, "--json"))
    assert (shown["state"], shown["output"], shown["input"]) == ("done", second.output, data)
    assert [(e["kind"], e.get("step")) for e in shown["timeline"]] == [
        ("step", "bump#1"),
        ("step", "bump#2"),
        ("step", "bump#3"),
        ("step", "broken#1"),
        ("failed", None),
        ("resumed", None),
        ("output", None),
    ]
    assert shown["timeline"][3]["error"]["message"] == "ValueError: no luck with 7"


def test_the_first_run_sees_what_a_replay_will_json_round_tripped_with_keys_sorted(tmp_path: Path) -> None:
    seen: list[Any] = []

    def shaped() -> dict[str, Any]:
        return {"b": (1, 2.5, "é"), "a": {"z": None, "y": True}}

    async def body(f: flows.FlowContext) -> None:
        value = await f.step("shaped", shaped)
        seen.append((value, list(value), list(value["a"])))

    result = flows.run(flows.flow(name="shaped")(body), db=tmp_path / "h.db")
    assert result.ok, result.error
    assert seen == [({"a": {"y": True, "z": None}, "b": [1, 2.5, "é"]}, ["a", "b"], ["y", "z"])]


class _Opaque:
    pass


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ({1, 2}, "$"),
        ({"a": [1, _Opaque()]}, "$.a[1]"),
        ({"x": math.nan}, "$.x"),
        ([math.inf], "$[0]"),
        ({1: "non-string key"}, "$"),
        ({"big": 2**64}, "$.big"),
        ("\ud800", "$"),
        (b"bytes", "$"),
    ],
)
def test_a_result_that_is_not_json_fails_the_step_before_anything_is_journaled(
    tmp_path: Path, bad: Any, where: str
) -> None:
    caught: list[BaseException] = []

    async def body(f: flows.FlowContext) -> None:
        try:
            await f.step("bad", lambda: bad)
        except flows.StepResultInvalid as exc:
            caught.append(exc)

    db = tmp_path / "h.db"
    result = flows.run(flows.flow(name="bad")(body), db=db)
    assert result.ok, result.error
    (exc,) = caught
    assert isinstance(exc, flows.StepResultInvalid)
    assert (exc.code, exc.step, exc.run_id) == ("step_result_invalid", "bad#1", result.run_id)
    assert f"cannot be journaled: {where}: " in str(exc)
    assert _steps(str(db.parent / "flows-journal"), result.run_id) == []


def test_retries_wait_with_exponential_backoff_up_to_the_cap_and_record_every_attempt(tmp_path: Path) -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(len(calls) + 1)
        if len(calls) < 5:
            raise ConnectionError(f"attempt {len(calls)} dropped")
        return "through"

    async def body(f: flows.FlowContext) -> Any:
        plan = flows.Backoff(initial=0.001, factor=10, cap=0.05)
        return await f.step("flaky", flaky, retries=4, backoff=plan)

    db = tmp_path / "h.db"
    result = flows.run(flows.flow(name="flaky")(body), db=db)
    assert (result.state, result.output) == (RunState.DONE, "through")
    records = _steps(str(db.parent / "flows-journal"), result.run_id)
    assert [r.key for r in records] == ["flaky#1~1", "flaky#1~2", "flaky#1~3", "flaky#1~4", "flaky#1"]
    assert [r.payload["attempt"] for r in records] == [1, 2, 3, 4, 5]
    assert [r.payload.get("retryInMs") for r in records] == [1, 10, 50, 50, None]
    assert [r.payload["final"] for r in records] == [False, False, False, False, True]
    assert records[0].payload["error"]["message"] == "ConnectionError: attempt 1 dropped"
    assert records[-1].payload["result"] == "through"


def test_a_step_that_fails_every_attempt_raises_step_failed_and_fails_the_run(tmp_path: Path) -> None:
    calls: list[int] = []

    def hopeless() -> None:
        calls.append(1)
        raise TimeoutError("the model did not answer")

    async def body(f: flows.FlowContext) -> None:
        await f.step("hopeless", hopeless, retries=2, backoff=0)

    db = tmp_path / "h.db"
    result = flows.run(flows.flow(name="hopeless")(body), db=db)
    assert isinstance(result.error, flows.StepFailed)
    assert (result.error.code, result.error.step, result.error.attempt) == ("step_failed", "hopeless#1", 3)
    assert result.error.error_message == "TimeoutError: the model did not answer"
    assert not result.error.replayed
    assert len(calls) == 3
    info = journal.FileJournal(db.parent / "flows-journal").run(result.run_id)
    assert info.error is not None and info.error["code"] == "step_failed"


def test_steps_under_gather_keep_their_keys_when_completion_order_changes_on_resume(
    tmp_path: Path, where: dict[str, Any], journal_location: str
) -> None:
    text = """\
import asyncio
import os
import flows


def fetch(counter, n):
    with open(counter, "a") as fh:
        fh.write(f"{n}\\n")
    return n * 10


@flows.flow(name="fan")
async def body(f):
    slow_first = os.path.exists(f.input["fail"])  # the first run: worker 1 is the slow one

    async def worker(n):
        await asyncio.sleep(0.3 if (n == 1) == slow_first else 0)
        return await f.step("fetch", fetch, f.input["counter"], n)

    pair = await asyncio.gather(f.step("pair", fetch, f.input["counter"], 100),
                                f.step("pair", fetch, f.input["counter"], 200))
    workers = await asyncio.gather(worker(1), worker(2))
    if slow_first:
        raise RuntimeError("fail after the workers")
    return [pair, workers]
"""
    counter, fail = tmp_path / "counter.txt", tmp_path / "fail"
    fail.touch()
    first = flows.run(
        _flow_file(tmp_path, text, "fan.py"), input={"counter": str(counter), "fail": str(fail)}, **where
    )
    assert first.state == RunState.FAILED
    records = _steps(journal_location, first.run_id)
    # gather of two step handles: positions in call order; the two workers: the 3rd and 4th tasks
    # the body created (gather wrapped the two handles first); worker 2 committed first.
    assert {r.key: r.payload["result"] for r in records} == {
        "pair#1": 1000,
        "pair#2": 2000,
        "fetch#3.1": 10,
        "fetch#4.1": 20,
    }
    assert [r.key for r in records if r.key.startswith("fetch")] == ["fetch#4.1", "fetch#3.1"]
    fail.unlink()
    second = flows.resume(first.run_id, **where)
    assert second.state == RunState.DONE, second.error
    assert second.output == [[1000, 2000], [10, 20]]
    assert sorted(_lines(counter)) == ["1", "100", "2", "200"]  # each side effect once


def test_an_unawaited_step_fails_the_run_but_its_outcome_is_still_recorded(tmp_path: Path) -> None:
    async def body(f: flows.FlowContext) -> None:
        f.step("forgotten", lambda: "done anyway")
        await asyncio.sleep(0.1)

    db = tmp_path / "h.db"
    result = flows.run(flows.flow(name="forgot")(body), db=db)
    assert isinstance(result.error, flows.UnawaitedStep)
    assert result.error.steps == ("step forgotten#1",)
    (rec,) = _steps(str(db.parent / "flows-journal"), result.run_id)
    assert rec.payload["result"] == "done anyway"


def test_a_failing_body_waits_for_its_in_flight_step_to_be_recorded(tmp_path: Path) -> None:
    async def slow() -> str:
        await asyncio.sleep(0.5)
        return "finished"

    async def body(f: flows.FlowContext) -> None:
        f.step("slow", slow)
        await asyncio.sleep(0.01)
        raise RuntimeError("gave up early")

    db = tmp_path / "h.db"
    result = flows.run(flows.flow(name="early")(body), db=db)
    assert result.state == RunState.FAILED
    jr = journal.FileJournal(db.parent / "flows-journal")
    (rec,) = jr.read(result.run_id, flows.STEPS_STREAM)
    assert rec.payload["result"] == "finished"
    assert jr.run(result.run_id).updated_ms >= rec.ts_ms  # failed only once the step was recorded


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda f: f.step("", print), "1-128 characters"),
        (lambda f: f.step("x" * 129, print), "1-128 characters"),
        (lambda f: f.step("two\nlines", print), "printable"),
        (lambda f: f.step(7, print), "1-128 characters"),
        (lambda f: f.step("ok", "not callable"), "is not callable"),
        (lambda f: f.step("ok", print, retries=-1), "retries="),
        (lambda f: f.step("ok", print, retries=True), "retries="),
        (lambda f: f.step("ok", print, retries=1001), "retries="),
        (lambda f: f.step("ok", print, backoff=-1.0), "initial >= 0"),
        (lambda f: f.step("ok", print, backoff=math.inf), "finite"),
        (lambda f: f.step("ok", print, backoff="1s"), "backoff="),
    ],
)
def test_bad_step_calls_are_refused_at_once_with_step_invalid(tmp_path: Path, call: Any, needle: str) -> None:
    caught: list[flows.StepInvalid] = []

    async def body(f: flows.FlowContext) -> None:
        try:
            call(f)
        except flows.StepInvalid as exc:
            caught.append(exc)

    result = flows.run(flows.flow(name="bad-calls")(body), db=tmp_path / "h.db")
    assert result.ok, result.error
    assert len(caught) == 1 and caught[0].code == "step_invalid"
    assert needle in str(caught[0])


def test_a_step_inside_a_steps_function_is_refused(tmp_path: Path) -> None:
    async def body(f: flows.FlowContext) -> None:
        async def outer() -> Any:
            return await f.step("inner", lambda: 1)

        await f.step("outer", outer)

    db = tmp_path / "h.db"
    result = flows.run(flows.flow(name="nested")(body), db=db)
    assert isinstance(result.error, flows.StepFailed)
    assert result.error.error_code == "step_invalid"
    assert "inside another step's function" in result.error.error_message


def test_input_is_recorded_and_output_journaled_and_returned(tmp_path: Path) -> None:
    async def body(f: flows.FlowContext) -> Any:
        return {"echo": f.input, "twice": f.input["n"] * 2}

    db = tmp_path / "h.db"
    result = flows.run(flows.flow(name="io")(body), db=db, input={"n": 21, "tags": ("a", "b")})
    assert result.output == {"echo": {"n": 21, "tags": ["a", "b"]}, "twice": 42}
    assert result.unwrap() == result.output
    jr = journal.FileJournal(db.parent / "flows-journal")
    assert jr.run(result.run_id).meta["input"] == {"n": 21, "tags": ["a", "b"]}
    (rec,) = jr.read(result.run_id, flows.RUN_STREAM)
    assert (rec.key, rec.payload) == ("output", {"event": "output", "output": result.output})


def test_input_that_is_not_json_is_refused_before_a_run_begins(tmp_path: Path) -> None:
    async def body(f: flows.FlowContext) -> None:
        return None

    db = tmp_path / "h.db"
    with pytest.raises(flows.FlowInputInvalid) as err:
        flows.run(flows.flow(name="io")(body), db=db, input={"when": object()})
    assert err.value.code == "flow_input_invalid"
    assert "$.when" in str(err.value)
    assert journal.FileJournal(db.parent / "flows-journal").runs() == []


def test_output_that_is_not_json_fails_the_run_with_no_output_recorded(tmp_path: Path) -> None:
    async def body(f: flows.FlowContext) -> Any:
        return {"rows": {1, 2}}

    db = tmp_path / "h.db"
    result = flows.run(flows.flow(name="io")(body), db=db)
    assert isinstance(result.error, flows.FlowOutputInvalid)
    assert result.error.code == "flow_output_invalid"
    assert "$.rows" in str(result.error)
    jr = journal.FileJournal(db.parent / "flows-journal")
    assert [r.payload["event"] for r in jr.read(result.run_id, flows.RUN_STREAM)] == ["failed"]
    assert jr.run(result.run_id).state == RunState.FAILED


def test_arun_and_aresume_run_inside_an_existing_event_loop_and_run_refuses_there(tmp_path: Path) -> None:
    counter, fail = tmp_path / "counter.txt", tmp_path / "fail"
    fail.touch()
    flow = _flow_file(tmp_path)
    db = tmp_path / "h.db"
    data = {"steps": 2, "counter": str(counter), "fail": str(fail)}

    async def main() -> tuple[flows.RunResult, flows.RunResult, flows.RunResult]:
        with pytest.raises(flows.FlowUsage) as err:
            flows.run(flow, db=db, input=data)
        assert "await flows.arun" in str(err.value)
        a, b = await asyncio.gather(flows.arun(flow, db=db, input=data), flows.arun(flow, db=db, input=data))
        fail.unlink()
        return a, b, await flows.aresume(a.run_id, db=db)

    a, b, resumed = asyncio.run(main())
    assert (a.state, b.state, resumed.state) == (RunState.FAILED, RunState.FAILED, RunState.DONE)
    assert sorted(_lines(counter)) == sorted(["0", "1", "broken 7"] * 2)  # resume replayed, ran nothing
    assert resumed.output[:2] == [{"n": 0, "square": 0}, {"n": 1, "square": 1}]


def test_cancelling_arun_settles_its_step_and_leaves_the_root_interrupted(tmp_path: Path) -> None:
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.sleep(0.3)
        return "kept"

    async def body(f: flows.FlowContext) -> Any:
        return await f.step("slow", slow)

    db = tmp_path / "h.db"

    async def main() -> None:
        task = asyncio.create_task(flows.arun(flows.flow(name="cancelled")(body), db=db))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    jr = journal.FileJournal(db.parent / "flows-journal")
    (info,) = jr.runs()
    assert info.state == RunState.INTERRUPTED
    (rec,) = jr.read(info.run_id, flows.STEPS_STREAM)
    assert rec.payload["result"] == "kept"
    (event,) = jr.read(info.run_id, flows.RUN_STREAM)
    assert event.payload["event"] == "interrupted"
    assert event.payload["error"]["code"] == "flow_interrupted"


def test_a_changed_flow_file_is_refused_unless_allowed_then_recorded_steps_replay_by_key(
    tmp_path: Path, where: dict[str, Any], journal_location: str
) -> None:
    counter, fail = tmp_path / "counter.txt", tmp_path / "fail"
    fail.touch()
    flow = _flow_file(tmp_path)
    data = {"steps": 2, "counter": str(counter), "fail": str(fail)}
    first = flows.run(flow, input=data, **where)
    recorded = flows.source_digest(flow.read_bytes())
    # the new version does one more bump, and no longer fails
    flow.write_text(STEPS_FLOW.replace('range(f.input["steps"])', 'range(f.input["steps"] + 1)'))
    current = flows.source_digest(flow.read_bytes())
    fail.unlink()

    with pytest.raises(flows.FlowChanged) as err:
        flows.resume(first.run_id, **where)
    assert (err.value.code, err.value.recorded, err.value.current) == ("flow_changed", recorded, current)
    assert recorded in str(err.value) and current in str(err.value)
    backend = journal.open_journal(journal_location)
    try:
        assert backend.run(first.run_id).epoch == 1  # refused before any lease or record
        assert backend.read(first.run_id, flows.RUN_STREAM)[-1].payload["event"] == "failed"
    finally:
        backend.close()

    resumed = flows.resume(first.run_id, allow_changed=True, **where)
    assert resumed.state == RunState.DONE, resumed.error
    assert _lines(counter) == ["0", "1", "broken 7", "2"]  # only the new step ran
    assert [r.key for r in _steps(journal_location, first.run_id)] == [
        "bump#1",
        "bump#2",
        "broken#1",
        "bump#3",
    ]
    backend = journal.open_journal(journal_location)
    try:
        event = next(r for r in backend.read(first.run_id, flows.RUN_STREAM) if r.key == "resumed-2")
        assert event.payload == {
            "event": "resumed",
            "epoch": 2,
            "sourceSha256": current,
            "recordedSha256": recorded,
            "changed": True,
        }
    finally:
        backend.close()


def test_a_refused_resume_runs_none_of_the_changed_file(
    tmp_path: Path, where: dict[str, Any], journal_location: str
) -> None:
    counter, fail, ran = tmp_path / "counter.txt", tmp_path / "fail", tmp_path / "imported"
    fail.touch()
    flow = _flow_file(tmp_path)
    first = flows.run(flow, input={"steps": 1, "counter": str(counter), "fail": str(fail)}, **where)
    # the new version does something the moment it is imported
    flow.write_text(STEPS_FLOW + f"\nimport pathlib\npathlib.Path({str(ran)!r}).write_text('imported')\n")
    with pytest.raises(flows.FlowChanged) as err:
        flows.resume(first.run_id, **where)
    assert "none of it was run" in str(err.value)
    assert not ran.exists()  # the digest is checked on the bytes read, before any of them runs
    resumed = flows.resume(first.run_id, allow_changed=True, **where)
    assert ran.exists() and resumed.state == RunState.FAILED


def _rewrite_meta(journal_location: str, run_id: str, change: Any) -> None:
    """Change a run's recorded metadata where it lies, as someone who can write the journal could."""
    if "://" not in journal_location:
        path = Path(journal_location) / "runs" / run_id / "run.json"
        record = json.loads(path.read_bytes())
        change(record["meta"])
        path.write_bytes(orjson.dumps(record, option=orjson.OPT_SORT_KEYS))  # as the journal writes it
        return
    import psycopg

    with psycopg.connect(journal_location, autocommit=True) as conn:
        (meta,) = conn.execute("select meta from journal_runs where run_id = %s", (run_id,)).fetchone()
        meta = json.loads(meta)
        change(meta)
        conn.execute("update journal_runs set meta = %s where run_id = %s", (json.dumps(meta), run_id))


@pytest.mark.parametrize("digest", ["dropped", "of the other file"])
def test_a_run_record_naming_another_file_cannot_make_a_resume_import_it(
    tmp_path: Path, where: dict[str, Any], journal_location: str, digest: str
) -> None:
    """The journal names the flow file; whoever can write the journal must not be able to make a
    resume import a file of their choosing: its bytes must hash as the run recorded (a record with
    no digest proves nothing), checked before any of them runs, or the user names the file."""
    counter, fail, ran = tmp_path / "counter.txt", tmp_path / "fail", tmp_path / "imported"
    fail.touch()
    flow = _flow_file(tmp_path)
    first = flows.run(flow, input={"steps": 1, "counter": str(counter), "fail": str(fail)}, **where)
    other = tmp_path / "elsewhere.py"
    other.write_text(f"import pathlib\npathlib.Path({str(ran)!r}).write_text('imported')\n")

    def point_elsewhere(meta: dict[str, Any]) -> None:
        meta["source"] = str(other)
        if digest == "dropped":
            del meta["sourceSha256"]

    _rewrite_meta(journal_location, first.run_id, point_elsewhere)
    with pytest.raises(flows.FlowChanged) as err:
        flows.resume(first.run_id, **where)
    assert str(other) in str(err.value) and not ran.exists()
    if digest == "dropped":
        assert "records no digest" in str(err.value)
    # the user names the file instead: the one the run ran, which hashes as recorded
    resumed = flows.resume(first.run_id, flow_file=flow, **where) if digest != "dropped" else None
    if resumed is not None:
        assert resumed.state == RunState.FAILED and not ran.exists()
        backend = journal.open_journal(journal_location)
        try:
            event = backend.read(first.run_id, flows.RUN_STREAM)[-2]
            assert event.payload["event"] == "resumed" and event.payload["source"] == str(flow.resolve())
            assert event.payload["changed"] is False
        finally:
            backend.close()


def test_a_resume_after_an_allowed_change_compares_with_the_newly_accepted_file(tmp_path: Path) -> None:
    counter, fail = tmp_path / "counter.txt", tmp_path / "fail"
    fail.touch()
    flow = _flow_file(tmp_path)
    db = tmp_path / "h.db"
    first = flows.run(flow, db=db, input={"steps": 1, "counter": str(counter), "fail": str(fail)})
    flow.write_text(STEPS_FLOW + "\n# a comment\n")
    assert flows.resume(first.run_id, db=db, allow_changed=True).state == RunState.FAILED
    again = flows.resume(first.run_id, db=db)  # same file as the accepted one: no flag needed
    assert again.state == RunState.FAILED
    assert isinstance(again.error, RuntimeError)


def test_a_damaged_step_record_fails_resume_as_journal_corrupt_and_leaves_the_run_resumable(
    tmp_path: Path,
) -> None:
    counter, fail = tmp_path / "counter.txt", tmp_path / "fail"
    fail.touch()
    db = tmp_path / "h.db"
    first = flows.run(
        _flow_file(tmp_path), db=db, input={"steps": 1, "counter": str(counter), "fail": str(fail)}
    )
    jr = journal.FileJournal(db.parent / "flows-journal")
    lease = jr.acquire(first.run_id)
    jr.append(lease, flows.STEPS_STREAM, {"step": "bump", "position": "9", "attempt": 1}, key="bump#9")
    jr.release(lease)
    jr.close()
    with pytest.raises(journal.JournalCorrupt) as err:
        flows.resume(first.run_id, db=db)
    assert (err.value.code, err.value.stream, err.value.line) == ("journal_corrupt", "steps", 3)
    assert journal.FileJournal(db.parent / "flows-journal").run(first.run_id).state == RunState.INTERRUPTED


@pytest.mark.parametrize("attempt", [MAX_RETRIES + 1, 2**63 - 1])
def test_a_step_record_counting_more_attempts_than_a_step_can_make_fails_resume_as_journal_corrupt(
    tmp_path: Path, attempt: int
) -> None:
    """A step retries at most ``MAX_RETRIES`` times: a record counting more attempts (checksummed,
    so read back whole) was not written by the runtime; it is that record's damage, named, not an
    error about the runtime's own next attempt."""
    counter, fail = tmp_path / "counter.txt", tmp_path / "fail"
    fail.touch()
    db = tmp_path / "h.db"
    later = STEPS_FLOW.replace(
        "    return got\n", "    return await f.step('later', broken, f.input['counter'], 8)\n"
    )
    first = flows.run(
        _flow_file(tmp_path, later), db=db, input={"steps": 0, "counter": str(counter), "fail": str(fail)}
    )
    jr = journal.FileJournal(db.parent / "flows-journal")
    lease = jr.acquire(first.run_id)
    error = {"code": "flow_failed", "message": "ValueError: no luck"}
    payload = {"step": "later", "position": "1", "attempt": attempt, "final": False, "ok": False}
    jr.append(lease, flows.STEPS_STREAM, {**payload, "error": error}, key=f"later#1~{attempt}")
    jr.release(lease)
    jr.close()
    fail.unlink()  # the resumed body goes on to the step the record names
    with pytest.raises(journal.JournalCorrupt) as err:
        flows.resume(first.run_id, db=db)
    assert (err.value.code, err.value.run_id, err.value.stream) == ("journal_corrupt", first.run_id, "steps")
    assert err.value.line == 2 and f"attempt {attempt} is past" in str(err.value)


def test_the_largest_attempt_counts_a_step_can_record_read_back(tmp_path: Path) -> None:
    """The runtime's own extremes: attempt ``MAX_RETRIES`` retried, then ``MAX_RETRIES + 1`` final."""
    jr = journal.FileJournal(tmp_path / "flows-journal")
    info, lease = jr.begin("f", "s", {})
    error = {"code": "flow_failed", "message": "ValueError: no luck"}
    top = MAX_RETRIES
    for attempt, final, key in ((top, False, f"a#1~{top}"), (top + 1, True, "a#1")):
        payload = {"step": "a", "position": "1", "attempt": attempt, "final": final, "ok": False}
        jr.append(lease, flows.STEPS_STREAM, {**payload, "error": error}, key=key)
    outcomes = [
        flows.parse_step_record(jr, rec)[1].attempt for rec in jr.read(info.run_id, flows.STEPS_STREAM)
    ]
    jr.close()
    assert outcomes == [top, top + 1]


def test_a_body_ending_by_system_exit_settles_and_fails_the_root_in_process(tmp_path: Path) -> None:
    async def slow() -> int:
        await asyncio.sleep(0.2)
        return 1

    async def body(f: flows.FlowContext) -> None:
        f.step("slow", slow)
        await asyncio.sleep(0)
        raise SystemExit(0)

    db = tmp_path / "h.db"
    result = flows.run(flows.flow(name="exits")(body), db=db)
    assert isinstance(result.error, flows.FlowAborted)
    assert isinstance(result.error.__cause__, SystemExit)
    jr = journal.FileJournal(db.parent / "flows-journal")
    assert jr.run(result.run_id).state == RunState.FAILED
    assert [r.payload["result"] for r in jr.read(result.run_id, flows.STEPS_STREAM)] == [1]


def test_backoff_delays_grow_by_the_factor_and_stop_at_the_cap() -> None:
    plan = flows.Backoff(initial=0.5, factor=3, cap=10)
    assert [plan.delay(k) for k in range(1, 6)] == [0.5, 1.5, 4.5, 10, 10]
    assert flows.Backoff(initial=1, factor=2, cap=60).delay(5000) == 60
