"""Steps through the real ``flows`` command: ``--input``, ``flows show``, the ``flows runs`` filters,
``resume --allow-changed``, and a flow SIGKILLed at random instants and resumed until done."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import flows
from tests.conftest import ROOT
from tests.flows.helpers import flows as flows_cli
from tests.flows.helpers import journal_of, json_of

COUNTER = """\
import os
import time

import flows


def bump(counter, n):
    with open(counter, "a") as fh:
        fh.write(f"{{n}} {{os.getpid()}}\\n")
    time.sleep({pause})
    return {{"n": n, "pid": os.getpid()}}


@flows.flow(name="counter", scope="counter")
async def body(f):
    total = 0
    for n in range(f.input["steps"]):
        got = await f.step("bump", bump, f.input["counter"], n)
        total += got["n"] * got["n"]
        if n % 4 == 3:
            await f.memory.learn({{"text": f"bumped {{n + 1}} times"}})
    return {{"total": total, "steps": f.input["steps"]}}
"""


def _spawn(db: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FLOWS_JOURNAL", None)
    return subprocess.Popen(
        [sys.executable, "-m", "flows", *args, "--db", str(db)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _counter_lines(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [(int(n), int(pid)) for n, pid in (line.split() for line in path.read_text().splitlines())]


def _wait_for_a_new_line(counter: Path, *, before: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while len(_counter_lines(counter)) <= before and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)


@pytest.mark.slow
def test_a_counter_flow_killed_at_random_instants_and_resumed_until_done_does_each_recorded_step_once(
    tmp_path: Path,
) -> None:
    steps = 10
    flow = tmp_path / "counter.py"
    flow.write_text(COUNTER.format(pause=0.04))
    # the output of a run nobody interrupts
    clean_db, clean_counter = tmp_path / "clean" / "history.db", tmp_path / "clean.txt"
    clean_input = f'{{"steps": {steps}, "counter": "{clean_counter}"}}'
    expected = json_of(flows_cli(clean_db, "run", str(flow), "--input", clean_input, "--json"))["output"]
    assert expected == {"total": sum(n * n for n in range(steps)), "steps": steps}

    rng = random.Random(19)
    kills_inside = 0
    for trial in range(3):
        db, counter = tmp_path / f"t{trial}" / "history.db", tmp_path / f"t{trial}.txt"
        data = f'{{"steps": {steps}, "counter": "{counter}"}}'
        killed: list[int] = []  # pids of processes killed
        run_id: str | None = None
        for attempt in range(12):
            last = attempt == 11
            proc = (
                _spawn(db, "run", str(flow), "--input", data)
                if run_id is None
                else _spawn(db, "resume", run_id)
            )
            if last:
                assert proc.wait(timeout=120) == 0
            else:
                if rng.random() < 0.8:  # most kills land once the process is bumping, whatever the load
                    _wait_for_a_new_line(counter, before=len(_counter_lines(counter)), proc=proc)
                time.sleep(rng.uniform(0.0, 0.3))  # an instant in start-up, a step, or a learn
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    killed.append(proc.pid)
                proc.wait(timeout=60)
            runs = json_of(flows_cli(db, "runs", "--json"))
            if not runs:
                continue  # killed before the root began: nothing to resume yet
            run_id = runs[0]["runId"]
            if runs[0]["state"] == "done":
                break
            assert runs[0]["state"] == "interrupted"
        assert run_id is not None
        shown = json_of(flows_cli(db, "show", run_id, "--json"))
        assert (shown["state"], shown["output"]) == ("done", expected)

        records = list(journal_of(db).read(run_id, flows.STEPS_STREAM))
        assert sorted(r.key for r in records) == sorted(f"bump#{n + 1}" for n in range(steps))
        by_step: dict[int, list[int]] = defaultdict(list)
        lines = _counter_lines(counter)
        last_of_pid = {pid: n for n, pid in lines}
        for n, pid in lines:
            by_step[n].append(pid)
        for rec in records:
            n, recorder = rec.payload["result"]["n"], rec.payload["result"]["pid"]
            pids = by_step[n]
            # the recorded call's side effect happened exactly once, and nothing ran it after
            assert pids.count(recorder) == 1 and pids[-1] == recorder, (n, pids, recorder)
            # every other call of it was in a process killed while that step was its last
            for pid in pids[:-1]:
                assert pid in killed and last_of_pid[pid] == n, (n, pids)
                kills_inside += 1
        assert len(shown["timeline"]) >= steps
    print(f"kills that landed between a side effect and its record: {kills_inside}")
    assert kills_inside >= 1  # the kills really landed inside steps


RETRY_KILL = """\
import os
import signal

import flows


def flaky(counter):
    with open(counter, "a") as fh:
        fh.write("call\\n")
    calls = len(open(counter).read().splitlines())
    if calls == 1:
        raise ConnectionError("first call dropped")
    if calls == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # the process dies inside the second attempt
    return calls


@flows.flow(name="retry-kill")
async def body(f):
    return await f.step("flaky", flaky, f.input, retries=3, backoff=0)
"""


def test_a_retry_killed_mid_attempt_goes_on_from_the_recorded_attempts_on_resume(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    flow = tmp_path / "retry_kill.py"
    flow.write_text(RETRY_KILL)
    counter = tmp_path / "calls.txt"
    killed = flows_cli(db, "run", str(flow), "--input", f'"{counter}"')
    assert killed.returncode == -signal.SIGKILL
    (run,) = json_of(flows_cli(db, "runs", "--json"))
    resumed = flows_cli(db, "resume", run["runId"], "--json")
    assert json_of(resumed)["output"] == 3
    records = list(journal_of(db).read(run["runId"], flows.STEPS_STREAM))
    assert [(r.key, r.payload["attempt"], r.payload["epoch"]) for r in records] == [
        ("flaky#1~1", 1, 1),
        ("flaky#1", 2, 2),  # the killed second attempt ran again as the second, under lease 2
    ]


def test_run_takes_input_as_json_or_at_file_and_runs_json_and_show_report_input_and_output(
    tmp_path: Path,
) -> None:
    db = tmp_path / "store" / "history.db"
    flow = tmp_path / "echo.py"
    flow.write_text(
        "import flows\n\n\n@flows.flow(name='echo')\nasync def body(f):\n"
        "    doubled = await f.step('double', lambda: f.input['n'] * 2)\n"
        "    await f.memory.learn({'text': f'doubled {doubled}'})\n"
        "    return {'in': f.input, 'doubled': doubled}\n"
    )
    first = flows_cli(db, "run", str(flow), "--input", '{"n": 4}')
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[1] == 'output: {"doubled":8,"in":{"n":4}}'
    (tmp_path / "in.json").write_text('{"n": 5, "note": "from a file"}')
    second = json_of(flows_cli(db, "run", str(flow), "--input", f"@{tmp_path / 'in.json'}", "--json"))
    assert second["output"] == {"in": {"n": 5, "note": "from a file"}, "doubled": 10}

    runs = json_of(flows_cli(db, "runs", "--json"))
    assert [(r["input"], r["output"]) for r in runs] == [
        ({"n": 5, "note": "from a file"}, second["output"]),
        ({"n": 4}, {"in": {"n": 4}, "doubled": 8}),
    ]
    assert runs[0]["sourceSha256"] == flows.source_digest(flow.read_bytes())

    shown = json_of(flows_cli(db, "show", second["runId"], "--json"))
    assert (shown["state"], shown["input"], shown["output"]) == ("done", runs[0]["input"], second["output"])
    kinds = [e["kind"] for e in shown["timeline"]]
    assert kinds == ["step", "learn", "output"]
    step, learn, output = shown["timeline"]
    assert (step["step"], step["attempt"], step["result"]) == ("double#1", 1, 10)
    assert isinstance(step["durationMs"], int) and step["citation"]["stream"] == "steps"
    assert (learn["text"], learn["citation"]["stream"]) == ("doubled 10", "memory-learn")
    assert output["output"] == second["output"]
    records = {
        r.id: r for s in ("steps", "memory-learn", "run") for r in journal_of(db).read(second["runId"], s)
    }
    assert all(e["citation"]["id"] in records for e in shown["timeline"])

    text = flows_cli(db, "show", second["runId"])
    assert text.returncode == 0
    assert f"root run {second['runId']}: flow echo, scope echo, done" in text.stdout
    assert "double#1" in text.stdout and "ok 10" in text.stdout
    assert 'input   {"n":5,"note":"from a file"}' in text.stdout


@pytest.mark.parametrize(
    "value",
    [
        "{not json",
        "NaN",
        "@/nonexistent/in.json",
        "@.",
        "",
        '{"a": 1} trailing',
        # JSON the journal cannot hold: was flow_input_invalid (exit 1), or a float (2**64 read as
        # 1.8446744073709552e+19, the run done with another number than the one given)
        "[" * 300 + "]" * 300,
        str(2**64),
        str(2**63),
        f"[{-(2**63) - 1}]",
        "1e400",
        "9" * 5000,
        "[" * 30_000 + "]" * 30_000,
    ],
)
def test_bad_input_is_a_usage_error_and_begins_nothing(tmp_path: Path, value: str) -> None:
    db = tmp_path / "store" / "history.db"
    flow = tmp_path / "noop.py"
    flow.write_text("import flows\n\n\n@flows.flow()\nasync def body(f):\n    return f.input\n")
    result = flows_cli(db, "run", str(flow), "--input", value)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("flows: error[usage]: argument --input: ")
    assert not (db.parent / "flows-journal").exists() or json_of(flows_cli(db, "runs", "--json")) == []


def test_input_from_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)
    result = flows_cli(db, "run", str(tmp_path / "x.py"), "--input", f"@{fifo}", timeout=30)
    assert result.returncode == 2
    assert f"{fifo} is not a regular file" in result.stderr


def _make_runs(tmp_path: Path, db: Path) -> dict[str, Any]:
    ok = tmp_path / "ok_flow.py"
    ok.write_text("import flows\n\n\n@flows.flow(name='ok')\nasync def body(f):\n    return 1\n")
    bad = tmp_path / "bad_flow.py"
    bad.write_text(
        "import flows\n\n\n@flows.flow(name='bad')\nasync def body(f):\n    raise ValueError('x')\n"
    )
    ids: dict[str, Any] = {"ok": [], "bad": []}
    for name, path in (("ok", ok), ("bad", bad), ("ok", ok)):
        flows_cli(db, "run", str(path))
        ids[name].append(json_of(flows_cli(db, "runs", "--json", "--limit", "1"))[0]["runId"])
    return ids


def test_runs_filters_by_state_flow_and_since_newest_first_up_to_the_limit(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    ids = _make_runs(tmp_path, db)

    def listed(*args: str) -> list[str]:
        return [r["runId"] for r in json_of(flows_cli(db, "runs", "--json", *args))]

    assert listed() == [ids["ok"][1], ids["bad"][0], ids["ok"][0]]
    assert listed("--state", "failed") == ids["bad"]
    assert listed("--state", "done", "--flow", "ok") == ids["ok"][::-1]
    assert listed("--flow", "bad", "--state", "done") == []
    assert listed("--limit", "2") == [ids["ok"][1], ids["bad"][0]]
    created = {r["runId"]: r["createdMs"] for r in json_of(flows_cli(db, "runs", "--json"))}
    assert listed("--since", str(created[ids["bad"][0]])) == [ids["ok"][1], ids["bad"][0]]
    assert listed("--since", "2999-01-01") == []
    assert listed("--since", "2000-01-01T00:00:00Z") == listed()
    assert "no root runs match" in flows_cli(db, "runs", "--state", "running").stdout
    table = flows_cli(db, "runs", "--flow", "bad").stdout.splitlines()
    assert table[0].split() == ["RUN", "FLOW", "SCOPE", "STATE", "STARTED", "ERROR"]
    assert table[1].split()[0] == ids["bad"][0] and table[1].endswith("flow_failed")


def test_runs_shows_twenty_by_default(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    jr = journal_of(db)
    for _ in range(23):
        jr.begin("many", "many", {})
    jr.close()
    assert len(json_of(flows_cli(db, "runs", "--json"))) == 20
    assert len(json_of(flows_cli(db, "runs", "--json", "--limit", "100"))) == 23


@pytest.mark.parametrize(
    "args",
    [
        ["--limit", "0"],
        ["--limit", "-3"],
        ["--limit", "100001"],
        ["--limit", "99999999999999999999999"],
        ["--since", "yesterday"],
        ["--since", "99999999999999999999999"],
        ["--since", "-5"],
        ["--state", "sleeping"],
    ],
)
def test_bad_runs_filters_are_usage_errors(tmp_path: Path, args: list[str]) -> None:
    result = flows_cli(tmp_path / "history.db", "runs", *args)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("flows: error[usage]: argument ")
    assert "Traceback" not in result.stderr


def test_show_of_an_unknown_run_is_a_one_line_error(tmp_path: Path) -> None:
    result = flows_cli(tmp_path / "history.db", "show", "20000101T000000-0000000000")
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("flows: error[journal_run_not_found]: ")


def _failed_run(tmp_path: Path, db: Path, name: str, result: str) -> tuple[Path, Path, dict[str, Any]]:
    """A flow file ``name``.py whose one step returns ``result`` and which fails while a flag file
    is there; run once (failing). Returns the file, the flag and the run's row."""
    flow = tmp_path / f"{name}.py"
    flow.write_text(
        f"import os\nimport flows\n\n\n@flows.flow(name={name!r})\nasync def body(f):\n"
        f"    a = await f.step('a', lambda: {result!r})\n"
        "    if os.path.exists(f.input):\n        raise RuntimeError('not yet')\n"
        "    return a\n"
    )
    flag = tmp_path / "flag"
    flag.touch()
    assert flows_cli(db, "run", str(flow), "--input", f'"{flag}"').returncode == 1
    (run,) = json_of(flows_cli(db, "runs", "--json"))
    return flow, flag, run


def test_resume_of_a_changed_file_is_refused_naming_both_digests_unless_allow_changed(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    flow, flag, run = _failed_run(tmp_path, db, "changing", "first version")
    old = flows.source_digest(flow.read_bytes())
    flow.write_text(flow.read_text().replace("return a", "return [a, await f.step('b', lambda: 'new')]"))
    new = flows.source_digest(flow.read_bytes())
    flag.unlink()

    refused = flows_cli(db, "resume", run["runId"])
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"flows: error[flow_changed]: the flow file {flow.resolve()} is not the one root run {run['runId']} "
        f"recorded (recorded sha256 {old}, now {new}); none of it was run: resume with --allow-changed "
        f"(allow_changed=True) to replay its recorded steps by key and run new ones (root run {run['runId']})"
    ]
    assert json_of(flows_cli(db, "runs", "--json"))[0]["epoch"] == 1

    allowed = flows_cli(db, "resume", run["runId"], "--allow-changed", "--json")
    assert json_of(allowed)["output"] == ["first version", "new"]
    kinds = [
        (e["kind"], e.get("changed"))
        for e in json_of(flows_cli(db, "show", run["runId"], "--json"))["timeline"]
    ]
    assert kinds == [("step", None), ("failed", None), ("resumed", True), ("step", None), ("output", None)]


def test_resume_file_runs_the_flow_from_where_it_was_moved_and_refuses_another(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    flow, flag, run = _failed_run(tmp_path, db, "moving", "done once")
    moved = tmp_path / "elsewhere" / "moving.py"
    moved.parent.mkdir()
    flow.rename(moved)
    flag.unlink()
    lost = flows_cli(db, "resume", run["runId"])
    assert lost.returncode == 1 and "flow_load_failed" in lost.stderr and str(flow) in lost.stderr
    other = tmp_path / "other.py"
    other.write_text(moved.read_text().replace("done once", "something else"))
    refused = flows_cli(db, "resume", run["runId"], "--file", str(other))
    assert refused.returncode == 1 and "error[flow_changed]" in refused.stderr
    assert str(other) in refused.stderr
    resumed = flows_cli(db, "resume", run["runId"], "--file", str(moved), "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json_of(resumed)["output"] == "done once"
