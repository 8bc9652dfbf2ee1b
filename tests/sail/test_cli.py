"""The ``sail`` command line: listing commands, --json, diagnostics and exit statuses."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import sail
from memory.ledger import Acted, ActivityLog, Amount, Ledger, Outcome, Skipped, cadence_reason
from sail._cli import main
from sail._config import SailConfig, load_config, save_config
from sail._status import span, when
from tests.conftest import run_python
from tests.sail.http_servers import serving

USDC, WETH, ROUTER = "0x" + "11" * 20, "0x" + "22" * 20, "0x" + "33" * 20


def confirmed(ts: int, n: int) -> Acted:
    return Acted(
        ts=ts,
        block=n,
        chain_id=31337,
        action="swap",
        permission="p",
        outcome=Outcome.CONFIRMED,
        tx_hash=f"0x{n:064x}",
        gas_used=1,
        token_in=USDC,
        token_out=WETH,
        amount_in=Amount.of(25_000_000, 6, "USDC"),
        amount_out=Amount.of(10**16, 18, "WETH"),
        balances_after={USDC: 1, WETH: 2},
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An agent home with a config and a small ledger: a swap, then skips."""
    save_config(
        tmp_path,
        SailConfig(
            rpc_url="http://127.0.0.1:1",
            router=ROUTER,
            token_in=USDC,
            token_out=WETH,
            amount_in=25_000_000,
            interval_s=3600,
            min_balance=25_000_000,
        ),
    )
    with Ledger(tmp_path / ".sail").writer() as w:
        w.append(confirmed(1000, 7))
        w.append(Skipped(ts=1060, block=8, chain_id=31337, reason=cadence_reason(60, 3600)))
        w.append(Skipped(ts=9000, block=9, chain_id=31337, reason="balance 1 < min 25000000"))
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_ledger_json_lists_every_entry_with_the_files_keys(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "ledger", "--home", str(home), "--json")
    lines = Ledger(home / ".sail").path.read_text().splitlines()
    assert (status, json.loads(out)) == (0, [json.loads(line) for line in lines])


def test_ledger_filters_by_kind_and_since(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "ledger", "--home", str(home), "--json", "--kind", "acted")
    assert [e["txHash"] for e in json.loads(out)] == [f"0x{7:064x}"]
    for since in ("2000000", "1970-01-01T00:33:20+00:00"):  # epoch ms, or ISO 8601: 2000 s in
        _, out, _ = run(capsys, "ledger", "--home", str(home), "--json", "--kind=skipped", "--since", since)
        assert [e["reason"] for e in json.loads(out)] == ["balance 1 < min 25000000"]
    _, out, _ = run(capsys, "ledger", "--home", str(home))
    assert "confirmed  swap 25.0 USDC -> 0.01 WETH" in out


def test_why_lists_recent_skips_newest_first(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "why", "--home", str(home), "--json")
    assert status == 0
    assert [s["reason"] for s in json.loads(out)] == [
        "balance 1 < min 25000000",
        "cadence: last acted 60s ago, interval 3600s",
    ]
    _, out, _ = run(capsys, "why", "--home", str(home), "--limit", "1")
    assert out.strip().endswith("balance 1 < min 25000000") and out.count("\n") == 1


def test_status_remembers_the_last_trade_and_the_next_eligible_time(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "status", "--home", str(home), "--json")
    assert status == 0
    # the newest entry is a balance skip: that, not the clock, holds the next trade
    assert json.loads(out) | {"ledger": ""} == {
        "lastConfirmed": {
            "tsMs": 1_000_000, "block": 7, "txHash": f"0x{7:064x}", "signedMs": None,
            "claim": True,  # written by hand here: no activity line backs it
        },
        "intervalS": 3600,
        "nextEligibleMs": None,
        "blockedBy": {"kind": "balance", "reason": "balance 1 < min 25000000", "sinceMs": 9_000_000},
        "openDispatches": [],
        "dispatches": [],
        "intervalProblem": None,
        "lastTick": None,
        "failedTicksSinceSuccess": 0,
        "failedTicksCountedAll": True,
        "tokens": {},
        "ledger": "",
        "clockAheadS": None,
        "chainReorged": None,
    }
    _, out, _ = run(capsys, "status", "--home", str(home))
    assert "next eligible" not in out and "eligible at" not in out
    assert f"next trade: blocked: balance 1 < min 25000000 (as of the tick at {when(9000)};" in out
    with Ledger(home / ".sail").writer() as w:
        w.append(Skipped(ts=9060, block=10, chain_id=31337, reason=cadence_reason(60, 3600)))
    _, out, _ = run(capsys, "status", "--home", str(home), "--json")
    assert (json.loads(out)["nextEligibleMs"], json.loads(out)["blockedBy"]) == (4_600_000, None)


def test_status_says_when_the_chains_clock_runs_ahead_of_this_machines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Acts stamped by a chain whose clock runs ahead (as after ``sail demo``) are in this machine's
    future: status says by how much, instead of leaving "eligible at" a time that reads wrong."""
    save_config(
        tmp_path,
        SailConfig(
            rpc_url="http://127.0.0.1:1", router=ROUTER, token_in=USDC, token_out=WETH,
            amount_in=25_000_000, interval_s=3600, min_balance=25_000_000,
        ),
    )  # fmt: skip
    before = int(time.time())
    chain_now = before + 7380  # the demo moves the chain two hours and a bit forward
    with Ledger(tmp_path / ".sail").writer() as w:
        w.append(confirmed(chain_now - 3660, 7))
        w.append(Skipped(ts=chain_now, block=9, chain_id=31337, reason=cadence_reason(60, 3600)))
    status, out, _ = run(capsys, "status", "--home", str(tmp_path), "--json")
    assert status == 0
    ahead = json.loads(out)["clockAheadS"]
    between = int(time.time())
    assert chain_now - between <= ahead <= chain_now - before  # read by the clock while it ran
    _, out, _ = run(capsys, "status", "--home", str(tmp_path))
    after = int(time.time())
    (line,) = [line for line in out.splitlines() if line.startswith("clock: ")]
    said = re.match(r"clock: the chain's clock is .* \((\d+)s\) ahead", line)
    assert said is not None, line
    ahead = int(said.group(1))  # the second command's lead: as many seconds less as passed since
    assert chain_now - after <= ahead <= chain_now - between
    assert line.startswith(f"clock: the chain's clock is {span(ahead)} ({ahead}s) ahead of this machine's")
    assert "--now" in line
    # a chain clock a few seconds off this machine's is normal: no such line
    _, out, _ = run(capsys, "status", "--home", str(home_with_past_times(tmp_path / "past")), "--json")
    assert json.loads(out)["clockAheadS"] is None


def home_with_past_times(where: Path) -> Path:
    save_config(
        where,
        SailConfig(
            rpc_url="http://127.0.0.1:1", router=ROUTER, token_in=USDC, token_out=WETH,
            amount_in=25_000_000, interval_s=3600, min_balance=25_000_000,
        ),
    )  # fmt: skip
    with Ledger(where / ".sail").writer() as w:
        w.append(confirmed(int(time.time()) + 30, 7))  # 30 s ahead, within the slack: clocks a little off
    return where


def test_init_writes_a_config_that_reads_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys, "init", "--home", str(tmp_path), "--rpc", "http://127.0.0.1:8545", "--router", ROUTER,
        "--token-in", USDC, "--token-out", WETH, "--amount", "25000000", "--interval", "86400",
        "--min-balance", "30000000", "--permission", "0xSwapPermission",
    )  # fmt: skip
    assert status == 0 and "config.toml" in out
    config = load_config(tmp_path)
    assert (config.amount_in, config.interval_s, config.min_balance, config.permission) == (
        25_000_000,
        86400,
        30_000_000,
        "0xSwapPermission",
    )
    assert oct((tmp_path / ".sail" / "config.toml").stat().st_mode & 0o777) == "0o600"


def test_a_missing_config_is_a_coded_error_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(capsys, "status", "--home", str(tmp_path))
    assert (status, out) == (1, "")
    config = tmp_path / ".sail" / "config.toml"
    assert err == f"sail: error[sail_config_missing]: no agent config at {config}; run `sail init` first\n"


@pytest.mark.parametrize("command", ["ledger", "why", "status", "journal", "tick"])
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_mistyped_home_is_config_missing_for_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, json_flag: list[str]
) -> None:
    typo = tmp_path / "TYPO"
    status, out, err = run(capsys, command, "--home", str(typo), *json_flag)
    assert status == 1
    config = typo / ".sail" / "config.toml"
    if json_flag:
        told = json.loads(err)
        assert told["code"] == "sail_config_missing" and str(typo) in told["message"]
        assert out == ""
    else:
        assert out == ""
        assert err.startswith(f"sail: error[sail_config_missing]: no agent home at {typo} ")
        assert str(config) in err
    assert not typo.exists()  # nothing was created there


@pytest.mark.parametrize(
    "command", [["init", "--embedded"], ["ledger"], ["why"], ["status"], ["journal"], ["tick"], ["demo"]]
)
@pytest.mark.parametrize("where", ["a file", "below a file", "a name too long"])
def test_a_home_no_command_can_use_is_config_invalid_with_nothing_made(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    where: str,
) -> None:
    monkeypatch.setenv("SAIL_PRIVATE_KEY", "0x" + "a" * 64)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    homes = {"a file": a_file, "below a file": a_file / "agent", "a name too long": tmp_path / ("x" * 300)}
    home = homes[where]
    status, out, err = run(capsys, *command, "--home", str(home))
    assert (status, out) == (1, "")
    assert err.startswith("sail: error[sail_config_invalid]: the agent home "), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"] and a_file.read_text() == "not a folder"


@pytest.mark.parametrize("command", ["ledger", "why", "status", "journal"])
def test_a_home_with_a_ledger_but_no_config_is_config_missing(
    home: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    (home / ".sail" / "config.toml").unlink()
    status, out, err = run(capsys, command, "--home", str(home))
    assert (status, out) == (1, "")
    assert err.startswith("sail: error[sail_config_missing]: no agent config at ")


def test_a_bad_config_key_is_named(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = home / ".sail" / "config.toml"
    path.write_text(path.read_text() + 'colour = "blue"\n')
    status, _, err = run(capsys, "status", "--home", str(home))
    assert status == 1 and err.startswith("sail: error[sail_config_invalid]:") and "'colour'" in err


@pytest.mark.parametrize("key", ["interval_s", "gas", "confirmations"])
def test_a_config_number_of_more_digits_than_python_reads_is_config_invalid_not_a_crash(
    home: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    """tomllib reads a TOML integer with int(), which refuses one past 4,300 digits with a bare
    ValueError: every command failed as internal_error."""
    path = home / ".sail" / "config.toml"
    kept = [x for x in path.read_text().splitlines() if not x.startswith(f"{key} =")]
    path.write_text("\n".join([*kept, f"{key} = {'9' * 5000}"]) + "\n")
    for command in ("status", "ledger", "why", "tick"):
        status, out, err = run(capsys, command, "--home", str(home))
        assert (status, out) == (1, ""), (command, err)
        assert err.startswith("sail: error[sail_config_invalid]:") and str(path) in err
        assert err.count("\n") == 1 and "9" * 100 not in err


def test_init_keeps_any_text_it_accepts_readable_by_every_later_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newline, a quote, a backslash, DEL or another control character in a text option was
    written raw into the TOML: `sail init` said it wrote the config, and every command after it
    failed to read it."""
    permission = 'line one\nline "two" \\ \x7f\x01\tend'
    status, _, err = run(
        capsys, "init", "--home", str(tmp_path), "--rpc", "http://127.0.0.1:8545", "--router", ROUTER,
        "--token-in", USDC, "--token-out", WETH, "--amount", "25000000", "--interval", "86400",
        "--min-balance", "30000000", "--permission", permission, "--key-env", "KEY\nNAME",
    )  # fmt: skip
    assert (status, err) == (0, "")
    config = load_config(tmp_path)
    assert (config.permission, config.key_env) == (permission, "KEY\nNAME")
    assert run(capsys, "status", "--home", str(tmp_path))[0] == 0


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("permission = 5", "permission"),
        ('permission = ""', "permission"),
        ("permission = [1]", "permission"),
        ("keystore = 5", "keystore"),
        ('keystore = ""', "keystore"),
        ("key_env = 5", "key_env"),
        ('key_env = ""', "key_env"),
    ],
)
def test_an_ill_typed_or_empty_text_key_is_config_invalid_for_every_command(
    home: Path, capsys: pytest.CaptureFixture[str], line: str, key: str
) -> None:
    """`keystore = 5` was an internal_error in `sail tick`; an empty or non-text `permission` was
    accepted, and an empty one was sent with a swap the ledger could then never record."""
    path = home / ".sail" / "config.toml"
    kept = [x for x in path.read_text().splitlines() if not x.startswith(f"{key} =")]
    path.write_text("\n".join([*kept, line]) + "\n")
    for command in ("status", "tick"):
        status, out, err = run(capsys, command, "--home", str(home))
        assert (status, out) == (1, "")
        assert err.startswith("sail: error[sail_config_invalid]:") and repr(key) in err


def test_init_with_text_that_is_not_utf8_is_config_invalid_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A byte that is not UTF-8 in an argument (a surrogate in Python's argv) was an internal_error."""
    status, out, err = run(
        capsys, "init", "--home", str(tmp_path), "--rpc", "http://127.0.0.1:8545", "--router", ROUTER,
        "--token-in", USDC, "--token-out", WETH, "--amount", "25000000", "--interval", "86400",
        "--min-balance", "30000000", "--permission", "perm\udcff",
    )  # fmt: skip
    assert (status, out) == (2, "")  # a bad value on the command line: usage
    assert err.startswith("sail: error[usage]: init: config key 'permission' must be UTF-8 text")
    assert not (tmp_path / ".sail" / "config.toml").exists()


@pytest.mark.parametrize(
    "bad",
    [
        ("--amount", "0"),
        ("--amount", "-5"),
        ("--interval", "-1"),
        ("--min-balance", str(2**256)),
        ("--slippage-bps", "10000"),
        ("--permission", ""),
        ("--key-env", ""),
    ],
)
@pytest.mark.parametrize("where", ["rpc", "embedded"])
def test_init_with_a_bad_value_is_a_usage_error_exiting_2_before_anything_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: tuple[str, str], where: str
) -> None:
    """A value the config refuses, given to `sail init`, is the command line's fault: `usage`, exit 2
    (it was `sail_config_invalid`, exit 1), and nothing is written or deployed (`--embedded --amount 0`
    took 0 for "the default" and deployed a market for 25 USDC swaps)."""
    market = ["--router", ROUTER, "--token-in", USDC, "--token-out", WETH]
    values = {"--amount": "25000000", "--interval": "86400", "--min-balance": "30000000"}
    values[bad[0]] = bad[1]
    args = [a for pair in values.items() for a in pair] + ([] if bad[0] in values else list(bad))
    chosen = ["--rpc", "http://127.0.0.1:9", *market] if where == "rpc" else ["--embedded"]
    status, out, err = run(capsys, "init", "--home", str(tmp_path), *chosen, *args)
    assert (status, out) == (2, "")
    assert err.startswith("sail: error[usage]: init: ") and err.endswith("see `sail init --help`\n")
    assert not (tmp_path / ".sail").exists()


def test_tick_without_a_key_fails_with_its_code(home: Path) -> None:
    code = "import sys; from sail._cli import main; sys.exit(main(sys.argv[1:]))"
    out = run_python(code, "tick", "--home", str(home), env={"SAIL_PRIVATE_KEY": ""})
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == (
        "sail: error[sail_key_unavailable]: no signing key: set $SAIL_PRIVATE_KEY to the agent's private "
        "key, or `keystore` in .sail/config.toml\n"
    )


def test_a_malformed_key_is_refused_without_echoing_it(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SAIL_PRIVATE_KEY", "0xdeadbeefsecret")
    status, out, err = run(capsys, "tick", "--home", str(home))
    assert status == 1 and err.startswith("sail: error[sail_key_unavailable]:")
    assert "deadbeefsecret" not in out + err


class _Unauthorized(http.server.BaseHTTPRequestHandler):
    """A node behind a gateway that refuses the key: 401 for every request."""

    def do_POST(self) -> None:
        self.send_response(401)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def unauthorized() -> Iterator[str]:
    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unauthorized)) as url:
        yield url


@pytest.mark.parametrize("node", ["refused", "unauthorized"])
def test_the_nodes_url_credentials_never_reach_a_message_a_log_or_the_ledger(
    tmp_path: Path, unauthorized: str, node: str
) -> None:
    # A hosted node's URL carries its API key (in the path or the query) or a password, and the
    # transport's errors quote the URL: none of it may be printed or written to the agent's files.
    base = "http://127.0.0.1:1" if node == "refused" else unauthorized
    key, token, password = "ZQXPATHKEY" + "7" * 22, "ZQXQUERYKEY", "ZQXPASSWORD"
    rpc = base.replace("http://", f"http://agent:{password}@") + f"/v3/{key}?apikey={token}"
    save_config(
        tmp_path,
        SailConfig(
            rpc_url=rpc, router=ROUTER, token_in=USDC, token_out=WETH,
            amount_in=25_000_000, interval_s=3600, min_balance=25_000_000,
        ),
    )
    code = "import sys; from sail._cli import main; sys.exit(main(sys.argv[1:]))"
    env = {"SAIL_PRIVATE_KEY": "0x" + "a" * 64}
    shown = ""
    for argv in (["tick"], ["tick", "--json"], ["tick", "-v"], ["status"], ["why"]):
        out = run_python(code, *argv, "--home", str(tmp_path), env=env)
        shown += out.stdout + out.stderr
    assert "error[chain_unavailable]" in shown and "failed [chain_unavailable]" in shown
    written = b"".join(
        p.read_bytes() for p in (tmp_path / ".sail").rglob("*") if p.is_file() and p.name != "config.toml"
    )
    for secret in (key, token, password):
        assert secret not in shown, shown
        assert secret.encode() not in written


def test_a_damaged_ledger_is_reported_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_config(
        tmp_path / "damaged",
        SailConfig(
            rpc_url="http://127.0.0.1:1", router=ROUTER, token_in=USDC, token_out=WETH,
            amount_in=25_000_000, interval_s=3600, min_balance=25_000_000,
        ),
    )  # fmt: skip
    ledger = Ledger(tmp_path / "damaged" / ".sail")
    with ledger.writer() as w:
        for ts in (1, 2):
            w.append(Skipped(ts=ts, block=1, chain_id=1, reason="r"))
    ledger.path.write_bytes(b"{oops}\n" + ledger.path.read_bytes())
    status, _, err = run(capsys, "ledger", "--home", str(tmp_path / "damaged"))
    assert status == 1 and err.startswith("sail: error[journal_corrupt]:") and "line 1" in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "--kind", "traded"]) == 2
    assert main(["demo"]) == 2
    assert capsys.readouterr().err.endswith(
        "sail: error[usage]: demo needs --home DIR (the agent's home it leaves behind)\n"
    )


def test_init_with_an_rpc_url_needs_the_market(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--home", str(tmp_path), "--rpc", "http://127.0.0.1:8545", "--router", ROUTER]) == 2
    assert (
        "init --rpc needs --token-in, --token-out, --amount, --interval, --min-balance"
        in capsys.readouterr().err
    )
    assert main(["init", "--home", str(tmp_path), "--rpc", "http://x", "--embedded"]) == 2
    assert not (tmp_path / ".sail").exists()


def test_every_command_has_help() -> None:
    for command in ("init", "tick", "ledger", "why", "status", "journal", "demo"):
        assert main([command, "--help"]) == 0


def test_python_m_sail_is_the_cli(home: Path) -> None:
    code = (
        "import runpy, sys; sys.argv = ['sail', 'why', '--home', sys.argv[1], '--json']; "
        "runpy.run_module('sail', run_name='__main__')"
    )
    out = run_python(code, str(home))
    assert out.returncode == 0 and len(json.loads(out.stdout)) == 2


def test_reading_commands_and_import_sail_do_not_import_web3(home: Path) -> None:
    code = (
        "import sys, sail; from sail._cli import main; main(['why', '--home', sys.argv[1]]); "
        "assert 'web3' not in sys.modules"
    )
    out = run_python(code, str(home))
    assert out.returncode == 0, out.stderr


def test_the_public_names_are_exactly_all() -> None:
    for name in sail.__all__:
        assert getattr(sail, name) is not None
    public = {n for n, v in vars(sail).items() if not n.startswith("_") and not isinstance(v, type(sail))}
    assert public - {"annotations", "Any"} <= set(sail.__all__)


def test_a_keystore_is_decrypted_with_its_password_env_and_a_wrong_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eth_account import Account

    from sail._runner import load_account

    key = "0x" + "00" * 31 + "02"
    keystore = tmp_path / "agent.json"
    keystore.write_text(json.dumps(Account.encrypt(key, "hunter2", kdf="pbkdf2", iterations=1000)))
    monkeypatch.setenv("SAIL_KEYSTORE_PASSWORD", "hunter2")
    assert load_account(keystore=keystore).address == Account.from_key(key).address
    monkeypatch.setenv("SAIL_KEYSTORE_PASSWORD", "wrong")
    with pytest.raises(sail.SailKeyUnavailable) as info:
        load_account(keystore=keystore)
    assert "wrong" not in str(info.value) and "hunter2" not in str(info.value)
    monkeypatch.delenv("SAIL_KEYSTORE_PASSWORD")
    with pytest.raises(sail.SailKeyUnavailable, match=r"needs its password in \$SAIL_KEYSTORE_PASSWORD"):
        load_account(keystore=keystore)


# -- what an owner sees ------------------------------------------------------------------------------


def unverified(ts: int, n: int) -> Acted:
    return Acted(
        ts=ts, block=None, chain_id=31337, action="swap", permission="p", outcome=Outcome.UNVERIFIED,
        tx_hash=f"0x{n:064x}", gas_used=None, token_in=USDC, token_out=WETH,
        amount_in=Amount.of(25_000_000, 6, "USDC"), amount_out=None, balances_after=None,
    )  # fmt: skip


def reverted(ts: int, n: int) -> Acted:
    return Acted(
        ts=ts, block=n, chain_id=31337, action="swap", permission="p", outcome=Outcome.REVERTED,
        tx_hash=f"0x{n:064x}", gas_used=60_000, token_in=USDC, token_out=WETH,
        amount_in=Amount.of(25_000_000, 6, "USDC"), amount_out=None, balances_after=None,
    )  # fmt: skip


@pytest.fixture
def zone_plus_2(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC+02:00 for the test (restored after)."""
    import time

    monkeypatch.setenv("TZ", "Etc/GMT-2")  # POSIX signs: this is two hours east of UTC
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_ledger_shows_a_trade_and_its_later_resolution_as_one_aligned_row_in_one_zone(
    home: Path, capsys: pytest.CaptureFixture[str], zone_plus_2: None
) -> None:
    from memory.ledger import DispatchIncluded, DispatchSettled

    # where the chain held the dispatch, as reconcile logs it just before the final line
    ActivityLog(home / ".sail").append(DispatchIncluded(9095, 31337, f"0x{21:064x}", 21, "0x" + "cd" * 32, 1))
    with Ledger(home / ".sail").writer() as w:
        w.append(unverified(9100, 21))
        w.append(Skipped(ts=9160, block=12, chain_id=31337, reason=cadence_reason(60, 3600)))
        w.append(confirmed(9090, 21))  # the same dispatch, resolved: mined at 9090
        w.append(reverted(12000, 22))
    ActivityLog(home / ".sail").append(
        DispatchSettled(12001, "dispatch_reverted", f"0x{22:064x}", 22, 1, "EXPIRED")
    )
    status, out, _ = run(capsys, "ledger", "--home", str(home))
    assert status == 0
    header, *rows = out.splitlines()
    assert header.split() == ["time", "(UTC+02:00)", "block", "outcome", "what", "tx", "note"]
    resolved = [r for r in rows if "0x0000…0015" in r]
    assert len(resolved) == 1  # one trade, one row
    assert (
        "confirmed" in resolved[0] and "unverified at 1970-01-01 04:31:40; resolved confirmed" in resolved[0]
    )
    assert resolved[0].startswith("1970-01-01 04:31:30")  # the block's time, in the header's zone
    (revert,) = [r for r in rows if "reverted" in r]
    assert "swap 25.0 USDC -> - (reverted: EXPIRED)" in revert
    for row in rows:  # aligned: every column starts where its header does
        assert row[header.index("outcome") - 1] == " " and row[header.index("outcome")] != " "
        if "0x" in row:
            assert row[header.index("tx") :].startswith("0x0000…00")
    assert f"0x{21:064x}" not in out  # short hashes in the table …
    _, out, _ = run(capsys, "ledger", "--home", str(home), "--json")
    assert f"0x{21:064x}" in out  # … full ones in JSON


def test_status_shows_the_last_tick_its_outcome_and_the_failures_since_the_last_success(
    home: Path, capsys: pytest.CaptureFixture[str], zone_plus_2: None
) -> None:
    from memory.ledger import TickFinished, TickStarted

    log = ActivityLog(home / ".sail")
    log.append(TickStarted(9000, 41))
    log.append(TickFinished(9001, 41, "skipped", reason="balance 1 < min 25000000"))
    for n, code in ((42, "chain_unavailable"), (43, "ledger_busy")):
        log.append(TickStarted(9100 + n, n))
        log.append(TickFinished(9100 + n, n, "failed", code=code, message=f"{code} happened"))
    _, out, _ = run(capsys, "status", "--home", str(home), "--json")
    doc = json.loads(out)
    assert doc["lastTick"] == {
        "tsMs": 9_143_000, "outcome": "failed", "code": "ledger_busy", "message": "ledger_busy happened",
        "reason": None, "txHash": None,
    }  # fmt: skip
    assert doc["failedTicksSinceSuccess"] == 2
    log.append(TickStarted(9300, 44))  # still running (or killed): the last tick says so
    _, out, _ = run(capsys, "status", "--home", str(home))
    assert "last tick: 1970-01-01 04:35:00+02:00, running (started and not finished" in out
    assert "failed ticks since the last successful one: 2" in out
    log.append(TickStarted(9400, 45))  # the one before never finished: it was killed
    _, out, _ = run(capsys, "status", "--home", str(home), "--json")
    assert (json.loads(out)["lastTick"]["tsMs"], json.loads(out)["failedTicksSinceSuccess"]) == (9_400_000, 3)


def test_every_failed_tick_is_recorded_with_its_code_even_before_the_chain_is_touched(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from memory.ledger import TickFinished

    def outcomes() -> list[tuple[str, str | None]]:
        return [
            (r.outcome, r.code) for r in ActivityLog(home / ".sail").read() if isinstance(r, TickFinished)
        ]

    monkeypatch.setenv("SAIL_PRIVATE_KEY", "")
    assert run(capsys, "tick", "--home", str(home), "--now", "9500")[0] == 1
    assert outcomes() == [("failed", "sail_key_unavailable")]
    config = home / ".sail" / "config.toml"
    good = config.read_text()
    config.write_text(good + 'colour = "blue"\n')
    assert run(capsys, "tick", "--home", str(home))[0] == 1
    config.write_text(good.replace("lock_timeout_s = 120.0", "lock_timeout_s = 0.2"))
    monkeypatch.setenv("SAIL_PRIVATE_KEY", "0x" + "00" * 31 + "02")
    ledger = Ledger(home / ".sail")
    with ledger.writer():  # another tick holds the ledger
        assert run(capsys, "tick", "--home", str(home))[0] == 1
    assert outcomes() == [
        ("failed", "sail_key_unavailable"),
        ("failed", "sail_config_invalid"),
        ("failed", "ledger_busy"),
    ]
    _, out, _ = run(capsys, "status", "--home", str(home))
    assert "failed [ledger_busy]" in out and "failed ticks since the last successful one: 3" in out


def test_a_revert_over_json_rpc_reads_as_its_reason_not_a_tuple_with_hex() -> None:
    from eth_abi.abi import encode
    from web3.exceptions import ContractLogicError

    from sail._chain import revert_text

    data = "0x08c379a0" + encode(["string"], ["NO_ROUTE"]).hex()
    exc = ContractLogicError("execution reverted: NO_ROUTE", data=data)
    assert "0x08c379a0" in str(exc)  # what the message used to carry
    assert revert_text(exc) == "execution reverted: NO_ROUTE"
    assert revert_text(ContractLogicError("execution reverted", data="0x")) == "execution reverted"


def test_a_recorded_message_with_a_newline_never_forges_a_line_of_human_output(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An activity log's tick message is data read back: one with a newline (another writer's, or a
    damaged file's) is shown on its line with the newline escaped, never as a line of its own."""
    from memory.ledger import TickFinished, TickStarted

    log = ActivityLog(home / ".sail")
    log.append(TickStarted(9100, 42))
    forged = "\nnext trade: eligible now\x1b[2J"
    log.append(TickFinished(9101, 42, "failed", code="chain_unavailable", message=f"node down{forged}"))
    status, out, _ = run(capsys, "status", "--home", str(home))
    assert status == 0
    assert "next trade: eligible now" not in out.splitlines(), out
    assert "failed [chain_unavailable] node down\\nnext trade: eligible now\\x1b[2J" in out, out
    _, out, _ = run(capsys, "status", "--home", str(home), "--json")
    assert json.loads(out)["lastTick"]["message"] == f"node down{forged}"  # JSON keeps it exact


def test_a_text_of_megabytes_in_an_older_or_crafted_home_is_shown_cut_with_its_digest(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A skip reason, a token's symbol and a failed tick's message of megabytes (a ledger and log
    written before the write bound, or crafted): `sail status`, `why` and `ledger`, text and JSON,
    printed each whole (a 3 MiB reason made 6 MiB of `sail why`). Each string, and each human line,
    is now at most ``MAX_SHOWN_CHARS``: its start, then its length and SHA-256."""
    from journal import LineLog
    from memory.ledger import MAX_SHOWN_CHARS, ActivityCodec, LedgerCodec, TickFinished, TokenMetadata

    sail_dir = home / ".sail"
    huge = "why-" + "h" * (3 << 20)
    symbol = "S" * (2 << 20)
    with LineLog(Ledger(sail_dir).path, LedgerCodec()).locked() as log:  # as before the bound: unchecked
        log.append(Skipped(ts=int(time.time()) - 5, block=3, chain_id=1, reason=huge))
    with LineLog(ActivityLog(sail_dir).path, ActivityCodec()).locked() as log:
        log.append(TokenMetadata(1, USDC, 6, symbol))
        log.append(TickFinished(int(time.time()) - 4, 7, "failed", code="internal_error", message=huge))
    digest = hashlib.sha256(huge.encode()).hexdigest()
    for command in ("status", "why", "ledger"):
        for as_json in (False, True):
            status, out, err = run(capsys, command, "--home", str(home), *(["--json"] if as_json else []))
            assert (status, err) == (0, ""), (command, as_json, err[:300])
            assert len(out) < 8 * MAX_SHOWN_CHARS, (command, as_json, len(out))
            if command != "status" or as_json:  # (the text status names the failed tick's code only)
                assert "characters in all, sha256 " in out, (command, as_json)
            if as_json and command != "status":
                assert f"… [cut: {len(huge)} characters in all, sha256 {digest}]" in out
    # and what the files hold is as written: nothing is cut but what is shown
    assert [e.reason for e in Ledger(sail_dir).entries() if isinstance(e, Skipped)][-1] == huge


def test_a_config_text_past_the_bound_or_a_huge_number_is_refused_naming_it_not_quoting_it(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A `permission` of 100,000 characters was accepted, and every swap then failed on the activity
    log's bound; a number of 4,000 digits was quoted whole in the refusal."""
    path = home / ".sail" / "config.toml"
    kept = "\n".join(x for x in path.read_text().splitlines() if not x.startswith("router ="))
    kept += f'\nrouter = "{ROUTER}"\n'
    for line, named in (
        (f'permission = "{"p" * 100_000}"', "'permission' holds 100000 characters"),
        (f'router = "{"0x" + "1" * 100_000}"', "'router' must be a 0x address"),
    ):
        path.write_text(kept.replace(f'router = "{ROUTER}"', "") + line + "\n" + (
            "" if line.startswith("router") else f'router = "{ROUTER}"\n'
        ))
        status, out, err = run(capsys, "status", "--home", str(home))
        assert (status, out) == (1, "") and named in err
        assert len(err) < 1000
    path.write_text(kept.replace('amount_in = "25000000"', 'amount_in = "' + "9" * 4000 + '"'))
    status, out, err = run(capsys, "status", "--home", str(home))
    assert (status, out) == (1, "") and "'amount_in' must be an integer" in err and len(err) < 1000


def _forged_home(home: Path) -> tuple[str, str]:
    """The home's ledger with the activity log a real agent leaves (a confirmed act at block 7 and
    a reverted one at block 22, each with its ``dispatch_included`` line), then two appended final
    lines nothing backs: a ``confirmed`` one for a transaction never signed, and a ``confirmed`` one
    for the reverted transaction. Returns the forged hash and the reverted one."""
    from memory.ledger import DispatchIncluded, DispatchSettled

    activity = ActivityLog(home / ".sail")
    seven, reverted_tx, forged = f"0x{7:064x}", f"0x{22:064x}", "0x" + "ab" * 32
    activity.append(DispatchIncluded(1001, 31337, seven, 7, "0x" + "cd" * 32, 1))  # the fixture's act
    activity.append(DispatchSettled(12001, "dispatch_reverted", reverted_tx, 22, 1, "EXPIRED"))
    activity.append(DispatchIncluded(12001, 31337, reverted_tx, 22, "0x" + "ef" * 32, 0))
    with Ledger(home / ".sail").writer() as w:
        w.append(reverted(12000, 22))
        w.append(dataclasses.replace(confirmed(15000, 19), tx_hash=forged))
        w.append(dataclasses.replace(confirmed(15800, 22), block=23))
    return forged, reverted_tx


def test_a_final_line_the_activity_log_does_not_back_is_shown_as_a_claim_and_hides_nothing(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``confirmed`` line appended for a transaction the agent never signed was given as the last
    confirmed act, listed confirmed with no note and told as a swap; one appended for a swap the
    chain reverted turned its reverted row into a confirmed one. Each is a claim, said so, and the
    reverted row stays."""
    forged, reverted_tx = _forged_home(home)
    _, out, _ = run(capsys, "ledger", "--home", str(home))
    rows = out.splitlines()[1:]
    (forged_row,) = [r for r in rows if short(forged) in r]
    assert "confirmed" in forged_row and forged_row.endswith("not backed by the activity log: a claim")
    both = [r for r in rows if short(reverted_tx) in r]
    assert len(both) == 2, both  # the revert and the claim beside it, each as the ledger holds it
    assert "reverted" in both[0] and "(reverted: EXPIRED)" in both[0] and "claim" not in both[0]
    assert "confirmed" in both[1] and both[1].endswith("not backed by the activity log: a claim")
    (seven,) = [r for r in rows if short(f"0x{7:064x}") in r]
    assert "claim" not in seven  # backed by its dispatch_included line
    _, out, _ = run(capsys, "status", "--home", str(home), "--json")
    last = json.loads(out)["lastConfirmed"]
    assert (last["txHash"], last["claim"]) == (reverted_tx, True)  # the newest by time, said a claim
    _, out, _ = run(capsys, "status", "--home", str(home))
    (line,) = [ln for ln in out.splitlines() if ln.startswith("last confirmed act:")]
    assert "not backed by the activity log: a claim" in line
    _, out, _ = run(capsys, "journal", "--home", str(home))
    told = [ln for ln in out.splitlines() if short(forged) in ln]
    assert told and all("not backed by the activity log" in ln for ln in told), told
    assert not any(ln.lstrip().startswith("Swapped") for ln in told)
    import memory

    (home / "store").mkdir()
    with memory.MemoryStore(home / "store" / "history.db") as store:
        found = [p.as_json() for p in memory.check_store(store, sail_dirs=[home / ".sail"])]
    claims = [(p["kind"], p["line"], p["txHash"], p["block"], p["repairable"]) for p in found]
    assert claims == [
        ("ledger_claim", 5, forged, 19, False),
        ("ledger_claim", 6, reverted_tx, 23, False),
    ]  # the backed act (line 1) and the revert (line 4) are no finding


def short(tx_hash: str) -> str:
    return f"{tx_hash[:6]}…{tx_hash[-4:]}"
