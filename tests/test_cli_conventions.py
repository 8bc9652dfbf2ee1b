"""``flows`` and ``sail`` behave alike: help, version, usage errors, Ctrl-C, a closed pipe, options.

Every test runs the real command in a fresh process, as a user or a script would.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import orjson
import portalocker
import pytest

import memory
from flows._cli import build_parser as flows_parser
from flows._web_cli import check_address
from memory.cli import expiry_ms, instant_ms, limit, shown
from memory.ledger import Ledger, Skipped
from sail._cli import build_parser as sail_parser
from sail._config import EMBEDDED, SailConfig, save_config
from tests._helpers.interrupts import read_until
from tests.conftest import ROOT
from tests.flows.helpers import write_flow

USDC, WETH, ROUTER = "0x" + "11" * 20, "0x" + "22" * 20, "0x" + "33" * 20
AGENT_KEY = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"  # anvil's public dev key 1


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TZ": "UTC", **extra}
    for name in ("FLOWS_JOURNAL", "FLOWS_DB", "SAIL_HOME", "FLOWS_LOG", "FLOWS_DEBUG", "_ARGCOMPLETE"):
        if name not in extra:
            env.pop(name, None)
    return env


def cli(prog: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", prog, *args],
        capture_output=True,
        text=True,
        env=_env(**env),
        timeout=120,
        check=False,
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A history DB path with one done root run that learned two findings."""
    db = tmp_path / "store" / "history.db"
    flow = write_flow(
        tmp_path / "notes.py",
        'await f.memory.learn({"text": "tea wants water just off the boil", "tags": ["kitchen"]})\n'
        'await f.memory.learn({"text": "bread likes a warm room", "tags": ["kitchen"]})',
    )
    done = cli("flows", "run", str(flow), "--db", str(db))
    assert done.returncode == 0, done.stderr
    return db


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An agent home with a config and three ledger entries."""
    save_config(tmp_path, _config("http://127.0.0.1:1"))
    with Ledger(tmp_path / ".sail").writer() as w:
        for ts in (1000, 2000, 3000):
            w.append(Skipped(ts=ts, block=ts // 100, chain_id=31337, reason="quote returned 0"))
    return tmp_path


def _config(rpc_url: str) -> SailConfig:
    return SailConfig(
        rpc_url=rpc_url,
        router=ROUTER,
        token_in=USDC,
        token_out=WETH,
        amount_in=25_000_000,
        interval_s=3600,
        min_balance=25_000_000,
    )


def _where(prog: str, store: Path, home: Path) -> list[str]:
    return ["--db", str(store)] if prog == "flows" else ["--home", str(home)]


LISTING = {"flows": ["runs"], "sail": ["ledger"]}
LIMITED = {"flows": ["recall"], "sail": ["why"]}
DATED = {"flows": ["recall", "--before"], "sail": ["ledger", "--since"]}
#: every command of the two CLIs, in the order their help lists them
COMMANDS = {
    "flows": [
        "run",
        "resume",
        "runs",
        "show",
        "learn",
        "update",
        "forget",
        "erase",
        "history",
        "journal",
        "recall",
        "why",
        "sync",
        "check",
        "demo",
        "serve",
        "mcp",
    ],
    "sail": ["init", "tick", "ledger", "why", "status", "journal", "demo"],
}
BOTH = pytest.mark.parametrize("prog", ["flows", "sail"])


@BOTH
def test_help_lists_every_command_and_exits_0(prog: str) -> None:
    for flag in ("-h", "--help"):
        result = cli(prog, flag)
        assert (result.returncode, result.stderr) == (0, "")
        assert result.stdout.startswith(f"usage: {prog} ")
        assert all(f"\n    {c} " in result.stdout for c in COMMANDS[prog]), result.stdout
        assert "exit status: 0 done, 1 failed" in result.stdout
    for command in COMMANDS[prog]:
        result = cli(prog, command, "--help")
        assert result.returncode == 0 and result.stdout.startswith(f"usage: {prog} {command} ")
        assert "--json" in result.stdout and "--verbose" in result.stdout


@BOTH
def test_no_command_prints_help_on_stderr_and_exits_2(prog: str) -> None:
    result = cli(prog)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"usage: {prog} ")
    assert result.stderr.endswith(f"{prog}: error[usage]: a command is required; see `{prog} --help`\n")
    as_json = cli(prog, "--json")
    assert (as_json.returncode, as_json.stdout) == (2, "")
    assert orjson.loads(as_json.stderr) == {
        "code": "usage",
        "message": f"a command is required; see `{prog} --help`",
        "runId": None,
    }


@BOTH
def test_version_comes_from_the_installed_distribution(prog: str) -> None:
    result = cli(prog, "--version")
    assert (result.returncode, result.stdout) == (0, f"{prog} {metadata.version('flows-memory')}\n")


@BOTH
def test_an_option_given_twice_is_a_usage_error_naming_it_in_text_and_in_json(
    prog: str, tmp_path: Path
) -> None:
    """``--limit 5 --limit 50`` listed 50 without a word; every command's options are walked in
    ``tests/test_cli_options_once.py``."""
    where = _where(prog, tmp_path / "h.db", tmp_path)
    command = LIMITED[prog][0]
    result = cli(prog, command, "--limit", "5", *where, "--limit", "50")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"usage: {prog} {command} ")
    message = (
        "argument --limit: given more than once; it takes one value: give it once; "
        f"see `{prog} {command} --help`"
    )
    assert result.stderr.splitlines()[-1] == f"{prog}: error[usage]: {message}"
    as_json = cli(prog, command, "--limit", "5", *where, "--json", "--limit", "50")
    assert (as_json.returncode, as_json.stdout) == (2, "")
    assert orjson.loads(as_json.stderr) == {"code": "usage", "message": message, "runId": None}


@BOTH
@pytest.mark.parametrize("bad", ["0", "-3", "ten", str(2**64), "100001"])
def test_a_bad_limit_is_a_usage_error_in_text_and_in_json(prog: str, bad: str, tmp_path: Path) -> None:
    where = _where(prog, tmp_path / "h.db", tmp_path)
    result = cli(prog, *LIMITED[prog], "--limit", bad, *where)
    assert (result.returncode, result.stdout) == (2, "")
    last = result.stderr.splitlines()[-1]
    assert last == (
        f"{prog}: error[usage]: argument --limit: must be a whole number from 1 to 100000, got {bad!r}; "
        f"see `{prog} {LIMITED[prog][0]} --help`"
    )
    as_json = cli(prog, *LIMITED[prog], "--limit", bad, "--json", *where)
    assert (as_json.returncode, as_json.stdout) == (2, "")
    assert len(as_json.stderr.splitlines()) == 1
    obj = orjson.loads(as_json.stderr)
    assert obj["code"] == "usage" and obj["message"] == last.split("error[usage]: ", 1)[1]


@BOTH
@pytest.mark.parametrize(
    "bad",
    [
        *(str(2**64), "yesterday", "2026-13-01"),
        *("9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00", "0001-01-01"),
    ],
)
def test_a_bad_date_is_a_usage_error(prog: str, bad: str, tmp_path: Path) -> None:
    result = cli(prog, *DATED[prog], bad, "--json", *_where(prog, tmp_path / "h.db", tmp_path))
    assert (result.returncode, result.stdout) == (2, "")
    assert orjson.loads(result.stderr)["code"] == "usage"


def test_dates_are_epoch_milliseconds_or_iso_8601() -> None:
    assert instant_ms("1769817600000") == 1769817600000
    assert instant_ms("2026-01-31T00:00:00+00:00") == 1769817600000
    assert instant_ms("2026-01-31T01:00:00+01:00") == 1769817600000
    assert instant_ms(str(2**63 - 1)) == 2**63 - 1


@pytest.mark.parametrize(
    "bad", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00", "0001-01-01", "1" * 5000, "9" * 21]
)
def test_a_date_its_offset_moves_out_of_range_is_refused_saying_the_range(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"from 1970 to .*9999-12-31"):
        instant_ms(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="9999-12-31"):
        expiry_ms(bad)


def test_numbers_of_thousands_of_digits_are_refused_or_read_never_a_crash() -> None:
    # int() refuses a string of over 4,300 digits with a ValueError, which argparse would print
    # with the whole value: every number the CLIs take is checked short first
    long = "9" * 5000
    for bad in (long, long + "d", "1h" + long + "m"):
        with pytest.raises(argparse.ArgumentTypeError, match="9999-12-31") as info:
            instant_ms(bad)
        assert len(str(info.value)) < 300
        with pytest.raises(argparse.ArgumentTypeError, match="9999-12-31"):
            expiry_ms(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="from 1 to 100000") as info:
        limit(long)
    assert len(str(info.value)) < 200
    zeros = "0" * 5000
    assert (limit(zeros + "7"), instant_ms(zeros + "5"), expiry_ms(zeros + "1d", now_ms=10)) == (
        7,
        5,
        10 + 86_400_000,
    )


@BOTH
def test_a_limit_of_thousands_of_digits_is_a_short_usage_error(prog: str, tmp_path: Path) -> None:
    result = cli(prog, *LIMITED[prog], "--limit", "9" * 5000, *_where(prog, tmp_path / "h.db", tmp_path))
    assert (result.returncode, result.stdout) == (2, "")
    assert "error[usage]: argument --limit: must be a whole number" in result.stderr
    assert len(result.stderr) < 400, result.stderr[:400]


KEY = "0" * 32
#: each flows command that opens the store, with the arguments it needs
STORE_COMMANDS = {
    "run": ["run", "FLOW"],
    "resume": ["resume", "r1"],
    "runs": ["runs"],
    "show": ["show", "r1"],
    "learn": ["learn", "a finding", "--scope", "s"],
    "update": ["update", KEY, "a new version"],
    "forget": ["forget", KEY],
    "erase": ["erase", KEY, "--yes"],
    "history": ["history", KEY],
    "journal": ["journal", "r1"],
    "recall": ["recall"],
    "why": ["why", "anything"],
    "sync": ["sync"],
    "check": ["check"],
    "serve": ["serve", "--port", "0"],
    "mcp": ["mcp"],
}


@pytest.mark.parametrize("bad", ["a name too long", "empty"])
@pytest.mark.parametrize("command", sorted(STORE_COMMANDS))
def test_a_bad_flows_db_is_a_bad_argument_exiting_2_from_every_command(
    command: str, bad: str, tmp_path: Path
) -> None:
    """A ``$FLOWS_DB`` no file could have (a file name over 247 bytes) is ``memory_argument_invalid``,
    which docs/SURFACE.md's table says exits 2: so it does, from every command that opens the store
    (``check``, ``sync`` and ``runs`` exited 1). So is one set but empty (``FLOWS_DB=$STORE`` with
    ``$STORE`` unset), which was taken for unset: the writes went to the default store."""
    assert sorted(STORE_COMMANDS) == sorted(set(COMMANDS["flows"]) - {"demo"})  # demo keeps its own store
    flow = write_flow(tmp_path / "f.py", "return 1")
    argv = [str(flow) if a == "FLOW" else a for a in STORE_COMMANDS[command]]
    value = "" if bad == "empty" else str(tmp_path / ("a" * 300 + ".db"))
    home = tmp_path / "data-home"  # where the default store would be
    result = cli("flows", *argv, "--json", FLOWS_DB=value, XDG_DATA_HOME=str(home))
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert orjson.loads(result.stderr.splitlines()[-1])["code"] == "memory_argument_invalid"
    text = cli("flows", *argv, FLOWS_DB=value, XDG_DATA_HOME=str(home))
    assert text.returncode == 2 and "error[memory_argument_invalid]" in text.stderr
    assert not home.exists(), "the default store was made"


def test_a_flow_body_meeting_a_bad_argument_fails_its_run_with_1(tmp_path: Path) -> None:
    """The same code from a flow body is the run's failure, not the command line's: exit 1."""
    db = tmp_path / "store" / "history.db"
    flow = write_flow(tmp_path / "f.py", 'await f.memory.forget("not a key", reason="x")')
    result = cli("flows", "run", str(flow), "--json", "--db", str(db))
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    error = orjson.loads(result.stderr.splitlines()[-1])
    assert error["code"] == "memory_argument_invalid" and error["runId"]


def test_an_expiry_past_2_to_the_53_ms_is_refused_at_the_argument_saying_the_range(tmp_path: Path) -> None:
    """``--expires`` takes what a finding's ``expiresMs`` takes, 1 to 2^53 - 1 ms: a later time (epoch
    ms, or a duration that ends past it) is a usage error naming that range, as an out-of-range date
    is, never a ``memory_finding_invalid`` after the parse; nothing is written."""
    assert expiry_ms(str(2**53 - 1)) == 2**53 - 1
    assert expiry_ms("7d", now_ms=1000) == 1000 + 7 * 86_400_000
    for bad in (str(2**53), str(2**63 - 1), "0"):
        with pytest.raises(argparse.ArgumentTypeError, match=rf"from 1 to {2**53 - 1} ms"):
            expiry_ms(bad)
    with pytest.raises(argparse.ArgumentTypeError, match=rf"from 1 to {2**53 - 1} ms"):
        expiry_ms("1w", now_ms=2**53 - 1)
    db = tmp_path / "store" / "history.db"
    result = cli("flows", "learn", "x", "--scope", "s", "--expires", str(2**53), "--json", "--db", str(db))
    assert (result.returncode, result.stdout) == (2, "")
    error = orjson.loads(result.stderr)
    assert error["code"] == "usage" and f"from 1 to {2**53 - 1} ms" in error["message"]
    assert not db.parent.exists()


@BOTH
def test_global_options_work_before_and_after_the_command(prog: str, store: Path, home: Path) -> None:
    where = _where(prog, store, home)
    before = cli(prog, *where, "--json", *LISTING[prog])
    after = cli(prog, *LISTING[prog], *where, "--json")
    mixed = cli(prog, "--json", *LISTING[prog], *where)
    assert before.returncode == 0, before.stderr
    assert before.stdout == after.stdout == mixed.stdout
    assert len(orjson.loads(before.stdout)) in (1, 3)


@BOTH
def test_a_reader_that_goes_away_is_not_an_error(prog: str, store: Path, home: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", prog, *LISTING[prog], *_where(prog, store, home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader is gone before the command writes a byte
        err = proc.stderr.read()
        assert (proc.wait(timeout=60), err) == (0, b"")


def test_a_flow_whose_reader_went_away_still_finishes_done(store: Path, tmp_path: Path) -> None:
    body = 'for n in range(2000):\n    print("line", n)\nawait f.memory.learn({"text": "said it all"})'
    chatty = write_flow(tmp_path / "chatty.py", body)
    with subprocess.Popen(
        [sys.executable, "-m", "flows", "run", str(chatty), "--db", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read()
        assert (proc.wait(timeout=60), err) == (0, b"")
    runs = orjson.loads(cli("flows", "runs", "--json", "--db", str(store)).stdout)
    assert [r["state"] for r in runs] == ["done", "done"]


def test_flows_run_json_keeps_stdout_pure_json(tmp_path: Path) -> None:
    body = 'print("hello from the body")\nos.write(1, b"and from its fd\\n")'
    chatty = write_flow(tmp_path / "chatty.py", body)
    chatty.write_text("import os\n" + chatty.read_text())
    result = cli("flows", "run", str(chatty), "--json", "--db", str(tmp_path / "h.db"))
    assert result.returncode == 0, result.stderr
    assert set(orjson.loads(result.stdout)) == {"runId", "state", "output"}
    assert "hello from the body" in result.stderr and "and from its fd" in result.stderr


#: what ``--json``'s help promises, in every command's help (words as the help wraps them)
JSON_PROMISE = (
    "print the result as JSON on stdout, and nothing else there; an error as one JSON object on one "
    "line, the last on stderr (the lines before it are text: notices, logs)"
)


@BOTH
def test_the_json_help_says_stdout_is_json_and_an_error_is_the_last_line_of_stderr(prog: str) -> None:
    # the help said "errors too, as one object on stderr": stderr also holds a run's notices (a flow
    # file still importing after 5 s, a Ctrl-C's writes in flight), -v logs and a flow's own prints
    for argv in (["--help"], *([command, "--help"] for command in COMMANDS[prog])):
        shown = cli(prog, *argv).stdout
        assert JSON_PROMISE in " ".join(shown.split()), argv
        assert "errors too" not in shown


def test_with_json_a_runs_error_is_the_last_line_of_stderr_after_its_text(tmp_path: Path) -> None:
    body = 'print("the body talks")\nprint("and warns", file=sys.stderr)\nraise ValueError("no tea")'
    failing = write_flow(tmp_path / "fails.py", body)
    failing.write_text("import sys\n" + failing.read_text())
    result = cli("flows", "run", str(failing), "--json", "-v", "--db", str(tmp_path / "h.db"))
    assert (result.returncode, result.stdout) == (1, "")
    *text, last = result.stderr.splitlines()
    error = orjson.loads(last)
    assert error["code"] == "flow_failed" and "no tea" in error["message"]
    assert "the body talks" in text and "and warns" in text  # text, before it
    assert any("Traceback" in line for line in text)  # -v: the failure's traceback, before it
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(result.stderr)  # stderr as a whole is not JSON: its last line is


def _pure_json(result: subprocess.CompletedProcess[str], what: str) -> object:
    """The one JSON document a successful ``--json`` command printed: stdout holds nothing else."""
    assert result.returncode == 0, (what, result.stderr)
    try:
        return orjson.loads(result.stdout)
    except orjson.JSONDecodeError:
        raise AssertionError(f"{what} --json printed more than JSON on stdout: {result.stdout!r}") from None


def _first_line_then_stop(argv: list[str], what: str) -> object:
    """Start a server, parse the first stdout line as JSON, stop it with Ctrl-C: nothing else came."""
    proc = subprocess.Popen(
        [sys.executable, "-m", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, (what, proc.stderr.read() if proc.stderr else b"")
        announced = orjson.loads(first)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rest == b"", (what, rest)
    assert proc.returncode == 130, (what, proc.returncode)  # Ctrl-C, as every command exits on it
    return announced


@BOTH
def test_every_argument_of_every_command_has_help_that_gives_its_default(prog: str) -> None:
    """``PROG COMMAND --help`` says what each argument is, and, for an option with a default, what
    the default is (``--reason`` recorded a text its help never named)."""
    parser = (flows_parser if prog == "flows" else sail_parser)()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in commands.choices.items():
        for action in sub._actions:
            assert action.help, (name, action.option_strings or action.dest)
            if action.default not in (None, False, 0, argparse.SUPPRESS):
                assert "default" in action.help, (name, action.option_strings, action.default)


@BOTH
def test_the_commands_checked_here_are_every_command_the_help_lists(prog: str) -> None:
    listed = cli(prog, "--help").stdout
    assert re.findall(r"^    (\w+) ", listed, re.M) == COMMANDS[prog]  # every command takes --json


def test_every_flows_command_with_json_prints_only_json_on_stdout(tmp_path: Path) -> None:
    db = str(tmp_path / "store" / "history.db")
    gate = tmp_path / "let-it-finish"
    chatty = write_flow(
        tmp_path / "chatty.py",
        'print("the body talks on stdout")\n'
        'os.write(1, b"and on its descriptor\\n")\n'
        'await f.memory.learn({"text": "tea wants water just off the boil", "tags": ["kitchen"]})\n'
        f"if not os.path.exists({str(gate)!r}):\n"
        '    raise RuntimeError("not yet")\n'
        'return {"done": True}',
    )
    chatty.write_text("import os\n" + chatty.read_text())
    seen: dict[str, object] = {}

    failed = cli("flows", "run", str(chatty), "--json", "--db", db)
    assert (failed.returncode, failed.stdout) == (1, "")  # a failure: its one JSON object is on stderr
    run_id = orjson.loads(failed.stderr.splitlines()[-1])["runId"]  # after what the body printed
    gate.touch()
    resumed = cli("flows", "resume", run_id, "--json", "--db", db)
    seen["resume"] = _pure_json(resumed, "resume")
    assert "the body talks" in resumed.stderr
    seen["run"] = _pure_json(cli("flows", "run", str(chatty), "--json", "--db", db), "run")
    learned = _pure_json(
        cli("flows", "learn", "bread likes a warm room", "--scope", "kitchen", "--json", "--db", db), "learn"
    )
    seen["learn"] = learned
    key = learned["key"]  # type: ignore[index]
    for argv in (
        ["runs"],
        ["show", run_id],
        ["journal", run_id],
        ["recall"],
        ["why", "what does tea want"],
        ["update", key, "tea wants green tea"],
        ["history", key],
        ["forget", key],
        ["erase", key, "--yes"],
        ["sync"],
        ["check"],
        ["demo"],
    ):
        seen[argv[0]] = _pure_json(cli("flows", *argv, "--json", "--db", db), argv[0])
    seen["serve"] = _first_line_then_stop(["flows", "serve", "--json", "--port", "0", "--db", db], "serve")
    seen["mcp"] = _first_line_then_stop(
        ["flows", "mcp", "--json", "--http", "127.0.0.1:0", "--db", db], "mcp --http"
    )
    assert sorted(seen) == sorted(COMMANDS["flows"])
    assert seen["demo"] == seen["demo"] | {"ok": True, "kept": None, "try": []}
    assert str(seen["mcp"]["url"]).endswith("/mcp")  # type: ignore[index]


@pytest.mark.slow
def test_every_sail_command_with_json_prints_only_json_on_stdout(tmp_path: Path) -> None:
    from sail._node import find_anvil

    if find_anvil() is None and shutil.which("npm") is None:
        pytest.skip("anvil is not installed and npm is not on PATH, so it cannot be (npm ci installs it)")
    seen: dict[str, object] = {}
    rpc = cli(
        "sail",
        "init",
        "--home",
        str(tmp_path / "rpc"),
        "--rpc",
        "http://127.0.0.1:1",
        "--router",
        ROUTER,
        "--token-in",
        USDC,
        "--token-out",
        WETH,
        "--amount",
        "1",
        "--interval",
        "60",
        "--min-balance",
        "1",
        "--json",
    )
    assert _pure_json(rpc, "init --rpc") == {
        "config": str(tmp_path / "rpc" / ".sail" / "config.toml"),
        "chain": None,
        "agentKey": None,
    }
    seen["init"] = _pure_json(
        cli("sail", "init", "--embedded", "--home", str(tmp_path / "embedded"), "--json"), "init --embedded"
    )
    home = tmp_path / "demo"
    demo = cli("sail", "demo", "--home", str(home), "--json")  # slow: the chain, six ticks
    seen["demo"] = _pure_json(demo, "demo")
    assert "== the ledger" in demo.stderr  # the story went to stderr
    key = str(seen["init"]["agentKey"])  # type: ignore[index]
    seen["tick"] = _pure_json(
        cli("sail", "tick", "--home", str(home), "--json", SAIL_PRIVATE_KEY=key), "tick"
    )
    for command in ("ledger", "why", "status", "journal"):
        seen[command] = _pure_json(cli("sail", command, "--home", str(home), "--json"), command)
    assert sorted(seen) == sorted(COMMANDS["sail"])
    assert seen["demo"]["ok"] is True  # type: ignore[index]
    assert seen["demo"]["ledger"] == seen["ledger"][:6]  # type: ignore[index]


def test_ctrl_c_stops_flows_run_with_130_and_the_run_reads_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    slow = write_flow(tmp_path / "slow.py", 'print("ready", flush=True)\nawait asyncio.sleep(600)')
    with subprocess.Popen(
        [sys.executable, "-m", "flows", "run", str(slow), "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        read_until(proc, b"ready", stream=proc.stdout.fileno())
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        err = proc.stderr.read().decode()
    assert err.startswith("flows: error[flow_interrupted]: the run was interrupted (Ctrl-C)"), err
    assert len(err.splitlines()) == 1
    runs = orjson.loads(cli("flows", "runs", "--json", "--db", str(db)).stdout)
    assert [r["state"] for r in runs] == ["interrupted"]


def test_ctrl_c_stops_a_sail_tick_waiting_for_its_chain_with_130(tmp_path: Path) -> None:
    save_config(tmp_path, _config(EMBEDDED))
    lock_path = tmp_path / ".sail" / "chain" / "anvil.lock"
    lock_path.parent.mkdir(parents=True)
    with (
        portalocker.Lock(str(lock_path), mode="a", timeout=5),  # another process "holds the chain"
        subprocess.Popen(
            [sys.executable, "-m", "sail", "-v", "tick", "--home", str(tmp_path), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(SAIL_PRIVATE_KEY=AGENT_KEY),
        ) as proc,
    ):
        assert proc.stdout is not None and proc.stderr is not None
        seen = read_until(proc, b"taking the embedded chain's lock")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        rest = seen + proc.stderr.read()
        assert proc.stdout.read() == b""
    last = orjson.loads(rest.decode().splitlines()[-1])
    assert last["code"] == "interrupted"


def test_sail_without_the_chain_extra_says_which_extra_to_install(tmp_path: Path) -> None:
    save_config(tmp_path, _config("http://127.0.0.1:1"))
    code = (
        "import sys\n"
        "sys.modules['web3'] = None  # as if the chain extra were not installed\n"
        "from sail._cli import main\n"
        "sys.exit(main(sys.argv[1:]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "tick", "--home", str(tmp_path)],
        capture_output=True,
        text=True,
        env=_env(SAIL_PRIVATE_KEY=AGENT_KEY),
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        "sail: error[sail_chain_missing]: this sail command needs the chain extra (web3 is not installed): "
        "pip install 'flows-memory[chain]'\n"
    )


def _on_a_terminal(*argv: str) -> tuple[int, str]:
    """Run a command whose stderr is a terminal (stdout piped); return its status and what it showed."""
    controller, terminal = pty.openpty()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=terminal, env=_env()) as proc:
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal closed: the command is done with it
                break
            if not chunk:
                break
            shown += chunk
        os.close(controller)
        assert proc.stdout is not None
        proc.stdout.read()
        return proc.wait(timeout=60), shown.decode(errors="replace")


def test_progress_shows_on_a_terminal_only_and_never_with_json(store: Path) -> None:
    status, shown = _on_a_terminal(sys.executable, "-m", "flows", "sync", "--db", str(store))
    assert status == 0 and "sync: files ingested: 2/2" in shown
    status, shown = _on_a_terminal(sys.executable, "-m", "flows", "sync", "--json", "--db", str(store))
    assert (status, shown) == (0, "")
    piped = cli("flows", "sync", "--db", str(store))
    assert piped.returncode == 0 and piped.stderr == ""


def test_text_from_a_terminal_says_how_to_end_it(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    controller, terminal = pty.openpty()
    argv = [sys.executable, "-m", "flows", "learn", "-", "--scope", "desk", "--db", str(db), "--json"]
    with subprocess.Popen(argv, stdin=terminal, stdout=subprocess.PIPE, stderr=terminal, env=_env()) as proc:
        os.close(terminal)
        shown = b""
        deadline = time.monotonic() + 30
        while b"Ctrl-D" not in shown and time.monotonic() < deadline:  # the hint comes before the read
            if select.select([controller], [], [], 0.5)[0]:
                shown += os.read(controller, 4096)
        os.write(controller, b"typed at a terminal\n\x04")  # a line, then end of input
        assert proc.stdout is not None
        out = proc.stdout.read()
        assert proc.wait(timeout=60) == 0
        os.close(controller)
    assert "reading the text from standard input; end it with Ctrl-D" in shown.decode()
    learned = orjson.loads(out)
    (row,) = orjson.loads(cli("flows", "recall", "--json", "--db", str(db)).stdout)
    assert (row["key"], row["text"]) == (learned["key"], "typed at a terminal")


def test_verbose_and_flows_log_turn_the_library_logs_on(tmp_path: Path) -> None:
    flow = write_flow(tmp_path / "quiet.py", 'await f.memory.learn({"text": "logged"})')
    quiet = cli("flows", "run", str(flow), "--db", str(tmp_path / "a.db"))
    assert quiet.returncode == 0 and quiet.stderr == ""
    for argv, env in ((["-v"], {}), ([], {"FLOWS_LOG": "info"})):
        loud = cli("flows", *argv, "run", str(flow), "--db", str(tmp_path / "b.db"), **env)
        assert loud.returncode == 0
        assert "flows._runtime: INFO: root run " in loud.stderr and ": done" in loud.stderr


@BOTH
def test_shell_completion_offers_the_commands(prog: str, tmp_path: Path) -> None:
    out = tmp_path / "completions"
    line = f"{prog} s"
    subprocess.run(
        [sys.executable, "-m", prog],
        env=_env(
            _ARGCOMPLETE="1",
            COMP_LINE=line,
            COMP_POINT=str(len(line)),
            _ARGCOMPLETE_STDOUT_FILENAME=str(out),
        ),
        capture_output=True,
        timeout=60,
        check=False,
    )
    offered = {word.strip() for word in out.read_text().split("\x0b")}
    expected = {"sync"} if prog == "flows" else {"status"}
    assert expected <= offered and "runs" not in offered


def test_times_for_people_show_their_zone(store: Path) -> None:
    table = cli("flows", "runs", "--db", str(store), TZ="UTC").stdout.splitlines()
    assert table[1].split()[4:6][1].endswith("+00:00")
    shifted = cli("flows", "runs", "--db", str(store), TZ="Asia/Kolkata").stdout.splitlines()
    assert shifted[1].split()[4:6][1].endswith("+05:30")


def test_flows_demo_keeps_its_store_and_prints_commands_that_run(tmp_path: Path) -> None:
    kept = tmp_path / "kept demo"  # a space, so the printed commands must quote it
    demo = cli("flows", "demo", "--keep", str(kept))
    assert demo.returncode == 0, demo.stdout + demo.stderr
    tail = demo.stdout.split(f"the store is kept in {kept}; try:\n", 1)[1]
    commands = [shlex.split(line) for line in tail.splitlines() if line.strip()]
    assert [c[1] for c in commands] == ["runs", "why", "recall", "check"]
    assert {c[0] for c in commands} == {"flows"}
    for command in commands:
        result = cli(*command)
        assert result.returncode == 0, (command, result.stderr)
        assert result.stdout.strip()
    assert (kept / "history.db").exists()


@pytest.mark.parametrize("command", ["show", "journal"])
def test_an_error_line_shows_the_run_id_it_names_escaped_on_one_line(store: Path, command: str) -> None:
    run_id = "abc\x1b[31mRED\nSECONDLINE"
    result = cli("flows", command, run_id, "--db", str(store))
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and "\x1b" not in result.stderr, result.stderr
    # named once, escaped, as what is invalid: it names no root run, so no "(root run …)" follows
    assert "invalid run id 'abc\\x1b[31mRED\\nSECONDLINE'" in result.stderr
    assert "(root run" not in result.stderr


def test_runs_filtered_to_nothing_says_the_filter_matched_nothing(store: Path) -> None:
    for args in (("--flow", "no-such-flow"), ("--state", "running")):
        result = cli("flows", "runs", *args, "--db", str(store))
        assert result.returncode == 0
        assert result.stdout.startswith("no root runs match the filter"), (args, result.stdout)


@pytest.mark.parametrize("stdout", ["closed", "full"])
def test_a_learn_whose_stdout_fails_says_so_with_a_code_and_its_finding_is_on_record(
    store: Path, stdout: str
) -> None:
    """stdout closed (``>&-``) or a full device (``>/dev/full``): the learn commits all the same,
    and the one line on stderr says the output was lost, not that the learn failed (no
    ``internal_error``)."""
    argv = [sys.executable, "-m", "flows", "--db", str(store), "learn", f"learned with stdout {stdout}"]
    argv += ["--scope", "s"]
    if stdout == "closed":
        proc = subprocess.run(
            ["bash", "-c", 'exec "$@" >&-', "bash", *argv], stderr=subprocess.PIPE, env=_env(), check=False
        )
    else:
        with open("/dev/full", "w") as full:
            proc = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, env=_env(), check=False)
    assert proc.returncode == 1
    assert proc.stderr.decode().startswith("flows: error[output_unwritable]: cannot write to stdout")
    with memory.MemoryStore(store) as mem:
        assert f"learned with stdout {stdout}" in [e.text for e in mem.recall(limit=None)]


@pytest.mark.parametrize("stderr", ["closed", "full"])
def test_a_stderr_that_cannot_be_written_loses_the_diagnostic_never_the_exit_status(
    tmp_path: Path, stderr: str
) -> None:
    """stderr closed (``2>&-``) or a full device (``2>/dev/full``): the one diagnostic line cannot be
    written, and the command still ends with its own status (2 usage, 1 failed, 0 done), never the 1
    of an exception raised while writing it (or the interpreter's 120 for a flush at exit)."""
    missing = str(tmp_path / "nowhere" / "history.db")
    cases = [
        (["flows"], 2),  # no command: the help and the line on stderr
        (["flows", "recall", "--limit", "0"], 2),
        (["flows", "--json", "recall", "--limit", "0"], 2),
        (["flows", "recall", "--db", missing], 1),
        (["sail", "ledger", "--home", str(tmp_path / "nowhere")], 1),
        (["flows", "--version"], 0),
    ]
    for args, status in cases:
        argv = [sys.executable, "-m", *args]
        if stderr == "closed":
            closing = ["bash", "-c", 'exec "$@" 2>&-', "bash", *argv]
            proc = subprocess.run(closing, stdout=subprocess.PIPE, env=_env(), check=False)
        else:
            with open("/dev/full", "w") as full:
                proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=full, env=_env(), check=False)
        assert proc.returncode == status, (args, proc.returncode)
        assert proc.stdout == (b"" if status else proc.stdout), (args, proc.stdout)


NOT_UTF8 = "\udcff\udcfe"
"""The bytes ``ff fe`` of a name that is not UTF-8, as Python's argv and ``os`` functions give them."""


def test_a_name_not_utf8_in_json_output_or_a_json_error_is_escaped_never_a_traceback(tmp_path: Path) -> None:
    """A path of bytes that are not UTF-8 (legal on Linux) reaches Python as lone surrogates, which
    orjson refuses: a ``--json`` error naming it was a traceback, and ``--json`` output naming it an
    ``internal_error``. Both are one JSON document, the bytes written as ``\\udcXX`` escapes that
    decode back to the same path."""
    missing = tmp_path / f"nothing{NOT_UTF8}.py"
    result = cli("flows", "--json", "run", str(missing))
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    error = json.loads(result.stderr)
    assert error["code"] == "flow_load_failed"
    assert os.fsencode(error["path"]) == os.fsencode(missing)

    home = tmp_path / f"agent{NOT_UTF8}"
    home.mkdir()
    save_config(home, _config("http://127.0.0.1:1"))
    shown = cli("sail", "--json", "--home", str(home), "journal")
    assert shown.returncode == 0, shown.stderr
    assert os.fsencode(json.loads(shown.stdout)["ledger"]).startswith(os.fsencode(home))
    absent = cli("sail", "--json", "--home", str(tmp_path / f"absent{NOT_UTF8}"), "status")
    assert absent.returncode == 1 and "Traceback" not in absent.stderr, absent.stderr
    assert json.loads(absent.stderr)["code"] == "sail_config_missing"


def test_a_store_path_not_utf8_is_refused_with_a_code_never_an_internal_error(tmp_path: Path) -> None:
    """A history DB or journal path of bytes that are not UTF-8 was an ``internal_error`` (the store
    writes its paths as UTF-8: SQLite's URIs, its recovery memo): now refused before anything is
    made, as a bad argument (``--db``, ``$FLOWS_DB``) or a journal location that cannot be used."""
    folder = tmp_path / f"store{NOT_UTF8}"
    folder.mkdir()
    db, good = str(folder / "history.db"), str(tmp_path / "good" / "history.db")
    learn, bad_journal = ["learn", "x", "--scope", "s"], "journal_location_invalid"
    for argv, env, code, status in (
        (["--db", db, *learn], {}, "usage", 2),
        (["--db", db, "recall"], {}, "usage", 2),
        (["recall"], {"FLOWS_DB": db}, "memory_argument_invalid", 2),
        (["--db", good, "--journal", str(folder), *learn], {}, bad_journal, 1),
        (["--db", good, *learn], {"FLOWS_JOURNAL": str(folder)}, bad_journal, 1),
    ):
        result = cli("flows", "--json", *argv, **env)
        assert result.returncode == status, (argv, result.stderr)
        assert json.loads(result.stderr)["code"] == code, (argv, result.stderr)
    assert os.listdir(folder) == [] and not (tmp_path / "good").exists()
    with pytest.raises(memory.ArgumentInvalid):
        memory.MemoryStore(db)


def test_a_name_not_utf8_in_human_output_is_shown_as_its_bytes_on_a_strict_utf8_stdout(
    tmp_path: Path,
) -> None:
    """A terminal's UTF-8 locale gives Python a strict stdout, which cannot write a lone surrogate:
    ``sail status`` of a home whose name is not UTF-8 ran, then ended in ``internal_error``. Human
    output writes such a byte as an escape (``\\xff``), as it does a control character."""
    home = tmp_path / f"agent{NOT_UTF8}"
    home.mkdir()
    save_config(home, _config("http://127.0.0.1:1"))
    result = cli("sail", "--home", str(home), "status", PYTHONIOENCODING="utf-8:strict")
    assert result.returncode == 0, result.stderr
    assert f"{tmp_path}/agent\\xff\\xfe/.sail/memory/ledger.jsonl" in result.stdout
    assert shown("a\udcff\ud800\x1b") == "a\\xff\\ud800\\x1b"


def test_check_sweep_age_that_is_not_an_age_is_a_usage_error(store: Path) -> None:
    """``--sweep-age nan`` made no stage stale (a crash's leftover checked clean, exit 0), and a
    negative age made every stage stale, a live writer's included (``--repair`` sweeps them)."""
    run = next((store.parent / "flows-journal" / "runs").iterdir())
    stage = run / ".stage-left-by-a-crash"
    stage.write_bytes(b"")
    os.utime(stage, (time.time() - 86_400,) * 2)
    found = cli("flows", "--json", "check", "--db", str(store), "--sweep-age", "3600")
    assert found.returncode == 1 and "stage_stale" in found.stdout, found.stderr
    for bad in ("nan", "-5", "inf", "1e400", "-0.5", "ten"):
        result = cli("flows", "--json", "check", "--repair", "--db", str(store), f"--sweep-age={bad}")
        assert result.returncode == 2, (bad, result.stdout, result.stderr)
        assert json.loads(result.stderr)["code"] == "usage" and result.stdout == ""
    assert stage.exists()


def test_every_flows_command_help_ends_with_examples_that_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flows COMMAND --help`` ends with an "examples:" list; each example is a whole command line
    the real parser takes, as that command (shell redirections aside; a file an ``@FILE`` names is
    made, holding ``{}``; ``./agent`` is an agent's home); a ``serve`` example's address and token
    are ones serve accepts."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agent" / ".sail").mkdir(parents=True)
    parser = flows_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in commands.choices.items():
        text = sub.format_help()
        assert "\nexamples:\n" in text, name
        examples = [line.strip() for line in text.split("\nexamples:\n", 1)[1].splitlines() if line.strip()]
        assert examples, name
        for example in examples:
            argv = shlex.split(example.split(" < ", 1)[0])
            assert argv[:2] == ["flows", name], example
            for arg in argv:
                if arg.startswith("@"):
                    Path(arg[1:]).write_text("{}")
            try:
                args = flows_parser().parse_args(argv[1:])
            except Exception as exc:  # a UsageError, or a type's refusal
                raise AssertionError(f"{example!r} does not parse: {exc}") from exc
            assert args.command == name, example
            if name == "serve":  # an example serves as printed: its address and token pass serve's rule
                check_address(args.host, args.token)


@pytest.mark.parametrize("spelled", ["--json", "--jso", "--js"])
def test_a_shortened_json_flag_reports_failures_as_json_too(tmp_path: Path, spelled: str) -> None:
    """argparse takes ``--js`` for ``--json``: the output was JSON, and the failure a text line."""
    db = str(tmp_path / "h.db")
    assert cli("flows", "learn", "x", "--scope", "s", "--db", db).returncode == 0
    for argv, status, code in (
        (["show", "nosuch", spelled], 1, "journal_run_not_found"),
        (["recall", "--limit", "0", spelled], 2, "usage"),
    ):
        result = cli("flows", *argv, "--db", db)
        assert (result.returncode, result.stdout) == (status, ""), result.stderr
        assert orjson.loads(result.stderr)["code"] == code, (argv, result.stderr)
