"""Hostile command lines and a hostile disk, through the real ``flows`` command: every answer is a
coded error on one line that says what to do (or the right behaviour), never a filter quietly
dropped, a path the user never gave, or a failure that leaves the user guessing how to go on."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.adversarial.memory_support import error_code
from tests.flows.helpers import flows, write_flow


def _one_line(result: object) -> str:
    stderr = getattr(result, "stderr", "")
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    return str(stderr)


def test_an_empty_stream_is_refused_not_read_as_every_stream(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    learned = flows(db, "learn", "pressure falls before rain", "--scope", "s", "--json")
    run_id = orjson.loads(learned.stdout)["citation"]["runId"]
    shown = flows(db, "journal", run_id, "--stream", "", "--json")
    # it printed every stream's records, as if no --stream had been given
    assert shown.returncode == 2 and shown.stdout == "", shown.stdout
    assert error_code(shown) == "journal_name_invalid"
    _one_line(shown)


FAILS = 'await f.memory.learn({"text": "t"})\nif f.input:\n    raise ValueError("x")\nreturn 1'


def _failed_run(db: Path, flow: Path) -> str:
    failed = flows(db, "run", str(write_flow(flow, FAILS)), "--input", "true", "--json")
    assert failed.returncode == 1, failed.stderr
    run_id = orjson.loads(failed.stderr)["runId"]
    assert isinstance(run_id, str)
    return run_id


def test_a_resume_whose_flow_file_moved_says_how_to_name_it(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    run_id = _failed_run(db, tmp_path / "triage.py")
    (tmp_path / "triage.py").rename(tmp_path / "moved.py")
    refused = flows(db, "resume", run_id)
    assert refused.returncode == 1 and error_code(refused) == "flow_load_failed"
    line = _one_line(refused)
    # it said only "no flow file at …": nothing about the run having recorded it, or --file
    assert f"where root run {run_id} recorded it" in line, line
    assert f"`flows resume {run_id} --file FILE`" in line, line


def test_a_resume_from_a_renamed_flow_file_runs_its_flow(tmp_path: Path) -> None:
    # a flow without a name of its own is named after its file: --file renamed.py answered "defines
    # no flow named 'triage'", though it holds the very bytes the run recorded
    db = tmp_path / "store" / "history.db"
    run_id = _failed_run(db, tmp_path / "triage.py")
    moved = (tmp_path / "triage.py").rename(tmp_path / "renamed.py")
    again = flows(db, "resume", run_id, "--file", str(moved), "--json")
    # the input is recorded (true): the body ran again, from the renamed file, and failed as before
    assert again.returncode == 1 and error_code(again) == "flow_failed", again.stderr
    shown = orjson.loads(flows(db, "show", run_id, "--json").stdout)
    assert shown["flow"] == "triage", shown["flow"]  # the run keeps the name it recorded


def test_a_flow_file_that_is_a_link_to_nothing_is_named_as_one(tmp_path: Path) -> None:
    link = tmp_path / "triage.py"
    link.symlink_to(tmp_path / "gone.py")
    result = flows(tmp_path / "store" / "history.db", "run", str(link))
    assert result.returncode == 1 and error_code(result) == "flow_load_failed"
    line = _one_line(result)
    # it said "no flow file at …/gone.py": a path the user never gave, with nothing to do
    assert f"the flow file {link} is a link to {tmp_path / 'gone.py'}, which does not exist" in line, line


def test_a_flow_file_without_a_py_name_says_what_name_it_needs(tmp_path: Path) -> None:
    flow = write_flow(tmp_path / "triage.txt", "return 1")
    result = flows(tmp_path / "store" / "history.db", "run", str(flow))
    assert result.returncode == 1 and error_code(result) == "flow_load_failed"
    assert "does not end in .py" in _one_line(result)


def test_a_full_disk_fails_the_run_saying_what_to_do_and_the_run_resumes(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    flow = write_flow(tmp_path / "triage.py", 'await f.memory.learn({"text": "pressure falls"})\nreturn 1')
    full = flows(db, "run", str(flow), "--json", env={"FLOWS_FAILPOINTS": "memory.before_stage=ENOSPC"})
    assert full.returncode == 1, full.stderr
    said = orjson.loads(full.stderr)
    assert said["code"] == "memory_unwritable" and said["errno"] == 28, said
    run_id = said["runId"]
    # it said "No space left on device" and stopped there: nothing about freeing space, or resuming
    assert "free space on that disk" in said["message"], said
    assert f"`flows resume {run_id}` goes on from its recorded steps" in said["message"], said
    resumed = flows(db, "resume", run_id, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert orjson.loads(resumed.stdout)["state"] == "done"


def test_an_empty_filter_is_refused_not_answered_as_nothing_learned(tmp_path: Path) -> None:
    # `--scope "$SCOPE"` with the variable unset: "nothing learned yet answers", "would forget 0"
    db = tmp_path / "store" / "history.db"
    assert flows(db, "learn", "pressure falls before rain", "--scope", "s").returncode == 0
    for args in (
        ["recall", "--scope", ""],
        ["why", "pressure", "--source", ""],
        ["forget", "--scope", "", "--yes"],
        ["runs", "--flow", ""],
    ):
        refused = flows(db, *args, "--json")
        assert refused.returncode == 2 and refused.stdout == "", (args, refused.stdout)
        said = orjson.loads(refused.stderr)
        assert said["code"] == "usage" and "is empty" in said["message"], (args, said)
    assert "pressure falls" in flows(db, "recall").stdout  # nothing was forgotten


def _nested(levels: int, bottom: object = "bottom") -> object:
    value = bottom
    for _ in range(levels):
        value = [value]
    return value


def test_a_record_nested_as_deep_as_the_journal_takes_is_shown_as_json_saying_what_is_cut(
    tmp_path: Path,
) -> None:
    """The journal takes a payload nested to its cap; a JSON output wraps it in more levels than
    JSON output holds (254): each part past them is a string saying so, the rest as recorded."""
    import journal

    db = tmp_path / "store" / "history.db"
    jr = journal.open_journal(str(db.parent / "flows-journal"))
    info, lease = jr.begin("deep", "s", {})
    with pytest.raises(journal.JournalPayloadInvalid):  # one level more is refused: this is the cap
        jr.append(lease, "run", {"event": "output", "output": _nested(253)}, key="output")
    jr.append(lease, "run", {"event": "output", "output": _nested(252)}, key="output")
    jr.finish(lease, journal.RunState.DONE)
    jr.close()
    said = "(not shown: nested more than 254 levels deep, past what JSON output holds)"
    # the list of records, a record and its payload hold the output: its innermost list is level 255
    listed = flows(db, "--json", "journal", info.run_id)
    assert listed.returncode == 0, listed.stderr
    (record,) = orjson.loads(listed.stdout)
    assert record["payload"]["output"] == _nested(251, said)
    assert (record["runId"], record["stream"], record["seq"]) == (info.run_id, "run", 1)
    # the run's output two levels down is whole; its timeline entry is three levels down, cut
    shown = flows(db, "--json", "show", info.run_id)
    assert shown.returncode == 0, shown.stderr
    found = orjson.loads(shown.stdout)
    assert found["output"] == _nested(252)
    (entry,) = found["timeline"]
    assert (entry["kind"], entry["output"]) == ("output", _nested(251, said))
    runs = flows(db, "--json", "runs")
    assert runs.returncode == 0, runs.stderr
    assert orjson.loads(runs.stdout)[0]["output"] == _nested(252)
