"""The flows CLI end to end: run, recall, why, runs, journal, sync, diagnostics."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

import orjson
import pytest

import memory
from tests.conftest import ROOT
from tests.flows.helpers import check_invariants, flows, flows_cmd, json_of, write_flow

LEARN_TWO = """
await f.memory.learn({"text": "the kettle boils at 100 C at sea level", "tags": ["kitchen", "physics"]})
await f.memory.learn({"text": "bread rises faster in a warm room", "tags": ["kitchen"], "source": "baker"})
"""


def test_a_flow_learns_and_a_second_run_recalls_it_through_the_installed_cli(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    flow = write_flow(tmp_path / "kitchen.py", LEARN_TWO, 'scope="home"')
    first = flows(db, "run", str(flow), installed=True)
    assert first.returncode == 0, first.stderr
    run_id = json_of(flows(db, "runs", "--json"))[0]["runId"]
    assert f"root run {run_id} ran: done" in first.stdout

    records = json_of(flows(db, "journal", run_id, "--stream", "memory-learn", "--json"))
    assert [r["payload"]["finding"]["text"] for r in records] == [
        "the kettle boils at 100 C at sea level",
        "bread rises faster in a warm room",
    ]
    files = check_invariants(db, run_id)
    assert {e.citation.id for e in files.values()} == {r["id"] for r in records}

    reader = write_flow(
        tmp_path / "reader.py",
        """
found = await f.memory.recall(tag="kitchen")
assert [e.text[:5] for e in found] == ["bread", "the k"]
answers = await f.memory.why("when does the kettle boil?")
assert answers[0].finding.text.startswith("the kettle")
""",
        'scope="home"',
    )
    second = flows(db, "run", str(reader), installed=True)
    assert second.returncode == 0, second.stderr

    recalled = json_of(flows(db, "recall", "--tag", "kitchen", "--json"))
    assert [r["text"] for r in recalled] == [
        "bread rises faster in a warm room",
        "the kettle boils at 100 C at sea level",
    ]
    assert set(recalled[0]) >= {"id", "text", "source", "tags", "learnedMs", "journal"}
    assert recalled[0]["journal"]["runId"] == run_id
    assert recalled[0]["id"] < 0  # not yet synced
    assert json_of(flows(db, "recall", "--source", "baker", "--json"))[0]["source"] == "baker"
    assert json_of(flows(db, "recall", "--limit", "1", "--json"))[0]["text"].startswith("bread")

    why = flows(db, "why", "kettle boil")
    assert why.returncode == 0
    assert "the kettle boils at 100 C at sea level" in why.stdout
    assert f"root run {run_id}, stream memory-learn, record " in why.stdout
    assert "from flow 'kitchen'" in why.stdout

    synced = json_of(flows(db, "sync", "--json"))
    assert (synced["ingested"], synced["dropped"]) == (2, 2)
    after = json_of(flows(db, "recall", "--tag", "kitchen", "--json"))
    assert [r["id"] > 0 for r in after] == [True, True]
    assert [r["journal"] for r in after] == [r["journal"] for r in recalled]


@pytest.mark.parametrize("empty", ["", "   ", "\t\n"])
def test_why_with_an_empty_question_is_a_usage_error_not_a_non_answer(tmp_path: Path, empty: str) -> None:
    db = tmp_path / "history.db"
    assert flows(db, "learn", "the kitchen tap drips", "--scope", "s").returncode == 0
    why = flows(db, "why", empty)
    assert why.returncode == 2 and why.stdout == ""
    assert "error[usage]" in why.stderr and "argument subject" in why.stderr, why.stderr


def test_runs_table_and_json_show_state_and_the_failing_code(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    bad = write_flow(tmp_path / "bad.py", 'await f.memory.learn({"text": ""})')
    result = flows(db, "run", str(bad))
    assert result.returncode == 1
    runs = json_of(flows(db, "runs", "--json"))
    assert runs[0]["state"] == "failed"
    assert runs[0]["error"]["code"] == "memory_finding_invalid"
    table = flows(db, "runs").stdout.splitlines()
    assert table[0].split() == ["RUN", "FLOW", "SCOPE", "STATE", "STARTED", "ERROR"]
    assert "failed" in table[1] and "memory_finding_invalid" in table[1]


def test_why_and_recall_on_an_empty_store_are_friendly(tmp_path: Path) -> None:
    db = tmp_path / "empty" / "history.db"
    db.parent.mkdir()
    why = flows(db, "why", "anything at all")
    assert (why.returncode, why.stderr) == (0, "")
    assert "nothing learned yet answers 'anything at all'" in why.stdout
    pasted = flows(db, "why", "word " * 20_000)  # a pasted page is echoed in a line, not in full
    assert pasted.returncode == 0 and len(pasted.stdout) < 200, pasted.stdout[:300]
    assert pasted.stdout.startswith("nothing learned yet answers 'word word")
    assert "100,000 characters" in pasted.stdout
    assert json_of(flows(db, "why", "x", "--json")) == []
    assert json_of(flows(db, "recall", "--json")) == []
    assert json_of(flows(db, "runs", "--json")) == []
    assert not db.exists()  # reads create nothing


@pytest.mark.parametrize("command", ["run", "resume", "runs", "journal", "recall", "why", "sync", "demo"])
def test_every_command_has_help(command: str, tmp_path: Path) -> None:
    result = flows(tmp_path / "h.db", command, "--help")
    assert result.returncode == 0
    assert "--db" in result.stdout and "usage: flows" in result.stdout


def test_usage_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    result = flows(tmp_path / "h.db", "recall", "--limit", "zero")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("flows: error[usage]: ")
    bad_id = flows(tmp_path / "h.db", "resume", "../../etc")
    assert bad_id.returncode == 2
    assert bad_id.stderr.startswith("flows: error[journal_name_invalid]: ")


FAILING_BODIES = {
    "memory_finding_invalid": 'await f.memory.learn({"text": "x", "colour": "red"})',
    "unawaited_step": 'f.memory.learn({"text": "forgotten"})',
    "flow_failed": 'raise ValueError("the body broke")',
    "memory_unwritable": 'await f.memory.learn({"text": "no room"})',
    "journal_unwritable": 'await f.memory.learn({"text": "no journal"})',
}
FAILPOINTS = {
    "memory_unwritable": "memory.before_stage=ENOSPC",
    "journal_unwritable": "linelog.before_fsync=EIO",
}


@pytest.mark.parametrize("code", sorted(FAILING_BODIES))
def test_every_failure_prints_its_code_once_with_the_root_run(code: str, tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    flow = write_flow(tmp_path / "f.py", FAILING_BODIES[code])
    env = {"FLOWS_FAILPOINTS": FAILPOINTS[code]} if code in FAILPOINTS else None
    result = flows(db, "run", str(flow), env=env)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    run_id = json_of(flows(db, "runs", "--json"))[0]["runId"]
    assert lines[0].startswith(f"flows: error[{code}]: ")
    assert lines[0].endswith(f"(root run {run_id})")
    assert lines[0].count(code) == 1  # no doubled prefix

    as_json = flows(db, "run", str(flow), "--json", env=env)
    assert as_json.returncode == 1 and as_json.stdout == ""
    obj = orjson.loads(as_json.stderr)
    assert set(obj) >= {"code", "message", "runId"}  # and the error's own context fields
    assert obj["code"] == code and obj["runId"] != run_id
    if code == "unawaited_step":
        assert obj["steps"] == ["learn#1 'forgotten'"]


def test_journal_and_resume_diagnose_unknown_and_done_runs(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    flow = write_flow(tmp_path / "ok.py", 'await f.memory.learn({"text": "fine"})')
    assert flows(db, "run", str(flow)).returncode == 0
    run_id = json_of(flows(db, "runs", "--json"))[0]["runId"]
    done = flows(db, "resume", run_id)
    assert done.returncode == 1
    assert done.stderr == (
        f"flows: error[journal_not_resumable]: root run {run_id} is done; there is nothing to resume "
        f"(root run {run_id})\n"
    )
    missing = flows(db, "journal", "20990101T000000-0000000000")
    assert missing.returncode == 1
    assert missing.stderr.startswith("flows: error[journal_run_not_found]: ")


def test_a_damaged_learned_file_fails_the_read_naming_the_file(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    flow = write_flow(tmp_path / "ok.py", 'await f.memory.learn({"text": "fine"})')
    assert flows(db, "run", str(flow)).returncode == 0
    (path,) = (p for d in memory.scope_dirs(db) for p in d.iterdir())
    path.write_bytes(b"{not json")
    for args in (("recall",), ("why", "fine"), ("sync",)):
        result = flows(db, *args)
        assert result.returncode == 1
        assert result.stderr.startswith("flows: error[memory_unreachable]: ")
        assert str(path) in result.stderr


# -- building only the named command's parser ------------------------------------------------------


def _parsed(cli: object, argv: list[str], capsys: pytest.CaptureFixture[str]) -> object:
    """What parsing ``argv`` gives: the namespace (its handler by name), a usage error, or help."""
    from memory.cli import UsageError

    try:
        ns = cli.parse(argv)  # type: ignore[attr-defined]
    except UsageError as exc:
        return ("usage", exc.message)
    except SystemExit as exc:
        return ("exit", exc.code, capsys.readouterr().out)
    fields = dict(vars(ns))
    handler = fields.pop("handler", None)
    return fields, getattr(handler, "__name__", None)


@pytest.mark.parametrize(
    "argv",
    [
        ["recall", "--limit", "3", "--json"],
        ["--db", "recall", "why", "fog"],  # a global option's value that is a command's name
        ["--jour", "recall", "why", "fog"],  # an abbreviated global option: only the whole parser knows
        ["why", "--db", "x", "fog", "-v"],
        ["recall", "--limit", "-1"],  # a usage error: worded by the parser with every command
        ["recall", "fog"],
        ["bogus", "--limit", "3"],
        ["recall", "--help"],
        ["--help", "recall"],  # the top level's help, listing every command
        ["--he", "why", "fog"],
        ["-vh", "recall"],
        ["--version", "recall"],
        ["--he"],
        ["-vh"],
        ["--vers"],
    ],
)
def test_a_command_line_parses_as_it_would_with_every_command_built(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from flows._cli import _named_command, build_cli

    only = _named_command(argv)
    assert _parsed(build_cli(only), argv, capsys) == _parsed(build_cli(), argv, capsys)


def test_only_the_named_commands_parser_is_built() -> None:
    from flows._cli import build_cli

    cli = build_cli("recall")
    assert sorted(cli._sub.choices) == ["recall"]  # type: ignore[attr-defined]
    assert len(build_cli()._sub.choices) > 10  # type: ignore[attr-defined]


def test_each_command_is_built_alone_and_the_run_commands_are_the_ones_their_module_adds() -> None:
    """``build_cli(only)`` imports the run commands' module only for one of ``RUN_COMMANDS``: that
    list must name exactly what the module adds, or a command would go missing when built alone."""
    from flows._cli import RUN_COMMANDS, build_cli
    from flows._cli_runs import add_run_commands

    added: list[str] = []

    def add(name: str, *_: object) -> argparse.ArgumentParser:
        added.append(name)
        return argparse.ArgumentParser()

    add_run_commands(add)
    assert sorted(added) == sorted(RUN_COMMANDS)
    for name in build_cli()._sub.choices:  # type: ignore[attr-defined]
        assert sorted(build_cli(name)._sub.choices) == [name]  # type: ignore[attr-defined]


def test_a_store_path_is_never_guessed(tmp_path: Path) -> None:
    # a reading command on a folder that does not exist: a coded refusal naming the path, not "no findings"
    missing = tmp_path / "missing" / "typo" / "history.db"
    for command in (["recall"], ["why", "fee"], ["runs"], ["sync"], ["check"]):
        result = flows(missing, *command)
        assert result.returncode == 1, (command, result.stdout)
        assert "error[memory_store_missing]" in result.stderr and str(missing) in result.stderr
    # a write makes at most the one folder a DB is named in, never a path of missing folders
    deep = flows(missing, "learn", "x", "--scope", "s")
    assert deep.returncode == 1 and "memory_store_missing" in deep.stderr
    assert not (tmp_path / "missing").exists()
    store = tmp_path / "demo" / "history.db"
    assert flows(store, "learn", "the fee is low", "--scope", "s").returncode == 0  # makes demo/
    assert flows(store, "sync").returncode == 0
    assert flows(store, "learn", "the fee rose", "--scope", "s").returncode == 0
    # a mistyped DB name beside the store's DB: refused, nothing split or moved
    typo = tmp_path / "demo" / "histroy.db"
    for command in (["recall"], ["sync"], ["learn", "y", "--scope", "s"]):
        result = flows(typo, *command)
        assert result.returncode == 1 and "memory_store_missing" in result.stderr, command
        assert f"--db {store}" in result.stderr
    assert not typo.exists()
    assert len(json_of(flows(store, "recall", "--json"))) == 2


def test_a_journal_given_at_a_missing_folder_is_no_store_either(tmp_path: Path) -> None:
    """``$FLOWS_JOURNAL`` (or ``--journal``) naming a folder that does not exist, beside a DB whose
    folder does not exist: a reading command refuses, naming both, where it answered as an empty
    store ("no findings match"). A journal folder that is there may hold runs of its own: read."""
    missing_db = tmp_path / "nowhere" / "history.db"
    missing_journal = tmp_path / "typo-journal"
    for command in (["recall"], ["runs"], ["why", "fee"]):
        for how in ("env", "option"):
            extra = ["--journal", str(missing_journal)] if how == "option" else []
            env = {**os.environ, "PYTHONPATH": str(ROOT), "FLOWS_JOURNAL": str(missing_journal)}
            result = subprocess.run(
                [*flows_cmd(), *command, *extra, "--db", str(missing_db)],
                capture_output=True,
                text=True,
                env=env if how == "env" else {k: v for k, v in env.items() if k != "FLOWS_JOURNAL"},
                timeout=60,
                check=False,
            )
            assert result.returncode == 1, (command, how, result.stdout)
            assert "error[memory_store_missing]" in result.stderr, (command, how, result.stderr)
            assert str(missing_journal) in result.stderr and str(missing_db) in result.stderr
    missing_journal.mkdir()
    assert flows(missing_db, "runs", "--journal", str(missing_journal)).returncode == 0
