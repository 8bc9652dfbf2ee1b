"""The flows runtime: steps, unawaited learns, failing bodies, crashes and resume."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import flows
import journal
import memory
from journal import RunState
from tests._helpers.failpoints import armed
from tests.conftest import ROOT
from tests.flows.helpers import check_invariants, journal_of, json_of, write_flow
from tests.flows.helpers import flows as flows_cli


def _run(body: Any, db: Path, **header: Any) -> flows.RunResult:
    return flows.run(flows.flow(**header)(body), db=db)


def test_a_pending_unawaited_learn_fails_the_run_naming_the_step(tmp_path: Path) -> None:
    async def body(f: flows.FlowContext) -> None:
        await f.memory.learn({"text": "awaited"})
        f.memory.learn({"text": "left pending"})

    result = _run(body, tmp_path / "h.db", name="pending")
    assert result.state == RunState.FAILED
    assert isinstance(result.error, flows.UnawaitedStep)
    assert result.error.steps == ("learn#2 'left pending'",)
    assert journal_of(tmp_path / "h.db").run(result.run_id).error == {
        "code": "unawaited_step",
        "message": str(result.error),
    }


def test_an_already_settled_unawaited_learn_fails_the_run_even_when_it_failed(tmp_path: Path) -> None:
    async def body(f: flows.FlowContext) -> None:
        f.memory.learn({"text": ""})  # fails validation, and nobody looks
        await asyncio.sleep(0.2)  # long settled by the time the body returns

    result = _run(body, tmp_path / "h.db", name="settled")
    assert isinstance(result.error, flows.UnawaitedStep)
    assert result.error.code == "unawaited_step"


def test_an_unawaited_learn_that_succeeded_still_fails_the_run(tmp_path: Path) -> None:
    async def body(f: flows.FlowContext) -> None:
        f.memory.learn({"text": "written but never checked"})
        await asyncio.sleep(0.2)

    result = _run(body, tmp_path / "h.db", name="unchecked")
    assert isinstance(result.error, flows.UnawaitedStep)
    assert len(memory.MemoryStore(tmp_path / "h.db").recall()) == 1  # the write itself happened


def test_an_awaited_learn_whose_failure_the_body_handled_is_fine(tmp_path: Path) -> None:
    seen: list[str] = []

    async def body(f: flows.FlowContext) -> None:
        try:
            await f.memory.learn({"text": "ok", "tags": [""]})
        except memory.FindingInvalid as exc:
            seen.append(exc.code)
        await asyncio.gather(f.memory.learn({"text": "a"}), f.memory.learn({"text": "b"}))

    result = _run(body, tmp_path / "h.db", name="handled")
    assert result.state == RunState.DONE, result.error
    assert seen == ["memory_finding_invalid"]


def test_a_failing_body_waits_for_its_in_flight_learn_before_the_root_is_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body(f: flows.FlowContext) -> None:
        f.memory.learn({"text": "slow to publish"})
        await asyncio.sleep(0.05)
        raise RuntimeError("the body gave up")

    with armed(monkeypatch, "memory.after_append=sleep600"):
        started = time.monotonic()
        result = _run(body, tmp_path / "h.db", name="slow")
        elapsed = time.monotonic() - started
    assert result.state == RunState.FAILED
    assert elapsed >= 0.6  # the run waited for the learn to settle
    (found,) = memory.MemoryStore(tmp_path / "h.db").recall()
    info = journal_of(tmp_path / "h.db").run(result.run_id)
    assert info.error is not None
    assert {k: info.error[k] for k in ("code", "message")} == {
        "code": "flow_failed",
        "message": "RuntimeError: the body gave up",
    }
    assert Path(memory.learned_dir(tmp_path / "h.db", "slow") / f"{found.key}.json").exists()
    assert info.updated_ms >= found.learned_ms + 600  # marked failed only after the publish


def test_memory_script_false_makes_every_learn_unsupported(tmp_path: Path) -> None:
    async def body(f: flows.FlowContext) -> None:
        await f.memory.learn({"text": "not allowed"})

    result = _run(body, tmp_path / "h.db", name="readonly", memory={"script": False})
    assert isinstance(result.error, memory.UnsupportedHeader)
    assert result.error.code == "unsupported_header"
    assert memory.MemoryStore(tmp_path / "h.db").recall() == []


def test_the_header_defaults_to_the_file_stem_and_is_recorded_for_resume(tmp_path: Path) -> None:
    flow_file = write_flow(tmp_path / "my_flow.py", 'await f.memory.learn({"text": "x"})')
    loaded = flows.load_flow(flow_file)
    assert (loaded.header.name, loaded.header.scope, loaded.header.script) == ("my_flow", "my_flow", True)
    result = flows.run(flow_file, db=tmp_path / "h.db")
    info = journal_of(tmp_path / "h.db").run(result.run_id)
    assert info.meta == {
        "source": str(flow_file.resolve()),
        "header": {"name": "my_flow", "scope": "my_flow", "memory": {"script": True}},
        "sourceSha256": flows.source_digest(flow_file.read_bytes()),
        "input": None,
    }


THIRTY = """
for i in range(30):
    await f.memory.learn({"text": f"finding number {i}", "tags": ["n" + str(i % 3)]})
    await asyncio.sleep(0.01)
"""


def _spawn_run(db: Path, flow_file: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "flows", "run", str(flow_file), "--db", str(db)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_sigkill_at_random_instants_then_resume_keeps_every_invariant(tmp_path: Path) -> None:
    rng = random.Random(1234)
    flow_file = write_flow(tmp_path / "thirty.py", THIRTY, 'scope="crash"')
    resumed_mid_way = 0
    for trial in range(8):
        db = tmp_path / f"t{trial}" / "history.db"
        proc = _spawn_run(db, flow_file)
        runs_dir = db.parent / "flows-journal" / "runs"
        deadline = time.monotonic() + 30
        while not (runs_dir.exists() and os.listdir(runs_dir)) and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.3))  # a random instant of a flow that runs ~0.3 s
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        runs = json_of(flows_cli(db, "runs", "--json"))
        if not runs:
            continue  # killed before begin: nothing was acknowledged, nothing to resume
        run_id = runs[0]["runId"]
        if runs[0]["state"] == "done":
            continue
        assert runs[0]["state"] == "interrupted"
        before = check_invariants(db, run_id)
        if before:  # a file lost after its commit must come back byte-identical
            victim = sorted(before)[0]
            path = memory.learned_dir(db, "crash") / f"{victim}.json"
            original = path.read_bytes()
            path.unlink()
        resumed = flows_cli(db, "resume", run_id)
        assert resumed.returncode == 0, resumed.stderr
        after = check_invariants(db, run_id)
        assert len(after) == 30
        assert len(list(journal_of(db).read(run_id, memory.STREAM))) == 30
        if before:
            assert path.read_bytes() == original
            resumed_mid_way += 1
        assert json_of(flows_cli(db, "runs", "--json"))[0]["state"] == "done"
    print(f"resumed mid-way: {resumed_mid_way} of 8")
    assert resumed_mid_way >= 3  # the kills really landed inside the flow


def test_two_resumes_of_one_root_at_once_one_wins_and_the_other_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    flow_file = write_flow(tmp_path / "slow.py", THIRTY.replace("0.01)", "0.05)"), 'scope="race"')
    proc = _spawn_run(db, flow_file)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        d = memory.learned_dir(db, "race")
        if d.exists() and len(os.listdir(d)) >= 3:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    run_id = json_of(flows_cli(db, "runs", "--json"))[0]["runId"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "flows", "resume", run_id, "--db", str(db)]
    a = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outs = [p.communicate(timeout=60) for p in (a, b)]
    codes = sorted([a.returncode, b.returncode])
    assert codes == [0, 1], outs
    loser = outs[0][1] if a.returncode else outs[1][1]
    assert loser.startswith("flows: error[journal_lease_held]: ")
    assert f"(root run {run_id})" in loser
    assert len(check_invariants(db, run_id)) == 30
    assert len(list(journal.FileJournal(db.parent / "flows-journal").read(run_id, memory.STREAM))) == 30


@pytest.mark.parametrize(
    "source",
    [
        "import flows\n\n@flows.flow\ndef body(f):\n    pass\n",
        "import flows\n\n@flows.flow(memory={'script': 'yes'})\nasync def body(f):\n    pass\n",
    ],
    ids=["sync-body", "script-not-a-bool"],
)
def test_a_flow_file_misusing_the_decorator_fails_to_load_with_its_code_not_a_type_error(
    tmp_path: Path, source: str
) -> None:
    """``@flows.flow`` raises TypeError for its author's mistake (documented); a flow file run from
    the CLI that makes it fails as ``flow_load_failed`` naming the file, exit 1."""
    path = tmp_path / "bad_flow.py"
    path.write_text(source)
    with pytest.raises(flows.FlowLoadFailed) as caught:
        flows.load_flow(path)
    assert caught.value.code == "flow_load_failed" and "TypeError" in str(caught.value)
    done = flows_cli(tmp_path / "history.db", "run", str(path))
    assert done.returncode == 1
    assert "flow_load_failed" in done.stderr and str(path) in done.stderr
    assert "Traceback" not in done.stderr


def test_a_learn_starts_before_the_body_next_awaits(tmp_path: Path) -> None:
    # The body blocks the event loop (no await) until the learn's file is published: only a learn
    # handed to the store's executor when `f.memory.learn` is called can get there.
    seen: dict[str, bool] = {}

    async def body(f: flows.FlowContext) -> None:
        step = f.memory.learn({"text": "written while the body computes"})
        forget_later = f.memory.learn({"text": "to be forgotten while the body computes"})
        folder = memory.learned_dir(tmp_path / "h.db", "eager")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(list(folder.glob("*.json"))) < 2:
            time.sleep(0.01)  # blocking on purpose: the loop does not run
        seen["learned"] = len(list(folder.glob("*.json"))) == 2
        key = (await forget_later).id
        gone = f.memory.forget(key, reason="the body changed its mind")
        retired = memory.retired_dir(tmp_path / "h.db", "eager") / f"{key}.json"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not retired.exists():
            time.sleep(0.01)
        seen["forgotten"] = retired.exists()
        await step
        await gone

    result = _run(body, tmp_path / "h.db", name="eager", scope="eager")
    assert result.state == RunState.DONE, result.error
    assert seen == {"learned": True, "forgotten": True}


def test_a_failure_records_its_traceback_bounded_and_the_commands_show_it(tmp_path: Path) -> None:
    flow_file = tmp_path / "zerodiv.py"
    flow_file.write_text(
        "import flows\n\n\ndef a(n):\n    return 1 / 0 if n == 0 else b(n - 1)\n\n\n"
        "def b(n):\n    return a(n - 1)\n\n\n"
        "@flows.flow(scope='z')\nasync def body(f):\n    a(400)\n"
    )
    db = tmp_path / "h.db"
    ran = flows_cli(db, "-v", "run", str(flow_file))
    assert ran.returncode == 1
    assert "Traceback (most recent call last)" in ran.stderr and "ZeroDivisionError" in ran.stderr
    (info,) = journal_of(db).runs()
    assert info.error is not None and info.error["code"] == "flow_failed"
    recorded = info.error["traceback"]
    assert len(recorded) <= flows.TRACEBACK_MAX
    assert "earlier frames cut" in recorded  # 400 frames do not fit: the last ones are kept
    assert recorded.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "return 1 / 0" in recorded
    shown = flows_cli(db, "show", info.run_id)
    assert shown.returncode == 0 and "ZeroDivisionError: division by zero" in shown.stdout
    assert "return 1 / 0" in shown.stdout
    assert json_of(flows_cli(db, "show", info.run_id, "--json"))["error"]["traceback"] == recorded
    quiet = flows_cli(db, "run", str(flow_file))
    assert "Traceback" not in quiet.stderr  # without -v, the one diagnostic line


def test_a_resume_of_a_run_a_live_process_drives_runs_none_of_its_flow_files_code(tmp_path: Path) -> None:
    # refused before the file is imported: code a flow file runs at import (here, a line written
    # to a file) never runs in the resumer while another process holds the run
    db = tmp_path / "history.db"
    imported = tmp_path / "imported.txt"
    flow_file = tmp_path / "held.py"
    flow_file.write_text(
        "import asyncio\nimport flows\n\n"
        f"with open({str(imported)!r}, 'a') as out:\n    out.write('import\\n')\n\n\n"
        "@flows.flow(scope='held')\nasync def body(f):\n    await asyncio.sleep(60)\n"
    )
    proc = _spawn_run(db, flow_file)
    try:
        deadline = time.monotonic() + 60
        runs: list[Any] = []
        while time.monotonic() < deadline:
            if (db.parent / "flows-journal").exists():
                runs = json_of(flows_cli(db, "runs", "--json"))
                if runs and runs[0]["state"] == "running":
                    break
            time.sleep(0.1)
        assert runs and runs[0]["state"] == "running", runs
        refused = flows_cli(db, "resume", runs[0]["runId"])
        assert refused.returncode == 1 and refused.stderr.startswith("flows: error[journal_lease_held]: ")
        assert imported.read_text() == "import\n"  # the running process's import only
    finally:
        proc.kill()
        proc.wait()
