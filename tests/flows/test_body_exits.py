"""A body that ends by a BaseException, through the real ``flows`` command: in-flight learns and
steps settle before the lease is let go, the root is failed (or interrupted, for Ctrl-C) with a
recorded error, and the command exits non-zero with one diagnostic line."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import flows
import memory
from journal import RunState
from tests._helpers.failpoints import child_env
from tests.flows.helpers import flows as flows_cli
from tests.flows.helpers import journal_of, json_of

EXITING = """\
import asyncio
import sys
import time

import flows


def slow_side_effect(path):
    time.sleep(0.6)
    with open(path, "a") as fh:
        fh.write("done\\n")
    return "recorded"


@flows.flow(name="exits", scope="exits")
async def body(f):
    f.memory.learn({{"text": "learned while the body was leaving"}})
    f.step("slow", slow_side_effect, f.input)
    await asyncio.sleep(0.05)
    {ending}
"""

# A learn that takes a while to publish after its commit, so leaving early would show.
SLOW_PUBLISH = {"FLOWS_FAILPOINTS": "memory.after_append=sleep400"}


@pytest.mark.parametrize(
    ("ending", "what"),
    [
        ("sys.exit(0)", "SystemExit(0)"),
        ("sys.exit(3)", "SystemExit(3)"),
        ("raise asyncio.CancelledError", "CancelledError"),
        ("raise GeneratorExit", "GeneratorExit"),
    ],
)
def test_a_body_that_exits_settles_its_work_fails_the_root_and_exits_1_with_one_line(
    tmp_path: Path, ending: str, what: str
) -> None:
    db = tmp_path / "store" / "history.db"
    flow = tmp_path / "exits.py"
    flow.write_text(EXITING.format(ending=ending))
    side = tmp_path / "side.txt"
    result = flows_cli(db, "run", str(flow), "--input", f'"{side}"', env=SLOW_PUBLISH)
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.splitlines()
    (run,) = json_of(flows_cli(db, "runs", "--json"))
    assert line == (
        f"flows: error[flow_aborted]: the body ended by {what}; a body ends by returning (done) or by "
        "raising an exception (failed), so the run is marked failed; `flows resume` runs it again "
        f"(root run {run['runId']})"
    )
    assert result.stdout == ""
    assert run["state"] == "failed"
    assert run["error"]["code"] == "flow_aborted"
    jr = journal_of(db)
    info = jr.run(run["runId"])
    (step,) = jr.read(run["runId"], flows.STEPS_STREAM)
    (learn,) = jr.read(run["runId"], memory.STREAM)
    assert step.payload["result"] == "recorded"
    assert side.read_text() == "done\n"
    assert info.updated_ms >= step.ts_ms  # failed only after the step was recorded
    (found,) = memory.MemoryStore(db).recall()
    assert found.citation.id == learn.id  # the learn was published, not cut off by the exit
    assert info.updated_ms >= learn.ts_ms + 400  # and the root was failed after its publish


def test_a_keyboard_interrupt_out_of_the_body_leaves_the_root_interrupted_and_exits_130(
    tmp_path: Path,
) -> None:
    db = tmp_path / "store" / "history.db"
    flow = tmp_path / "exits.py"
    flow.write_text(EXITING.format(ending="raise KeyboardInterrupt"))
    side = tmp_path / "side.txt"
    result = flows_cli(db, "run", str(flow), "--input", f'"{side}"', env=SLOW_PUBLISH)
    assert result.returncode == 130, result.stderr
    (run,) = json_of(flows_cli(db, "runs", "--json"))
    notice, line = result.stderr.splitlines()  # what it waits for, said at once, then the one error line
    assert notice.startswith("flows: interrupted: finishing the 2 learn(s) and step(s) of root run "), notice
    assert line.startswith("flows: error[flow_interrupted]: the run was interrupted (Ctrl-C) once its ")
    assert line.endswith(f"(root run {run['runId']})")
    assert run["state"] == "interrupted"
    jr = journal_of(db)
    (step,) = jr.read(run["runId"], flows.STEPS_STREAM)
    (event,) = jr.read(run["runId"], flows.RUN_STREAM)
    assert (event.payload["event"], event.payload["error"]["code"]) == ("interrupted", "flow_interrupted")
    assert event.ts_ms >= step.ts_ms
    assert len(memory.MemoryStore(db).recall()) == 1


CTRL_C = """\
import asyncio
import time

import flows


def slow(counter, n):
    with open(counter + ".started", "a") as fh:
        fh.write(f"{n}\\n")
    time.sleep(0.8)
    with open(counter, "a") as fh:
        fh.write(f"{n}\\n")
    return n


@flows.flow(name="ctrl-c")
async def body(f):
    pair = await asyncio.gather(f.step("slow", slow, f.input, 1), f.step("slow", slow, f.input, 2))
    third = await f.step("slow", slow, f.input, 3)
    return [*pair, third]
"""


def test_ctrl_c_settles_in_flight_steps_exits_130_and_resume_does_not_repeat_them(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    flow = tmp_path / "ctrl_c.py"
    flow.write_text(CTRL_C)
    counter = tmp_path / "counter.txt"
    started = Path(str(counter) + ".started")
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows", "run", str(flow), "--input", f'"{counter}"', "--db", str(db)],
        env=child_env(drop=("FLOWS_JOURNAL",)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (started.exists() and len(started.read_text().splitlines()) == 2):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    (run,) = json_of(flows_cli(db, "runs", "--json"))
    assert err.splitlines()[1:] == [
        "flows: error[flow_interrupted]: the run was interrupted (Ctrl-C) once its in-flight learns and "
        f"steps had settled; it is left interrupted: `flows resume {run['runId']}` goes on from its "
        f"recorded steps (root run {run['runId']})"
    ]
    assert err.startswith("flows: interrupted: finishing the 2 learn(s) and step(s) of root run "), err
    assert out == ""
    assert run["state"] == "interrupted"
    jr = journal_of(db)
    assert sorted(r.key for r in jr.read(run["runId"], flows.STEPS_STREAM)) == ["slow#1", "slow#2"]
    assert sorted(counter.read_text().splitlines()) == ["1", "2"]  # both in-flight steps finished

    resumed = flows_cli(db, "resume", run["runId"], "--json")
    assert json_of(resumed) == {"runId": run["runId"], "state": "done", "output": [1, 2, 3]}
    assert sorted(counter.read_text().splitlines()) == ["1", "2", "3"]  # only the third ran now
    assert jr.run(run["runId"]).state == RunState.DONE
