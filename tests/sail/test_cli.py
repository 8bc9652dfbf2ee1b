"""The ``sail`` command line: listing commands, --json, diagnostics and exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sail
from memory.ledger import Acted, Amount, Ledger, Outcome, Skipped, cadence_reason
from sail._cli import main
from sail._config import SailConfig, load_config, save_config
from tests.conftest import run_python

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
    assert json.loads(out) | {"ledger": ""} == {
        "lastConfirmed": {"tsMs": 1_000_000, "block": 7, "txHash": f"0x{7:064x}"},
        "intervalS": 3600,
        "nextEligibleMs": 4_600_000,
        "openDispatches": [],
        "ledger": "",
    }


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


def test_a_bad_config_key_is_named(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = home / ".sail" / "config.toml"
    path.write_text(path.read_text() + 'colour = "blue"\n')
    status, _, err = run(capsys, "status", "--home", str(home))
    assert status == 1 and err.startswith("sail: error[sail_config_invalid]:") and "'colour'" in err


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


def test_a_damaged_ledger_is_reported_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
    for command in ("init", "tick", "ledger", "why", "status", "demo"):
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
